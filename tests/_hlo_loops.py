"""Per-step work on loop-length arrays in a compiled program's optimised HLO text.

A program whose loop (an XLA `while`) copies, pads, broadcasts or recomputes an array as long as
the loop at every step costs time quadratic in the loop's length. `per_step_work(text, n)` lists
the instructions, inside a `while` body (and the computations it calls), whose result has at
least `n` elements and that are not in-place updates (`dynamic-update-slice`, `scatter`, or a
fusion whose root is one) or views (parameters, tuple elements, bitcasts). Choose `n` (the loop's
length) larger than every array of the model that is not stacked along the loop.
"""

from __future__ import annotations

import math
import re

_HEADER = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s+\(.*\)\s*->\s*.*\{\s*$")
_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(\S+?)\s+([\w\-]+)\((.*)$")
_ARRAY = re.compile(r"^[a-z]+\d*\[([\d,]*)\]")
_CALLED = re.compile(r"(?:calls|to_apply|body|condition)=%?([\w.\-]+)")
_BRANCHES = re.compile(r"branch_computations=\{([^}]*)\}")
_VIEWS = {"parameter", "get-tuple-element", "bitcast", "tuple", "constant"}
_IN_PLACE = {"dynamic-update-slice", "scatter"}


def computations(text: str) -> dict:
    """Computation name -> its instruction lines."""
    comps, name, lines = {}, None, []
    for line in text.splitlines():
        if name is None:
            m = _HEADER.match(line)
            if m:
                name, lines = m.group(1), []
        elif line.strip() == "}":
            comps[name], name = lines, None
        else:
            lines.append(line)
    return comps


def _called(line: str) -> list:
    out = _CALLED.findall(line)
    for group in _BRANCHES.findall(line):
        out += [c.strip().lstrip("%") for c in group.split(",")]
    return out


def _elements(shape: str) -> int:
    m = _ARRAY.match(shape)
    if m is None:  # a tuple or a token
        return 0
    return math.prod(int(d) for d in m.group(1).split(",") if d)


def per_step_work(text: str, n: int) -> list:
    """`(computation, op, shape, instruction)` for each instruction of at least `n` elements
    run at every step of a loop of at least `n // 2` steps and not an in-place update or a
    view."""
    comps = computations(text)

    def root_op(comp):
        for line in comps.get(comp, ()):
            if line.lstrip().startswith("ROOT"):
                m = _INSTR.match(line)
                return m and m.group(3)
        return None

    found, seen = [], set()

    def visit(comp):
        if comp in seen:
            return
        seen.add(comp)
        for line in comps.get(comp, ()):
            m = _INSTR.match(line)
            if m is None:
                continue
            _, shape, op, _ = m.groups()
            called = _called(line)
            if op != "fusion":
                for c in called:
                    visit(c)
            if op == "while" or op in _VIEWS or op in _IN_PLACE or _elements(shape) < n:
                continue
            if op == "fusion" and called and root_op(called[0]) in _IN_PLACE:
                continue
            found.append((comp, op, shape, line.strip()[:200]))

    for body in _loop_bodies(comps, n):
        visit(body)
    return found


def _loop_bodies(comps, n):
    """The bodies of the `while` loops that run at least `n // 2` steps, or an unknown number
    (JAX's random bits come from short loops of their own, which do not count)."""
    for lines in comps.values():
        for line in lines:
            m = re.search(r"\swhile\(.*\bbody=%?([\w.\-]+)", line)
            if m is None:
                continue
            trips = re.search(r'"known_trip_count":\{"n":"(\d+)"\}', line)
            if trips is None or int(trips.group(1)) >= n // 2:
                yield m.group(1)


def loop_count(text: str) -> int:
    """How many `while` loops the program has (a guard that a check saw the loops at all)."""
    return sum(1 for lines in computations(text).values() for line in lines
               if re.search(r"\swhile\(", line))
