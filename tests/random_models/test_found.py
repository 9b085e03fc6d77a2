"""Regression tests of the bugs the random models found in effppl, one per behaviour, each
against a hand-written oracle or NumPyro (the random model that found it is in the docstring)."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import pytest
from numpyro.infer import log_likelihood as numpyro_log_likelihood

import effppl
from effppl import distributions as dist
from effppl.handlers import log_density, seed, trace
from effppl.infer import log_likelihood


@pytest.mark.slow
def test_lkj_site_in_a_plate_inside_vmap_is_drawn_and_scored():
    """`vmap(size=1): plate(3, dim=-3): x ~ LKJCholesky(2, c)` raised a shape error from
    NumPyro's Dirichlet: promoting the distribution's batch shape under `vmap` left the Beta it
    draws with at its old shape."""
    conc = jnp.array([0.6, 1.0, 2.5]).reshape(3, 1, 1)

    def model():
        def one(_):
            with effppl.plate("p", 3, dim=-3):
                return effppl.sample("x", dist.LKJCholesky(2, conc))
        jax.vmap(one)(jnp.arange(2.0))

    x = trace(seed(model, 0)).get_trace()["x"]["value"]
    assert x.shape == (2, 3, 1, 1, 2, 2)
    np.testing.assert_allclose(jnp.sum(x ** 2, -1), 1.0, rtol=1e-12)  # unit rows
    expected = jnp.sum(dist.LKJCholesky(2, conc).log_prob(x))
    np.testing.assert_allclose(log_density(model, (), {}, {"x": x})[0], expected, rtol=1e-12)


def test_deterministic_site_under_vmap_has_the_batch_axis_whatever_its_value():
    """A deterministic site under `jax.vmap` whose value does not depend on the mapped data was
    recorded once (shape `()`), where one that does, and every sample site, has the batch axis:
    its layout depended on its data flow."""
    def model():
        def outer(x):
            def inner(_):
                effppl.deterministic("c", 1.5)
                effppl.deterministic("xc", x)
                return effppl.sample("b", dist.Normal(0.0, 1.0))
            jax.vmap(inner)(jnp.arange(2.0))
            return effppl.deterministic("d", -0.5)
        return jax.vmap(outer)(jnp.arange(3.0))

    tr = trace(seed(model, 0)).get_trace()
    assert {n: s["value"].shape for n, s in tr.items()} == {
        "c": (3, 2), "xc": (3, 2), "b": (3, 2), "d": (3,)}
    np.testing.assert_array_equal(tr["c"]["value"], 1.5)
    np.testing.assert_array_equal(tr["xc"]["value"], jnp.broadcast_to(jnp.arange(3.0)[:, None],
                                                                    (3, 2)))
    np.testing.assert_array_equal(tr["d"]["value"], -0.5)


def test_jacfwd_and_hessian_of_a_log_density_with_a_deterministic_site_on_the_path():
    """`jax.hessian` (jacfwd over jacrev) of the log density of a model whose likelihood reads a
    deterministic site raised "got axis spec None but output was batched": the site was batched
    along jacfwd's `vmap` of tangents, so the primal was too (AutoLaplaceApproximation failed).
    Oracle: the same derivatives of the hand-written density."""
    x = jnp.array([0.0, 1.0, 2.0])
    y = jnp.array([0.1, 0.5, -0.2])

    def model():
        a = effppl.sample("a", dist.Normal(0.0, 1.0))
        m = effppl.deterministic("m", a * x)
        effppl.sample("y", dist.Normal(m, 1.0), obs=y)

    def ours(a):
        return log_density(model, (), {}, {"a": a})[0]

    def hand(a):
        return dist.Normal(0.0, 1.0).log_prob(a) + jnp.sum(dist.Normal(a * x, 1.0).log_prob(y))

    a = jnp.asarray(0.3)
    np.testing.assert_allclose(jax.jacfwd(ours)(a), jax.grad(hand)(a), rtol=1e-12)
    np.testing.assert_allclose(jax.hessian(ours)(a), jax.hessian(hand)(a), rtol=1e-12)
    np.testing.assert_allclose(jax.hessian(ours)(a), -1.0 - jnp.sum(x ** 2), rtol=1e-12)


def test_log_likelihood_of_a_model_without_latent_sites_has_a_batch_of_one():
    """`log_likelihood(model, {}, y)` for a model whose sites are all observed raised JAX's
    "vmap must have at least one non-None value in in_axes"; NumPyro returns a batch of one."""
    y = jnp.array([0.3, -1.2, 2.0])

    def model(y, sample=effppl.sample):
        sample("y", dist.Normal(0.5, 2.0), obs=y)

    ours = log_likelihood(model, {}, y)["y"]
    theirs = numpyro_log_likelihood(lambda y: model(y, numpyro.sample), {}, y)["y"]
    assert ours.shape == theirs.shape == (1, 3)
    np.testing.assert_allclose(ours, theirs, rtol=1e-12)
    assert log_likelihood(model, {}, y, batch_ndims=2)["y"].shape == (1, 1, 3)


def test_log_likelihood_needs_no_draws_of_a_site_substituted_inside_the_model():
    """`plate(3): o ~ HalfNormal [obs]; substitute(x5): x4 ~ LogNormal; x5 ~ Ordered3` (CI shard
    8, 2026-12-04): `log_likelihood` asked for draws of `x5`, whose value the model's own
    `substitute` gives (the potential and `log_density` take none). Oracles: the hand-written
    pointwise density at the substituted value, and NumPyro, where draws of the site, when
    passed, replace that value (an outer `substitute` has the last word, as in NumPyro)."""
    y = jnp.array([0.3, -1.2])

    def model(y, ppl=effppl, handlers=effppl.handlers):
        a = ppl.sample("a", dist.Normal(0.0, 1.0))
        with handlers.substitute(data={"x": 0.5}):
            x = ppl.sample("x", dist.Normal(a, 1.0))
        with ppl.plate("n", 2):
            ppl.sample("y", dist.Normal(x + a, 1.0), obs=y)

    def numpyro_model(y):
        model(y, numpyro, numpyro.handlers)

    a, x = jnp.array([0.2, -0.4]), jnp.array([3.0, 4.0])
    expected = jax.scipy.stats.norm.logpdf(y[None], (0.5 + a)[:, None], 1.0)
    ours = log_likelihood(model, {"a": a}, y)["y"]
    np.testing.assert_allclose(ours, expected, rtol=1e-6)
    np.testing.assert_allclose(ours, numpyro_log_likelihood(numpyro_model, {"a": a}, y)["y"],
                               rtol=1e-6)
    np.testing.assert_allclose(
        log_likelihood(model, {"a": a, "x": x}, y)["y"],
        numpyro_log_likelihood(numpyro_model, {"a": a, "x": x}, y)["y"], rtol=1e-6)
    with pytest.raises(effppl.infer.PredictiveError, match=r"sites \['a'\] are missing"):
        log_likelihood(model, {"x": x}, y)


def test_factor_in_a_plate_inside_vmap_is_scored():
    """`vmap(2): plate(4, dim=-2): factor(f, vmapx)` (CI shard 8, 2026-12-04) raised JAX's
    "Incompatible types for broadcasting": numpyro's batch-shape rule returns a `Unit` (what
    `factor` samples) unchanged, so its batch shape missed the vmap's axis. Oracle: the
    hand-written density, 4 plate rows of each element's factor."""
    def model(x):
        def inner(xi):
            with effppl.plate("p", 4, dim=-2):
                effppl.factor("f", xi)
            return 0.0

        jax.vmap(inner)(x)
        effppl.sample("z", dist.Normal(0.0, 1.0))

    x = jnp.array([0.3, -0.7])
    lp, _ = log_density(model, (x,), {}, {"z": 0.1})
    np.testing.assert_allclose(lp, 4 * jnp.sum(x) + jax.scipy.stats.norm.logpdf(0.1), rtol=1e-12)


