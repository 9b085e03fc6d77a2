"""The Runge-Kutta pairs' data (`effppl.ode.TABLEAUS`) against the analytic order conditions.

Oracle: Butcher's order conditions, one per rooted tree `t` with at most `p` nodes, `b . Phi(t)
= 1 / gamma(t)` (Hairer, Nørsett & Wanner, "Solving Ordinary Differential Equations I",
§II.2); for the dense output, `b(theta) . Phi(t) = theta^|t| / gamma(t)` (ibid., §II.6).
"""

import itertools

import numpy as np
import pytest

from effppl import ode


def trees(order):
    """Rooted trees with `order` nodes, each a sorted tuple of its subtrees."""
    if order == 1:
        return [()]
    out = set()
    for sizes in _partitions(order - 1):
        for children in itertools.product(*(trees(n) for n in sizes)):
            out.add(tuple(sorted(children)))
    return sorted(out)


def _partitions(n, largest=None):
    largest = n if largest is None else largest
    if n == 0:
        yield ()
    for k in range(min(n, largest), 0, -1):
        for rest in _partitions(n - k, k):
            yield (k, *rest)


def size(t):
    return 1 + sum(size(c) for c in t)


def gamma(t):
    return size(t) * np.prod([gamma(c) for c in t])


def phi(t, a):
    """The elementary weights' stage vector `Phi(t)`."""
    out = np.ones(len(a))
    for child in t:
        out = out * (a @ phi(child, a))
    return out


def test_the_trees_are_the_known_numbers():
    assert [len(trees(n)) for n in range(1, 6)] == [1, 1, 2, 4, 9]


EMBEDDED_ORDER = {"tsit5": 4, "dopri5": 4, "bosh3": 2}
DENSE_ORDER = {"tsit5": 4, "dopri5": 4, "bosh3": 3}


@pytest.mark.parametrize("name", sorted(ode.TABLEAUS))
def test_order_conditions(name):
    tab = ode.TABLEAUS[name]
    np.testing.assert_allclose(tab.a.sum(axis=1), tab.c, atol=1e-14)  # row sums: the nodes
    np.testing.assert_array_equal(tab.a, np.tril(tab.a, -1))  # explicit
    np.testing.assert_array_equal(tab.a[-1], tab.b)  # first same as last
    assert tab.c[-1] == 1.0
    b_hat = tab.b - tab.b_error
    for n in range(1, tab.order + 1):
        for t in trees(n):
            assert tab.b @ phi(t, tab.a) == pytest.approx(1 / gamma(t), abs=1e-13), t
            if n <= EMBEDDED_ORDER[name]:
                assert b_hat @ phi(t, tab.a) == pytest.approx(1 / gamma(t), abs=1e-13), t
    # the embedded solution is of lower order: some condition of order `order` fails for it
    assert any(abs(b_hat @ phi(t, tab.a) - 1 / gamma(t)) > 1e-6
               for t in trees(EMBEDDED_ORDER[name] + 1))


@pytest.mark.parametrize("name", sorted(ode.TABLEAUS))
def test_dense_output_conditions(name):
    tab = ode.TABLEAUS[name]
    for theta in (0.0, 0.3, 0.5, 0.77, 1.0):
        weights = tab.dense @ theta ** np.arange(1, tab.dense.shape[1] + 1)  # b(theta)
        for n in range(1, DENSE_ORDER[name] + 1):
            for t in trees(n):
                assert weights @ phi(t, tab.a) == pytest.approx(theta ** n / gamma(t),
                                                                abs=1e-12), (theta, t)
    np.testing.assert_allclose(tab.dense.sum(axis=1), tab.b, atol=1e-12)  # theta = 1: the step
