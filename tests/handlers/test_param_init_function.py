"""A param's `init_value` function is called where the `param` statement runs, as in NumPyro:
the Python values it reads then (a loop variable) and the model's values it closes over (an
argument) are those of that moment.

Before: the function was called later, by the handler giving it a key, so every param made in a
loop of `lambda key: ... k ...` took the last `k` (silently wrong initial values), and one
closing over a model argument leaked a tracer."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import numpyro.optim as optim
from numpyro.infer import SVI as NumPyroSVI
from numpyro.infer import Trace_ELBO as NumPyroTrace_ELBO

import effppl
from effppl import handlers
from effppl.infer import SVI, Trace_ELBO


def _model_guide(ppl):
    def model(scale):
        ppl.sample("x", dist.Normal(0.0, 1.0))

    def guide(scale):
        for k in range(3):
            ppl.param(f"p{k}", lambda key: jnp.full(2, float(k)) * scale)
        ppl.param("r", lambda key: jax.random.normal(key, (2,)))
        ppl.sample("x", dist.Normal(0.0, 1.0))

    return model, guide


def test_svi_init_values_equal_numpyros():
    ours = SVI(*_model_guide(effppl), optim.Adam(0.1), Trace_ELBO())
    theirs = NumPyroSVI(*_model_guide(numpyro), optim.Adam(0.1), NumPyroTrace_ELBO())
    scale = jnp.array(3.0)
    a = ours.get_params(ours.init(jax.random.key(0), scale))
    b = theirs.get_params(theirs.init(jax.random.key(0), scale))
    for k in range(3):
        np.testing.assert_allclose(a[f"p{k}"], [3.0 * k] * 2)
        np.testing.assert_allclose(a[f"p{k}"], b[f"p{k}"])
    assert a["r"].shape == (2,) and np.all(np.isfinite(a["r"]))


def test_trace_under_seed_and_jit():
    model, guide = _model_guide(effppl)
    tr = handlers.trace(handlers.seed(guide, 0)).get_trace(jnp.array(2.0))
    np.testing.assert_allclose(tr["p2"]["value"], [4.0, 4.0])

    @jax.jit
    def first(scale):
        return handlers.trace(handlers.seed(guide, 1)).get_trace(scale)["p1"]["value"]

    np.testing.assert_allclose(first(jnp.array(5.0)), [5.0, 5.0])
    np.testing.assert_allclose(first(jnp.array(7.0)), [7.0, 7.0])
