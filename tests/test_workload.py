"""Workload-aware planning (issue #9): file format, predictions, choice, CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dpmarginals import Dataset, Domain
from dpmarginals.cli.commands import main
from dpmarginals.core.errors import DPMarginalsError
from dpmarginals.local.collect import collect
from dpmarginals.oracles import make_oracle
from dpmarginals.planning.workload import (
    Workload,
    coefficient_variance,
    load_workload,
    plan_workload,
    predict_error,
)
from dpmarginals.synopsis.base import consistent_synopsis

BINARY8 = Domain(tuple(f"a{i}" for i in range(8)), (2,) * 8)


def test_workload_files(tmp_path):
    path = tmp_path / "w.json"
    path.write_text('{"k": 3}')
    assert len(load_workload(path, BINARY8).queries) == 56
    path.write_text('[["a2", "a0"], ["a0", "a2"], ["a1", "a5", "a7"]]')
    w = load_workload(path, BINARY8)
    assert w.queries == (("a0", "a2"), ("a1", "a5", "a7")) and w.max_size == 3
    for bad in ('{"x": 1}', "[]", '[["a0", "zz"]]', '[["a0", "a0"]]', "{"):
        path.write_text(bad)
        with pytest.raises(DPMarginalsError):
            load_workload(path, BINARY8)
    with pytest.raises(DPMarginalsError, match="cannot read"):
        load_workload(tmp_path / "none.json", BINARY8)


def test_predicted_noise_of_one_covering_group():
    w = Workload(BINARY8, (("a0", "a1"),))
    noise, sampling, recon = predict_error(BINARY8, 1000, 1.0, [("a0", "a1", "a2")], "oue", w)
    var = coefficient_variance(make_oracle("oue", 1.0, 8), 1000)
    # The 2-way projection sums 2 cells per cell; its 3 non-constant coefficients (the
    # constant one is the known total) each have variance 2 var.
    assert noise == pytest.approx(3 * 2 * var)
    assert recon == 0 and 0 < sampling < 1 / 1000
    # GRR's coefficients at small L are noisier than CALM's f -> 0 per-cell variance.
    grr = make_oracle("grr", 1.0, 4)
    assert coefficient_variance(grr, 1000) == pytest.approx(1.58 * grr.variance(1000), rel=0.01)


def test_predicted_noise_matches_measured_error():
    """Predicted vs measured SSE of covered 2-way queries (CALM consistency, 40 runs).

    The f -> 0 variance and the sampling bound are approximations: accepted within 35%.
    """
    rng = np.random.default_rng(0)
    data = Dataset(rng.integers(0, 2, (2**13, 4)), Domain(("a", "b", "c", "d"), (2,) * 4))
    w = Workload.all_k(data.domain, 2)
    choice = plan_workload(data.domain, data.n, 1.0, w, oracles=("grr",), max_l=2, theta=0.01)
    assert choice.covers and choice.l == 2
    plan = choice.plan(data.domain, data.n, 1.0)
    errors = []
    for run in range(40):
        syn = consistent_synopsis(data.domain, collect(data, plan, rng=run), "calm", {})
        errors += [syn.marginal(q).sse(data.marginal(q)) for q in w.queries]
    assert abs(np.mean(errors) / choice.total - 1) < 0.35


def test_choice_respects_report_size_and_public_data():
    w = Workload.all_k(BINARY8, 3)
    best = plan_workload(BINARY8, 2**16, 2.0, w, theta=0.01)
    assert best.covers and best.reconstruction == 0
    small = plan_workload(BINARY8, 2**16, 2.0, w, theta=0.01, max_report_bits=2)
    assert small.report_bits <= 2 and small.total >= best.total
    with pytest.raises(DPMarginalsError, match="max_report_bits"):
        plan_workload(BINARY8, 2**16, 2.0, w, oracles=("oue",), max_report_bits=1)
    rng = np.random.default_rng(1)
    codes = rng.integers(0, 2, (5000, 8))
    codes[:, 1] = codes[:, 0]  # a strong pair that independence gets wrong
    public = Dataset(codes, BINARY8)
    with_data = plan_workload(BINARY8, 2**16, 0.5, w, public=public)
    assert with_data.reconstruction_source == "public data"
    rows = {(r["l"], r["m"], r["oracle"]): r for r in with_data.candidates}
    assert rows[(1, 8, "grr")]["reconstruction_error"] > 0  # l = 1 misses the pair
    assert with_data.total == min(r["predicted_sse"] for r in with_data.candidates)


def test_explicit_workload_is_covered_by_the_chosen_sets():
    w = Workload(BINARY8, (("a0", "a1", "a2"), ("a3", "a4"), ("a2", "a6", "a7")))
    best = plan_workload(BINARY8, 2**18, 3.0, w)
    if best.covers:
        assert all(any(set(q) <= set(s) for s in best.sets) for q in w.queries)
    plan = best.plan(BINARY8, 2**18, 3.0)
    assert plan.m == best.m and plan.params["predicted_sse"] == pytest.approx(best.total)


def test_plan_command_with_a_workload(capsys, tmp_path):
    wfile = tmp_path / "w.json"
    wfile.write_text('{"k": 3}')
    assert main(["plan", "--n", "65536", "--d", "8", "--epsilon", "2.0", "--workload",
                 str(wfile)]) == 0
    out = capsys.readouterr().out
    assert "predicted SSE per query" in out and "oracle = " in out
    dom = tmp_path / "dom.json"
    dom.write_text(json.dumps({"x": 3, "y": 2, "z": 2, "w": 3}))
    wfile.write_text('[["x", "y"], ["y", "z", "w"]]')
    assert main(["plan", "--n", "50000", "--epsilon", "1.0", "--workload", str(wfile),
                 "--domain", str(dom), "--max-report-bits", "4", "--json"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["report_bits"] <= 4 and body["queries"] == 2 and body["candidates"]
    # without --workload the classic flags are still required
    assert main(["plan", "--n", "100", "--epsilon", "1"]) == 2
    assert "--k" in capsys.readouterr().err
