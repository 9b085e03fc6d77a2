"""SVI's state and its compiled step: `SVIState` (the optimiser's state, the mutable state, a raw
key), `SVIRunResult`, `SVIError`, and `Compiled`, the jitted init, update, evaluation and chunk of
updates (a `lax.scan`) for one model, guide, loss, optimiser and argument structure, cached by
`SVI` (`_svi.py`). Params are unconstrained (`biject_to(constraint).inv`), as in NumPyro.
"""

from __future__ import annotations

import contextlib
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.distributions.transforms import biject_to

from ... import handlers
from ..._errors import EffpplError
from ...handlers.internal import SiteError, substitute_exactly
from .autoguide._prototype import first_run

__all__ = ["SVIError", "SVIState", "SVIRunResult", "Compiled", "constrain"]


class SVIError(EffpplError, FloatingPointError):
    """SVI was misused, or its loss became non-finite (the message names the step and params;
    `result` holds the `SVIRunResult` up to the last finite step, when `run` raised it)."""

    result: SVIRunResult | None = None


@contextlib.contextmanager
def _init_params_errors(init_params):
    """A site error about a value in `init_params` (its shape, say) as `SVIError` naming
    `init_params` and the site; any other error as it is."""
    try:
        yield
    except SiteError as e:
        message = str(e).split("\n")[0]
        if not any(f"`{name}`" in message for name in init_params or {}):
            raise
        detail = message.split(": ", 1)[-1]
        raise SVIError(f"`effppl.infer.SVI.init(..., init_params=...)`: {detail}") from e


class SVIState(NamedTuple):
    """NumPyro's SVI state: the optimiser's state (holding the unconstrained params), the mutable
    state (dict name -> value of the model's and guide's `effppl.mutable` sites, None without
    any), and a raw PRNG key."""

    optim_state: Any
    mutable_state: Any
    rng_key: Any


class SVIRunResult(NamedTuple):
    """`SVI.run`'s result: constrained `params` (dict), the final `state`, `losses` (one per
    step, a numpy array)."""

    params: dict
    state: SVIState
    losses: Any


def constrain(params, constraints):
    return {n: biject_to(constraints[n])(u) for n, u in params.items()}


def _all_finite(tree):
    leaves = jax.tree_util.tree_leaves(tree)
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in leaves])) if leaves else True


