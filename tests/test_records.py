"""Reading people's records from a file: file line numbers and one reader (issue #33,
point 5).

`release` counted data rows from 0 ("row 1234" was line 1236 of the file) and a duplicated
header came out as pandas' renamed ``sex.1``.  :func:`dpmarginals.core.records.read_records`
is the one reader of a CSV or Parquet file over a domain (`release`, `run`, and the
deployment client reuse it): its errors name the file, the line as an editor counts it, the
column and the value.
"""

from __future__ import annotations

import gzip
import json

import numpy as np
import pandas as pd
import pytest

from command_line import dpmarginals, one_error_line
from dpmarginals.core.dataset import Dataset
from dpmarginals.core.domain import Domain
from dpmarginals.core.errors import DPMarginalsError

DOMAIN = {"sex": ["f", "m"], "age": {"bins": [0, 30, 60, 120]}, "region": ["N", "S", "NA"]}


def _people(n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"sex": rng.choice(["f", "m"], n), "age": rng.integers(0, 100, n),
                         "region": rng.choice(["N", "S", "NA"], n)})


@pytest.fixture
def files(tmp_path):
    frame = _people(2000)
    csv = tmp_path / "people.csv"
    frame.to_csv(csv, index=False)
    dom = tmp_path / "domain.json"
    dom.write_text(json.dumps(DOMAIN))
    return frame, csv, dom


def test_release_names_the_file_line_of_a_bad_value(files, tmp_path):
    """Data row 1234 (from 0) is line 1236 of the file: the header is line 1."""
    _frame, csv, dom = files
    lines = csv.read_text().splitlines()
    lines[1235] = "x" + lines[1235][1:]  # the sex of data row 1234
    csv.write_text("\n".join(lines) + "\n")
    line = one_error_line(dpmarginals("release", csv, "--domain", dom, "--epsilon", 1,
                                      "--out", tmp_path / "r.json"),
                          "people.csv line 1236, column 'sex'", "value 'x'")
    assert "row 1234" not in line


def test_a_duplicated_header_is_named(files, tmp_path):
    _, csv, dom = files
    lines = csv.read_text().splitlines()
    lines[0] = lines[0].replace("region", "sex")
    csv.write_text("\n".join(lines) + "\n")
    line = one_error_line(dpmarginals("release", csv, "--domain", dom, "--epsilon", 1,
                                      "--out", tmp_path / "r.json"),
                          "people.csv line 1: column 'sex' appears twice", "columns 1 and 3")
    assert "sex.1" not in line


def test_lines_count_blank_lines_quoted_newlines_and_compression(tmp_path):
    """A quoted value spanning two lines and blank lines count as an editor counts them;
    a .csv.gz is read and counted the same."""
    from dpmarginals.core.records import csv_lines, read_records

    text = 'sex,age,region,note\n\nf,34,N,"two\nlines"\n\nm,70,S,x\nm,130,S,y\n'
    for name, write in (("p.csv", lambda p: p.write_text(text)),
                        ("p.csv.gz", lambda p: p.write_bytes(gzip.compress(text.encode())))):
        path = tmp_path / name
        write(path)
        np.testing.assert_array_equal(csv_lines(path), [3, 6, 7])
        with pytest.raises(DPMarginalsError, match=rf"^{name} line 7, column 'age': value "
                           r"130 is not in the declared domain"):
            read_records(path, Domain.from_dict(DOMAIN), extra_columns="ignore")


def test_an_empty_cell_is_named_as_empty(tmp_path):
    from dpmarginals.core.records import read_records

    path = tmp_path / "p.csv"
    path.write_text("sex,age,region\nf,34,N\nm,,S\n")
    with pytest.raises(DPMarginalsError, match=r"^p.csv line 3, column 'age': the cell is "
                       r"empty"):
        read_records(path, Domain.from_dict(DOMAIN))


def test_a_label_spelled_like_a_missing_value_is_a_label(files):
    """pandas reads "NA" as missing; a declared label "NA" (a region) is a label."""
    from dpmarginals.core.records import read_records

    frame, csv, _dom = files
    records = read_records(csv, Domain.from_dict(DOMAIN))
    region = records.codes[:, 2]
    assert (region == 2).sum() == (frame["region"] == "NA").sum() > 0


def test_read_records_is_what_release_reads(files):
    """The codes, the file's own values and where each record is, in the domain's order."""
    from dpmarginals.core.records import read_records

    frame, csv, dom = files
    domain = Domain.from_dict(DOMAIN)
    records = read_records(csv, domain)
    assert records.codes.shape == (2000, 3) and records.n == 2000
    np.testing.assert_array_equal(records.codes, Dataset.from_file(csv, dom).codes)
    assert list(records.frame.columns) == ["sex", "age", "region"]
    assert records.frame["sex"].tolist() == frame["sex"].tolist()
    assert records.where(0) == "people.csv line 2" and records.where(1999) == "people.csv line 2001"


def test_parquet_records_are_numbered_from_1(files, tmp_path):
    from dpmarginals.core.records import read_records

    pytest.importorskip("pyarrow")
    frame, _, _ = files
    frame.loc[41, "sex"] = "?"
    path = tmp_path / "people.parquet"
    frame.to_parquet(path, index=False)
    with pytest.raises(DPMarginalsError, match=r"^people.parquet record 42, column 'sex': "
                       r"value '\?'"):
        read_records(path, Domain.from_dict(DOMAIN))


def test_extra_columns_are_refused_or_skipped(files, tmp_path):
    from dpmarginals.core.records import read_records

    frame, _, _ = files
    path = tmp_path / "more.csv"
    frame.assign(income=1).to_csv(path, index=False)
    with pytest.raises(DPMarginalsError, match=r"\['income'\] of the data are not in the domain"):
        read_records(path, Domain.from_dict(DOMAIN))
    assert read_records(path, Domain.from_dict(DOMAIN), extra_columns="ignore").n == 2000


def test_run_on_a_csv_names_the_line_too(tmp_path):
    csv = tmp_path / "d.csv"
    pd.DataFrame({"a": [0, 1, 5], "b": [0, 1, 1]}).to_csv(csv, index=False)
    dom = tmp_path / "dom.json"
    dom.write_text(json.dumps({"a": 2, "b": 2}))
    one_error_line(dpmarginals("run", "--dataset", csv, "--domain", dom, "--epsilon", 1,
                               "--k", 1), "d.csv line 4, column 'a': value 5")
