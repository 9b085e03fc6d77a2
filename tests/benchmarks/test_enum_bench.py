"""The enumeration benchmark runs, and its three potentials (effppl's enumerated scan, the
hand-written forward algorithm, NumPyro's funsor-enumerated `contrib.control_flow.scan`) agree."""

import json

import pytest

from benchmarks import enum_bench


@pytest.mark.slow
def test_enum_bench_runs_and_the_three_potentials_agree(tmp_path):
    out = tmp_path / "enum.json"
    enum_bench.main(["--steps", "30", "--states", "2", "--evals", "2", "--repeats", "1",
                     "--json", str(out)])
    (row,) = json.loads(out.read_text())["rows"]
    assert row["T"] == 30 and row["K"] == 2
    for name in ("effppl", "numpyro"):
        assert row[name]["potential_diff"] < 1e-9
        assert row[name]["eval_s"] > 0
