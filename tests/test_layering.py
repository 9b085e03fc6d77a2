"""The package's floors and doors.

Floors, lowest first (DESIGN.md): effects -> _runtime -> primitives -> handlers -> infer, ode,
distributed -> the package's top level. No import runs up a floor, and no imports form a circle.
Between packages there is one door each: the PPL reaches the effects library only through its
public API and `effppl.effects.internal`; everything above the handlers reaches the PPL only
through `effppl.handlers` and `effppl.handlers.internal`; JAX internals (`jax._src`) are imported
only by the compatibility modules. Every import counts, also one deferred into a function.
"""

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1] / "effppl"

# Each module's floor, by the first rule its path (relative to `effppl/`) matches.
FLOORS = (
    ("_errors.py", 0),
    ("effects/", 1),
    ("_runtime.py", 2), ("_keys.py", 2), ("distributions.py", 2), ("_pytree_order.py", 2),
    ("_cache_env.py", 2),
    ("_site_base.py", 3), ("_mutable.py", 3), ("primitives.py", 3),
    ("_site_fns.py", 4),
    ("handlers/", 5),
    ("infer/", 6), ("optim.py", 6), ("ode/", 6), ("distributed.py", 6), ("contrib/", 6),
    ("diagnostics.py", 6),
    ("__init__.py", 7),
)
# What the floors above the handlers may import of the PPL (the handlers' door).
PPL_DOORS = {"effppl.handlers", "effppl.handlers.internal"}
PPL_CORE = ("effppl._site_base", "effppl.primitives", "effppl._mutable", "effppl._site_fns", "effppl._runtime",
            "effppl.handlers")


def _module(path):
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _floor(path):
    rel = path.relative_to(ROOT).as_posix()
    return next(floor for prefix, floor in FLOORS if rel.startswith(prefix) or rel == prefix)


def _imports(path):
    """`(line, target module)` for every import of an effppl module in `path`, at any depth:
    `from a import b` names module `a.b` when that is a module, else `a`."""
    modules = {_module(p): p for p in _sources()}
    package = _module(path) if path.name == "__init__.py" else _module(path).rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "effppl":
                    yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "effppl":
                continue
            subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in modules]
            yield from ((node.lineno, s) for s in subs)
            if len(subs) < len(node.names):
                yield node.lineno, target


def _graph():
    modules = {_module(p): p for p in _sources()}
    return modules, {name: {t for _, t in _imports(path) if t in modules and t != name}
                     for name, path in modules.items()}


def _sources(folder=ROOT):
    return sorted(folder.rglob("*.py"))


def test_ppl_imports_no_private_effects_module():
    private = re.compile(r"(from\s+\.*(effppl\.)?effects\.?\s*import\s+_\w+"
                         r"|from\s+\.*(effppl\.)?effects\._\w+\s+import)")
    offenders = [f"{path.relative_to(ROOT)}: {m.group(0)}"
                 for path in _sources() if "effects" not in path.relative_to(ROOT).parts[:1]
                 for m in private.finditer(path.read_text())]
    assert offenders == []


def test_jax_internals_only_in_compat_modules():
    allowed = {ROOT / "effects" / "_compat.py"}
    offenders = [str(path.relative_to(ROOT)) for path in _sources()
                 if path not in allowed and "jax._src" in path.read_text()]
    assert offenders == []


def test_no_import_runs_up_a_floor():
    modules, graph = _graph()
    offenders = [f"{modules[a].relative_to(ROOT)} (floor {_floor(modules[a])}) imports {b} "
                 f"(floor {_floor(modules[b])})"
                 for a, targets in graph.items() for b in targets
                 if _floor(modules[b]) > _floor(modules[a])]
    assert offenders == []


def test_imports_form_no_circle():
    """Tarjan's strongly connected components of the module graph: each must be one module."""
    _, graph = _graph()
    index, low, stack, on, circles = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert circles == []


def test_above_the_handlers_the_ppl_is_reached_through_its_door():
    offenders = [f"{path.relative_to(ROOT)}:{line}: {target}"
                 for path in _sources() if _floor(path) > 5 and path.name != "__init__.py"
                 or path.relative_to(ROOT).parts[0] in ("infer", "contrib", "ode")
                 for line, target in _imports(path)
                 if target.startswith(PPL_CORE) and target not in PPL_DOORS]
    assert offenders == []


def test_no_private_handlers_module_is_imported_from_outside_handlers():
    offenders = [f"{path.relative_to(ROOT)}:{line}: {target}"
                 for path in _sources() if path.relative_to(ROOT).parts[0] != "handlers"
                 for line, target in _imports(path)
                 if target.startswith("effppl.handlers.") and target not in PPL_DOORS]
    assert offenders == []


def test_ode_uses_the_effects_library_only():
    """`effppl.ode` builds on `effppl.effects` (its public API and `internal`) and the package's
    errors; the PPL uses the solver, never the reverse."""
    allowed = ("effppl._errors", "effppl.effects", "effppl.effects.internal")
    offenders = [f"{path.relative_to(ROOT)}:{line}: {target}"
                 for path in _sources(ROOT / "ode") for line, target in _imports(path)
                 if target not in allowed and not f"{target}.".startswith("effppl.ode.")]
    assert offenders == []


def test_blackjax_is_reached_through_public_names_only():
    """No blackjax module or name whose path has a part starting with `_` (dunders such as
    `__version__` aside): blackjax's contract is its modules' public names; a private one may
    change in any release."""
    offenders = []
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("blackjax"):
                names = (node.module or "").split(".") + [a.name for a in node.names]
            elif isinstance(node, ast.Import):
                names = [p for a in node.names if a.name.startswith("blackjax")
                         for p in a.name.split(".")]
            elif isinstance(node, ast.Attribute) and ast.unparse(node).startswith("blackjax."):
                names = ast.unparse(node).split(".")
            else:
                continue
            if any(n.startswith("_") and not n.startswith("__") for n in names):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert offenders == []