def test_ordered_site_in_a_plate_inside_vmap_has_a_value_per_plate_row():
    """`vmap(size=2): plate(4): scan(3): x ~ Ordered3(...)` failed in JAX's batching of the scan
    ("index 2 is out of bounds" from a reduction): numpyro's batch promotion leaves a
    `TransformedDistribution`'s base and batch shape as built, so the site drew one value per
    `vmap` element, not one per plate row."""
    from numpyro.distributions.transforms import OrderedTransform

    def ordered(c):
        base = dist.Normal(jnp.zeros(3), c[..., None] + jnp.ones(3)).to_event(1)
        return dist.TransformedDistribution(base, OrderedTransform())

    def model():
        def one(_):
            with effppl.plate("p", 4):
                def step(c, _):
                    x = effppl.sample("x", ordered(c))
                    effppl.sample("m", dist.Normal(jnp.mean(x), 1.0))
                    return c, None
                jax.lax.scan(step, jnp.linspace(0.5, 2.0, 4), jnp.arange(3.0))
        jax.vmap(one)(jnp.arange(2.0))

    tr = trace(seed(model, 0)).get_trace()
    x, m = tr["x"]["value"], tr["m"]["value"]
    assert x.shape == (3, 2, 4, 3) and m.shape == (3, 2, 4)
    assert bool(jnp.all(jnp.diff(x, axis=-1) > 0))  # ordered rows
    expected = (jnp.sum(ordered(jnp.linspace(0.5, 2.0, 4)).log_prob(x))
                + jnp.sum(dist.Normal(jnp.mean(x, (-2, -1))[..., None], 1.0).log_prob(m)))
    np.testing.assert_allclose(log_density(model, (), {}, {"x": x, "m": m})[0], expected,
                               rtol=1e-12)


