"""TraceEnum_ELBO with discrete guide sites that are drawn (not enumerated) and sites enumerated
in the model only, or nothing enumerated, against NumPyro's TraceEnum_ELBO on the same model,
guide, params and key: the loss and NumPyro's Rao-Blackwellised gradient (each cost term
weighted by the scores of the drawn sites it depends on). With the model's enumeration inside a
loop (a `lax.scan`, `markov` frames), or a site drawn inside a loop of the guide, the gradient
is `Trace_ELBO`'s score-function surrogate (documented)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import pytest
from numpyro.contrib.funsor import markov as numpyro_markov
from numpyro.distributions import constraints
from numpyro.ops.indexing import Vindex

import effppl
from effppl import distributions as dist
from effppl.infer import TraceEnum_ELBO

Y = np.array([-2.1, -1.5, 0.3, 2.0, 2.5, 1.7, -0.4])
N = len(Y)
RNG = np.random.default_rng(2)
PARAMS = {"g": np.array([0.2, 0.5, 0.3]), "a": np.array(0.35), "m": np.array(0.3),
          "pu": RNG.uniform(0.2, 0.8, N)}


def _enum():  # a fresh dict per site: NumPyro's enum writes into a site's `infer`
    return {"enumerate": "parallel"}


def _value_and_grad(elbo, params, model, guide, *args, seed=0):
    return jax.jit(jax.value_and_grad(
        lambda p: elbo.loss(jax.random.PRNGKey(seed), p, model, guide, *args)))(params)


def _max_differences(pair, params, seed):
    """`(loss, gradient)`: the largest absolute differences to NumPyro's."""
    ours = _value_and_grad(TraceEnum_ELBO(), params, *pair(effppl), Y, seed=seed)
    theirs = _value_and_grad(numpyro.infer.TraceEnum_ELBO(), params, *pair(numpyro), Y,
                             seed=seed)
    grad = max(float(jnp.max(jnp.abs(ours[1][k] - theirs[1][k]))) for k in theirs[1])
    return float(jnp.abs(ours[0] - theirs[0])), grad, ours, theirs


def _compare(pair, params, seeds=(0, 1, 2, 3)):
    for seed in seeds:
        _, _, ours, theirs = _max_differences(pair, params, seed)
        np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-12)
        for name in theirs[1]:
            np.testing.assert_allclose(ours[1][name], theirs[1][name], rtol=1e-10, atol=1e-12)


def _global_drawn(ppl):
    """(a) A global categorical drawn by the guide; a global Bernoulli enumerated in the model,
    its probability depending on the drawn value; a continuous site the drawn one does not
    reach (its terms unweighted by the draw's score)."""
    def model(y):
        c = ppl.sample("c", dist.Categorical(jnp.array([0.3, 0.3, 0.4])))
        b = ppl.sample("b", dist.Bernoulli(jnp.array([0.2, 0.5, 0.9])[c]), infer=_enum())
        with ppl.plate("n", N):
            ppl.sample("y", dist.Normal(2.0 * b - 1.0 + 0.5 * c, 1.0), obs=y)
        s = ppl.sample("s", dist.Normal(0.0, 1.0))
        ppl.sample("o", dist.Normal(s, 1.0), obs=0.4)

    def guide(y):
        g = ppl.param("g", jnp.ones(3) / 3, constraint=constraints.simplex)
        ppl.sample("c", dist.Categorical(g))
        ppl.sample("s", dist.Normal(ppl.param("m", 0.0), 0.5))
    return model, guide


def _plated_drawn(ppl):
    """(b) A drawn site in a plate and a site enumerated in the model in the same plate."""
    def model(y):
        with ppl.plate("n", N):
            u = ppl.sample("u", dist.Bernoulli(0.3))
            x = ppl.sample("x", dist.Bernoulli(jnp.where(u == 1, 0.8, 0.25)), infer=_enum())
            ppl.sample("y", dist.Normal(2.0 * x - 1.0 + u, 1.0), obs=y)

    def guide(y):
        pu = ppl.param("pu", jnp.ones(N) / 2, constraint=constraints.unit_interval)
        with ppl.plate("n", N):
            ppl.sample("u", dist.Bernoulli(pu))
    return model, guide


