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

import bisect
from typing import Any, NamedTuple

import jax

from ._compat import Jaxpr, Literal


def forward_reads(jaxpr: Jaxpr) -> Jaxpr:
    """`jaxpr` with each 1-D `slice` of a `dynamic_update_slice` at a constant offset forwarded
    to the written value or to the buffer before the writes (top-level equations only). Returns
    `jaxpr` itself when nothing is forwarded; the caller removes the dead writes (DCE). Linear
    in the number of equations (a record of n sites: n writes, n reads)."""
    if not any(e.primitive is jax.lax.dynamic_update_slice_p for e in jaxpr.eqns):
        return jaxpr  # no write to forward (most programs: one pass, no copies)
    versions = {}  # a buffer written at constant offsets -> (its chain of writes, write index)
    renamed = {}  # a slice's output -> the written value it is
    eqns, changed = [], False
    for e in jaxpr.eqns:
        invars = [renamed.get(v, v) if not isinstance(v, Literal) else v for v in e.invars]
        if e.primitive is jax.lax.dynamic_update_slice_p:
            write = _constant_write(invars)
            if write is not None:
                buffer, start, size, value = write
                chain, k = versions.get(buffer, (None, None))
                if chain is None or k != len(chain.writes) - 1:  # a first write, or a fork
                    chain = _Chain(buffer)
                versions[e.outvars[0]] = (chain, chain.add(start, start + size, value,
                                                           e.outvars[0]))
        elif (e.primitive is jax.lax.slice_p and not isinstance(invars[0], Literal)
              and invars[0] in versions and _plain_slice(e)):
            chain, k = versions[invars[0]]
            read = chain.read(k, e.params["start_indices"][0], e.params["limit_indices"][0],
                              e.outvars[0].aval)
            if isinstance(read, _Written):
                renamed[e.outvars[0]] = read.value
                changed = True
                continue
            invars[0] = read
        if any(a is not b for a, b in zip(invars, e.invars)):
            changed = True
            e = e.replace(invars=invars)
        eqns.append(e)
    if not changed:
        return jaxpr
    return jaxpr.replace(eqns=eqns, outvars=[renamed.get(v, v) if not isinstance(v, Literal)
                                             else v for v in jaxpr.outvars])


class _Written(NamedTuple):
    start: int
    stop: int
    value: Any  # the written value
    buffer: Any  # the buffer after the write


class _Chain:
    """The writes at constant offsets into one buffer, in order (write `k` makes version `k`),
    indexed by range: while every two written ranges are equal or disjoint (`regular`: a
    `trace` record), a read finds its write by lookup, not by walking back through the
    chain."""

    def __init__(self, base):
        self.base = base  # the buffer before the first write
        self.writes: list[_Written] = []
        self.exact: dict = {}  # (start, stop) -> indices of the writes of exactly that range
        self.spans: list = []  # the distinct written ranges, sorted (disjoint while regular)
        self.regular = True

    def add(self, start, stop, value, buffer) -> int:
        k = len(self.writes)
        self.writes.append(_Written(start, stop, value, buffer))
        if (start, stop) in self.exact:
            self.exact[(start, stop)].append(k)
            return k
        if self._overlapping(start, stop):
            self.regular = False
        bisect.insort(self.spans, (start, stop))
        self.exact[(start, stop)] = [k]
        return k

    def read(self, k, start, stop, aval):
        """What reading `[start, stop)` of version `k` is: a `_Written` whose value it is, or
        the buffer to read it from instead."""
        if not self.regular:
            return self._walk(k, start, stop, aval)
        written = self.exact.get((start, stop), ())
        i = bisect.bisect_right(written, k) - 1
        if i >= 0:  # no later write (up to version k) overlaps it: the ranges are regular
            w = self.writes[written[i]]
            return w if w.value.aval == aval else w.buffer
        if any(self.exact[span][0] <= k for span in self._overlapping(start, stop)):
            return self.writes[k].buffer  # reads parts of writes: the buffer it reads
        return self.base

    def _overlapping(self, start, stop) -> list:
        """The written ranges overlapping `[start, stop)` (while they are disjoint)."""
        out, i = [], bisect.bisect_left(self.spans, (stop,)) - 1
        while i >= 0 and self.spans[i][1] > start:
            out.append(self.spans[i])
            i -= 1
        return out

    def _walk(self, k, start, stop, aval):
        """`read` by walking back from version `k` (ranges that partially overlap)."""
        for w in reversed(self.writes[:k + 1]):
            if (w.start, w.stop) == (start, stop) and w.value.aval == aval:
                return w
            if stop > w.start and start < w.stop:
                return w.buffer  # overlaps the write without being it: read the buffer
        return self.base


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
