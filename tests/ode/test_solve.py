"""`effppl.ode.solve` against oracles: scipy's DOP853 at a tight tolerance (accuracy), Diffrax 0.7
(the same steps and values, the same gradients), central finite differences, and analytic
solutions; its failures, transformations and bad input.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.extend.core import check_jaxpr, jaxprs_in_params
from scipy.integrate import solve_ivp

from effppl import effects as fx
from effppl import ode

diffrax = pytest.importorskip("diffrax")  # the `bench` extra

# NumPy float64 (module constants are made before the session's x64 fixture runs)
ARGS = np.array([1.5, 1.0, 3.0, 1.0])
Y0 = np.array([1.0, 1.0])
TS = np.linspace(0.0, 10.0, 21)


def lotka_volterra(t, y, args):
    a, b, c, d = args
    return jnp.stack([a * y[0] - b * y[0] * y[1], -c * y[1] + d * y[0] * y[1]])


def reference(args=ARGS, y0=Y0, ts=TS):
    """scipy's DOP853 at rtol = atol = 1e-12."""
    a, b, c, d = args
    out = solve_ivp(lambda t, y: [a * y[0] - b * y[0] * y[1], -c * y[1] + d * y[0] * y[1]],
                    (0.0, float(ts[-1])), np.asarray(y0), method="DOP853", rtol=1e-12,
                    atol=1e-12, t_eval=np.asarray(ts))
    return out.y.T


DIFFRAX = {"tsit5": diffrax.Tsit5, "dopri5": diffrax.Dopri5, "bosh3": diffrax.Bosh3}


def diffrax_solve(solver, rtol, atol, dt0=0.01, pid=None, args=ARGS, y0=Y0, ts=TS):
    return diffrax.diffeqsolve(
        diffrax.ODETerm(lotka_volterra), DIFFRAX[solver](), 0.0, float(ts[-1]), dt0, y0,
        args=args, saveat=diffrax.SaveAt(ts=ts), max_steps=100_000,
        stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol, **(pid or {})))


@pytest.mark.parametrize("solver, tol, err", [("tsit5", 1e-10, 1e-8), ("dopri5", 1e-10, 1e-8),
                                              ("bosh3", 1e-8, 5e-6)])
def test_accuracy_against_a_tight_reference(solver, tol, err):
    sol = ode.solve(lotka_volterra, Y0, 0.0, 10.0, args=ARGS, ts=TS, solver=solver, rtol=tol,
                    atol=tol, max_steps=100_000)
    np.testing.assert_allclose(sol.ys, reference(), atol=err)
    assert int(sol.result) == 0 and sol.ts.shape == (21,) and sol.ys.shape == (21, 2)


@pytest.mark.slow
@pytest.mark.parametrize("solver", ["tsit5", "dopri5", "bosh3"])
@pytest.mark.parametrize("pid", [None, dict(pcoeff=0.4, icoeff=0.3, dcoeff=0.1)])
def test_same_steps_and_values_as_diffrax(solver, pid):
    """Diffrax's PID controller semantics: step for step (its `dt0=None` falls back to 0.01 for
    a wrapped term in 0.7.2, so both are given `dt0=0.01`)."""
    rtol, atol = 1e-6, 1e-8
    ours = ode.solve(lotka_volterra, Y0, 0.0, 10.0, args=ARGS, ts=TS, solver=solver, rtol=rtol,
                     atol=atol, dt0=0.01, controller=ode.PIDController(**(pid or {})),
                     max_steps=100_000)
    theirs = diffrax_solve(solver, rtol, atol, pid=pid)
    for key in ("num_steps", "num_accepted_steps", "num_rejected_steps"):
        assert int(ours.stats[key]) == int(theirs.stats[key]), key
    np.testing.assert_allclose(ours.ys, theirs.ys, rtol=1e-7, atol=1e-10)  # rounding only


