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

