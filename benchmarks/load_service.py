"""Load test of the collection service on loopback: sustained reports/s and latency.

Starts ``dpmarginals serve`` (uvicorn, SQLite in WAL mode in a temporary directory) on
127.0.0.1 at a free port, creates a campaign with a CALM plan over a domain shaped like
UCI Adult (15 attributes, 2-42 values, so OUE payloads of up to 168 bytes), then posts
pre-made reports from ``--connections`` concurrent keep-alive connections:

* **single**: one report per request;
* **batched**: ``--batch`` reports per request (and again from one connection, which shows
  a request's own latency without queueing behind the others).

Each phase is bounded by ``--count`` reports and ``--seconds`` of wall time.  It prints the
sustained rate (acknowledged reports / wall time), the request latency percentiles, and,
as the in-process reference, the rate of the same batches going straight into the store
(decode + count + commit, no HTTP), so "HTTP / store" says what the web layer costs.
Every acknowledged report is durable (committed, ``synchronous=FULL`` by default) before
its answer.  The server and this load generator share the machine's cores.

    PYTHONPATH=src python benchmarks/load_service.py                 # about a minute
    PYTHONPATH=src python benchmarks/load_service.py --quick         # a few seconds
      flags: --count N --seconds S --batch B --connections C --sync full|normal
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from dpmarginals.core.domain import Domain
from dpmarginals.local.calm import CALM
from dpmarginals.protocol.client import make_reports
from dpmarginals.protocol.reports import PlanCodec
from dpmarginals.service.store import SQLiteStore

ADULT_SIZES = {"age": 32, "workclass": 9, "fnlwgt": 32, "education": 16, "education-num": 16,
               "marital-status": 7, "occupation": 15, "relationship": 6, "race": 5, "sex": 2,
               "capital-gain": 32, "capital-loss": 32, "hours-per-week": 32,
               "native-country": 42, "income": 2}
TOKEN = "load-test-token"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_server(db: Path, port: int, sync: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(Path(__file__).resolve().parents[1] / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(
        [sys.executable, "-m", "dpmarginals.cli", "serve", "--db", str(db),
         "--host", "127.0.0.1", "--port", str(port), "--admin-token", TOKEN, "--sync", sync],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                conn.close()
                return proc
        except OSError:
            time.sleep(0.1)
        if proc.poll() is not None:
            raise SystemExit(f"server exited: {proc.stderr.read().decode() if proc.stderr else ''}")
    proc.kill()
    raise SystemExit("server did not start within 30 s")


def _request(conn: http.client.HTTPConnection, method: str, path: str, body: bytes | None,
             headers: dict[str, str]) -> tuple[int, bytes]:
    conn.request(method, path, body=body, headers=headers)
    resp = conn.getresponse()
    return resp.status, resp.read()


def _phase(port: int, bodies: list[bytes], per_body: int, path: str, connections: int,
           seconds: float) -> dict[str, float]:
    """Post ``bodies`` from ``connections`` threads until done or ``seconds`` have passed."""
    lock = threading.Lock()
    cursor = [0]
    latencies: list[float] = []
    failures = [0]
    deadline = time.perf_counter() + seconds
    headers = {"Content-Type": "application/json"}

    def worker() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        mine: list[float] = []
        while time.perf_counter() < deadline:
            with lock:
                i = cursor[0]
                cursor[0] += 1
            if i >= len(bodies):
                break
            start = time.perf_counter()
            status, _ = _request(conn, "POST", path, bodies[i], headers)
            mine.append(time.perf_counter() - start)
            if status != 201:
                with lock:
                    failures[0] += 1
        conn.close()
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=worker) for _ in range(connections)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    lat = np.asarray(latencies) * 1e3
    ok = (len(latencies) - failures[0]) * per_body
    return {"reports": ok, "requests": len(latencies), "failures": failures[0], "seconds": wall,
            "rate": ok / wall, "p50": float(np.percentile(lat, 50)),
            "p99": float(np.percentile(lat, 99)), "max": float(lat.max())}


def _store_reference(plan_dict: dict, reports: list[dict], batch: int, sync: str,
                     connections: int, seconds: float) -> float:
    """Reports/s of decode + count + commit straight into a store (no HTTP), from
    ``connections`` threads as the server's request threads would (group commit)."""
    from dpmarginals.protocol.plan import Plan

    plan = Plan.from_dict(plan_dict)
    chunks = [reports[i : i + batch] for i in range(0, len(reports), batch)]
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(Path(tmp) / "ref.db", synchronous=sync)
        campaign, _ = store.create_campaign("ref", plan)
        codec = PlanCodec(plan)
        lock, cursor, done = threading.Lock(), [0], [0]
        start = time.perf_counter()
        deadline = start + seconds

        def worker() -> None:
            while time.perf_counter() < deadline:
                with lock:
                    i = cursor[0]
                    cursor[0] += 1
                if i >= len(chunks):
                    return
                store.add_reports(campaign, codec.decode(chunks[i]))
                with lock:
                    done[0] += len(chunks[i])

        threads = [threading.Thread(target=worker) for _ in range(connections)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        rate = done[0] / (time.perf_counter() - start)
        store.close()
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=200_000,
                        help="reports per batched phase (default 200,000)")
    parser.add_argument("--single-count", type=int, default=20_000,
                        help="reports for the single phase (default 20,000)")
    parser.add_argument("--seconds", type=float, default=30.0, help="time cap per phase")
    parser.add_argument("--batch", type=int, default=500, help="reports per batch (default 500)")
    parser.add_argument("--connections", type=int, default=8, help="concurrent connections")
    parser.add_argument("--sync", choices=("full", "normal"), default="full")
    parser.add_argument("--quick", action="store_true", help="small counts, a few seconds")
    args = parser.parse_args()
    if args.quick:
        args.count, args.single_count, args.seconds = 20_000, 2_000, 10.0

    domain = Domain(tuple(ADULT_SIZES), tuple(ADULT_SIZES.values()))
    plan = CALM(epsilon=1.0, k=2).plan(domain, 48_842)
    rng = np.random.default_rng(7)
    serial_count = args.count // 4
    total = args.count + args.single_count + serial_count
    records = rng.integers(0, domain.sizes, size=(total, len(domain)))
    print(f"making {total:,} reports ...", file=sys.stderr)
    reports = make_reports(plan, records, max_epsilon=1.0, rng=rng)
    batched = reports[: args.count]
    singles = reports[args.count : args.count + args.single_count]
    serials = reports[args.count + args.single_count :]

    def bodies(items: list[dict]) -> list[bytes]:
        return [json.dumps({"reports": items[i : i + args.batch]}).encode()
                for i in range(0, len(items), args.batch)]

    batch_bodies, serial_bodies = bodies(batched), bodies(serials)
    single_bodies = [json.dumps(r).encode() for r in singles]

    with tempfile.TemporaryDirectory() as tmp:
        port = _free_port()
        server = _start_server(Path(tmp) / "load.db", port, args.sync)
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            status, body = _request(conn, "POST", "/campaigns",
                                    json.dumps({"id": "load", "plan": plan.to_dict()}).encode(),
                                    {"Authorization": f"Bearer {TOKEN}",
                                     "Content-Type": "application/json"})
            if status != 201:
                raise SystemExit(f"cannot create the campaign: {status} {body[:200]!r}")
            path = "/campaigns/load/reports"
            single = _phase(port, single_bodies, 1, path, args.connections, args.seconds)
            batch = _phase(port, batch_bodies, args.batch, path + "/batch", args.connections,
                           args.seconds)
            serial = _phase(port, serial_bodies, args.batch, path + "/batch", 1, args.seconds)
            conn.close()  # idle past the keep-alive timeout by now
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            status, body = _request(conn, "GET", "/campaigns/load/status", None, {})
            stored = json.loads(body)["reports"]
            conn.close()
        finally:
            server.terminate()
            server.wait(timeout=30)
    reference = _store_reference(plan.to_dict(), batched, args.batch, args.sync,
                                 args.connections, args.seconds)

    print(f"\n## Collection service on loopback ({os.cpu_count()} cores shared by server and "
          f"load), SQLite WAL synchronous={args.sync.upper()}, {plan.m} groups\n")
    print("| posts | connections | reports | requests | s | reports/s | p50 ms | p99 ms | max ms "
          "| non-201 |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    rows = (("single", single, args.connections), (f"batch of {args.batch}", batch,
                                                   args.connections),
            (f"batch of {args.batch}", serial, 1))
    for name, r, conns in rows:
        print(f"| {name} | {conns} | {r['reports']:,} | {r['requests']:,} | {r['seconds']:.1f} | "
              f"{r['rate']:,.0f} | {r['p50']:.1f} | {r['p99']:.1f} | {r['max']:.1f} | "
              f"{r['failures']} |")
    print(f"\nStore alone (the same batches from {args.connections} threads: decode + count + "
          f"commit in-process, no HTTP): {reference:,.0f} reports/s; batched HTTP / store = "
          f"{batch['rate'] / reference:.2f}")
    acked = single["reports"] + batch["reports"] + serial["reports"]
    print(f"Stored after the run: {stored:,} (acknowledged: {acked:,})")
    if stored != acked:
        raise SystemExit("stored count differs from the acknowledged count")


if __name__ == "__main__":
    main()
