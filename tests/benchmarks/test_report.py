"""Side-by-side timing and the plain verdict on effppl's goal, on fixed figures."""

import pytest

from benchmarks import _measure, _report, verdict


def _prepared(name, order, seconds=None, fail=False):
    def run():
        order.append(name)
        if fail:
            raise FloatingPointError(f"{name} overflowed")
        return 1.5
    return _measure.Prepared(figures={"num_evals": 10}, run=run)


def test_loops_run_round_robin_and_the_fastest_run_counts(monkeypatch):
    order = []
    prepared = {"a": _prepared("a", order), "b": _prepared("b", order)}
    clock = iter([0.0, 3.0, 3.0, 5.0, 5.0, 6.0, 6.0, 10.0])  # a: 3, 1; b: 2, 4 seconds
    monkeypatch.setattr(_measure.time, "perf_counter", lambda: next(clock))
    timing = _measure.time_side_by_side(prepared, repeats=2)
    assert order == ["a", "b", "a", "b"]
    assert timing["a"]["run_all_s"] == [3.0, 1.0] and timing["a"]["run_s"] == 1.0
    assert timing["b"]["run_all_s"] == [2.0, 4.0] and timing["b"]["run_s"] == 2.0
    assert timing["a"]["evals_per_s"] == 10.0 and timing["b"]["evals_per_s"] == 5.0
    assert timing["a"]["loop_result"] == 1.5


def test_a_short_loop_timed_once_runs_again_so_its_cold_run_never_counts_alone(monkeypatch):
    order = []
    prepared = {"short": _prepared("short", order), "long": _prepared("long", order)}
    clock = iter([0.0, 3.0, 3.0, 23.0, 23.0, 24.0])  # short: 3 s cold, 1 s warm; long: 20 s
    monkeypatch.setattr(_measure.time, "perf_counter", lambda: next(clock))
    timing = _measure.time_side_by_side(prepared, repeats=1)
    assert order == ["short", "long", "short"]
    assert timing["short"]["run_all_s"] == [3.0, 1.0] and timing["short"]["run_s"] == 1.0
    assert timing["long"]["run_all_s"] == [20.0]


def test_a_failing_loop_is_reported_and_the_others_still_timed():
    order = []
    prepared = {"bad": _prepared("bad", order, fail=True), "good": _prepared("good", order)}
    timing = _measure.time_side_by_side(prepared, repeats=3)
    assert order == ["bad", "good", "good", "good"]  # a failed loop is not run again
    assert isinstance(timing["bad"]["error"], FloatingPointError)
    assert len(timing["good"]["run_all_s"]) == 3


def _results(rows, frameworks=("effppl", "numpyro", "handwritten")):
    models = {name: {"frameworks": {fw: {"status": "ok", "run_s": run_s, "total_s": 1.0}
                                    for fw, run_s in row.items()}}
              for name, row in rows.items()}
    return {"config": {"frameworks": list(frameworks), "run_repeats": 3}, "models": models}


def test_verdict_names_what_effppl_misses():
    results = _results({
        "hmm": {"effppl": 1.03, "numpyro": 1.10, "handwritten": 1.0},   # meets the goal
        "proportion_test": {"effppl": 0.03, "numpyro": 0.01, "handwritten": 0.01},  # too short
        "bnn": {"effppl": 1.20, "numpyro": 1.00, "handwritten": 1.25},  # slower than NumPyro
        "hsgp": {"effppl": 2.00, "numpyro": 2.00, "handwritten": 1.0},  # slower than hand-written
    })
    for fw, ops in (("effppl", 120), ("numpyro", 100)):
        results["models"]["bnn"]["frameworks"][fw]["num_hlo_ops"] = ops
    results["models"]["ucbadmit"] = {"frameworks": {
        "effppl": {"status": "ok", "run_s": 1.0, "total_s": 1.0},
        "numpyro": {"status": "error", "reason": "boom"},
        "handwritten": {"status": "ok", "run_s": 1.0, "total_s": 1.0}}}
    got = verdict(results)
    assert got["hmm"]["meets_goal"] and got["hmm"]["misses"] == []
    assert got["hmm"]["runtime_vs_handwritten"] == pytest.approx(1.03)
    assert got["bnn"]["meets_goal"] is False and got["bnn"]["misses"] == ["20% slower than NumPyro"]
    assert got["bnn"]["program_vs_numpyro"] == pytest.approx(1.2)
    assert got["hmm"]["program_vs_numpyro"] is None  # no instruction counts (older JSON)
    assert got["hsgp"]["misses"] == ["100% slower than hand-written"]
    assert got["ucbadmit"]["meets_goal"] is None and got["ucbadmit"]["runtime_vs_numpyro"] is None
    assert got["proportion_test"]["meets_goal"] is None and got["proportion_test"]["too_short"]

    text = _report.verdict_text(results)
    assert "Semi-sup. HMM: meets the goal (1.03x hand-written runtime" in text
    assert "Bayesian NN: MISSES the goal: effppl is 20% slower than NumPyro" in text
    assert "1.20x NumPyro's XLA instruction count" in text and "likely noise" not in text

    results["models"]["bnn"]["frameworks"]["effppl"]["num_hlo_ops"] = 100
    text = _report.verdict_text(results)
    assert "1.00x NumPyro's XLA instruction count). XLA compiled both" in text
    assert "UCBadmit GLMM: not judged" in text
    assert "Proportion: not judged, a loop took under 0.1 s (noise); 3.00x" in text


def test_no_verdict_without_effppl():
    results = _results({"hmm": {"numpyro": 1.1, "handwritten": 1.0}},
                       frameworks=("numpyro", "handwritten"))
    assert _report.verdict_text(results) == ""



def test_a_multi_line_reason_is_kept_whole_in_the_table_notes():
    reason = "DataNotFoundError: `SP500.csv` was not found in:\n  /a/SP500.csv\n  /b/SP500.csv"
    results = _results({"stochastic_volatility": {"handwritten": 1.0}})
    results["models"]["stochastic_volatility"]["frameworks"]["effppl"] = {
        "status": "error", "reason": reason}
    text = _report.runtime_table({**results, "config": {**results["config"], "num_evals": 10}})
    assert "[1] DataNotFoundError: `SP500.csv` was not found in:\n" in text
    assert "\n        /a/SP500.csv\n        /b/SP500.csv" in text
