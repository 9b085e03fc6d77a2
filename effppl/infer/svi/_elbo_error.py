"""The ELBOs' error (its own module: the ELBO's helpers raise it too)."""

from ..._errors import EffpplError


class ELBOError(EffpplError, ValueError):
    """Invalid ELBO settings."""
