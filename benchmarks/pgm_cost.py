"""Calibrate and check the cost model of a graphical-model fit (dpmarginals.inference.pgm_cost).

Each model structure is fitted in a fresh process (JAX's persistent cache off, so the
compilation is measured) on random consistent-free measurements, for ``--iters``
iterations without the convergence criterion.  Printed per structure: the prediction
(CPU seconds: compile, per step, total; memory) next to the measurement (CPU and wall
seconds of compile and steps, the process's peak memory growth during the fit), and at the
end the constants a least-squares fit of the measurements gives, to paste into
``pgm_cost.py`` on another machine.

    PYTHONPATH=src python benchmarks/pgm_cost.py                 # every structure, ~10 min
    PYTHONPATH=src python benchmarks/pgm_cost.py --quick         # the small ones, ~2 min
    PYTHONPATH=src python benchmarks/pgm_cost.py --only chain-64-2-2 --iters 100

A structure is ``kind-a-b-c``: ``pairs-D-M-C`` (M random pairs of D attributes with C
values), ``sets-D-K-M-C`` (M random K-sets), ``chain-D-K-C`` (consecutive K-sets),
``single-D-C`` (one clique of every attribute), ``blocks-B-P-C`` (all pairs inside B
disjoint blocks of P attributes), ``calm-D-C-N`` (CALM's plan for D attributes with C
values and N users at eps 1, k 3).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

QUICK = ["chain-64-2-2", "pairs-32-40-2", "calm-16-2-65536", "calm-8-3-45222", "single-18-2",
         "chain-128-1-2", "blocks-3-8-2"]
FULL = [*QUICK, "chain-32-2-5", "sets-12-3-60-3", "calm-17-2-262144", "pairs-22-60-2",
        "pairs-32-120-2", "single-22-2", "single-24-2", "chain-24-12-2", "calm-16-2-1048576"]


def structure(name: str) -> tuple[object, list[tuple[str, ...]]]:
    from dpmarginals.core.domain import Domain

    kind, *rest = name.split("-")
    a = [int(x) for x in rest]
    rng = np.random.default_rng(0)

    def pick(sets: list[tuple[int, ...]], m: int) -> list[tuple[int, ...]]:
        return [sets[i] for i in sorted(rng.choice(len(sets), min(m, len(sets)),
                                                   replace=False))]

    if kind == "pairs":
        d, m, c = a
        sets = pick(list(itertools.combinations(range(d), 2)), m)
    elif kind == "sets":
        d, k, m, c = a
        sets = pick(list(itertools.combinations(range(d), k)), m)
    elif kind == "chain":
        d, k, c = a
        sets = [tuple(range(i, i + k)) for i in range(d - k + 1)]
    elif kind == "single":
        d, c = a
        sets = [tuple(range(d))]
    elif kind == "blocks":
        b, p, c = a
        d = b * p
        sets = [s for j in range(b) for s in itertools.combinations(range(j * p, j * p + p), 2)]
    elif kind == "calm":
        from dpmarginals.local.calm import CALM

        d, c, n = a
        dom = Domain(tuple(f"a{i}" for i in range(d)), (c,) * d)
        return dom, [g.attributes for g in CALM(1.0, k=3).plan(dom, n).groups]
    else:
        raise SystemExit(f"unknown structure {name!r}")
    dom = Domain(tuple(f"a{i}" for i in range(d)), (c,) * d)
    return dom, [tuple(f"a{i}" for i in s) for s in sets]


def child(name: str, iters: int) -> None:
    """Fit one structure and print one JSON line."""
    os.environ["DPMARGINALS_JAX_CACHE"] = "off"
    from dpmarginals.inference.pgm import fit_graphical_model, require_mbi
    from dpmarginals.inference.pgm_cost import FitWatch, predict_fit

    require_mbi()
    domain, cliques = structure(name)
    cost = predict_fit(domain, cliques, iters)
    rng = np.random.default_rng(1)
    meas = [(c, rng.dirichlet(np.ones(domain.project(c).cells())).reshape(
        domain.project(c).shape), 0.01) for c in cliques]
    marks: list[tuple[float, float]] = []

    class Marks(FitWatch):
        def __call__(self, marginals: object) -> None:
            import jax

            jax.block_until_ready(marginals)
            marks.append((time.perf_counter(), time.process_time()))

    with open("/proc/self/statm") as f:
        before = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    start = (time.perf_counter(), time.process_time())
    fit_graphical_model(domain, meas, iters=iters, tol=None, watch=Marks(cost))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    wall = np.diff([start[0]] + [m[0] for m in marks])
    cpu = np.diff([start[1]] + [m[1] for m in marks])
    block = 50
    print(json.dumps({
        "name": name, "cliques": cost.cliques, "messages": cost.messages,
        "tree_cells": cost.tree_cells, "step_cells": cost.step_cells,
        "exp_cells": cost.exp_cells, "iters": cost.iters,
        "predicted": {"compile": cost.compile_seconds, "step": cost.step_seconds,
                      "total": cost.seconds, "memory_mb": cost.memory_mb},
        "cpu": {"compile": float(cpu[0] - np.median(cpu[1:])),
                "step": float(np.median(cpu[1:]) / block), "total": float(cpu.sum())},
        "wall": {"compile": float(wall[0] - np.median(wall[1:])),
                 "step": float(np.median(wall[1:]) / block), "total": float(wall.sum())},
        "memory_mb": peak - before, "load": os.getloadavg()[0]}), flush=True)


#: How much the fitted constants are raised in pgm_cost.py, so that predictions err on the
#: safe side (compilation varies most between structures).
SAFETY = {"COMPILE": 1.5, "STEP": 1.25, "MEMORY": 1.25}


def fit_constants(rows: list[dict]) -> dict[str, float]:
    """Non-negative least squares (relative errors) of the measurements on the model's terms,
    raised by :data:`SAFETY`."""
    from scipy.optimize import nnls

    def solve(design: list[list[float]], target: list[float]) -> np.ndarray:
        a, b = np.asarray(design, float), np.asarray(target, float)
        weight = 1.0 / np.maximum(b, 1e-9)  # small and large fits count alike
        return nnls(a * weight[:, None], b * weight)[0]

    mb = 2.0**20
    comp = solve([[1.0, r["cliques"], r["messages"], r["cliques"] ** 2] for r in rows],
                 [r["cpu"]["compile"] for r in rows]) * SAFETY["COMPILE"]
    step = solve([[r["step_cells"], r["exp_cells"], r["cliques"] + r["messages"]] for r in rows],
                 [r["cpu"]["step"] for r in rows]) * SAFETY["STEP"]
    mem = solve([[1.0, r["cliques"] + r["messages"], r["cliques"] ** 2,
                  (r["step_cells"] + r["exp_cells"]) / mb, r["tree_cells"] / mb] for r in rows],
                [r["memory_mb"] for r in rows]) * SAFETY["MEMORY"]
    names = ["COMPILE_BASE", "COMPILE_PER_CLIQUE", "COMPILE_PER_MESSAGE",
             "COMPILE_PER_CLIQUE_PAIR", "STEP_PER_CELL", "STEP_PER_EXP_CELL", "STEP_PER_OP",
             "MEMORY_BASE_MB", "MEMORY_PER_OP_MB", "MEMORY_PER_CLIQUE_PAIR_MB",
             "MEMORY_BYTES_PER_CELL", "MEMORY_BYTES_PER_TREE_CELL"]
    return dict(zip(names, [*comp, *step, *mem], strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="only the small structures")
    parser.add_argument("--only", default=None, help="comma-separated structure names")
    parser.add_argument("--iters", type=int, default=150,
                        help="iterations per fit (default 150: 3 blocks)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.iters)
        return
    names = args.only.split(",") if args.only else (QUICK if args.quick else FULL)
    rows = []
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs\n")
    print("| structure | cliques | tree cells | cells/step | predicted compile / step / total "
          "CPU s | measured CPU | measured wall | ratio CPU | predicted MB | measured MB |")
    print("|---|---:|---:|---:|---|---|---|---:|---:|---:|")
    for name in names:
        out = subprocess.run([sys.executable, __file__, "--child", name, "--iters",
                              str(args.iters)], capture_output=True, text=True, check=False)
        lines = [x for x in out.stdout.splitlines() if x.startswith("{")]
        if not lines:
            print(f"| {name} | failed: {out.stderr.strip().splitlines()[-1:]} |")
            continue
        r = json.loads(lines[-1])
        rows.append(r)
        p, c, w = r["predicted"], r["cpu"], r["wall"]
        print(f"| {name} | {r['cliques']} | {r['tree_cells']:,} | {r['step_cells']:,} | "
              f"{p['compile']:.1f} / {p['step']:.2g} / {p['total']:.1f} | "
              f"{c['compile']:.1f} / {c['step']:.2g} / {c['total']:.1f} | "
              f"{w['compile']:.1f} / {w['step']:.2g} / {w['total']:.1f} | "
              f"{c['total'] / p['total']:.2f} | {p['memory_mb']:,.0f} | "
              f"{r['memory_mb']:,.0f} |", flush=True)
    print(f"\nload average at end: {os.getloadavg()[0]:.1f}")
    if len(rows) >= 4:
        print("\nconstants fitted to these measurements (CPU seconds, MB), raised by "
              f"{SAFETY}:")
        for key, value in fit_constants(rows).items():
            print(f"  {key} = {value:.3g}")


if __name__ == "__main__":
    main()
