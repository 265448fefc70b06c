"""Issue #20's user-facing paths attacked: crafted ``matrix`` strategies and plans served to
the client and the service, campaigns in phases driven the wrong way.  (A device asked in
two phases, and every other trick a server can play on a device: tests/test_hostile_server.py.)"""

from __future__ import annotations

import copy
import math
import threading
import time
import warnings
from fractions import Fraction

import numpy as np
import pytest

from dpmarginals.core.domain import Domain
from dpmarginals.core.randomness import SecureRandom
from dpmarginals.local.adaptive import Adaptive
from dpmarginals.local.wfm import WFM
from dpmarginals.protocol.checks import check_plan
from dpmarginals.protocol.device import Device
from dpmarginals.protocol.formats import STRATEGY_TOTAL, StrategyMatrix, encode_matrix
from dpmarginals.protocol.ledger import PlanRefused
from dpmarginals.protocol.plan import Plan
from dpmarginals.protocol.reports import support_counts
from dpmarginals.protocol.simulate import simulate_reports

BIN3 = Domain(("a", "b", "c"), (2, 2, 2))
RECORD = {"a": 1, "b": 0, "c": 1}


@pytest.fixture
def no_draws(monkeypatch):
    """Fail on any draw from the OS CSPRNG (the client must refuse before randomizing)."""
    def refuse(self, count, bits):
        raise AssertionError("the client drew randomness before refusing the plan")

    monkeypatch.setattr(SecureRandom, "words", refuse)


def _served(plan: Plan, change) -> dict:
    """The plan as a dishonest server would serve it: changed, with a matching hash."""
    body = plan.to_dict(with_hash=False)
    change(body)
    return {**body, "hash": Plan.from_dict(body).hash}


def _rr(ratio: Fraction) -> np.ndarray:
    """Randomized response on 2 cells as integer weights whose row ratio is ``ratio``."""
    keep = STRATEGY_TOTAL * ratio.numerator // (ratio.numerator + ratio.denominator)
    flip = STRATEGY_TOTAL - keep
    return np.array([[keep, flip], [flip, keep]], dtype=np.uint64)


# -- the matrix format: crafted strategies -------------------------------------------------
def test_a_ratio_a_hair_over_e_eps_is_refused_and_one_under_accepted():
    """The check is in integers against a rational lower bound of e^eps: no float
    rounding, no subnormal number, can hide a ratio above it."""
    e_above = Fraction(27182818284590453, 10**16)  # > e
    e_below = Fraction(27182818284590450, 10**16)  # < e, by 3e-17
    with pytest.raises(Exception, match=r"not 1\.0-LDP: row 0 has max/min"):
        StrategyMatrix.validate(_rr(e_above), 1.0, 2)
    StrategyMatrix.validate(_rr(e_below), 1.0, 2)


def test_crafted_strategies_are_refused_before_any_draw_in_one_line(no_draws):
    plan = WFM(epsilon=1.0, k=2).plan(BIN3, 1000)
    q3 = WFM(epsilon=3.0, k=2).plan(BIN3, 1000).params["strategy"]

    def strategy(**change):
        return lambda b: b["params"]["strategy"].update(change)

    def first_string(text):
        return lambda b: b["params"]["strategy"]["uint64"].__setitem__(0, text)

    half = STRATEGY_TOTAL // 2
    cases = {
        r"uint64\[0\] is a string of 4,000,000 characters; at most 4,096":
            first_string("A" * 4_000_000),
        r"uint64\[0\] is not valid base64": first_string("!!!!"),
        "has 9 columns but the group's marginal has 8 cells": strategy(columns=9),
        r"not 1\.0-LDP": lambda b: b["params"].update(strategy=q3),  # eps 3's Q under eps 1
        r"not 1\.0-LDP: row \d+ has max/min = inf": lambda b: b["params"].update(
            strategy=encode_matrix(np.eye(8, dtype=np.uint64) * np.uint64(STRATEGY_TOTAL))),
        "column 0 of the strategy sums to": lambda b: b["params"].update(
            strategy=encode_matrix(np.full((2, 8), half + 1, dtype=np.uint64))),
    }
    phone = Device(None, max_epsilon=1.0, max_total_epsilon=5.0)
    for reason, change in cases.items():
        served = _served(plan, change)
        for call in (lambda s=served: phone.report(s, RECORD, origin="o", campaign="w"),
                     lambda s=served: check_plan(s, max_epsilon=1.0)):
            with pytest.raises(PlanRefused, match=reason) as info:
                call()
            assert "\n" not in str(info.value)
    assert check_plan(plan.to_dict(), max_epsilon=1.0).hash == plan.hash


