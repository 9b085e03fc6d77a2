"""`cond`/`switch` (paper §4, E-Cond1/E-Cond2).

In place: each branch is translated as a region returning its outputs *and* the updated
parameters of every handler in scope (`lax.switch` prunes the ones passed through unchanged).
When a branch performs a general clause of a handler outside the branch, the continuation is
pushed into every branch instead: each branch runs the rest of the computation up to the
enclosing region's barrier, and the `cond` returns that region's answer.
"""

import jax

from .. import _compat
from .._translate import (
    BARRIER,
    Cont,
    CrossesBarrier,
    Done,
    frame_params,
    register,
    run,
    try_in_place,
    with_params,
)


@register(_compat.cond_p)
def _cond_translate_rule(eqn, ins, H, K, resume, rest):
    index, ops = ins[0], ins[1:]
    branches = eqn.params["branches"]

    def in_place(branch):
        def f(*ops):
            outs, H_out = run(branch.jaxpr, branch.consts, ops, H, (BARRIER,), resume)
            return outs, frame_params(H_out)
        return f

    try:
        outs, params = try_in_place(tuple(b.jaxpr for b in branches) + (resume is None,), H,
                               lambda: jax.lax.switch(index, [in_place(b) for b in branches], *ops))
        return outs, with_params(H, params)
    except CrossesBarrier:
        pass

    frames = []

    def with_rest(branch):
        def f(*ops):
            outs, H_end = run(branch.jaxpr, branch.consts, ops, H, K + (Cont(rest),), resume)
            frames.append(H_end)
            return outs, frame_params(H_end)
        return f

    outs, params = jax.lax.switch(index, [with_rest(b) for b in branches], *ops)
    return Done((outs, with_params(frames[0], params)))
