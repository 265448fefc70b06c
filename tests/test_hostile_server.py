"""The device against a dishonest aggregator: every plan, ledger and phase trick we know,
refused or paid for within the device's own caps, before any random draw.

Each case is what a hostile server can send (issue "The device is the trust boundary"):
re-minted plans, stripped phase hashes, a plan changed mid-campaign, a ``matrix`` strategy
with tiny rows, an ``em`` plan naming olh, a group epsilon above the plan's, 1,000
campaigns, and a ledger cut by kill -9.  In every case the device spends at most its caps,
refuses in one line before any random draw (the ``draws`` instrument counts every draw of
the OS's randomness, and a refusal with a draw fails), and its ledger stays readable.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import secrets
import signal
import subprocess
import sys
import time
import warnings
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from dpmarginals.core.domain import Domain
from dpmarginals.core.errors import EPSILON_CEILING, DPMarginalsError
from dpmarginals.core.randomness import SecureRandom
from dpmarginals.local.adaptive import Adaptive
from dpmarginals.local.em import EM
from dpmarginals.local.wfm import WFM
from dpmarginals.protocol.checks import check_plan
from dpmarginals.protocol.device import (
    DAY,
    AssignmentIgnored,
    Device,
    RecordValueError,
    ValueSubstituted,
    record_row,
)
from dpmarginals.protocol.formats import (
    STRATEGY_TOTAL,
    StrategyMatrix,
    encode_matrix,
    support_sizes,
)
from dpmarginals.protocol.http import ServiceClient
from dpmarginals.protocol.ledger import BudgetExceeded, Ledger, LedgerError, PlanRefused
from dpmarginals.protocol.plan import GroupSpec, Plan
from dpmarginals.protocol.reports import PlanCodec, support_counts
from dpmarginals.protocol.simulate import play, simulate_reports

SRC = Path(__file__).resolve().parents[1] / "src"
DOMAIN = Domain(("a", "b", "c"), (2, 3, 5))
RECORD = {"a": 1, "b": 2, "c": 4}
ORIGIN = "https://stats.example.org"


def plan_with(oracle: str = "oue", epsilon: float = 1.0, group_epsilon: float | None = None,
              longitudinal: float | None = None, params: dict | None = None,
              **change: object) -> Plan:
    """Three groups over pairs of a, b, c; group 1 gets ``group_epsilon`` and ``change``."""
    groups = [GroupSpec(attrs, oracle, epsilon, DOMAIN.project(attrs).cells())
              for attrs in (("a", "b"), ("b", "c"), ("a", "c"))]
    spec = {**groups[1].to_dict(), **change}
    if group_epsilon is not None:
        spec["epsilon"] = group_epsilon
    groups[1] = GroupSpec(tuple(spec["attributes"]), spec["oracle"], spec["epsilon"],
                          spec["cells"])
    return Plan("calm", epsilon, DOMAIN, tuple(groups), {"k": 2, **(params or {})},
                longitudinal=longitudinal)


def served(plan: Plan, change) -> dict:
    """The plan as a dishonest server would serve it: changed, with a matching hash."""
    body = plan.to_dict(with_hash=False)
    change(body)
    return {**body, "hash": Plan.from_dict(body).hash}


class Draws:
    """Counts every draw of randomness: SecureRandom's words, os.urandom, secrets."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        words, urandom, randbelow = SecureRandom.words, os.urandom, secrets.randbelow

        def count_words(rng: SecureRandom, count: int, bits: int) -> np.ndarray:
            self.count += 1
            return words(rng, count, bits)

        def count_urandom(n: int) -> bytes:
            self.count += 1
            return urandom(n)

        def count_randbelow(n: int) -> int:
            self.count += 1
            return randbelow(n)

        monkeypatch.setattr(SecureRandom, "words", count_words)
        monkeypatch.setattr(os, "urandom", count_urandom)
        monkeypatch.setattr(secrets, "randbelow", count_randbelow)


@pytest.fixture
def draws(monkeypatch):
    return Draws(monkeypatch)


def refused(call, match: str, draws: Draws, kind: type[Exception] = PlanRefused) -> str:
    """``call()`` raises ``kind`` in one line matching ``match``, with nothing drawn."""
    before = draws.count
    with pytest.raises(kind, match=match) as info:
        call()
    message = str(info.value)
    assert "\n" not in message
    assert draws.count == before, "randomness was drawn before the refusal"
    return message


class Clock:
    def __init__(self) -> None:
        self.now = 1.8e9

    def __call__(self) -> float:
        return self.now


def device(max_epsilon: float = 1.0, total: float = 10.0, **kw: object) -> Device:
    return Device(None, max_epsilon=max_epsilon, max_total_epsilon=total, **kw)


# -- the instrument ---------------------------------------------------------------------------
def test_the_instrument_sees_draws(draws):
    device().report(plan_with(), RECORD, origin=ORIGIN, campaign="c")
    assert draws.count


# -- plan checks --------------------------------------------------------------------------------
def test_a_group_epsilon_above_the_plans_is_refused(draws):
    phone = device(max_epsilon=5.0)
    bad = plan_with(group_epsilon=20.0)
    msg = refused(lambda: phone.report(bad, RECORD, origin=ORIGIN, campaign="c"),
                  r"groups\[1\]\.epsilon = 20\.0 differs from the plan's epsilon = 1\.0", draws)
    assert msg.startswith("plan refused: ")
    refused(lambda: simulate_reports(bad, np.zeros((5, 3), dtype=np.int64), max_epsilon=5.0),
            r"groups\[1\]\.epsilon", draws)
    lower = plan_with(group_epsilon=0.5)  # not the plan's either
    refused(lambda: check_plan(lower, 1.0), r"groups\[1\]\.epsilon = 0\.5", draws)
    assert phone.ledger.total() == 0


def test_a_plan_epsilon_above_the_devices_cap_is_refused(draws):
    plan = plan_with(epsilon=2.0)
    refused(lambda: device(max_epsilon=1.0).report(plan, RECORD, origin=ORIGIN, campaign="c"),
            r"epsilon = 2\.0 exceeds this device's max_epsilon = 1\.0", draws)
    refused(lambda: simulate_reports(plan, np.zeros((3, 3), dtype=np.int64), max_epsilon=1.5),
            "max_epsilon = 1.5", draws)


def test_every_cap_of_a_device_is_required_and_sane(draws):
    with pytest.raises(TypeError, match="max_total_epsilon"):
        Device(None, max_epsilon=1.0)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="max_epsilon"):
        Device(None, max_total_epsilon=1.0)  # type: ignore[call-arg]
    for cap in (None, 0, -1.0, math.inf, math.nan, True, "1", EPSILON_CEILING * 2):
        refused(lambda cap=cap: device(max_epsilon=cap), "max_epsilon must be", draws,
                DPMarginalsError)
    for cap in (None, 0, math.inf, "3"):
        refused(lambda cap=cap: device(total=cap), "max_total_epsilon must be", draws,
                DPMarginalsError)
    refused(lambda: device(max_period_epsilon=-1), "max_period_epsilon must be", draws,
            DPMarginalsError)


