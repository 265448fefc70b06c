"""Issue #20.3: our methods against the optimal-mechanism anchor, ``wfm``, on small domains.

The workload factorization mechanism (McKenna, Maity, Mazumdar, Miklau, PVLDB 2020) is
optimized for exactly the workload measured here, all k-way marginals, so it is the
yardstick for a local-DP marginal method on a domain it can hold.  For each data set (NLTCS
and the binary Adult ``adult2``, their first d attributes), d, k and eps, every method
releases from the same users (the data set's rows, or ``--n`` of them sampled with
replacement) with the same seeds, answers every k-way marginal, and the table gives the
mean SSE per query (CALM §5.1) over the runs:

* ``wfm``: the paper's unbiased estimate; ``wfm+ns``: Norm-Sub of each answer;
* ours: ``calm``, ``calm-pgm`` and, when the method is registered (issue #20.1, branch
  ``adaptive``), ``adaptive`` -- added by name from :data:`OURS`, nothing else to change;
* ``ft+ns`` (InpHT with Norm-Sub), the Fourier mechanism WFM is usually compared with;
* with ``--with-pgm``, ``wfm+pgm``: WFM's reports released by calm-pgm's inference
  (shrinkage + a graphical model over WFM's k-way marginals, each given its mean
  closed-form variance, treated as independent) -- a hybrid, not counted as ours.

"ratio" is the best of ours over the better of ``wfm`` and ``wfm+ns``; the issue asks for
at most 1.2 on small domains.  WFM's strategies are cached on disk
(``dpmarginals.planning.factorization``): the first run of a (d, k, eps) optimizes it
(seconds at d = 8, ten minutes or more at d = 10 on a loaded 2-core machine).

    DPMARGINALS_DATA=../shared/data PYTHONPATH=src python benchmarks/wfm_compare.py
    ... --d 8 --repeats 2 --epsilons 1 4     # quicker
    ... --json results/wfm.json              # also save every number
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import warnings
from itertools import combinations
from typing import Any

import numpy as np

from dpmarginals.datasets import load
from dpmarginals.methods import available, make
from dpmarginals.synopsis.evaluate import evaluate

# (column label, registry name, extra parameters)
ANCHOR: list[tuple[str, str, dict[str, Any]]] = [
    ("wfm", "wfm", {}),
    ("wfm+ns", "wfm", {"postprocess": "norm_sub"}),
]
OURS: list[tuple[str, str, dict[str, Any]]] = [
    ("calm", "calm", {}),
    ("calm-pgm", "calm_pgm", {}),
    ("adaptive", "adaptive", {}),  # issue #20.1: used as soon as it is registered
]
REFERENCE: list[tuple[str, str, dict[str, Any]]] = [
    ("ft+ns", "ft", {"postprocess": "norm_sub"}),
]
TARGET = 1.2


HYBRID = ("wfm+pgm", "wfm", {})  # released by wfm_pgm below


def methods(with_pgm: bool = False) -> list[tuple[str, str, dict[str, Any]]]:
    """Every column that can run here (a method not registered is left out)."""
    hybrid = [HYBRID] if with_pgm else []
    return [m for m in ANCHOR + OURS + REFERENCE + hybrid if m[1] in available()]


def wfm_pgm(method: Any, data: Any, seed: Any, queries: list) -> Any:
    """WFM's release of ``data`` refitted by calm-pgm's inference on its k-way marginals."""
    from dpmarginals.inference.views import NoisyView
    from dpmarginals.local.calm_pgm import pgm_synopsis

    synopsis = method.run(data, rng=seed)
    views = [NoisyView(q, synopsis.marginal(q).values, data.n,
                       float(np.mean(synopsis.standard_errors(q) ** 2))) for q in queries]
    return pgm_synopsis(data.domain, views, "wfm+pgm", {})


def run_setting(data: Any, k: int, eps: float, seeds: list, iterations: int,
                with_pgm: bool = False) -> dict[str, Any]:
    """Mean SSE per k-way marginal of every method on the same users and seeds."""
    queries = list(combinations(data.domain.attributes, k))
    row: dict[str, Any] = {"k": k, "epsilon": eps, "queries": len(queries)}
    for label, name, extra in methods(with_pgm):
        params = {"iterations": iterations, **extra} if name == "wfm" else extra
        method = make(name, epsilon=eps, k=k, **params)
        if name == "wfm" and label == "wfm":
            start = time.perf_counter()
            strategy = method.strategy(data.domain)
            row["wfm_strategy"] = {"rows": strategy.rows, "iterations": strategy.iterations,
                                   "optimize_seconds": round(time.perf_counter() - start, 1),
                                   "objective_per_query": strategy.average_error
                                   / len(queries)}
        sse, start = [], time.perf_counter()
        for seed in seeds:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                synopsis = (wfm_pgm(method, data, seed, queries) if label == HYBRID[0]
                            else method.run(data, rng=seed))
            sse.append(float(np.mean(evaluate(synopsis, data, queries).sse)))
        row[label] = float(np.mean(sse))
        row[f"{label} sd"] = float(np.std(sse, ddof=1) / math.sqrt(len(sse))) if len(
            sse) > 1 else None
        row[f"{label} seconds"] = (time.perf_counter() - start) / len(seeds)
        print(f"  k={k} eps={eps} {label}: SSE {row[label]:.4g} "
              f"({row[f'{label} seconds']:.1f} s/run)", file=sys.stderr, flush=True)
    ours = [label for label, _, _ in OURS if label in row]
    anchor = min(row["wfm"], row["wfm+ns"])
    row["best ours"] = min(ours, key=lambda label: row[label])
    row["ratio"] = row[row["best ours"]] / anchor
    row["ratio vs raw wfm"] = row[row["best ours"]] / row["wfm"]
    return row


def table(rows: list[dict[str, Any]]) -> str:
    labels = [label for label, _, _ in methods(True) if label in rows[0]]
    head = ("| data set | d | n | k | eps | " + " | ".join(labels)
            + " | best of ours | ratio | ratio vs raw wfm |")
    out = [head, "|---|---:|---:|---:|---:|" + "---:|" * len(labels) + "---|---:|---:|"]
    for r in rows:
        cells = [f"{r[label]:.3g}" for label in labels]
        mark = "**" if r["ratio"] <= TARGET else ""
        out.append(f"| {r['dataset']} | {r['d']} | {r['n']:,} | {r['k']} | {r['epsilon']} | "
                   + " | ".join(cells) + f" | {r['best ours']} | {mark}{r['ratio']:.2f}{mark}"
                   f" | {r['ratio vs raw wfm']:.2f} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", default=["nltcs", "adult2"])
    parser.add_argument("--d", type=int, nargs="+", default=[8, 10])
    parser.add_argument("--k", type=int, nargs="+", default=[2, 3])
    parser.add_argument("--epsilons", type=float, nargs="+", default=[0.5, 1.0, 2.0, 4.0])
    parser.add_argument("--repeats", type=int, default=3, help="runs per setting (default 3)")
    parser.add_argument("--n", type=int, default=None,
                        help="sample n users with replacement (default: every row once)")
    parser.add_argument("--iterations", type=int, default=300,
                        help="wfm's optimizer iterations (default 300)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--with-pgm", action="store_true",
                        help="also the wfm+pgm hybrid (needs the 'pgm' extra)")
    parser.add_argument("--json", help="also write every number to this file")
    args = parser.parse_args(argv)

    rows = []
    for dataset in args.datasets:
        for d in args.d:
            data = load(dataset, d=d, n=args.n, rng=np.random.SeedSequence([args.seed, 1]))
            seeds = np.random.SeedSequence([args.seed, 3]).spawn(args.repeats)
            for k in args.k:
                for eps in args.epsilons:
                    print(f"{dataset} d={d} n={data.n}", file=sys.stderr)
                    row = run_setting(data, k, eps, seeds, args.iterations, args.with_pgm)
                    rows.append({"dataset": dataset, "d": d, "n": data.n, **row})
    print(table(rows))
    ratios = np.array([r["ratio"] for r in rows])
    print(f"\nbest of ours / best wfm: median {np.median(ratios):.2f}, max {ratios.max():.2f}; "
          f"within {TARGET}x in {(ratios <= TARGET).sum()} of {ratios.size} settings.  "
          f"Mean SSE per k-way marginal over all C(d, k) of them, {args.repeats} runs each "
          f"(seed {args.seed}); wfm: m = 4 x cells rows, {args.iterations} iterations.")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"args": vars(args), "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
