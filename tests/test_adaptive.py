"""Issue #20: adaptive two-phase collection, error-optimal planning, the two-phase service."""

from __future__ import annotations

import itertools
import json
import math
import urllib.error
import urllib.request

import numpy as np
import pytest

from dpmarginals.core.dataset import Dataset
from dpmarginals.core.domain import Domain
from dpmarginals.core.errors import DPMarginalsError
from dpmarginals.inference.energies import interaction_energies
from dpmarginals.inference.views import NoisyView
from dpmarginals.local.adaptive import Adaptive, calibrated_views, phase_one_structure
from dpmarginals.local.collect import group_supports
from dpmarginals.methods import make
from dpmarginals.oracles import GRR
from dpmarginals.planning.optimal import Structure, plan_optimal, predict
from dpmarginals.planning.workload import Workload, coefficient_variance
from dpmarginals.protocol.client import check_plan
from dpmarginals.synopsis.evaluate import random_queries


def _correlated(n: int, d: int = 6, *, seed: int = 0) -> Dataset:
    """Binary attributes in chained pairs: x1 copies x0 with prob 0.85, x3 copies x2, ...,
    each pair independent of the others (strong pair interactions, no triple ones)."""
    gen = np.random.default_rng(seed)
    cols = []
    for _ in range(d // 2):
        a = gen.random(n) < 0.4
        b = np.where(gen.random(n) < 0.85, a, gen.random(n) < 0.4)
        cols += [a, b]
    dom = Domain(tuple(f"x{i}" for i in range(d)), (2,) * d)
    return Dataset(np.column_stack(cols).astype(np.int64), dom, {}, "correlated")


def test_phase_one_plan_checks_like_any_plan_and_splits_the_users():
    dom = Domain(tuple(f"x{i}" for i in range(8)), (2,) * 8)
    plan = Adaptive(epsilon=1.0, k=3).plan(dom, 2**14)
    check_plan(plan.to_dict(), 1.0)
    assert plan.params["phase"] == 1 and plan.params["phase1_users"] == 2**12
    attrs = {a for g in plan.groups for a in g.attributes}
    assert attrs == set(dom.attributes)  # every attribute measured in phase 1
    assert {len(g.attributes) for g in plan.groups} == {2, 3}
    with pytest.raises(DPMarginalsError, match="phase1"):
        Adaptive(epsilon=1.0, phase1=1.0)
    with pytest.raises(DPMarginalsError, match="too few"):
        Adaptive(epsilon=1.0, k=3).plan(dom, 8)


def test_each_user_reports_once_and_phase_two_depends_only_on_phase_one():
    data = _correlated(20_000)
    method = Adaptive(epsilon=1.0, k=2)
    phases = method.collect(data, rng=3)
    first, second = phases
    assert first.users.n + second.users.n == data.n  # a partition: nobody is asked twice
    assert first.counts.n == first.users.n and second.counts.n == second.users.n
    assert second.plan.params["phase1_hash"] == first.plan.hash
    assert all(g.epsilon == 1.0 for p in phases for g in p.plan.groups)
    check_plan(second.plan.to_dict(), 1.0)
    # post-processing: phase 2's plan is a function of phase 1's counts alone
    again = method.phase_two(first.plan, first.counts, second.users.n)
    assert again.hash == second.plan.hash
    synopsis = method.release([p.plan for p in phases], [p.counts for p in phases])
    assert synopsis.info["n"] == data.n and synopsis.info["phases"] == 2
    assert len(synopsis.info["groups"]) == first.plan.m + second.plan.m


def test_interaction_energies_find_the_strong_pairs_and_not_the_triples():
    """The chained pairs (x0,x1), (x2,x3), (x4,x5) have energy ~0.06; every other pair and
    every triple has none.  With 4,000 users per group the estimates must rank the chained
    pairs first and put the other pairs' and the triples' mean within noise of 0."""
    data = _correlated(200_000)
    dom = data.domain
    sets = list(itertools.combinations(dom.attributes, 2))
    sets += [("x0", "x1", "x2"), ("x1", "x3", "x5"), ("x2", "x3", "x4"), ("x0", "x4", "x5")]
    views = []
    for s in sets:
        table = data.marginal(list(s)).values
        var = coefficient_variance(GRR(1.0, table.size), 4000)
        noise = np.random.default_rng(len(views)).normal(0, math.sqrt(var), table.shape)
        views.append(NoisyView(s, table + noise - noise.mean(), 4000, var))
    est = interaction_energies(dom, views)
    truth = Structure.from_data(data)
    chained = [frozenset(p) for p in (("x0", "x1"), ("x2", "x3"), ("x4", "x5"))]
    ranked = sorted((s for s in est.energy if len(s) == 2), key=est.energy.get, reverse=True)
    assert set(ranked[:3]) == set(chained)
    for s in chained:
        assert est.energy[s] == pytest.approx(truth.energy_of(tuple(s)), rel=0.3)
    others = [est.energy[s] for s in ranked[3:]]
    assert np.mean(others) < 0.1 * min(est.energy[s] for s in chained)
    assert est.order_energy[3] < 0.1 * min(est.energy[s] for s in chained)


def test_the_planner_measures_strong_pairs_and_skips_weak_ones():
    data = _correlated(100_000)
    dom = data.domain
    wl = Workload.all_k(dom, 2)
    choice = plan_optimal(dom, 50_000, 1.0, wl, Structure.from_data(data))
    measured = {frozenset(s) for s in choice.sets if len(s) >= 2}
    for pair in (("x0", "x1"), ("x2", "x3"), ("x4", "x5")):
        assert any(frozenset(pair) <= s for s in measured), choice.sets
    # an independent domain: pairs are not worth measuring
    flat = Structure.prior(dom, {2: 0.0, 3: 0.0})
    assert plan_optimal(dom, 50_000, 1.0, wl, flat).l == 1


def test_predicted_error_never_rises_with_n():
    """Error-optimal planning at any n (issue #20.2): each candidate's predicted error
    falls with n and the candidate grid does not move, so the minimum cannot rise."""
    dom = Domain(tuple(f"x{i}" for i in range(10)), (2,) * 10)
    wl = Workload.all_k(dom, 3)
    prior = Structure.prior(dom, {2: 2e-4, 3: 1e-5})
    totals = [plan_optimal(dom, n, 0.2, wl, prior).total for n in (2**14, 2**16, 2**18, 989_818)]
    assert all(b <= a for a, b in itertools.pairwise(totals)), totals
    sets = list(itertools.combinations(dom.attributes, 2))[:30]
    small = sum(predict(dom, 2**16, 0.2, sets, wl, prior))
    large = sum(predict(dom, 989_818, 0.2, sets, wl, prior))
    assert large < small


@pytest.mark.slow
def test_adaptive_beats_calm_on_correlated_data_with_the_same_users():
    """Seeded: 4 repeats of 40,000 users, all 15 pairs of 6 attributes, eps = 1.  The
    adaptive method measures the three strong pairs with many users; CALM spreads the users
    over theta*n = 15 groups.  Budget: the mean SSE ratio must be below 0.8 (measured ~0.3)."""
    ratios = []
    for r in range(4):
        data = _correlated(40_000, seed=r)
        queries = random_queries(data.domain, 2, 15, rng=r)
        exact = {q: data.marginal(list(q)).values for q in queries}

        def sse(synopsis, exact=exact):
            return np.mean([((synopsis.marginal(list(q)).values - t) ** 2).sum()
                            for q, t in exact.items()])

        calm = make("calm", epsilon=1.0, k=2).run(data, rng=100 + r)
        adaptive = make("adaptive", epsilon=1.0, k=2).run(data, rng=100 + r)
        ratios.append(sse(adaptive) / sse(calm))
    assert np.mean(ratios) < 0.8, ratios


def test_phase_one_structure_from_a_collection():
    data = _correlated(40_000)
    method = Adaptive(epsilon=2.0, k=2)
    plan = method.plan(data.domain, data.n)
    counts = group_supports(data.take(np.arange(plan.params["phase1_users"])), plan, rng=1)
    structure = phase_one_structure(data.domain, calibrated_views(plan, counts))
    assert structure.source == "phase 1"
    assert structure.energy_of(("x0", "x1")) > 10 * structure.energy_of(("x0", "x2"))


# -- the service: a two-phase campaign end to end ------------------------------------------
@pytest.mark.slow
def test_two_phase_campaign_through_the_service(tmp_path):
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    from dpmarginals.protocol.client import ServiceClient, play
    from dpmarginals.protocol.plan import Plan
    from dpmarginals.protocol.reports import support_counts
    from test_service_e2e import TOKEN, Server

    data = _correlated(12_000, seed=5)
    method = Adaptive(epsilon=1.0, k=2)
    plan1 = method.plan(data.domain, data.n)
    n1 = plan1.params["phase1_users"]
    server = Server(tmp_path / "adaptive.db")
    try:
        with ServiceClient(server.url, "survey", token=TOKEN) as client:
            client.create_campaign(plan1, {"tickets": "assigned"})
            play(client, data.codes[:n1], max_epsilon=1.0, save=tmp_path / "one.jsonl")
            opened = client.open_phase_two()
            assert opened["id"] == "survey.phase2" and opened["created"]
            with pytest.raises(Exception, match=r"phase 2 collects as campaign 'survey\.phase2'"):
                client.assignment()
            second = client.phase_two()
            plan2 = second.plan()
            check_plan(plan2.to_dict(), 1.0)  # the device's checks apply to phase 2 too
            assert plan2.hash == opened["plan_hash"]
            assert plan2.params["phase1_hash"] == plan1.hash
            play(second, data.codes[n1:], max_epsilon=1.0, save=tmp_path / "two.jsonl")
            again = client.open_phase_two()  # idempotent: phase 1 is closed, same plan
            assert again["plan_hash"] == plan2.hash and not again["created"]
        one = [json.loads(x) for x in (tmp_path / "one.jsonl").read_text().splitlines()]
        two = [json.loads(x) for x in (tmp_path / "two.jsonl").read_text().splitlines()]
        counts1, counts2 = support_counts(plan1, one), support_counts(plan2, two)
        # the service planned phase 2 from phase 1's reports as the library does
        local_plan2 = method.phase_two(plan1, counts1, data.n - n1)
        assert Plan.from_dict({**plan2.to_dict(with_hash=False), "params": {
            k: v for k, v in plan2.params.items() if k != "phase1_campaign"}}).hash \
            == local_plan2.hash
        local = method.release([plan1, plan2], [counts1, counts2])
        answer = server.released("survey.phase2", data.n - n1, "x0,x1")  # phase 2's own
        assert answer["values"] == pytest.approx(local.marginal(["x0", "x1"]).values.ravel()
                                                 .tolist(), abs=1e-9)
        # and it is an estimate of the truth: each cell's standard error is at most ~0.04 here
        # (groups of ~600 users at eps 1), so a total variation distance of 0.2 is > 4 sd
        # (measured offline through the same client code: at most 0.06 in 6 collections)
        truth = data.marginal(["x0", "x1"]).values.ravel()
        assert 0.5 * np.abs(np.array(answer["values"]) - truth).sum() < 0.2
        request = urllib.request.Request(server.url + "/campaigns/survey.phase2/phase2",
                                         method="POST", data=b"{}",
                                         headers={"Authorization": f"Bearer {TOKEN}"})
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(request, timeout=30)
        assert err.value.code == 422 and b"not phase 1" in err.value.read()
    finally:
        server.stop()


# -- the command line -------------------------------------------------------------------------
def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    from dpmarginals.cli.commands import main

    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_optimal_from_a_prior_and_its_errors(capsys, tmp_path):
    code, out, _ = _cli(capsys, "plan", "--optimal", "--n", "65536", "--d", "8", "--k", "3",
                        "--epsilon", "1", "--prior", "2=1e-5,3=1e-6", "--json")
    assert code == 0
    body = json.loads(out)
    assert body["l"] == 1 and body["structure"] == "prior"  # weak pairs: 1-way marginals
    code, out, _ = _cli(capsys, "plan", "--optimal", "--n", "65536", "--d", "8", "--k", "3",
                        "--epsilon", "1", "--prior", "2=0.02,3=0.005", "--out",
                        str(tmp_path / "plan.json"))
    assert code == 0 and "noise" in out
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert max(len(g["attributes"]) for g in plan["groups"]) >= 2
    code, _, err = _cli(capsys, "plan", "--optimal", "--n", "100", "--d", "8", "--k", "3",
                        "--epsilon", "1")
    assert code == 2 and "--public DATASET" in err and len(err.splitlines()) == 1
    code, _, err = _cli(capsys, "plan", "--optimal", "--n", "100", "--d", "8", "--k", "3",
                        "--epsilon", "1", "--prior", "two=1")
    assert code == 2 and "ORDER=ENERGY" in err


def test_experiment_population_option_applies_to_calm_fig4_only(capsys):
    code, _, err = _cli(capsys, "experiment", "calm-fig5", "--population", "full")
    assert code == 2 and "calm-fig4 only" in err
