"""One benchmark run: every model × framework, then NUTS, into one JSON-able dict.

The order of work per model: make the data, draw the agreement points, time each framework of the
main environment (effppl, NumPyro, hand-written), then Oryx and its own hand-written baseline in the
Oryx environment, check that all log densities and gradients agree, then run NUTS with effppl and
NumPyro. A framework that cannot run is recorded as `skipped` with its reason; one that fails is
recorded as `error` with the exception; neither is ever reported as a zero time.
"""

import datetime
import os
import platform
import sys
import traceback

import jax
import jax.numpy as jnp
import numpy as np

from . import _measure, _nuts, _oryx
from ._config import NUTS_FRAMEWORKS, RTOL
from ._errors import AgreementError, OryxEnvironmentError
from ._report import verdict
from ._targets import Skipped, load_model, make_target, split_data

SCHEMA = "effppl-benchmarks/1"
MAIN_FRAMEWORKS = ("effppl", "numpyro", "handwritten")


def _progress(config, total):
    if not config.progress:
        return None
    from tqdm.auto import tqdm
    return tqdm(total=total, desc="benchmarks", unit="step", file=sys.stderr)


def _step(bar, text):
    if bar is not None:
        bar.set_postfix_str(text, refresh=True)


def _done(bar):
    if bar is not None:
        bar.update(1)


def _skipped(reason):
    return {"status": "skipped", "reason": reason}


def _error(err):
    """The row of a framework that raised `err` (call inside its `except` block)."""
    return _error_of(err, traceback.format_exc(limit=6))


def _error_of(err, trace=None):
    trace = trace or "".join(traceback.format_exception(err, limit=6))
    return {"status": "error", "reason": f"{type(err).__name__}: {err}", "traceback": trace}


def run(config, modules=None, log=print, on_model=None):
    """Runs the benchmark described by `config` and returns every figure as a JSON-able dict.

    **Arguments:**
    - `config`: a `benchmarks.RunConfig`.
    - `modules`: optional dict name -> model module, used instead of `models.<name>` (tests).
    - `log`: `print`-like callable for plain messages (Oryx environment creation, skips).
    - `on_model`: optional callable given the partial results after each model (e.g. to write
      them to disk, so an hours-long paper run that is stopped keeps its finished models); the
      partial results have no `"verdict"` or `"finished"` yet.

    **Returns:** the results dict (schema `"effppl-benchmarks/1"`; see `benchmarks/README.md`).
    Agreement failures are recorded, not raised: call `check(results)` to raise them.
    """
    modules = modules or {}
    names = tuple(modules) if modules and not config.models else config.models
    results = _header(config)
    oryx_python = _oryx_env(config, results, log)
    steps_per_model = len(config.frameworks) + (len(NUTS_FRAMEWORKS) if config.nuts else 0)
    bar = _progress(config, steps_per_model * len(names) + (1 if oryx_python else 0))
    if oryx_python is not None:
        _step(bar, "oryx expressiveness")
        try:
            results["oryx"]["expressiveness"] = _oryx.expressiveness(oryx_python)
            results["versions"]["oryx_env"] = results["oryx"]["expressiveness"]["versions"]
        except (OryxEnvironmentError, OSError) as err:
            results["oryx"]["expressiveness"] = _error(err)
        _done(bar)
    try:
        for name in names:
            module = modules.get(name) or load_model(name)
            results["models"][name] = _run_model(name, module, config, oryx_python, bar)
            if on_model is not None:
                on_model(results)
    finally:
        if bar is not None:
            bar.close()
    results["verdict"] = verdict(results)
    results["finished"] = _now()
    return results


def check(results):
    """Raises `AgreementError` naming every model whose frameworks disagree (log density or
    gradient beyond `rtol` in float64 at the same unconstrained points)."""
    bad = []
    for name, model in results["models"].items():
        for framework, agreement in model.get("agreement", {}).get("frameworks", {}).items():
            if not agreement["ok"]:
                bad.append(f"{name}/{framework} (value rel. err. "
                           f"{agreement['max_rel_err_value']:.2e}, gradient "
                           f"{agreement['max_rel_err_grad']:.2e}, against "
                           f"{agreement['reference']})")
    if bad:
        raise AgreementError(
            f"`benchmarks` expected every log density to agree with the hand-written one to "
            f"rtol={results['config']['rtol']} in float64, but these disagree: {'; '.join(bad)}. "
            "One of the model's implementations computes a different density; compare them site "
            "by site.")


