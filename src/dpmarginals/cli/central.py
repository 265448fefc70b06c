"""The ``dpmarginals central`` command: DP k-tuple extraction from sparse records.

``CENTRAL`` is the subcommand as data (:mod:`.spec`); ``register(subparsers)`` adds it to
the ``dpmarginals`` parser.  Errors a user can cause raise
:class:`~dpmarginals.core.errors.DPMarginalsError` (printed on one line by the CLI) or are
argparse usage errors (one line as well).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import Any

from ..central.accounting import ACCOUNTANTS, check_delta
from ..core.errors import DPMarginalsError, check_writable
from .argtypes import epsilon as _epsilon
from .argtypes import number_in, validated
from .argtypes import open_fraction as _open_fraction
from .argtypes import positive_int as _positive_int
from .argtypes import seed as _seed
from .spec import Command, add_command, arg

__all__ = ["CENTRAL", "register"]

_DESCRIPTION = """\
Extract, under (epsilon, delta)-differential privacy, the k-tuples (k = 1..T) of
(column, value) items that occur in many records, with noisy counts (Gopi, Mahabadi and
Yekhanin, "Differentially Private Marginals", Algorithm 1). Input: a transactional file
(one record per line, item ids separated by spaces; .dat/.txt/.seq, plain, .gz or .zip),
a CSV/Parquet table whose empty cells mean "no value", or a data set name (msnbc,
kosarak-prefix, t10i4d100k) found under $DPMARGINALS_DATA. Prints the number of tuples
found per k and, as a NON-PRIVATE evaluation aid computed from the raw input, the
fraction of them that no record holds (spurious)."""


_delta = validated(check_delta)
_percent = number_in(0.0, 100.0, high_open=False)


def _cmd_central(args: argparse.Namespace) -> int:
    from ..central.dp_marginals import DPMarginals, spurious_fraction
    from ..datasets.sparse import resolve_data

    if args.seed is None:  # a private release: OpenDP's samplers, checked before any work
        from ..core.extras import require_extra

        require_extra("central", what="dpmarginals central (OpenDP's samplers)")
    if args.out is not None:
        check_writable(args.out)  # before any budget is spent
    start = time.perf_counter()
    records = resolve_data(args.data, args.data_home)
    t_read = time.perf_counter()
    _check_against_data(args.max_k, args.delta, records)
    algo = DPMarginals(
        epsilon=args.epsilon, delta=args.delta, max_k=args.max_k, eta=args.eta,
        percentile=args.percentile, accountant=args.accountant,
        no_spurious=args.no_spurious, max_contribution=args.max_contribution,
    )
    simulation = args.seed is not None
    result = algo.fit(records, rng=args.seed, simulation=simulation, engine=args.engine)
    t_fit = time.perf_counter()
    if args.out is not None:
        result.save(args.out)  # an OS error is one line naming the file
    spurious = spurious_fraction(result, records)
    t_eval = time.perf_counter()
    found = result.found()
    stage_seconds = [round(t.get("total", 0.0) + t.get("next", 0.0), 4) for t in result.timings]
    out = {
        "found": found,
        "spurious_fraction": spurious,
        "seconds": round(t_eval - start, 4),
        "read_seconds": round(t_read - start, 4),
        "release_seconds": round(t_fit - t_read, 4),
        "evaluation_seconds": round(t_eval - t_fit, 4),
        "stage_seconds": stage_seconds,
        "contribution_bounds": [lv.contribution_bound for lv in result.levels],
        "thresholds": [_finite(lv.threshold) for lv in result.levels],
        "candidates": [lv.candidates for lv in result.levels],
        "records": records.n,
        "epsilon": args.epsilon,
        "delta": args.delta,
        "max_k": args.max_k,
        "release_private": result.private,
        "privacy_map_rho": result.budget.get("privacy_map_rho"),
        "epsilon_certified": result.budget.get("epsilon_certified"),
        "private": False,
        "not_private": "this report holds the exact number of records, timings and the "
                       "spurious fraction, all from the raw input: publish the --out file "
                       "(release_private says whether it is private), never this report",
    }
    if args.json:
        print(json.dumps(out))
        return 0
    mode = ("private release (OpenDP discrete Gaussian noise)" if result.private else
            f"NON-PRIVATE simulation (seed {args.seed}): do not publish")
    print(f"DP marginals on {records.name}: {records.n:,} records, {records.n_items:,} items; "
          f"epsilon={args.epsilon:g}, delta={args.delta:g}, T={args.max_k}, eta={args.eta:g}")
    print(f"  {mode}")
    if result.budget.get("privacy_map_rho") is not None:
        print(f"  OpenDP's privacy map certifies rho = {result.budget['privacy_map_rho']:.6g} "
              f"(+ delta {result.budget['privacy_map_delta']:.3g} from the thresholds): "
              f"epsilon {result.budget['epsilon_certified']:.4g} at delta {args.delta:g}")
    print(f"  {'k':>2} {'found':>7} {'Delta_k':>8} {'threshold':>10} {'candidates':>11} "
          f"{'seconds':>8} {'spurious*':>10}")
    for k, (lv, sec, sp) in enumerate(zip(result.levels, stage_seconds, spurious, strict=True), 1):
        thr = "-" if not math.isfinite(lv.threshold) else f"{lv.threshold:g}"
        cand = "-" if lv.candidates is None else str(lv.candidates)
        print(f"  {k:>2} {len(lv):>7} {lv.contribution_bound:>8} {thr:>10} "
              f"{cand:>11} {sec:>8.2f} {sp:>10.3f}")
    print("  * spurious = fraction of the found tuples that no record holds, computed from "
          "the raw input: a NON-PRIVATE evaluation aid, not part of the release")
    saved = f"; release saved to {args.out}" if args.out else ""
    print(f"  {out['seconds']:.2f} s in all (read {out['read_seconds']:.2f} s, release "
          f"{out['release_seconds']:.2f} s, evaluation {out['evaluation_seconds']:.2f} s){saved}")
    sys.stdout.flush()
    return 0


def _check_against_data(max_k: int, delta: float, records: Any) -> None:
    """Refuse a ``--max-k`` above the longest record and a ``--delta`` not below 1/n.

    No record holds a tuple longer than itself, and every level takes a share of the budget.
    A delta >= 1/n permits publishing a whole record (OpenDP: delta should be well below
    1/n).  Only the curator, who holds the data, sees these errors; nothing is released.
    """
    longest = int(records.lengths().max(initial=0))
    if longest and max_k > longest:
        raise DPMarginalsError(
            f"--max-k {max_k} is more than the longest record ({longest} items): no record "
            f"holds a {longest + 1}-tuple and each extra level costs budget; use --max-k "
            f"{longest} or less")
    n = records.n
    if n and delta * n >= 1:
        hint = min(1e-6, 10.0 ** math.floor(-2 * math.log10(n)))
        raise DPMarginalsError(
            f"--delta {delta:g} is not below 1/n = {1 / n:.3g} ({n:,} records): such a delta "
            f"permits publishing whole records; use one well below 1/n, e.g. {hint:g}")


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


CENTRAL = Command(
    "central", help="central DP: frequent k-tuples of sparse records (DP marginals)",
    run=_cmd_central, description=_DESCRIPTION,
    parser_options={"formatter_class": argparse.RawDescriptionHelpFormatter},
    args=(
        arg("--data", required=True,
            help="data file (transactional, CSV or Parquet) or data set name"),
        arg("--data-home", default=None,
            help="directory of the named data sets (default: $DPMARGINALS_DATA, "
            "then the user cache)"),
        arg("--epsilon", type=_epsilon, required=True, help="privacy budget epsilon > 0"),
        arg("--delta", type=_delta, required=True,
            help="privacy parameter delta, below 1/n (n = number of records)"),
        arg("--max-k", type=_positive_int, required=True, metavar="T",
            help="largest tuple size to extract (1 <= T <= the longest record)"),
        arg("--eta", type=_open_fraction, default=0.1,
            help="target fraction of spurious tuples (default 0.1)"),
        arg("--percentile", type=_percent, default=99.0, metavar="Q",
            help="percentile of per-user tuple counts used as contribution bound "
            "(default 99)"),
        arg("--accountant", choices=ACCOUNTANTS, default="zcdp",
            help="zcdp: Theorem 1.1, corrected (default); rdp: Google dp-accounting's "
            "tighter conversion and bounded-range percentiles (less noise)"),
        arg("--no-spurious", action="store_true",
            help="Remark 1.1's variant: never output a tuple no record holds "
            "(higher thresholds)"),
        arg("--max-contribution", type=_positive_int, default=1000,
            help="largest contribution bound Delta_k the percentile may pick "
            "(default 1000)"),
        arg("--seed", type=_seed, default=None,
            help="NON-PRIVATE reproducible simulation with this seed (default: a "
            "private release with OpenDP noise)"),
        arg("--engine", choices=("numpy", "duckdb", "spark"), default="numpy",
            help="where the counting passes run: numpy in memory (default), duckdb "
            "(out of core) or spark (the spark extra; local[*] unless a session is "
            "active)"),
        arg("--out", default=None, help="save the release (tuples, counts) as JSON"),
        arg("--json", action="store_true",
            help="print one JSON object (keys found, spurious_fraction, seconds, ...): a "
            "report on the raw data, marked private: false (the --out file is the release)"),
    ),
)


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``central`` to the CLI's subparsers (``parser.add_subparsers(...)``)."""
    return add_command(subparsers, CENTRAL)
