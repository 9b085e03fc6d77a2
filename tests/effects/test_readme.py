"""`effppl/effects/README.md` runs as written: its Python blocks give the values its text states,
its printed jaxprs are what the code prints, and its step traces are what the translator does.

The step traces come from `recording()`, which wraps the translator's rule table and its return
function (`_translate.RULES`, `_translate.apply_k`). When those internals change, adapt
`recording()` and regenerate the README's trace blocks: `python -m tests.effects.test_readme`
prints them.
"""

import contextlib
import pathlib
import re

import jax
import numpy as np
import pytest

from effppl.effects import _translate

from ..test_readme import _float32

README = pathlib.Path(__file__).resolve().parents[2] / "effppl" / "effects" / "README.md"


def _blocks(lang):
    return re.findall(rf"```{lang}\n(.*?)```", README.read_text(), flags=re.S)


@contextlib.contextmanager
def recording():
    """Record one line per translation rule applied and per return to the continuation list:
    the handler context `H` (frame names and their parameters, labelled `p0, p1, ...` in order of
    appearance) and the continuation list `K`; `->` lines give the context a rule hands back."""
    lines, seen, depth = [], [], [0]

    def label(x):
        for i, y in enumerate(seen):
            if y is x:
                return f"p{i}"
        seen.append(x)
        return f"p{len(seen) - 1}"

    def show_h(H):
        return "[" + ", ".join(
            f"{f.spec.name}({', '.join(label(p) for p in f.params)})" for f in H) + "]"

    def show_k(K):
        return "[" + ", ".join("k" if isinstance(c, _translate.Cont) else repr(c) for c in K) + "]"

    def note(what, H, K):
        lines.append(f"{'  ' * depth[0]}{what:<12} H={show_h(H)} K={show_k(K)}")

    def traced_rule(prim, rule):
        def traced(eqn, ins, H, K, resume, rest):
            op = eqn.params.get("op")
            note(str(prim) + (f" {op.name}" if op is not None else ""), H, K)
            depth[0] += 1
            try:
                result = rule(eqn, ins, H, K, resume, rest)
            finally:
                depth[0] -= 1
            if not isinstance(result, _translate.Done):
                lines.append(f"{'  ' * depth[0]}{'':<12} -> H={show_h(result[1])}")
            return result
        return traced

    apply_k, rules = _translate.apply_k, dict(_translate.RULES)

    def traced_apply_k(outs, H, K):
        note("return", H, K)
        return apply_k(outs, H, K)

    _translate.apply_k = traced_apply_k
    _translate.RULES.update({p: traced_rule(p, r) for p, r in rules.items()})
    try:
        yield lines
    finally:
        _translate.RULES.clear()
        _translate.RULES.update(rules)
        _translate.apply_k = apply_k


@pytest.fixture(scope="module")
def ns():
    """The README's Python blocks, run one after the other in one namespace, in float32."""
    namespace = {}
    with _float32():
        for code in _blocks("python"):
            exec(compile(code, str(README), "exec"), namespace)
    return namespace


def _traces(ns):
    out = []
    with _float32():
        with recording() as lines:
            ns["fx"].make_jaxpr(ns["state"])(ns["xs"])
        out.append("\n".join(lines))
        with recording() as lines:
            ns["fx"].make_jaxpr(ns["catch"])(ns["m"], ns["n"])
        out.append("\n".join(lines))
    return out


def _text(start):
    """The README's text block that begins with `start`."""
    found = [b for b in _blocks("text") if b.startswith(start)]
    assert len(found) == 1, start
    return found[0].rstrip("\n")


def test_the_values_the_text_states(ns):
    assert float(ns["total"]) == 6.0
    np.testing.assert_array_equal(ns["running"], [0.0, 1.0, 3.0, 6.0])
    assert int(ns["caught"]) == 0 and int(ns["divided"]) == 42 // 5 + 1
    assert [int(s) for s in ns["sums"]] == [6, -1]


# The JAX version the README's printed jaxprs come from (CI's). Another JAX may print the same
# program differently (line breaks, parameters): there, only the equations' primitives are compared.
PRINTED_WITH = "0.10.2"


