"""The device's language-neutral test vectors (tests/vectors/device.json), which the
TypeScript client's suite reads too: the file is what this Python reference generates,
and every vector replays -- words to the same report, a plan to its hash, a law to its
thresholds, a hostile plan to its refusal, a device's reports to their outcomes.

A vector changed by one bit fails here: the file is compared with the generator's output
as a whole, and each report is replayed from its own words.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from dpmarginals.core.errors import DPMarginalsError
from dpmarginals.core.exact import exp_lower_bound, rational
from dpmarginals.protocol.checks import check_plan
from dpmarginals.protocol.device import Device
from dpmarginals.protocol.ledger import PlanRefused
from dpmarginals.protocol.plan import Plan
from dpmarginals.protocol.vectors import device_vectors, digest_line, law_of, replay

FILE = Path(__file__).parent / "vectors" / "device.json"


@pytest.fixture(scope="module")
def vectors() -> dict:
    return json.loads(FILE.read_text())


def test_the_file_is_what_the_reference_generates(vectors):
    """Regenerate with `python -m dpmarginals.protocol.vectors tests/vectors/device.json`
    after a deliberate change to a sampler, a law or the plan format."""
    assert vectors == json.loads(json.dumps(device_vectors()))


def test_the_digest_the_typescript_suite_checks_is_the_files():
    """``device.json.sha256``, which the TypeScript suite checks too: a bit changed anywhere
    in the file (even a word whose change leaves its report as it was) fails both."""
    digest = FILE.with_name(FILE.name + ".sha256").read_text(encoding="utf-8")
    assert digest == digest_line(FILE.read_text(encoding="utf-8"), FILE.name)


def test_every_report_replays_from_its_words(vectors):
    plans = {p["name"]: Plan.from_dict(p["plan"]) for p in vectors["plans"]}
    stages = set()
    for vector in vectors["reports"]:
        payload, used = replay(plans[vector["plan"]], vector, vector["words"])
        assert (payload, used) == (vector["payload"], len(vector["words"])), vector
        stages.add(vector["stage"])
    assert stages == {"fresh", "permanent", "instantaneous"}


def test_the_vectors_take_the_rare_paths(vectors):
    """Ties, rejected words and straddling bytes refined to a boundary: more words than the
    common path of each format (a GRR report: one word; a unary one: its units, one coin)."""
    longest: dict[str, int] = {}
    for v in vectors["reports"]:
        longest[v["plan"]] = max(longest.get(v["plan"], 0), len(v["words"]))
    assert longest["grr"] >= 3  # a biased index half redrawn, then a tie word
    assert longest["oue"] >= 4 and longest["sue"] >= 4  # refinement, the exact loop, the coin
    assert all(longest[name] > 2 for name in ("olh", "inp_ht", "inp_htcms", "marg_ht"))


def test_every_plan_hashes_as_recorded_and_is_accepted(vectors):
    for item in vectors["plans"]:
        plan = Plan.from_dict(item["plan"])
        assert plan.hash == item["hash"] == item["plan"]["hash"]
        assert check_plan(item["plan"], 20.0).hash == item["hash"]


def test_every_law_and_bound(vectors):
    for item in vectors["exp_lower_bound"]:
        bound = exp_lower_bound(rational(item["x"]))
        assert [str(bound.numerator), str(bound.denominator)] == item["bound"]
        x = min(item["x"], 64.0)  # beyond 64 the bound is e^64's
        assert math.exp(x) * (1 - 1e-12) <= float(bound) <= math.exp(x) * (1 + 1e-15)
    for item in vectors["laws"]:
        law = law_of(item["oracle"], item["epsilon"], item["size"], item.get("longitudinal"))
        assert law == item["law"], item


def test_every_hostile_plan_is_refused_naming_its_field(vectors):
    for item in vectors["refusals"]:
        with pytest.raises(PlanRefused) as info:
            check_plan(item["plan"], item["max_epsilon"])
        assert item["field"] in str(info.value), (item["case"], str(info.value))


@pytest.mark.filterwarnings("ignore::dpmarginals.protocol.device.ValueSubstituted")
def test_every_device_scenario_has_its_outcomes(vectors):
    for scenario in vectors["devices"]:
        phone = Device(None, clock=lambda: 1.8e9, **scenario["caps"])
        for step in scenario["steps"]:
            try:
                phone.report(step["plan"], step["record"], origin=step["origin"],
                             campaign=step["campaign"], group=step["group"])
                outcome = "reported"
            except DPMarginalsError as exc:
                outcome = type(exc).__name__
            total = phone.ledger.total()
            assert outcome == step["outcome"], (scenario["case"], step["campaign"])
            assert [str(total.numerator), str(total.denominator)] == step["total"]