def test_non_finite_and_absurd_epsilons_are_refused(draws):
    for eps, match in ((-1.0, "epsilon = -1.0 is not a finite"),
                       (50.0, r"epsilon = 50\.0 exceeds 20, beyond any meaningful privacy")):
        body = served(plan_with(), lambda b, eps=eps: [b.update(epsilon=eps)] + [
            g.update(epsilon=eps) for g in b["groups"]])
        refused(lambda body=body: check_plan(body, 20.0), match, draws)
    for eps in (math.nan, math.inf):  # no client reads these as JSON numbers
        body = {**plan_with().to_dict(), "epsilon": eps}
        refused(lambda body=body: check_plan(body, 20.0), "not portable JSON", draws)


def test_a_plan_whose_hash_does_not_match_or_is_missing_is_refused(draws):
    plan = plan_with()
    good = plan.to_dict()
    assert check_plan(good, 1.0).hash == plan.hash
    tampered = {**good, "groups": [*good["groups"][:1],
                                   {**good["groups"][1], "epsilon": 20.0}, good["groups"][2]]}
    refused(lambda: check_plan(tampered, 1.0),
            r"hash = '[0-9a-f]{64}' does not match the plan's content", draws)
    unhashed = {k: v for k, v in good.items() if k != "hash"}
    refused(lambda: check_plan(unhashed, 1.0), "hash is missing", draws)
    refused(lambda: check_plan(json.dumps(unhashed), 1.0), "hash is missing", draws)


def test_wrong_cells_unknown_oracles_fields_and_big_numbers_are_refused(draws):
    refused(lambda: check_plan(plan_with(cells=7), 1.0),
            r"groups\[1\]\.cells = 7 but the marginal over \['b', 'c'\] has 15 cells", draws)
    refused(lambda: check_plan(plan_with(oracle="rappor"), 1.0),
            r"groups\[0\]\.oracle = 'rappor' is not one of", draws)
    ht = plan_with("ht")
    refused(lambda: check_plan(Plan("inp_ht", 1.0, DOMAIN, ht.groups, {"k": "2"}), 1.0),
            r"groups\[0\] \(ht\): plan params\.k must be", draws)
    refused(lambda: check_plan(plan_with(attributes=("b", "z"), cells=6), 1.0),
            r"'z' is not in the domain", draws)
    olh = plan_with("olh").to_dict()  # derived parameters (OLH's g) are never read
    olh["groups"][0]["g"] = 1000
    refused(lambda: check_plan(olh, 1.0), r"groups\[0\] has unknown field 'g' = 1000", draws)
    refused(lambda: check_plan({**plan_with().to_dict(), "sampling": "all"}, 1.0),
            "unknown field 'sampling'", draws)
    big = plan_with().to_dict()  # (no hash exists for it in a language without big ints)
    big["params"]["nonce"] = 2**60
    refused(lambda: check_plan(big, 1.0), r"params\.nonce = 1152921504606846976 is beyond "
            r"2\^53 - 1", draws)


def test_per_attribute_and_rr_budgets_are_checked_by_what_their_params_imply(draws):
    em = EM(epsilon=1.0, k=2).plan(DOMAIN, 1000)
    assert check_plan(em, 1.0) is em  # 3 attributes at exactly 1/3 each
    greedy = Plan(em.method, em.epsilon, em.domain, em.groups,
                  {**em.params, "epsilon_per_attribute": 1.0})
    refused(lambda: check_plan(greedy.to_dict(), 1.0), r"params\.epsilon_per_attribute = 1\.0 "
            r"over 3 attributes composes to 3\.0 > the plan's epsilon = 1\.0", draws)
    keep = 1 / (1 + math.exp(-3.0))  # binary randomized response at epsilon 3
    rr = Plan("ft", 1.0, DOMAIN, (), {"k": 2, "p": keep})
    refused(lambda: check_plan(rr, 1.0), r"params\.p = .* implies epsilon 3\.0", draws)


def test_an_em_plan_naming_olh_or_hr_is_refused_before_any_draw(draws):
    em = EM(epsilon=1.0, k=2).plan(DOMAIN, 1000)
    for names in (["olh", "hr", "grr"], ["grr", "olh", "grr"], ["grr", "grr"]):
        body = served(em, lambda b, names=names: b["params"].update(attribute_oracles=names))
        refused(lambda body=body: device().report(body, RECORD, origin=ORIGIN, campaign="e"),
                r"groups\[0\] \(em\): plan params\.attribute_oracles must", draws)


def test_a_memoized_plan_of_a_format_that_cannot_be_memoized_is_refused(draws):
    for oracle in ("olh", "hr"):
        refused(lambda oracle=oracle: check_plan(plan_with(oracle, longitudinal=4.0), 1.0),
                rf"groups\[0\] \({oracle}\): .* cannot be memoized", draws)
    body = {**plan_with(longitudinal=4.0).to_dict(), "longitudinal_epsilon": 0.5}
    refused(lambda: check_plan(body, 1.0), "longitudinal_epsilon = 0.5 must be a finite "
            r"number >= epsilon = 1\.0", draws)


# -- the matrix format: crafted strategies --------------------------------------------------
def _matrix_plan(weights: np.ndarray, eps: float = 1.0) -> dict:
    dom = Domain(("a",), (weights.shape[1],))
    group = GroupSpec(("a",), "matrix", eps, weights.shape[1])
    return Plan("wfm", eps, dom, (group,), {"k": 1, "strategy": encode_matrix(weights)}
                ).to_dict()


def test_a_matrix_with_tiny_rows_is_refused_in_integers_before_any_draw(draws):
    """Rows of 4e-17 in two columns passed the float check and made one output impossible
    under one cell and possible (2^-53) under another: an infinite privacy loss.  In
    integers a row with a 0 beside a positive weight is refused, and so is any row whose
    max/min exceeds e^eps by the least unit."""
    half = STRATEGY_TOTAL // 2
    tiny = np.array([[half - 1, half], [half, half - 1], [1, 0], [0, 1]], dtype=np.uint64)
    assert tiny.astype(object).sum(axis=0).tolist() == [STRATEGY_TOTAL] * 2
    refused(lambda: device().report(_matrix_plan(tiny), [0], origin=ORIGIN, campaign="m"),
            r"not 1\.0-LDP: row 2 has max/min = inf", draws)
    bound = Fraction(math.e)  # above e: a ratio a hair over it is refused, one under accepted
    lo = 10**17
    for hi, ok in ((int(lo * bound) + 1000, False), (int(lo * 2.718), True)):
        w = np.array([[hi, lo], [STRATEGY_TOTAL - hi, STRATEGY_TOTAL - lo]], dtype=np.uint64)
        if ok:
            StrategyMatrix.validate(w, 1.0, 2)
        else:
            refused(lambda w=w: StrategyMatrix.validate(w, 1.0, 2), r"row 0 has max/min",
                    draws, DPMarginalsError)
    floats = _matrix_plan(tiny)
    floats["params"]["strategy"] = {"rows": 4, "columns": 2, "float64": ["AAAA"]}
    body = served(Plan.from_dict({k: v for k, v in floats.items() if k != "hash"}),
                  lambda b: None)
    refused(lambda: check_plan(body, 1.0), "float64 weights", draws)


