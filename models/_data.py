"""Data files for the model zoo: where to find them and how to read them.

The real data sets ship with the project in `models/data/` (each beside its `*.SOURCE.txt` note:
origin, licence, sha256). Data file `<file>` is read from

1. `$EFFPPL_DATA_DIR/<file>` when that variable is set and the file is there (your own copy);
2. otherwise the shipped copy, `models/data/<file>`.

Nothing is downloaded. If neither exists (a checkout with the data folder removed),
`DataNotFoundError` names the file and both places.
The loaders (`load_*`) check what they read: a file that is not UTF-8 CSV, lacks a column, holds a
bad value, or has other rows or bytes than the known file (its row count and sha256 in `SOURCES`)
raises `DataFormatError`, naming the file's path (and the line and column of a bad value).

**References:** the `*.SOURCE.txt` notes in `models/data/`.
"""

from __future__ import annotations

import csv
import hashlib
import io
import os
from collections.abc import Callable, Sequence
from datetime import date
from pathlib import Path
from typing import NamedTuple

import numpy as np

from effppl._errors import EffpplError


class DataNotFoundError(EffpplError, FileNotFoundError):
    """A data file is neither in `$EFFPPL_DATA_DIR` nor in the shipped `models/data/`."""


class SizeError(EffpplError, ValueError):
    """`make_data(size=...)` got a size that is neither a known name nor an int the model allows
    (at least its smallest size, at most the rows of its data set)."""


class DataFormatError(EffpplError, ValueError):
    """A data file is not the known file: not UTF-8 CSV, a missing column, a bad value, or other
    rows or bytes than recorded in `SOURCES` (e.g. a truncated or edited copy)."""


class Source(NamedTuple):
    url: str  # where the known file came from (pinned to a commit), for messages
    sha256: str
    rows: int = 0  # data rows of the known file, header excluded


# Origins pinned to the commits recorded in the SOURCE notes.
SOURCES = {
    "SP500.csv": Source(
        url="https://raw.githubusercontent.com/pyro-ppl/datasets/"
        "a32915c210878a1d4a36adcdc7d3448f89d5e4ee/SP500.csv",
        sha256="7e3cb6aab79cc739846453f979a85d72cbdab5745a8a89e25cc49ebf37c6cacf",
        rows=2_517,
    ),
    "UCBadmit.csv": Source(
        url="https://raw.githubusercontent.com/pyro-ppl/datasets/"
        "a32915c210878a1d4a36adcdc7d3448f89d5e4ee/UCBadmit.csv",
        sha256="30cb7c86a51df34fc43fb5201a334059548176b56e1f70b8d9989f0dea173646",
        rows=12,
    ),
    "births_usa_1969.csv": Source(
        url="https://raw.githubusercontent.com/avehtari/casestudies/"
        "f664d70bf9f1514f8af033750bd7096859def555/Birthdays/data/births_usa_1969.csv",
        sha256="12fc497f86f5dcd801583639f5cdb8823c766713edb6ba713aea444a4e7e2e91",
        rows=7_305,
    ),
}

DATA_DIR = Path(__file__).resolve().parent / "data"


def search_dirs() -> list[Path]:
    """The folders searched, in order: `$EFFPPL_DATA_DIR` (if set), the shipped `models/data/`."""
    env = os.environ.get("EFFPPL_DATA_DIR")
    return ([Path(env)] if env else []) + [DATA_DIR]


def data_path(name: str) -> Path:
    """The local path of data file `name`.

    **Arguments:** `name`: a key of `SOURCES`, e.g. `"SP500.csv"`.

    **Returns:** an existing `Path`: `$EFFPPL_DATA_DIR/<name>` if that exists, else the shipped copy.

    **Raises:** `DataNotFoundError` naming the places searched if the file is in none of them;
    `KeyError` for an unknown name.
    """
    source = SOURCES[name]
    dirs = search_dirs()
    for folder in dirs:
        if (folder / name).is_file():
            return folder / name
    searched = "\n".join(f"  - {folder / name}" for folder in dirs)
    raise DataNotFoundError(
        f"data file `{name}` was not found in:\n{searched}\nThe project ships it in {DATA_DIR}; "
        f"restore that folder (e.g. `git checkout -- models/data`), or set EFFPPL_DATA_DIR to a "
        f"folder holding the known file ({source.url})."
    )


def resolve_size(
    sizes: dict[str, int], size: str | int, model: str, min_size: int = 1,
    max_size: int | None = None,
) -> int:
    """`sizes[size]` for a named size, or `size` itself for an int in `[min_size, max_size]`.

    **Arguments:** `sizes`: the model's named sizes; `size`: a key of `sizes` or an int; `model`:
    the model's `NAME`, for messages; `min_size`: the smallest size the model works with;
    `max_size`: the rows of its data set, or `None` for synthetic data of any size.

    **Returns:** the size, an `int`.

    **Raises:** `SizeError` for an unknown name, a non-int, or an int out of those bounds.
    """
    if isinstance(size, str) and size in sizes:
        return sizes[size]
    call = f"`models.{model}.make_data(size={size!r})`"
    if not isinstance(size, int) or isinstance(size, bool) or size < min_size:
        ints = "a positive int" if min_size == 1 else f"an int >= {min_size}, its smallest size"
        raise SizeError(f"{call} expected one of {sorted(sizes)} or {ints}.")
    if max_size is not None and size > max_size:
        raise SizeError(
            f"{call} asked for {size} rows, but its data set has only {max_size} rows. Ask for "
            f"at most {max_size} (size 'paper' is the whole data set)."
        )
    return size


