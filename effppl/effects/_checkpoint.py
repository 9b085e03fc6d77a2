"""Reverse mode of `while_loop` (`_bounded.py`): checkpoints on the way forward, recomputation
on the way back.

The linearization rule runs the loop forward keeping carries in a buffer of `C` slots
(`checkpoints`): slot `k` holds the carry before iteration `k * s`, the *stride* `s` starting at
1 and doubling whenever the slots are full (the buffer is then thinned to its even slots:
online checkpointing for a number of iterations not known in advance). It leaves behind the
linear primitive `bounded_while_lin_p`, the loop's tangent map, whose

* transpose (what `jax.grad` runs) walks the segments of `s` iterations from the last: it
  recomputes the segment's carries from its checkpoint into a buffer of `S` slots (`S`, the
  largest stride `max_steps` can need), then pulls the cotangent back through each iteration
  with `jax.vjp` of the body, last first;
* implementation (what evaluating `jax.linearize`'s function runs) pushes the tangent forward
  from the initial carry, recomputing every iteration.

Memory: `C + S` carries, with `C * S >= max_steps`. Time: each iteration forward once, again
once (only when more than `C` iterations ran), then its VJP. Only the carry leaves whose tangent
can be nonzero (a fixpoint of the body's JVP) take part in the tangent map; integer leaves, and
floats the body computes under `stop_gradient` alone, are recomputed as constants.

**References:** Griewank & Walther (2000), "Algorithm 799: Revolve"; Stumm & Walther (2010),
"New algorithms for optimal online checkpointing", SIAM J. Sci. Comput. 32(2).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from . import _compat
from ._bounded import bounded_while_p, call, carry_nonzeros, inexact, recompute_slots, split_ins
from ._compat import Zero, ad, batching, mlir


def _forward(cc, bc, c0, *, cond_jaxpr, body_jaxpr, max_steps, checkpoints):
    """Run the loop keeping checkpoints: `(n, final carry, stride, buffers)`."""
    C = checkpoints
    thinning = recompute_slots(max_steps, C) > 1
    c0 = [jnp.asarray(x) for x in c0]
    bufs0 = [jnp.zeros((C, *x.shape), x.dtype) for x in c0]

    def cond(state):
        i, c, _, _ = state
        return jnp.logical_and(i < max_steps, call(cond_jaxpr, *cc, *c)[0])

    def body(state):
        i, c, s, bufs = state
        if thinning:
            full = (i + s - 1) // s > C - 1

            def thin(bufs, s):
                return [jnp.concatenate([b[0::2], jnp.zeros_like(b[:C // 2])]) for b in bufs], 2 * s

            bufs, s = jax.lax.cond(full, thin, lambda b, s: (list(b), s), bufs, s)
        slot = (i + s - 1) // s  # the carry before iteration k * s ends up in slot k
        bufs = [jax.lax.dynamic_update_index_in_dim(b, x, slot, 0) for b, x in zip(bufs, c)]
        return i + 1, call(body_jaxpr, *bc, *c), s, bufs

    return jax.lax.while_loop(cond, body, (jnp.int32(0), list(c0), jnp.int32(1), bufs0))


def _linearize(is_vjp, nzs, *primals, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts,
               max_steps, checkpoints):
    del is_vjp
    cc, bc, c0 = split_ins(primals, cond_nconsts, body_nconsts)
    _, bc_nz, c0_nz = split_ins(nzs, cond_nconsts, body_nconsts)
    avals = body_jaxpr.in_avals
    bc_nz = [nz and inexact(a) for nz, a in zip(bc_nz, avals[:body_nconsts])]
    c_nz = carry_nonzeros(body_jaxpr, bc_nz,
                          [nz and inexact(a) for nz, a in zip(c0_nz, avals[body_nconsts:])])
    n, out, s, bufs = _forward(cc, bc, c0, cond_jaxpr=cond_jaxpr, body_jaxpr=body_jaxpr,
                               max_steps=max_steps, checkpoints=checkpoints)
    residuals = [*bc, n, s, *bufs]
    static = dict(body_jaxpr=body_jaxpr, bc_nz=tuple(bc_nz), c_nz=tuple(c_nz),
                  slots=recompute_slots(max_steps, checkpoints))
    out_avals = body_jaxpr.out_avals

    def linearized(residuals, *tangents):
        _, tbc, tc0 = split_ins(tangents, cond_nconsts, body_nconsts)
        tbc = [ad.instantiate_zeros(t) for t, nz in zip(tbc, bc_nz) if nz]
        tc0 = [ad.instantiate_zeros(t) for t, nz in zip(tc0, c_nz) if nz]
        outs = iter(bounded_while_lin_p.bind(*residuals, *tbc, *tc0, **static))
        return [next(outs) if nz else Zero(a.to_tangent_aval())
                for nz, a in zip(c_nz, out_avals)]

    return out, c_nz, residuals, linearized


ad.primitive_linearizations[bounded_while_p] = _linearize


# --------------------------------------------------------------------------------------------
# The tangent map: inputs `(*body consts, n, stride, *buffers, *nonzero tangents of the body
# consts, *nonzero tangents of the initial carry)`, outputs the nonzero tangents of the carry.

bounded_while_lin_p = _compat.Primitive("bounded_while_lin")
bounded_while_lin_p.multiple_results = True


class _Lin:
    """The pieces of one `bounded_while_lin` equation."""

    def __init__(self, args, body_jaxpr, bc_nz, c_nz, slots):
        n_bc, n_c = len(bc_nz), len(c_nz)
        self.body, self.bc_nz, self.c_nz, self.slots = body_jaxpr, bc_nz, c_nz, slots
        self.bc, (self.n, self.s), self.bufs, rest = _compat.split_list(
            list(args), [n_bc, 2, n_c])
        self.tbc, self.tc0 = _compat.split_list(rest, [sum(bc_nz)])

    def step(self, c_nz, bc_nz, c):
        """The body as a function of the carry's and constants' nonzero leaves, the others
        taken from the full carry `c` and the constants: the nonzero leaves of its output."""
        c_full = _merge(self.c_nz, c_nz, c)
        bc_full = _merge(self.bc_nz, bc_nz, self.bc)
        outs = call(self.body, *bc_full, *c_full)
        return [o for o, nz in zip(outs, self.c_nz) if nz], outs

    def nz(self, xs, mask):
        return [x for x, m in zip(xs, mask) if m]


def _merge(mask, nz_values, full):
    it = iter(nz_values)
    return [next(it) if m else x for m, x in zip(mask, full)]


def _abstract_eval(*avals, body_jaxpr, bc_nz, c_nz, slots):
    return [a.to_tangent_aval() for a, nz in zip(body_jaxpr.out_avals, c_nz) if nz]


def _impl(*args, **params):
    """Push the tangent forward from the initial carry, recomputing each iteration."""
    lin = _Lin(args, **params)
    c0 = [b[0] for b in lin.bufs]
    bc_nz = lin.nz(lin.bc, lin.bc_nz)

    def body(state):
        i, c, t = state

        def f(cn, bn):
            return lin.step(cn, bn, c)

        (_, outs), (t, _) = jax.jvp(f, (lin.nz(c, lin.c_nz), bc_nz), (t, lin.tbc))
        return i + 1, outs, t

    _, _, t = jax.lax.while_loop(lambda st: st[0] < lin.n, body,
                                 (jnp.int32(0), c0, list(lin.tc0)))
    return t


def _transpose(cts, *args, body_jaxpr, bc_nz, c_nz, slots):
    """Walk the segments of `stride` iterations from the last: recompute the segment's carries
    from its checkpoint, then pull the cotangent back through each of them, last first."""
    lin = _Lin(args, body_jaxpr, bc_nz, c_nz, slots)
    out_avals = [a for a, nz in zip(body_jaxpr.out_avals, c_nz) if nz]
    ct = [jnp.zeros(a.shape, a.dtype) if isinstance(x, Zero) else x
          for x, a in zip(cts, out_avals)]
    bc_nz_vals = lin.nz(lin.bc, lin.bc_nz)
    ct_bc = [jnp.zeros_like(x) for x in bc_nz_vals]
    n, s = lin.n, lin.s

    def pull(k_carry, ct, ct_bc):
        _, vjp = jax.vjp(lambda cn, bn: lin.step(cn, bn, k_carry)[0],
                         lin.nz(k_carry, lin.c_nz), bc_nz_vals)
        ct_c, d_bc = vjp(ct)
        return ct_c, [a + b for a, b in zip(ct_bc, d_bc)]

    def segment(state):
        j, ct, ct_bc = state
        start = j * s
        length = jnp.minimum(s, n - start)
        first = [b[j] for b in lin.bufs]
        if slots == 1:
            ct, ct_bc = pull(first, ct, ct_bc)
            return j - 1, ct, ct_bc
        seg = [jnp.zeros((slots, *x.shape), x.dtype).at[0].set(x) for x in first]

        def forward(k, state):
            c, seg = state
            c = lin.step(lin.nz(c, lin.c_nz), bc_nz_vals, c)[1]
            return c, [b.at[k].set(x) for b, x in zip(seg, c)]

        _, seg = jax.lax.fori_loop(1, length, forward, (first, seg))

        def backward(m, state):
            ct, ct_bc = state
            k = length - 1 - m
            return pull([b[k] for b in seg], ct, ct_bc)

        ct, ct_bc = jax.lax.fori_loop(0, length, backward, (ct, ct_bc))
        return j - 1, ct, ct_bc

    segments = (n + s - 1) // s
    _, ct, ct_bc = jax.lax.while_loop(lambda st: st[0] >= 0, segment,
                                      (segments - 1, ct, ct_bc))
    n_res = len(lin.bc) + 2 + len(lin.bufs)
    return [None] * n_res + list(ct_bc) + list(ct)


def _batch(args, dims, **params):
    size = next(x.shape[d] for x, d in zip(args, dims) if d is not None)
    in_axes = tuple(d for d in dims)
    outs = jax.vmap(functools.partial(_impl, **params), in_axes=in_axes, axis_size=size)(*args)
    return outs, [0] * len(outs)


bounded_while_lin_p.def_abstract_eval(_abstract_eval)
bounded_while_lin_p.def_impl(_impl)
mlir.register_lowering(bounded_while_lin_p, mlir.lower_fun(_impl, multiple_results=True))
ad.primitive_transposes[bounded_while_lin_p] = _transpose
batching.primitive_batchers[bounded_while_lin_p] = _batch
