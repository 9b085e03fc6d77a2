"""The PPL handlers against NumPyro on the same model and against hand-written log densities."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import pytest
from jax.scipy import stats
from numpyro.infer.util import log_density as np_log_density
from numpyro.infer.util import potential_energy as np_potential_energy

import effppl
from effppl import distributions as dist
from effppl import handlers

from ..effects._util import assert_translated

Y8 = jnp.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
S8 = jnp.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])


def eight_schools(sample, plate):
    def model(y, sigma):
        mu = sample("mu", dist.Normal(0, 5))
        tau = sample("tau", dist.HalfCauchy(5))
        with plate("J", y.shape[0]):
            theta = sample("theta_tilde", dist.Normal(0, 1))
            sample("y", dist.Normal(mu + tau * theta, sigma), obs=y)
    return model


def logistic(sample, plate):
    def model(x, y):
        w = sample("w", dist.Normal(jnp.zeros(x.shape[1]), 1.0).to_event(1))
        b = sample("b", dist.Normal(0.0, 10.0))
        with plate("N", x.shape[0]):
            sample("y", dist.Bernoulli(logits=x @ w + b), obs=y)
    return model


def _close(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-9, atol=1e-12)


# ---------------------------------------------------------------- flat models equal NumPyro

@pytest.mark.parametrize("u", [0.0, 1.3, -2.0])
def test_eight_schools_equals_numpyro(u):
    ours = eight_schools(effppl.sample, effppl.plate)
    theirs = eight_schools(numpyro.sample, numpyro.plate)
    params = {"mu": u, "tau": abs(u) + 0.5, "theta_tilde": jnp.linspace(-1, 1, 8) * u}
    _close(effppl.log_density(ours, (Y8, S8), {}, params)[0],
           np_log_density(theirs, (Y8, S8), {}, params)[0])
    _close(handlers.potential_energy(ours, (Y8, S8), {}, params),
           np_potential_energy(theirs, (Y8, S8), {}, params))


def test_logistic_regression_equals_numpyro():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(40, 3)), (rng.random(40) > 0.5).astype(float)
    params = {"w": jnp.array([0.3, -1.0, 2.0]), "b": jnp.array(0.7)}
    ours, theirs = logistic(effppl.sample, effppl.plate), logistic(numpyro.sample, numpyro.plate)
    _close(handlers.potential_energy(ours, (x, y), {}, params),
           np_potential_energy(theirs, (x, y), {}, params))
    assert_translated(lambda p: handlers.potential_energy(ours, (x, y), {}, p), params)


def _scaled_constrained(sample, plate, scale):
    def model(y):
        sigma = sample("sigma", dist.HalfNormal(1.0))                     # exp transform
        with scale(scale=2.5), plate("g", 3):
            p = sample("p", dist.Beta(2.0, 3.0))                          # sigmoid transform
        with plate("n", y.shape[0]):
            sample("y", dist.Normal(jnp.repeat(p, 2) * 0.0 + sigma, 1.0), obs=y)
    return model


def test_jacobians_of_scaled_sites_equal_numpyro():
    """The unconstrained log density adds each latent's log|det J|, scaled like its site."""
    y = jnp.array([0.3, -0.2, 1.1, 0.8, 0.0, 0.5])
    ours = _scaled_constrained(effppl.sample, effppl.plate, handlers.scale)
    theirs = _scaled_constrained(numpyro.sample, numpyro.plate, numpyro.handlers.scale)
    params = {"sigma": jnp.array(-0.4), "p": jnp.array([0.2, -1.5, 0.9])}
    _close(handlers.potential_energy(ours, (y,), {}, params),
           np_potential_energy(theirs, (y,), {}, params))
    _close(jax.grad(lambda p: handlers.potential_energy(ours, (y,), {}, p))(params)["p"],
           jax.grad(lambda p: np_potential_energy(theirs, (y,), {}, p))(params)["p"])


# ---------------------------------------------------------------- sites inside control flow

def random_walk(T):
    def step(x, _):
        x = effppl.sample("x", dist.Normal(x, 1.0))
        return x, x
    return jax.lax.scan(step, 0.0, None, length=T)[1]


def test_latent_sites_in_scan_are_stacked_rows():
    xs = jnp.array([0.5, -0.2, 1.0, 0.3])
    prev = jnp.concatenate([jnp.zeros(1), xs[:-1]])
    lp, tr = effppl.log_density(random_walk, (4,), {}, {"x": xs})
    _close(lp, jnp.sum(stats.norm.logpdf(xs, prev, 1.0)))
    _close(tr["x"]["value"], xs)
    _close(handlers.potential_energy(random_walk, (4,), {}, {"x": xs}), -lp)


def test_seed_gives_a_fresh_key_per_scan_iteration():
    draws = handlers.trace(handlers.seed(random_walk, 3)).get_trace(6)["x"]["value"]
    assert draws.shape == (6,) and len(np.unique(np.diff(np.asarray(draws)))) == 5
    again = handlers.trace(handlers.seed(random_walk, 3)).get_trace(6)["x"]["value"]
    _close(draws, again)


def _reversed_walk(y):
    def step(x, yt):
        x = effppl.sample("x", dist.Normal(x, 1.0))
        effppl.sample("y", dist.Normal(x, 0.5), obs=yt)
        return x, x
    return jax.lax.scan(step, 0.0, y, reverse=True)[1]


def test_rows_of_a_reversed_scan_are_in_iteration_order():
    """Row t of a site in `scan(..., reverse=True)` belongs to iteration t (the order of the
    scan's own outputs, and of NumPyro's traces), in every handler."""
    y, xs = jnp.array([0.3, -0.2, 1.1, 0.8]), jnp.array([0.5, -0.1, 0.9, 0.2])
    expected, prev = 0.0, 0.0
    for t in (3, 2, 1, 0):  # the order the reversed scan runs in
        expected += stats.norm.logpdf(xs[t], prev, 1.0) + stats.norm.logpdf(y[t], xs[t], 0.5)
        prev = xs[t]
    lp, tr = effppl.log_density(_reversed_walk, (y,), {}, {"x": xs})
    _close(lp, expected)
    _close(tr["x"]["value"], xs)
    _close(tr["y"]["value"], y)
    _close(handlers.substitute(_reversed_walk, {"x": xs})(y), xs)
    drawn = handlers.trace(handlers.seed(_reversed_walk, 1)).get_trace(y)
    _close(drawn["x"]["value"], handlers.seed(_reversed_walk, 1)(y))
    _close(effppl.log_density(_reversed_walk, (y,), {}, {"x": drawn["x"]["value"]})[0],
           sum(jnp.sum(site["log_prob"]) for site in drawn.values()))


