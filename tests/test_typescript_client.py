"""The TypeScript client (clients/typescript) against the Python reference and the service.

* Every plan the project's methods make (every report format; memoized where it can be;
  version 1 where it has no longitudinal epsilon) hashes alike in both languages, and
  both accept or refuse it alike.
* Python and Node processes of one device share one ledger file without overspending (the
  Python client also takes the Node client's lock folder).
* ``serve --allow-origin``: CORS on the client endpoints for the given origins only; off by
  default; a malformed origin is one line and exit 2.
* End to end in Debian's Chromium: a page on one origin loads the single-file bundle, takes
  the plan from a running ``dpmarginals serve`` on another, and reports thousands of
  people's records (each person a Device with its own ledger; the first through
  ``submit``, one GET assignment and one POST each, two of them keeping their ledgers in
  localStorage and IndexedDB; the others in batches with tickets; some from a module web
  worker) through the real HTTP API.  The service stores exactly the reports sent, and
  its release equals the in-process release of the same reports, bit for bit.

Needs Node and the package's locked dependencies (``npm ci`` in clients/typescript; the
test builds the rest), ``/usr/bin/chromium`` and playwright (as tests/test_web_page.py).
Skips without them, except in CI (``CI`` set), where that fails.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import replace
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from dpmarginals.core.domain import Domain
from dpmarginals.core.errors import DPMarginalsError
from dpmarginals.methods import available, make
from dpmarginals.protocol.checks import check_plan
from dpmarginals.protocol.formats import memoizable
from dpmarginals.protocol.plan import GroupSpec, Plan
from test_service_e2e import TOKEN, Server, _free_port

ROOT = Path(__file__).resolve().parents[1]
TS = ROOT / "clients" / "typescript"
SRC = ROOT / "src"
CHROMIUM = os.environ.get("DPMARGINALS_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync"]


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _missing(reason: str) -> None:
    if _in_ci():
        pytest.fail(f"the TypeScript client's tests must run in CI: {reason}")
    pytest.skip(reason)


def _newest(*folders: Path) -> float:
    return max((p.stat().st_mtime for f in folders for p in f.rglob("*") if p.is_file()),
               default=0.0)


@pytest.fixture(scope="module")
def built() -> Path:
    """The package compiled (build/) and bundled (bundle/), rebuilt when a source is newer."""
    node = shutil.which("node")
    if node is None:
        _missing("no node on PATH (Node >= 18)")
    if not (TS / "node_modules" / "typescript").is_dir():
        _missing("the package's dependencies are not installed (cd clients/typescript && npm ci)")
    sources = _newest(TS / "src", TS / "test", TS / "scripts")
    marker = TS / "build" / "scripts" / "check-plans.js"
    if not marker.exists() or marker.stat().st_mtime < sources:
        subprocess.run([node, "node_modules/typescript/bin/tsc", "-p", "tsconfig.test.json"],
                       cwd=TS, check=True, timeout=300)
    bundle = TS / "bundle" / "dpmarginals.min.mjs"
    if not bundle.exists() or bundle.stat().st_mtime < sources:
        subprocess.run([node, "scripts/bundle.mjs"], cwd=TS, check=True, timeout=300)
    return TS


# -- every plan the project makes hashes alike ----------------------------------------------
SURVEY = Domain.from_dict({
    "sex": ["female", "male"],
    "age": {"bins": [0, 18, 30.5, 45, 65, 120]},
    "region": {"labels": ["north", "south", "east", "west"], "other": True},
    "smoker": 2,
})


def _project_plans() -> list[tuple[str, Plan]]:
    """Every method's plan (the central ones need a delta), at a few budgets, memoized
    where it can be, and as version 1 where it is not memoized."""
    out: list[tuple[str, Plan]] = []
    for name in available():
        for eps in ((1.0,) if name == "wfm" else (1.0, 1 / 3, 2.5)):  # (wfm: an optimization)
            extra = {"delta": 1e-9} if name in ("aim", "mst", "residual") else {}
            domain = SURVEY.project(("sex", "region", "smoker")) if name == "wfm" else SURVEY
            try:
                plan = make(name, epsilon=eps, k=2, **extra).plan(domain, 10_000)
            except DPMarginalsError:
                continue
            out.append((f"{name}@{eps:.3g}", plan))
            if memoizable(plan):
                out.append((f"{name}@{eps:.3g}+memo", replace(plan, longitudinal=4 * eps)))
            out.append((f"{name}@{eps:.3g}+v1", replace(plan, version=1)))
    return out


def test_every_plan_the_project_makes_hashes_and_checks_alike(built, tmp_path):
    plans = _project_plans()
    names = {name.split("@")[0] for name, _ in plans}
    assert {"calm", "inp_ht", "inp_htcms", "em", "wfm", "adaptive", "marg_ht"} <= names
    file = tmp_path / "plans.json"
    file.write_text(json.dumps([{"name": n, "plan": p.to_dict()} for n, p in plans]))
    out = subprocess.run(["node", str(built / "build" / "scripts" / "check-plans.js"), str(file)],
                         capture_output=True, text=True, timeout=600, check=True)
    seen = [json.loads(line) for line in out.stdout.splitlines()]
    assert [s["name"] for s in seen] == [n for n, _ in plans]
    for (name, plan), ts in zip(plans, seen, strict=True):
        try:
            check_plan(plan.to_dict(), 20.0)
            python_refusal = None
        except DPMarginalsError as exc:
            python_refusal = str(exc)
        assert ts["hash"] == plan.hash, (name, ts)
        assert (ts["refusal"] is None) == (python_refusal is None), (name, ts, python_refusal)


# -- CORS: serve --allow-origin ----------------------------------------------------------
_PY_CAPPED = """
import sys
from dpmarginals.core.domain import Domain
from dpmarginals.protocol.device import Device
from dpmarginals.protocol.ledger import BudgetExceeded
from dpmarginals.protocol.plan import GroupSpec, Plan
plan = Plan("calm", 0.01, Domain(("a", "b"), (2, 3)), (GroupSpec(("a", "b"), "grr", 0.01, 6),), {})
phone = Device(sys.argv[1], max_epsilon=1.0, max_total_epsilon=0.05)
for i in range(4):
    try:
        phone.report(plan, [1, 2], origin="https://x", campaign=sys.argv[2] + str(i))
    except BudgetExceeded:
        pass
