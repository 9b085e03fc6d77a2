"""Where the user asked effppl's persistent compilation cache to keep its files
(`EFFPPL_CACHE_DIR`): read at import by `_pytree_order` and at each compilation by
`effppl.infer`'s cache, so both agree on whether the cache is on."""

from __future__ import annotations

import os
from pathlib import Path

ENV = "EFFPPL_CACHE_DIR"
_OFF = ("0", "off", "false", "no", "")


def requested_cache_dir() -> tuple[str | None, bool]:
    """`(folder, from_env)`: the folder `EFFPPL_CACHE_DIR` names (default
    `$XDG_CACHE_HOME/effppl/xla`, else `~/.cache/effppl/xla`), or None when it turns the cache
    off; `from_env` says whether the variable is set."""
    value = os.environ.get(ENV)
    if value is not None:
        if value.strip().lower() in _OFF:
            return None, True
        return os.path.expanduser(value), True
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return os.path.join(base, "effppl", "xla"), False
