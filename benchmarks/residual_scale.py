"""ResidualPlanner on a wide table: all 3-way marginals of ``--columns`` columns (2-10 values
each, seeded) and ``--rows`` rows, released privately (OpenDP's noise).

Prints the wall-clock and CPU seconds of the release (counting, OpenDP's measurement, the
non-negativity rounds; the workers' CPU included) and the peak resident memory of this
process and of its largest worker (``--jobs`` of them at once), beside the floor the issue
names: ``np.bincount`` of every 3-way marginal (timed on ``--floor-sample`` triples and
scaled up).  The table: column 0 uniform, column j > 0 equal to column j - 1 (mod its size)
with probability 0.5 and uniform otherwise, from ``numpy.random.default_rng(--seed)``.

    PYTHONPATH=src python benchmarks/residual_scale.py                  # 100 x 10^6
    PYTHONPATH=src python benchmarks/residual_scale.py --columns 30 --rows 100000
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import resource
import time

import numpy as np

from dpmarginals.central.residual import ResidualPlanner
from dpmarginals.core.dataset import Dataset
from dpmarginals.core.domain import Domain


def table(columns: int, rows: int, seed: int) -> Dataset:
    rng = np.random.default_rng(seed)
    sizes = rng.integers(2, 11, columns)
    codes = np.empty((rows, columns), dtype=np.uint8)  # 2-10 values
    codes[:, 0] = rng.integers(0, sizes[0], rows)
    for j in range(1, columns):
        copy = rng.random(rows) < 0.5
        codes[:, j] = np.where(copy, codes[:, j - 1] % sizes[j], rng.integers(0, sizes[j], rows))
    return Dataset(codes, Domain(tuple(f"c{j}" for j in range(columns)),
                                 tuple(int(s) for s in sizes)), name="generated")


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--columns", type=int, default=100)
    p.add_argument("--rows", type=int, default=10**6)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--epsilon", type=float, default=1.0)
    p.add_argument("--delta", type=float, default=1e-9)
    p.add_argument("--floor-sample", type=int, default=2000)
    p.add_argument("--jobs", type=int, default=None,
                   help="processes that count and draw the noise (default: per core)")
    args = p.parse_args()
    data = table(args.columns, args.rows, args.seed)
    triples = list(itertools.combinations(range(args.columns), 3))
    sample = triples[:: max(1, len(triples) // args.floor_sample)]
    columns = np.asfortranarray(data.codes)
    cpu = time.process_time()
    for a, b, c in sample:
        idx = (columns[:, a].astype(np.int64) * data.domain.sizes[b] + columns[:, b]) * \
            data.domain.sizes[c] + columns[:, c]
        np.bincount(idx)
    floor = (time.process_time() - cpu) * len(triples) / len(sample)
    method = ResidualPlanner(epsilon=args.epsilon, delta=args.delta, k=3, jobs=args.jobs)
    plan = method.plan(data.domain, data.n)
    wall, cpu, child = time.perf_counter(), time.process_time(), _children_cpu()
    synopsis = method.run(data)
    out = {"columns": args.columns, "rows": args.rows, "triples": len(triples),
           "residuals": plan.params["residuals"], "coefficients": plan.params["coefficients"],
           "release_wall_seconds": time.perf_counter() - wall,
           "release_cpu_seconds": time.process_time() - cpu + _children_cpu() - child,
           "bincount_floor_cpu_seconds": floor,
           "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
           "worker_peak_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
           "privacy_map_rho": synopsis.info["privacy_map_rho"], "rho": method.rho,
           "measure_seconds": synopsis.info["measure_seconds"],
           "nonneg_seconds": synopsis.info.get("nonneg_seconds"),
           "nonneg_rounds": synopsis.info.get("nonneg_rounds"),
           "uniform_mix": synopsis.info.get("uniform_mix"),
           "per_answer_norm_sub": synopsis.info.get("per_answer_norm_sub"),
           "opendp_parts": synopsis.info.get("opendp_parts"),
           "load_average": os.getloadavg()[0]}
    w = ("c0", "c1", "c2")
    truth = data.counts(list(w))
    out["example_tvd_c0_c1_c2"] = float(0.5 * np.abs(
        synopsis.marginal(list(w)).values - truth / truth.sum()).sum())
    out["example_std_c0_c1_c2"] = float(synopsis.measurement_std(list(w)).flat[0])
    out["cells_example"] = math.prod(data.domain.sizes[:3])
    print(json.dumps(out))


if __name__ == "__main__":
    main()
