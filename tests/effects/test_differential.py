"""Differential tests: the translator against the reference interpreter, on random programs.

Each random program (`_programs.programs()`) is compiled to an ordinary JAX function over the
public effects API; `fx.eliminate` of it, eagerly and under `jax.jit`, must give the values the
reference interpreter (`tests/effects/reference.py`, the source semantics of paper §3.3) gives, and
`fx.make_jaxpr` of it must pass `check_jaxpr` with no `perform`/`handle`/`resume` left at any depth.

The oracle is itself checked: on the paper's worked examples (Appendix A), against plain JAX on
effect-free programs, and against a direct-style evaluator that threads handler parameters by hand
(`evaluate_threaded`, tail-resumptive and abortive handlers only).

The default hypothesis profile `ci` runs 200 derandomized examples per test. For a long run:

    JAX_ENABLE_CHECKS=1 python -m pytest tests/effects/test_differential.py --hypothesis-profile=long
"""

import dataclasses

import jax
import numpy as np
import pytest
from hypothesis import given, note, settings
from jax.extend.core import ClosedJaxpr, Jaxpr, check_jaxpr

from effppl import effects as fx

from . import reference as R
from ._programs import F64, I32, TAIL_KINDS, GenOptions, Program, programs, show


@pytest.fixture(autouse=True, scope="module")
def _enable_x64():
    previous = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", previous)


def assert_same(actual, expected):
    actual_leaves, actual_tree = jax.tree.flatten(actual)
    expected_leaves, expected_tree = jax.tree.flatten(expected)
    assert actual_tree == expected_tree, (actual, expected)
    for a, e in zip(actual_leaves, expected_leaves):
        a, e = np.asarray(a), np.asarray(e)
        assert a.dtype == e.dtype and a.shape == e.shape, (a, e)
        np.testing.assert_allclose(a, e, rtol=1e-9, atol=1e-12, equal_nan=True)


_EFFECT_PRIMITIVES = {"perform", "handle", "resume"}


def _primitive_names(jaxpr: Jaxpr):
    for eqn in jaxpr.eqns:
        yield eqn.primitive.name
        for param in eqn.params.values():
            yield from _names_in_param(param)


def _names_in_param(param):
    if isinstance(param, ClosedJaxpr):
        yield from _primitive_names(param.jaxpr)
    elif isinstance(param, Jaxpr):
        yield from _primitive_names(param)
    elif isinstance(param, tuple | list):
        for item in param:
            yield from _names_in_param(item)
    elif isinstance(param, dict):
        for item in param.values():
            yield from _names_in_param(item)


def assert_translates_to(program: Program, expected, bounded_while=False):
    fn, args = program.to_jax(bounded_while), program.args()
    closed = fx.make_jaxpr(fn)(*args)
    check_jaxpr(closed.jaxpr)
    left = _EFFECT_PRIMITIVES & set(_primitive_names(closed.jaxpr))
    assert not left, f"effect primitives {left} left in the translation:\n{closed}"
    assert_same(fx.eliminate(fn)(*args), expected)
    assert_same(jax.jit(fx.eliminate(fn))(*args), expected)


# --------------------------------------------------------------------------------------------
# Hand-written programs: the paper's worked examples and the subtle points of the semantics.
# --------------------------------------------------------------------------------------------

V, L = R.Var, R.Lit


def _seq(*exprs):
    """Evaluates `exprs` in order; the value of the last one."""
    out = exprs[-1]
    for i, e in reversed(list(enumerate(exprs[:-1]))):
        out = R.Let(f"_seq{i}", e, out)
    return out


def _add(x, y):
    return R.Binary("add", x, y)


def _handler(kind, params, clauses, ret=None):
    return R.Handler(kind, params, clauses, V("r") if ret is None else ret)


def safe_div(m, n):
    """App. A: `handle [throw -> resume ⋆ 0] (call safe_div m n)`, on int32."""
    body = R.Jit(R.Cond(R.Compare("eq", V("n"), L(0, I32)), R.Perform("throw"),
                        R.Binary("div", V("m"), V("n"))), ("m", "n"))
    handler = _handler("exception", (), (R.Clause("throw", (), R.Resume((), L(0, I32))),))
    return R.Let("m", L(m, I32), R.Let("n", L(n, I32), R.Handle(handler, (), body)))


