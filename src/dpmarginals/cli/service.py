"""The ``serve``, ``client`` and ``campaign`` commands of ``dpmarginals``.

``register(subparsers)`` adds them to the CLI's subparsers; errors a user can cause raise
:class:`~dpmarginals.core.errors.DPMarginalsError` (one line from the CLI).  Run stand-alone as
``python -m dpmarginals.cli.service serve ...`` (the tests do).

A new user's session::

    dpmarginals serve --db adult.db --admin-token secret          # terminal 1
    dpmarginals campaign create --server http://127.0.0.1:8000 --token secret \\
        --id adult --domain adult-domain.json --epsilon 1 --k 2 --n 48842
    dpmarginals client --server http://127.0.0.1:8000 --campaign adult --data adult.csv.gz \\
        --max-epsilon 1
    curl 'http://127.0.0.1:8000/campaigns/adult/marginals?attributes=age,sex'
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from typing import Any

from ..core.errors import DPMarginalsError
from .argtypes import epsilon as _epsilon
from .argtypes import positive_int as _positive_int

__all__ = ["register"]

TOKEN_ENV = "DPMARGINALS_ADMIN_TOKEN"


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port in 0..65535, got {value}")
    return value


def _need_service() -> None:
    from ..core.extras import require

    for module in ("fastapi", "uvicorn"):
        require(module, extra="service", what="the aggregator")


# -- serve --------------------------------------------------------------------------------
def _check_address(host: str, port: int) -> None:
    """Fail with one line, before opening the store, if the address cannot be listened on."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise DPMarginalsError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            raise DPMarginalsError(f"cannot listen on {host}:{port}: "
                                   f"{exc.strerror or exc}") from None


def _cmd_serve(args: argparse.Namespace) -> int:
    _need_service()
    import uvicorn

    from ..service.app import create_app

    _check_address(args.host, args.port)
    generated = not (args.admin_token or os.environ.get(TOKEN_ENV))
    app = create_app(args.db, admin_token=args.admin_token, synchronous=args.sync,
                     max_body_bytes=int(args.max_body_mb * (1 << 20)))
    store = app.state.store
    where = getattr(store, "path", None) or "PostgreSQL"
    url = f"http://{args.host}:{args.port}"
    print(f"dpmarginals aggregator on {url} (store: {store.kind} {where}"
          + (f", synchronous={store.synchronous}" if store.kind == "sqlite" else "") + ")",
          file=sys.stderr)
    if generated:
        print(f"admin token: {app.state.admin_token} (generated; choose one with "
              f"--admin-token or ${TOKEN_ENV})", file=sys.stderr)
    print(f"API documentation: {url}/docs   OpenAPI schema: {url}/openapi.json",
          file=sys.stderr, flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level,
                access_log=False, server_header=False)
    return 0


# -- client -------------------------------------------------------------------------------
def _cmd_client(args: argparse.Namespace) -> int:
    from ..protocol.client import check_plan, make_reports, play, read_records

    if args.max_total_epsilon is not None and args.ledger is None:
        raise DPMarginalsError("--max-total-epsilon needs --ledger FILE")
    if args.ledger is not None:
        return _client_device(args)
    if args.server is None:
        if args.plan is None or args.save_reports is None:
            raise DPMarginalsError("give --server URL and --campaign ID, or (offline) --plan "
                                   "FILE and --save-reports FILE")
        plan = check_plan(args.plan, args.max_epsilon)
        records = read_records(args.data, plan)[: args.limit]
        reports = make_reports(plan, records, max_epsilon=args.max_epsilon)
        with open(args.save_reports, "w", encoding="utf-8") as sink:
            sink.writelines(json.dumps(r, separators=(",", ":")) + "\n" for r in reports)
        print(f"wrote {len(reports):,} reports for plan {plan.hash[:12]} to {args.save_reports}")
        return 0
    with _service_client(args) as client:
        records = read_records(args.data, client.plan())[: args.limit]
        summary = play(client, records, max_epsilon=args.max_epsilon, batch=args.batch,
                       assign=args.assign, save=args.save_reports)
    if args.json:
        print(json.dumps(summary))
    else:
        rate = summary["reports_per_second"]
        print(f"sent {summary['sent']:,} reports to campaign {args.campaign!r} at "
              f"{args.server} in {summary['seconds']:.2f} s"
              + (f" ({rate:,.0f} reports/s)" if rate else ""))
    return 0