def _global_drawn_plated_enumerated(ppl):
    """(c) A global drawn site; sites enumerated in the model in a plate; an observed site in
    the plate that the drawn one does not reach."""
    def model(y):
        c = ppl.sample("c", dist.Categorical(jnp.array([0.3, 0.3, 0.4])))
        with ppl.plate("n", N):
            x = ppl.sample("x", dist.Bernoulli(jnp.array([0.2, 0.5, 0.9])[c]), infer=_enum())
            w = ppl.sample("w", dist.Bernoulli(jnp.where(x == 1, 0.7, 0.4)), infer=_enum())
            ppl.sample("y", dist.Normal(2.0 * x - 1.0 + 0.5 * w - 0.3 * c, 1.0), obs=y)
            ppl.sample("v", dist.Normal(0.0, 2.0), obs=y)

    def guide(y):
        g = ppl.param("g", jnp.ones(3) / 3, constraint=constraints.simplex)
        ppl.sample("c", dist.Categorical(g))
    return model, guide


def _two_drawn(ppl):
    """(d) Two drawn sites, only one of which the enumerated group depends on: the other's
    score weights only the terms it feeds."""
    def model(y):
        c = ppl.sample("c", dist.Categorical(jnp.array([0.3, 0.3, 0.4])))
        d = ppl.sample("d", dist.Bernoulli(0.6))
        b = ppl.sample("b", dist.Bernoulli(jnp.array([0.2, 0.5, 0.9])[c]), infer=_enum())
        with ppl.plate("n", N):
            ppl.sample("y", dist.Normal(2.0 * b - 1.0, 1.0), obs=y)
        ppl.sample("z", dist.Normal(2.0 * d - 1.0, 0.5), obs=0.7)

    def guide(y):
        g = ppl.param("g", jnp.ones(3) / 3, constraint=constraints.simplex)
        a = ppl.param("a", jnp.array(0.5), constraint=constraints.unit_interval)
        ppl.sample("c", dist.Categorical(g))
        ppl.sample("d", dist.Bernoulli(a))
    return model, guide


CASES = {"global": (_global_drawn, ("g", "m")), "plate": (_plated_drawn, ("pu",)),
         "global_drawn_plated_enumerated": (_global_drawn_plated_enumerated, ("g",)),
         "two_drawn": (_two_drawn, ("g", "a"))}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_drawn_guide_sites_with_model_enumeration_have_numpyros_gradient(case):
    pair, names = CASES[case]
    _compare(pair, {k: PARAMS[k] for k in names})


def _observed_in_a_scan(ppl, enumerate_model):
    """Observed sites in a plain `lax.scan` (nothing enumerated there), fed by a global drawn
    site, with `enumerate_model` through a global site the model enumerates, beside one observed
    site the drawn one does not reach: NumPyro's gradient (its oracle unrolls the loop)."""
    def model(y):
        c = ppl.sample("c", dist.Categorical(jnp.array([0.3, 0.3, 0.4])))
        if enumerate_model:
            b = ppl.sample("b", dist.Bernoulli(jnp.array([0.2, 0.5, 0.9])[c]), infer=_enum())
            shift = 2.0 * b - 1.0
        else:
            shift = 0.8 * c - 0.5
        if ppl is effppl:
            def step(t, y_t):
                effppl.sample("y", dist.Normal(shift + 0.1 * t, 1.0), obs=y_t)
                return t + 1.0, None

            jax.lax.scan(step, 0.0, y)
        else:
            for t in range(len(y)):
                ppl.sample(f"y_{t}", dist.Normal(shift + 0.1 * t, 1.0), obs=y[t])
        ppl.sample("o", dist.Normal(0.0, 1.0), obs=0.4)

    def guide(y):
        g = ppl.param("g", jnp.ones(3) / 3, constraint=constraints.simplex)
        ppl.sample("c", dist.Categorical(g))
    return model, guide


@pytest.mark.parametrize("enumerate_model", [True, False])
def test_observed_sites_in_a_scan_have_numpyros_gradient(enumerate_model):
    _compare(functools.partial(_observed_in_a_scan, enumerate_model=enumerate_model),
             {"g": PARAMS["g"]}, seeds=(0, 1))


HMM_Y = np.array([0.1, -0.3, 2.2, 1.9, 4.1])


