"""A catalogue of bad input across effppl's public API: each case raises an effppl error (or a
builtin the API documents) whose message names the argument or site at fault, never a raw JAX or
pytree error, never a hang, never a silently wrong number.

One row per bad input: `(call, error type, fragments the message must hold)`. Every case runs
under a time bound (`_bounded`), so a case that would hang fails instead. Models are tiny and
module-level (compiled functions are cached by model object), MCMC settings minimal; most cases
fail before anything compiles.
"""

import contextlib
import io
import os
import re
import signal

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import effppl
from effppl import EffpplError, SiteError, handlers
from effppl import distributions as dist
from effppl import effects as fx
from effppl.infer import (
    HMC,
    MCMC,
    NUTS,
    SVI,
    ELBOError,
    InferDiscreteError,
    InitializationError,
    KernelSettingsError,
    MCMCError,
    OptimizerError,
    Predictive,
    PredictiveError,
    RenyiELBO,
    SVIError,
    Trace_ELBO,
    autoguide,
    infer_discrete,
    init_to_median,
    init_to_uniform,
    init_to_value,
    log_likelihood,
)
from effppl.infer.autoguide import AutoGuideError
from effppl.infer.util import compute_log_probs, initialize_model

_SECONDS = 60  # per case; the whole catalogue runs in well under a minute


