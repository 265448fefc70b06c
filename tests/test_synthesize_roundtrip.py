"""A synthetic table reads back through `release` with the same domain, and `synthesize`
says what it wrote on stdout (issue #33, point 8).

`synthesize` writes a binned column by its bins' names ("[45, 65)"), which `release` with
the same domain refused (it wanted numbers).  A binned column now takes a number in its
bins or the name of a bin (numbers first: a label that parses as a number is read as one).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from command_line import dpmarginals
from dpmarginals import release
from dpmarginals.core.domain import Domain
from dpmarginals.synopsis.synthetic import synthesize

DOMAIN = {"sex": ["f", "m"], "age": {"bins": [0, 18, 30, 45, 65, 120]},
          "income": {"bins": [0, 10, 100], "other": True},
          "hours": {"bins": [0, 20, 40, 99], "labels": ["part", "full", "over"]}}


def _people(n: int) -> pd.DataFrame:
    rng = np.random.default_rng(3)
    return pd.DataFrame({"sex": rng.choice(["f", "m"], n), "age": rng.integers(0, 110, n),
                         "income": rng.choice([5, 50, 500, -1], n),
                         "hours": rng.integers(0, 99, n)})


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    folder = tmp_path_factory.mktemp("rt")
    (folder / "domain.json").write_text(json.dumps(DOMAIN))
    path = folder / "r.json"
    release(_people(4000), DOMAIN, method="calm", epsilon=1.0, k=2).save(path)
    return folder, path


def test_synthesize_then_release_with_the_same_domain(released):
    folder, path = released
    out = folder / "synthetic.csv"
    proc = dpmarginals("synthesize", path, "--n", 500, "--out", out, "--seed", 1)
    assert proc.returncode == 0, proc.stderr
    assert "wrote 500 synthetic records" in proc.stdout and proc.stderr == ""
    written = pd.read_csv(out)
    assert set(written["age"]) <= {"[0, 18)", "[18, 30)", "[30, 45)", "[45, 65)",
                                   "[65, 120]"}
    again = dpmarginals("release", out, "--domain", folder / "domain.json", "--epsilon", 1,
                        "--k", 2, "--out", folder / "again.json")
    assert again.returncode == 0, again.stderr


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_the_written_codes_are_the_synthetic_codes(released, suffix):
    """Exactly: the file read back over the domain gives the synthetic records' codes."""
    from dpmarginals.core.records import read_records

    if suffix == ".parquet":
        pytest.importorskip("pyarrow")
    folder, path = released
    from dpmarginals.synopsis.base import load_synopsis

    data = synthesize(load_synopsis(path), 800, rng=2)
    out = folder / f"s{suffix}"
    frame = data.to_frame(labels=True)
    frame.to_csv(out, index=False) if suffix == ".csv" else frame.to_parquet(out, index=False)
    back = read_records(out, Domain.from_dict(DOMAIN))
    np.testing.assert_array_equal(back.codes, data.codes)


def test_a_bin_is_read_by_number_or_by_name():
    lab = Domain.from_dict(DOMAIN).labels[1]
    assert lab.code_of("age", 50) == lab.code_of("age", "[45, 65)") == 3
    hours = Domain.from_dict(DOMAIN).labels[3]
    assert hours.code_of("hours", "full") == hours.code_of("hours", 25) == 1