def state_example():
    """App. A: state parameter 1; read it, double it, write it, return 42 -> (2, 42)."""
    handler = _handler("state", ("s",),
                       (R.Clause("iget", (), R.Resume((V("s"),), V("s"))),
                        R.Clause("iset", ("v",), R.Resume((V("v"),), None))),
                       R.MakeTuple((V("s"), V("r"))))
    body = R.Let("x", R.Perform("iget"),
                 _seq(R.Perform("iset", (R.Binary("add", V("x"), V("x")),)), L(42, I32)))
    return R.Handle(handler, (L(1, I32),), body)


def _reader(value, ret=None):
    return lambda body: R.Handle(
        _handler("reader", ("e",), (R.Clause("ask", (), R.Resume((V("e"),), V("e"))),), ret),
        (L(value),), body)


def _writer(body):
    """tell(v, weight=w) adds w * v; returns result + 100 * accumulated."""
    clause = R.Clause("tell", ("v",), R.Resume(
        (_add(V("acc"), R.Binary("mul", V("weight"), V("v"))),), None), static=("weight",))
    ret = _add(V("r"), R.Binary("mul", L(100.0), V("acc")))
    return R.Handle(_handler("writer", ("acc",), (clause,), ret), (L(0.0),), body)


def _state(init, ret=None):
    clauses = (R.Clause("get", (), R.Resume((V("s"),), V("s"))),
               R.Clause("put", ("v",), R.Resume((V("v"),), None)))
    return lambda body: R.Handle(_handler("state", ("s",), clauses, ret), (L(init),), body)


def _tell(x):
    return R.Perform("tell", (x,), (("weight", 1),))


def scoping_example():
    """§5.2: get's clause performs ask, which goes to the reader *outside* get's handler (10),
    never to the one inside it (20)."""
    forward = _handler("ask-for-get", (), (R.Clause("get", (), R.Let(
        "t", R.Perform("ask"), R.Resume((), V("t")))),))
    return _reader(10.0)(R.Handle(forward, (), _reader(20.0)(R.Perform("get"))))


def scoping_in_loop():
    """§5.2 where it bites, in a clause inlined into a loop: each iteration adds get() (10, from
    the outer reader, via the forwarder) and ask() / 2 (20 / 2, from the inner one): 60."""
    forward = _handler("ask-for-get", (), (R.Clause("get", (), R.Let(
        "t", R.Perform("ask"), R.Resume((), V("t")))),))
    body = _add(_add(V("c"), R.Perform("get")), R.Binary("mul", R.Perform("ask"), L(0.5)))
    scan = R.Scan(3, L(0.0), "c", "i", body)
    return _reader(10.0)(R.Handle(forward, (), _reader(20.0)(scan)))


def abort_in_scan():
    """An abortive clause inside a scan: the state written before the raise survives, the rest
    of the loop never runs. state(0) outside abort; put(i) each iteration, raise at i == 2."""
    body = _seq(R.Perform("put", (V("i"),)),
                R.Cond(R.Compare("eq", V("i"), L(2.0)), R.Perform("raise_", (V("i"),)),
                       _add(V("c"), L(1.0))))
    abort = _handler("abort", (), (R.Clause("raise_", ("exc",), _add(V("exc"), L(0.5))),))
    scan = R.Scan(4, L(0.0), "c", "i", body)
    return _state(0.0, ret=R.MakeTuple((V("s"), V("r"))))(R.Handle(abort, (), scan))  # (2, 2.5)


def nondet_example():
    """choose resumes with 0 and 1 and sums: sum over x, y in {0, 1} of 2x + y = 6."""
    clause = R.Clause("choose", (), _add(R.Resume((), L(0.0)), R.Resume((), L(1.0))))
    body = R.Let("x", R.Perform("choose"), R.Let("y", R.Perform("choose"),
                 _add(R.Binary("mul", V("x"), L(2.0)), V("y"))))
    return R.Handle(_handler("nondet", (), (clause,)), (), body)


def nondet_under_writer():
    """The outer writer's parameter is threaded through both resumptions, in order:
    tells 1 then 2, the nondet sums 0 + 1; writer output 1 + 100 * 3 = 301."""
    clause = R.Clause("choose", (), _add(R.Resume((), L(0.0)), R.Resume((), L(1.0))))
    body = R.Let("c", R.Perform("choose"), _seq(_tell(_add(V("c"), L(1.0))), V("c")))
    return _writer(R.Handle(_handler("nondet", (), (clause,)), (), body))


