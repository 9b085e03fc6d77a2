"""What keeps elimination's cost per site small: `internal.forwards_static` (a clause that only
passes a static argument on is traced once per signature and reused for the others, with the
same program as tracing it for each perform) and the paused cyclic garbage collector."""

import jax
import jax.numpy as jnp
import pytest
from jax.extend.core import check_jaxpr, jaxpr_as_fun

from effppl import effects as fx
from effppl.effects import internal

tick = fx.Operation("tick", out=lambda x, **static: jax.ShapeDtypeStruct(jnp.shape(x),
                                                                         jnp.result_type(x)))


def _outer_clause(p, x, *, resume, label, **static):
    """Records each perform's label in the answer: which label reached it, with which value."""
    return resume(p.at[label].add(x.sum()), x)


def _program(inner_clause, n=6, nested=False):
    def body(x):
        total = 0.0
        for i in range(n):
            v = x * (i + 1.0) if i % 2 else jnp.stack([x, x + i])  # two signatures
            total = total + tick(v, label=i).sum()
        return total

    inner = fx.handle(body, clauses={tick: inner_clause})
    outer = fx.handle(inner, params=jnp.zeros(n), clauses={tick: _outer_clause},
                      ret=lambda p, r: (p, r))
    return outer


def _doubling(count):
    def clause(p, x, *, resume, label, **static):
        count.append(label)
        return resume(p, tick(2.0 * x, label=label, **static))
    return clause


def test_a_forwarding_clause_is_traced_once_per_signature_with_the_same_result():
    plain, marked = [], []
    x = jnp.float32(1.5)
    want = _program(_doubling(plain))(x)
    got = _program(internal.forwards_static("label")(_doubling(marked)))(x)
    assert len(plain) == 6 and len(marked) == 2  # scalar and stacked signatures
    # each label still reaches the outer handler with its own value: labels were substituted
    for w, g in zip(jax.tree_util.tree_leaves(want), jax.tree_util.tree_leaves(got)):
        assert jnp.allclose(w, g)
    expected = [2.0 * (2 * x + i) if i % 2 == 0 else 2.0 * x * (i + 1.0) for i in range(6)]
    assert jnp.allclose(got[0], jnp.array(expected))


def test_the_reused_program_is_the_traced_one():
    def jaxpr_of(clause):
        return fx.make_jaxpr(_program(clause))(jnp.float32(1.5))

    plain = jaxpr_of(_doubling([]))
    marked = jaxpr_of(internal.forwards_static("label")(_doubling([])))
    assert str(plain) == str(marked)
    check_jaxpr(marked.jaxpr)
    assert jnp.allclose(jaxpr_as_fun(plain)(jnp.float32(0.3))[0],
                        jaxpr_as_fun(marked)(jnp.float32(0.3))[0])


def test_a_forward_inside_a_branch_is_traced_per_perform():
    """A perform under `cond` in the clause is not rewritten: such a clause is traced per site."""
    count = []

    @internal.forwards_static("label")
    def clause(p, x, *, resume, label, **static):
        count.append(label)
        y = jax.lax.cond(x.sum() > 0, lambda v: tick(v, label=label), lambda v: v, x)
        return resume(p, y)

    got = _program(clause)(jnp.float32(1.5))
    assert len(count) == 6
    assert jnp.allclose(got[0], jnp.array([3.0, 3.0, 5.0, 6.0, 7.0, 9.0]))


def test_an_unmarked_clause_reading_its_label_keeps_its_own_program():
    seen = []

    def clause(p, x, *, resume, label, **static):  # reads the label: must not be marked
        seen.append(label)
        return resume(p, tick(x + label, label=label))

    got = _program(clause)(jnp.float32(0.0))
    assert len(seen) == 6
    assert jnp.allclose(got[0], jnp.array([0.0, 1.0, 6.0, 3.0, 12.0, 5.0]))


@pytest.mark.parametrize("names", [(), ("label", "other")])
def test_marking_with_absent_or_no_names(names):
    count = []
    got = _program(internal.forwards_static(*names)(_doubling(count)))(jnp.float32(1.0))
    assert len(count) == (6 if not names else 2)
    assert got[0].shape == (6,)


