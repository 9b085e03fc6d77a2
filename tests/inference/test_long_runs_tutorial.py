"""docs/tutorials/long-runs.md runs as written: its code blocks, top to bottom, in one namespace
(the checks it makes are its own asserts: resumed draws equal uninterrupted ones)."""

import pathlib
import re
import warnings

import pytest

from effppl.infer import InterruptedWarning

TUTORIAL = pathlib.Path(__file__).resolve().parents[2] / "docs" / "tutorials" / "long-runs.md"


@pytest.mark.slow
def test_long_runs_tutorial_runs_and_its_resumed_run_is_exact():
    ns: dict = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for code in re.findall(r"```python\n(.*?)```", TUTORIAL.read_text(), flags=re.S):
            exec(compile(code, str(TUTORIAL), "exec"), ns)
    assert any(issubclass(w.category, InterruptedWarning) for w in caught)
    assert 400 <= ns["partial"].shape[1] < 1000
    assert ns["draws"].shape == (2, 1000)
