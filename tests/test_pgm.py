"""Graphical-model inference (issue #9): shrinkage, the numpy model, calm-pgm end to end."""

from __future__ import annotations

import itertools
import json
import sys

import numpy as np
import pytest

from dpmarginals import Dataset, Domain
from dpmarginals.cli.commands import main
from dpmarginals.core.errors import DPMarginalsError
from dpmarginals.inference.cliques import select_cliques
from dpmarginals.inference.graphical_model import GraphicalModel
from dpmarginals.inference.helmert import project
from dpmarginals.inference.pgm import require_mbi
from dpmarginals.inference.shrinkage import eb_shrink
from dpmarginals.inference.views import NoisyView
from dpmarginals.local.calm import CALM
from dpmarginals.local.collect import collect
from dpmarginals.methods import make
from dpmarginals.synopsis.base import consistent_synopsis, load_synopsis
from dpmarginals.synopsis.evaluate import random_queries
from dpmarginals.synopsis.stderr import collection_info


def chain_data(n: int, d: int, seed: int, sizes: int = 2) -> Dataset:
    """x_j copies x_{j-1} w.p. 0.7, else uniform: strong pairwise structure."""
    rng = np.random.default_rng(seed)
    codes = np.empty((n, d), dtype=np.int64)
    codes[:, 0] = rng.integers(0, sizes, n)
    for j in range(1, d):
        keep = rng.random(n) < 0.7
        codes[:, j] = np.where(keep, codes[:, j - 1], rng.integers(0, sizes, n))
    return Dataset(codes, Domain(tuple(f"a{j}" for j in range(d)), (sizes,) * d))


