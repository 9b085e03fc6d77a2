"""`HMCECS`: energy-conserving subsampling HMC, against analytic posteriors and hand-written
Taylor expansions and estimators (oracles written apart from `effppl/infer/mcmc/_ecs.py`)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import random

import effppl
from effppl import distributions as dist
from effppl.infer import HMC, HMCECS, MCMC, NUTS, ECSError, KernelSettingsError
from effppl.infer.mcmc._ecs import block_update, estimate

N, M = 2000, 100


def _data(key=1, n=N):
    return 0.7 + random.normal(random.key(key), (n,))


def normal_model(data, subsample_size=M):
    mu = effppl.sample("mu", dist.Normal(0.0, 1.0))
    with effppl.plate("N", data.shape[0], subsample_size=subsample_size):
        batch = effppl.subsample(data, event_dim=0)
        effppl.sample("obs", dist.Normal(mu, 1.0), obs=batch)


def _posterior(data):
    """The conjugate posterior of `mu` (prior N(0, 1), unit noise): mean and sd."""
    precision = 1.0 + data.shape[0]
    return float(data.sum() / precision), float(1 / np.sqrt(precision))


@pytest.mark.parametrize("kernel_cls, degree", [(NUTS, 2), (HMC, 1)])
def test_taylor_proxy_posterior_matches_analytic(kernel_cls, degree):
    data = _data()
    mean, sd = _posterior(data)
    proxy = HMCECS.taylor_proxy({"mu": jnp.array(mean + 0.02)}, degree=degree)
    kernel = HMCECS(kernel_cls(normal_model), num_blocks=5, proxy=proxy)
    mcmc = MCMC(kernel, num_warmup=300, num_samples=600, progress_bar=False)
    mcmc.run(random.key(0), data)
    draws = mcmc.get_samples()
    assert sorted(draws) == ["mu"]  # the indices' carrier is hidden
    assert abs(float(draws["mu"].mean()) - mean) < 0.2 * sd + 3 * sd / np.sqrt(100)
    assert 0.7 * sd < float(draws["mu"].std()) < 1.4 * sd


def test_naive_subsampling_near_the_posterior():
    data = _data()
    mean, sd = _posterior(data)
    mcmc = MCMC(HMCECS(NUTS(normal_model), num_blocks=1), num_warmup=300, num_samples=600,
                progress_bar=False)
    mcmc.run(random.key(2), data)
    # the naive estimate's noise widens the posterior: its mean is within a few of its sds
    assert abs(float(mcmc.get_samples()["mu"].mean()) - mean) < 8 * sd


def test_taylor_proxy_matches_hand_written_expansion():
    """NumPyro's test: the proxy is the degree-2 Taylor expansion of each element's log
    likelihood and of their sum, here of a 3-d mean in a plate at dim -2."""
    ref = jnp.array([0.1, 0.5, -0.2])
    sigma, n, m = 0.1, 60, 7
    data = ref + random.normal(random.key(3), (n, 3))

    def model(data):
        mean = effppl.sample("mean", dist.Normal(ref, 1.0).to_event(1))
        with effppl.plate("data", n, subsample_size=m, dim=-2) as idx:
            effppl.sample("obs", dist.Normal(mean, sigma), obs=data[idx])

    def log_lik(params):  # [n]: each row's log likelihood, by hand
        return (-0.5 * ((data - params) / sigma) ** 2 - jnp.log(sigma)
                - 0.5 * jnp.log(2 * jnp.pi)).sum(-1)

    value, jac, hess = log_lik(ref), jax.jacobian(log_lik)(ref), jax.hessian(log_lik)(ref)
    tr = effppl.handlers.trace(effppl.handlers.seed(model, 0)).get_trace(data)
    proxy_fn, gibbs_init, gibbs_update = HMCECS.taylor_proxy({"mean": ref})(
        tr, {"data": (n, m)}, model, (data,), {})
    idx = random.randint(random.key(4), (m,), 0, n)
    state = gibbs_init(None, {"data": idx})
    params = ref + jnp.array([0.05, -0.1, 0.2])
    total, sub = proxy_fn({"mean": params}, ["data"], state)
    d = params - ref
    np.testing.assert_allclose(sub["data"], value[idx] + jac[idx] @ d
                               + 0.5 * jnp.einsum("i,nij,j->n", d, hess[idx], d), rtol=1e-5)
    np.testing.assert_allclose(total["data"], value.sum() + jac.sum(0) @ d
                               + 0.5 * d @ hess.sum(0) @ d, rtol=1e-5)
    new, new_state = gibbs_update(random.key(5), {"data": idx}, state)
    np.testing.assert_allclose(new_state.ref_subsample_log_liks["data"], value[new["data"]],
                               rtol=1e-5)


def test_estimate_is_exact_with_an_exact_proxy():
    """The difference estimator: `sum q + N mean(l - q) - N^2 / (2 m) var(l - q)`, by hand; with
    `q = l` it is the proxy's sum."""
    lik = jnp.array([-1.0, -2.0, -0.5, -3.0])
    q = jnp.array([-1.1, -1.8, -0.5, -2.7])
    n = 50
    diff = np.asarray(lik - q)
    expected = 10.0 + n * diff.mean() - n ** 2 / 4 / 2 * diff.var()
    np.testing.assert_allclose(estimate(lik, 10.0, q, n), expected, rtol=1e-6)
    np.testing.assert_allclose(estimate(lik, -7.0, lik, n), -7.0)