def _now():
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def _versions():
    import importlib.metadata as md
    out = {"python": platform.python_version()}
    for dist in ("jax", "jaxlib", "numpyro", "blackjax", "arviz", "effppl", "matplotlib"):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            out[dist] = None
    import effppl
    out["effppl"] = effppl.__version__  # also when run from a checkout that is not installed
    out["effppl_commit"] = _git_commit()
    return out


def _git_commit():
    """The checkout's commit (with `+dirty` for uncommitted changes), or `None` outside git."""
    import subprocess
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        commit = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True,
                                text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return commit + ("+dirty" if dirty.strip() else "")


def _cpu():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _header(config):
    mode = config.mode
    return {
        "schema": SCHEMA,
        "started": _now(),
        "mode": mode.name,
        "config": {**mode._asdict(), "rtol": RTOL, "models": list(config.models),
                   "frameworks": list(config.frameworks), "nuts": config.nuts},
        "seeds": {"data": config.seed, "points": config.seed, "nuts": config.seed},
        "machine": {"platform": platform.platform(), "cpu": _cpu(), "cpu_count": os.cpu_count()},
        "devices": [{"platform": d.platform, "kind": d.device_kind, "id": d.id}
                    for d in jax.devices()],
        "backend": jax.default_backend(),
        "dtype": str(jnp.result_type(float)),
        "versions": _versions(),
        "oryx": {"status": "skipped", "reason": "oryx not among --frameworks"},
        "models": {},
    }


def _oryx_env(config, results, log):
    if "oryx" not in config.frameworks:
        return None
    try:
        python = _oryx.ensure_env(config.oryx_venv, log=log)
    except (OryxEnvironmentError, OSError) as err:
        reason = f"the Oryx environment could not be made: {err}"
        log(f"Oryx: skipped. {reason}")
        results["oryx"] = _skipped(reason)
        return None
    results["oryx"] = {"status": "ok", "venv": str(config.oryx_venv), "pins": list(_oryx.PINS)}
    return python


def _run_model(name, module, config, oryx_python, bar):
    mode = config.mode
    out = {"frameworks": {}}
    if isinstance(module, Skipped):
        for fw in config.frameworks:
            out["frameworks"][fw] = _skipped(module.reason)
        out["status"] = "skipped"
        out["reason"] = module.reason
        return out
    try:
        args, kwargs = module.make_data(mode.name, seed=config.seed)
        data = split_data(args, kwargs)
        shapes = module.latent_shapes(*args, **kwargs)
    except Exception as err:  # e.g. a data file missing offline: this model only
        row = _error(err)
        out.update(status="error", reason=row["reason"])
        out["frameworks"] = {fw: row for fw in config.frameworks}
        for _ in range(len(config.frameworks) + (len(NUTS_FRAMEWORKS) if config.nuts else 0)):
            _done(bar)
        return out
    points = _measure.random_points(shapes, mode.num_points, config.seed)
    out.update(status="ok", size=getattr(module, "SIZES", {}).get(mode.name),
               data_shapes={k: list(np.shape(v)) for k, v in data.arrays.items()},
               latent_shapes={k: list(v) for k, v in shapes.items()},
               num_latent=int(sum(np.prod(v, dtype=int) for v in shapes.values())))
    evaluated, prepared = {}, {}
    for fw in config.frameworks:
        _step(bar, f"{name}/{fw}")
        if fw == "oryx":
            _oryx_rows(name, data, points, config, oryx_python, out, evaluated)
        else:
            out["frameworks"][fw] = _prepare_row(fw, module, data, points, mode, evaluated,
                                                  prepared)
        _done(bar)
    _step(bar, f"{name}/timing")
    for fw, timing in _measure.time_side_by_side(prepared, mode.run_repeats).items():
        if "error" in timing:
            out["frameworks"][fw] = _error_of(timing["error"])
        else:
            out["frameworks"][fw].update(timing)
    out["agreement"] = _agreement(evaluated)
    if config.nuts:
        out["nuts"] = _nuts_rows(name, module, args, kwargs, config, bar)
    return out


