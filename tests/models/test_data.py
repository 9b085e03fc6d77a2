import hashlib
import importlib
import pathlib

import numpy as np
import pytest

import models._data as data
from effppl import EffpplError
from models._data import DataFormatError, DataNotFoundError, SizeError


@pytest.fixture
def places(tmp_path, monkeypatch):
    """An empty EFFPPL_DATA_DIR and an empty stand-in for the shipped data folder."""
    dirs = {k: tmp_path / k for k in ("env", "shipped")}
    for d in dirs.values():
        d.mkdir()
    monkeypatch.setenv("EFFPPL_DATA_DIR", str(dirs["env"]))
    monkeypatch.setattr(data, "DATA_DIR", dirs["shipped"])
    return dirs


def _put(folder, text="x"):
    (folder / "UCBadmit.csv").write_text(text)
    return folder / "UCBadmit.csv"


def test_lookup_prefers_env_dir_then_the_shipped_copy(places):
    shipped = _put(places["shipped"])
    assert data.data_path("UCBadmit.csv") == shipped
    env = _put(places["env"])
    assert data.data_path("UCBadmit.csv") == env


def test_lookup_skips_env_dir_when_unset(places, monkeypatch):
    monkeypatch.delenv("EFFPPL_DATA_DIR")
    _put(places["env"])
    shipped = _put(places["shipped"])
    assert data.data_path("UCBadmit.csv") == shipped


def test_data_ship_inside_the_project_with_their_source_notes():
    """The known files are in `models/data/` beside the loader, byte for byte (sha256), so a
    clone or install with nothing beside it finds them."""
    assert data.DATA_DIR == pathlib.Path(data.__file__).parent / "data"
    for name, source in data.SOURCES.items():
        path = data.DATA_DIR / name
        assert hashlib.sha256(path.read_bytes()).hexdigest() == source.sha256, name
        note = (data.DATA_DIR / name.replace(".csv", ".SOURCE.txt")).read_text()
        assert source.sha256 in note, name


def test_missing_file_error_names_file_and_places(places):
    with pytest.raises(DataNotFoundError) as info:
        data.data_path("UCBadmit.csv")
    assert isinstance(info.value, EffpplError) and isinstance(info.value, FileNotFoundError)
    message = str(info.value)
    assert "UCBadmit.csv" in message and "EFFPPL_DATA_DIR" in message
    for folder in places.values():
        assert str(folder) in message


def test_resolve_size_rejects_unknown_names():
    assert data.resolve_size({"quick": 3}, "quick", "m") == 3
    assert data.resolve_size({"quick": 3}, 7, "m") == 7
    for bad in ("huge", 0, -1, True, 2.5):
        with pytest.raises(SizeError, match=r"`models\.m\.make_data.*expected one of"):
            data.resolve_size({"quick": 3}, bad, "m")


def test_resolve_size_rejects_sizes_out_of_bounds():
    assert data.resolve_size({"quick": 3}, 2, "m", min_size=2, max_size=5) == 2
    assert data.resolve_size({"quick": 3}, 5, "m", min_size=2, max_size=5) == 5
    with pytest.raises(SizeError, match=r"size=1\).*an int >= 2, its smallest size"):
        data.resolve_size({"quick": 3}, 1, "m", min_size=2, max_size=5)
    with pytest.raises(SizeError, match=r"`models\.m\.make_data\(size=6\)`.* only 5 rows"):
        data.resolve_size({"quick": 3}, 6, "m", min_size=2, max_size=5)


@pytest.mark.parametrize("name, rows", [("stochastic_volatility", 2517), ("hsgp", 7305)])
def test_make_data_larger_than_the_data_set_is_a_size_error(name, rows):
    module = importlib.import_module(f"models.{name}")
    with pytest.raises(SizeError, match=rf"models\.{name}\.make_data\(size=100000\).* {rows} rows"):
        module.make_data(100_000)
    assert module.make_data(rows)[0][0].shape == (rows,)


@pytest.mark.parametrize("name", ["bnn", "hsgp"])
def test_make_data_of_one_row_is_a_size_error_naming_the_smallest_size(name):
    module = importlib.import_module(f"models.{name}")
    with pytest.raises(SizeError, match=rf"models\.{name}\.make_data\(size=1\).*int >= 2"):
        module.make_data(1)
    args, _ = module.make_data(2)
    assert all(np.isfinite(np.asarray(a, np.float64)).all() for a in args)


def test_load_sp500():
    dates, returns = data.load_sp500()
    assert len(dates) == returns.shape[0] == 2517
    assert (dates[0], dates[-1]) == ("2006-09-26", "2016-09-23")
    assert returns.dtype == np.float64 and abs(returns.mean() - 0.0281) < 1e-3


