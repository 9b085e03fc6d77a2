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
