"""`effppl.distributed` in one process with one device: meshes, rows, sharding, reads, checks.

Oracles: the arrays themselves (a sharded array read back equals its input), JAX's own device
list, and the documented errors."""

import jax
import numpy as np
import pytest

import effppl
import effppl.distributed as ed
from effppl.infer import MCMC, NUTS, Predictive, log_likelihood


def test_make_mesh_lays_global_devices_on_chain_and_data():
    mesh = ed.make_mesh()
    assert mesh.axis_names == ("chain", "data")
    assert dict(mesh.shape) == {"chain": jax.device_count(), "data": 1}
    assert list(mesh.devices.flat) == sorted(jax.devices(), key=lambda d: (d.process_index, d.id))


@pytest.mark.parametrize("kwargs, message", [
    ({"chain": 2}, r"needs chain \* data devices"),
    ({"data": 0}, "expected a positive int"),
    ({"chain": True}, "expected a positive int"),
])
def test_make_mesh_refuses_sizes_that_do_not_fit(kwargs, message):
    with pytest.raises(ed.DistributedError, match=message) as err:
        ed.make_mesh(**kwargs, devices=jax.devices()[:1])
    assert isinstance(err.value, (effppl.EffpplError, RuntimeError))


def test_shard_of_one_process_holds_every_row_and_reads_back():
    mesh = ed.make_mesh()
    x = np.arange(12.0).reshape(6, 2)
    assert ed.process_rows(6, mesh) == slice(0, 6)
    a = ed.shard(x, mesh)
    assert isinstance(a.sharding, jax.sharding.NamedSharding)
    assert a.shape == (6, 2) and a.sharding.spec == jax.sharding.PartitionSpec("data")
    np.testing.assert_array_equal(ed.gather({"a": a})["a"], x)
    b = ed.shard(x, mesh, axis=1)
    assert isinstance(b.sharding, jax.sharding.NamedSharding)
    assert b.sharding.spec == jax.sharding.PartitionSpec(None, "data")
    with pytest.raises(ed.DistributedError, match="has no axis 2"):
        ed.shard(x, mesh, axis=2)


def test_shard_refuses_a_mesh_of_other_axes():
    mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:1]), ("batch",))
    with pytest.raises(ed.DistributedError, match="axes 'chain' and 'data'"):
        ed.shard(np.ones(3), mesh)


def test_initialize_of_one_process_does_nothing_even_after_jax_started():
    jax.devices()  # JAX has started
    ed.initialize(num_processes=1)
    assert jax.process_count() == 1
    ed.check_same("test", rng_key=jax.random.key(0))  # one process: nothing to compare


def test_initialize_of_several_processes_after_jax_started_says_to_call_it_first():
    jax.devices()
    with pytest.raises(ed.DistributedError, match="must run before JAX starts"):
        ed.initialize("127.0.0.1:1", num_processes=2, process_id=0)


def test_gather_keeps_other_leaves_and_reads_arrays_to_numpy():
    got = ed.gather({"a": jax.numpy.arange(3), "n": 2, "s": "x"})
    assert isinstance(got["a"], np.ndarray) and got["n"] == 2 and got["s"] == "x"
    assert not ed.spans_processes(got)


def _model(y):
    mu = effppl.sample("mu", effppl.distributions.Normal(0.0, 1.0))
    with effppl.plate("n", y.shape[0]):
        effppl.sample("y", effppl.distributions.Normal(mu, 1.0), obs=y)


def test_sharded_mcmc_on_one_device_equals_vectorized():
    """One device: the shard_map over a chain axis of size 1 runs the vectorized program."""
    y = np.linspace(-1.0, 2.0, 8)
    draws = []
    for method, mesh in (("vectorized", None), ("sharded", ed.make_mesh())):
        mcmc = MCMC(NUTS(_model), num_warmup=20, num_samples=20, num_chains=2,
                    chain_method=method, mesh=mesh, progress_bar=False)
        mcmc.run(jax.random.key(0), ed.shard(y, ed.make_mesh()) if mesh else y)
        draws.append(np.asarray(mcmc.get_samples()["mu"]))
    np.testing.assert_array_equal(draws[0], draws[1])
    assert np.std(draws[0]) > 0.05


def test_predictive_and_log_likelihood_take_a_mesh():
    y = np.linspace(-1.0, 2.0, 8)
    post = {"mu": np.linspace(0.0, 1.0, 4)}
    mesh = ed.make_mesh()
    np.testing.assert_array_equal(
        Predictive(_model, post, mesh=mesh)(jax.random.key(1), y)["y"],
        Predictive(_model, post)(jax.random.key(1), y)["y"])
    np.testing.assert_array_equal(log_likelihood(_model, post, y, mesh=mesh)["y"],
                                  log_likelihood(_model, post, y)["y"])
    with pytest.raises(ValueError, match="axes 'chain' and 'data'"):
        Predictive(_model, post, mesh="mesh")


def test_sharded_mcmc_refuses_a_foreign_mesh_as_predictive_does():
    """A mesh not from `make_mesh`: the same `ShardingError` (a ValueError) as Predictive's."""
    mcmc = MCMC(NUTS(_model), num_warmup=5, num_samples=5, num_chains=2,
                chain_method="sharded", mesh="mesh", progress_bar=False)
    with pytest.raises(ValueError, match="axes 'chain' and 'data'") as err:
        mcmc.run(jax.random.key(0), np.ones(4))
    assert isinstance(err.value, effppl.EffpplError)
