"""`effppl.contrib.control_flow.scan`'s carry, against NumPyro's `scan` on the same model (float64).

NumPyro 0.22's `scan` runs `lax.scan` on the model's own values (`scan_wrapper`: no first step
run apart), so its carry is promoted as `lax.scan` promotes it: a weakly typed `init` leaf (a
Python scalar, or `jnp.asarray` of one) takes the body's dtype; a strongly typed one, or a
shape or structure that changes, is a `TypeError`. effppl traces a model's arguments (and the
arguments of a `with` block's scan), which makes them strongly typed; `scan` gives them back
the weak type of the value they stand for, so the same programs run, with the same values and
log density."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as nd
import pytest
from numpyro import handlers as nh
from numpyro.contrib.control_flow import scan as np_scan
from numpyro.infer.util import log_density as np_log_density

import effppl
from effppl import distributions as dist
from effppl import handlers
from effppl.contrib.control_flow import scan

Y = [0.1, -0.4, 0.7, 1.2]
X = [0.3, -0.2, 0.5, 0.9]  # given values of the latent site `x` (arrays made in the tests, in
# float64: NumPyro's `scan` indexes them with a tracer)


def _close(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12, atol=1e-12)


def _walk(ppl, dist_, scan_fn, f32=False, fixed_init=None):
    """A random walk observed with noise; its carry `s` is the running sum of the draws (a
    float carry from an int `init`), or that sum in float32 (`f32`)."""
    def model(init=None, y=None):
        init = fixed_init if init is None else init

        def step(c, yt):
            x = ppl.sample("x", dist_.Normal(c, 1.0))
            ppl.sample("y", dist_.Normal(x, 0.5), obs=yt)
            s = ppl.deterministic("s", c + x)
            return (s.astype(jnp.float32) if f32 else s), x
        return scan_fn(step, init, y)
    return model


INITS = {"int": lambda: 0, "float": lambda: 0.0, "weak int array": lambda: jnp.asarray(0),
         "weak float array": lambda: jnp.asarray(0.0)}


def _summary(carry, tr):
    return (jnp.result_type(carry), {n: (s["type"], jnp.shape(s["value"]), jnp.result_type(
        s["value"])) for n, s in tr.items()})


@pytest.mark.slow
@pytest.mark.parametrize("f32", [False, True], ids=["same dtype", "float32 body"])
@pytest.mark.parametrize("init", list(INITS), ids=list(INITS))
@pytest.mark.parametrize("how", ["literal", "argument", "blocks"])
def test_a_weakly_typed_init_is_promoted_as_numpyro(how, init, f32):
    init, x, y = INITS[init](), jnp.asarray(X), jnp.asarray(Y)
    mine = _walk(effppl, dist, scan, f32, fixed_init=init if how == "literal" else None)
    theirs = _walk(numpyro, nd, np_scan, f32, fixed_init=init if how == "literal" else None)
    args = (None, y) if how == "literal" else (init, y)
    given = {"x": x}

    their_model = nh.condition(theirs, data=given)
    with nh.seed(rng_seed=0), nh.trace() as their_tr:
        their_carry, their_xs = their_model(*args)
    if how == "blocks":
        with handlers.seed(rng_seed=0), handlers.trace() as my_tr, handlers.condition(data=given):
            my_carry, my_xs = mine(*args)
    else:
        my_tr = handlers.trace(handlers.seed(handlers.condition(mine, data=given), 0)
                               ).get_trace(*args)
        my_carry, my_xs = handlers.seed(handlers.condition(mine, data=given), 0)(*args)

    assert _summary(my_carry, my_tr) == _summary(their_carry, their_tr)
    assert set(my_tr) == set(their_tr) == {"x", "y", "s"}
    for name in my_tr:
        _close(my_tr[name]["value"], their_tr[name]["value"])
    _close(my_carry, their_carry)
    _close(my_xs, their_xs)
    if not f32:
        _close(my_tr["s"]["value"], np.cumsum(X))

    ld, _ = effppl.log_density(mine, args, {}, given)
    their_ld, _ = np_log_density(theirs, args, {}, given)
    _close(ld, their_ld)


@pytest.mark.parametrize("how", ["literal", "argument", "blocks"])
def test_draws_are_stacked_and_carried_from_a_python_int(how):
    def model(init, y):  # `length` with xs None: the walk unobserved
        init = 0 if how == "literal" else init

        def step(c, _):
            x = effppl.sample("x", dist.Normal(c, 1.0))
            return c + x, x
        return scan(step, init, None, length=4)

    if how == "blocks":
        with handlers.seed(rng_seed=1), handlers.trace() as tr:
            carry, xs = model(0, None)
    else:
        tr = handlers.trace(handlers.seed(model, 1)).get_trace(0, None)
        carry, xs = handlers.seed(model, 1)(0, None)
    assert tr["x"]["value"].shape == (4,) and tr["x"]["value"].dtype == jnp.float64
    assert carry.dtype == jnp.float64 and carry.shape == ()
    _close(xs, tr["x"]["value"])
    _close(carry, np.sum(np.asarray(xs)))


def test_a_none_leaf_of_the_carry_stays_none_as_numpyro():
    def walk(ppl, dist_, scan_fn):
        def model():
            def step(c, _):
                total, nothing = c
                x = ppl.sample("x", dist_.Normal(0.0, 1.0))
                return (total + x, nothing), x
            return scan_fn(step, (0, None), None, length=3)
        return model

    given = {"x": jnp.asarray(X[:3])}
    (carry, none), xs = handlers.condition(walk(effppl, dist, scan), data=given)()
    with nh.seed(rng_seed=0):
        (their_carry, their_none), their_xs = nh.condition(
            walk(numpyro, nd, np_scan), data=given)()
    assert none is None and their_none is None
    assert carry.dtype == their_carry.dtype == jnp.float64
    _close(carry, their_carry)
    _close(xs, their_xs)


def _bad(ppl, dist_, scan_fn, init, grow):
    def model():
        def step(c, _):
            x = ppl.sample("x", dist_.Normal(0.0, 1.0))
            return (c + jnp.zeros(3) if grow else c + x), x
        return scan_fn(step, init, None, length=3)
    return model


@pytest.mark.parametrize("case", ["shape", "strong dtype"])
@pytest.mark.parametrize("how", ["wrapped", "blocks"])
def test_a_carry_that_changes_after_promotion_raises_as_numpyro(case, how):
    init, grow = (0.0, True) if case == "shape" else (jnp.float32(0.0), False)
    what = "shapes do not match" if case == "shape" else "dtypes do not match"
    with pytest.raises(TypeError, match=what):
        with nh.seed(rng_seed=0):
            _bad(numpyro, nd, np_scan, init, grow)()
    model = _bad(effppl, dist, scan, init, grow)
    with pytest.raises(TypeError, match=r"(?s)effppl.contrib.control_flow.scan\(step, .*"
                                        r"The input carry c has type .*" + what):
        if how == "blocks":
            with handlers.seed(rng_seed=0), handlers.trace():
                model()
        else:
            handlers.trace(handlers.seed(model, 0)).get_trace()


def test_a_model_argument_that_is_strongly_typed_is_not_promoted():
    # a float32 array argument: strongly typed for NumPyro too, so the float64 body raises
    model = _walk(effppl, dist, scan)
    with pytest.raises(TypeError, match="dtypes do not match"):
        with nh.seed(rng_seed=0):
            _walk(numpyro, nd, np_scan)(jnp.float32(0.0), jnp.asarray(Y))
    with pytest.raises(TypeError, match="dtypes do not match"):
        handlers.seed(model, 0)(jnp.float32(0.0), jnp.asarray(Y))


def test_mcmc_runs_a_model_whose_carry_is_promoted():
    from effppl.infer import MCMC, NUTS
    mcmc = MCMC(NUTS(_walk(effppl, dist, scan)), num_warmup=50, num_samples=50,
                progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), 0, jnp.asarray(Y))
    assert mcmc.get_samples()["x"].shape == (50, 4)
