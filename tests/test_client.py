"""The client and the report format: numpy-only import, encoding, validation, retries.

The device's own rules (caps, pinning, phases, memoization) are tested in
``tests/test_hostile_server.py``; here, what a report is and how it travels."""

from __future__ import annotations

import base64
import http.server
import json
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

from dpmarginals.core.domain import Domain
from dpmarginals.core.errors import DPMarginalsError
from dpmarginals.core.randomness import SecureRandom
from dpmarginals.protocol.checks import load_plan
from dpmarginals.protocol.device import Device, ValueSubstituted, choose_group, record_row
from dpmarginals.protocol.formats import group_oracle
from dpmarginals.protocol.http import ServiceClient, ServiceError
from dpmarginals.protocol.plan import GroupSpec, Plan
from dpmarginals.protocol.reports import REPORT_KEYS, PlanCodec, ReportError, support_counts
from dpmarginals.protocol.simulate import simulate_reports

SRC = Path(__file__).resolve().parents[1] / "src"
DOMAIN = Domain(("a", "b", "c"), (2, 3, 5))
ORACLES = ("grr", "oue", "sue", "olh", "hr")
CAP = 2.0  # the device's max_epsilon in these tests


def plan_with(oracle: str, epsilon: float = 1.0) -> Plan:
    """Three groups over pairs of a, b, c, all with ``oracle``."""
    groups = tuple(GroupSpec(attrs, oracle, epsilon, DOMAIN.project(attrs).cells())
                   for attrs in (("a", "b"), ("b", "c"), ("a", "c")))
    return Plan("calm", epsilon, DOMAIN, groups, {"k": 2})


def make_report(plan: Plan, record, *, group: int | None = None, rng=None) -> dict:
    """One simulated user's report (the device's randomizer, no ledger)."""
    row = record_row(plan, record, plan.domain.attributes)[None, :]
    return simulate_reports(plan, row, groups=None if group is None else [group], rng=rng,
                            max_epsilon=CAP)[0]


def test_client_imports_only_numpy_and_the_standard_library():
    code = ("import sys; import dpmarginals.protocol.device, dpmarginals.protocol.http, "
            "dpmarginals.protocol.simulate, dpmarginals.protocol.reports; "
            "print(sorted(m for m in ('pandas', 'scipy', 'fastapi', 'starlette', 'pydantic', "
            "'uvicorn', 'statsmodels', 'pyarrow') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PYTHONPATH": str(SRC)}, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("oracle", ORACLES)
def test_report_has_exactly_the_documented_fields_and_validates(oracle):
    plan = plan_with(oracle)
    device = Device(None, max_epsilon=CAP, max_total_epsilon=10 * CAP)
    report = device.report(plan, {"a": 1, "b": 2, "c": 4}, origin="https://a", campaign="c")
    assert report.keys() == REPORT_KEYS
    assert report["version"] == 1 and report["plan_hash"] == plan.hash
    assert len(report["report_id"]) == 32 and int(report["report_id"], 16) >= 0
    json.dumps(report)  # JSON-serialisable as is
    decoded = PlanCodec(plan).decode([report])
    assert decoded.groups == [report["group"]]
    # the stored row round-trips to the same JSON report
    row = PlanCodec(plan).report_of_row(decoded.ids[0], decoded.groups[0], decoded.rows[0])
    assert row == report


@pytest.mark.parametrize("oracle", ORACLES)
def test_report_is_the_oracle_output_of_the_projected_cell(oracle):
    plan = plan_with(oracle)
    record = {"a": 1, "b": 2, "c": 3}
    for group, attrs in enumerate(g.attributes for g in plan.groups):
        cell = DOMAIN.project(attrs).index_of([record[x] for x in attrs])
        native = group_oracle(plan, group).perturb([cell], rng=11)
        expected = PlanCodec(plan).groups[group].payloads(native)[0]
        report = make_report(plan, record, group=group, rng=11)
        assert report["payload"] == expected
        # a record given as a sequence in domain order is the same record
        report = make_report(plan, [1, 2, 3], group=group, rng=11)
        assert report["payload"] == expected


def test_default_randomness_is_the_os_csprng(monkeypatch):
    calls = []
    original = SecureRandom.words

    def counting(self, count, bits):
        calls.append(count)
        return original(self, count, bits)

    monkeypatch.setattr(SecureRandom, "words", counting)
    plan = plan_with("oue")
    device = Device(None, max_epsilon=CAP, max_total_epsilon=10 * CAP)
    first = device.report(plan, {"a": 0, "b": 0, "c": 0}, group=1, origin="o", campaign="c1")
    assert calls, "perturbation did not draw from SecureRandom"
    second = device.report(plan, {"a": 0, "b": 0, "c": 0}, group=1, origin="o", campaign="c2")
    assert first["report_id"] != second["report_id"]
    calls.clear()
    simulate_reports(plan, np.zeros((50, 3), dtype=np.int64), max_epsilon=CAP)
    assert calls


