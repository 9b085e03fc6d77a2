"""An autoguide's prototype (the model's latent sites and arguments it keeps from its first run),
against NumPyro's autoguides on the same model and params: new model arguments given to
`sample_posterior` (an observed `y=None` that becomes latent, new covariates) do not change the
guide's latent sites, as NumPyro's guides ignore them."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.infer.autoguide as numpyro_autoguide
import optax
import pytest

import effppl
from effppl import distributions as dist
from effppl.infer import SVI, Trace_ELBO, autoguide

X = jnp.array([0.0, 1.0, 2.0])
X_NEW = jnp.array([0.0, 1.0, 2.0, 3.0, 4.0])
Y = jnp.array([0.1, 0.5, -0.2])


def _regression(ppl):
    def model(x, y=None):
        a = ppl.sample("a", dist.Normal(0.0, 1.0))
        s = ppl.sample("s", dist.HalfNormal(1.0))
        ppl.deterministic("d", 2.0 * a + s)
        with ppl.plate("N", x.shape[0]):
            m = ppl.deterministic("m", a * x)
            ppl.sample("y", dist.Normal(m, s), obs=y)
    return model


def _params(name):
    """The same params for effppl's and NumPyro's guide `name` of `_regression`."""
    if name == "AutoNormal":
        params = {"a_auto_loc": 0.3, "a_auto_scale": 0.5, "s_auto_loc": -0.2,
                  "s_auto_scale": 0.4}
    elif name == "AutoDelta":
        params = {"a_auto_loc": 0.3, "s_auto_loc": 0.8}
    else:
        params = {"auto_loc": [0.3, -0.2]}
        if name == "AutoDiagonalNormal":
            params["auto_scale"] = [0.5, 0.4]
        elif name == "AutoMultivariateNormal":
            params["auto_scale_tril"] = [[0.5, 0.0], [0.1, 0.4]]
        elif name == "AutoLowRankMultivariateNormal":
            params.update(auto_scale=[0.5, 0.4], auto_cov_factor=[[0.2], [0.1]])
    return {k: jnp.asarray(v, jnp.float64) for k, v in params.items()}


def _fitted(name):
    """`(ours, theirs)`: guide `name` of effppl and of NumPyro, set up by `SVI.init` at `(X,
    Y)`."""
    out = []
    for ppl, module, svi, loss in ((effppl, autoguide, SVI, Trace_ELBO),
                                   (numpyro, numpyro_autoguide, numpyro.infer.SVI,
                                    numpyro.infer.Trace_ELBO)):
        model = _regression(ppl)
        guide = getattr(module, name)(model)
        svi(model, guide, optax.adam(0.01), loss()).init(jax.random.PRNGKey(0), X, Y)
        out.append(guide)
    return out


def _assert_same(ours, theirs, rtol=1e-6):
    assert set(ours) == set(theirs)
    for k in theirs:
        np.testing.assert_allclose(ours[k], theirs[k], rtol=rtol, atol=1e-12, err_msg=k)


GUIDES = ["AutoNormal", "AutoDelta", "AutoDiagonalNormal", "AutoMultivariateNormal",
          "AutoLowRankMultivariateNormal", "AutoLaplaceApproximation"]
NEW_ARGS = [((X,), {"y": None}), ((X_NEW,), {})]


def _some_slow(names, fast):
    """`names` as pytest params, those not in `fast` marked slow (each compiles its own SVI)."""
    return [n if n in fast else pytest.param(n, marks=pytest.mark.slow) for n in names]


@pytest.mark.slow
@pytest.mark.parametrize("new_args, new_kwargs", NEW_ARGS, ids=["y=None", "new x"])
@pytest.mark.parametrize("name", _some_slow([g for g in GUIDES if g != "AutoDelta"],
                                            ("AutoNormal", "AutoDiagonalNormal",
                                             "AutoLaplaceApproximation")))
def test_sample_posterior_ignores_new_model_arguments_as_numpyros(name, new_args, new_kwargs):
    """NumPyro's guides draw the latent sites of their prototype and give the deterministic
    sites at the prototype's arguments: the draws at new arguments are those at none."""
    ours, theirs = _fitted(name)
    params = _params(name)
    key = jax.random.PRNGKey(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (a singular Hessian would warn; none here)
        for guide in (ours, theirs):
            new = guide.sample_posterior(key, params, *new_args, sample_shape=(4,),
                                         **new_kwargs)
            _assert_same(new, guide.sample_posterior(key, params, sample_shape=(4,)),
                         rtol=1e-12)
            assert set(new) == {"a", "s", "d", "m"}  # `y` stays observed
            assert new["m"].shape == (4, 3)  # the prototype's `x`
            np.testing.assert_allclose(new["m"], new["a"][:, None] * X, rtol=1e-12)
        if name == "AutoLaplaceApproximation":  # the same draws as NumPyro's at the same key
            _assert_same(ours.sample_posterior(key, params, *new_args, sample_shape=(4,),
                                               **new_kwargs),
                         theirs.sample_posterior(key, params, *new_args, sample_shape=(4,),
                                                 **new_kwargs))


@pytest.mark.parametrize("new_args, new_kwargs", NEW_ARGS, ids=["y=None", "new x"])
def test_autodelta_sample_posterior_gives_deterministic_sites_at_new_arguments(new_args,
                                                                                 new_kwargs):
    """NumPyro's AutoDelta runs the model at the new arguments for its deterministic sites."""
    ours, theirs = _fitted("AutoDelta")
    params = _params("AutoDelta")
    key = jax.random.PRNGKey(1)
    got = ours.sample_posterior(key, params, *new_args, sample_shape=(2,), **new_kwargs)
    _assert_same(got, theirs.sample_posterior(key, params, *new_args, sample_shape=(2,),
                                              **new_kwargs))
    assert got["m"].shape == (2, new_args[0].shape[0])


@pytest.mark.parametrize("name", _some_slow(GUIDES, ("AutoNormal", "AutoLaplaceApproximation")))
def test_median_and_quantiles_after_new_arguments_are_the_prototypes(name):
    ours, theirs = _fitted(name)
    params = _params(name)
    ours.sample_posterior(jax.random.PRNGKey(1), params, X_NEW)
    _assert_same(ours.median(params), theirs.median(params))
    if name != "AutoDelta":
        _assert_same(ours.quantiles(params, [0.2, 0.7]), theirs.quantiles(params, [0.2, 0.7]))


def _guide(module, name, model):
    if name == "AutoDelta":  # (its default init_to_median draws differently from NumPyro's)
        init = (effppl.infer if module is autoguide else numpyro.infer).init_to_uniform
        return module.AutoDelta(model, init_loc_fn=init)
    return getattr(module, name)(model)


@pytest.mark.parametrize("name", _some_slow(GUIDES, ("AutoNormal", "AutoDelta",
                                                    "AutoDiagonalNormal",
                                                    "AutoLaplaceApproximation")))
def test_one_run_of_the_guide_sets_it_up_as_numpyros(name):
    """NumPyro's guide sets up its prototype when it first runs: its params from
    `trace(seed(guide, key))` (no `SVI.init`) are enough for `median` and `quantiles`."""
    out = []
    for ppl, module, handlers in ((effppl, autoguide, effppl.handlers),
                                  (numpyro, numpyro_autoguide, numpyro.handlers)):
        guide = _guide(module, name, _regression(ppl))
        tr = handlers.trace(handlers.seed(guide, jax.random.PRNGKey(2))).get_trace(X, Y)
        out.append((guide, {n: s["value"] for n, s in tr.items() if s["type"] == "param"}))
    (ours, params), (theirs, their_params) = out
    _assert_same(params, their_params, rtol=1e-12)  # the same initial params, too
    _assert_same(ours.median(params), theirs.median(params))
    if name in ("AutoDelta", "AutoLaplaceApproximation"):
        return  # (no quantiles; the Hessian at a random point need not be positive definite)
    _assert_same(ours.quantiles(params, [0.2, 0.7]), theirs.quantiles(params, [0.2, 0.7]))


def test_a_first_run_at_computed_arguments_does_not_set_the_guide_up():
    """Only arguments the outermost call was given are kept (a value computed while tracing
    has no concrete value to keep)."""
    guide = autoguide.AutoNormal(_regression(effppl))
    handlers = effppl.handlers
    handlers.trace(handlers.seed(lambda x, y: guide(2.0 * x, y), 0)).get_trace(X, Y)
    with pytest.raises(autoguide.AutoGuideError, match="run it once first"):
        guide.median(_params("AutoNormal"))
    handlers.trace(handlers.seed(lambda x, y: guide(x, y), 0)).get_trace(X, Y)
    np.testing.assert_allclose(guide.median(_params("AutoNormal"))["m"], 0.3 * X, rtol=1e-6)


def _plated(ppl):
    def model(y):
        tau = ppl.sample("tau", dist.HalfNormal(1.0))
        with ppl.plate("J", 4):
            theta = ppl.sample("theta", dist.Normal(0.0, tau))
        with ppl.plate("N", y.shape[0]):
            ppl.sample("y", dist.Normal(theta[jnp.arange(y.shape[0]) % 4], 1.0), obs=y)
    return model


@pytest.mark.slow
@pytest.mark.parametrize("name", _some_slow(GUIDES, ("AutoNormal", "AutoDiagonalNormal")))
def test_svi_init_params_and_first_steps_equal_numpyros_at_the_same_key(name):
    """With `init_to_uniform` (the autoguides' default; NumPyro's too), SVI.init draws NumPyro's
    initial params at the same key, and the next steps draw NumPyro's particles: equal losses."""
    y = jnp.linspace(-1.0, 2.0, 8)
    runs = []
    for ppl, module, svi_cls, loss in ((effppl, autoguide, SVI, Trace_ELBO),
                                       (numpyro, numpyro_autoguide, numpyro.infer.SVI,
                                        numpyro.infer.Trace_ELBO)):
        model = _plated(ppl)
        svi = svi_cls(model, _guide(module, name, model), optax.adam(0.05), loss())
        state = svi.init(jax.random.PRNGKey(3), y)
        params = svi.get_params(state)
        losses = []
        for _ in range(3):
            state, value = svi.update(state, y)
            losses.append(value)
        runs.append((params, jnp.stack(losses), svi.get_params(state)))
    (params, losses, after), (their_params, their_losses, their_after) = runs
    _assert_same(params, their_params, rtol=1e-10)
    np.testing.assert_allclose(losses, their_losses, rtol=1e-8)
    _assert_same(after, their_after, rtol=1e-6)
