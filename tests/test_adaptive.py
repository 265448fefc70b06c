"""Issue #20: adaptive collection in phases, error-optimal planning, the phased service."""

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
from dpmarginals.protocol.checks import check_plan
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
    assert plan.params["phase"] == 1 and plan.params["phases"] == 4
    assert plan.params["phase_users"] == [3277, 3277, 3277, 2**14 - 3 * 3277]
    assert plan.params["phase1_users"] == 3277
    attrs = {a for g in plan.groups for a in g.attributes}
    assert attrs == set(dom.attributes)  # every attribute measured in phase 1
    assert {len(g.attributes) for g in plan.groups} == {2, 3}
    two = Adaptive(epsilon=1.0, k=3, share=0.25, phases=2).plan(dom, 2**14)
    assert two.params["phase_users"] == [2**12, 3 * 2**12]
    for bad in (0.34, 0.0, -0.1, "a lot", float("nan")):  # 3 early phases of 0.34 leave none
        with pytest.raises(DPMarginalsError, match=f"share .*got share={bad!r}"):
            Adaptive(epsilon=1.0, share=bad)
    with pytest.raises(DPMarginalsError, match="phases must be an integer >= 2, got 1"):
        Adaptive(epsilon=1.0, phases=1)
    with pytest.raises(DPMarginalsError, match="phases must be at most 32, got 33"):
        Adaptive(epsilon=1.0, phases=33, share=0.01)
    with pytest.raises(DPMarginalsError, match="too few"):
        Adaptive(epsilon=1.0, k=3).plan(dom, 8)


@pytest.mark.parametrize("phases", [2, 4])
def test_each_user_reports_once_and_each_phase_depends_only_on_the_earlier_ones(phases):
    data = _correlated(20_000)
    method = Adaptive(epsilon=1.0, k=2, phases=phases, share=0.25)
    collected = method.collect(data, rng=3)
    assert len(collected) == phases
    ids = np.concatenate([p.users.codes for p in collected])
    assert sum(p.users.n for p in collected) == data.n  # a partition: nobody asked twice
    assert np.array_equal(np.sort(ids, axis=0), np.sort(data.codes, axis=0))
    assert [p.users.n for p in collected] == collected[0].plan.params["phase_users"]
    assert all(p.counts.n == p.users.n for p in collected)
    assert all(g.epsilon == 1.0 for p in collected for g in p.plan.groups)
    plans, counts = [p.plan for p in collected], [p.counts for p in collected]
    for j in range(1, phases):
        assert plans[j].params["phase"] == j + 1
        assert plans[j].params["earlier_hashes"][0] == plans[0].hash
        assert plans[j].params["earlier_hashes"] == [p.hash for p in plans[:j]]
        check_plan(plans[j].to_dict(), 1.0)
        # post-processing: each phase's plan is a function of the earlier phases' counts
        again = method.next_phase(plans[:j], counts[:j], collected[j].users.n)
        assert again.hash == plans[j].hash
    synopsis = method.release(plans, counts)
    assert synopsis.info["n"] == data.n and synopsis.info["phases"] == phases
    assert len(synopsis.info["groups"]) == sum(p.m for p in plans)
    assert set(synopsis.info["prior_kind"]) == {"1", "2"}  # which prior shrank each order
    assert synopsis.info["prior_kind"]["2"] in ("signed", "mixture")
    with pytest.raises(DPMarginalsError, match=f"has {phases} phases and all have a plan"):
        method.next_phase(plans, counts)
    if phases > 2:  # a chain out of order, or with a phase from elsewhere, is refused
        with pytest.raises(DPMarginalsError, match="plan 2 of the list is not phase 2"):
            method.release([plans[0], plans[2]], [counts[0], counts[2]])
        other = method.collect(data.take(np.arange(15_000)), rng=4)  # another phase 1
        with pytest.raises(DPMarginalsError, match="was not planned from these earlier"):
            method.release([plans[0], other[1].plan], [counts[0], other[1].counts])


def test_the_last_phase_needs_its_users_named_when_the_plan_has_none_left():
    data = _correlated(3000)
    method = Adaptive(epsilon=1.0, k=2, phases=2, share=0.25)
    plan1 = method.plan(data.domain, 1000)  # planned for 1,000 users; 3,000 report
    counts1 = group_supports(data, plan1, rng=1)
    with pytest.raises(DPMarginalsError, match="3000 reports, as many as the 1000 users the "
                                               "plan was made for: say how many users phase 2"):
        method.next_phase([plan1], [counts1])
    assert method.next_phase([plan1], [counts1], 500).params["users"] == 500


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
    """Seeded: 12 repeats of 40,000 users, all 15 pairs of 6 attributes, eps = 1.  The
    adaptive method measures the three strong pairs with many users; CALM spreads the users
    over theta*n = 15 groups.  Budget: the geometric mean of the SSE ratio must be below 0.7
    (measured 0.44; 0.57 with the scale-mixture prior on every order).  Single repeats vary
    0.1-2.1x, so fewer repeats or the arithmetic mean cannot tell a regression from a bad
    draw (the first 4 repeats: 0.79 and 1.05)."""
    ratios = []
    for r in range(12):
        data = _correlated(40_000, seed=r)
        queries = random_queries(data.domain, 2, 15, rng=r)
        exact = {q: data.marginal(list(q)).values for q in queries}

        def sse(synopsis, exact=exact):
            return np.mean([((synopsis.marginal(list(q)).values - t) ** 2).sum()
                            for q, t in exact.items()])

        calm = make("calm", epsilon=1.0, k=2).run(data, rng=100 + r)
        adaptive = make("adaptive", epsilon=1.0, k=2).run(data, rng=100 + r)
        ratios.append(sse(adaptive) / sse(calm))
    assert np.exp(np.mean(np.log(ratios))) < 0.7, ratios