def test_the_cyclic_gc_is_paused_during_an_elimination_and_restored():
    import gc

    seen = []

    def clause(p, x, *, resume, label, **static):
        seen.append(gc.isenabled())
        return resume(p, x)

    handled = fx.handle(lambda x: tick(x, label=0), clauses={tick: clause})
    assert gc.isenabled()
    fx.eliminate(handled)(jnp.float32(1.0))
    assert seen == [False] and gc.isenabled()
    gc.disable()  # a user who turned it off keeps it off
    try:
        fx.eliminate(handled)(jnp.float32(1.0))
        assert not gc.isenabled()
    finally:
        gc.enable()


_TRACED = []  # labels `_shared_doubling` was traced for (a global: the clause closes over nothing)


@internal.forwards_static("label")
def _shared_doubling(p, x, *, resume, label, **static):
    _TRACED.append(label)
    return resume(p, tick(2.0 * x, label=label, **static))


def test_a_closure_free_forwarding_clause_is_shared_across_eliminations():
    """Its jaxpr depends only on its code and argument types, so a later handler (a later call,
    a later model) reuses it, as JAX reuses a traced function; the forwarded labels are still
    each perform's own, and the program is the one tracing it again would give."""
    x = jnp.float32(1.5)
    want = _program(_doubling([]))(x)
    _TRACED.clear()
    first = fx.make_jaxpr(_program(_shared_doubling))(x)
    traced_first = list(_TRACED)
    second = fx.make_jaxpr(_program(_shared_doubling))(x)
    assert len(traced_first) == 2 and _TRACED == traced_first  # nothing traced the second time
    assert str(first) == str(second) == str(fx.make_jaxpr(_program(_doubling([])))(x))
    check_jaxpr(second.jaxpr)
    for w, g in zip(jax.tree_util.tree_leaves(want),
                    jax.tree_util.tree_leaves(_program(_shared_doubling)(x))):
        assert jnp.allclose(w, g)
    # other argument types: traced anew
    fx.make_jaxpr(_program(_shared_doubling))(jnp.ones(3, jnp.float32))
    assert len(_TRACED) == len(traced_first) + 2


def test_a_clause_with_a_closure_is_not_shared_across_eliminations():
    count = []
    clause = internal.forwards_static("label")(_doubling(count))
    _program(clause)(jnp.float32(1.0))
    _program(clause)(jnp.float32(1.0))
    assert len(count) == 4  # two signatures, traced in each elimination


# `forwards_when`: performs the clause only passes on skip the handler, with nothing traced.

def _forwarding(count):
    """Doubles the even labels; passes the odd ones on unchanged (what `forwards_when` skips)."""
    def clause(p, x, *, resume, label, **static):
        count.append(label)
        if label % 2:
            return resume(p, tick(x, label=label, **static))
        return resume(p, tick(2.0 * x, label=label, **static))
    return clause


def _in_loops(inner_clause):
    """`tick`s at the top level, in a `scan` and in a `cond` branch, under two handlers."""
    def body(x):
        a = tick(x, label=0) + tick(x, label=1)

        def step(c, xi):
            return c + tick(xi, label=2) + tick(xi, label=3), None
        b, _ = jax.lax.scan(step, 0.0, jnp.stack([x, 2 * x]))
        c = jax.lax.cond(x > 0, lambda v: tick(v, label=5), lambda v: -v, x)
        d = tick(x + 1, label=4)
        return a + b + c + d

    inner = fx.handle(body, clauses={tick: inner_clause})
    return fx.handle(inner, params=jnp.zeros(6), clauses={tick: _outer_clause},
                     ret=lambda p, r: (p, r))


