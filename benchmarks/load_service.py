"""The collection service in the open, measured next to the previous release (issue 17).

Runs the same experiments against two servers started the same way (``dpmarginals serve``
on 127.0.0.1, SQLite WAL ``synchronous=FULL`` in a temporary directory):

* **before**: the code at ``--old-commit`` (default e77eab2, the release issue 17 was
  measured on), extracted with ``git archive`` into a temporary directory;
* **after**: this checkout.

Experiments (each bounded in count and time):

1. **ingestion**: pre-made reports of a CALM plan over a domain shaped like UCI Adult (15
   attributes, 48 groups, OUE payloads up to 168 bytes) posted singly and in batches of
   ``--batch`` from ``--connections`` keep-alive connections, and in batches from one
   connection.  After: with their tickets (fetched beforehand; the ticket rate is shown).
2. **reads under load**: the batched phase again while ``--readers`` threads read a 2-way
   marginal in a loop: read latency p50/p99 and ingestion with readers / without.
3. **poisoning**: Adult (20,000 users sampled from the real file), CALM epsilon 1, k 2;
   the attacker adds 1% crafted reports that support only one cell of a 2-way marginal
   (the cell whose truth is nearest 0.054, as in the issue).  Before: posted into the
   target group.  After: (a) without tickets; (b) with 1% of the tickets, wherever the
   server assigned them; (c) with 200 tickets of the target group (asking ~m times as
   many assignments, what a per-source ticket limit refuses) and naive payloads (only the
   target bit/value); (d) as (c) with payloads that mimic honest ones (the target plus
   the honest number of other bits).  The released cell before and after each attack,
   the truth, and the standard error of the released cell (the standard deviation over
   ``--replicates`` honest collections, in process) are printed.
4. **memory**: 12 concurrent 8 MiB bodies of ``{}`` objects: the growth of the server's
   peak RSS.

    PYTHONPATH=src python benchmarks/load_service.py --quick     # a few minutes
    PYTHONPATH=src python benchmarks/load_service.py             # about ten minutes
      flags: --only before|after --skip load,poisoning,memory --count N --seconds S ...
"""

from __future__ import annotations

import argparse
import http.client
import io
import json
import os
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from dpmarginals.service.poisoning import crafted_reports  # the attack the check is tried on

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "load-test-token"
ADULT = "adult"


