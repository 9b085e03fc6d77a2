"""NumPyro's mass-matrix options: `dense_mass` as site groups (block structure) and an initial or
fixed `inverse_mass_matrix`. Oracles: the posterior covariance of a Gaussian target (the adapted
blocks estimate it, as NumPyro's `test_structured_mass` checks), NumPyro's adapted blocks on the
same model, exact zeros outside the blocks, and the given matrix kept exactly."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import pytest
from numpyro.infer import MCMC as NpMCMC
from numpyro.infer import NUTS as NpNUTS

import effppl
from effppl import distributions as dist
from effppl.infer import MCMC, NUTS

W_COV = np.array([[1.5, 0.5], [0.5, 1.5]])
XY_COV = np.array([[2.0, 1.0], [1.0, 3.0]])
COV = np.zeros((5, 5))
COV[:2, :2], COV[2:4, 2:4], COV[4, 4] = W_COV, XY_COV, 2.5


def _model(sample):
    def model(cov):
        w = sample("w", dist.Normal(0, 1000).expand([2]).to_event(1))
        x = sample("x", dist.Normal(0, 1000).expand([1]).to_event(1))
        y = sample("y", dist.Normal(0, 1000).expand([1]).to_event(1))
        z = sample("z", dist.Normal(0, 1000).expand([1]).to_event(1))
        sample("obs", dist.MultivariateNormal(jnp.zeros(5), cov), obs=jnp.concatenate([w, x, y, z]))
    return model


@pytest.mark.slow
def test_block_dense_mass_estimates_each_block_as_numpyro():
    mcmc = MCMC(NUTS(_model(effppl.sample), dense_mass=[("w",), ("x", "y")]), num_warmup=1000,
                num_samples=1, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(1), jnp.asarray(COV))
    imm = np.asarray(mcmc.last_state.inverse_mass_matrix)[0]  # sites sorted: w, x, y, z
    assert imm.shape == (5, 5)
    blocks = np.zeros((5, 5), bool)
    blocks[:2, :2] = blocks[2:4, 2:4] = True
    np.fill_diagonal(blocks, True)
    assert np.all(imm[~blocks] == 0.0)  # no entry between groups, nor for the ungrouped `z`
    theirs = NpMCMC(NpNUTS(_model(numpyro.sample), dense_mass=[("w",), ("x", "y")]),
                    num_warmup=1000, num_samples=1, progress_bar=False)
    theirs.run(jax.random.PRNGKey(1), jnp.asarray(COV))
    np_imm = theirs.last_state.adapt_state.inverse_mass_matrix  # pyright: ignore[reportOptionalMemberAccess]
    for ours, true, key in ((imm[:2, :2], W_COV, ("w",)), (imm[2:4, 2:4], XY_COV, ("x", "y")),
                            (imm[4:, 4], [2.5], ("z",))):
        np.testing.assert_allclose(ours, true, atol=0.5, rtol=0.5)  # NumPyro's own tolerance
        np.testing.assert_allclose(ours, np_imm[key], atol=0.6, rtol=0.5)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::effppl.infer.DivergenceWarning")  # 20 warmup steps
@pytest.mark.parametrize("dense_mass", [False, True, [("x",)]])
def test_inverse_mass_matrix_is_kept_when_not_adapted(dense_mass):
    def model():
        effppl.sample("x", dist.Normal(0, 1).expand([3]))
        effppl.sample("z", dist.Normal(0, 1).expand([2]))
    given = jnp.arange(1, 4.0)
    mcmc = MCMC(NUTS(model, dense_mass=dense_mass, inverse_mass_matrix={("x",): given},
                     adapt_mass_matrix=False), num_warmup=20, num_samples=2, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0))
    imm = np.asarray(mcmc.last_state.inverse_mass_matrix)[0]
    expected = np.concatenate([given, np.ones(2)])  # sites sorted: x, z (NumPyro's blocks)
    np.testing.assert_array_equal(imm, np.diag(expected) if dense_mass else expected)
    flat = MCMC(NUTS(model, dense_mass=dense_mass, inverse_mass_matrix=jnp.arange(1, 6.0),
                     adapt_mass_matrix=False), num_warmup=20, num_samples=2, progress_bar=False)
    flat.run(jax.random.PRNGKey(0))
    imm = np.asarray(flat.last_state.inverse_mass_matrix)[0]
    np.testing.assert_array_equal(imm, np.diag(np.arange(1, 6.0)) if dense_mass
                                  else np.arange(1, 6.0))


def test_mass_groups_naming_no_site_or_misshapen_matrices_raise():
    def model():
        effppl.sample("x", dist.Normal(0, 1).expand([3]))
    with pytest.raises(ValueError, match=r"\('nope',\).*not latent sites"):
        MCMC(NUTS(model, dense_mass=[("nope",)]), num_warmup=2, num_samples=2,
             progress_bar=False).run(jax.random.PRNGKey(0))
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        MCMC(NUTS(model, inverse_mass_matrix={("x",): jnp.ones(2)}), num_warmup=2,
             num_samples=2, progress_bar=False).run(jax.random.PRNGKey(0))
    with pytest.raises(TypeError, match="dense_mass"):
        NUTS(model, dense_mass=[("x", 1)])


def _four_sites(sample):
    def model():
        d = dist if sample is effppl.sample else numpyro.distributions
        sample("x", d.Normal(0, 1))
        sample("y", d.Normal(0, 1).expand([4]))
        sample("w", d.Normal(0, 1).expand([2, 5]))
        sample("z", d.Normal(0, 1).expand([1]))
    return model


@pytest.mark.slow
@pytest.mark.parametrize("dense_mass", [False, True, [("y", "w", "z", "x")], [("x", "w"), ("y",)],
                                        [("y",)], [("z",), ("w",), ("y",)]])
def test_adapt_state_blocks_are_numpyros(dense_mass):
    """`last_state.adapt_state` keyed by NumPyro's blocks (dense groups in their own order, the
    rest diagonal and sorted), with NumPyro's shapes and, at the same fixed matrix, its values."""
    grouped = {n for g in dense_mass for n in g} if isinstance(dense_mass, list) else set()
    given = dense_mass is False or isinstance(dense_mass, list) and (
        ("w",) in dense_mass or "w" not in grouped)
    kw = dict(dense_mass=dense_mass, adapt_mass_matrix=False,  # (NumPyro: no overlap allowed)
              inverse_mass_matrix={("w",): jnp.linspace(0.5, 2.0, 10)} if given else None)
    ours = MCMC(NUTS(_four_sites(effppl.sample), **kw), num_warmup=0, num_samples=1,
                progress_bar=False)
    ours.run(jax.random.PRNGKey(0))
    theirs = NpMCMC(NpNUTS(_four_sites(numpyro.sample), **kw), num_warmup=0, num_samples=1,
                    progress_bar=False)
    theirs.run(jax.random.PRNGKey(0))
    a = ours.last_state.adapt_state
    b = theirs.last_state.adapt_state  # pyright: ignore[reportOptionalMemberAccess]
    for field in ("inverse_mass_matrix", "mass_matrix_sqrt", "mass_matrix_sqrt_inv"):
        mine, np_ = getattr(a, field), getattr(b, field)
        assert {k: v.shape for k, v in mine.items()} == {k: v.shape for k, v in np_.items()}
        for key in np_:
            np.testing.assert_allclose(mine[key], np_[key], rtol=1e-6, atol=1e-7)


def test_adapted_blocks_follow_the_groups_site_order():
    """NumPyro's `test_structured_mass`, second half: a group `("y", "x")` is keyed so and its
    block is in that order (the covariance reversed)."""
    mcmc = MCMC(NUTS(_model(effppl.sample), dense_mass=[("w",), ("y", "x")]), num_warmup=1000,
                num_samples=1, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(1), jnp.asarray(COV))
    imm = mcmc.last_state.adapt_state.inverse_mass_matrix
    assert set(imm) == {("w",), ("y", "x"), ("z",)}
    np.testing.assert_allclose(imm[("w",)], W_COV, atol=0.5, rtol=0.5)
    np.testing.assert_allclose(imm[("y", "x")], XY_COV[::-1, ::-1], atol=0.5, rtol=0.5)
    np.testing.assert_allclose(imm[("z",)], [2.5], atol=0.5, rtol=0.5)
