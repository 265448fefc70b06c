"""Throughput of the frequency oracles against pure-LDP, multi-freq-ldpy and np.bincount.

Measures perturb + aggregate + estimate (all L cells) of GRR, OUE and OLH, in one
process, and prints markdown tables.  Our oracles run on ``--n`` users (default 10^6);
the peer libraries randomize and aggregate one report at a time in Python, so they run
on ``--peer-n`` users (default 10^5) and every rate is reported per report, which
is what makes the ratios comparable.  ``np.bincount`` of the raw values on ``--n``
users is the memory-bound floor (no randomization at all).

    PYTHONPATH=src python benchmarks/bench_oracles.py            # n = 10^6
    PYTHONPATH=src python benchmarks/bench_oracles.py --quick    # a few seconds
"""

from __future__ import annotations

import argparse
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from dpmarginals.core.randomness import RandomSource, SecureRandom
from dpmarginals.oracles import make_oracle

ORACLES = ("grr", "oue", "olh")


@dataclass
class Result:
    """Reports per second and the max absolute error of the estimated frequencies."""

    rate: float
    error: float


def _best_time(run: Callable[[], np.ndarray], repeats: int) -> tuple[float, np.ndarray]:
    best, out = float("inf"), np.empty(0)
    for _ in range(repeats):
        start = time.perf_counter()
        out = run()
        best = min(best, time.perf_counter() - start)
    return best, out


def bench_ours(name: str, values: np.ndarray, size: int, eps: float, rng, repeats: int) -> Result:
    """perturb (seeded Generator, or the OS CSPRNG when rng is None) + support + estimate."""
    oracle = make_oracle(name, eps, size)
    n = values.size

    def run() -> np.ndarray:
        return oracle.estimate(oracle.support(oracle.perturb(values, rng=rng)), n)

    seconds, est = _best_time(run, repeats)
    truth = np.bincount(values, minlength=size) / n
    return Result(n / seconds, float(np.abs(est - truth).max()))


def phase_times(name: str, values: np.ndarray, size: int, eps: float, seed: int) -> str:
    """One markdown row: milliseconds of perturb, support and estimate for ours."""
    oracle = make_oracle(name, eps, size)
    start = time.perf_counter()
    reports = oracle.perturb(values, rng=seed)
    mid = time.perf_counter()
    support = oracle.support(reports)
    end = time.perf_counter()
    oracle.estimate(support, values.size)
    last = time.perf_counter()
    bits = reports.nbytes * 8 / values.size
    return (
        f"| {name.upper()} | {1e3 * (mid - start):.1f} | {1e3 * (end - mid):.1f} | "
        f"{1e3 * (last - end):.2f} | {bits:.0f} |"
    )


