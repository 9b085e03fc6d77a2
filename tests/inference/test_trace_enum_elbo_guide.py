"""TraceEnum_ELBO with sites enumerated in the guide, against NumPyro's TraceEnum_ELBO on the same
model, guide, params and key (loss and gradient), and against sums by hand: a guide site outside
plates, one per element of a plate, one combined with the model's own enumeration, continuous
guide sites drawn once per enumerated value, and an SVI fit to an exact posterior."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import optax
import pytest
from numpyro.distributions import constraints

import effppl
from effppl import distributions as dist
from effppl.infer import SVI, ELBOError, TraceEnum_ELBO

Y = np.array([-2.1, -1.5, 0.3, 2.0, 2.5, 1.7, -0.4])
N = len(Y)
RNG = np.random.default_rng(0)
PARAMS = {"locs": np.array([-1.0, 1.5]), "wl": np.array([0.4, 0.6]),
          "p": RNG.dirichlet(np.ones(2), size=N), "m": RNG.normal(size=(2, N)),
          "g": np.array([0.35, 0.65]), "mg": np.array([-0.5, 0.8]), "sg": np.array([0.6, 0.9])}


def _value_and_grad(elbo, params, model, guide, *args, seed=0):
    return jax.jit(jax.value_and_grad(
        lambda p: elbo.loss(jax.random.PRNGKey(seed), p, model, guide, *args)))(params)


def _assert_same(ours, theirs, rtol=1e-10):
    np.testing.assert_allclose(ours[0], theirs[0], rtol=rtol)
    for name in theirs[1]:
        np.testing.assert_allclose(ours[1][name], theirs[1][name], rtol=rtol, atol=1e-12)


def _compare(pair, params, seeds=(0, 1), **options):
    for seed in seeds:
        ours = _value_and_grad(TraceEnum_ELBO(**options), params, *pair(effppl), Y, seed=seed)
        theirs = _value_and_grad(numpyro.infer.TraceEnum_ELBO(**options), params,
                                 *pair(numpyro), Y, seed=seed)
        _assert_same(ours, theirs)
    return ours


def _local(ppl, continuous=False):
    """Each point's component enumerated in the guide, inside the plate."""
    def model(y):
        locs = ppl.param("locs", jnp.array([-1.0, 1.0]))
        w = ppl.sample("w", dist.Dirichlet(jnp.ones(2)))
        with ppl.plate("n", N):
            z = ppl.sample("z", dist.Categorical(w))
            if continuous:
                x = ppl.sample("x", dist.Normal(locs[z], 1.0))
                ppl.sample("y", dist.Normal(x, 0.5), obs=y)
            else:
                ppl.sample("y", dist.Normal(locs[z], 1.0), obs=y)

    def guide(y):
        wl = ppl.param("wl", jnp.ones(2) / 2, constraint=constraints.simplex)
        ppl.sample("w", dist.Delta(wl, event_dim=1))
        p = ppl.param("p", jnp.ones((N, 2)) / 2, constraint=constraints.simplex)
        with ppl.plate("n", N):
            z = ppl.sample("z", dist.Categorical(p), infer={"enumerate": "parallel"})
            if continuous:
                m = ppl.param("m", jnp.zeros((2, N)))
                ppl.sample("x", dist.Normal(jnp.where(z == 1, m[1], m[0]), 0.7))
    return model, guide


def _global(ppl, continuous=False):
    """One global component enumerated in the guide, outside every plate; with `continuous`, a
    global location drawn from a normal whose parameters it selects."""
    def model(y):
        locs = ppl.param("locs", jnp.array([-1.0, 1.0]))
        z = ppl.sample("z", dist.Categorical(jnp.array([0.3, 0.7])))
        loc = ppl.sample("x", dist.Normal(locs[z], 1.0)) if continuous else locs[z]
        with ppl.plate("n", N):
            ppl.sample("y", dist.Normal(loc, 1.0), obs=y)

    def guide(y):
        g = ppl.param("g", jnp.ones(2) / 2, constraint=constraints.simplex)
        z = ppl.sample("z", dist.Categorical(g), infer={"enumerate": "parallel"})
        if continuous:
            mg = ppl.param("mg", jnp.zeros(2))
            sg = ppl.param("sg", jnp.ones(2), constraint=constraints.positive)
            ppl.sample("x", dist.Normal(mg[z], sg[z]))
    return model, guide


