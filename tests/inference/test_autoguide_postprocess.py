"""What autoguides return after fitting (`median`, `quantiles`, `sample_posterior`), against
NumPyro's autoguides at the same params: the latent sites of the guide's prototype and the model's
deterministic sites; clear errors for missing or misshaped params."""

import warnings

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

Y = jnp.array([0.1, 0.5, -0.2])


def _model(ppl):
    def model(y):
        mu = ppl.sample("mu", dist.Normal(0.0, 1.0))
        s = ppl.sample("s", dist.HalfNormal(1.0))
        ppl.deterministic("d", 2.0 * mu + s)
        w = ppl.param("w", 0.5)
        with ppl.plate("N", 3):
            ppl.deterministic("e", mu + jnp.arange(3.0) * w)
            ppl.sample("y", dist.Normal(mu, s), obs=y)
    return model


def _params(name, w=0.5):
    """The same params for effppl's and NumPyro's guide `name`."""
    if name == "AutoNormal":
        return {"mu_auto_loc": 0.3, "mu_auto_scale": 0.5, "s_auto_loc": -0.2,
                "s_auto_scale": 0.4, "w": w}
    if name == "AutoDelta":
        return {"mu_auto_loc": 0.3, "s_auto_loc": 0.8, "w": w}
    params = {"auto_loc": jnp.array([0.3, -0.2]), "w": w}
    if name == "AutoDiagonalNormal":
        params["auto_scale"] = jnp.array([0.5, 0.4])
    elif name == "AutoMultivariateNormal":
        params["auto_scale_tril"] = jnp.array([[0.5, 0.0], [0.1, 0.4]])
    elif name == "AutoLowRankMultivariateNormal":
        params.update(auto_scale=jnp.array([0.5, 0.4]), auto_cov_factor=jnp.array([[0.2], [0.1]]))
    return {k: jnp.asarray(v, jnp.float64) for k, v in params.items()}


def _guides(name):
    """`(ours, theirs)`: guide `name` of effppl and of NumPyro, set up on `_model` at `Y`."""
    out = []
    for ppl, module, svi, loss in ((effppl, autoguide, SVI, Trace_ELBO),
                                   (numpyro, numpyro_autoguide, numpyro.infer.SVI,
                                    numpyro.infer.Trace_ELBO)):
        model = _model(ppl)
        guide = getattr(module, name)(model)
        svi(model, guide, optax.adam(0.01), loss()).init(jax.random.PRNGKey(0), Y)
        out.append(guide)
    return out


def _assert_same(ours, theirs):
    assert set(ours) == set(theirs)
    for k in theirs:
        np.testing.assert_allclose(ours[k], theirs[k], rtol=1e-6, atol=1e-12, err_msg=k)


GUIDES = ["AutoNormal", "AutoDelta", "AutoDiagonalNormal", "AutoMultivariateNormal",
          "AutoLowRankMultivariateNormal"]


@pytest.mark.slow
@pytest.mark.parametrize("name", GUIDES)
def test_median_and_quantiles_equal_numpyros_with_deterministic_sites(name):
    ours, theirs = _guides(name)
    params = _params(name)
    _assert_same(ours.median(params), theirs.median(params))
    if name == "AutoDelta":  # NumPyro's AutoDelta has no quantiles, and its median no
        assert set(ours.median(params)) == {"mu", "s"}  # deterministic sites
        return
    q = [0.1, 0.5, 0.9]
    _assert_same(ours.quantiles(params, q), theirs.quantiles(params, q))
    assert ours.quantiles(params, q)["e"].shape == (3, 3)


@pytest.mark.slow
@pytest.mark.parametrize("name", GUIDES)
def test_sample_posterior_returns_deterministic_sites_as_numpyro(name):
    ours, theirs = _guides(name)
    params = _params(name)
    key = jax.random.PRNGKey(1)
    mine = ours.sample_posterior(key, params, Y, sample_shape=(4, 2))
    other = theirs.sample_posterior(key, params, Y, sample_shape=(4, 2))
    assert {k: v.shape for k, v in mine.items()} == {k: v.shape for k, v in other.items()}
    assert mine["e"].shape == (4, 2, 3)
    np.testing.assert_allclose(mine["d"], 2.0 * mine["mu"] + mine["s"], rtol=1e-12)
    np.testing.assert_allclose(mine["e"], mine["mu"][..., None] + jnp.arange(3.0) * 0.5,
                               rtol=1e-12)
    if name == "AutoDelta":  # no randomness: the same values as NumPyro's
        _assert_same(mine, other)


def test_deterministic_sites_use_the_fitted_model_params():
    """A model param in `params` is substituted (NumPyro's AutoContinuous guides do; its
    AutoNormal runs the model at the param's initial value)."""
    ours, theirs = _guides("AutoDiagonalNormal")
    params = _params("AutoDiagonalNormal", w=1.5)
    _assert_same(ours.median(params), theirs.median(params))
    normal, _ = _guides("AutoNormal")
    median = normal.median(_params("AutoNormal", w=1.5))
    np.testing.assert_allclose(median["e"], median["mu"] + jnp.arange(3.0) * 1.5, rtol=1e-12)