def test_client_errors_name_the_problem():
    """Mistakes of the app's own (a group the plan lacks, a record of the wrong length)
    are one-line errors before any charge; a value the plan's domain cannot encode is not
    (the server would see the refusal): the device reports a random value, charged, and
    tells the app locally."""
    plan = plan_with("grr")
    device = Device(None, max_epsilon=CAP, max_total_epsilon=10 * CAP)

    def report(record, group):
        return device.report(plan, record, group=group, origin="o", campaign="c")

    with pytest.raises(DPMarginalsError, match="group 7"):
        report({"a": 1, "b": 0, "c": 0}, 7)
    with pytest.raises(DPMarginalsError, match="3 values"):
        report([1, 0], 0)
    assert device.ledger.total() == 0  # nothing was charged
    for record, group, why in [({"a": 1}, 0, "lacks the attributes"),
                               ({"a": 1, "b": 0, "c": 5}, 1, r"'c'.*outside its domain"),
                               ({"a": 1.5, "b": 0, "c": 0}, 0, "integer code")]:
        device = Device(None, max_epsilon=CAP, max_total_epsilon=10 * CAP)
        with pytest.warns(ValueSubstituted, match=why):
            sent = report(record, group)
        assert PlanCodec(plan).decode([sent]).groups == [group]  # a valid report
        assert device.ledger.total() == plan.epsilon  # charged as any report


def test_choose_group_is_uniform():
    plan = plan_with("grr")
    counts = np.bincount([choose_group(plan) for _ in range(3000)], minlength=3)
    # each count ~ Binomial(3000, 1/3): sd 25.8; 5 sd bounds (flaky with p < 1e-5)
    assert np.all(np.abs(counts - 1000) < 130)


