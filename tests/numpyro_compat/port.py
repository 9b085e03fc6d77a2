"""Run NumPyro's own handler and inference-utility tests against effppl, imports swapped.

    python -m tests.numpyro_compat.port --numpyro PATH [--set handlers|wide] [--commit 0b935d48]
        [-n 2] [-k EXPR] [--timeout S] [--as-numpyro] [--json OUT] [--reference NUMPYRO.json]

`PATH` is a clone of https://github.com/pyro-ppl/numpyro (a work tree, or a bare git directory).
The script reads NumPyro's test files at `--commit` (`--set handlers`, the default:
`test/test_handlers.py` and `test/infer/test_infer_util.py`; `--set wide`: the SVI, autoguide,
reparameterisation, enumeration, control-flow and MCMC files in `SETS`), rewrites their imports
to effppl's (below), writes them into a temporary folder (NumPyro's files are never copied into
this repository), runs them with pytest, and prints the count of passing tests, leaving out the
tests listed in `UNFAIR` (tests of NumPyro internals; see README.md).

`--as-numpyro` runs the files unchanged, on NumPyro itself; with `--json` it writes which tests
pass there, and `--reference` that file then counts effppl's passes among the tests that pass on
NumPyro (a test NumPyro fails, skips or times out on is not counted). `--timeout` stops a test
after that many seconds (a failure), on both sides.

Each file runs in its own pytest process, stopped after `--file-timeout` seconds; every test's
outcome is logged as it ends, so a file that is stopped or crashes keeps the outcomes it had
(its remaining tests count as "not run", a failure on effppl's side; on NumPyro's side they are
not among the reference passes). `--json` is rewritten after each file.

The rewrite: `import numpyro` becomes `import effppl as numpyro` (so `numpyro.optim.Adam` is
`effppl.optim.Adam`), and `import numpyro.handlers as handlers` effppl's; `numpyro.handlers`, `numpyro.infer[.sub]`, `numpyro.primitives` become
effppl's; `numpyro.contrib.X` becomes `effppl.contrib.X` where effppl has that module
(`control_flow`, `funsor`); `from numpyro.X import` for `numpyro.distributions`, `numpyro.util`
and the rest of `numpyro.contrib` stay NumPyro's (effppl re-uses them). A name effppl lacks is
bound to a placeholder that raises `NotImplementedError` when used, so only the tests that need
it fail, not the whole file at import.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

SETS = {
    "handlers": ("test/test_handlers.py", "test/infer/test_infer_util.py"),
    "wide": ("test/infer/test_svi.py", "test/infer/test_autoguide.py", "test/infer/test_reparam.py",
             "test/contrib/test_enum_elbo.py", "test/contrib/test_control_flow.py",
             "test/contrib/test_funsor.py", "test/contrib/test_infer_discrete.py",
             "test/infer/test_mcmc.py", "test/infer/test_hmc_gibbs.py"),
}
FILES = SETS["handlers"]
COMMIT = "0b935d48"

# test id prefix (file::name) -> why it is not a fair test of effppl
UNFAIR = {
    "test_handlers.py::test_messenger_fn_invalid":
        "checks NumPyro's `Messenger` base class rejecting a non-callable (effppl's handlers are "
        "not Messengers; effppl raises its own TypeError, tested in tests/handlers)",
    "test_handlers.py::test_collapse_beta_binomial":
        "`numpyro.handlers.collapse` is funsor-based conjugate collapsing, a NumPyro contrib "
        "feature outside the issue",
    "test_handlers.py::test_collapse_beta_bernoulli": "as above (`collapse`)",
    "test_handlers.py::test_collapse_beta_binomial_plate": "as above (`collapse`; xfail upstream)",
    "test_handlers.py::test_subsample_fn":
        "tests `numpyro.primitives._subsample_fn`, a private function (effppl's subsampled "
        "plates call it, and give NumPyro's indices: tests/handlers/test_context_handlers.py)",
    "test_handlers.py::test_subsample_substitute":
        "asserts the private message field `kwargs['rng_key']` of a trace entry (the values it "
        "checks before that pass)",
    "test_handlers.py::test_sites_have_unique_names":
        "expects NumPyro's exception type (`AssertionError`); effppl rejects the duplicate name "
        "too, with a `SiteError` naming both places",
    "test_handlers.py::test_lift":
        "asserts object identity (`lifted_tr[name]['fn'] is prior[name]`): effppl's trace "
        "holds an equal distribution rebuilt from the compiled trace's arrays, never the very "
        "object (with `is` replaced by equal type and parameters the test passes)",
    "test_infer_util.py::test_predictive_with_guide":
        "asserts NumPyro's random stream: after 5000 Adam(0.1) steps the last iterate of the "
        "Beta guide is noisy, and the test's bound (mean 0.8 +- 0.05; the exact posterior "
        "predictive mean is 0.75) holds for some keys only. NumPyro itself gives 0.733 with "
        "`random.key(2)` for the SVI run (0.808 with its key 1); effppl gives 0.732 with key 1 "
        "and 0.814 with key 3, the same spread",
    "test_infer_util.py::test_log_likelihood_flax_nn":
        "needs flax and `numpyro.contrib.module.random_flax_module` (NumPyro's own module "
        "wrapper; flax is not installed)",
}

_OURS = {"numpyro": "effppl", "numpyro.handlers": "effppl.handlers",
         "numpyro.infer": "effppl.infer", "numpyro.primitives": "effppl.primitives"}

SHIM = '''
import importlib as _importlib
import jax as _jax


class _Missing:
    """A name effppl lacks: using it raises, failing only the tests that need it."""

    def __init__(self, where):
        self._where = where

    def __call__(self, *a, **k):  # called at import (a parametrize list): fail when used
        return _Missing(f"{self._where}(...)")

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise NotImplementedError(f"effppl has no `{self._where}`")

    def __iter__(self):
        raise NotImplementedError(f"effppl has no `{self._where}`")


def _port_attr(get, where):
    # a module-level `x = numpyro.a.b` (a private NumPyro name effppl lacks): fail when used
    try:
        return get()
    except AttributeError:
        return _Missing(where)


def _port_import(module, names):
    try:
        mod = _importlib.import_module(module)
    except ImportError:
        mod = None
    out = {}
    for name in names:
        value = getattr(mod, name, None) if mod is not None else None
        if value is None and mod is not None:
            try:
                value = _importlib.import_module(f"{module}.{name}")
            except ImportError:
                value = None
        out[name] = value if value is not None else _Missing(f"{module}.{name}")
    return out


'''


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ImportError:
        return False


def _target(module: str) -> str | None:
    """effppl's module for a NumPyro module, or None to keep NumPyro's: `numpyro.contrib.X`
    becomes `effppl.contrib.X` where effppl has that module (else NumPyro's stays)."""
    if module.startswith("numpyro.contrib"):
        ours = "effppl" + module[len("numpyro"):]
        return ours if _has_module(ours) else None
    for theirs, ours in _OURS.items():
        if module == theirs:
            return ours
        if module.startswith(theirs + ".") and theirs != "numpyro":
            return ours + module[len(theirs):]
    return None


def _numpyro_attr(node) -> bool:
    """Whether `node` is an attribute chain `numpyro.a.b...`."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name) and node.id == "numpyro"


def rewrite(source: str) -> str:
    """NumPyro's test source with its imports swapped for effppl's (see the module docstring)."""
    lines = source.splitlines(keepends=True)
    edits = []
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("numpyro"):
            target = _target(node.module)
            if target is None:
                continue
            pad = re.match(r"\s*", lines[node.lineno - 1]).group(0)
            names = [a.name for a in node.names]
            new = [f"{pad}_got = _port_import({target!r}, {names!r})"]
            new += [f"{pad}{a.asname or a.name} = _got[{a.name!r}]" for a in node.names]
            edits.append((node.lineno, node.end_lineno, "\n".join(new) + "\n"))
        elif isinstance(node, ast.Assign) and node in tree.body and _numpyro_attr(node.value):
            expr = ast.get_source_segment(source, node.value)
            start = lines[node.value.lineno - 1]
            if node.value.lineno == node.value.end_lineno:
                col, end = node.value.col_offset, node.value.end_col_offset
                edits.append((node.value.lineno, node.value.lineno,
                              start[:col] + f"_port_attr(lambda: {expr}, {expr!r})" + start[end:]))
        elif isinstance(node, ast.Import):
            for a in node.names:
                pad = re.match(r"\s*", lines[node.lineno - 1]).group(0)
                if a.name == "numpyro":
                    edits.append((node.lineno, node.end_lineno,
                                  f"{pad}import effppl as {a.asname or 'numpyro'}\n"))
                elif a.name.startswith("numpyro.") and a.asname and _target(a.name):
                    # `import numpyro.handlers as handlers`
                    edits.append((node.lineno, node.end_lineno,
                                  f"{pad}import {_target(a.name)} as {a.asname}\n"))
    for start, end, text in sorted(edits, reverse=True):
        lines[start - 1:end] = [text]
    body = "".join(lines)
    # the shim goes after `from __future__` imports and the module docstring
    return SHIM + "\n" + body


def read(numpyro: Path, commit: str, path: str) -> str:
    git_dir = numpyro / ".git" if (numpyro / ".git").exists() else numpyro
    return subprocess.run(["git", "--git-dir", str(git_dir), "show", f"{commit}:{path}"],
                          check=True, capture_output=True, text=True).stdout


CONFTEST = '''
import json
import os
import signal

import jax
import numpyro.util
import pytest


class PortTimeout(Exception):
    pass


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    seconds = int(os.environ.get("NUMPYRO_PORT_TIMEOUT", "0"))
    if not seconds:
        return (yield)

    def stop(signum, frame):
        raise PortTimeout(f"more than {seconds} s")
    old = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        return (yield)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def pytest_runtest_setup(item):
    numpyro.util.set_rng_seed(0)  # as NumPyro's own conftest does


def pytest_runtest_logreport(report):
    # each phase's outcome, appended as it ends: a stopped or crashed run keeps what it had
    log = os.environ.get("NUMPYRO_PORT_LOG")
    if log:
        outcome = "skipped" if hasattr(report, "wasxfail") else report.outcome
        with open(log, "a") as f:
            f.write(json.dumps([report.nodeid, report.when, outcome]) + "\\n")


def pytest_collection_modifyitems(config, items):
    # leave out the unfair tests by exact name (pytest's --deselect matches prefixes:
    # `test_lift` would take `test_lift_memoize` with it)
    unfair = set(os.environ.get("NUMPYRO_PORT_UNFAIR", "").split("\\n")) - {""}
    drop = [item for item in items if item.nodeid.split("[")[0] in unfair]
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = [item for item in items if item not in drop]
'''


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--numpyro", required=True, type=Path, help="a clone of pyro-ppl/numpyro")
    parser.add_argument("--commit", default=COMMIT)
    parser.add_argument("--set", default="handlers", choices=sorted(SETS), help="which files")
    parser.add_argument("--only", default=None,
                        help="comma-separated file names of the set to run (e.g. test_reparam.py)")
    parser.add_argument("-n", default="0", help="pytest-xdist workers")
    parser.add_argument("-k", default=None, help="pytest -k expression")
    parser.add_argument("--keep", type=Path, default=None, help="write the ported files here")
    parser.add_argument("--timeout", type=int, default=0, help="seconds per test (0: none)")
    parser.add_argument("--file-timeout", type=int, default=0,
                        help="seconds per file (0: none); its remaining tests count as not run")
    parser.add_argument("--as-numpyro", action="store_true", help="run NumPyro's files unchanged")
    parser.add_argument("--json", type=Path, default=None, help="write each test's outcome here")
    parser.add_argument("--reference", type=Path, default=None,
                        help="a --json file of an --as-numpyro run: count among its passes")
    args = parser.parse_args(argv)
    files = SETS[args.set]
    if args.only:
        files = tuple(f for f in files if Path(f).name in args.only.split(","))
    out = args.keep or Path(tempfile.mkdtemp(prefix="numpyro_port_"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "conftest.py").write_text(CONFTEST)
    for path in files:
        source = read(args.numpyro, args.commit, path)
        (out / Path(path).name).write_text(source if args.as_numpyro else rewrite(source))
    log = out / "outcomes.jsonl"
    log.unlink(missing_ok=True)
    env = dict(os.environ, NUMPYRO_PORT_UNFAIR="\n".join(UNFAIR), NUMPYRO_PORT_LOG=str(log),
               NUMPYRO_PORT_TIMEOUT=str(args.timeout), PYTHONPATH=os.pathsep.join(
                   [str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")]))
    stopped = []
    for path in files:
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               "--rootdir", str(out), *(["-n", args.n] if args.n != "0" else []),
               *(["-k", args.k] if args.k else []), str(out / Path(path).name)]
        if not run_stopping(cmd, env, out, args.file_timeout or None):
            stopped.append(Path(path).name)
        counts = summarize(log)
        if args.json is not None:
            args.json.write_text(json.dumps(counts["outcomes"], indent=0, sort_keys=True))
    who = "NumPyro's own tests, unchanged" if args.as_numpyro else "NumPyro tests ported"
    print(f"\n{who} ({args.set}, {args.commit}): {counts['passed']} of {counts['total']} pass "
          f"({counts['failed']} fail, {counts['skipped']} skipped; {len(UNFAIR)} left out as "
          f"unfair); files in {out}")
    if stopped:
        print(f"Stopped by --file-timeout or a crash, before all their tests ran: "
              f"{', '.join(stopped)}")
    if args.reference is not None:
        theirs = json.loads(args.reference.read_text())
        fair = [t for t, outcome in theirs.items() if outcome == "passed"]
        ours = sum(counts["outcomes"].get(t) == "passed" for t in fair)
        reached = [t for t in fair if t in counts["outcomes"]]
        print(f"Of the {len(fair)} tests passing on NumPyro: {ours} pass on effppl "
              f"({100 * ours / max(len(fair), 1):.0f}%; {len(fair) - len(reached)} of them not "
              f"run on effppl, counted as failures)")
    return counts


def run_stopping(cmd, env, cwd, seconds) -> bool:
    """Run `cmd`; stop its whole process group after `seconds`. Whether it ended by itself."""
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, start_new_session=True)
    try:
        proc.wait(timeout=seconds)
        return proc.returncode in (0, 1, 5)  # all passed, some failed, none collected
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return False


def summarize(log: Path) -> dict:
    """Counts and each test's outcome from the phase log: failed if any phase failed, skipped
    (or xfailed) if any was skipped, passed if its call passed."""
    phases: dict[str, dict[str, str]] = {}
    if log.exists():
        for line in log.read_text().splitlines():
            try:
                nodeid, when, outcome = json.loads(line)
            except ValueError:  # a line cut short by a killed process
                continue
            phases.setdefault(nodeid, {})[when] = outcome
    counts = {"passed": 0, "failed": 0, "skipped": 0, "total": 0, "outcomes": {}}
    for test, seen in phases.items():
        if "failed" in seen.values():
            outcome = "failed"
        elif "skipped" in seen.values():
            outcome = "skipped"
        elif seen.get("call") == "passed":
            outcome = "passed"
        else:  # stopped during its call
            outcome = "failed"
        counts["outcomes"][test] = outcome
        counts[outcome] += 1
        counts["total"] += outcome != "skipped"
    return counts

if __name__ == "__main__":
    main()
