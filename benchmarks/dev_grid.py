"""The dev grid (issue #36): where constants and auto's rule are chosen, never on held-out.

The settings of CALM Fig. 4/5 (Kosarak, MSNBC binary; Adult, BR2000 with 3 values), the
k = 3 (and with ``--k6`` the k = 6) panels at the paper's n, eps = 0.2, 0.8, 1.4, 2.0,
repeats 0-2 of ``dpmarginals experiment adaptive``'s streams with seed 0 (the same users,
queries and report streams: the ``adaptive`` variant reproduces that experiment's numbers).
Variants on the same reports: CALM's collection feeds ``calm``, ``calm-pgm`` (exchangeable
prior) and ``calm-pgm-priors`` (the adaptive method's signed, location and capacity priors);
the adaptive method's phases feed ``adaptive`` (numpy inference), ``adaptive-pgm``
(graphical model, exchangeable prior) and ``adaptive-pgm-priors``.

    DPMARGINALS_DATA=... PYTHONPATH=src nice -n 10 python benchmarks/dev_grid.py \\
        --variants calm,calm-pgm,calm-pgm-priors,adaptive,adaptive-pgm-priors --jobs 2 \\
        --out dev.csv
    # the small-n dev grid (auto's small-n rule): the same panels at n = 2^14 and 2^15
    ... dev_grid.py --variants calm,calm-pgm-priors,adaptive --log-n 14 --out dev14.csv
    # dev networks: the held-out generator's families from a seed range it never uses
    ... dev_grid.py --panels networks --log-n 14 --out devnets14.csv

``--panels networks`` draws :data:`DEV_NETWORKS` from
:mod:`dpmarginals.datasets.bayesnet` with network seeds :data:`DEV_NETWORK_SEED0` + i
(1,001-1,012; the held-out grid's are 36,001 and up, so no held-out network is ever a dev
one), a new sample of users each repeat: the structures, value counts and margins the
held-out benchmark draws from, for choices the CALM panels cannot inform (their n and
marginals are few).  Held-out figures stay those of fresh draws; the real held-out data sets
(NLTCS, ACS, T10I4D100K, Fire, Loans) have no dev counterpart.

Prints per variant the geometric mean and median of the per-setting ratio to CALM, and the
paired mean change of the log ratio against ``--baseline`` with its standard error.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd

from dpmarginals.datasets.bayesnet import NetworkSpec, random_network
from dpmarginals.experiments.adaptive import METHODS
from dpmarginals.experiments.beyond_calm import PANELS
from dpmarginals.experiments.calm_figures import MAX_D, sse_tasks, task_users
from dpmarginals.experiments.common import evaluate_synopsis, truths
from dpmarginals.experiments.runner import seed_for
from dpmarginals.local.adaptive import Adaptive
from dpmarginals.local.calm import CALM
from dpmarginals.local.calm_pgm import CALMPGM
from dpmarginals.local.collect import collect
from dpmarginals.synopsis.evaluate import random_queries

EPS = (0.2, 0.8, 1.4, 2.0)
#: ``--panels multi``: multi-valued dev data (the dev grid's Adult and BR2000 with their
#: own values, 2-41 and 2-21, and RAND HIE, 2-5 values), k = 3: panels (log2 n, d, k).
MULTI_PANELS = {"adult": ((16, 15, 3),), "br2000": ((16, 14, 3),), "randhie": ((16, 8, 3),)}
#: ``--panels networks``: dev networks (structure, values, margins, d), k = 3, n = 2^16 unless
#: ``--log-n``; network i (from 1) is drawn from seed DEV_NETWORK_SEED0 + i.
DEV_NETWORKS = (("tree", "binary", "skewed", 8), ("dense", "binary", "uniform", 12),
                ("tree", "multi", "skewed", 12), ("dense", "mixed", "skewed", 16),
                ("tree", "mixed", "uniform", 16), ("dense", "multi", "uniform", 8),
                ("tree", "binary", "uniform", 24), ("dense", "binary", "skewed", 16),
                ("tree", "multi", "uniform", 12), ("dense", "mixed", "uniform", 24),
                ("tree", "mixed", "skewed", 32), ("dense", "binary", "skewed", 32))
DEV_NETWORK_SEED0 = 1000
DEV_NETWORK_LOG_N = 16
QUERIES = 50
SEED = 0
VARIANTS = ("calm", "calm-pgm", "calm-pgm-priors", "adaptive", "adaptive-pgm",
            "adaptive-pgm-priors")


def network_tasks(repeats: int, log_n: int | None = None) -> list[dict]:
    """The dev networks' tasks (:data:`DEV_NETWORKS`), at n = 2^log_n (default 2^16)."""
    n = 2 ** (DEV_NETWORK_LOG_N if log_n is None else log_n)
    return [{"dataset": f"net{i}", "network": i, "panel": f"net{i} {s}/{v}/{m} d={d} n={n}",
             "n": n, "d": d, "k": 3, "repeat": r, "queries": QUERIES, "eps": list(EPS)}
            for i, (s, v, m, d) in enumerate(DEV_NETWORKS, 1) for r in range(repeats)]