def test_substitute_and_do_set_every_occurrence_in_scan():
    xs = jnp.arange(5.0)
    out = handlers.substitute(random_walk, {"x": xs})(5)
    _close(out, xs)
    out = handlers.do(handlers.seed(random_walk, 0), {"x": xs})(5)
    _close(out, xs)  # the model goes on with the interventions


def test_do_keeps_a_fresh_site_whose_value_does_not_propagate():
    """NumPyro's/Pyro's `do`: every occurrence of `x` is still a latent site (drawn, valued,
    counted) but the walk continues from the intervened values."""
    xs, own = jnp.arange(5.0), jnp.linspace(-1.0, 1.0, 5)
    tr = handlers.trace(handlers.seed(handlers.do(random_walk, {"x": xs}), 0)).get_trace(5)
    assert not tr["x"]["is_observed"] and not np.allclose(tr["x"]["value"], xs)
    lp, _ = effppl.log_density(handlers.do(random_walk, {"x": xs}), (5,), {}, {"x": own})
    prev = jnp.concatenate([jnp.zeros(1), xs[:-1]])
    _close(lp, jnp.sum(stats.norm.logpdf(own, prev, 1.0)))
    with pytest.raises(effppl.SiteError, match="`x`"):  # still latent: it needs a value
        effppl.log_density(handlers.do(random_walk, {"x": xs}), (5,), {}, {})

    theirs = numpyro.handlers.trace(numpyro.handlers.seed(
        numpyro.handlers.do(lambda: numpyro.sample("z", numpyro.distributions.Normal(0.0, 1.0)),
                            {"z": 1.0}), 0)).get_trace()
    ours = handlers.trace(handlers.seed(
        handlers.do(lambda: effppl.sample("z", dist.Normal(0.0, 1.0)), {"z": 1.0}), 0)).get_trace()
    assert set(ours) == set(theirs) == {"z"}
    assert ours["z"]["value"] != 1.0 and theirs["z"]["value"] != 1.0


def hierarchical(y):  # y: (G, T)
    def group(_, yg):
        mu = effppl.sample("mu", dist.Normal(0.0, 1.0))

        def step(z, yt):
            z = effppl.sample("z", dist.Normal(z, 0.5))
            effppl.sample("y", dist.Normal(z + mu, 1.0), obs=yt)
            return z, None
        jax.lax.scan(step, 0.0, yg)
        return None, None
    jax.lax.scan(group, None, y)


def test_nested_scans_give_outer_inner_shaped_sites():
    G, T = 3, 4
    rng = np.random.default_rng(1)
    y, mu, z = rng.normal(size=(G, T)), rng.normal(size=G), rng.normal(size=(G, T))
    lp, tr = effppl.log_density(hierarchical, (y,), {}, {"mu": mu, "z": z})
    prev = np.concatenate([np.zeros((G, 1)), z[:, :-1]], axis=1)
    ref = (stats.norm.logpdf(mu).sum() + stats.norm.logpdf(z, prev, 0.5).sum()
           + stats.norm.logpdf(y, z + mu[:, None], 1.0).sum())
    _close(lp, ref)
    assert tr["z"]["value"].shape == (G, T) and tr["mu"]["value"].shape == (G,)
    prior = handlers.trace(handlers.seed(hierarchical, 0)).get_trace(y)
    assert prior["z"]["value"].shape == (G, T) and prior["y"]["value"].shape == (G, T)


def regime_switching(regime, y):
    def step(x, inp):
        r, yt = inp
        x = jax.lax.cond(r == 0, lambda: effppl.sample("x", dist.Normal(x, 1.0)),
                         lambda: effppl.sample("x", dist.StudentT(3.0, x, 2.0)))
        effppl.sample("y", dist.Normal(x, 0.5), obs=yt)
        return x, None
    jax.lax.scan(step, 0.0, (regime, y))


def test_cond_with_different_families_per_branch():
    regime, y = jnp.array([0, 1, 1, 0, 1]), jnp.linspace(-1, 1, 5)
    xs = jnp.array([0.3, 0.1, -0.4, 0.2, 0.0])
    prev = jnp.concatenate([jnp.zeros(1), xs[:-1]])
    ref = jnp.sum(jnp.where(regime == 0, stats.norm.logpdf(xs, prev, 1.0),
                            stats.t.logpdf(xs, 3.0, prev, 2.0))) + \
        jnp.sum(stats.norm.logpdf(y, xs, 0.5))
    _close(effppl.log_density(regime_switching, (regime, y), {}, {"x": xs})[0], ref)


def test_each_cond_branch_applies_its_own_bijector_and_one_branch_sites():
    def model(z):
        s = jax.lax.cond(z > 0, lambda: effppl.sample("s", dist.HalfNormal(1.0)),
                         lambda: effppl.sample("s", dist.Uniform(0.0, 2.0)))
        jax.lax.cond(z > 0, lambda: effppl.sample("only", dist.Exponential(1.0)), lambda: 0.0)
        effppl.sample("o", dist.Normal(0.0, s), obs=1.0)
    u = {"s": jnp.array(0.3), "only": jnp.array(-0.5)}
    s = jnp.exp(0.3)
    ref_pos = (stats.norm.logpdf(s) + jnp.log(2) + 0.3 + stats.norm.logpdf(1.0, 0, s)
               + stats.expon.logpdf(jnp.exp(-0.5)) - 0.5)
    _close(-handlers.potential_energy(model, (1.0,), {}, u), ref_pos)
    sg = jax.nn.sigmoid(0.3)
    ref_neg = jnp.log(0.5) + jnp.log(2 * sg * (1 - sg)) + stats.norm.logpdf(1.0, 0, 2 * sg)
    ref_neg += stats.norm.logpdf(-0.5)  # `only`, not reached, keeps a proper auxiliary density
    _close(-handlers.potential_energy(model, (-1.0,), {}, u), ref_neg)