@pytest.mark.slow
@pytest.mark.parametrize("solver", ["tsit5", "bosh3"])
def test_stage_loop_takes_the_same_steps(monkeypatch, solver):
    """A large state (here: forced) takes its stages in a `lax.scan`: the same steps and values
    as Diffrax, and the same gradient as the unrolled stages."""
    from effppl.ode import _solve
    monkeypatch.setattr(_solve, "UNROLL_MAX_SIZE", 0)
    field = lambda t, y, a: lotka_volterra(t, y, a)  # noqa: E731  (a new function: traced anew)
    ours = ode.solve(field, Y0, 0.0, 10.0, args=ARGS, ts=TS, solver=solver, rtol=1e-6,
                     atol=1e-8, dt0=0.01, max_steps=100_000)
    theirs = diffrax_solve(solver, 1e-6, 1e-8)
    assert int(ours.stats["num_steps"]) == int(theirs.stats["num_steps"])
    np.testing.assert_allclose(ours.ys, theirs.ys, rtol=1e-7, atol=1e-10)
    if solver == "tsit5":
        loss = lambda a: jnp.sum(ode.solve(field, Y0, 0.0, 10.0, args=a, ts=TS, rtol=1e-8,  # noqa
                                           atol=1e-8, dt0=0.01).ys ** 2)
        np.testing.assert_allclose(jax.grad(loss)(ARGS), jax.grad(lv_loss)(ARGS, Y0), rtol=1e-9)


def test_default_first_step_and_pytree_state():
    """Without `dt0`, Hairer's starting step; a dict state; the final state only (`ts=None`)."""
    def decay(t, y, k):
        return {"x": -k * y["x"], "v": y["x"]}

    sol = ode.solve(decay, {"x": jnp.ones(3), "v": jnp.zeros(3)}, 0.0, 2.0, args=0.5,
                    rtol=1e-9, atol=1e-9)
    assert sol.ts.tolist() == [2.0] and sol.ys["x"].shape == (1, 3)
    np.testing.assert_allclose(sol.ys["x"], np.exp(-1.0), rtol=1e-8)
    np.testing.assert_allclose(sol.ys["v"], 2 * (1 - np.exp(-1.0)), rtol=1e-8)


@pytest.mark.parametrize("solver, rtol, atol, y0", [
    ("tsit5", 1e-6, 1e-8, Y0), ("bosh3", 1e-3, 1e-6, Y0),
    ("tsit5", 1e-6, 1e-8, np.zeros(2)),  # |y0| = 0: the small branch (h0 = 1e-6)
])
def test_first_step_is_diffrax_s_choice(solver, rtol, atol, y0):
    """Without `dt0`: Diffrax's own starting step (Hairer, Nørsett & Wanner §II.4) for an
    unwrapped `ODETerm`, to rounding."""
    pid = pytest.importorskip("diffrax._step_size_controller.pid")
    select = getattr(pid, "_select_initial_step", None)  # private in Diffrax 0.7
    if select is None:
        pytest.skip("this Diffrax has no _select_initial_step")
    import optimistix

    from effppl.ode._solve import _initial_step
    field = lambda t, y, a: lotka_volterra(t, y, a) + 1.0  # noqa: E731  (nonzero at y = 0)
    t0, y0 = jnp.float64(0.0), jnp.asarray(y0)
    order = ode.TABLEAUS[solver].order
    theirs = select(diffrax.ODETerm(field), t0, y0, ARGS, lambda term, t, y, a: term.vf(t, y, a),
                    order, rtol, atol, optimistix.rms_norm)
    ours = _initial_step(field, t0, y0, field(t0, y0, ARGS), ARGS, order, jnp.float64(rtol),
                         jnp.float64(atol))
    assert float(ours) == pytest.approx(float(theirs), rel=1e-12)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("t1", [10.0, 1.0, 1e-30, 0.0, -1.0, 1e30])
