"""`effppl.diagnostics`: NumPyro's MCMC diagnostics, re-exported: they act on arrays of draws,
not on models."""

from numpyro.diagnostics import (
    autocorrelation,
    autocovariance,
    effective_sample_size,
    gelman_rubin,
    hpdi,
    print_summary,
    split_gelman_rubin,
    summary,
)

__all__ = ["autocorrelation", "autocovariance", "effective_sample_size", "gelman_rubin", "hpdi",
           "print_summary", "split_gelman_rubin", "summary"]
