"""The analyst's web page in a real headless browser: Debian's Chromium driven by Playwright.

The real service (``create_app`` under uvicorn on a loopback socket, SQLite in a temporary
folder) holds three campaigns filled with real client reports (``simulate_reports``, posted to
the batch endpoint): a labelled survey, one whose attribute name and labels are hostile
HTML, and one without reports.  The page must show the numbers the JSON API returns, say
whether a table was measured or reconstructed, download the shown table as CSV, render
hostile text as text, and show the API's error reasons.

Needs ``/usr/bin/chromium`` (``apt-get install chromium chromium-driver``; or set
``DPMARGINALS_CHROMIUM``) and ``playwright`` from PyPI (the test extra; never
``playwright install``: the browser is Debian's).  Skips without them, except in CI
(``CI`` set), where that fails, so a missing install cannot hide the test.  Set
``DPMARGINALS_SCREENSHOT=path.png`` to save a screenshot of the survey's page.
"""

from __future__ import annotations

import csv
import io
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("httpx")

import httpx
import uvicorn

from dpmarginals.aggregation import synopsis_from_reports
from dpmarginals.core.domain import Domain
from dpmarginals.protocol.plan import GroupSpec, Plan
from dpmarginals.protocol.simulate import simulate_reports
from dpmarginals.service.app import create_app
from dpmarginals.service.web import CONTENT_SECURITY_POLICY
from dpmarginals.synopsis.stderr import standard_errors

CHROMIUM = os.environ.get("DPMARGINALS_CHROMIUM", "/usr/bin/chromium")
#: Flags for Chromium on a closed network, as root (docs: the machine's notes); Playwright
#: adds --headless and a fresh, empty --user-data-dir of its own.
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync"]
TOKEN = "web-admin-token"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
XSS_LABEL = "<img src=x onerror=alert(1)>"
XSS_ATTRIBUTE = "<svg onload=alert(2)>"
FORMULA_LABEL = "=1+2"
TIMEOUT_MS = 60_000  # generous: the machine is shared


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _playwright_or_skip() -> Any:
    """playwright's sync API, or skip (fail in CI) naming what is missing."""
    missing = []
    if not Path(CHROMIUM).exists():
        missing.append(f"no Chromium at {CHROMIUM} (apt-get install chromium chromium-driver)")
    try:
        from playwright import sync_api
    except ImportError:
        sync_api = None
        missing.append("playwright is not installed (pip install -e '.[test]')")
    if missing:
        reason = "; ".join(missing)
        if _in_ci():
            pytest.fail(f"the browser test must run in CI: {reason}")
        pytest.skip(reason)
    return sync_api


# -- the campaigns -------------------------------------------------------------------------
SURVEY = Domain.from_dict({
    "sex": ["female", "male"],
    "age": {"bins": [0, 18, 30, 45, 65, 120]},
    "region": ["north", "south", "east", "west", "centre"],
    "smoker": ["no", "yes"],
})
HOSTILE = Domain.from_dict({XSS_ATTRIBUTE: [XSS_LABEL, FORMULA_LABEL, 'blue, "dark"'],
                            "b": 2})


def _plan(domain: Domain, sets: list[tuple[str, ...]], oracles: list[str]) -> Plan:
    groups = tuple(GroupSpec(s, o, 2.0, domain.project(s).cells())
                   for s, o in zip(sets, oracles, strict=True))
    return Plan("calm", 2.0, domain, groups, {"k": 2})


def survey_plan() -> Plan:
    return _plan(SURVEY, [("age", "region"), ("sex", "age"), ("region", "smoker"),
                          ("sex", "smoker")], ["oue", "grr", "olh", "hr"])


def hostile_plan() -> Plan:
    return _plan(HOSTILE, [(XSS_ATTRIBUTE, "b")], ["oue"])