def post_example():
    """A clause that resumes, then post-processes: ask + ask under e = 1, clause
    `0.5 * resume(e + 1, e) + 1`: (0.5 * (0.5 * 3 + 1)) + 1 = 2.25."""
    resumed = R.Resume((_add(V("e"), L(1.0)),), V("e"))
    clause = R.Clause("ask", (), _add(R.Binary("mul", resumed, L(0.5)), L(1.0)))
    handler = _handler("post", ("e",), (clause,))
    return R.Handle(handler, (L(1.0),), _add(R.Perform("ask"), R.Perform("ask")))


def effectful_while_condition():
    """A while condition that performs: `get() < 3` logged by a tell each time it is evaluated
    (4 times: s = 0, 1, 2, 3); the body increments the state. Writer: 3 + 100 * 4 = 403."""
    cond = _seq(_tell(L(1.0)), R.Compare("lt", R.Perform("get"), L(3.0)))
    body = _seq(R.Perform("put", (_add(R.Perform("get"), L(1.0)),)), _add(V("c"), L(1.0)))
    loop = R.While(L(0.0), "c", "n", cond, body, max_iter=10)
    return _writer(_state(0.0)(loop))


def abort_in_while_condition():
    """An abort performed in a while condition stops the loop: the body ran twice (s = 2), the
    third evaluation of the condition raises s; abort returns -s; state ret: s + r = 0."""
    cond = R.Cond(R.Compare("ge", R.Perform("get"), L(2.0)),
                  R.Perform("raise_", (R.Perform("get"),)), L(1.0))
    body = _seq(R.Perform("put", (_add(R.Perform("get"), L(1.0)),)), V("c"))
    abort = _handler("abort", (), (R.Clause("raise_", ("exc",), R.Unary("neg", V("exc"))),))
    loop = R.While(L(0.0), "c", "n", cond, body, max_iter=4)
    return _state(0.0, ret=_add(V("s"), V("r")))(R.Handle(abort, (), loop))


def abort_through_forwarder_in_scan():
    """An abort that reaches its (abortive) handler through a tail-resumptive forwarding clause,
    from inside a scan: at i = 2, raise_(2) -> the forwarder re-performs raise_(4) -> 4.5."""
    abort = _handler("abort", (), (R.Clause("raise_", ("exc",), _add(V("exc"), L(0.5))),))
    forward = _handler("forward", ("n",), (R.Clause("raise_", ("a",), R.Let(
        "t", R.Perform("raise_", (R.Binary("mul", V("a"), L(2.0)),)),
        R.Resume((_add(V("n"), L(1, I32)),), V("t")))),), _add(V("r"), R.Convert(V("n"), F64)))
    body = R.Cond(R.Compare("eq", V("i"), L(2.0)), R.Perform("raise_", (V("i"),)),
                  _add(V("c"), L(1.0)))
    return R.Handle(abort, (), R.Handle(forward, (L(0, I32),), R.Scan(4, L(0.0), "c", "i", body)))


EXAMPLES = {
    "safe_div_by_zero": (Program(safe_div(42, 0)), np.int32(0)),
    "safe_div": (Program(safe_div(42, 5)), np.int32(8)),
    "state": (Program(state_example()), (np.int32(2), np.int32(42))),
    "scoping": (Program(scoping_example()), np.float64(10.0)),
    "scoping_in_loop": (Program(scoping_in_loop()), np.float64(60.0)),
    "abort_in_scan": (Program(abort_in_scan()), (np.float64(2.0), np.float64(2.5))),
    "nondet": (Program(nondet_example()), np.float64(6.0)),
    "nondet_under_writer": (Program(nondet_under_writer()), np.float64(301.0)),
    "post": (Program(post_example()), np.float64(2.25)),
    "effectful_while_condition": (Program(effectful_while_condition()), np.float64(403.0)),
    "abort_in_while_condition": (Program(abort_in_while_condition()), np.float64(0.0)),
}


@pytest.mark.parametrize("name", EXAMPLES)
def test_reference_gives_worked_example_values(name):
    program, expected = EXAMPLES[name]
    assert_same(program.evaluate(), expected)
    if name not in ("nondet", "nondet_under_writer", "post"):  # it resumes in tail position only
        assert_same(evaluate_threaded(program), expected)


