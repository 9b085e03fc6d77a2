"""`reparam`: reparametrize sample sites with NumPyro-style reparameterizers."""

from __future__ import annotations

import contextlib
import copy

import jax
import jax.numpy as jnp

from .._site_fns import ask
from ..primitives import (
    _plate_frames,
    configuring_sites,
    deterministic_op,
    in_clause,
    message_contexts,
    plate,
    sample_op,
    site_contexts,
)
from ._handler import Handler, _named_like, forward


class reparam(Handler):
    """Reparametrize the sites named in `config` (dict name -> reparameterizer, or a function
    of NumPyro's site message returning one or None), as NumPyro's `reparam`: the
    reparameterizer draws auxiliary sites (e.g. `x_decentered`) and the site becomes a
    deterministic site with the value it computes. Works for sites inside plain loops (each
    occurrence draws a row of the auxiliary sites). The auxiliary sites keep the site's `scale`,
    `mask` and plates (`cond_indep_stack`), and the site configurators around the model
    (`config_enumerate`, `enum`) see them, as NumPyro's handlers do: an auxiliary site below an
    enumerated one keeps its shape without enumeration, while the reparametrized site's value
    (a deterministic function of it) broadcasts over the enumeration dims.

    **Example:** `reparam(model, config={"x": LocScaleReparam(centered=0)})`
    (`effppl.infer.reparam`).
    """

    _contexts = ()  # the site configurators where the model performs its sites (`_marking`)

    def __init__(self, fn=None, config=None):
        super().__init__(fn if fn is None else self._marking(fn))
        if config is None:
            raise TypeError("effppl.handlers.reparam(fn, config) needs `config`: a dict site "
                            "name -> reparameterizer, or a function of the site's message.")
        self.config = config

    def set_model(self, fn):
        super().set_model(self._marking(fn))

    def _marking(self, fn):
        """`fn` with its sites marked (`_mark`), the site configurators around it kept for the
        auxiliary sites, which the clause draws later, when the translator traces it: as in
        NumPyro, `config_enumerate` and `enum` around the model see them too."""
        @_named_like(fn)
        def marked(*args, **kwargs):
            self._contexts = tuple(site_contexts())
            with configuring_sites(self._mark):
                return fn(*args, **kwargs)
        marked._wraps_model = (fn, self._marking)  # seen through by `enum`
        return marked

    def __enter__(self):
        out = super().__enter__()
        self._contexts = tuple(site_contexts())
        site_contexts().append(self._mark)
        return out

    def __exit__(self, *exc):
        site_contexts().remove(self._mark)
        return super().__exit__(*exc)

    def _mark(self, name, msg, infer, is_observed):
        """Marks the latent sites this handler reparametrizes, `infer["_reparametrized"]`, as
        the model performs them: their value is then the reparameterizer's, a function of its
        auxiliary sites and of the distribution's parameters (with the enumeration dims of an
        enumerated site they depend on, so `enum` leaves their type alone)."""
        if is_observed or msg.value is not None:
            return msg, infer
        static = {"is_observed": False, "infer": tuple(sorted(infer.items())),
                  "cond_indep_stack": _plate_frames()}
        if self._strategy(name, msg, static) is not None:  # (`enum` may have seen it first)
            infer = {k: v for k, v in infer.items() if k != "_value_shape"}
            infer["_reparametrized"] = True
        return msg, infer

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
            keep = _auxiliary_message(msg)
            message_contexts().append(keep)
            try:
                with in_clause(), _configuring(self._contexts), \
                        _in_plates(static.get("cond_indep_stack", ())):
                    new_fn, value = self._draw(strategy, name, msg)
            finally:
                message_contexts().remove(keep)
            if value is None or new_fn is not None:
                msg = msg._replace(fn=new_fn, value=None if value is None else jnp.asarray(value))
                return resume(params, forward(msg, name=name, **static))
            return resume(params, deterministic_op(
                jnp.asarray(value), name=name,
                cond_indep_stack=static.get("cond_indep_stack", ())))
        return {sample_op: sample}

    def _draw(self, strategy, name, msg):
        """`strategy(name, fn, obs)`, its auxiliary sites reparametrized too where `config`
        names them (`{"x": TransformReparam(), "x_base": LocScaleReparam(0)}`): NumPyro sends
        them through the whole stack, this handler included; here a clause's operations go to
        the handlers outside, so a copy of this handler handles them first."""
        def draw():
            return strategy(name, msg.fn, msg.value)
        if isinstance(self.config, dict) and set(self.config) <= {name}:
            return draw()
        nested = copy.copy(self)
        nested.fn = draw
        return nested.handled()


def _auxiliary_message(msg):
    """The adjustment of the messages of the auxiliary sites a reparameterizer draws for the
    site of message `msg`: they keep its `scale` and `mask`, and, when a `seed` inside this
    handler gave the site a key (`reparam(seed(model))`), each draws with a key folded from it
    (NumPyro sends them through the whole handler stack, the inner `seed` included; here a
    clause's operations go to the handlers outside only)."""
    count = [0]

    def adjust(m):
        m = m._replace(scale=msg.scale, mask=msg.mask)
        if msg.rng_key is not None and m.rng_key is None and m.value is None:
            count[0] += 1
            m = m._replace(rng_key=jax.random.fold_in(msg.rng_key, count[0]))
        return m
    return adjust


@contextlib.contextmanager
def _configuring(contexts):
    """The site configurators `contexts` active (those not active already)."""
    with contextlib.ExitStack() as stack:
        for configure in contexts:
            if configure not in site_contexts():
                stack.enter_context(configuring_sites(configure))
        yield


@contextlib.contextmanager
def _in_plates(frames):
    """The plates of `frames` (a site's `cond_indep_stack`, innermost first) entered, those not
    entered already: the auxiliary sites sit in the site's plates, as in NumPyro (the clause is
    traced outside the model's `with plate` blocks)."""
    active = {frame.name for frame in _plate_frames()}
    with contextlib.ExitStack() as stack:
        for frame in reversed(frames):
            if frame.name not in active:
                stack.enter_context(plate(frame.name, frame.size, dim=frame.dim))
        yield
