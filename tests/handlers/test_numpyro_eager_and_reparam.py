"""Four results that were silently wrong against NumPyro, each checked against NumPyro on the
same model: `LocScaleReparam` on a site whose support is not real, `with seed(), trace()` blocks
around a model with a loop, entry points and guides called inside a `with seed()` block, and
`reparam` outside `seed`."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.infer.util
import pytest
from numpyro import handlers as nh
from numpyro.contrib.control_flow import scan as np_scan
from numpyro.infer import reparam as np_reparam
from numpyro.infer.autoguide import AutoNormal as NpAutoNormal
from scipy import stats

import effppl
from effppl import distributions as dist
from effppl import handlers
from effppl.contrib.control_flow import scan
from effppl.infer.autoguide import AutoNormal
from effppl.infer.reparam import LocScaleReparam, TransformReparam


def _close(a, b, tol=1e-10):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


# -- 1. LocScaleReparam on a site whose support is not real --------------------------------

def test_loc_scale_reparam_of_a_lognormal_raises_as_numpyro():
    def model(sample):
        return lambda: sample("x", dist.LogNormal(1.0, 0.5))

    with pytest.raises(ValueError, match="real support"):  # NumPyro's own error
        nh.seed(nh.reparam(model(numpyro.sample), config={
            "x": np_reparam.LocScaleReparam(0)}), 0)()
    with pytest.raises(effppl.SiteError, match="site `x` has a LogNormal with support"):
        handlers.seed(handlers.reparam(model(effppl.sample), config={
            "x": LocScaleReparam(0)}), 0)()
    with pytest.raises(ValueError, match="real support"):  # centred too, as NumPyro's check
        handlers.seed(handlers.reparam(model(effppl.sample), config={
            "x": LocScaleReparam(1)}), 0)()


def test_lognormal_reparametrized_through_its_log_has_lognormal_draws():
    # the alternative the error names: TransformReparam, then LocScaleReparam on the base
    def model():
        with effppl.plate("n", 4000):
            return effppl.sample("x", dist.TransformedDistribution(
                dist.Normal(1.0, 0.5), dist.transforms.ExpTransform()))
    # one handler reparametrizes the auxiliary site `x_base` too, as NumPyro's
    config = {"x": TransformReparam(), "x_base": LocScaleReparam(0)}
    tr = handlers.trace(handlers.seed(handlers.reparam(model, config=config), 0)).get_trace()
    assert {n: s["type"] for n, s in tr.items()} == {
        "n": "plate", "x_base_decentered": "sample", "x_base": "deterministic",
        "x": "deterministic"}
    x = np.asarray(tr["x"]["value"])
    _close(x, np.exp(1.0 + 0.5 * np.asarray(tr["x_base_decentered"]["value"])))
    assert stats.kstest(x, stats.lognorm(s=0.5, scale=np.exp(1.0)).cdf).pvalue > 1e-3


# -- 2. `with seed(), trace()` blocks around a model with a loop ----------------------------

def _walk(sample, scan_fn):
    def model():
        a = sample("a", dist.Normal(0.0, 1.0))

        def step(c, _):
            x = sample("x", dist.Normal(jnp.zeros((5, 2)) + c, 1.0).to_event(2))
            return c + 1.0, x
        ys = scan_fn(step, a, None, length=4)[1]
        sample("b", dist.Normal(0.0, 1.0))
        return ys
    return model


def test_eager_blocks_record_a_scan_stacked_as_numpyro():
    with nh.seed(rng_seed=0), nh.trace() as theirs:
        _walk(numpyro.sample, np_scan)()
    with handlers.seed(rng_seed=0), handlers.trace() as ours:
        ys = _walk(effppl.sample, scan)()
    shapes = {name: site["value"].shape for name, site in ours.items()}
    assert shapes == {name: site["value"].shape for name, site in theirs.items()} == {
        "a": (), "x": (4, 5, 2), "b": ()}
    _close(ys, ours["x"]["value"])
    # each step draws around its carry: a + t
    means = np.asarray(ours["x"]["value"]).mean(axis=(1, 2)) - float(ours["a"]["value"])
    assert np.all(np.abs(means - np.arange(4)) < 2.0)
    assert len({float(ours["a"]["value"]), float(ours["b"]["value"])}) == 2


def test_eager_blocks_around_a_plain_scan_raise_naming_the_site():
    with pytest.raises(effppl.SiteError, match="Site `x` is reached inside a JAX transformation"):
        with handlers.seed(rng_seed=0), handlers.trace():
            _walk(effppl.sample, jax.lax.scan)()
    # the same model run under the handlers (not blocks) records every step
    tr = handlers.trace(handlers.seed(_walk(effppl.sample, jax.lax.scan), 0)).get_trace()
    assert tr["x"]["value"].shape == (4, 5, 2)


# -- 3. entry points and guides inside a `with seed()` block --------------------------------

def _one_site(sample):
    def model(y):
        x = sample("x", dist.Normal(0.0, 1.0))
        sample("y", dist.Normal(x, 2.0), obs=y)
    return model


def test_log_density_inside_a_seed_block_equals_numpyros():
    with nh.seed(rng_seed=0):
        theirs, _ = numpyro.infer.util.log_density(_one_site(numpyro.sample), (0.5,), {},
                                                   {"x": 0.3})
    with handlers.seed(rng_seed=0):
        ours, tr = effppl.log_density(_one_site(effppl.sample), (0.5,), {}, {"x": 0.3})
    _close(ours, theirs)
    _close(ours, stats.norm.logpdf(0.3) + stats.norm.logpdf(0.5, 0.3, 2.0))
    assert float(tr["x"]["value"]) == 0.3


def test_an_autoguide_first_called_inside_a_seed_block_draws_as_numpyros():
    guide = AutoNormal(_one_site(effppl.sample))
    np_guide = NpAutoNormal(_one_site(numpyro.sample))
    with handlers.seed(rng_seed=0), handlers.trace() as ours:
        guide(0.5)
    with nh.seed(rng_seed=0), nh.trace() as theirs:
        np_guide(0.5)
    assert {n for n, s in ours.items() if s["type"] == "param"} == \
        {n for n, s in theirs.items() if s["type"] == "param"} == {"x_auto_loc", "x_auto_scale"}
    assert ours["x"]["value"].shape == theirs["x"]["value"].shape == ()
    # the draw is loc + scale * eps with NumPyro's initial scale
    _close(ours["x_auto_scale"]["value"], theirs["x_auto_scale"]["value"])


def test_a_neutra_model_inside_a_seed_block_runs_as_under_seed_wrapped():
    import effppl.optim
    from effppl.infer import SVI, Trace_ELBO
    from effppl.infer.autoguide import AutoDiagonalNormal
    from effppl.infer.reparam import NeuTraReparam

    model = _one_site(effppl.sample)
    guide = AutoDiagonalNormal(model)
    params = SVI(model, guide, effppl.optim.Adam(0.01), Trace_ELBO()).run(
        jax.random.PRNGKey(0), 20, 0.5, progress_bar=False).params
    neutra = NeuTraReparam(guide, params).reparam(model)
    with handlers.seed(rng_seed=1):
        ours = handlers.trace(neutra).get_trace(0.5)
    wrapped = handlers.trace(handlers.seed(neutra, 1)).get_trace(0.5)
    assert set(ours) == set(wrapped) >= {"auto_shared_latent", "x", "y"}
    for name in ours:
        _close(ours[name]["value"], wrapped[name]["value"])


# -- 4. reparam outside seed -----------------------------------------------------------------

def _plated(sample, plate):
    def model():
        with plate("n", 4000):
            return sample("x", dist.Normal(1.0, 2.0))
    return model


@pytest.mark.parametrize("how", ["wrapped", "blocks"])
def test_reparam_outside_seed_draws_the_auxiliary_site_as_numpyro(how):
    config = {"x": LocScaleReparam(0)}
    model = _plated(effppl.sample, effppl.plate)
    if how == "wrapped":
        ours = handlers.trace(handlers.reparam(handlers.seed(model, 0), config=config)).get_trace()
    else:
        with handlers.trace() as ours, handlers.reparam(config=config), \
                handlers.seed(rng_seed=0):
            model()
    theirs = nh.trace(nh.reparam(nh.seed(_plated(numpyro.sample, numpyro.plate), 0), config={
        "x": np_reparam.LocScaleReparam(0)})).get_trace()
    assert set(ours) == set(theirs) == {"n", "x", "x_decentered"}
    assert ours["x"]["type"] == theirs["x"]["type"] == "deterministic"
    decentered = np.asarray(ours["x_decentered"]["value"])
    _close(ours["x"]["value"], 1.0 + 2.0 * decentered)
    # draws compared in distribution: NumPyro's and ours, both standard normal
    assert stats.ks_2samp(decentered, np.asarray(theirs["x_decentered"]["value"])).pvalue > 1e-3
    assert stats.kstest(decentered, stats.norm.cdf).pvalue > 1e-3