def test_deterministic_sites_inside_a_plain_scan_are_stacked():
    def ssm(y):
        def step(x_prev, y_t):
            x = effppl.sample("x", dist.Normal(0.8 * x_prev, 0.5))
            effppl.deterministic("x2", x ** 2)
            effppl.sample("y", dist.Normal(x, 0.3), obs=y_t)
            return x, None
        jax.lax.scan(step, 0.0, y)

    y = jnp.linspace(-1.0, 1.0, 5)
    guide = autoguide.AutoNormal(ssm)
    SVI(ssm, guide, optax.adam(0.01), Trace_ELBO()).init(jax.random.PRNGKey(0), y)
    params = {"x_auto_loc": jnp.linspace(0.0, 1.0, 5), "x_auto_scale": jnp.full(5, 0.2)}
    median = guide.median(params)
    np.testing.assert_allclose(median["x2"], params["x_auto_loc"] ** 2, rtol=1e-12)
    draws = guide.sample_posterior(jax.random.PRNGKey(1), params, sample_shape=(3,))
    assert draws["x2"].shape == (3, 5)
    np.testing.assert_allclose(draws["x2"], draws["x"] ** 2, rtol=1e-12)


@pytest.mark.parametrize("name, missing", [("AutoNormal", "s_auto_loc"),
                                           ("AutoNormal", "mu_auto_scale"),
                                           ("AutoDelta", "s_auto_loc"),
                                           ("AutoDiagonalNormal", "auto_loc"),
                                           ("AutoDiagonalNormal", "auto_scale")])
def test_a_missing_param_is_a_key_error_naming_it_where_numpyros_is(name, missing):
    ours, theirs = _guides(name)
    params = {k: v for k, v in _params(name).items() if k != missing}
    calls = {"median": lambda g: g.median(params),
             "sample_posterior": lambda g: g.sample_posterior(jax.random.PRNGKey(0), params, Y)}
    if name != "AutoDelta":
        calls["quantiles"] = lambda g: g.quantiles(params, [0.5])
    for method, call in calls.items():
        if method == "median" and missing.endswith("scale"):  # a median reads the locs only
            _assert_same(call(ours), call(theirs))
            continue
        if not (name == "AutoDiagonalNormal" and method == "sample_posterior"):
            with pytest.raises(KeyError):  # NumPyro's lookup
                call(theirs)
        # (NumPyro's AutoContinuous.sample_posterior draws with a missing param's initial value)
        with pytest.raises(autoguide.MissingParamError, match=f"lack `{missing}`") as err:
            call(ours)
        assert isinstance(err.value, KeyError)
        assert str(err.value).startswith("`")  # not quoted as KeyError's message is


@pytest.mark.parametrize("name, param", [("AutoNormal", "mu_auto_loc"),
                                         ("AutoDelta", "s_auto_loc"),
                                         ("AutoMultivariateNormal", "auto_loc"),
                                         ("AutoMultivariateNormal", "auto_scale_tril")])
def test_a_param_of_the_wrong_shape_is_an_error_naming_it(name, param):
    ours, _ = _guides(name)
    params = _params(name)
    expected = re_shape(jnp.shape(params[param]))
    params[param] = jnp.ones((7,))
    method = (lambda: ours.median(params)) if param.endswith("loc") else \
        (lambda: ours.quantiles(params, [0.5]))
    with pytest.raises(autoguide.AutoGuideError,
                       match=rf"`{param}` has shape \(7,\).*has shape {expected}"):
        method()
    with pytest.raises(autoguide.AutoGuideError, match=f"`{param}` has shape"):
        ours.sample_posterior(jax.random.PRNGKey(0), params)


def re_shape(shape):
    return str(tuple(shape)).replace("(", r"\(").replace(")", r"\)")


@pytest.mark.slow
@pytest.mark.parametrize("loc", [[0.3, -0.2], [1.0, -1.0]])
def test_laplace_posterior_equals_numpyros_also_where_the_hessian_is_singular(loc):
    """At `[1, -1]` the Hessian is not positive definite: NumPyro's posterior is the point (a
    zero scale_tril, with a warning); quantiles and draws equal NumPyro's."""
    ours, theirs = _guides("AutoLaplaceApproximation")
    params = {"auto_loc": jnp.array(loc), "w": jnp.asarray(0.5)}
    singular = loc == [1.0, -1.0]
    posteriors = []
    for guide in (ours, theirs):
        with pytest.warns(UserWarning, match="Hessian of log posterior") if singular \
                else warnings.catch_warnings():
            posteriors.append(guide.get_posterior(params))
    np.testing.assert_allclose(posteriors[0].scale_tril, posteriors[1].scale_tril, rtol=1e-6,
                               atol=1e-12)
    assert np.all(posteriors[0].scale_tril == 0) == singular
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if not singular:
            _assert_same(ours.quantiles(params, [0.1, 0.9]),
                         theirs.quantiles(params, [0.1, 0.9]))
        key = jax.random.PRNGKey(3)
        _assert_same(ours.sample_posterior(key, params, sample_shape=(5,)),
                     theirs.sample_posterior(key, params, sample_shape=(5,)))
    if singular:  # NumPyro's quantiles build a Normal of scale 0: a ValueError; its
        with pytest.raises(ValueError, match="invalid scale"):  # sample_posterior warns
            theirs.quantiles(params, [0.1, 0.9])
        with pytest.raises(autoguide.AutoGuideError,
                           match=r"AutoLaplaceApproximation.quantiles.*Hessian.*`auto_loc` is "
                                 r"not positive definite"):
            ours.quantiles(params, [0.1, 0.9])
        for guide in (ours, theirs):
            with pytest.warns(UserWarning, match="Hessian of log posterior"):
                guide.sample_posterior(jax.random.PRNGKey(3), params, sample_shape=(2,))