class Compiled:
    """SVI's compiled functions for one model, guide, loss, optimiser and argument structure."""

    def __init__(self, model, guide, loss, optimizer, structure, static_kwargs, forward_mode):
        self.model, self.guide, self.loss, self.optimizer = model, guide, loss, optimizer
        self.structure, self.static_kwargs = structure, dict(static_kwargs)
        self.forward_mode = forward_mode
        self.init = jax.jit(self._init)
        self.update = jax.jit(self._update, static_argnums=3)
        self.evaluate = jax.jit(self._evaluate)
        self._chunks: dict = {}

    def args(self, dynamic):
        args, kwargs = self.structure.rebuild(dynamic)
        return args, {**kwargs, **self.static_kwargs}

    def _init(self, rng_key, dynamic, init_params):

        args, kwargs = self.args(dynamic)
        rng_key, k_model, k_guide = jax.random.split(rng_key, 3)
        # as NumPyro's: `init_params` given to the guide, and the guide's params (and draws)
        # to the model, so a param site may leave out its `init_value` where one of those has it
        guide = substitute_exactly(self.guide, data=init_params) if init_params else self.guide
        with first_run(), _init_params_errors(init_params):
            # an autoguide draws its initial values' key first (NumPyro's)
            guide_tr = handlers.trace(handlers.seed(guide, k_guide)).get_trace(*args, **kwargs)
        given = {n: s["value"] for n, s in guide_tr.items()
                 if s["type"] == "param" or (s["type"] == "sample" and not s["is_observed"])}
        if getattr(self.loss, "multi_sample_guide", False):  # the model takes one sample each
            given = {n: v if guide_tr[n]["type"] == "param" or jnp.ndim(v) == 0 else v[0]
                     for n, v in given.items()}
        model = handlers.seed(substitute_exactly(self.model, data={**given, **init_params}),
                              k_model)
        with _init_params_errors(init_params):
            model_tr = handlers.trace(model).get_trace(*args, **kwargs)
        sites = {n: s for tr in (model_tr, guide_tr) for n, s in tr.items() if s["type"] == "param"}
        mutable = {n: s["value"] for tr in (model_tr, guide_tr) for n, s in tr.items()
                   if s["type"] == "mutable"} or None
        constraints = {n: s["kwargs"]["constraint"] for n, s in sites.items()}
        values = {n: init_params.get(n, s["value"]) for n, s in sites.items()}
        wrong = [(n, jnp.shape(v), sites[n]["value"].shape) for n, v in init_params.items()
                 if n in sites and jnp.shape(v) != sites[n]["value"].shape]
        if wrong:
            name, got, shape = wrong[0]
            raise SVIError(f"`effppl.infer.SVI.init(..., init_params=...)`: param `{name}` has "
                           f"shape {shape} (its `init_value`'s), but the value given has shape "
                           f"{got}.")
        params = {n: biject_to(constraints[n]).inv(jnp.asarray(v, sites[n]["value"].dtype))
                  for n, v in values.items()}
        return params, constraints, rng_key, mutable

    def _objective(self, rng_key, constraints, args, kwargs, mutable=None):
        def objective(params):
            return self.loss.loss(rng_key, _with_mutable(constrain(params, constraints), mutable),
                                  self.model, self.guide, *args, **kwargs)
        return objective

    def _update(self, state, constraints, dynamic, stable):
        """One step: `(state, loss, {param: gradient finite}, applied)`. `applied` is False when
        the loss or the new params are not finite (a finite loss at the old params does not make
        the new ones finite, e.g. a NaN learning rate); with `stable` such a step leaves the
        params as they were (NumPyro's `stable_update`)."""
        args, kwargs = self.args(dynamic)
        rng_key, sub = jax.random.split(state.rng_key)
        mutable = state.mutable_state
        objective = self._objective(sub, constraints, args, kwargs, mutable)
        update_state = getattr(self.loss, "mutable_state", None)  # an effppl ELBO's
        if mutable is not None and update_state is not None:
            # the values the model leaves, at the params before the step (NumPyro's)
            before = _with_mutable(constrain(self.optimizer.get_params(state.optim_state),
                                              constraints), mutable)
            mutable = update_state(sub, before, self.model, self.guide, *args, **kwargs) or mutable
        loss, grads, optim_state = self.optimizer.step(objective, state.optim_state,
                                                       self.forward_mode)
        grad_ok = {n: jnp.asarray(True) if grads is None else jnp.all(jnp.isfinite(grads[n]))
                   for n in constraints}
        applied = jnp.isfinite(loss) & _all_finite(self.optimizer.get_params(optim_state))
        if stable:
            optim_state, mutable = jax.tree.map(lambda new, old: jnp.where(applied, new, old),
                                                (optim_state, mutable),
                                                (state.optim_state, state.mutable_state))
        return SVIState(optim_state, mutable, rng_key), loss, grad_ok, applied

    def _evaluate(self, state, constraints, dynamic):
        args, kwargs = self.args(dynamic)
        _, sub = jax.random.split(state.rng_key)
        params = self.optimizer.get_params(state.optim_state)
        return self._objective(sub, constraints, args, kwargs, state.mutable_state)(params)

    def chunk(self, length: int, stable: bool):
        """Compiled `(state, constraints, dynamic, num) -> (state, losses[length], grad_ok,
        applied[length], failed)`: `num <= length` updates in a `lax.scan`. A step whose loss or
        new params are not finite is not applied; without `stable`, the steps after it are not run
        (`failed` is set)."""
        if (length, stable) not in self._chunks:
            def run(state, constraints, dynamic, num):
                def body(carry, i):
                    state, failed = carry

                    def step(state):
                        return self._update(state, constraints, dynamic, True)

                    def skip(state):
                        grad_ok = {n: jnp.asarray(True) for n in constraints}
                        return (state, jnp.asarray(jnp.nan, self._loss_dtype()), grad_ok,
                                jnp.asarray(False))

                    runs = (i < num) & ~failed
                    new, loss, grad_ok, applied = jax.lax.cond(runs, step, skip, state)
                    if not stable:
                        failed = failed | (runs & ~applied)
                    return (new, failed), (loss, grad_ok, applied | ~runs)

                (state, failed), (losses, grad_ok, applied) = jax.lax.scan(
                    body, (state, jnp.asarray(False)), jnp.arange(length))
                return state, losses, grad_ok, applied, failed

            self._chunks[(length, stable)] = jax.jit(run)
        return self._chunks[(length, stable)]

    def nonfinite_sites(self, state, constraints, dynamic) -> tuple[list, list]:
        """`(sites, nan_data)`: the sample sites (model's and guide's) whose log density is not
        finite in some particle of the step that `state` would take next (its key is the
        state's), and the observed sites whose data hold NaN."""
        from ._elbo import run_guide_and_model

        args, kwargs = self.args(dynamic)
        _, sub = jax.random.split(state.rng_key)
        params = _with_mutable(constrain(self.optimizer.get_params(state.optim_state),
                                          constraints), state.mutable_state)
        n = getattr(self.loss, "num_particles", 1)
        keys = sub[None] if n == 1 else jax.random.split(sub, n)  # the ELBO's particle keys

        def finite(key):
            _, _, model_tr, guide_tr = run_guide_and_model(key, params, self.model, self.guide,
                                                           args, kwargs)
            assert model_tr is not None  # recorded: `model_trace=True`
            sites = {f"{which} site `{n}`": s
                     for which, tr in (("model", model_tr), ("guide", guide_tr))
                     for n, s in tr.items() if s["type"] == "sample"}
            return ({n: jnp.all(jnp.isfinite(s["log_prob"])) for n, s in sites.items()},
                    {n: jnp.any(jnp.isnan(s["value"])) for n, s in sites.items()
                     if s["is_observed"] and jnp.issubdtype(s["value"].dtype, jnp.inexact)})

        flags, nans = jax.jit(jax.vmap(finite))(keys)
        return (sorted(n for n, ok in flags.items() if not np.all(np.asarray(ok))),
                sorted(n for n, nan in nans.items() if np.any(np.asarray(nan))))

    @staticmethod
    def _loss_dtype():
        return jnp.result_type(float)


def _with_mutable(params, mutable):
    """The param map with the mutable state's values (no gradient flows into them, as in
    NumPyro)."""
    if mutable is None:
        return params
    return {**params, **jax.lax.stop_gradient(mutable)}