def test_wfm_plans_carry_integer_strategies_that_are_exactly_eps_ldp():
    plan = WFM(epsilon=1.0, k=2, cache=False).plan(Domain(("a", "b", "c"), (2, 2, 2)), 1000)
    fmt = PlanCodec(check_plan(plan.to_dict(), 1.0)).oracle(0)
    w = fmt.matrix.astype(object)
    assert all(sum(w[:, x]) == STRATEGY_TOTAL for x in range(w.shape[1]))
    bound = Fraction(math.e)  # a rational above e: max/min <= e^1 < bound
    for row in w:
        assert Fraction(max(row), min(row)) <= bound


# -- re-minted plans, many campaigns: the caps bound them -------------------------------------
def test_re_minted_plans_are_each_charged_and_the_total_cap_bounds_them(draws):
    """Five nonce-changed copies of one plan under five campaign ids are five fresh reports:
    the device charges each (on today's main, too), and max_total_epsilon refuses the
    fourth before drawing."""
    phone = device(total=3.0)
    for i in range(3):
        body = served(plan_with(), lambda b, i=i: b["params"].update(nonce=i))
        phone.report(body, RECORD, origin=ORIGIN, campaign=f"c{i}")
    assert phone.ledger.total() == 3
    body = served(plan_with(), lambda b: b["params"].update(nonce=3))
    refused(lambda: phone.report(body, RECORD, origin=ORIGIN, campaign="c3"),
            r"max_total_epsilon = 3 refuses this report: spent 3 \+ 1 > 3", draws,
            BudgetExceeded)
    assert phone.ledger.total() == 3


def test_a_thousand_campaigns_from_one_server_spend_at_most_the_caps(draws):
    clock = Clock()
    phone = Device(None, max_epsilon=1.0, max_total_epsilon=5.0, max_period_epsilon=2.0,
                   clock=clock)
    sent, days = [], 0
    for i in range(1000):
        if i and i % 100 == 0:
            clock.now += DAY  # a new day every 100 campaigns
            days += 1
        body = served(plan_with(), lambda b, i=i: b["params"].update(nonce=i))
        try:
            phone.report(body, RECORD, origin=ORIGIN, campaign=f"c{i}")
            sent.append((days, i))
        except BudgetExceeded as exc:
            assert "\n" not in str(exc)
    assert len(sent) == 5 and [d for d, _ in sent] == [0, 0, 1, 1, 2]
    assert phone.ledger.total() == 5 and phone.remaining() == 0


def test_the_period_cap_is_a_sliding_window():
    clock = Clock()
    phone = Device(None, max_epsilon=1.0, max_total_epsilon=100.0, max_period_epsilon=1.0,
                   period_seconds=3600.0, clock=clock)
    phone.report(plan_with(), RECORD, origin=ORIGIN, campaign="a")
    clock.now += 3599.0
    with pytest.raises(BudgetExceeded, match="per 3600 s"):
        phone.report(plan_with(), RECORD, origin=ORIGIN, campaign="b")
    clock.now += 2.0
    phone.report(plan_with(), RECORD, origin=ORIGIN, campaign="b")


def _sliced(lo: float, hi: float, oracle: str = "grr", longitudinal: float | None = None
            ) -> Plan:
    """One group over an age whose bins cover only [lo, hi]: a slice of the ages."""
    dom = Domain.from_dict({"age": {"bins": [lo, (lo + hi) / 2, hi]}})
    return Plan("calm", 1.0, dom, (GroupSpec(("age",), oracle, 1.0, 2),), {"k": 1},
                longitudinal=longitudinal)


@pytest.mark.parametrize("longitudinal", [None, 4.0])
def test_domains_sliced_by_the_server_learn_nothing_from_whether_a_device_reports(
        longitudinal):
    """A server that serves each campaign a domain covering one slice of the ages, without
    a catch-all, would learn the age from the one campaign a device reports in, were a
    value outside the domain refused (the refusal costs nothing and sends nothing).  The
    device reports in every slice instead (a random value where the age is not in it,
    charged as any report, told to the app locally), so what the server sees (which
    campaigns got a report, which the caps refused) is the same for every age."""
    def outcomes(age: float) -> list[str]:
        device = Device(None, max_epsilon=1.0, max_total_epsilon=6.0)
        seen = []
        for lo in range(20, 60, 4):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", ValueSubstituted)
                    device.report(_sliced(lo, lo + 4, longitudinal=longitudinal), {"age": age},
                                  origin=ORIGIN, campaign=f"slice{lo}")
                seen.append("report")
            except BudgetExceeded:
                seen.append("refused")
        return seen

    first = outcomes(37.3)
    assert first == outcomes(80.0) == outcomes(21.0)
    assert first == ["report"] * 6 + ["refused"] * 4  # each slice a family: charged afresh
    with pytest.warns(ValueSubstituted, match="80.0"):  # the app is told, locally
        Device(None, max_epsilon=1.0, max_total_epsilon=1.0).report(
            _sliced(20, 24), {"age": 80.0}, origin=ORIGIN, campaign="c")


def test_warnings_as_errors_cannot_turn_a_substitution_into_a_refusal(caplog):
    """An app running with warnings as errors (``python -W error``, strict test setups)
    would make the substitution notice abort the report, and the server would see no
    report exactly when the value lies outside its domain: the notice comes once the
    report is made, and an error from it is logged instead of raised."""
    device = Device(None, max_epsilon=1.0, max_total_epsilon=10.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        inside = device.report(_sliced(20, 24), {"age": 21.0}, origin=ORIGIN, campaign="a")
        outside = device.report(_sliced(20, 24), {"age": 80.0}, origin=ORIGIN, campaign="b")
    assert inside["group"] == outside["group"] == 0 and device.ledger.total() == 2
    assert "value 80.0" in caplog.text and "reported as a uniformly random value" in caplog.text


def test_pandas_numbers_and_integral_floats_are_the_users_values_not_substitutes():
    """A pandas row gives numpy integers (np.int64 ages) and integer columns with gaps as
    floats (1.0): they are the user's values, as in TypeScript, not values to replace at
    random; an integer beyond the floats lies outside every bin (substituted)."""
    dom = Domain.from_dict({"age": {"bins": [0, 18, 65, 120]}, "x": 3})
    plan = Plan("calm", 1.0, dom, (GroupSpec(("age", "x"), "grr", 1.0, 9),), {"k": 2})
    assert list(record_row(plan, {"age": np.int64(37), "x": 2.0}, ("age", "x"))) == [1, 2]
    assert list(record_row(plan, {"age": np.float32(70.0), "x": np.int8(0)}, ("age", "x"))) \
        == [2, 0]
    for bad in ({"age": 10**400, "x": 1}, {"age": 37, "x": 1.5}, {"age": 37, "x": np.True_}):
        with pytest.raises(RecordValueError):
            record_row(plan, bad, ("age", "x"))


def test_a_substituted_value_is_memoized_like_any_value():
    """Memoized plans keep one substitute per family: its permanent response is drawn once,
    and the family's reports cost at most R x the longitudinal epsilon, R = 3 the responses
    it can hold (two ages and the substitute), whatever the values were."""
    device = Device(None, max_epsilon=1.0, max_total_epsilon=100.0, min_longitudinal_ratio=2.0)
    plan = _sliced(20, 24, oracle="oue", longitudinal=2.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ValueSubstituted)
        for c in range(8):
            device.report(plan, {"age": 80.0 + c}, origin=ORIGIN, campaign=f"c{c}")
    assert device.ledger.total() == 6.0
    assert [k.rsplit(":", 1)[1] for k in device.ledger._data["permanent"]] == ["substitute"]


def _memo_outcomes(history: tuple[float, ...]) -> list[tuple[str, Fraction]]:
    """What a device whose age runs through ``history`` shows one server of memoized
    campaigns (report or refusal) and spends after each (a 2-bin age: R = 3 responses,
    family cost at most 12; total cap 4.5)."""
    device = Device(None, max_epsilon=1.0, max_total_epsilon=4.5)
    plan = _sliced(20, 24, longitudinal=4.0)
    out = []
    for i, age in enumerate(history):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ValueSubstituted)
                device.report(plan, {"age": age}, origin=ORIGIN, campaign=f"day{i}")
            out.append(("report", device.ledger.total()))
        except BudgetExceeded:
            out.append(("refused", device.ledger.total()))
    return out


