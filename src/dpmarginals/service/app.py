"""The aggregator's HTTP API (FastAPI): campaigns, plans, assignments, reports, answers.

``create_app(store, admin_token=...)`` returns the ASGI app; ``dpmarginals serve`` runs it
with uvicorn (:mod:`.serving`).  Endpoints (all JSON; every error is
``{"error": code, "reason": text}``, :mod:`.errors`):

=======  ==================================  ========  =====================================
method   path                                token     what
=======  ==================================  ========  =====================================
GET      /health                                       liveness and the store's kind
POST     /campaigns                          admin     create ``{"id", "plan", "settings"}``
GET      /campaigns                          analyst   the campaigns (without: public ones)
POST     /campaigns/{id}/close               admin     no more assignments or reports
POST     /campaigns/{id}/next-phase          admin     close a phase of an adaptive campaign,
                                                       open the next, ``{phase 1}.phase{j}``
                                                       (:mod:`.phases`; ``{"users",
                                                       "settings"}``, both optional: settings
                                                       over this phase's)
GET      /campaigns/{id}/plan                          the public plan (with its hash)
GET      /campaigns/{id}/assignment                    a group and its single-use ticket
                                                       (``?count=`` for many)
POST     /campaigns/{id}/reports                       one report (with its ticket)
POST     /campaigns/{id}/reports/batch                 ``{"reports": [...]}``, atomically
GET      /campaigns/{id}/status              analyst*  reports, state, the last release
GET      /campaigns/{id}/marginals           analyst*  ``?attributes=a,b[&format=csv]``
GET      /campaigns/{id}/reports             admin     a snapshot of the stored reports
=======  ==================================  ========  =====================================

(*) not needed for a campaign whose settings make it public.  The admin token also
serves as an analyst token.  A report is acknowledged (201) only after its transaction
has committed; a rejected report or batch (4xx, with the reason and the index of the
first bad report) changes nothing.  Reads answer from the campaign's cached release
(:mod:`.releases`).  Request bodies are limited in size, buffered bytes and time
(:mod:`.limits`); requests and tickets are rate-limited per source (429).
"""

# No "from __future__ import annotations": FastAPI reads the endpoints' annotations.  FastAPI
# itself is imported in create_app, so this module imports (and its doctests collect)
# without the service extra.
import copy
import hmac
import json
import math
import os
import re
import secrets
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import ExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Annotated, Any, Literal

import numpy as np

from .. import __version__
from ..aggregation import answer_domain
from ..core.errors import DPMarginalsError
from ..protocol.phases import (
    check_next_phase,
    earlier_hashes,
    has_next_phase,
    next_phase_name,
    phase_of,
)
from ..protocol.reports import BATCH_SCHEMA, MAX_BATCH_REPORTS, REPORT_SCHEMA, ReportError
from .admission import PlanRejected, admit_plan, check_structure
from .docs import add_api_docs
from .errors import ServiceError, add_error_handlers, responses
from .limits import BodyReader, RateLimiter, source_of
from .phases import check_phase_one, earlier_phases, next_phase_plan
from .releases import Release, Releases, marginal_answer
from .routes import Route, add_routes
from .settings import CampaignSettings
from .store import Campaign, Store, open_store
from .tickets import TicketMint
from .web import add_web_page

__all__ = ["DEFAULT_MAX_BODY_BYTES", "Limits", "ServiceError", "check_origins", "create_app"]

DEFAULT_MAX_BODY_BYTES = 8 << 20
CAMPAIGN_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$"
MAX_ASSIGNMENTS = MAX_BATCH_REPORTS
MAX_QUERY_LENGTH = 4096
MAX_ANSWER_CELLS = 1 << 18
_ANSWER_WAIT = 30.0  # seconds a read waits for another uncached answer being made


@dataclass(frozen=True)
class Limits:
    """Per-source rates (token buckets; None: no limit) and the body bounds.

    ``requests_per_second``/``request_burst``: client requests (plan, assignment,
    reports); ``tickets_per_second``/``ticket_burst``: tickets handed out (one per
    assigned user).  The defaults let one machine play a data set of 100,000 users
    (tests, demos); a deployment where each source is one device sets them near one
    ticket per device (docs/deployment.md).  ``forwarded``: count sources by the last
    ``X-Forwarded-For`` address (only behind a proxy that sets it).
    """

    requests_per_second: float | None = 500.0
    request_burst: float = 2000.0
    tickets_per_second: float | None = 2000.0
    ticket_burst: float = 100_000.0
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_buffered_bytes: int | None = None
    body_timeout: float = 60.0
    forwarded: bool = False