def _primitives(text):
    """The primitive of each equation in a printed jaxpr, in order."""
    found = re.findall(r"(?:= |^\s*)([a-z_]+)(?=[\[ ])", text, flags=re.M)
    return [p for p in found if p not in ("in", "let")]


def _is_subsequence(part, whole):
    rest = iter(whole)
    return all(any(w == p for w in rest) for p in part)


def test_the_jaxpr_before_is_printed_as_shown_up_to_trimmed_lines(ns):
    shown = _text("{ lambda a:f32[]; b:f32[4]. let\n    c:f32[] d:f32[4] = handle[")
    printed = str(ns["before"])
    assert _primitives(shown) == ["handle", "scan", "perform", "add", "perform", "perform"]
    assert _is_subsequence(_primitives(shown), _primitives(printed))
    if jax.__version__ == PRINTED_WITH:  # each shown line appears, in order (`...`: dropped ones)
        lines = [line.strip() for line in shown.splitlines() if line.strip() != "..."]
        assert _is_subsequence(lines, [line.strip() for line in printed.splitlines()])


def test_the_jaxprs_after_are_printed_in_full(ns):
    scan = "{ lambda a:f32[]; b:f32[4]. let\n    c:f32[] d:f32[4] = scan"
    for printed, start in ((str(ns["after"]), scan),
                           (str(ns["after_catch"]), "{ lambda ; a:i32[] b:i32[]. let")):
        shown = _text(start)
        assert _primitives(shown) == _primitives(printed)
        if jax.__version__ == PRINTED_WITH:
            assert printed == shown
    assert _primitives(_text("{ lambda ; a:i32[] b:i32[]. let")) == [
        "eq", "convert_element_type", "clamp", "cond", "div", "add"]


def test_the_loop_rewrite_leaves_a_scan_and_a_cond_on_the_flag(ns):
    prims = [e.primitive.name for e in ns["rewritten"].jaxpr.eqns]
    assert "scan" in prims and "cond" in prims[prims.index("scan"):]
    assert not ns["rewritten"].effects


def test_the_step_traces_are_what_the_translator_does(ns):
    state_trace, catch_trace = _traces(ns)
    assert state_trace == _text("handle       H=[] K=[BARRIER]\n  scan")
    assert catch_trace == _text("handle       H=[] K=[BARRIER]\n  cond")


def test_every_name_in_the_rule_table_exists_in_the_code():
    """The table's first column names functions and markers of the translator (and files of
    this package); a rename must update it."""
    table = README.read_text().split("## The rules and the paper")[1]
    cells = [row.split("|")[1] for row in table.splitlines() if row.startswith("| `")]
    names = {n.split(".")[-1] for cell in cells for n in re.findall(r"`([\w.]+)`", cell)}
    files = {n for cell in cells for n in re.findall(r"`([\w/]+\.py)`", cell)}
    sources = "".join(p.read_text() for p in README.parent.rglob("*.py"))
    assert len(cells) > 20 and len(names) > 20
    for name in names - {"py"}:
        assert re.search(rf"^\s*(def|class) {name}\b|^{name} = |\b{name} = |\b{name}\b.*_p\b",
                         sources, flags=re.M), name
    for name in files:  # a file of this package, or of the repository (the tests' oracle)
        assert (README.parent / name).is_file() or (README.parents[2] / name).is_file(), name


def test_the_rule_table_covers_every_registered_rule():
    import effppl.effects  # noqa: F401  (registers the rules)
    table = README.read_text().split("## The rules and the paper")[1]
    for prim, rule in _translate.RULES.items():
        assert f"`{rule.__qualname__.split('.')[0]}`" in table, (prim, rule.__qualname__)


if __name__ == "__main__":
    namespace = {}
    with _float32():
        for code in _blocks("python"):
            exec(compile(code, str(README), "exec"), namespace)
    print(str(namespace["before"]), str(namespace["after"]), str(namespace["after_catch"]),
          *_traces(namespace), sep="\n\n")
