"""What protects the user against a dishonest aggregator: plan checks, the cap, the ledger."""

from __future__ import annotations

import inspect
import json
import math
import os
import secrets
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from dpmarginals.core.domain import Domain
from dpmarginals.core.errors import DPMarginalsError
from dpmarginals.core.randomness import SecureRandom
from dpmarginals.local.em import EM
from dpmarginals.protocol.client import (
    EPSILON_CEILING,
    AssignmentIgnored,
    BudgetExceeded,
    Ledger,
    LedgerError,
    PlanRefused,
    ServiceClient,
    ServiceError,
    check_plan,
    make_report,
    make_reports,
    play,
)
from dpmarginals.protocol.plan import GroupSpec, Plan
from dpmarginals.protocol.reports import PlanCodec

SRC = Path(__file__).resolve().parents[1] / "src"
DOMAIN = Domain(("a", "b", "c"), (2, 3, 5))
RECORD = {"a": 1, "b": 2, "c": 4}


def plan_with(oracle: str = "oue", epsilon: float = 1.0, group_epsilon: float | None = None,
              **change: object) -> Plan:
    """Three groups over pairs of a, b, c; group 1 gets ``group_epsilon`` and ``change``."""
    groups = [GroupSpec(attrs, oracle, epsilon, DOMAIN.project(attrs).cells())
              for attrs in (("a", "b"), ("b", "c"), ("a", "c"))]
    spec = {**groups[1].to_dict(), **change}
    if group_epsilon is not None:
        spec["epsilon"] = group_epsilon
    groups[1] = GroupSpec(tuple(spec["attributes"]), spec["oracle"], spec["epsilon"],
                          spec["cells"])
    return Plan("calm", epsilon, DOMAIN, tuple(groups), {"k": 2})