@pytest.fixture(autouse=True)
def _bounded():
    """Fail a case that runs longer than `_SECONDS` instead of letting it hang the suite."""
    if not hasattr(signal, "SIGALRM"):
        yield
        return

    def expire(*_):
        raise TimeoutError(f"a bad-input case ran longer than {_SECONDS} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(_SECONDS)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _float():
    return jnp.result_type(float)


Y3 = jnp.array([0.5, -0.2, 1.1])
KEY = jax.random.PRNGKey(0)


# ------------------------------------------------------------------------------- models

def model(y=None):
    mu = effppl.sample("mu", dist.Normal(0.0, 1.0))
    effppl.sample("y", dist.Normal(mu, 1.0), obs=y)


def plated(y):
    mu = effppl.sample("mu", dist.Normal(0.0, 1.0))
    with effppl.plate("data", 3):
        effppl.sample("y", dist.Normal(mu, 1.0), obs=y)


def masked_obs(obs_mask):
    def m(y):
        mu = effppl.sample("mu", dist.Normal(0.0, 1.0))
        with effppl.plate("data", 3):
            effppl.sample("y", dist.Normal(mu, 1.0), obs=y, obs_mask=obs_mask)
    return m


def int_site_name(y):
    mu = effppl.sample(3, dist.Normal(0.0, 1.0))
    effppl.sample("y", dist.Normal(mu, 1.0), obs=y)


def empty_site_name():
    effppl.sample("", dist.Normal(0.0, 1.0))


def tuple_deterministic_name():
    effppl.deterministic(("a",), 1.0)


def int_factor_name():
    effppl.factor(7, -1.0)


def duplicate_outside_and_in_cond(c):
    effppl.sample("x", dist.Normal(0.0, 1.0))
    jax.lax.cond(c, lambda: effppl.sample("x", dist.Normal(0.0, 1.0)), lambda: 0.0)


def cond_branches_of_different_shapes(c):
    jax.lax.cond(c, lambda: effppl.sample("x", dist.Normal(0.0, 1.0)),
                 lambda: effppl.sample("x", dist.Normal(jnp.zeros(2), 1.0)).sum())


def with_plate(size, name="p", dim=None):
    def m():
        with effppl.plate(name, size, dim=dim):
            effppl.sample("x", dist.Normal(0.0, 1.0))
    return m


def traced_plate_size(n):
    with effppl.plate("p", n):
        effppl.sample("x", dist.Normal(0.0, 1.0))


def nested_plates_on_one_dim():
    with effppl.plate("a", 2, dim=-1):
        with effppl.plate("b", 3, dim=-1):
            effppl.sample("x", dist.Normal(0.0, 1.0))


def invalid_traced_scale():
    s = effppl.sample("s", dist.Normal(0.0, 1.0))
    effppl.sample("y", dist.Normal(0.0, s, validate_args=True), obs=0.0)


def invalid_concrete_scale():
    effppl.sample("y", dist.Normal(0.0, -1.0, validate_args=True), obs=0.0)


def not_a_distribution():
    effppl.sample("x", 3.0)


_leaked = []


def _leaky():
    _leaked.append(effppl.sample("mu", dist.Normal(0.0, 1.0)))


def uses_a_leaked_tracer(y):
    mu = effppl.sample("mu", dist.Normal(0.0, 1.0))
    with effppl.plate("data", 3):
        effppl.sample("y", dist.Normal(mu + _leaked[-1], 1.0), obs=y)


_stored = []


def stores_and_reads_a_tracer(y):
    """Stores its latent the first time it is traced and reads it in later traces: the tracer of
    the first trace leaks into the next one of the same run."""
    mu = effppl.sample("mu", dist.Normal(0.0, 1.0))
    shift = _stored[0] if _stored else 0.0
    _stored.append(mu)
    with effppl.plate("data", 3):
        effppl.sample("y", dist.Normal(mu + shift, 1.0), obs=y)


def _storing_afresh(call):
    def run():
        _stored.clear()
        call()
    return run


def reads_its_data_shape(x):
    mu = effppl.sample("mu", dist.Normal(0.0, 1.0))
    with effppl.plate("data", x.shape[0]):
        effppl.sample("y", dist.Normal(mu, 1.0), obs=x)


def _leak_then(call):
    def run():
        handlers.trace(handlers.seed(_leaky, 0)).get_trace()  # stores a tracer in `_leaked`
        call()
    return run


def _with_state(mcmc, state):
    mcmc.post_warmup_state = state
    return mcmc


def _mcmc(m=plated, **kw):
    return MCMC(NUTS(m), num_warmup=2, num_samples=2, progress_bar=False, **kw)


# ------------------------------------------------------------------------------- effects

_get = fx.Operation("get", out=lambda: jax.ShapeDtypeStruct((), _float()))
_put = fx.Operation("put", out=lambda x: ())


def _get_body():
    return _get()


def _handled(body=_get_body, params=(), clauses=None, ret=None):
    clauses = {_get: lambda p, resume: resume(p, jnp.zeros((), _float()))} \
        if clauses is None else clauses
    return lambda: fx.handle(body, params=params, clauses=clauses, ret=ret)()


def _op_performed(op, *args):
    clauses = {op: lambda p, *a, resume: resume(p, 0.0)}
    return lambda: fx.handle(lambda: op(*args), clauses=clauses)()


EFFECTS = [
    pytest.param(lambda: fx.Operation("op", out=3), TypeError, ["Operation", "out"],
                 id="Operation-out-not-callable"),
    pytest.param(_op_performed(fx.Operation("op", out=lambda: "float")), TypeError,
                 ["op", "out", "ShapeDtypeStruct"], id="Operation-out-returns-a-str"),
    pytest.param(_op_performed(fx.Operation("op", out=lambda x: ())), TypeError,
                 ["op", "out"], id="Operation-out-wrong-arity"),
    pytest.param(lambda: fx.Operation(3, out=lambda: ()), TypeError, ["Operation", "name"],
                 id="Operation-name-not-a-str"),
    pytest.param(lambda: fx.Operation("op", out=lambda: (), batch_rule=1), TypeError,
                 ["batch_rule"], id="Operation-batch_rule-not-callable"),
    pytest.param(_op_performed(_put, "abc"), TypeError, ["put", "argument", "str"],
                 id="perform-with-a-str-argument"),
    pytest.param(lambda: _get(), fx.UnhandledEffectError, ["get"], id="perform-outside-a-handler"),
    pytest.param(_handled(body=3), TypeError, ["handle", "body"], id="handle-body-not-callable"),
    pytest.param(_handled(params="abc"), TypeError, ["handle", "params", "str"],
                 id="handle-params-a-str"),
    pytest.param(_handled(params={"p": object()}), TypeError, ["handle", "params", "object"],
                 id="handle-params-an-object"),
    pytest.param(_handled(clauses={_get: 3}), TypeError, ["clauses"], id="clause-not-callable"),
    pytest.param(_handled(clauses={"get": lambda p, resume: resume(p, 0.0)}), TypeError,
                 ["clauses", "Operation"], id="clause-key-not-an-Operation"),
    pytest.param(_handled(clauses={_get: lambda p: p}), TypeError, ["get", "resume"],
                 id="clause-wrong-signature"),
    pytest.param(_handled(clauses={_get: lambda p, resume: resume(p, jnp.zeros(3))}), TypeError,
                 ["get", "resumed with a value", "[3]"], id="resume-value-wrong-shape"),
    pytest.param(_handled(clauses={_get: lambda p, resume: resume(p, 1j)}), TypeError,
                 ["get", "resumed with a value", "complex"], id="resume-value-wrong-dtype"),
    pytest.param(_handled(clauses={_get: lambda p, resume: resume(p, "x")}), TypeError,
                 ["get", "resume", "str"], id="resume-value-a-str"),
    pytest.param(_handled(params=jnp.zeros(()), clauses={_get: lambda p, resume: resume(
        jnp.zeros(2), 0.0)}), TypeError, ["get", "parameters"], id="resume-params-wrong-shape"),
    pytest.param(_handled(clauses={_get: lambda p, resume: resume(p)}), TypeError,
                 ["get", "resume", "value"], id="resume-without-a-value"),
    pytest.param(_handled(clauses={_get: lambda p, resume: "done"}), TypeError,
                 ["get", "returned"], id="clause-returns-a-str"),
    pytest.param(_handled(ret=3), TypeError, ["handle", "ret"], id="ret-not-callable"),
    pytest.param(_handled(ret=lambda r: r), TypeError, ["ret", "ret(params, result)"],
                 id="ret-wrong-signature"),
    pytest.param(lambda: fx.eliminate(3), TypeError, ["eliminate", "callable"],
                 id="eliminate-not-callable"),
    pytest.param(lambda: fx.make_jaxpr("f"), TypeError, ["make_jaxpr", "callable"],
                 id="make_jaxpr-not-callable"),
    pytest.param(lambda: _get(unhashable=[1]), TypeError, ["get", "hashable"],
                 id="perform-unhashable-static"),
]


# ------------------------------------------------------------------------------- PPL

def _traced(m, *args):
    return lambda: handlers.trace(handlers.seed(m, 0)).get_trace(*args)


PPL = [
    pytest.param(lambda: _mcmc(int_site_name).run(KEY, Y3), SiteError, ["site name", "3", "int"],
                 id="site-name-an-int-under-MCMC"),
    pytest.param(_traced(int_site_name, Y3), SiteError, ["site name", "3"],
                 id="site-name-an-int-under-trace"),
    pytest.param(_traced(empty_site_name), SiteError, ["site name", "empty"],
                 id="site-name-empty"),
    pytest.param(_traced(tuple_deterministic_name), SiteError, ["deterministic", "site name"],
                 id="deterministic-name-a-tuple"),
    pytest.param(_traced(int_factor_name), SiteError, ["factor", "site name", "7"],
                 id="factor-name-an-int"),
    pytest.param(_traced(lambda: effppl.deterministic("d", "abc")), SiteError,
                 ["deterministic('d'", "str"], id="deterministic-value-a-str"),
    pytest.param(_traced(lambda: effppl.factor("f", [1.0, [2.0]])), SiteError,
                 ["factor('f'", "ragged"], id="factor-value-ragged"),
    pytest.param(_traced(lambda: effppl.sample("x", dist.Normal(0.0, 1.0), sample_shape=3)),
                 SiteError, ["'x'", "sample_shape", "3"], id="sample_shape-an-int"),
    pytest.param(_traced(lambda: effppl.sample("x", dist.Normal(0.0, 1.0), sample_shape=(-1,))),
                 SiteError, ["'x'", "sample_shape", "(-1,)"], id="sample_shape-negative"),
    pytest.param(_traced(lambda: effppl.sample("x", dist.Normal(0.0, 1.0), infer=["enum"])),
                 SiteError, ["'x'", "infer", "list"], id="infer-not-a-dict"),
    pytest.param(_traced(lambda: effppl.sample("x", dist.Normal(0.0, 1.0), infer={"a": [1]})),
                 SiteError, ["'x'", "infer", "hashable"], id="infer-unhashable-value"),
    pytest.param(_traced(masked_obs("abc"), Y3), SiteError, ["'y'", "obs_mask", "str"],
                 id="obs_mask-a-str"),
    pytest.param(_traced(masked_obs(jnp.ones(3)), Y3), SiteError, ["'y'", "obs_mask", "float"],
                 id="obs_mask-not-bool"),
    pytest.param(_traced(masked_obs(jnp.ones(3, bool)), None), SiteError,
                 ["'y'", "obs_mask", "obs"], id="obs_mask-without-obs"),
    pytest.param(lambda: handlers.trace(effppl.prng_key).get_trace(), fx.UnhandledEffectError, ["prng_key", "seed"],
                 id="prng_key-in-a-model-without-seed"),
    pytest.param(_traced(duplicate_outside_and_in_cond, True), SiteError,
                 ["Duplicate site name `x`"], id="site-name-duplicated-in-a-cond-branch"),
    pytest.param(_traced(cond_branches_of_different_shapes, True), SiteError,
                 ["`x`", "(2,)", "()"], id="cond-branches-site-of-two-shapes"),
    pytest.param(_traced(not_a_distribution), SiteError, ["'x'", "Distribution", "float"],
                 id="sample-not-a-distribution"),
    pytest.param(_traced(plated, jnp.ones(4)), SiteError, ["'y'", "obs", "(4,)"],
                 id="obs-wrong-shape"),
    pytest.param(_traced(plated, jnp.ones((3, 1))), SiteError,
                 ["'y'", "obs", "(3, 1)", "(3,)", "(3, 3)"], id="obs-broadcasts-beyond-both"),
    pytest.param(_traced(model, "abc"), SiteError, ["'y'", "obs", "str"], id="obs-a-str"),
    pytest.param(_traced(lambda: model(np.array([object()]))), SiteError, ["'y'", "obs", "object"],
                 id="obs-object-dtype"),
    pytest.param(_traced(model, np.array([object()])), TypeError, ["args[0]", "object"],
                 id="handler-argument-an-object-array"),
    pytest.param(_traced(model, 1j), SiteError, ["'y'", "obs", "complex"],
                 id="obs-complex-for-a-real-site"),
    pytest.param(_traced(model, [[1.0], [2.0, 3.0]]), SiteError, ["'y'", "obs"],
                 id="obs-ragged-list"),
    pytest.param(_traced(invalid_concrete_scale), ValueError, ["scale"],
                 id="validate_args-invalid-concrete-parameter"),
    pytest.param(lambda: effppl.log_density(invalid_traced_scale, (), {}, {"s": -1.0}), SiteError,
                 ["`y`", "scale", "validate_args"], id="validate_args-invalid-traced-parameter"),
    pytest.param(lambda: _mcmc(invalid_traced_scale, num_chains=1).run(KEY), SiteError,
                 ["`y`", "scale", "validate_args"],
                 id="validate_args-invalid-parameter-under-MCMC"),
    pytest.param(lambda: Predictive(invalid_traced_scale, {"s": jnp.array([1.0, -1.0])})(KEY),
                 SiteError, ["`y`", "scale", "validate_args"],
                 id="validate_args-invalid-parameter-under-Predictive"),
    pytest.param(_traced(with_plate(0)), SiteError, ["plate", "'p'", "size", "0"],
                 id="plate-size-0"),
    pytest.param(_traced(with_plate(-2)), SiteError, ["plate", "'p'", "size", "-2"],
                 id="plate-size-negative"),
    pytest.param(_traced(with_plate(2.5)), SiteError, ["plate", "'p'", "size", "2.5"],
                 id="plate-size-a-float"),
    pytest.param(_traced(with_plate("3")), SiteError, ["plate", "'p'", "size", "'3'"],
                 id="plate-size-a-str"),
    pytest.param(_traced(with_plate(2, name=3)), SiteError, ["plate", "name", "3"],
                 id="plate-name-an-int"),
    pytest.param(_traced(with_plate(2, dim=0)), SiteError, ["plate", "dim=0", "negative"],
                 id="plate-dim-not-negative"),
    pytest.param(_traced(with_plate(2, dim=-1.5)), SiteError, ["plate", "dim=-1.5", "int"],
                 id="plate-dim-a-float"),
    pytest.param(_traced(traced_plate_size, jnp.int32(3)), SiteError,
                 ["plate", "'p'", "size", "static"], id="plate-size-traced"),
    pytest.param(_traced(nested_plates_on_one_dim), SiteError, ["'b'", "dim -1", "'a'"],
                 id="nested-plates-on-one-dim"),
    pytest.param(lambda: handlers.trace(model).get_trace(), SiteError, ["`mu`", "no value", "seed"],
                 id="latent-site-without-seed"),
]


# ------------------------------------------------------------------------------- handlers

def _seeded(h):
    return lambda: handlers.seed(h, 0)()


HANDLERS = [
    pytest.param(lambda: effppl.log_density(model, (1.0,), {}, {"mu": "x"}), SiteError,
                 ["`mu`", "str"], id="log_density-value-a-str"),
    pytest.param(_seeded(handlers.substitute(model, {"mu": object()})), SiteError,
                 ["`mu`", "object"], id="substitute-value-an-object"),
    pytest.param(_seeded(handlers.substitute(model, {"mu": [[1.0], [2.0, 3.0]]})), SiteError,
                 ["`mu`", "ragged"], id="substitute-value-ragged"),
    pytest.param(_seeded(handlers.substitute(plated, {"mu": jnp.zeros(2)})), TypeError,
                 ["plated"], id="substitute-missing-model-argument"),
    pytest.param(lambda: handlers.substitute(model, 3), TypeError,
                 ["substitute", "data", "int"], id="substitute-data-not-a-dict"),
    pytest.param(lambda: handlers.substitute(model, substitute_fn=3), TypeError,
                 ["substitute", "substitute_fn"], id="substitute_fn-not-callable"),
    pytest.param(lambda: handlers.substitute(model, {3: 1.0}), TypeError,
                 ["substitute", "site name", "3"], id="substitute-key-not-a-str"),
    pytest.param(lambda: handlers.trace(handlers.seed(handlers.condition(model, {"y": "a"}), 0))
                 .get_trace(), SiteError, ["`y`", "str"], id="condition-value-a-str"),
    pytest.param(_seeded(handlers.condition(model, {"y": 1j})), SiteError,
                 ["`y`", "complex"], id="condition-value-complex"),
    pytest.param(_seeded(handlers.do(model, {"mu": "a"})), SiteError, ["`mu`", "str"],
                 id="do-value-a-str"),
    pytest.param(lambda: handlers.replay(model, {"mu": 0.0}), TypeError,
                 ["replay", "trace", "dict"], id="replay-trace-not-a-trace"),
    pytest.param(lambda: handlers.condition(model, condition_fn=3), TypeError,
                 ["condition", "condition_fn"], id="condition_fn-not-callable"),
    pytest.param(lambda: handlers.unconstrain_fn(model, (1.0,), {}, {"mu": "a"}), SiteError,
                 ["unconstrain_fn", "`mu`", "str"], id="unconstrain_fn-value-a-str"),
    pytest.param(lambda: handlers.mask(mask=1.0), TypeError, ["mask", "bool", "float"],
                 id="mask-context-a-float"),
    pytest.param(lambda: handlers.seed(model, "0"), TypeError, ["seed", "rng_seed", "str"],
                 id="seed-key-a-str"),
    pytest.param(lambda: handlers.seed(model, 1.5), TypeError, ["seed", "rng_seed", "float"],
                 id="seed-key-a-float"),
    pytest.param(lambda: handlers.seed(model, jax.random.split(KEY, 2)), TypeError,
                 ["seed", "rng_seed", "batch"], id="seed-key-a-batch-of-keys"),
    pytest.param(lambda: handlers.seed(3, 0), TypeError, ["seed", "callable"],
                 id="seed-model-not-callable"),
    pytest.param(lambda: handlers.block(model, hide="mux"), TypeError, ["block", "hide", "list"],
                 id="block-hide-a-str"),
    pytest.param(lambda: handlers.mask(model, mask="yes"), TypeError, ["mask", "bool"],
                 id="mask-not-bool"),
    pytest.param(lambda: handlers.scale(model, scale="2"), TypeError, ["scale", "'2'"],
                 id="scale-a-str"),
    pytest.param(lambda: handlers.scale(model, scale=-1.0), ValueError, ["scale", "positive"],
                 id="scale-negative"),
    pytest.param(lambda: effppl.log_density(model, jnp.ones(1), {}, {"mu": 0.0}), TypeError,
                 ["log_density", "model_args", "tuple"], id="log_density-args-not-a-tuple"),
    pytest.param(lambda: effppl.log_density(model, (), [1], {"mu": 0.0}), TypeError,
                 ["log_density", "model_kwargs", "dict"], id="log_density-kwargs-a-list"),
    pytest.param(lambda: effppl.log_density(model, (), {}, 0.0), TypeError,
                 ["log_density", "params", "dict"], id="log_density-params-not-a-dict"),
    pytest.param(_leak_then(lambda: effppl.log_density(uses_a_leaked_tracer, (Y3,), {},
                                                       {"mu": 0.0})),
                 fx.LeakedTracerError, ["uses_a_leaked_tracer", "leaked"],
                 id="log_density-model-uses-a-leaked-tracer"),
    pytest.param(lambda: handlers.potential_energy(model, (1.0,), {}, {"mu": jnp.zeros(2)}),
                 SiteError, ["`mu`", "(2,)"], id="potential_energy-value-wrong-shape"),
    pytest.param(lambda: handlers.potential_energy(model, (1.0,), {}, {"mu": "x"}), SiteError,
                 ["potential_energy", "`mu`", "str"], id="potential_energy-value-a-str"),
    pytest.param(lambda: handlers.constrain_fn(model, (1.0,), {}, {"mu": None}), SiteError,
                 ["constrain_fn", "`mu`", "NoneType"], id="constrain_fn-value-None"),
    pytest.param(lambda: handlers.potential_energy(model, 1.0, {}, {"mu": 0.0}), TypeError,
                 ["potential_energy", "model_args"], id="potential_energy-args-not-a-tuple"),
]


# ------------------------------------------------------------------------------- inference

INFERENCE = [
    pytest.param(lambda: NUTS(3), KernelSettingsError, ["NUTS", "model"],
                 id="NUTS-model-not-callable"),
    pytest.param(lambda: NUTS(model, step_size="big"), KernelSettingsError,
                 ["NUTS", "step_size", "'big'"], id="NUTS-step_size-a-str"),
    pytest.param(lambda: NUTS(model, step_size=-0.1), KernelSettingsError,
                 ["NUTS", "step_size"], id="NUTS-step_size-negative"),
    pytest.param(lambda: NUTS(model, target_accept_prob=None), KernelSettingsError,
                 ["NUTS", "target_accept_prob", "None"], id="NUTS-target_accept_prob-None"),
    pytest.param(lambda: NUTS(model, target_accept_prob=1.5), KernelSettingsError,
                 ["NUTS", "target_accept_prob"], id="NUTS-target_accept_prob-above-1"),
    pytest.param(lambda: NUTS(model, max_tree_depth=0), KernelSettingsError,
                 ["NUTS", "max_tree_depth"], id="NUTS-max_tree_depth-0"),
    pytest.param(lambda: NUTS(model, init_strategy="uniform"), KernelSettingsError,
                 ["NUTS", "init_strategy"], id="NUTS-init_strategy-a-str"),
    pytest.param(lambda: HMC(model, num_steps=2.0), KernelSettingsError, ["HMC", "num_steps"],
                 id="HMC-num_steps-a-float"),
    pytest.param(lambda: MCMC(model, num_warmup=1, num_samples=1), MCMCError, ["kernel"],
                 id="MCMC-kernel-a-model"),
    pytest.param(lambda: MCMC(NUTS(model), num_warmup=-1, num_samples=1), MCMCError,
                 ["num_warmup", "-1"], id="MCMC-num_warmup-negative"),
    pytest.param(lambda: MCMC(NUTS(model), num_warmup=2.5, num_samples=1), MCMCError,
                 ["num_warmup", "2.5"], id="MCMC-num_warmup-a-float"),
    pytest.param(lambda: MCMC(NUTS(model), num_warmup=1, num_samples=0), MCMCError,
                 ["num_samples", "0"], id="MCMC-num_samples-0"),
    pytest.param(lambda: MCMC(NUTS(model), num_warmup=1, num_samples=1, num_chains=0), MCMCError,
                 ["num_chains", "0"], id="MCMC-num_chains-0"),
    pytest.param(lambda: MCMC(NUTS(model), num_warmup=1, num_samples=2, thinning=3), MCMCError,
                 ["thinning", "3"], id="MCMC-thinning-above-num_samples"),
    pytest.param(lambda: MCMC(NUTS(model), num_warmup=1, num_samples=1, chain_method="pmap"),
                 MCMCError, ["chain_method", "pmap", "parallel"], id="MCMC-chain_method-unknown"),
    pytest.param(lambda: MCMC(NUTS(model), num_warmup=1, num_samples=1, progress_bar="no"),
                 MCMCError, ["progress_bar", "'no'"], id="MCMC-progress_bar-a-str"),
    pytest.param(lambda: _mcmc().run(0, Y3), MCMCError, ["run", "PRNG key", "int"],
                 id="MCMC-run-key-an-int"),
    pytest.param(lambda: _mcmc().run(KEY, "abc"), effppl.infer.ModelArgumentError,
                 ["run", "argument 0", "`y`", "str"], id="MCMC-run-data-a-str"),
    pytest.param(lambda: _mcmc().run(KEY, object()), effppl.infer.ModelArgumentError,
                 ["run", "argument 0", "`y`", "object"], id="MCMC-run-data-an-object"),
    pytest.param(lambda: _mcmc().run(KEY, [[1.0, 2.0], [3.0]]), effppl.infer.ModelArgumentError,
                 ["run", "argument 0", "`y`", "ragged"], id="MCMC-run-data-a-ragged-list"),
    pytest.param(lambda: _mcmc().run(KEY, np.array(["a", "b", "c"])),
                 effppl.infer.ModelArgumentError, ["run", "argument 0", "`y`", "<U1"],
                 id="MCMC-run-data-a-str-array"),
    pytest.param(lambda: _mcmc().run(KEY, np.array([1.0, None, 2.0])),
                 effppl.infer.ModelArgumentError, ["run", "argument 0", "`y`", "object"],
                 id="MCMC-run-data-an-object-array"),
    pytest.param(lambda: _mcmc().run(KEY, y={"a": [1]}), SiteError, ["'y'", "obs", "dict"],
                 id="MCMC-run-data-a-dict-of-lists"),
    pytest.param(lambda: _mcmc().run(KEY, [1.0, 2.0]), SiteError, ["'y'", "obs", "(2,)"],
                 id="MCMC-run-data-a-list-of-wrong-length"),
    pytest.param(lambda: _mcmc().run(KEY, Y3, z=3), TypeError, ["plated", "'z'"],
                 id="MCMC-run-unknown-keyword"),
    pytest.param(lambda: _mcmc().run(KEY), TypeError, ["plated", "'y'"],
                 id="MCMC-run-missing-argument"),
    pytest.param(lambda: _mcmc().run(KEY, Y3, extra_fields=("foo",)), MCMCError,
                 ["extra_fields", "foo"], id="MCMC-run-unknown-extra_field"),
    pytest.param(lambda: _mcmc().run(KEY, Y3, init_params={"mu": jnp.zeros(3)}),
                 InitializationError, ["init_params", "`mu`", "(3,)"],
                 id="MCMC-run-init_params-wrong-shape"),
    pytest.param(lambda: _mcmc().run(KEY, Y3, init_params={"mu": "a"}), InitializationError,
                 ["init_params", "`mu`", "str"], id="MCMC-run-init_params-a-str"),
    pytest.param(lambda: _mcmc().run(KEY, Y3, init_params={"sigma": 0.0}), InitializationError,
                 ["init_params", "mu", "sigma"], id="MCMC-run-init_params-unknown-site"),
    pytest.param(_storing_afresh(lambda: _mcmc(stores_and_reads_a_tracer).run(KEY, Y3)),
                 fx.LeakedTracerError, ["MCMC.run", "stores_and_reads_a_tracer", "leaked"],
                 id="MCMC-run-model-reads-a-tracer-its-own-earlier-trace-stored"),
    # Predictive traces the model once per call: the second call reads the first one's tracer
    pytest.param(_storing_afresh(lambda: [Predictive(stores_and_reads_a_tracer, num_samples=2)(
                     KEY, Y3) for _ in range(2)]),
                 fx.LeakedTracerError, ["stores_and_reads_a_tracer", "leaked"],
                 id="Predictive-model-reads-a-tracer-its-own-earlier-trace-stored"),
    pytest.param(lambda: _mcmc(reads_its_data_shape).run(KEY, [1.0, 2.0, 3.0]),
                 effppl.infer.ModelArgumentError, ["run", "argument 0", "`x`", "list"],
                 id="MCMC-run-list-data-whose-shape-the-model-reads"),
    pytest.param(lambda: _mcmc(reads_its_data_shape).run(KEY, "abc"),
                 effppl.infer.ModelArgumentError, ["run", "argument 0", "`x`", "str"],
                 id="MCMC-run-str-data-whose-shape-the-model-reads"),
    pytest.param(_leak_then(lambda: _mcmc(uses_a_leaked_tracer).run(KEY, Y3)),
                 fx.LeakedTracerError, ["uses_a_leaked_tracer", "leaked"],
                 id="MCMC-run-model-uses-a-leaked-tracer"),
    pytest.param(lambda: _mcmc().get_samples(), MCMCError, ["get_samples", "run"],
                 id="MCMC-get_samples-before-run"),
    pytest.param(lambda: Predictive(3, num_samples=2), PredictiveError, ["Predictive", "model"],
                 id="Predictive-model-not-callable"),
    pytest.param(lambda: Predictive(model), PredictiveError, ["num_samples"],
                 id="Predictive-no-samples-no-num_samples"),
    pytest.param(lambda: Predictive(model, num_samples=0), PredictiveError, ["num_samples=0"],
                 id="Predictive-num_samples-0"),
    pytest.param(lambda: Predictive(model, {"mu": "abc"}), PredictiveError,
                 ["posterior_samples", "`mu`", "str"], id="Predictive-samples-a-str"),
    pytest.param(lambda: Predictive(model, {"mu": [1.0, [2.0]]}), PredictiveError,
                 ["posterior_samples", "`mu`", "ragged"], id="Predictive-samples-ragged"),
    pytest.param(lambda: Predictive(model, {"mu": jnp.zeros(3)}, batch_ndims="1"),
                 PredictiveError, ["batch_ndims", "'1'"], id="Predictive-batch_ndims-a-str"),
    pytest.param(lambda: Predictive(model, {"mu": jnp.zeros(3)}, batch_ndims=-1),
                 PredictiveError, ["batch_ndims", "-1"], id="Predictive-batch_ndims-negative"),
    pytest.param(lambda: Predictive(model, {"mu": jnp.zeros(3), "y": jnp.zeros(4)}),
                 PredictiveError, ["`y`", "(4,)", "(3,)"], id="Predictive-batch-shapes-differ"),
    pytest.param(lambda: Predictive(model, num_samples=2, return_sites="y"), PredictiveError,
                 ["return_sites", "'y'"], id="Predictive-return_sites-a-str"),
    pytest.param(lambda: Predictive(model, num_samples=2, return_sites=["z"])(KEY),
                 PredictiveError, ["return_sites", "z"], id="Predictive-return_sites-unknown"),
    pytest.param(lambda: Predictive(model, {"mux": jnp.zeros(3)})(KEY), PredictiveError,
                 ["posterior_samples", "mux"], id="Predictive-samples-unknown-site"),
    pytest.param(lambda: Predictive(model, num_samples=2)(0), PredictiveError,
                 ["PRNG key"], id="Predictive-key-an-int"),
    pytest.param(lambda: Predictive(model, num_samples=2)(KEY, "abc"),
                 effppl.infer.ModelArgumentError, ["Predictive", "argument 0", "`y`", "str"],
                 id="Predictive-data-a-str"),
    pytest.param(lambda: log_likelihood(model, [0.0], 1.0), PredictiveError,
                 ["log_likelihood", "posterior_samples", "list"],
                 id="log_likelihood-samples-not-a-dict"),
    pytest.param(lambda: log_likelihood(model, {"mu": jnp.zeros(3)}, 1.0, batch_ndims=5),
                 PredictiveError, ["`mu`", "5 batch"], id="log_likelihood-batch_ndims-too-many"),
    pytest.param(lambda: initialize_model("0", plated, model_args=(Y3,)), TypeError,
                 ["initialize_model", "rng_key", "str"], id="initialize_model-key-a-str"),
    pytest.param(lambda: initialize_model(KEY, plated, model_args=Y3[:1]), TypeError,
                 ["initialize_model", "model_args", "tuple"],
                 id="initialize_model-args-not-a-tuple"),
    pytest.param(lambda: initialize_model(KEY, plated, model_args=("abc",)),
                 effppl.infer.ModelArgumentError, ["initialize_model", "argument 0", "`y`", "str"],
                 id="initialize_model-data-a-str"),
    pytest.param(lambda: initialize_model(KEY, 3), TypeError, ["initialize_model", "model"],
                 id="initialize_model-model-not-callable"),
    pytest.param(lambda: initialize_model(KEY, plated, model_args=(Y3,), init_strategy="median"),
                 TypeError, ["initialize_model", "init_strategy", "'median'"],
                 id="initialize_model-init_strategy-a-str"),
    pytest.param(lambda: compute_log_probs(model, 1.0, {}, {"mu": 0.0}), TypeError,
                 ["compute_log_probs", "model_args"], id="compute_log_probs-args-not-a-tuple"),
    pytest.param(lambda: init_to_value(3.0), InitializationError, ["init_to_value", "dict"],
                 id="init_to_value-not-a-dict"),
    pytest.param(lambda: init_to_value({"mu": "a"}), InitializationError,
                 ["init_to_value", "`mu`", "str"], id="init_to_value-value-a-str"),
    pytest.param(lambda: init_to_uniform(radius="a"), ValueError, ["init_to_uniform", "radius",
                                                                    "'a'"],
                 id="init_to_uniform-radius-a-str"),
    pytest.param(lambda: init_to_median(num_samples="a"), ValueError,
                 ["init_to_median", "num_samples", "'a'"], id="init_to_median-num_samples-a-str"),
    pytest.param(lambda: log_likelihood(model, {"mu": "abc"}, 1.0), PredictiveError,
                 ["log_likelihood", "`mu`", "str"], id="log_likelihood-samples-a-str"),
    pytest.param(lambda: Predictive(model, num_samples=2, return_sites=[3]), PredictiveError,
                 ["return_sites", "[3]"], id="Predictive-return_sites-not-names"),
    pytest.param(lambda: _mcmc().to_arviz(), MCMCError, ["to_arviz", "run"],
                 id="MCMC-to_arviz-before-run"),
    pytest.param(lambda: _with_state(_mcmc(), 3).run(KEY, Y3), MCMCError,
                 ["post_warmup_state", "MCMCState", "int"], id="MCMC-post_warmup_state-an-int"),
]


# ------------------------------------------------------------------------------- SVI

def guide(y):
    loc = effppl.param("loc", 0.0)
    effppl.sample("mu", dist.Normal(loc, 1.0))


def _svi(g=guide, loss=None, **kw):
    import optax
    return SVI(plated, g, optax.adam(0.1), Trace_ELBO() if loss is None else loss, **kw)


def in_a_scan(y):
    def step(c, y_t):
        x = effppl.sample("x", dist.Normal(c, 1.0))
        effppl.sample("y", dist.Normal(x, 1.0), obs=y_t)
        return x, None
    jax.lax.scan(step, 0.0, y)


def in_a_scan_with_unused(y, unused=None):
    in_a_scan(y)


def _svi_scan():
    import optax

    from effppl.infer.autoguide import AutoDelta
    return SVI(in_a_scan, AutoDelta(in_a_scan), optax.adam(0.1), Trace_ELBO())


def _param(*args, **kwargs):
    return _traced(lambda: effppl.param(*args, **kwargs))


SVI_CASES = [
    pytest.param(_param(3, 0.0), SiteError, ["param", "site name", "3"], id="param-name-an-int"),
    pytest.param(_param("p", "abc"), SiteError, ["param('p'", "init_value", "str"],
                 id="param-init_value-a-str"),
    pytest.param(_param("p"), SiteError, ["param('p')", "init_value"],
                 id="param-without-init_value"),
    pytest.param(_param("p", 1.0, constraint="positive"), SiteError,
                 ["param('p'", "constraint", "'positive'"], id="param-constraint-a-str"),
    pytest.param(_param("p", 1.0, event_dim="a"), SiteError, ["param('p'", "event_dim", "'a'"],
                 id="param-event_dim-a-str"),
    pytest.param(lambda: SVI(plated, guide, "adam", Trace_ELBO()), OptimizerError,
                 ["SVI", "optim", "str"], id="SVI-optim-a-str"),
    pytest.param(lambda: _svi(loss="elbo"), SVIError, ["SVI", "loss", "ELBO", "str"],
                 id="SVI-loss-a-str"),
    pytest.param(lambda: _svi(loss=Trace_ELBO), SVIError, ["SVI", "class", "Trace_ELBO()"],
                 id="SVI-loss-the-class"),
    pytest.param(lambda: _svi(g=3), SVIError, ["SVI", "guide", "int"],
                 id="SVI-guide-not-callable"),
    pytest.param(lambda: _svi(z={1}).init(KEY, Y3), effppl.infer.UnhashableArgumentError,
                 ["SVI", "hashable", "set"], id="SVI-static-kwarg-unhashable"),
    pytest.param(lambda: _svi().run(KEY, 0, Y3), SVIError, ["run", "num_steps=0"],
                 id="SVI-run-num_steps-0"),
    pytest.param(lambda: _svi().run(KEY, 2.5, Y3), SVIError, ["run", "num_steps=2.5"],
                 id="SVI-run-num_steps-a-float"),
    pytest.param(lambda: _svi().run(KEY, True, Y3), SVIError, ["run", "num_steps=True"],
                 id="SVI-run-num_steps-a-bool"),
    pytest.param(lambda: _svi_scan().run(KEY, 2, [0.1, 2.0], progress_bar=False),
                 effppl.infer.ModelArgumentError,
                 ["SVI", "argument 0", "`y`", "Python list of numbers", "jnp.asarray"],
                 id="SVI-run-scan-data-a-list"),
    pytest.param(lambda: Predictive(in_a_scan, num_samples=2)(KEY, [0.1, 2.0]),
                 effppl.infer.ModelArgumentError,
                 ["Predictive", "argument 0", "`y`", "Python list of numbers", "jnp.asarray"],
                 id="Predictive-scan-data-a-list"),
    pytest.param(lambda: Predictive(in_a_scan, num_samples=2)(KEY, None),
                 effppl.infer.ModelArgumentError,
                 ["Predictive", "argument 0 (`y`)", "is None", "no values to scan over",
                  "length=T"], id="Predictive-scan-data-None"),
    pytest.param(lambda: _svi_scan().run(KEY, 2, None, progress_bar=False),
                 effppl.infer.ModelArgumentError,
                 ["SVI", "argument 0 (`y`)", "is None", "length=T"], id="SVI-run-scan-data-None"),
    pytest.param(lambda: Predictive(in_a_scan_with_unused, num_samples=2)(KEY, None, None),
                 effppl.infer.ModelArgumentError,
                 ["Predictive", "argument 0 (`y`), argument 1 (`unused`) are None",
                  "one of them may be what the scan reads", "length=T"],
                 id="Predictive-scan-data-None-two-None-arguments"),
    pytest.param(lambda: _svi().run("k", 2, Y3), SVIError, ["SVI", "PRNG key", "str"],
                 id="SVI-run-key-a-str"),
    pytest.param(lambda: _svi().run(KEY, 2, "abc", progress_bar=False),
                 effppl.infer.ModelArgumentError, ["SVI", "argument 0", "`y`", "str"],
                 id="SVI-run-data-a-str"),
    pytest.param(lambda: _svi().run(KEY, 2, [[1.0], [2.0, 3.0]], progress_bar=False),
                 effppl.infer.ModelArgumentError, ["SVI", "argument 0", "`y`", "ragged"],
                 id="SVI-run-data-a-ragged-list"),
    pytest.param(lambda: _svi().init(KEY, Y3, init_params={"lox": 0.0}), SVIError,
                 ["init_params", "lox", "loc"], id="SVI-init_params-unknown-param"),
    pytest.param(lambda: _svi().init(KEY, Y3, init_params={"loc": "a"}), SVIError,
                 ["init_params", "`loc`", "str"], id="SVI-init_params-a-str"),
    pytest.param(lambda: _svi().init(KEY, Y3, init_params={"loc": jnp.zeros(2)}), SVIError,
                 ["init_params", "`loc`", "(2,)", "()"], id="SVI-init_params-wrong-shape"),
    pytest.param(lambda: _svi().init(KEY, Y3, init_params=[1.0]), SVIError,
                 ["init_params", "dict", "list"], id="SVI-init_params-not-a-dict"),
    pytest.param(lambda: _svi().update(None, Y3), SVIError, ["update", "init"],
                 id="SVI-update-before-init"),
    pytest.param(lambda: Trace_ELBO(num_particles=0), ELBOError, ["Trace_ELBO", "num_particles"],
                 id="Trace_ELBO-num_particles-0"),
    pytest.param(lambda: RenyiELBO(alpha="a"), ELBOError, ["RenyiELBO", "alpha", "'a'"],
                 id="RenyiELBO-alpha-a-str"),
    pytest.param(lambda: RenyiELBO(alpha=1.0), ELBOError, ["RenyiELBO", "alpha=1", "Trace_ELBO"],
                 id="RenyiELBO-alpha-1"),
    pytest.param(lambda: autoguide.AutoNormal(3), AutoGuideError, ["AutoNormal", "model", "int"],
                 id="AutoNormal-model-not-callable"),
    pytest.param(lambda: autoguide.AutoNormal(plated, init_scale="a"), AutoGuideError,
                 ["AutoNormal", "init_scale", "'a'"], id="AutoNormal-init_scale-a-str"),
    pytest.param(lambda: autoguide.AutoDiagonalNormal(plated, init_scale=-1.0), AutoGuideError,
                 ["AutoDiagonalNormal", "init_scale", "-1.0"],
                 id="AutoDiagonalNormal-init_scale-negative"),
    pytest.param(lambda: autoguide.AutoNormal(plated, init_loc_fn="median"), AutoGuideError,
                 ["AutoNormal", "init_loc_fn", "'median'"], id="AutoNormal-init_loc_fn-a-str"),
    pytest.param(lambda: autoguide.AutoLowRankMultivariateNormal(plated, rank=0),
                 AutoGuideError, ["AutoLowRankMultivariateNormal", "rank=0"],
                 id="AutoLowRankMultivariateNormal-rank-0"),
    pytest.param(lambda: autoguide.AutoBatchedMultivariateNormal(plated, batch_ndim=0),
                 AutoGuideError, ["AutoBatchedMultivariateNormal", "batch_ndim=0"],
                 id="AutoBatchedMultivariateNormal-batch_ndim-0"),
    pytest.param(lambda: autoguide.AutoBatchedLowRankMultivariateNormal(plated, rank=0),
                 AutoGuideError, ["AutoBatchedLowRankMultivariateNormal", "rank=0"],
                 id="AutoBatchedLowRankMultivariateNormal-rank-0"),
    pytest.param(lambda: _svi(g=autoguide.AutoNormal(plated)).run(KEY, 2, "abc",
                                                                  progress_bar=False),
                 effppl.infer.ModelArgumentError, ["SVI", "argument 0", "`y`", "str"],
                 id="SVI-autoguide-data-a-str"),
    pytest.param(lambda: Predictive(plated, guide=3, num_samples=2), PredictiveError,
                 ["Predictive", "guide", "int"], id="Predictive-guide-not-callable"),
    pytest.param(lambda: Predictive(plated, guide=guide, params={"loc": "a"}, num_samples=2),
                 PredictiveError, ["Predictive", "`loc`", "params", "str"],
                 id="Predictive-params-a-str"),
]


# ------------------------------------------------------------------------------- enumeration

def mixture(y):
    w = effppl.sample("w", dist.Beta(2.0, 2.0))
    with effppl.plate("data", 3):
        z = effppl.sample("z", dist.Bernoulli(w), infer={"enumerate": "parallel"})
        effppl.sample("y", dist.Normal(jnp.where(z, 1.0, -1.0), 1.0), obs=y)


def enumerated_continuous():
    effppl.sample("x", dist.Normal(0.0, 1.0), infer={"enumerate": "parallel"})


def enumerated_sequentially():
    effppl.sample("z", dist.Bernoulli(0.5), infer={"enumerate": "sequential"})


ENUM_CASES = [
    pytest.param(lambda: handlers.config_enumerate(mixture, default="yes"), SiteError,
                 ["config_enumerate", "default='yes'", "parallel"],
                 id="config_enumerate-default-unknown"),
    pytest.param(lambda: handlers.config_enumerate(3), TypeError,
                 ["config_enumerate", "callable", "int"], id="config_enumerate-not-callable"),
    pytest.param(lambda: effppl.log_density(enumerated_continuous, (), {}, {"x": 0.0}),
                 SiteError, ["`x`", "enumeration", "Normal"], id="enumerate-a-continuous-site"),
    pytest.param(lambda: effppl.log_density(enumerated_sequentially, (), {}, {}), SiteError,
                 ["`z`", "'sequential'", "parallel"], id="enumerate-sequential"),
    pytest.param(lambda: handlers.enum(mixture, first_available_dim=0), SiteError,
                 ["enum", "first_available_dim=0", "negative"], id="enum-first_available_dim-0"),
    pytest.param(lambda: handlers.enum(3), TypeError, ["enum", "callable"],
                 id="enum-not-callable"),
    pytest.param(lambda: infer_discrete(mixture, temperature=2), InferDiscreteError,
                 ["infer_discrete", "temperature=2"], id="infer_discrete-temperature-2"),
    pytest.param(lambda: infer_discrete(mixture, temperature=1), InferDiscreteError,
                 ["infer_discrete", "rng_key"], id="infer_discrete-draws-without-key"),
    pytest.param(lambda: infer_discrete(mixture, temperature=1, rng_key="a"), TypeError,
                 ["infer_discrete", "rng_key", "str"], id="infer_discrete-key-a-str"),
    pytest.param(lambda: infer_discrete(3, temperature=0), TypeError,
                 ["infer_discrete", "callable", "int"], id="infer_discrete-not-callable"),
    pytest.param(lambda: _mcmc(mixture).run(KEY, "abc"), effppl.infer.ModelArgumentError,
                 ["MCMC.run", "argument 0", "`y`", "str"], id="MCMC-enumerated-data-a-str"),
    pytest.param(lambda: log_likelihood(mixture, {"w": jnp.full(2, 0.5)}, Y3), PredictiveError,
                 ["log_likelihood", "enumeration", "z"], id="log_likelihood-enumerated-model"),
    pytest.param(lambda: _mcmc(lambda: effppl.sample("z", dist.Poisson(2.0))).run(KEY),
                 MCMCError, ["`z`", "discrete", "finite"], id="MCMC-discrete-site-not-enumerable"),
]


# ------------------------------------------------------------------------------- harness CLI

class _CommandLineError(Exception):
    """Stands for `python -m benchmarks` exiting with status 2 (a bad command line, as its
    docstring documents); its message is what the command printed on stderr."""


def _cli(*argv):
    """`python -m benchmarks *argv`, through its `main` function: raises `_CommandLineError`."""
    def call():
        from benchmarks.__main__ import main
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr):
            try:
                status = main([*argv, "--no-progress", "--no-nuts"])
            except SystemExit as exit:  # argparse's own errors: exit status 2, usage on stderr
                status = exit.code
        assert status == 2, f"exit status {status}, expected 2 (a bad command line)"
        raise _CommandLineError(stderr.getvalue())
    return call


