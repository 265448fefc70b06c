"""Tests of dpmarginals.datasets: loaders on the real files, parsing, lookup and download.

Real data comes from ``$DPMARGINALS_DATA`` (CI: ../shared/data); without it the
real-data tests skip and the built-in, parsing, error and download tests still run.
Nothing here touches the network: an autouse fixture replaces the download opener.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import os
import urllib.error
import zipfile
from pathlib import Path

import numpy as np
import pytest

from dpmarginals.core.dataset import Dataset
from dpmarginals.core.errors import DataNotFoundError, DPMarginalsError
from dpmarginals.datasets import (
    available,
    data_home,
    describe,
    fetch,
    get_info,
    load,
    load_transactions,
    parse_transactions,
)
from dpmarginals.datasets import files as dfiles
from dpmarginals.datasets.adult import equal_frequency_codes
from dpmarginals.datasets.registry import REGISTRY
from dpmarginals.datasets.transactional import MSNBC_CATEGORIES, Transactions, parse_msnbc

DATA = os.environ.get("DPMARGINALS_DATA")
needs_data = pytest.mark.needs_data

ALL = {"adult", "adult3", "adult2", "adult-pgm", "msnbc", "kosarak", "t10i4d100k",
       "nyc-taxis", "acs", "br2000", "nltcs", "loans", "fire", "randhie"}


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory):
    """No test may reach the network (``file://`` URLs still work), nor the user cache."""
    real_open = dfiles._urlopen

    def refuse(url: str, timeout: float):
        if url.startswith("file:"):
            return real_open(url, timeout)
        raise urllib.error.URLError(f"network disabled in tests ({url})")

    monkeypatch.setattr(dfiles, "_urlopen", refuse)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))
    monkeypatch.delenv("DPMARGINALS_OFFLINE", raising=False)


# -- registry, built-in data set, argument errors ---------------------------------------
def test_available_lists_every_data_set():
    assert set(available()) == ALL