CONTINUOUS = ["AutoDiagonalNormal", "AutoMultivariateNormal", "AutoLowRankMultivariateNormal"]


@pytest.mark.parametrize("name", CONTINUOUS)
def test_a_scalar_quantile_gives_one_value_per_site_as_numpyros(name):
    ours, theirs = _guides(name)
    params = _params(name)
    got, want = ours.quantiles(params, 0.9), theirs.quantiles(params, 0.9)
    for site in ("mu", "s"):
        assert jnp.shape(got[site]) == jnp.shape(want[site]) == ()
        np.testing.assert_allclose(got[site], want[site], rtol=1e-10)
    listed = ours.quantiles(params, [0.1, 0.9])
    np.testing.assert_allclose(listed["mu"][1], got["mu"], rtol=1e-12)


@pytest.mark.parametrize("name, param, bad", [
    ("AutoNormal", "mu_auto_scale", -0.5),
    ("AutoDiagonalNormal", "auto_scale", jnp.array([-0.5, 0.4])),
    ("AutoMultivariateNormal", "auto_scale_tril", jnp.array([[1.0, 0.5], [0.0, 1.0]])),
])
def test_a_param_outside_its_support_is_refused_where_numpyro_raises(name, param, bad):
    ours, theirs = _guides(name)
    params = {**_params(name), param: jnp.asarray(bad, jnp.float64)}
    with pytest.raises(ValueError):  # NumPyro's distribution validates its argument
        with numpyro.validation_enabled():
            theirs.sample_posterior(jax.random.PRNGKey(0), params, sample_shape=(2,))
    for call in (lambda: ours.quantiles(params, [0.1, 0.9]),
                 lambda: ours.sample_posterior(jax.random.PRNGKey(0), params,
                                               sample_shape=(2,))):
        with pytest.raises(autoguide.AutoGuideError, match=f"`{param}` is outside its support"):
            call()
    ours.median(params)  # the median reads the locs only, as NumPyro's


def test_before_svi_init_the_message_says_to_run_it():
    guide = autoguide.AutoNormal(_model(effppl))
    with pytest.raises(autoguide.AutoGuideError, match="run it once first"):
        guide.median(_params("AutoNormal"))


def test_autodelta_has_no_quantiles_as_numpyros():
    ours, theirs = _guides("AutoDelta")
    with pytest.raises(NotImplementedError):
        theirs.quantiles(_params("AutoDelta"), [0.5])
    with pytest.raises(NotImplementedError, match="AutoDelta has no quantiles"):
        ours.quantiles(_params("AutoDelta"), [0.5])


@pytest.mark.slow
@pytest.mark.parametrize("name, param", [("AutoNormal", "mu_auto_loc"),
                                         ("AutoDiagonalNormal", "w"),
                                         ("AutoDiagonalNormal", "auto_scale"),
                                         ("AutoLaplaceApproximation", "auto_loc")])
@pytest.mark.parametrize("bad", ["abc", object()], ids=["str", "object"])
def test_a_param_that_is_no_array_is_a_type_error_naming_it(name, param, bad):
    """NumPyro's methods fail inside JAX (a `TypeError` naming neither param nor guide)."""
    ours, theirs = _guides(name)
    params = {**(_params(name) if name != "AutoLaplaceApproximation" else
                 {"auto_loc": jnp.array([0.3, -0.2]), "w": jnp.asarray(0.5)}), param: bad}
    with pytest.raises(TypeError), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # (JAX's, on NumPyro's way there)
        theirs.quantiles(params, [0.5])
    kind = "str" if isinstance(bad, str) else "object of type object"
    for call in (lambda: ours.median(params), lambda: ours.quantiles(params, [0.5]),
                 lambda: ours.sample_posterior(jax.random.PRNGKey(0), params)):
        with pytest.raises(autoguide.ParamTypeError,
                           match=rf"param `{param}` must be an array of numbers, but is an? "
                                 rf"{kind}") as err:
            call()
        assert isinstance(err.value, TypeError)