def dirichlet_or_normal(k):
    def step(c, kt):  # a simplex of 3 (2 unconstrained coordinates) or a normal vector of 3
        return c, jax.lax.cond(
            kt > 0, lambda: effppl.sample("p", dist.Dirichlet(jnp.full(3, 2.0))),
            lambda: effppl.sample("p", dist.Normal(jnp.zeros(3), 1.0).to_event(1)))
    jax.lax.scan(step, 0.0, k)


def test_cond_branches_with_different_unconstrained_sizes_share_one_padded_row():
    # one value must satisfy every branch: a check per branch's own shape would accept none
    from numpyro.distributions.transforms import biject_to
    k = jnp.array([0, 1, 0, 1])
    simplex = biject_to(dist.Dirichlet(jnp.ones(3)).support)
    u = jnp.array([[0.1, 0.2, 0.3], [-0.4, 0.5, 0.7], [1.0, -2.0, 0.5], [0.3, 0.0, -1.1]])
    ref = stats.norm.logpdf(u[jnp.array([0, 2])]).sum()
    for row in (u[1], u[3]):  # a Dirichlet row reads 2 coordinates, the third is auxiliary
        p = simplex(row[:2])
        ref += dist.Dirichlet(jnp.full(3, 2.0)).log_prob(p)
        ref += simplex.log_abs_det_jacobian(row[:2], p) + stats.norm.logpdf(row[2])
    _close(-handlers.potential_energy(dirichlet_or_normal, (k,), {}, {"p": u}), ref)
    values = handlers.constrain_fn(dirichlet_or_normal, (k,), {}, {"p": u})["p"]
    _close(values[1], simplex(u[1, :2]))
    _close(values[2], u[2])
    back = handlers.unconstrain_fn(dirichlet_or_normal, (k,), {}, {"p": values})["p"]
    assert back.shape == (4, 3)
    _close(back[jnp.array([0, 2])], u[jnp.array([0, 2])])
    _close(back[jnp.array([1, 3]), :2], u[jnp.array([1, 3]), :2])
    _close(back[jnp.array([1, 3]), 2], jnp.zeros(2))  # padding


def test_observed_sites_in_data_dependent_while_loop():
    def model(y, n):
        mu = effppl.sample("mu", dist.Normal(0, 1))

        def body(i):
            effppl.sample("y", dist.Normal(mu, 1.0), obs=y[i])
            return i + 1
        jax.lax.while_loop(lambda i: i < n, body, 0)
    y = jnp.array([0.5, -1.0, 2.0])
    f = jax.jit(lambda n: handlers.potential_energy(model, (y, n), {}, {"mu": 0.1}))
    for n in (0, 2, 3):
        _close(f(n), -(stats.norm.logpdf(0.1) + jnp.sum(stats.norm.logpdf(y[:n], 0.1))))
    with pytest.raises(effppl.SiteError, match="`mu`.*while"):
        def latent_in_while(n):
            jax.lax.while_loop(lambda c: c[0] < n,
                               lambda c: (c[0] + 1, effppl.sample("mu", dist.Normal(c[1], 1.0))),
                               (0, 0.0))
        handlers.trace(handlers.seed(latent_in_while, 0)).get_trace(3)
    # No entry point takes a value for it (there is no row per occurrence to give): never one
    # value silently reused at every iteration.
    for give_value in (lambda: handlers.potential_energy(latent_in_while, (3,), {}, {"mu": 0.5}),
                       lambda: effppl.log_density(latent_in_while, (3,), {}, {"mu": jnp.zeros(3)}),
                       lambda: handlers.substitute(latent_in_while, {"mu": 0.5})(3),
                       lambda: handlers.condition(latent_in_while, {"mu": 0.5})(3)):
        with pytest.raises(effppl.SiteError, match="`mu` sits inside a `while_loop`"):
            give_value()


def test_vmap_inside_model_behaves_like_a_plate():
    def model(y):
        mu = effppl.sample("mu", dist.Normal(0, 1))

        def one(yi):
            z = effppl.sample("z", dist.Normal(mu, 1.0))
            effppl.sample("obs", dist.Normal(z, 1.0), obs=yi)
            return z
        return jax.vmap(one)(y)
    y, z = jnp.array([0.5, -1.0, 2.0]), jnp.array([0.1, 0.2, 0.3])
    ref = stats.norm.logpdf(0.2) + stats.norm.logpdf(z, 0.2).sum() + stats.norm.logpdf(y, z).sum()
    _close(effppl.log_density(model, (y,), {}, {"mu": 0.2, "z": z})[0], ref)
    draws = handlers.trace(handlers.seed(model, 0)).get_trace(y)["z"]["value"]
    assert draws.shape == (3,) and len(np.unique(np.asarray(draws))) == 3