def _ticketed(schema: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(schema)
    out["properties"]["ticket"] = {"type": "string", "description": "the single-use ticket "
                                   "of the report's assignment (GET /assignment)"}
    return out


TICKETED_REPORT_SCHEMA = _ticketed(REPORT_SCHEMA)
TICKETED_BATCH_SCHEMA = copy.deepcopy(BATCH_SCHEMA)
TICKETED_BATCH_SCHEMA["properties"]["reports"]["items"] = TICKETED_REPORT_SCHEMA
CREATE_SCHEMA: dict[str, Any] = {
    "title": "NewCampaign",
    "type": "object",
    "required": ["id", "plan"],
    "additionalProperties": False,
    "properties": {
        "id": {"type": "string", "pattern": CAMPAIGN_PATTERN},
        "plan": {"type": "object", "description": "a dpmarginals plan (Plan.to_dict(); see "
                 "docs/deployment.md)", "required": ["method", "epsilon", "domain", "groups"]},
        "settings": {"type": "object", "description": "the campaign's settings (see "
                     "docs/deployment.md); every field optional"},
    },
}


def _body(schema: dict[str, Any]) -> dict[str, Any]:
    return {"requestBody": {"required": True,
                            "content": {"application/json": {"schema": schema}}}}


class Aggregator:
    """The service's state: the store, tokens, limits, tickets, releases, the assigner."""

    def __init__(self, store: Store, admin_token: str, analyst_token: str | None,
                 limits: Limits, release_processes: int = 0) -> None:
        self.store = store
        self.admin_token = admin_token
        self.analyst_token = analyst_token
        self.limits = limits
        self.bodies = BodyReader(limits.max_body_bytes, max_buffered=limits.max_buffered_bytes,
                                 body_timeout=limits.body_timeout)
        self.requests = RateLimiter(limits.requests_per_second, limits.request_burst,
                                    what="requests")
        self.tickets = RateLimiter(limits.tickets_per_second, limits.ticket_burst,
                                   what="tickets")
        self.mint = TicketMint(store.ticket_secret(), store.reserve_serials)
        self.releases = Releases(store, processes=release_processes)
        self._assigned: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()
        self._parsing = threading.BoundedSemaphore(max(1, os.cpu_count() or 1))
        self.answering = threading.BoundedSemaphore(1)

    def campaign(self, name: str) -> Campaign:
        found = self.store.campaign(name)
        if found is None:
            raise ServiceError(404, "unknown_campaign", f"no campaign {name!r}")
        return found

    def open_campaign(self, name: str) -> Campaign:
        """The campaign, if it still takes assignments and reports (else 410)."""
        found = self.campaign(name)
        if self.store.is_closed(found):
            later = self._open_later_phase(name, found)
            raise ServiceError(410, "campaign_closed", f"campaign {name!r} is closed"
                               + (" (expired)" if found.settings.expired() else "")
                               + (f"; its phase {phase_of(later.plan)} collects as "
                                  f"campaign {later.name!r}" if later else ""))
        return found

    def _open_later_phase(self, name: str, found: Campaign) -> Campaign | None:
        """The first later phase of ``found``'s collection that is open, if any (phase 2
        may be closed too once phase 3 opened)."""
        while has_next_phase(found.plan):
            name = next_phase_name(name, found.plan)
            nxt = self.store.campaign(name)
            if nxt is None:
                return None
            if not self.store.is_closed(nxt):
                return nxt
            found = nxt
        return None

    # -- tokens ---------------------------------------------------------------------------
    def is_admin(self, given: str) -> bool:
        return bool(given) and hmac.compare_digest(given.encode(), self.admin_token.encode())

    def is_analyst(self, given: str) -> bool:
        if self.is_admin(given):
            return True
        token = self.analyst_token
        return bool(given and token) and hmac.compare_digest(given.encode(), token.encode())

    def check_reader(self, campaign: Campaign, given: str) -> None:
        if not campaign.settings.public and not self.is_analyst(given):
            raise ServiceError(401, "unauthorized", f"campaign {campaign.name!r} is not "
                               "public: this needs the analyst (or admin) token "
                               "(Authorization: Bearer <token>)")

    # -- ingestion ------------------------------------------------------------------------
    def ingest(self, name: str, body: bytes | bytearray, *, batch: bool) -> dict[str, Any]:
        """Validate a body of reports and store them; as many bodies are parsed at once
        as there are cores (more would only take turns holding the interpreter, and
        delay the answers of reads)."""
        campaign = self.open_campaign(name)
        with self._parsing:
            decoded, serials = self._admit(campaign, body, batch=batch)
        try:
            accepted = self.store.add_reports(campaign, decoded, serials)
        except ReportError as exc:
            if batch:
                raise
            raise ReportError(exc.reason, code=exc.code, duplicates=exc.duplicates) from None
        return {"accepted": accepted}

    def _admit(self, campaign: Campaign, body: bytes | bytearray, *, batch: bool
               ) -> tuple[Any, np.ndarray | None]:
        """The decoded reports of a body and the serials of their verified tickets."""
        if not check_structure(body, MAX_BATCH_REPORTS if batch else 1):
            raise ServiceError(413 if batch else 422, "batch_too_large" if batch else
                               "invalid_report", "the body holds more JSON values than "
                               + (f"{MAX_BATCH_REPORTS} reports" if batch else "one report")
                               + " can")
        data = _parse_json(body)
        if batch:
            if not isinstance(data, dict) or set(data) != {"reports"}:
                raise ReportError('a batch must be {"reports": [report, ...]}')
            items = data["reports"]
            if not isinstance(items, list) or not items:
                raise ReportError('"reports" must be a non-empty array')
            if len(items) > MAX_BATCH_REPORTS:
                raise ServiceError(413, "batch_too_large", f"a batch holds at most "
                                   f"{MAX_BATCH_REPORTS} reports, got {len(items)}")
        else:
            items = [data]
        tickets = [it.pop("ticket", None) if type(it) is dict else None for it in items]
        decoded = campaign.codec.decode(items, indexed=batch)
        serials = None
        if campaign.settings.tickets != "off":
            # The tickets first: without a valid one nothing about the stored reports is
            # answered (a duplicate id would tell that a report exists; issue #33).  A
            # retried batch carries its tickets again: they verify, and the store answers
            # duplicate_report before it looks at their spent serials.
            serials = self.mint.verify(campaign.num, tickets, decoded.groups, indexed=batch)
        return decoded, serials

    # -- assignment -----------------------------------------------------------------------
    def assign(self, campaign: Campaign, count: int) -> list[int]:
        """Groups for ``count`` users: the least-assigned groups first, ties at random.

        Starts from the stored reports per group, so the groups stay balanced across
        restarts; randomness from the OS (the order of users within a call is shuffled).
        """
        with self._lock:
            level = self._assigned.get(campaign.name)
            if level is None:
                level = self._assigned[campaign.name] = self.store.users(campaign).copy()
            out: list[int] = []
            while len(out) < count:
                low = np.flatnonzero(level == level.min()).tolist()
                _shuffle(low)
                take = low[: count - len(out)]
                level[take] += 1
                out.extend(take)
        _shuffle(out)
        return out


def _shuffle(items: list[int]) -> None:
    """A uniformly random order from OS entropy, in place: sort by 64-bit random keys
    (drawn again in the rare case two are equal, so every order is equally likely)."""
    if len(items) < 2:
        return
    arr = np.asarray(items, dtype=np.int64)
    while True:
        keys = np.frombuffer(os.urandom(8 * arr.size), dtype=np.uint64)
        if np.unique(keys).size == keys.size:
            items[:] = arr[np.argsort(keys)].tolist()
            return


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:20]} is out of range")
    return value