"""


def test_python_and_node_processes_of_one_device_never_overspend(built, tmp_path):
    """Four Python and four Node processes report under one ledger file at once, each up to
    4 reports of one plan under a total cap of 5 reports (scripts/ledger-writer.ts, the same
    plan): both clients take the lock folder, so exactly five reports are made (before, the
    two locks differed and a helper's run made 101 under a cap of 100)."""
    path = tmp_path / "ledger.json"
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    writer = built / "build" / "scripts" / "ledger-writer.js"
    procs = []
    for j in range(4):
        procs.append(subprocess.Popen([sys.executable, "-c", _PY_CAPPED, str(path), f"py{j}-"],
                                      env=env))
        procs.append(subprocess.Popen(["node", str(writer), str(path), "capped", f"js{j}-"]))
    assert all(p.wait(timeout=120) == 0 for p in procs)
    doc = json.loads(path.read_text())
    sent = [k for k, e in doc["campaigns"].items() if e["report"] is not None]
    assert len(doc["charges"]) == len(sent) == 5
    assert {k.split("|")[1][:2] for k in sent} <= {"py", "js"}
    leftovers = sorted(p.name for p in tmp_path.iterdir()
                       if p.name not in ("ledger.json", "ledger.json.lock"))
    assert leftovers == []


def _app(tmp_path: Path, origins: list[str]) -> Any:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from dpmarginals.service.app import create_app

    return TestClient(create_app(tmp_path / "cors.db", admin_token=TOKEN,
                                 allow_origins=origins))


def test_cors_is_off_by_default(tmp_path):
    with _app(tmp_path, []) as client:
        r = client.options("/campaigns/x/reports", headers={
            "Origin": "http://app.example", "Access-Control-Request-Method": "POST"})
        assert "access-control-allow-origin" not in r.headers
        r = client.get("/health", headers={"Origin": "http://app.example"})
        assert "access-control-allow-origin" not in r.headers


def test_cors_lets_the_given_origins_report_and_no_other(tmp_path):
    with _app(tmp_path, ["http://app.example:8080"]) as client:
        ok = client.options("/campaigns/x/reports/batch", headers={
            "Origin": "http://app.example:8080", "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type"})
        assert ok.status_code == 200
        assert ok.headers["access-control-allow-origin"] == "http://app.example:8080"
        assert "POST" in ok.headers["access-control-allow-methods"]
        assert "access-control-allow-credentials" not in ok.headers
        bad = client.options("/campaigns/x/reports", headers={
            "Origin": "http://evil.example", "Access-Control-Request-Method": "POST"})
        assert "access-control-allow-origin" not in bad.headers
        token = client.options("/campaigns", headers={  # no token from another origin
            "Origin": "http://app.example:8080", "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization"})
        assert token.status_code == 400
        simple = client.get("/health", headers={"Origin": "http://app.example:8080"})
        assert simple.headers["access-control-allow-origin"] == "http://app.example:8080"
        assert "retry-after" in simple.headers["access-control-expose-headers"].lower()


def test_allow_origin_must_be_an_origin(tmp_path):
    for bad in ("https://app.example/page", "HTTPS://APP.EXAMPLE:443"):
        out = subprocess.run([sys.executable, "-m", "dpmarginals.cli", "serve", "--db",
                              str(tmp_path / "x.db"), "--port", str(_free_port()),
                              "--allow-origin", bad], capture_output=True, text=True,
                             timeout=120, env={**os.environ, "PYTHONPATH": str(SRC)})
        assert out.returncode == 2, out.stderr
        assert out.stderr.count("\n") == 1 and "is not an origin" in out.stderr
        assert not (tmp_path / "x.db").exists()


# -- end to end in Chromium ------------------------------------------------------------------
def _call(server: Server, method: str, path: str, body: Any = None) -> Any:
    """An admin request to ``server``: JSON, or the text of a JSON-lines export."""
    request = urllib.request.Request(
        server.url + path, method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as r:
        text = r.read().decode()
    return text if path.endswith("/reports") else json.loads(text)


class Static:
    """The package's folder on its own origin (the test page and the bundle)."""

    def __init__(self, folder: Path) -> None:
        handler = functools.partial(_QuietHandler, directory=str(folder))
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.origin = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _QuietHandler(SimpleHTTPRequestHandler):
    extensions_map: ClassVar[dict[str, str]] = {
        **SimpleHTTPRequestHandler.extensions_map, ".mjs": "text/javascript",
        ".js": "text/javascript"}

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _survey_plan(memo: float | None = None) -> Plan:
    dom = Domain.from_dict({"sex": ["female", "male"], "age": {"bins": [0, 18, 30, 45, 65, 120]},
                            "region": ["north", "south", "east", "west", "centre"],
                            "smoker": ["no", "yes"]})
    sets = [("age", "region"), ("sex", "age"), ("region", "smoker"), ("sex", "smoker")]
    oracles = ["oue", "grr", "olh", "hr"] if memo is None else ["oue", "grr", "sue", "grr"]
    groups = tuple(GroupSpec(s, o, 2.0, dom.project(s).cells())
                   for s, o in zip(sets, oracles, strict=True))
    return Plan("calm", 2.0, dom, groups, {"k": 2}, longitudinal=memo)


def _report_id(report: dict[str, Any]) -> str:
    return str(report["report_id"])


def _people(n: int, seed: int) -> list[dict[str, Any]]:
    """Records as a person's app holds them: labels, and raw ages the plan's bins cut."""
    rng = np.random.default_rng(seed)
    regions = ["north", "south", "east", "west", "centre"]
    out = []
    for _ in range(n):
        sex = "female" if rng.random() < 0.52 else "male"
        age = round(float(rng.uniform(0, 95)), 1)
        smoker = "yes" if rng.random() < (0.25 if sex == "male" else 0.15) else "no"
        out.append({"sex": sex, "age": age, "region": regions[int(rng.integers(0, 5))],
                    "smoker": smoker})
    return out


@pytest.fixture(scope="module")
def browser(built: Path) -> Any:
    if not Path(CHROMIUM).exists():
        _missing(f"no Chromium at {CHROMIUM} (apt-get install chromium chromium-driver)")
    try:
        from playwright import sync_api
    except ImportError:
        _missing("playwright is not installed (pip install -e '.[test]')")
    with sync_api.sync_playwright() as driver:
        launched = driver.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS,
                                          headless=True)
        try:
            yield launched
        finally:
            launched.close()


def test_chromium_reports_through_the_service_and_the_release_is_the_same(
        browser, built, tmp_path):
    from dpmarginals.aggregation import synopsis_from_reports

    static = Static(built)
    service = Server(tmp_path / "s.db", "--allow-origin", static.origin)
    try:
        campaigns = {"survey": (_survey_plan(), 3000, 40),
                     "survey-memo": (_survey_plan(8.0), 400, 4)}
        for name, (plan, _, _) in campaigns.items():
            _call(service, "POST", "/campaigns", {"id": name, "plan": plan.to_dict(),
                                                  "settings": {"refresh_seconds": 0}})
        context = browser.new_context()
        context.set_default_timeout(300_000)
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(f"{static.origin}/e2e/index.html")
        page.wait_for_function("document.getElementById('state').textContent === 'ready'")
        sent: dict[str, list[dict[str, Any]]] = {}
        for seed, (name, (_, n, single)) in enumerate(campaigns.items()):
            started = time.monotonic()
            text = page.evaluate("args => window.runPeople(args)",
                                 {"server": service.url, "campaign": name,
                                  "records": _people(n, seed), "single": single})
            sent[name] = json.loads(text)
            print(f"{name}: {n} people in {time.monotonic() - started:.1f} s")
        worker = json.loads(page.evaluate("args => window.runWorker(args)", {
            "server": service.url, "campaign": "survey", "records": _people(20, 7)}))
        sent["survey"] += worker
        refusals = page.evaluate("args => window.runRefusals(args)", {
            "server": service.url, "campaign": "survey", "record": _people(1, 9)[0]})
        assert [r[0] for r in refusals] == ["PlanRefused", "BudgetExceeded", "reported"]
        assert "exceeds this device's max_epsilon = 1.0" in refusals[0][1]
        assert "max_total_epsilon = 1 refuses this report" in refusals[1][1]
        assert "is not in the declared domain" in refusals[2][1]  # told, locally
        assert "reported as a uniformly random value" in refusals[2][1]
        sent["survey"].append(refusals[2][2])  # sent like any report
        assert not errors, errors
        context.close()

        for name, (plan, n, _) in campaigns.items():
            reports = sent[name]
            assert len(reports) == n + (21 if name == "survey" else 0)
            assert len({r["report_id"] for r in reports}) == len(reports)
            # the service holds exactly these reports (OLH seeds beyond 2^53 included)
            stored = [json.loads(line) for line in
                      _call(service, "GET", f"/campaigns/{name}/reports").splitlines() if line]
            assert sorted(stored, key=_report_id) == sorted(
                ({k: v for k, v in r.items() if k != "ticket"} for r in reports),
                key=_report_id)
            synopsis = synopsis_from_reports(plan, reports)
            for attrs in (["age", "region"], ["sex", "age"], ["region", "smoker"],
                          ["sex", "smoker"], ["sex", "region"]):
                answer = service.released(name, len(reports), ",".join(attrs))
                assert answer["values"] == synopsis.marginal(attrs).values.ravel().tolist(), \
                    (name, attrs)
    finally:
        service.stop()
        static.close()