def _hmm(ppl, how):
    """(e) A global drawn site shifting the emissions of an HMM whose states the model
    enumerates: in a plain `lax.scan` (effppl's forward algorithm) or under `markov` (a Python
    loop); an observed site the drawn one does not reach (NumPyro's gradient differs)."""
    trans = jnp.array([[0.8, 0.2], [0.3, 0.7]])

    def model(y):
        c = ppl.sample("c", dist.Categorical(jnp.array([0.3, 0.3, 0.4])))
        ppl.sample("o", dist.Normal(0.0, 1.0), obs=0.4)
        if how == "scan" and ppl is effppl:
            def step(z_prev, y_t):
                z = effppl.sample("z", dist.Categorical(trans[z_prev]), infer=_enum())
                effppl.sample("y", dist.Normal(2.0 * z + 0.5 * c, 1.0), obs=y_t)
                return z, None

            jax.lax.scan(step, 0, y)
            return
        markov = effppl.handlers.markov if ppl is effppl else numpyro_markov
        z = 0
        for t in markov(range(len(y))):
            z = ppl.sample(f"z_{t}", dist.Categorical(Vindex(trans)[z]), infer=_enum())
            ppl.sample(f"y_{t}", dist.Normal(2.0 * z + 0.5 * c, 1.0), obs=y[t])

    def guide(y):
        g = ppl.param("g", jnp.ones(3) / 3, constraint=constraints.simplex)
        ppl.sample("c", dist.Categorical(g))
    return model, guide


@pytest.mark.slow
@pytest.mark.parametrize("how", ["scan", "markov"])
def test_model_enumeration_in_a_loop_keeps_the_plain_score_function_gradient(how):
    """With the model's enumeration inside a loop the gradient stays `Trace_ELBO`'s surrogate,
    `(1 + loss) grad log q(c)` at the guide's draw `c` (an unbiased estimator, not NumPyro's
    Rao-Blackwellised one); the loss is NumPyro's."""
    params = {"g": PARAMS["g"]}
    for seed in (0, 1):
        loss, grad = _value_and_grad(TraceEnum_ELBO(), params, *_hmm(effppl, how), HMM_Y,
                                     seed=seed)
        theirs = _value_and_grad(numpyro.infer.TraceEnum_ELBO(), params,
                                 *_hmm(numpyro, "markov"), HMM_Y, seed=seed)
        np.testing.assert_allclose(loss, theirs[0], rtol=1e-12)
        _, k_guide = jax.random.split(jax.random.PRNGKey(seed))
        c = numpyro.handlers.seed(lambda: numpyro.sample("c", dist.Categorical(params["g"])),
                                  k_guide)()
        score = jax.grad(lambda p: dist.Categorical(p["g"]).log_prob(c))(params)
        np.testing.assert_allclose(grad["g"], (1.0 + loss) * score["g"], rtol=1e-10)


# Nothing enumerated, in the model or the guide: drawn guide sites still get NumPyro's
# Rao-Blackwellised surrogate (each cost term weighted by the scores of the drawn sites it
# depends on), not `Trace_ELBO`'s.


def _global_drawn_no_enumeration(ppl):
    """(a) A global categorical drawn by the guide feeding a continuous latent site of the
    model; observed sites the draw does not reach."""
    def model(y):
        c = ppl.sample("c", dist.Categorical(jnp.array([0.3, 0.3, 0.4])))
        z = ppl.sample("z", dist.Normal(0.5 * c - 0.5, 1.0))
        with ppl.plate("n", N):
            ppl.sample("y", dist.Normal(z, 1.5), obs=y)
        ppl.sample("o", dist.Normal(0.0, 1.0), obs=0.4)

    def guide(y):
        g = ppl.param("g", jnp.ones(3) / 3, constraint=constraints.simplex)
        ppl.sample("c", dist.Categorical(g))
        ppl.sample("z", dist.Normal(ppl.param("m", 0.0), 0.5))
    return model, guide


def _plated_drawn_no_enumeration(ppl):
    """(b) A site drawn in a plate, an observed site in the same plate that it feeds, a global
    site it feeds (its scores summed over the plate) and a global site it does not reach."""
    def model(y):
        s = ppl.sample("s", dist.Normal(0.0, 1.0))
        with ppl.plate("n", N):
            u = ppl.sample("u", dist.Bernoulli(0.3))
            ppl.sample("y", dist.Normal(2.0 * u - 1.0 + s, 1.0), obs=y)
        ppl.sample("t", dist.Normal(0.3 * jnp.sum(u), 1.0), obs=1.0)

    def guide(y):
        pu = ppl.param("pu", jnp.ones(N) / 2, constraint=constraints.unit_interval)
        ppl.sample("s", dist.Normal(ppl.param("m", 0.0), 0.5))
        with ppl.plate("n", N):
            ppl.sample("u", dist.Bernoulli(pu))
    return model, guide


