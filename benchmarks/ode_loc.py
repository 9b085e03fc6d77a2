"""Lines of code of the integration loop: `effppl.ode` against Diffrax's `_integrate.py`.

A line counts when it holds code: not blank, not only a comment, not part of a docstring. The
same concerns are counted on both sides:

* Diffrax 0.7.2: `loop` (the integration loop), its state records `State` and `SaveState`, and
  the helpers only it uses (`_save`, `_clip_to_end`, `_maybe_static`, `_inner_buffers`,
  `_outer_buffers`); without the code of events (the branches taken when `event` is given:
  `effppl.ode` has no events), and without the `steps`/`dense` saving modes (`effppl.ode` saves at
  given times only, or the final state).
* effppl: `effppl/ode/_loop.py` (the loop; its imports not counted, as Diffrax's are not), and in `_concerns.py` the operations and the handlers
  of the concerns the loop threads in Diffrax (state, saving, statistics); not the Runge-Kutta
  step or the PID controller, which Diffrax keeps outside its loop too (`_solver/`,
  `_step_size_controller/`).

Run: `python -m benchmarks.ode_loc`.
"""

from __future__ import annotations

import ast
import io
import pathlib
import tokenize

_CODE = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
         tokenize.ENCODING, tokenize.ENDMARKER}


def _code_lines(source: str) -> set[int]:
    """Line numbers holding code (tokens other than comments and layout), less docstrings."""
    lines = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type not in _CODE:
            lines.update(range(tok.start[0], tok.end[0] + 1))
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and body \
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            lines -= set(range(body[0].lineno, body[0].end_lineno + 1))
    return lines


def _span(node):
    return set(range(node.lineno, node.end_lineno + 1))


def _top(tree, names):
    return [n for n in tree.body if getattr(n, "name", None) in names
            or (isinstance(n, ast.Assign) and any(getattr(t, "id", None) in names
                                                  for t in n.targets))]


def _mentions(node, *words):
    return any(isinstance(n, ast.Name) and n.id in words or
               isinstance(n, ast.Attribute) and n.attr in words for n in ast.walk(node))


def diffrax_lines() -> int:
    import diffrax
    path = pathlib.Path(diffrax.__file__).parent / "_integrate.py"
    source = path.read_text()
    tree = ast.parse(source)
    keep = set()
    for node in _top(tree, {"loop", "State", "SaveState", "_save", "_clip_to_end",
                            "_maybe_static", "_inner_buffers", "_outer_buffers"}):
        keep |= _span(node)
    drop = set()
    loop = _top(tree, {"loop"})[0]
    for node in ast.walk(loop):
        if isinstance(node, ast.If) and _mentions(node.test, "event", "root_finder"):
            # `if event is None: <no events> else: <events>`: the events' branch
            no_event = any(isinstance(n, ast.Constant) and n.value is None
                           for n in ast.walk(node.test))
            branch = node.orelse if no_event else node.body
            for stmt in branch:
                drop |= _span(stmt)
        if isinstance(node, ast.If) and _mentions(node.test, "dense"):
            drop |= _span(node)  # saving dense output (`SaveAt(dense=True)`)
        if isinstance(node, ast.FunctionDef) and node.name in ("save_steps", "unsave"):
            drop |= _span(node)  # saving every n-th step; removing saves after an event
    for node in _top(tree, {"State"}):
        assert isinstance(node, ast.ClassDef)
        for stmt in node.body:
            if isinstance(stmt, ast.AnnAssign) and _mentions(stmt, "event_tprev", "event_tnext",
                                                              "event_dense_info", "event_values",
                                                              "event_mask"):
                drop |= _span(stmt)
    return len((_code_lines(source) & keep) - drop)


def effppl_lines() -> int:
    folder = pathlib.Path(__file__).resolve().parents[1] / "effppl" / "ode"
    loop = (folder / "_loop.py").read_text()
    imports = set()  # not counted on either side (Diffrax's counted code holds none)
    for node in ast.parse(loop).body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            imports |= _span(node)
    total = len(_code_lines(loop) - imports)
    source = (folder / "_concerns.py").read_text()
    keep = set()
    for node in _top(ast.parse(source), {"Like", "State", "BoundState", "CLOCK", "SOLUTION",
                                         "_stages_like", "try_step", "adapt", "save", "count",
                                         "WINDOW", "saver", "statistics"}):
        keep |= _span(node)
    return total + len(_code_lines(source) & keep)


def counts() -> dict:
    ours, theirs = effppl_lines(), diffrax_lines()
    return {"effppl": ours, "diffrax": theirs, "change": ours / theirs - 1}


if __name__ == "__main__":
    c = counts()
    print(f"integration loop, lines of code: effppl {c['effppl']}, Diffrax {c['diffrax']} "
          f"({c['change']:+.0%})")