@pytest.mark.slow
def test_lognormal_in_a_plate_in_vmap_in_a_reversed_scan():
    """Found by the long run (seed 2, model seed 65535): effppl raised numpyro's "Cannot
    broadcast distribution of shape (3, 1, 1) to shape (1, 2)" on a model whose observed
    LogNormal sits in a plate inside a `vmap` inside a scan: numpyro's promotion of an
    `ExpandedDistribution` reads the loop's axes off its base, and it promotes no
    `TransformedDistribution`. Compared with the independent evaluator."""
    from . import spec
    from .compare import check
    model = eval("(Sample(name='x1', family='Gamma', params=(Mul(c=2.0, a=Const(value=0.3)), Add(a=Const(value=0.0), b=Const(value=-0.5))), observed=False), Handle(name='h2', kind='mask', body=(Sample(name='o3', family='Bernoulli', params=(Const(value=0.3),), observed=True), Handle(name='h4', kind='scale', body=(Sample(name='x5', family='Beta', params=(Var(kind='ref', name='o3'), Const(value=1.0)), observed=False), Deterministic(name='d6', expr=Tanh(a=Const(value=-0.5))), Plate(name='p7', size=2, dim=None, body=(Deterministic(name='d8', expr=Var(kind='plate', name='p7')), Deterministic(name='d9', expr=Tanh(a=Var(kind='ref', name='o3')))))), payload=2.0)), payload=True), Sample(name='o10', family='Normal', params=(Var(kind='ref', name='o3'), Var(kind='ref', name='x1')), observed=True), Sample(name='o11', family='NormalVec3', params=(Var(kind='ref', name='o10'), Var(kind='ref', name='x1')), observed=True), Scan(name='s12', length=3, reverse=True, init=Add(a=Var(kind='ref', name='d8'), b=Const(value=-1.0)), carry_from=None, body=(Vmap(name='v13', size=1, body=(Plate(name='p14', size=2, dim=None, body=(Sample(name='o15', family='LogNormal', params=(Var(kind='ref', name='o3'), Var(kind='xs', name='s12')), observed=True), Deterministic(name='d16', expr=Mul(c=-1.5, a=Var(kind='xs', name='s12'))))),)), Factor(name='f17', expr=Mul(c=2.0, a=Var(kind='xs', name='s12'))))))", vars(spec))
    check(model, 65535, pointwise=True, against_numpyro=False)


