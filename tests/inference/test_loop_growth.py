"""No per-step copies of loop-length buffers: every entry point that runs or differentiates a
model with sites in a plain `lax.scan` compiles to loops whose steps touch O(1) of each array
as long as the loop (`tests/_hlo_loops.per_step_work` on the optimised HLO), so their cost grows
linearly in the loop's length. (The timings, at T and 4T against hand-written JAX:
`python -m benchmarks.growth_bench`.)

The cause these guard against: `trace` records the sites of a loop in one buffer per dtype,
carried through the loop. An overwrite of a row (`dynamic_update_slice`) transposes into a
copy of the whole cotangent buffer per step, and a loop that both reads (the occurrence
counters) and writes a buffer makes XLA copy it per step, in the value too.
"""

import jax
import jax.numpy as jnp
import pytest

import effppl
from benchmarks.growth_bench import hmm, local_level, points
from effppl.handlers import log_density, potential_energy, seed, substitute, trace
from effppl.infer import SVI, Trace_ELBO, TraceEnum_ELBO
from effppl.infer.autoguide import AutoDelta, AutoNormal

from .._hlo_loops import loop_count, per_step_work

T = 173  # longer than every other axis of the models (the benchmark's, timed there)
MODELS = {"hmm": hmm, "local_level": local_level}


def _assert_linear(fn, *args):
    text = jax.jit(fn).lower(*args).compile().as_text()
    assert loop_count(text) >= 1, "the program has no loop: the check would prove nothing"
    work = per_step_work(text, T)
    assert not work, "per-step work on loop-length arrays:\n" + "\n".join(w[3] for w in work)


@pytest.mark.parametrize("name", MODELS)
def test_log_density_gradient_copies_no_loop_length_buffer_per_step(name):
    model, (con, _) = MODELS[name], points(name, T)
    _assert_linear(jax.value_and_grad(lambda p, y: log_density(model, (y,), {}, p)[0]), con,
                   jnp.zeros(T))


@pytest.mark.parametrize("name", MODELS)
def test_potential_energy_gradient_copies_no_loop_length_buffer_per_step(name):
    model, (_, unc) = MODELS[name], points(name, T)
    _assert_linear(jax.value_and_grad(lambda u, y: potential_energy(model, (y,), {}, u)), unc,
                   jnp.zeros(T))


@pytest.mark.parametrize("name", MODELS)
def test_elbo_gradient_copies_no_loop_length_buffer_per_step(name):
    model, y, key = MODELS[name], jnp.zeros(T), jax.random.PRNGKey(0)
    guide, elbo = (AutoDelta(hmm), TraceEnum_ELBO()) if name == "hmm" else \
        (AutoNormal(local_level), Trace_ELBO())
    svi = SVI(model, guide, effppl.optim.Adam(0.01), elbo)
    params = svi.get_params(svi.init(key, y))
    _assert_linear(jax.value_and_grad(lambda p, y: elbo.loss(key, p, model, guide, y)), params, y)


def test_trace_of_draws_copies_no_loop_length_buffer_per_step():
    """What `Predictive` and `log_likelihood` run: the model traced at each of a batch of
    draws, every site recorded."""
    con, _ = points("local_level", T)
    draws = jax.tree.map(lambda a: jnp.broadcast_to(a, (4, *jnp.shape(a))), con)

    def traced(draws, y):
        def one(d):
            tr = trace(substitute(local_level, data=d)).get_trace(y)
            return {n: (s["value"], s["log_prob"]) for n, s in tr.items()}
        return jax.vmap(one)(draws)

    _assert_linear(traced, draws, jnp.zeros(T))
    _assert_linear(lambda k, y: trace(seed(hmm, k)).get_trace(y)["z"]["value"],
                   jax.random.PRNGKey(0), jnp.zeros(T))


def test_loop_length_check_finds_per_step_copies():
    """The check itself: the gradient of a loop that overwrites rows of a buffer as long as
    the loop (what `trace` did) copies the buffer at each step."""
    def overwritten(theta, y):
        def step(c, y_t):
            buf, i = c
            row = jax.lax.dynamic_slice(buf, (i,), (1,))  # read while written: copied
            buf = jax.lax.dynamic_update_slice(buf, row * 0 + (y_t - theta) ** 2, (i,))
            return (buf, i + 1), None
        return jax.lax.scan(step, (jnp.zeros(T), 0), y)[0][0].sum()

    text = jax.jit(jax.grad(overwritten)).lower(1.0, jnp.zeros(T)).compile().as_text()
    assert per_step_work(text, T)