# -- servers ------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def old_source(commit: str, into: Path) -> Path:
    """``src/`` of ``commit`` extracted from this repository (git archive)."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", commit, "src"],
                             capture_output=True, check=True).stdout
    target = into / f"dpmarginals-{commit}"
    target.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(target, filter="data")
    return target / "src"


class Server:
    """``dpmarginals serve`` from ``src`` in a subprocess; ``old`` takes the token on argv."""

    def __init__(self, src: Path, db: Path, *, old: bool, extra: tuple[str, ...] = ()) -> None:
        self.port = _free_port()
        self.old = old
        env = {**os.environ, "PYTHONPATH": str(src), "DPMARGINALS_ADMIN_TOKEN": TOKEN}
        args = [sys.executable, "-m", "dpmarginals.cli", "serve", "--db", str(db), "--host",
                "127.0.0.1", "--port", str(self.port), "--sync", "full"]
        if old:
            args += ["--admin-token", TOKEN]
        else:
            args += ["--rate-limit", "0", "--ticket-rate", "0", *extra]
        self.proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if self.call("GET", "/health")[0] == 200:
                    return
            except OSError:
                time.sleep(0.1)
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                raise SystemExit(f"server exited: {err[-2000:]}")
        self.proc.kill()
        raise SystemExit("server did not start within 60 s")

    def call(self, method: str, path: str, body: Any = None, *, admin: bool = False,
             raw: bytes | None = None, timeout: float = 300) -> tuple[int, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        headers = {"Content-Type": "application/json"}
        if admin:
            headers["Authorization"] = f"Bearer {TOKEN}"
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        try:
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            text = resp.read()
        finally:
            conn.close()
        try:
            return resp.status, json.loads(text)
        except ValueError:
            return resp.status, text.decode(errors="replace")

    def create(self, name: str, plan: Any, settings: dict | None = None) -> None:
        body: dict[str, Any] = {"id": name, "plan": plan.to_dict()}
        if not self.old:
            body["settings"] = settings or {}
        status, answer = self.call("POST", "/campaigns", body, admin=True)
        if status != 201:
            raise SystemExit(f"cannot create {name}: {status} {str(answer)[:300]}")

    def assign(self, name: str, count: int) -> tuple[list[int], list[str] | None]:
        groups: list[int] = []
        tickets: list[str] = []
        for start in range(0, count, 10_000):
            part = min(10_000, count - start)
            status, answer = self.call("GET", f"/campaigns/{name}/assignment?count={part}")
            if status != 200:
                raise SystemExit(f"assignment failed: {status} {str(answer)[:300]}")
            groups += answer["groups"]
            tickets += answer.get("tickets", [])
        return groups, (tickets or None)

    def post_batches(self, name: str, reports: list[dict], batch: int = 5000) -> list[int]:
        out = []
        for start in range(0, len(reports), batch):
            status, _ = self.call("POST", f"/campaigns/{name}/reports/batch",
                                  {"reports": reports[start : start + batch]})
            out.append(status)
        return out

    def marginal(self, name: str, attrs: list[str], reports: int | None = None) -> dict:
        """The marginal (after: once the release covers ``reports`` reports)."""
        deadline = time.monotonic() + 300
        path = f"/campaigns/{name}/marginals?attributes={','.join(attrs)}"
        while True:
            status, answer = self.call("GET", path, admin=True)
            done = status == 200 and (reports is None or answer["reports"] == reports)
            if done or time.monotonic() > deadline:
                if status != 200:
                    raise SystemExit(f"marginal failed: {status} {str(answer)[:300]}")
                return answer
            time.sleep(0.1)

    def peak_rss_mib(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _ticketed(reports: list[dict], tickets: list[str] | None) -> list[dict]:
    if tickets is None:
        return reports
    return [{**r, "ticket": t} for r, t in zip(reports, tickets, strict=True)]


# -- 1-2. ingestion and reads under load ------------------------------------------------------
def _phase(port: int, bodies: list[bytes], per_body: int, path: str, connections: int,
           seconds: float, readers: int = 0, read_path: str = "", read_rate: float = 10.0
           ) -> dict[str, float]:
    """Post ``bodies`` from ``connections`` threads (and read ``read_path`` from
    ``readers`` threads meanwhile, each at most ``read_rate`` reads a second) until done
    or ``seconds`` have passed."""
    lock = threading.Lock()
    cursor = [0]
    latencies: list[float] = []
    reads: list[float] = []
    failures = [0]
    done = threading.Event()
    deadline = time.perf_counter() + seconds
    headers = {"Content-Type": "application/json"}
    read_headers = {"Authorization": f"Bearer {TOKEN}"}

    def worker() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        mine: list[float] = []
        while time.perf_counter() < deadline:
            with lock:
                i = cursor[0]
                cursor[0] += 1
            if i >= len(bodies):
                break
            start = time.perf_counter()
            conn.request("POST", path, body=bodies[i], headers=headers)
            resp = conn.getresponse()
            resp.read()
            mine.append(time.perf_counter() - start)
            if resp.status != 201:
                with lock:
                    failures[0] += 1
        conn.close()
        with lock:
            latencies.extend(mine)

    def reader() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        mine: list[float] = []
        while not done.is_set() and time.perf_counter() < deadline:
            start = time.perf_counter()
            conn.request("GET", read_path, headers=read_headers)
            resp = conn.getresponse()
            resp.read()
            took = time.perf_counter() - start
            if resp.status == 200:
                mine.append(took)
            done.wait(max(0.0, 1.0 / read_rate - took))
        conn.close()
        with lock:
            reads.extend(mine)

    writers = [threading.Thread(target=worker) for _ in range(connections)]
    others = [threading.Thread(target=reader) for _ in range(readers)]
    start = time.perf_counter()
    for t in writers + others:
        t.start()
    for t in writers:
        t.join()
    wall = time.perf_counter() - start
    done.set()
    for t in others:
        t.join()
    lat = np.asarray(latencies) * 1e3
    ok = (len(latencies) - failures[0]) * per_body
    out = {"reports": ok, "requests": len(latencies), "failures": failures[0], "seconds": wall,
           "rate": ok / wall, "p50": float(np.percentile(lat, 50)),
           "p99": float(np.percentile(lat, 99))}
    if readers:
        r = np.asarray(reads) * 1e3 if reads else np.asarray([np.nan])
        out.update(reads=len(reads), read_p50=float(np.nanpercentile(r, 50)),
                   read_p99=float(np.nanpercentile(r, 99)))
    return out


def load_experiment(server: Server, args: argparse.Namespace) -> dict[str, Any]:
    from dpmarginals.core.domain import Domain
    from dpmarginals.local.calm import CALM
    from dpmarginals.protocol.simulate import simulate_reports

    sizes = {"age": 32, "workclass": 9, "fnlwgt": 32, "education": 16, "education-num": 16,
             "marital-status": 7, "occupation": 15, "relationship": 6, "race": 5, "sex": 2,
             "capital-gain": 32, "capital-loss": 32, "hours-per-week": 32,
             "native-country": 42, "income": 2}
    domain = Domain(tuple(sizes), tuple(sizes.values()))
    plan = CALM(epsilon=1.0, k=2).plan(domain, 48_842)
    server.create("load", plan)
    counts = {"single": args.single_count, "batch": args.count, "serial": args.count // 4,
              "readers": args.count, "after_readers": args.count}
    total = sum(counts.values())
    start = time.perf_counter()
    groups, tickets = server.assign("load", total)
    assign_seconds = time.perf_counter() - start
    rng = np.random.default_rng(7)
    records = rng.integers(0, domain.sizes, size=(total, len(domain)))
    reports = _ticketed(simulate_reports(plan, records, max_epsilon=1.0, rng=rng,
                                     groups=np.asarray(groups)), tickets)
    parts, at = {}, 0
    for key, n in counts.items():
        parts[key], at = reports[at : at + n], at + n

    def bodies(items: list[dict]) -> list[bytes]:
        return [json.dumps({"reports": items[i : i + args.batch]}).encode()
                for i in range(0, len(items), args.batch)]

    path = "/campaigns/load/reports"
    out: dict[str, Any] = {"assign_rate": total / assign_seconds}
    out["single"] = _phase(server.port, [json.dumps(r).encode() for r in parts["single"]], 1,
                           path, args.connections, args.seconds)
    out["batch"] = _phase(server.port, bodies(parts["batch"]), args.batch, path + "/batch",
                          args.connections, args.seconds)
    out["serial"] = _phase(server.port, bodies(parts["serial"]), args.batch, path + "/batch",
                           1, args.seconds)
    read_path = "/campaigns/load/marginals?attributes=age,sex"
    server.marginal("load", ["age", "sex"])  # the first release (before: a first read)
    out["readers"] = _phase(server.port, bodies(parts["readers"]), args.batch,
                            path + "/batch", args.connections, args.seconds,
                            readers=args.readers, read_path=read_path,
                            read_rate=args.read_rate)
    out["after_readers"] = _phase(server.port, bodies(parts["after_readers"]), args.batch,
                                  path + "/batch", args.connections, args.seconds)
    _, answer = server.call("GET", "/campaigns/load/status", admin=True)
    out["stored"] = answer["reports"]
    out["acked"] = sum(out[k]["reports"] for k in counts)
    return out


# -- 3. poisoning -----------------------------------------------------------------------------
def _target(plan: Any, data: Any) -> tuple[int, tuple[str, ...], int, float]:
    """The 2-way group and cell whose true frequency is nearest 0.054."""
    best = None
    for g, spec in enumerate(plan.groups):
        if len(spec.attributes) != 2:
            continue
        truth = data.marginal(list(spec.attributes)).values.ravel()
        cell = int(np.argmin(np.abs(truth - 0.054)))
        if best is None or abs(truth[cell] - 0.054) < abs(best[3] - 0.054):
            best = (g, tuple(spec.attributes), cell, float(truth[cell]))
    assert best is not None
    return best


def poisoning_setup(args: argparse.Namespace) -> dict[str, Any]:
    from dpmarginals.aggregation import synopsis_from_counts
    from dpmarginals.core.dataset import Dataset
    from dpmarginals.core.domain import Domain
    from dpmarginals.core.records import read_records
    from dpmarginals.local.calm import CALM
    from dpmarginals.protocol.reports import support_counts
    from dpmarginals.protocol.simulate import simulate_reports

    home = Path(os.environ.get("DPMARGINALS_DATA", "/work/shared/data")) / ADULT
    domain = Domain.load(home / "adult-domain.json")
    n = args.users
    plan = CALM(epsilon=1.0, k=2).plan(domain, n)
    everyone = read_records(home / "adult.csv.gz", plan.domain,
                            extra_columns="ignore").codes
    rng = np.random.default_rng(0)
    records = everyone[rng.choice(len(everyone), n, replace=False)]
    group, attrs, cell, truth = _target(plan, Dataset(records, domain))
    released = []
    for seed in range(args.replicates):  # honest collections: the release's spread
        groups = np.random.default_rng(100 + seed).permutation(np.arange(n) % plan.m)
        reports = simulate_reports(plan, records, max_epsilon=1.0, rng=100 + seed, groups=groups)
        synopsis = synopsis_from_counts(plan, support_counts(plan, reports))
        released.append(synopsis.marginal(list(attrs)).values.ravel()[cell])
    return {"plan": plan, "records": records, "group": group, "attrs": attrs, "cell": cell,
            "truth": truth, "se": float(np.std(released, ddof=1)),
            "honest_mean": float(np.mean(released)), "attackers": max(1, n // 100)}


def _honest(server: Server, name: str, setup: dict, seed: int) -> int:
    from dpmarginals.protocol.simulate import simulate_reports

    plan, records = setup["plan"], setup["records"]
    groups, tickets = server.assign(name, len(records))
    reports = _ticketed(simulate_reports(plan, records, max_epsilon=1.0, rng=seed,
                                     groups=np.asarray(groups)), tickets)
    statuses = server.post_batches(name, reports)
    assert set(statuses) == {201}, statuses
    return len(reports)


def poisoning_experiment(server: Server, setup: dict) -> list[dict[str, Any]]:
    plan, group, cell = setup["plan"], setup["group"], setup["cell"]
    attrs, k = list(setup["attrs"]), setup["attackers"]
    rng = np.random.default_rng(42)
    rows = []

    def run(name: str, label: str, attack: Any) -> None:
        server.create(name, plan, {"refresh_seconds": 0})
        n = _honest(server, name, setup, seed=zlib.crc32(name.encode()))
        before = server.marginal(name, attrs, n)
        stored, note = attack(name)
        after = server.marginal(name, attrs, n + stored if not server.old else None)
        release = after.get("release", {})
        rows.append({"scenario": label, "stored": stored, "note": note,
                     "before": before["values"][cell], "after": after["values"][cell],
                     "flagged": release.get("flagged_groups"),
                     "excluded": release.get("excluded_groups")})

    def into_target(mimic: bool, tickets: bool) -> Any:
        def attack(name: str) -> tuple[int, str]:
            crafted = crafted_reports(plan, group, cell, k, mimic=mimic, rng=rng)
            note = ""
            if tickets:  # ask until k tickets of the target group are held
                held: list[str] = []
                asked = 0
                while len(held) < k:
                    groups, got = server.assign(name, 1000)
                    asked += 1000
                    held += [t for g, t in zip(groups, got, strict=True) if g == group]
                crafted = _ticketed(crafted, held[:k])
                note = f"asked {asked:,} assignments for {k} target tickets"
            statuses = server.post_batches(name, crafted)
            stored = k if statuses == [201] else 0
            return stored, note or f"HTTP {statuses[0]}"
        return attack

    def spread(name: str) -> tuple[int, str]:
        groups, tickets = server.assign(name, k)
        crafted = []
        for g, t in zip(groups, tickets or [None] * k, strict=True):
            if g == group:
                report = crafted_reports(plan, g, cell, 1, mimic=True, rng=rng)[0]
            else:  # elsewhere: a report that looks honest (any cell)
                other = int(rng.integers(0, plan.groups[g].cells))
                report = crafted_reports(plan, g, other, 1, mimic=True, rng=rng)[0]
            crafted.append(report if t is None else {**report, "ticket": t})
        statuses = server.post_batches(name, crafted)
        hits = sum(1 for g in groups if g == group)
        return (k if statuses == [201] else 0), f"{hits} of {k} landed in the target group"

    if server.old:
        run("p-naive", "1% crafted into the target group", into_target(False, False))
    else:
        run("p-untick", "(a) 1% crafted, no tickets", into_target(False, False))
        run("p-spread", "(b) 1% of the tickets, groups as assigned", spread)
        run("p-naive", "(c) 1% crafted, target tickets, naive", into_target(False, True))
        run("p-mimic", "(d) 1% crafted, target tickets, mimic", into_target(True, True))
    return rows


# -- 4. memory ----------------------------------------------------------------------------------
def memory_experiment(server: Server) -> dict[str, Any]:
    from dpmarginals.core.domain import Domain
    from dpmarginals.protocol.plan import GroupSpec, Plan

    domain = Domain(("a", "b"), (2, 3))
    server.create("mem", Plan("calm", 1.0, domain, (GroupSpec(("a", "b"), "grr", 1.0, 6),)))
    before = server.peak_rss_mib()
    size = (8 << 20) - 64
    body = b'{"reports":[' + b"{}," * ((size - 16) // 3) + b"{}]}"
    statuses: list[int] = []
    lock = threading.Lock()

    def post() -> None:
        try:
            status, _ = server.call("POST", "/campaigns/mem/reports/batch", raw=body)
        except OSError:
            status = 0  # answered before the body was sent, then closed
        with lock:
            statuses.append(status)

    threads = [threading.Thread(target=post) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"growth": server.peak_rss_mib() - before, "statuses": sorted(set(statuses))}


# -- the report -----------------------------------------------------------------------------------
def _fmt(value: Any, spec: str = ",.0f") -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and np.isnan(value):
        return "-"
    return format(value, spec)


def report(results: dict[str, dict[str, Any]], setup: dict | None, args: argparse.Namespace
           ) -> None:
    sides = [s for s in ("before", "after") if s in results]
    print(f"\n## Collection service, before ({args.old_commit}) and after, on "
          f"{os.cpu_count()} cores shared by server and load; SQLite WAL synchronous=FULL\n")
    if all("load" in results[s] for s in sides):
        print("| measure | " + " | ".join(sides) + " |")
        print("|---|" + "---:|" * len(sides))
        rows = [("single posts, 8 connections: reports/s", "single", "rate", ",.0f"),
                ("single posts: p99 ms", "single", "p99", ".1f"),
                (f"batches of {args.batch}, 8 connections: reports/s", "batch", "rate", ",.0f"),
                (f"batches of {args.batch}, 1 connection: reports/s", "serial", "rate", ",.0f"),
                (f"batches, 8 connections + {args.readers} readers (each <= "
                 f"{args.read_rate:g} reads/s): reports/s", "readers", "rate", ",.0f"),
                ("reads of a 2-way marginal under that load: count", "readers", "reads", ",.0f"),
                ("read p50 ms", "readers", "read_p50", ",.1f"),
                ("read p99 ms", "readers", "read_p99", ",.1f")]
        for label, key, field, spec in rows:
            print(f"| {label} | " + " | ".join(_fmt(results[s]["load"][key].get(field), spec)
                                                for s in sides) + " |")
        print("| batches, 8 connections, after the readers left: reports/s | " + " | ".join(
            _fmt(results[s]["load"]["after_readers"]["rate"]) for s in sides) + " |")
        print("| ingestion with readers / without (the mean of the phases before and after) | "
              + " | ".join(_fmt(2 * results[s]["load"]["readers"]["rate"] / (
                  results[s]["load"]["batch"]["rate"]
                  + results[s]["load"]["after_readers"]["rate"]), ".2f") for s in sides)
              + " |")
        print("| tickets handed out per second (one /assignment?count=10000 a request) | "
              + " | ".join(_fmt(results[s]["load"]["assign_rate"]) if s == "after" else "-"
                           for s in sides) + " |")
        print("| stored = acknowledged | " + " | ".join(
            str(results[s]["load"]["stored"] == results[s]["load"]["acked"]) for s in sides)
              + " |")
    if all("memory" in results[s] for s in sides):
        print("| 12 concurrent 8 MiB bodies: peak RSS growth MiB | " + " | ".join(
            _fmt(results[s]["memory"]["growth"]) for s in sides) + " |")
        print("| ... their answers | " + " | ".join(
            " ".join(map(str, results[s]["memory"]["statuses"])) for s in sides) + " |")
    if setup is not None:
        print(f"\n### Poisoning: Adult, {args.users:,} users, CALM epsilon 1 k 2 "
              f"({setup['plan'].m} groups); target {','.join(setup['attrs'])} cell "
              f"{setup['cell']}: truth {setup['truth']:.4f}; honest releases "
              f"{setup['honest_mean']:.4f} +- {setup['se']:.4f} (standard error over "
              f"{args.replicates} collections); attacker: {setup['attackers']} reports\n")
        print("| code | scenario | stored | cell before attack | after | shift / SE | "
              "flagged | excluded | note |")
        print("|---|---|---:|---:|---:|---:|---|---|---|")
        for side in sides:
            for row in results[side].get("poisoning", []):
                shift = (row["after"] - row["before"]) / setup["se"]
                print(f"| {side} | {row['scenario']} | {row['stored']} | {row['before']:.4f} | "
                      f"{row['after']:.4f} | {shift:+.1f} | {row['flagged'] or '-'} | "
                      f"{row['excluded'] or '-'} | {row['note']} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old-commit", default="e77eab2")
    parser.add_argument("--only", choices=("before", "after"), default=None)
    parser.add_argument("--skip", default="", help="comma-separated: load,poisoning,memory")
    parser.add_argument("--count", type=int, default=200_000, help="reports per batched phase")
    parser.add_argument("--single-count", type=int, default=20_000)
    parser.add_argument("--seconds", type=float, default=30.0, help="time cap per phase")
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--readers", type=int, default=4)
    parser.add_argument("--read-rate", type=float, default=10.0,
                        help="reads a second per reader at most (default 10)")
    parser.add_argument("--users", type=int, default=20_000, help="poisoning: Adult users")
    parser.add_argument("--replicates", type=int, default=20,
                        help="poisoning: honest collections for the standard error")
    parser.add_argument("--quick", action="store_true", help="small counts")
    args = parser.parse_args()
    if args.quick:
        args.count, args.single_count, args.seconds, args.replicates = 40_000, 2_000, 15.0, 8
    skip = set(filter(None, args.skip.split(",")))
    sides = [args.only] if args.only else ["before", "after"]
    setup = None if "poisoning" in skip else poisoning_setup(args)
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for side in sides:
            old = side == "before"
            src = old_source(args.old_commit, Path(tmp)) if old else ROOT / "src"
            print(f"{side}: {src}", file=sys.stderr)
            results[side] = {}
            for part in ("load", "memory", "poisoning"):
                if part in skip:
                    continue
                server = Server(src, Path(tmp) / f"{side}-{part}.db", old=old)
                try:
                    if part == "load":
                        results[side]["load"] = load_experiment(server, args)
                    elif part == "memory":
                        results[side]["memory"] = memory_experiment(server)
                    else:
                        results[side]["poisoning"] = poisoning_experiment(server, setup)
                finally:
                    server.stop()
                print(f"  {part} done", file=sys.stderr)
    report(results, setup, args)


if __name__ == "__main__":
    main()