def survey_records(n: int, seed: int = 0) -> np.ndarray:
    """Records with some structure (a random joint of age and region), as codes."""
    rng = np.random.default_rng(seed)
    joint = rng.dirichlet(np.full(5 * 5, 2.0)).reshape(5, 5)
    cell = rng.choice(25, size=n, p=joint.ravel())
    sex = rng.integers(0, 2, n)
    smoker = (rng.random(n) < 0.15 + 0.1 * sex).astype(int)
    return np.column_stack([sex, cell // 5, cell % 5, smoker])


# -- the service ---------------------------------------------------------------------------
class Service:
    """The real app under uvicorn in a thread, on a loopback socket bound up front."""

    def __init__(self, db: Path) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        config = uvicorn.Config(create_app(db, admin_token=TOKEN), log_level="warning",
                                access_log=False)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run,
                                       kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the service did not start")
            time.sleep(0.05)
        self.http = httpx.Client(base_url=self.url, timeout=120)
        self.reports: dict[str, list[dict[str, Any]]] = {}

    def create(self, name: str, plan: Plan, records: np.ndarray | None, seed: int) -> None:
        # Reports posted in one batch without tickets, releases made at once (not private:
        # the page's reads need a token).
        settings = {"tickets": "off", "refresh_seconds": 0}
        r = self.http.post("/campaigns", json={"id": name, "plan": plan.to_dict(),
                                               "settings": settings}, headers=ADMIN)
        assert r.status_code == 201, r.text
        if records is not None:  # simulated users (seeded): a test, not a release
            reports = simulate_reports(plan, records, max_epsilon=2.0, rng=seed)
            self.reports[name] = reports
            r = self.http.post(f"/campaigns/{name}/reports/batch", json={"reports": reports})
            assert r.status_code == 201, r.text

    def get(self, path: str, **params: str) -> httpx.Response:
        r = self.http.get(path, params=params, headers=ADMIN)
        assert r.status_code == 200, r.text
        return r

    def close(self) -> None:
        self.http.close()
        self.server.should_exit = True
        self.thread.join(timeout=30)
        self.sock.close()


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    running = Service(tmp_path_factory.mktemp("web") / "web.db")
    try:
        running.create("survey-2025", survey_plan(), survey_records(6000), seed=1)
        hostile = np.random.default_rng(2).integers(0, HOSTILE.sizes, size=(800, 2))
        running.create("hostile", hostile_plan(), hostile, seed=3)
        running.create("empty", survey_plan(), None, seed=0)
        yield running
    finally:
        running.close()


@pytest.fixture(scope="module")
def browser(service: Service) -> Iterator[Any]:
    sync_api = _playwright_or_skip()
    with sync_api.sync_playwright() as driver:
        launched = driver.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS,
                                          headless=True)
        try:
            yield launched
        finally:
            launched.close()


class Page:
    """One fresh browser context on the page (its own sessionStorage), counting dialogs."""

    def __init__(self, browser: Any, service: Service, token: str | None = TOKEN) -> None:
        self.context = browser.new_context(accept_downloads=True,
                                           viewport={"width": 1200, "height": 900})
        self.context.set_default_timeout(TIMEOUT_MS)
        self.page = self.context.new_page()
        self.dialogs: list[str] = []
        self.errors: list[str] = []
        self.page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        self.response = self.page.goto(service.url + "/ui/")
        if token is not None:
            self.page.fill("#token", token)
            self.page.click("#token-form button[type=submit]")

    def open(self, campaign: str) -> None:
        row = self.page.locator(f'#campaign-table tr[data-campaign="{campaign}"]')
        row.get_by_role("button", name="Open").click()
        self.page.wait_for_selector("#attribute-list input")

    def clear(self) -> None:
        for box in self.page.locator("#attribute-list input").all():
            box.uncheck()

    def show(self, attributes: list[str], *, std: bool = True) -> None:
        """Tick ``attributes`` (the order of clicks is the order of the axes), then show."""
        for a in attributes:
            self.page.locator(f"#attribute-list label[data-attribute={json.dumps(a)}] input"
                              ).check()
        if attributes:
            assert self.page.inner_text("#query-attrs") == " × ".join(attributes)
        self.page.set_checked("#want-std", std)
        before = int(self.page.get_attribute("#query", "data-ticket") or 0)
        self.page.click("#show")
        self.page.wait_for_function(
            "t => { const q = document.getElementById('query');"
            " return +q.dataset.ticket > t && q.dataset.phase === 'done'; }", arg=before)

    def table(self) -> list[list[dict[str, str | None]]]:
        return self.page.eval_on_selector_all(
            "#marginal-table tbody tr",
            "rows => rows.map(r => [...r.cells].map(c => ({text: c.textContent, "
            "value: c.dataset.value ?? null})))")

    def close(self) -> None:
        assert not self.errors, self.errors
        self.context.close()


def _check_table_equals_answer(rows: list[list[dict[str, Any]]], answer: dict[str, Any]
                               ) -> None:
    """Each row: the cell's value names, the fraction, std and interval, as the API's."""
    names = [answer.get("labels", {}).get(a, [str(i) for i in range(s)])
             for a, s in zip(answer["attributes"], answer["sizes"], strict=True)]
    assert len(rows) == len(answer["values"])
    k = len(answer["attributes"])
    for flat, (row, codes) in enumerate(zip(rows, np.ndindex(*answer["sizes"]), strict=True)):
        assert [c["text"] for c in row[:k]] == [names[j][c] for j, c in enumerate(codes)]
        value, std = answer["values"][flat], answer["std"][flat]
        assert float(row[k]["value"]) == value and row[k]["text"] == f"{value:.4f}"
        assert float(row[k + 1]["value"]) == std and row[k + 1]["text"] == f"{std:.4f}"


# -- the tests -----------------------------------------------------------------------------
def test_the_page_is_served_with_a_strict_content_security_policy(service):
    page = service.http.get("/ui/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert page.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert "script-src 'self'" in CONTENT_SECURITY_POLICY
    assert "unsafe-inline" not in CONTENT_SECURITY_POLICY
    assert page.headers["x-content-type-options"] == "nosniff"
    assert "<script src=" in page.text and "<script>" not in page.text
    assert "style=" not in page.text and "<style" not in page.text
    script = service.http.get("/ui/app.js")
    assert script.headers["content-type"].startswith("text/javascript")
    assert "innerHTML" not in script.text and "insertAdjacentHTML" not in script.text
    assert service.http.get("/ui/app.css").headers["content-type"].startswith("text/css")
    for path in ("/", "/ui"):
        r = service.http.get(path, follow_redirects=True)
        assert r.status_code == 200 and r.url.path == "/ui/"
    assert "/ui/" not in service.http.get("/openapi.json").json()["paths"]


def test_the_api_answers_standard_errors_on_request(service):
    """``std=true``: the in-process standard errors of the same release, in JSON and CSV."""
    synopsis = synopsis_from_reports(survey_plan(), service.reports["survey-2025"])
    for attrs in (["age", "region"], ["sex", "region"]):  # measured, reconstructed
        query = ",".join(attrs)
        plain = service.get("/campaigns/survey-2025/marginals", attributes=query).json()
        assert "std" not in plain
        answer = service.get("/campaigns/survey-2025/marginals", attributes=query,
                             std="true").json()
        assert answer["values"] == plain["values"]
        table = synopsis.marginal(attrs)
        assert answer["values"] == table.values.ravel().tolist()
        std, _ = standard_errors(synopsis, attrs, table.values)
        assert answer["std"] == std.ravel().tolist()
        assert answer["reconstructed"] is (attrs == ["sex", "region"])
        rows = list(csv.reader(io.StringIO(service.get(
            "/campaigns/survey-2025/marginals", attributes=query, std="true",
            format="csv").text)))
        assert rows[0] == [*attrs, "fraction", "std"]
        assert [float(r[3]) for r in rows[1:]] == answer["std"]


def test_the_page_lists_campaigns_and_shows_the_apis_marginal(browser, service):
    view = Page(browser, service)
    assert view.response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    view.page.wait_for_selector('#campaign-table tr[data-campaign="empty"]')
    for name in ("survey-2025", "hostile", "empty"):
        status = service.get(f"/campaigns/{name}/status").json()
        shown = view.page.get_attribute(f'tr[data-campaign="{name}"] td[data-reports]',
                                        "data-reports")
        assert int(shown) == status["reports"]
    assert view.page.evaluate("sessionStorage.getItem('dpmarginals.token')") == TOKEN

    view.open("survey-2025")
    view.show(["age", "region"])  # a group's marginal: measured
    answer = service.get("/campaigns/survey-2025/marginals", attributes="age,region",
                         std="true").json()
    assert answer["reconstructed"] is False and len(answer["std"]) == 25
    _check_table_equals_answer(view.table(), answer)
    assert view.page.inner_text("#basis") == "measured"
    heat = view.page.eval_on_selector_all(
        "#chart svg.heatmap rect.cell",
        "rs => rs.map(r => [+r.dataset.row, +r.dataset.col, r.dataset.value])")
    assert len(heat) == 25
    for i, j, value in heat:
        assert float(value) == answer["values"][i * 5 + j]
    if os.environ.get("DPMARGINALS_SCREENSHOT"):
        view.page.screenshot(path=os.environ["DPMARGINALS_SCREENSHOT"], full_page=True)

    view.clear()
    view.page.select_option("#measured-select", value=json.dumps(["age", "region"],
                                                                   separators=(",", ":")))
    view.page.click("#swap")  # the same group's marginal, transposed: still measured
    view.show([], std=False)
    assert view.page.inner_text("#query-attrs") == "region × age"
    answer = service.get("/campaigns/survey-2025/marginals", attributes="region,age").json()
    assert [float(row[2]["value"]) for row in view.table()] == answer["values"]
    assert view.page.inner_text("#basis") == "measured"
    assert view.page.is_hidden("#std-text") or view.page.inner_text("#std-text") == ""
    assert view.page.is_hidden("#color-by-row")  # nothing to colour by without std

    view.clear()
    view.show(["sex", "region"])  # no group holds sex and region: reconstructed
    answer = service.get("/campaigns/survey-2025/marginals", attributes="sex,region",
                         std="true").json()
    assert answer["reconstructed"] is True
    _check_table_equals_answer(view.table(), answer)
    assert view.page.inner_text("#basis") == "reconstructed"
    assert "model-based" in view.page.inner_text("#std-text")
    view.close()


def test_the_csv_download_is_the_shown_table(browser, service):
    view = Page(browser, service)
    view.page.wait_for_selector('#campaign-table tr[data-campaign="hostile"]')
    view.open("hostile")
    view.show([XSS_ATTRIBUTE, "b"])
    with view.page.expect_download() as info:
        view.page.click("#download")
    download = info.value
    assert download.suggested_filename.endswith(".csv")
    mine = list(csv.reader(io.StringIO(Path(download.path()).read_text())))
    api = list(csv.reader(io.StringIO(service.get(
        "/campaigns/hostile/marginals", attributes=f"{XSS_ATTRIBUTE},b", std="true",
        format="csv").text)))
    assert mine[0] == api[0] == [XSS_ATTRIBUTE, "b", "fraction", "std"]
    assert len(mine) == len(api) == 7
    for row, expected in zip(mine[1:], api[1:], strict=True):
        # a label a spreadsheet would run as a formula gets a leading apostrophe
        label = "'" + expected[0] if expected[0] == FORMULA_LABEL else expected[0]
        assert row[:2] == [label, expected[1]]
        assert [float(x) for x in row[2:]] == [float(x) for x in expected[2:]]
    assert {row[0] for row in mine[1:]} == {XSS_LABEL, "'" + FORMULA_LABEL, 'blue, "dark"'}
    view.close()


def test_hostile_names_and_labels_render_as_text(browser, service):
    view = Page(browser, service)
    view.page.wait_for_selector('#campaign-table tr[data-campaign="hostile"]')
    view.open("hostile")
    view.show([XSS_ATTRIBUTE, "b"])
    labels = [row[0]["text"] for row in view.table()]
    assert labels == [XSS_LABEL] * 2 + [FORMULA_LABEL] * 2 + ['blue, "dark"'] * 2
    assert view.page.inner_text("#marginal-table thead th") == XSS_ATTRIBUTE
    assert XSS_ATTRIBUTE in view.page.inner_text("#attribute-list")
    assert view.page.locator("#chart svg.heatmap text").filter(
        has_text="<img src=x").count() == 1  # the row tick, as text
    # nothing was parsed as HTML or SVG markup: no element from the names, no script ran
    assert view.page.locator("img").count() == 0
    assert view.page.locator("svg svg").count() == 0
    assert view.page.evaluate("document.querySelectorAll('[onerror],[onload]').length") == 0
    assert view.dialogs == []
    view.close()


def test_the_apis_error_reasons_are_shown(browser, service):
    view = Page(browser, service, token="not-the-token")
    message = view.page.locator("#campaigns-message.error")
    message.wait_for()
    unauthorized = service.http.get("/campaigns", headers={"Authorization": "Bearer x"})
    assert unauthorized.status_code == 401
    assert unauthorized.json()["reason"] in message.inner_text()
    assert "HTTP 401" in message.inner_text()
    view.close()
    # with the token, a campaign can be opened by its id; one without reports has no marginal
    view = Page(browser, service)
    view.page.fill("#open-id", "empty")
    view.page.click("#open-form button")
    view.page.wait_for_selector("#attribute-list input")
    view.show(["sex"], std=False)
    shown = view.page.locator("#query-message.error")
    shown.wait_for()
    reason = service.http.get("/campaigns/empty/marginals",
                              params={"attributes": "sex"}, headers=ADMIN).json()["reason"]
    assert reason in shown.inner_text() and "HTTP 409" in shown.inner_text()
    assert view.page.is_hidden("#result")
    view.close()


# -- issue #33, point 7 --------------------------------------------------------------------
def test_without_a_token_the_page_says_a_token_shows_private_campaigns(browser, service):
    """Every campaign here is private: without a token the list is empty, and the page
    says a token lists them (it said "No campaigns yet.")."""
    view = Page(browser, service, token=None)
    message = view.page.locator("#campaigns-message")
    view.page.wait_for_function(
        "() => document.getElementById('campaigns-message').textContent.includes('token')")
    text = message.inner_text()
    assert "No campaigns yet" not in text and "private" in text, text
    assert view.page.is_hidden("#campaign-table")
    view.close()
    view = Page(browser, service)  # with the token: listed, no note
    view.page.wait_for_selector('#campaign-table tr[data-campaign="survey-2025"]')
    assert "token" not in view.page.inner_text("#campaigns-message")
    view.close()


def test_the_api_docs_pages_fetch_nothing_from_elsewhere(service):
    """/docs names only the service's own assets, and it serves them; /redoc leads there."""
    import re

    for path in ("/docs", "/redoc"):
        page = service.http.get(path, follow_redirects=True)
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert not re.findall(r"https?://", page.text), page.text
        assets = re.findall(r'(?:src|href)="([^"]+)"', page.text)
        assert assets and all(a.startswith("/docs/assets/") for a in assets), assets
        for asset in assets:
            assert service.http.get(asset).status_code == 200


def test_the_api_docs_render_offline(browser, service):
    """Swagger UI renders the service's schema in Chromium with every request to another
    host refused (it loaded from a CDN and was blank offline)."""
    context = browser.new_context()
    context.set_default_timeout(TIMEOUT_MS)
    elsewhere: list[str] = []

    def only_the_service(route: Any) -> None:
        if route.request.url.startswith(service.url):
            route.continue_()
        else:
            elsewhere.append(route.request.url)
            route.abort()

    context.route("**/*", only_the_service)
    page = context.new_page()
    page.goto(service.url + "/docs")
    page.wait_for_selector(".opblock")  # one block per operation of the schema
    assert page.locator(".opblock").count() >= 10
    assert "dpmarginals aggregator" in page.inner_text(".info .title")
    assert elsewhere == [], elsewhere
    context.close()
