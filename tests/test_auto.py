"""Issue #36: ``--method auto``, the default local method of ``release`` and ``plan``."""

from __future__ import annotations

import json

import numpy as np
import pytest

from command_line import dpmarginals as cli
from command_line import one_error_line
from dpmarginals import Domain, release
from dpmarginals.core.errors import DPMarginalsError
from dpmarginals.local import auto
from dpmarginals.local.adaptive import Adaptive
from dpmarginals.local.auto import Auto, choose
from dpmarginals.methods import for_plan, make
from populations import correlated_binary, people

BINARY8 = Domain.from_dict({f"x{i}": 2 for i in range(8)})


def test_the_rule_reads_public_facts_only():
    assert choose(BINARY8, 2**16, 1.0, 3, pgm=False).method == "adaptive"
    one = choose(BINARY8, 2**16, 1.0, 3, phases=False, pgm=True)
    assert one.method == "calm_pgm" and "one phase" in one.reason
    assert choose(BINARY8, 2**16, 1.0, 3, phases=False, pgm=False).method == "calm"
    # too few users for the adaptive method's phase 1: one phase
    tiny = choose(Domain.from_dict({f"x{i}": 2 for i in range(40)}), 60, 1.0, 3, pgm=False)
    assert tiny.method == "calm" and "no phases" in tiny.reason
    assert choose(BINARY8, 2**16, 1.0, 3, pgm=False) == choose(BINARY8, 2**16, 1.0, 3, pgm=False)


def test_auto_run_is_the_chosen_methods_run(monkeypatch):
    monkeypatch.setattr(auto, "pgm_installed", lambda: False)
    data = correlated_binary(4000, 6, seed=3)
    syn = Auto(epsilon=1.0, k=3).run(data, rng=7)
    assert syn.info["auto"]["chose"] == "adaptive"
    same = Adaptive(epsilon=1.0, k=3).run(data, rng=7)
    for q in (["a0", "a1", "a2"], ["a3", "a5"]):
        assert np.array_equal(syn.marginal(q).values, same.marginal(q).values)


def test_release_defaults_to_auto_and_names_the_pick(monkeypatch):
    monkeypatch.setattr(auto, "pgm_installed", lambda: False)
    domain = {"education": ["school", "college", "phd"], "income": ["low", "mid", "high"],
              "sex": ["f", "m"], "smoker": ["no", "yes"]}
    r = release(people(3000)[list(domain)], domain, epsilon=1.0, k=2)
    assert r.privacy.method == r.info["auto"]["chose"] == "adaptive"
    assert r.info["auto"]["method"] == "auto" and "phases possible" in r.info["auto"]["reason"]
    with pytest.raises(DPMarginalsError, match="name the method"):
        release(people(300)[list(domain)], domain, epsilon=1.0, k=2, m=4)


def test_a_single_phase_auto_plan_is_released_by_calm_pgm(monkeypatch):
    monkeypatch.setattr(auto, "pgm_installed", lambda: True)
    plan = make("auto", epsilon=1.0, k=3, phases=False).plan(BINARY8, 2**14)
    assert plan.method == "calm"
    import dataclasses

    plan = dataclasses.replace(plan, params={**plan.params, "auto": choose(
        BINARY8, 2**14, 1.0, 3, phases=False, pgm=True).to_dict()})
    assert for_plan(plan).name == "calm_pgm"


def test_a_phased_auto_campaign_is_released_by_the_inference_auto_picked(monkeypatch):
    """Every phase's plan carries auto's pick, so the service's release of phase j (which
    reads that phase's plan) uses the inference auto chose; without the extra, numpy."""
    import dataclasses

    from dpmarginals.local.collect import group_supports

    monkeypatch.setattr(auto, "pgm_installed", lambda: True)
    domain = Domain.from_dict({f"a{i}": 2 for i in range(8)})
    choice = choose(domain, 2**14, 1.0, 3, pgm=True)
    assert (choice.method, choice.inference) == ("adaptive", "pgm")
    method = Auto(epsilon=1.0, k=3).method_for(domain, 2**14)
    first = method.plan(domain, 2**14)
    first = dataclasses.replace(first, params={**first.params, "auto": choice.to_dict()})
    data = correlated_binary(first.params["phase_users"][0], 8, seed=2)
    counts = group_supports(data, first, rng=1)
    second = method.next_phase([first], [counts])
    assert second.params["auto"] == choice.to_dict()
    picked = for_plan(second)
    assert (picked.inference, picked.priors) == ("pgm", auto.ADAPTIVE_PGM["priors"])
    monkeypatch.setattr(auto, "pgm_installed", lambda: False)
    assert for_plan(second).inference == "shrink"