def test_clip_floor_is_100_ulps_below_t1(dtype, t1):
    """The floor past which a step ends at `t1` (Diffrax's 100 ULPs, bit arithmetic here): NumPy's
    `nextafter` towards -inf, 100 times (across 0 too: `t1 = 0` is 100 subnormals below)."""
    from effppl.ode._loop import _floor
    want = dtype(t1)
    for _ in range(100):
        want = np.nextafter(want, dtype(-np.inf))
    got = _floor(jnp.asarray(dtype(t1)))
    assert got.dtype == dtype and float(got) == float(want)


def test_outputs_at_t0_and_many_per_step():
    """`ts` with `t0` itself and more outputs than a dense-output window in one step."""
    ts = np.concatenate([np.zeros(2), np.linspace(0.01, 0.02, 40), np.array([3.0])])
    sol = ode.solve(lambda t, y, a: -y, jnp.array([2.0]), 0.0, 3.0, ts=ts, rtol=1e-10,
                    atol=1e-10)
    np.testing.assert_allclose(sol.ys[:, 0], 2.0 * np.exp(-np.asarray(ts)), rtol=1e-8)


def lv_loss(args, y0, solver="tsit5", checkpoints=None):
    sol = ode.solve(lotka_volterra, y0, 0.0, 10.0, args=args, ts=TS, solver=solver, rtol=1e-8,
                    atol=1e-8, dt0=0.01, checkpoints=checkpoints)
    return jnp.sum(sol.ys ** 2)


@pytest.mark.slow
def test_gradients_match_diffrax_and_finite_differences():
    want = jax.grad(lambda a, y: jnp.sum(diffrax_solve("tsit5", 1e-8, 1e-8, args=a,
                                                       y0=y).ys ** 2), (0, 1))(ARGS, Y0)
    for checkpoints in (None, 2):  # thinned to 2 slots: every step recomputed
        got = jax.jit(jax.grad(lv_loss, (0, 1)), static_argnums=(2, 3))(ARGS, Y0, "tsit5",
                                                                      checkpoints)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-8)
    eps, basis = 1e-6, np.eye(4)
    fd = [(lv_loss(ARGS + eps * e, Y0) - lv_loss(ARGS - eps * e, Y0)) / (2 * eps) for e in basis]
    np.testing.assert_allclose(want[0], fd, rtol=1e-5)
    _, forward = jax.jvp(lambda a: lv_loss(a, Y0), (ARGS,), (jnp.asarray(basis[2]),))
    assert float(forward) == pytest.approx(float(want[0][2]), rel=1e-8)


def _shapes(jaxpr):
    for eqn in jaxpr.eqns:
        yield from (v.aval.shape for v in eqn.outvars)
        for sub in jaxprs_in_params(eqn.params):
            yield from _shapes(sub)


def test_reverse_mode_memory_is_bounded_by_the_checkpoints():
    """`max_steps=4096`: the gradient keeps 66 checkpoints of the state (and of the saved
    outputs), and no array has 4096 rows."""
    closed = jax.make_jaxpr(jax.grad(lambda a: lv_loss(a, Y0)))(ARGS)
    check_jaxpr(closed.jaxpr)
    shapes = set(_shapes(closed.jaxpr))
    assert (66, 2) in shapes and (66, 21, 2) in shapes
    assert not any(4096 in s for s in shapes)


def test_failure_raises_eagerly_with_the_reason():
    with pytest.raises(fx.FailureError, match=r"max_steps=10 reached at t = 1\.\d+ \(t1 = 10\.0\)"):
        ode.solve(lotka_volterra, Y0, 0.0, 10.0, args=ARGS, max_steps=10, dt0=0.01)
    with pytest.raises(fx.FailureError, match="not finite"):
        ode.solve(lotka_volterra, jnp.array([jnp.nan, 1.0]), 0.0, 10.0, args=ARGS)


