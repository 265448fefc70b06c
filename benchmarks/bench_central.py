"""Central DP k-tuples (Gopi-Mahabadi-Yekhanin) on seeded Zipf records: stage times.

The workload of issue 21: ``--n`` records (default 10^6) over ``--items`` items (10,000);
a record's length is ``1 + Poisson(mean_length - 1)`` (mean 6) and its items are Zipf
draws (``--exponent`` 1.2: item ``i`` with probability proportional to ``(i + 1)^-1.2``),
repeats dropped; every draw from ``numpy.random.default_rng(--seed)``.  The release is the
private path (``rng=None``: OpenDP's discrete Gaussian and private quantile), ``T = 3``,
``epsilon = 1``, ``delta = 1e-7`` (below 1/n).

Prints the per-stage times of ``DPMarginals.fit`` (candidates, percentile, contribution
bounding, noise) and a reference measured in the same
process: OpenDP's ``make_gaussian`` on the largest noised vector passed as a Python list
(one cast per entry, the path before issue 21) against :func:`apply_to_vector` (the
int64 buffer, one part per core).  Absolute seconds depend on the machine's load, which
is printed with them.

    PYTHONPATH=src python benchmarks/bench_central.py                 # n = 10^6, T = 3
    PYTHONPATH=src python benchmarks/bench_central.py --engine duckdb
      flags: --n N --items I --exponent A --mean-length M --seed S --max-k T
             --epsilon E --delta D --repeats R --write FILE (the records as a .dat file,
             for `dpmarginals central --data FILE ...`)
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from dpmarginals.central.dp_marginals import DPMarginals
from dpmarginals.central.noise import apply_to_vector, gaussian_measurement
from dpmarginals.datasets.sparse import SparseRecords


def zipf_records(n: int, items: int = 10_000, exponent: float = 1.2,
                 mean_length: float = 6.0, seed: int = 0) -> SparseRecords:
    """``n`` seeded records: Poisson lengths, Zipf items over ``0..items-1``, no repeats."""
    rng = np.random.default_rng(seed)
    lengths = 1 + rng.poisson(mean_length - 1, n)
    weights = np.arange(1, items + 1, dtype=np.float64) ** -exponent  # Zipf on 1..items
    ids = rng.choice(items, int(lengths.sum()), p=weights / weights.sum())
    rows = np.repeat(np.arange(n, dtype=np.int64), lengths)
    keys = np.unique(rows * items + ids)  # sorted by (record, item), repeats dropped
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys // items, minlength=n), out=indptr[1:])
    return SparseRecords(indptr, keys % items, np.arange(items), tuple(map(str, range(items))),
                         name="zipf")


def write_dat(records: SparseRecords, path: str) -> None:
    """One line per record, its item ids separated by spaces (a transactional file)."""
    with open(path, "w") as fh:
        for i in range(records.n):
            fh.write(" ".join(map(str, records.items[records.indptr[i]:records.indptr[i + 1]])))
            fh.write("\n")


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min) on {os.cpu_count()} cores"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--exponent", type=float, default=1.2)
    parser.add_argument("--mean-length", type=float, default=6.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-k", type=int, default=3)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--delta", type=float, default=1e-7)
    parser.add_argument("--engine", default="numpy", choices=("numpy", "duckdb"))
    parser.add_argument("--threads", type=int, default=None, help="DuckDB threads (all cores)")
    parser.add_argument("--repeats", type=int, default=1, help="fits (the best is shown)")
    parser.add_argument("--write", default=None, help="also write the records to this .dat")
    args = parser.parse_args(argv)

    start = time.perf_counter()
    records = zipf_records(args.n, args.items, args.exponent, args.mean_length, args.seed)
    built = time.perf_counter() - start
    print(f"{records!r}, built in {built:.1f} s; {_load()}")
    if args.write:
        write_dat(records, args.write)
        print(f"records written to {args.write}")

    algo = DPMarginals(args.epsilon, args.delta, args.max_k)
    best, cpu, result = float("inf"), 0.0, None
    main = 0.0
    for _ in range(args.repeats):
        start, start_cpu, start_main = time.perf_counter(), time.process_time(), time.thread_time()
        res = algo.fit(records, engine=args.engine, threads=args.threads)
        seconds = time.perf_counter() - start
        if seconds < best:
            best, cpu, result = seconds, time.process_time() - start_cpu, res
            main = time.thread_time() - start_main
    assert result is not None
    print(f"\nDPMarginals.fit, private (OpenDP), engine {args.engine}, T = {args.max_k}, "
          f"epsilon = {args.epsilon}, delta = {args.delta}: {best:.2f} s wall, {cpu:.2f} s CPU "
          f"(all threads of this process; best of {args.repeats}); {_load()}")
    print(f"CPU seconds in the main thread {main:.2f}, in the others (OpenDP's noise parts, "
          f"DuckDB's workers) {cpu - main:.2f}\n")
    print("| k | found | Delta_k | candidates | implicit | candidates s | percentile s | "
          "bounding s | noise s | next s | total s |")
    print("|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    for level, t in zip(result.levels, result.timings, strict=True):
        cand = "-" if level.candidates is None else f"{level.candidates:,}"
        cells = [t.get(key, 0.0) for key in ("candidates", "percentile", "bounding", "noise",
                                              "next", "total")]
        print(f"| {level.k} | {len(level):,} | {level.contribution_bound} | {cand} | "
              f"{level.implicit} | " + " | ".join(f"{c:.2f}" for c in cells) + " |")

    # the reference: OpenDP's measurement fed a Python list, on a vector of the size of the
    # largest one the fit noised (held candidates at k = 2 here)
    size = 500_000
    scale = result.levels[min(1, len(result.levels) - 1)].noise_scale
    meas = gaussian_measurement(scale)
    counts = np.zeros(size, np.int64)
    timings = []
    for run in (lambda: np.asarray(meas(counts.tolist()), dtype=np.int64),
                lambda: apply_to_vector(meas, counts)):
        start, start_cpu = time.perf_counter(), time.process_time()
        run()
        timings.append((time.perf_counter() - start, time.process_time() - start_cpu))
    (listed, listed_cpu), (vector, vector_cpu) = timings
    print(f"\nOpenDP make_gaussian (scale {scale:.2f}) on {size:,} entries: a Python list "
          f"{listed:.2f} s wall / {listed_cpu:.2f} s CPU, apply_to_vector {vector:.2f} s wall / "
          f"{vector_cpu:.2f} s CPU: {listed / vector:.1f}x wall; {_load()}")


if __name__ == "__main__":
    main()