def test_whether_a_memoized_report_is_refused_never_depends_on_the_value():
    """A server whose campaigns bring a device near its total cap would learn from a
    refusal whether the value changed, were an unchanged value's reports cheaper (they
    cost min(their sum, the longitudinal epsilon) under the per-value rule): a device whose
    age never changed would report forever, one whose age changed would be refused.  The
    charge reads only the family, so over every history of six ages (each of the two bins
    or outside the domain: 3^6 = 729 histories, exact rationals) the server sees one
    sequence: four reports, then refusals."""
    expected = _memo_outcomes((21.0,) * 6)
    assert [o for o, _ in expected] == ["report"] * 4 + ["refused"] * 2
    assert [t for _, t in expected] == [1, 2, 3, 4, 4, 4]
    for history in itertools.product((21.0, 23.0, 80.0), repeat=6):
        assert _memo_outcomes(history) == expected, history


# -- pinning and phases ---------------------------------------------------------------------
def test_a_plan_changed_mid_campaign_is_refused(draws):
    phone = device()
    first = phone.report(plan_with(), RECORD, origin=ORIGIN, campaign="flu")
    again = phone.report(plan_with(), RECORD, origin=ORIGIN, campaign="flu")
    assert again == first and phone.ledger.total() == 1  # the stored report, not a new one
    changed = served(plan_with(), lambda b: b["params"].update(k=3))
    refused(lambda: phone.report(changed, RECORD, origin=ORIGIN, campaign="flu"),
            r"campaign 'flu' at https://stats\.example\.org is pinned to plan \w+ \(first "
            r"seen\), the server now shows", draws)
    # the same id at another server is another campaign
    phone.report(changed, RECORD, origin="https://other.example", campaign="flu")
    assert phone.ledger.total() == 2


def test_a_campaign_is_pinned_on_first_sight_even_without_a_report(draws):
    phone = device()
    assert phone.accept(plan_with(), origin=ORIGIN, campaign="seen").hash == plan_with().hash
    changed = served(plan_with(), lambda b: b["params"].update(k=3))
    refused(lambda: phone.report(changed, RECORD, origin=ORIGIN, campaign="seen"),
            "is pinned to plan", draws)


def _correlated(n: int, seed: int = 5) -> np.ndarray:
    gen = np.random.default_rng(seed)
    cols = []
    for _ in range(3):
        a = gen.random(n) < 0.4
        cols += [a, np.where(gen.random(n) < 0.85, a, gen.random(n) < 0.4)]
    return np.column_stack(cols).astype(np.int64)


DOM6 = Domain(tuple(f"x{i}" for i in range(6)), (2,) * 6)


@pytest.fixture(scope="module")
def phases() -> tuple[Plan, ...]:
    """The plans of three phases of an adaptive collection from 6,000 simulated users."""
    codes = _correlated(6000)
    method = Adaptive(epsilon=1.0, k=2)
    plans, counts = [method.plan(DOM6, 6000)], []
    cuts = np.cumsum([0, *plans[0].params["phase_users"]])
    for j in range(3):
        counts.append(support_counts(plans[j], simulate_reports(
            plans[j], codes[cuts[j]:cuts[j + 1]], max_epsilon=1.0, rng=1 + j)))
        if j + 1 < 3:
            plans.append(method.next_phase(plans, counts))
    return tuple(plans)


PHASE_RECORD = dict(zip(DOM6.attributes, _correlated(1)[0].tolist(), strict=True))


@pytest.mark.parametrize("earlier", [0, 1])
def test_a_device_that_reported_in_a_phase_refuses_every_other_phase(phases, draws, earlier):
    phone = device()
    names = ["s", "s.phase2", "s.phase3"]
    phone.report(phases[earlier], PHASE_RECORD, origin=ORIGIN, campaign=names[earlier])
    for later in range(earlier + 1, 3):
        refused(lambda later=later: phone.report(phases[later], PHASE_RECORD, origin=ORIGIN,
                                                 campaign=names[later]),
                rf"this device reported in '{names[earlier]}', a phase of the same "
                "collection", draws)
    assert phone.ledger.total() == 1
    fresh = device()  # a device new to the collection reports in phase 3
    fresh.report(phases[2], PHASE_RECORD, origin=ORIGIN, campaign="s.phase3")
    assert fresh.ledger.total() == 1


def test_a_later_phase_with_its_earlier_hashes_stripped_is_refused(phases, draws):
    """The server strips ``earlier_hashes`` from phase 2 and re-hashes it: a device that
    reported in phase 1 refuses it from its own ledger (on today's main it reported again:
    ledger 1.0 -> 2.0), and one that only saw phase 1 refuses a phase that does not chain."""
    stripped = served(phases[1], lambda b: b["params"].pop("earlier_hashes"))
    phone = device()
    phone.report(phases[0], PHASE_RECORD, origin=ORIGIN, campaign="s")
    refused(lambda: phone.report(stripped, PHASE_RECORD, origin=ORIGIN, campaign="s.phase2"),
            "reported in 's', a phase of the same collection", draws)
    assert phone.ledger.total() == 1
    watcher = device()
    watcher.accept(phases[0], origin=ORIGIN, campaign="s")
    refused(lambda: watcher.report(stripped, PHASE_RECORD, origin=ORIGIN, campaign="s.phase2"),
            r"does not chain from the plan \w+ this device pinned", draws)
    assert watcher.ledger.total() == 0
    watcher.report(phases[1], PHASE_RECORD, origin=ORIGIN, campaign="s.phase2")  # genuine


