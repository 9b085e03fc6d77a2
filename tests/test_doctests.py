"""The docstring examples run and print what they show: every module of `effppl.effects`, the
PPL's public entry modules, and the docstring of every public name (found through the public
namespaces, as the API reference finds them: `tests/test_docs.py`). Equivalent to `python -m
pytest --doctest-modules effppl/effects` (which also passes), but inside the suite's test command
and in float32, JAX's default, which the examples assume (the suite's conftest turns on float64
for numeric oracles)."""

import doctest
import importlib
import pathlib
import pkgutil

import jax
import pytest

import effppl
import effppl.effects

from .test_docs import public_names

MODULES = sorted(
    ["effppl.effects"]
    + [m.name for m in pkgutil.walk_packages(effppl.effects.__path__, "effppl.effects.")]
    + ["effppl.primitives", "effppl._mutable", "effppl.handlers",
       "effppl.handlers.enumeration._enum", "effppl.handlers._infer_config",
       "effppl.handlers.enumeration._markov", "effppl.optim", "tests.effects.reference",
       "effppl.infer.svi.autoguide._list", "effppl.ode._solve"])


def test_the_modules_hold_examples():
    counts = {name: len([t for t in doctest.DocTestFinder().find(importlib.import_module(name))
                         if t.examples]) for name in MODULES}
    for name in ("effppl.effects._handle", "effppl.effects._api", "effppl.effects._scope",
                 "tests.effects.reference", "effppl.primitives", "effppl.handlers",
                 "effppl.handlers.enumeration._enum"):
        assert counts[name] >= 1, name


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    with jax.enable_x64(False):
        failed, _ = doctest.testmod(importlib.import_module(name), verbose=False, report=True,
                                    optionflags=doctest.ELLIPSIS)
    assert failed == 0, f"{failed} docstring example(s) of {name} failed (printed above)"


def _public_examples():
    """{public path: object} for each public effppl object with a docstring example that the
    module tests above do not already run (each object once)."""
    found, seen = {}, set()
    for namespace, name, obj in public_names():
        module = getattr(obj, "__module__", None) or ""
        if id(obj) in seen or not module.startswith("effppl") or module in MODULES:
            continue
        seen.add(id(obj))
        if any(t.examples for t in doctest.DocTestFinder().find(obj, name)):
            found[f"{namespace}.{name}"] = obj
    return found


PUBLIC = _public_examples()


def test_the_inference_entry_points_hold_examples():
    for name in ("effppl.infer.MCMC", "effppl.infer.NUTS", "effppl.infer.HMC",
                 "effppl.infer.Predictive", "effppl.infer.SVI", "effppl.infer.reparam.NeuTraReparam"):
        assert name in PUBLIC, name


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_public_docstring_examples(name):
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    with jax.enable_x64(False):
        for test in doctest.DocTestFinder().find(PUBLIC[name], name, globs={}):
            runner.run(test)
    assert runner.failures == 0, f"{runner.failures} docstring example(s) of {name} failed"


def test_no_example_is_skipped_without_a_reason():
    """`# doctest: +SKIP` is allowed only with its reason after it on the same line."""
    root = pathlib.Path(effppl.__file__).parent
    bare = [f"{path.relative_to(root)}:{i}" for path in sorted(root.rglob("*.py"))
            for i, line in enumerate(path.read_text().splitlines(), 1)
            if "+SKIP" in line and not line.split("+SKIP", 1)[1].strip()]
    assert not bare, f"doctest examples skipped without a reason: {bare}"