@pytest.mark.parametrize("where", ["vmap", "scan"])
@pytest.mark.parametrize("batch", ["plate", "sample_shape"])
def test_plates_and_sample_shapes_inside_vmap_and_scan(where, batch):
    # numpyro's promote_batch_shape keeps an expanded distribution's old expansion sizes, so
    # such a site would draw shape (2, 4, 1) for (4, 2) (effppl's promote_batch_shape rebuilds it)
    def model(x):
        def piece(_, xi):
            if batch == "plate":
                with effppl.plate("k", 2):
                    a = effppl.sample("a", dist.Normal(0.0, 1.0))
            else:
                a = effppl.sample("a", dist.Normal(0.0, 1.0), sample_shape=(2,))
            effppl.sample("y", dist.Normal(a.sum(), 1.0), obs=xi)
            return None, None
        if where == "vmap":
            jax.vmap(lambda xi: piece(None, xi))(x)
        else:
            jax.lax.scan(piece, None, x)
    x, a = jnp.arange(4.0), jnp.arange(8.0).reshape(4, 2) / 10
    ref = stats.norm.logpdf(a).sum() + stats.norm.logpdf(x, a.sum(-1), 1.0).sum()
    _close(effppl.log_density(model, (x,), {}, {"a": a})[0], ref)
    _close(-handlers.potential_energy(model, (x,), {}, {"a": a}), ref)
    site = handlers.trace(handlers.seed(model, 0)).get_trace(x)["a"]
    assert site["value"].shape == site["fn"].shape() == (4, 2)
    assert site["fn"].sample(jax.random.PRNGKey(0)).shape == (4, 2)
    assert len(np.unique(np.asarray(site["value"]))) == 8


def test_observations_broadcast_against_their_distribution_inside_vmap():
    def wider_obs(Y):  # a row of 3 observations of a scalar distribution, per element
        def piece(row):
            z = effppl.sample("z", dist.Normal(0.0, 1.0))
            effppl.sample("y", dist.Normal(z, 1.0), obs=row)
        jax.vmap(piece)(Y)

    def narrower_obs(Y):  # a scalar observation of a distribution of batch shape (3,)
        def piece(row):
            z = effppl.sample("z", dist.Normal(0.0, 1.0))
            effppl.sample("y", dist.Normal(z * jnp.ones(3), 1.0), obs=row[0])
        jax.vmap(piece)(Y)
    Y, z = jnp.arange(6.0).reshape(2, 3), jnp.array([0.3, -0.2])
    _close(effppl.log_density(wider_obs, (Y,), {}, {"z": z})[0],
           stats.norm.logpdf(z).sum() + stats.norm.logpdf(Y, z[:, None]).sum())
    _close(effppl.log_density(narrower_obs, (Y,), {}, {"z": z})[0],
           stats.norm.logpdf(z).sum() + 3 * stats.norm.logpdf(Y[:, 0], z).sum())
    assert handlers.trace(handlers.seed(narrower_obs, 0)).get_trace(Y)["y"]["value"].shape == (2, 3)


def test_vmap_of_cond_with_batched_predicate_counts_only_the_taken_branch():
    # JAX batches such a cond by running both branches; effppl runs it element by element, so only
    # the sites of each element's own branch count (oracle by hand: NumPyro has no such model).
    def observed(flags, y):
        def one(f, yi):
            return jax.lax.cond(f, lambda: effppl.sample("a", dist.Normal(0.0, 1.0), obs=yi),
                                lambda: effppl.sample("b", dist.Normal(5.0, 2.0), obs=yi))
        return jax.vmap(one)(flags, y)
    flags, y = jnp.array([True, False, True]), jnp.array([0.1, 4.0, -0.3])
    ref = stats.norm.logpdf(0.1) + stats.norm.logpdf(4.0, 5.0, 2.0) + stats.norm.logpdf(-0.3)
    _close(effppl.log_density(observed, (flags, y), {}, {})[0], ref)

    def latent(flags):
        def one(f):
            return jax.lax.cond(f, lambda: effppl.sample("a", dist.Normal(0.0, 1.0)),
                                lambda: effppl.sample("b", dist.Normal(50.0, 2.0)))
        return jax.vmap(one)(flags)
    # rows follow occurrences: "a" occurs for elements 0 and 2 (rows 0, 1), "b" for element 1
    values = {"a": jnp.array([0.3, -0.2, 7.0]), "b": jnp.array([49.0, 9.0, 9.0])}
    ref = stats.norm.logpdf(0.3) + stats.norm.logpdf(-0.2) + stats.norm.logpdf(49.0, 50.0, 2.0)
    _close(effppl.log_density(latent, (flags,), {}, values)[0], ref)
    # rows never filled (a[2], b[1:]) keep a standard normal density in unconstrained space
    aux = stats.norm.logpdf(7.0) + 2 * stats.norm.logpdf(9.0)
    _close(-handlers.potential_energy(latent, (flags,), {}, values), ref + aux)
    grad = jax.grad(lambda v: handlers.potential_energy(latent, (flags,), {}, v))(values)
    _close(grad["a"], jnp.array([0.3, -0.2, 7.0]))
    _close(grad["b"], jnp.array([-0.25, 9.0, 9.0]))
    out = handlers.seed(latent, 0)(flags)
    assert jnp.all(jnp.abs(out[jnp.array([0, 2])]) < 10) and 40 < out[1] < 60


def test_sites_in_empty_loops_and_empty_vmaps_count_nothing():
    def in_scan(y):
        jax.lax.scan(lambda c, yi: (c, effppl.sample("y", dist.Normal(0.0, 1.0), obs=yi)), 0.0, y)

    def in_vmap(flags, y):
        def one(f, yi):
            return jax.lax.cond(f, lambda: effppl.sample("a", dist.Normal(0.0, 1.0), obs=yi),
                                lambda: effppl.sample("b", dist.Normal(5.0, 2.0), obs=yi))
        return jax.vmap(one)(flags, y)
    lp, tr = effppl.log_density(in_scan, (jnp.zeros(0),), {}, {})
    assert lp == 0.0 and tr["y"]["value"].shape == (0,)
    assert effppl.log_density(in_vmap, (jnp.zeros(0, bool), jnp.zeros(0)), {}, {})[0] == 0.0


