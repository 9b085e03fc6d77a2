"""A repeated call on an unchanged model skips the model's re-trace (`_compile/_fingerprint.py`),
and a change to anything the model reads is still seen: the new values are used, never the
ones the cached compiled functions were built with."""

import collections
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from effppl.infer import Predictive, log_likelihood
from effppl.infer._compile import _fns
from effppl.infer._compile._fingerprint import fingerprint

from . import _ppl
from ._ppl import dist, sample
from .test_recompile import count_compilations

MU = jnp.linspace(-1.0, 1.0, 7)  # the draws of `mu`
Y = jnp.asarray(np.linspace(-2.0, 3.0, 5))


def _expected(loc, scale=1.0, y=Y, mu=MU):
    """`log N(y | mu + loc, scale)` per draw and observation, by scipy."""
    return stats.norm.logpdf(np.asarray(y)[None, :], np.asarray(mu)[:, None] + np.asarray(loc),
                             scale)


def _check(model, expected, y=Y, mu=MU):
    got = log_likelihood(model, {"mu": mu}, y)["y"]
    np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-5, atol=1e-5)


@pytest.fixture
def traces(monkeypatch):
    """Counts the bare traces of a model `model_fns` takes (`_fns._program`)."""
    count = [0]
    program = _fns._program

    def counted(*args):
        count[0] += 1
        return program(*args)

    monkeypatch.setattr(_fns, "_program", counted)
    return count


def _skips():
    return _ppl.BACKEND == "effppl"  # under the NumPyro test seam the model is always traced


# ---- what the models read ---------------------------------------------------------------------

LOC = jnp.zeros(5)
SCALE = 1.0
SETTINGS = {"loc": 0.0}
OFFSETS = [0.0]
NP_LOC = np.zeros(5)


def _shift():
    return LOC


def reads_global_array(y):
    mu = sample("mu", dist.Normal(0.0, 1.0))
    sample("y", dist.Normal(mu + LOC, 1.0), obs=y)


def reads_global_scalar(y):
    mu = sample("mu", dist.Normal(0.0, 1.0))
    sample("y", dist.Normal(mu, SCALE), obs=y)


def calls_helper(y):
    mu = sample("mu", dist.Normal(0.0, 1.0))
    sample("y", dist.Normal(mu + _shift(), 1.0), obs=y)


def reads_dict_and_list(y):
    mu = sample("mu", dist.Normal(0.0, 1.0))
    sample("y", dist.Normal(mu + SETTINGS["loc"] + OFFSETS[-1], 1.0), obs=y)


def reads_numpy_array(y):
    mu = sample("mu", dist.Normal(0.0, 1.0))
    sample("y", dist.Normal(mu + NP_LOC, 1.0), obs=y)


def _with_closure(loc):
    def model(y):
        mu = sample("mu", dist.Normal(0.0, 1.0))
        sample("y", dist.Normal(mu + loc, 1.0), obs=y)

    return model


def test_unchanged_model_is_not_traced_again_and_uses_new_data(traces):
    _check(reads_global_array, _expected(0.0))
    before = traces[0]
    new_y, new_mu = Y + 1.5, MU * 2.0
    with count_compilations() as compiled:
        _check(reads_global_array, _expected(0.0, y=new_y, mu=new_mu), y=new_y, mu=new_mu)
        _check(reads_global_array, _expected(0.0), y=Y, mu=MU)
    assert compiled[0] == 0
    assert traces[0] == before + (0 if _skips() else 2)


def test_reassigned_global_array_is_used(traces, monkeypatch):
    _check(reads_global_array, _expected(0.0))
    _check(reads_global_array, _expected(0.0))
    before = traces[0]
    monkeypatch.setattr(f"{__name__}.LOC", jnp.arange(5.0))
    _check(reads_global_array, _expected(np.arange(5.0)))
    assert traces[0] == before + 1
    _check(reads_global_array, _expected(np.arange(5.0)))