def test_cli_release_without_method_and_plan_default(tmp_path):
    csv, dom, out = tmp_path / "people.csv", tmp_path / "people-domain.json", tmp_path / "r.json"
    people(2000).drop(columns=["age"]).to_csv(csv, index=False)
    dom.write_text(json.dumps({"education": ["school", "college", "phd"],
                               "income": ["low", "mid", "high"], "sex": ["f", "m"],
                               "smoker": ["no", "yes"]}))
    proc = cli("release", csv, "--domain", dom, "--epsilon", 1, "--k", 2, "--out", out,
               env={"DPMARGINALS_JAX_CACHE": "off"})
    assert proc.returncode == 0, proc.stderr
    assert "method auto chose" in proc.stdout
    body = json.loads(out.read_text())
    assert body["privacy"]["method"] in ("adaptive", "calm_pgm", "calm")
    assert json.dumps(body).count('"chose"') == 1
    plan = tmp_path / "plan.json"
    proc = cli("plan", "--domain", dom, "--epsilon", 1, "--k", 2, "--n", 20000, "--out", plan,
               "--single-phase", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["method"] == "calm"
    one_error_line(cli("release", csv, "--domain", dom, "--epsilon", 1, "--m", 3,
                       "--out", out), "name the method")


def test_auto_falls_back_to_the_numpy_inference_when_the_fit_is_refused():
    """A graphical-model fit refused by its limits (here 100 MB: JAX alone is more) or
    stopped for overrunning its prediction does not lose auto's release: the phases are
    released by the numpy inference and the synopsis says why.  Asked for by name, the
    adaptive method's graphical model still refuses."""
    data = correlated_binary(4000, 6, seed=3)
    strict = Adaptive(epsilon=1.0, k=3, inference="pgm", max_fit_memory_mb=100)
    with pytest.raises(DPMarginalsError, match="over the limits"):
        strict.run(data, rng=7)
    picked = choose(data.domain, data.n, 1.0, 3, pgm=True)
    method = picked.build(1.0, 3, max_fit_memory_mb=100)
    assert method.pgm_fallback and method.inference == "pgm"
    syn = method.run(data, rng=7)
    assert "over the limits" in syn.info["inference_fallback"]
    numpy = Adaptive(epsilon=1.0, k=3).run(data, rng=7)
    assert np.array_equal(syn.marginal(["a0", "a1", "a2"]).values,
                          numpy.marginal(["a0", "a1", "a2"]).values)


def test_auto_drops_the_weakest_interactions_to_fit_as_by_name():
    """With limits the full model exceeds but a reduced one meets, the adaptive method's
    graphical model drops its weakest interactions (as calm-pgm does), asked for by name or
    picked by auto: auto releases that model, not the numpy inference (on the dev grid's
    multi-valued panels, where every Adult and BR2000 model is reduced, the reduced model
    beat the numpy inference by 4.0% +- 1.6%; docs/beyond-calm.md §7)."""
    from dpmarginals.inference.pgm import _forget_compiled
    from dpmarginals.inference.pgm_cost import predict_fit

    data = correlated_binary(4000, 6, seed=3)
    full = Adaptive(epsilon=1.0, k=3, inference="pgm", priors="adaptive").run(data, rng=7)
    cliques = [tuple(c) for c in full.info["cliques"]]
    assert "cliques_reduced" not in full.info and max(map(len, cliques)) >= 2
    iters = full.info["iters"]
    one_way = predict_fit(data.domain, [(a,) for a in data.domain.attributes], iters)
    limit = (one_way.seconds + predict_fit(data.domain, cliques, iters).seconds) / 2
    with pytest.warns(UserWarning, match="modelled through their sub-marginals"):
        named = Adaptive(epsilon=1.0, k=3, inference="pgm", priors="adaptive",
                         max_fit_seconds=limit).run(data, rng=7)
    assert named.info["cliques_reduced"]["replaced"] > 0
    picked = choose(data.domain, data.n, 1.0, 3, pgm=True).build(1.0, 3, max_fit_seconds=limit)
    _forget_compiled()  # compiled, the full model would fit the limit without compiling
    with pytest.warns(UserWarning, match="modelled through their sub-marginals"):
        syn = picked.run(data, rng=7)
    assert "inference_fallback" not in syn.info
    assert syn.info["cliques_reduced"] == named.info["cliques_reduced"]
    assert np.allclose(syn.marginal(["a0", "a1", "a2"]).values,
                       named.marginal(["a0", "a1", "a2"]).values)