def test_latent_sites_in_an_empty_scan_and_bad_seeds_and_values_name_the_culprit():
    def model(y):
        mu = effppl.sample("mu", dist.Normal(0.0, 1.0))

        def step(c, yt):
            x = effppl.sample("x", dist.Normal(mu, 1.0))
            effppl.sample("y", dist.Normal(x, 1.0), obs=yt)
            return c, None
        jax.lax.scan(step, 0.0, y)
    empty = {"mu": 0.5, "x": jnp.zeros(0)}  # a zero-length scan: no row to index
    _close(effppl.log_density(model, (jnp.zeros(0),), {}, empty)[0], stats.norm.logpdf(0.5))
    _close(handlers.potential_energy(model, (jnp.zeros(0),), {}, empty), -stats.norm.logpdf(0.5))
    with pytest.raises(effppl.SiteError, match="constrain_fn .*site `x`"):
        handlers.constrain_fn(model, (jnp.zeros(3),), {}, {"mu": 0.5, "x": jnp.zeros(2)})
    for bad in (1.5, jnp.zeros(3, jnp.uint32), jax.random.split(jax.random.PRNGKey(0), 2),
                jax.random.split(jax.random.key(0), 2)):
        with pytest.raises(TypeError, match=r"seed\(fn, rng_seed=...\) expected an int"):
            handlers.seed(model, bad)
    draws = [handlers.trace(handlers.seed(model, key)).get_trace(jnp.zeros(2))["mu"]["value"]
             for key in (3, jnp.array(3), jax.random.PRNGKey(3), jax.random.key(3))]
    assert len(set(float(d) for d in draws)) == 1


def test_vmap_of_while_with_batched_predicate_counts_each_elements_iterations():
    def model(ns, ys):
        def one(n, y):
            def body(i):
                effppl.sample("y", dist.Normal(0.0, 1.0), obs=y[i])
                return i + 1
            return jax.lax.while_loop(lambda i: i < n, body, 0)
        return jax.vmap(one)(ns, ys)
    ns, ys = jnp.array([1, 3, 0]), jnp.arange(12.0).reshape(3, 4) / 4
    ref = sum(stats.norm.logpdf(ys[b, i]) for b in range(3) for i in range(int(ns[b])))
    _close(effppl.log_density(model, (ns, ys), {}, {})[0], ref)


def test_dependent_support_uses_current_values():
    def model():
        a = effppl.sample("a", dist.Uniform(0.0, 1.0))
        effppl.sample("b", dist.ImproperUniform(dist.constraints.interval(0.0, 1.0 - a), (), ()))
    for ua, ub in [(0.5, 3.0), (-2.0, 10.0), (4.0, -1.0)]:
        c = handlers.constrain_fn(model, (), {}, {"a": jnp.array(ua), "b": jnp.array(ub)})
        assert 0 < c["b"] < 1 - c["a"]
        back = handlers.unconstrain_fn(model, (), {}, c)
        _close(back["a"], ua)
        _close(back["b"], ub)
        a, sa, sb = jax.nn.sigmoid(ua), jax.nn.sigmoid(ua), jax.nn.sigmoid(ub)
        ref = jnp.log(sa * (1 - sa)) + jnp.log((1 - a) * sb * (1 - sb))
        _close(-handlers.potential_energy(model, (), {}, {"a": ua, "b": ub}), ref)


def test_constrain_and_unconstrain_fn_map_param_sites_like_numpyro():
    def model(sample, param):
        z = param("z", 2.0, constraint=dist.constraints.positive)
        sample("x", dist.Normal(0.0, z))  # a later site sees the constrained param

    def ours(fn, values):
        return fn(lambda: model(effppl.sample, effppl.param), (), {}, values)

    def theirs(fn, values):
        return fn(lambda: model(numpyro.sample, numpyro.param), (), {}, values)

    u = {"z": jnp.array(0.7), "x": jnp.array(-1.2)}
    c = ours(handlers.constrain_fn, u)
    _close(c["z"], np.exp(0.7))
    _close(c["x"], -1.2)
    for name, value in theirs(numpyro.infer.util.constrain_fn, u).items():
        _close(c[name], value)
    back = ours(handlers.unconstrain_fn, c)
    for name in u:
        _close(back[name], u[name])
        _close(back[name], theirs(numpyro.infer.util.unconstrain_fn, c)[name])


def test_handlers_mask_scale_block_condition_replay():
    model = eight_schools(effppl.sample, effppl.plate)
    params = {"mu": 0.5, "tau": 1.5, "theta_tilde": jnp.zeros(8)}
    base = effppl.log_density(model, (Y8, S8), {}, params)[0]
    scaled = effppl.log_density(handlers.scale(model, 2.0), (Y8, S8), {}, params)[0]
    _close(scaled, 2 * base)
    masked = effppl.log_density(handlers.mask(model, False), (Y8, S8), {}, params)[0]
    _close(masked, 0.0)
    tr = handlers.trace(handlers.seed(model, 1)).get_trace(Y8, S8)
    assert set(tr) == {"mu", "tau", "J", "theta_tilde", "y"} and tr["y"]["is_observed"]
    assert tr["J"]["type"] == "plate"  # NumPyro's plate entry
    replayed = handlers.trace(handlers.replay(model, tr)).get_trace(Y8, S8)
    _close(replayed["mu"]["value"], tr["mu"]["value"])
    blocked = handlers.trace(handlers.block(handlers.seed(model, 1), hide=["mu"])).get_trace(Y8, S8)
    assert "mu" not in blocked and "tau" in blocked
    cond = handlers.trace(handlers.condition(handlers.seed(model, 2), {"mu": 3.0})).get_trace(Y8, S8)
    assert cond["mu"]["is_observed"] and float(cond["mu"]["value"]) == 3.0


def test_substitute_sets_observed_sites_too_as_in_numpyro():
    from numpyro import handlers as nh

    def model(y, sample=effppl.sample):
        a = sample("a", dist.Normal(0.0, 3.0))
        sample("y", dist.Normal(a, 1.0), obs=y)
        return a

    def np_model(y):
        return model(y, numpyro.sample)
    y = jnp.array(1.5)
    ours = handlers.substitute(handlers.condition(model, {"a": 1.0}), {"a": 2.0})
    theirs = nh.substitute(nh.condition(np_model, {"a": 1.0}), {"a": 2.0})
    assert ours(y) == theirs(y) == 2.0
    for params in ({"a": 0.3, "y": 40.0},):  # log_density's params name an observed site
        _close(effppl.log_density(model, (y,), {}, params)[0],
               np_log_density(np_model, (y,), {}, params)[0])
    tr = handlers.trace(handlers.substitute(model, {"a": 0.3, "y": 40.0})).get_trace(y)
    assert tr["y"]["is_observed"] and tr["y"]["value"] == 40.0
    _close(tr["y"]["log_prob"], stats.norm.logpdf(40.0, 0.3, 1.0))


