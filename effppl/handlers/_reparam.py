"""`reparam`: reparametrize sample sites with NumPyro-style reparameterizers."""

from __future__ import annotations

from .._site_fns import ask
from ..primitives import SampleMsg, _plate_frames, rewriting_sites
from ._handler import Handler


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

    **Raises:** `TypeError` without `config`; reparameterizers raise `SiteError` naming the site
    for one they cannot reparametrize.

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
        return strategy(name, fn, obs)

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
