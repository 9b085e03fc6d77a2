"""`infer_config` against NumPyro's `handlers.infer_config` on the same programs, and against a
hand-written forward algorithm for a site it marks inside a plain `lax.scan`."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import pytest
from jax.scipy.special import logsumexp
from numpyro.contrib.funsor import enum as numpyro_enum
from numpyro.contrib.funsor import log_density as numpyro_enum_log_density

import effppl
from effppl import distributions as dist
from effppl.handlers import infer_config, log_density


def _enumerate_z(site):
    return {"enumerate": "parallel"} if site["name"] == "z" else {}


def _mixture(ppl):
    def model(y):
        w = ppl.sample("w", dist.Dirichlet(jnp.ones(3)))
        locs = jnp.array([-1.0, 0.5, 2.0])
        with ppl.plate("n", y.shape[0]):
            z = ppl.sample("z", dist.Categorical(w))
            ppl.sample("y", dist.Normal(locs[z], 1.0), obs=y)
    return model


def test_marks_sites_as_numpyros_infer_config():
    y = jnp.array([-1.2, 0.3, 2.5, 1.9])
    params = {"w": jnp.array([0.2, 0.5, 0.3])}
    ours, _ = log_density(infer_config(_mixture(effppl), _enumerate_z), (y,), {}, params)
    theirs, _ = numpyro_enum_log_density(numpyro_enum(
        numpyro.handlers.infer_config(_mixture(numpyro), config_fn=_enumerate_z),
        first_available_dim=-2), (y,), {}, params)
    by_hand = dist.Dirichlet(jnp.ones(3)).log_prob(params["w"]) + logsumexp(
        jnp.log(params["w"]) + dist.Normal(jnp.array([-1.0, 0.5, 2.0]), 1.0).log_prob(y[:, None]),
        axis=-1).sum()
    np.testing.assert_allclose(ours, theirs, rtol=1e-12)
    np.testing.assert_allclose(ours, by_hand, rtol=1e-12)


def test_config_fn_sees_numpyros_site_fields():
    def seen_by(ppl):
        seen = []

        def config_fn(site):
            seen.append((site["type"], site["name"], site["is_observed"], type(site["fn"]),
                         dict(site["infer"]), [f.name for f in site["cond_indep_stack"]],
                         site["scale"], site["args"]))
            return {}
        ppl.handlers.seed(ppl.handlers.infer_config(_mixture(ppl), config_fn=config_fn),
                          rng_seed=0)(jnp.ones(2))
        return seen
    assert seen_by(effppl) == seen_by(numpyro)
    assert [name for _, name, *_ in seen_by(effppl)] == ["w", "z", "y"]


def test_marks_a_site_inside_a_plain_scan_and_as_a_context_manager():
    trans = jnp.array([[0.8, 0.2], [0.3, 0.7]])
    locs = jnp.array([-1.0, 1.5])
    ys = jnp.array([-0.7, 1.1, 1.8])

    def model(ys):
        def step(z_prev, y):
            z = effppl.sample("z", dist.Categorical(trans[z_prev]))
            effppl.sample("y", dist.Normal(locs[z], 1.0), obs=y)
            return z, None
        jax.lax.scan(step, 0, ys)

    def model_with_block(ys):
        with infer_config(config_fn=_enumerate_z):
            model(ys)

    alpha = jnp.log(trans[0]) + dist.Normal(locs, 1.0).log_prob(ys[0])  # forward algorithm
    for y in ys[1:]:
        alpha = logsumexp(alpha[:, None] + jnp.log(trans), axis=0) + \
            dist.Normal(locs, 1.0).log_prob(y)
    for configured in (infer_config(model, _enumerate_z), infer_config(config_fn=_enumerate_z)(
            model), model_with_block):
        lp, _ = log_density(configured, (ys,), {}, {})
        np.testing.assert_allclose(lp, logsumexp(alpha), rtol=1e-12)


def test_bad_config_fn_is_a_clear_error():
    with pytest.raises(TypeError, match="config_fn"):
        infer_config(_mixture(effppl), None)
    with pytest.raises(TypeError, match="callable model"):
        infer_config(3, _enumerate_z)
    with pytest.raises(effppl.SiteFunctionError, match="`y`"):  # needs a traced value
        log_density(infer_config(_mixture(effppl), lambda site: {
            "flag": bool(site["value"].sum() > 0)} if site["is_observed"] else {}),
            (jnp.ones(2),), {}, {"w": jnp.ones(3) / 3})
    with pytest.raises(effppl.SiteError, match="site `w`.*dict"):
        log_density(infer_config(_mixture(effppl), lambda site: None), (jnp.ones(2),), {},
                    {"w": jnp.ones(3) / 3})
