"""Data files for the model zoo: where to find them, how to fetch them, how to read them.

Each real data set is a file named in `SOURCES`, looked up in this order:

1. `$EFFPPL_DATA_DIR/<file>` when that variable is set;
2. `../shared/data/<file>` beside the checkout (the project's shared data folder);
3. the user cache, `$XDG_CACHE_HOME/effppl/<file>` (default `~/.cache/effppl/<file>`);
4. otherwise the file is downloaded from its public URL (pinned to the commit named in
   `../shared/data/<file>.SOURCE.txt`) into the user cache, and its sha256 is checked against the
   one that note records (copied into `SOURCES`).

If every place fails, `DataNotFoundError` names the file, every place searched and the URL.

**References:** the `*.SOURCE.txt` notes beside each file in `../shared/data/`.
"""

from __future__ import annotations

import csv
import hashlib
import os
import tempfile
import urllib.request
from pathlib import Path
from typing import NamedTuple

import numpy as np

from effppl._errors import EffpplError


class DataNotFoundError(EffpplError, FileNotFoundError):
    """A data file is in none of the searched places and could not be downloaded."""


class SizeError(EffpplError, ValueError):
    """`make_data(size=...)` got a size that is neither a known name nor a positive int."""


class Source(NamedTuple):
    url: str
    sha256: str


# URLs pinned to the commits recorded in the SOURCE notes, so a download is byte-identical.
SOURCES = {
    "SP500.csv": Source(
        url="https://raw.githubusercontent.com/pyro-ppl/datasets/"
        "a32915c210878a1d4a36adcdc7d3448f89d5e4ee/SP500.csv",
        sha256="7e3cb6aab79cc739846453f979a85d72cbdab5745a8a89e25cc49ebf37c6cacf",
    ),
    "UCBadmit.csv": Source(
        url="https://raw.githubusercontent.com/pyro-ppl/datasets/"
        "a32915c210878a1d4a36adcdc7d3448f89d5e4ee/UCBadmit.csv",
        sha256="30cb7c86a51df34fc43fb5201a334059548176b56e1f70b8d9989f0dea173646",
    ),
    "births_usa_1969.csv": Source(
        url="https://raw.githubusercontent.com/avehtari/casestudies/"
        "f664d70bf9f1514f8af033750bd7096859def555/Birthdays/data/births_usa_1969.csv",
        sha256="12fc497f86f5dcd801583639f5cdb8823c766713edb6ba713aea444a4e7e2e91",
    ),
}

SHARED_DATA_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data"
DOWNLOAD_TIMEOUT_S = 30.0


def cache_dir() -> Path:
    """The user cache folder, `$XDG_CACHE_HOME/effppl` or `~/.cache/effppl`."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "effppl"


def search_dirs() -> list[Path]:
    """The folders searched, in order: `$EFFPPL_DATA_DIR`, `../shared/data`, the user cache."""
    dirs = []
    if os.environ.get("EFFPPL_DATA_DIR"):
        dirs.append(Path(os.environ["EFFPPL_DATA_DIR"]))
    return dirs + [SHARED_DATA_DIR, cache_dir()]


def data_path(name: str) -> Path:
    """The local path of data file `name`, downloading it into the user cache if needed.

    **Arguments:** `name`: a key of `SOURCES`, e.g. `"SP500.csv"`.

    **Returns:** an existing `Path`.

    **Raises:** `DataNotFoundError` if the file is nowhere and cannot be downloaded (offline, bad
    URL, or a download whose sha256 differs from the recorded one); `KeyError` for an unknown name.
    """
    source = SOURCES[name]
    dirs = search_dirs()
    for folder in dirs:
        if (folder / name).is_file():
            return folder / name
    target = cache_dir() / name
    try:
        _download(source, target)
    except (OSError, ValueError) as e:
        searched = "\n".join(f"  - {folder / name}" for folder in dirs)
        raise DataNotFoundError(
            f"data file `{name}` was not found in:\n{searched}\nand downloading it from "
            f"{source.url} failed: {e!r}. Put the file in one of those places, or set "
            "EFFPPL_DATA_DIR to a folder that holds it."
        ) from e
    return target


def _download(source: Source, target: Path) -> None:
    with urllib.request.urlopen(source.url, timeout=DOWNLOAD_TIMEOUT_S) as response:
        payload = response.read()
    digest = hashlib.sha256(payload).hexdigest()
    if digest != source.sha256:
        raise ValueError(f"sha256 of the download is {digest}, expected {source.sha256}")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=target.parent, delete=False) as f:
        f.write(payload)
    os.replace(f.name, target)  # atomic: a concurrent reader never sees half a file


def resolve_size(sizes: dict[str, int], size: str | int) -> int:
    """`sizes[size]` for a named size, or `size` itself for a positive int."""
    if isinstance(size, str) and size in sizes:
        return sizes[size]
    if isinstance(size, int) and not isinstance(size, bool) and size > 0:
        return size
    raise SizeError(
        f"`make_data(size={size!r})` expected one of {sorted(sizes)} or a positive int."
    )


def load_sp500() -> tuple[list[str], np.ndarray]:
    """Daily S&P 500 returns in percent, 2006-09-26 .. 2016-09-23, as NumPyro's `SP500`.

    **Returns:** `(dates, returns)`: 2517 ISO date strings and a float64 array of shape `(2517,)`.
    """
    with open(data_path("SP500.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    return [r["DATE"] for r in rows], np.array([float(r["VALUE"]) for r in rows])


def load_ucbadmit() -> dict[str, np.ndarray]:
    """UC Berkeley 1973 admissions by department and gender, as NumPyro's `UCBADMIT`.

    **Returns:** dict of int64 arrays of shape `(12,)`: `dept` (0..5 for A..F), `male` (1/0),
    `applications`, `admit`.
    """
    names = ["index", "dept", "gender", "admit", "reject", "applications"]
    with open(data_path("UCBadmit.csv"), newline="") as f:
        rows = list(csv.DictReader(f, fieldnames=names, delimiter=";"))[1:]
    return {
        "dept": np.array([ord(r["dept"]) - ord("A") for r in rows], np.int64),
        "male": np.array([r["gender"] == "male" for r in rows], np.int64),
        "applications": np.array([int(r["applications"]) for r in rows], np.int64),
        "admit": np.array([int(r["admit"]) for r in rows], np.int64),
    }


def load_births() -> dict[str, np.ndarray]:
    """Births per day in the USA, 1969-01-01 .. 1988-12-31 (Vehtari's Birthdays case study).

    **Returns:** dict of int64 arrays of shape `(7305,)`, one per CSV column (`year`, `month`,
    `day`, `births`, `day_of_year` (1..366, leap-aligned), `day_of_week` (1 = Monday), `id`).
    """
    with open(data_path("births_usa_1969.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    columns = ["year", "month", "day", "births", "day_of_year", "day_of_week", "id"]
    return {c: np.array([int(r[c]) for r in rows], np.int64) for c in columns}