def _service_client(args: argparse.Namespace) -> Any:
    """The campaign's client, its plan fetched and compared with ``--plan`` if given."""
    from ..protocol.client import ServiceClient, check_plan

    if args.campaign is None:
        raise DPMarginalsError("--campaign ID is required with --server")
    client = ServiceClient(args.server, args.campaign, timeout=args.timeout)
    try:
        plan = check_plan(client.plan(), args.max_epsilon)
        if args.plan is not None and check_plan(args.plan, args.max_epsilon).hash != plan.hash:
            raise DPMarginalsError(f"the campaign's plan {plan.hash[:12]} is not {args.plan}")
    except BaseException:
        client.close()
        raise
    return client


def _client_device(args: argparse.Namespace) -> int:
    """``--ledger FILE``: the one record of --data as this device's report (ledger kept)."""
    from ..protocol.client import Ledger, check_plan, make_report, read_records

    ledger = Ledger(args.ledger, max_total_epsilon=args.max_total_epsilon)

    def one_record(plan: Any) -> list[int]:
        rows = read_records(args.data, plan)[: args.limit]
        if len(rows) != 1:
            raise DPMarginalsError(f"--ledger keeps one device's budget: --data must hold one "
                                   f"record (or add --limit 1), got {len(rows):,}")
        return [int(v) for v in rows[0]]

    if args.server is None:
        if args.plan is None or args.save_reports is None or args.campaign is None:
            raise DPMarginalsError("offline, --ledger needs --plan FILE, --save-reports FILE "
                                   "and --campaign ID (the campaign's name in the ledger)")
        plan = check_plan(args.plan, args.max_epsilon)
        campaign = args.campaign
        report = make_report(plan, one_record(plan), max_epsilon=args.max_epsilon,
                             group=None, ledger=ledger, campaign=campaign)
        with open(args.save_reports, "w", encoding="utf-8") as sink:
            sink.write(json.dumps(report, separators=(",", ":")) + "\n")
    else:
        with _service_client(args) as client:
            plan = client.plan()
            campaign = client.ledger_key
            report = client.submit(one_record(plan), max_epsilon=args.max_epsilon,
                                   assign=args.assign, ledger=ledger)
    out = {"campaign": campaign, "plan_hash": plan.hash, "group": report["group"],
           "report_id": report["report_id"], "epsilon_charged": ledger.spent(campaign),
           "epsilon_total": ledger.spent(), "max_total_epsilon": ledger.max_total_epsilon}
    if args.json:
        print(json.dumps(out))
    else:
        verb = "wrote" if args.server is None else "sent"
        cap = (f" of max_total_epsilon {ledger.max_total_epsilon:g}"
               if ledger.max_total_epsilon is not None else "")
        print(f"{verb} report {report['report_id']} (group {report['group']}) for campaign "
              f"{campaign!r}: charged epsilon {out['epsilon_charged']:g}, device total "
              f"{out['epsilon_total']:g}{cap} (ledger {args.ledger})")
    return 0


# -- campaign -----------------------------------------------------------------------------
def _token(args: argparse.Namespace) -> str:
    token = args.token or os.environ.get(TOKEN_ENV)
    if not token:
        raise DPMarginalsError(f"the admin token is needed: --token or ${TOKEN_ENV}")
    return token


def _build_plan(args: argparse.Namespace) -> Any:
    from ..protocol.client import load_plan

    if args.plan is not None:
        if any(v is not None for v in (args.domain, args.epsilon, args.k, args.n)):
            raise DPMarginalsError("give either --plan or --domain/--epsilon/--k/--n, not both")
        return load_plan(args.plan)
    missing = [f"--{f}" for f in ("domain", "epsilon", "k", "n") if getattr(args, f) is None]
    if missing:
        raise DPMarginalsError(f"to build a plan give {', '.join(missing)} (or --plan FILE)")
    from ..core.domain import Domain
    from ..methods import make

    params: dict[str, Any] = {"epsilon": args.epsilon, "k": args.k}
    if args.oracle is not None:
        params["oracle"] = args.oracle
    method = make(args.method, **params)
    return method.plan(Domain.load(args.domain), args.n)