def test_changed_global_scalar_is_used(monkeypatch):
    _check(reads_global_scalar, _expected(0.0))
    _check(reads_global_scalar, _expected(0.0))
    monkeypatch.setattr(f"{__name__}.SCALE", 2.5)
    _check(reads_global_scalar, _expected(0.0, scale=2.5))
    monkeypatch.setattr(f"{__name__}.SCALE", 2)  # an int: another type, same value class
    _check(reads_global_scalar, _expected(0.0, scale=2.0))


def test_changed_closure_cell_is_used():
    loc = 0.0

    def model(y):
        mu = sample("mu", dist.Normal(0.0, 1.0))
        sample("y", dist.Normal(mu + loc, 1.0), obs=y)

    _check(model, _expected(0.0))
    _check(model, _expected(0.0))
    loc = jnp.full(5, 0.75)
    _check(model, _expected(0.75))
    loc = 1.25  # noqa: F841  (read by `model` through its closure)
    _check(model, _expected(1.25))


def test_closures_of_one_factory_are_told_apart():
    _check(_with_closure(0.5), _expected(0.5))
    _check(_with_closure(-0.5), _expected(-0.5))


def test_redefined_helper_is_used(monkeypatch):
    _check(calls_helper, _expected(0.0))
    _check(calls_helper, _expected(0.0))

    def _shift():
        return jnp.full(5, 2.0)

    monkeypatch.setattr(f"{__name__}._shift", _shift)
    _check(calls_helper, _expected(2.0))
    # the helper's own global, read one call further down
    monkeypatch.setattr(f"{__name__}._shift", globals()["_shift"].__class__(
        (lambda: LOC).__code__, globals()))
    monkeypatch.setattr(f"{__name__}.LOC", jnp.full(5, -1.0))
    _check(calls_helper, _expected(-1.0))


def test_mutated_dict_and_list_are_used():
    _check(reads_dict_and_list, _expected(0.0))
    _check(reads_dict_and_list, _expected(0.0))
    SETTINGS["loc"] = 1.0
    try:
        _check(reads_dict_and_list, _expected(1.0))
        OFFSETS.append(0.5)
        _check(reads_dict_and_list, _expected(1.5))
        OFFSETS[-1] = -2.0
        _check(reads_dict_and_list, _expected(-1.0))
    finally:
        SETTINGS["loc"] = 0.0
        OFFSETS[:] = [0.0]


def test_numpy_array_changed_in_place_is_used():
    _check(reads_numpy_array, _expected(0.0))
    _check(reads_numpy_array, _expected(0.0))
    NP_LOC[2] = 3.0
    try:
        _check(reads_numpy_array, _expected(np.array([0.0, 0.0, 3.0, 0.0, 0.0])))
    finally:
        NP_LOC[:] = 0.0


def test_partial_arguments_are_read():
    def model(y, loc):
        mu = sample("mu", dist.Normal(0.0, 1.0))
        sample("y", dist.Normal(mu + loc, 1.0), obs=y)

    bound = functools.partial(model, loc=jnp.zeros(5))
    _check(bound, _expected(0.0))
    _check(bound, _expected(0.0))
    bound.keywords["loc"] = jnp.ones(5)
    _check(bound, _expected(1.0))


class _Shifted:
    def __init__(self, loc):
        self.loc = loc

    def model(self, y, shift=None):
        mu = sample("mu", dist.Normal(0.0, 1.0))
        sample("y", dist.Normal(mu + self.loc + (0.0 if shift is None else shift.loc), 1.0),
               obs=y)