def _read_csv(
    name: str, converters: dict[str, Callable[[str], object]], skip_header: bool = False,
    **reader_args,
) -> dict[str, list]:
    """The columns of data file `name` named in `converters`, each value converted by its
    converter, checked to be the known file (see the module docstring). `reader_args` go to
    `csv.DictReader`; `skip_header` drops the first row (read as data when `fieldnames` is given).

    **Raises:** `DataFormatError` naming the path (and line and column of a bad value);
    `DataNotFoundError` as `data_path`.
    """
    path = data_path(name)
    source, payload = SOURCES[name], path.read_bytes()
    where = f"data file `{name}` at {path}"
    fix = (
        "Delete it (the shipped copy in models/data/ is then read), or unset EFFPPL_DATA_DIR if "
        f"it points at its folder; the known file is {source.url}"
    )
    try:
        reader = csv.DictReader(io.StringIO(payload.decode("utf-8"), newline=""), **reader_args)
        rows = list(reader)[skip_header:]
    except (UnicodeDecodeError, csv.Error) as e:
        raise DataFormatError(f"{where} is not UTF-8 CSV text ({e}). {fix}") from None
    missing = [c for c in converters if c not in (reader.fieldnames or ())]
    if missing:
        raise DataFormatError(
            f"{where} lacks column(s) {missing}; its header is {reader.fieldnames}. {fix}"
        )
    columns = {c: [] for c in converters}
    for line, row in enumerate(rows, start=2):
        for c, convert in converters.items():
            try:
                columns[c].append(convert(row[c]))
            except (TypeError, ValueError) as e:
                value = "no value" if row[c] is None else f"bad value {row[c]!r}"
                raise DataFormatError(
                    f"{where}, line {line}, column `{c}`: {value} ({e}). {fix}"
                ) from None
    digest = hashlib.sha256(payload).hexdigest()
    if len(rows) != source.rows or digest != source.sha256:
        raise DataFormatError(
            f"{where} is not the known file (truncated or edited?): {len(rows)} data rows "
            f"(sha256 {digest[:12]}...), expected {source.rows} (sha256 {source.sha256[:12]}...)."
            f" {fix}"
        )
    return columns


def _code(codes: Sequence[str]) -> Callable[[str], int]:
    """A converter of one of `codes` to its index; anything else raises `ValueError`."""
    index = {code: i for i, code in enumerate(codes)}

    def convert(value: str) -> int:
        if value not in index:
            raise ValueError(f"expected one of {list(index)}")
        return index[value]

    return convert


def _iso_date(value: str) -> str:
    date.fromisoformat(value)  # raises ValueError (TypeError for None) unless a date
    return value


def load_sp500() -> tuple[list[str], np.ndarray]:
    """Daily S&P 500 returns in percent, 2006-09-26 .. 2016-09-23, as NumPyro's `SP500`.

    **Returns:** `(dates, returns)`: 2517 ISO date strings and a float64 array of shape `(2517,)`.

    **Raises:** `DataFormatError` if `SP500.csv` is not the known file; `DataNotFoundError`.
    """
    columns = _read_csv("SP500.csv", {"DATE": _iso_date, "VALUE": float})
    return columns["DATE"], np.array(columns["VALUE"], np.float64)


def load_ucbadmit() -> dict[str, np.ndarray]:
    """UC Berkeley 1973 admissions by department and gender, as NumPyro's `UCBADMIT`.

    **Returns:** dict of int64 arrays of shape `(12,)`: `dept` (0..5 for A..F), `male` (1/0),
    `applications`, `admit`.

    **Raises:** `DataFormatError` if `UCBadmit.csv` is not the known file (e.g. a department
    code other than A..F); `DataNotFoundError`.
    """
    names = ["index", "dept", "gender", "admit", "reject", "applications"]
    converters = {"dept": _code("ABCDEF"), "gender": _code(["female", "male"]),
                  "applications": int, "admit": int}
    columns = _read_csv(
        "UCBadmit.csv", converters, skip_header=True, fieldnames=names, delimiter=";"
    )
    columns["male"] = columns.pop("gender")
    return {k: np.array(columns[k], np.int64) for k in ("dept", "male", "applications", "admit")}


def load_births() -> dict[str, np.ndarray]:
    """Births per day in the USA, 1969-01-01 .. 1988-12-31 (Vehtari's Birthdays case study).

    **Returns:** dict of int64 arrays of shape `(7305,)`, one per CSV column (`year`, `month`,
    `day`, `births`, `day_of_year` (1..366, leap-aligned), `day_of_week` (1 = Monday), `id`).

    **Raises:** `DataFormatError` if `births_usa_1969.csv` is not the known file;
    `DataNotFoundError`.
    """
    names = ["year", "month", "day", "births", "day_of_year", "day_of_week", "id"]
    columns = _read_csv("births_usa_1969.csv", dict.fromkeys(names, int))
    return {k: np.array(v, np.int64) for k, v in columns.items()}