def hide_mbi(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``import mbi`` / ``import jax`` fail as they would without the extra."""
    for name in ("mbi", "jax"):
        monkeypatch.setitem(sys.modules, name, None)


# -- numpy parts (no extra needed) ------------------------------------------------------
def test_variable_elimination_matches_the_joint():
    rng = np.random.default_rng(3)
    dom = Domain(("a", "b", "c", "d", "e"), (2, 3, 2, 4, 2))
    pots = [(c, rng.normal(size=dom.project(c).shape))
            for c in (("b", "a"), ("b", "c"), ("c", "d", "e"), ("a", "e"))]
    model = GraphicalModel(dom, pots)
    for q in (("a",), ("d", "b"), ("e", "a", "c"), ("a", "b", "c", "d", "e")):
        via_joint = model.marginal(q)
        via_ve = np.transpose(model._eliminate(tuple(sorted(q, key=dom.index))),
                              np.argsort(np.argsort([dom.index(a) for a in q])))
        assert via_joint.shape == dom.project(q).shape
        np.testing.assert_allclose(via_ve, via_joint, atol=1e-12)
        assert abs(via_joint.sum() - 1) < 1e-12


def test_model_round_trips_through_json():
    dom = Domain(("x", "y", "z"), (2, 2, 3))
    model = GraphicalModel(dom, [(("y", "x"), np.array([[0.1, 0.2], [0.3, -1.0]])),
                                 (("z",), np.zeros(3))])
    again = GraphicalModel.from_dict(dom, json.loads(json.dumps(model.to_dict())))
    np.testing.assert_allclose(again.marginal(["z", "x"]), model.marginal(["z", "x"]))


def noisy_views(data: Dataset, sets, variance: float, rng) -> list[NoisyView]:
    out = []
    for s in sets:
        t = data.marginal(s).values
        out.append(NoisyView(s, t + rng.normal(0, np.sqrt(variance), t.shape), 1000, variance))
    return out


def test_shrinkage_keeps_strong_signal_and_removes_pure_noise():
    data = chain_data(20_000, 5, seed=1)
    sets = list(itertools.combinations(data.domain.attributes, 2))
    rng = np.random.default_rng(0)
    # Tiny noise: every pair's (strong) interaction is kept, tables ~ the truth.
    small = eb_shrink(data.domain, noisy_views(data, sets, 1e-8, rng))
    for s in sets:
        assert small.factor[s] > 0.95
        np.testing.assert_allclose(small.tables[s], data.marginal(s).values, atol=1e-3)
    # Independent data, large noise: interactions shrink to ~ max-entropy (independence).
    indep = Dataset(np.random.default_rng(2).integers(0, 2, (20_000, 5)), data.domain)
    big = eb_shrink(indep.domain, noisy_views(indep, sets, 1e-2, rng))
    assert np.mean([big.factor[s] for s in sets]) < 0.3
    # The shrunk marginals are consistent: every pair projects onto its 1-way marginals.
    for s in sets:
        for i, a in enumerate(s):
            np.testing.assert_allclose(big.tables[s].sum(axis=1 - i), big.tables[(a,)],
                                       atol=1e-9)
    assert select_cliques(sets, big, keep=0.99) == [(a,) for a in data.domain.attributes]
    assert len(select_cliques(sets, small, keep=0.5)) == len(sets)


def test_shrunk_tables_stay_consistent_where_a_rare_attribute_goes_negative():
    """Near-constant attributes' noisy marginals have negative cells; the max-entropy base
    of the sets above them is fitted to the clipped facets, and the shrunk tables must
    still agree exactly on every shared set (else the release's consistency step spreads
    the disagreement over every view: 0.09 of an unrelated marginal, seen on a d = 8
    binary tree at n = 2^14)."""
    rng = np.random.default_rng(3)
    n, d = 20_000, 5
    codes = rng.integers(0, 2, (n, d))
    codes[:, 0] = rng.random(n) < 0.003          # a rare item
    codes[:, 1] = rng.random(n) < 0.997          # an almost certain one
    data = Dataset(codes, Domain(tuple(f"a{j}" for j in range(d)), (2,) * d))
    sets = list(itertools.combinations(data.domain.attributes, 3))
    for flags in ({}, {"capacity": (2,), "signs": True, "sign_test": True, "location": True}):
        shrunk = eb_shrink(data.domain, noisy_views(data, sets, 4e-3, rng), **flags)
        # the case at issue: a facet of the triples with a negative cell
        assert min(t.min() for sub, t in shrunk.tables.items() if len(sub) < 3) < 0
        for sub, table in shrunk.tables.items():
            for j in range(1, len(sub)):
                for facet in itertools.combinations(sub, j):
                    np.testing.assert_allclose(project(sub, table, facet), shrunk.tables[facet],
                                               atol=1e-12, err_msg=f"{sub} on {facet}")


def test_known_energies_set_each_blocks_factor():
    """``energies=``: a block of known energy E and noise N keeps E / (E + N) of its
    residual, whatever the fitted prior says (the planner's assumption)."""
    data = chain_data(20_000, 4, seed=3)
    sets = list(itertools.combinations(data.domain.attributes, 2))
    views = noisy_views(data, sets, 1e-3, np.random.default_rng(1))
    fitted = eb_shrink(data.domain, views)
    energy = {s: 0.01 * (i + 1) for i, s in enumerate(sets)}
    known = eb_shrink(data.domain, views, energies=lambda s: energy.get(s, 0.0))
    for s in sets:
        block = known.noise[s]  # binary pairs: one coefficient
        assert known.factor[s] == pytest.approx(energy[s] / (energy[s] + block))
        assert known.factor[s] != pytest.approx(fitted.factor[s])
    with pytest.raises(DPMarginalsError,
                       match=r"energies\['a0'\] must be a finite number >= 0, got -1.0"):
        eb_shrink(data.domain, views, energies=lambda s: -1.0)
    with pytest.raises(DPMarginalsError, match="got nan"):
        eb_shrink(data.domain, views, energies=lambda s: float("nan"))
    nothing = eb_shrink(data.domain, views, energies=lambda s: 0.0)
    for s in sets:  # no interaction: the pair is the product of its shrunk 1-way marginals
        np.testing.assert_allclose(nothing.tables[s], np.outer(nothing.tables[(s[0],)],
                                                               nothing.tables[(s[1],)]),
                                   atol=1e-12)


def test_shrinkage_rejects_no_views_and_bad_variance():
    dom = Domain(("a", "b"), (2, 2))
    with pytest.raises(DPMarginalsError, match="at least one"):
        eb_shrink(dom, [])
    with pytest.raises(DPMarginalsError, match="variance"):
        eb_shrink(dom, [NoisyView(("a",), np.array([0.5, 0.5]), 10, 0.0)])


def test_project_helper_orders_axes():
    t = np.arange(12.0).reshape(2, 3, 2)
    np.testing.assert_allclose(project(("a", "b", "c"), t, ("c", "a")),
                               t.sum(axis=1).T)


def test_missing_extra_is_a_clear_error(monkeypatch, capsys, tmp_path):
    hide_mbi(monkeypatch)
    with pytest.raises(DPMarginalsError, match=r"pip install 'dpmarginals\[pgm\]'"):
        require_mbi()
    csv, dom = tmp_path / "d.csv", tmp_path / "d.json"
    _write_csv(csv)
    dom.write_text(__import__("json").dumps({f"a{j}": 2 for j in range(3)}))
    code = main(["run", "--dataset", str(csv), "--domain", str(dom), "--method", "calm-pgm",
                 "--epsilon", "1", "--k", "2", "--json"])
    err = capsys.readouterr().err
    assert code == 2 and "dpmarginals[pgm]" in err and len(err.strip().splitlines()) == 1


def _write_csv(path) -> None:
    data = chain_data(500, 3, seed=0)
    import pandas as pd

    pd.DataFrame(data.codes, columns=list(data.domain.attributes)).to_csv(path, index=False)


# -- with the extra -----------------------------------------------------------------------
needs_mbi = pytest.mark.skipif(
    not __import__("importlib").util.find_spec("mbi"), reason="needs the 'pgm' extra (mbi)")


@needs_mbi
def test_calm_pgm_plan_is_calms_and_is_registered():
    dom = Domain(tuple(f"a{j}" for j in range(8)), (2,) * 8)
    ours, theirs = make("calm-pgm", epsilon=2.0, k=3).plan(dom, 2**16), CALM(2.0).plan(dom, 2**16)
    assert ours.hash == theirs.hash and (ours.params["l"], ours.m) == (4, 14)
    with pytest.raises(DPMarginalsError, match="keep"):
        make("calm-pgm", epsilon=1.0, keep=2.0)


@needs_mbi
def test_calm_pgm_beats_calm_on_the_same_reports():
    data = chain_data(2**14, 6, seed=4)
    plan = CALM(epsilon=1.0, k=3).plan(data.domain, data.n)
    queries = random_queries(data.domain, 3, 20, rng=1)
    from dpmarginals.local.calm_pgm import pgm_synopsis

    calm_sse, pgm_sse = [], []
    for seed in range(2):
        views = collect(data, plan, rng=seed)
        info = {"n": data.n, **collection_info(plan, views)}
        c = consistent_synopsis(data.domain, views, "calm", info)
        p = pgm_synopsis(data.domain, views, "calm_pgm", info, iters=500)
        for q in queries:
            truth = data.marginal(q)
            calm_sse.append(c.marginal(q).sse(truth))
            pgm_sse.append(p.marginal(q).sse(truth))
            assert abs(p.marginal(q).values.sum() - 1) < 1e-6
            assert (p.marginal(q).values >= 0).all()
    # Seeded; measured ratio ~0.5.  The margin leaves room for platform differences.
    assert np.mean(pgm_sse) < 0.85 * np.mean(calm_sse)


@needs_mbi
def test_pgm_synopsis_saves_loads_and_answers_without_the_extra(monkeypatch, tmp_path):
    data = chain_data(4000, 4, seed=2, sizes=3)
    syn = make("calm-pgm", epsilon=2.0, k=2, iters=300).run(data, rng=5)
    assert syn.kind == "pgm" and syn.method == "calm_pgm" and "pgm" in syn.info["stage_seconds"]
    path = tmp_path / "syn.json"
    syn.save(path)
    hide_mbi(monkeypatch)  # loading and answering need neither JAX nor mbi
    again = load_synopsis(path)
    for q in (["a1", "a0"], ["a3", "a1", "a2"]):
        np.testing.assert_allclose(again.marginal(q).values, syn.marginal(q).values)
    assert again.info["groups"] == syn.info["groups"]


@needs_mbi
def test_calm_inference_option_and_plain_mbi():
    data = chain_data(4000, 4, seed=3)
    syn = CALM(epsilon=1.0, k=2, inference="pgm").run(data, rng=1)
    assert syn.kind == "pgm" and syn.method == "calm"
    plain = make("calm-pgm", epsilon=1.0, k=2, shrink=False, iters=300).run(data, rng=1)
    assert plain.info["shrink"] is False
    assert abs(plain.marginal(["a0", "a2"]).values.sum() - 1) < 1e-6
    with pytest.raises(DPMarginalsError, match="inference"):
        CALM(epsilon=1.0, inference="magic")


@needs_mbi
@pytest.mark.parametrize("method", ["am", "marg_rr", "marg_ht"])
def test_marginals_methods_take_the_pgm_inference(method):
    """AM / MargRR / MargHT with inference='pgm': the same reports (same seed) give a
    smaller error on the marginals they collected, and queries no view contains (4-way
    from 2-way marginals) are answered instead of refused."""
    data = chain_data(2**14, 5, seed=6)
    views = make(method, epsilon=1.0, k=2).run(data, rng=3)
    model = make(method, epsilon=1.0, k=2, inference="pgm").run(data, rng=3)
    assert model.kind == "pgm" and model.method == views.method
    pairs = list(itertools.combinations(data.domain.attributes, 2))
    errs = [(views.marginal(q).sse(data.marginal(q)), model.marginal(q).sse(data.marginal(q)))
            for q in pairs]
    # Seeded; measured ratios 0.27 (AM), 0.33 (MargRR), 0.40 (MargHT): 10 pairs, each from
    # n/10 users, shrunk and pooled.  0.6 leaves room for platform differences.
    assert np.mean([m for _, m in errs]) < 0.6 * np.mean([v for v, _ in errs])
    with pytest.raises(DPMarginalsError, match="none contains"):
        views.marginal(["a0", "a1", "a2", "a3"])
    table = model.marginal(["a0", "a1", "a2", "a3"]).values
    assert table.shape == (2, 2, 2, 2) and abs(table.sum() - 1) < 1e-6
    if method != "marg_ht":  # its Hadamard groups have no oracle to bootstrap
        assert model.marginal(["a0", "a1"], std=True).std is not None
    with pytest.raises(DPMarginalsError, match="inference"):
        make(method, epsilon=1.0, inference="magic")


# -- the fit's cost: predicted, refused, bounded (issue #21) --------------------------------
def _pairs_with_factors(factors: dict[tuple[str, ...], float]):
    from dpmarginals.inference.shrinkage import ShrinkResult

    return ShrinkResult({}, dict(factors), {})


def test_a_budget_replaces_the_weakest_views_by_their_facets():
    factor = {("a", "b"): 0.9, ("b", "c"): 0.2, ("c", "d"): 0.6, ("a", "d"): 0.4}
    shrunk = _pairs_with_factors(factor)
    views = list(factor)
    assert select_cliques(views, shrunk) == sorted(views)
    # Room for two pairs: the two strongest stay, the others become their 1-way marginals.
    two = select_cliques(views, shrunk, fits=lambda c: sum(len(s) > 1 for s in c) <= 2)
    assert two == [("a", "b"), ("c", "d")]
    # Room for none: every view is modelled through its 1-way marginals.
    none = select_cliques(views, shrunk, fits=lambda c: all(len(s) == 1 for s in c))
    assert none == [("a",), ("b",), ("c",), ("d",)]
    # Nothing fits: the 1-way selection comes back for the caller to refuse.
    assert select_cliques(views, shrunk, fits=lambda c: False) == none
    # A 3-way view is replaced by its pairs, which a pair-sized budget keeps.
    triple = _pairs_with_factors({("a", "b", "c"): 0.1})
    assert select_cliques([("a", "b", "c")], triple, fits=lambda c: max(map(len, c)) <= 2) == \
        [("a", "b"), ("a", "c"), ("b", "c")]


def test_fit_limits_are_checked():
    from dpmarginals.inference.pgm_cost import check_limits

    assert check_limits(60, float("inf")) == (60.0, float("inf"))
    for bad in (0, -1.0, "soon", float("nan")):
        with pytest.raises(DPMarginalsError, match="max_fit_seconds must be"):
            check_limits(bad, 10)
    with pytest.raises(DPMarginalsError, match="max_fit_memory_mb"):
        make("calm-pgm", epsilon=1.0, max_fit_memory_mb=0)


def test_fit_limits_on_the_command_line_need_the_pgm_inference(capsys, tmp_path):
    csv, dom = tmp_path / "d.csv", tmp_path / "d.json"
    _write_csv(csv)
    dom.write_text(json.dumps({f"a{j}": 2 for j in range(3)}))
    for method in (["--method", "fc"], ["--method", "calm"], ["--method", "am",
                                                              "--inference", "pgm"]):
        code = main(["run", "--dataset", str(csv), "--domain", str(dom), "--k", "2",
                     "--epsilon", "1", "--max-fit-memory-mb", "100", *method])
        err = capsys.readouterr().err
        assert code == 2 and len(err.strip().splitlines()) == 1
        assert "apply to --method calm-pgm and --method calm|adaptive --inference pgm" in err
    # the adaptive method's graphical model takes them (and is held to them: JAX alone
    # is over 100 MB)
    code = main(["run", "--dataset", str(csv), "--domain", str(dom), "--k", "2", "--epsilon",
                 "1", "--max-fit-memory-mb", "100", "--method", "adaptive", "--inference",
                 "pgm", "--simulation", "--seed", "1"])
    err = capsys.readouterr().err
    assert code == 2 and "over the limits of 30 s and 100 MB" in err


def test_the_compilation_cache_goes_to_the_user_cache(monkeypatch, tmp_path):
    from types import SimpleNamespace

    from dpmarginals.inference.pgm import _cache_compilation

    def fake_jax(folder=None):
        updates = {}
        config = SimpleNamespace(jax_compilation_cache_dir=folder,
                                 update=lambda key, value: updates.__setitem__(key, value))
        return SimpleNamespace(config=config), updates

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("DPMARGINALS_JAX_CACHE", raising=False)
    jax, updates = fake_jax()
    _cache_compilation(jax)
    assert updates["jax_compilation_cache_dir"] == str(tmp_path / "dpmarginals" / "jax")
    # Every program is kept, however small: mbi's kernels compile in well under a second.
    assert updates["jax_persistent_cache_min_compile_time_secs"] == 0
    assert updates["jax_persistent_cache_min_entry_size_bytes"] == -1
    monkeypatch.setenv("DPMARGINALS_JAX_CACHE", str(tmp_path / "mine"))
    jax, updates = fake_jax()
    _cache_compilation(jax)
    assert updates["jax_compilation_cache_dir"] == str(tmp_path / "mine")
    monkeypatch.setenv("DPMARGINALS_JAX_CACHE", "off")
    jax, updates = fake_jax()
    _cache_compilation(jax)
    assert updates == {}
    monkeypatch.delenv("DPMARGINALS_JAX_CACHE")
    jax, updates = fake_jax("/the/users/own")  # the user's own choice for JAX wins
    _cache_compilation(jax)
    assert updates == {}


@needs_mbi
def test_the_prediction_grows_with_the_model():
    from dpmarginals.inference.pgm_cost import predict_fit

    dom = Domain(tuple(f"a{j}" for j in range(12)), (2,) * 12)
    chain = [(f"a{j}", f"a{j + 1}") for j in range(11)]
    dense = list(itertools.combinations(dom.attributes, 2))
    small, big = predict_fit(dom, chain, 1000), predict_fit(dom, dense, 1000)
    assert small.tree_cells == 11 * 4 and big.tree_cells == 2**12
    assert big.step_cells == len(dense) * 2**12  # every pair lives in the one 12-way clique
    assert small.seconds < big.seconds and small.memory_mb < big.memory_mb
    assert predict_fit(dom, dense, 1000, compiled=True).compile_seconds == 0
    assert predict_fit(dom, chain, 120).iters == 150  # whole blocks of 50
    assert "s (" in big.describe() and "MB" in big.describe()


@needs_mbi
def test_a_fit_over_the_limits_is_refused_before_it_starts(monkeypatch, capsys, tmp_path):
    """Refused with the prediction named, and without calling mbi's estimator."""
    from mbi import estimation

    def never(*args, **kwargs):
        raise AssertionError("the fit started")

    monkeypatch.setattr(estimation.MirrorDescent, "estimate", never)
    data = chain_data(4000, 4, seed=3)
    for params in ({"max_fit_seconds": 0.01}, {"max_fit_memory_mb": 1.0},
                   {"shrink": False, "max_fit_seconds": 0.01}):
        with pytest.raises(DPMarginalsError,
                           match=r"would take [\d,.]+ s \(.* and [\d,.]+ MB of memory, over the "
                           r"limits of [\d,.]+ s and [\d,.]+ MB"):
            make("calm-pgm", epsilon=1.0, k=2, **params).run(data, rng=1)
    csv, dom = tmp_path / "d.csv", tmp_path / "d.json"
    _write_csv(csv)
    dom.write_text(json.dumps({f"a{j}": 2 for j in range(3)}))
    for command in (["run", "--dataset", str(csv), "--domain", str(dom), "--k", "2", "--json"],
                    ["release", str(csv), "--domain", str(dom), "--k", "2",
                     "--out", str(tmp_path / "r.json")]):
        code = main([*command, "--method", "calm-pgm", "--epsilon", "1",
                     "--max-fit-seconds", "0.01"])
        err = [line for line in capsys.readouterr().err.strip().splitlines()
               if not line.startswith("dpmarginals: warning:")]  # 3 attributes, 1 group
        assert code == 2 and len(err) == 1
        assert "would take" in err[0] and "MB" in err[0] and "--max-fit-seconds" in err[0]


@needs_mbi
def test_a_fit_past_twice_its_prediction_is_stopped(monkeypatch):
    """The cost constants are set 10^6 times too small and the slack to 0: the fit is stopped
    after its first block of 50 iterations (no timing: any real fit uses more than 2x a
    nanosecond)."""
    import dpmarginals.inference.pgm_cost as cost

    for name in ("SETUP_BASE", "SETUP_PER_OP", "COMPILE_BASE", "COMPILE_PER_CLIQUE",
                 "COMPILE_PER_MESSAGE", "COMPILE_PER_CLIQUE_PAIR", "STEP_PER_CELL",
                 "STEP_PER_EXP_CELL", "STEP_PER_OP"):
        monkeypatch.setattr(cost, name, getattr(cost, name) * 1e-6)
    monkeypatch.setattr(cost, "SLACK", 0.0)
    data = chain_data(4000, 4, seed=3)
    cost._predict.cache_clear()  # predictions are memoised per structure
    try:
        with pytest.raises(DPMarginalsError, match=r"stopped after 50 of 1000 iterations: it "
                           r"used .* more than 2x its predicted"):
            make("calm-pgm", epsilon=1.0, k=2).run(data, rng=1)
    finally:
        cost._predict.cache_clear()


@needs_mbi
def test_a_model_over_the_limits_drops_its_weakest_views(monkeypatch):
    """Between the 1-way model's prediction and the full one's, calm-pgm keeps the strongest
    views that fit, warns, says so in the info, and the fit stays within the limit."""
    from dpmarginals.inference.pgm_cost import predict_fit

    data = chain_data(2**13, 6, seed=4)
    full = make("calm-pgm", epsilon=1.0, k=3, iters=100).run(data, rng=2)
    cliques = [tuple(c) for c in full.info["cliques"]]
    assert "cliques_reduced" not in full.info and all(len(c) == 2 for c in cliques)
    one_way = predict_fit(data.domain, [(a,) for a in data.domain.attributes], 100)
    limit = (one_way.seconds + predict_fit(data.domain, cliques, 100).seconds) / 2
    with pytest.warns(UserWarning, match="modelled through their sub-marginals"):
        small = make("calm-pgm", epsilon=1.0, k=3, iters=100, max_fit_seconds=limit).run(
            data, rng=2)
    reduced = small.info["cliques_reduced"]
    assert 0 < reduced["replaced"] < reduced["of"] == len(cliques)
    assert small.info["predicted"]["seconds"] <= limit + 1e-3  # rounded to ms in the info
    kept = [tuple(c) for c in small.info["cliques"] if len(c) == 2]
    factors = small.info["shrink_factors"]
    weakest_kept = min(factors[",".join(sorted(c))] for c in kept)
    dropped = [c for c in cliques if c not in kept]
    assert all(factors[",".join(sorted(c))] <= weakest_kept for c in dropped)


_FIT_IN_A_NEW_PROCESS = """
import numpy as np
from dpmarginals import Domain
from dpmarginals.inference.pgm import fit_graphical_model
dom = Domain(tuple("abcdef"), (2, 3, 2, 2, 3, 2))
cliques = [("a", "b"), ("b", "c"), ("c", "d"), ("b", "e"), ("e", "f"), ("a", "c")]
rng = np.random.default_rng(0)
meas = [(c, rng.dirichlet(np.ones(dom.project(c).cells())).reshape(dom.project(c).shape), 0.1)
        for c in cliques]
fit_graphical_model(dom, meas, iters=50)
"""


@needs_mbi
@pytest.mark.slow
def test_a_new_process_reuses_the_compiled_fit(tmp_path):
    """Two processes with different string hashes compile the same programs, so the second
    loads them from JAX's disk cache (mbi orders messages through sets of attributes)."""
    import os
    import subprocess

    env = {**os.environ, "DPMARGINALS_JAX_CACHE": str(tmp_path),
           "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    for seed in ("1", "2"):
        subprocess.run([sys.executable, "-c", _FIT_IN_A_NEW_PROCESS], check=True,
                       env={**env, "PYTHONHASHSEED": seed}, capture_output=True)
    programs = [p.name.split("-")[0] for p in tmp_path.iterdir()]
    assert programs.count("jit__multi_step") == 1
    assert programs.count("jit_message_passing_hugin") == 1


# -- convergence stop ----------------------------------------------------------------------
class _State:
    def __init__(self, loss: float) -> None:
        self.mu, self.loss = None, loss


def test_convergence_stops_after_two_blocks_within_the_gap():
    """After t steps the gain still to come is estimated as t x the last block's decrease
    per step; the fit stops once two blocks running put it at most ``gap``."""
    from dpmarginals.inference.pgm import BLOCK, Convergence, _Converged

    # decreases per block 10, 1, 0.002, 0.001: estimated still to come at t = 100, 150, 200,
    # 250 steps 20, 3, 0.008, 0.005; the fourth and fifth blocks meet gap 0.5: the fifth stops.
    losses = [100.0, 90.0, 89.0, 88.998, 88.997, 80.0]
    stop = Convergence(0.5)
    seen = []
    with pytest.raises(_Converged) as done:
        for loss in losses:
            seen.append(loss)
            stop(_State(loss))
    assert seen == losses[:5] and done.value.state.loss == 88.997 and stop.steps == 5 * BLOCK
    # a block outside the gap resets the count; gap None never stops
    stop, never = Convergence(0.5), Convergence(None)
    for loss in [100.0, 99.999, 90.0, 89.999]:
        stop(_State(loss))
        never(_State(loss))
    with pytest.raises(_Converged):
        stop(_State(89.9985))
    for loss in [89.9985, 89.9984, 89.9983]:
        never(_State(loss))


@needs_mbi
def test_a_converged_fit_stops_early_within_its_gap_of_the_full_run():
    """On a chain of pairs the fit stops before its 400 steps, and its loss is within GAP of
    what every step reaches (the rule's claim: the estimated gain still to come was at most
    GAP); the full run, gap None, runs every step."""
    from dpmarginals.inference.pgm import GAP, fit_graphical_model
    from dpmarginals.inference.pgm_cost import FitWatch, predict_fit

    data = chain_data(20_000, 4, seed=5, sizes=3)
    sets = list(itertools.combinations(data.domain.attributes, 2))
    rng = np.random.default_rng(11)
    sd = 0.01
    meas = [(s, data.marginal(s).values / data.n + rng.normal(0, sd, (3, 3)), sd)
            for s in sets]

    def fit(gap):
        watch = FitWatch(predict_fit(data.domain, sets, 400))
        model = fit_graphical_model(data.domain, meas, iters=400, gap=gap, watch=watch)
        loss = sum(0.5 * np.sum((model.marginal(s) - y) ** 2) / sd**2 for s, y, sd in meas)
        return loss, watch.steps

    stopped, steps = fit(GAP)
    full, all_steps = fit(None)
    assert all_steps == 400 and steps < 400
    assert full <= stopped <= full + GAP


def test_files_from_before_the_convergence_stop_refit_every_step():
    """A saved calm-pgm synopsis whose options name mbi's ``tol`` loads with ``gap`` None
    (its fits ran every step) and without ``tol`` (which no fit takes now)."""
    from dpmarginals.local.calm_pgm import PGMSynopsis

    dom = Domain(("x", "y"), (2, 2))
    model = GraphicalModel(dom, [(("x", "y"), np.zeros((2, 2)))])
    payload = {"model": model.to_dict(), "info": {},
               "options": {"shrink": True, "iters": 1000, "tol": None}}
    syn = PGMSynopsis._from_payload(dom, "calm-pgm", payload)
    assert syn.options == {"shrink": True, "iters": 1000, "gap": None}


@needs_mbi
@pytest.mark.skipif(not __import__("os").path.exists("/proc/self/maps"),
                    reason="counts the process's memory mappings (Linux)")
def test_a_long_running_process_lets_compiled_structures_go(monkeypatch):
    """Every new structure's compiled programs hold memory mappings (Linux allows 65,530 a
    process); past MAX_COMPILED structures the process drops them all: the mappings fall."""
    import dpmarginals.inference.pgm as pgm

    def mappings() -> int:
        with open("/proc/self/maps") as f:
            return sum(1 for _ in f)

    monkeypatch.setattr(pgm, "MAX_COMPILED", 3)
    pgm._forget_compiled()
    data = chain_data(5000, 6, seed=2)
    pairs = list(itertools.combinations(data.domain.attributes, 2))
    views = [NoisyView(s, data.marginal(s).values, data.n, 1e-2) for s in pairs]
    counts = []
    for i in range(4):  # four structures: the fourth finds three compiled and drops them
        pgm.pgm_estimate(data.domain, views[:len(views) - i], shrink=False, iters=50)
        counts.append(mappings())
        assert len(pgm._COMPILED) == (i % 3) + 1
    assert counts[3] < counts[2]