@pytest.mark.parametrize("family", ["LogNormal", "Normal"])
def test_observed_transformed_site_in_a_plate_in_vmap_in_a_scan(family):
    """The shrunk form of the model above: `scan(3): vmap(1): plate(2): o ~ LogNormal(m, s)`,
    its log density and gradient against the hand-written sum of `log_prob`s (Normal: the
    control that worked before)."""
    y = jnp.exp(jnp.linspace(-1.0, 1.0, 6)).reshape(3, 1, 2)
    s = jnp.array([0.5, 1.0, 2.0])
    family = getattr(dist, family)

    def model():
        m = effppl.sample("m", dist.Normal(0.0, 1.0))

        def step(carry, xs):
            yt, st = xs
            def element(yv):
                with effppl.plate("p", 2):
                    effppl.sample("o", family(m, st), obs=yv)
            jax.vmap(element)(yt)
            return carry, None
        jax.lax.scan(step, 0.0, (y, s))

    def hand(m):
        return dist.Normal(0.0, 1.0).log_prob(m) + jnp.sum(
            family(m, s[:, None, None]).log_prob(y))

    for m in (-0.3, 0.8):
        lp, grad = jax.value_and_grad(lambda m: log_density(model, (), {}, {"m": m})[0])(m)
        np.testing.assert_allclose(lp, hand(m), rtol=1e-12)
        np.testing.assert_allclose(grad, jax.grad(hand)(m), rtol=1e-12)
    tr = trace(seed(model, 0)).get_trace()
    assert tr["o"]["fn"].batch_shape == (3, 1, 2)


def test_site_in_a_scan_inside_nested_vmaps_has_every_batch_axis():
    """`vmap(3): vmap(2): scan(T=4): x ~ Normal(xs, 1)` recorded `x` as `(4, 2)`, without the
    outer `vmap`'s axis, and `log_density` refused the `(4, 3, 2)` value: the outer `vmap`'s
    index was taken in the site's batch rule, while JAX batched the scan body, and was left
    behind in the batched body's constants. Found by the long run (`x10`, `x19`)."""
    def model():
        def inner(_):
            def step(c, x):
                effppl.sample("x", dist.Normal(x, 1.0))
                effppl.deterministic("d", 2.0 * x)
                return c, None
            jax.lax.scan(step, 0.0, jnp.arange(4.0))
        jax.vmap(lambda _: jax.vmap(inner)(jnp.arange(2.0)))(jnp.arange(3.0))

    tr = trace(seed(model, 0)).get_trace()
    assert tr["x"]["value"].shape == (4, 3, 2)
    assert tr["d"]["value"].shape == (4, 3, 2)
    x = tr["x"]["value"]
    assert len(np.unique(np.asarray(x))) == x.size  # independent draws per element and step
    np.testing.assert_array_equal(tr["d"]["value"], jnp.broadcast_to(
        2.0 * jnp.arange(4.0)[:, None, None], (4, 3, 2)))
    expected = jnp.sum(dist.Normal(jnp.arange(4.0)[:, None, None], 1.0).log_prob(x))
    np.testing.assert_allclose(log_density(model, (), {}, {"x": x})[0], expected, rtol=1e-12)


