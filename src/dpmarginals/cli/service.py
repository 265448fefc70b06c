"""The ``serve``, ``client`` and ``campaign`` commands of ``dpmarginals``.

``COMMANDS`` holds them as data (:mod:`.spec`); ``register(subparsers)`` adds them to the
CLI's subparsers.  Errors a user can cause raise
:class:`~dpmarginals.core.errors.DPMarginalsError` (one line from the CLI).

A new user's session (tokens come from a file or the environment, never the command line,
where every local user could read them in /proc)::

    export DPMARGINALS_ADMIN_TOKEN=$(python -c 'import secrets; print(secrets.token_hex(16))')
    dpmarginals serve --db adult.db                                # terminal 1
    dpmarginals campaign create --server http://127.0.0.1:8000 \\
        --id adult --domain adult-domain.json --epsilon 1 --k 2 --n 48842
    dpmarginals client --server http://127.0.0.1:8000 --campaign adult --data adult.csv.gz \\
        --max-epsilon 1
    curl -H "Authorization: Bearer $DPMARGINALS_ADMIN_TOKEN" \\
        'http://127.0.0.1:8000/campaigns/adult/marginals?attributes=age,sex'
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import stat
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from ..core.errors import DPMarginalsError
from .argtypes import epsilon as _epsilon
from .argtypes import non_negative_int as _non_negative_int
from .argtypes import number_in
from .argtypes import positive_int as _positive_int
from .plans import longitudinal
from .spec import Actions, Command, Group, add_commands, arg

__all__ = ["COMMANDS", "register"]

_epsilon_total = number_in(0.0, float("inf"))
TOKEN_ENV = "DPMARGINALS_ADMIN_TOKEN"
ANALYST_ENV = "DPMARGINALS_ANALYST_TOKEN"
_ON_ARGV = ("a token on the command line is visible to every local user (ps, /proc); give "
            "{file} FILE (a file only you can read) or ${env}")


def _refuse_argv_token(flag: str, file_flag: str, env: str) -> Any:
    """An argparse type that refuses a token given on the command line, in one line."""
    def refuse(_: str) -> str:
        raise argparse.ArgumentTypeError(_ON_ARGV.format(file=file_flag, env=env))

    refuse.__name__ = flag
    return refuse


def read_token_file(path: str) -> str:
    """The token in ``path`` (surrounding whitespace removed); a warning on stderr if other
    users may read the file.  A file that does not exist is not named in the error: the
    argument may be a token typed in its place (issue #33)."""
    try:
        mode = os.stat(path).st_mode
        text = Path(path).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        raise DPMarginalsError("the token file given does not exist (its name is not shown: "
                               "it may be a token; give a file only you can read, or set "
                               "the token's environment variable)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DPMarginalsError(f"cannot read the token file {path!r}: "
                               f"{getattr(exc, 'strerror', None) or exc}") from None
    if not text or "\n" in text:
        raise DPMarginalsError(f"the token file {path!r} must hold one token on one line")
    if mode & (stat.S_IRGRP | stat.S_IROTH):
        print(f"warning: the token file {path} is readable by other users "
              f"(chmod 600 {path})", file=sys.stderr)
    return text


def _token_from(file: str | None, env: str) -> str | None:
    if file is not None:
        return read_token_file(file)
    return os.environ.get(env) or None


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


def _rate(value: float | None) -> float | None:
    return None if value is None or value == 0 else value


def _cmd_serve(args: argparse.Namespace) -> int:
    _need_service()
    from ..service.app import Limits, create_app
    from ..service.serving import Timeouts, run

    timeouts = Timeouts(header=args.header_timeout, keep_alive=args.keep_alive_timeout,
                        body=args.body_timeout, max_connections=args.max_connections)
    limits = Limits(requests_per_second=_rate(args.rate_limit), request_burst=args.rate_burst,
                    tickets_per_second=_rate(args.ticket_rate), ticket_burst=args.ticket_burst,
                    max_body_bytes=int(args.max_body_mb * (1 << 20)),
                    body_timeout=args.body_timeout, forwarded=args.forwarded)
    _check_address(args.host, args.port)
    admin = _token_from(args.admin_token_file, TOKEN_ENV)
    analyst = _token_from(args.analyst_token_file, ANALYST_ENV)
    generated = admin is None
    app = create_app(args.db, admin_token=admin, analyst_token=analyst, synchronous=args.sync,
                     limits=limits, release_processes=args.release_processes,
                     allow_origins=args.allow_origin)
    store = app.state.store
    where = getattr(store, "path", None) or "PostgreSQL"
    url = f"http://{args.host}:{args.port}"
    print(f"dpmarginals aggregator on {url} (store: {store.kind} {where}"
          + (f", synchronous={store.synchronous}" if store.kind == "sqlite" else "") + ")",
          file=sys.stderr)
    if generated:
        print(f"admin token: {app.state.admin_token} (generated; choose one with "
              f"--admin-token-file FILE or ${TOKEN_ENV})", file=sys.stderr)
    print(f"API documentation: {url}/docs   OpenAPI schema: {url}/openapi.json",
          file=sys.stderr, flush=True)
    run(app, args.host, args.port, timeouts=timeouts, log_level=args.log_level)
    return 0


# -- client -------------------------------------------------------------------------------
def _cmd_client(args: argparse.Namespace) -> int:
    if args.ledger is not None:
        if args.simulate:
            raise DPMarginalsError("--ledger (one device) and --simulate (every row a simulated "
                                   "user) exclude each other")
        if args.max_total_epsilon is None:
            raise DPMarginalsError("--ledger needs --max-total-epsilon EPS: the most this device "
                                   "ever spends (the server cannot raise it)")
        return _client_device(args)
    if not args.simulate:
        raise DPMarginalsError("give --ledger FILE --max-total-epsilon EPS (this device's one "
                               "record) or --simulate (every row of --data a simulated user, "
                               "for tests and demos)")
    if (args.max_total_epsilon is not None or args.max_period_epsilon is not None
            or args.min_longitudinal_ratio is not None or args.no_memoize):
        raise DPMarginalsError("--max-total-epsilon, --max-period-epsilon, "
                               "--min-longitudinal-ratio and --no-memoize are a device's "
                               "rules: they go with --ledger, not --simulate")
    return _client_simulated(args)


def _client_simulated(args: argparse.Namespace) -> int:
    """``--simulate``: every row of --data is another user (no ledger)."""
    from ..protocol.checks import check_plan
    from ..protocol.simulate import play, simulate_reports

    if args.server is None:
        if args.plan is None or args.save_reports is None:
            raise DPMarginalsError("give --server URL and --campaign ID, or (offline) --plan "
                                   "FILE and --save-reports FILE")
        plan = check_plan(args.plan, args.max_epsilon)
        reports = simulate_reports(plan, _records(args, plan), max_epsilon=args.max_epsilon)
        with open(args.save_reports, "w", encoding="utf-8") as sink:
            sink.writelines(json.dumps(r, separators=(",", ":")) + "\n" for r in reports)
        print(f"wrote {len(reports):,} simulated users' reports for plan {plan.hash[:12]} to "
              f"{args.save_reports}")
        return 0
    with _service_client(args) as client:
        records = _records(args, client.plan())
        summary = play(client, records, max_epsilon=args.max_epsilon, batch=args.batch,
                       assign=args.assign, save=args.save_reports)
    if args.json:
        print(json.dumps({**summary, "simulation": True}))
    else:
        rate = summary["reports_per_second"]
        print(f"sent {summary['sent']:,} simulated users' reports to campaign {args.campaign!r} "
              f"at {args.server} in {summary['seconds']:.2f} s"
              + (f" ({rate:,.0f} reports/s)" if rate else ""))
    return 0


def _records(args: argparse.Namespace, plan: Any) -> Any:
    """The rows of --data a ``--simulate`` run plays (codes in the plan's domain order):
    after the first --skip, at most --limit (a phase of an adaptive collection without
    them: the phase's own slice).  Read as ``release`` reads a table: labels, bins and
    codes as the plan's domain declares them, errors naming the column, line and value."""
    from ..core.records import read_records

    rows = read_records(args.data, plan.domain, extra_columns="ignore").codes
    skip, limit = args.skip, args.limit
    phase, planned = plan.params.get("phase"), plan.params.get("phase_users")
    if (skip == 0 and limit is None and isinstance(phase, int) and isinstance(planned, list)
            and 1 <= phase <= len(planned) and len(planned) > 1):
        # an adaptive collection's phase: its own users, the rows after the earlier phases'
        skip, limit = sum(int(u) for u in planned[: phase - 1]), int(planned[phase - 1])
        if phase == len(planned):
            limit = None  # the last phase takes the rest
        print(f"dpmarginals: note: phase {phase} of {len(planned)}: rows {skip + 1:,} to "
              f"{'the end' if limit is None else f'{skip + limit:,}'} of --data (the phase's "
              "users; --skip and --limit choose others)", file=sys.stderr)
    chosen = rows[skip:][:limit]
    if not len(chosen):
        raise DPMarginalsError(f"--skip {skip} leaves none of the {len(rows):,} rows of "
                               f"{args.data}")
    return chosen


def _device_record(args: argparse.Namespace, plan: Any) -> Any:
    """--data's one record for a device (``client --ledger``): its codes, or, when a value
    is outside the plan's domain, the raw values for the device to substitute (a refusal
    the server could see would tell it so: :mod:`dpmarginals.protocol.device`, step 6).
    File errors (no file, no rows, more than one record) are still one-line errors."""
    from ..core.encoding import encode_frame
    from ..core.records import read_frame

    frame = read_frame(args.data, plan.domain).iloc[args.skip:][: args.limit]
    if len(frame) != 1:
        raise DPMarginalsError(f"--ledger keeps one device's budget: --data must hold one "
                               f"record after --skip (or add --limit 1), got {len(frame):,}")
    try:
        return [int(v) for v in encode_frame(frame, plan.domain, extra_columns="ignore")[0]]
    except DPMarginalsError:
        row = frame.iloc[0]
        return {a: _raw_value(row[a], plan.domain.labels[i])
                for i, a in enumerate(plan.domain.attributes) if a in frame.columns}


def _raw_value(value: Any, labels: Any) -> Any:
    """A cell as the device reads a value of an attribute with these ``labels``: a label as
    text, a binned number as a number, a code as an int (what it cannot read, it
    substitutes)."""
    if hasattr(value, "item"):
        value = value.item()
    if labels is not None and labels.bins is None:
        return value if isinstance(value, str) else str(value)
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return value  # a bin's name, or text where a code belongs
    if isinstance(value, float) and value.is_integer() and labels is None:
        return int(value)
    return value


def _service_client(args: argparse.Namespace) -> Any:
    """The campaign's client, its plan fetched and compared with ``--plan`` if given."""
    from ..protocol.checks import check_plan
    from ..protocol.http import ServiceClient

    if args.campaign is None:
        raise DPMarginalsError("--campaign ID is required with --server")
    client = ServiceClient(args.server, args.campaign, timeout=args.timeout,
                           retries=args.retries)
    try:
        plan = check_plan(client.plan(), args.max_epsilon)
        if args.plan is not None and check_plan(args.plan, args.max_epsilon).hash != plan.hash:
            raise DPMarginalsError(f"the campaign's plan {plan.hash[:12]} is not {args.plan}")
    except BaseException:
        client.close()
        raise
    return client


def _client_device(args: argparse.Namespace) -> int:
    """``--ledger FILE``: the one record of --data as this device's report."""
    from ..protocol.checks import check_plan
    from ..protocol.device import MIN_LONGITUDINAL_RATIO, Device

    device = Device(args.ledger, max_epsilon=args.max_epsilon,
                    max_total_epsilon=args.max_total_epsilon,
                    max_period_epsilon=args.max_period_epsilon,
                    period_seconds=3600.0 * args.period_hours,
                    min_longitudinal_ratio=(MIN_LONGITUDINAL_RATIO
                                            if args.min_longitudinal_ratio is None
                                            else args.min_longitudinal_ratio),
                    memoize=not args.no_memoize)

    if args.server is None:
        if args.plan is None or args.save_reports is None or args.campaign is None:
            raise DPMarginalsError("offline, --ledger needs --plan FILE, --save-reports FILE "
                                   "and --campaign ID (the campaign's name in the ledger)")
        plan = check_plan(args.plan, args.max_epsilon)
        origin = "offline"
        stored = device.stored_report(origin=origin, campaign=args.campaign) is not None
        report = device.report(plan, _device_record(args, plan), origin=origin,
                               campaign=args.campaign)
        with open(args.save_reports, "w", encoding="utf-8") as sink:
            sink.write(json.dumps(report, separators=(",", ":")) + "\n")
    else:
        with _service_client(args) as client:
            plan = client.plan()
            origin = client.origin
            stored = device.stored_report(origin=origin, campaign=args.campaign) is not None
            report = client.submit(_device_record(args, plan), device, assign=args.assign)
    key = f"{origin}|{args.campaign}"
    out = {"campaign": args.campaign, "origin": origin, "plan_hash": plan.hash,
           "group": report["group"], "report_id": report["report_id"],
           "epsilon_charged": device.ledger.spent(key), "epsilon_total": device.ledger.spent(),
           "max_total_epsilon": device.max_total_epsilon}
    if args.json:
        print(json.dumps(out))
    else:
        verb = "wrote" if args.server is None else "sent"
        charged = (f"the stored report, nothing charged now (it cost "
                   f"{out['epsilon_charged']:g})" if stored else
                   f"charged epsilon {out['epsilon_charged']:g}")
        print(f"{verb} report {report['report_id']} (group {report['group']}) for campaign "
              f"{args.campaign!r}: {charged}, device total {out['epsilon_total']:g} of "
              f"max_total_epsilon {device.max_total_epsilon:g} (ledger {args.ledger})")
    return 0


# -- campaign -----------------------------------------------------------------------------
def _token(args: argparse.Namespace) -> str:
    token = _token_from(args.token_file, TOKEN_ENV)
    if not token:
        raise DPMarginalsError(f"the admin token is needed: --token-file FILE or ${TOKEN_ENV}")
    return token


def _reader_token(args: argparse.Namespace) -> str | None:
    """For status: the token file, else $DPMARGINALS_ANALYST_TOKEN, else the admin's."""
    if args.token_file is not None:
        return read_token_file(args.token_file)
    return os.environ.get(ANALYST_ENV) or os.environ.get(TOKEN_ENV) or None


def _when(text: str) -> float:
    """A Unix time from ``2025-12-31``, ``2025-12-31T18:00:00+00:00`` or seconds."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an ISO date/time or Unix seconds, got "
                                         f"{text!r}") from None
    if moment.tzinfo is None:
        raise argparse.ArgumentTypeError(f"give the time zone of {text!r} (e.g. "
                                         f"{text}+00:00)")
    return moment.timestamp()


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in ("min_reports", "expires_at", "refresh_seconds", "tickets",
                 "status_granularity"):
        if getattr(args, name) is not None:
            out[name] = getattr(args, name)
    if args.public:
        out["public"] = True
    if args.keep_flagged:
        out["exclude_flagged"] = False
    return out


def _build_plan(args: argparse.Namespace) -> Any:
    from ..protocol.checks import load_plan

    if args.plan is not None:
        if any(v is not None for v in (args.domain, args.epsilon, args.k, args.n)):
            raise DPMarginalsError("give either --plan or --domain/--epsilon/--k/--n, not both")
        return load_plan(args.plan)
    missing = [f"--{f}" for f in ("domain", "epsilon", "k", "n") if getattr(args, f) is None]
    if missing:
        raise DPMarginalsError(f"to build a plan give {', '.join(missing)} (or --plan FILE)")
    from .plans import build_plan

    return build_plan(args.method, args.domain, args.epsilon, args.k, args.n, args.oracle,
                      args.longitudinal_epsilon)


def _cmd_campaign_create(args: argparse.Namespace) -> int:
    from ..protocol.http import ServiceClient

    plan = _build_plan(args)
    if args.save_plan is not None:
        plan.save(args.save_plan)
    with ServiceClient(args.server, args.id, token=_token(args)) as client:
        out = client.create_campaign(plan, _settings(args))
    from .plans import describe_plan

    verb = "created" if out.get("created") else "found existing"
    print(f"{verb} campaign {args.id!r}: {describe_plan(plan)}")
    return 0


def _cmd_campaign_status(args: argparse.Namespace) -> int:
    from ..protocol.http import ServiceClient

    with ServiceClient(args.server, args.id, token=_reader_token(args)) as client:
        status = client.status()
    if args.json:
        print(json.dumps(status))
        return 0
    print(f"campaign {args.id!r} ({status.get('state', 'open')}): {status['reports']:,} "
          f"reports, plan {status['plan_hash'][:12]}"
          + (f"; per group in steps of {status['granularity']}"
             if status.get("granularity", 1) > 1 else ""))
    for g in status["groups"]:
        print(f"  group {g['group']:>3}  {','.join(g['attributes']):<40} {g['oracle']:>4}  "
              f"{g['reports']:>9,}")
    return 0


def _cmd_campaign_export(args: argparse.Namespace) -> int:
    from ..protocol.http import ServiceClient

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


def _cmd_campaign_close(args: argparse.Namespace) -> int:
    from ..protocol.http import ServiceClient

    with ServiceClient(args.server, args.id, token=_token(args)) as client:
        client.close_campaign()
    print(f"closed campaign {args.id!r}: no more assignments or reports")
    return 0


def _cmd_campaign_next_phase(args: argparse.Namespace) -> int:
    from ..protocol.http import ServiceClient

    with ServiceClient(args.server, args.id, token=_token(args)) as client:
        out = client.open_next_phase(args.users, None if args.expires_at is None
                                     else {"expires_at": args.expires_at})
    verb = "opened" if out.get("created") else "found existing"
    predicted = out.get("predicted_sse")
    phase = out.get("phase")
    print(f"closed phase {phase - 1 if isinstance(phase, int) else '?'} ({args.id!r}); "
          f"{verb} phase {phase} as campaign {out['id']!r}: "
          f"{out['groups']} groups, plan hash {out['plan_hash']}"
          + (f", predicted SSE per query {predicted:.3g}"
             if isinstance(predicted, int | float) else ""))
    return 0


# -- the commands -------------------------------------------------------------------------
#: ``--token-file`` of the admin commands, and the ``--token`` refused on the command line.
_ADMIN_TOKEN_FILE = (
    arg("--token-file", default=None, metavar="FILE",
        help=f"file holding the admin token (default ${TOKEN_ENV})"),
    arg("--token", type=_refuse_argv_token("token", "--token-file", TOKEN_ENV),
        default=None, help=argparse.SUPPRESS),
)

SERVE = Command(
    "serve", help="run the collection service (aggregator) over a durable store",
    run=_cmd_serve,
    # allow_abbrev=False: "--analyst-token X" must not pass for --analyst-token-file
    parser_options={"allow_abbrev": False},
    description="Run the HTTP aggregator: campaigns from plans, group assignment, report "
    "ingestion (singly and in batches), status and marginal queries. Needs the service "
    "extra. Reports are stored durably before they are acknowledged. The access log is "
    "off: the service keeps no client addresses or arrival times.",
    args=(
        arg("--db", default="dpmarginals.db",
            help="SQLite file (default ./dpmarginals.db) or postgresql://user@host/db"),
        arg("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)"),
        arg("--port", type=_port, default=8000, help="port (default 8000)"),
        arg("--admin-token-file", default=None, metavar="FILE",
            help=f"file holding the token for the admin endpoints (default "
            f"${TOKEN_ENV}, else random and printed)"),
        arg("--analyst-token-file", default=None, metavar="FILE",
            help=f"file holding the token that reads status and marginals of campaigns "
            f"that are not public (default ${ANALYST_ENV}; the admin token works too)"),
        arg("--admin-token", default=None, help=argparse.SUPPRESS,
            type=_refuse_argv_token("admin-token", "--admin-token-file", TOKEN_ENV)),
        arg("--analyst-token", default=None, help=argparse.SUPPRESS,
            type=_refuse_argv_token("analyst-token", "--analyst-token-file", ANALYST_ENV)),
        arg("--sync", choices=("full", "normal"), default="full",
            help="SQLite synchronous mode: full (default; an acknowledged report "
            "survives power loss) or normal (survives a crash of the process)"),
        arg("--max-body-mb", type=float, default=8.0,
            help="largest request body in MiB (default 8)"),
        arg("--header-timeout", type=float, default=10.0, metavar="S",
            help="seconds a connection has to send a request's headers (default 10)"),
        arg("--keep-alive-timeout", type=float, default=5.0, metavar="S",
            help="seconds an idle keep-alive connection stays open (default 5)"),
        arg("--body-timeout", type=float, default=60.0, metavar="S",
            help="seconds a request has to send its body (default 60)"),
        arg("--max-connections", type=_positive_int, default=1000,
            help="concurrent connections; more are closed at once (default 1000)"),
        arg("--rate-limit", type=float, default=500.0, metavar="PER_S",
            help="client requests per second per source (default 500; 0: no limit)"),
        arg("--rate-burst", type=float, default=2000.0,
            help="requests a source may save up (default 2000)"),
        arg("--ticket-rate", type=float, default=2000.0, metavar="PER_S",
            help="tickets (assigned users) per second per source (default 2000; 0: no "
            "limit); a deployment with one device per address sets this low"),
        arg("--ticket-burst", type=float, default=100_000.0,
            help="tickets a source may save up (default 100000)"),
        arg("--release-processes", type=int, choices=(0, 1), default=1,
            help="compute releases in a separate process (1, the default: the server's "
            "requests never wait for its Python) or in a thread of the server (0)"),
        arg("--forwarded", action="store_true",
            help="count sources by the last X-Forwarded-For address (only behind a "
            "proxy that sets it)"),
        arg("--allow-origin", action="append", default=[], metavar="ORIGIN",
            help="a web origin (https://app.example, or *) whose pages may report from "
            "a browser (CORS on the client endpoints: GET and POST, no credentials); "
            "repeat for more; default none"),
        arg("--log-level", default="warning",
            choices=("critical", "error", "warning", "info", "debug")),
    ),
)

CLIENT = Command(
    "client", help="report as one device (--ledger), or play every CSV row as a "
    "simulated user (--simulate)",
    run=_cmd_client,
    description="Randomize records with OS entropy and send the reports. The campaign's "
    "plan is refused (one line, nothing drawn) if it asks for more than --max-epsilon per "
    "report, if a group's epsilon is not the plan's, or if its hash or cells do not "
    "match. A device (--ledger FILE, with --max-total-epsilon): the one record of --data "
    "is its report, once per campaign, the campaign pinned to the plan it first showed, "
    "one phase per collection, a memoized plan's permanent response kept per value and "
    "noised afresh for every report, every report charged against --max-total-epsilon "
    "(and --max-period-epsilon per --period-hours). --simulate: every row of --data is "
    "another simulated user, with no ledger (tests and demos). --data is read as "
    "`release` reads it: labels, bins or codes, as the plan's domain declares. Offline: "
    "--plan FILE --save-reports FILE without --server writes the reports instead.",
    args=(
        arg("--server", default=None, help="the aggregator's URL"),
        arg("--campaign", default=None, help="campaign id"),
        arg("--data", required=True,
            help="CSV (plain or compressed) or Parquet whose header names the plan's "
            "attributes; values as the plan's domain declares them"),
        arg("--max-epsilon", type=_epsilon, required=True, metavar="EPS",
            help="required: the most epsilon this device spends on one report; a plan "
            "asking for more is refused"),
        arg("--ledger", default=None, metavar="FILE",
            help="this device's privacy ledger (JSON, created if missing)"),
        arg("--max-total-epsilon", type=_epsilon_total, default=None, metavar="EPS",
            help="required with --ledger: the most epsilon this device ever spends"),
        arg("--max-period-epsilon", type=_epsilon_total, default=None, metavar="EPS",
            help="with --ledger: the most epsilon spent in any --period-hours"),
        arg("--period-hours", type=float, default=24.0, metavar="H",
            help="the period of --max-period-epsilon (default 24)"),
        arg("--min-longitudinal-ratio", type=float, default=None, metavar="R",
            help="with --ledger: refuse a memoized plan whose longitudinal epsilon is below "
            "R x its epsilon (default 4: nearer 1, a device's reports link across "
            "campaigns; docs/device-spec.md section 4)"),
        arg("--no-memoize", action="store_true",
            help="with --ledger: keep no permanent response; every report of a memoized plan "
            "is drawn afresh and charged in full, linked to others only by the group kept "
            "per plan, so whether the value changed is bounded by the charges like the "
            "value (docs/device-spec.md section 4)"),
        arg("--simulate", action="store_true",
            help="every row of --data is another simulated user (no ledger)"),
        arg("--plan", default=None,
            help="plan JSON (offline mode, or to check the campaign's plan)"),
        arg("--batch", type=_positive_int, default=1000,
            help="with --simulate: reports per request (default 1000; 1 sends each "
            "report alone)"),
        arg("--assign", choices=("server", "local"), default="server",
            help="groups from the service (default) or drawn on the device"),
        arg("--limit", type=_positive_int, default=None, help="only the first N rows"),
        arg("--skip", type=_non_negative_int, default=0, metavar="N",
            help="skip the first N rows (with --limit M: rows N+1..N+M; e.g. one slice "
            "of a file per phase of an adaptive campaign)"),
        arg("--save-reports", default=None, help="also write the reports (JSON lines)"),
        arg("--timeout", type=float, default=30.0, help="seconds per request"),
        arg("--retries", type=int, default=3,
            help="retries of a request on a lost connection or a 502-504 (default 3)"),
        arg("--json", action="store_true", help="print one JSON object"),
    ),
)

_CREATE = Command(
    "create", help="create a campaign from a plan", run=_cmd_campaign_create,
    description="Create a campaign from --plan FILE, or build a plan "
    "with --method (default calm) from --domain, --epsilon, --k, --n.",
    args=(
        arg("--server", required=True, help="the aggregator's URL"),
        arg("--id", required=True, help="campaign id (letters, digits, _ . -)"),
        *_ADMIN_TOKEN_FILE,
        arg("--plan", default=None, help="plan JSON file"),
        arg("--domain", default=None, help="domain JSON ({\"attr\": size})"),
        arg("--epsilon", type=_epsilon, default=None, help="privacy budget"),
        arg("--k", type=_positive_int, default=None, help="marginal size to answer"),
        arg("--n", type=_positive_int, default=None, help="expected number of users"),
        arg("--method", default="calm", help="method building the plan (default calm)"),
        arg("--oracle", default=None, help="CALM's oracle choice (default adaptive)"),
        arg("--longitudinal-epsilon", type=longitudinal, default="auto",
            metavar="EPS|auto|none",
            help="what any number of reports of an unchanged value may reveal (devices "
            "memoize a permanent response); auto (default): 4 x --epsilon where the "
            "plan can be memoized; none: every report charged in full"),
        arg("--save-plan", default=None, help="also write the plan JSON here"),
        Group("settings (docs/deployment.md)", (
            arg("--public", action="store_true",
                help="status and marginals readable without a token"),
            arg("--min-reports", type=int, default=None, metavar="N",
                help="release nothing before N reports (default 0)"),
            arg("--expires", dest="expires_at", type=_when, default=None, metavar="WHEN",
                help="close the campaign at this time (ISO 8601 with a time zone, or Unix "
                "seconds)"),
            arg("--refresh-seconds", type=float, default=None, metavar="S",
                help="recompute the release at most every S seconds (default 10; 0: after "
                "every change)"),
            arg("--tickets", choices=("assigned", "any", "off"), default=None,
                help="each report needs a single-use ticket from /assignment, bound to "
                "its group (assigned, the default), to no group (any: devices choose "
                "their group), or no tickets (off)"),
            arg("--keep-flagged", action="store_true",
                help="release groups the poisoning check flags instead of leaving them out"),
            arg("--status-granularity", type=int, default=None, metavar="N",
                help="round per-group counts in /status down to multiples of N (default "
                "100; 1: exact)"),
        )),
    ),
)

_STATUS = Command(
    "status", help="reports per group", run=_cmd_campaign_status,
    args=(
        arg("--server", required=True, help="the aggregator's URL"),
        arg("--id", required=True, help="campaign id"),
        arg("--token-file", default=None, metavar="FILE",
            help=f"file holding the analyst or admin token (default ${ANALYST_ENV}, "
            f"else ${TOKEN_ENV}; a public campaign needs none)"),
        arg("--token", type=_refuse_argv_token("token", "--token-file", ANALYST_ENV),
            default=None, help=argparse.SUPPRESS),
        arg("--json", action="store_true", help="print the JSON status"),
    ),
)

_CLOSE = Command(
    "close", help="close a campaign: no more assignments or reports", run=_cmd_campaign_close,
    args=(
        arg("--server", required=True, help="the aggregator's URL"),
        arg("--id", required=True, help="campaign id"),
        *_ADMIN_TOKEN_FILE,
    ),
)

_NEXT_PHASE = Command(
    "next-phase", help="adaptive campaigns: close a phase and open the next "
    "(PHASE1-ID.phaseJ), planned from every phase's reports so far",
    run=_cmd_campaign_next_phase,
    args=(
        arg("--server", required=True, help="the aggregator's URL"),
        arg("--id", required=True, help="the campaign id of the phase to close"),
        arg("--users", type=int, default=None,
            help="users who will report in the next phase (default: the share phase "
            "1's plan set for it; in the last phase, the plan's n less every report "
            "so far)"),
        arg("--expires", dest="expires_at", type=_when, default=None, metavar="WHEN",
            help="close the next phase at this time (ISO 8601 with a time zone, or "
            "Unix seconds; default: this phase's expiry, which the next inherits with "
            "its other settings)"),
        *_ADMIN_TOKEN_FILE,
    ),
)

_EXPORT = Command(
    "export", help="download a snapshot of the stored reports (admin)",
    run=_cmd_campaign_export,
    args=(
        arg("--server", required=True, help="the aggregator's URL"),
        arg("--id", required=True, help="campaign id"),
        *_ADMIN_TOKEN_FILE,
        arg("--out", default=None, help="JSON-lines file to write"),
        arg("--parquet", default=None, metavar="ROOT",
            help="write the Parquet report layout under ROOT instead "
            "(ROOT/campaign=ID/group=G/part-*.parquet, see docs/engines.md)"),
        arg("--plan-out", default=None, help="also write the plan JSON here"),
    ),
)

CAMPAIGN = Command(
    "campaign", help="create a campaign on a service, show its status, export reports",
    run=None, description="Administer campaigns of a running aggregator.",
    actions=Actions("campaign_action", "ACTION",
                    (_CREATE, _STATUS, _CLOSE, _NEXT_PHASE, _EXPORT), allow_abbrev=False),
)

#: ``serve``, ``client`` and ``campaign``, in the order ``dpmarginals --help`` lists them.
COMMANDS = (SERVE, CLIENT, CAMPAIGN)


def register(subparsers: Any) -> None:
    """Add ``serve``, ``client`` and ``campaign`` to the CLI's subparsers."""
    add_commands(subparsers, COMMANDS)
