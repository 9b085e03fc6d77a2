"""Benchmark modes, the model and framework names, and the settings of one run.

A `Mode` fixes every size the harness uses: the number `num_evals` of log-density-and-gradient
evaluations timed inside one jitted `lax.fori_loop` (the paper's N, §7.2: 100,000), the number of
timing repeats, and the NUTS settings shared by effppl and NumPyro so that their wall times and
ESS/s compare like for like.
"""

import numbers
from typing import NamedTuple

from ._errors import BenchmarkConfigError

MODEL_NAMES = ("proportion_test", "stochastic_volatility", "bnn", "hmm", "ucbadmit", "hsgp")
"""The six models of the paper's Tables 1 and 2, in the order of the tables."""

MODEL_LABELS = {
    "proportion_test": "Proportion",
    "stochastic_volatility": "Stoch. volatility",
    "bnn": "Bayesian NN",
    "hmm": "Semi-sup. HMM",
    "ucbadmit": "UCBadmit GLMM",
    "hsgp": "HSGP",
}

FRAMEWORKS = ("effppl", "numpyro", "oryx", "handwritten")
"""Frameworks timed per model. `handwritten` is the plain-JAX baseline every ratio is taken against;
Oryx runs in its own environment and is normalised by a hand-written baseline timed there."""

FRAMEWORK_LABELS = {"handwritten": "HW", "effppl": "EX", "oryx": "OX", "numpyro": "NP"}

NUTS_FRAMEWORKS = ("effppl", "numpyro")


class Mode(NamedTuple):
    """Sizes of one benchmark run.

    **Fields:**
    - `name`: `"quick"` or `"paper"`; also the `size` passed to each model's `make_data`.
    - `num_evals`: log-density-and-gradient evaluations inside one jitted `fori_loop` (count).
    - `num_points`: random unconstrained points at which all log densities must agree (count).
    - `trace_repeats`: repeats of the tracing/elimination timing, each of a fresh function
      object (JAX caches traces by function identity); the median is reported, so the first,
      cold trace (which also warms caches shared by all frameworks) does not decide it.
    - `compile_repeats`: repeats of the XLA compile timing; the median is reported.
    - `run_repeats`: repeats of the evaluation loop; the minimum is reported (a loop run once in
      under `benchmarks._measure.SHORT_LOOP_S` seconds runs a second time: its cold run carries
      one-time costs).
    - `num_warmup`, `num_samples`, `num_chains`, `max_tree_depth`: NUTS settings, the same for
      every framework (a small `max_tree_depth` bounds the quick mode's time on hard posteriors,
      at most 2**depth - 1 leapfrog steps per draw).
    """

    name: str
    num_evals: int
    num_points: int
    trace_repeats: int
    compile_repeats: int
    run_repeats: int
    num_warmup: int
    num_samples: int
    num_chains: int
    max_tree_depth: int


MODES = {
    "quick": Mode(name="quick", num_evals=200, num_points=3, trace_repeats=3, compile_repeats=1,
                  run_repeats=3,
                  num_warmup=100, num_samples=100, num_chains=2, max_tree_depth=6),
    "paper": Mode(name="paper", num_evals=100_000, num_points=3, trace_repeats=5,
                  compile_repeats=3, run_repeats=1,
                  num_warmup=500, num_samples=1000, num_chains=4, max_tree_depth=10),
}

RTOL = 1e-6
"""Relative tolerance (float64) for the agreement of log densities and gradients."""

POSTERIOR_Z = 4.0
"""Posterior means agree when they differ by less than this many Monte Carlo standard errors."""


class RunConfig(NamedTuple):
    """Everything one `benchmarks.run` call does.

    **Fields:**
    - `mode`: a `Mode`.
    - `models`: model names, a subset of `MODEL_NAMES`.
    - `frameworks`: framework names, a subset of `FRAMEWORKS`.
    - `nuts`: whether to run the end-to-end NUTS comparison.
    - `seed`: seed of the data, the agreement points and the NUTS keys.
    - `oryx_venv`: where the pinned Oryx environment lives (created on first use).
    - `progress`: whether to show a tqdm progress bar (on stderr).
    """

    mode: Mode
    models: tuple
    frameworks: tuple
    nuts: bool
    seed: int
    oryx_venv: str
    progress: bool


def make_mode(name, num_evals=None):
    """The `Mode` called `name`, with `num_evals` overridden when given.

    **Raises:** `BenchmarkConfigError` for an unknown name or a non-positive `num_evals`.
    """
    if name not in MODES:
        raise BenchmarkConfigError(
            f"`benchmarks` expected a mode in {sorted(MODES)}, but got {name!r}. "
            "Pass --quick or --paper.")
    mode = MODES[name]
    if num_evals is not None:
        mode = mode._replace(num_evals=check_count("num_evals", num_evals, minimum=1))
    return mode


def check_count(name, value, minimum):
    """`value` as an int; raises `BenchmarkConfigError` naming `name` unless it is an integer (not a
    bool, float or string) of at least `minimum`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise BenchmarkConfigError(
            f"`benchmarks({name}=...)` expected an integer >= {minimum}, but got {value!r}.")
    return int(value)


def check_names(kind, names, allowed, allow_none=False):
    """`names` (a list of names, or one comma-separated string) as a tuple in the order of
    `allowed`; raises `BenchmarkConfigError` on an unknown name, or on none unless `allow_none`."""
    if isinstance(names, str):
        names = names.split(",")
    names = tuple(n.strip() for n in names if n.strip())
    unknown = [n for n in names if n not in allowed]
    if unknown or not (names or allow_none):
        raise BenchmarkConfigError(
            f"`benchmarks(--{kind} ...)` expected {'' if allow_none else 'at least one of '}the "
            f"names {list(allowed)}, but got {unknown or list(names)}. Separate several with "
            "commas.")
    return tuple(n for n in allowed if n in names)