def _cmd_campaign_create(args: argparse.Namespace) -> int:
    from ..protocol.client import ServiceClient

    plan = _build_plan(args)
    if args.save_plan is not None:
        plan.save(args.save_plan)
    with ServiceClient(args.server, args.id, token=_token(args)) as client:
        out = client.create_campaign(plan)
    verb = "created" if out.get("created") else "found existing"
    print(f"{verb} campaign {args.id!r}: {plan.method}, epsilon={plan.epsilon}, "
          f"{plan.m} groups, plan hash {plan.hash}")
    return 0


def _cmd_campaign_status(args: argparse.Namespace) -> int:
    from ..protocol.client import ServiceClient

    with ServiceClient(args.server, args.id) as client:
        status = client.status()
    if args.json:
        print(json.dumps(status))
        return 0
    print(f"campaign {args.id!r}: {status['reports']:,} reports, plan {status['plan_hash'][:12]}")
    for g in status["groups"]:
        print(f"  group {g['group']:>3}  {','.join(g['attributes']):<40} {g['oracle']:>4}  "
              f"{g['reports']:>9,}")
    return 0


def _cmd_campaign_export(args: argparse.Namespace) -> int:
    from ..protocol.client import ServiceClient

    if (args.out is None) == (args.parquet is None):
        raise DPMarginalsError("campaign export: give exactly one of --out FILE (JSON lines) "
                               "and --parquet ROOT")
    with ServiceClient(args.server, args.id, token=_token(args)) as client:
        reports = client.export_reports()
        plan = client.plan()
    if args.parquet is not None:
        from ..engines.parquet import export_reports

        export_reports(reports, plan, args.parquet, args.id)
        where = f"{args.parquet} (Parquet; count them with dpmarginals estimate)"
    else:
        with open(args.out, "w", encoding="utf-8") as sink:
            sink.writelines(json.dumps(r, separators=(",", ":")) + "\n" for r in reports)
        where = args.out
    if args.plan_out is not None:
        plan.save(args.plan_out)
    print(f"wrote {len(reports):,} reports to {where}")
    return 0