def _no_constants(text: str) -> float:
    raise ValueError(f"{text} is not a JSON number")


def _parse_json(body: bytes | bytearray) -> Any:
    """Strict JSON: no NaN/Infinity (nor floats that overflow to them)."""
    try:
        return json.loads(body, parse_float=_finite, parse_constant=_no_constants)
    except (ValueError, RecursionError) as exc:  # includes bad UTF-8 and huge integers
        raise ServiceError(400, "invalid_json", f"the body is not JSON: {exc}"[:300]) from None


def _secret(value: str | None, env: str) -> str | None:
    return (value if value is not None else os.environ.get(env)) or None


def create_app(
    store: Store | str | os.PathLike[str] | None = None, *, admin_token: str | None = None,
    analyst_token: str | None = None, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    synchronous: str = "full", limits: Limits | None = None, release_processes: int = 0,
    allow_origins: tuple[str, ...] | list[str] = (),
) -> Any:
    """The aggregator app over ``store`` (a Store, a SQLite path or a PostgreSQL URL).

    ``admin_token`` guards the admin endpoints (``Authorization: Bearer <token>``); when
    None, ``$DPMARGINALS_ADMIN_TOKEN`` or else a random token (``app.state.admin_token``).
    ``analyst_token`` (else ``$DPMARGINALS_ANALYST_TOKEN``, else none: only the admin
    token) reads the status and marginals of campaigns that are not public.  ``limits``
    sets the rate limits and body bounds (its ``max_body_bytes`` wins over the argument
    when given).  ``release_processes=1`` computes releases in a separate process
    (``dpmarginals serve`` does), 0 in a thread of this one.  A store given by path or URL
    is opened here and closed when the app shuts down.  ``allow_origins``: the web origins
    (``https://app.example``, or ``*``) whose pages may call the client endpoints from a
    browser (CORS: GET and POST with a JSON body, no credentials, ``Retry-After`` readable);
    none by default.
    """
    fa = _fastapi()
    origins = check_origins(allow_origins)
    if limits is None:
        limits = Limits(max_body_bytes=max_body_bytes)
    owned = not isinstance(store, Store)
    spec = store if store is not None else Path("dpmarginals.db")
    token = _secret(admin_token, "DPMARGINALS_ADMIN_TOKEN") or secrets.token_urlsafe(24)
    analyst = _secret(analyst_token, "DPMARGINALS_ANALYST_TOKEN")
    the_store = open_store(spec, synchronous=synchronous)
    try:
        agg = Aggregator(the_store, token, analyst, limits, release_processes)
    except BaseException:
        if owned:
            the_store.close()
        raise

    @asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        yield
        agg.releases.close()
        if owned:
            the_store.close()

    app = fa.FastAPI(
        title="dpmarginals aggregator", version=__version__, lifespan=lifespan,
        docs_url=None, redoc_url=None,  # served without a CDN by add_api_docs
        description="Collects local-DP reports of marginal tables and answers marginal "
        "queries from them. Reports carry no user identifier and no timestamp; see "
        "docs/deployment.md for the plan and report formats.",
    )
    app.state.aggregator = agg
    app.state.admin_token = token
    app.state.store = the_store
    bearer = fa.HTTPBearer(auto_error=False, description="the admin or analyst token")
    guards = SimpleNamespace(
        token=_token_reader(fa, bearer), admin=_admin_guard(fa, agg, bearer),
        limited=[fa.Depends(_request_limiter(fa, agg))],
        campaign=Annotated[str, fa.PathParam(pattern=CAMPAIGN_PATTERN,
                                             description="campaign id")])
    add_error_handlers(app)
    add_routes(app, CAMPAIGN_ROUTES, fa, agg, guards)
    _add_client_endpoints(app, fa, agg, guards)
    _add_analyst_endpoints(app, fa, agg, guards)
    _add_export_endpoint(app, fa, agg, guards)
    add_web_page(app)
    add_api_docs(app)
    if origins:  # a browser page on another origin posting reports (the TypeScript client)
        from starlette.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=list(origins),
                           allow_methods=["GET", "POST"], allow_headers=["Content-Type"],
                           expose_headers=["Retry-After"], max_age=600)
    return app


