"""calm-pgm vs faithful CALM on the same reports (issue #9), with the error sources.

For each setting (MSNBC d = 8 and 16, binary; Adult with 3 values per attribute, d = 8;
n = 2^16, k = 3, eps in {0.2, 1.0, 2.0}) and each seed, the reports are collected **once**
(``collect`` with that seed) and released by both inferences (``CALM.release``:
consistency + max-entropy; ``CALMPGM.release``: shrinkage + mbi), which answer the same
random 3-way marginals.

Error sources: the same two estimators on the groups' exact marginals and on the
population's (:mod:`dpmarginals.local.error_sources`).  ``dpmarginals experiment calm-pgm
--quick`` makes the same comparison on the quick grids of CALM Fig. 4 and 5.

``--coverage R`` also checks the standard errors: over R independent collections, the
share of cells whose nominal 95% interval (answer +- 1.96 std) contains the truth, for
covered queries (inside one group's marginal: analytic std) and reconstructed ones (not
inside any group's marginal: parametric bootstrap), per method; ``--coverage-public`` lets a
"public" sample (2^14 other rows) say how fast interactions fade with their order.  Each run
asks new random queries, so the rate averages over queries as well as collections (a fixed
query's error includes its own fixed shrinkage and reconstruction bias, which intervals
from a prior over interactions cover only on average); ``--coverage-fixed-queries`` asks
the same queries in every run.

    DPMARGINALS_DATA=../shared/data PYTHONPATH=src python benchmarks/pgm_vs_calm.py
    ... --seeds 3 --queries 50 --coverage 20 --json results/pgm_vs_calm.json
    ... --settings msnbc:16:1.0        # one setting
    ... --settings "" --planner msnbc:8:0.2,msnbc:8:1.0   # only the workload planner check
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
import warnings
from typing import Any

import numpy as np

from dpmarginals.datasets import load
from dpmarginals.local.calm import CALM
from dpmarginals.local.calm_pgm import CALMPGM
from dpmarginals.local.collect import collect
from dpmarginals.local.error_sources import noiseless_views, population_views, split_error
from dpmarginals.synopsis.base import consistent_synopsis
from dpmarginals.synopsis.evaluate import random_queries
from dpmarginals.synopsis.stderr import REPLICATES, standard_errors

GRID = [(ds, d, eps) for ds, d in (("msnbc", 8), ("msnbc", 16), ("adult3", 8))
        for eps in (0.2, 1.0, 2.0)]


def sse(synopsis: Any, queries: list, truth: list) -> float:
    return float(np.mean([synopsis.marginal(q).sse(t) for q, t in zip(queries, truth,
                                                                       strict=True)]))


def run_setting(ds: str, d: int, eps: float, args: argparse.Namespace) -> dict[str, Any]:
    data = load(ds, d=d, n=args.n, rng=np.random.SeedSequence([0, 1]))
    calm = CALM(epsilon=eps, k=args.k)
    plan = calm.plan(data.domain, data.n)
    queries = random_queries(data.domain, args.k, args.queries, rng=np.random.SeedSequence(2))
    truth = [data.marginal(q) for q in queries]
    rows: dict[str, list[float]] = {key: [] for key in (
        "calm", "pgm", "calm_nonoise", "pgm_nonoise", "calm_pop", "pgm_pop",
        "calm_seconds", "pgm_seconds")}
    inferences = {"calm": calm, "pgm": CALMPGM(epsilon=eps, k=args.k)}
    for seed in range(args.seeds):
        views = collect(data, plan, rng=seed)  # the same reports for both
        clean = ({"nonoise": noiseless_views(data, plan, rng=seed),
                  "pop": population_views(data, plan, [v.users for v in views])}
                 if seed < args.decompose else {})
        for name, inference in inferences.items():
            clock = time.perf_counter()
            synopsis = inference.release(plan, views, data.n)
            rows[f"{name}_seconds"].append(time.perf_counter() - clock)
            rows[name].append(sse(synopsis, queries, truth))
            for tag, vs in clean.items():
                    rows[f"{name}_{tag}"].append(sse(inference.release(plan, vs, data.n),
                                                     queries, truth))
    out: dict[str, Any] = {"dataset": ds, "d": d, "epsilon": eps, "n": data.n, "k": args.k,
                           "l": plan.params["l"], "m": plan.m,
                           "oracles": sorted({g.oracle for g in plan.groups})}
    out.update({key: float(np.mean(v)) if v else None for key, v in rows.items()})
    out["pgm_seconds_max"] = float(np.max(rows["pgm_seconds"]))
    out["ratio"] = out["pgm"] / out["calm"]
    for m in ("calm", "pgm"):
        if out[f"{m}_pop"] is None:
            continue
        out[f"{m}_sources"] = split_error(out[m], out[f"{m}_nonoise"], out[f"{m}_pop"])
    return out


def public_sample(ds: str, d: int) -> Any:
    """A "public" data set: 2^14 rows drawn independently of the users (seed 99)."""
    return load(ds, d=d, n=2**14, rng=np.random.SeedSequence([99]))


def coverage_queries(data: Any, plan: Any, k: int, count: int, rng: np.random.Generator
                     ) -> tuple[list, list]:
    """``count`` covered queries (k-subsets, or the whole set, of the groups' attribute sets)
    and ``count`` reconstructed k-way queries (inside no group)."""
    sets = [tuple(g.attributes) for g in plan.groups]
    size = min(k, min(len(s) for s in sets))
    covered = sorted({sub for s in sets for sub in itertools.combinations(s, size)})
    picks = rng.choice(len(covered), size=min(count, len(covered)), replace=False)
    cov = [covered[i] for i in picks]
    rec: list = []
    for q in random_queries(data.domain, k, 20 * count, rng=rng):
        if not any(set(q) <= set(s) for s in sets) and q not in rec:
            rec.append(q)
        if len(rec) == count:
            break
    if not rec and k + 1 <= len(data.domain):  # every k-set is covered: ask (k+1)-way
        for q in random_queries(data.domain, k + 1, 20 * count, rng=rng):
            if not any(set(q) <= set(s) for s in sets) and q not in rec:
                rec.append(q)
            if len(rec) == count:
                break
    return cov, rec


def run_coverage(ds: str, d: int, eps: float, args: argparse.Namespace) -> dict[str, Any]:
    data = load(ds, d=d, n=args.n, rng=np.random.SeedSequence([0, 1]))
    plan = CALM(epsilon=eps, k=args.k).plan(data.domain, data.n)
    public = public_sample(ds, d) if args.coverage_public else None
    hits: dict[tuple[str, str], dict[int, list[np.ndarray]]] = {}
    z = 1.959964
    clock = {"calm": 0.0, "pgm": 0.0}
    for run in range(args.coverage):
        # New queries per run (the rate then averages over queries too), or the same ones.
        cov, rec = coverage_queries(data, plan, args.k, args.coverage_queries,
                                    np.random.default_rng(5 if args.coverage_fixed_queries
                                                          else [5, run]))
        views = collect(data, plan, rng=args.coverage_seed + run)
        syns = {name: inference.release(plan, views, data.n) for name, inference in
                (("calm", CALM(epsilon=eps, k=args.k)), ("pgm", CALMPGM(epsilon=eps, k=args.k)))
                if name in args.coverage_methods}
        for name, syn in syns.items():
            for kind, qs in (("covered", cov), ("reconstructed", rec)):
                for q in qs:
                    start = time.perf_counter()
                    values = syn.marginal(q).values
                    std, _ = standard_errors(syn, q, values, replicates=args.replicates,
                                             rng=np.random.SeedSequence([run, 7]),
                                             public=public)
                    clock[name] += time.perf_counter() - start
                    inside = np.abs(values - data.marginal(q).values) <= z * std
                    hits.setdefault((name, kind), {}).setdefault(run, []).append(inside)
    out: dict[str, Any] = {"dataset": ds, "d": d, "epsilon": eps, "runs": args.coverage,
                           "l": plan.params["l"], "covered_queries": len(cov),
                           "reconstructed_queries": len(rec),
                           "reconstructed_size": len(rec[0]) if rec else None,
                           "std_seconds": clock}
    for (name, kind), per_run in hits.items():
        # Cells of one run are correlated, so the uncertainty is that of the per-run rates.
        rates = [float(np.mean(np.concatenate([x.ravel() for x in v])))
                 for v in per_run.values()]
        cells = sum(x.size for v in per_run.values() for x in v)
        out[f"{name}_{kind}"] = float(np.mean(rates))
        out[f"{name}_{kind}_se"] = float(np.std(rates, ddof=1) / np.sqrt(len(rates)))
        out[f"{name}_{kind}_cells"] = cells
    return out


def run_planner(ds: str, d: int, eps: float, args: argparse.Namespace) -> dict[str, Any]:
    """Measured SSE (CALM inference, same users and seeds) of CALM's Algorithm 1 plan and of
    the workload planner's, with theta and with a "public" sample (2^14 other rows)."""
    from dpmarginals.planning.workload import Workload, plan_workload

    data = load(ds, d=d, n=args.n, rng=np.random.SeedSequence([0, 1]))
    public = public_sample(ds, d)
    workload = Workload.all_k(data.domain, args.k)
    queries = random_queries(data.domain, args.k, args.queries, rng=np.random.SeedSequence(2))
    truth = [data.marginal(q) for q in queries]
    plans = {"calm": (CALM(epsilon=eps, k=args.k).plan(data.domain, data.n), None)}
    for tag, pub in (("theta", None), ("public", public)):
        choice = plan_workload(data.domain, data.n, eps, workload, public=pub)
        plans[tag] = (choice.plan(data.domain, data.n, eps), choice.total)
    out: dict[str, Any] = {"dataset": ds, "d": d, "epsilon": eps}
    for tag, (plan, predicted) in plans.items():
        errs = [sse(consistent_synopsis(data.domain, collect(data, plan, rng=seed), "calm", {}),
                    queries, truth) for seed in range(args.seeds)]
        out[tag] = {"l": plan.params["l"], "m": plan.m,
                    "oracle": sorted({g.oracle for g in plan.groups}),
                    "measured": float(np.mean(errs)), "predicted": predicted}
    return out


def rate(c: dict[str, Any], key: str) -> str:
    """A coverage rate with its 95% margin over runs."""
    if c.get(key) is None:
        return "-"
    return f"{c[key]:.1%} ±{1.96 * c[key + '_se']:.1%}"


def fmt(x: float | None, spec: str = ".3g") -> str:
    return "-" if x is None else format(x, spec)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2**16)
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--decompose", type=int, default=1,
                        help="seeds whose error is split into sources (default 1)")
    parser.add_argument("--coverage", type=int, default=0, help="coverage runs (default 0)")
    parser.add_argument("--coverage-queries", type=int, default=4)
    parser.add_argument("--coverage-settings", default="msnbc:8:1.0,msnbc:8:2.0,adult3:8:1.0")
    parser.add_argument("--coverage-methods", default="calm,pgm")
    parser.add_argument("--coverage-seed", type=int, default=1000,
                        help="seed of the first coverage collection (default 1000)")
    parser.add_argument("--coverage-fixed-queries", action="store_true",
                        help="ask the same queries in every run (default: new random "
                             "queries per run, so that the rate averages over queries)")
    parser.add_argument("--coverage-public", action="store_true",
                        help="standard errors use a 'public' sample (2^14 other rows) for "
                        "how interactions fade with their order")
    parser.add_argument("--replicates", type=int, default=REPLICATES)
    parser.add_argument("--settings", default=None, help="e.g. msnbc:16:1.0,adult3:8:0.2")
    parser.add_argument("--planner", default=None,
                        help="also compare the workload planner's plans, e.g. msnbc:8:1.0")
    parser.add_argument("--json", default=None, help="save every number here")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")

    def parse(spec: str) -> list[tuple[str, int, float]]:
        return [(s.split(":")[0], int(s.split(":")[1]), float(s.split(":")[2]))
                for s in spec.split(",") if s]

    grid = parse(args.settings) if args.settings is not None else GRID
    results = []
    print("| data | d | eps | l | m | CALM SSE | calm-pgm SSE | ratio | calm-pgm fit s "
          "| CALM noise / sampling / recon. | calm-pgm noise / sampling / recon. |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
    for ds, d, eps in grid:
        r = run_setting(ds, d, eps, args)
        results.append(r)
        src = {m: " / ".join(fmt(r[f"{m}_sources"][s], ".2e")
                             for s in ("noise", "sampling", "reconstruction"))
               if f"{m}_sources" in r else "-" for m in ("calm", "pgm")}
        print(f"| {ds} | {d} | {eps} | {r['l']} | {r['m']} | {r['calm']:.3e} | {r['pgm']:.3e} "
              f"| **{r['ratio']:.2f}** | {r['pgm_seconds']:.1f} (max {r['pgm_seconds_max']:.1f}) "
              f"| {src['calm']} | {src['pgm']} |", flush=True)
    coverage = []
    if args.coverage:
        print("\n| data | d | eps | l | runs | CALM covered | CALM reconstructed "
              "| calm-pgm covered | calm-pgm reconstructed | std seconds (calm / pgm) |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
        for ds, d, eps in parse(args.coverage_settings):
            c = run_coverage(ds, d, eps, args)
            coverage.append(c)
            print(f"| {ds} | {d} | {eps} | {c['l']} | {c['runs']} "
                  f"| {rate(c, 'calm_covered')} "
                  f"| {rate(c, 'calm_reconstructed')} ({c['reconstructed_size']}-way) "
                  f"| {rate(c, 'pgm_covered')} "
                  f"| {rate(c, 'pgm_reconstructed')} "
                  f"| {c['std_seconds']['calm']:.0f} / {c['std_seconds']['pgm']:.0f} |",
                  flush=True)
    planner = []
    if args.planner:
        print("\n| data | d | eps | CALM Alg. 1: l, m, SSE | workload (theta): l, m, oracle, "
              "predicted, measured | workload (public sample): l, m, oracle, predicted, "
              "measured |")
        print("|---|---:|---:|---|---|---|")
        for ds, d, eps in parse(args.planner):
            r = run_planner(ds, d, eps, args)
            planner.append(r)
            cells = [f"{r['calm']['l']}, {r['calm']['m']}, {r['calm']['measured']:.3g}"]
            for tag in ("theta", "public"):
                x = r[tag]
                cells.append(f"{x['l']}, {x['m']}, {'/'.join(x['oracle'])}, "
                             f"{x['predicted']:.3g}, {x['measured']:.3g}")
            print(f"| {ds} | {d} | {eps} | " + " | ".join(cells) + " |", flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"settings": results, "coverage": coverage, "planner": planner,
                       "argv": sys.argv[1:]}, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