def network_users(task: dict) -> tuple:
    """A dev network's users for the task's repeat, and the exact answers to its queries."""
    i, n, r = task["network"], task["n"], task["repeat"]
    s, v, m, d = DEV_NETWORKS[i - 1]
    net = random_network(NetworkSpec(d, s, v, m, DEV_NETWORK_SEED0 + i))
    data = net.sample(n, rng=seed_for(SEED, "dev-network-users", i, n, r))
    queries = random_queries(data.domain, task["k"], task["queries"],
                             rng=seed_for(SEED, "dev-network-queries", i, n, r))
    return data, truths(data, queries)


def tasks(k6: bool, repeats: int, log_n: int | None = None, multi: bool = False
          ) -> list[dict]:
    """The dev grid's tasks; ``log_n``: every panel at n = 2^log_n users instead of the
    paper's (the same data sets and streams keyed by that n); ``multi``: the multi-valued
    panels (:data:`MULTI_PANELS`) instead of CALM's."""
    out = []
    for t in sse_tasks("adaptive", MULTI_PANELS if multi else PANELS, METHODS, False,
                       shrink=2):
        if t["repeat"] >= repeats or (t["k"] != 3 and not k6) or t["k"] == 8:
            continue
        if t["d"] > MAX_D.get(t["dataset"], t["d"]):
            continue
        if log_n is not None:
            t = {**t, "n": 2**log_n}
        out.append({**t, "eps": list(EPS)})
    return out


def run(task: dict, variants: tuple[str, ...]) -> list[dict]:
    ds, n, d, k, r = task["dataset"], task["n"], task["d"], task["k"], task["repeat"]
    data, exact = network_users(task) if "network" in task else task_users(task, SEED)
    rows = []
    warnings.simplefilter("ignore")
    for eps in task["eps"]:
        base = {"dataset": ds, "panel": task["panel"], "n": n, "d": d, "k": k, "repeat": r,
                "epsilon": eps}

        def add(name: str, synopsis, seconds: float, base: dict = base) -> None:
            sse = float(evaluate_synopsis(synopsis, exact)[0].mean())
            rows.append({**base, "variant": name, "sse": sse, "seconds": seconds})

        calm = CALM(epsilon=eps, k=k)
        plan = calm.plan(data.domain, data.n)
        views = collect(data, plan, rng=seed_for(SEED, "reports", "calm", ds, n, d, k, r, eps))
        clock = time.perf_counter()
        add("calm", calm.release(plan, views, data.n), time.perf_counter() - clock)
        for name, priors in (("calm-pgm", "exchangeable"), ("calm-pgm-priors", "adaptive")):
            if name in variants:
                clock = time.perf_counter()
                syn = CALMPGM(epsilon=eps, k=k, priors=priors).release(plan, views, data.n)
                add(name, syn, time.perf_counter() - clock)
        method = Adaptive(epsilon=eps, k=k)
        phases = method.collect(data, rng=seed_for(SEED, "reports", "adaptive", ds, n, d, k, r,
                                                   eps))
        plans, counts = [p.plan for p in phases], [p.counts for p in phases]
        for name, inference, priors in (("adaptive", "shrink", "exchangeable"),
                                        ("adaptive-pgm", "pgm", "exchangeable"),
                                        ("adaptive-pgm-priors", "pgm", "adaptive")):
            if name in variants:
                clock = time.perf_counter()
                # as auto builds it: a fit refused or stopped releases by the numpy inference
                syn = Adaptive(epsilon=eps, k=k, inference=inference, priors=priors,
                               pgm_fallback=True).release(plans, counts)
                add(name, syn, time.perf_counter() - clock)
        for name in variants:  # e.g. adaptive[phases=2;share=0.3]: its own collection
            if name.startswith("adaptive["):
                params = _design(name)
                method = Adaptive(epsilon=eps, k=k, **params)
                phases = method.collect(data, rng=seed_for(SEED, "reports", "adaptive", ds, n, d,
                                                           k, r, eps))
                clock = time.perf_counter()
                syn = method.release([p.plan for p in phases], [p.counts for p in phases])
                add(name, syn, time.perf_counter() - clock)
    return rows