def test_compiled_log_density_does_not_recompile_for_new_data():
    compiles = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda name, *_, **__: compiles.append(name) if "backend_compile" in name else None)
    model = logistic(effppl.sample, effppl.plate)
    f = jax.jit(lambda p, x, y: handlers.potential_energy(model, (x, y), {}, p))
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(30, 2)), (rng.random(30) > 0.5).astype(float)
    p = {"w": jnp.ones(2), "b": jnp.array(0.0)}
    f(p, x, y).block_until_ready()
    n = len(compiles)
    f(p, x + 1.0, 1.0 - y).block_until_ready()
    assert len(compiles) == n
    f(p, np.ones((31, 2)), np.ones(31)).block_until_ready()  # a new shape does compile
    assert len(compiles) > n


# ---------------------------------------------------------------- bad input

def test_duplicate_site_name_is_an_error_naming_the_site():
    def model():
        effppl.sample("a", dist.Normal(0, 1))
        effppl.sample("a", dist.Normal(0, 1))
    with pytest.raises(effppl.SiteError, match="Duplicate site name `a`"):
        handlers.trace(handlers.seed(model, 0)).get_trace()


def test_obs_shape_mismatch_names_the_site():
    def model():
        effppl.sample("y", dist.Normal(jnp.zeros(3), 1.0), obs=jnp.zeros(4))
    with pytest.raises(effppl.SiteError, match="`y`|'y'"):
        effppl.log_density(model, (), {}, {})


def test_latent_without_value_names_the_site():
    with pytest.raises(effppl.SiteError, match="`x`"):
        effppl.log_density(random_walk, (3,), {}, {})
    with pytest.raises(effppl.effects.UnhandledEffectError,
                       match="`sample`.*site `x` outside of any handler.*handlers.seed"):
        random_walk(3)
    with pytest.raises(effppl.effects.UnhandledEffectError, match="site `x`.*handlers.seed"):
        effppl.effects.eliminate(random_walk)(3)
    with pytest.raises(effppl.effects.UnsupportedHandlerError,
                       match="`sample`.*grad.*site `g` outside of any handler"):
        jax.grad(lambda loc: effppl.sample("g", dist.Normal(loc, 1.0)))(0.0)


@pytest.mark.parametrize("primitive, use", [
    ("sample", "effppl.sample"), ("plate", "effppl.plate"),
    ("deterministic", "effppl.deterministic"), ("factor", "effppl.factor")])
def test_a_numpyro_primitive_inside_an_effppl_model_names_the_site_and_its_effppl_twin(primitive,
                                                                                     use):
    def model():
        x = effppl.sample("x", dist.Normal(0.0, 1.0))

        def step(c, _):  # inside a loop too: the model is traced with NumPyro's stack guarded
            if primitive == "sample":
                c = c + numpyro.sample("z", dist.Normal(0.0, 1.0))
            elif primitive == "plate":
                with numpyro.plate("z", 3):
                    pass
            elif primitive == "deterministic":
                numpyro.deterministic("z", 2.0 * c)
            else:
                numpyro.factor("z", -c ** 2)
            return c, None
        jax.lax.scan(step, x, None, length=2)

    match = f"`numpyro.{primitive}` \\(site `z`\\).*inside an effppl model.*`{use}`"
    with pytest.raises(effppl.SiteError, match=match):
        handlers.trace(handlers.seed(model, 0)).get_trace()
    with pytest.raises(effppl.SiteError, match=match):
        effppl.log_density(model, (), {}, {"x": 0.5})
    assert not numpyro.primitives._PYRO_STACK  # the guard leaves NumPyro's stack as it was


def _with_sample_shape(sample, plate):
    def model():
        sample("y", dist.Normal(0.0, 1.0), sample_shape=(4,))
        with plate("p", 3):
            return sample("x", dist.Normal(0.0, 1.0), sample_shape=(2, 1))
    return model


def test_sample_shape_equals_numpyro():
    ours, theirs = (_with_sample_shape(effppl.sample, effppl.plate),
                    _with_sample_shape(numpyro.sample, numpyro.plate))
    assert handlers.seed(ours, 0)().shape == numpyro.handlers.seed(theirs, 0)().shape == (2, 3)
    params = {"x": jnp.arange(6.0).reshape(2, 3) / 3, "y": jnp.linspace(-1.0, 1.0, 4)}
    _close(effppl.log_density(ours, (), {}, params)[0], np_log_density(theirs, (), {}, params)[0])


def test_condition_fn_gives_values_as_in_numpyro():
    def model():
        a = effppl.sample("a", dist.Normal(0.0, 1.0))
        effppl.sample("b", dist.Normal(a, 1.0))
    values = {"a": 0.3, "b": -1.2}
    pick = lambda msg: values.get(msg["name"])  # noqa: E731
    tr = handlers.trace(handlers.condition(model, condition_fn=pick)).get_trace()
    assert tr["a"]["is_observed"] and tr["b"]["is_observed"]
    _close(tr["b"]["value"], -1.2)
    ours = effppl.log_density(handlers.condition(model, condition_fn=pick), (), {}, {})[0]
    _close(ours, stats.norm.logpdf(0.3) + stats.norm.logpdf(-1.2, 0.3))


def _with_plate():
    a = effppl.sample("a", dist.Normal(0.0, 1.0))
    with effppl.plate("N", 3):
        effppl.sample("b", dist.Normal(a, 1.0))


