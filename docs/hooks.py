"""MkDocs hooks of effppl's site: run the tutorials' code at build time, and list every tutorial.

A tutorial is plain Markdown: every fenced block whose info string is exactly `python` runs, in
order, in one namespace per page (as a reader runs them in one session), in JAX's default float32.
What a block prints (and the warnings effppl gives) goes into the page below it as a `text` block,
and every matplotlib figure left open goes in as a PNG image (then closed). A block that raises
stops the build with the page, the block's first line and the traceback. Blocks with any other info
string (`python title="..."`, `pycon`, `bash`, ...) are shown, not run. A block whose info string is
`python check` runs in the same namespace and is *not* shown: the page's assertions on its own
results (the values its text states), so a build that passes has checked them.

Pages under `tutorials/` run; any other page runs when its front matter says `execute: true`.
A page under `tutorials/` that `mkdocs.yml`'s nav does not list is appended to the nav's
*Tutorials* section, so a new tutorial is one new file. `EFFPPL_DOCS_EXECUTE=0` shows the code
without running it (a quick preview).

`run_markdown(text, name)` is the same executor without MkDocs; `tests/test_docs.py` uses the
block splitter.
"""

from __future__ import annotations

import base64
import contextlib
import io
import linecache
import os
import re
import sys
import time
import traceback
import types
import warnings
from pathlib import Path

FENCE = re.compile(r"^```python( check)?[ \t]*\n(.*?)^```[ \t]*\n?", re.S | re.M)


def python_blocks(text: str) -> list[str]:
    """The code of every block of `text` that runs (info string `python` or `python check`)."""
    return [m.group(2) for m in FENCE.finditer(text)]


def _figures() -> list[str]:
    """Every open matplotlib figure as an `<img>` tag holding its PNG; the figures are closed."""
    if "matplotlib.pyplot" not in sys.modules:
        return []
    import matplotlib.pyplot as plt

    tags = []
    for num in plt.get_fignums():
        fig = plt.figure(num)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
        data = base64.b64encode(buf.getvalue()).decode("ascii")
        tags.append(f'<img class="effppl-figure" alt="figure {num}" '
                    f'src="data:image/png;base64,{data}">')
    plt.close("all")
    return tags


@contextlib.contextmanager
def _page_settings():
    """JAX's float32 default and a non-interactive matplotlib for one page; those and the
    environment variables are restored after it."""
    import jax
    import matplotlib

    matplotlib.use("Agg")
    x64, environ = jax.config.jax_enable_x64, dict(os.environ)
    jax.config.update("jax_enable_x64", False)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", x64)
        os.environ.clear()
        os.environ.update(environ)
        if "matplotlib.pyplot" in sys.modules:
            sys.modules["matplotlib.pyplot"].close("all")


class ExecutionError(RuntimeError):
    """A block of a page raised: names the page, the block and the traceback."""


def run_markdown(text: str, name: str) -> str:
    """Run the `python` blocks of `text` in one fresh namespace; return `text` with each block's
    printed output and figures inserted after it. Raises `ExecutionError` if a block raises."""
    module = types.ModuleType(re.sub(r"\W", "_", f"docs_{name}"))
    sys.modules[module.__name__] = module  # dataclasses and pickling look modules up by name
    namespace = module.__dict__
    pieces, end = [], 0
    with _page_settings():
        for i, match in enumerate(FENCE.finditer(text)):
            hidden, code = bool(match.group(1)), match.group(2)
            out = io.StringIO()
            start = time.perf_counter()
            filename = f"<{name}: block {i + 1}>"
            linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
            try:
                with contextlib.redirect_stdout(out), warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("default")
                    exec(compile(code, filename, "exec"), namespace)
            except BaseException as error:  # noqa: BLE001  (reported with the page and block)
                raise ExecutionError(
                    f"{name}: python block {i + 1} (starting `{code.splitlines()[0]}`) raised:\n"
                    + "".join(traceback.format_exception(error))) from None
            seconds = time.perf_counter() - start
            if seconds > float(os.environ.get("EFFPPL_DOCS_SLOW", "20")):
                print(f"docs: {name} block {i + 1} took {seconds:.0f} s", file=sys.stderr)
            pieces.append(text[end:match.start()] if hidden else text[end:match.end()])
            end = match.end()
            for w in caught:  # effppl's warnings go into the page, as a notebook shows them
                line = f"{w.category.__name__}: {w.message}"
                if w.category.__module__.startswith("effppl"):
                    out.write(line + "\n")
                else:
                    print(f"docs: {name} block {i + 1}: {line}", file=sys.stderr)
            printed = out.getvalue().rstrip()
            if printed:
                pieces.append(f"\n\n```text\n{printed}\n```\n")
            for tag in _figures():
                pieces.append(f"\n\n{tag}\n")
    pieces.append(text[end:])
    return "".join(pieces)


def _executable(page) -> bool:
    return page.file.src_uri.startswith("tutorials/") or bool(page.meta.get("execute"))


# --- MkDocs events ---------------------------------------------------------------------------

def on_files(files, config, **kwargs):
    """Serve the benchmarks' current charts (`benchmarks/results/*.png`, written by the
    benchmarks) at `benchmarks/results/` of the site, so pages show them without a copy."""
    from mkdocs.structure.files import File

    root = Path(config["config_file_path"]).parent
    for png in sorted((root / "benchmarks" / "results").glob("*.png")):
        files.append(File(f"benchmarks/results/{png.name}", str(root), config["site_dir"],
                          config["use_directory_urls"]))
    return files


def on_config(config, **kwargs):
    """Append every `tutorials/*.md` that the nav leaves out to its *Tutorials* section."""
    docs = Path(config["docs_dir"])
    for entry in config["nav"] or []:
        if isinstance(entry, dict) and "Tutorials" in entry:
            listed = {p if isinstance(p, str) else next(iter(p.values()))
                      for p in entry["Tutorials"]}
            for path in sorted(docs.glob("tutorials/*.md")):
                uri = path.relative_to(docs).as_posix()
                if uri not in listed:
                    entry["Tutorials"].append(uri)
    return config


def on_page_markdown(markdown, page, config, files, **kwargs):
    if not _executable(page):
        return markdown
    if os.environ.get("EFFPPL_DOCS_EXECUTE", "1") == "0":  # shown, not run; checks left out
        return FENCE.sub(lambda m: "" if m.group(1) else m.group(0), markdown)
    from mkdocs.exceptions import PluginError

    start = time.perf_counter()
    try:
        markdown = run_markdown(markdown, page.file.src_uri)
    except ExecutionError as error:
        raise PluginError(str(error)) from None
    print(f"docs: ran {page.file.src_uri} in {time.perf_counter() - start:.0f} s",
          file=sys.stderr)
    return markdown


if __name__ == "__main__":  # `python docs/hooks.py docs/tutorials/x.md ...`: run pages, no site
    for arg in sys.argv[1:]:
        t0 = time.perf_counter()
        run_markdown(Path(arg).read_text(), arg)
        print(f"{arg}: ran in {time.perf_counter() - t0:.1f} s")
