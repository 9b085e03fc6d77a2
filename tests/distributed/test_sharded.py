"""Chains and data on 4 forced CPU devices, against the one-device run (`_four_devices.py`).

Oracles: the vectorized run on one device (the same keys: chain c's keys are `split(key)[c]`
whatever the number of chains), bit for bit when each device runs as many chains as that run
(two), to 1e-9 in float64 when the data rows are split over devices (the log density's sum is
added in another order); the compiled programs' HLO for the collectives (none in the chain
sampler, one all-reduce of the log density and its gradient with data split, one of the ELBO
and its gradient in SVI's steps, none in Predictive and the pointwise log-likelihood).
"""


def test_chains_sharded_equal_the_one_device_run_bit_for_bit(four):
    assert four["devices"] == 4
    assert four["spread"] > 0.1  # the draws move: equality is not that of constants
    assert four["chain_vs_ref"] == 0.0  # 4 devices x 2 chains vs 1 device x 2 chains
    assert four["half_vs_eight"] == 0.0  # 2 devices x 2 chains vs 4 devices x 2 chains
    assert four["chain_sharding"] == "P('chain',)"


def test_chain_sampler_compiles_once_without_collectives(four):
    assert four["chain_start_compiles"] == 1
    assert len(four["chain_chunks"]) == 1  # warmup and sampling share one executable
    assert set(four["chain_chunks"][0].values()) == {0}
    assert four["second_run_modules"] == []  # a second run compiles nothing


def test_data_split_over_devices_sums_with_one_all_reduce(four):
    assert len(four["data_chunks"]) == 1
    counts = four["data_chunks"][0]
    assert counts["all-reduce"] == 1  # value and gradient, combined by XLA
    assert sum(counts.values()) == 1  # nothing gathered
    assert four["data_vs_ref"] <= 1e-9


def test_results_of_sharded_data_are_read_whole(four):
    assert four["loglik_diff"] <= 1e-12
    assert four["arviz_loglik_shape"] == [2, 30, 16]
    assert four["predictive_diff"] == 0.0
    assert four["svi_diff"] <= 1e-9


def test_svi_predictive_and_log_likelihood_programs_communicate_only_to_sum(four):
    """Counted in XLA's optimized programs: SVI's compiled steps sum the ELBO and its gradient
    over the data's shards with one all-reduce; the pointwise log-likelihood (rows stay on
    their device) and Predictive (draws split over devices) need none."""
    svi = four["svi_modules"]
    assert svi["jit_run"]["all-reduce"] == 1
    assert sum(sum(counts.values()) for counts in svi.values()) == 1
    for name in ("loglik_modules", "predictive_modules"):
        assert four[name] and all(not any(c.values()) for c in four[name].values()), four[name]


def test_persistent_cache_keys_a_program_by_its_mesh_devices_in_order(four):
    ids = [[device_id for _, device_id in layout] for layout in four["layouts"]]
    assert ids == [[0, 1, 2, 3], [3, 2, 1, 0], [0, 1]]


def test_sharded_runs_refuse_what_they_cannot_do(four):
    errors = four["errors"]
    kind, bases, message = errors["local_latent"]
    assert kind == "SiteError" and "ValueError" in bases
    assert "latent site `z`" in message and "plate `n`" in message
    kind, bases, message = errors["subsample"]
    assert kind == "SiteError" and "plate `n` subsamples" in message
    kind, bases, message = errors["indivisible"]
    assert "EffpplError" in bases and "num_chains=3" in message
    kind, bases, message = errors["mesh_vectorized"]
    assert kind == "MCMCError" and "chain_method='sharded'" in message