def test_load_ucbadmit():
    d = data.load_ucbadmit()
    assert all(v.shape == (12,) for v in d.values())
    assert d["applications"].sum() == 4526 and d["admit"].sum() == 1755
    assert list(d["dept"][::2]) == [0, 1, 2, 3, 4, 5] and list(d["male"][:2]) == [1, 0]


def test_load_births_dates_agree_with_ids():
    d = data.load_births()
    assert all(v.shape == (7305,) for v in d.values())
    dates = np.datetime64("1968-12-31") + d["id"].astype("timedelta64[D]")
    assert (dates.astype("datetime64[Y]").astype(int) + 1970 == d["year"]).all()
    assert (dates.astype("datetime64[M]").astype(int) % 12 + 1 == d["month"]).all()
    weekday = (dates.astype("datetime64[D]").astype(int) + 3) % 7  # 1970-01-01: Thursday = 3
    assert (weekday == d["day_of_week"] - 1).all()


@pytest.fixture
def put_copy(tmp_path, monkeypatch):
    """`put_copy(name, edit)`: puts `edit(text of the known file)` (str or bytes) in a fresh
    EFFPPL_DATA_DIR and returns its path."""
    monkeypatch.setenv("EFFPPL_DATA_DIR", str(tmp_path))

    def put(name, edit):
        text = edit(data.data_path(name).read_text())  # the known file, before the copy exists
        path = tmp_path / name
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        return path

    return put


def _format_error(load, path, *parts):
    with pytest.raises(DataFormatError) as info:
        load()
    assert isinstance(info.value, EffpplError) and isinstance(info.value, ValueError)
    message = str(info.value)
    for part in (str(path), "EFFPPL_DATA_DIR", *parts):
        assert part in message, (part, message)
    return message


def _lines(text, edit):
    lines = text.splitlines(keepends=True)
    edit(lines)
    return "".join(lines)


def test_truncated_file_is_a_format_error_not_a_short_table(put_copy):
    path = put_copy("SP500.csv", lambda t: "".join(t.splitlines(keepends=True)[:101]))
    _format_error(data.load_sp500, path, "100 data rows", "expected 2517", "sha256")
    import models.stochastic_volatility as sv

    with pytest.raises(DataFormatError, match="100 data rows"):
        sv.make_data("quick")


def test_edited_value_is_caught_by_the_sha256(put_copy):
    path = put_copy("SP500.csv", lambda t: t.replace("0.7524280936307193", "0.75", 1))
    _format_error(data.load_sp500, path, "2517 data rows", data.SOURCES["SP500.csv"].sha256[:12])


def test_bad_number_names_line_column_and_value(put_copy):
    def edit(lines):
        lines[49] = lines[49].rsplit(",", 1)[0] + ",abc\n"

    path = put_copy("SP500.csv", lambda t: _lines(t, edit))
    _format_error(data.load_sp500, path, "line 50", "`VALUE`", "'abc'")


def test_short_row_names_the_missing_value(put_copy):
    def edit(lines):
        lines[3] = lines[3].rsplit(",", 1)[0] + "\n"

    path = put_copy("SP500.csv", lambda t: _lines(t, edit))
    _format_error(data.load_sp500, path, "line 4", "`VALUE`", "no value")


def test_binary_garbage_is_a_format_error(put_copy):
    path = put_copy("SP500.csv", lambda t: b"garbage \xff\xfe\x00\n")
    _format_error(data.load_sp500, path, "not UTF-8 CSV")


@pytest.mark.parametrize("name, column, load", [
    ("SP500.csv", "DATE", data.load_sp500),
    ("births_usa_1969.csv", "id", data.load_births),
])
def test_missing_column_is_named(put_copy, name, column, load):
    path = put_copy(name, lambda t: t.replace(f",{column},", ",other,", 1))
    _format_error(load, path, f"lacks column(s) ['{column}']")


def test_ucbadmit_rejects_a_bad_department_code(put_copy):
    path = put_copy("UCBadmit.csv", lambda t: t.replace('"A";"male"', '"a";"male"', 1))
    _format_error(data.load_ucbadmit, path, "line 2", "`dept`", "'a'", "'F'")
    import models.ucbadmit as ucb

    with pytest.raises(DataFormatError, match="'a'"):
        ucb.make_data("quick")


def test_ucbadmit_rejects_a_bad_gender(put_copy):
    path = put_copy("UCBadmit.csv", lambda t: t.replace('"female"', '"f"', 1))
    _format_error(data.load_ucbadmit, path, "line 3", "`gender`", "'f'")
