"""`reparam`: reparametrize sample sites with NumPyro-style reparameterizers."""

from __future__ import annotations

import numpyro.distributions as dist
import numpyro.primitives

from .._errors import EffpplError
from .._site_fns import ask
from ..primitives import (
    SampleMsg,
    SiteError,
    _plate_frames,
    factor,
    param,
    rewriting_sites,
    sample,
)
from ._handler import Handler


class RefusedSiteError(SiteError, AssertionError):
    """A reparameterizer's refusal of a site: a `SiteError` naming the site, and the
    `AssertionError` NumPyro's reparameterizers raise (programs catching it keep working)."""


class _EffpplPrimitives(numpyro.primitives.Messenger):
    """On NumPyro's handler stack while a reparameterizer runs: its `numpyro.sample`, `factor`
    and `param` become effppl's, so NumPyro's reparameterizers (`numpyro.infer.reparam`) and
    users' own run unchanged under effppl's handlers."""

    def process_message(self, msg):
        kind, name = msg["type"], msg["name"]
        if kind == "sample" and isinstance(msg["fn"], dist.Unit):  # what numpyro.factor sends
            factor(name, msg["fn"].log_factor)
        elif kind == "sample":
            msg["value"] = sample(name, msg["fn"], obs=msg["value"], infer=msg["infer"] or None)
        elif kind == "param":  # (numpyro keeps a callable init_value in its `fn`'s defaults)
            init = msg["args"][0] if msg["args"] else \
                (msg["fn"].__kwdefaults__ or {}).get("init_value")
            msg["value"] = param(name, init, **msg["kwargs"])
        else:
            return  # another primitive: left to NumPyro (inside a model, effppl's guard refuses it)
        msg["stop"] = True


class reparam(Handler):
    """Reparametrize the sites named in `config` (dict name -> reparameterizer, or a function
    of NumPyro's site message returning one or None), as NumPyro's `reparam`: the
    reparameterizer draws auxiliary sites (e.g. `x_decentered`) and the site becomes a
    deterministic site with the value it computes.

    The site is replaced where the model makes it, before any handler sees it, so every handler
    inside or outside this one sees the auxiliary sites and the deterministic site, as with
    NumPyro's handler stack: `reparam(trace(seed(model)))` records them, a `seed` inside gives
    the auxiliary sites their keys, and the auxiliary sites keep the site's plates, `scale`
    and `mask`, stack along the loops around it, and are seen by `config_enumerate` and `enum`.
    An auxiliary site named in `config` is reparametrized too (`{"x": TransformReparam(),
    "x_base": LocScaleReparam(0)}`). Wraps a model (`reparam(model, config=...)`, or
    `reparam(config=...)(model)`) or scopes a block (`with reparam(config=...): ...`).

    Sharp edge: since the site is replaced first, a value that a handler inside gives the site
    (`substitute`, `condition`) reaches the deterministic site, not the reparameterizer
    (NumPyro's reparameterizers raise for it).

    The reparameterizers are `effppl.infer.reparam`'s or any of NumPyro's (`numpyro.infer.reparam`,
    a user's subclass of its `Reparam`): the `numpyro.sample`, `factor` and `param` they make are
    effppl's.

    **Raises:** `TypeError` without `config`; `SiteError` naming the site for one a
    reparameterizer cannot reparametrize (also an `AssertionError`, as NumPyro's refusals).

    **Example:** `reparam(model, config={"x": LocScaleReparam(centered=0)})`
    (`effppl.infer.reparam`).
    """

    _block = None  # the site rewriter scoped by a `with` block

    def __init__(self, fn=None, config=None):
        super().__init__(fn)
        if config is None:
            raise TypeError("effppl.handlers.reparam(fn, config) needs `config`: a dict site "
                            "name -> reparameterizer, or a function of the site's message.")
        self.config = config

    def _strategy(self, name, fn, obs, infer):
        if isinstance(self.config, dict):
            return self.config.get(name)
        static = {"is_observed": obs is not None, "infer": tuple(sorted(infer.items())),
                  "cond_indep_stack": _plate_frames()}
        return ask("effppl.handlers.reparam(fn, config=...)", self.config, "sample", name,
                   static, SampleMsg(fn=fn, value=obs))

    def _rewrite(self, name, fn, obs, infer):
        """The site rewriter (`primitives.site_rewriters`): None for a site `config` leaves
        alone, else the reparameterizer's `(new_fn, value)`."""
        strategy = self._strategy(name, fn, obs, infer)
        if strategy is None:
            return None
        try:
            with _EffpplPrimitives():
                return strategy(name, fn, obs)
        except (AssertionError, ValueError) as err:  # NumPyro's refusals name no site
            if isinstance(err, EffpplError):
                raise
            raise RefusedSiteError(
                f"effppl.handlers.reparam: {type(strategy).__name__} cannot reparametrize site "
                f"`{name}` ({type(fn).__name__}{', observed' if obs is not None else ''}): "
                f"{err or 'its check of the site failed'}.") from err

    def clauses(self):
        return {}

    def handled(self, *args, **kwargs):
        if self.fn is None:
            return super().handled(*args, **kwargs)  # raises: built for a `with` block
        with rewriting_sites(self._rewrite):
            return self.fn(*args, **kwargs)

    def __enter__(self):
        if self.fn is not None:
            return super().__enter__()  # raises: it wraps a model
        self._block = rewriting_sites(self._rewrite)
        self._block.__enter__()
        return self

    def __exit__(self, *exc):
        block, self._block = self._block, None
        if block is None:  # entered as a model wrapper (`super().__enter__` raised)
            return super().__exit__(*exc)
        return block.__exit__(*exc)
