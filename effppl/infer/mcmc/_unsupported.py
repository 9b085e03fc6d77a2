"""NumPyro's other MCMC kernels, by name: importing them works (a NumPyro program's imports do
not break), building one raises an error naming what effppl offers instead.

effppl's `MCMC` drives blackjax's HMC family (`NUTS`, `HMC`) with discrete sites summed out by
enumeration. blackjax has no affine-invariant (`AIES`) or slice (`ESS`) ensemble sampler
(Barker's proposal is `BarkerMH`, on blackjax's `barker` kernel; HMC-within-Gibbs with the user's
Gibbs step is `HMCGibbs`, with Gibbs updates of the discrete sites `DiscreteHMCGibbs`, and mixed
HMC `MixedHMC`, energy-conserving subsampling `HMCECS`, sample adaptive MCMC `SA`).
"""

from __future__ import annotations

from ..._errors import EffpplError

__all__ = ["UnsupportedKernelError", "AIES", "ESS"]


class UnsupportedKernelError(EffpplError, NotImplementedError):
    """A NumPyro MCMC kernel effppl does not provide (the message names the alternative)."""


_DISCRETE = ("effppl can also sum discrete latent sites out exactly: mark them "
             "`infer={'enumerate': 'parallel'}` (or wrap the model in "
             "`effppl.infer.config_enumerate`) and run `NUTS`; `Predictive(..., "
             "infer_discrete=True)` or `effppl.infer.infer_discrete` then draws them.")
_GRADIENT = ("effppl's models are differentiable JAX programs, so use `NUTS` (or `HMC`), "
             "whose adaptation tunes the step size and mass matrix.")

_WHY = {
    "AIES": "the affine-invariant ensemble sampler has no blackjax kernel. " + _GRADIENT,
    "ESS": ("NumPyro's ensemble slice sampler (Karamanis & Beutler 2021, a gradient-free "
            "ensemble method; not the elliptical slice sampler) has no blackjax kernel. "
            + _GRADIENT),
}


def _unsupported(name: str) -> type:
    def __init__(self, *args, **kwargs):
        raise UnsupportedKernelError(f"`effppl.infer.{name}` is not available: {_WHY[name]}")

    doc = (f"NumPyro's `{name}`: not available in effppl (building one raises "
           f"`UnsupportedKernelError`). {_WHY[name]}")
    return type(name, (), {"__init__": __init__, "__doc__": doc, "__module__": __name__})


AIES = _unsupported("AIES")
ESS = _unsupported("ESS")