def oue_strategies(values: np.ndarray, size: int, eps: float, seed: int, repeats: int) -> str:
    """OUE perturbation: L uniforms per user (chunked) vs our bit-sliced Bernoulli words.

    Both with a seeded Generator and with the OS CSPRNG; then the two support layouts.
    """
    oracle = make_oracle("oue", eps, size)
    n, chunk = values.size, 1 << 16

    def naive(src: RandomSource) -> np.ndarray:
        out = []
        for start in range(0, n, chunk):
            x = values[start : start + chunk]
            bits = src.random((x.size, size)) < oracle.q
            bits[np.arange(x.size), x] = src.random(x.size) < oracle.p
            out.append(np.packbits(bits, axis=1, bitorder="little"))
        return np.concatenate(out)

    rows = []
    for label, make_src, reps in (
        ("seeded Generator", lambda: np.random.default_rng(seed), repeats),
        ("OS CSPRNG", SecureRandom, 1),
    ):
        naive_s, packed = _best_time(lambda mk=make_src: naive(mk()), reps)
        ours_s, _ = _best_time(lambda mk=make_src: oracle.perturb(values, rng=mk()), reps)
        rows.append(f"| perturb, {label}: L uniforms per user + packbits | {1e3 * naive_s:.1f} |")
        rows.append(f"| perturb, {label}: bit-sliced Bernoulli words (ours) | {1e3 * ours_s:.1f} |")
    unpacked = oracle.unpack(packed)
    packed_s, _ = _best_time(lambda: oracle.support(packed), repeats)
    matrix_s, _ = _best_time(lambda: oracle.support(unpacked), repeats)
    rows.append(f"| support: packed uint8 (n, L/8), one bincount (ours) | {1e3 * packed_s:.1f} |")
    rows.append(f"| support: bool bit matrix (n, L), column sum | {1e3 * matrix_s:.1f} |")
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
    return Result(values.size / seconds, float(np.abs(counts / values.size - truth).max()))


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
    return Result(values.size / seconds, float(np.abs(est - truth).max()))


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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10**6, help="users for ours and bincount")
    parser.add_argument("--peer-n", type=int, default=100_000, help="users for the peers")
    parser.add_argument("--size", type=int, default=64, help="domain size L")
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=3, help="best of, for ours")
    parser.add_argument("--quick", action="store_true", help="n = 10^5, peer n = 2000")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.quick:
        args.n, args.peer_n, args.repeats = 10**5, 2000, 2

    patch_xxhash_for_peers()
    gen = np.random.default_rng(args.seed)
    values = gen.integers(0, args.size, args.n)
    peer_values = values[: args.peer_n]
    floor = bench_bincount(values, args.size, args.repeats)

    rows, sanity = [], []
    for name in ORACLES:
        ours = bench_ours(name, values, args.size, args.epsilon, args.seed + 1, args.repeats)
        secure = bench_ours(name, values, args.size, args.epsilon, None, 1)
        pure = bench_pure_ldp(name, peer_values, args.size, args.epsilon)
        multi = bench_multi_freq(name, peer_values, args.size, args.epsilon)
        rows.append(
            f"| {name.upper()} | {_fmt_rate(ours.rate)} | {_fmt_rate(pure.rate)} | "
            f"{_fmt_rate(multi.rate)} | {ours.rate / pure.rate:,.0f}x | "
            f"{ours.rate / multi.rate:,.0f}x | {floor / ours.rate:,.1f}x | "
            f"{_fmt_rate(secure.rate)} |"
        )
        sanity.append(
            f"| {name.upper()} | {ours.error:.4f} | {secure.error:.4f} | {pure.error:.4f} | "
            f"{multi.error:.4f} |"
        )

    print(
        f"Frequency oracles, L = {args.size}, eps = {args.epsilon}: perturb + aggregate + "
        f"estimate.\nOurs and np.bincount on n = {args.n:,} users (best of {args.repeats}, "
        f"seeded numpy Generator); pure-LDP and multi-freq-ldpy on n = {args.peer_n:,} users "
        f"(one run; they loop over reports in Python), so every rate is per report.\n"
        f"The peers' OLH hashes str(v) with xxhash, which now needs bytes: a shim encodes it.\n"
        f"np.bincount floor: {_fmt_rate(floor)} reports/s.\n"
    )
    print(
        "| oracle | ours reports/s | pure-ldp reports/s | multi-freq-ldpy reports/s | "
        "ratio ours/pure-ldp | ratio ours/multi-freq | ratio bincount/ours | "
        "ours, rng=None (OS CSPRNG) reports/s |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    print("\n".join(rows))
    print(
        "\nSanity: max |estimate - truth| over the L cells (ours at n, peers at peer n; "
        "multi-freq-ldpy's MI clips and renormalizes)\n"
    )
    print("| oracle | ours | ours, rng=None | pure-ldp | multi-freq-ldpy |")
    print("|---|---:|---:|---:|---:|")
    print("\n".join(sanity))
    print(f"\nOurs by phase, n = {args.n:,} (one run, ms)\n")
    print("| oracle | perturb | support | estimate | report bits stored / user |")
    print("|---|---:|---:|---:|---:|")
    for name in ORACLES:
        print(phase_times(name, values, args.size, args.epsilon, args.seed + 2))
    print(f"\nOUE representation, n = {args.n:,}, L = {args.size} (ms; CSPRNG rows: one run)\n")
    print("| step | ms |")
    print("|---|---:|")
    print(oue_strategies(values, args.size, args.epsilon, args.seed + 3, args.repeats))


if __name__ == "__main__":
    main()