# -- memoization: no linkage, and what it costs -------------------------------------------
def test_reports_of_an_unchanged_value_differ_and_their_family_costs_at_most_r_times_l():
    """Twenty campaigns of one memoized plan (OUE, per report 1.0, longitudinal 4.0) with
    the same value: fresh noise on one permanent response, so the payloads differ (today's
    main sent the identical payload in every campaign).  The flip probability of a bit is
    ~0.26 over 15 bits: two payloads agree with probability < 0.6^15 ~ 5e-4, so 20 payloads
    hold at least 15 distinct ones except with probability < 1e-20 (not seeded: OS
    randomness).  Group 1 (b, c) holds 15 values and the substitute, R = 16: its family's
    reports are charged until they cost 64, then nothing, changed value or not."""
    plan = plan_with(longitudinal=4.0)
    phone = device(total=100.0)
    payloads = [phone.report(plan, RECORD, origin=ORIGIN, campaign=f"day{i}", group=1)
                ["payload"] for i in range(20)]
    assert len(set(payloads)) >= 15
    assert phone.ledger.total() == 20
    for i in range(20, 70):  # a changed value is a new permanent response, charged alike
        phone.report(plan, {**RECORD, "c": i % 5}, origin=ORIGIN, campaign=f"day{i}", group=1)
    assert phone.ledger.total() == 64 and len(phone.ledger._data["permanent"]) == 5


def test_a_device_that_does_not_memoize_draws_every_report_afresh():
    """``memoize=False``, the owner's choice whatever the plan says: nothing kept, each
    report charged its epsilon in full, and the reports of an unchanged value independent
    draws of the composed law, so a server can neither link them nor tell whether the value
    changed.  400 reports of one value under a memoized GRR plan (eps 2, longitudinal 8)
    estimate a point mass at its cell within 4.5 sd in each of the 6 cells: the composed
    law, unbiased (OS randomness, not seeded: a false failure has probability < 6 x 7e-6)."""
    plan = plan_with("grr", epsilon=2.0, longitudinal=8.0)
    phone = Device(None, max_epsilon=2.0, max_total_epsilon=1e6, memoize=False)
    reports = [phone.report(plan, RECORD, origin=ORIGIN, campaign=f"d{i}", group=0)
               for i in range(400)]
    assert phone.ledger.total() == 800 and phone.ledger._data["permanent"] == {}
    supports, users = support_counts(plan, reports)
    oracle = PlanCodec(plan).oracle(0).oracle
    truth = np.zeros(6)
    truth[PlanCodec(plan).cells(0, np.array([[1, 2, 4]]))[0]] = 1.0
    est = oracle.estimate(supports[0], int(users[0]))
    assert np.all(np.abs(est - truth) <= 4.5 * np.sqrt(oracle.variance(int(users[0]), truth)))
    with pytest.raises(DPMarginalsError, match="memoize must be True or False"):
        Device(None, max_epsilon=1.0, max_total_epsilon=1.0, memoize="no")  # type: ignore
    # the floor guards against linked reports: a device that keeps nothing needs none
    fresh = Device(None, max_epsilon=1.0, max_total_epsilon=10.0, memoize=False)
    fresh.report(plan_with(longitudinal=1.0), RECORD, origin=ORIGIN, campaign="l", group=1)
    assert fresh.ledger.total() == 1 and fresh.ledger._data["permanent"] == {}


def test_a_memoized_plan_below_the_devices_floor_is_refused(draws):
    """A server that sets longitudinal epsilon near epsilon gets a device's reports of a
    family as (nearly) its permanent response, one identifier across its campaigns: the
    device refuses any ratio below its own floor (default 4, the service's default) before
    anything is drawn, and its owner may lower the floor (never below 1)."""
    for longitudinal in (1.0, 2.0, 3.99):
        refused(lambda lg=longitudinal: device().report(plan_with(longitudinal=lg), RECORD,
                                                        origin=ORIGIN, campaign="m"),
                rf"longitudinal_epsilon = {longitudinal:g} is below this device's floor, 4 x "
                r"epsilon = 4: its reports would link across campaigns", draws)
    assert device().report(plan_with(longitudinal=4.0), RECORD, origin=ORIGIN, campaign="m")
    owner_set = device(min_longitudinal_ratio=2.0)
    owner_set.report(plan_with(longitudinal=2.0), RECORD, origin=ORIGIN, campaign="m")
    refused(lambda: owner_set.report(plan_with(longitudinal=1.5), RECORD, origin=ORIGIN,
                                     campaign="n"), "is below this device's floor, 2 x", draws)
    for bad in (0.5, math.nan, math.inf, "4", True):
        with pytest.raises(DPMarginalsError, match="min_longitudinal_ratio must be"):
            device(min_longitudinal_ratio=bad)


def test_no_two_servers_see_one_permanent_response():
    """With longitudinal epsilon = epsilon (a device whose owner lowered its floor to 1) a
    memoized report is its permanent response itself (no instantaneous noise), so a
    permanent response shared by two servers would be one identifier both see.  Each
    origin's family is its own: its own permanent response, charged as its own; one
    server's campaigns share theirs."""
    plan = plan_with(longitudinal=1.0)
    phone = device(total=100.0, min_longitudinal_ratio=1.0)

    def payload(origin: str, campaign: str) -> str:
        return str(phone.report(plan, RECORD, origin=origin, campaign=campaign,
                                group=1)["payload"])

    same = {payload(ORIGIN, f"w{i}") for i in range(3)}
    assert len(same) == 1 and phone.ledger.total() == 3  # one server: one response
    others = [payload(f"https://other{i}.example", "w0") for i in range(8)]
    assert phone.ledger.total() == 11  # each server's charged as its own
    # 8 fresh OUE responses over 15 bits, each equal to the first w.p. < 0.74^15 < 0.011:
    # 4 or more of them equal to it w.p. < 70 x 0.011^4 < 1e-6 (OS randomness, not seeded)
    assert sum(o in same for o in others) <= 3


def test_unmemoized_formats_send_no_stable_identifier():
    """OLH and HR cannot be memoized: every report draws a fresh seed or index (a reused
    62-bit OLH seed identified the device), and each is charged in full."""
    phone = device(total=100.0)
    seeds = {phone.report(plan_with("olh"), RECORD, origin=ORIGIN, campaign=f"o{i}",
                          group=0)["payload"][0] for i in range(20)}
    assert len(seeds) == 20 and phone.ledger.total() == 20


def test_the_device_keeps_its_group_per_plan_whatever_the_server_assigns():
    phone = device(total=100.0)
    plan = plan_with(longitudinal=4.0)
    first = phone.report(plan, RECORD, origin=ORIGIN, campaign="a", group=2)
    with pytest.warns(AssignmentIgnored, match="reports group 2 in every campaign"):
        second = phone.report(plan, RECORD, origin=ORIGIN, campaign="b", group=0)
    assert first["group"] == second["group"] == 2


def test_memoized_and_composed_laws_are_what_the_aggregator_unbiases_with():
    """The same composed law in the device's reports and in the release: 60,000 simulated
    users of a memoized GRR plan, every cell within 4.5 sd (seeded)."""
    plan = plan_with("grr", epsilon=2.0, longitudinal=6.0)
    rng = np.random.default_rng(9)
    n = 60_000
    records = np.column_stack([rng.integers(0, 2, n), rng.choice(3, n, p=[0.6, 0.3, 0.1]),
                               rng.integers(0, 5, n)])
    groups = np.arange(n) % plan.m
    reports = simulate_reports(plan, records, groups=groups, rng=10, max_epsilon=2.0)
    supports, users = support_counts(plan, reports)
    codec = PlanCodec(plan)
    for g in range(plan.m):
        oracle = codec.oracle(g).oracle
        members = groups == g
        truth = np.bincount(codec.cells(g, records[members]),
                            minlength=plan.groups[g].cells) / members.sum()
        est = oracle.estimate(supports[g], int(users[g]))
        assert np.all(np.abs(est - truth) <= 4.5 * np.sqrt(oracle.variance(int(users[g]),
                                                                          truth)))