def test_global_guide_site_is_the_exact_expectation_and_numpyros():
    ours = _compare(_global, {k: PARAMS[k] for k in ("locs", "g")})
    # by hand: sum_z q(z) [log p(z) + sum_n log N(y_n | locs_z, 1) - log q(z)]
    q, locs = PARAMS["g"], PARAMS["locs"]
    terms = (jnp.log(jnp.array([0.3, 0.7])) - jnp.log(q)
             + dist.Normal(locs[:, None], 1.0).log_prob(Y).sum(-1))
    np.testing.assert_allclose(ours[0], -jnp.sum(q * terms), rtol=1e-12)


def test_guide_site_in_a_plate_is_enumerated_per_element():
    params = {k: PARAMS[k] for k in ("locs", "wl", "p")}
    ours = _compare(_local, params)
    # by hand: sum_n sum_k q_nk [log w_k + log N(y_n | locs_k, 1) - log q_nk] + log p(w)
    q, w, locs = PARAMS["p"], PARAMS["wl"], PARAMS["locs"]
    per = jnp.log(w) + dist.Normal(locs, 1.0).log_prob(Y[:, None]) - jnp.log(q)
    exact = dist.Dirichlet(jnp.ones(2)).log_prob(w) + jnp.sum(q * per)
    np.testing.assert_allclose(ours[0], -exact, rtol=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("pair", [_local, _global], ids=["in_plate", "global"])
def test_continuous_guide_site_below_an_enumerated_one_is_drawn_per_value(pair):
    """The guide's reparameterised site is drawn once per value of the enumerated site (the key
    split at the enumerated site, as NumPyro's `seed` inside its `enum`): loss and pathwise
    gradient equal NumPyro's."""
    _compare(lambda ppl: pair(ppl, continuous=True), PARAMS, seeds=(0, 1, 2))


def _combined(ppl, where="global"):
    """The guide enumerates a global site `z`; the model enumerates each point's `c` in the
    plate, whose distribution depends on `z` (model enumeration more local than the guide's)."""
    def model(y):
        locs = ppl.param("locs", jnp.array([-1.0, 1.0]))
        z = ppl.sample("z", dist.Bernoulli(0.4))
        with ppl.plate("n", N):
            probs = jnp.where(z[..., None] == 1, jnp.array([0.8, 0.2]), jnp.array([0.3, 0.7]))
            c = ppl.sample("c", dist.Categorical(probs), infer={"enumerate": "parallel"})
            ppl.sample("y", dist.Normal(locs[c] + z, 1.0), obs=y)

    def guide(y):
        g = ppl.param("g", jnp.array(0.5), constraint=constraints.unit_interval)
        ppl.sample("z", dist.Bernoulli(g), infer={"enumerate": "parallel"})
    return model, guide


def test_guide_enumeration_combined_with_the_models():
    params = {"locs": PARAMS["locs"], "g": np.array(0.35)}
    ours = _compare(_combined, params, seeds=(0,))
    q, locs = 0.35, PARAMS["locs"]
    total = 0.0
    for z, qz in ((0, 1 - q), (1, q)):
        probs = jnp.array([0.8, 0.2]) if z else jnp.array([0.3, 0.7])
        lik = jax.nn.logsumexp(jnp.log(probs) + dist.Normal(locs + z, 1.0).log_prob(Y[:, None]),
                               axis=-1).sum()
        total += qz * (jnp.log(jnp.where(z, 0.4, 0.6)) + lik - jnp.log(qz))
    np.testing.assert_allclose(ours[0], -total, rtol=1e-12)


def test_model_enumeration_more_global_than_the_guides_is_an_error_as_in_numpyro():
    """The guide enumerates each point's `z` in the plate, the model a global `c` that every
    point's likelihood also depends on: NumPyro raises, and so does effppl, naming the sites."""
    def pair(ppl):
        def model(y):
            c = ppl.sample("c", dist.Bernoulli(0.5), infer={"enumerate": "parallel"})
            with ppl.plate("n", N):
                z = ppl.sample("z", dist.Bernoulli(0.3))
                ppl.sample("y", dist.Normal(z + 2.0 * c, 1.0), obs=y)

        def guide(y):
            with ppl.plate("n", N):
                ppl.sample("z", dist.Bernoulli(0.5), infer={"enumerate": "parallel"})
        return model, guide

    with pytest.raises(ValueError, match="no more global than guide enumeration"):
        numpyro.infer.TraceEnum_ELBO().loss(jax.random.PRNGKey(0), {}, *pair(numpyro), Y)
    with pytest.raises(ELBOError, match="no more global than guide enumeration.*plate `n`.*`z`"):
        TraceEnum_ELBO().loss(jax.random.PRNGKey(0), {}, *pair(effppl), Y)


@pytest.mark.slow
def test_particles_and_max_plate_nesting_with_guide_enumeration():
    """Several particles (vectorised or not) and a given `max_plate_nesting`: NumPyro's loss
    (NumPyro's own vectorised particles fail on a guide enumerating sites: its oracle runs them
    in sequence)."""
    params = {k: jnp.asarray(v) for k, v in PARAMS.items()}
    pair = lambda ppl: _local(ppl, continuous=True)  # noqa: E731
    theirs = numpyro.infer.TraceEnum_ELBO(num_particles=3, vectorize_particles=False).loss(
        jax.random.PRNGKey(5), params, *pair(numpyro), Y)
    for vectorize in (True, False):
        ours = TraceEnum_ELBO(num_particles=3, vectorize_particles=vectorize).loss(
            jax.random.PRNGKey(5), params, *pair(effppl), Y)
        np.testing.assert_allclose(ours, theirs, rtol=1e-10)
    _compare(pair, params, seeds=(0,), max_plate_nesting=2)


def test_enumerated_guide_site_in_a_scan_is_an_error():
    def model(y):
        def step(c, y_t):
            z = effppl.sample("z", dist.Bernoulli(0.5))
            effppl.sample("y", dist.Normal(z, 1.0), obs=y_t)
            return c, None
        jax.lax.scan(step, 0, y)

    def guide(y):
        def step(c, y_t):
            effppl.sample("z", dist.Bernoulli(0.5), infer={"enumerate": "parallel"})
            return c, None
        jax.lax.scan(step, 0, y)

    with pytest.raises(ELBOError, match="guide site `z` is marked for enumeration inside a loop"):
        TraceEnum_ELBO().loss(jax.random.PRNGKey(0), {}, model, guide, jnp.asarray(Y))


def test_svi_recovers_the_exact_responsibilities():
    """A 2-component mixture with known weights and locations: the guide enumerates each
    point's assignment with free probabilities; the ELBO is exact (no sampling), maximised by
    the posterior responsibilities, where it equals log p(y)."""
    w, locs = jnp.array([0.3, 0.7]), jnp.array([-1.5, 2.0])

    def model(y):
        with effppl.plate("n", N):
            z = effppl.sample("z", dist.Categorical(w))
            effppl.sample("y", dist.Normal(locs[z], 1.0), obs=y)

    def guide(y):
        p = effppl.param("p", jnp.ones((N, 2)) / 2, constraint=constraints.simplex)
        with effppl.plate("n", N):
            effppl.sample("z", dist.Categorical(p), infer={"enumerate": "parallel"})

    result = SVI(model, guide, optax.adam(0.1), TraceEnum_ELBO()).run(
        jax.random.PRNGKey(0), 3000, Y, progress_bar=False)
    joint = jnp.log(w) + dist.Normal(locs, 1.0).log_prob(Y[:, None])
    responsibilities = jnp.exp(joint - jax.nn.logsumexp(joint, axis=-1, keepdims=True))
    np.testing.assert_allclose(result.params["p"], responsibilities, atol=1e-3)
    log_evidence = jax.nn.logsumexp(joint, axis=-1).sum()
    assert -log_evidence <= result.losses[-1] < -log_evidence + 1e-4  # the gap: KL(q || post)


def _subsampled(ppl, observed_by_index=True):
    def model(y):
        locs = ppl.param("locs", jnp.array([-1.0, 1.0]))
        with ppl.plate("n", N, subsample_size=3) as idx:
            z = ppl.sample("z", dist.Bernoulli(0.3))
            obs = jnp.asarray(y)[idx] if observed_by_index else jnp.asarray(y)[:3]
            ppl.sample("y", dist.Normal(locs[z], 1.0), obs=obs)

    def guide(y):
        g = ppl.param("g", 0.5 * jnp.ones(N), constraint=constraints.unit_interval)
        with ppl.plate("n", N, subsample_size=3) as idx:
            ppl.sample("z", dist.Bernoulli(g[idx]), infer={"enumerate": "parallel"})
        return idx
    return model, guide


@pytest.mark.slow
def test_subsampled_plate_with_guide_enumeration():
    """The guide enumerates each point's `z` in a subsampled plate: both sides' terms carry the
    scale N / n, and the model's plate takes the guide's indices (as effppl's other ELBOs and
    NumPyro's replay them; NumPyro's TraceEnum_ELBO does not record the guide's plate, so its
    model draws its own indices: it is the oracle where the model does not read them)."""
    params = {"locs": PARAMS["locs"], "g": np.linspace(0.2, 0.8, N)}
    _compare(lambda ppl: _subsampled(ppl, observed_by_index=False), params, seeds=(0, 1))
    for seed in (0, 1):
        key = jax.random.PRNGKey(seed)
        model, guide = _subsampled(effppl)
        ours = TraceEnum_ELBO().loss(key, params, model, guide, Y)
        idx = effppl.handlers.seed(effppl.handlers.substitute(guide, data=params),
                                   jax.random.split(key)[1])(Y)
        q1 = params["g"][idx]
        lp = (jnp.log(jnp.array([0.7, 0.3]))[:, None]
              + dist.Normal(params["locs"][:, None], 1.0).log_prob(Y[idx]))  # (z, i)
        q = jnp.stack([1 - q1, q1])
        np.testing.assert_allclose(ours, -N / 3 * jnp.sum(q * (lp - jnp.log(q))), rtol=1e-12)


def test_drawn_discrete_guide_site_below_an_enumerated_one_is_an_error():
    def model(y):
        z = effppl.sample("z", dist.Bernoulli(0.3))
        u = effppl.sample("u", dist.Bernoulli(0.5 + 0.2 * z))
        effppl.sample("y", dist.Normal(z + u, 1.0), obs=y)

    def guide(y):
        z = effppl.sample("z", dist.Bernoulli(0.5), infer={"enumerate": "parallel"})
        effppl.sample("u", dist.Bernoulli(0.4 + 0.2 * z))

    with pytest.raises(ELBOError, match="guide site `u` is drawn.*depends on the guide's "
                                        "enumerated site.*`z`"):
        TraceEnum_ELBO().loss(jax.random.PRNGKey(0), {}, model, guide, 0.5)


def test_drawn_discrete_guide_site_in_a_scan_beside_guide_enumeration_is_an_error():
    """Provenance is by site, not by iteration, and there is no `Trace_ELBO` surrogate to fall
    back on with guide enumeration: an error naming the site (it was a `SiteError` about the
    stacked value's shape)."""
    def model(y):
        z = effppl.sample("z", dist.Bernoulli(0.3))

        def step(c, y_t):
            u = effppl.sample("u", dist.Bernoulli(0.4))
            effppl.sample("y", dist.Normal(z + u, 1.0), obs=y_t)
            return c, None
        jax.lax.scan(step, 0, y)

    def guide(y):
        effppl.sample("z", dist.Bernoulli(0.5), infer={"enumerate": "parallel"})

        def step(c, y_t):
            effppl.sample("u", dist.Bernoulli(0.6))
            return c, None
        jax.lax.scan(step, 0, y)

    with pytest.raises(ELBOError, match="guide site `u` is drawn from a Bernoulli.*inside a "
                                        "loop of the guide"):
        TraceEnum_ELBO().loss(jax.random.PRNGKey(0), {}, model, guide, jnp.asarray(Y))


def _chain(ppl):
    """`z2` enumerated in the guide below `z1`, also enumerated there: `q(z2 | z1)`."""
    def model(y):
        z1 = ppl.sample("z1", dist.Bernoulli(0.4))
        z2 = ppl.sample("z2", dist.Bernoulli(jnp.where(z1 == 1, 0.8, 0.3)))
        with ppl.plate("n", N):
            ppl.sample("y", dist.Normal(z2 * 2.0 - 1.0, 1.0), obs=y)

    def guide(y):
        a = ppl.param("a", jnp.array(0.5), constraint=constraints.unit_interval)
        b = ppl.param("b", jnp.array([0.3, 0.6]), constraint=constraints.unit_interval)
        z1 = ppl.sample("z1", dist.Bernoulli(a), infer={"enumerate": "parallel"})
        ppl.sample("z2", dist.Bernoulli(b[z1]), infer={"enumerate": "parallel"})
    return model, guide


@pytest.mark.parametrize("scaled", [False, True])
def test_chain_of_guide_enumerated_sites(scaled):
    """A term holding `z2` only (the likelihood) is weighted by q's marginal of `z2`; under
    `scale`, every term carries the factor. NumPyro's numbers, and the sum by hand."""
    def pair(ppl):
        model, guide = _chain(ppl)
        if scaled:
            return ppl.handlers.scale(model, 2.0), ppl.handlers.scale(guide, 2.0)
        return model, guide

    params = {"a": np.array(0.35), "b": np.array([0.2, 0.7])}
    ours = _compare(pair, params, seeds=(0,))
    exact = 0.0
    for z1 in (0, 1):
        for z2 in (0, 1):
            q1 = 0.35 if z1 else 0.65
            q2 = params["b"][z1] if z2 else 1 - params["b"][z1]
            p1 = 0.4 if z1 else 0.6
            p2 = (0.8 if z1 else 0.3) if z2 else (0.2 if z1 else 0.7)
            lik = dist.Normal(z2 * 2.0 - 1.0, 1.0).log_prob(Y).sum()
            exact += q1 * q2 * (jnp.log(p1 * p2) + lik - jnp.log(q1 * q2))
    np.testing.assert_allclose(ours[0], -(2.0 if scaled else 1.0) * exact, rtol=1e-12)


def test_drawn_discrete_guide_site_beside_an_enumerated_one():
    """A discrete guide site that is drawn (not enumerated) and does not depend on an enumerated
    one: NumPyro's loss and Rao-Blackwellised gradient."""
    def pair(ppl):
        def model(y):
            z = ppl.sample("z", dist.Bernoulli(0.4))
            u = ppl.sample("u", dist.Bernoulli(0.5))
            with ppl.plate("n", N):
                ppl.sample("y", dist.Normal(z * 2.0 - u, 1.0), obs=y)

        def guide(y):
            a = ppl.param("a", jnp.array(0.5), constraint=constraints.unit_interval)
            ppl.sample("z", dist.Bernoulli(a), infer={"enumerate": "parallel"})
            ppl.sample("u", dist.Bernoulli(a))
        return model, guide

    _compare(pair, {"a": jnp.array(0.35)}, seeds=(0, 1, 2))


@pytest.mark.slow
@pytest.mark.parametrize("drawn_v", [False, True])
def test_drawn_guide_sites_in_a_plate_have_numpyros_rao_blackwellised_gradient(drawn_v):
    """Drawn discrete guide sites in a plate beside an enumerated global one (and a plated
    enumerated one, or a second drawn one): NumPyro's Rao-Blackwellised gradient."""
    def pair(ppl):
        def model(y):
            z = ppl.sample("z", dist.Bernoulli(0.4))
            with ppl.plate("n", N):
                u = ppl.sample("u", dist.Bernoulli(0.3))
                v = ppl.sample("v", dist.Bernoulli(0.6))
                ppl.sample("y", dist.Normal(z * 2.0 - u + v, 1.0), obs=y)

        def guide(y):
            a = ppl.param("a", jnp.array(0.5), constraint=constraints.unit_interval)
            pu = ppl.param("pu", jnp.ones(N) / 2, constraint=constraints.unit_interval)
            pv = ppl.param("pv", jnp.ones(N) / 2, constraint=constraints.unit_interval)
            ppl.sample("z", dist.Bernoulli(a), infer={"enumerate": "parallel"})
            with ppl.plate("n", N):
                ppl.sample("u", dist.Bernoulli(pu))
                ppl.sample("v", dist.Bernoulli(pv),
                           infer={} if drawn_v else {"enumerate": "parallel"})
        return model, guide

    rng = np.random.default_rng(1)
    _compare(pair, {"a": jnp.array(0.35), "pu": jnp.array(rng.uniform(0.2, 0.8, N)),
                    "pv": jnp.array(rng.uniform(0.2, 0.8, N))})


def test_drawn_guide_site_beside_guide_and_model_enumeration():
    """A drawn guide site, an enumerated guide site and a model site enumerated in a plate:
    NumPyro's loss and Rao-Blackwellised gradient."""
    def pair(ppl):
        def model(y):
            z = ppl.sample("z", dist.Bernoulli(0.4))
            u = ppl.sample("u", dist.Categorical(jnp.array([0.2, 0.3, 0.5])))
            with ppl.plate("n", N):
                x = ppl.sample("x", dist.Bernoulli(0.6), infer={"enumerate": "parallel"})
                ppl.sample("y", dist.Normal(z * 2.0 - u + x, 1.0), obs=y)

        def guide(y):
            a = ppl.param("a", jnp.array(0.5), constraint=constraints.unit_interval)
            b = ppl.param("b", jnp.ones(3) / 3, constraint=constraints.simplex)
            ppl.sample("z", dist.Bernoulli(a), infer={"enumerate": "parallel"})
            ppl.sample("u", dist.Categorical(b))
        return model, guide

    _compare(pair, {"a": jnp.array(0.35), "b": jnp.array([0.2, 0.5, 0.3])})


def test_masked_guide_enumerated_site_weights_by_its_unmasked_probability():
    """Under `mask`, an enumerated site's measure q(z) is not masked (NumPyro's log measure);
    its `-log q` is. (NumPyro's own TraceEnum_ELBO fails on a `mask` in such a guide: the
    oracle is the sum by hand.)"""
    mask = np.array([True, False, True, True, False, True, True])
    model, guide = _local(effppl)

    def masked_guide(y):
        with effppl.handlers.mask(mask=jnp.asarray(mask)):
            guide(y)

    params = {k: PARAMS[k] for k in ("locs", "wl", "p")}
    ours = TraceEnum_ELBO().loss(jax.random.PRNGKey(0), params, model, masked_guide, Y)
    q, w, locs = PARAMS["p"], PARAMS["wl"], PARAMS["locs"]
    per = (jnp.log(w) + dist.Normal(locs, 1.0).log_prob(Y[:, None])
           - jnp.where(mask[:, None], jnp.log(q), 0.0))
    exact = dist.Dirichlet(jnp.ones(2)).log_prob(w) + jnp.sum(q * per)
    np.testing.assert_allclose(ours, -exact, rtol=1e-12)