def test_cond_in_a_scan_inside_vmap_with_a_batched_branch_index():
    """`vmap(2): cond(pred=-0.5): [x3 ~ Gamma(...); scan(T=1): x6 ~ LogNormal(...)] | [...]`,
    then a second `vmap` of a `cond` whose predicate reads the first: raised JAX's
    `UnexpectedTracerError` (an outer `vmap`'s index leaked out of a batched loop body). The
    smallest form: a site in a `scan` in a `cond` in nested `vmap`s."""
    def model():
        def inner(v):
            def branch0(_):
                def step(c, x):
                    return c, effppl.sample("y", dist.Normal(x + v, 1.0))
                return jax.lax.scan(step, 0.0, jnp.arange(2.0))[1]
            return jax.lax.cond(v > 0, branch0, lambda _: jnp.zeros(2), None)
        jax.vmap(lambda _: jax.vmap(inner)(jnp.array([-1.0, 1.0])))(jnp.arange(3.0))

    # the `cond` runs element by element (its predicate is batched): rows follow occurrences,
    # loops (map over the inner vmap's 2 elements, scan of 2) first, the outer vmap's axis last;
    # only element 1 (v = 1) takes the branch, so rows 0-1 are its two steps, rows 2-3 unused
    y = trace(seed(model, 0)).get_trace()["y"]["value"]
    assert y.shape == (2, 2, 3)
    rows = y.reshape(4, 3)
    assert np.all(rows[:2] != 0) and len(np.unique(np.asarray(rows[:2]))) == 6
    expected = jnp.sum(dist.Normal(jnp.arange(2.0)[:, None] + 1.0, 1.0).log_prob(rows[:2]))
    np.testing.assert_allclose(log_density(model, (), {}, {"y": y})[0], expected, rtol=1e-12)


@pytest.mark.parametrize("dim", [-1, -2, -3])
def test_uniform_with_a_plate_vector_bound_in_a_plate_inside_vmap(dim):
    """Found by the long run (seed 20261206, model seed 38516): `vmap(3): plate(3, dim=-3): x ~
    Uniform(-2, -2 + w[plate])` had 3x the log density (27 terms for 9): the support's scalar
    bound, batched to `(3,)` by the `vmap`, broadcast against the value's last axis. Against the
    hand-written sum; Normal in the same place is the control that worked before."""
    w = (jax.nn.softplus(jnp.linspace(-1.0, 1.0, 3)) + 0.5).reshape((3,) + (1,) * (-dim - 1))

    def model():
        def body(i):
            with effppl.plate("p", 3, dim=dim):
                effppl.sample("x", dist.Uniform(-2.0, -2.0 + w))
        jax.vmap(body)(jnp.arange(3))

    x = jnp.linspace(-1.95, -1.5, 3).reshape((3,) + (1,) * w.ndim) + jnp.zeros(w.shape)
    expected = jnp.sum(dist.Uniform(-2.0, -2.0 + w).log_prob(x))
    np.testing.assert_allclose(effppl.log_density(model, (), {}, {"x": x})[0], expected,
                               rtol=1e-12)
    trace = effppl.handlers.trace(effppl.handlers.seed(model, 0)).get_trace()
    assert trace["x"]["value"].shape == (3, *w.shape)


def test_uniform_bound_model_of_the_long_run():
    """The long run's model itself (above), against the independent evaluator."""
    from . import spec
    from .compare import check
    model = eval("(Vmap(name='v1', size=3, body=(Plate(name='p15', size=3, dim=-3, body=(Sample(name='x16', family='Uniform', params=(Const(value=-2.0), Var(kind='plate', name='p15')), observed=False),)),)),)", vars(spec))  # noqa: E501
    check(model, 38516, pointwise=True, against_numpyro=False)