# -- the ledger -------------------------------------------------------------------------------
def test_a_corrupt_ledger_is_a_clear_error_and_is_never_reset(tmp_path, draws):
    path = tmp_path / "ledger.json"
    path.write_text('{"format": "dpmarginals.ledger", "version": 2, "campaigns": [}')
    refused(lambda: Device(path, max_epsilon=1.0, max_total_epsilon=3.0),
            "is corrupt .*restore it from a backup", draws, LedgerError)
    assert path.read_text().endswith("[}")
    path.write_text(json.dumps({"format": "dpmarginals.ledger", "version": 1}))
    refused(lambda: Ledger(path), "version 1 is not one this dpmarginals reads", draws,
            LedgerError)
    path.write_text(json.dumps({"format": "dpmarginals.ledger", "version": 3, "campaigns": {},
                                "groups": {}, "charges": [],
                                "permanent": {"f:1": {"response": 1, "longitudinal": 4.0}}}))
    bad_ledgers = [  # (what the file holds, what the one-line error names)
        ({"permanent": {"f:1": {"response": 1, "longitudinal": 4.0}}},
         r"permanent\['f:1'\]\.responses is missing"),
        *[({"permanent": {"f:1": {"response": 1, "longitudinal": 4.0, "responses": r}}},
           r"permanent\['f:1'\]\.responses must be a count in 2\.\.2\^53 - 1 or null")
          for r in (0, 1, 1.5, True, "3", 2**53)],
        ({"charges": [{"campaign": "c", "epsilon": 10**400, "time": 1.0, "permanent": None}]},
         r"charges\[0\]\.epsilon must be a finite number"),
        ({"version": 2, "charges": {}}, "'charges' a list"),
    ]
    for change, why in bad_ledgers:
        body = {"format": "dpmarginals.ledger", "version": 3, "campaigns": {}, "groups": {},
                "charges": [], "permanent": {}, **change}
        path.write_text(json.dumps(body))
        refused(lambda: Ledger(path), why, draws, LedgerError)


def test_a_ledger_edited_against_its_plans_is_refused(draws):
    """R and L belong to a family: a stored R that differs from its plan's (a hand edit)
    is refused rather than charged by either; a kept group outside the plan, too, before
    the check of the caps."""
    phone = device(total=100.0)
    plan = plan_with(longitudinal=4.0)
    phone.report(plan, RECORD, origin=ORIGIN, campaign="a", group=1)
    for memo in phone.ledger._data["permanent"].values():
        memo["responses"] = 2
    refused(lambda: phone.report(plan, RECORD, origin=ORIGIN, campaign="b", group=1),
            "allows 8 for its family, whose plan allows 64", draws, LedgerError)
    phone.ledger._data["groups"][plan.hash] = 7
    refused(lambda: phone.check_charge(plan, 7, origin=ORIGIN),
            "the ledger keeps group 7 for plan", draws, LedgerError)


def test_a_version_2_ledger_is_read_with_every_report_charged_in_full(tmp_path):
    """A ledger of the per-value rule (version 2: an unchanged value's reports cost at most
    the longitudinal epsilon together) is read as version 3: every report charged its
    epsilon, its permanent responses (the user's values) forgotten, and written as version
    3 at the next report; nothing spent is forgotten."""
    path = tmp_path / "ledger.json"
    memo = "fam:4"
    charges = [{"time": 1.0, "campaign": f"https://x|c{i}", "epsilon": 1.0, "permanent": memo}
               for i in range(6)]
    old = {"format": "dpmarginals.ledger", "version": 2, "groups": {}, "charges": charges,
           "campaigns": {f"https://x|c{i}": {"plan_hash": "h", "root": f"c{i}", "report": None}
                         for i in range(6)},
           "permanent": {memo: {"response": [0, 1], "longitudinal": 4.0}}}
    path.write_text(json.dumps(old))
    phone = Device(path, max_epsilon=1.0, max_total_epsilon=7.0)
    assert phone.ledger.total() == 6 and phone.ledger._data["permanent"] == {}
    phone.report(plan_with(longitudinal=4.0), RECORD, origin=ORIGIN, campaign="new", group=1)
    written = json.loads(path.read_text())
    assert written["version"] == 3 and Ledger(path).total() == 7
    assert [k.split(":")[1] for k in written["permanent"]] == ["14"]  # b = 2, c = 4


_WRITER = """
import sys
from dpmarginals.core.domain import Domain
from dpmarginals.protocol.device import Device
from dpmarginals.protocol.plan import GroupSpec, Plan
dom = Domain(("a", "b"), (2, 3))
plan = Plan("calm", 0.01, dom, (GroupSpec(("a", "b"), "oue", 0.01, 6),), longitudinal=0.05)
phone = Device(sys.argv[1], max_epsilon=1.0, max_total_epsilon=1e6)
i = 0
while True:
    phone.report(plan, {"a": i % 2, "b": i % 3}, origin="https://x", campaign=f"c{i}")
    i += 1
"""


def test_a_ledger_cut_by_kill_9_mid_write_stays_readable_and_counted(tmp_path):
    """A process reporting as fast as it can is killed (SIGKILL) at 15 random moments; after
    each, the ledger reads, is valid, and its charges match its reports (atomic replace)."""
    path = tmp_path / "ledger.json"
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    gen = np.random.default_rng(2)
    last = 0
    for _ in range(15):
        proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(path)], env=env)
        time.sleep(0.6 + float(gen.random()) * 0.8)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        ledger = Ledger(path)
        reported = [e for e in ledger.campaigns().values() if e["report"] is not None]
        assert len(ledger._data["charges"]) == len(reported) >= last
        last = len(reported)
    assert last > 0
    # a writer killed mid-write leaves its temporary file; the next locked write removes it
    Device(path, max_epsilon=1.0, max_total_epsilon=1e6).report(
        Plan("calm", 0.01, Domain(("a",), (2,)), (GroupSpec(("a",), "grr", 0.01, 2),)), [1],
        origin="https://x", campaign="after")
    assert not list(tmp_path.glob(".ledger.json.*.tmp"))


def test_two_processes_of_one_device_never_overspend(tmp_path):
    """Eight processes report under one ledger at once with a total cap of 5: the lock makes
    check-and-charge atomic, so exactly five reports are made."""
    path = tmp_path / "ledger.json"
    code = ("import sys; from dpmarginals.protocol.device import Device\n"
            "from dpmarginals.protocol.ledger import BudgetExceeded\n"
            "from dpmarginals.core.domain import Domain\n"
            "from dpmarginals.protocol.plan import GroupSpec, Plan\n"
            "plan = Plan('calm', 1.0, Domain(('a',), (4,)), (GroupSpec(('a',), 'grr', 1.0, 4),))\n"
            "d = Device(sys.argv[1], max_epsilon=1.0, max_total_epsilon=5.0)\n"
            "for i in range(4):\n"
            "    try: d.report(plan, [1], origin='https://x', campaign=sys.argv[2] + str(i))\n"
            "    except BudgetExceeded: pass\n")
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    procs = [subprocess.Popen([sys.executable, "-c", code, str(path), f"p{j}-"], env=env)
             for j in range(8)]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    assert Ledger(path).total() == 5


