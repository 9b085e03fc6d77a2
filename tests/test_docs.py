"""The documentation site covers the public API: every public name has a docstring and appears in
the API reference (`docs/api/*.md`), found by its public import path; the tutorials' runner splits
pages into the blocks it runs. The site itself is built, with its tutorials run, by
`mkdocs build --strict` (`.ci/run`)."""

import importlib
import importlib.util
import inspect
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

# The public namespaces: each lists its public names in `__all__`. A namespace that is not there
# yet (the ODE solver, several devices) is checked once it lands.
NAMESPACES = ["effppl", "effppl.handlers", "effppl.infer", "effppl.infer.autoguide",
              "effppl.infer.reparam", "effppl.infer.util", "effppl.effects", "effppl.diagnostics",
              "effppl.optim", "effppl.contrib.control_flow", "effppl.contrib.funsor"]
OPTIONAL = ["effppl.ode", "effppl.distributed"]


def _namespaces():
    found = []
    for name in NAMESPACES + OPTIONAL:
        try:
            found.append(importlib.import_module(name))
        except ModuleNotFoundError as error:
            if name not in OPTIONAL or error.name != name:
                raise
    return found


def public_names():
    """(namespace, name, object) for every public name but submodules and `__version__`."""
    rows = []
    for module in _namespaces():
        assert hasattr(module, "__all__"), f"{module.__name__} has no __all__"
        for name in module.__all__:
            obj = getattr(module, name)
            if not inspect.ismodule(obj) and not name.startswith("__"):
                rows.append((module.__name__, name, obj))
    return rows


def _resolve(path):
    """The object at a dotted public path: the longest importable module, then attributes."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for part in parts[i:]:
            obj = getattr(obj, part)
        return obj
    raise ImportError(path)


def documented():
    """{id(object): path} of every `::: path` in the API reference pages."""
    found = {}
    for page in sorted((DOCS / "api").glob("*.md")):
        for path in re.findall(r"^::: ([\w.]+)\s*$", page.read_text(), flags=re.M):
            found[id(_resolve(path))] = path
    return found


def test_every_public_name_has_a_docstring():
    missing = [f"{ns}.{name}" for ns, name, obj in public_names()
               if not (inspect.getdoc(obj) or "").strip()]
    assert not missing, f"public names without a docstring: {missing}"


def test_every_public_name_is_in_the_api_reference():
    docs = documented()
    missing = [f"{ns}.{name}" for ns, name, obj in public_names() if id(obj) not in docs]
    assert not missing, ("public names missing from the API reference: add a `::: <public path>` "
                         f"line for each to a page of docs/api/: {missing}")


def test_the_api_reference_uses_public_paths_only():
    paths = []
    for page in sorted((DOCS / "api").glob("*.md")):
        paths += re.findall(r"^::: ([\w.]+)\s*$", page.read_text(), flags=re.M)
    assert len(paths) > 100
    private = [p for p in paths if any(part.startswith("_") for part in p.split("."))]
    assert not private, f"the API reference names private paths: {private}"


def _hooks():
    spec = importlib.util.spec_from_file_location("effppl_docs_hooks", DOCS / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_runner_runs_python_blocks_only_and_inserts_output_and_figures():
    pytest.importorskip("matplotlib")
    hooks = _hooks()
    page = ("# T\n\n```python\nx = 2\nprint(x + 1)\n```\n\n```bash\nexit 1\n```\n\n"
            "```python\nimport matplotlib.pyplot as plt\nplt.plot([x, 0])\n```\n\n"
            '```python title="shown"\nraise SystemExit\n```\n'
            "```python check\nassert x == 2\n```\nend\n")
    assert len(hooks.python_blocks(page)) == 3
    out = hooks.run_markdown(page, "t.md")
    assert "```text\n3\n```" in out and "assert x == 2" not in out and out.endswith("end\n")
    assert out.count('<img class="effppl-figure"') == 1 and "data:image/png;base64," in out
    with pytest.raises(hooks.ExecutionError, match=r"(?s)t\.md: python block 1 .*1 / 0.*ZeroDivisionError"):
        hooks.run_markdown("```python\n1 / 0\n```\n", "t.md")
    with pytest.raises(hooks.ExecutionError, match="AssertionError"):
        hooks.run_markdown("```python\nx = 1\n```\n```python check\nassert x == 2\n```\n", "t.md")


def test_every_tutorial_is_in_the_nav_or_added_by_the_hook():
    tutorials = sorted(p.name for p in (DOCS / "tutorials").glob("*.md"))
    assert {"first-model.md", "time-series.md", "discrete-latents.md", "svi.md",
            "porting-numpyro.md", "effects.md", "performance.md"} <= set(tutorials)
    config = {"docs_dir": str(DOCS), "nav": [{"Tutorials": ["tutorials/first-model.md"]}]}
    listed = _hooks().on_config(config)["nav"][0]["Tutorials"]
    assert sorted(pathlib.Path(p).name for p in listed) == tutorials
