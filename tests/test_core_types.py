"""Domain, MarginalTable and Dataset: construction, validation, round trips."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from dpmarginals.core.dataset import Dataset
from dpmarginals.core.domain import Domain
from dpmarginals.core.errors import DPMarginalsError, PrivacyLeakWarning
from dpmarginals.core.randomness import SecureRandom
from dpmarginals.core.table import MarginalTable


def test_domain_index_round_trip():
    dom = Domain(("a", "b", "c"), (2, 3, 4))
    grid = np.indices(dom.shape).reshape(3, -1).T
    flat = dom.index_of(grid)
    assert np.array_equal(flat, np.arange(dom.cells()))
    assert np.array_equal(dom.values_of(flat), grid)
    assert dom.values_of(23) == (1, 2, 3)


def test_domain_validation_names_the_problem():
    with pytest.raises(DPMarginalsError, match="size >= 1"):
        Domain(("a",), (0,))
    with pytest.raises(DPMarginalsError, match="repeat"):
        Domain(("a", "a"), (2, 2))
    dom = Domain(("a", "b"), (2, 3))
    with pytest.raises(DPMarginalsError, match=r"attribute 'b'.*out of its domain 0\.\.2"):
        dom.index_of((1, 3))
    with pytest.raises(DPMarginalsError, match="unknown attribute 'z'"):
        dom.project(["z"])


def test_domain_json_styles(tmp_path):
    pgm = tmp_path / "pgm.json"
    pgm.write_text(json.dumps({"x": 2, "y": 5}))
    mrf = tmp_path / "mrf.json"
    mrf.write_text(json.dumps({"0": {"type": "discrete", "domain": 2}, "1": {"domain": 5}}))
    assert Domain.load(pgm) == Domain(("x", "y"), (2, 5))
    assert Domain.load(mrf) == Domain(("0", "1"), (2, 5))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(DPMarginalsError, match="not valid JSON"):
        Domain.load(bad)
    bad.write_text(json.dumps({"x": "two"}))
    with pytest.raises(DPMarginalsError, match="'x' must be an integer"):
        Domain.load(bad)
    bad.write_text(json.dumps({"x": {"type": "discrete"}}))
    with pytest.raises(DPMarginalsError, match="'x' needs a size"):
        Domain.load(bad)


def test_marginal_table_project_and_frame():
    rng = np.random.default_rng(0)
    dom = Domain(("a", "b", "c"), (2, 3, 4))
    vals = rng.random(dom.shape)
    vals /= vals.sum()
    t = MarginalTable(dom, vals)
    ca = t.project(["c", "a"])
    assert ca.attributes == ("c", "a")
    assert np.allclose(ca.values, vals.sum(axis=1).T)
    frame = t.to_frame()
    assert list(frame.columns) == ["a", "b", "c", "fraction"]
    assert len(frame) == 24
    assert frame.loc[(frame.a == 1) & (frame.b == 2) & (frame.c == 3), "fraction"].item() == vals[
        1, 2, 3
    ]
    back = MarginalTable.from_dict(json.loads(json.dumps(t.to_dict())))
    assert np.array_equal(back.values, t.values) and back.domain == dom


def test_dataset_marginal_is_exact_count():
    codes = np.array([[0, 1, 2], [1, 1, 0], [0, 1, 2], [1, 0, 1]])
    ds = Dataset(codes, Domain(("a", "b", "c"), (2, 2, 3)))
    m = ds.marginal(["c", "a"])
    expected = np.zeros((3, 2))
    for row in codes:
        expected[row[2], row[0]] += 0.25
    assert np.allclose(m.values, expected)


def test_dataset_rejects_out_of_domain_values():
    with pytest.raises(DPMarginalsError, match="value 2 of attribute 'a'"):
        Dataset(np.array([[0], [2]]), Domain(("a",), (2,)))


def test_from_frame_encodes_categories_and_refuses_missing():
    frame = pd.DataFrame({"color": ["red", "blue", "red"], "n": [0, 2, 1]})
    with pytest.warns(PrivacyLeakWarning, match="read off the private data"):
        ds = Dataset.from_frame(frame)
    assert ds.domain == Domain.from_dict({"color": ["blue", "red"], "n": 3})
    assert ds.labels["color"] == ("blue", "red")
    assert list(ds.to_frame(labels=True)["color"]) == ["red", "blue", "red"]
    with pytest.raises(DPMarginalsError, match="column 'n' has a missing value"), \
            pytest.warns(PrivacyLeakWarning):
        Dataset.from_frame(pd.DataFrame({"n": [1.0, None]}))


def test_from_csv_with_both_domain_styles(tmp_path):
    csv = tmp_path / "d.csv"
    pd.DataFrame({"0": [0, 1, 1], "1": [2, 0, 1]}).to_csv(csv, index=False)
    dom = tmp_path / "dom.json"
    dom.write_text(json.dumps({"0": {"domain": 2}, "1": {"domain": 3}}))
    ds = Dataset.from_csv(csv, dom)
    assert ds.n == 3 and ds.domain.sizes == (2, 3)
    dom.write_text(json.dumps({"0": 2, "1": 2}))
    with pytest.raises(DPMarginalsError, match=r"d\.csv line 2, column '1': value 2 is not in"):
        Dataset.from_csv(csv, dom)
    dom.write_text(json.dumps({"0": 2, "zzz": 2}))
    with pytest.raises(DPMarginalsError, match="zzz"):
        Dataset.from_csv(csv, dom)


def test_sample_with_replacement_is_seeded():
    ds = Dataset(np.arange(10).reshape(10, 1), Domain(("a",), (10,)))
    s1 = ds.sample(1000, rng=3)
    s2 = ds.sample(1000, rng=3)
    assert s1.n == 1000 and np.array_equal(s1.codes, s2.codes)
    # every row is drawn with probability 1/10: counts ~ Binomial(1000, 0.1), sd ~ 9.5;
    # a 5-sigma band keeps this seeded check far from flaky.
    counts = np.bincount(s1.codes[:, 0], minlength=10)
    assert np.all(np.abs(counts - 100) < 5 * np.sqrt(90))


def test_secure_random_is_uniform():
    # 60,000 draws over 6 values: chi-squared with 5 dof; p-value > 1e-4 except with
    # probability 1e-4 (this test uses OS entropy on purpose, so it is not seeded).
    from scipy import stats

    x = SecureRandom().integers(0, 6, size=60_000)
    counts = np.bincount(x, minlength=6)
    assert stats.chisquare(counts).pvalue > 1e-4
    u = SecureRandom().random(60_000)
    assert u.min() >= 0 and u.max() < 1
    assert stats.kstest(u, "uniform").pvalue > 1e-4


# ---- data validated once; users drawn from a table ------------------------------------


def _mixed(n: int, seed: int) -> Dataset:
    rng = np.random.default_rng(seed)
    sizes = (3, 2, 5, 2, 4)
    codes = np.column_stack([rng.integers(0, s, n) for s in sizes])
    return Dataset(codes, Domain(tuple("abcde"), sizes), {"a": ["x", "y", "z"]})


def test_derived_datasets_are_not_validated_again(monkeypatch):
    data = _mixed(200, 1)
    calls = []
    monkeypatch.setattr(Domain, "validate_codes", lambda self, codes: calls.append(1))
    data.take(np.arange(50)).project(["c", "a"]).sample(1000, rng=0).take([3, 1])
    assert calls == []
    Dataset(np.zeros((2, 5), int), data.domain)  # a new Dataset is checked
    assert calls == [1]


def test_drawn_users_behave_as_their_copies():
    """A sample larger than the table keeps (table, row numbers); every operation gives what
    the materialized copies give, and the codes are built only when asked for."""
    data = _mixed(300, 2)
    big = data.sample(5000, rng=3)
    table, rows = big.drawn_from
    assert table is data.codes and big.n == 5000 and len(big) == 5000
    assert big.__dict__["_codes"] is None
    copies = Dataset(data.codes[rows], data.domain)
    for attrs in (["a"], ["c", "a"], ["e", "b", "d"]):
        np.testing.assert_array_equal(big.counts(attrs), copies.counts(attrs))
        np.testing.assert_array_equal(big.cell_indices(attrs), copies.cell_indices(attrs))
        np.testing.assert_allclose(big.marginal(attrs).values, copies.marginal(attrs).values)
    np.testing.assert_array_equal(big.column("d"), copies.column("d"))
    part = big.take(np.arange(4000, 5000)).project(["e", "a"])
    assert part.drawn_from is not None and part.domain.attributes == ("e", "a")
    np.testing.assert_array_equal(part.counts(["a", "e"]),
                                  copies.take(np.arange(4000, 5000)).counts(["a", "e"]))
    assert big.__dict__["_codes"] is None  # nothing above built the copies
    np.testing.assert_array_equal(big.codes, copies.codes)
    assert big.labels == {"a": ("x", "y", "z")}
    small = data.sample(100, rng=4)  # fewer users than rows: stored as they are
    assert small.drawn_from is None and small.n == 100


def test_take_rows_moves_whole_rows():
    from dpmarginals.core.dataset import take_rows

    rng = np.random.default_rng(5)
    for dtype, d in ((np.uint8, 7), (np.uint16, 3), (np.int64, 1)):
        codes = rng.integers(0, 200, (50, d)).astype(dtype)
        rows = rng.integers(0, 50, 80)
        np.testing.assert_array_equal(take_rows(codes, rows), codes[rows])
    f_order = np.asfortranarray(rng.integers(0, 9, (20, 4)).astype(np.uint8))
    np.testing.assert_array_equal(take_rows(f_order, [3, 3, 0]), f_order[[3, 3, 0]])


def test_domain_check_names_the_first_bad_value():
    dom = Domain(("a", "b", "c"), (2, 3, 4))
    codes = np.zeros((100, 3), dtype=np.int64)
    codes[40, 2], codes[70, 1] = 4, -1
    with pytest.raises(DPMarginalsError, match=r"value -1 of attribute 'b' \(row 70\)"):
        dom.validate_codes(codes)
    codes[70, 1] = 0
    with pytest.raises(DPMarginalsError, match=r"value 4 of attribute 'c' \(row 40\)"):
        dom.validate_codes(codes.astype(np.uint8))