# -- ServiceClient.submit and play, against a server in memory -----------------------------
class FakeServer:
    """ServiceClient.request served from memory; records what the device asked and posted."""

    def __init__(self, plan: Plan | dict) -> None:
        self.plan = plan.to_dict() if isinstance(plan, Plan) else plan
        self.asked: list[str] = []
        self.posted: list = []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(ServiceClient, "request",
                            lambda client, *args, **kwargs: self(*args, **kwargs))

    def __call__(self, method, path, body=None, **kw):
        self.asked.append(f"{method} {path.split('/')[-1].split('?')[0]}")
        if path.endswith("/plan"):
            return 200, self.plan
        if "/assignment" in path:
            count = int(path.split("count=")[1]) if "count=" in path else None
            if count is None:
                return 200, {"group": 1, "ticket": "t"}
            return 200, {"groups": [1] * count, "tickets": ["t"] * count}
        self.posted.append(body)
        return 201, {"accepted": 1}


def test_submit_refuses_before_asking_for_an_assignment_or_drawing(monkeypatch, draws):
    server = FakeServer(served(plan_with(), lambda b: b["params"].update(k=2)))
    server.install(monkeypatch)
    phone = device(max_epsilon=0.5)
    with ServiceClient("https://stats.example.org", "c") as client:
        refused(lambda: client.submit(RECORD, phone), "exceeds this device's max_epsilon",
                draws)
        assert server.asked == ["GET plan"]
        broke = Device(None, max_epsilon=1.0, max_total_epsilon=0.5)
        refused(lambda: client.submit(RECORD, broke), "max_total_epsilon = 0.5", draws,
                BudgetExceeded)
        assert "GET assignment" not in server.asked


def test_submit_reports_once_per_campaign_and_pins_it(monkeypatch):
    server = FakeServer(plan_with())
    server.install(monkeypatch)
    phone = device()
    with ServiceClient("https://Stats.Example.org:443/", "c") as client:
        first = client.submit(RECORD, phone)
        second = client.submit(RECORD, phone)
    assert first == second and first["group"] == 1
    assert phone.ledger.total() == 1
    assert list(phone.ledger.campaigns()) == ["https://stats.example.org|c"]


def test_play_checks_the_plan_once_and_needs_the_cap(monkeypatch):
    server = FakeServer(plan_with())
    server.install(monkeypatch)
    with ServiceClient("https://stats.example.org", "c") as client:
        with pytest.raises(PlanRefused, match=r"max_epsilon = 0\.5"):
            play(client, np.zeros((4, 3), dtype=np.int64), max_epsilon=0.5)
        out = play(client, np.zeros((4, 3), dtype=np.int64), max_epsilon=1.0)
    assert out["sent"] == 4


# -- the command line -----------------------------------------------------------------------
def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dpmarginals.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(SRC)})


@pytest.fixture
def offline(tmp_path):
    (tmp_path / "me.csv").write_text("a,b,c\n1,2,4\n")
    return tmp_path


def test_cli_ledger_needs_a_total_cap_and_simulation_says_so(offline):
    plan_with().save(offline / "plan.json")
    out = _cli("client", "--plan", "plan.json", "--data", "me.csv", "--max-epsilon", "1",
               "--ledger", "l.json", "--campaign", "c", "--save-reports", "r.jsonl",
               cwd=offline)
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert "--ledger needs --max-total-epsilon" in out.stderr
    out = _cli("client", "--plan", "plan.json", "--data", "me.csv", "--max-epsilon", "1",
               "--save-reports", "r.jsonl", cwd=offline)
    assert out.returncode == 2 and "or --simulate" in out.stderr
    out = _cli("client", "--plan", "plan.json", "--data", "me.csv", "--max-epsilon", "1",
               "--save-reports", "r.jsonl", "--simulate", cwd=offline)
    assert out.returncode == 0 and "simulated users' reports" in out.stdout


def test_cli_ten_campaigns_under_a_total_cap_of_three_send_three(offline):
    sent, refusals = 0, []
    for i in range(10):
        body = served(plan_with(), lambda b, i=i: b["params"].update(nonce=i))
        (offline / f"plan{i}.json").write_text(json.dumps(body))
        out = _cli("client", "--plan", f"plan{i}.json", "--data", "me.csv", "--ledger",
                   "ledger.json", "--max-epsilon", "1", "--max-total-epsilon", "3",
                   "--campaign", f"c{i}", "--save-reports", f"r{i}.jsonl", cwd=offline)
        if out.returncode == 0:
            sent += 1
        else:
            refusals.append(out.stderr)
    assert sent == 3 and len(refusals) == 7
    assert all(r.count("\n") == 1 and "max_total_epsilon = 3 refuses" in r for r in refusals)
    assert Ledger(offline / "ledger.json").total() == 3


def test_cli_memoized_campaigns_of_one_plan_family_give_different_payloads(offline):
    """Two campaigns of one memoized OUE plan over 64 cells with an unchanged value: each
    of the 64 bits is flipped afresh w.p. f ~ 0.26, so the payloads agree with probability
    (f^2 + (1 - f)^2)^64 < 1e-13 (today's main sent the same payload twice)."""
    dom = Domain(("x", "y"), (8, 8))
    Plan("calm", 1.0, dom, (GroupSpec(("x", "y"), "oue", 1.0, 64),),
         longitudinal=4.0).save(offline / "plan.json")
    (offline / "xy.csv").write_text("x,y\n3,5\n")
    payloads = []
    for i in range(2):
        out = _cli("client", "--plan", "plan.json", "--data", "xy.csv", "--ledger",
                   "ledger.json", "--max-epsilon", "1", "--max-total-epsilon", "10",
                   "--campaign", f"week{i}", "--save-reports", f"r{i}.jsonl", cwd=offline)
        assert out.returncode == 0, out.stderr
        payloads.append(json.loads((offline / f"r{i}.jsonl").read_text())["payload"])
    assert payloads[0] != payloads[1]
    ledger = Ledger(offline / "ledger.json")
    assert ledger.total() == 2 and len(ledger._data["permanent"]) == 1