def _prepare_row(fw, module, data, points, mode, evaluated, prepared):
    """Traces and compiles one main-environment framework (its loop goes into `prepared`, timed
    later beside the others) and evaluates it at the agreement points."""
    target = make_target(fw, module, data)
    if isinstance(target, Skipped):
        return _skipped(target.reason)
    params = {k: jnp.asarray(v) for k, v in points[0].items()}
    try:
        item = _measure.prepare(target, params, data.arrays, mode)
        evaluated[fw] = _measure.evaluate_points(target, points, data.arrays)
    except Exception as err:  # one framework failing must not hide the others' figures
        return _error(err)
    prepared[fw] = item
    return {"status": "ok", "env": "main", **item.figures}


def _oryx_rows(name, data, points, config, oryx_python, out, evaluated):
    if oryx_python is None:
        reason = "the Oryx environment is not available (see the `oryx` entry)"
        out["frameworks"]["oryx"] = _skipped(reason)
        out["oryx_handwritten"] = _skipped(reason)
        return
    try:
        result = _oryx.run_model(oryx_python, name, data.arrays, data.static, points,
                                 config.mode, x64=jax.config.jax_enable_x64)
    except (OryxEnvironmentError, OSError) as err:
        out["frameworks"]["oryx"] = _error(err)
        out["oryx_handwritten"] = _error(err)
        return
    rows = {}
    for fw, figures in result["frameworks"].items():
        row = {k: v for k, v in figures.items() if k != "points"}
        row.update(env="oryx", device=result["device"], versions=result["versions"],
                   device_mismatch=result["device"]["platform"] != jax.default_backend())
        rows[fw] = row
        if "points" in figures:
            evaluated[f"oryx:{fw}"] = figures["points"]
    out["frameworks"]["oryx"] = rows.get("oryx", _skipped("the worker returned no Oryx row"))
    out["oryx_handwritten"] = rows.get("handwritten", _skipped("no baseline row"))


def _agreement(evaluated):
    reference = "handwritten" if "handwritten" in evaluated else next(iter(evaluated), None)
    out = {"reference": reference, "rtol": RTOL, "frameworks": {}}
    if reference is None:
        out["ok"] = None
        return out
    for fw, values in evaluated.items():
        if fw == reference:
            continue
        row = _measure.compare(evaluated[reference], values, RTOL)
        row["reference"] = reference
        out["frameworks"][fw] = row
    # nothing compared (fewer than two frameworks ran) is not agreement
    out["ok"] = all(row["ok"] for row in out["frameworks"].values()) if out["frameworks"] else None
    out["compared"] = sorted(evaluated)
    return out


def _nuts_rows(name, module, args, kwargs, config, bar):
    out, samples = {}, {}
    for fw in NUTS_FRAMEWORKS:
        _step(bar, f"{name}/NUTS {fw}")
        if fw not in config.frameworks:
            out[fw] = _skipped(f"{fw} not among --frameworks")
        else:
            try:
                got = _nuts.run_nuts(fw, module, args, kwargs, config.mode, config.seed)
            except Exception as err:  # recorded; the other framework still runs
                out[fw] = _error(err)
            else:
                if isinstance(got, Skipped):
                    out[fw] = _skipped(got.reason)
                else:
                    out[fw] = {"status": "ok", **got[0]}
                    samples[fw] = got[1]
        _done(bar)
    if len(samples) == 2:
        min_ess = min(out[fw]["min_bulk_ess"] for fw in samples)
        out["posterior_agreement"] = _nuts.compare_posteriors(
            samples["effppl"], samples["numpyro"], min_ess=min_ess)
    else:
        out["posterior_agreement"] = _skipped("needs both effppl and numpyro NUTS runs")
    return out