def test_phase_one_structure_from_a_collection():
    data = _correlated(40_000)
    method = Adaptive(epsilon=2.0, k=2)
    plan = method.plan(data.domain, data.n)
    counts = group_supports(data.take(np.arange(plan.params["phase1_users"])), plan, rng=1)
    structure = phase_one_structure(data.domain, calibrated_views(plan, counts))
    assert structure.source == "phase 1"
    assert structure.energy_of(("x0", "x1")) > 10 * structure.energy_of(("x0", "x2"))


# -- the service: a campaign in phases end to end -------------------------------------------
@pytest.mark.slow
def test_campaign_in_phases_through_the_service(tmp_path):
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    from dpmarginals.protocol.http import ServiceClient
    from dpmarginals.protocol.plan import Plan
    from dpmarginals.protocol.reports import support_counts
    from dpmarginals.protocol.simulate import play
    from test_service_e2e import TOKEN, Server

    data = _correlated(12_000, seed=5)
    method = Adaptive(epsilon=1.0, k=2)  # the default: four phases
    plan1 = method.plan(data.domain, data.n)
    cuts = np.cumsum([0, *plan1.params["phase_users"]])
    server = Server(tmp_path / "adaptive.db")

    def post(path: str) -> urllib.request.Request:
        return urllib.request.Request(server.url + path, method="POST", data=b"{}",
                                      headers={"Authorization": f"Bearer {TOKEN}"})

    try:
        names, served = ["survey"], [plan1]
        with ServiceClient(server.url, "survey", token=TOKEN) as client:
            client.create_campaign(plan1, {"tickets": "assigned"})
            for j in range(4):
                play(client, data.codes[cuts[j]:cuts[j + 1]], max_epsilon=1.0,
                     save=tmp_path / f"{j}.jsonl")
                if j == 3:
                    break
                if j == 0:  # the first name of the route still opens phase 2
                    with urllib.request.urlopen(post("/campaigns/survey/next-phase"),
                                                timeout=60) as answer:
                        opened = json.loads(answer.read())
                else:
                    opened = client.open_next_phase()
                assert opened["id"] == f"survey.phase{j + 2}" and opened["created"]
                assert opened["phase"] == j + 2 and opened["phase1"] == "survey"
                with pytest.raises(Exception, match=rf"phase {j + 2} collects as campaign "
                                   rf"'survey\.phase{j + 2}'"):
                    client.assignment()
                with ServiceClient(server.url, "survey", token=TOKEN) as first, \
                        pytest.raises(Exception, match=rf"phase {j + 2} collects as campaign "
                                      rf"'survey\.phase{j + 2}'"):
                    first.assignment()  # phase 1 names the open phase, not a closed one
                later = client.next_phase()
                plan = later.plan()
                check_plan(plan.to_dict(), 1.0)  # the device's checks apply to every phase
                assert plan.hash == opened["plan_hash"]
                assert plan.params["earlier_hashes"] == [p.hash for p in served]
                again = client.open_next_phase()  # idempotent: closed, same plan
                assert again["plan_hash"] == plan.hash and not again["created"]
                client.close()
                client, names, served = later, [*names, later.campaign], [*served, plan]
            client.close()
        reports = [[json.loads(x) for x in (tmp_path / f"{j}.jsonl").read_text().splitlines()]
                   for j in range(4)]
        counts = [support_counts(p, r) for p, r in zip(served, reports, strict=True)]
        # the service planned each phase from the earlier phases' reports as the library does
        for j in range(1, 4):
            local = method.next_phase(served[:j], counts[:j], int(cuts[j + 1] - cuts[j]))
            mine = {k: v for k, v in served[j].params.items()
                    if k not in ("phase1_campaign", "earlier_campaigns")}
            assert served[j].params["earlier_campaigns"] == names[:j]
            assert Plan.from_dict({**served[j].to_dict(with_hash=False), "params": mine}
                                  ).hash == local.hash
        local = method.release(served, counts)
        answer = server.released("survey.phase4", int(cuts[4] - cuts[3]), "x0,x1")
        assert answer["release"]["phases"] == 4 and answer["release"]["pooled_reports"] == data.n
        assert answer["values"] == pytest.approx(local.marginal(["x0", "x1"]).values.ravel()
                                                 .tolist(), abs=1e-9)
        # and it is an estimate of the truth: each cell's standard error is at most ~0.04 here
        # (groups of ~600 users at eps 1), so a total variation distance of 0.2 is > 4 sd
        truth = data.marginal(["x0", "x1"]).values.ravel()
        assert 0.5 * np.abs(np.array(answer["values"]) - truth).sum() < 0.2
        with pytest.raises(urllib.error.HTTPError) as err:  # the last phase has no next
            urllib.request.urlopen(post("/campaigns/survey.phase4/next-phase"), timeout=30)
        assert err.value.code == 422 and b"phase 4 of 4" in err.value.read()
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
    for bad, said in (("2=1e-4,3=nan", "nan"), ("2=1e-4,3=-1", "-1.0"), ("2=3", "3.0")):
        code, _, err = _cli(capsys, "plan", "--optimal", "--n", "100", "--d", "8", "--k", "3",
                            "--epsilon", "1", "--prior", bad)
        assert code == 2 and len(err.splitlines()) == 1
        assert "order_energy[" in err and "[0, 2]" in err and f"got {said}" in err


def test_experiment_population_option_applies_to_calm_fig4_only(capsys):
    code, _, err = _cli(capsys, "experiment", "calm-fig5", "--population", "full")
    assert code == 2 and "calm-fig4 only" in err
