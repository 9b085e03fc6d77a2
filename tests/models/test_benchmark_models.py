"""The six benchmark models: interface, data shapes, and three log densities that agree."""

import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro import handlers
from numpyro.distributions.transforms import biject_to
from numpyro.infer.util import constrain_fn, log_density, potential_energy

from models import BENCHMARK_MODELS
from tests.models._effppl import require_log_density

MODULES = [importlib.import_module(f"models.{name}") for name in BENCHMARK_MODELS]
ids = [m.NAME for m in MODULES]


@pytest.fixture(scope="module", params=MODULES, ids=ids)
def case(request):
    model = request.param
    args, kwargs = model.make_data("quick")
    return model, args, kwargs


def _points(model, args, kwargs, num=3, seed=0):
    """`num` unconstrained points, uniform in (-2, 2) as NumPyro's `init_to_uniform`."""
    rng = np.random.default_rng(seed)
    shapes = model.latent_shapes(*args, **kwargs)
    return [{k: jnp.asarray(rng.uniform(-2, 2, s)) for k, s in shapes.items()} for _ in range(num)]


def test_interface_is_complete():
    for model in MODULES:
        assert model.NAME in BENCHMARK_MODELS and set(model.SIZES) == {"quick", "paper"}
        for fn in ("make_data", "effppl_model", "numpyro_model", "handwritten_log_density",
                   "latent_shapes"):
            assert callable(getattr(model, fn)), (model.NAME, fn)


def test_paper_sizes():
    sizes = {m.NAME: m.SIZES["paper"] for m in MODULES}
    assert sizes == {"proportion_test": 3_000_000, "stochastic_volatility": 2_517, "bnn": 50_000,
                     "hmm": 5_000, "ucbadmit": 49_152, "hsgp": 7_305}


@pytest.mark.parametrize("size", ["quick", "paper"])
def test_make_data_returns_numpy_of_the_named_size(size):
    for model in MODULES:
        args, kwargs = model.make_data(size)
        assert all(isinstance(a, np.ndarray) for a in args), model.NAME
        assert all(isinstance(v, (int, float)) for v in kwargs.values()), model.NAME
        assert args[-1].shape[0] == model.SIZES[size], model.NAME  # the observations


def test_make_data_is_deterministic_per_seed():
    for model in MODULES:
        (a, _), (b, _) = model.make_data("quick", seed=3), model.make_data("quick", seed=3)
        assert all(np.array_equal(x, y) for x, y in zip(a, b)), model.NAME


def test_latent_shapes_match_numpyro(case):
    model, args, kwargs = case

    def unconstrained():  # abstract evaluation only: nothing is compiled
        seeded = handlers.seed(model.numpyro_model, jax.random.PRNGKey(0))
        trace = handlers.trace(seeded).get_trace(*args, **kwargs)
        return {name: biject_to(site["fn"].support).inv(site["value"])
                for name, site in trace.items()
                if site["type"] == "sample" and not site["is_observed"]}

    expected = {k: v.shape for k, v in jax.eval_shape(unconstrained).items()}
    assert model.latent_shapes(*args, **kwargs) == expected


@pytest.mark.slow
def test_handwritten_equals_numpyro_potential_with_gradient(case):
    model, args, kwargs = case  # data are jit arguments: XLA does not constant-fold them
    numpyro_fn = jax.jit(jax.value_and_grad(
        lambda p, a: -potential_energy(model.numpyro_model, a, kwargs, p)))
    hand_fn = jax.jit(jax.value_and_grad(
        lambda p, a: model.handwritten_log_density(p, *a, **kwargs)))
    for params in _points(model, args, kwargs):
        (expected, expected_grad), (actual, grad) = numpyro_fn(params, args), hand_fn(params, args)
        np.testing.assert_allclose(actual, expected, rtol=1e-6)
        for name in params:
            np.testing.assert_allclose(grad[name], expected_grad[name], rtol=1e-6, atol=1e-8,
                                       err_msg=f"d/d{name}")


@pytest.mark.slow
def test_effppl_log_density_equals_numpyro(case):
    effppl_log_density = require_log_density()
    model, args, kwargs = case

    @jax.jit
    def numpyro_fn(params, a):  # constrained values, and NumPyro's log joint at them
        values = constrain_fn(model.numpyro_model, a, kwargs, params)
        return values, log_density(model.numpyro_model, a, kwargs, values)[0]

    effppl_fn = jax.jit(lambda v, a: effppl_log_density(model.effppl_model, a, kwargs, v)[0])
    for params in _points(model, args, kwargs):
        values, expected = numpyro_fn(params, args)
        np.testing.assert_allclose(effppl_fn(values, args), expected, rtol=1e-6)


@pytest.mark.slow
def test_effppl_potential_equals_handwritten(case):
    require_log_density()
    from effppl.handlers import potential_energy as effppl_potential_energy

    model, args, kwargs = case
    effppl_fn = jax.jit(lambda p, a: -effppl_potential_energy(model.effppl_model, a, kwargs, p))
    hand_fn = jax.jit(lambda p, a: model.handwritten_log_density(p, *a, **kwargs))
    for params in _points(model, args, kwargs):
        np.testing.assert_allclose(effppl_fn(params, args), hand_fn(params, args), rtol=1e-6)


@pytest.mark.slow
def test_effppl_compiles_to_the_program_numpyro_compiles_to(case):
    """XLA's optimized program of effppl's potential + gradient has (nearly) the instructions of
    NumPyro's: a structural check, free of timing noise, that elimination leaves nothing behind
    (a lost `validate_args` mask once made it differ). Up to 1% more instructions are allowed:
    sites processed in a different order can change XLA's common-subexpression choices (the HMM
    has 5 more of ~1,970)."""
    require_log_density()
    from benchmarks._measure import hlo_op_counts
    from effppl.handlers import potential_energy as effppl_potential_energy

    model, args, kwargs = case
    params = _points(model, args, kwargs, num=1)[0]

    def ops(potential, fn):
        value_and_grad = jax.value_and_grad(lambda p, a: potential(fn, a, kwargs, p))
        return hlo_op_counts(jax.jit(value_and_grad).lower(params, args).compile())

    effppl_ops = ops(effppl_potential_energy, model.effppl_model)
    numpyro_ops = ops(potential_energy, model.numpyro_model)
    assert sum(effppl_ops.values()) <= 1.01 * sum(numpyro_ops.values()), (effppl_ops, numpyro_ops)
    for opcode in ("fusion", "while", "custom-call", "sort"):  # the costly structure: equal
        assert effppl_ops.get(opcode, 0) == numpyro_ops.get(opcode, 0), opcode
