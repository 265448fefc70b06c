"""Counting engines: reports counted per second, peak memory, and the bincount floor.

For GRR and OUE (one group of L = 64 cells, epsilon = 1) at each ``--sizes`` n, the
reports are written once to the Parquet layout (``dpmarginals.engines.write_reports``),
then every engine counts them in a fresh subprocess pinned to 1 and to 2 cores
(``os.sched_setaffinity``, inherited by DuckDB's threads and Spark's JVM; DuckDB gets as
many threads, Spark ``local[c]``, pyarrow ``c`` threads):

* **reports/s** = n / seconds of ``count_supports`` (files -> support counts), checked
  equal to the numpy engine's counts, after a warm-up count of 1,000 reports (imports,
  first-call costs).  Spark: the second of two full counts in one session (the first
  pays JVM warm-up and code generation, shown as "cold"); session start is not timed.
  The files are in the OS page cache (they were just written or read): this measures
  decoding and counting, not the disk.
* **peak MiB**: the worker's peak resident memory (VmHWM; for Spark, plus its JVM's).
* **floor**: ``np.bincount`` on the reports already in memory, single core, same run
  (GRR: the values; OUE: the (byte column, byte value) pairs of the packed reports, i.e.
  ``OUE.support``).  "x floor" = engine seconds / floor seconds: what reading,
  decoding and the engine cost on top of the memory-bound minimum.

    PYTHONPATH=src python benchmarks/bench_engines.py --quick     # n = 10^6, ~1 minute
    PYTHONPATH=src python benchmarks/bench_engines.py             # n = 10^7 and 10^8
      flags: --sizes 1e7,1e8  --oracles grr,oue  --engines numpy,duckdb,spark
             --cores 1,2  --data DIR (reuse/keep the Parquet files)  --json FILE

Prints markdown.  Timings on a shared machine vary; the ratios within one run are the
claim.  Spark rows are skipped with a note when pyspark or Java is missing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from dpmarginals.core.domain import Domain
from dpmarginals.core.randomness import client_rng
from dpmarginals.oracles import make_oracle
from dpmarginals.protocol.plan import GroupSpec, Plan
from dpmarginals.protocol.randomizers import perturb

CELLS = 64
EPSILON = 1.0
GEN_CHUNK = 10_000_000


def bench_plan(oracle: str) -> Plan:
    domain = Domain(("a", "b", "c"), (4, 4, 4))
    return Plan("bench", EPSILON, domain, (GroupSpec(("a", "b", "c"), oracle, EPSILON, CELLS),))


def _values(n: int, start: int = 0) -> np.ndarray:
    """Deterministic skewed true values (a Zipf-like marginal)."""
    rng = np.random.default_rng([n, start])
    return (rng.zipf(1.3, size=n) - 1) % CELLS


def generate(oracle: str, n: int, root: Path) -> Path:
    """The Parquet layout of n reports (reused when complete)."""
    from dpmarginals.engines.parquet import ReportWriter, campaign_path

    done = root / f"{oracle}-{n}.done"
    cdir = campaign_path(root, f"{oracle}-{n}")
    if done.exists():
        return cdir
    shutil.rmtree(cdir, ignore_errors=True)
    plan = bench_plan(oracle)
    o = make_oracle(oracle, EPSILON, CELLS)
    with ReportWriter(plan, root, f"{oracle}-{n}") as writer:
        for start in range(0, n, GEN_CHUNK):
            size = min(GEN_CHUNK, n - start)
            writer.write(0, perturb(o, _values(size, start), client_rng(start)))
    done.touch()
    return cdir


def _rss_mib(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for c in children.get(p, []):
            out.append(c)
            todo.append(c)
    return out


# -- workers (run in subprocesses) --------------------------------------------------------
def worker_floor(oracle: str, n: int) -> dict[str, Any]:
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    o = make_oracle(oracle, EPSILON, CELLS)
    if oracle == "grr":
        data = np.concatenate([_values(min(GEN_CHUNK, n - s), s) for s in range(0, n, GEN_CHUNK)])
        start = time.perf_counter()
        counts = np.bincount(data, minlength=CELLS)
    else:
        parts = [perturb(o, _values(min(GEN_CHUNK, n - s), s), client_rng(s))
                 for s in range(0, n, GEN_CHUNK)]
        data = np.concatenate(parts)
        del parts
        start = time.perf_counter()
        counts = o.support(data)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "total": int(counts.sum())}


def worker_count(engine: str, cores: int, path: str, oracle: str, out: str) -> dict[str, Any]:
    cpus = sorted(os.sched_getaffinity(0))[:cores]
    os.sched_setaffinity(0, set(cpus))
    import pyarrow as pa

    from dpmarginals.engines import count_supports, numpy_engine  # noqa: F401 (warm imports)

    if engine == "duckdb":
        import duckdb  # noqa: F401

        from dpmarginals.engines import duckdb_engine  # noqa: F401
    pa.set_cpu_count(cores)
    pa.set_io_thread_count(cores)
    plan = bench_plan(oracle)
    kwargs: dict[str, Any] = {}
    result: dict[str, Any] = {"cpus": len(os.sched_getaffinity(0))}
    if engine == "duckdb":
        kwargs["threads"] = cores
    if engine == "spark":
        from pyspark.sql import SparkSession

        t0 = time.perf_counter()
        spark = (SparkSession.builder.master(f"local[{cores}]").appName("bench")
                 .config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.shuffle.partitions", str(cores))
                 .getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        result["session_seconds"] = time.perf_counter() - t0
        kwargs["spark"] = spark
        start = time.perf_counter()
        count_supports(plan, path, engine, **kwargs)
        result["cold_seconds"] = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as tiny:  # first-call costs (imports, caches) out
        count_supports(plan, generate(oracle, 1000, Path(tiny)), engine, **kwargs)
    start = time.perf_counter()
    supports, users = count_supports(plan, path, engine, **kwargs)
    result["seconds"] = time.perf_counter() - start
    result["peak_mib"] = _rss_mib([os.getpid(), *_descendants(os.getpid())])
    np.save(out, supports[0])
    result["users"] = int(users[0])
    if engine == "spark":
        kwargs["spark"].stop()
    return result


def _run_worker(args: list[str]) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(Path(__file__).resolve().parents[1] / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, __file__, "--worker", *args], capture_output=True,
                          text=True, env=env, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"worker {args} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _spark_missing() -> str | None:
    import importlib.util

    if importlib.util.find_spec("pyspark") is None:
        return "pyspark not installed"
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "java not installed"
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1e7,1e8")
    parser.add_argument("--oracles", default="grr,oue")
    parser.add_argument("--engines", default="numpy,duckdb,spark")
    parser.add_argument("--cores", default="1,2")
    parser.add_argument("--data", default=None, help="directory for the Parquet files (kept)")
    parser.add_argument("--json", default=None, help="also write the rows as JSON")
    parser.add_argument("--quick", action="store_true", help="n = 10^6 only")
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        kind, *rest = args.worker
        if kind == "floor":
            out = worker_floor(rest[0], int(rest[1]))
        else:
            out = worker_count(rest[0], int(rest[1]), rest[2], rest[3], rest[4])
        print(json.dumps(out))
        return
    sizes = [10**6] if args.quick else [int(float(s)) for s in args.sizes.split(",")]
    oracles = args.oracles.split(",")
    engines = args.engines.split(",")
    cores = [int(c) for c in args.cores.split(",")]
    missing = _spark_missing()
    if missing and "spark" in engines:
        print(f"_spark skipped: {missing}_\n")
        engines.remove("spark")
    data = Path(args.data) if args.data else Path(tempfile.mkdtemp(prefix="bench-engines-"))
    data.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    try:
        for oracle in oracles:
            for n in sizes:
                t0 = time.perf_counter()
                cdir = generate(oracle, n, data)
                mib = sum(f.stat().st_size for f in cdir.rglob("*.parquet")) / 2**20
                print(f"<!-- {oracle} n={n:.0e}: {mib:,.0f} MiB of Parquet "
                      f"({time.perf_counter() - t0:.0f} s to make or find) -->", flush=True)
                floor = _run_worker(["floor", oracle, str(n)])
                reference = None
                for engine in engines:
                    for c in cores:
                        out = str(data / f"counts-{engine}-{c}.npy")
                        res = _run_worker(["count", engine, str(c), str(cdir), oracle, out])
                        counts = np.load(out)
                        if reference is None:
                            reference = counts
                        equal = bool(np.array_equal(counts, reference)) and res["users"] == n
                        rows.append({"oracle": oracle, "n": n, "engine": engine, "cores": c,
                                     "parquet_mib": mib, "floor_seconds": floor["seconds"],
                                     "equal": equal, **res})
                        print(f"<!-- {oracle} {n:.0e} {engine} {c} core(s): "
                              f"{res['seconds']:.2f} s -->", flush=True)
    finally:
        if args.data is None:
            shutil.rmtree(data, ignore_errors=True)
    print()
    load = os.getloadavg()
    print(f"_machine: {os.cpu_count()} cores; load average at the end "
          f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1/5/15 min)_")
    print()
    print("| oracle | reports | engine | cores | seconds | reports/s | x floor | peak MiB |"
          " equal | notes |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        notes = []
        if "cold_seconds" in r:
            notes.append(f"cold {r['cold_seconds']:.1f} s, session {r['session_seconds']:.1f} s")
        print(f"| {r['oracle'].upper()} | {r['n']:.0e} | {r['engine']} | {r['cores']} | "
              f"{r['seconds']:.2f} | {r['n'] / r['seconds'] / 1e6:,.1f} M | "
              f"{r['seconds'] / r['floor_seconds']:.1f} | {r['peak_mib']:,.0f} | "
              f"{'yes' if r['equal'] else 'NO'} | {'; '.join(notes)} |")
    print()
    print("| oracle | reports | bincount floor (1 core, in memory) | Parquet on disk |")
    print("|---|---|---|---|")
    seen = set()
    for r in rows:
        if (r["oracle"], r["n"]) not in seen:
            seen.add((r["oracle"], r["n"]))
            print(f"| {r['oracle'].upper()} | {r['n']:.0e} | {r['floor_seconds']:.3f} s = "
                  f"{r['n'] / r['floor_seconds'] / 1e6:,.0f} M reports/s | "
                  f"{r['parquet_mib']:,.0f} MiB |")
    print()
    print("Scaling 1 -> 2 cores (speed-up of seconds):")
    print()
    print("| oracle | reports | engine | speed-up |")
    print("|---|---|---|---|")
    by = {(r["oracle"], r["n"], r["engine"], r["cores"]): r for r in rows}
    for (o, n, e, c), r in by.items():
        if c == 2 and (o, n, e, 1) in by:
            speedup = by[(o, n, e, 1)]["seconds"] / r["seconds"]
            print(f"| {o.upper()} | {n:.0e} | {e} | {speedup:.2f}x |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