def test_cli_device_refuses_a_plan_below_its_floor_unless_told(offline):
    """`client --ledger` keeps the device's floor (4 x epsilon) unless
    --min-longitudinal-ratio lowers it; `plan` warns the operator who goes below it."""
    dom = Domain(("x", "y"), (2, 2))
    Plan("calm", 1.0, dom, (GroupSpec(("x", "y"), "oue", 1.0, 4),),
         longitudinal=2.0).save(offline / "plan.json")
    (offline / "xy.csv").write_text("x,y\n1,0\n")
    device = ("client", "--plan", "plan.json", "--data", "xy.csv", "--ledger", "ledger.json",
              "--max-epsilon", "1", "--max-total-epsilon", "10", "--save-reports", "r.jsonl")
    out = _cli(*device, "--campaign", "a", cwd=offline)
    assert out.returncode == 2 and not (offline / "r.jsonl").exists()
    assert out.stderr.strip().splitlines() == [
        "dpmarginals: error: plan refused: longitudinal_epsilon = 2 is below this device's "
        "floor, 4 x epsilon = 4: its reports would link across campaigns "
        "(min_longitudinal_ratio)"]
    out = _cli(*device, "--campaign", "b", "--min-longitudinal-ratio", "2", cwd=offline)
    assert out.returncode == 0, out.stderr
    assert Ledger(offline / "ledger.json").total() == 1
    out = _cli(*device, "--campaign", "c", "--min-longitudinal-ratio", "2", "--no-memoize",
               cwd=offline)  # the owner keeps no permanent response: nothing kept, charged
    assert out.returncode == 0, out.stderr
    ledger = Ledger(offline / "ledger.json")
    assert ledger.total() == 2 and len(ledger._data["permanent"]) == 1  # b's, not c's
    (offline / "domain.json").write_text(json.dumps({"x": 2, "y": 2}))
    out = _cli("plan", "--domain", "domain.json", "--epsilon", "1", "--k", "2", "--n", "1000",
               "--method", "calm", "--longitudinal-epsilon", "2", "--out", "p2.json",
               cwd=offline)
    assert out.returncode == 0, out.stderr
    assert "devices refuse it unless their owners lower their floor" in out.stderr


def test_cli_simulated_phases_play_their_own_slice_of_the_file(offline):
    """`client --simulate` sent every row into phase 1 of an adaptive campaign (more users
    than the phase planned, none left for later phases); a phase now plays its planned
    users after the earlier phases' rows unless --skip / --limit say otherwise."""
    dom = Domain.from_dict({"a": 2, "b": 3, "c": 2})
    plan = Adaptive(epsilon=1.0, k=2).plan(dom, 600)
    plan.save(offline / "phase1.json")
    planned = plan.params["phase_users"]
    (offline / "rows.csv").write_text("a,b,c\n" + "".join(f"{i % 2},{i % 3},{i // 3 % 2}\n"
                                                         for i in range(600)))
    client = ("client", "--simulate", "--plan", "phase1.json", "--data", "rows.csv",
              "--max-epsilon", "1", "--save-reports", "r.jsonl")
    out = _cli(*client, cwd=offline)
    assert out.returncode == 0, out.stderr
    assert f"phase 1 of {len(planned)}: rows 1 to {planned[0]:,} of --data" in out.stderr
    assert len((offline / "r.jsonl").read_text().splitlines()) == planned[0]
    out = _cli(*client, "--limit", "7", cwd=offline)
    assert out.returncode == 0 and "phase 1 of" not in out.stderr
    assert len((offline / "r.jsonl").read_text().splitlines()) == 7


def test_cli_client_reads_labelled_records_as_release_does(offline):
    dom = Domain.from_dict({"sex": ["female", "male"], "age": {"bins": [0, 30, 60, 120]}})
    plan = Plan("calm", 1.0, dom, (GroupSpec(("sex", "age"), "grr", 1.0, 6),))
    plan.save(offline / "plan.json")
    (offline / "people.csv").write_text("sex,age,extra\nfemale,37,x\nmale,12,y\n")
    out = _cli("client", "--plan", "plan.json", "--data", "people.csv", "--max-epsilon", "1",
               "--save-reports", "r.jsonl", "--simulate", cwd=offline)
    assert out.returncode == 0, out.stderr
    assert len((offline / "r.jsonl").read_text().splitlines()) == 2
    (offline / "bad.csv").write_text("sex,age\nfemale,37\nunknown,12\n")
    out = _cli("client", "--plan", "plan.json", "--data", "bad.csv", "--max-epsilon", "1",
               "--save-reports", "r.jsonl", "--simulate", cwd=offline)
    assert out.returncode == 2 and "'sex'" in out.stderr and "'unknown'" in out.stderr


def test_cli_device_reports_a_value_outside_the_plans_domain_at_random(offline):
    """``client --ledger``: a value the plan's domain lacks is reported as a random value,
    charged, with a warning on stderr (a refusal would tell the server); a good record's
    codes are what ``release`` would read; a file of two records is still refused."""
    dom = Domain.from_dict({"sex": ["female", "male"], "age": {"bins": [0, 30, 60, 120]}})
    Plan("calm", 1.0, dom, (GroupSpec(("sex", "age"), "grr", 1.0, 6),)).save(
        offline / "plan.json")
    for i, row in enumerate(["female,37", "unknown,37", "male,130"]):
        (offline / f"p{i}.csv").write_text(f"sex,age\n{row}\n")
        out = _cli("client", "--plan", "plan.json", "--data", f"p{i}.csv", "--ledger",
                   "ledger.json", "--max-epsilon", "1", "--max-total-epsilon", "10",
                   "--campaign", f"c{i}", "--save-reports", f"r{i}.jsonl", cwd=offline)
        assert out.returncode == 0, out.stderr
        assert ("reported as a uniformly random value" in out.stderr) == (i > 0), out.stderr
    assert Ledger(offline / "ledger.json").total() == 3
    (offline / "two.csv").write_text("sex,age\nfemale,37\nmale,12\n")
    out = _cli("client", "--plan", "plan.json", "--data", "two.csv", "--ledger", "ledger.json",
               "--max-epsilon", "1", "--max-total-epsilon", "10", "--campaign", "c9",
               "--save-reports", "r9.jsonl", cwd=offline)
    assert out.returncode == 2 and "must hold one record" in out.stderr


def test_an_ht_plan_with_a_huge_k_costs_what_its_attributes_allow(draws):
    """``params.k`` of an ``ht`` plan beyond its attributes means every coefficient; the
    device counted them with a list of k + 1 sums (k = 1e9: gigabytes before any check
    answered).  It is the same plan as k = the attributes, and reports as that one does."""
    dom = Domain(("a", "b"), (4, 3))
    plans = [Plan("calm", 1.0, dom, (GroupSpec(("a", "b"), "ht", 1.0, 12),), {"k": k})
             for k in (2, 10**9)]
    started = time.perf_counter()
    checked = [check_plan(p.to_dict(), 1.0) for p in plans]
    assert time.perf_counter() - started < 5
    sizes = [support_sizes(p) for p in checked]
    assert sizes[0] == sizes[1] == [2 * 15]  # (3 + 3 + 9 coefficients) x (index, bit)
    assert draws.count == 0


def test_a_plan_without_groups_or_nested_too_deep_is_one_line(draws):
    """Two plans that reached Python's own errors (the TypeScript client's are these)."""
    empty = Plan("calm", 1.0, DOMAIN, (), {"k": 2})
    refused(lambda: device().report(empty, RECORD, origin=ORIGIN, campaign="c"),
            "has no groups", draws, DPMarginalsError)
    deep = '{"format": "dpmarginals.plan", "params": ' + "[" * 100_000 + "]" * 100_000 + "}"
    refused(lambda: check_plan(deep, 1.0), "nested too deep", draws)
