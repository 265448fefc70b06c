"""The device clients' rates, Python and TypeScript in the same run: reports per second of
one device making one report at a time (GRR and OUE over L = 64 cells, epsilon 1), with
the platform's CSPRNG (Python: os.urandom through SecureRandom; TypeScript on Node:
crypto.getRandomValues).

Two levels, each timed for ``--seconds`` after a warm-up:

* **randomizer**: the group's report format from the record's cell to the payload (the
  word-level exact samplers; Python: ``perturb`` of one input and its JSON payload);
* **device**: a new person (``Device``, its ledger in memory) and ``Device.report``: the
  plan's checks against the cap, the charge against the total cap, the randomization,
  the atomic ledger write and a fresh report id.

    PYTHONPATH=src python benchmarks/client_rates.py [--seconds 2]

Needs Node and the TypeScript package built (``cd clients/typescript && npm ci &&
npm test``, which compiles ``build/scripts/bench.js``).
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from dpmarginals.core.domain import Domain
from dpmarginals.core.randomness import SecureRandom
from dpmarginals.protocol.device import Device, codec
from dpmarginals.protocol.plan import GroupSpec, Plan

TS = Path(__file__).resolve().parents[1] / "clients" / "typescript"


def _plan(oracle: str) -> Plan:
    dom = Domain(("x", "y"), (8, 8))
    return Plan("calm", 1.0, dom, (GroupSpec(("x", "y"), oracle, 1.0, 64),))


def _rate(body: Callable[[int], object], seconds: float) -> float:
    for i in range(200):
        body(i)
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(100):
            body(n)
            n += 1
    return n / (time.perf_counter() - start)


def python_rates(seconds: float) -> dict[str, dict[str, float]]:
    out = {}
    for oracle in ("grr", "oue"):
        plan = _plan(oracle)
        group = codec(plan).groups[0]
        fmt = group.oracle
        src = SecureRandom()

        def randomize(i: int, fmt=fmt, group=group, src=src) -> object:
            return group.payloads(fmt.perturb(np.array([i % 64]), rng=src))[0]

        def report(i: int, plan=plan) -> object:
            phone = Device(None, max_epsilon=1.0, max_total_epsilon=10.0)
            return phone.report(plan, {"x": i % 8, "y": (i >> 3) % 8}, origin="https://x",
                                campaign="c", group=0)

        out[oracle] = {"randomizer": _rate(randomize, seconds), "device": _rate(report, seconds)}
    return out


def typescript_rates(seconds: float) -> dict[str, object]:
    script = TS / "build" / "scripts" / "bench.js"
    if not script.exists():
        raise SystemExit(f"{script} is missing: cd clients/typescript && npm ci && npm test")
    out = subprocess.run(["node", str(script), str(seconds)], capture_output=True, text=True,
                         check=True, timeout=600)
    return json.loads(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()
    py = python_rates(args.seconds)
    ts = typescript_rates(args.seconds)
    print(f"Python {platform.python_version()}, numpy {np.__version__}; Node {ts['node']}; "
          f"{args.seconds:g} s per rate\n")
    print("| oracle, L = 64 | level | Python reports/s | TypeScript reports/s | TS / Python |")
    print("|---|---|---:|---:|---:|")
    for oracle in ("grr", "oue"):
        for level in ("randomizer", "device"):
            p, t = py[oracle][level], ts[oracle][level]  # type: ignore[index]
            print(f"| {oracle.upper()} | {level} | {p:,.0f} | {t:,.0f} | {t / p:,.1f}x |")


if __name__ == "__main__":
    main()
