"""The docstring examples run and print what they show: every module of `effppl.effects`, and
the PPL's public entry modules. Equivalent to `python -m pytest --doctest-modules effppl/effects`
(which also passes), but inside the suite's test command and in float32, JAX's default, which the
examples assume (the suite's conftest turns on float64 for numeric oracles)."""

import doctest
import importlib
import pkgutil

import jax
import pytest

import effppl.effects

MODULES = sorted(
    ["effppl.effects"]
    + [m.name for m in pkgutil.walk_packages(effppl.effects.__path__, "effppl.effects.")]
    + ["effppl.primitives", "effppl._mutable", "effppl.handlers",
       "effppl.handlers.enumeration._enum", "effppl.handlers._infer_config",
       "effppl.handlers.enumeration._markov", "effppl.optim", "tests.effects.reference"])


def test_the_modules_hold_examples():
    counts = {name: len([t for t in doctest.DocTestFinder().find(importlib.import_module(name))
                         if t.examples]) for name in MODULES}
    for name in ("effppl.effects._handle", "effppl.effects._api", "effppl.effects._scope",
                 "tests.effects.reference", "effppl.primitives", "effppl.handlers",
                 "effppl.handlers.enumeration._enum"):
        assert counts[name] >= 1, name


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    x64 = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", False)
    try:
        failed, _ = doctest.testmod(importlib.import_module(name), verbose=False, report=True,
                                    optionflags=doctest.ELLIPSIS)
    finally:
        jax.config.update("jax_enable_x64", x64)
    assert failed == 0, f"{failed} docstring example(s) of {name} failed (printed above)"
