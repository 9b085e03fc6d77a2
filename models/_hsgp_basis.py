"""Hilbert-space GP bases and spectral densities for the births model (`models/hsgp.py`).

As in NumPyro's `examples/hsgp.py` (after Riutort-Mayol et al. 2023, "Practical Hilbert space
approximate Bayesian Gaussian processes for probabilistic programming", and Solin & Särkkä 2020),
with three numerical changes that leave the values unchanged up to rounding:

- products with `diag(1..M)` are written as broadcasts (same products, no zero terms);
- the square root of the squared-exponential spectral density is taken in log space: the published
  `sqrt(alpha sqrt(2 pi) length exp(-length**2 w**2 / 2))` underflows to 0 in float32 for long
  length scales (length * w > ~13), where the gradient of `sqrt` is then `inf * 0 = nan`;
- the periodic coefficients use `I_j(a) e^{-a}` directly (`models._special.bessel_ive`) instead of
  `exp(a) * ive(j, a) / exp(a)`, which overflows float32 (inf / inf = nan) once `a = length**-2`
  exceeds ~88.7, i.e. for year length scales below ~0.106.
"""

import jax.numpy as jnp

from models._special import bessel_ive


def sqrt_diag_spectral_density_se(alpha, length, L, M):
    """Square root of the squared-exponential spectral density at the `M` square-root eigenvalues
    `w` on `[-L, L]`. As published, the amplitude enters as `alpha` (not `alpha**2`):
    `sqrt(alpha sqrt(2 pi) length exp(-length**2 w**2 / 2))`."""
    sqrt_eigenvalues = jnp.arange(1, 1 + M) * jnp.pi / 2 / L
    log_spd = jnp.log(alpha) + 0.5 * jnp.log(2 * jnp.pi) + jnp.log(length)
    return jnp.exp(0.5 * (log_spd - 0.5 * length**2 * sqrt_eigenvalues**2))


def eigenfunctions_se(x, L, M):
    """The first `M` Laplacian eigenfunctions on `[-L, L]` at `x`: shape `(N, M)`."""
    return jnp.sin((jnp.pi / (2 * L)) * (L + x[:, None]) * jnp.arange(1, M + 1)) / jnp.sqrt(L)


def diag_spectral_density_periodic(alpha, length, M):
    """The first `M` coefficients of the periodic kernel's low-rank approximation:
    `c_j alpha**2 I_j(a) e^{-a}` with `a = length**-2`, `c_0 = 1`, `c_j = 2`."""
    a = length ** (-2)
    c = jnp.where(jnp.arange(M) > 0, 2, 1)
    return c * alpha**2 * bessel_ive(M, a)


def eigenfunctions_periodic(x, w0, M):
    """`(cos(w0 x m), sin(w0 x m))` for `m = 0 .. M-1`: two arrays of shape `(N, M)`."""
    mw0x = w0 * x[:, None] * jnp.arange(M)
    return jnp.cos(mw0x), jnp.sin(mw0x)
