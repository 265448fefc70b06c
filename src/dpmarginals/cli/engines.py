"""The ``dpmarginals estimate`` command: a synopsis from stored reports, on any engine.

``ESTIMATE`` is the subcommand as data (:mod:`.spec`); ``register(subparsers)`` adds it to
the ``dpmarginals`` parser.  Errors a user can cause raise
:class:`~dpmarginals.core.errors.DPMarginalsError` (one line from the CLI) or are argparse
usage errors (one line as well).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..core.errors import DPMarginalsError, check_writable
from ..engines.base import ENGINES
from .argtypes import positive_int as _positive_int
from .spec import Command, add_command, arg

__all__ = ["ESTIMATE", "register"]

_DESCRIPTION = """\
Build the synopsis of a local-DP campaign from its reports in Parquet files
(ROOT/campaign=<id>/group=<g>/part-*.parquet, as `dpmarginals.engines.export_reports`
writes them; see docs/engines.md for the schemas), or in a JSON-lines file (.jsonl,
.ndjson, .json, optionally .gz: what `dpmarginals client --save-reports` and `campaign
export --out` write; give --plan): count the reports per group on the chosen engine,
release the counts with the plan's own method (CALM: unbias per oracle, make the marginals
consistent; FT: invert the Hadamard coefficients; EM: keep the histograms EM answers from;
...), and save the synopsis (answer queries with
`dpmarginals query`).

engines: duckdb (the default; SQL over the files, out of core, all cores), numpy (in
memory, a batch of files or lines at a time; JSON lines are always counted by it), spark
(Apache Spark; `pip install 'dpmarginals[spark]'` and Java 17). All three return
identical counts."""


def _cmd_estimate(args: argparse.Namespace) -> int:
    from ..aggregation import estimate
    from ..engines.jsonl import is_jsonl
    from ..engines.parquet import read_manifest, resolve_campaign
    from ..protocol.plan import Plan

    remote = "://" in str(args.reports) and not str(args.reports).startswith("file://")
    lines = not remote and is_jsonl(args.reports)
    if lines and args.engine == "spark":
        raise DPMarginalsError(f"{args.reports!r} holds JSON lines, which the numpy engine "
                               "counts in memory: Spark reads Parquet (campaign export "
                               "--parquet)")
    if lines:
        args.engine = "numpy"
    if remote and args.engine != "spark":
        raise DPMarginalsError(f"{args.reports!r} is not a local path: use --engine spark")
    if lines:
        if args.plan is None:
            raise DPMarginalsError(f"{args.reports!r} holds JSON lines: give the campaign's "
                                   "plan with --plan PLAN.json")
        if args.campaign is not None:
            raise DPMarginalsError("--campaign applies to Parquet directories only")
        campaign_dir: Any = args.reports
    else:
        campaign_dir = args.reports if remote else resolve_campaign(args.reports,
                                                                    args.campaign)
    if args.out is not None:
        check_writable(args.out)  # before the counting
    if args.plan is not None:
        plan = Plan.load(args.plan)
    else:
        plan = None if remote else read_manifest(campaign_dir)
        if plan is None:
            raise DPMarginalsError(f"{str(campaign_dir)!r} has no _plan.json: pass --plan")
    spark = None
    if args.engine == "spark":
        from ..engines.spark_engine import get_session

        spark = get_session(master=args.spark_master)
    elif args.spark_master is not None:
        raise DPMarginalsError("--spark-master applies to --engine spark only")
    if args.threads is not None and args.engine != "duckdb":
        raise DPMarginalsError("--threads applies to --engine duckdb only")
    synopsis = estimate(plan, campaign_dir, args.engine, spark=spark, threads=args.threads,
                        campaign=args.campaign if remote else None,
                        max_rounds=args.max_rounds)
    if args.out is not None:
        synopsis.save(args.out)
    info = synopsis.info
    per_group = info["reports_per_group"]
    out = {"campaign_dir": str(campaign_dir), "plan_hash": plan.hash, "method": plan.method,
           "engine": args.engine, "reports": int(sum(per_group)),
           "groups": plan.m, "groups_reporting": sum(1 for n in per_group if n),
           "reports_per_group": per_group, "consistent": info.get("consistent"),
           "count_seconds": info["stage_seconds"]["count"],
           "estimate_seconds": info["stage_seconds"]["estimate"], "out": args.out}
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"{plan.method} synopsis from {out['reports']:,} reports "
          f"({out['groups_reporting']} of {plan.m} groups reporting), engine {args.engine}: "
          f"count {out['count_seconds']:.2f} s, estimate {out['estimate_seconds']:.2f} s")
    if args.out is not None:
        print(f"  saved to {args.out}; query it with `dpmarginals query {args.out} "
              "--attributes A,B`")
    return 0


ESTIMATE = Command(
    "estimate", help="build a synopsis from stored reports (Parquet or JSON lines)",
    run=_cmd_estimate, description=_DESCRIPTION,
    parser_options={"formatter_class": argparse.RawDescriptionHelpFormatter},
    args=(
        arg("--reports", required=True, metavar="PATH",
            help="reports directory (the root holding campaign=<id>/, or a campaign "
            "directory), or a JSON-lines file of reports"),
        arg("--plan", default=None, metavar="PLAN.json",
            help="the campaign's public plan (default: the _plan.json stored with the "
            "reports); reports made under another plan are refused"),
        arg("--campaign", default=None, metavar="ID",
            help="campaign id when PATH holds several campaigns"),
        arg("--engine", choices=ENGINES, default="duckdb",
            help="counting engine (default duckdb; JSON lines are counted by numpy)"),
        arg("--threads", type=_positive_int, default=None,
            help="DuckDB worker threads (default: all cores)"),
        arg("--spark-master", default=None, metavar="URL",
            help="Spark master (default $DPMARGINALS_SPARK_MASTER, else local[*])"),
        arg("--max-rounds", type=_positive_int, default=1000,
            help="rounds of the consistency step (default 1000)"),
        arg("--out", default=None, metavar="SYNOPSIS.json",
            help="save the synopsis as JSON"),
        arg("--json", action="store_true", help="print one JSON object"),
    ),
)


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``estimate`` to the CLI's subparsers (``parser.add_subparsers(...)``)."""
    return add_command(subparsers, ESTIMATE)
