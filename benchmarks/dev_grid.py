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

from dpmarginals.experiments.adaptive import METHODS
from dpmarginals.experiments.beyond_calm import PANELS
from dpmarginals.experiments.calm_figures import MAX_D, sse_tasks, task_users
from dpmarginals.experiments.common import evaluate_synopsis
from dpmarginals.experiments.runner import seed_for
from dpmarginals.local.adaptive import Adaptive
from dpmarginals.local.calm import CALM
from dpmarginals.local.calm_pgm import CALMPGM
from dpmarginals.local.collect import collect

EPS = (0.2, 0.8, 1.4, 2.0)
#: ``--panels multi``: multi-valued dev data (the dev grid's Adult and BR2000 with their
#: own values, 2-41 and 2-21, and RAND HIE, 2-5 values), k = 3: panels (log2 n, d, k).
MULTI_PANELS = {"adult": ((16, 15, 3),), "br2000": ((16, 14, 3),), "randhie": ((16, 8, 3),)}
SEED = 0
VARIANTS = ("calm", "calm-pgm", "calm-pgm-priors", "adaptive", "adaptive-pgm",
            "adaptive-pgm-priors")


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
    data, exact = task_users(task, SEED)
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
                syn = Adaptive(epsilon=eps, k=k, inference=inference,
                               priors=priors).release(plans, counts)
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
    """``adaptive[phases=2;share=0.3]`` -> ``{"phases": 2, "share": 0.3}``."""
    body = name[name.index("[") + 1:name.rindex("]")]
    return {key: (int(value) if key == "phases" else float(value))
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
    ap.add_argument("--panels", choices=("calm", "multi"), default="calm",
                    help="CALM Fig. 4/5's panels or the multi-valued dev panels")
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
        todo = tasks(args.k6, args.repeats, args.log_n, args.panels == "multi")[args.start:]
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
