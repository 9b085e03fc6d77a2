"""Reads of a buffer forwarded to the writes that made them, in a translated jaxpr.

A handler whose state is one packed buffer (so that its parameters have a few leaves whatever
the number of operations it records: `effppl.handlers.trace`) writes each record with a
`dynamic_update_slice` at a constant offset and reads it back after the handled program with a
`slice`. XLA forwards those reads when it compiles the program, but reverse-mode
differentiation of the jaxpr comes first: it turns each `slice` into a `pad` of the whole
buffer and each write into a copy, so a gradient moves every buffer several times per step.
Forwarding the reads in the jaxpr, before anything differentiates it, removes the buffer from
both: a `slice` that reads exactly what one write wrote becomes that write's value, a `slice`
that misses a write reads the buffer from before it, and the writes nobody reads any more are
dead code.
"""

from __future__ import annotations

import jax

from ._compat import Jaxpr, Literal


def forward_reads(jaxpr: Jaxpr) -> Jaxpr:
    """`jaxpr` with each 1-D `slice` of a `dynamic_update_slice` at a constant offset forwarded
    to the written value or to the buffer before the write (top-level equations only). Returns
    `jaxpr` itself when nothing is forwarded; the caller removes the dead writes (DCE)."""
    writes = {}  # buffer after a write -> (buffer before, start, size, written value)
    renamed = {}  # a slice's output -> the written value it is
    eqns, changed = [], False
    for e in jaxpr.eqns:
        invars = [renamed.get(v, v) if not isinstance(v, Literal) else v for v in e.invars]
        if e.primitive is jax.lax.dynamic_update_slice_p:
            write = _constant_write(invars)
            if write is not None:
                writes[e.outvars[0]] = write
        elif (e.primitive is jax.lax.slice_p and not isinstance(invars[0], Literal)
              and invars[0] in writes and _plain_slice(e)):
            start, stop = e.params["start_indices"][0], e.params["limit_indices"][0]
            buffer, out = invars[0], e.outvars[0]
            while buffer in writes:
                before, at, size, value = writes[buffer]
                if (at, at + size) == (start, stop) and value.aval == out.aval:
                    renamed[out] = value
                    break
                if stop > at and start < at + size:
                    break  # overlaps the write without being it: read the buffer
                buffer = before
            if out in renamed:
                changed = True
                continue
            invars[0] = buffer
        if any(a is not b for a, b in zip(invars, e.invars)):
            changed = True
            e = e.replace(invars=invars)
        eqns.append(e)
    if not changed:
        return jaxpr
    return jaxpr.replace(eqns=eqns, outvars=[renamed.get(v, v) if not isinstance(v, Literal)
                                             else v for v in jaxpr.outvars])


def _constant_write(invars):
    """`(buffer, start, size, value)` of a 1-D write at a literal offset, else None."""
    if len(invars) != 3 or not isinstance(invars[2], Literal) or isinstance(invars[1], Literal):
        return None
    buffer, value = invars[0], invars[1]
    if buffer.aval.ndim != 1:
        return None
    n, size = buffer.aval.shape[0], value.aval.shape[0]
    start = min(max(int(invars[2].val), 0), n - size)  # `dynamic_update_slice` clamps
    return buffer, start, size, value


def _plain_slice(e) -> bool:
    strides = e.params["strides"]
    return e.invars[0].aval.ndim == 1 and (strides is None or tuple(strides) == (1,))
