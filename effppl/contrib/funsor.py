"""NumPyro's `numpyro.contrib.funsor` names for effppl models: effppl enumerates discrete sites
itself (no funsor), so these are effppl's own handlers under NumPyro's names, for NumPyro programs
ported by changing their imports (`from numpyro.contrib.funsor import config_enumerate`).

`config_enumerate`, `enum`, `infer_discrete`, `trace` are `effppl.handlers`'; `log_density`
sums the enumerated sites out, as NumPyro's does; `plate` is `effppl.plate`. Not provided:
`markov` (NumPyro's dimension recycling for Python loops; effppl enumerates in plain `lax.scan`
with a first-order chain), `config_kl`, `infer_config`, `plate_to_enum_plate`, `to_data`,
`to_funsor` (funsor's own)."""

from ..handlers import config_enumerate, enum, infer_discrete, log_density, trace
from ..primitives import plate

__all__ = ["config_enumerate", "enum", "infer_discrete", "log_density", "plate", "trace"]
