"""NumPyro's `initialize_model` and `compute_log_probs` for effppl models, so that any sampler
written against NumPyro's interface (blackjax directly, NumPyro's `hmc`) can drive one."""

import jax
import jax.numpy as jnp
from numpyro.infer.util import ModelInfo, ParamInfo

from .. import handlers
from ..effects.internal import describe_non_array
from ..handlers.internal import substitute_exactly
from . import _model
from ._compile._fns import prepare
from ._init import find_initial_params, init_to_uniform
from ._init_site import as_strategy

__all__ = ["initialize_model", "compute_log_probs", "ModelInfo", "ParamInfo"]


def _keys(rng_key, api):
    """`(typed keys of shape (N,), batched)` for one key (N = 1) or a batch of N keys."""
    if not jnp.issubdtype(getattr(rng_key, "dtype", None), jax.dtypes.prng_key):
        if describe_non_array(rng_key) is not None:
            raise TypeError(f"`{api}(rng_key, ...)` expected a PRNG key or a batch of keys, but "
                            f"got {describe_non_array(rng_key)}.")
        raw = jnp.asarray(rng_key)
        if raw.dtype != jnp.uint32 or raw.shape[-1:] != (2,):
            raise TypeError(f"`{api}(rng_key, ...)` expected a PRNG key or a batch of keys, but "
                            f"got dtype {raw.dtype} and shape {raw.shape}.")
        rng_key = jax.random.wrap_key_data(raw)
    if rng_key.ndim > 1:
        raise TypeError(f"`{api}(rng_key, ...)` expected one key or a 1-d batch of keys, but got "
                        f"a batch of shape {rng_key.shape}.")
    return (rng_key, True) if rng_key.ndim else (rng_key[None], False)


def initialize_model(rng_key, model, *, init_strategy=init_to_uniform, dynamic_args=False,
                     model_args=(), model_kwargs=None, forward_mode_differentiation=False,
                     validate_grad=True):
    """A valid initial point of `model` and the functions a sampler needs, as NumPyro's
    `numpyro.infer.util.initialize_model` returns them.

    **Arguments:**

    - `rng_key`: a PRNG key, or a batch of `N` keys (shape `(N, 2)`, or typed keys `(N,)`)
      for `N` initial points; point `i` is the one `rng_key[i]` alone gives.
    - `model`: the effppl model.
    - `init_strategy`: an effppl or NumPyro init strategy (`init_to_uniform`, ...).
    - `dynamic_args`: as in NumPyro, `potential_fn(*args, **kwargs)` and
      `postprocess_fn(*args, **kwargs)` take the model's arguments and return the function.
    - `model_args`, `model_kwargs`: the model's arguments.
    - `forward_mode_differentiation`, `validate_grad`: accepted for NumPyro's signature; effppl
      always uses reverse mode and always checks the gradient.

    **Returns:** `ModelInfo(param_info, potential_fn, postprocess_fn, model_trace)`: NumPyro's
    named tuple. `param_info = ParamInfo(z, potential_energy, z_grad)` at the initial point (dict
    latent site -> unconstrained value; a leading axis `N` for a batch of keys); `potential_fn(z)`
    is minus the log density in unconstrained space (jit/grad-able); `postprocess_fn(z)` gives the
    constrained latent values and the deterministic sites; `model_trace` is the model's trace
    (`effppl.handlers.trace`) at the (first) initial point.

    **Raises:** `InitializationError` when no valid initial point is found; `TypeError` for a
    `model` that is not callable, a bad key, an `init_strategy` that is not one, or
    `model_args`/`model_kwargs` that are not a tuple/dict; `ModelArgumentError` naming a model
    argument that cannot be data.

    **Example:**
    ```python
    info = initialize_model(jax.random.PRNGKey(0), model, model_args=(y,))
    nuts = blackjax.nuts(lambda z: -info.potential_fn(z), step_size=0.1,
                         inverse_mass_matrix=jnp.ones(1))
    state = nuts.init(info.param_info.z)
    ```
    """
    api = "effppl.infer.util.initialize_model"
    if not callable(model):
        raise TypeError(f"`{api}(rng_key, model, ...)` expected a callable model, but got "
                        f"{type(model).__name__} {model!r:.60}.")
    _model.check_call(api, model_args, model_kwargs)
    model_kwargs = dict(model_kwargs or {})
    keys, batched = _keys(rng_key, api)
    try:
        init_strategy = as_strategy(init_strategy)
    except TypeError as err:
        raise TypeError(f"`{api}(..., init_strategy=...)` {err}") from None
    fns, dynamic = prepare(api, model, tuple(model_args), model_kwargs)
    z, pe, grad = find_initial_params(fns, init_strategy, keys, len(keys), dynamic, api=api)
    if not batched:
        z, pe, grad = jax.tree.map(lambda x: x[0], (z, pe, grad))
    args, kwargs = fns.args(dynamic)
    run_model = fns.model

    def potential_at(a, kw):
        return lambda params: _model.potential_energy(run_model, a, kw, params)

    def postprocess_at(a, kw):
        return lambda params: _model.constrain(run_model, a, kw, params)

    if dynamic_args:
        run_model = model
        potential_fn = lambda *a, **kw: potential_at(a, kw)  # noqa: E731
        postprocess_fn = lambda *a, **kw: postprocess_at(a, kw)  # noqa: E731
    else:
        potential_fn, postprocess_fn = potential_at(args, kwargs), postprocess_at(args, kwargs)
    first = jax.tree.map(lambda x: x[0], z) if batched else z
    values = _model.constrain(fns.model, args, kwargs, first)
    # the latent sites only: the model recomputes its deterministic sites, whose constrained
    # values carry the enumeration dims of an enumerated site they depend on
    latent = {name: value for name, value in values.items() if name in first}
    model_trace = _trace_at(fns.model, args, kwargs, latent)
    return ModelInfo(ParamInfo(z, pe, grad), potential_fn, postprocess_fn, model_trace)


def _trace_at(model, args, kwargs, values):

    return handlers.trace(handlers.seed(substitute_exactly(model, values), 0)).get_trace(
        *args, **kwargs)


def compute_log_probs(model, model_args, model_kwargs, params, sum_log_prob=True):
    """The log density of each sample site at `params`, as NumPyro's
    `numpyro.infer.util.compute_log_probs`.

    **Arguments:** `model`; `model_args` (tuple), `model_kwargs` (dict); `params`: dict site ->
    constrained value (every latent site); `sum_log_prob`: sum each site's elementwise log
    density.

    **Returns:** `(log_probs, trace)`: dict site -> log density (a scalar, or elementwise with
    `sum_log_prob=False`; zero where a `mask` is false; multiplied by the site's `scale`), and
    the model's trace. **Raises:** `SiteError` naming a latent site missing from `params`;
    `TypeError` when `model_args` is not a tuple, or `model_kwargs` or `params` not a dict.
    """
    _model.check_call("effppl.infer.util.compute_log_probs", model_args, model_kwargs, params)
    tr = handlers.trace(substitute_exactly(model, data=params)).get_trace(
        *model_args, **(model_kwargs or {}))
    log_probs = {}
    for name, site in tr.items():
        if site["type"] == "sample":
            lp = site["log_prob"]
            if site.get("scale") is not None:
                lp = lp * site["scale"]
            log_probs[name] = jnp.sum(lp) if sum_log_prob else lp
    return log_probs, tr

