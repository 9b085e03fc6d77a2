"""Calls (`jit`, `closed_call`, `call`, `remat`) are inlined (E-Call1/E-Call2); effects inside
`custom_jvp`/`custom_vjp` functions are not supported."""

from .. import _compat
from .._errors import UnsupportedHandlerError
from .._translate import inline, register, run


def _inline_rule(jaxpr_param):
    def rule(eqn, ins, H, K, resume, rest):
        sub = eqn.params[jaxpr_param]
        jaxpr, consts = (sub.jaxpr, sub.consts) if hasattr(sub, "consts") else (sub, ())

        def run_call(H, K):
            return run(jaxpr, consts, ins, H, K, resume)

        return inline(run_call, H, K, rest, region=jaxpr)
    return rule


register(_compat.jit_p)(_inline_rule("jaxpr"))
register(_compat.closed_call_p, _compat.call_p)(_inline_rule("call_jaxpr"))
register(_compat.remat_p)(_inline_rule("jaxpr"))


@register(_compat.custom_jvp_call_p, _compat.custom_vjp_call_p)
def _custom_derivative_translate_rule(eqn, ins, H, K, resume, rest):
    ops = sorted(e.op.name for e in eqn.effects if hasattr(e, "op"))
    raise UnsupportedHandlerError(
        f"Effect operations ({', '.join(ops) or 'a handler'}) are used inside a function with a "
        f"custom derivative (`{eqn.primitive}`, traced at "
        f"{_compat.summarize_source(eqn.source_info)}); perform them outside the "
        f"`jax.custom_jvp`/`jax.custom_vjp` function.")
