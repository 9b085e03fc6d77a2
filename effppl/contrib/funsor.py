"""NumPyro's `numpyro.contrib.funsor` names for effppl models: effppl enumerates discrete sites
itself (no funsor), so these are effppl's own handlers under NumPyro's names, for NumPyro programs
ported by changing their imports (`from numpyro.contrib.funsor import config_enumerate, markov`).

`config_enumerate`, `enum`, `infer_config`, `infer_discrete`, `markov`, `trace` are
`effppl.handlers`'; `log_density` sums the enumerated sites out, as NumPyro's does; `plate` is
`effppl.plate`.
`markov` recycles enumeration dims along a Python loop (`for t in markov(range(T)):`) as
NumPyro's does; a plain `lax.scan` needs no `markov` (effppl derives its forward algorithm). Not
provided: `config_kl`, `plate_to_enum_plate`, `to_data`, `to_funsor` (funsor's own)."""

from ..handlers import (
    config_enumerate,
    enum,
    infer_config,
    infer_discrete,
    log_density,
    markov,
    plate,
    trace,
)

__all__ = ["config_enumerate", "enum", "infer_config", "infer_discrete", "log_density", "markov",
           "plate", "trace"]