def test_changed_attribute_of_self_and_of_a_static_argument_is_used():
    obj = _Shifted(0.0)
    _check(obj.model, _expected(0.0))
    _check(obj.model, _expected(0.0))
    obj.loc = 1.0
    _check(obj.model, _expected(1.0))

    shift = _Shifted(0.5)  # hashable by identity: a static argument, keyed by itself
    for _ in range(2):
        got = log_likelihood(obj.model, {"mu": MU}, Y, shift)["y"]
        np.testing.assert_allclose(np.asarray(got), _expected(1.5), rtol=1e-5, atol=1e-5)
    shift.loc = -1.0
    got = log_likelihood(obj.model, {"mu": MU}, Y, shift)["y"]
    np.testing.assert_allclose(np.asarray(got), _expected(0.0), rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(_ppl.BACKEND != "effppl", reason="effppl's handlers")
@pytest.mark.xfail(strict=True, reason=(
    "known gap, also on main before the fingerprint: the handler's values are not in the bare "
    "program `model_fns` compares, and after its first use the handler object keeps a jaxpr "
    "in its __dict__ that the fingerprint cannot read, so the change is not seen"))
def test_mutated_values_of_a_handler_around_the_model_are_used():
    from effppl.handlers import substitute

    def model(y):
        mu = sample("mu", dist.Normal(0.0, 1.0))
        scale = sample("scale", dist.HalfNormal(1.0))
        sample("y", dist.Normal(mu, scale), obs=y)

    values = {"scale": jnp.array(1.0)}
    given = substitute(model, data=values)
    _check(given, _expected(0.0))
    _check(given, _expected(0.0))
    values["scale"] = jnp.array(2.0)  # not in the model's bare program
    _check(given, _expected(0.0, scale=2.0))


def test_predictive_sees_a_changed_global(monkeypatch):
    def prior():
        sample("x", dist.Normal(LOC[0], 0.01))

    draw = Predictive(prior, num_samples=50)
    assert float(np.mean(draw(jax.random.key(0))["x"])) == pytest.approx(0.0, abs=0.02)
    monkeypatch.setattr(f"{__name__}.LOC", jnp.full(5, 4.0))
    assert float(np.mean(draw(jax.random.key(0))["x"])) == pytest.approx(4.0, abs=0.02)


# ---- what the fingerprint refuses -------------------------------------------------------------

_RNG = np.random.default_rng(0)


def _draws_numpy_random():
    return _RNG.normal()


def _uses_np_random():
    return np.random.normal()


def _looks_up_by_name():
    return globals()["LOC"]


def test_fingerprint_refuses_what_it_cannot_read():
    assert fingerprint(_draws_numpy_random) is None  # a generator's state lives in C
    assert fingerprint(_uses_np_random) is None
    assert fingerprint(_looks_up_by_name) is None
    ordered = collections.OrderedDict(a=1.0)  # its items live in C, not in its __dict__
    assert fingerprint(lambda: ordered) is None
    assert fingerprint(lambda: jnp.zeros(3) + np.zeros(1 << 20)) is not None
    big = np.zeros(1 << 20)
    assert fingerprint(lambda: big) is None  # 8 MiB: not compared by value


def test_fingerprint_tells_values_apart():
    def returns(value):
        return lambda: value

    a, b = jnp.zeros(3), jnp.zeros(3)
    assert fingerprint(returns(a)) == fingerprint(returns(a))  # one code object, one array
    assert fingerprint(returns(a)) != fingerprint(returns(b))  # another array object
    assert fingerprint(returns(1)) != fingerprint(returns(1.0))
    assert fingerprint(returns(np.ones(2))) == fingerprint(returns(np.ones(2)))  # by value
    x = [-0.0]
    f = lambda: x  # noqa: E731
    before = fingerprint(f)
    x[0] = 0.0
    assert fingerprint(f) != before


def test_model_writing_what_it_reads_is_traced_every_call(traces):
    calls = []

    def model(y):
        calls.append(1)
        mu = sample("mu", dist.Normal(0.0, 1.0))
        sample("y", dist.Normal(mu, 1.0), obs=y)

    _check(model, _expected(0.0))
    before = traces[0]
    _check(model, _expected(0.0))
    _check(model, _expected(0.0))
    assert traces[0] == before + 2
