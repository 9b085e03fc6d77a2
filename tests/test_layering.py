"""The package's layers: the PPL reaches the effects library only through its public API and
`effppl.effects.internal`, and JAX internals (`jax._src`) only through `effects/_compat.py`."""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1] / "effppl"


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
    allowed = {ROOT / "effects" / "_compat.py", ROOT / "infer" / "_compile" / "_persistent.py"}
    offenders = [str(path.relative_to(ROOT)) for path in _sources()
                 if path not in allowed and "jax._src" in path.read_text()]
    assert offenders == []
