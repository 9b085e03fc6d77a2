"""Smoke tests of the benchmark harness: one quick model, tiny N, NumPyro and hand-written JAX."""

import json
import pathlib
import sys

import jax.numpy as jnp
import numpy as np
import pytest

import benchmarks
from benchmarks.__main__ import main as cli_main

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import toy_model  # noqa: E402


def _tiny(config):
    mode = config.mode._replace(trace_repeats=1, compile_repeats=1, run_repeats=1)
    return config._replace(mode=mode)


def _config(models, frameworks, **kwargs):
    return _tiny(benchmarks.make_config("quick", models=models, frameworks=frameworks,
                                        nuts=False, num_evals=5, **kwargs))


def test_run_quick_model_gives_every_figure_and_agreement(tmp_path):
    config = _config(["proportion_test"], ["effppl", "numpyro", "handwritten"])
    results = benchmarks.run(config)
    path = benchmarks.write_json(results, tmp_path / "out.json")
    loaded = json.loads(path.read_text())

    assert loaded["schema"] == benchmarks.SCHEMA
    for key in ("machine", "devices", "versions", "seeds", "config", "models", "oryx"):
        assert key in loaded
    assert loaded["versions"]["jax"] and loaded["versions"]["numpyro"]
    import effppl
    assert loaded["versions"]["effppl"] == effppl.__version__
    commit = loaded["versions"]["effppl_commit"]  # None only outside a git checkout
    assert commit is None or len(commit.split("+")[0]) == 40
    model = loaded["models"]["proportion_test"]
    for fw in ("effppl", "numpyro", "handwritten"):
        row = model["frameworks"][fw]
        assert row["status"] == "ok", row
        for field in ("trace_s", "compile_s", "total_s", "run_s", "evals_per_s", "num_hlo_ops"):
            assert row[field] > 0
        assert row["num_hlo_ops"] == sum(row["hlo_ops"].values()) and "fusion" in row["hlo_ops"]
        assert row["num_evals"] == 5
    agreement = model["agreement"]
    assert agreement["reference"] == "handwritten"
    for fw in ("effppl", "numpyro"):
        assert agreement["frameworks"][fw]["ok"]
        assert len(agreement["frameworks"][fw]["values"]) == 3
    benchmarks.check(results)

    text = benchmarks.render(results)
    assert "Table 1" in text and "Table 2" in text and "Proportion" in text
    assert "Verdict" in text and loaded["verdict"]["proportion_test"]["runtime_vs_handwritten"] > 0
    assert loaded["verdict"]["proportion_test"]["program_vs_numpyro"] <= 1.01


_RIGHT_DENSITY = toy_model.handwritten_log_density


def _wrong_density(params, x, y=None):
    return _RIGHT_DENSITY(params, x, y) + 1e-3 * jnp.sum(params["w"])


def test_check_raises_when_log_densities_disagree(monkeypatch):
    monkeypatch.setattr(toy_model, "handwritten_log_density", _wrong_density)
    config = _config([], ["numpyro", "handwritten"])
    results = benchmarks.run(config, modules={"toy": toy_model})
    assert not results["models"]["toy"]["agreement"]["ok"]
    with pytest.raises(benchmarks.AgreementError, match="toy/numpyro"):
        benchmarks.check(results)


def test_partial_results_are_handed_out_after_each_model(tmp_path):
    snapshots = []

    def on_model(partial):
        path = benchmarks.write_json(partial, tmp_path / "partial.json")
        snapshots.append(json.loads(path.read_text()))

    results = benchmarks.run(_config([], ["numpyro", "handwritten"]),
                             modules={"first": toy_model, "second": toy_model},
                             on_model=on_model)
    assert [list(s["models"]) for s in snapshots] == [["first"], ["first", "second"]]
    assert all("verdict" not in s and "finished" not in s for s in snapshots)
    assert snapshots[0]["models"]["first"]["frameworks"]["numpyro"]["run_s"] > 0
    assert "finished" in results and "verdict" in results