def test_failure_under_jit_raises_when_run_and_throw_false_returns_the_code():
    run = jax.jit(lambda y0: ode.solve(lotka_volterra, y0, 0.0, 10.0, args=ARGS, max_steps=10,
                                       dt0=0.01).ys)
    with pytest.raises((ValueError, RuntimeError), match="max_steps=10 reached"):
        jax.block_until_ready(run(Y0))
    sol = ode.solve(lotka_volterra, Y0, 0.0, 10.0, args=ARGS, ts=TS, max_steps=10, dt0=0.01,
                    throw=False)
    assert ode.RESULTS[int(sol.result)] == "max_steps"
    assert int(sol.stats["num_steps"]) == 10
    assert np.isfinite(sol.ys[:3]).all() and np.isinf(sol.ys[-1]).all()


def test_catch_outside_the_solver_gets_the_failure():
    caught = fx.catch(lambda y0: ode.solve(lotka_volterra, y0, 0.0, 10.0, args=ARGS,
                                           max_steps=10).ys,
                      lambda message, t, *_: jnp.full((1, 2), t))
    out = caught(Y0)
    assert 0.0 < float(out[0, 0]) < 10.0


@pytest.mark.slow
def test_jit_vmap_and_plain_control_flow():
    y0s = jnp.array([[1.0, 1.0], [2.0, 0.5], [0.5, 3.0]])
    solve = lambda y0, args: ode.solve(lotka_volterra, y0, 0.0, 10.0, args=args, ts=TS,  # noqa
                                       rtol=1e-10, atol=1e-10).ys
    batched = jax.jit(jax.vmap(solve, (0, None)))(y0s, ARGS)
    for i in range(3):
        np.testing.assert_allclose(batched[i], reference(y0=y0s[i]), atol=1e-7)

    def scanned(args):
        def step(y0, _):
            y = jax.lax.cond(y0[0] > 0, lambda: solve(y0, args)[2], lambda: y0)
            return y, y
        return jax.lax.scan(step, Y0, length=2)[1]

    out = jax.jit(scanned)(ARGS)
    np.testing.assert_allclose(out[0], reference()[2], atol=1e-7)
    g = jax.grad(lambda a: jnp.sum(scanned(a)))(ARGS)
    assert np.isfinite(g).all()


def test_float32():
    sol = ode.solve(lotka_volterra, Y0.astype(jnp.float32), 0.0, 10.0,
                    args=ARGS.astype(jnp.float32), ts=TS, rtol=1e-5, atol=1e-5)
    assert sol.ys.dtype == jnp.float32
    np.testing.assert_allclose(sol.ys, reference(), atol=1e-3)


def test_translated_program_has_no_effect_primitive():
    closed = fx.make_jaxpr(lambda y0: ode.solve(lotka_volterra, y0, 0.0, 10.0, args=ARGS).ys)(Y0)
    check_jaxpr(closed.jaxpr)
    names = {e.primitive.name for e in closed.jaxpr.eqns}
    assert not names & {"perform", "handle", "resume"} and not closed.effects


@pytest.mark.parametrize("call, error, match", [
    (dict(solver="rk4"), ode.ODEInputError, "solver"),
    (dict(max_steps=0), ode.ODEInputError, "max_steps"),
    (dict(ts=jnp.array([3.0, 1.0])), ode.ODEInputError, "increasing"),
    (dict(ts=jnp.array([11.0])), ode.ODEInputError, r"\[t0, t1\]"),
    (dict(t1=-1.0), ode.ODEInputError, "t0 <= t1"),
    (dict(rtol=-1.0), ode.ODEInputError, "rtol"),
    (dict(y0=jnp.array([1 + 1j, 1.0])), ode.ODETypeError, "float"),
    (dict(f=lambda t, y, a: y[:1]), ode.ODETypeError, "structure and shapes"),
    (dict(f=3), ode.ODETypeError, "callable"),
    (dict(controller=dict(pcoeff=1.0)), ode.ODETypeError, "PIDController"),
])
def test_bad_input_names_the_argument(call, error, match):
    kwargs = dict(f=lotka_volterra, y0=Y0, t0=0.0, t1=10.0, args=ARGS) | call
    with pytest.raises(error, match=match):
        ode.solve(kwargs.pop("f"), kwargs.pop("y0"), kwargs.pop("t0"), kwargs.pop("t1"), **kwargs)
