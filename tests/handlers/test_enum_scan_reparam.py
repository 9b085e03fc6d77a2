"""Handlers scoped inside the body of an enumerated `lax.scan`: a site reparametrized there (a
per-step random effect, as in NumPyro's capture-recapture example) keeps its reparametrization
when the scan's discrete sites are summed out. Oracle: NumPyro's potential energy of
the same model (its `scan` with enumeration), which equals a hand-marginalised model (checked
here too)."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.handlers
import pytest
from jax.scipy.special import logsumexp
from numpyro.contrib.control_flow import scan as numpyro_scan
from numpyro.contrib.funsor import enum as funsor_enum
from numpyro.infer.reparam import LocScaleReparam as NumPyroLocScale
from numpyro.infer.util import potential_energy as numpyro_potential

import effppl
import effppl.handlers
import effppl.infer.autoguide
from effppl import distributions as dist
from effppl.handlers import potential_energy
from effppl.infer.reparam import LocScaleReparam

Y = np.array([[0.3, 1.0, 2.0], [0.1, -1.0, 0.5], [1.2, 0.4, -0.3]])


def make(ppl, handlers, scan, loc_scale):
    """The model in `ppl`'s API: `x_t = m + s * x_decentered_t` (reparametrized inside the
    body), three independent binary chains `z` whose switching depends on `x_t`."""
    def model(y):
        m = ppl.sample("m", dist.Normal(0.0, 1.0))
        s = ppl.sample("s", dist.Uniform(0.0, 10.0))

        def step(z_prev, y_t):
            with handlers.reparam(config={"x": loc_scale(0)}):
                x = ppl.sample("x", dist.Normal(m, s))
            with ppl.plate("chains", 3, dim=-1):
                p = jax.nn.sigmoid(x) * z_prev + 0.1 * (1 - z_prev)
                z = ppl.sample("z", dist.Bernoulli(p), infer={"enumerate": "parallel"})
                ppl.sample("y", dist.Normal(z * 1.0, 1.0), obs=y_t)
            return z, None

        scan(step, jnp.ones(3, dtype=int), y)
    return model


def hand_marginalised(y):
    m = numpyro.sample("m", dist.Normal(0.0, 1.0))
    s = numpyro.sample("s", dist.Uniform(0.0, 10.0))

    def step(alpha, y_t):  # alpha[chain, z_prev]
        with numpyro.handlers.reparam(config={"x": NumPyroLocScale(0)}):
            x = numpyro.sample("x", dist.Normal(m, s))
        p1 = jax.nn.sigmoid(x) * jnp.arange(2) + 0.1 * (1 - jnp.arange(2))  # P(z=1 | z_prev)
        log_trans = jnp.log(jnp.stack([1 - p1, p1], -1))
        emit = dist.Normal(jnp.arange(2.0), 1.0).log_prob(y_t[:, None])
        return logsumexp(alpha[:, :, None] + log_trans, axis=1) + emit, None

    alpha, _ = numpyro_scan(step, jnp.log(jnp.array([[0.0, 1.0]] * 3)), y)
    numpyro.factor("marginal", logsumexp(alpha, -1).sum())


def test_reparam_inside_enumerated_scan_matches_numpyro_and_hand_marginalised():
    y = jnp.asarray(Y)
    ours = make(effppl, effppl.handlers, jax.lax.scan, LocScaleReparam)
    theirs = make(numpyro, numpyro.handlers, numpyro_scan, NumPyroLocScale)
    potential = jax.jit(jax.value_and_grad(lambda u: potential_energy(ours, (y,), {}, u)))
    reference = jax.jit(jax.value_and_grad(
        lambda u: numpyro_potential(funsor_enum(theirs, first_available_dim=-2), (y,), {}, u,
                                   enum=True)))
    hand = jax.jit(lambda u: numpyro_potential(hand_marginalised, (y,), {}, u))
    rng = np.random.default_rng(0)
    for _ in range(3):  # unconstrained points: s = 10 * sigmoid(u["s"])
        u = {"m": jnp.asarray(rng.normal()), "s": jnp.asarray(rng.normal()),
             "x_decentered": jnp.asarray(rng.normal(size=3) * 1.5)}
        value, grad = potential(u)
        ref_value, ref_grad = reference(u)
        np.testing.assert_allclose(value, ref_value, rtol=1e-10)
        np.testing.assert_allclose(value, hand(u), rtol=1e-10)
        for name in u:
            np.testing.assert_allclose(grad[name], ref_grad[name], rtol=1e-8, atol=1e-10)


def test_reparam_of_a_site_depending_on_the_enumerated_one_is_an_error_naming_it():
    def model(y):
        def step(z_prev, y_t):
            z = effppl.sample("z", dist.Bernoulli(0.2 + 0.6 * z_prev),
                              infer={"enumerate": "parallel"})
            with effppl.handlers.reparam(config={"w": LocScaleReparam(0)}):
                w = effppl.sample("w", dist.Normal(z * 1.0, 1.0))
            effppl.sample("y", dist.Normal(w, 1.0), obs=y_t)
            return z, None

        jax.lax.scan(step, 0, y)

    u = {"w_decentered": jnp.zeros(3)}
    with pytest.raises(effppl.SiteError, match=r"site `w`.*enumerated site `z`.*reparam"):
        potential_energy(model, (jnp.asarray(Y[:, 0]),), {}, u)


def test_reparam_around_the_model_of_a_site_depending_on_the_enumerated_one_is_an_error():
    # `reparam` wrapping the model (not a `with` block in the body) marks the site too; the
    # forward algorithm's table would read the site's own density (it gave 43.69 where the
    # hand-marginalised density is 9.01), so it must be loud
    locs = jnp.array([0.0, 3.0])
    trans = jnp.array([[0.8, 0.2], [0.3, 0.7]])

    def model(y):
        def step(z_prev, y_t):
            z = effppl.sample("z", dist.Categorical(trans[z_prev]),
                              infer={"enumerate": "parallel"})
            x = effppl.sample("x", dist.Normal(locs[z], 1.0))
            effppl.sample("y", dist.Normal(x, 0.5), obs=y_t)
            return z, None

        jax.lax.scan(step, 0, y)

    y = jnp.array([0.2, 2.8, 3.1, -0.1])
    reparametrized = effppl.handlers.reparam(model, config={"x": LocScaleReparam(0)})
    with pytest.raises(effppl.SiteError, match=r"site `x`.*enumerated site `z`.*reparam"):
        potential_energy(reparametrized, (y,), {}, {"x_decentered": jnp.zeros(4)})
    # the same refusal from TraceEnum_ELBO (its own wrapper of the model used to hide the scan,
    # giving an error about an `enum` the user never wrote)
    guide = effppl.infer.autoguide.AutoNormal(effppl.handlers.block(reparametrized, hide=["z"]))
    params = {"x_decentered_auto_loc": jnp.zeros(4), "x_decentered_auto_scale": jnp.ones(4)}
    with pytest.raises(effppl.SiteError, match=r"site `x`.*enumerated site `z`.*reparam"):
        effppl.infer.TraceEnum_ELBO().loss(jax.random.PRNGKey(0), params, reparametrized, guide,
                                           y)