HARNESS = [
    pytest.param(_cli("--models", "foo"), _CommandLineError, ["--models", "foo"],
                 id="bench-unknown-model"),
    pytest.param(_cli("--frameworks", "pyro"), _CommandLineError, ["--frameworks", "pyro"],
                 id="bench-unknown-framework"),
    pytest.param(_cli("--models", "bnn,foo"), _CommandLineError, ["--models", "foo"],
                 id="bench-one-unknown-model-among-known"),
    pytest.param(_cli("--models", ","), _CommandLineError, ["--models", "at least one name"],
                 id="bench-no-model-name"),
    pytest.param(_cli("--num-evals", "0"), _CommandLineError, ["num_evals", "0"],
                 id="bench-num-evals-0"),
    pytest.param(_cli("--num-evals", "abc"), _CommandLineError, ["--num-evals", "abc"],
                 id="bench-num-evals-not-an-int"),
    pytest.param(_cli("--seed", "-1"), _CommandLineError, ["seed", "-1"], id="bench-seed-negative"),
    pytest.param(_cli("--quick", "--paper"), _CommandLineError, ["--paper", "--quick"],
                 id="bench-quick-and-paper"),
    pytest.param(_cli("--fast"), _CommandLineError, ["--fast"], id="bench-unknown-flag"),
    pytest.param(_cli("--json", "/proc/effppl-bench.json"), _CommandLineError,
                 ["--json", "/proc/effppl-bench.json"], id="bench-json-in-an-unwritable-folder",
                 marks=pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs Linux /proc")),
    pytest.param(_cli("--plot", "/"), _CommandLineError, ["--plot", "folder"],
                 id="bench-plot-a-folder"),
    pytest.param(_cli("--json", __file__ + "/out.json"), _CommandLineError,
                 ["--json", "is a file"], id="bench-json-under-a-file"),
]


CASES = EFFECTS + PPL + HANDLERS + INFERENCE + SVI_CASES + ENUM_CASES + HARNESS


def test_the_catalogue_is_large_and_ids_are_unique():
    ids = [p.id for p in CASES]
    assert len(ids) >= 40 and len(set(ids)) == len(ids)


@pytest.fixture
def _no_benchmark_runs(monkeypatch):
    """The harness cases must stop at the command line: a run that starts fails the case at once
    (instead of measuring, or creating the Oryx environment, for minutes)."""
    import benchmarks

    def forbidden(*a, **k):
        raise AssertionError("the command line was accepted and a benchmark run started")

    monkeypatch.setattr(benchmarks, "run", forbidden)


@pytest.mark.parametrize("call, error, fragments", CASES)
def test_bad_input_raises_a_clear_error(call, error, fragments, _no_benchmark_runs):
    with pytest.raises(error) as info:
        call()
    err = info.value
    assert isinstance(err, (EffpplError, _CommandLineError)) or type(err) in (
        TypeError, ValueError), f"{type(err).__mro__} is neither an effppl error nor a builtin"
    message = str(err)
    missing = [f for f in fragments if f not in message]
    assert not missing, f"the message lacks {missing}:\n{message}"
    assert not re.search(r"Comparator raised|is not a valid JAX (array )?type$", message)