def test_unknown_framework_is_a_config_error():
    with pytest.raises(benchmarks.BenchmarkConfigError, match="pyro"):
        benchmarks.make_config("quick", frameworks=["pyro"])
    assert cli_main(["--quick", "--frameworks", "pyro", "--no-progress"]) == 2


@pytest.mark.parametrize("kwargs, match", [
    ({"frameworks": ","}, "at least one of the names"),
    ({"seed": -1}, "seed"), ({"seed": 1.5}, "seed"), ({"num_evals": 1.5}, "num_evals"),
    ({"num_evals": "10"}, "num_evals"), ({"num_evals": 0}, "num_evals")])
def test_bad_settings_are_config_errors_naming_the_setting(kwargs, match):
    with pytest.raises(benchmarks.BenchmarkConfigError, match=match):
        benchmarks.make_config("quick", **kwargs)


def test_a_comma_separated_string_of_names_is_accepted():
    config = benchmarks.make_config("quick", models="hmm, bnn", frameworks="numpyro")
    assert config.models == ("bnn", "hmm") and config.frameworks == ("numpyro",)


def test_cli_rejects_bad_settings_and_unwritable_paths_before_measuring(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for argv, message in [(["--seed=-1"], "seed"), (["--models", ","], "at least one name"),
                          (["--frameworks", ""], "at least one name"),
                          (["--json", str(blocker / "out.json")], "--json"),
                          (["--json", str(tmp_path)], "is a folder"),
                          (["--plot", str(blocker / "chart.png")], "--plot")]:
        try:
            status = cli_main(argv + ["--no-progress", "--no-nuts"])
        except SystemExit as exit:  # argparse's own errors
            status = exit.code
        assert status == 2, argv
        assert message in capsys.readouterr().err, argv


def test_chart_is_written(tmp_path):
    pytest.importorskip("matplotlib")
    results = benchmarks.run(_config([], ["numpyro", "handwritten"]),
                             modules={"toy": toy_model})
    path = benchmarks.plot(results, tmp_path / "chart.png")
    assert path.stat().st_size > 1000


@pytest.mark.slow
def test_oryx_worker_agrees_and_notes_its_cond_bug():
    config = _config(["proportion_test"], ["oryx", "handwritten"])
    results = benchmarks.run(config)
    if results["oryx"]["status"] != "ok":
        pytest.skip(results["oryx"]["reason"])
    model = results["models"]["proportion_test"]
    assert model["frameworks"]["oryx"]["status"] == "ok"
    assert model["oryx_handwritten"]["status"] == "ok"
    assert model["agreement"]["frameworks"]["oryx:oryx"]["ok"]
    cond = results["oryx"]["expressiveness"]["cond"]
    assert cond["silently_wrong"] and cond["dropped_latent"]


def test_oryx_rows_are_skipped_with_a_reason_when_its_environment_cannot_be_made(tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    config = _config([], ["oryx", "handwritten"], oryx_venv=blocker / "venv")
    results = benchmarks.run(config, modules={"toy": toy_model}, log=lambda message: None)
    assert results["oryx"]["status"] == "skipped" and results["oryx"]["reason"]
    row = results["models"]["toy"]["frameworks"]["oryx"]
    assert row["status"] == "skipped" and "run_s" not in row
    assert "skipped" in benchmarks.render(results)


@pytest.mark.slow
def test_nuts_seeds_records_one_run_per_framework():
    from benchmarks import nuts_seeds
    from benchmarks._config import MODES
    from models import proportion_test

    mode = MODES["quick"]._replace(num_warmup=30, num_samples=40, num_chains=1, max_tree_depth=3)
    args, kwargs = proportion_test.make_data("quick")
    for framework in ("effppl", "numpyro"):
        row = nuts_seeds.one_run(framework, proportion_test, args, kwargs, mode, seed=0)
        assert row["wall_s"] > 0 and 0 < row["min_bulk_ess"] < 10 * 40
        assert set(row["bulk_ess"]) == set(proportion_test.latent_shapes(*args, **kwargs))
        assert 1 <= row["mean_leapfrog_steps"] <= 2 ** 3 - 1
        assert np.shape(row["step_size"]) in ((), (1,))
