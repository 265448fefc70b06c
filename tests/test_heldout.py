"""Issue #36: the held-out benchmark's generator and grid (fixed; reported, never tuned on)."""

from __future__ import annotations

import numpy as np
import pytest

from dpmarginals.core.errors import DPMarginalsError
from dpmarginals.datasets.bayesnet import NetworkSpec, random_network
from dpmarginals.experiments.heldout import (
    FULL_REPEATS,
    NETWORK_SEED0,
    SETTINGS,
    _tasks,
)


def test_tree_and_dense_structures():
    tree = random_network(NetworkSpec(12, "tree", "binary", "skewed", seed=3))
    assert sum(len(p) for p in tree.parents) == 11
    dense = random_network(NetworkSpec(12, "dense", "multi", "skewed", seed=3))
    assert max(len(p) for p in dense.parents) == 3
    assert sum(len(p) for p in dense.parents) > 11
    for j, pa in enumerate(dense.parents):  # parents come earlier in the network's order
        assert all(dense.order.index(p) < dense.order.index(j) for p in pa)


def test_values_and_margins():
    assert set(random_network(NetworkSpec(10, values="binary")).domain.sizes) == {2}
    assert min(random_network(NetworkSpec(10, values="multi")).domain.sizes) >= 3
    mixed = random_network(NetworkSpec(10, values="mixed", seed=1)).domain.sizes
    assert mixed.count(2) == 5 and max(mixed) <= 6

    def spread(margins: str) -> float:  # mean over attributes of size * sum p^2 (1: uniform)
        data = random_network(NetworkSpec(12, "tree", "multi", margins, seed=4)).sample(
            20_000, rng=0)
        return float(np.mean([(np.bincount(data.codes[:, j], minlength=s) / data.n) @
                              (np.bincount(data.codes[:, j], minlength=s) / data.n) * s
                              for j, s in enumerate(data.domain.sizes)]))
    assert spread("uniform") < 1.15 < 1.25 < spread("skewed")


def test_sampling_is_seeded_and_follows_the_tables():
    net = random_network(NetworkSpec(4, "tree", "binary", "skewed", seed=9))
    a, b = net.sample(50_000, rng=1), net.sample(50_000, rng=1)
    assert np.array_equal(a.codes, b.codes)
    root = net.order[0]
    p = net.cpts[root][0, 1]
    freq = a.codes[:, root].mean()
    # 4 standard errors of a binomial proportion (fails with probability ~6e-5)
    assert abs(freq - p) <= 4 * np.sqrt(p * (1 - p) / a.n)


def test_bad_specs_are_refused():
    with pytest.raises(DPMarginalsError, match="structure"):
        NetworkSpec(8, structure="star")
    with pytest.raises(DPMarginalsError, match="d must"):
        NetworkSpec(1)


def test_the_grid_covers_the_issue_and_is_held_out():
    nets = [s for s in SETTINGS if s.dataset == "bn"]
    assert {s.structure for s in nets} == {"tree", "dense"}
    assert {s.values for s in nets} == {"binary", "multi", "mixed"}
    assert {s.margins for s in nets} == {"skewed", "uniform"}
    assert min(s.d for s in nets) == 8 and max(s.d for s in nets) == 32
    assert min(s.n for s in nets) == 2**14 and max(s.n for s in nets) == 2**22
    real = {s.dataset for s in SETTINGS if s.dataset != "bn"}
    dev = {"kosarak", "msnbc", "adult3", "br2000-3", "adult", "br2000"}
    assert real and not real & dev
    assert NETWORK_SEED0 >= 1000  # the dev networks are seeds 1,001-1,012; streams keyed apart
    assert FULL_REPEATS >= 10
    full = _tasks(False)
    assert len(full) == len(SETTINGS) * FULL_REPEATS
    assert len(_tasks(True)) <= 8


def test_seed_zero_is_the_fixed_grid_and_another_seed_draws_fresh_networks():
    setting = SETTINGS[0]
    assert setting.spec().seed == setting.spec(0).seed == NETWORK_SEED0 + setting.index
    fresh = {s.spec(1).seed for s in SETTINGS if s.dataset == "bn"}
    fixed = {s.spec(0).seed for s in SETTINGS if s.dataset == "bn"}
    assert len(fresh) == len(fixed) == 16 and not fresh & fixed
    a = random_network(setting.spec(0)).sample(2000, rng=1).codes
    b = random_network(setting.spec(1)).sample(2000, rng=1).codes
    assert a.shape == b.shape and not np.array_equal(a, b)


