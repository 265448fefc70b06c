"""Per-query coverage of nominal 95% intervals (issue #20, point 4).

For each setting (data set, d, eps) a fixed set of queries is asked of R independent
collections (the same reports released by CALM and by calm-pgm): up to ``--queries``
measured pairs (inside some group), reconstructed pairs (inside none) and 3-way marginals.
Per query, the coverage is the share of its cells, over the R collections, whose interval
holds the true marginal; two intervals:

* ``std``: ``answer ± 1.96 std`` (:func:`dpmarginals.synopsis.stderr.standard_errors`),
  calibrated on average over queries;
* ``interval``: :func:`dpmarginals.synopsis.intervals.interval`, meant to cover each
  query (measured: calibrated; reconstructed: the range the measured tables allow).

"±" is 1.96 standard errors of the per-query rate over the R collections.  ``width`` is
the interval's mean width over ``2 x 1.96 std``'s.  Data sets: ``gen`` is the random
Bayesian network of ``tests/populations.py`` (6 categorical attributes, 10,000 people;
the planner has not seen it), the others are the papers' (``DPMARGINALS_DATA``), 2^16
people drawn with seed (0, 1).

    PYTHONPATH=src python benchmarks/interval_coverage.py --settings gen:6:1.0 --runs 40
    ... --settings msnbc:16:0.5,adult3:15:1.0 --methods calm --json results/coverage.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from dpmarginals.datasets import load
from dpmarginals.local.calm import CALM
from dpmarginals.local.calm_pgm import CALMPGM
from dpmarginals.local.collect import collect
from dpmarginals.synopsis.intervals import interval, linear_synopsis, pooled_estimate
from dpmarginals.synopsis.stderr import bootstrap, standard_errors

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from populations import random_network  # the tests' generator

GRID = [(ds, d, eps) for ds, d in (("gen", 6), ("msnbc", 16), ("adult3", 15))
        for eps in (0.5, 1.0, 2.0)]
Z = 1.959964


def population(ds: str, d: int) -> Any:
    if ds == "gen":
        return random_network(10_000, seed=0)
    return load(ds, d=d, n=2**16, rng=np.random.SeedSequence([0, 1]))


def pick_queries(domain: Any, plan: Any, count: int, rng: np.random.Generator
                 ) -> list[tuple[str, tuple[str, ...]]]:
    """(kind, query): measured pairs, reconstructed pairs, 3-way queries (measured or not)."""
    sets = [set(g.attributes) for g in plan.groups]

    def inside(q: tuple[str, ...]) -> bool:
        return any(set(q) <= s for s in sets)

    out = []
    pairs = list(itertools.combinations(domain.attributes, 2))
    triples = list(itertools.combinations(domain.attributes, 3))
    for kind, pool, keep in (("measured pair", pairs, inside),
                             ("reconstructed pair", pairs, lambda q: not inside(q)),
                             ("3-way", triples, lambda q: True)):
        chosen = [q for q in pool if keep(q)]
        for i in sorted(rng.choice(len(chosen), size=min(count, len(chosen)), replace=False)):
            q = chosen[i]
            out.append((kind if kind != "3-way" else
                        f"3-way {'measured' if inside(q) else 'reconstructed'}", q))
    return out


def run_setting(ds: str, d: int, eps: float, args: argparse.Namespace) -> list[dict[str, Any]]:
    data = population(ds, d)
    plan = CALM(epsilon=eps, k=3).plan(data.domain, data.n)
    queries = pick_queries(data.domain, plan, args.queries, np.random.default_rng(5))
    truth = {q: data.marginal(q).values for _, q in queries}
    methods = {"calm": CALM(epsilon=eps, k=3), "calm-pgm": CALMPGM(epsilon=eps, k=3)}
    methods = {m: methods[m] for m in args.methods.split(",") if args.runs}
    hits: dict[tuple[str, tuple[str, ...]], dict[str, list[float]]] = {}
    seconds = {m: 0.0 for m in methods}
    for run in range(args.runs):
        views = collect(data, plan, rng=args.seed + run)
        for name, method in methods.items():
            clock = time.perf_counter()
            syn = method.release(plan, views, data.n)
            worlds = bootstrap(syn, replicates=args.replicates[name],
                               rng=np.random.SeedSequence([run, 7]), linear=True)
            for _, q in queries:
                values = syn.marginal(q).values
                std, _ = standard_errors(syn, q, values, worlds=worlds)
                bounds = interval(syn, q, values, std)
                t = truth[q]
                row = hits.setdefault((name, q), {"std": [], "interval": [], "width": [],
                                                  "std_width": []})
                row["std"].append(float(np.mean(np.abs(values - t) <= Z * std)))
                row["interval"].append(float(np.mean((bounds.lower <= t) & (t <= bounds.upper))))
                row["width"].append(float(np.mean(bounds.upper - bounds.lower)))
                row["std_width"].append(float(np.mean(2 * Z * std)))
            seconds[name] += time.perf_counter() - clock
        print(f"{ds} d={d} eps={eps}: run {run + 1}/{args.runs}", file=sys.stderr, flush=True)
    out = []
    for name in methods:
        for kind, q in queries:
            row = hits[(name, q)]
            rec = {"dataset": ds, "d": d, "epsilon": eps, "n": data.n, "l": plan.params["l"],
                   "m": plan.m, "method": name, "kind": kind, "query": list(q),
                   "runs": args.runs, "cells": int(truth[q].size),
                   "seconds_per_run": seconds[name] / args.runs}
            for key in ("std", "interval"):
                rates = np.asarray(row[key])
                rec[key] = float(rates.mean())
                rec[f"{key}_se"] = float(rates.std(ddof=1) / np.sqrt(rates.size))
            rec["width_ratio"] = float(np.mean(row["width"]) / np.mean(row["std_width"]))
            out.append(rec)
    if args.unshrunk_runs:
        out.extend(unshrunk_check(ds, data, plan, queries, eps, args))
    return out


def unshrunk_check(ds: str, data: Any, plan: Any, queries: list, eps: float,
                   args: argparse.Namespace) -> list[dict[str, Any]]:
    """calm-pgm's interval of a measured query (the unshrunk estimate ± 1.96 of its std)
    depends on the reports alone, so many more collections check it cheaply."""
    measured = [(k, q) for k, q in queries if "reconstructed" not in k]
    hits: dict[tuple[str, ...], list[float]] = {q: [] for _, q in measured}
    for run in range(args.unshrunk_runs):
        views = collect(data, plan, rng=args.seed + 10_000 + run)
        linear = linear_synopsis(CALM(epsilon=eps, k=3).release(plan, views, data.n))
        for _, q in measured:
            est, sd = pooled_estimate(linear, q)
            hits[q].append(float(np.mean(np.abs(est - data.marginal(q).values) <= Z * sd)))
    return [{"dataset": ds, "d": len(data.domain), "epsilon": eps, "n": data.n,
             "l": plan.params["l"], "m": plan.m, "method": "unshrunk", "kind": kind,
             "query": list(q), "runs": args.unshrunk_runs,
             "cells": data.domain.project(q).cells(), "interval": float(np.mean(hits[q])),
             "interval_se": float(np.std(hits[q], ddof=1) / np.sqrt(len(hits[q]))),
             "std": None, "std_se": None, "width_ratio": None} for kind, q in measured]


def rate(r: dict[str, Any], key: str) -> str:
    if r[key] is None:
        return "-"
    return f"{r[key]:.1%} ±{Z * r[key + '_se']:.1%}"


def fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def compact(rows: list[dict[str, Any]]) -> list[str]:
    """One line per (data, eps, method): per kind, each query's coverage (%) by
    ``± 1.96 std`` -> by the interval (the interval's width over ``± 1.96 std``'s)."""
    kinds = ("measured pair", "reconstructed pair", "3-way measured", "3-way reconstructed")
    lines = ["| data | eps | l, m | method | " + " | ".join(kinds) + " |",
             "|---|---:|---|---|" + "---|" * len(kinds)]
    keys = dict.fromkeys((r["dataset"], r["d"], r["epsilon"], r["method"]) for r in rows)
    for ds, d, eps, method in keys:
        mine = [r for r in rows if (r["dataset"], r["d"], r["epsilon"], r["method"])
                == (ds, d, eps, method)]
        cells = []
        for kind in kinds:
            got = [f"**{100 * r['interval']:.1f}** ({r['runs']} runs)" if r["std"] is None
                   else f"{100 * r['std']:.1f} -> **{100 * r['interval']:.1f}** "
                   f"({r['width_ratio']:.1f}x)" for r in mine if r["kind"] == kind]
            cells.append("; ".join(got) or "-")
        lines.append(f"| {ds} d={d} | {eps} | {mine[0]['l']}, {mine[0]['m']} | {method} | "
                     + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--settings", default=None,
                        help="data:d:eps,... (default: gen, msnbc d=16, adult3 d=15 at eps "
                        "0.5, 1, 2); data 'gen' is the tests' generator")
    parser.add_argument("--methods", default="calm,calm-pgm")
    parser.add_argument("--runs", type=int, default=40,
                        help="collections per setting (0: only --unshrunk-runs)")
    parser.add_argument("--queries", type=int, default=2, help="queries of each kind")
    parser.add_argument("--replicates", default="calm:100,calm-pgm:30",
                        help="bootstrap replicates per method")
    parser.add_argument("--seed", type=int, default=1000, help="seed of the first collection")
    parser.add_argument("--unshrunk-runs", type=int, default=0,
                        help="also check calm-pgm's measured-query intervals, which depend on "
                        "the reports alone, over this many more collections (cheap)")
    parser.add_argument("--json", default=None, help="save every number here")
    parser.add_argument("--summary", nargs="+", default=None, metavar="JSON",
                        help="print the compact table of saved --json files and stop")
    args = parser.parse_args(argv)
    if args.summary:
        rows = [r for f in args.summary for r in json.loads(Path(f).read_text())["rows"]]
        print("\n".join(compact(rows)))
        return 0
    args.replicates = {k: int(v) for k, v in (s.split(":") for s in args.replicates.split(","))}
    warnings.simplefilter("ignore")
    grid = GRID if args.settings is None else [
        (s.split(":")[0], int(s.split(":")[1]), float(s.split(":")[2]))
        for s in args.settings.split(",") if s]
    results: list[dict[str, Any]] = []
    print("| data | d | eps | l, m | method | kind | query | cells | std: ±1.96 std "
          "| interval | width / std's |")
    print("|---|---:|---:|---|---|---|---|---:|---:|---:|---:|")
    for ds, d, eps in grid:
        rows = run_setting(ds, d, eps, args)
        results.extend(rows)
        for r in rows:
            print(f"| {ds} | {d} | {eps} | {r['l']}, {r['m']} | {r['method']} | {r['kind']} "
                  f"| {','.join(r['query'])} | {r['cells']} | {rate(r, 'std')} "
                  f"| {rate(r, 'interval')} | {fmt(r['width_ratio'])} |", flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps({"rows": results, "argv": sys.argv[1:]},
                                                  indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