@pytest.mark.parametrize("x", [1.5, -0.5])
def test_a_forwarded_perform_reaches_the_outer_handler_untraced(x):
    plain, marked = [], []
    x = jnp.float32(x)
    want = _in_loops(_forwarding(plain))(x)
    odd = internal.forwards_when(lambda *, label, **_: label % 2 == 1)
    got = _in_loops(odd(_forwarding(marked)))(x)
    assert sorted(set(plain)) == [0, 1, 2, 3, 4, 5] and sorted(set(marked)) == [0, 2, 4]
    for w, g in zip(jax.tree_util.tree_leaves(want), jax.tree_util.tree_leaves(got)):
        assert jnp.allclose(w, g)
    # the outer handler saw the even labels doubled, the odd ones as performed (hand-computed)
    expected = [2 * x, x, 2 * 3 * x, 3 * x, 2 * (x + 1), x if x > 0 else 0.0]
    assert jnp.allclose(got[0], jnp.array(expected))
    closed = fx.make_jaxpr(_in_loops(odd(_forwarding([]))))(x)
    check_jaxpr(closed.jaxpr)
    assert jnp.allclose(jaxpr_as_fun(closed)(x)[1], want[1])


def test_a_perform_every_handler_forwards_stays_unhandled():
    everything = internal.forwards_when(lambda **_: True)(_forwarding([]))
    handled = fx.handle(lambda x: tick(x, label=1), clauses={tick: everything})
    with pytest.raises(fx.UnhandledEffectError, match="tick"):
        fx.eliminate(handled)(jnp.float32(1.0))
    # and an outer handler gets it, the inner one's parameters untouched
    counted = fx.handle(handled, params=jnp.zeros(6), clauses={tick: _outer_clause},
                        ret=lambda p, r: (p, r))
    p, r = counted(jnp.float32(2.0))
    assert jnp.allclose(p, jnp.array([0.0, 2.0, 0, 0, 0, 0])) and r == 2.0


# `forwards_static(..., reads=...)`: a clause that reads an array per site is still traced once.


def _offset_clause(offsets, count, facts=lambda label: ()):
    @internal.forwards_static("label", reads=lambda *, label: (facts(label), offsets[label]))
    def clause(p, x, *, resume, label, read):
        count.append(label)
        return resume(p, tick(x + read, label=label))
    return clause


def _offset_oracle(offsets, x, n=6):
    sums = [2 * x + i + 2 * offsets[i] if i % 2 == 0 else x * (i + 1.0) + offsets[i]
            for i in range(n)]
    return jnp.array(sums), sum(sums)


def test_a_clause_reading_its_site_is_traced_once_per_signature_each_site_reading_its_own():
    offsets = {i: jnp.float32(10.0 * (i + 1)) for i in range(6)}
    count = []
    x = jnp.float32(1.5)
    per_label, total = _program(_offset_clause(offsets, count))(x)
    assert len(count) == 2  # scalar and stacked signatures, not six sites
    want_labels, want_total = _offset_oracle(offsets, x)
    assert jnp.allclose(per_label, want_labels) and jnp.allclose(total, want_total)
    closed = fx.make_jaxpr(_program(_offset_clause(offsets, [])))(x)
    check_jaxpr(closed.jaxpr)
    assert jnp.allclose(jaxpr_as_fun(closed)(jnp.float32(0.25))[0],
                        _offset_oracle(offsets, jnp.float32(0.25))[0])


def test_a_read_array_may_be_traced_and_differentiated():
    def labelled(offset):
        offsets = {i: offset * (i + 1) for i in range(6)}
        return _program(_offset_clause(offsets, []))(jnp.float32(1.5))[1]

    grad = jax.jit(jax.grad(labelled))(jnp.float32(2.0))
    want = jax.grad(lambda o: _offset_oracle({i: o * (i + 1) for i in range(6)},
                                             jnp.float32(1.5))[1])(jnp.float32(2.0))
    assert jnp.allclose(grad, want) and float(want) == 2 * (1 + 3 + 5) + 2 + 4 + 6


