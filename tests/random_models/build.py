"""Build a model from its description: effppl's (plain `lax.scan`/`lax.cond`/`lax.switch`/
`jax.vmap`, effppl's handlers around functions), and NumPyro's where NumPyro can express it
(`numpyro.contrib.control_flow.scan`, no sites in `cond` branches or `vmap`).

The model takes one argument, `inputs`: dict key -> array (`"data:<site>"`: an observed site's
data laid out by iteration, `"given:<handler>:<site>"`: the values a handler gives), each sliced
by the loops above the point that reads it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from . import spec as S
from .evaluator import analyze, resolve_dim


class _Ppl:
    """The primitives and handlers a built model calls."""

    def __init__(self, kind):
        self.kind = kind
        if kind == "effppl":
            import effppl
            from effppl import handlers
            self.sample, self.deterministic = effppl.sample, effppl.deterministic
            self.factor, self.plate, self.handlers = effppl.factor, effppl.plate, handlers
            self.scan = jax.lax.scan
        else:
            import numpyro
            from numpyro import handlers
            from numpyro.contrib.control_flow import scan
            self.sample, self.deterministic = numpyro.sample, numpyro.deterministic
            self.factor, self.plate, self.handlers = numpyro.factor, numpyro.plate, handlers
            self.scan = scan


def numpyro_can_express(model) -> bool:
    """Whether NumPyro's primitives can express `model`: no `cond` or `vmap` holding sites, no
    scan inside a scan or a plate (NumPyro's `scan` refuses both), no reversed scan, no scan of
    length 0 (NumPyro's `scan` indexes its empty value), no `do` around a scan (NumPyro's `scan`
    hands a handler outside it the stacked sites after the loop, so the loop's steps, carries
    included, never see the intervention), no `factor` in a plate in a scan (NumPyro's `scan`
    stacks the factor's `Unit` log factor to `(1, size)` and its `log_prob` raises "Cannot
    broadcast to shape with fewer dimensions"), and no `do` giving a site that a `scale` inside
    the `do` weighs (NumPyro's `do` sends a copy of the site's message through the whole handler
    stack again, so the inner `scale` multiplies twice: `do(scale(x ~ N(0, 1), 3))` scores
    `9 * log N(x)`; effppl and the evaluator score `3 * log N(x)`, as the model says), and no
    `scale` inside a `scale` inside a scan (NumPyro's `scale` multiplies the two array scales
    while the scan's body is traced and its `scan` keeps the product: `UnexpectedTracerError`)."""
    def scaled_do(body, names, scaled):
        for s in body:
            if isinstance(s, S.Sample) and scaled and s.name in names:
                return True
            if isinstance(s, S.Handle):
                if scaled_do(s.body, names, scaled or s.kind == "scale"):
                    return True
            elif hasattr(s, "body") and scaled_do(s.body, names, scaled):
                return True
            elif isinstance(s, S.Cond) and any(scaled_do(b, names, scaled) for b in s.branches):
                return True
        return False

    def has_scan(body):
        return any(isinstance(s, S.Scan) or (hasattr(s, "body") and has_scan(s.body))
                   for s in body)

    def ok(body, in_scan, in_plate, scaled_in_scan=False):
        for s in body:
            if isinstance(s, (S.Cond, S.Vmap)):
                return False
            if isinstance(s, S.Factor) and in_scan and in_plate:
                return False
            if isinstance(s, S.Scan):
                if in_scan or in_plate or s.reverse or s.length == 0:
                    return False
                if not ok(s.body, True, in_plate):
                    return False
            elif isinstance(s, S.Plate):
                if not ok(s.body, in_scan, True, scaled_in_scan):
                    return False
            elif isinstance(s, S.Handle):
                if s.kind == "do" and (has_scan(s.body) or scaled_do(s.body, s.payload, False)):
                    return False
                scale = s.kind == "scale" and in_scan
                if scale and scaled_in_scan:
                    return False
                if not ok(s.body, in_scan, in_plate, scaled_in_scan or scale):
                    return False
        return True
    return ok(model, False, False)


def build(model, kind="effppl"):
    """`fn(inputs)`: the model `model` describes, written with effppl's (or NumPyro's)
    primitives."""
    ppl = _Ppl(kind)
    _, owners = analyze(model)

    def inside(path):
        """The input keys read inside the loop whose path (loop names, outermost first) is
        `path`."""
        return [k for k, (p, _) in owners.items()
                if tuple(name for _, name, _, _ in p[:len(path)]) == tuple(path)]

    def block(body, scope, frames, inputs, path):
        for s in body:
            if isinstance(s, S.Sample):
                params = [S.evaluate(p, scope) for p in s.params]
                fn = S.make_dist(s.family, params)
                obs = inputs[f"data:{s.name}"] if s.observed else None
                scope.refs[s.name] = ppl.sample(s.name, fn, obs=obs)
            elif isinstance(s, S.Deterministic):
                scope.refs[s.name] = ppl.deterministic(s.name, S.evaluate(s.expr, scope))
            elif isinstance(s, S.Factor):
                ppl.factor(s.name, S.evaluate(s.expr, scope))
            elif isinstance(s, S.Plate):
                dim = resolve_dim(s.dim, frames)
                inner = scope.child(plates={s.name: (s.size, dim)})
                with ppl.plate(s.name, s.size, dim=s.dim):
                    block(s.body, inner, frames + ((s.name, s.size, dim),), inputs, path)
                scope.refs.update(inner.refs)
            elif isinstance(s, S.Scan):
                scope.refs[s.name] = scan(s, scope, frames, inputs, path)
            elif isinstance(s, S.Cond):
                scope.refs[s.name] = cond(s, scope, frames, inputs, path)
            elif isinstance(s, S.Vmap):
                scope.refs[s.name] = vmap(s, scope, frames, inputs, path)
            elif isinstance(s, S.Handle):
                scope.refs.update(handle(s, scope, frames, inputs, path))

    def scan(s, scope, frames, inputs, path):
        keys = inside(path + [s.name])
        init = jnp.asarray(S.evaluate(s.init, scope), jnp.float64)

        def step(carry, x):
            feature, sliced = x
            inner = scope.child(carries={s.name: carry}, xs={s.name: feature})
            block(s.body, inner, frames, {**inputs, **sliced}, path + [s.name])
            if s.carry_from is not None:
                new = 0.5 * carry + 0.5 * S.summary(inner.refs[s.carry_from])
            else:
                new = 0.8 * carry + 0.2 * feature
            return new.astype(carry.dtype), None

        xs = (S.xs_feature(s.length), {k: inputs[k] for k in keys})
        return ppl.scan(step, init, xs, reverse=s.reverse)[0]

    def cond(s, scope, frames, inputs, path):
        index = S.branch_index(S.evaluate(s.pred, scope), len(s.branches))

        def branch(body):
            def run(operand):
                inner = scope.child()
                block(body, inner, frames, operand, path)
                last = S.last_value_name(body)
                return S.summary(inner.refs[last]) if last is not None else jnp.float64(0.0)
            return run

        fns = [branch(b) for b in s.branches]
        if len(fns) == 2:
            return jax.lax.cond(index > 0, fns[1], fns[0], inputs)
        return jax.lax.switch(index, fns, inputs)

    def vmap(s, scope, frames, inputs, path):
        keys = inside(path + [s.name])

        def one(feature, sliced):
            inner = scope.child(vmapx={s.name: feature})
            block(s.body, inner, frames, {**inputs, **sliced}, path + [s.name])
            last = S.last_value_name(s.body)
            return S.summary(inner.refs[last]) if last is not None else jnp.float64(0.0)

        out = jax.vmap(one)(S.vmap_feature(s.size), {k: inputs[k] for k in keys})
        return jnp.mean(out)

    def handle(s, scope, frames, inputs, path):
        def body(ins):
            inner = scope.child()
            block(s.body, inner, frames, ins, path)
            return {k: v for k, v in inner.refs.items()}

        h = ppl.handlers
        if s.kind == "mask":
            fn = h.mask(body, mask=S.mask_of(s.payload, scope))
        elif s.kind == "scale":
            fn = h.scale(body, scale=S.scale_of(s.payload, scope))
        elif s.kind == "block":
            fn = h.block(body, hide=list(s.payload))
        else:
            data = {name: inputs[f"given:{s.name}:{name}"] for name in s.payload}
            fn = getattr(h, s.kind)(body, data=data)
        return fn(inputs)

    def model_fn(inputs):
        block(model, S.Scope(), (), inputs, [])

    model_fn.__name__ = f"random_model_{kind}"
    return model_fn