def test_duplicated_outputs_and_a_never_sent_row_are_still_eps_ldp():
    """Such strategies are accepted, rightly: the exact output distributions keep every
    ratio within e^eps (a zero row is never sent, a duplicated row halves both sides)."""
    base = _rr(Fraction(27182818284590450, 10**16))
    halves = np.vstack([base // np.uint64(2), base - base // np.uint64(2)])
    never = np.vstack([base, np.zeros((1, 2), dtype=np.uint64)])
    for q in (halves, never):
        fmt = StrategyMatrix(1.0, q, (2,))
        w0, w1 = fmt.matrix[:, 0].astype(object), fmt.matrix[:, 1].astype(object)
        for a, b in zip(w0, w1, strict=True):
            assert (a == 0) == (b == 0)
            if a:
                assert Fraction(max(a, b), min(a, b)) <= math.e


def test_changing_a_plans_dict_leaves_the_plan_alone():
    """to_dict and from_dict copy the params: a caller editing the dict (a nested strategy,
    a workload) does not change the plan it came from or went to."""
    plan = WFM(epsilon=1.0, k=2).plan(BIN3, 1000)
    before = plan.hash
    body = plan.to_dict()
    body["params"]["strategy"]["rows"] = 1
    assert plan.hash == before and plan.params["strategy"]["rows"] != 1
    again = Plan.from_dict(plan.to_dict())
    spec = plan.to_dict()
    made = Plan.from_dict(spec)
    spec["params"]["strategy"]["uint64"][0] = "x"
    assert made.hash == again.hash == before


# -- two phases: one device, one phase -------------------------------------------------------
def _correlated(n: int, seed: int = 5) -> np.ndarray:
    gen = np.random.default_rng(seed)
    cols = []
    for _ in range(3):
        a = gen.random(n) < 0.4
        cols += [a, np.where(gen.random(n) < 0.85, a, gen.random(n) < 0.4)]
    return np.column_stack(cols).astype(np.int64)


DOM6 = Domain(tuple(f"x{i}" for i in range(6)), (2,) * 6)


def _phases(n: int = 6000, phases: int = 2) -> tuple[Plan, ...]:
    """The plans of the first ``phases`` phases of an adaptive collection from ``n`` users
    (each phase's reports made by the client code), then the users' codes."""
    codes = _correlated(n)
    method = Adaptive(epsilon=1.0, k=2)
    plans, counts = [method.plan(DOM6, n)], []
    cuts = np.cumsum([0, *plans[0].params["phase_users"]])
    for j in range(phases):
        counts.append(support_counts(plans[j], simulate_reports(
            plans[j], codes[cuts[j]:cuts[j + 1]], max_epsilon=1.0, rng=1 + j)))
        if j + 1 < phases:
            plans.append(method.next_phase(plans, counts))
    return (*plans, codes)


# -- the service -----------------------------------------------------------------------------
TOKEN = "attack-admin-token"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
OPEN = {"tickets": "off", "public": True, "refresh_seconds": 0, "status_granularity": 1}


@pytest.fixture
def api(tmp_path):
    pytest.importorskip("fastapi")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient
    from dpmarginals.service.app import create_app

    with TestClient(create_app(tmp_path / "api.db", admin_token=TOKEN),
                    raise_server_exceptions=False) as client:
        yield client


def _create(api, name: str, plan: Plan | dict, settings: dict | None = None):
    spec = plan.to_dict() if isinstance(plan, Plan) else plan
    return api.post("/campaigns", json={"id": name, "plan": spec,
                                        "settings": OPEN if settings is None else settings},
                    headers=ADMIN)


def _refusal(r, status: int, code: str, reason: str) -> None:
    assert r.status_code == status, r.text
    body = r.json()
    assert body["error"] == code and reason in body["reason"], body


def test_the_service_refuses_crafted_strategies_and_keeps_reports_past_a_bad_one(api):
    plan = WFM(epsilon=1.0, k=2).plan(BIN3, 1000)
    q3 = WFM(epsilon=3.0, k=2).plan(BIN3, 1000).params["strategy"]
    for change, reason in (
            (lambda b: b["params"].update(strategy=q3), "not 1.0-LDP"),
            (lambda b: b["params"]["strategy"]["uint64"].__setitem__(0, "#"),
             "not valid base64"),
            (lambda b: b["params"]["strategy"].update(rows=10 ** 400), "not portable JSON"),
            (lambda b: b["params"]["strategy"].update(uint64="A" * 5000),
             "string of 5,000 characters")):
        body = plan.to_dict(with_hash=False)
        change(body)
        _refusal(_create(api, "w", body), 422, "invalid_plan", reason)
    assert _create(api, "w", plan).status_code == 201
    reports = simulate_reports(plan, _correlated(30)[:, :3], max_epsilon=1.0, rng=2)
    assert api.post("/campaigns/w/reports/batch", json={"reports": reports[:20]}).json() == {
        "accepted": 20}
    m = int(plan.params["strategy"]["rows"])
    for payload in (m, -1, 2 ** 63, 1.5, True):
        _refusal(api.post("/campaigns/w/reports", json={**reports[20], "payload": payload}),
                 422, "invalid_report", "matrix payload")
    mixed = [reports[21], {**reports[22], "payload": m}]
    _refusal(api.post("/campaigns/w/reports/batch", json={"reports": mixed}), 422,
             "invalid_report", f"report 1: matrix payload {m} is outside")
    assert api.get("/campaigns/w/status").json()["reports"] == 20
    assert api.post("/campaigns/w/reports/batch", json={"reports": reports[20:]}).json() == {
        "accepted": 10}


def test_phase_two_that_cannot_open_leaves_phase_one_open(api):
    plan1, _, codes = _phases()
    n1 = plan1.params["phase1_users"]
    assert _create(api, "s", plan1).status_code == 201
    _refusal(api.post("/campaigns/s/next-phase", headers=ADMIN), 422, "no_next_phase",
             f"phase 1 has no reports in {plan1.m} of its {plan1.m} groups")
    few = simulate_reports(plan1, codes[:2], max_epsilon=1.0, groups=[0, 0], rng=3)
    assert api.post("/campaigns/s/reports/batch", json={"reports": few}).status_code == 201
    _refusal(api.post("/campaigns/s/next-phase", json={"users": 10}, headers=ADMIN), 422,
             "no_next_phase", f"no reports in {plan1.m - 1} of its {plan1.m} groups")
    assert _create(api, "s.phase2", WFM(epsilon=1.0, k=2).plan(BIN3, 10)).status_code == 201
    rest = simulate_reports(plan1, codes[2:n1], max_epsilon=1.0, rng=4)
    assert api.post("/campaigns/s/reports/batch", json={"reports": rest}).status_code == 201
    _refusal(api.post("/campaigns/s/next-phase", headers=ADMIN), 409, "campaign_exists",
             "is not the next phase of 's'")
    status = api.get("/campaigns/s/status").json()
    assert status["state"] == "open" and status["reports"] == n1


def test_phase_two_refuses_inherited_expired_settings_and_opens_with_new_ones(api):
    plan1, _, codes = _phases()
    n1 = plan1.params["phase1_users"]
    assert _create(api, "e", plan1, {**OPEN, "expires_at": time.time() + 2}).status_code == 201
    reports = simulate_reports(plan1, codes[:n1], max_epsilon=1.0, rng=5)
    assert api.post("/campaigns/e/reports/batch", json={"reports": reports}).status_code == 201
    time.sleep(2.1)
    _refusal(api.post("/campaigns/e/next-phase", headers=ADMIN), 422, "invalid_settings",
             "the next phase would open already expired")
    assert api.get("/campaigns/e.phase2/plan").status_code == 404
    later = time.time() + 3600  # the settings given change phase 1's, the rest inherited
    opened = api.post("/campaigns/e/next-phase", json={"settings": {"expires_at": later}},
                      headers=ADMIN)
    assert opened.status_code == 201, opened.text
    assert opened.json()["settings"] == {**opened.json()["settings"], **OPEN,
                                         "expires_at": later}
    assert api.get("/campaigns/e.phase2/assignment").status_code == 200


def test_concurrent_phase_two_requests_open_one_phase_two(api):
    plan1, _, codes = _phases()
    n1 = plan1.params["phase1_users"]
    assert _create(api, "c", plan1).status_code == 201
    reports = simulate_reports(plan1, codes[:n1], max_epsilon=1.0, rng=6)
    assert api.post("/campaigns/c/reports/batch", json={"reports": reports}).status_code == 201
    answers: list = []
    threads = [threading.Thread(target=lambda: answers.append(
        api.post("/campaigns/c/next-phase", headers=ADMIN))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r.status_code for r in answers) == [200, 200, 201]
    assert len({r.json()["plan_hash"] for r in answers}) == 1
    _refusal(api.post("/campaigns/c/reports/batch", json={"reports": reports[:1]}), 410,
             "campaign_closed", "its phase 2 collects as campaign 'c.phase2'")
    served = api.get("/campaigns/c.phase2/plan").json()
    assert check_plan(served, max_epsilon=1.0).hash == answers[0].json()["plan_hash"]
    with pytest.raises(PlanRefused, match="exceeds this device's max_epsilon"):
        check_plan(served, max_epsilon=0.5)


def test_a_phase_two_plan_without_its_phase_one_is_refused_at_creation(api):
    _, plan2, _ = _phases()
    body = copy.deepcopy(plan2.to_dict(with_hash=False))
    body["params"]["earlier_campaigns"] = ["nowhere"]
    _refusal(_create(api, "f", body), 422, "invalid_plan",
             "phase 1 of this campaign ('nowhere'")
    assert api.get("/campaigns/f/status").status_code == 404

