"""Throughput of the frequency oracles against pure-LDP, multi-freq-ldpy and np.bincount.

Measures perturb + aggregate + estimate (all L cells) of GRR, OUE and OLH at every domain
size of ``--sizes`` (default 16, 64, 1024), in one process, and prints markdown tables:
per size the rates, then one table of every ratio ours / peer.  Our oracles run on
``--n`` users (default 10^6); the peer libraries randomize and aggregate one report at a
time in Python, so they run on ``--peer-n`` users (default 10^5; OLH, whose peers hash
every report for every value, on ``--peer-n-olh``, default 10^4) and every rate is per
report, which is what makes the ratios comparable.  Times are CPU seconds of this
(single-threaded) process, so other jobs on a shared machine move them less than wall
time; ``np.bincount`` of the raw values on ``--n`` users is the memory-bound floor.

    PYTHONPATH=src python benchmarks/bench_oracles.py            # n = 10^6, L = 16, 64, 1024
    PYTHONPATH=src python benchmarks/bench_oracles.py --quick    # a minute
"""

from __future__ import annotations

import argparse
import os
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from dpmarginals.core.randomness import RandomSource, SecureRandom, client_rng
from dpmarginals.oracles import make_oracle
from dpmarginals.protocol.randomizers import perturb as _randomize
from dpmarginals.protocol.samplers import byte_sampler


def perturb(oracle, values: np.ndarray, rng) -> np.ndarray:
    """The device's randomizer (one per report format, :mod:`dpmarginals.protocol`)."""
    return _randomize(oracle, values, client_rng(rng))

ORACLES = ("grr", "oue", "olh")


@dataclass
class Result:
    """Reports per CPU second (and per wall-clock second) and the max absolute error of the
    estimated frequencies."""

    rate: float
    error: float
    wall_rate: float = float("nan")


_LAST_WALL = [0.0]  # the wall-clock seconds of the run _best_time last kept


def _best_time(run: Callable[[], np.ndarray], repeats: int) -> tuple[float, np.ndarray]:
    """The least CPU time of ``repeats`` runs (this process is single-threaded); the least
    wall-clock time goes to ``_LAST_WALL``."""
    best, wall, out = float("inf"), float("inf"), np.empty(0)
    for _ in range(repeats):
        start, start_wall = time.process_time(), time.perf_counter()
        out = run()
        best = min(best, time.process_time() - start)
        wall = min(wall, time.perf_counter() - start_wall)
    _LAST_WALL[0] = wall
    return best, out


def bench_ours(name: str, values: np.ndarray, size: int, eps: float, rng, repeats: int) -> Result:
    """perturb (seeded Generator, or the OS CSPRNG when rng is None) + support + estimate."""
    oracle = make_oracle(name, eps, size)
    n = values.size

    def run() -> np.ndarray:
        return oracle.estimate(oracle.support(perturb(oracle, values, rng)), n)

    seconds, est = _best_time(run, repeats)
    truth = np.bincount(values, minlength=size) / n
    return Result(n / seconds, float(np.abs(est - truth).max()), n / _LAST_WALL[0])


def phase_times(name: str, values: np.ndarray, size: int, eps: float, seed: int) -> str:
    """One markdown row: milliseconds of perturb, support and estimate for ours."""
    oracle = make_oracle(name, eps, size)
    start = time.process_time()
    reports = perturb(oracle, values, seed)
    mid = time.process_time()
    support = oracle.support(reports)
    end = time.process_time()
    oracle.estimate(support, values.size)
    last = time.process_time()
    bits = reports.nbytes * 8 / values.size
    return (
        f"| {name.upper()} | {1e3 * (mid - start):.1f} | {1e3 * (end - mid):.1f} | "
        f"{1e3 * (last - end):.2f} | {bits:.0f} |"
    )


