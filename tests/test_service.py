"""The aggregator service in-process: its store (SQLite, PostgreSQL) and its HTTP API.

PostgreSQL tests run against ``$DPMARGINALS_TEST_POSTGRES_URL`` if set, else against a
throw-away cluster started with the machine's ``initdb``/``pg_ctl`` on 127.0.0.1 (as the
``postgres`` user when run as root); without either they are skipped, except in CI
(``CI`` set), where that fails: ``.ci/run`` installs Debian's PostgreSQL, so a missing
server cannot hide these tests (issue #33).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import sqlite3
import subprocess
import tempfile
import threading
import time
import uuid
import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("fastapi")
with warnings.catch_warnings():  # starlette's notice about its httpx-based test client
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from dpmarginals.aggregation import synopsis_from_reports
from dpmarginals.core.domain import Domain
from dpmarginals.core.errors import DPMarginalsError
from dpmarginals.local.calm import CALM
from dpmarginals.protocol.device import Device
from dpmarginals.protocol.plan import GroupSpec, Plan
from dpmarginals.protocol.reports import MAX_BATCH_REPORTS, PlanCodec, ReportError
from dpmarginals.protocol.simulate import simulate_reports
from dpmarginals.service.app import create_app
from dpmarginals.service.store import SQLiteStore, Store, open_store

TOKEN = "test-admin-token"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
OPEN = {"tickets": "off", "public": True, "refresh_seconds": 0, "status_granularity": 1}
"""Settings of the campaigns these tests post reports to without tickets (the ticket flow,
tokens and coarsened status are tested in tests/test_service_open.py)."""
DOMAIN = Domain(("a", "b", "c", "d"), (2, 3, 4, 2))


def mixed_plan() -> Plan:
    """Five groups, one per oracle, so every payload format goes through the service."""
    sets = [("a", "b"), ("b", "c"), ("c", "d"), ("a", "d"), ("a", "c")]
    oracles = ["grr", "oue", "olh", "hr", "sue"]
    groups = tuple(GroupSpec(s, o, 1.0, DOMAIN.project(s).cells())
                   for s, o in zip(sets, oracles, strict=True))
    return Plan("calm", 1.0, DOMAIN, groups, {"k": 2})


def records(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, DOMAIN.sizes, size=(n, len(DOMAIN)))


# -- PostgreSQL on demand ------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _skip_or_fail(reason: str) -> None:
    """Skip a PostgreSQL test outside CI; in CI (``CI`` set) fail: it must run there."""
    if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
        pytest.fail(f"the PostgreSQL store's tests must run in CI: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def postgres_url():
    url = os.environ.get("DPMARGINALS_TEST_POSTGRES_URL")
    if url:
        yield url
        return
    try:
        import psycopg  # noqa: F401
    except ImportError:
        _skip_or_fail("psycopg is not installed (pip install -e '.[service]')")
    bins = sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)  # Debian's place
    search = os.pathsep.join([os.environ.get("PATH", ""), *map(str, bins)])
    initdb, pg_ctl = shutil.which("initdb", path=search), shutil.which("pg_ctl", path=search)
    if not (initdb and pg_ctl):
        _skip_or_fail("no PostgreSQL: set DPMARGINALS_TEST_POSTGRES_URL or install initdb/pg_ctl")
    base = Path(tempfile.mkdtemp(prefix="dpmarginals-pg-"))
    prefix: list[str] = []
    if os.geteuid() == 0:  # postgres refuses to run as root
        import pwd

        try:
            user = pwd.getpwnam("postgres")
        except KeyError:
            _skip_or_fail("running as root and there is no 'postgres' user to run PostgreSQL")
        os.chown(base, user.pw_uid, user.pw_gid)
        prefix = ["runuser", "-u", "postgres", "--"]
    port = _free_port()
    data = base / "data"
    run = {"capture_output": True, "text": True, "timeout": 120}
    made = subprocess.run([*prefix, initdb, "-D", str(data), "-A", "trust", "-U", "postgres",
                           "--no-sync"], **run)
    if made.returncode != 0:
        shutil.rmtree(base, ignore_errors=True)
        _skip_or_fail(f"initdb failed: {made.stderr.strip()[-200:]}")
    started = subprocess.run([*prefix, pg_ctl, "-D", str(data), "-l", str(base / "log"), "-w",
                              "-o", f"-h 127.0.0.1 -p {port} -k {base} -F", "start"], **run)
    if started.returncode != 0:
        shutil.rmtree(base, ignore_errors=True)
        _skip_or_fail(f"PostgreSQL did not start: {started.stderr.strip()[-200:]}")
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*prefix, pg_ctl, "-D", str(data), "-m", "immediate", "stop"], **run)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(params=["sqlite", "postgresql"])
def store_spec(request, tmp_path):
    if request.param == "sqlite":
        return str(tmp_path / "store.db")
    return request.getfixturevalue("postgres_url")


@pytest.fixture
def store(store_spec):
    with open_store(store_spec) as s:
        yield s


def unique_name() -> str:
    return "c" + uuid.uuid4().hex[:12]


# -- the store -----------------------------------------------------------------------------
def _assert_counts_match(store: Store, campaign) -> tuple[list[np.ndarray], np.ndarray]:
    supports, users = store.counts(campaign)
    again, users_again = store.recount(campaign)
    assert users.tolist() == users_again.tolist()
    for a, b in zip(supports, again, strict=True):
        assert a.tolist() == b.tolist()
    return supports, users


def test_store_keeps_counts_equal_to_its_reports_and_survives_reopening(store_spec):
    plan = mixed_plan()
    name = unique_name()
    reports = simulate_reports(plan, records(600), max_epsilon=1.0, rng=1)
    with open_store(store_spec) as store:
        campaign, created = store.create_campaign(name, plan)
        assert created
        codec = campaign.codec
        for i in range(0, 600, 150):
            assert store.add_reports(campaign, codec.decode(reports[i : i + 150])) == 150
        _, users = _assert_counts_match(store, campaign)
        assert users.sum() == 600
    with open_store(store_spec) as store:
        campaign = store.campaign(name)
        assert campaign is not None and campaign.plan.hash == plan.hash
        _, users_again = _assert_counts_match(store, campaign)
        assert users_again.tolist() == users.tolist()
        exported = list(store.reports(campaign))
    assert sorted(r["report_id"] for r in exported) == sorted(r["report_id"] for r in reports)
    assert {json.dumps(r, sort_keys=True) for r in exported} == {
        json.dumps(r, sort_keys=True) for r in reports}


def test_store_rejects_a_batch_with_a_known_id_and_stores_nothing_of_it(store):
    plan = mixed_plan()
    campaign, _ = store.create_campaign(unique_name(), plan)
    codec = campaign.codec
    reports = simulate_reports(plan, records(300), max_epsilon=1.0, rng=2)
    store.add_reports(campaign, codec.decode(reports[:100]))
    with pytest.raises(ReportError) as info:
        store.add_reports(campaign, codec.decode(reports[100:200] + reports[50:52]))
    assert info.value.code == "duplicate_report"
    assert info.value.duplicates == [100, 101] and info.value.index == 100
    _, users = _assert_counts_match(store, campaign)
    assert users.sum() == 100
    assert store.add_reports(campaign, codec.decode(reports[100:200])) == 100


def test_concurrent_writers_store_every_id_once(store):
    """Group commit under contention: overlapping batches from 8 threads."""
    plan = mixed_plan()
    campaign, _ = store.create_campaign(unique_name(), plan)
    codec = campaign.codec
    reports = simulate_reports(plan, records(2000), max_epsilon=1.0, rng=3)
    accepted, rejected = [], []

    def writer(k: int) -> None:
        for start in range(k * 50, 2000 - 100, 400):  # windows overlap across threads
            try:
                accepted.append(store.add_reports(campaign, codec.decode(
                    reports[start : start + 100])))
            except ReportError as exc:
                assert exc.code == "duplicate_report"
                rejected.append(start)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = [r["report_id"] for r in store.reports(campaign)]
    assert len(ids) == len(set(ids)) == sum(accepted)
    assert rejected  # the overlap did produce conflicts
    _assert_counts_match(store, campaign)


def test_store_campaigns_are_idempotent_and_refuse_another_plan(store):
    plan = mixed_plan()
    name = unique_name()
    first, created = store.create_campaign(name, plan)
    again, created_again = store.create_campaign(name, plan)
    assert created and not created_again and first.num == again.num
    other = CALM(epsilon=1.0, k=2).plan(DOMAIN, 1000)
    with pytest.raises(DPMarginalsError, match="exists with another plan"):
        store.create_campaign(name, other)
    assert (name, plan.hash) in store.campaigns()


def test_sqlite_store_is_in_wal_mode_with_the_chosen_sync(tmp_path):
    with SQLiteStore(tmp_path / "s.db", synchronous="normal") as store:
        store.create_campaign("x", mixed_plan())
        con = sqlite3.connect(tmp_path / "s.db")
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        con.close()
        assert store.synchronous == "NORMAL"
    with pytest.raises(DPMarginalsError, match="synchronous"):
        SQLiteStore(tmp_path / "t.db", synchronous="off")


def test_open_store_reads_paths_and_urls(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with open_store("sqlite:///rel.db") as s:
        assert isinstance(s, SQLiteStore) and s.path == Path("rel.db")
    with open_store(f"sqlite:///{tmp_path}/abs.db") as s:
        assert s.path == tmp_path / "abs.db"
    with pytest.raises(DPMarginalsError, match="unknown store URL"):
        open_store("mysql://x")
    with pytest.raises(DPMarginalsError, match="does not exist"):
        open_store(tmp_path / "no" / "such" / "dir.db")
    with pytest.raises(DPMarginalsError, match="file path"):
        open_store(":memory:")


# -- the HTTP API --------------------------------------------------------------------------
@pytest.fixture
def api(tmp_path):
    app = create_app(tmp_path / "api.db", admin_token=TOKEN)
    with TestClient(app) as client:
        yield client


def create(api: TestClient, name: str = "c1", plan: Plan | None = None,
           settings: dict | None = None) -> Plan:
    plan = plan or mixed_plan()
    body = {"id": name, "plan": plan.to_dict(), "settings": OPEN if settings is None
            else settings}
    r = api.post("/campaigns", json=body, headers=ADMIN)
    assert r.status_code == 201, r.text
    return plan


def status(api: TestClient, name: str = "c1") -> dict:
    r = api.get(f"/campaigns/{name}/status")
    assert r.status_code == 200
    return r.json()


def released(api: TestClient, name: str, reports: int, attrs: str = "a",
             headers: dict | None = None) -> dict:
    """The marginal over ``attrs`` once the release covers ``reports`` reports (releases
    are made in the background after each commit)."""
    deadline = time.monotonic() + 60
    while True:
        r = api.get(f"/campaigns/{name}/marginals", params={"attributes": attrs},
                    headers=headers)
        late = time.monotonic() > deadline
        if r.status_code == 409 and not late:  # the release before the reports: none yet
            time.sleep(0.02)
            continue
        assert r.status_code == 200, r.text
        if r.json()["reports"] == reports or late:
            assert r.json()["reports"] == reports
            return r.json()
        time.sleep(0.02)


def test_admin_endpoints_need_the_token(api):
    plan = mixed_plan()
    body = {"id": "c1", "plan": plan.to_dict()}
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic x"}):
        r = api.post("/campaigns", json=body, headers=headers)
        assert r.status_code == 401 and r.json()["error"] == "unauthorized"
        assert api.post("/campaigns/c1/close", headers=headers).status_code == 401
    create(api)
    create(api, "hidden", settings={})
    assert api.get("/campaigns/c1/reports").status_code == 401
    listed = api.get("/campaigns", headers=ADMIN).json()["campaigns"]
    assert [(c["id"], c["plan_hash"], c["public"]) for c in listed] == [
        ("c1", plan.hash, True), ("hidden", plan.hash, False)]
    # No token: the public ones only; a wrong token is refused, not taken for none.
    assert [c["id"] for c in api.get("/campaigns").json()["campaigns"]] == ["c1"]
    r = api.get("/campaigns", headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401 and r.json()["error"] == "unauthorized"


def test_campaign_creation_validates_the_plan_and_the_id(api):
    plan = mixed_plan()
    good = plan.to_dict()
    unhashed = {k: v for k, v in good.items() if k != "hash"}
    seven = [{"attributes": ["a", "b"], "oracle": "grr", "epsilon": 1.0, "cells": 7}]
    cases = [
        ({"id": "c1", "plan": {**good, "hash": "0" * 64}}, "does not match"),
        ({"id": "c1", "plan": {**unhashed, "groups": seven}}, "cells = 7"),
        ({"id": "c1", "plan": {**unhashed, "groups": []}}, "no groups"),
        ({"id": "c1", "plan": {**unhashed, "epsilon": "x"}}, "'epsilon' must be a JSON number"),
        ({"id": "c1", "plan": {**unhashed, "version": 9}}, "version 9"),
        ({"id": "bad id!", "plan": good}, "id must be"),
        ({"id": "c1", "plan": [1, 2]}, "JSON object"),
        ({"id": "c1"}, "the body must be"),
    ]
    for body, reason in cases:
        r = api.post("/campaigns", json=body, headers=ADMIN)
        assert r.status_code == 422, (body, r.text)
        assert reason in r.json()["reason"], r.text
        assert set(r.json()) == {"error", "reason"}
    r = api.post("/campaigns", content=b"{", headers=ADMIN)
    assert r.status_code == 400 and r.json()["error"] == "invalid_json"
    create(api)
    again = api.post("/campaigns", json={"id": "c1", "plan": good}, headers=ADMIN)
    assert again.status_code == 200 and again.json()["created"] is False
    other = CALM(epsilon=1.0, k=2).plan(DOMAIN, 1000)
    clash = api.post("/campaigns", json={"id": "c1", "plan": other.to_dict()}, headers=ADMIN)
    assert clash.status_code == 409 and clash.json()["error"] == "campaign_exists"


def test_plan_and_balanced_assignments(api):
    plan = create(api)
    served = api.get("/campaigns/c1/plan").json()
    assert Plan.from_dict(served).hash == plan.hash == served["hash"]
    one = api.get("/campaigns/c1/assignment").json()
    assert 0 <= one["group"] < plan.m and one["plan_hash"] == plan.hash
    many = api.get("/campaigns/c1/assignment", params={"count": 5 * plan.m - 1}).json()["groups"]
    counts = np.bincount([one["group"], *many], minlength=plan.m)
    assert counts.tolist() == [5] * plan.m  # least-assigned first: exactly balanced
    assert api.get("/campaigns/c1/assignment", params={"count": 0}).status_code == 422
    assert api.get("/campaigns/nope/plan").status_code == 404
    assert api.get("/campaigns/no%20pe/plan").status_code == 422


def test_reports_singly_and_in_batches_are_counted_per_group(api):
    plan = create(api)
    reports = simulate_reports(plan, records(1000), max_epsilon=1.0, rng=5)
    for report in reports[:20]:
        r = api.post("/campaigns/c1/reports", json=report)
        assert r.status_code == 201 and r.json() == {"accepted": 1}
    r = api.post("/campaigns/c1/reports/batch", json={"reports": reports[20:]})
    assert r.status_code == 201 and r.json() == {"accepted": 980}
    st = status(api)
    expected = np.bincount([r["group"] for r in reports], minlength=plan.m)
    assert st["reports"] == 1000
    assert [g["reports"] for g in st["groups"]] == expected.tolist()
    assert [g["oracle"] for g in st["groups"]] == ["grr", "oue", "olh", "hr", "sue"]


def test_every_bad_report_is_refused_with_a_reason_and_changes_nothing(api, tmp_path):
    plan = create(api)
    reports = simulate_reports(plan, records(50), max_epsilon=1.0, rng=6)
    api.post("/campaigns/c1/reports/batch", json={"reports": reports[:10]})
    before = status(api)
    good = reports[10]
    payload_for = {0: 6, 1: "AAAA", 2: [1, 2], 3: [0, 5], 4: 3}
    bad_reports = [
        ({**good, "plan_hash": "f" * 64}, 409, "plan_mismatch"),
        ({**good, "group": plan.m}, 422, "invalid_report"),
        ({**good, "payload": payload_for[good["group"]]}, 422, "invalid_report"),
        ({**good, "report_id": reports[0]["report_id"]}, 409, "duplicate_report"),
        ({**good, "extra": 1}, 422, "invalid_report"),
        ({**good, "report_id": "x" * 32}, 422, "invalid_report"),
    ]
    for bad, code, error in bad_reports:
        r = api.post("/campaigns/c1/reports", json=bad)
        assert (r.status_code, r.json()["error"]) == (code, error), r.text
        assert r.json()["reason"]
        rb = api.post("/campaigns/c1/reports/batch", json={"reports": [*reports[11:20], bad]})
        assert (rb.status_code, rb.json()["error"]) == (code, error), rb.text
        assert rb.json()["index"] == 9 and rb.json()["reason"].startswith("report 9: ")
    for body in ({"reports": []}, {"reports": "x"}, {"items": reports[11:12]}, [good]):
        assert api.post("/campaigns/c1/reports/batch", json=body).status_code == 422
    assert api.post("/campaigns/c1/reports", content=b"\xff\xfe").status_code == 400
    deep = api.post("/campaigns/c1/reports", content=b"[" * 50_000)  # refused unparsed
    assert (deep.status_code, deep.json()["error"]) == (422, "invalid_report")
    assert api.post("/campaigns/c1/reports", content=b"1" * 5000).status_code == 400
    assert api.post("/campaigns/nope/reports", json=good).status_code == 404
    assert status(api) == before
    # the good reports of the refused batches can still be sent
    r = api.post("/campaigns/c1/reports/batch", json={"reports": reports[10:20]})
    assert r.status_code == 201 and status(api)["reports"] == 20


def test_bodies_and_batches_are_size_limited(tmp_path):
    app = create_app(tmp_path / "small.db", admin_token=TOKEN, max_body_bytes=4096)
    with TestClient(app) as api:
        plan = create(api)
        reports = simulate_reports(plan, records(100), max_epsilon=1.0, rng=7)
        r = api.post("/campaigns/c1/reports/batch", json={"reports": reports})
        assert r.status_code == 413 and r.json()["error"] == "body_too_large"
        assert status(api)["reports"] == 0
    app = create_app(tmp_path / "big.db", admin_token=TOKEN)
    with TestClient(app) as api:
        grr = Plan("calm", 1.0, DOMAIN, (GroupSpec(("a",), "grr", 1.0, 2),))
        create(api, plan=grr)
        codec = PlanCodec(grr)
        many = [codec.report(0, 1) for _ in range(MAX_BATCH_REPORTS + 1)]
        r = api.post("/campaigns/c1/reports/batch", json={"reports": many})
        assert r.status_code == 413 and r.json()["error"] == "batch_too_large"


def test_marginals_equal_the_in_process_release_on_the_same_reports(api):
    plan = create(api)
    assert api.get("/campaigns/c1/marginals", params={"attributes": "a"}).status_code == 409
    reports = simulate_reports(plan, records(3000, seed=8), max_epsilon=1.0, rng=9)
    api.post("/campaigns/c1/reports/batch", json={"reports": reports})
    released(api, "c1", 3000)
    exported = [json.loads(line) for line in
                api.get("/campaigns/c1/reports", headers=ADMIN).text.splitlines()]
    assert len(exported) == 3000
    local = synopsis_from_reports(plan, reports)
    for attrs in (["a", "b"], ["c", "d"], ["b", "d"], ["a", "b", "c"], ["d"]):
        r = api.get("/campaigns/c1/marginals", params={"attributes": ",".join(attrs)})
        assert r.status_code == 200
        body = r.json()
        assert body["attributes"] == attrs and body["reports"] == 3000
        assert body["values"] == local.marginal(attrs).values.ravel().tolist()
    assert synopsis_from_reports(plan, exported).marginal(["a", "b"]).values.ravel().tolist() \
        == api.get("/campaigns/c1/marginals", params={"attributes": "a,b"}).json()["values"]
    csv = api.get("/campaigns/c1/marginals", params={"attributes": "a,b", "format": "csv"})
    assert csv.headers["content-type"].startswith("text/csv")
    assert csv.text.splitlines()[0] == "a,b,fraction" and len(csv.text.splitlines()) == 7
    for attrs in ("a,zz", "a,a", ",", ""):
        assert api.get("/campaigns/c1/marginals", params={"attributes": attrs}).status_code == 422
    # new reports change the answer (the cached synopsis is refreshed)
    more = simulate_reports(plan, records(500, seed=10), max_epsilon=1.0, rng=11)
    api.post("/campaigns/c1/reports/batch", json={"reports": more})
    after = released(api, "c1", 3500, "a,b")
    assert after["reports"] == 3500
    assert after["values"] == synopsis_from_reports(plan, reports + more).marginal(
        ["a", "b"]).values.ravel().tolist()


def test_openapi_schema_documents_the_api(api):
    schema = api.get("/openapi.json").json()
    paths = schema["paths"]
    for path in ("/campaigns", "/campaigns/{campaign}/plan", "/campaigns/{campaign}/assignment",
                 "/campaigns/{campaign}/reports", "/campaigns/{campaign}/reports/batch",
                 "/campaigns/{campaign}/status", "/campaigns/{campaign}/marginals"):
        assert path in paths
    body = paths["/campaigns/{campaign}/reports"]["post"]["requestBody"]
    assert body["content"]["application/json"]["schema"]["additionalProperties"] is False
    assert "HTTPBearer" in schema["components"]["securitySchemes"]
    assert api.get("/docs").status_code == 200
    assert api.get("/health").json()["status"] == "ok"


def test_the_service_runs_on_postgresql(postgres_url):
    app = create_app(postgres_url, admin_token=TOKEN)
    name = unique_name()
    with TestClient(app) as api:
        plan = create(api, name)
        reports = simulate_reports(plan, records(400), max_epsilon=1.0, rng=12)
        assert api.post(f"/campaigns/{name}/reports/batch",
                        json={"reports": reports[:300]}).status_code == 201
        assert api.post(f"/campaigns/{name}/reports", json=reports[300]).status_code == 201
        dup = api.post(f"/campaigns/{name}/reports", json=reports[0])
        assert dup.status_code == 409
        assert status(api, name)["reports"] == 301
        got = released(api, name, 301, "a,b")
        local = synopsis_from_reports(plan, reports[:301]).marginal(["a", "b"])
        assert got["values"] == local.values.ravel().tolist()
        assert api.get("/health").json()["store"] == "postgresql"


def test_submit_runs_the_whole_path_for_one_user(api, monkeypatch):
    """ServiceClient.submit through the ASGI app (its HTTP layer replaced by TestClient)."""
    from dpmarginals.protocol.http import ServiceClient

    plan = create(api)

    def request(self, method, path, body=None, *, admin=False, raw=False):
        r = api.request(method, path, json=body)
        if r.status_code >= 400:
            raise ServiceClient._error(r.status_code, r.json())
        return r.status_code, r.json()

    monkeypatch.setattr(ServiceClient, "request", request)
    client = ServiceClient("http://testserver", "c1")
    phone = Device(None, max_epsilon=1.0, max_total_epsilon=5.0)
    report = client.submit({"a": 1, "b": 2, "c": 3, "d": 0}, phone)
    assert report["plan_hash"] == plan.hash
    assert status(api)["reports"] == 1
    with contextlib.suppress(Exception):
        client.close()
    single = simulate_reports(plan, np.zeros((1, 4), dtype=np.int64), groups=[2],
                              max_epsilon=1.0)[0]
    assert client.send(single) == {"accepted": 1}


def test_non_finite_numbers_and_huge_answers_are_refused(api):
    plan = create(api)
    report = simulate_reports(plan, np.zeros((1, 4), dtype=np.int64), groups=[0],
                              max_epsilon=1.0)[0]
    for bad in (b'{"version": NaN}', b'{"version": 1e999}', b'[Infinity]'):
        r = api.post("/campaigns/c1/reports", content=bad)
        assert r.status_code == 400 and r.json()["error"] == "invalid_json"
    text = json.dumps({"id": "c2", "plan": plan.to_dict()}).replace('"k": 2', '"k": NaN')
    assert api.post("/campaigns", content=text, headers=ADMIN).status_code == 400
    assert api.post("/campaigns/c1/reports", json=report).status_code == 201
    wide = Domain(("x", "y"), (1025, 1024))
    groups = tuple(GroupSpec((a,), "grr", 1.0, wide.size(a)) for a in ("x", "y"))
    create(api, "wide", Plan("calm", 1.0, wide, groups))
    codec = PlanCodec(Plan("calm", 1.0, wide, groups))
    api.post("/campaigns/wide/reports/batch",
             json={"reports": [codec.report(0, 3), codec.report(1, 5)]})
    r = api.get("/campaigns/wide/marginals", params={"attributes": "x,y"})
    assert r.status_code == 422 and "at most" in r.json()["reason"]
    assert api.get("/campaigns/wide/marginals", params={"attributes": "x"}).status_code == 200


def test_postgres_store_recovers_from_lost_connections(postgres_url):
    import psycopg

    from dpmarginals.service.store import StoreError

    plan = mixed_plan()
    reports = simulate_reports(plan, records(300), max_epsilon=1.0, rng=13)
    with open_store(postgres_url) as store:
        campaign, _ = store.create_campaign(unique_name(), plan)
        codec = campaign.codec
        store.add_reports(campaign, codec.decode(reports[:100]))
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                          "WHERE pid <> pg_backend_pid() AND datname = current_database()")
        with contextlib.suppress(StoreError):  # the first write may find the connection dead
            store.add_reports(campaign, codec.decode(reports[100:200]))
        store.add_reports(campaign, codec.decode(reports[200:300]))
        with contextlib.suppress(psycopg.Error):  # so may the first read
            store.users(campaign)
        _, users = _assert_counts_match(store, campaign)
        assert users.sum() in (200, 300)


def test_two_postgres_stores_share_a_campaign(postgres_url):
    """As two `serve` processes on one database: overlapping batches, each id stored once."""
    plan = mixed_plan()
    name = unique_name()
    reports = simulate_reports(plan, records(1200), max_epsilon=1.0, rng=14)
    with open_store(postgres_url) as one, open_store(postgres_url) as two:
        first, _ = one.create_campaign(name, plan)
        second, created = two.create_campaign(name, plan)
        assert not created and first.num == second.num
        accepted = []

        def writer(store: Store, campaign, offset: int) -> None:
            for start in range(offset, 1100, 100):
                with contextlib.suppress(ReportError):
                    accepted.append(store.add_reports(campaign, campaign.codec.decode(
                        reports[start : start + 100])))

        threads = [threading.Thread(target=writer, args=(one, first, 0)),
                   threading.Thread(target=writer, args=(two, second, 50)),
                   threading.Thread(target=writer, args=(one, first, 0))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        ids = [r["report_id"] for r in two.reports(second)]
        assert len(ids) == len(set(ids)) == sum(accepted)
        _assert_counts_match(one, first)


def test_an_export_is_one_snapshot_while_batches_are_written(store):
    """Issue 17: an export during writes returned 68 batches in part.  A snapshot holds
    each batch wholly or not at all, and as many reports as it states."""
    plan = mixed_plan()
    campaign, _ = store.create_campaign(unique_name(), plan)
    codec = campaign.codec
    batches = [simulate_reports(plan, records(200, seed=s), max_epsilon=1.0, rng=s)
               for s in range(40)]
    batch_of = {r["report_id"]: i for i, batch in enumerate(batches) for r in batch}
    stop = threading.Event()

    def writer(offset: int) -> None:
        for batch in batches[offset::2]:
            store.add_reports(campaign, codec.decode(batch))
        stop.set()

    threads = [threading.Thread(target=writer, args=(k,)) for k in (0, 1)]
    for t in threads:
        t.start()
    seen = []
    while not stop.is_set() or not seen:
        with store.snapshot(campaign) as (count, reports):
            ids = [r["report_id"] for r in reports]
        assert len(ids) == count
        per_batch = np.bincount([batch_of[i] for i in ids], minlength=len(batches))
        assert set(per_batch.tolist()) <= {0, 200}, "a batch is in the export in part"
        seen.append(count)
    for t in threads:
        t.join()
    with store.snapshot(campaign) as (count, reports):
        assert count == sum(1 for _ in reports) == 8000
    assert len(seen) >= 2


def test_a_ticket_serial_is_spent_once(store):
    from dpmarginals.service.store import TICKET_BLOCK, TicketUsed

    plan = mixed_plan()
    campaign, _ = store.create_campaign(unique_name(), plan)
    codec = campaign.codec
    reports = simulate_reports(plan, records(60), max_epsilon=1.0, rng=20)
    start = store.reserve_serials(100)
    assert store.reserve_serials(10) >= start + 100  # ranges never overlap
    serials = start + TICKET_BLOCK - 10 + np.arange(20)  # across two bitmap rows
    assert store.add_reports(campaign, codec.decode(reports[:20]), serials) == 20
    for bad, at in ((np.r_[serials[5], start + 3 * TICKET_BLOCK + np.arange(19)], 0),
                    (np.r_[start + 5 * TICKET_BLOCK, start + 5 * TICKET_BLOCK,
                           start + 6 * TICKET_BLOCK + np.arange(18)], 1)):
        with pytest.raises(TicketUsed) as err:
            store.add_reports(campaign, codec.decode(reports[20:40]), bad)
        assert err.value.code == "ticket_used" and err.value.index == at
    assert store.users(campaign).sum() == 20  # nothing of the refused batches
    fresh = start + 5 * TICKET_BLOCK + np.arange(20)  # unspent by the refused batch
    assert store.add_reports(campaign, codec.decode(reports[20:40]), fresh) == 20
    with pytest.raises(ReportError) as err:  # a stored report again: a duplicate first
        store.add_reports(campaign, codec.decode(reports[:20]), serials)
    assert err.value.code == "duplicate_report"


def test_a_store_of_another_schema_is_refused_in_one_line(tmp_path):
    """No migration layer in a 0.x package: a store of schema 1 (before settings and
    tickets) is refused, naming the version this dpmarginals reads."""
    path = tmp_path / "v1.db"
    conn = sqlite3.connect(path)
    conn.executescript("CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
                       "INSERT INTO meta VALUES ('schema_version', '1');")
    conn.commit()
    conn.close()
    with pytest.raises(DPMarginalsError, match="schema version 1; this dpmarginals reads "
                                               "version 2") as info:
        SQLiteStore(path)
    assert "\n" not in str(info.value)

