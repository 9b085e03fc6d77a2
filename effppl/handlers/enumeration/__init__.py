"""Discrete enumeration: sites marked for enumeration summed out exactly (NumPyro's and Pyro's
parallel enumeration), also inside a plain `lax.scan`.

The package is named `enumeration`, not `enum`, so that `effppl.handlers.enum` stays the handler.

- `_enum.py`: `config_enumerate` and `enum` (each marked site's support in a fresh dimension).
- `_contract.py`: the log joint of an enumerated trace by tensor variable elimination (funsor).
- `_forward_algorithm.py`: a scan holding enumerated sites rewritten to carry the forward message.
- `_plated_chains.py`: enumerated sites in plates inside such a scan (independent chains).
- `_recursions.py`: the forward and backward passes (FFBS, Viterbi) over a chain's tables.
- `_infer_discrete.py`: `infer_discrete`, drawing the enumerated sites given the rest.
- `_markov.py`: `markov`, enumeration dims recycled along a Python loop.
"""

from ._enum import config_enumerate, enum
from ._infer_discrete import InferDiscreteError, infer_discrete
from ._markov import markov

__all__ = ["config_enumerate", "enum", "infer_discrete", "InferDiscreteError", "markov"]
