"""A deterministic leaf order for NumPyro's distributions, installed only when effppl's persistent
compilation cache is on.

NumPyro collects a distribution's pytree fields in a `set`
(`Distribution.gather_pytree_data_fields`), so the order of its leaves follows Python's string
hashing, which changes from process to process (`PYTHONHASHSEED`). A distribution's leaves become
the operands of effppl's site operations, and their order decides the order of equations in the
programs effppl compiles and keys: two processes running the same model build different programs,
and the persistent compilation cache misses (measured: every harness model missed in a second
process with another hash seed; `tests/inference/test_persistent_cache.py` runs its processes
with different seeds). Sorting the field names gives every process the same order.

The order must be the same for every flatten and unflatten in the process (a distribution
flattened under one order and rebuilt under another would silently swap its parameters, and
treedefs outlive any scope: jit caches, site analyses), so it cannot be switched on only while
effppl traces. It is therefore installed when `effppl` is imported, and only if the cache is on
(`EFFPPL_CACHE_DIR` not `off`): with the cache off, NumPyro is left exactly as it is. NumPyro
reads the order only through this one class method (flatten, unflatten, `MaskedDistribution`,
`promote_batch_shape`), so sorting changes no behaviour but the order. Import effppl before
keeping treedefs of NumPyro distributions made in the same process (a sharp bit, in the docs).
"""

from numpyro.distributions import Distribution

from ._cache_env import requested_cache_dir


def _sorted_fields(gather):
    def gather_pytree_data_fields(cls):
        return tuple(sorted(gather(cls)))
    gather_pytree_data_fields.effppl_sorted = True
    return gather_pytree_data_fields


def installed() -> bool:
    """Whether NumPyro's field order is sorted in this process."""
    current = Distribution.__dict__["gather_pytree_data_fields"].__func__
    return getattr(current, "effppl_sorted", False)


def install() -> None:
    """Make `Distribution.gather_pytree_data_fields` return its names sorted (idempotent)."""
    if not installed():
        current = Distribution.__dict__["gather_pytree_data_fields"].__func__
        Distribution.gather_pytree_data_fields = classmethod(  # pyright: ignore[reportAttributeAccessIssue]
            _sorted_fields(current))


def install_if_cached() -> None:
    """`install()` when effppl's persistent compilation cache is on (`EFFPPL_CACHE_DIR`)."""
    if requested_cache_dir()[0] is not None:
        install()