def _two_drawn_no_enumeration(ppl):
    """(c) Two drawn sites: `c` feeds the plate's observations, `d` one observation only, and
    a third observation neither."""
    def model(y):
        c = ppl.sample("c", dist.Categorical(jnp.array([0.3, 0.3, 0.4])))
        d = ppl.sample("d", dist.Bernoulli(0.6))
        with ppl.plate("n", N):
            ppl.sample("y", dist.Normal(0.8 * c - 0.5, 1.0), obs=y)
        ppl.sample("z", dist.Normal(2.0 * d - 1.0, 0.5), obs=0.7)
        ppl.sample("o", dist.Normal(0.0, 1.0), obs=0.4)

    def guide(y):
        g = ppl.param("g", jnp.ones(3) / 3, constraint=constraints.simplex)
        a = ppl.param("a", jnp.array(0.5), constraint=constraints.unit_interval)
        ppl.sample("c", dist.Categorical(g))
        ppl.sample("d", dist.Bernoulli(a))
    return model, guide


NO_ENUMERATION_CASES = {
    "global": (_global_drawn_no_enumeration, ("g", "m")),
    "plate": (_plated_drawn_no_enumeration, ("pu", "m")),
    "two_drawn": (_two_drawn_no_enumeration, ("g", "a"))}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(NO_ENUMERATION_CASES))
def test_drawn_guide_sites_without_enumeration_have_numpyros_gradient(case):
    pair, names = NO_ENUMERATION_CASES[case]
    _compare(pair, {k: PARAMS[k] for k in names})


def _drawn_in_a_scan(ppl, enumerate_model):
    """A site drawn inside a `lax.scan` of the guide (and of the model), beside, with
    `enumerate_model`, a global site the model enumerates (NumPyro's oracle unrolls both
    loops in Python)."""
    def model(y):
        b = 0.0
        if enumerate_model:
            b = ppl.sample("b", dist.Bernoulli(0.4), infer=_enum())
        if ppl is effppl:
            def step(t, y_t):
                u = effppl.sample("u", dist.Bernoulli(0.3))
                effppl.sample("y", dist.Normal(2.0 * u - 1.0 + 0.5 * b, 1.0), obs=y_t)
                return t + 1, None

            jax.lax.scan(step, 0, y)
        else:
            for t in range(len(y)):
                u = ppl.sample(f"u_{t}", dist.Bernoulli(0.3))
                ppl.sample(f"y_{t}", dist.Normal(2.0 * u - 1.0 + 0.5 * b, 1.0), obs=y[t])
        ppl.sample("o", dist.Normal(0.0, 1.0), obs=0.4)

    def guide(y):
        pu = ppl.param("pu", jnp.ones(len(y)) / 2, constraint=constraints.unit_interval)
        if ppl is effppl:
            def step(t, p):
                effppl.sample("u", dist.Bernoulli(p))
                return t + 1, None

            jax.lax.scan(step, 0, pu)
        else:
            for t in range(len(y)):
                ppl.sample(f"u_{t}", dist.Bernoulli(pu[t]))
    return model, guide


@pytest.mark.slow
@pytest.mark.parametrize("enumerate_model", [False, True])
def test_drawn_guide_site_in_a_scan_keeps_the_plain_score_function_gradient(enumerate_model):
    """Provenance is by site, not by iteration: a site drawn inside a loop of the guide keeps
    `Trace_ELBO`'s surrogate, `(1 + loss) grad log q(u)` at the guide's draws (documented); the
    loss is NumPyro's."""
    params = {"pu": PARAMS["pu"]}
    for seed in (0, 1):
        loss, grad = _value_and_grad(TraceEnum_ELBO(), params,
                                     *_drawn_in_a_scan(effppl, enumerate_model), Y, seed=seed)
        numpyro_guide = _drawn_in_a_scan(numpyro, enumerate_model)
        theirs = _value_and_grad(numpyro.infer.TraceEnum_ELBO(), params, *numpyro_guide, Y,
                                 seed=seed)
        np.testing.assert_allclose(loss, theirs[0], rtol=1e-12)
        _, k_guide = jax.random.split(jax.random.PRNGKey(seed))
        guide = numpyro.handlers.substitute(numpyro_guide[1], data=params)
        tr = numpyro.handlers.trace(numpyro.handlers.seed(guide, k_guide)).get_trace(Y)
        u = jnp.stack([tr[f"u_{t}"]["value"] for t in range(N)])
        score = jax.grad(lambda p: jnp.sum(dist.Bernoulli(p["pu"]).log_prob(u)))(params)
        np.testing.assert_allclose(grad["pu"], (1.0 + loss) * score["pu"], rtol=1e-10)