@pytest.mark.parametrize("oracle", ORACLES)
def test_many_reports_estimate_the_marginal_without_bias(oracle):
    plan = plan_with(oracle, epsilon=2.0)
    rng = np.random.default_rng(3)
    n = 30_000
    records = np.column_stack([rng.integers(0, 2, n), rng.choice(3, n, p=[0.6, 0.3, 0.1]),
                               rng.integers(0, 5, n)])
    groups = np.arange(n) % plan.m
    reports = simulate_reports(plan, records, groups=groups, rng=4, max_epsilon=CAP)
    assert [r["group"] for r in reports[:6]] == [0, 1, 2, 0, 1, 2]
    supports, users = support_counts(plan, reports)
    assert users.tolist() == [n // 3] * 3
    for g, spec in enumerate(plan.groups):
        oracle_obj = group_oracle(plan, g).oracle
        members = groups == g
        truth = np.bincount(PlanCodec(plan).cells(g, records[members]),
                            minlength=spec.cells) / members.sum()
        est = oracle_obj.estimate(supports[g], int(users[g]))
        sd = np.sqrt(oracle_obj.variance(int(users[g]), truth))
        assert np.all(np.abs(est - truth) <= 4.5 * sd)  # per cell; seeded


def test_simulate_reports_checks_its_input():
    plan = plan_with("grr")
    with pytest.raises(DPMarginalsError, match="2-D"):
        simulate_reports(plan, np.zeros(3, dtype=np.int64), max_epsilon=CAP)
    with pytest.raises(DPMarginalsError, match="groups must lie"):
        simulate_reports(plan, np.zeros((2, 3), dtype=np.int64), groups=[0, 3], max_epsilon=CAP)
    with pytest.raises(DPMarginalsError, match="domain"):
        simulate_reports(plan, np.full((2, 3), 9, dtype=np.int64), max_epsilon=CAP)


# -- the report format's validation --------------------------------------------------------
def _bad(plan: Plan, report: dict, match: str, code: str = "invalid_report") -> None:
    with pytest.raises(ReportError, match=match) as info:
        PlanCodec(plan).decode([report])
    assert info.value.code == code
    assert info.value.index == 0


def test_validation_rejects_each_kind_of_bad_report():
    plan = plan_with("grr")
    good = make_report(plan, {"a": 1, "b": 1, "c": 1}, group=0, rng=0)
    _bad(plan, {**good, "plan_hash": "0" * 64}, "not the campaign's plan", "plan_mismatch")
    _bad(plan, {**good, "group": 3}, "group 3 is not one of 0..2")
    _bad(plan, {**good, "group": True}, "group True")
    _bad(plan, {**good, "payload": 6}, "outside 0..5")
    _bad(plan, {**good, "payload": -1}, "outside 0..5")
    _bad(plan, {**good, "payload": 2.0}, "must be an integer")
    _bad(plan, {**good, "version": 2}, "version 2 is not supported")
    _bad(plan, {**good, "report_id": "ABC"}, "32 lowercase hex")
    _bad(plan, {**good, "user": "alice"}, r"unknown fields \['user'\]")
    _bad(plan, {k: v for k, v in good.items() if k != "payload"}, r"missing fields \['payload'\]")
    with pytest.raises(ReportError, match=r"report 1: .*repeats report 0"):
        PlanCodec(plan).decode([good, dict(good)])
    with pytest.raises(ReportError, match="JSON object"):
        PlanCodec(plan).decode([[1, 2]])


def test_validation_of_bit_vector_payloads():
    plan = plan_with("oue")  # group 1 has 15 cells: 2 bytes, one padding bit
    good = make_report(plan, {"a": 0, "b": 2, "c": 4}, group=1, rng=0)
    raw = base64.b64decode(good["payload"])
    assert len(raw) == 2
    _bad(plan, {**good, "payload": base64.b64encode(raw + b"\0").decode()}, "2 bytes")
    padded = bytes([raw[0], raw[1] | 0x80])
    _bad(plan, {**good, "payload": base64.b64encode(padded).decode()}, "beyond value 14")
    _bad(plan, {**good, "payload": "!!!="}, "not valid base64")
    canonical = base64.b64encode(bytes([raw[0], raw[1] & 0x7F])).decode()
    sloppy = canonical[:2] + chr(ord(canonical[2]) | 1) + canonical[3:]  # unused bits set
    if sloppy != canonical:
        _bad(plan, {**good, "payload": sloppy}, "canonical")
    _bad(plan, {**good, "payload": 3}, "base64 string")


def test_validation_of_pair_payloads():
    olh = plan_with("olh")
    good = make_report(olh, {"a": 0, "b": 2, "c": 4}, group=0, rng=0)
    seed, y = good["payload"]
    _bad(olh, {**good, "payload": [seed, 99]}, "hashed value 99")
    _bad(olh, {**good, "payload": [5, y]}, "not in the hash family")
    _bad(olh, {**good, "payload": [seed]}, "two integers")
    hr = plan_with("hr")
    good = make_report(hr, {"a": 0, "b": 2, "c": 4}, group=0, rng=0)
    j, _ = good["payload"]
    _bad(hr, {**good, "payload": [j, 2]}, "bit must be 0 or 1")
    _bad(hr, {**good, "payload": [64, 0]}, "index 64")
    _bad(hr, {**good, "payload": [j, False]}, "two integers")


def test_plan_codec_refuses_plans_that_cannot_be_collected():
    bad_cells = Plan("calm", 1.0, DOMAIN, (GroupSpec(("a", "b"), "grr", 1.0, 7),))
    with pytest.raises(DPMarginalsError, match="cells = 7"):
        PlanCodec(bad_cells)
    with pytest.raises(DPMarginalsError, match="no groups"):
        PlanCodec(Plan("em", 1.0, DOMAIN, ()))
    with pytest.raises(DPMarginalsError, match="unknown attribute"):
        PlanCodec(Plan("calm", 1.0, DOMAIN, (GroupSpec(("a", "z"), "grr", 1.0, 4),)))


def test_load_plan_accepts_a_plan_a_dict_json_and_a_file(tmp_path):
    plan = plan_with("grr")
    path = tmp_path / "plan.json"
    plan.save(path)
    for source in (plan, plan.to_dict(), plan.to_json(), path, str(path)):
        assert load_plan(source).hash == plan.hash
    tampered = {**plan.to_dict(), "epsilon": 9.0}
    with pytest.raises(DPMarginalsError, match="does not match"):
        load_plan(tampered)


# -- the HTTP client against a stand-in server (standard library only) ----------------------
class _FlakyHandler(http.server.BaseHTTPRequestHandler):
    """Drops the first POST after reading it, then answers 409 with every report duplicate."""

    posts: ClassVar[list[bytes]] = []

    def log_message(self, *args):  # quiet
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).posts.append(body)
        if len(type(self).posts) == 1:
            self.close_connection = True
            self.connection.shutdown(2)  # as if the server died after committing
            return
        n = len(json.loads(body).get("reports", [None]))
        answer = json.dumps({"error": "duplicate_report", "reason": "seen",
                             "duplicates": list(range(n))}).encode()
        self.send_response(409)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)


@pytest.fixture
def flaky_server():
    _FlakyHandler.posts = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _FlakyHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_retried_batch_that_was_stored_counts_as_stored(flaky_server):
    plan = plan_with("grr")
    reports = simulate_reports(plan, np.zeros((5, 3), dtype=np.int64), rng=0, max_epsilon=CAP)
    with ServiceClient(flaky_server, "c1", retries=2) as client:
        out = client.send_batch(reports)
    assert out == {"accepted": 0, "already_stored": 5}
    assert len(_FlakyHandler.posts) == 2 and _FlakyHandler.posts[0] == _FlakyHandler.posts[1]


def test_a_first_attempt_duplicate_is_an_error(flaky_server):
    _FlakyHandler.posts = [b"already one"]  # skip the dropped connection
    plan = plan_with("grr")
    report = make_report(plan, [0, 0, 0], rng=0)
    with ServiceClient(flaky_server, "c1", retries=0) as client, \
            pytest.raises(ServiceError, match="409 duplicate_report") as info:
        client.send(report)
    assert info.value.status == 409


def _unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_client_refuses_non_http_urls_and_unreachable_servers():
    with pytest.raises(DPMarginalsError, match="http"):
        ServiceClient("ftp://example", "c")
    client = ServiceClient(f"http://127.0.0.1:{_unused_port()}", "c", retries=0, timeout=2)
    with client, pytest.raises(DPMarginalsError, match="cannot reach"):
        client.status()
