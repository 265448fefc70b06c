"""CALM's pipeline against n and d: stage times, peak memory, and each stage's floor.

Every configuration runs in a fresh process (so its peak memory is its own) the same
steps as ``dpmarginals run --dataset DATA --d D --n N --k K --epsilon E --queries Q``:

* ``sample``: draw the n users from the data set's rows (``datasets.load(..., n=N)``);
* ``plan``: CALM's Algorithm 1 and the attribute sets (covering designs);
* ``collect``: split the users into groups and sample every group's noisy support;
* ``consistency``: unbias, then the consistent non-negative views;
* ``exact``: the exact answer of every query (once, shared by every method);
* ``queries``: every query answered from the synopsis (maximum entropy).

In the same process, right after, it times each stage's *floor*: what any implementation
of that stage must at least do on this machine, with numpy at memory speed.

* ``sample``: draw n uniform row numbers;
* ``plan``: none (reported as 0: planning does not depend on the data);
* ``collect``: shuffle n group labels (the random split) and ``np.bincount`` n cells over
  the plan's cells (count every report once);
* ``consistency``: one consistency projection and one Norm-Sub of every view (one round
  of the CALM/PriView alternation);
* ``exact``: one ``bincount`` of the n drawn row numbers, and one weighted ``bincount``
  over the drawn table per query;
* ``queries``: one IPF sweep per query (each constraint applied once).

The ratio of a stage to its floor is the claim (absolute seconds move with the machine's
load); ``total`` compares the whole run with the sum of the floors.

    PYTHONPATH=src DPMARGINALS_DATA=../shared/data python benchmarks/scale.py --quick
    PYTHONPATH=src DPMARGINALS_DATA=../shared/data python benchmarks/scale.py   # 2^16..2^24
    flags: --dataset kosarak --k 3 --epsilon 1 --queries 20 --seed 0 --only n|d
           --ns 16,18,20,22,24 (log2) --ds 16,32,64,128 --d 64 --n 22 (log2, the fixed ones)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from typing import Any

import numpy as np

STAGES = ("sample", "plan", "collect", "consistency", "exact", "queries")


def _clock() -> float:
    return time.perf_counter()


def measure(dataset: str, d: int, n: int, k: int, epsilon: float, queries: int,
            seed: int) -> dict[str, Any]:
    """One configuration, in this process: stage times, floors, peak memory."""
    from dpmarginals.datasets import load
    from dpmarginals.inference.consistency import _norm_sub_views
    from dpmarginals.inference.interactions import ConsistentViews
    from dpmarginals.local.calm import CALM
    from dpmarginals.local.collect import group_supports
    from dpmarginals.synopsis.evaluate import evaluate, exact_marginals, random_queries

    base = load(dataset, d=d)  # parsing the file is not a stage
    times: dict[str, float] = {}
    t = _clock()
    data = load(dataset, d=d, n=n, rng=np.random.SeedSequence([seed, 1]))
    times["sample"] = _clock() - t
    calm = CALM(epsilon=epsilon, k=k)
    t = _clock()
    plan = calm.plan(data.domain, data.n)
    times["plan"] = _clock() - t
    t = _clock()
    counts = group_supports(data, plan, rng=np.random.SeedSequence([seed, 3]))
    times["collect"] = _clock() - t
    t = _clock()
    synopsis = calm.release(plan, counts)
    times["consistency"] = _clock() - t
    asked = random_queries(data.domain, k, queries, rng=np.random.SeedSequence([seed, 2]))
    t = _clock()
    exact = exact_marginals(data, asked)
    times["exact"] = _clock() - t
    t = _clock()
    errors = evaluate(synopsis, exact, asked)
    times["queries"] = _clock() - t

    # -- floors, same process, same sizes ----------------------------------------------
    gen = np.random.default_rng(seed)
    floors: dict[str, float] = {"plan": 0.0}
    t = _clock()
    gen.integers(0, base.n, size=n, dtype=np.int32)
    floors["sample"] = _clock() - t
    cells = sum(g.cells for g in plan.groups)
    labels = (np.arange(n, dtype=np.int32) % plan.m).astype(np.int16 if plan.m <= 2**15
                                                                else np.int32)
    reports = gen.integers(0, cells, size=n, dtype=np.int32)
    t = _clock()
    gen.shuffle(labels)
    np.bincount(reports, minlength=cells)
    floors["collect"] = _clock() - t
    del labels, reports
    index_views = [(data.domain.indices(a), np.asarray(tab)) for a, tab in synopsis.views]
    lattice = ConsistentViews([a for a, _ in index_views], data.domain.sizes,
                              np.ones(len(index_views)))
    x = lattice.pack([tab for _, tab in index_views])
    ones = np.ones(len(index_views))
    t = _clock()
    _norm_sub_views(lattice, lattice.project(x), ones)
    floors["consistency"] = _clock() - t
    table, rows = data.drawn_from if data.drawn_from is not None else (data.codes, None)
    weights = np.ones(len(table)) if rows is None else np.bincount(rows, minlength=len(table))
    some_cells = gen.integers(0, 2**k, size=len(table))
    t = _clock()
    if rows is not None:
        np.bincount(rows, minlength=len(table))
    for _ in asked:
        np.bincount(some_cells, weights, minlength=2**k)
    floors["exact"] = _clock() - t
    floors["queries"] = _one_sweep_seconds(synopsis, asked)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"dataset": dataset, "d": d, "n": n, "k": k, "l": plan.params["l"], "m": plan.m,
            "rounds": synopsis.info.get("consistency_rounds"), "sse": errors.sse_mean,
            "times": times, "floors": floors, "peak_bytes": peak}


def _one_sweep_seconds(synopsis: Any, asked: list[tuple[str, ...]]) -> float:
    """Every query answered with a single IPF sweep (each constraint applied once)."""
    from dpmarginals.inference.maxent import MAXENT_TOL, _max_entropy

    domain = synopsis.domain
    views = synopsis._index_views()  # checked once, as every answer uses them
    t = _clock()
    for q in asked:
        _max_entropy(domain.indices(q), views, domain.sizes, tol=MAXENT_TOL, max_iter=1,
                     init=None, return_info=False)
    return _clock() - t


def _child(args: argparse.Namespace, d: int, logn: int) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", f"{d},{logn}", "--dataset", args.dataset,
           "--k", str(args.k), "--epsilon", str(args.epsilon), "--queries", str(args.queries),
           "--seed", str(args.seed)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=os.environ)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _table(rows: list[dict[str, Any]], vary: str) -> str:
    head = (f"| {vary} | l | m | rounds | " + " | ".join(f"{s} s (x floor)" for s in STAGES)
            + " | total s (x floor) | peak MiB |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        cells = []
        for s in STAGES:
            t, f = r["times"][s], r["floors"][s]
            cells.append(f"{t:.2f} ({t / f:.1f}x)" if f > 0 else f"{t:.2f}")
        total, floor = sum(r["times"].values()), sum(r["floors"].values())
        key = f"2^{int(np.log2(r['n']))}" if vary == "n" else str(r["d"])
        lines.append(f"| {key} | {r['l']} | {r['m']} | {r['rounds']} | " + " | ".join(cells)
                     + f" | {total:.2f} ({total / floor:.1f}x) | "
                     f"{r['peak_bytes'] / 2**20:,.0f} |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default="kosarak")
    p.add_argument("--k", type=int, default=3)
    p.add_argument("--epsilon", type=float, default=1.0)
    p.add_argument("--queries", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--d", type=int, default=64, help="d of the n sweep")
    p.add_argument("--n", type=int, default=22, help="log2 n of the d sweep")
    p.add_argument("--ns", default="16,18,20,22,24", help="log2 n values")
    p.add_argument("--ds", default="16,32,64,128")
    p.add_argument("--only", choices=("n", "d"), default=None)
    p.add_argument("--quick", action="store_true", help="n up to 2^20, d up to 64")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        d, logn = (int(v) for v in args.child.split(","))
        print(json.dumps(measure(args.dataset, d, 2**logn, args.k, args.epsilon,
                                 args.queries, args.seed)))
        return
    ns = [int(v) for v in args.ns.split(",")]
    ds = [int(v) for v in args.ds.split(",")]
    if args.quick:
        ns, ds, args.n = [v for v in ns if v <= 20], [v for v in ds if v <= 64], 20
    load = os.getloadavg()
    print(f"# CALM at scale: {args.dataset}, k={args.k}, eps={args.epsilon}, "
          f"{args.queries} queries, seed {args.seed}; load average {load[0]:.1f}, "
          f"{os.cpu_count()} CPUs\n")
    if args.only in (None, "n"):
        rows = [_child(args, args.d, v) for v in ns]
        print(f"## against n (d = {args.d})\n\n{_table(rows, 'n')}\n")
    if args.only in (None, "d"):
        rows = [_child(args, v, args.n) for v in ds]
        print(f"## against d (n = 2^{args.n})\n\n{_table(rows, 'd')}\n")


if __name__ == "__main__":
    main()
