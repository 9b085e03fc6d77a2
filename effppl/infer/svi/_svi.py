"""Stochastic variational inference: NumPyro's `SVI` API on optax.

Parameters live in unconstrained space (`biject_to(constraint).inv`), as in NumPyro. The update
step is compiled once per (model, guide, loss, optimiser, argument structure) and cached like
MCMC's sampler: the model's arrays are arguments of the compiled function, so a new `SVI` object
or new data of the same shapes compile nothing. `run` steps in compiled chunks (a `lax.scan` of
updates) under a tqdm bar, and stops at the first non-finite loss, naming the step and the
params whose gradient was not finite.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np
import tqdm.auto as tqdm

from ..._keys import key_data
from ...effects.internal import describe_non_array
from .._checkpoint import as_checkpoint
from .._compile._arguments import model_arguments, names_leaks
from .._compile._cache import cached, split_cache_key
from .._progress import advance
from .._sharding import check_data, check_mesh, data_rows, place_data, readable
from ._checkpoint import StepRecord
from ._optim import ExampleLibrariesOptim, as_optimizer
from ._step import Compiled, SVIError, SVIRunResult, SVIState, constrain

__all__ = ["SVI", "SVIState", "SVIRunResult", "SVIError"]


def _raw_key(rng_key, api):
    try:
        return key_data(rng_key, f"`{api}`")
    except TypeError as err:
        raise SVIError(str(err)) from None


class _Sites(NamedTuple):
    """What `check_data` reads of a model: the function and how its arguments are rebuilt."""

    model: Any
    args: Any


def _hashable(value) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _init_params(api, init_params):
    """`init_params` as a dict of arrays, or an `SVIError` naming what is wrong."""
    if init_params is None:
        return {}
    if not isinstance(init_params, Mapping):
        raise SVIError(f"`{api}(..., init_params=...)` expected a dict param name -> constrained "
                       f"value, but got {type(init_params).__name__}.")
    for name, value in init_params.items():
        problem = describe_non_array(value)
        if problem is not None:
            raise SVIError(f"`{api}(..., init_params=...)`: the value of param `{name}` must be "
                           f"an array of numbers, but is {problem}.")
    return {name: jnp.asarray(value) for name, value in init_params.items()}


class SVI:
    """Stochastic variational inference: fit the params of `guide` (and `model`) by minimising
    `loss` with the optimiser `optim`, as NumPyro's `SVI`.

    **Arguments:**
    - `model`, `guide`: effppl models; the guide's latent sample sites name the model's, and both
      may have `effppl.param` sites. Autoguides: `effppl.infer.autoguide`.
    - `optim`: an optax `GradientTransformation` (`optax.adam(1e-2)`), or an optimiser with
      NumPyro's interface: `effppl.optim.Adam(1e-2)` (NumPyro's names), NumPyro's own.
    - `loss`: an ELBO: `Trace_ELBO()`, `TraceMeanField_ELBO()`, `RenyiELBO()`.
    - `mesh`: a mesh from `effppl.distributed.make_mesh`: data sharded over its data axis
      (`effppl.distributed.shard`) stay so (one all-reduce of the loss and its gradient per
      step), other data are replicated on it; every process must run the same calls. Sharded
      data work without it too. A subsampled plate, or a latent site inside the sharded plate,
      on sharded data is refused (`SiteError`).
    - `**static_kwargs`: keyword arguments passed to the model and guide on every call
      (hashable ones key the compiled update; arrays are passed to it as arguments).

    **Raises:** `SVIError` for calls out of order (`update` before `init`), and from `run` for a
    non-finite loss; `OptimizerError` for an `optim` that is not an optimiser.

    **References:** Hoffman et al. (2013), "Stochastic variational inference"; Ranganath et al.
    (2014); NumPyro's `numpyro.infer.SVI`.

    Example: the mean of a normal with known scale, fitted by a normal guide; its posterior is
    Normal(sum(y) / (n + 0.01), 1 / sqrt(n + 0.01)) for n observations.

        >>> import jax, jax.numpy as jnp, optax
        >>> import effppl
        >>> from effppl import distributions as dist
        >>> from effppl.infer import SVI, Trace_ELBO
        >>> from effppl.infer.autoguide import AutoNormal
        >>> def model(y):
        ...     mu = effppl.sample("mu", dist.Normal(0.0, 10.0))
        ...     with effppl.plate("data", y.shape[0]):
        ...         effppl.sample("y", dist.Normal(mu, 1.0), obs=y)
        >>> y = jnp.array([2.5, 3.5, 3.0, 2.0, 4.0])
        >>> guide = AutoNormal(model)
        >>> svi = SVI(model, guide, optax.adam(0.05), Trace_ELBO())
        >>> result = svi.run(jax.random.key(0), 2000, y, progress_bar=False)
        >>> sorted(result.params), result.losses.shape
        (['mu_auto_loc', 'mu_auto_scale'], (2000,))
        >>> bool(abs(result.params["mu_auto_loc"] - 3.0) < 0.1)
        True
        >>> bool(abs(result.params["mu_auto_scale"] - 0.447) < 0.1)
        True
    """

    def __init__(self, model, guide, optim, loss, *, mesh=None, **static_kwargs):
        for arg, fn in (("model", model), ("guide", guide)):
            if not callable(fn):
                raise SVIError(f"`effppl.infer.SVI(model, guide, optim, loss)` expected a "
                               f"callable {arg}, but got {type(fn).__name__} {fn!r:.60}.")
        if isinstance(loss, type):
            raise SVIError(f"`effppl.infer.SVI(model, guide, optim, loss)` expected an ELBO "
                           f"object, but got the class {loss.__name__}: call it "
                           f"(`{loss.__name__}()`).")
        self.model, self.guide, self.loss = model, guide, loss
        self._optimizer = as_optimizer(optim)
        # NumPyro's: a jax.example_libraries triple is kept wrapped, with `get_params`
        wrapped = isinstance(self._optimizer.optim, ExampleLibrariesOptim)
        self.optim = self._optimizer.optim if wrapped else optim
        if not callable(getattr(loss, "loss", None)):
            raise SVIError(f"`effppl.infer.SVI(model, guide, optim, loss)` expected an ELBO (e.g. "
                           f"`effppl.infer.Trace_ELBO()`), but got {type(loss).__name__}.")
        # hashable values key the compiled update; arrays (NumPyro's `SVI(..., X=X)`) are passed
        # to it as arguments, like those of `init`/`update`/`run`
        self._array_kwargs = {k: v for k, v in static_kwargs.items() if not _hashable(v)}
        self._static = tuple(sorted((k, v) for k, v in static_kwargs.items()
                                    if k not in self._array_kwargs))
        self.static_kwargs = dict(static_kwargs)
        self.mesh = check_mesh(mesh, "effppl.infer.SVI")
        self._constraints = None

    def _compiled(self, api, args, kwargs, forward_mode=False):
        structure, dynamic = split_cache_key(api, args, {**self._array_kwargs, **kwargs})
        key = ("svi", self.model, self.guide, self.loss, self._optimizer, structure, self._static,
               bool(forward_mode))
        fns = cached(key, lambda: Compiled(self.model, self.guide, self.loss, self._optimizer,
                                            structure, self._static, bool(forward_mode)))
        if self.mesh is not None:
            dynamic = place_data(dynamic, self.mesh)
        if data_rows(dynamic) and not getattr(fns, "checked_data", False):
            for fn in (self.model, self.guide):  # the guide's latent sites too
                check_data(api, _Sites(fn, fns.args), dynamic)
            fns.checked_data = True
        return fns, dynamic

    def init(self, rng_key, *args, init_params: dict | None = None, **kwargs) -> SVIState:
        """The initial state: the params' initial values (the `init_value`s of the model's and
        guide's param sites, drawn with `rng_key`; `init_params`, constrained values, replace
        them), unconstrained, and the optimiser's state.

        **Raises:** `SVIError` for a bad key or an `init_params` name that is no param site.
        """
        api = "effppl.infer.SVI.init"
        key = _raw_key(rng_key, api)
        init_params = _init_params(api, init_params)
        with model_arguments(api, self.model, args, kwargs):
            setup = getattr(self.guide, "_setup_prototype", None)
            if setup is not None:  # an autoguide keeps the (concrete) arguments for `median`, ...
                setup(*args, **{**kwargs, **self.static_kwargs})
            fns, dynamic = self._compiled(api, args, kwargs)
            params, constraints, key, mutable = fns.init(key, dynamic, init_params)
            params, key, mutable = readable((params, key, mutable))
        unknown = sorted(set(init_params) - set(params))
        if unknown:
            raise SVIError(f"`{api}(..., init_params=...)` names {unknown}, which are not param "
                           f"sites of the model or guide; those are {sorted(params)}.")
        bad = [n for n, v in params.items() if not np.all(np.isfinite(np.asarray(v)))]
        if bad:
            raise SVIError(
                f"`{api}`: the initial value of param "
                f"{', '.join(f'`{n}` (constraint {constraints[n]!r})' for n in bad)} is outside "
                f"its constraint's support, or not finite (its unconstrained value is NaN or "
                f"infinite). Give an `init_value` (or `init_params` value) inside the support.")
        self._constraints = constraints
        return SVIState(self._optimizer.init(params), mutable, key)

    def _check_state(self, svi_state, api):
        if self._constraints is None:
            raise SVIError(f"`{api}` needs the params' constraints, which `SVI.init` (or "
                           f"`SVI.run`) finds: call `svi.init(rng_key, *args)` first.")
        if not isinstance(svi_state, SVIState):
            raise SVIError(f"`{api}` expected an SVIState (from `svi.init` or `svi.update`), but "
                           f"got {type(svi_state).__name__}.")

    def get_params(self, svi_state: SVIState) -> dict:
        """The current params, constrained (dict name -> array)."""
        self._check_state(svi_state, "effppl.infer.SVI.get_params")
        return constrain(self._optimizer.get_params(svi_state.optim_state), self._constraints)

    def constrain_fn(self, params: dict) -> dict:
        """Unconstrained params (as the optimiser holds them) mapped to their constraints'
        spaces, as NumPyro's `SVI.constrain_fn` (after `init`)."""
        self._check_state(SVIState(None, None, None), "effppl.infer.SVI.constrain_fn")
        return constrain(params, self._constraints)

    def update(self, svi_state, *args, forward_mode_differentiation=False, **kwargs):
        """One optimisation step: `(new_state, loss)` (the loss before the step)."""
        return self._step("effppl.infer.SVI.update", False, svi_state, args, kwargs,
                          forward_mode_differentiation)

    def stable_update(self, svi_state, *args, forward_mode_differentiation=False, **kwargs):
        """`update`, but a step whose loss or new params are not finite is not applied."""
        return self._step("effppl.infer.SVI.stable_update", True, svi_state, args, kwargs,
                          forward_mode_differentiation)

    @names_leaks("effppl.infer.SVI.update")
    def _step(self, api, stable, svi_state, args, kwargs, forward_mode):
        self._check_state(svi_state, api)
        fns, dynamic = self._compiled(api, args, kwargs, forward_mode)
        state, loss, _, _ = fns.update(svi_state, self._constraints, dynamic, stable)
        return state, loss

    @names_leaks("effppl.infer.SVI.evaluate")
    def evaluate(self, svi_state, *args, **kwargs):
        """The loss at the current params (with a key drawn from the state's; no step)."""
        self._check_state(svi_state, "effppl.infer.SVI.evaluate")
        fns, dynamic = self._compiled("effppl.infer.SVI.evaluate", args, kwargs)
        return fns.evaluate(svi_state, self._constraints, dynamic)

    @names_leaks("effppl.infer.SVI.run")
    def run(self, rng_key, num_steps: int, *args, progress_bar: bool = True,
            stable_update: bool = False, forward_mode_differentiation: bool = False,
            init_state: SVIState | None = None, init_params: dict | None = None,
            checkpoint=None, **kwargs) -> SVIRunResult:
        """Run `num_steps` updates from `init_state` (or a fresh `init`).

        With `progress_bar`, the steps run in about 20 compiled chunks under a tqdm bar showing
        the rate and the mean loss of the last chunk (its clock starts after the first chunk,
        which compiles); without, in one compiled call. With `stable_update`, non-finite steps
        are skipped (a warning counts them).

        With `checkpoint` (a folder path, or `effppl.infer.Checkpoint(path, every=seconds)`),
        the steps run in 100 compiled chunks and, after a chunk, every `every` seconds (default
        10), the state (params, optimiser state, key) and the losses so far are written there
        atomically; rerunning the same call resumes where it stopped, and the final params equal
        those of an uninterrupted run, bit for bit. Ctrl-C stops after the chunk in progress and
        returns the result so far, with an `InterruptedWarning`.

        **Returns:** `SVIRunResult(params, state, losses)`.

        **Raises:** `SVIError` at the first non-finite loss (without `stable_update`), naming
        the step and the params whose gradient is not finite; its `result` attribute holds
        the `SVIRunResult` of the steps before it; `CheckpointError` for a `checkpoint` of
        another run (naming what differs), a damaged one, or a path that holds something else.
        """
        api = "effppl.infer.SVI.run"
        checkpoint = as_checkpoint(checkpoint, api)
        if isinstance(num_steps, (bool, np.bool_)) or not isinstance(num_steps, (int, np.integer)) \
                or num_steps < 1:
            raise SVIError(f"`{api}(rng_key, num_steps={num_steps!r}, ...)` expected a positive "
                           f"int.")
        if init_state is None:
            state = self.init(rng_key, *args, init_params=init_params, **kwargs)
        else:
            if self._constraints is None:  # a state from another SVI object: find constraints
                self.init(rng_key, *args, init_params=init_params, **kwargs)
            self._check_state(init_state, api)
            state = init_state
        fns, dynamic = self._compiled(api, args, kwargs, forward_mode_differentiation)
        chunks = 100 if checkpoint is not None else 20 if progress_bar else 1
        length = math.ceil(num_steps / chunks)
        chunk = fns.chunk(length, bool(stable_update))
        # -- checkpoint: the run's committed progress, resumed from `checkpoint` if it has some
        record = StepRecord.open(self, checkpoint, api, key=_raw_key(rng_key, api),
                                 state=state, dynamic=dynamic,
                                 num_steps=num_steps, length=length, stable=stable_update,
                                 forward_mode=forward_mode_differentiation)
        state = record.state
        # --
        with tqdm.tqdm(total=num_steps, initial=record.done, disable=not progress_bar,
                       desc="SVI") as bar, record.catching():
            for start in range(record.done, num_steps, length):
                num = min(length, num_steps - start)
                state, chunk_losses, grad_ok, applied, failed = record.wait(chunk(
                    state, self._constraints, dynamic, np.int32(num)))
                chunk_losses, grad_ok, applied, failed = readable(
                    (chunk_losses, grad_ok, applied, failed))
                chunk_losses = np.asarray(chunk_losses[:num])
                applied = np.asarray(applied[:num])
                if bool(failed):
                    sites, nan_data = fns.nonfinite_sites(state, self._constraints, dynamic)
                    self._raise_nonfinite(api, start, chunk_losses, applied, grad_ok,
                                          record.losses, state, sites, nan_data)
                record.stepped(state, start + num, chunk_losses, int(np.sum(~applied)))
                if progress_bar:
                    advance(bar, num, f"loss={np.nanmean(chunk_losses):.4g}")
        record.finish(num_steps)
        state, skipped = record.state, record.skipped
        losses = np.concatenate(record.losses) if record.losses else np.zeros((0,))
        if skipped:
            warnings.warn(f"{api}: {skipped} of {num_steps} steps had a non-finite loss or gave "
                          f"non-finite params and were skipped (stable_update=True).",
                          RuntimeWarning, stacklevel=2)
        return SVIRunResult(self.get_params(state), state, losses)

    def _raise_nonfinite(self, api, start, chunk_losses, applied, grad_ok, losses, state, sites,
                         nan_data):
        i = int(np.flatnonzero(~applied)[0])
        bad = sorted(n for n, ok in grad_ok.items() if not bool(np.asarray(ok)[i]))
        losses = np.concatenate(losses + [chunk_losses[:i]])
        what = (f"the loss is {chunk_losses[i]}" if not np.isfinite(chunk_losses[i]) else
                f"the loss is {chunk_losses[i]} but the step made the params non-finite")
        err = SVIError(
            f"`{api}`: {what} at step {start + i} (counting from 0)"
            + (f"; the log density is not finite at {', '.join(sites)}" if sites else "")
            + (f"; the gradient is not finite for params {bad}" if bad else "")
            + (f"; the data of {', '.join(nan_data)} hold NaN (out of every distribution's "
               f"support, so the log density is -inf, as in NumPyro): remove or mask them "
               f"(`obs_mask`, `effppl.handlers.mask`)" if nan_data else "")
            + ". The params are those before that step (`err.result`). Check the model's "
            "density on the guide's support, lower the learning rate, or pass "
            "`stable_update=True` to skip such steps.")
        err.result = SVIRunResult(self.get_params(state), state, losses)
        raise err
