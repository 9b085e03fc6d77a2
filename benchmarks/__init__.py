"""Benchmarks of effppl against NumPyro, Oryx and hand-written JAX (the paper's §7.2, Tables 1, 2).

Run from the command line:

    python -m benchmarks --quick                     # six models, small data, a few minutes
    python -m benchmarks --paper --json benchmarks/results/paper_cpu.json

or from Python:

    import benchmarks
    config = benchmarks.make_config("quick", models=["proportion_test"], nuts=False)
    results = benchmarks.run(config)
    print(benchmarks.render(results))
    benchmarks.check(results)   # raises AgreementError if two log densities differ

See `benchmarks/README.md` for what is measured and the JSON layout.
"""

from ._config import FRAMEWORKS, MODEL_NAMES, MODES, Mode, RunConfig, make_mode
from ._errors import AgreementError, BenchmarkConfigError, BenchmarkError, OryxEnvironmentError
from ._oryx import DEFAULT_VENV
from ._report import plot, render, verdict, write_json
from ._run import SCHEMA, check, run


def make_config(mode="quick", models=MODEL_NAMES, frameworks=FRAMEWORKS, nuts=True, seed=0,
                num_evals=None, oryx_venv=DEFAULT_VENV, progress=False):
    """A validated `RunConfig`.

    **Arguments:**
    - `mode`: `"quick"` or `"paper"`.
    - `models`, `frameworks`: names from `MODEL_NAMES` and `FRAMEWORKS` (a list, or one
      comma-separated string); `models` may be empty when `run` is given `modules` of its own.
    - `nuts`: run the end-to-end NUTS comparison.
    - `seed`: seed of the data, the agreement points and NUTS (an integer >= 0).
    - `num_evals`: overrides the mode's number of timed evaluations.
    - `oryx_venv`: folder of the pinned Oryx environment.
    - `progress`: show a tqdm progress bar.

    **Raises:** `BenchmarkConfigError` on an unknown name, no framework, a `num_evals` that is not a
    positive integer, or a `seed` that is not a non-negative integer.
    """
    from ._config import check_count, check_names
    return RunConfig(mode=make_mode(mode, num_evals),
                     models=check_names("models", models, MODEL_NAMES, allow_none=True),
                     frameworks=check_names("frameworks", frameworks, FRAMEWORKS),
                     nuts=bool(nuts), seed=check_count("seed", seed, minimum=0),
                     oryx_venv=str(oryx_venv),
                     progress=bool(progress))


__all__ = [
    "AgreementError", "BenchmarkConfigError", "BenchmarkError", "FRAMEWORKS", "MODEL_NAMES",
    "MODES", "Mode", "OryxEnvironmentError", "RunConfig", "SCHEMA", "check", "make_config",
    "plot", "render", "run", "verdict", "write_json",
]
