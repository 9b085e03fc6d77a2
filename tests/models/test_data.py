import hashlib
import time

import numpy as np
import pytest

import models._data as data
from effppl import EffpplError
from models._data import DataNotFoundError, SizeError, Source


@pytest.fixture
def places(tmp_path, monkeypatch):
    """Empty env, shared and cache folders; a bogus URL that fails at once (nothing on port 9)."""
    dirs = {k: tmp_path / k for k in ("env", "shared", "cache")}
    for d in dirs.values():
        d.mkdir()
    monkeypatch.setenv("EFFPPL_DATA_DIR", str(dirs["env"]))
    monkeypatch.setattr(data, "SHARED_DATA_DIR", dirs["shared"])
    monkeypatch.setenv("XDG_CACHE_HOME", str(dirs["cache"]))
    monkeypatch.setitem(data.SOURCES, "UCBadmit.csv", Source("http://127.0.0.1:9/x.csv", "0"))
    monkeypatch.setattr(data, "DOWNLOAD_TIMEOUT_S", 2.0)
    return dirs


def _put(folder, text="x"):
    (folder / "UCBadmit.csv").write_text(text)
    return folder / "UCBadmit.csv"


def test_lookup_prefers_env_dir_then_shared_then_cache(places):
    (places["cache"] / "effppl").mkdir()
    cached = _put(places["cache"] / "effppl")
    assert data.data_path("UCBadmit.csv") == cached
    shared = _put(places["shared"])
    assert data.data_path("UCBadmit.csv") == shared
    env = _put(places["env"])
    assert data.data_path("UCBadmit.csv") == env


def test_lookup_skips_env_dir_when_unset(places, monkeypatch):
    monkeypatch.delenv("EFFPPL_DATA_DIR")
    _put(places["env"])
    shared = _put(places["shared"])
    assert data.data_path("UCBadmit.csv") == shared


def test_default_cache_is_under_home(places, monkeypatch, tmp_path):
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert data.cache_dir() == tmp_path / "home" / ".cache" / "effppl"


def test_download_into_cache_checks_sha256(places, monkeypatch, tmp_path):
    payload = b"dept;gender\n"
    remote = tmp_path / "remote.csv"
    remote.write_bytes(payload)
    good = Source(remote.as_uri(), hashlib.sha256(payload).hexdigest())
    monkeypatch.setitem(data.SOURCES, "UCBadmit.csv", good._replace(sha256="0" * 64))
    with pytest.raises(DataNotFoundError, match="sha256"):
        data.data_path("UCBadmit.csv")
    monkeypatch.setitem(data.SOURCES, "UCBadmit.csv", good)
    path = data.data_path("UCBadmit.csv")
    assert path == places["cache"] / "effppl" / "UCBadmit.csv"
    assert path.read_bytes() == payload
    remote.unlink()  # a second lookup finds the cached copy
    assert data.data_path("UCBadmit.csv") == path


def test_offline_error_names_file_places_and_url(places):
    start = time.monotonic()
    with pytest.raises(DataNotFoundError) as info:
        data.data_path("UCBadmit.csv")
    assert time.monotonic() - start < 10
    assert isinstance(info.value, EffpplError) and isinstance(info.value, FileNotFoundError)
    message = str(info.value)
    assert "UCBadmit.csv" in message and "http://127.0.0.1:9/x.csv" in message
    for folder in places.values():
        assert str(folder) in message


def test_resolve_size_rejects_unknown_names():
    assert data.resolve_size({"quick": 3}, "quick") == 3
    assert data.resolve_size({"quick": 3}, 7) == 7
    for bad in ("huge", 0, -1, True, 2.5):
        with pytest.raises(SizeError, match="expected one of"):
            data.resolve_size({"quick": 3}, bad)


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
