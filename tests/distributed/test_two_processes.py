"""Two local processes of one `jax.distributed` run (127.0.0.1, a free port, gloo, 2 CPU devices
each): chains and data split across processes, reads on every process, mismatched keys, a dead
peer.

Oracles: each process's own one-device run of the same key (chain c's keys are `split(key)[c]`
whatever the layout: bit for bit with chains split, <= 1e-9 in float64 with rows split, whose
log density is summed in another order); the other process's results (identical on both); the
documented errors.
"""

import pytest

from ._launch import result, run_processes


@pytest.fixture(scope="module")
def both():
    out = run_processes("_two_processes.py", timeout=900)
    for code, stdout, stderr in out:
        assert code == 0, stdout[-2000:] + stderr[-4000:]
    return [result(stdout) for _, stdout, _ in out]


@pytest.mark.slow
def test_chains_and_data_split_over_two_processes_equal_the_one_process_run(both):
    for r in both:
        assert (r["processes"], r["devices"], r["local_devices"]) == (2, 4, 2)
        assert r["chain_vs_ref"] == 0.0
        assert r["data_vs_ref"] <= 1e-9
    assert both[0]["eight"] == both[1]["eight"]  # every process reads all 8 chains
    assert [r["rows"] for r in both] == [[0, 8], [8, 16]]


@pytest.mark.slow
def test_results_are_read_whole_on_every_process(both):
    for r in both:
        assert r["summary_has_w"] and r["arviz_posterior_equal"]
        assert r["arviz_loglik_shape"] == [2, 30, 16]
        assert r["loglik_diff"] <= 1e-12
        assert r["predictive_equal"]


@pytest.mark.slow
def test_processes_with_different_keys_are_refused_by_both(both):
    for r in both:
        kind, message = r["key_error"]
        assert kind == "DistributedError"
        assert "`rng_key` in process(es) [1]" in message


def test_a_dead_peer_ends_the_survivor_with_an_error_not_a_hang():
    """Process 1 exits after the data are sharded; process 0, in its run, is stopped by JAX's
    coordination service (missed heartbeats) with a message naming the task, well within the
    test's timeout."""
    (code0, out0, err0), (code1, _, _) = run_processes("_dead_peer.py", timeout=240)
    assert code1 == 3
    assert code0 is not None, "the survivor hung: killed at the timeout\n" + err0[-3000:]
    assert code0 != 0 and "UNEXPECTED" not in out0
    assert "sharded" in out0  # it got as far as the run
    assert "task" in err0.lower() or "process" in err0.lower(), err0[-3000:]