def test_condition_fn_values_are_broadcast_and_checked_as_data_values():
    """A value returned by `condition_fn`/`substitute_fn` is broadcast to the site's shape, as a
    `data` value is (NumPyro accepts a scalar for a plated site); a wrong shape or a non-array
    is a `SiteError` naming the site; `data` and the function together are refused (NumPyro)."""
    three = lambda msg: 3.0 if msg["name"] == "b" else None  # noqa: E731
    by_fn = handlers.trace(handlers.seed(handlers.condition(_with_plate, condition_fn=three),
                                         0)).get_trace()
    by_data = handlers.trace(handlers.seed(handlers.condition(_with_plate, data={"b": 3.0}),
                                           0)).get_trace()
    _close(by_fn["b"]["value"], jnp.full(3, 3.0))
    _close(by_fn["b"]["value"], by_data["b"]["value"])
    wrong = lambda msg: jnp.ones(5) if msg["name"] == "b" else None  # noqa: E731
    with pytest.raises(effppl.SiteError, match=r"site `b`, but the site expects \(3,\)"):
        handlers.trace(handlers.seed(handlers.substitute(_with_plate, substitute_fn=wrong),
                                     0)).get_trace()
    text = lambda msg: "hi" if msg["name"] == "a" else None  # noqa: E731
    with pytest.raises(effppl.SiteError, match="str 'hi' for site `a`"):
        handlers.trace(handlers.seed(handlers.substitute(_with_plate, substitute_fn=text),
                                     0)).get_trace()
    with pytest.raises(ValueError, match="only one of `data` or `substitute_fn`"):
        handlers.substitute(_with_plate, data={"a": 1.0}, substitute_fn=text)


def test_a_subsampled_plate_created_twice_says_to_create_it_once():
    def model(y):
        with effppl.plate("data", 10, subsample_size=3):
            a = effppl.sample("a", dist.Normal(0.0, 1.0))
        with effppl.plate("data", 10, subsample_size=3) as i:
            effppl.sample("y", dist.Normal(a, 1.0), obs=y[i])
    with pytest.raises(effppl.SiteError, match="plate `data` is created twice.*create it once"):
        handlers.trace(handlers.seed(model, 0)).get_trace(jnp.zeros(10))


def test_a_model_returning_a_non_array_is_a_clear_error():
    def greets():
        effppl.sample("a", dist.Normal(0.0, 1.0))
        return "hello"
    with pytest.raises(TypeError, match="`greets` returned 'hello'.*must return arrays"):
        handlers.seed(greets, 0)()


def test_a_discrete_latent_in_one_cond_branch_is_a_clear_error():
    def model(flag):
        jax.lax.cond(flag, lambda: effppl.sample("v", dist.Bernoulli(0.5)).astype(float),
                     lambda: effppl.sample("v", dist.Normal(0.0, 1.0)))
    for run in (lambda: handlers.potential_energy(model, (jnp.array(True),), {}, {"v": 0.3}),
                lambda: handlers.unconstrain_fn(model, (jnp.array(True),), {}, {"v": 1.0})):
        with pytest.raises(effppl.SiteError, match="`v` has a discrete support"):
            run()


def test_validate_args_out_of_support_names_the_site():
    def model():
        effppl.sample("s", dist.Normal(0.0, -1.0, validate_args=True))
    with pytest.raises(ValueError, match="scale|Normal"):
        handlers.seed(model, 0)()


def test_no_tracer_leaks_through_handlers():
    model = eight_schools(effppl.sample, effppl.plate)
    params = {"mu": 0.5, "tau": 1.5, "theta_tilde": jnp.zeros(8)}
    with jax.checking_leaks():
        handlers.trace(handlers.seed(model, 0)).get_trace(Y8, S8)
        jax.jit(lambda p: handlers.potential_energy(model, (Y8, S8), {}, p))(params)
        jax.grad(lambda p: handlers.potential_energy(model, (Y8, S8), {}, p))(params)


def test_model_leaking_a_tracer_is_reported_not_silent():
    leaked = []

    def model():
        x = effppl.sample("x", dist.Normal(0, 1))
        leaked.append(x)
        return x
    handlers.seed(model, 0)()
    with pytest.raises(jax.errors.UnexpectedTracerError):
        jnp.sin(leaked[0]) + 1.0


@pytest.mark.filterwarnings("ignore:Out-of-support values")  # NumPyro's, when run eagerly
def test_out_of_support_observations_give_minus_infinity_like_numpyro():
    # NumPyro validates samples by default (its default lives on the class); a distribution
    # passed through a site's message must keep it, else log_prob is a finite, wrong number.
    def bernoulli(sample):
        return lambda y: sample("y", dist.Bernoulli(probs=0.3), obs=y)

    def normal_event(sample):
        return lambda y: sample("y", dist.Normal(jnp.zeros(3), 1.0).to_event(1), obs=y)
    for make, y in [(bernoulli, jnp.array(2.0)), (normal_event, jnp.array([0.0, jnp.nan, 1.0]))]:
        ours = effppl.log_density(make(effppl.sample), (y,), {}, {})[0]
        theirs = np_log_density(make(numpyro.sample), (y,), {}, {})[0]
        assert ours == theirs == -jnp.inf
    tr = handlers.trace(bernoulli(effppl.sample)).get_trace(jnp.array(2.0))
    assert tr["y"]["log_prob"] == -jnp.inf


def test_validate_args_with_traced_parameters_checked_at_run_time():
    def model(s):
        effppl.sample("obs", dist.Normal(0.0, s, validate_args=True), obs=1.0)
    f = jax.jit(lambda s: effppl.log_density(model, (s,), {}, {})[0])
    _close(f(2.0), stats.norm.logpdf(1.0, 0.0, 2.0))
    with pytest.raises(Exception, match="Site `obs`.*scale"):
        jax.block_until_ready(f(-1.0))


def test_unconstrain_fn_round_trips_simplex_sites_with_fewer_coordinates():
    def model():
        effppl.sample("p", dist.Dirichlet(jnp.ones(3)))
        jax.lax.scan(lambda c, _: (c, effppl.sample("q", dist.Dirichlet(jnp.ones(4)))), 0.0, None,
                     length=2)
    u = {"p": jnp.array([0.1, -0.2]), "q": jnp.array([[0.3, 0.0, -1.0], [1.0, 2.0, 0.5]])}
    c = handlers.constrain_fn(model, (), {}, u)
    assert c["p"].shape == (3,) and c["q"].shape == (2, 4)
    _close(c["q"].sum(-1), 1.0)
    back = handlers.unconstrain_fn(model, (), {}, c)
    np.testing.assert_allclose(back["p"], u["p"], atol=1e-9)
    np.testing.assert_allclose(back["q"], u["q"], atol=1e-9)


