"""The Oryx baseline: its pinned virtual environment and the worker subprocess that runs there.

Oryx 0.2.9 only imports on old JAX, so it cannot share a process with effppl. On first use the
harness creates `benchmarks/.oryx-venv/` (git-ignored) with `python -m venv` and installs `PINS`
with pip; later runs reuse it. Each model is then run by `benchmarks/_oryx_worker.py` in that
environment: data, static values and the agreement points go in through an `.npz` file, the model
by name on the command line; timings come back as JSON on stdout and the values and gradients at the
points in a second `.npz`. The worker times a hand-written log density in the same environment, so
Oryx's ratio is taken against a baseline on the same JAX. When the environment cannot be made (no
network, pip fails) the harness says so and marks every Oryx row skipped, never zero.
"""

import fcntl
import json
import os
import pathlib
import subprocess
import sys
import tempfile

import numpy as np

from ._errors import OryxEnvironmentError

PINS = (
    "jax==0.4.38",
    "jaxlib==0.4.38",
    "oryx==0.2.9",
    "tensorflow-probability==0.25.0",
    "numpy>=1.26,<2.5",
    "scipy>=1.11,<1.18",
)
"""What the Oryx environment installs (Python 3.11; known to work)."""

DEFAULT_VENV = pathlib.Path(__file__).resolve().parent / ".oryx-venv"
WORKER = pathlib.Path(__file__).resolve().parent / "_oryx_worker.py"
_READY = "effppl-oryx-ready.json"


def _python(venv):
    return pathlib.Path(venv) / "bin" / "python"


def _is_ready(venv):
    marker = pathlib.Path(venv) / _READY
    if not marker.exists() or not _python(venv).exists():
        return False
    try:
        return json.loads(marker.read_text()).get("pins") == list(PINS)
    except (OSError, ValueError):
        return False


def ensure_env(venv=DEFAULT_VENV, log=None):
    """Path of the Oryx environment's Python, creating the environment on first use.

    **Arguments:**
    - `venv`: the environment's folder (default `benchmarks/.oryx-venv/`).
    - `log`: optional `print`-like callable told about the (minutes-long) creation.

    **Returns:** `pathlib.Path` of its `bin/python`.

    **Raises:** `OryxEnvironmentError` when `python -m venv` or `pip install` fails; the message
    carries pip's last lines.
    """
    venv = pathlib.Path(venv)
    venv.mkdir(parents=True, exist_ok=True)
    with open(venv / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _is_ready(venv):
            return _python(venv)
        if log is not None:
            log(f"creating the Oryx environment in {venv} (once; pip install {' '.join(PINS)})")
        steps = [
            [sys.executable, "-m", "venv", str(venv)],
            [str(_python(venv)), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
             *PINS],
            [str(_python(venv)), "-c", "import oryx.core.ppl, jax; print(jax.__version__)"],
        ]
        for step in steps:
            proc = subprocess.run(step, capture_output=True, text=True)
            if proc.returncode != 0:
                tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-8:])
                raise OryxEnvironmentError(
                    f"`benchmarks` could not create the Oryx environment in {venv}: "
                    f"`{' '.join(step[:4])} ...` exited with {proc.returncode}:\n{tail}\n"
                    "Oryx rows are skipped. Check that the package registry is reachable, or "
                    "run without oryx (--frameworks effppl,numpyro,handwritten).")
        (venv / _READY).write_text(json.dumps({"pins": list(PINS), "python": sys.version}))
        return _python(venv)


def _call(python, argv, timeout):
    with tempfile.TemporaryDirectory() as cwd:  # nothing of this checkout is importable there
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "JAX_ENABLE_X64")}
        proc = subprocess.run([str(python), str(WORKER), *argv], capture_output=True, text=True,
                              cwd=cwd, env=env, timeout=timeout)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-12:])
        raise OryxEnvironmentError(
            f"the Oryx worker `{' '.join(argv[:3])}` exited with {proc.returncode}:\n{tail}")
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise OryxEnvironmentError(
            f"the Oryx worker `{' '.join(argv[:3])}` printed no JSON; stderr:\n{proc.stderr[-2000:]}")
    return json.loads(lines[-1])


def run_model(python, model, arrays, static, points, mode, x64=False, timeout=None):
    """Times Oryx and the hand-written baseline on `model` in the Oryx environment.

    **Arguments:**
    - `python`: from `ensure_env`.
    - `model`: a model name the worker knows.
    - `arrays`, `static`: the model's data (`benchmarks._targets.ModelData` fields).
    - `points`: list of dicts site -> float64 array (the agreement points; the first is timed).
    - `mode`: a `benchmarks._config.Mode`.
    - `x64`: whether the main run times in float64.
    - `timeout`: seconds before the worker is killed (`None`: no limit).

    **Returns:** dict with `versions`, `device`, and per framework (`"oryx"`, `"handwritten"`)
    either the timing figures (those of `benchmarks._measure.prepare` and
    `time_side_by_side`, the two loops timed round-robin) plus `points`, a list of `(value, grad)`
    in float64, or `{"status": "error", "reason": ...}`.
    """
    with tempfile.TemporaryDirectory() as tmp:
        src, out = pathlib.Path(tmp) / "in.npz", pathlib.Path(tmp) / "out.npz"
        payload = {f"data/{k}": v for k, v in arrays.items()}
        payload["static.json"] = np.array(json.dumps(static, default=_jsonable))
        for i, point in enumerate(points):
            payload.update({f"point{i}/{k}": np.asarray(v, np.float64) for k, v in point.items()})
        np.savez(src, **payload)
        argv = ["bench", "--model", model, "--npz", str(src), "--out", str(out),
                "--num-evals", str(mode.num_evals), "--trace-repeats", str(mode.trace_repeats),
                "--compile-repeats", str(mode.compile_repeats),
                "--run-repeats", str(mode.run_repeats), "--num-points", str(len(points))]
        if x64:
            argv.append("--x64")
        result = _call(python, argv, timeout)
        if out.exists():
            with np.load(out) as grads:
                for framework, figures in result["frameworks"].items():
                    if "values" not in figures:
                        continue
                    figures["points"] = [
                        (figures["values"][i],
                         {k.split("/", 2)[2]: grads[k] for k in grads.files
                          if k.startswith(f"{framework}/{i}/")})
                        for i in range(len(points))]
    return result


def expressiveness(python, timeout=600):
    """Runs the worker's control-flow checks: does Oryx's joint log prob see latents in cond/scan?"""
    return _call(python, ["expressiveness"], timeout)


def _jsonable(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return repr(value)
