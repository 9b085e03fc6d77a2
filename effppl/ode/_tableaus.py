"""Explicit Runge-Kutta pairs as data: Butcher tableaus, embedded error weights, dense output.

Every method here is first-same-as-last (FSAL: the last stage is the vector field at the new
state, reused as the first stage of the next step) and its dense output is a polynomial in
`theta = (t - t_prev) / dt` whose coefficients are linear in the stages:

    y(t_prev + theta dt) = y_prev + dt * sum_i (sum_j dense[i, j] theta^(j+1)) k_i

so one `(stages, degree)` matrix `dense` serves every method. It is built here, once, from each
method's published continuous extension (Tsit5's own polynomials; Dopri5's quartic through the
end points, end slopes and Shampine's midpoint; Bosh3's cubic Hermite).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numpy.polynomial import polynomial as P


class Tableau(NamedTuple):
    """One explicit Runge-Kutta pair (all arrays float64, NumPy).

    - `name`, `order` (of the solution; the step-size controller's error order, as Diffrax's).
    - `c`: `(s,)` nodes; `a`: `(s, s)` strictly lower-triangular stage weights.
    - `b`: `(s,)` solution weights; `b_error`: `(s,)` `b - b_hat`, the embedded error weights.
    - `dense`: `(s, degree)` dense-output coefficients (module docstring).

    **Example:** Tsitouras' pair, seven stages, first same as last:

    >>> from effppl import ode
    >>> tab = ode.TABLEAUS["tsit5"]
    >>> tab.stages, tab.order, bool((tab.a[-1] == tab.b).all()), float(tab.c[-1])
    (7, 5, True, 1.0)

    **References:** Tsitouras (2011), Comput. Math. Appl. 62(2); Dormand & Prince (1980), J.
    Comp. Appl. Math. 6; Shampine (1986), Math. Comp. 46(173); Bogacki & Shampine (1989), Appl.
    Math. Lett. 2(4) (each table's source is beside it in `_tableaus.py`).
    """

    name: str
    order: int
    c: np.ndarray
    a: np.ndarray
    b: np.ndarray
    b_error: np.ndarray
    dense: np.ndarray

    @property
    def stages(self) -> int:
        return len(self.c)


def _lower(rows):
    """`(s, s)` strictly lower-triangular matrix from its rows below the diagonal."""
    s = len(rows) + 1
    a = np.zeros((s, s))
    for i, row in enumerate(rows, start=1):
        a[i, :len(row)] = row
    return a


def _hermite_dense(b, inner=None):
    """Dense coefficients of the polynomial through `y(0)`, `y'(0) = k_0`, `y(1) = sum b k`,
    `y'(1) = k_last` and, with `inner = (theta, weights)`, `y(theta) = sum weights k`: a cubic
    Hermite interpolant, or a quartic one through an inner point."""
    s = len(b)
    first, last = np.eye(s)[0], np.eye(s)[-1]
    degree = 3 if inner is None else 4
    # unknowns: coefficients of theta^1..theta^degree (each a vector over the stages)
    rows = [[1.0] + [0.0] * (degree - 1),                # slope at 0
            [1.0] * degree,                              # value at 1
            [float(j) for j in range(1, degree + 1)]]    # slope at 1
    rhs = [first, np.asarray(b), last]
    if inner is not None:
        theta, weights = inner
        rows.append([theta ** j for j in range(1, degree + 1)])
        rhs.append(np.asarray(weights))
    return np.linalg.solve(np.array(rows), np.array(rhs)).T


def _expanded(factored):
    """`(s, degree)` power coefficients (theta^1 upwards) of polynomials given as
    `(scale, [roots], [quadratic factors (p, q): theta^2 + p theta + q])`, times `theta^2`
    unless a root list says otherwise (Tsitouras' published form)."""
    out = []
    for scale, roots, quads, power in factored:
        poly = np.array([scale])
        for r in roots:
            poly = P.polymul(poly, [-r, 1.0])
        for p, q in quads:
            poly = P.polymul(poly, [q, p, 1.0])
        poly = P.polymul(poly, [0.0] * power + [1.0])
        out.append(np.pad(poly, (0, 5 - len(poly)))[1:])
    return np.array(out)


# Tsitouras (2011), "Runge-Kutta pairs of order 5(4) satisfying only the first column
# simplifying assumption", Computers & Mathematics with Applications 62(2), 770-775: Table 1
# (the pair) and the continuous extension of §4 (as also used by OrdinaryDiffEq.jl and Diffrax).
_TSIT5_A = _lower([
    [0.161],
    [-0.008480655492356988544426874250230774675121177393430391537369234245294192976164141156943,
     0.3354806554923569885444268742502307746751211773934303915373692342452941929761641411569],
    [2.897153057105493432130432594192938764924887287701866490314866693455023795137503079289,
     -6.359448489975074843148159912383825625952700647415626703305928850207288721235210244366,
     4.362295432869581411017727318190886861027813359713760212991062156752264926097707165077],
    [5.325864828439256604428877920840511317836476253097040101202360397727981648835607691791,
     -11.74888356406282787774717033978577296188744178259862899288666928009020615663593781589,
     7.495539342889836208304604784564358155658679161518186721010132816213648793440552049753,
     -0.09249506636175524925650207933207191611349983406029535244034750452930469056411389539635],
    [5.861455442946420028659251486982647890394337666164814434818157239052507339770711679748,
     -12.92096931784710929170611868178335939541780751955743459166312250439928519268343184452,
     8.159367898576158643180400794539253485181918321135053305748355423955009222648673734986,
     -0.07158497328140099722453054252582973869127213147363544882721139659546372402303777878835,
     -0.02826905039406838290900305721271224146717633626879770007617876201276764571291579142206],
    [0.09646076681806522951816731316512876333711995238157997181903319145764851595234062815396,
     0.01,
     0.4798896504144995747752495322905965199130404621990332488332634944254542060153074523509,
     1.379008574103741893192274821856872770756462643091360525934940067397245698027561293331,
     -3.290069515436080679901047585711363850115683290894936158531296799594813811049925401677,
     2.324710524099773982415355918398765796109060233222962411944060046314465391054716027841],
])
_TSIT5_B_HAT = np.array([
    0.09468075576583945807478876255758922856117527357724631226139574065785592789071067303271,
    0.009183565540343253096776363936645313759813746240984095238905939532922955247253608687270,
    0.4877705284247615707855642599631228241516691959761363774365216240304071651579571959813,
    1.234297566930478985655109673884237654035539930748192848315425833500484878378061439761,
    -2.707712349983525454881109975059321670689605166938197378763992255714444407154902012702,
    1.866628418170587035753719399566211498666255505244122593996591602841258328965767580089,
    1.0 / 66.0])
_TSIT5_DENSE = _expanded([
    # (scale, roots, quadratic factors, power of theta)
    (-1.0530884977290216, [1.3299890189751412], [(-1.4364028541716351, 0.7139816917074209)], 1),
    (0.1017, [], [(-2.1966568338249754, 1.2949852507374631)], 2),
    (2.490627285651252793, [], [(-2.38535645472061657, 1.57803468208092486)], 2),
    (-16.54810288924490272, [1.21712927295533244, 0.61620406037800089], [], 2),
    (47.37952196281928122, [1.203071208372362603, 0.658047292653547382], [], 2),
    (-34.87065786149660974, [1.2, 0.666666666666666667], [], 2),
    (2.5, [1.0, 0.6], [], 2),
])

TSIT5 = Tableau(
    name="tsit5", order=5,
    c=np.array([0.0, 0.161, 0.327, 0.9, 0.9800255409045096857298102862870245954942137979563024768854764293221195950761080302604, 1.0, 1.0]),  # noqa: E501
    a=_TSIT5_A, b=_TSIT5_A[-1].copy(), b_error=_TSIT5_A[-1] - _TSIT5_B_HAT, dense=_TSIT5_DENSE)

# Dormand & Prince (1980), "A family of embedded Runge-Kutta formulae", J. Comp. Appl. Math. 6,
# 19-26 (the pair); the embedded weights and the midpoint of the dense output are Shampine's
# (1986), "Some practical Runge-Kutta formulas", Math. Comp. 46(173), 135-150 (as Diffrax's).
_DOPRI5_A = _lower([
    [1 / 5],
    [3 / 40, 9 / 40],
    [44 / 45, -56 / 15, 32 / 9],
    [19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729],
    [9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656],
    [35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84],
])
_DOPRI5_B = _DOPRI5_A[-1].copy()
_DOPRI5_B_HAT = np.array([1951 / 21600, 0.0, 22642 / 50085, 451 / 720, -12231 / 42400,
                          649 / 6300, 1 / 60])
_DOPRI5_MID = np.array([6025192743 / 30085553152, 0.0, 51252292925 / 65400821598,
                        -2691868925 / 45128329728, 187940372067 / 1594534317056,
                        -1776094331 / 19743644256, 11237099 / 235043384]) / 2

DOPRI5 = Tableau(
    name="dopri5", order=5, c=np.array([0.0, 1 / 5, 3 / 10, 4 / 5, 8 / 9, 1.0, 1.0]),
    a=_DOPRI5_A, b=_DOPRI5_B, b_error=_DOPRI5_B - _DOPRI5_B_HAT,
    dense=_hermite_dense(_DOPRI5_B, inner=(0.5, _DOPRI5_MID)))

# Bogacki & Shampine (1989), "A 3(2) pair of Runge-Kutta formulas", Appl. Math. Lett. 2(4),
# 321-325; dense output: the cubic Hermite interpolant of the step.
_BOSH3_A = _lower([[1 / 2], [0.0, 3 / 4], [2 / 9, 1 / 3, 4 / 9]])
BOSH3 = Tableau(
    name="bosh3", order=3, c=np.array([0.0, 1 / 2, 3 / 4, 1.0]), a=_BOSH3_A,
    b=_BOSH3_A[-1].copy(), b_error=_BOSH3_A[-1] - np.array([7 / 24, 1 / 4, 1 / 3, 1 / 8]),
    dense=_hermite_dense(_BOSH3_A[-1]))

TABLEAUS = {t.name: t for t in (TSIT5, DOPRI5, BOSH3)}