@pytest.mark.parametrize("name", EXAMPLES)
def test_translation_gives_worked_example_values(name):
    program, expected = EXAMPLES[name]
    assert_translates_to(program, expected)


def test_reference_aborts_through_a_forwarding_clause_inside_a_loop():
    program = Program(abort_through_forwarder_in_scan())
    assert_same(program.evaluate(), np.float64(4.5))
    assert_same(evaluate_threaded(program), np.float64(4.5))


def test_translation_aborts_through_a_forwarding_clause_inside_a_loop():
    assert_translates_to(Program(abort_through_forwarder_in_scan()), np.float64(4.5))


def test_reference_unhandled_operation_raises():
    with pytest.raises(R.ReferenceUnhandledError, match="`get`"):
        R.evaluate(R.Perform("get"))


# --------------------------------------------------------------------------------------------
# Random programs.
# --------------------------------------------------------------------------------------------


@pytest.mark.slow
@given(programs(GenOptions(kinds=(), max_depth=3)))
def test_reference_matches_jax_on_effect_free_programs(program):
    note(show(program))
    assert_same(jax.jit(program.to_jax())(*program.args()), program.evaluate())


@given(programs(GenOptions(kinds=TAIL_KINDS)))
def test_reference_matches_threaded_evaluation_on_tail_resumptive_and_abortive_programs(program):
    note(show(program))
    assert_same(program.evaluate(), evaluate_threaded(program))


@given(programs())
def test_translation_matches_reference_on_random_programs(program):
    note(show(program))
    assert_translates_to(program, program.evaluate())


@pytest.mark.slow
@given(programs(GenOptions(kinds=("abort", "forward", "state", "writer"),
                           abort_through_forwarders_in_loops=True)))
def test_translation_matches_reference_on_aborts_through_forwarders_in_loops(program):
    note(show(program))
    assert_translates_to(program, program.evaluate())


@pytest.mark.slow
@settings(max_examples=60)  # the same generator as above: a sample of it is enough here
@given(programs(GenOptions(max_length=3)))
def test_translation_matches_reference_with_bounded_while_loops(program):
    """The same random programs with each `while_loop` an `effects.while_loop` (bounded by the
    program's own `max_iter`): its translation rule is `lax.while_loop`'s, rewrites included."""
    note(show(program))
    assert_translates_to(program, program.evaluate(), bounded_while=True)


# --------------------------------------------------------------------------------------------
# A second, independent oracle for the oracle: direct style, handler parameters threaded by hand,
# loops as Python loops; tail-resumptive clauses resume in place, abortive ones raise `_Abort`.
# --------------------------------------------------------------------------------------------


class _Abort(Exception):
    def __init__(self, target, value, stack):
        super().__init__()
        self.target, self.value, self.stack = target, value, stack


@dataclasses.dataclass(frozen=True)
class _Frame:
    handler: R.Handler
    params: tuple
    env: dict = dataclasses.field(compare=False)
    uid: object = dataclasses.field(default_factory=object)


def evaluate_threaded(program: Program):
    env = {n: v for (n, _), v in zip(program.inputs, program.args())}
    with np.errstate(all="ignore"):
        value, stack = _ev(program.body, env, ())
    assert stack == ()
    return value


def _ev_all(exprs, env, stack):
    values = []
    for e in exprs:
        v, stack = _ev(e, env, stack)
        values.append(v)
    return tuple(values), stack


