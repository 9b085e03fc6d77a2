"""Names a NumPyro program reaches after `import effppl as numpyro`, with the same objects."""

import types

import numpyro.distributions

import effppl.distributions


def test_distributions_binds_numpyros_submodules():
    # `dist.util.clamp_probs(...)` (NumPyro's capture_recapture example) and `dist.kl`
    submodules = {name for name, value in vars(numpyro.distributions).items()
                  if isinstance(value, types.ModuleType)}
    assert {"util", "kl", "constraints", "transforms"} <= submodules
    assert {name: getattr(effppl.distributions, name, None) for name in submodules} == \
        {name: getattr(numpyro.distributions, name) for name in submodules}
    assert effppl.distributions.util.clamp_probs is numpyro.distributions.util.clamp_probs