def test_the_summary_counts_the_repeats_auto_released_by_the_numpy_inference():
    """auto's graphical model falls back to the numpy inference when its fit is refused or
    stopped (test_auto); the summary names how often, per setting, next to the pick."""
    import pandas as pd

    from dpmarginals.experiments.heldout import _summary

    rows = []
    for setting, numpy_repeats in ((SETTINGS[0], {1}), (SETTINGS[1], set())):
        fields = {"panel": setting.label, "dataset": setting.dataset, "n": setting.n,
                  "d": setting.d, "k": setting.k, "epsilon": setting.epsilon, "status": "ok",
                  "reason": "", "seconds": 1.0}
        for r in range(2):
            inference = "numpy" if r in numpy_repeats else "pgm"
            for method, sse, family, how in (
                    ("calm", 1.0, "", None), ("calm-pgm", 0.6, "", None),
                    ("adaptive", 0.5, "", "numpy"), ("adaptive-pgm", 0.4, "", inference),
                    ("auto", 0.4, "adaptive-pgm: phases", inference)):
                rows.append({**fields, "method": method, "repeat": r, "sse": sse,
                             "family": family, "inference": how})
    lines = _summary(pd.DataFrame(rows), quick=False).splitlines()
    first = next(x for x in lines if x.startswith(f"| {SETTINGS[0].label} |"))
    second = next(x for x in lines if x.startswith(f"| {SETTINGS[1].label} |"))
    assert first.endswith("| adaptive-pgm (numpy inference in 1 of 2: fit refused or "
                          "stopped) |")
    assert second.endswith("| adaptive-pgm |")


def _draw(seed, ratios):
    """A draw's results: per setting, auto's, calm-pgm's and adaptive's SSE over CALM's 1.0
    (two repeats alike)."""
    import pandas as pd

    rows = []
    for setting, (auto, calm_pgm, adaptive) in zip(SETTINGS, ratios, strict=False):
        fields = {"task": f"heldout|{setting.index}|rep=0|seed={seed}", "panel": setting.label,
                  "dataset": setting.dataset, "n": setting.n, "d": setting.d, "k": setting.k,
                  "epsilon": setting.epsilon, "status": "ok", "reason": "", "seconds": 1.0}
        for r in range(2):
            for method, sse in (("calm", 1.0), ("calm-pgm", calm_pgm), ("adaptive", adaptive),
                                ("auto", auto)):
                rows.append({**fields, "method": method, "repeat": r, "sse": sse})
    return pd.DataFrame(rows)


def test_draws_read_together_count_each_settings_misses_over_the_draws():
    """benchmarks/heldout_draws.py: a setting above CALM in two draws of three says so, with
    its geometric mean over the draws; each draw keeps its own median and misses.  A frame
    that is not one draw's results is refused, naming it."""
    import pandas as pd

    from dpmarginals.experiments.heldout import draws_markdown, draws_table

    draws = [_draw(4, [(1.2, 1.1, 1.3), (0.5, 0.6, 0.5)]),
             _draw(7, [(0.8, 0.9, 0.8), (0.5, 0.4, 0.5)]),
             _draw(5, [(1.5, 0.9, 1.5), (0.2, 0.3, 0.2)])]
    per_draw, per_setting = draws_table(draws)
    assert per_draw["seed"].tolist() == [4, 5, 7]
    assert per_draw["median"].round(6).tolist() == [0.85, 0.85, 0.65]
    assert per_draw["above CALM"].tolist() == [1, 1, 0]
    # auto over the better of calm-pgm and adaptive: 1.2/1.1 (no), 0.5/0.4 (yes), 1.5/0.9 (yes)
    assert per_draw["over 1.1x the better"].tolist() == [0, 1, 1]
    first = per_setting.iloc[0]
    assert first["auto above CALM"] == 2 and first["calm-pgm above CALM"] == 1
    assert abs(first["auto geo"] - (1.2 * 0.8 * 1.5) ** (1 / 3)) < 1e-12
    assert first["auto range"] == (0.8, 1.5)
    text = draws_markdown(draws)
    auto_logs = np.log([1.2, 0.8, 1.5])
    z = auto_logs.mean() / (auto_logs.std(ddof=1) / np.sqrt(3))
    assert abs(first["auto z"] - z) < 1e-12 and 0 < z < 2  # above CALM twice, yet not 2 s.e.
    calm_pgm = (1.1 * 0.9 * 0.9) ** (1 / 3)
    assert (f"| {SETTINGS[0].label} | 3 | 1.129 (0.80-1.50) | 2 | {z:.1f} | {calm_pgm:.3f} | 1 "
            f"| {first['calm-pgm z']:.1f} | 1 |") in text
    mixed = pd.concat([draws[0], draws[1]])
    with pytest.raises(DPMarginalsError, match=r"^mixed\.csv: a draw's results must come from"):
        draws_table([mixed], ["mixed.csv"])
    with pytest.raises(DPMarginalsError,
                       match=r"^draw 2: not a held-out draw's results \(no column task\)"):
        draws_table([draws[0], draws[1].drop(columns="task")])
    with pytest.raises(DPMarginalsError, match=r"^draw 1: seed 4 has no auto rows"):
        draws_table([draws[0][draws[0]["method"] != "auto"]])


