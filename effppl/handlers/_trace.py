"""`trace`: record every site's value (stacked for sites inside loops) and distribution."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ..primitives import SiteError, deterministic_op, param_op, promote_batch_shape, sample_op
from ._handler import Handler, forward, forward_param, run_outermost, trace_model
from ._sites import analyze, bijector, pad_row, unconstrained_type


def is_enumerated(infer) -> bool:
    """Whether a site whose `infer` (dict or sorted items) is this is marked for enumeration."""
    return dict(infer).get("enumerate") is not None


def _log_prob_type(site, fn_avals):
    """The type of `fn.log_prob(value)` at one occurrence of the site."""
    leaves, tree = jax.tree_util.tree_flatten(fn_avals)
    structs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in leaves]

    def log_prob(ls, value):
        return jax.tree_util.tree_unflatten(tree, ls).log_prob(value)

    return jax.eval_shape(log_prob, structs, jax.ShapeDtypeStruct(site.aval.shape, site.aval.dtype))


class trace(Handler):
    """Record the sites of `fn`: `trace(fn).get_trace(*args, **kwargs)` returns
    `{name: {"type", "name", "value", "is_observed", "fn", "log_prob", "scale", "infer",
    "cond_indep_stack"}}`; `log_prob` is the elementwise log density of each occurrence's value
    under that occurrence's distribution, zero where an enclosing `mask` is false (NumPyro's masked
    `fn`), not scaled; `scale` the factor an enclosing `scale` handler puts on it (broadcast to
    `log_prob`'s shape; None outside any); a `param` site (`type: "param"`) records its value and
    `kwargs` `{"constraint", "event_dim"}`, as NumPyro's; `cond_indep_stack` lists the enclosing `plate`s as NumPyro's
    `CondIndepStackFrame(name, dim, size)`, innermost first (as NumPyro lists them; empty for a
    site that different `cond` branches put in different plates).

    A site inside `lax.scan` has its values stacked: shape `(T, *site_shape)`, nested scans
    `(T_outer, T_inner, *site_shape)`; its `"fn"` is the distribution with the same leading axes in
    its batch shape (`None` when the site uses different distribution families in different `cond`
    branches). A site in a branch never taken holds zeros.

    **Raises:** `SiteError` for a latent site inside a `while_loop` (no static number of
    occurrences), and for duplicate site names. Observed sites in a `while_loop` are not recorded.

    **Example:** `trace(seed(model, 0)).get_trace(x)["mu"]["value"]`
    """

    record_unconstrained = False
    scale_log_prob = False  # record `log_prob` times the site's scale (enumerated densities)

    def _sites(self, *args, **kwargs):
        sites = analyze(trace_model(self.fn, *args, **kwargs))
        out = {}
        for name, site in sites.items():
            if not site.bounded:
                if site.type == "sample" and not site.is_observed:
                    raise SiteError(f"The latent site `{name}` sits inside a `while_loop`: it has "
                                    f"no static number of occurrences, so it cannot be traced or "
                                    f"sampled by HMC. Use `lax.scan` with a fixed length.")
                continue
            out[name] = site
        return out

    def params(self, *args, **kwargs):
        self._recorded = self._sites(*args, **kwargs)
        bufs = {}
        for name, site in self._recorded.items():
            lead = (site.count,) if site.in_loop else ()
            entry = {"value": jnp.zeros(lead + site.aval.shape, site.aval.dtype)}
            if site.in_loop:
                entry["count"] = jnp.int32(0)
            msg_avals = jax.tree_util.tree_unflatten(site.key.in_tree, site.key.in_avals)[0]
            if site.type == "param":
                entry["constraint"] = [jnp.zeros(a.shape, a.dtype) for a in
                                       jax.tree_util.tree_leaves(msg_avals["constraint"])]
            if site.type == "sample":
                if site.one_family:
                    entry["fn"] = [jnp.zeros(lead + a.shape, a.dtype)
                                   for a in jax.tree_util.tree_leaves(msg_avals["fn"])]
                lp = _log_prob_type(site, msg_avals["fn"])
                entry["log_prob"] = jnp.zeros(lead + lp.shape, lp.dtype)
                if msg_avals["scale"] is not None:
                    entry["scale"] = jnp.zeros(lead + lp.shape, lp.dtype)
                if self.record_unconstrained and not site.is_observed and not is_enumerated(
                        dict(site.key.static).get("infer", ())):
                    shape, dtype = unconstrained_type(site)
                    entry["unconstrained"] = jnp.zeros(lead + shape, dtype)
            bufs[name] = entry
        return bufs

    def clauses(self):
        def record(bufs, name, value, fn=None, mask=None, scale=None, constraint=None):
            if name not in bufs:
                return bufs
            entry = dict(bufs[name])
            site = self._recorded[name]
            if site.in_loop and entry["value"].shape[0] == 0:
                return bufs  # inside a loop of length 0 (or an empty vmap): no row to fill
            updates = {"value": value}
            if constraint is not None and "constraint" in entry:
                updates["constraint"] = jax.tree_util.tree_leaves(constraint)
            if fn is not None:
                leaves, tree = jax.tree_util.tree_flatten(fn)
                if "fn" in entry:
                    same = [jnp.shape(x) for x in leaves] == \
                        [b.shape[1 if site.in_loop else 0:] for b in entry["fn"]]
                    if same and tree == self._fn_tree(site):
                        updates["fn"] = leaves
                lp = fn.log_prob(value)
                if mask is not None:  # as NumPyro's `mask` makes `fn` a masked distribution
                    lp = jnp.where(mask, lp, 0.0)
                if scale is not None and self.scale_log_prob:
                    lp = lp * scale
                if jnp.shape(lp) == entry["log_prob"].shape[1 if site.in_loop else 0:]:
                    updates["log_prob"] = lp
                if "scale" in entry:
                    updates["scale"] = jnp.broadcast_to(scale, entry["scale"].shape[
                        1 if site.in_loop else 0:])
                if "unconstrained" in entry:
                    shape = entry["unconstrained"].shape[1 if site.in_loop else 0:]
                    updates["unconstrained"] = pad_row(bijector(name, fn).inv(value), shape)
            row = site.row(entry["count"]) if site.in_loop else None
            for k, new in updates.items():
                if site.in_loop:
                    if isinstance(new, list):
                        entry[k] = [b.at[row].set(jnp.asarray(x, b.dtype))
                                    for b, x in zip(entry[k], new)]
                    else:
                        entry[k] = entry[k].at[row].set(jnp.asarray(new, entry[k].dtype))
                elif isinstance(new, list):
                    entry[k] = [jnp.asarray(x, b.dtype) for b, x in zip(entry[k], new)]
                else:
                    entry[k] = jnp.asarray(new, entry[k].dtype)
            if site.in_loop:
                entry["count"] = entry["count"] + 1
            return dict(bufs, **{name: entry})

        def sample(bufs, msg, *, resume, name, **static):
            value = forward(msg, name=name, **static)
            return resume(record(bufs, name, value, msg["fn"], msg["mask"], msg["scale"]), value)

        def param(bufs, msg, *, resume, name, **static):
            value = forward_param(msg, name=name, **static)
            return resume(record(bufs, name, value, constraint=msg["constraint"]), value)

        def deterministic(bufs, value, *, resume, name, **static):
            value = deterministic_op(value, name=name, **static)
            return resume(record(bufs, name, value), value)

        return {sample_op: sample, deterministic_op: deterministic, param_op: param}

    @staticmethod
    def _fn_tree(site):
        return jax.tree_util.tree_structure(
            jax.tree_util.tree_unflatten(site.key.in_tree, site.key.in_avals)[0]["fn"])

    def ret(self, bufs, result):
        return result, bufs

    def __call__(self, *args, **kwargs):
        return self._run(*args, **kwargs)[0]

    def handled(self, *args, **kwargs):
        return super().handled(*args, **kwargs)[0]

    def _run(self, *args, **kwargs):
        result, bufs = run_outermost(super().handled, *args, **kwargs)
        return result, self._assemble(bufs)

    def get_trace(self, *args, **kwargs):
        """Run the model and return its trace (dict site name -> site dict)."""
        return self._run(*args, **kwargs)[1]

    def _assemble(self, bufs):
        out = {}
        for name, entry in bufs.items():
            site = self._recorded[name]
            stack = (lambda x: x.reshape(site.loops + x.shape[1:])) if site.in_loop \
                else (lambda x: x)
            msg_static = dict(site.key.static)
            # `cond` branches that put the site in different plates: no plates are recorded
            stacks = {dict(k.static).get("cond_indep_stack", ()) for k in site.keys or (site.key,)}
            rec = {"type": site.type, "name": name, "value": stack(entry["value"]),
                   "is_observed": site.is_observed, "infer": dict(msg_static.get("infer", ())),
                   "cond_indep_stack": list(stacks.pop()) if len(stacks) == 1 else []}
            if site.type == "sample":
                rec["fn"] = None
                if "fn" in entry:
                    fn = jax.tree_util.tree_unflatten(self._fn_tree(site),
                                                      [stack(x) for x in entry["fn"]])
                    rec["fn"] = promote_batch_shape(fn) if site.in_loop else fn
                rec["log_prob"] = stack(entry["log_prob"])
                rec["scale"] = stack(entry["scale"]) if "scale" in entry else None
            if site.type == "param":
                msg = jax.tree_util.tree_unflatten(site.key.in_tree, site.key.in_avals)[0]
                constraint = jax.tree_util.tree_unflatten(
                    jax.tree_util.tree_structure(msg["constraint"]), entry["constraint"])
                rec["kwargs"] = {"constraint": constraint, "event_dim": msg_static["event_dim"]}
            if "unconstrained" in entry:
                rec["unconstrained"] = stack(entry["unconstrained"])
            out[name] = rec
        return out