def test_builtin_loads_without_any_data(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.delenv("DPMARGINALS_DATA", raising=False)
    monkeypatch.setenv("DPMARGINALS_OFFLINE", "1")
    ds = load("randhie")
    assert isinstance(ds, Dataset)
    assert (ds.n, ds.d) == (20_190, 8)
    assert ds.domain.attributes[:3] == ("visits", "coinsurance", "deductible")
    assert all(2 <= s <= 5 for s in ds.domain.sizes)
    for a, s in zip(ds.domain.attributes, ds.domain.sizes, strict=True):
        assert len(ds.labels[a]) == s
        assert np.bincount(ds.column(a), minlength=s).min() > 0  # every value occurs
    assert load("randhie", data_home=tmp_path).n == 20_190  # no files needed anywhere
    # self-rated health: excellent 54.6%, good 36.2%, fair 7.7%, poor 1.5% (statsmodels data)
    counts = np.bincount(ds.column("health"), minlength=4)
    assert counts.tolist() == [20190 - 7309 - 1560 - 302, 7309, 1560, 302]


def test_describe_uses_metadata_and_reports_availability(tmp_path: Path):
    frame = describe(data_home=tmp_path)
    assert list(frame.columns) == ["name", "rows", "attributes", "domain", "source", "available"]
    assert set(frame["name"]) == ALL
    row = frame.set_index("name")
    assert row.loc["msnbc", "rows"] == 989_818 and row.loc["msnbc", "attributes"] == 16
    assert row.loc["adult", "rows"] == 45_222 and row.loc["acs", "attributes"] == 23
    assert row.loc["br2000", "domain"] == "14 attrs, 2..21 values"
    assert row.loc["randhie", "available"]  # built in
    assert not row.drop(index="randhie")["available"].any()  # empty data home


def test_unknown_name_lists_the_available_ones():
    with pytest.raises(DPMarginalsError, match=r"unknown data set 'nope'.*msnbc.*randhie"):
        load("nope")


@pytest.mark.parametrize("d", [0, -1, 9, True, 2.5, "3"])
def test_bad_d_is_an_error_naming_d(d: object):
    with pytest.raises(DPMarginalsError, match="d="):
        load("randhie", d=d)  # type: ignore[arg-type]


@pytest.mark.parametrize("n", [0, -5, 1.5])
def test_bad_n_is_an_error(n: object):
    with pytest.raises(DPMarginalsError, match="n="):
        load("randhie", n=n)  # type: ignore[arg-type]


def test_d_keeps_the_first_attributes_and_n_samples_with_replacement():
    full = load("randhie")
    ds = load("randhie", d=3)
    assert ds.domain.attributes == full.domain.attributes[:3]
    np.testing.assert_array_equal(ds.codes, full.codes[:, :3])
    big = load("randhie", n=50_000, rng=7)  # more users than rows: with replacement
    assert big.n == 50_000 and big.d == 8
    again = load("randhie", n=50_000, rng=7)
    np.testing.assert_array_equal(big.codes, again.codes)  # seeded: reproducible
    assert not np.array_equal(big.codes, load("randhie", n=50_000, rng=8).codes)
    # a sample's marginal is close to the population's (4 sd of a proportion at n=50k)
    sd = np.sqrt(0.25 / big.n)
    assert np.abs(big.marginal(["health"]).values - full.marginal(["health"]).values).max() < 4 * sd


def test_each_load_returns_a_fresh_dataset():
    a = load("randhie")
    a.codes[:] = 0
    b = load("randhie")
    assert b.codes.any()


# -- data home resolution and the not-found message ---------------------------------------
def test_data_home_resolution(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("DPMARGINALS_DATA", str(tmp_path / "env"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert data_home(tmp_path / "arg") == tmp_path / "arg"
    assert data_home() == tmp_path / "env"
    assert dfiles.search_dirs() == [tmp_path / "env", tmp_path / "xdg" / "dpmarginals"]
    assert dfiles.search_dirs(tmp_path / "arg") == [tmp_path / "arg"]
    monkeypatch.delenv("DPMARGINALS_DATA")
    assert data_home() == tmp_path / "xdg" / "dpmarginals"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert data_home() == Path.home() / ".cache" / "dpmarginals"


def test_not_found_message_with_downloads_disabled(tmp_path: Path):
    with pytest.raises(DataNotFoundError) as info:
        load("adult", data_home=tmp_path, download=False)
    msg = str(info.value)
    assert "\n" not in msg
    assert "adult-raw/adult.data.gz" in msg  # the file it looked for
    assert str(tmp_path) in msg  # where it looked
    assert f"put it at {tmp_path / 'adult-raw' / 'adult.data.gz'}" in msg  # where to put it
    assert "archive.ics.uci.edu" in msg and "disabled" in msg
    assert isinstance(info.value, FileNotFoundError)


def test_not_found_message_when_offline(tmp_path: Path):
    with pytest.raises(DataNotFoundError, match=r"download failed.*network disabled") as info:
        load("msnbc", data_home=tmp_path)
    msg = str(info.value)
    assert "\n" not in msg and "msnbc/msnbc990928.zip" in msg
    assert "msnbc990928.seq.gz" in msg and "nupic-legacy" in msg  # both sources were tried
    assert not any(p.is_file() for p in tmp_path.rglob("*"))  # no partial file left


def test_offline_env_var_disables_downloads(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    calls = []
    monkeypatch.setattr(dfiles, "_urlopen", lambda url, timeout: calls.append(url))
    monkeypatch.setenv("DPMARGINALS_OFFLINE", "1")
    with pytest.raises(DataNotFoundError, match="disabled"):
        load("nltcs", data_home=tmp_path)
    assert calls == []


def test_searches_env_dir_then_user_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    env, xdg = tmp_path / "env", tmp_path / "xdg"
    monkeypatch.setenv("DPMARGINALS_DATA", str(env))
    monkeypatch.setenv("XDG_CACHE_HOME", str(xdg))
    with pytest.raises(DataNotFoundError) as info:
        load("acs", download=False)
    assert str(env) in str(info.value) and str(xdg / "dpmarginals") in str(info.value)
    target = xdg / "dpmarginals" / "kosarak-prefix" / "kosarak-prefix.dat.gz"
    target.parent.mkdir(parents=True)
    target.write_bytes(gzip.compress(b"1 2\n"))
    assert dfiles.find_file("kosarak-prefix/kosarak-prefix.dat.gz") == target


def test_a_truncated_copy_is_refused(tmp_path: Path):
    target = tmp_path / "kosarak-prefix" / "kosarak-prefix.dat.gz"
    target.parent.mkdir()
    target.write_bytes(gzip.compress(b"1 2 3\n2 3\n3 4\n1 5\n"))
    pinned = get_info("kosarak").files[0].sha256
    with pytest.raises(DPMarginalsError, match=rf"{target}.*SHA-256 of its content is "
                       rf"[0-9a-f]{{64}}, expected {pinned}"):
        load("kosarak", data_home=tmp_path, d=2)
    target.write_bytes(gzip.compress(b"1 2 3\n2 3\n" * 1000)[:-20])  # cut short
    with pytest.raises(DPMarginalsError, match=r"kosarak-prefix.dat.gz' is damaged or truncated"):
        load("kosarak", data_home=tmp_path, d=2)


@needs_data
def test_every_shared_file_matches_its_pinned_hash():
    for info in REGISTRY.values():
        for file in info.files:
            assert dfiles.content_sha256(Path(DATA) / file.path, file.member) == file.sha256


def test_local_file_is_hashed_once_per_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    content = b"a,b\n0,1\n"
    (tmp_path / "t.csv").write_bytes(content)
    file = dfiles.RemoteFile("t.csv", sha256=hashlib.sha256(content).hexdigest())
    calls = []
    real = dfiles.content_sha256
    monkeypatch.setattr(dfiles, "content_sha256", lambda *a: calls.append(a) or real(*a))
    for _ in range(3):
        assert dfiles.ensure_file(file, tmp_path) == tmp_path / "t.csv"
    assert len(calls) == 1


# -- download ----------------------------------------------------------------------------
def test_fetch_file_url_atomically(tmp_path: Path):
    src = tmp_path / "src.dat"
    src.write_bytes(b"1 2 3\n4 5\n")
    dest = tmp_path / "home" / "sub" / "copy.dat"
    assert fetch(src.as_uri(), dest) == dest
    assert dest.read_bytes() == src.read_bytes()
    zipped = fetch(src.as_uri(), tmp_path / "home" / "sub" / "copy.dat.gz",
                   convert=dfiles.gzip_file)
    assert gzip.decompress(zipped.read_bytes()) == src.read_bytes()
    assert sorted(p.name for p in dest.parent.iterdir()) == ["copy.dat", "copy.dat.gz"]


def test_fetch_failure_leaves_no_file(tmp_path: Path):
    dest = tmp_path / "out" / "x.dat"
    with pytest.raises(DataNotFoundError, match="cannot download"):
        fetch((tmp_path / "missing.dat").as_uri(), dest)
    assert list(dest.parent.iterdir()) == []


def test_download_converters(tmp_path: Path):
    seq = (b"% Different categories found in input file:\r\n\r\n"
           + " ".join(MSNBC_CATEGORIES).encode() + b"\r\n\r\n\r\n% Sequences:\r\n\r\n"
           + b"1 1 \r\n2 \r\n3 2 2 4 \r\n17 16\r\n6")
    (tmp_path / "msnbc.seq.gz").write_bytes(gzip.compress(seq))
    dest = tmp_path / "msnbc990928.zip"
    dfiles.gunzip_into_zip("msnbc990928.seq")(tmp_path / "msnbc.seq.gz", dest)
    with zipfile.ZipFile(dest) as zf:
        assert zf.namelist() == ["msnbc990928.seq"]
        t = parse_msnbc(zf.read("msnbc990928.seq"))
    assert t.to_lists() == [[1, 1], [2], [3, 2, 2, 4], [17, 16], [6]]
    assert t.item_names[17] == "travel" and t.item_names[1] == "frontpage"
    (tmp_path / "k.dat.gz").write_bytes(gzip.compress(b"1 2\n3\n4 5 6\n7 8\n9 1"))
    dfiles.first_bytes_gzip(9)(tmp_path / "k.dat.gz", tmp_path / "k9.gz")
    assert gzip.decompress((tmp_path / "k9.gz").read_bytes()) == b"1 2\n3\n4 5"
    dfiles.first_bytes_gzip(99)(tmp_path / "k.dat.gz", tmp_path / "kall.gz")
    assert gzip.decompress((tmp_path / "kall.gz").read_bytes()) == b"1 2\n3\n4 5 6\n7 8\n9 1"


def test_load_downloads_a_missing_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """A missing file is fetched from its first source, converted, checked, then loaded."""
    records = b"".join(b"%d %d\n" % (i % 7, 7 + i % 3) for i in range(36_682)) + b"1 2 3"
    served = []

    def opener(url: str, timeout: float):
        served.append(url)
        return io.BytesIO(gzip.compress(records))  # FIMI serves kosarak.dat.gz

    monkeypatch.setattr(dfiles, "_urlopen", opener)
    info = get_info("kosarak")  # pin these records instead of the real prefix
    file = dataclasses.replace(info.files[0], sha256=hashlib.sha256(records).hexdigest())
    monkeypatch.setitem(REGISTRY, "kosarak", dataclasses.replace(info, files=(file,)))
    ds = load("kosarak", data_home=tmp_path, d=4)
    assert served == ["https://fimi.uantwerpen.be/data/kosarak.dat.gz"]
    assert (ds.n, ds.d) == (36_682, 4)
    stored = tmp_path / "kosarak-prefix" / "kosarak-prefix.dat.gz"
    assert gzip.decompress(stored.read_bytes()) == records  # the cut line dropped on load
    assert [p.name for p in stored.parent.iterdir()] == [stored.name]  # no temp files


def test_changed_or_truncated_download_is_refused(monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path):
    """Both sources serve a cut-short file: pooch refuses the plain one before it is
    stored, the check after conversion the other; the error names file and hashes."""
    pinned = get_info("kosarak").files[0].sha256
    cut = b"1 2 3\n4 5\n6"
    monkeypatch.setattr(dfiles, "_urlopen",
                        lambda url, timeout: io.BytesIO(gzip.compress(cut) if url.endswith(
                            ".gz") else cut))
    with pytest.raises(DataNotFoundError) as err:
        load("kosarak", data_home=tmp_path, d=2)
    message = str(err.value)
    assert "\n" not in message and "kosarak-prefix/kosarak-prefix.dat.gz" in message
    actual = hashlib.sha256(cut).hexdigest()
    assert f"SHA-256 of its content is {actual}, expected {pinned}" in message  # FIMI
    assert f"(kosarak.dat) does not match the known hash: expected {pinned} but got " \
           f"{actual}" in message  # the GitHub mirror, through pooch
    assert not (tmp_path / "kosarak-prefix" / "kosarak-prefix.dat.gz").exists()


def test_fetch_checks_a_file_url_with_pooch(tmp_path: Path):
    src = tmp_path / "served.csv"
    src.write_bytes(b"a,b\n0,1\n")
    good = dfiles.RemoteFile("x/served.csv.gz", ((src.as_uri(), dfiles.gzip_file),),
                             sha256=hashlib.sha256(src.read_bytes()).hexdigest())
    stored = dfiles.ensure_file(good, tmp_path / "home")
    assert gzip.decompress(stored.read_bytes()) == src.read_bytes()
    bad = dataclasses.replace(good, path="y/served.csv.gz", sha256="0" * 64)
    with pytest.raises(DataNotFoundError, match=r"served.csv\) does not match the known hash: "
                       r"expected 0{64} but got [0-9a-f]{64}"):
        dfiles.ensure_file(bad, tmp_path / "home")
    assert not (tmp_path / "home" / "y" / "served.csv.gz").exists()


# -- transactional parsing ---------------------------------------------------------------
def test_parse_transactions_edge_cases():
    t = parse_transactions(b"10 200 3000\r\n\n7\t7 \n12345678901")
    assert t.to_lists() == [[10, 200, 3000], [], [7, 7], [12345678901]]
    assert parse_transactions(b"1 2\n3", drop_incomplete_last=True).to_lists() == [[1, 2]]
    assert parse_transactions(b"1 2\n3\n", drop_incomplete_last=True).to_lists() == [[1, 2], [3]]
    assert parse_transactions(b"").n == 0
    with pytest.raises(DPMarginalsError, match="line 2"):
        parse_transactions(b"1 2\n3 x\n")
    with pytest.raises(DPMarginalsError, match="line 1"):
        parse_transactions(b"-1 2\n")


def test_parse_matches_a_python_reference():
    rng = np.random.default_rng(3)
    records = [rng.integers(0, 10 ** rng.integers(1, 7), size=rng.integers(0, 9)).tolist()
               for _ in range(2000)]
    text = "\n".join(" ".join(map(str, r)) + " " * int(rng.integers(0, 2)) for r in records)
    t = parse_transactions(text.encode())
    assert t.to_lists() == records
    assert t.indptr[-1] == sum(map(len, records))


def test_top_items_binary_view_and_ties():
    t = Transactions.from_lists([[5, 5, 1], [1, 2], [2, 9], [9, 1], [3]], name="toy")
    # distinct-per-record frequencies: 1 -> 3, 2 -> 2, 9 -> 2, 5 -> 1, 3 -> 1
    assert t.item_counts()[[1, 2, 3, 5, 9]].tolist() == [3, 2, 1, 1, 2]
    assert t.top_items(5).tolist() == [1, 2, 9, 3, 5]  # ties: smaller id first
    ds = t.to_dataset(3)
    assert ds.domain.attributes == ("item_1", "item_2", "item_9")
    assert ds.codes.tolist() == [[1, 0, 0], [1, 1, 0], [0, 1, 1], [1, 0, 1], [0, 0, 0]]
    with pytest.raises(DPMarginalsError, match="d=6"):
        t.top_items(6)


def test_equal_frequency_bins_keep_ties_together():
    codes, labels = equal_frequency_codes(np.array([40] * 6 + [10, 20, 50, 60]), 3)
    assert labels == ["10-20", "40", "50-60"]
    assert codes.tolist() == [1] * 6 + [0, 0, 2, 2]
    codes, labels = equal_frequency_codes(np.arange(100), 2)
    assert labels == ["0-49", "50-99"] and np.bincount(codes).tolist() == [50, 50]


# -- the real data sets --------------------------------------------------------------------
SHAPES = {
    "adult": (45_222, 15), "adult3": (45_222, 15), "adult2": (45_222, 15),
    "adult-pgm": (48_842, 15), "msnbc": (989_818, 16), "kosarak": (36_682, 32),
    "t10i4d100k": (100_000, 32), "nyc-taxis": (5_589, 8), "acs": (47_461, 23),
    "br2000": (38_000, 14), "nltcs": (21_574, 16), "loans": (42_535, 48),
    "fire": (305_119, 30), "randhie": (20_190, 8),
}


@needs_data
@pytest.mark.parametrize("name", sorted(SHAPES))
def test_real_data_set_shapes_and_domains(name: str):
    ds = load(name)
    assert (ds.n, ds.d) == SHAPES[name]
    info = get_info(name)
    assert (info.rows, info.attributes) == SHAPES[name]
    sizes = np.array(ds.domain.sizes)
    assert (ds.codes.max(axis=0) < sizes).all()  # (Dataset also validates on construction)
    assert describe().set_index("name").loc[name, "available"]


@needs_data
def test_adult_variants():
    full, three, two = load("adult"), load("adult3"), load("adult2")
    assert full.domain.sizes == (7, 7, 5, 16, 16, 7, 14, 6, 5, 2, 2, 2, 5, 41, 2)
    assert max(three.domain.sizes) <= 3 and min(three.domain.sizes) == 2
    assert two.domain.is_binary()
    for ds in (full, three, two):
        assert ds.domain.attributes[-1] == "income"
        assert tuple(ds.labels["income"]) == ("<=50K", ">50K")  # test labels lost their '.'
        assert ds.counts(["income"]).tolist() == [34_014, 11_208]
    assert full.labels["education"][0] == "Preschool"  # ordered by education-num
    np.testing.assert_array_equal(three.column("education"), three.column("education-num"))
    shares = np.bincount(three.column("fnlwgt")) / three.n
    assert np.abs(shares - 1 / 3).max() < 0.01  # equal-frequency bins
    assert tuple(three.labels["hours-per-week"]) == ("1-39", "40", "41-99")
    assert tuple(two.labels["marital-status"]) == ("Married-civ-spouse", "other")


@needs_data
def test_msnbc_sessions_and_top_items():
    t = load_transactions("msnbc")
    assert t.n == 989_818
    assert [t.record(i) for i in range(3)] == [[1, 1], [2], [3, 2, 2, 4, 2, 2, 2, 3, 3]]
    assert t.record(t.n - 1) == [6]
    assert t.items.min() == 1 and t.items.max() == 17
    assert load_transactions("msnbc") is t  # parsed once, then cached
    ds = load("msnbc")
    assert set(ds.domain.attributes) <= set(MSNBC_CATEGORIES)
    assert ds.domain.attributes[:3] == ("frontpage", "on-air", "news")
    sums = ds.codes.sum(axis=0, dtype=np.int64)
    assert (np.diff(sums) <= 0).all()  # most frequent first
    assert sums[0] == 313_181  # sessions visiting frontpage
    all17 = load("msnbc", d=17)
    assert all17.domain.attributes[16] == "bbs"
    with pytest.raises(DPMarginalsError, match="d=18"):
        load("msnbc", d=18)
    small = load("msnbc", d=8, n=1000, rng=1)
    assert (small.n, small.domain.attributes) == (1000, ds.domain.attributes[:8])


@needs_data
@pytest.mark.parametrize("name", ["kosarak", "t10i4d100k"])
def test_fimi_top_d_items_by_frequency(name: str):
    t = load_transactions(name)
    ds = load(name, d=10)
    items = [int(a.removeprefix("item_")) for a in ds.domain.attributes]
    counts = t.item_counts()
    assert ds.codes.sum(axis=0).tolist() == counts[items].tolist()
    assert sorted(counts, reverse=True)[:10] == counts[items].tolist()
    assert len(t.distinct().items) == int(counts.sum())


@needs_data
def test_kosarak_prefix_drops_the_cut_line_and_allows_large_n():
    t = load_transactions("kosarak")
    assert t.n == 36_682 and int(np.count_nonzero(t.item_counts())) == 17_034
    big = load("kosarak", d=8, n=100_000, rng=2)
    assert (big.n, big.d) == (100_000, 8)


@needs_data
def test_taxi_flags():
    ds = load("nyc-taxis")
    assert ds.domain.attributes == ("CC", "Toll", "Far", "Night_pick", "Night_drop",
                                    "M_pick", "M_drop", "Tip")
    assert (ds.column("M_pick") | ds.column("M_drop")).all()  # trips touching Manhattan
    cash_tips = ds.counts(["CC", "Tip"])[0, 1]
    assert cash_tips == 0  # cash tips are not recorded


@needs_data
def test_coded_sets_columns_and_labels():
    fire = load("fire")
    assert "Box" not in fire.domain and "Address" not in fire.domain
    br = load("br2000")
    assert br.domain.attributes == tuple(str(i) for i in range(14))
    assert br.domain.sizes == (2, 7, 21, 10, 16, 2, 2, 2, 2, 4, 16, 2, 16, 2)
    assert br.labels["2"][2] == "10"  # PrivMRF int_to_str labels
    nltcs = load("nltcs")
    assert nltcs.domain.attributes[0] == "eating"  # the CSV's column order
    assert load("acs").domain.is_binary()