def check_origins(values: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """Web origins for CORS: ``*``, or each exactly ``scheme://host[:port]`` (lower case,
    no path, no default port), as a browser sends it in ``Origin``."""
    from ..protocol.http import origin_of

    out = []
    for value in values:
        if value != "*":
            try:
                same = origin_of(value) == value
            except DPMarginalsError:
                same = False
            if not same:
                raise DPMarginalsError(f"--allow-origin {value!r} is not an origin: "
                                       "scheme://host[:port], lower case, without a path "
                                       "or a default port (or *)")
        out.append(value)
    return tuple(out)


def _fastapi() -> Any:
    """FastAPI's names the app needs (the ``service`` extra), as one namespace."""
    try:
        from fastapi import Depends, FastAPI, Query, Request
        from fastapi import Path as PathParam
        from fastapi.concurrency import run_in_threadpool
        from fastapi.responses import JSONResponse, Response, StreamingResponse
        from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
    except ImportError:
        raise DPMarginalsError("the aggregator needs the service extra: "
                               "pip install 'dpmarginals[service]'") from None
    return SimpleNamespace(
        Depends=Depends, FastAPI=FastAPI, Query=Query, Request=Request, PathParam=PathParam,
        run_in_threadpool=run_in_threadpool, JSONResponse=JSONResponse, Response=Response,
        StreamingResponse=StreamingResponse,
        HTTPAuthorizationCredentials=HTTPAuthorizationCredentials, HTTPBearer=HTTPBearer)


def _token_reader(fa: Any, bearer: Any) -> Any:
    """The annotation of a parameter holding the bearer token given ("" if none)."""
    Depends, HTTPAuthorizationCredentials = fa.Depends, fa.HTTPAuthorizationCredentials

    async def given(credentials: Annotated[HTTPAuthorizationCredentials | None,
                                           Depends(bearer)]) -> str:
        return "" if credentials is None else credentials.credentials

    return Annotated[str, Depends(given)]


def _admin_guard(fa: Any, agg: Aggregator, bearer: Any) -> list[Any]:
    """The dependency that guards the admin endpoints (a constant-time token check)."""
    Depends, HTTPAuthorizationCredentials = fa.Depends, fa.HTTPAuthorizationCredentials

    def require_admin(
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    ) -> None:
        if not agg.is_admin("" if credentials is None else credentials.credentials):
            raise ServiceError(401, "unauthorized", "this endpoint needs the admin token "
                               "(Authorization: Bearer <token>)")

    return [Depends(require_admin)]


def _request_limiter(fa: Any, agg: Aggregator) -> Any:
    Request = fa.Request

    async def limited(request: Request) -> None:  # (async: no thread hop per request)
        agg.requests.check(source_of(request, forwarded=agg.limits.forwarded))

    return limited


# -- the service's health; admin: create, list and close campaigns -------------------------
def _health_handler(fa: Any, agg: Aggregator, guards: Any) -> Callable[..., Any]:
    def health() -> dict[str, str]:
        return {"status": "ok", "store": agg.store.kind, "version": __version__}

    return health


def _create_campaign_handler(fa: Any, agg: Aggregator, guards: Any) -> Callable[..., Any]:
    Request, JSONResponse, run_in_threadpool = fa.Request, fa.JSONResponse, fa.run_in_threadpool
    the_store = agg.store

    async def create_campaign(request: Request) -> JSONResponse:
        async with agg.bodies.read(request) as raw:
            body = _parse_json(raw)
        if not isinstance(body, dict) or not {"id", "plan"} <= set(body) or not set(body) <= {
                "id", "plan", "settings"}:
            raise ServiceError(422, "invalid_request", 'the body must be {"id": ..., "plan": '
                               '{...}, "settings": {...} (optional)}')
        name, spec = body["id"], body["plan"]
        if not isinstance(name, str) or not re.fullmatch(CAMPAIGN_PATTERN, name):
            raise ServiceError(422, "invalid_request", "id must be 1-64 characters of "
                               "letters, digits, '_', '.', '-' (starting with a letter or digit)")
        try:
            settings = CampaignSettings.from_dict(body.get("settings"))
        except DPMarginalsError as exc:
            raise ServiceError(422, "invalid_settings", str(exc)) from None
        try:
            plan = await run_in_threadpool(admit_plan, spec)
            await run_in_threadpool(earlier_phases, the_store, plan)  # a later phase: its
            # earlier phases must be in the store
        except DPMarginalsError as exc:
            raise ServiceError(422, "invalid_plan", str(exc)) from None
        try:
            campaign, created = await run_in_threadpool(the_store.create_campaign, name, plan,
                                                        settings)
        except DPMarginalsError as exc:
            code = 409 if "exists with another plan" in str(exc) else 422
            raise ServiceError(code, "invalid_plan" if code == 422 else "campaign_exists",
                               str(exc)) from None
        return JSONResponse({"id": campaign.name, "plan_hash": plan.hash, "groups": plan.m,
                             "created": created, "settings": campaign.settings.to_dict()},
                            status_code=201 if created else 200)

    return create_campaign


def _list_campaigns_handler(fa: Any, agg: Aggregator, guards: Any) -> Callable[..., Any]:
    Token = guards.token
    the_store = agg.store

    def list_campaigns(token: Token) -> dict[str, Any]:
        allowed = agg.is_analyst(token)
        if token and not allowed:  # a wrong token is an error, not "no token"
            raise ServiceError(401, "unauthorized", "the token given is neither the analyst "
                               "nor the admin token (without a token: the public campaigns)")
        out = []
        for name, plan_hash in the_store.campaigns():
            found = the_store.campaign(name)
            if found is None or not (allowed or found.settings.public):
                continue
            out.append({"id": name, "plan_hash": plan_hash, "method": found.plan.method,
                        "epsilon": found.plan.epsilon, "public": found.settings.public,
                        "state": "closed" if the_store.is_closed(found) else "open",
                        "reports": int(the_store.users(found).sum())})
        return {"campaigns": out}

    return list_campaigns


def _close_campaign_handler(fa: Any, agg: Aggregator, guards: Any) -> Callable[..., Any]:
    CampaignId = guards.campaign

    def close_campaign(campaign: CampaignId) -> dict[str, Any]:
        found = agg.campaign(campaign)
        agg.store.close_campaign(found)
        return {"id": campaign, "state": "closed"}

    return close_campaign


def _open_next_phase_handler(fa: Any, agg: Aggregator, guards: Any) -> Callable[..., Any]:
    Request, JSONResponse, run_in_threadpool = fa.Request, fa.JSONResponse, fa.run_in_threadpool
    CampaignId = guards.campaign
    the_store = agg.store

    async def open_next_phase(campaign: CampaignId, request: Request) -> JSONResponse:
        async with agg.bodies.read(request) as raw:
            body = _parse_json(raw) if bytes(raw).strip() else {}
        if not isinstance(body, dict) or not set(body) <= {"users", "settings"}:
            raise ServiceError(422, "invalid_request", 'the body must be empty or {"users": N, '
                               '"settings": {...}} (both optional)')
        users = body.get("users")
        if users is not None and (isinstance(users, bool) or not isinstance(users, int)
                                  or users < 1):
            raise ServiceError(422, "invalid_request", f"users must be an integer >= 1, got "
                               f"{users!r}")
        found = agg.campaign(campaign)
        try:
            check_next_phase(campaign, found.plan)
        except DPMarginalsError as exc:
            raise ServiceError(422, "no_next_phase", str(exc)) from None
        name = next_phase_name(campaign, found.plan)
        if not re.fullmatch(CAMPAIGN_PATTERN, name):
            raise ServiceError(422, "invalid_request", f"the next phase's id {name!r} would be "
                               "longer than 64 characters")
        given = body.get("settings")  # over this phase's settings, which the next inherits
        try:
            settings = (found.settings if given is None else CampaignSettings.from_dict(
                {**found.settings.to_dict(), **given} if isinstance(given, dict) else given))
        except DPMarginalsError as exc:
            raise ServiceError(422, "invalid_settings", str(exc)) from None
        await run_in_threadpool(_check_next_phase_opens, the_store, found, name, settings,
                                given is None)
        try:  # before closing (closing is final)
            earlier = await run_in_threadpool(earlier_phases, the_store, found.plan)
        except DPMarginalsError as exc:
            raise ServiceError(422, "no_next_phase", str(exc)) from None
        await run_in_threadpool(the_store.close_campaign, found)
        counts = await run_in_threadpool(the_store.counts, found)
        try:
            plan = await run_in_threadpool(next_phase_plan,
                                           [*earlier, (campaign, found.plan, counts)], users)
            plan = admit_plan(plan.to_dict())
            second, created = await run_in_threadpool(the_store.create_campaign, name, plan,
                                                      settings)
        except PlanRejected as exc:
            raise ServiceError(422, "invalid_plan", str(exc)) from None
        except DPMarginalsError as exc:
            code = 409 if "exists with another plan" in str(exc) else 422
            raise ServiceError(code, "campaign_exists" if code == 409 else "no_next_phase",
                               str(exc)) from None
        return JSONResponse({"id": second.name, "phase": phase_of(plan), "closed": campaign,
                             "phase1": plan.params["phase1_campaign"], "plan_hash": plan.hash,
                             "groups": plan.m, "created": created,
                             "predicted_sse": plan.params.get("predicted_sse"),
                             "settings": second.settings.to_dict()},
                            status_code=201 if created else 200)

    return open_next_phase


#: The service's health; admin: create, list and close campaigns, open a next phase.
CAMPAIGN_ROUTES = (
    Route("GET", "/health", _health_handler, tags=("service",),
          summary="Liveness and the store's kind"),
    Route("POST", "/campaigns", _create_campaign_handler, tags=("admin",), status_code=201,
          guard="admin", summary="Create a campaign from a plan (idempotent for the same plan)",
          openapi_extra=_body(CREATE_SCHEMA),
          responses={200: {"description": "the campaign existed with this plan"},
                     **responses(400, 401, 408, 409, 413, 422, 503)}),
    Route("GET", "/campaigns", _list_campaigns_handler, tags=("analysts",),
          summary="The campaigns (all with a token; without one, the public ones)",
          responses=responses(401)),
    Route("POST", "/campaigns/{campaign}/close", _close_campaign_handler, tags=("admin",),
          guard="admin", summary="Close a campaign: no more assignments or reports",
          responses=responses(401, 404, 422, 503)),
    Route("POST", "/campaigns/{campaign}/next-phase", _open_next_phase_handler,
          tags=("admin",), status_code=201, guard="admin",
          summary="Close a phase of an adaptive campaign; open the next, planned from every "
          "phase's reports so far, as campaign {phase 1's id}.phase{j}",
          responses={200: {"description": "the next phase existed with this plan"},
                     **responses(400, 401, 404, 409, 413, 422, 503)}),
)


def _check_next_phase_opens(store: Store, found: Campaign, name: str,
                            settings: CampaignSettings, inherited: bool) -> None:
    """What would make the next phase fail, checked before this one is closed (closing is
    final): settings already expired, the name taken by another campaign, a phase-1 group
    without reports (counts only grow, so this holds after closing too)."""
    if settings.expired():
        raise ServiceError(422, "invalid_settings", f"the next phase would open already "
                           f"expired (expires_at = {settings.expires_at!r} has passed"
                           + ("; this phase's settings are inherited" if inherited else "")
                           + '): give it {"settings": {"expires_at": ...}} (campaign '
                           "next-phase --expires WHEN)")
    taken = store.campaign(name)
    said = [] if taken is None else earlier_hashes(taken.plan)
    if taken is not None and (not said or said[-1] != found.plan.hash):
        raise ServiceError(409, "campaign_exists", f"campaign {name!r} exists and is not "
                           f"the next phase of {found.name!r} (its plan is {taken.plan.hash})")
    try:
        check_phase_one(found.plan, store.counts(found))
    except DPMarginalsError as exc:
        raise ServiceError(422, "no_next_phase", str(exc)) from None


def _add_client_endpoints(app: Any, fa: Any, agg: Aggregator, guards: Any) -> None:
    """Clients: the plan, a group assignment with its ticket, reports singly or in batches."""
    Request, Query, run_in_threadpool = fa.Request, fa.Query, fa.run_in_threadpool
    CampaignId = guards.campaign

    @app.get("/campaigns/{campaign}/plan", tags=["clients"], summary="The public plan",
             dependencies=guards.limited, responses=responses(404, 422, 429))
    def get_plan(campaign: CampaignId) -> dict[str, Any]:
        return agg.campaign(campaign).plan.to_dict()

    @app.get("/campaigns/{campaign}/assignment", tags=["clients"],
             summary="A group and its single-use ticket for a user (or `count` users)",
             dependencies=guards.limited, responses=responses(404, 410, 422, 429))
    def assignment(
        campaign: CampaignId, request: Request,
        count: Annotated[int | None, Query(ge=1, le=MAX_ASSIGNMENTS)] = None,
    ) -> dict[str, Any]:
        found = agg.open_campaign(campaign)
        many = 1 if count is None else count
        if found.settings.tickets != "off":
            agg.tickets.check(source_of(request, forwarded=agg.limits.forwarded), many)
        groups = agg.assign(found, many)
        out: dict[str, Any] = {"campaign": campaign, "plan_hash": found.plan.hash}
        tickets: list[str] | None = None
        if found.settings.tickets != "off":
            bound = groups if found.settings.tickets == "assigned" else [None] * many
            tickets = agg.mint.issue(found.num, bound)
        if count is None:
            out["group"] = groups[0]
            if tickets is not None:
                out["ticket"] = tickets[0]
        else:
            out["groups"] = groups
            if tickets is not None:
                out["tickets"] = tickets
        return out

    @app.post("/campaigns/{campaign}/reports", tags=["clients"], status_code=201,
              summary="Submit one report", openapi_extra=_body(TICKETED_REPORT_SCHEMA),
              dependencies=guards.limited,
              responses=responses(400, 403, 404, 408, 409, 410, 413, 422, 429, 503))
    async def post_report(campaign: CampaignId, request: Request) -> dict[str, Any]:
        async with agg.bodies.read(request) as body:
            return await run_in_threadpool(agg.ingest, campaign, body, batch=False)

    @app.post("/campaigns/{campaign}/reports/batch", tags=["clients"], status_code=201,
              summary="Submit a batch of reports (stored atomically: all or none)",
              openapi_extra=_body(TICKETED_BATCH_SCHEMA), dependencies=guards.limited,
              responses=responses(400, 403, 404, 408, 409, 410, 413, 422, 429, 503))
    async def post_batch(campaign: CampaignId, request: Request) -> dict[str, Any]:
        async with agg.bodies.read(request) as body:
            return await run_in_threadpool(agg.ingest, campaign, body, batch=True)


def _coarse(n: int, step: int) -> int:
    return n - n % step


def _add_analyst_endpoints(app: Any, fa: Any, agg: Aggregator, guards: Any) -> None:
    """Analysts: the campaign's state and reports, and marginals of its cached release."""
    Query, Response, run_in_threadpool = fa.Query, fa.Response, fa.run_in_threadpool
    the_store = agg.store
    Token, CampaignId = guards.token, guards.campaign

    @app.get("/campaigns/{campaign}/status", tags=["analysts"],
             summary="Reports received (per group, coarsened), state, the last release",
             responses=responses(401, 404, 422))
    def status(campaign: CampaignId, token: Token) -> dict[str, Any]:
        found = agg.campaign(campaign)
        agg.check_reader(found, token)
        users = the_store.users(found)
        step = found.settings.status_granularity
        settings = found.settings
        out = {"campaign": campaign, "plan_hash": found.plan.hash,
               "method": found.plan.method, "epsilon": found.plan.epsilon,
               "state": "closed" if the_store.is_closed(found) else "open",
               "expires_at": settings.expires_at, "public": settings.public,
               "min_reports": settings.min_reports, "tickets": settings.tickets,
               "reports": int(users.sum()), "granularity": step,
               "groups": [{"group": g, "attributes": list(spec.attributes),
                           "oracle": spec.oracle, "cells": spec.cells,
                           "reports": _coarse(int(n), step)}
                          for g, (spec, n) in enumerate(zip(found.plan.groups, users,
                                                            strict=True))]}
        return out

    @app.get("/campaigns/{campaign}/marginals", tags=["analysts"],
             summary="A marginal table of the campaign's current release",
             responses={200: {"content": {"text/csv": {}}},
                        **responses(401, 404, 409, 422, 503)})
    async def marginals(
        campaign: CampaignId, token: Token,
        attributes: Annotated[str, Query(min_length=1, max_length=MAX_QUERY_LENGTH,
                                         description="comma-separated attribute names")],
        format: Annotated[Literal["json", "csv"], Query()] = "json",
        std: Annotated[bool, Query(description="also per-cell standard errors (`std`; "
                                   "a bootstrap for reconstructed tables: can be slow)")] = False,
    ) -> Response:
        found = agg.store.cached_campaign(campaign)
        if found is not None:  # the common case, on the event loop: a lookup
            agg.check_reader(found, token)
            attrs = tuple(a.strip() for a in attributes.split(",") if a.strip())
            release = agg.releases.peek(found)
            body = None if release is None else release.cached((attrs, format, std))
            if body is not None:
                return Response(body, media_type="text/csv" if format == "csv"
                                else "application/json")
        return await run_in_threadpool(answer, campaign, token, attributes, format, std)

    def answer(campaign: str, token: str, attributes: str, format: str, std: bool
               ) -> Response:
        found = agg.campaign(campaign)
        agg.check_reader(found, token)
        attrs = tuple(a.strip() for a in attributes.split(",") if a.strip())
        if not attrs:
            raise ServiceError(422, "invalid_request", "attributes names no attribute")
        from ..synopsis.base import check_query

        domain = answer_domain(found.plan)
        cells = domain.project(check_query(domain, list(attrs))).cells()
        if cells > MAX_ANSWER_CELLS:  # (unknown/repeated attributes: 422 above)
            raise ServiceError(422, "invalid_request", f"the marginal over {list(attrs)} has "
                               f"{cells:,} cells; the service answers at most "
                               f"{MAX_ANSWER_CELLS:,}")
        release = agg.releases.current(found)
        _check_released(found, release)
        def make() -> bytes:  # one uncached answer at a time (a large one takes seconds)
            if not agg.answering.acquire(timeout=_ANSWER_WAIT):
                raise ServiceError(503, "busy", "other answers are being computed; retry "
                                   "shortly", headers={"Retry-After": "5"})
            try:
                return _answer(found, release, attrs, format, std)
            finally:
                agg.answering.release()

        body = release.answer((attrs, format, std), make)
        media = "text/csv" if format == "csv" else "application/json"
        return Response(body, media_type=media)


def _check_released(campaign: Campaign, release: Release) -> None:
    if release.withheld == "no_reports":
        raise ServiceError(409, "no_reports", f"campaign {campaign.name!r} has no reports yet")
    if release.withheld == "not_enough_reports":
        raise ServiceError(409, "not_enough_reports", f"campaign {campaign.name!r} releases "
                           f"nothing before {campaign.settings.min_reports:,} reports")


def _answer(campaign: Campaign, release: Release, attrs: tuple[str, ...], format: str,
            std: bool) -> bytes:
    """A marginal's answer; with ``std`` also its per-cell standard errors (a bootstrap for
    reconstructed tables: seconds to minutes, computed once per release and cached)."""
    if format == "json" and not std:
        return marginal_answer(campaign, release, attrs)
    table = release.synopsis.marginal(list(attrs))
    if std:
        from ..synopsis.stderr import standard_errors

        errors = standard_errors(release.synopsis, table.attributes, table.values)[0]
        table = table.replace(std=errors)
    if format == "json":
        return marginal_answer(campaign, release, attrs, table)
    return table.to_frame().to_csv(index=False).encode()


def _add_export_endpoint(app: Any, fa: Any, agg: Aggregator, guards: Any) -> None:
    """Admin: a consistent snapshot of every stored report, as JSON lines."""
    StreamingResponse = fa.StreamingResponse
    the_store = agg.store
    CampaignId = guards.campaign

    @app.get("/campaigns/{campaign}/reports", tags=["admin"], dependencies=guards.admin,
             summary="Export a snapshot of the stored reports (JSON lines, by report id; "
             "X-Report-Count says how many)",
             responses={200: {"content": {"application/x-ndjson": {}}},
                        **responses(401, 404, 422, 503)})
    def export_reports(campaign: CampaignId) -> StreamingResponse:
        found = agg.campaign(campaign)
        stack = ExitStack()
        count, reports = stack.enter_context(the_store.snapshot(found))

        def lines() -> Iterator[str]:
            with stack:
                for report in reports:
                    yield json.dumps(report, separators=(",", ":")) + "\n"

        return StreamingResponse(lines(), media_type="application/x-ndjson",
                                 headers={"X-Report-Count": str(count)})
