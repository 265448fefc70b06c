"""Where the adaptive method's error goes: what knowing the data's structure would be worth.

Issue #20 asks for half of CALM's error.  This script measures, on the k = 3 panels of CALM
Fig. 4/5 at the paper's n (same users, queries and seeds as `dpmarginals experiment
adaptive`), the adaptive method's mean SSE over CALM's for three versions of it:

* **adaptive**: as shipped (each later phase planned from the reports so far, empirical-Bayes
  shrinkage);
* **true structure**: every later phase planned from the interaction energies of the users'
  own data (``Structure.from_data``: an oracle; what perfect earlier phases would give the
  planner);
* **true structure + known energies**: the same plan, and every measured block shrunk by
  ``E / (E + N)`` with its true energy (``eb_shrink(energies=...)``), the factor the
  planner's prediction assumes.

The gaps between the three columns are the error that a better phase 1 and a better
shrinkage prior could remove; the last column is close to what the planner predicts.

    PYTHONPATH=src python benchmarks/adaptive_headroom.py [--repeats 2] [--jobs 2]
        [--eps 0.4,1.0,1.6]
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import warnings
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np
import pandas as pd

PANELS = (("kosarak", 8), ("kosarak", 16), ("kosarak", 32), ("msnbc", 8), ("msnbc", 16),
          ("adult3", 8), ("adult3", 15), ("br2000-3", 8), ("br2000-3", 14))
N, K, QUERIES = 2**16, 3, 50
VARIANTS = ("adaptive", "true structure", "true structure + known energies")


def _setting(args: tuple[str, int, int, tuple[float, ...]]) -> list[dict[str, Any]]:
    from dpmarginals.experiments.calm_figures import task_users
    from dpmarginals.experiments.common import evaluate_synopsis
    from dpmarginals.experiments.runner import seed_for
    from dpmarginals.local import adaptive
    from dpmarginals.local.calm import CALM
    from dpmarginals.local.collect import collect
    from dpmarginals.planning.optimal import Structure

    warnings.simplefilter("ignore")
    ds, d, rep, epsilons = args
    data, exact = task_users({"dataset": ds, "n": N, "d": d, "k": K, "repeat": rep,
                              "queries": QUERIES}, 0)
    truth = Structure.from_data(data)
    planned_from_phase1, shrink = adaptive.phase_one_structure, adaptive.eb_shrink
    rows = []
    for eps in epsilons:
        def sse(synopsis: Any) -> float:
            return float(evaluate_synopsis(synopsis, exact)[0].mean())

        calm = CALM(epsilon=eps, k=K)
        plan = calm.plan(data.domain, data.n)
        row = {"dataset": ds, "d": d, "epsilon": eps, "repeat": rep,
               "calm": sse(calm.release(plan, collect(data, plan, rng=seed_for(
                   0, "reports", "calm", ds, N, d, K, rep, eps)), data.n))}
        for variant in VARIANTS:
            adaptive.phase_one_structure = (planned_from_phase1 if variant == "adaptive"
                                            else lambda *a, **kw: truth)
            adaptive.eb_shrink = (functools.partial(shrink, energies=truth.energy_of)
                             if variant.endswith("energies") else shrink)
            method = adaptive.Adaptive(epsilon=eps, k=K)
            phases = method.collect(data, rng=seed_for(0, "reports", "adaptive", ds, N, d,
                                                       K, rep, eps))
            row[variant] = sse(method.release([p.plan for p in phases],
                                              [p.counts for p in phases]))
            if variant != "adaptive":
                row[f"{variant} predicted"] = phases[-1].plan.params["predicted_sse"]
        adaptive.phase_one_structure, adaptive.eb_shrink = planned_from_phase1, shrink
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--eps", default="0.4,1.0,1.6")
    args = parser.parse_args()
    if not os.environ.get("DPMARGINALS_DATA"):
        sys.exit("set DPMARGINALS_DATA to the folder holding the data sets")
    epsilons = tuple(float(e) for e in args.eps.split(","))
    tasks = [(ds, d, r, epsilons) for ds, d in PANELS for r in range(args.repeats)]
    with ProcessPoolExecutor(args.jobs) as pool:
        frame = pd.DataFrame([row for rows in pool.map(_setting, tasks) for row in rows])
    means = frame.groupby(["dataset", "d", "epsilon"]).mean(numeric_only=True)
    ratios = pd.DataFrame({v: means[v] / means["calm"] for v in VARIANTS})
    print(f"# Adaptive method: headroom (k = {K}, n = 2^16, eps {args.eps}, "
          f"{args.repeats} repeats, {QUERIES} queries)\n")
    print("Mean SSE over CALM's, geometric mean per data set:\n")
    per_data = np.exp(np.log(ratios).groupby(level=0).mean())
    print("| data set | " + " | ".join(VARIANTS) + " |")
    print("|---|" + "---:|" * len(VARIANTS))
    for name, row in per_data.iterrows():
        print(f"| {name} | " + " | ".join(f"{row[v]:.3f}" for v in VARIANTS) + " |")
    print("\n| over all settings | " + " | ".join(VARIANTS) + " |")
    print("|---|" + "---:|" * len(VARIANTS))
    print("| median | " + " | ".join(f"{ratios[v].median():.3f}" for v in VARIANTS) + " |")
    print("| geometric mean | " + " | ".join(f"{np.exp(np.log(ratios[v]).mean()):.3f}"
                                            for v in VARIANTS) + " |")
    print("| above 1 | " + " | ".join(f"{int((ratios[v] > 1).sum())} / {len(ratios)}"
                                     for v in VARIANTS) + " |")
    last = VARIANTS[-1]
    predicted = means[f"{last} predicted"] / means["calm"]
    print(f"\nThe planner's predicted SSE for the known-energies plan, over CALM's: median "
          f"{predicted.median():.3f} (realized {ratios[last].median():.3f}).")


if __name__ == "__main__":
    main()