def test_vmapped_uniform_bound_in_a_plate_in_a_scan_in_vmap():
    """Found by the long run (seed 20261206, model seed 1036), before the fix above: `vmap(2):
    scan(2): plate(4): x ~ Uniform(v, 2 * plate)`, a lower bound batched by the `vmap` beside a
    plate-vector upper bound, raised "Incompatible shapes for broadcasting: shapes=[(2, 4),
    (2,)]" from the support check. The same cause as above (the constraint's arrays not aligned
    after the `vmap` axis); against the hand-written sum and the independent evaluator."""
    from . import spec
    from .compare import check
    model = eval("(Vmap(name='v7', size=2, body=(Scan(name='s8', length=2, reverse=False, init=Var(kind='vmapx', name='v7'), carry_from=None, body=(Plate(name='p9', size=4, dim=None, body=(Sample(name='x12', family='Uniform', params=(Var(kind='vmapx', name='v7'), Mul(c=2.0, a=Var(kind='plate', name='p9'))), observed=False),)),)),)),)", vars(spec))  # noqa: E501
    check(model, 1036, pointwise=True, against_numpyro=False)

    low = jnp.array([-0.5, 0.25])
    high = 2.0 * jnp.arange(1.0, 5.0)

    def hand_model():
        def one(v):
            def step(c, _):
                with effppl.plate("p", 4):
                    effppl.sample("x", dist.Uniform(v, high))
                return c, None
            jax.lax.scan(step, 0.0, None, length=2)
        jax.vmap(one)(low)

    # laid out [scan step, vmap row, plate row]: a `vmap`'s axis follows the loops' axes
    x = low[:, None] + 0.25 * jnp.arange(1.0, 5.0) + jnp.zeros((2, 2, 4))
    expected = jnp.sum(dist.Uniform(low[:, None], high).log_prob(x))
    assert jnp.isfinite(expected)
    np.testing.assert_allclose(log_density(hand_model, (), {}, {"x": x})[0], expected,
                               rtol=1e-12)
    outside = x.at[:, 1, 0].set(0.0)  # below row 1's bound 0.25, above row 0's -0.5
    assert log_density(hand_model, (), {}, {"x": outside})[0] == -jnp.inf


def test_uniform_with_a_vmapped_bound_as_an_event():
    """`vmap(3): x ~ Uniform(v, high[3]).to_event(1)`: the constraint held by the `Independent`'s
    base distribution was not aligned to the `vmap` axis, so its support check compared `v[i]`
    with the event axis and scored -inf for values inside the support, silently. Against the
    hand-written sum; the random models' `UniformVec2` family draws it since."""
    low = jnp.array([-1.0, 0.0, 0.5])

    def model():
        def one(v):
            effppl.sample("x", dist.Uniform(v, jnp.full(3, 2.0)).to_event(1))
        jax.vmap(one)(low)

    x = jnp.array([[-0.9, -0.5, 0.0], [0.1, 0.2, 0.3], [0.6, 1.0, 1.9]])
    expected = jnp.sum(dist.Uniform(low[:, None], 2.0).log_prob(x))
    np.testing.assert_allclose(log_density(model, (), {}, {"x": x})[0], expected, rtol=1e-12)
    assert log_density(model, (), {}, {"x": x.at[2, 0].set(0.4)})[0] == -jnp.inf


@pytest.mark.parametrize("length", [3, 0])
def test_deterministic_of_a_plate_shaped_carry(length):
    """The evaluator's bug, found by the long run (seed 20261207, model seeds 688 and 1607):
    `plate(p): scan(init=2 * plate(p)): d = det(carry)` has the carry's shape `(size,)` at each
    step, but the evaluator's analysis gave `d` the shape `()` (a carry was a scalar to it): it
    raised assembling `d` (3 steps) or expected `(0,)` where effppl records `(0, 3, 1)` (a scan
    that never runs, `dim=-2`). effppl against the hand-written trace, and the evaluator since."""
    from . import spec as S
    from .compare import check
    carry = S.Var("carry", "s")
    body = (S.Deterministic("d", carry), S.Factor("f", S.Var("ref", "d")))
    scan = S.Scan("s", length, False, S.Mul(2.0, S.Var("plate", "p")), "d", body)
    model = (S.Plate("p", 3, -2, (scan,)),)
    check(model, 1, against_numpyro=False)

    def hand():
        with effppl.plate("p", 3, dim=-2):
            init = 2.0 * jnp.linspace(-1.0, 1.0, 3)[:, None]

            def step(c, _):
                d = effppl.deterministic("d", c)
                effppl.factor("f", jnp.tanh(jnp.mean(d)))
                return 0.5 * c + 0.5 * jnp.tanh(jnp.mean(d)), None
            jax.lax.scan(step, init, None, length=length)

    tr = trace(seed(hand, 0)).get_trace()
    assert tr["d"]["value"].shape == (length, 3, 1)