def test_block_update_changes_one_block():
    idx = jnp.arange(10, dtype=jnp.int32)
    changed = set()
    for k in range(20):
        new = np.asarray(block_update(random.key(k), idx, 1000, 5))
        diff = np.flatnonzero(new != np.arange(10))
        assert diff.size == 0 or diff.min() // 2 == diff.max() // 2  # one block of 2
        assert new.min() >= 0 and new.max() < 1000
        changed.update(diff // 2)
    assert changed == set(range(5))


def test_estimated_potential_close_to_full_potential():
    """NumPyro's `test_estimate_likelihood`: the recorded (estimated) potential energy is close
    to the full data's at the draws."""
    data = _data(n=1000)
    mean, _ = _posterior(data)
    kernel = HMCECS(NUTS(normal_model), num_blocks=10,
                    proxy=HMCECS.taylor_proxy({"mu": jnp.array(mean)}))
    mcmc = MCMC(kernel, num_warmup=200, num_samples=200, progress_bar=False)
    mcmc.run(random.key(0), data, 50, extra_fields=["hmc_state.potential_energy"])
    pe = mcmc.get_extra_fields()["hmc_state.potential_energy"]
    mu = mcmc.get_samples()["mu"]
    full = -(dist.Normal(0.0, 1.0).log_prob(mu)
             + dist.Normal(mu[:, None], 1.0).log_prob(data).sum(-1))
    assert float(jnp.var(jnp.exp(full - pe))) < 1.0
    np.testing.assert_allclose(pe, full, atol=1.0)


def test_errors():
    def no_subsample(data):
        mu = effppl.sample("mu", dist.Normal(0.0, 1.0))
        with effppl.plate("N", data.shape[0]):
            effppl.sample("obs", dist.Normal(mu, 1.0), obs=data)

    data = _data(n=300)
    with pytest.raises(ECSError, match="Cannot detect any subsample"):
        MCMC(HMCECS(NUTS(no_subsample)), num_warmup=2, num_samples=2,
             progress_bar=False).run(random.key(0), data)

    def discrete(data):
        x = effppl.sample("x", dist.Bernoulli(0.5), infer={"enumerate": "parallel"})
        with effppl.plate("N", data.shape[0], subsample_size=10):
            effppl.sample("obs", dist.Normal(x, 1.0), obs=effppl.subsample(data, event_dim=0))

    with pytest.raises(RuntimeError, match="discrete latent"):
        MCMC(HMCECS(NUTS(discrete), proxy=HMCECS.taylor_proxy({})), num_warmup=2,
             num_samples=2, progress_bar=False).run(random.key(0), data)
    with pytest.raises(ECSError, match=r"lacks the latent site\(s\) \['mu'\]"):
        MCMC(HMCECS(NUTS(normal_model), proxy=HMCECS.taylor_proxy({})), num_warmup=2,
             num_samples=2, progress_bar=False).run(random.key(0), data, 10)
    with pytest.raises(KernelSettingsError, match="num_blocks"):
        HMCECS(NUTS(normal_model), num_blocks=0)
    with pytest.raises(KernelSettingsError, match="proxy"):
        HMCECS(NUTS(normal_model), proxy="taylor")
    with pytest.raises(ValueError, match="degree 1 or 2"):
        HMCECS.taylor_proxy({"mu": 0.0}, degree=3)


def test_enumerated_site_with_naive_subsampling():
    """An enumerated label beside a subsampled plate (NumPyro's smoke test): the label picks
    the noise scale (1 or 3); the data's scale is 1, so `loc` is near the data's mean, 1."""
    def model(data):
        x = effppl.sample("x", dist.Bernoulli(0.5), infer={"enumerate": "parallel"})
        loc = effppl.sample("loc", dist.Normal(0.0, 10.0))
        with effppl.plate("N", data.shape[0], subsample_size=100):
            batch = effppl.subsample(data, event_dim=0)
            effppl.sample("obs", dist.Normal(loc, 1.0 + 2.0 * x), obs=batch)

    data = random.normal(random.key(0), (3000,)) + 1
    mcmc = MCMC(HMCECS(NUTS(model), num_blocks=10), num_warmup=100, num_samples=100,
                progress_bar=False)
    mcmc.run(random.key(0), data)
    assert abs(float(mcmc.get_samples()["loc"].mean()) - 1.0) < 0.25


def test_two_subsampled_plates_with_a_proxy():
    """Two plates, each subsampled, one shared mean: the conjugate posterior mean of `a`
    (prior N(0, 10), 500 zeros and 800 ones: 800 / (1300 + 0.01))."""
    d1, d2 = jnp.zeros(500), jnp.ones(800)

    def model(d1, d2):
        a = effppl.sample("a", dist.Normal(0.0, 10.0))
        with effppl.plate("P1", d1.shape[0], subsample_size=50):
            effppl.sample("o1", dist.Normal(a, 1.0), obs=effppl.subsample(d1, event_dim=0))
        with effppl.plate("P2", d2.shape[0], subsample_size=80):
            effppl.sample("o2", dist.Normal(a, 1.0), obs=effppl.subsample(d2, event_dim=0))

    kernel = HMCECS(NUTS(model), num_blocks=2, proxy=HMCECS.taylor_proxy({"a": jnp.array(0.6)}))
    mcmc = MCMC(kernel, num_warmup=300, num_samples=600, progress_bar=False)
    mcmc.run(random.key(0), d1, d2)
    exact, sd = 800 / (1300 + 0.01), 1 / np.sqrt(1300 + 0.01)
    assert abs(float(mcmc.get_samples()["a"].mean()) - exact) < 0.3 * sd + 3 * sd / 10


def test_reference_params_and_data_are_checked():
    data = _data(n=300)

    def run(model, proxy, data=data):
        MCMC(HMCECS(NUTS(model), proxy=proxy), num_warmup=2, num_samples=2,
             progress_bar=False).run(random.key(0), data, 10)

    taylor = HMCECS.taylor_proxy
    with pytest.raises(ECSError, match=r"reference_params\['mu'\] has shape \(3,\)"):
        run(normal_model, taylor({"mu": jnp.ones(3)}))
    with pytest.raises(ECSError, match=r"reference_params\['mu'\] is not finite"):
        run(normal_model, taylor({"mu": jnp.nan}))
    with pytest.raises(ECSError, match=r"names \['zzz'\], which are not latent"):
        run(normal_model, taylor({"mu": 0.5, "zzz": 1.0}))

    def positive(data, m):
        s = effppl.sample("s", dist.HalfNormal(1.0))
        with effppl.plate("N", data.shape[0], subsample_size=m):
            effppl.sample("obs", dist.Normal(0.0, s), obs=effppl.subsample(data, event_dim=0))

    with pytest.raises(ECSError, match=r"reference_params\['s'\] = -1.0 is outside the support"):
        run(positive, taylor({"s": -1.0}))

    def local(data, m):
        mu = effppl.sample("mu", dist.Normal(0.0, 1.0))
        with effppl.plate("N", data.shape[0], subsample_size=m):
            z = effppl.sample("z", dist.Normal(mu, 1.0))
            effppl.sample("obs", dist.Normal(z, 1.0), obs=effppl.subsample(data, event_dim=0))

    with pytest.raises(ECSError, match="latent site `z` sits inside the subsampled plate `N`"):
        run(local, taylor({"mu": 0.0, "z": jnp.zeros(10)}))
    with pytest.raises(ECSError, match="hold NaN"):
        run(normal_model, None, data.at[7].set(jnp.nan))