def test_facts_split_the_sharing_and_none_traces_per_site():
    offsets = {i: jnp.float32(i) for i in range(6)}
    by_half = []
    _program(_offset_clause(offsets, by_half, facts=lambda label: label // 4))(
        jnp.float32(1.0))
    assert sorted(by_half) == [0, 1, 4, 5]  # (signature, label // 4): 0,2 | 4 and 1,3 | 5
    own = []
    got = _program(_offset_clause(offsets, own, facts=lambda label: None))(
        jnp.float32(1.0))
    assert sorted(own) == list(range(6))
    assert jnp.allclose(got[0], _offset_oracle(offsets, jnp.float32(1.0))[0])


def test_a_reading_clause_with_a_closure_is_shared_across_eliminations_by_its_facts():
    """It says what its program takes from its closure (`facts`), so later handlers of the same
    code reuse its jaxpr, with their own arrays; other facts or array types trace anew."""
    count = []

    def make(offsets, facts):
        @internal.forwards_static("label", reads=lambda *, label: (facts, offsets[label]))
        def clause(p, x, *, resume, label, read):
            count.append(label)
            return resume(p, tick(x + read, label=label))
        return clause

    first = {i: jnp.float32(i) for i in range(6)}
    second = {i: jnp.float32(100.0 + i) for i in range(6)}
    x = jnp.float32(0.5)
    _program(make(first, "shared-test"))(x)
    assert len(count) == 2
    got = _program(make(second, "shared-test"))(x)
    assert len(count) == 2  # reused: nothing traced
    assert jnp.allclose(got[0], _offset_oracle(second, x)[0])
    _program(make(second, "other facts"))(x)
    assert len(count) == 4
    ints = {i: jnp.int32(100 + i) for i in range(6)}
    got = _program(make(ints, "shared-test"))(x)
    assert len(count) == 6  # arrays of another dtype: traced anew
    assert jnp.allclose(got[0], _offset_oracle(ints, x)[0])


@pytest.mark.parametrize("reads, message", [
    (lambda **_: jnp.float32(1.0), r"must return `\(facts, arrays\)`"),
    (lambda **_: ([1], jnp.float32(1.0)), "not hashable"),
    (lambda **_: ((), "abc"), "arrays that are not arrays"),
])
def test_a_malformed_reads_is_a_clear_error(reads, message):
    @internal.forwards_static("label", reads=reads)
    def clause(p, x, *, resume, label, read):
        return resume(p, tick(x, label=label))

    with pytest.raises(TypeError, match=message) as info:
        _program(clause)(jnp.float32(1.0))
    assert "`tick`" in str(info.value)


def test_reads_must_be_callable():
    with pytest.raises(TypeError, match="reads"):
        internal.forwards_static("label", reads=3)


# Tracing a handler's parts computes JAX's debug info from a cache per code object; it must be
# the debug info JAX computes (the source and the argument names in error messages and jaxprs).


class _Handler:
    def ret(self, params, result):
        return result


def _plain(params, result):
    return result


@pytest.mark.parametrize("fn", [_Handler().ret, _plain, lambda params, result: result],
                         ids=["bound method", "function", "lambda"])
def test_cached_debug_info_is_jaxs(fn):
    from jax._src import api_util

    from effppl.effects import _compat

    args = (jax.ShapeDtypeStruct((), jnp.float32), (jax.ShapeDtypeStruct((2,), jnp.float32),))
    tree = jax.tree_util.tree_structure(args)
    want = api_util.debug_info("ret", fn, args, {})
    for _ in range(2):  # computed, then read from the cache
        got = _compat._debug_info("ret", fn, args, tree)
        assert (got.func_src_info, got.arg_names) == (want.func_src_info, want.arg_names)
    assert want.arg_names == ("params", "result[0]")


_RET_TRACES = []


def _shared_ret(p, r):
    _RET_TRACES.append(1)
    return p * 2.0, r


def test_a_plain_return_clause_is_traced_once_per_code_and_types():
    def run(ret, x):
        return fx.handle(lambda: tick(x, label=0), params=jnp.float32(1.5),
                         clauses={tick: lambda p, x, resume, **_: resume(p + x.sum(), x)},
                         ret=ret)()

    _RET_TRACES.clear()
    first = run(_shared_ret, jnp.float32(1.0))
    second = run(_shared_ret, jnp.float32(3.0))
    assert len(_RET_TRACES) == 1  # the second handler reused the first one's jaxpr
    assert [float(v) for v in first] == [5.0, 1.0] and [float(v) for v in second] == [9.0, 3.0]
    run(_shared_ret, jnp.ones(2, jnp.float32))  # other types: traced again
    assert len(_RET_TRACES) == 2
    seen = []

    def closing(p, r):  # closes over `seen`: traced for each handler
        seen.append(1)
        return p, r

    run(closing, jnp.float32(1.0))
    run(closing, jnp.float32(1.0))
    assert len(seen) == 2
