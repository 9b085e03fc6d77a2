"""Names a NumPyro program reaches after `import effppl as numpyro`, with the same objects."""

import types

import numpyro.distributions
import pytest

import effppl.distributions


def test_distributions_binds_numpyros_submodules():
    # `dist.util.clamp_probs(...)` (NumPyro's capture_recapture example) and `dist.kl`
    submodules = {name for name, value in vars(numpyro.distributions).items()
                  if isinstance(value, types.ModuleType)}
    assert {"util", "kl", "constraints", "transforms"} <= submodules
    assert {name: getattr(effppl.distributions, name, None) for name in submodules} == \
        {name: getattr(numpyro.distributions, name) for name in submodules}
    assert effppl.distributions.util.clamp_probs is numpyro.distributions.util.clamp_probs


@pytest.mark.slow
def test_contrib_funsor_config_enumerate_marks_sites_as_numpyros_does():
    # NumPyro's `from numpyro.contrib.funsor import config_enumerate` after the import swap: the
    # TraceEnum_ELBO loss of a mixture with an unmarked discrete site equals NumPyro's.
    import jax
    import jax.numpy as jnp
    import numpyro
    import optax
    from numpyro.contrib.funsor import config_enumerate as numpyro_config_enumerate
    from numpyro.infer import SVI as NumPyroSVI
    from numpyro.infer import TraceEnum_ELBO as NumPyroTraceEnum

    import effppl
    from effppl.contrib.funsor import config_enumerate
    from effppl.infer import SVI, TraceEnum_ELBO

    dist = effppl.distributions

    def make(ppl, enumerate_):
        @enumerate_
        def model(y):
            p = ppl.sample("p", dist.Beta(2.0, 2.0))
            with ppl.plate("data", y.shape[0]):
                z = ppl.sample("z", dist.Bernoulli(p))
                ppl.sample("y", dist.Normal(z * 2.0, 1.0), obs=y)

        def guide(y):
            a = ppl.param("a", 1.5, constraint=dist.constraints.positive)
            ppl.sample("p", dist.Beta(a, 2.0))
        return model, guide

    y = jnp.array([0.1, 2.3, 1.9, -0.4])
    losses = []
    for ppl, enumerate_, svi_cls, elbo in ((effppl, config_enumerate, SVI, TraceEnum_ELBO),
                                           (numpyro, numpyro_config_enumerate, NumPyroSVI,
                                            NumPyroTraceEnum)):
        svi = svi_cls(*make(ppl, enumerate_), optax.adam(0.1), elbo(num_particles=2000))
        state = svi.init(jax.random.key(0), y)
        losses.append(float(svi.evaluate(state, y)))
    # the guide's Beta draw is the only randomness: 2,000 particles, a Monte Carlo tolerance (the
    # streams happen to agree today: 6.5808 both)
    assert abs(losses[0] - losses[1]) < 0.02 * abs(losses[1]), losses
