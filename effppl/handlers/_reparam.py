"""`reparam`: reparametrize sample sites with NumPyro-style reparameterizers."""

from __future__ import annotations

import jax.numpy as jnp

from .._site_fns import ask
from ..primitives import deterministic_op, in_clause, message_contexts, sample_op
from ._handler import Handler, forward


class reparam(Handler):
    """Reparametrize the sites named in `config` (dict name -> reparameterizer, or a function
    of NumPyro's site message returning one or None), as NumPyro's `reparam`: the
    reparameterizer draws auxiliary sites (e.g. `x_decentered`) and the site becomes a
    deterministic site with the value it computes. Works for sites inside plain loops (each
    occurrence draws a row of the auxiliary sites). The auxiliary sites keep the site's `scale`
    and `mask`.

    **Example:** `reparam(model, config={"x": LocScaleReparam(centered=0)})`
    (`effppl.infer.reparam`).
    """

    def __init__(self, fn=None, config=None):
        super().__init__(fn)
        if config is None:
            raise TypeError("effppl.handlers.reparam(fn, config) needs `config`: a dict site "
                            "name -> reparameterizer, or a function of the site's message.")
        self.config = config

    def _strategy(self, name, msg, static):
        if isinstance(self.config, dict):
            return self.config.get(name)
        return ask("effppl.handlers.reparam(fn, config=...)", self.config, "sample", name,
                   static, msg)

    def clauses(self):
        def sample(params, msg, *, resume, name, **static):
            strategy = None if static.get("site_type") == "plate" else \
                self._strategy(name, msg, static)
            if strategy is None:
                return resume(params, forward(msg, name=name, **static))
            keep = lambda m: m._replace(scale=msg.scale, mask=msg.mask)  # noqa: E731
            message_contexts().append(keep)
            try:
                with in_clause():
                    new_fn, value = strategy(name, msg.fn, msg.value)
            finally:
                message_contexts().remove(keep)
            if value is None or new_fn is not None:
                msg = msg._replace(fn=new_fn, value=None if value is None else jnp.asarray(value))
                return resume(params, forward(msg, name=name, **static))
            return resume(params, deterministic_op(
                jnp.asarray(value), name=name,
                cond_indep_stack=static.get("cond_indep_stack", ())))
        return {sample_op: sample}