# -- registration -------------------------------------------------------------------------
def register(subparsers: Any) -> None:
    """Add ``serve``, ``client`` and ``campaign`` to the CLI's subparsers."""
    p = subparsers.add_parser(
        "serve", help="run the collection service (aggregator) over a durable store",
        description="Run the HTTP aggregator: campaigns from plans, group assignment, report "
        "ingestion (singly and in batches), status and marginal queries. Needs the service "
        "extra. Reports are stored durably before they are acknowledged. The access log is "
        "off: the service keeps no client addresses or arrival times.")
    p.add_argument("--db", default="dpmarginals.db",
                   help="SQLite file (default ./dpmarginals.db) or postgresql://user@host/db")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=_port, default=8000, help="port (default 8000)")
    p.add_argument("--admin-token", default=None,
                   help=f"token for the admin endpoints (default ${TOKEN_ENV}, else random "
                   "and printed)")
    p.add_argument("--sync", choices=("full", "normal"), default="full",
                   help="SQLite synchronous mode: full (default; an acknowledged report "
                   "survives power loss) or normal (survives a crash of the process)")
    p.add_argument("--max-body-mb", type=float, default=8.0,
                   help="largest request body in MiB (default 8)")
    p.add_argument("--log-level", default="warning",
                   choices=("critical", "error", "warning", "info", "debug"))
    p.set_defaults(func=_cmd_serve)

    p = subparsers.add_parser(
        "client", help="report as one device (--ledger), or play every CSV row as one user",
        description="Randomize records on the device with OS entropy and send the reports. "
        "The campaign's plan is refused (one line, nothing drawn) if it asks for more than "
        "--max-epsilon, if a group's epsilon is not the plan's, or if its hash or cells do "
        "not match. With --ledger FILE the one record of --data is this device's report: "
        "once per campaign, its randomization memoized per plan and value, its epsilon "
        "counted (and capped by --max-total-epsilon). Without --ledger every row of --data "
        "is another simulated user (tests and demos). Needs only numpy. Offline: --plan "
        "FILE --save-reports FILE without --server writes the reports instead.")
    p.add_argument("--server", default=None, help="the aggregator's URL")
    p.add_argument("--campaign", default=None, help="campaign id")
    p.add_argument("--data", required=True,
                   help="CSV (or .csv.gz) whose header names the plan's attributes; cells "
                   "hold integer codes")
    p.add_argument("--max-epsilon", type=_epsilon, required=True, metavar="EPS",
                   help="required: the most epsilon this device spends on one report; a plan "
                   "asking for more is refused")
    p.add_argument("--ledger", default=None, metavar="FILE",
                   help="this device's privacy ledger (JSON, created if missing): one report "
                   "per campaign, memoized randomization, epsilon spent")
    p.add_argument("--max-total-epsilon", type=_epsilon, default=None, metavar="EPS",
                   help="with --ledger: the most epsilon this device spends in total")
    p.add_argument("--plan", default=None,
                   help="plan JSON (offline mode, or to check the campaign's plan)")
    p.add_argument("--batch", type=_positive_int, default=1000,
                   help="reports per request (default 1000; 1 sends each report alone)")
    p.add_argument("--assign", choices=("server", "local"), default="server",
                   help="groups from the service (default) or drawn on the device")
    p.add_argument("--limit", type=_positive_int, default=None, help="only the first N rows")
    p.add_argument("--save-reports", default=None, help="also write the reports (JSON lines)")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds per request")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_cmd_client)

    p = subparsers.add_parser(
        "campaign", help="create a campaign on a service, show its status, export reports",
        description="Administer campaigns of a running aggregator.")
    actions = p.add_subparsers(dest="campaign_action", metavar="ACTION",
                               parser_class=type(p))
    a = actions.add_parser("create", help="create a campaign from a plan",
                           description="Create a campaign from --plan FILE, or build a plan "
                           "with --method (default calm) from --domain, --epsilon, --k, --n.")
    a.add_argument("--server", required=True, help="the aggregator's URL")
    a.add_argument("--id", required=True, help="campaign id (letters, digits, _ . -)")
    a.add_argument("--token", default=None, help=f"admin token (default ${TOKEN_ENV})")
    a.add_argument("--plan", default=None, help="plan JSON file")
    a.add_argument("--domain", default=None, help="domain JSON ({\"attr\": size})")
    a.add_argument("--epsilon", type=_epsilon, default=None, help="privacy budget")
    a.add_argument("--k", type=_positive_int, default=None, help="marginal size to answer")
    a.add_argument("--n", type=_positive_int, default=None, help="expected number of users")
    a.add_argument("--method", default="calm", help="method building the plan (default calm)")
    a.add_argument("--oracle", default=None, help="CALM's oracle choice (default adaptive)")
    a.add_argument("--save-plan", default=None, help="also write the plan JSON here")
    a.set_defaults(func=_cmd_campaign_create)

    a = actions.add_parser("status", help="reports per group")
    a.add_argument("--server", required=True, help="the aggregator's URL")
    a.add_argument("--id", required=True, help="campaign id")
    a.add_argument("--json", action="store_true", help="print the JSON status")
    a.set_defaults(func=_cmd_campaign_status)

    a = actions.add_parser("export", help="download every stored report (admin)")
    a.add_argument("--server", required=True, help="the aggregator's URL")
    a.add_argument("--id", required=True, help="campaign id")
    a.add_argument("--token", default=None, help=f"admin token (default ${TOKEN_ENV})")
    a.add_argument("--out", default=None, help="JSON-lines file to write")
    a.add_argument("--parquet", default=None, metavar="ROOT",
                   help="write the Parquet report layout under ROOT instead "
                   "(ROOT/campaign=ID/group=G/part-*.parquet, see docs/engines.md)")
    a.add_argument("--plan-out", default=None, help="also write the plan JSON here")
    a.set_defaults(func=_cmd_campaign_export)

    def _campaign_help(args: argparse.Namespace) -> int:
        p.print_help()
        return 2

    p.set_defaults(func=_campaign_help)