def _ev(e, env, stack):  # noqa: C901 -- one case per node, like the interpreter's rule table
    dtypes = {F64: np.float64, I32: np.int32}
    match e:
        case R.Lit(value, dtype):
            return dtypes[dtype](value), stack
        case R.Var(name):
            return env[name], stack
        case R.Unary(op, x):
            (x,), stack = _ev_all((x,), env, stack)
            return {"neg": np.negative, "abs": np.abs, "sin": np.sin, "tanh": np.tanh}[op](x), stack
        case R.Binary(op, x, y):
            (x, y), stack = _ev_all((x, y), env, stack)
            if op == "div":
                return (x // y if isinstance(x, np.integer) else x / y), stack
            fn = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "max": np.maximum,
                  "min": np.minimum}[op]
            return fn(x, y), stack
        case R.Compare(op, x, y):
            (x, y), stack = _ev_all((x, y), env, stack)
            fn = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
                  "eq": np.equal, "ne": np.not_equal}[op]
            return np.float64(fn(x, y)), stack
        case R.Convert(x, dtype):
            x, stack = _ev(x, env, stack)
            return dtypes[dtype](x), stack
        case R.MakeTuple(items):
            return _ev_all(items, env, stack)
        case R.Let(name, value, body):
            v, stack = _ev(value, env, stack)
            return _ev(body, {**env, name: v}, stack)
        case R.Cond(pred, then, else_):
            p, stack = _ev(pred, env, stack)
            return _ev(then if p > 0 else else_, env, stack)
        case R.Switch(index, branches):
            v, stack = _ev(index, env, stack)
            return _ev(branches[int(np.sum([v > k - 0.5 for k in range(1, len(branches))]))],
                       env, stack)
        case R.Scan(length, init, carry, index, body, reverse, out):
            x, stack = _ev(init, env, stack)
            ys = [None] * length
            for i in (reversed(range(length)) if reverse else range(length)):
                x, stack = _ev(body, {**env, carry: x, index: np.float64(i)}, stack)
                ys[i] = x
            if out == "carry":
                return x, stack
            return sum((np.float64(i + 1) * y for i, y in enumerate(ys)), np.float64(0)), stack
        case R.Fori(length, init, carry, index, body):
            x, stack = _ev(init, env, stack)
            for i in range(length):
                x, stack = _ev(body, {**env, carry: x, index: np.float64(i)}, stack)
            return x, stack
        case R.While(init, carry, counter, cond, body, max_iter):
            x, stack = _ev(init, env, stack)
            i = 0
            while True:
                lenv = {**env, carry: x, counter: np.float64(i)}
                p, stack = _ev(cond, lenv, stack)
                if not (i < max_iter and p > 0):
                    return x, stack
                x, stack = _ev(body, lenv, stack)
                i += 1
        case R.Jit(body, args):
            return _ev(body, {a: env[a] for a in args}, stack)
        case R.Perform(op, args, static):
            args, stack = _ev_all(args, env, stack)
            j = max(i for i, f in enumerate(stack) if f.handler.clause_for(op) is not None)
            frame, clause = stack[j], stack[j].handler.clause_for(op)
            cenv = {**frame.env, **dict(zip(frame.handler.param_names, frame.params)),
                    **dict(zip(clause.args, args)), **{k: np.float64(v) for k, v in static}}
            result = _ev_clause(clause.body, cenv, stack[:j])
            if result[0] == "abort":
                raise _Abort(frame.uid, result[1], result[2])
            _, params, value, outer = result
            return value, outer + (dataclasses.replace(frame, params=params),) + stack[j + 1:]
        case R.Handle(handler, params, body):
            params, stack = _ev_all(params, env, stack)
            frame = _Frame(handler, params, env)
            try:
                r, inner = _ev(body, env, stack + (frame,))
            except _Abort as abort:
                if abort.target is not frame.uid:
                    raise
                return abort.value, abort.stack
            final = inner[-1]
            renv = {**env, **dict(zip(handler.param_names, final.params)), handler.result: r}
            return _ev(handler.ret, renv, inner[:-1])
    raise NotImplementedError(f"the direct-style evaluator does not do {type(e).__name__}")


def _ev_clause(body, env, stack):
    """Runs a clause: `("resume", params, value, stack)` when it ends in `Resume` (after
    resume-free `Let`s), `("abort", value, stack)` when it never resumes."""
    if isinstance(body, R.Let) and not _mentions_resume(body.value):
        v, stack = _ev(body.value, env, stack)
        return _ev_clause(body.body, {**env, body.name: v}, stack)
    if isinstance(body, R.Resume) and not any(map(_mentions_resume, body.params)):
        params, stack = _ev_all(body.params, env, stack)
        if body.value is None:
            return "resume", params, np.float64(0.0), stack
        value, stack = _ev(body.value, env, stack)
        return "resume", params, value, stack
    if not _mentions_resume(body):
        value, stack = _ev(body, env, stack)
        return "abort", value, stack
    raise NotImplementedError("the direct-style evaluator resumes in tail position only")


def _mentions_resume(e):
    if isinstance(e, R.Resume):
        return True
    if dataclasses.is_dataclass(e):
        return any(_mentions_resume(getattr(e, f.name)) for f in dataclasses.fields(e))
    if isinstance(e, tuple):
        return any(map(_mentions_resume, e))
    return False
