"""`benchmarks.elimination`: both frameworks' traces are timed alternately and the ratios are
those of the timings."""

import json

import pytest

from benchmarks import elimination


def test_rows_hold_each_frameworks_times_and_their_ratios(tmp_path, capsys):
    out = tmp_path / "e.json"
    assert elimination.main(["--models", "proportion_test", "--repeats", "2",
                             "--json", str(out)]) == 0
    (row,) = json.loads(out.read_text())["rows"]
    assert row["model"] == "proportion_test"
    assert len(row["effppl"]) == len(row["numpyro"]) == 2
    assert all(t > 0 for t in row["effppl"] + row["numpyro"])
    mean = lambda ts: sum(ts) / len(ts)  # noqa: E731 -- the median of two
    assert row["median_ratio"] == pytest.approx(mean(row["effppl"]) / mean(row["numpyro"]))
    assert row["best_ratio"] == pytest.approx(min(row["effppl"]) / min(row["numpyro"]))
    assert "| proportion_test |" in capsys.readouterr().out



def test_the_loop_model_rows_time_the_same_potential(tmp_path):
    """`--sites`: both frameworks trace the potential of the same Python-loop model, and it is
    the same number (an oracle for what is timed: NumPyro's potential)."""
    import jax
    from jax.extend.core import jaxpr_as_fun

    out = tmp_path / "e.json"
    assert elimination.main(["--sites", "8", "--repeats", "1", "--json", str(out)]) == 0
    (row,) = json.loads(out.read_text())["rows"]
    assert row["model"] == "loop_8_sites" and len(row["effppl"]) == len(row["numpyro"]) == 1
    fns = elimination._loop_potentials(8)
    values = []
    for make_jaxpr, fn, args in fns.values():
        values.append(float(jaxpr_as_fun(make_jaxpr(fn)(*args))(*jax.tree.leaves(args))[0]))
    assert len(fns["effppl"][2][0]) == 6  # mu, tau and two latent sites per group (2 groups)
    assert values[0] == pytest.approx(values[1], rel=1e-9)
