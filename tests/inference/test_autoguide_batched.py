"""The batched normal autoguides (`AutoBatchedMultivariateNormal`,
`AutoBatchedLowRankMultivariateNormal`) against NumPyro's on the same models: param names,
shapes and initial values, the guide's log density at given params and latent value, `median`
and `sample_posterior`; an SVI fit against an exact posterior; errors naming the argument or
site."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.infer.autoguide as numpyro_autoguide
import optax
import pytest

import effppl
from effppl import distributions as dist
from effppl.infer import SVI, Trace_ELBO, autoguide
from effppl.infer.autoguide import AutoGuideError
from effppl.infer.reparam import NeuTraReparam

NAMES = ["AutoBatchedMultivariateNormal", "AutoBatchedLowRankMultivariateNormal"]
N = 5


def _plated(ppl):
    """A plate of N independent 3-d latents, and a second (positive, 2-d) latent per member."""
    def model(y):
        with ppl.plate("n", N):
            z = ppl.sample("z", dist.Normal(0.0, 1.0).expand([3]).to_event(1))
            s = ppl.sample("s", dist.LogNormal(0.0, 1.0).expand([2]).to_event(1))
            ppl.sample("y", dist.Normal(z, s.sum(-1, keepdims=True)).to_event(1), obs=y)
    return model


def _two_plates(ppl):
    """Latents of shape (4, N, 2): batch_ndim=2 gives batch shape (4, N)."""
    def model():
        with ppl.plate("a", 4, dim=-2), ppl.plate("b", N, dim=-1):
            ppl.sample("w", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
    return model


def _data():
    return jnp.asarray(np.random.RandomState(0).randn(N, 3))


def _guides(name, make, args, **kwargs):
    """`[(guide, params after SVI.init)]` for effppl's and NumPyro's guide `name` on the model
    `make(ppl)`."""
    out = []
    for ppl, module, svi_cls, elbo in ((effppl, autoguide, SVI, Trace_ELBO),
                                       (numpyro, numpyro_autoguide, numpyro.infer.SVI,
                                        numpyro.infer.Trace_ELBO)):
        model = make(ppl)
        guide = getattr(module, name)(model, **kwargs)
        svi = svi_cls(model, guide, optax.adam(0.01), elbo())
        out.append((guide, svi.get_params(svi.init(jax.random.PRNGKey(0), *args))))
    return out


def _random_params(shapes, seed=1):
    """Valid params of the given shapes: a lower-triangular `scale_tril` with a positive
    diagonal, a positive `scale`."""
    rng = np.random.RandomState(seed)
    params = {k: jnp.asarray(0.3 * rng.randn(*shape)) for k, shape in shapes.items()}
    if "auto_scale_tril" in params:
        tril = params["auto_scale_tril"]
        params["auto_scale_tril"] = jnp.tril(tril) + 1.5 * jnp.eye(tril.shape[-1])
    if "auto_scale" in params:
        params["auto_scale"] = jnp.abs(params["auto_scale"]) + 0.2
    return params


CASES = [(_plated, (_data(),), {}), (_two_plates, (), {"batch_ndim": 2})]


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("make, args, kwargs", CASES, ids=["plate", "two-plates"])
def test_params_have_numpyros_names_shapes_and_initial_scales(name, make, args, kwargs):
    (_, ours), (_, theirs) = _guides(name, make, args, **kwargs)
    assert {k: v.shape for k, v in ours.items()} == {k: v.shape for k, v in theirs.items()}
    for k in theirs:
        if k != "auto_loc":  # the initial locs are random draws (init_to_uniform)
            np.testing.assert_allclose(ours[k], theirs[k], rtol=1e-12)


def _latents_3d(ppl):
    def model():
        with ppl.plate("n", N):
            ppl.sample("z", dist.Normal(0.0, 1.0).expand([3]).to_event(1))
    return model


@pytest.mark.slow
@pytest.mark.parametrize("name, kwargs, shapes", [
    (NAMES[0], {}, {"auto_loc": (N, 3), "auto_scale_tril": (N, 3, 3)}),
    (NAMES[1], {}, {"auto_loc": (N, 3), "auto_scale": (N, 3), "auto_cov_factor": (N, 3, 2)}),
    (NAMES[1], {"rank": 1}, {"auto_loc": (N, 3), "auto_scale": (N, 3),
                             "auto_cov_factor": (N, 3, 1)})])
def test_param_shapes_on_a_plate_of_3d_latents(name, kwargs, shapes):
    (_, ours), (_, theirs) = _guides(name, _latents_3d, (), **kwargs)
    assert {k: v.shape for k, v in ours.items()} == shapes
    assert {k: v.shape for k, v in theirs.items()} == shapes


def _log_density(ppl, guide, params, latent, args):
    """The guide's log density (all its sample sites) at `params` and the flat `latent`, and
    the values of its sites."""
    guide = ppl.handlers.substitute(ppl.handlers.seed(guide, 0),
                                    data={**params, "_auto_latent": latent})
    tr = ppl.handlers.trace(guide).get_trace(*args)
    sites = {n: s for n, s in tr.items() if s["type"] == "sample"}
    return (sum(jnp.sum(s["fn"].log_prob(s["value"])) for s in sites.values()),
            {n: s["value"] for n, s in sites.items()})


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("make, args, kwargs", CASES, ids=["plate", "two-plates"])
def test_log_density_equals_numpyros_at_the_same_params(name, make, args, kwargs):
    (ours, p), (theirs, _) = _guides(name, make, args, **kwargs)
    params = _random_params({k: v.shape for k, v in p.items()})
    latent = jnp.asarray(np.random.RandomState(2).randn(p["auto_loc"].size))
    ours_lp, ours_values = _log_density(effppl, ours, params, latent, args)
    theirs_lp, theirs_values = _log_density(numpyro, theirs, params, latent, args)
    np.testing.assert_allclose(ours_lp, theirs_lp, rtol=1e-10)
    assert set(ours_values) == set(theirs_values)
    for k in theirs_values:
        np.testing.assert_allclose(ours_values[k], theirs_values[k], rtol=1e-12)
    ours_median, theirs_median = ours.median(params), theirs.median(params)
    assert set(ours_median) == set(theirs_median)
    for k in theirs_median:
        np.testing.assert_allclose(ours_median[k], theirs_median[k], rtol=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_median_quantiles_and_sample_posterior_shapes(name):
    (ours, p), (theirs, _) = _guides(name, _plated, (_data(),))
    params = _random_params({k: v.shape for k, v in p.items()})
    ours_draws = ours.sample_posterior(jax.random.PRNGKey(3), params, sample_shape=(7, 2))
    theirs_draws = theirs.sample_posterior(jax.random.PRNGKey(3), params, sample_shape=(7, 2))
    assert {k: v.shape for k, v in ours_draws.items()} == {
        k: v.shape for k, v in theirs_draws.items()} == {"z": (7, 2, N, 3), "s": (7, 2, N, 2)}
    with pytest.raises(NotImplementedError):  # NumPyro's batched guides have no quantiles
        theirs.quantiles(params, [0.1, 0.9])
    q = ours.quantiles(params, [0.1, 0.5, 0.9])
    assert {k: v.shape for k, v in q.items()} == {"z": (3, N, 3), "s": (3, N, 2)}
    median = ours.median(params)
    for k in median:  # the normal marginals' median is the loc's image
        np.testing.assert_allclose(q[k][1], median[k], rtol=1e-10)
    assert {k: v.shape for k, v in ours.quantiles(params, 0.5).items()} == {"z": (N, 3),
                                                                             "s": (N, 2)}
    # the marginal sds are those of the flat latent's distribution
    mean, sd = ours._marginals(params)
    draws = ours.get_posterior(params).sample(jax.random.PRNGKey(4), (20000,))
    assert draws.shape == (20000, 5 * N)
    np.testing.assert_allclose(draws.mean(0), mean, atol=0.05)
    np.testing.assert_allclose(draws.std(0), sd, rtol=0.05)


# -- a fit against the exact posterior --------------------------------------------------------

A = np.array([[1.0, 0.5, 0.0], [0.0, 1.0, -0.7], [0.3, 0.0, 1.0]])
SIGMA = 0.5


def _conjugate(y):
    """z_i ~ N(0, I_3), y_i ~ N(A z_i, SIGMA^2 I): correlated normal posteriors per member."""
    with effppl.plate("n", N):
        z = effppl.sample("z", dist.Normal(0.0, 1.0).expand([3]).to_event(1))
        effppl.sample("y", dist.Normal(z @ A.T, SIGMA).to_event(1), obs=y)


def _exact(y):
    precision = np.eye(3) + A.T @ A / SIGMA**2
    cov = np.linalg.inv(precision)
    return np.asarray(y) @ A @ cov / SIGMA**2, cov  # mean (N, 3); cov per member


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_svi_recovers_the_exact_posterior(name):
    y = _data()
    mean, cov = _exact(y)
    guide = getattr(autoguide, name)(_conjugate)
    steps = 3000
    svi = SVI(_conjugate, guide, optax.adam(optax.exponential_decay(0.03, steps, 0.02)),
              Trace_ELBO(num_particles=16))
    result = svi.run(jax.random.PRNGKey(0), steps, y, progress_bar=False)
    np.testing.assert_allclose(guide.median(result.params)["z"], mean, atol=0.03)
    if name == "AutoBatchedMultivariateNormal":  # full covariance per member: exact
        tril = result.params["auto_scale_tril"]
        np.testing.assert_allclose(tril @ np.swapaxes(tril, -1, -2),
                                   np.broadcast_to(cov, (N, 3, 3)), atol=0.02)


# -- errors ---------------------------------------------------------------------------------


def test_bad_settings_name_the_argument():
    model = _plated(effppl)
    for bad in (0, -1, 1.0, True, None):
        with pytest.raises(AutoGuideError, match="batch_ndim"):
            autoguide.AutoBatchedMultivariateNormal(model, batch_ndim=bad)
    for bad in (0, -2, 1.5, True):
        with pytest.raises(AutoGuideError, match="rank"):
            autoguide.AutoBatchedLowRankMultivariateNormal(model, rank=bad)
    with pytest.raises(AutoGuideError, match="init_scale"):
        autoguide.AutoBatchedMultivariateNormal(model, init_scale=0.0)


def _init(guide, *args):
    svi = SVI(guide.model, guide, optax.adam(0.01), Trace_ELBO())
    return svi.init(jax.random.PRNGKey(0), *args)


@pytest.mark.parametrize("name", NAMES)
def test_sites_without_a_shared_batch_shape_are_named(name):
    def unbatched():
        effppl.sample("g", dist.Normal(0.0, 1.0))
        with effppl.plate("n", N):
            effppl.sample("z", dist.Normal(0.0, 1.0))

    def mismatched():
        with effppl.plate("n", N):
            effppl.sample("z", dist.Normal(0.0, 1.0))
        with effppl.plate("m", 4):
            effppl.sample("u", dist.Normal(0.0, 1.0))

    guide = getattr(autoguide, name)
    with pytest.raises(AutoGuideError, match="site `g`.*batch_ndim"):
        _init(guide(unbatched))
    with pytest.raises(AutoGuideError, match=r"site `u` has leading dims \(4,\).*site `z`"):
        _init(guide(mismatched))
    with pytest.raises(AutoGuideError, match="site `z`.*fewer than batch_ndim"):
        _init(guide(_plated(effppl), batch_ndim=2), _data())


def test_neutra_refuses_a_batched_guide():
    guide = autoguide.AutoBatchedMultivariateNormal(_latents_3d(effppl))
    svi = SVI(guide.model, guide, optax.adam(0.01), Trace_ELBO())
    params = svi.get_params(svi.init(jax.random.PRNGKey(0)))
    with pytest.raises(TypeError, match="NeuTraReparam.*AutoBatchedMultivariateNormal"):
        NeuTraReparam(guide, params)
