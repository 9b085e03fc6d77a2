"""A deterministic leaf order for numpyro's distributions, so compiled programs are the same in
every process.

numpyro collects a distribution's pytree fields in a `set`
(`Distribution.gather_pytree_data_fields`), so the order of its leaves follows Python's string
hashing, which changes from process to process (`PYTHONHASHSEED`). A distribution's leaves become
the operands of effppl's site operations, and their order then decides the order of equations in
the programs XLA compiles: two processes running the same model built different programs, and the
persistent compilation cache (`effppl.infer._compile._persistent`) missed. Sorting the field names
gives every process the same order.

This is process-wide, and must be: a distribution flattened under one order and rebuilt under
another would silently swap its parameters, so flatten and unflatten must always agree. numpyro
reads the order only through this one class method (flatten, unflatten, `MaskedDistribution`,
`promote_batch_shape`), so sorting it changes no behaviour but the order.
"""

from numpyro.distributions import Distribution


def _sorted_fields(gather):
    def gather_pytree_data_fields(cls):
        return tuple(sorted(gather(cls)))
    gather_pytree_data_fields.effppl_sorted = True
    return gather_pytree_data_fields


def install() -> None:
    """Make `Distribution.gather_pytree_data_fields` return its names sorted (idempotent)."""
    current = Distribution.__dict__["gather_pytree_data_fields"].__func__
    if not getattr(current, "effppl_sorted", False):
        Distribution.gather_pytree_data_fields = classmethod(_sorted_fields(current))
