"""Autoguides on models whose latent sites sit in a subsampled plate (NumPyro's `create_plates`):
full-size params read at the guide's plate indices, the guide's density scaled like the model's;
against NumPyro's autoguides at the same params and keys, and an exact Gaussian posterior."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.infer.autoguide as numpyro_autoguide
import optax
import pytest
from numpyro.contrib.control_flow import scan as numpyro_scan

import effppl
from effppl import distributions as dist
from effppl.handlers import substitute, trace
from effppl.infer import SVI, Trace_ELBO, autoguide

N, n = 10, 4


def _local_model(ppl):
    """Global `mu`; per data point, in plate `n` (subsampled): a real `z`, a positive `s`, a
    vector `w` (event dim 1), and `v` in a second plate `k` (dim -2, not subsampled)."""
    def model(y):
        mu = ppl.sample("mu", dist.Normal(0.0, 2.0))
        with ppl.plate("n", N, subsample_size=n) as idx:
            z = ppl.sample("z", dist.Normal(mu, 1.0))
            s = ppl.sample("s", dist.LogNormal(0.0, 0.5))
            w = ppl.sample("w", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
            with ppl.plate("k", 3, dim=-2):
                v = ppl.sample("v", dist.Normal(0.0, 1.0))
            ppl.sample("y", dist.Normal(z + w.sum(-1) + v.sum(0), s), obs=y[idx])
    return model


def _params(shapes):
    """Distinct positive values of the given shapes (valid for every constraint here)."""
    return {k: jnp.linspace(0.3, 1.2, int(np.prod(shape))).reshape(shape)
            for k, shape in shapes.items()}


def _numpyro_guide(name, model, *args, **kwargs):
    guide = getattr(numpyro_autoguide, name)(model, **kwargs)
    numpyro.handlers.seed(guide, 0)(*args)  # NumPyro sets the guide up on its first call
    return guide


@pytest.mark.slow
@pytest.mark.parametrize("name", ["AutoNormal", pytest.param("AutoDelta", marks=pytest.mark.slow)])
def test_loss_and_gradient_equal_numpyros_on_a_subsampled_plate(name):
    y = jnp.asarray(np.random.RandomState(0).randn(N))
    ours = getattr(autoguide, name)(_local_model(effppl))
    svi = SVI(_local_model(effppl), ours, optax.adam(0.1), Trace_ELBO())
    params = svi.get_params(svi.init(jax.random.PRNGKey(0), y))
    # params are full size along plate `n`, as NumPyro's
    assert jnp.shape(params["z_auto_loc"]) == (N,)
    assert jnp.shape(params["w_auto_loc"]) == (N, 2)
    assert jnp.shape(params["v_auto_loc"]) == (3, N)
    params = _params(jax.tree.map(jnp.shape, params))
    theirs = _numpyro_guide(name, _local_model(numpyro), y)
    ours_fn = jax.jit(jax.value_and_grad(lambda p, key: Trace_ELBO().loss(
        key, p, _local_model(effppl), ours, y)))
    theirs_fn = jax.jit(jax.value_and_grad(lambda p, key: numpyro.infer.Trace_ELBO().loss(
        key, p, _local_model(numpyro), theirs, y)))
    for seed in range(3):  # each key draws other indices (the same as NumPyro's)
        key = jax.random.PRNGKey(seed)
        a, b = ours_fn(params, key), theirs_fn(params, key)
        np.testing.assert_allclose(a[0], b[0], rtol=1e-12)
        for k in params:
            np.testing.assert_allclose(a[1][k], b[1][k], rtol=1e-10, atol=1e-12)


@pytest.mark.slow
def test_guide_trace_has_the_plates_indices_and_scale():
    y = jnp.zeros(N)
    guide = autoguide.AutoNormal(_local_model(effppl))
    svi = SVI(_local_model(effppl), guide, optax.adam(0.1), Trace_ELBO())
    params = _params(jax.tree.map(jnp.shape, svi.get_params(svi.init(jax.random.PRNGKey(0), y))))
    tr = trace(effppl.handlers.seed(substitute(guide, data=params), 3)).get_trace(y)
    idx = tr["n"]["value"]
    assert tr["n"]["type"] == "plate" and idx.shape == (n,)
    assert tr["z"]["value"].shape == (n,) and tr["v"]["value"].shape == (3, n)
    assert tr["z"]["scale"] == N / n and tr["mu"]["scale"] in (None, 1.0)
    # the draws read the full-size params at the indices: with scale -> 0 they are the locs
    tiny = {**params, **{k: v * 1e-12 for k, v in params.items() if k.endswith("_scale")}}
    tr = trace(effppl.handlers.seed(substitute(guide, data=tiny), 3)).get_trace(y)
    np.testing.assert_allclose(tr["z"]["value"], params["z_auto_loc"][idx], atol=1e-9)
    np.testing.assert_allclose(tr["v"]["value"], params["v_auto_loc"][:, idx], atol=1e-9)
    np.testing.assert_allclose(tr["s"]["value"], np.exp(params["s_auto_loc"][idx]), rtol=1e-9)


def _plate_in_scan(ppl, scan):
    """NumPyro's `test_subsample_guide` model: the plate takes the caller's indices, and is
    entered inside a scan over time."""
    def model(batch, subsample):
        drift = ppl.sample("drift", dist.LogNormal(-1.0, 0.5))
        with ppl.handlers.substitute(data={"data": subsample}):
            plate = ppl.plate("data", N, subsample_size=subsample.shape[0])

        def step(z_prev, y_t):
            with plate:
                z = ppl.sample("state", dist.Normal(z_prev, drift))
                ppl.sample("obs", dist.Normal(z, 1.0), obs=y_t)
            return z, None
        scan(step, jnp.zeros(subsample.shape[0]), batch)

    def create_plates(batch, subsample):
        with ppl.handlers.substitute(data={"data": subsample}):
            return ppl.plate("data", N, subsample_size=subsample.shape[0])
    return model, create_plates


@pytest.mark.slow
@pytest.mark.parametrize("name", ["AutoNormal", "AutoDelta"])
def test_create_plates_with_given_indices_in_a_scan_equals_numpyro(name):
    T = 5
    data = jnp.asarray(np.random.RandomState(1).randn(T, N))
    subsample = jnp.array([7, 2, 5, 0])
    batch = data[:, subsample]
    model, create_plates = _plate_in_scan(effppl, jax.lax.scan)
    ours = getattr(autoguide, name)(model, create_plates=create_plates)
    svi = SVI(model, ours, optax.adam(0.1), Trace_ELBO())
    params = svi.get_params(svi.init(jax.random.PRNGKey(0), batch, subsample))
    assert jnp.shape(params["state_auto_loc"]) == (T, N)  # stacked over time, full size
    params = _params(jax.tree.map(jnp.shape, params))
    their_model, their_plates = _plate_in_scan(numpyro, numpyro_scan)
    theirs = _numpyro_guide(name, their_model, batch, subsample, create_plates=their_plates)
    key = jax.random.PRNGKey(4)
    a = jax.value_and_grad(lambda p: Trace_ELBO().loss(key, p, model, ours, batch,
                                                       subsample))(params)
    b = jax.value_and_grad(lambda p: numpyro.infer.Trace_ELBO().loss(
        key, p, their_model, theirs, batch, subsample))(params)
    np.testing.assert_allclose(a[0], b[0], rtol=1e-12)
    for k in params:
        np.testing.assert_allclose(a[1][k], b[1][k], rtol=1e-10, atol=1e-12)
    # only the subsampled columns get a gradient
    untouched = np.setdiff1d(np.arange(N), subsample)
    assert np.all(a[1]["state_auto_loc"][:, untouched] == 0)


# -- an exact posterior --------------------------------------------------------------------

TAU, SIGMA = 2.0, 0.5


def _hierarchical(y):
    mu = effppl.sample("mu", dist.Normal(0.0, TAU))
    with effppl.plate("n", y.shape[0], subsample_size=5) as idx:
        z = effppl.sample("z", dist.Normal(mu, 1.0))
        effppl.sample("y", dist.Normal(z, SIGMA), obs=y[idx])


def _hierarchical_posterior(y):
    """`(mean, precision)` of (mu, z_1..z_N): a Gaussian; mean field has its exact means and
    the scales `1 / sqrt(diag(precision))`."""
    m = len(y)
    precision = np.zeros((m + 1, m + 1))
    precision[0, 0] = 1 / TAU**2 + m
    precision[0, 1:] = precision[1:, 0] = -1.0
    precision[1:, 1:] = np.eye(m) * (1 + 1 / SIGMA**2)
    b = np.concatenate([[0.0], np.asarray(y) / SIGMA**2])
    return np.linalg.solve(precision, b), precision


def test_autonormal_recovers_the_exact_posterior_with_subsampling():
    y = jnp.asarray(np.random.RandomState(2).normal(1.5, 1.5, 20))
    mean, precision = _hierarchical_posterior(y)
    sd = np.diag(precision) ** -0.5
    guide = autoguide.AutoNormal(_hierarchical)
    steps = 6000
    optim = optax.adam(optax.exponential_decay(0.05, steps, 0.02))
    result = SVI(_hierarchical, guide, optim, Trace_ELBO(num_particles=4)).run(
        jax.random.PRNGKey(0), steps, y, progress_bar=False)
    median = guide.median(result.params)
    assert median["z"].shape == (20,)
    np.testing.assert_allclose(median["mu"], mean[0], atol=0.05)
    np.testing.assert_allclose(median["z"], mean[1:], atol=0.05)
    np.testing.assert_allclose(result.params["z_auto_scale"], sd[1:], rtol=0.15)
    q = guide.quantiles(result.params, [0.5, 0.975])
    assert q["z"].shape == (2, 20)
    np.testing.assert_allclose(q["z"][1], median["z"] + 1.959964 * result.params["z_auto_scale"],
                               rtol=1e-6)
    draws = guide.sample_posterior(jax.random.PRNGKey(1), result.params, sample_shape=(4000,))
    assert draws["z"].shape == (4000, 20)
    np.testing.assert_allclose(draws["z"].mean(0), median["z"], atol=0.05)


# -- what is not supported ------------------------------------------------------------------


def test_autocontinuous_rejects_a_local_latent_site_as_numpyro():
    y = jnp.zeros(N)
    for name in ("AutoDiagonalNormal", "AutoMultivariateNormal"):
        guide = getattr(autoguide, name)(_local_model(effppl))
        with pytest.raises(autoguide.AutoGuideError, match="local latent.*`z`"):
            SVI(_local_model(effppl), guide, optax.adam(0.1), Trace_ELBO()).init(
                jax.random.PRNGKey(0), y)


def test_create_plates_must_return_the_models_plates():
    y = jnp.zeros(N)
    model = _local_model(effppl)
    for bad, match in ((lambda y: effppl.plate("n", N, subsample_size=3), "subsample size 3"),
                       (lambda y: "n", "expected to return an effppl.plate")):
        guide = autoguide.AutoNormal(model, create_plates=bad)
        with pytest.raises(autoguide.AutoGuideError, match=match):
            SVI(model, guide, optax.adam(0.1), Trace_ELBO()).init(jax.random.PRNGKey(0), y)
    with pytest.raises(autoguide.AutoGuideError, match="create_plates"):
        autoguide.AutoNormal(model, create_plates=3)


def test_a_plate_created_inside_a_loop_is_named():
    def model(y):
        def step(_, y_t):
            with effppl.plate("n", N, subsample_size=n) as idx:
                z = effppl.sample("z", dist.Normal(0.0, 1.0))
                effppl.sample("y", dist.Normal(z, 1.0), obs=y_t[idx])
            return None, None
        jax.lax.scan(step, None, y)

    guide = autoguide.AutoNormal(model)
    with pytest.raises(autoguide.AutoGuideError, match="plate `n`.*inside a loop"):
        SVI(model, guide, optax.adam(0.1), Trace_ELBO()).init(jax.random.PRNGKey(0),
                                                              jnp.zeros((3, N)))


def test_a_support_depending_on_a_global_site_is_followed_in_the_subsample():
    """z ~ Uniform(0, s), s latent: each draw of z lies in (0, s) of the same draw (the guide
    runs the model on its own indices to find the support); full-size values then have no
    support to map to, which `median` says."""
    def model(y):
        s = effppl.sample("s", dist.Exponential(1.0))
        with effppl.plate("n", N, subsample_size=n) as idx:
            z = effppl.sample("z", dist.Uniform(0.0, s))
            effppl.sample("y", dist.Normal(z, 0.1), obs=y[idx])

    y = jnp.linspace(0.1, 0.9, N)
    guide = autoguide.AutoNormal(model)
    svi = SVI(model, guide, optax.adam(0.1), Trace_ELBO())
    params = svi.get_params(svi.init(jax.random.PRNGKey(0), y))
    params = {**params, "s_auto_scale": jnp.asarray(1.0), "z_auto_scale": jnp.ones(N)}
    for seed in range(5):
        tr = trace(effppl.handlers.seed(substitute(guide, data=params), seed)).get_trace(y)
        assert tr["z"]["value"].shape == (n,)
        assert np.all((tr["z"]["value"] > 0) & (tr["z"]["value"] < tr["s"]["value"]))
    with pytest.raises(autoguide.AutoGuideError, match="site `z` sits in a subsampled plate"):
        guide.median(params)
