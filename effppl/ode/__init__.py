"""`effppl.ode`: an adaptive ODE solver whose integration loop is written with effect handlers.

The paper's second case study (§7.1): Diffrax's integration loop, with each of its concerns a
handler (`README.md` beside this file shows the loop). It uses `effppl.effects` only; the PPL
uses it (a failed solve inside a model is a rejected proposal), never the reverse.
"""

from ._concerns import PIDController
from ._loop import RESULTS
from ._solve import ODEInputError, ODETypeError, Solution, solve
from ._tableaus import TABLEAUS, Tableau

__all__ = ["solve", "Solution", "PIDController", "RESULTS", "TABLEAUS", "Tableau",
           "ODEInputError", "ODETypeError"]
