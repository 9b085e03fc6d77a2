"""`scope`: prefix the names of sites (and of the plates around them), as NumPyro's `scope`."""

from __future__ import annotations

from numpyro.primitives import CondIndepStackFrame

from ..primitives import deterministic_op, sample_op
from ._handler import Handler, forward


class scope(Handler):
    """Rename every site `name` to `f"{prefix}{divider}{name}"`, and the plates in its
    `cond_indep_stack` likewise, so a model can be reused twice in one program. Site types in
    `hide_types` (`"sample"`, `"deterministic"`, `"plate"`) keep their names. Names are static:
    the renaming costs nothing at run time.

    **Example:** `with scope(prefix="a"): model()` gives sites `a/x`, ... (NumPyro's `scope`).
    """

    def __init__(self, fn=None, prefix="", divider="/", *, hide_types=None):
        super().__init__(fn)
        self.prefix, self.divider = prefix, divider
        self.hide_types = tuple(hide_types or ())

    def _renamed(self, kind, name, static):
        if kind not in self.hide_types:
            name = f"{self.prefix}{self.divider}{name}"
        frames = static.get("cond_indep_stack", ())
        if frames and "plate" not in self.hide_types:
            static = dict(static, cond_indep_stack=tuple(
                CondIndepStackFrame(f"{self.prefix}{self.divider}{f.name}", f.dim, f.size)
                for f in frames))
        return dict(static, name=name)

    def clauses(self):
        def sample(params, msg, *, resume, name, **static):
            kind = static.get("site_type", "sample")
            return resume(params, forward(msg, **self._renamed(kind, name, static)))

        def deterministic(params, value, *, resume, name, **static):
            return resume(params, deterministic_op(
                value, **self._renamed("deterministic", name, static)))
        return {sample_op: sample, deterministic_op: deterministic}
