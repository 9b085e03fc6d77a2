"""`collapse`: NumPyro's funsor-based collapsing of conjugate sites, which effppl does not
provide; building it raises an error naming what to write instead."""

from __future__ import annotations

from .._errors import EffpplError

__all__ = ["CollapseError", "collapse"]


class CollapseError(EffpplError, NotImplementedError):
    """`effppl.handlers.collapse` was used (the message names the alternatives)."""


_WHY = ("NumPyro's `collapse` integrates conjugate latent sites out symbolically, with funsor's "
        "lazy algebra; effppl compiles models to plain JAX programs and has no symbolic "
        "conjugacy. Write the marginal distribution yourself (a Beta prior on a Binomial's "
        "`probs`: `dist.BetaBinomial(alpha, beta, total_count)`; on a Bernoulli's: "
        "`dist.BetaBinomial(alpha, beta, 1)`; a Dirichlet on a Categorical's or Multinomial's: "
        "`dist.DirichletMultinomial`; a Gamma on a Poisson's rate: `dist.GammaPoisson`), or, "
        "for a discrete latent site, mark it `infer={'enumerate': 'parallel'}`: enumeration "
        "sums it out exactly.")


def collapse(fn=None, *args, **kwargs):
    """NumPyro's `handlers.collapse`, not available in effppl: calling it (as a handler, a
    decorator or a `with` block) raises `CollapseError` (a `NotImplementedError`).

    NumPyro's `collapse` integrates conjugate latent sites out symbolically (funsor); effppl has
    no symbolic conjugacy. Write the marginal distribution instead (a Beta prior on a
    Binomial's `probs`: `dist.BetaBinomial`; a Dirichlet on a Categorical's or Multinomial's:
    `dist.DirichletMultinomial`; a Gamma on a Poisson's rate: `dist.GammaPoisson`), or mark a
    discrete latent site for enumeration, which sums it out exactly.

    **Raises:** `CollapseError`, always.
    """
    raise CollapseError(f"effppl.handlers.collapse is not available: {_WHY}")