def test_scan_inside_vmap_keeps_the_vmapped_axis_of_latent_sites():
    def model(Y):
        def row(yr):
            def step(c, yi):
                z = effppl.sample("z", dist.Normal(0.0, 1.0))
                effppl.sample("y", dist.Normal(z, 1.0), obs=yi)
                return c, z
            return jax.lax.scan(step, 0.0, yr)[1]
        return jax.vmap(row)(Y)
    Y = jnp.arange(6.0).reshape(3, 2)
    z = handlers.trace(handlers.seed(model, 0)).get_trace(Y)["z"]["value"]
    assert z.shape == (2, 3) and len(np.unique(np.asarray(z))) == 6  # (T, G): loop axis first
    Z = jnp.linspace(-1, 1, 6).reshape(2, 3)
    _close(effppl.log_density(model, (Y,), {}, {"z": Z})[0],
           stats.norm.logpdf(Z).sum() + stats.norm.logpdf(Y.T, Z).sum())


def test_values_of_the_wrong_shape_are_errors_naming_the_site():
    with pytest.raises(effppl.SiteError, match="site `a` has shape \\(3,\\).*expects \\(\\)"):
        effppl.log_density(lambda: effppl.sample("a", dist.Normal(0.0, 1.0)), (), {},
                           {"a": jnp.ones(3)})
    with pytest.raises(effppl.SiteError, match="site `x`.*\\(4,\\).*expects \\(3,\\)"):
        handlers.substitute(random_walk, {"x": jnp.ones(4)})(3)
    # fewer rows than occurrences: the rest are drawn, as NumPyro's scan does, so a seed is needed
    with pytest.raises(effppl.effects.UnhandledEffectError, match="`x` is given 2 rows.*3 occ"):
        handlers.substitute(random_walk, {"x": jnp.ones(2)})(3)
    with pytest.raises(effppl.SiteError, match="site `x`"):
        handlers.potential_energy(random_walk, (3,), {}, {"x": jnp.ones((3, 2))})


def test_trace_log_prob_follows_each_branch_family():
    def model(flag, y):
        mu = effppl.sample("mu", dist.Normal(0.0, 1.0))
        jax.lax.cond(flag, lambda: effppl.sample("y", dist.Normal(mu, 1.0), obs=y),
                     lambda: effppl.sample("y", dist.Laplace(mu, 2.0), obs=y))
    for flag, ref in [(True, stats.norm.logpdf(0.3, 0.2)),
                      (False, stats.laplace.logpdf(0.3, 0.2, 2.0))]:
        tr = handlers.trace(handlers.substitute(model, {"mu": 0.2})).get_trace(flag, 0.3)
        _close(tr["y"]["log_prob"], ref)
        assert tr["y"]["fn"] is None  # two families: no single distribution to return


def test_block_hides_deterministic_condition_overrides_obs_scale_must_be_positive():
    def model(y):
        mu = effppl.sample("mu", dist.Normal(0.0, 1.0))
        effppl.deterministic("twice", 2 * mu)
        effppl.sample("y", dist.Normal(mu, 1.0), obs=y)
    tr = handlers.trace(handlers.block(handlers.seed(model, 0), hide=["twice"])).get_trace(0.5)
    assert "twice" not in tr and "mu" in tr
    lp, _ = effppl.log_density(handlers.condition(model, {"y": 2.0}), (0.5,), {}, {"mu": 0.0})
    _close(lp, stats.norm.logpdf(0.0) + stats.norm.logpdf(2.0))
    with pytest.raises(ValueError, match="positive"):
        handlers.scale(model, -1.0)


@pytest.mark.slow
def test_block_draws_hidden_sites_with_a_key_from_an_outer_seed_like_numpyro():
    from numpyro import handlers as nh

    def model(sample=effppl.sample):
        mu = sample("mu", dist.Normal(0.0, 1.0))
        return sample("z", dist.Normal(mu, 0.01))
    ours = handlers.trace(handlers.seed(handlers.block(model, hide=["mu"]), 1)).get_trace()
    theirs = nh.trace(nh.seed(nh.block(lambda: model(numpyro.sample), hide=["mu"]), 1)).get_trace()
    assert set(ours) == set(theirs) == {"z"}
    zs = [handlers.seed(handlers.block(model, hide=["mu"]), k)() for k in range(200)]
    assert 0.8 < np.std(zs) < 1.2  # mu was drawn afresh for each key, not fixed

    def in_scan():  # a fresh key per occurrence
        return jax.lax.scan(lambda c, _: (c, effppl.sample("a", dist.Normal(0.0, 1.0))), 0.0,
                            None, length=4)[1]
    assert len(np.unique(np.asarray(handlers.seed(handlers.block(in_scan), 0)()))) == 4
    with pytest.raises(effppl.effects.UnhandledEffectError,
                       match="`mu` is hidden by `block` .* no `seed`"):
        handlers.trace(handlers.substitute(handlers.block(model, hide=["mu"]), {"z": 1.0}))()


def test_mask_and_scale_as_context_managers_like_numpyro():
    def model():
        mu = effppl.sample("mu", dist.Normal(0.0, 1.0))
        with handlers.scale(scale=10.0):
            effppl.sample("y", dist.Normal(mu, 1.0), obs=0.5)
        with handlers.mask(mask=False):
            effppl.sample("z", dist.Normal(mu, 1.0), obs=3.0)
    lp, _ = effppl.log_density(model, (), {}, {"mu": 0.2})
    _close(lp, stats.norm.logpdf(0.2) + 10 * stats.norm.logpdf(0.5, 0.2))
    with pytest.raises(TypeError, match="wraps a model"):
        with handlers.seed(model, 0):
            pass
