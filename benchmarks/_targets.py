"""Each framework's log density of a model, as a pure function of `(params, data)`.

A model module (see `models/`) exposes `make_data`, `effppl_model`, `numpyro_model`,
`handwritten_log_density` and `latent_shapes`. Here each framework's log density is put in one form:
`log_density(params, data) -> scalar`, with `params` a dict site -> unconstrained array and `data` a
dict of the arrays that `make_data` returned, passed as *arguments* (never closed over, so a timed
jaxpr cannot constant-fold them). `trace` turns that function into the framework's jaxpr: JAX
tracing for NumPyro and hand-written JAX, effect elimination (`effppl.effects.make_jaxpr`) for
effppl; its time is the "x" of the paper's Table 2.
"""

import importlib
from collections.abc import Callable
from typing import NamedTuple

import jax
import numpy as np


class Skipped(NamedTuple):
    """A framework that was not run, with the reason printed in the tables and stored in the JSON."""

    reason: str


class Target(NamedTuple):
    """One framework's log density of one model.

    **Fields:**
    - `framework`: its name (`"effppl"`, `"numpyro"`, `"handwritten"`).
    - `log_density`: `(params, data) -> scalar`, log joint density in unconstrained space,
      including log|det J| of the transforms to each site's support.
    - `make_jaxpr`: `fn -> (*flat_args -> ClosedJaxpr)`; `jax.make_jaxpr`, or effppl's translator.
    """

    framework: str
    log_density: Callable
    make_jaxpr: Callable


class ModelData(NamedTuple):
    """A model's data split into arrays (arguments of the timed function) and static values.

    **Fields:**
    - `arrays`: dict name -> numpy array; names are `arg<i>` for positional arguments and
      `kw_<name>` for keyword ones (the same keys go to the Oryx worker's `.npz`).
    - `static`: dict name -> Python value (int, float, str, None, ...) for everything else.
    - `num_args`: number of positional arguments of the model.
    """

    arrays: dict
    static: dict
    num_args: int

    def rebuild(self, arrays):
        """`(args, kwargs)` for the model, with `arrays` (possibly traced) in place of the data."""
        merged = {**self.static, **arrays}
        args = tuple(merged[f"arg{i}"] for i in range(self.num_args))
        kwargs = {k[3:]: v for k, v in merged.items() if k.startswith("kw_")}
        return args, kwargs


def split_data(args, kwargs):
    """A `ModelData` from the `(args, kwargs)` that a model's `make_data` returned."""
    arrays, static = {}, {}
    named = [(f"arg{i}", a) for i, a in enumerate(args)]
    named += [(f"kw_{k}", v) for k, v in kwargs.items()]
    for key, value in named:
        if isinstance(value, (np.ndarray, jax.Array)) and np.ndim(value) > 0:
            arrays[key] = np.asarray(value)
        else:
            static[key] = value
    return ModelData(arrays=arrays, static=static, num_args=len(args))


def load_model(name):
    """The module `models.<name>`, or `Skipped` with the import error as reason."""
    try:
        return importlib.import_module(f"models.{name}")
    except ImportError as err:
        return Skipped(f"models.{name} cannot be imported ({type(err).__name__}: {err})")


def make_target(framework, module, data):
    """The `Target` of `framework` for model `module` with data layout `data`, or `Skipped`."""
    builders = {"handwritten": _handwritten, "numpyro": _numpyro, "effppl": _effppl}
    return builders[framework](module, data)


def _handwritten(module, data):
    fn = getattr(module, "handwritten_log_density", None)
    if fn is None:
        return Skipped(f"{module.__name__} has no handwritten_log_density")

    def log_density(params, arrays):
        args, kwargs = data.rebuild(arrays)
        return fn(params, *args, **kwargs)

    return Target(framework="handwritten", log_density=log_density, make_jaxpr=jax.make_jaxpr)


def _numpyro(module, data):
    model = getattr(module, "numpyro_model", None)
    if model is None:
        return Skipped(f"{module.__name__} has no numpyro_model")
    from numpyro.infer.util import potential_energy

    def log_density(params, arrays):
        args, kwargs = data.rebuild(arrays)
        return -potential_energy(model, args, kwargs, params)

    return Target(framework="numpyro", log_density=log_density, make_jaxpr=jax.make_jaxpr)


def _effppl(module, data):
    model = getattr(module, "effppl_model", None)
    if model is None:
        return Skipped(f"{module.__name__} has no effppl_model")
    try:
        from effppl.effects import make_jaxpr
        from effppl.handlers import potential_energy
    except ImportError as err:
        return Skipped(f"effppl.handlers.potential_energy / effppl.effects.make_jaxpr are not "
                       f"available yet ({type(err).__name__}: {err})")

    def log_density(params, arrays):
        args, kwargs = data.rebuild(arrays)
        return -potential_energy(model, args, kwargs, params)

    return Target(framework="effppl", log_density=log_density, make_jaxpr=make_jaxpr)