class Draws:
    """Counts every draw of randomness: SecureRandom, os.urandom, secrets.randbelow."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.words = self.urandom = self.randbelow = 0
        words, urandom, randbelow = SecureRandom._words, os.urandom, secrets.randbelow

        def count_words(rng: SecureRandom, count: int) -> np.ndarray:
            self.words += 1
            return words(rng, count)

        def count_urandom(n: int) -> bytes:
            self.urandom += 1
            return urandom(n)

        def count_randbelow(n: int) -> int:
            self.randbelow += 1
            return randbelow(n)

        monkeypatch.setattr(SecureRandom, "_words", count_words)
        monkeypatch.setattr(os, "urandom", count_urandom)
        monkeypatch.setattr(secrets, "randbelow", count_randbelow)

    @property
    def total(self) -> int:
        return self.words + self.urandom + self.randbelow


@pytest.fixture
def draws(monkeypatch):
    return Draws(monkeypatch)


def refused(call, match: str, draws: Draws, kind: type[Exception] = PlanRefused) -> str:
    """``call()`` raises ``kind`` in one line matching ``match``, with nothing drawn."""
    before = draws.total
    with pytest.raises(kind, match=match) as info:
        call()
    message = str(info.value)
    assert "\n" not in message
    assert draws.total == before, "randomness was drawn before the refusal"
    return message


# -- 1. plan checks, before any random draw -------------------------------------------------
def test_the_instrument_sees_draws(draws):
    make_report(plan_with(), RECORD, max_epsilon=1.0)
    assert draws.words and draws.urandom and draws.randbelow


def test_a_group_epsilon_above_the_plans_is_refused(draws):
    plan = plan_with(epsilon=1.0)
    bad = plan_with(epsilon=1.0, group_epsilon=20.0)
    msg = refused(lambda: make_report(bad, RECORD, max_epsilon=1.0), r"groups\[1\]\.epsilon = "
                  r"20\.0 differs from the plan's epsilon = 1\.0", draws)
    assert msg.startswith("plan refused: ")
    refused(lambda: make_reports(bad, np.zeros((5, 3), dtype=np.int64), max_epsilon=5.0),
            r"groups\[1\]\.epsilon", draws)
    lower = plan_with(epsilon=1.0, group_epsilon=0.5)  # not the plan's either
    refused(lambda: check_plan(lower, 1.0), r"groups\[1\]\.epsilon = 0\.5", draws)
    assert check_plan(plan, 1.0) is plan


def test_a_plan_epsilon_above_the_devices_cap_is_refused(draws):
    plan = plan_with(epsilon=2.0)
    refused(lambda: make_report(plan, RECORD, max_epsilon=1.0),
            r"epsilon = 2\.0 exceeds this device's max_epsilon = 1\.0", draws)
    refused(lambda: make_reports(plan, np.zeros((3, 3), dtype=np.int64), max_epsilon=1.5,
                                 groups=[0, 1, 2]), "max_epsilon = 1.5", draws)
    assert make_report(plan, RECORD, max_epsilon=2.0)["plan_hash"] == plan.hash


def test_max_epsilon_is_required_and_sane(draws):
    for func in (make_report, make_reports, play, check_plan, ServiceClient.submit):
        param = inspect.signature(func).parameters["max_epsilon"]
        assert param.default is inspect.Parameter.empty, func.__name__
    with pytest.raises(TypeError, match="max_epsilon"):
        make_report(plan_with(), RECORD)  # type: ignore[call-arg]
    for cap in (None, 0, -1.0, math.inf, math.nan, True, "1", EPSILON_CEILING * 2):
        refused(lambda cap=cap: make_report(plan_with(), RECORD, max_epsilon=cap),
                "max_epsilon must be", draws, DPMarginalsError)


def test_non_finite_and_absurd_epsilons_are_refused(draws):
    for eps, match in ((math.nan, "epsilon = nan is not a finite"),
                       (math.inf, "epsilon = inf is not a finite"),
                       (-1.0, "epsilon = -1.0 is not a finite"),
                       (50.0, r"epsilon = 50\.0 exceeds 20\.0")):
        plan = plan_with(epsilon=eps)
        # the dict carries a matching hash: only the value itself is wrong
        refused(lambda plan=plan: make_report(plan.to_dict(), RECORD, max_epsilon=20.0),
                match, draws)


def test_a_plan_dict_whose_hash_does_not_match_or_is_missing_is_refused(draws):
    plan = plan_with()
    good = plan.to_dict()
    assert check_plan(good, 1.0).hash == plan.hash
    tampered = {**good, "groups": [*good["groups"][:1],
                                   {**good["groups"][1], "epsilon": 20.0}, good["groups"][2]]}
    refused(lambda: make_report(tampered, RECORD, max_epsilon=1.0),
            r"hash = '[0-9a-f]{64}' does not match the plan's content", draws)
    unhashed = {k: v for k, v in good.items() if k != "hash"}
    refused(lambda: make_report(unhashed, RECORD, max_epsilon=1.0), "hash is missing", draws)
    refused(lambda: check_plan(json.dumps(unhashed), 1.0), "hash is missing", draws)
    refused(lambda: make_reports(unhashed, np.zeros((2, 3), dtype=np.int64), max_epsilon=1.0),
            "hash is missing", draws)


def test_wrong_cells_and_unknown_oracles_or_fields_are_refused(draws):
    refused(lambda: make_report(plan_with(cells=7), RECORD, max_epsilon=1.0),
            r"groups\[1\]\.cells = 7 but the marginal over \['b', 'c'\] has 15 cells", draws)
    refused(lambda: make_report(plan_with(oracle="rappor"), RECORD, max_epsilon=1.0),
            r"groups\[0\]\.oracle = 'rappor' is not one of", draws)
    # a report format's parameters come from the plan's params: malformed ones are refused
    ht = plan_with("ht")
    refused(lambda: make_report(Plan("inp_ht", 1.0, DOMAIN, ht.groups, {"k": "2"}), RECORD,
                                max_epsilon=1.0), r"groups\[0\] \(ht\): plan params\.k must be",
            draws)
    refused(lambda: make_report(Plan("inp_ht", 1.0, DOMAIN, ht.groups, {"k": 2, "support":
                                                                       "cells"}), RECORD,
                                max_epsilon=1.0), r"params\.support must be one of", draws)
    refused(lambda: make_report(plan_with(attributes=("b", "z"), cells=6), RECORD,
                                max_epsilon=1.0), r"'z' is not in the domain", draws)
    # derived oracle parameters (OLH's g, HR's K) are never read from the server
    olh = plan_with("olh").to_dict()
    olh["groups"][0]["g"] = 1000
    refused(lambda: make_report(olh, RECORD, max_epsilon=1.0),
            r"groups\[0\] has unknown field 'g' = 1000", draws)
    refused(lambda: check_plan({**plan_with().to_dict(), "sampling": "all"}, 1.0),
            "unknown field 'sampling'", draws)


def test_per_attribute_and_rr_budgets_are_checked_by_what_their_params_imply(draws):
    em = EM(epsilon=1.0, k=2).plan(DOMAIN, 1000)
    assert check_plan(em, 1.0) is em  # 3 attributes at 1/3 each
    greedy = Plan(em.method, em.epsilon, em.domain, em.groups,
                  {**em.params, "epsilon_per_attribute": 1.0})
    refused(lambda: check_plan(greedy.to_dict(), 1.0), r"params\.epsilon_per_attribute = 1\.0 "
            r"over 3 attributes composes to 3\.0 > the plan's epsilon = 1\.0", draws)
    keep = 1 / (1 + math.exp(-3.0))  # binary randomized response at epsilon 3
    rr = Plan("ft", 1.0, DOMAIN, (), {"k": 2, "p": keep})
    refused(lambda: check_plan(rr, 1.0), r"params\.p = .* implies epsilon 3\.0", draws)


# -- 2. the ledger ------------------------------------------------------------------------
@pytest.mark.parametrize("oracle", ["grr", "oue", "olh", "hr"])
def test_a_second_report_for_the_same_campaign_is_the_stored_one(oracle, draws, tmp_path):
    ledger = Ledger(tmp_path / "ledger.json")
    plan = plan_with(oracle)
    first = make_report(plan, RECORD, max_epsilon=1.0, ledger=ledger, campaign="c1")
    assert ledger.spent() == 1.0 and ledger.spent("c1") == 1.0
    before = draws.total
    again = make_report(plan, {"a": 0, "b": 0, "c": 0}, max_epsilon=1.0, ledger=ledger,
                        campaign="c1")  # even a changed value: one report per campaign
    assert again == first
    assert draws.total == before
    assert Ledger(tmp_path / "ledger.json").spent() == 1.0  # it was on disk


@pytest.mark.parametrize("oracle", ["grr", "oue", "sue", "olh", "hr"])
def test_a_later_campaign_of_the_same_plan_and_value_reuses_the_randomization(oracle, draws):
    ledger = Ledger()
    plan = plan_with(oracle)
    first = make_report(plan, RECORD, max_epsilon=1.0, ledger=ledger, campaign="week-1")
    words = draws.words
    second = make_report(plan, dict(RECORD), max_epsilon=1.0, ledger=ledger,
                         campaign="week-2")
    assert draws.words == words, "the memoized payload was randomized again"
    assert second["payload"] == first["payload"] and second["group"] == first["group"]
    assert second["report_id"] != first["report_id"]
    assert ledger.spent() == 1.0 and ledger.spent("week-2") == 0.0
    assert ledger.campaigns()["week-2"]["reused"] is True
    PlanCodec(plan).decode([second])  # a valid report of the plan


@pytest.mark.parametrize("name", ["inp_ht", "marg_ht", "inp_htcms", "em", "inp_em"])
def test_the_report_formats_are_memoized_and_charged_like_the_oracles(name, draws):
    # ht, cms, em (dpmarginals.protocol.formats): the same value under the same plan reuses
    # the payload (no draw, no charge); a changed value is a fresh, charged randomization.
    from dpmarginals.methods import make

    ledger = Ledger()
    plan = make(name, epsilon=1.0, k=2).plan(DOMAIN, 100_000)
    first = make_report(plan, RECORD, max_epsilon=1.0, ledger=ledger, campaign="w1")
    words = draws.words
    second = make_report(plan, dict(RECORD), max_epsilon=1.0, ledger=ledger, campaign="w2")
    assert draws.words == words, "the memoized payload was randomized again"
    assert second["payload"] == first["payload"] and ledger.spent() == 1.0
    changed = make_report(plan, {"a": 0, "b": 0, "c": 0}, max_epsilon=1.0, ledger=ledger,
                          campaign="w3")
    assert draws.words > words and ledger.spent() == 2.0
    PlanCodec(plan).decode([first, second, changed])


def test_a_changed_value_or_another_plan_is_charged_and_an_old_value_is_not():
    ledger = Ledger()
    plan = plan_with("oue")
    first = make_report(plan, RECORD, max_epsilon=1.0, ledger=ledger, campaign="w1")
    g = first["group"]
    changed = {"a": 0, "b": 0, "c": 0}
    assert PlanCodec(plan).cells(g, np.array([[0, 0, 0]]))[0] != PlanCodec(plan).cells(
        g, np.array([[1, 2, 4]]))[0]
    make_report(plan, changed, max_epsilon=1.0, ledger=ledger, campaign="w2")
    assert ledger.spent("w2") == 1.0 and ledger.spent() == 2.0
    back = make_report(plan, RECORD, max_epsilon=1.0, ledger=ledger, campaign="w3")
    assert back["payload"] == first["payload"] and ledger.spent() == 2.0
    other = Plan(plan.method, plan.epsilon, plan.domain, plan.groups, {"k": 2, "nonce": 1})
    make_report(other, RECORD, max_epsilon=1.0, ledger=ledger, campaign="w4")
    assert ledger.spent("w4") == 1.0 and ledger.spent() == 3.0


def test_the_device_keeps_its_group_per_plan_whatever_the_server_assigns():
    ledger = Ledger()
    plan = plan_with("grr")
    first = make_report(plan, RECORD, max_epsilon=1.0, group=0, ledger=ledger, campaign="w1")
    with pytest.warns(AssignmentIgnored, match="reports group 0 .* not the requested group 2"):
        second = make_report(plan, RECORD, max_epsilon=1.0, group=2, ledger=ledger,
                             campaign="w2")
    assert second["group"] == 0 and second["payload"] == first["payload"]
    assert ledger.spent() == 1.0
    assert ledger.campaigns()["w2"]["requested_group"] == 2


def test_the_total_cap_refuses_before_randomizing(draws):
    ledger = Ledger(max_total_epsilon=1.5)
    plan = plan_with("oue")
    make_report(plan, RECORD, max_epsilon=1.0, ledger=ledger, campaign="w1")
    assert ledger.remaining() == 0.5
    refused(lambda: make_report(plan, {"a": 0, "b": 0, "c": 0}, max_epsilon=1.0, ledger=ledger,
                                campaign="w2"),
            r"max_total_epsilon = 1\.5 refuses .* spent 1 \+ epsilon 1 > 1\.5", draws,
            BudgetExceeded)
    other = Plan("calm", 1.0, DOMAIN, plan.groups, {"k": 3})
    refused(lambda: make_report(other, RECORD, max_epsilon=1.0, ledger=ledger, campaign="w3"),
            "max_total_epsilon", draws, BudgetExceeded)
    assert ledger.spent() == 1.0 and set(ledger.campaigns()) == {"w1"}
    # an unchanged value costs nothing, so it is still reported
    make_report(plan, RECORD, max_epsilon=1.0, ledger=ledger, campaign="w4")
    assert ledger.spent() == 1.0


def test_a_campaign_whose_plan_changed_is_refused():
    ledger = Ledger()
    make_report(plan_with(), RECORD, max_epsilon=1.0, ledger=ledger, campaign="c")
    with pytest.raises(PlanRefused, match="campaign 'c' was already reported under plan"):
        make_report(plan_with("grr"), RECORD, max_epsilon=1.0, ledger=ledger, campaign="c")
    with pytest.raises(DPMarginalsError, match="campaign"):
        make_report(plan_with(), RECORD, max_epsilon=1.0, ledger=ledger)


def test_a_corrupt_ledger_is_a_clear_error_and_is_never_reset(tmp_path, draws):
    path = tmp_path / "ledger.json"
    for text in ("{not json", "", "[]", json.dumps({"format": "dpmarginals.ledger", "version": 1,
                                                    "groups": {}, "campaigns": {},
                                                    "randomizations": [{"epsilon": -1}]})):
        path.write_text(text)
        with pytest.raises(LedgerError, match=r"ledger '.*ledger\.json' is corrupt") as info:
            Ledger(path)
        assert "\n" not in str(info.value)
        assert path.read_text() == text  # left as it was
    assert draws.words == 0


def test_the_ledger_file_is_written_atomically(tmp_path, monkeypatch):
    path = tmp_path / "ledger.json"
    ledger = Ledger(path)
    make_report(plan_with(), RECORD, max_epsilon=1.0, ledger=ledger, campaign="w1")
    saved = path.read_text()
    assert json.loads(saved)["format"] == "dpmarginals.ledger"

    def broken(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(LedgerError, match="cannot write ledger"):
        make_report(plan_with(), {"a": 0, "b": 0, "c": 0}, max_epsilon=1.0, ledger=ledger,
                    campaign="w2")
    assert path.read_text() == saved
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ledger.json"]  # no temp file left
    assert Ledger(path).spent() == 1.0


# -- 3. ServiceClient.submit and play --------------------------------------------------------
class FakeService:
    """ServiceClient.request served from memory; records what the device asked and posted."""

    def __init__(self, plan: dict, group: int = 1) -> None:
        self.plan, self.group = plan, group
        self.calls: list[str] = []
        self.stored: dict[str, dict] = {}

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(ServiceClient, "request",
                            lambda client, *args, **kwargs: self(*args, **kwargs))

    def __call__(self, method, path, body=None, *, admin=False, raw=False):
        self.calls.append(f"{method} {path.split('?')[0].rsplit('/', 1)[-1]}")
        if path.endswith("/plan"):
            return 200, self.plan
        if "/assignment" in path:
            if "count" in path:
                return 200, {"groups": [self.group] * int(path.rsplit("=", 1)[1])}
            return 200, {"group": self.group}
        reports = body.get("reports", [body])
        if any(r["report_id"] in self.stored for r in reports):
            raise ServiceError(409, "duplicate_report", "seen", {"duplicates": [0]})
        self.stored.update({r["report_id"]: r for r in reports})
        return 201, {"accepted": len(reports)}


def test_submit_checks_the_plan_before_asking_or_drawing(monkeypatch, draws):
    bad = plan_with(epsilon=1.0, group_epsilon=20.0).to_dict()
    service = FakeService(bad)
    service.install(monkeypatch)
    client = ServiceClient("http://collector.example", "c1")
    refused(lambda: client.submit(RECORD, max_epsilon=1.0), r"groups\[1\]\.epsilon = 20\.0",
            draws)
    refused(lambda: play(client, np.zeros((4, 3), dtype=np.int64), max_epsilon=1.0),
            r"groups\[1\]\.epsilon = 20\.0", draws)
    assert service.calls == ["GET plan"]  # cached afterwards; no assignment, no post
    service.plan = {k: v for k, v in plan_with().to_dict().items() if k != "hash"}
    refused(lambda: client.plan(refresh=True), "hash is missing", draws)


def test_submit_with_a_ledger_reports_once_per_campaign_and_reuses_per_plan(monkeypatch):
    plan = plan_with("olh").to_dict()
    service = FakeService(plan, group=1)
    service.install(monkeypatch)
    ledger = Ledger()
    one = ServiceClient("http://collector.example", "week-1")
    first = one.submit(RECORD, max_epsilon=1.0, ledger=ledger)
    assert first["group"] == 1 and service.calls == ["GET plan", "GET assignment",
                                                     "POST reports"]
    assert one.submit(RECORD, max_epsilon=1.0, ledger=ledger) == first  # sent again: a dup
    assert len(service.stored) == 1
    service.calls.clear()
    service.group = 2  # a dishonest assignment is asked only for its ticket: group ignored
    two = ServiceClient("http://collector.example", "week-2")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # not even an AssignmentIgnored warning
        second = two.submit(RECORD, max_epsilon=1.0, ledger=ledger)
    assert service.calls == ["GET plan", "GET assignment", "POST reports"]
    assert (second["group"], second["payload"]) == (1, first["payload"])
    assert second["report_id"] != first["report_id"]
    assert ledger.spent() == 1.0
    assert set(ledger.campaigns()) == {"http://collector.example/campaigns/week-1",
                                       "http://collector.example/campaigns/week-2"}


def test_play_checks_the_plan_once_and_needs_the_cap(monkeypatch):
    service = FakeService(plan_with("grr").to_dict())
    service.install(monkeypatch)
    checks = []
    import dpmarginals.protocol.client as client_module

    real = client_module.check_plan

    def counting(plan, max_epsilon):
        checks.append(max_epsilon)
        return real(plan, max_epsilon)

    monkeypatch.setattr(client_module, "check_plan", counting)
    client = ServiceClient("http://collector.example", "c1")
    out = play(client, np.zeros((25, 3), dtype=np.int64), max_epsilon=1.0, batch=10)
    assert out["sent"] == 25 and len(service.stored) == 25 and checks == [1.0]


# -- the CLI ------------------------------------------------------------------------------
def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(SRC), os.environ.get("PYTHONPATH", "")) if p)}
    return subprocess.run([sys.executable, "-m", "dpmarginals.cli", *args],
                          capture_output=True, text=True, env=env, timeout=120)


@pytest.fixture
def offline(tmp_path):
    plan = plan_with("oue")
    plan.save(tmp_path / "plan.json")
    (tmp_path / "one.csv").write_text("a,b,c\n1,2,4\n")
    (tmp_path / "many.csv").write_text("a,b,c\n1,2,4\n0,0,0\n")
    return tmp_path


def test_cli_client_without_max_epsilon_fails_in_one_line(offline):
    out = _cli("client", "--plan", str(offline / "plan.json"), "--data",
               str(offline / "many.csv"), "--save-reports", str(offline / "r.jsonl"))
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert out.stderr.count("\n") == 1 and "--max-epsilon" in out.stderr
    assert not (offline / "r.jsonl").exists()


def test_cli_client_skips_rows_for_one_slice_of_a_file(offline):
    """--skip N --limit M plays rows N+1..N+M (one phase's slice of a file); a --skip that
    leaves no row fails in one line and writes nothing."""
    base = ("client", "--plan", str(offline / "plan.json"), "--data", str(offline / "many.csv"),
            "--max-epsilon", "1")
    out = _cli(*base, "--save-reports", str(offline / "second.jsonl"), "--skip", "1",
               "--limit", "5")
    assert out.returncode == 0, out.stderr
    assert "wrote 1 reports" in out.stdout
    assert len((offline / "second.jsonl").read_text().splitlines()) == 1
    out = _cli(*base, "--save-reports", str(offline / "none.jsonl"), "--skip", "2")
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert "--skip 2 leaves none of the 2 rows" in out.stderr
    assert not (offline / "none.jsonl").exists()
    out = _cli(*base, "--save-reports", str(offline / "neg.jsonl"), "--skip", "-1")
    assert out.returncode == 2 and "expected a whole number >= 0, got -1" in out.stderr


def test_cli_client_refuses_a_plan_over_the_cap_in_one_line(offline):
    out = _cli("client", "--plan", str(offline / "plan.json"), "--data",
               str(offline / "many.csv"), "--save-reports", str(offline / "r.jsonl"),
               "--max-epsilon", "0.5")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().endswith("plan refused: epsilon = 1.0 exceeds this device's "
                                       "max_epsilon = 0.5")
    assert out.stderr.count("\n") == 1


def test_cli_client_with_a_ledger_is_one_device(offline):
    base = ("client", "--plan", str(offline / "plan.json"), "--max-epsilon", "1",
            "--ledger", str(offline / "ledger.json"), "--json")

    def run(campaign: str, data: str = "one.csv", *extra: str) -> dict:
        out = _cli(*base, "--data", str(offline / data), "--campaign", campaign,
                   "--save-reports", str(offline / f"{campaign}.jsonl"), *extra)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    first = run("w1")
    assert first["epsilon_charged"] == 1.0 and first["epsilon_total"] == 1.0
    assert run("w1") == first
    second = run("w2")
    assert second["epsilon_charged"] == 0.0 and second["epsilon_total"] == 1.0
    assert second["report_id"] != first["report_id"]
    reports = [json.loads((offline / f"{c}.jsonl").read_text()) for c in ("w1", "w2")]
    assert reports[0]["payload"] == reports[1]["payload"]
    out = _cli(*base, "--data", str(offline / "many.csv"), "--campaign", "w3",
               "--save-reports", str(offline / "w3.jsonl"))
    assert out.returncode == 2 and "one record" in out.stderr and "Traceback" not in out.stderr
    (offline / "changed.csv").write_text("a,b,c\n0,0,0\n")
    out = _cli(*base, "--data", str(offline / "changed.csv"), "--campaign", "w4",
               "--save-reports", str(offline / "w4.jsonl"), "--max-total-epsilon", "1.5")
    assert out.returncode == 2 and "max_total_epsilon = 1.5 refuses" in out.stderr


def test_the_client_still_imports_only_numpy_and_the_standard_library():
    code = ("import sys; import dpmarginals.protocol.client, dpmarginals.protocol.ledger; "
            "print(sorted(m for m in ('pandas', 'scipy', 'fastapi', 'starlette', 'pydantic', "
            "'uvicorn', 'statsmodels', 'pyarrow') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PYTHONPATH": str(SRC)}, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


def test_warnings_module_is_quiet_without_a_ledger():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        make_report(plan_with(), RECORD, max_epsilon=1.0, group=2)