def _dev_grid():
    """benchmarks/dev_grid.py as a module (the benchmarks are scripts, not a package)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "dev_grid.py"
    spec = importlib.util.spec_from_file_location("dev_grid", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_dev_networks_never_draw_a_held_out_network():
    """The dev grid's networks (where rules may be chosen) come from seeds no held-out draw
    of any experiment seed uses, and are new users each repeat."""
    dev = _dev_grid()
    seeds = [dev.DEV_NETWORK_SEED0 + i for i in range(1, len(dev.DEV_NETWORKS) + 1)]
    held = [s.spec(seed).seed for seed in range(10) for s in SETTINGS if s.dataset == "bn"]
    assert max(seeds) < NETWORK_SEED0 < min(held) and not set(seeds) & set(held)
    tasks = dev.network_tasks(2, log_n=10)
    assert len(tasks) == 2 * len(dev.DEV_NETWORKS) and {t["n"] for t in tasks} == {1024}
    first, again, other = (dev.network_users(t)[0] for t in (tasks[0], tasks[0], tasks[1]))
    assert np.array_equal(first.codes, again.codes)
    assert not np.array_equal(first.codes, other.codes)  # repeat 1: a new sample
    assert first.d == dev.DEV_NETWORKS[0][3] and set(first.domain.sizes) == {2}


def test_latent_class_models_are_seeded_and_follow_their_tables():
    from dpmarginals.datasets.latent_class import LatentClassSpec, random_latent_class

    spec = LatentClassSpec(6, classes=3, values="mixed", margins="skewed", seed=4)
    model = random_latent_class(spec)
    assert model.domain.sizes.count(2) == 3 and max(model.domain.sizes) <= 6
    assert np.isclose(model.weights.sum(), 1.0) and model.tables[0].shape[0] == 3
    a, b = model.sample(60_000, rng=1), model.sample(60_000, rng=1)
    assert np.array_equal(a.codes, b.codes)
    # attribute 0's 1-way marginal is the class mixture of its tables: 4 standard errors of
    # each cell's proportion (fails with probability < 1e-3 over the cells)
    p = model.weights @ model.tables[0]
    freq = np.bincount(a.codes[:, 0], minlength=p.size) / a.n
    assert np.all(np.abs(freq - p) <= 4 * np.sqrt(p * (1 - p) / a.n) + 1e-12)
    with pytest.raises(DPMarginalsError, match="classes"):
        LatentClassSpec(6, classes=1)
    with pytest.raises(DPMarginalsError, match="margins"):
        LatentClassSpec(6, margins="flat")


def test_latent_class_margins_set_the_dependence():
    """Skewed per-class tables make the classes differ, so attributes depend strongly;
    near-uniform ones leave them nearly independent (mean |correlation| over pairs)."""
    from dpmarginals.datasets.latent_class import LatentClassSpec, random_latent_class

    def dependence(margins: str) -> float:
        data = random_latent_class(LatentClassSpec(12, 4, "binary", margins, seed=3)).sample(
            50_000, rng=0)
        corr = np.corrcoef(data.codes.T.astype(float))
        return float(np.abs(corr[np.triu_indices(12, 1)]).mean())
    assert dependence("uniform") < 0.08 < 0.12 < dependence("skewed")


def test_the_latent_grid_is_a_second_held_out_family():
    from dpmarginals.experiments.heldout import (
        LATENT_SEED0,
        LATENT_SETTINGS,
        _latent_tasks,
    )

    assert {s.dataset for s in LATENT_SETTINGS} == {"lc"}
    assert {s.values for s in LATENT_SETTINGS} == {"binary", "multi", "mixed"}
    assert {s.margins for s in LATENT_SETTINGS} == {"skewed", "uniform"}
    assert min(s.n for s in LATENT_SETTINGS) == 2**14 and len(LATENT_SETTINGS) >= 10
    models = {s.spec(seed).seed for seed in range(10) for s in LATENT_SETTINGS}
    networks = {s.spec(seed).seed for seed in range(10) for s in SETTINGS if s.dataset == "bn"}
    assert min(models) > LATENT_SEED0 > max(networks) and len(models) == 10 * len(
        LATENT_SETTINGS)
    full, quick = _latent_tasks(False), _latent_tasks(True)
    assert len(full) == len(LATENT_SETTINGS) * FULL_REPEATS and len(quick) <= 4
    assert all(t["key"].startswith("heldout-latent|") and t["grid"] == "lc" for t in full)
    assert not {t["key"] for t in full} & {t["key"] for t in _tasks(False)}
