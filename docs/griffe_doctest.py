"""A griffe extension for effppl's API pages: doctest examples in docstrings render as code.

effppl's docstrings are Markdown with doctest examples (`>>> ...` lines, their continuations and
expected output, up to a blank line) that `tests/test_doctests.py` runs. Markdown would render
those lines as a paragraph; this wraps each such run of lines in a `pycon` fence at its own
indentation, and drops `# doctest: ...` directives from what the reader sees.
"""

from __future__ import annotations

import re

import griffe

_DIRECTIVE = re.compile(r"\s*#\s*doctest:.*$")


_SECTION = re.compile(r"^\s*[A-Z][\w ]*:\s*$")  # "Example:" alone: a google section/admonition


def fence_doctests(text: str) -> str:
    """`text` with every run of doctest lines (from a `>>>` line to the next blank line, outside
    an existing fence) wrapped in a `pycon` fence. A run indented under a paragraph (which
    Markdown would take for an indented code block) is moved to the paragraph's indentation;
    under a section header (`Example:` alone on its line) it keeps its indentation."""
    lines, out, i, in_fence = text.split("\n"), [], 0, False
    while i < len(lines):
        line = lines[i]
        stripped = line.lstrip()
        if stripped.startswith("```"):
            in_fence = not in_fence
        if in_fence or not stripped.startswith(">>>"):
            out.append(line)
            i += 1
            continue
        indent = line[: len(line) - len(stripped)]
        before = next((b for b in reversed(out) if b.strip()), "")
        target = indent if _SECTION.match(before) else before[: len(before) - len(before.lstrip())]
        if len(target) > len(indent):
            target = indent
        if out and out[-1].strip() and not _SECTION.match(out[-1]):
            out.append("")
        out.append(f"{target}```pycon")
        while i < len(lines) and lines[i].strip():
            out.append(target + _DIRECTIVE.sub("", lines[i])[len(indent):])
            i += 1
        out.append(f"{target}```")
    return "\n".join(out)


class DoctestFences(griffe.Extension):
    """Wrap doctest examples of every docstring in `pycon` fences."""

    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None and ">>>" in obj.docstring.value:
            obj.docstring.value = fence_doctests(obj.docstring.value)
