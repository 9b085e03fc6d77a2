"""`infer_config`: NumPyro's handler that sets a sample site's `infer` dict from a function of
the site."""

from __future__ import annotations

from .._site_fns import ask
from ..primitives import SiteError, _plate_frames, configuring_sites
from .enumeration._enum import with_site_configurator


class infer_config:
    """Update each sample site's `infer` dict with `config_fn(site)` (NumPyro's `infer_config`).

    `config_fn` gets the site as NumPyro's message: a dict with `"type"` (`"sample"`),
    `"name"`, `"fn"` (the distribution), `"is_observed"`, `"value"` (the observation, else
    None), `"infer"` (the site's hints so far), `"cond_indep_stack"`, `"scale"`, `"mask"`,
    `"args"`, `"kwargs"`; it is called while the model is traced, so its arrays are tracers
    (a `config_fn` needing their Python values raises a `SiteFunctionError` naming the site).
    It returns a dict of hints (hashable values)
    merged into the site's `infer`, as `msg["infer"].update(config_fn(msg))` does in NumPyro.
    It sees every sample site the model performs, also inside plain `lax.scan`, `cond` and
    `while_loop` bodies, each once per perform in the program (not once per iteration).

    **Usage:** `infer_config(model, config_fn)` returns the configured model; `infer_config(
    config_fn=f)` is a decorator and a context manager (`with infer_config(config_fn=f): ...`
    inside a model).

    **Raises:** `TypeError` when `config_fn` is missing or not callable, or `fn` is not callable;
    `SiteError` naming the site when `config_fn` returns something other than a dict.

    **Example:** mark the discrete site `z` for enumeration, as `config_enumerate` would; the
    log density is then the mixture's.

    >>> import jax.numpy as jnp
    >>> from jax.scipy.stats import norm
    >>> import effppl
    >>> from effppl import distributions as dist
    >>> from effppl.handlers import infer_config, log_density
    >>> def mixture(y):
    ...     z = effppl.sample("z", dist.Bernoulli(0.3))
    ...     effppl.sample("y", dist.Normal(jnp.where(z, 2.0, 0.0), 1.0), obs=y)
    >>> enumerated = infer_config(mixture, lambda site: (
    ...     {"enumerate": "parallel"} if site["name"] == "z" else {}))
    >>> lp, _ = log_density(enumerated, (0.5,), {}, {})
    >>> round(float(lp), 4) == round(float(jnp.log(0.3 * norm.pdf(0.5, 2.0)
    ...                                            + 0.7 * norm.pdf(0.5))), 4)
    True
    """

    def __new__(cls, fn=None, config_fn=None):
        if not callable(config_fn):
            raise TypeError(f"effppl.handlers.infer_config(fn, config_fn) expected a callable "
                            f"config_fn(site) -> dict, but got {type(config_fn).__name__} "
                            f"{config_fn!r:.60}.")
        if fn is None:
            return super().__new__(cls)
        if not callable(fn):
            raise TypeError(f"effppl.handlers.infer_config(fn, config_fn) expected a callable "
                            f"model, but got {type(fn).__name__} {fn!r:.60}.")
        return with_site_configurator(fn, _configurator(config_fn))

    def __init__(self, fn=None, config_fn=None):
        self.config_fn = config_fn
        self._blocks = []  # one per `with` entered, innermost last

    def __call__(self, fn):
        return infer_config(fn, self.config_fn)

    def __enter__(self):
        block = configuring_sites(_configurator(self.config_fn))
        block.__enter__()
        self._blocks.append(block)
        return self

    def __exit__(self, *exc):
        return self._blocks.pop().__exit__(*exc)


def _configurator(config_fn):
    def configure(name, msg, infer, is_observed):
        static = {"is_observed": is_observed, "infer": tuple(infer.items()),
                  "cond_indep_stack": _plate_frames()}
        hints = ask("effppl.handlers.infer_config(fn, config_fn=...)", config_fn, "sample", name,
                    static, msg)
        if not isinstance(hints, dict):
            raise SiteError(f"effppl.handlers.infer_config: config_fn returned "
                            f"{type(hints).__name__} {hints!r:.60} for site `{name}`; it must "
                            f"return a dict of infer hints (or {{}}).")
        return msg, dict(infer, **hints)

    return configure