def _bit_sliced_words(prob: float, count: int, src: RandomSource) -> np.ndarray:
    """The previous OUE sampler, kept here as the reference: ``count`` uint32 words of
    exactly Bernoulli(prob) bits by a bit-sliced comparison of a uniform with prob's binary
    expansion (~7 random 32-bit words per output word)."""
    num, den = float(prob).as_integer_ratio()
    m = den.bit_length() - 1
    out = np.zeros(count, dtype=np.uint32)
    undecided = np.full(count, 0xFFFFFFFF, dtype=np.uint32)
    where: np.ndarray | None = None
    for digit in ((num >> (m - k)) & 1 for k in range(1, m + 1)):
        if undecided.size == 0:
            break
        u = np.asarray(src.integers(0, 1 << 32, size=undecided.size)).astype(np.uint32)
        if digit:
            if where is None:
                out |= undecided & ~u
            else:
                out[where] |= undecided & ~u
            undecided &= u
        else:
            undecided &= ~u
        if np.count_nonzero(undecided) < undecided.size // 2:
            keep = np.flatnonzero(undecided)
            where = keep if where is None else where[keep]
            undecided = undecided[keep]
    return out


def oue_strategies(values: np.ndarray, size: int, eps: float, seed: int, repeats: int) -> str:
    """OUE's zero bits: L uniforms per user, the previous bit-sliced words and our byte
    table, with a seeded Generator and with the OS CSPRNG; then support: the previous
    bincount of (byte column, byte value) pairs against ours (unpack + uint8 sums)."""
    oracle = make_oracle("oue", eps, size)
    n, chunk, width = values.size, 1 << 16, oracle.report_bytes

    def naive(src: RandomSource) -> np.ndarray:
        out = []
        for start in range(0, n, chunk):
            bits = src.random((min(chunk, n - start), size)) < oracle.q
            out.append(np.packbits(bits, axis=1, bitorder="little"))
        return np.concatenate(out)

    def sliced(src: RandomSource) -> np.ndarray:
        return _bit_sliced_words(oracle.q, n * -(-size // 32), src)

    def table(src: RandomSource) -> np.ndarray:
        return byte_sampler(oracle.q_exact).sample(4 * n * -(-size // 32), src).view(np.uint32)

    rows = []
    for label, make_src, reps in (
        ("seeded Generator", lambda: np.random.default_rng(seed), repeats),
        ("OS CSPRNG", SecureRandom, 1),
    ):
        for name, run in (("L uniforms per user + packbits", naive),
                          ("bit-sliced words (before)", sliced), ("byte table (ours)", table)):
            seconds, _ = _best_time(lambda mk=make_src, run=run: run(mk()), reps)
            rows.append(f"| zero bits, {label}: {name} | {1e3 * seconds:.1f} |")
    packed = perturb(oracle, values, seed)

    def by_pairs() -> np.ndarray:
        per_byte = np.zeros((width, 256), dtype=np.int64)
        offsets = np.arange(width, dtype=np.intp) * 256
        for start in range(0, n, chunk):
            idx = (packed[start : start + chunk] + offsets).ravel()
            per_byte += np.bincount(idx, minlength=width * 256).reshape(width, 256)
        return per_byte

    pairs_s, _ = _best_time(by_pairs, repeats)
    ours_s, _ = _best_time(lambda: oracle.support(packed), repeats)
    rows.append(f"| support: bincount of (byte column, byte value) (before) | "
                f"{1e3 * pairs_s:.1f} |")
    rows.append(f"| support: unpack + uint8 sums of 255 rows (ours) | {1e3 * ours_s:.1f} |")
    return "\n".join(rows)


def bench_bincount(values: np.ndarray, size: int, repeats: int) -> float:
    """Reports per second of one np.bincount over the raw values: the floor."""
    seconds, _ = _best_time(lambda: np.bincount(values, minlength=size), repeats)
    return values.size / seconds


def bench_pure_ldp(name: str, values: np.ndarray, size: int, eps: float) -> Result:
    """pure-LDP client.privatise + server.aggregate per report, then estimate_all."""
    from pure_ldp.frequency_oracles.direct_encoding import DEClient, DEServer
    from pure_ldp.frequency_oracles.local_hashing import LHClient, LHServer
    from pure_ldp.frequency_oracles.unary_encoding import UEClient, UEServer

    identity = {"index_mapper": lambda x: x}  # our values are 0-based already
    client, server = {
        "grr": lambda: (DEClient(eps, size, **identity), DEServer(eps, size, **identity)),
        "oue": lambda: (
            UEClient(eps, size, use_oue=True, **identity),
            UEServer(eps, size, use_oue=True, **identity),
        ),
        "olh": lambda: (
            LHClient(eps, size, use_olh=True, **identity),
            LHServer(eps, size, use_olh=True, **identity),
        ),
    }[name]()
    items = values.tolist()

    def run() -> np.ndarray:
        for v in items:
            server.aggregate(client.privatise(v))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return np.asarray(server.estimate_all(range(size), suppress_warnings=True))

    seconds, counts = _best_time(run, 1)
    truth = np.bincount(values, minlength=size) / values.size
    return Result(values.size / seconds, float(np.abs(counts / values.size - truth).max()),
                  values.size / _LAST_WALL[0])


def bench_multi_freq(name: str, values: np.ndarray, size: int, eps: float) -> Result:
    """multi-freq-ldpy *_Client per report, then *_Aggregator_MI (numba warmed up first)."""
    from multi_freq_ldpy.pure_frequency_oracles.GRR import GRR_Aggregator_MI, GRR_Client
    from multi_freq_ldpy.pure_frequency_oracles.LH import LH_Aggregator_MI, LH_Client
    from multi_freq_ldpy.pure_frequency_oracles.UE import UE_Aggregator_MI, UE_Client

    items = values.tolist()
    client, aggregate = {
        "grr": (
            lambda v: GRR_Client(v, size, eps),
            lambda reports: GRR_Aggregator_MI(reports, size, eps),
        ),
        "oue": (
            lambda v: UE_Client(v, size, eps, True),
            lambda reports: UE_Aggregator_MI(reports, eps, True),
        ),
        "olh": (
            lambda v: LH_Client(v, size, eps, True),
            lambda reports: LH_Aggregator_MI(reports, size, eps, True),
        ),
    }[name]
    aggregate([client(v) for v in items[:50]])  # JIT compilation outside the timing

    def run() -> np.ndarray:
        return np.asarray(aggregate([client(v) for v in items]))

    seconds, est = _best_time(run, 1)
    truth = np.bincount(values, minlength=size) / values.size
    # MI clips negatives and renormalizes: the error column is only a sanity check.
    return Result(values.size / seconds, float(np.abs(est - truth).max()),
                  values.size / _LAST_WALL[0])


def patch_xxhash_for_peers() -> None:
    """Both peers' local hashing calls ``xxhash.xxh32(str(v), seed)``; xxhash >= 2 wants bytes.

    Give their modules a shim that UTF-8-encodes the string first (a small extra cost
    per hash, borne by the peers).
    """
    import types

    import multi_freq_ldpy.pure_frequency_oracles.LH as multi_lh
    import pure_ldp.frequency_oracles.local_hashing.lh_client as pure_lh_client
    import pure_ldp.frequency_oracles.local_hashing.lh_server as pure_lh_server
    import xxhash

    def xxh32(data: str | bytes, seed: int = 0) -> object:
        return xxhash.xxh32(data.encode() if isinstance(data, str) else data, seed=seed)

    shim = types.SimpleNamespace(xxh32=xxh32)
    for module in (multi_lh, pure_lh_client, pure_lh_server):
        module.xxhash = shim  # type: ignore[attr-defined]


def _fmt_rate(rate: float) -> str:
    return f"{rate:,.0f}"


def bench_size(args: argparse.Namespace, size: int) -> dict[str, dict[str, Result]]:
    """Every oracle at domain size ``size``: ours (seeded and OS CSPRNG), the peers."""
    gen = np.random.default_rng(args.seed)
    values = gen.integers(0, size, args.n)
    floor = bench_bincount(values, size, args.repeats)
    out: dict[str, dict[str, Result]] = {}
    for name in ORACLES:
        peer_values = values[: args.peer_n_olh if name == "olh" else args.peer_n]
        out[name] = {
            "ours": bench_ours(name, values, size, args.epsilon, args.seed + 1, args.repeats),
            "secure": bench_ours(name, values, size, args.epsilon, None, 1),
            "pure": bench_pure_ldp(name, peer_values, size, args.epsilon),
            "multi": bench_multi_freq(name, peer_values, size, args.epsilon),
            "floor": Result(floor, 0.0),
        }
    return out


def print_size(args: argparse.Namespace, size: int, res: dict[str, dict[str, Result]]) -> None:
    floor = next(iter(res.values()))["floor"].rate
    print(f"\n### L = {size}, eps = {args.epsilon}\n\nnp.bincount floor: "
          f"{_fmt_rate(floor)} reports/s.\n")
    print("| oracle | ours reports/s | pure-ldp reports/s | multi-freq-ldpy reports/s | "
          "ratio ours/pure-ldp | ratio ours/multi-freq | ratio bincount/ours | "
          "ours, rng=None (OS CSPRNG) reports/s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, r in res.items():
        print(f"| {name.upper()} | {_fmt_rate(r['ours'].rate)} | {_fmt_rate(r['pure'].rate)} | "
              f"{_fmt_rate(r['multi'].rate)} | {r['ours'].rate / r['pure'].rate:,.0f}x | "
              f"{r['ours'].rate / r['multi'].rate:,.0f}x | {floor / r['ours'].rate:,.1f}x | "
              f"{_fmt_rate(r['secure'].rate)} |")
    print("\nSanity: max |estimate - truth| over the L cells (ours at n, peers at peer n; "
          "multi-freq-ldpy's MI clips and renormalizes)\n")
    print("| oracle | ours | ours, rng=None | pure-ldp | multi-freq-ldpy |")
    print("|---|---:|---:|---:|---:|")
    for name, r in res.items():
        print(f"| {name.upper()} | {r['ours'].error:.4f} | {r['secure'].error:.4f} | "
              f"{r['pure'].error:.4f} | {r['multi'].error:.4f} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10**6, help="users for ours and bincount")
    parser.add_argument("--peer-n", type=int, default=100_000, help="users for the peers")
    parser.add_argument("--peer-n-olh", type=int, default=10_000,
                        help="users for the peers' OLH (it hashes every report L times)")
    parser.add_argument("--sizes", default="16,64,1024", help="domain sizes L, comma-separated")
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=3, help="best of, for ours")
    parser.add_argument("--quick", action="store_true",
                        help="n = 10^5, peer n = 5,000 (OLH 1,000), 2 repeats")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.quick:
        args.n, args.peer_n, args.peer_n_olh, args.repeats = 10**5, 5000, 1000, 2
    sizes = [int(x) for x in args.sizes.split(",")]

    patch_xxhash_for_peers()
    one, five, _ = os.getloadavg()
    print(
        f"Frequency oracles, eps = {args.epsilon}: perturb + aggregate + estimate, CPU time of "
        f"this process.\nOurs and np.bincount on n = {args.n:,} users (best of {args.repeats}, "
        f"seeded numpy Generator); pure-LDP and multi-freq-ldpy on n = {args.peer_n:,} users "
        f"(OLH: {args.peer_n_olh:,}; one run; they loop over reports in Python), so every rate "
        f"is per report.\nThe peers' OLH hashes str(v) with xxhash, which now needs bytes: a "
        f"shim encodes it.\nLoad average at the start: {one:.2f} (1 min), {five:.2f} (5 min) "
        f"on {os.cpu_count()} cores."
    )
    results = {size: bench_size(args, size) for size in sizes}
    for size in sizes:
        print_size(args, size, results[size])
    for title, key in (("reports per CPU second", "rate"),
                       ("reports per wall-clock second: moved more by other jobs", "wall_rate")):
        print(f"\n### Every ratio ours / peer ({title})\n")
        print("| oracle | " + " | ".join(f"L = {L}: /pure-ldp | L = {L}: /multi-freq"
                                         for L in sizes) + " |")
        print("|---|" + "---:|---:|" * len(sizes))
        for name in ORACLES:
            cells = []
            for size in sizes:
                r = results[size][name]
                ours = getattr(r["ours"], key)
                cells += [f"{ours / getattr(r['pure'], key):,.0f}x",
                          f"{ours / getattr(r['multi'], key):,.0f}x"]
            print(f"| {name.upper()} | " + " | ".join(cells) + " |")
    size = sizes[min(1, len(sizes) - 1)]
    values = np.random.default_rng(args.seed).integers(0, size, args.n)
    print(f"\nOurs by phase, L = {size}, n = {args.n:,} (one run, CPU ms)\n")
    print("| oracle | perturb | support | estimate | report bits stored / user |")
    print("|---|---:|---:|---:|---:|")
    for name in ORACLES:
        print(phase_times(name, values, size, args.epsilon, args.seed + 2))
    print(f"\nOUE, n = {args.n:,}, L = {size} (CPU ms; CSPRNG rows: one run)\n")
    print("| step | ms |")
    print("|---|---:|")
    print(oue_strategies(values, size, args.epsilon, args.seed + 3, args.repeats))
    one, five, _ = os.getloadavg()
    print(f"\nLoad average at the end: {one:.2f} (1 min), {five:.2f} (5 min).")


if __name__ == "__main__":
    main()