def _design(name: str) -> dict:
    """``adaptive[phases=2;share=0.3]`` -> ``{"phases": 2, "share": 0.3}``
    (``conservative=1``: True)."""
    body = name[name.index("[") + 1:name.rindex("]")]
    kinds = {"phases": int, "share": float, "conservative": lambda v: bool(int(v))}
    return {key: kinds[key](value)
            for key, value in (item.split("=") for item in body.split(";") if item)}


def summarize(frame: pd.DataFrame, baseline: str) -> str:
    mean = frame.groupby(["dataset", "panel", "epsilon", "variant"])["sse"].mean().unstack()
    lines = []
    for v in mean.columns:
        if v == "calm":
            continue
        ratio = (mean[v] / mean["calm"]).dropna()
        line = (f"{v:22s} settings {len(ratio):3d}  geo {math.exp(np.log(ratio).mean()):.3f}  "
                f"median {ratio.median():.3f}  worst {ratio.max():.3f}  above 1: "
                f"{int((ratio > 1).sum())}")
        if baseline in mean.columns and v != baseline:
            diff = np.log(mean[v] / mean[baseline]).dropna()
            line += (f"  vs {baseline}: {100 * diff.mean():+.1f}% +- "
                     f"{100 * diff.std(ddof=1) / math.sqrt(len(diff)):.1f}%")
        lines.append(line)
    per_data = (mean.div(mean["calm"], axis=0).groupby(level=["dataset", "panel"])
                .apply(lambda g: np.exp(np.log(g).mean())))
    return "\n".join(lines) + "\n\nper panel (geometric mean over eps):\n" + per_data.round(
        3).to_string()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--baseline", default="adaptive")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--k6", action="store_true", help="also the k = 6 panels")
    ap.add_argument("--panels", choices=("calm", "multi", "networks"), default="calm",
                    help="CALM Fig. 4/5's panels, the multi-valued dev panels or the dev "
                         "networks")
    ap.add_argument("--log-n", type=int, default=None,
                    help="every panel at n = 2^LOG_N users (default: the paper's n)")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--out", default="dev_grid.csv")
    ap.add_argument("--summary-only", action="store_true")
    ap.add_argument("--start", type=int, default=0, help="skip the first tasks (a resumed run)")
    ap.add_argument("--also", default="", help="earlier CSVs to summarize with this one")
    args = ap.parse_args()
    variants = tuple(args.variants.split(","))
    out = Path(args.out)
    if not args.summary_only:
        todo = (network_tasks(args.repeats, args.log_n) if args.panels == "networks" else
                tasks(args.k6, args.repeats, args.log_n, args.panels == "multi"))[args.start:]
        with out.open("w", newline="") as fh:
            writer = None
            with ProcessPoolExecutor(args.jobs) as pool:
                for i, rows in enumerate(pool.map(run, todo, [variants] * len(todo))):
                    if writer is None:
                        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
                        writer.writeheader()
                    writer.writerows(rows)
                    fh.flush()
                    print(f"{i + 1}/{len(todo)} {todo[i]['panel']} {todo[i]['dataset']}",
                          file=sys.stderr)
    frames = [pd.read_csv(f) for f in [*filter(None, args.also.split(",")), out]]
    print(summarize(pd.concat(frames, ignore_index=True), args.baseline))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
