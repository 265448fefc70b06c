"""A release file is checked field by field on load, and an edit is detected (issue #33,
point 3).

The issue's trial: epsilon edited from 1 to 0.01, a zeroed plan hash, version 99, method
"nosuch", a cell set to -5 or 1e6 were all served as "private, measured" and fed to
`synthesize`.  Now `save` records the SHA-256 of the content, and `load_synopsis`,
`query` and `synthesize` refuse an altered file in one line; a file stripped of its digest
is read as not private; and every field is validated whatever the digest says.
"""

from __future__ import annotations

import importlib
import json
import warnings

import pandas as pd
import pytest

from command_line import dpmarginals, one_error_line
from dpmarginals import release
from dpmarginals.core.errors import DPMarginalsError
from dpmarginals.core.provenance import NotPrivateWarning
from dpmarginals.synopsis.base import load_synopsis

# Importing the methods (as the first load does) changes the warning filters: do it here,
# not inside pytest.warns.
importlib.import_module("dpmarginals.methods")

DOMAIN = {"sex": ["f", "m"], "smoker": ["no", "yes"], "age": {"bins": [0, 30, 60, 120]}}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A private CALM release of 2,000 people, saved; and its JSON body."""
    frame = pd.DataFrame({"sex": ["f", "m", "m", "f"] * 500,
                          "smoker": ["no", "no", "yes", "no"] * 500,
                          "age": [25, 40, 70, 33] * 500})
    path = tmp_path_factory.mktemp("release") / "r.json"
    release(frame, DOMAIN, method="calm", epsilon=1.0, k=2).save(path)
    return path, json.loads(path.read_text())


def _write(tmp_path, body, name="edited.json"):
    path = tmp_path / name
    path.write_text(json.dumps(body))
    return path


def _edited(body, edit, *, keep_digest=True):
    out = json.loads(json.dumps(body))
    if not keep_digest:
        out.pop("digest", None)
    edit(out)
    return out


def content_digest(body):
    """The digest as docs and :mod:`dpmarginals.synopsis.release_file` define it: SHA-256
    of the canonical JSON of everything but the digest (computed here, so a forger's
    recomputation needs nothing of the package)."""
    import hashlib

    rest = {k: v for k, v in body.items() if k != "digest"}
    text = json.dumps(rest, sort_keys=True, separators=(",", ":")).encode()
    return "sha256:" + hashlib.sha256(text).hexdigest()


def test_save_records_the_digest_of_the_content(saved):
    from dpmarginals.synopsis.release_file import content_digest as packaged

    path, body = saved
    assert packaged(body) == content_digest(body)
    assert body["digest"] == content_digest(body)
    assert load_synopsis(path).privacy.private  # reads back, private, no warning


def _one_cell(body):
    """Move 0.01 from the largest cell of the first view to its smallest: still a table
    of fractions summing to 1."""
    values = body["views"][0]["values"]
    high, low = values.index(max(values)), values.index(min(values))
    values[high] -= 0.01
    values[low] += 0.01


def _more_mass(body):
    values = body["views"][0]["values"]
    values[values.index(min(values))] += 0.05


EDITS = {
    "a cell": _one_cell,
    "epsilon 1 -> 0.01": lambda b: b["privacy"].__setitem__("epsilon", 0.01),
    "a zeroed plan hash": lambda b: b["privacy"].__setitem__("plan_hash", "0" * 64),
}


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_an_edited_file_is_refused_by_load_query_and_synthesize(saved, tmp_path, edit):
    _, body = saved
    path = _write(tmp_path, _edited(body, EDITS[edit]))
    with pytest.raises(DPMarginalsError, match="altered after it was saved"):
        load_synopsis(path)
    one_error_line(dpmarginals("query", path, "--attributes", "sex,smoker"),
                   "altered after it was saved", str(path))
    one_error_line(dpmarginals("synthesize", path, "--n", 10, "--out", tmp_path / "s.csv"),
                   "altered after it was saved")
    assert not (tmp_path / "s.csv").exists()


def test_a_file_stripped_of_its_digest_is_not_taken_for_private(saved, tmp_path):
    _, body = saved
    path = _write(tmp_path, _edited(body, _one_cell, keep_digest=False))
    with pytest.warns(NotPrivateWarning, match="no digest of its content"):
        synopsis = load_synopsis(path)
    assert synopsis.privacy.private is False
    proc = dpmarginals("query", path, "--attributes", "sex,smoker")
    assert proc.returncode == 0 and "NOT a private release" in proc.stdout
    proc = dpmarginals("synthesize", path, "--n", 10, "--out", tmp_path / "s.csv")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "error: " in proc.stderr and "add --simulation" in proc.stderr


FIELDS = [
    # (edit, the field named, the value shown)
    (lambda b: b.__setitem__("version", 99), "version", "99"),
    (lambda b: b.__setitem__("method", "nosuch"), "method", "'nosuch'"),
    (lambda b: b["privacy"].__setitem__("method", "aim"), "privacy.method", "'aim'"),
    (lambda b: b["privacy"].__setitem__("model", "nowhere"), "privacy.model", "'nowhere'"),
    (lambda b: b["privacy"].__setitem__("epsilon", -1), "privacy.epsilon", "-1"),
    (lambda b: b["privacy"].__setitem__("epsilon", "1"), "privacy.epsilon", "'1'"),
    (lambda b: b["privacy"].__setitem__("delta", 2), "privacy.delta", "2"),
    (lambda b: b["privacy"].__setitem__("plan_hash", "00"), "privacy.plan_hash", "'00'"),
    (lambda b: b["views"][1]["values"].__setitem__(2, -5), "views[1].values[2]", "-5"),
    (lambda b: b["views"][1]["values"].__setitem__(2, 1e6), "views[1].values[2]",
     "1000000.0"),
    (lambda b: b["views"][1]["values"].__setitem__(2, "x"), "views[1].values[2]", "'x'"),
    (lambda b: b["views"][1]["values"].pop(), "views[1].values", "cells"),
    (lambda b: b["views"][1].__setitem__("attributes", ["sex", "weight"]),
     "views[1].attributes", "'weight'"),
    (lambda b: b["views"][1].__setitem__("attributes", ["sex", "sex"]),
     "views[1].attributes", "['sex', 'sex']"),
    (_more_mass, "the sum of views[0].values", "1.05"),
    (lambda b: b["info"]["groups"][0].__setitem__("users", -3), "info.groups[0].users", "-3"),
    (lambda b: b["info"]["groups"][0].__setitem__("oracle", "magic"),
     "info.groups[0].oracle", "'magic'"),
    (lambda b: b["info"]["groups"][0].__setitem__("epsilon", float("inf")),
     "info.groups[0].epsilon", "inf"),
    (lambda b: b["info"].__setitem__("n", -1), "info.n", "-1"),
    (lambda b: b.__setitem__("digest", "md5:00"), "digest", "'md5:00'"),
]


@pytest.mark.parametrize("case", range(len(FIELDS)))
def test_every_field_is_checked_with_one_line_naming_it(saved, tmp_path, case):
    """Whatever the digest says (it can be recomputed over nonsense), each field is
    validated: the error names the file, the field and the value."""
    _, body = saved
    edit, field, value = FIELDS[case]
    edited = _edited(body, edit, keep_digest=False)
    if field != "digest":
        edited["digest"] = content_digest(edited)  # a forger recomputes it
    path = _write(tmp_path, edited)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(DPMarginalsError) as err:
            load_synopsis(path)
    line = str(err.value)
    assert "\n" not in line and line.startswith(f"{path}: {field} = "), line
    assert value in line, line
    if case % 5 == 0:  # the command line says the same line (a few cases: each is a process)
        one_error_line(dpmarginals("query", path, "--attributes", "sex"), field)