def _stick_breaking_log_density(u):
    """Hand-written: `Dirichlet(1, 1, 1)` at `t(u)` plus `log|det J_t(u)|`, per row of `u`."""
    from numpyro.distributions.transforms import biject_to
    d = dist.Dirichlet(jnp.ones(3))
    t = biject_to(d.support)
    return d.log_prob(t(u)) + t.log_abs_det_jacobian(u, t(u))


@pytest.mark.slow
@pytest.mark.parametrize("take_normal", [True, False])
@pytest.mark.parametrize("batched_predicate", [True, False])
def test_cond_families_of_different_unconstrained_shapes_under_vmap(batched_predicate,
                                                                    take_normal):
    """The long run (seed 20261207, 9 of its 13 mismatches): under `jax.vmap`, a site whose `cond`
    branches hold a `Normal(3).to_event(1)` and a `Dirichlet(3)` (3 and 2 unconstrained
    coordinates) was laid out `(3, 3)` (a row per element) when the predicate was batched but
    `(9,)` (the whole batch flattened) when it was not: `potential_energy` refused the other
    layout. Both are `(3, 3)` now, each element's branch reading its row from the front, the
    unread coordinates scored standard normal, against the hand-written sum."""
    from effppl.infer.util import potential_energy
    v = jnp.arange(3.0)
    p = jnp.full(3, 0.3 if take_normal else -0.3)

    def model(v, p):
        def one(vi, pi):
            return jax.lax.cond(
                pi > 0, lambda: effppl.sample("x", dist.Normal(jnp.zeros(3) + vi, 1.0).to_event(1)),
                lambda: effppl.sample("x", dist.Dirichlet(jnp.ones(3))))
        return jax.vmap(one, in_axes=(0, 0 if batched_predicate else None))(
            v, p if batched_predicate else p[0])

    u = jnp.array([[0.2, -0.4, 0.7], [1.1, 0.0, -0.3], [-0.5, 0.9, 0.4]])
    if take_normal:
        expected = jnp.sum(dist.Normal(v[:, None], 1.0).log_prob(u))
    else:
        expected = jnp.sum(_stick_breaking_log_density(u[:, :2])) + jnp.sum(
            dist.Normal(0.0, 1.0).log_prob(u[:, 2]))
    np.testing.assert_allclose(-potential_energy(model, (v, p), {}, {"x": u}), expected,
                               rtol=1e-12)
    tr = trace(seed(model, 0)).get_trace(v, p)
    assert tr["x"]["value"].shape == (3, 3)


def test_cond_families_of_different_unconstrained_shapes_in_a_plate():
    """The same layout without `vmap`: the plate's axis stays, one flat row per plate element."""
    from effppl.infer.util import potential_energy

    def model(p):
        with effppl.plate("i", 4, dim=-1):
            return jax.lax.cond(
                p > 0, lambda: effppl.sample("x", dist.Normal(jnp.zeros(3), 1.0).to_event(1)),
                lambda: effppl.sample("x", dist.Dirichlet(jnp.ones(3))))

    u = jnp.linspace(-1.0, 1.0, 12).reshape(4, 3)
    np.testing.assert_allclose(-potential_energy(model, (1.0,), {}, {"x": u}),
                               jnp.sum(dist.Normal(0.0, 1.0).log_prob(u)), rtol=1e-12)
    expected = jnp.sum(_stick_breaking_log_density(u[:, :2])) + jnp.sum(
        dist.Normal(0.0, 1.0).log_prob(u[:, 2]))
    np.testing.assert_allclose(-potential_energy(model, (-1.0,), {}, {"x": u}), expected,
                               rtol=1e-12)
