"""The aggregator's HTTP API (FastAPI): campaigns, plans, assignments, reports, answers.

``create_app(store, admin_token=...)`` returns the ASGI app; ``dpmarginals serve`` runs it
with uvicorn.  Endpoints (all JSON; errors are ``{"error": code, "reason": text}``):

=======  ==================================  =====  =========================================
method   path                                admin  what
=======  ==================================  =====  =========================================
GET      /health                                    liveness and the store's kind
POST     /campaigns                          yes    create a campaign ``{"id", "plan"}``
GET      /campaigns                          yes    list the campaigns
GET      /campaigns/{id}/plan                       the public plan (with its hash)
GET      /campaigns/{id}/assignment                 a group for a user (``?count=`` for many)
POST     /campaigns/{id}/reports                    one report
POST     /campaigns/{id}/reports/batch              ``{"reports": [...]}``, stored atomically
GET      /campaigns/{id}/status                     reports per group
GET      /campaigns/{id}/marginals                  ``?attributes=a,b[&std=true][&format=csv]``
GET      /ui                                        the analyst's web page (:mod:`.web`)
GET      /campaigns/{id}/reports             yes    every stored report (JSON lines)
=======  ==================================  =====  =========================================

A report is acknowledged (201) only after its transaction has committed.  A rejected
report or batch (4xx, with the reason and the index of the first bad report) changes
nothing.  Request bodies are limited (``max_body_bytes``, 413 beyond).
"""

# No "from __future__ import annotations": FastAPI reads the endpoints' annotations.  FastAPI
# itself is imported in create_app, so this module imports (and its doctests collect)
# without the service extra.
import hmac
import json
import math
import os
import re
import secrets
import sqlite3
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Annotated, Any, Literal

import numpy as np

from .. import __version__
from ..core.errors import DPMarginalsError
from ..protocol.plan import Plan
from ..protocol.reports import BATCH_SCHEMA, MAX_BATCH_REPORTS, REPORT_SCHEMA, ReportError
from . import answer_domain, synopsis_from_counts
from .store import Campaign, Store, StoreError, open_store
from .web import add_web_page

__all__ = ["DEFAULT_MAX_BODY_BYTES", "ServiceError", "create_app"]

DEFAULT_MAX_BODY_BYTES = 8 << 20
CAMPAIGN_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$"
MAX_ASSIGNMENTS = MAX_BATCH_REPORTS
MAX_QUERY_LENGTH = 4096
MAX_ANSWER_CELLS = 1 << 20

ERROR_SCHEMA: dict[str, Any] = {
    "title": "Error",
    "type": "object",
    "required": ["error", "reason"],
    "properties": {
        "error": {"type": "string", "description": "a machine-readable code"},
        "reason": {"type": "string", "description": "what was wrong, for a person"},
        "index": {"type": "integer", "description": "position of the bad report in a batch"},
        "duplicates": {"type": "array", "items": {"type": "integer"},
                       "description": "positions of already-received report ids"},
    },
}
PLAN_SCHEMA: dict[str, Any] = {
    "title": "Plan",
    "type": "object",
    "description": "A dpmarginals plan (Plan.to_dict(); see docs/deployment.md).",
    "required": ["method", "epsilon", "domain", "groups"],
    "properties": {
        "format": {"type": "string"},
        "version": {"type": "integer"},
        "method": {"type": "string"},
        "epsilon": {"type": "number"},
        "domain": {"type": "object", "additionalProperties": {"type": "integer"}},
        "groups": {"type": "array", "items": {
            "type": "object", "required": ["attributes", "oracle", "epsilon", "cells"],
            "properties": {"attributes": {"type": "array", "items": {"type": "string"}},
                           "oracle": {"type": "string"}, "epsilon": {"type": "number"},
                           "cells": {"type": "integer"}}}},
        "params": {"type": "object"},
        "hash": {"type": "string"},
    },
}
CREATE_SCHEMA: dict[str, Any] = {
    "title": "NewCampaign",
    "type": "object",
    "required": ["id", "plan"],
    "additionalProperties": False,
    "properties": {"id": {"type": "string", "pattern": CAMPAIGN_PATTERN}, "plan": PLAN_SCHEMA},
}


def _json_schema(schema: dict[str, Any], description: str = "") -> dict[str, Any]:
    return {"description": description,
            "content": {"application/json": {"schema": schema}}}


def _errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    text = {400: "the body is not JSON", 401: "admin token missing or wrong",
            404: "no such campaign", 409: "conflict (duplicate report id, another plan)",
            413: "body or batch too large", 422: "invalid request (the reason says why)",
            503: "the store could not commit; retry"}
    return {c: _json_schema(ERROR_SCHEMA, text[c]) for c in codes}


def _body(schema: dict[str, Any]) -> dict[str, Any]:
    return {"requestBody": {"required": True,
                            "content": {"application/json": {"schema": schema}}}}


class ServiceError(Exception):
    """An error answered with ``status`` and ``{"error": code, "reason": reason, ...}``."""

    def __init__(self, status: int, code: str, reason: str, **extra: Any) -> None:
        super().__init__(reason)
        self.status, self.code, self.reason, self.extra = status, code, reason, extra


def _error_response(status: int, code: str, reason: str, **extra: Any) -> Any:
    from fastapi.responses import JSONResponse

    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse({"error": code, "reason": reason, **extra}, status_code=status,
                        headers=headers)


class Aggregator:
    """The service's state: the store, cached synopses, and the group assigner."""

    def __init__(self, store: Store, admin_token: str, max_body_bytes: int) -> None:
        self.store = store
        self.admin_token = admin_token
        self.max_body_bytes = max_body_bytes
        self._synopses: dict[str, tuple[int, Any]] = {}
        self._synopsis_locks: dict[str, threading.Lock] = {}
        self._assigned: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()

    def campaign(self, name: str) -> Campaign:
        found = self.store.campaign(name)
        if found is None:
            raise ServiceError(404, "unknown_campaign", f"no campaign {name!r}")
        return found

    # -- ingestion ------------------------------------------------------------------------
    def ingest(self, name: str, body: bytes, *, batch: bool) -> dict[str, Any]:
        campaign = self.campaign(name)
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
            decoded = campaign.codec.decode(items)
        else:
            decoded = campaign.codec.decode([data], indexed=False)
        try:
            accepted = self.store.add_reports(campaign, decoded)
        except ReportError as exc:
            if batch:
                raise
            raise ReportError(exc.reason, code=exc.code, duplicates=exc.duplicates) from None
        return {"accepted": accepted}

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

    # -- answers --------------------------------------------------------------------------
    def synopsis(self, campaign: Campaign) -> tuple[Any, int]:
        """The synopsis of the stored counts (recomputed only when reports arrived)."""
        with self._lock:
            lock = self._synopsis_locks.setdefault(campaign.name, threading.Lock())
        with lock:
            counts = self.store.counts(campaign)
            total = counts.n
            cached = self._synopses.get(campaign.name)
            if cached is not None and cached[0] == total:
                return cached[1], total
            if total == 0:
                raise ServiceError(409, "no_reports", f"campaign {campaign.name!r} has no "
                                   "reports yet")
            synopsis = synopsis_from_counts(campaign.plan, counts)
            self._synopses[campaign.name] = (total, synopsis)
            return synopsis, total


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


def _parse_json(body: bytes) -> Any:
    """Strict JSON: no NaN/Infinity (nor floats that overflow to them)."""
    try:
        return json.loads(body, parse_float=_finite, parse_constant=_no_constants)
    except (ValueError, RecursionError) as exc:  # includes bad UTF-8 and huge integers
        raise ServiceError(400, "invalid_json", f"the body is not JSON: {exc}"[:300]) from None


async def _read_body(request: Any, limit: int) -> bytes:
    length = request.headers.get("content-length")
    if length is not None:
        try:
            declared = int(length)
        except ValueError:
            raise ServiceError(400, "bad_length", "Content-Length is not a number") from None
        if declared > limit:
            raise ServiceError(413, "body_too_large",
                               f"the body has {declared} bytes; the limit is {limit}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ServiceError(413, "body_too_large", f"the body exceeds {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def create_app(
    store: Store | str | os.PathLike[str] | None = None, *, admin_token: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, synchronous: str = "full",
) -> Any:
    """The aggregator app over ``store`` (a Store, a SQLite path or a PostgreSQL URL).

    ``admin_token`` guards the admin endpoints (``Authorization: Bearer <token>``); when
    None, ``$DPMARGINALS_ADMIN_TOKEN`` or else a random token (``app.state.admin_token``).
    A store given by path or URL is opened here and closed when the app shuts down.
    """
    fa = _fastapi()
    owned = not isinstance(store, Store)
    spec = store if store is not None else Path("dpmarginals.db")
    the_store = open_store(spec, synchronous=synchronous)
    token = admin_token or os.environ.get("DPMARGINALS_ADMIN_TOKEN") or secrets.token_urlsafe(24)
    if max_body_bytes < 1024:
        raise DPMarginalsError(f"max_body_bytes must be at least 1024, got {max_body_bytes}")
    agg = Aggregator(the_store, token, max_body_bytes)

    @asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        yield
        if owned:
            the_store.close()

    app = fa.FastAPI(
        title="dpmarginals aggregator", version=__version__, lifespan=lifespan,
        description="Collects local-DP reports of marginal tables and answers marginal "
        "queries from them. Reports carry no user identifier and no timestamp; see "
        "docs/deployment.md for the plan and report formats.",
    )
    app.state.aggregator = agg
    app.state.admin_token = token
    app.state.store = the_store
    admin = _admin_guard(fa, token)
    campaign_id = Annotated[str, fa.PathParam(pattern=CAMPAIGN_PATTERN,
                                              description="campaign id")]
    _add_error_handlers(app, fa)
    _add_campaign_endpoints(app, fa, agg, admin)
    _add_client_endpoints(app, fa, agg, campaign_id)
    _add_analyst_endpoints(app, fa, agg, campaign_id)
    _add_export_endpoint(app, fa, agg, admin, campaign_id)
    add_web_page(app)
    return app


def _fastapi() -> Any:
    """FastAPI's names the app needs (the ``service`` extra), as one namespace."""
    try:
        from fastapi import Depends, FastAPI, Query, Request
        from fastapi import Path as PathParam
        from fastapi.concurrency import run_in_threadpool
        from fastapi.responses import (
            JSONResponse,
            PlainTextResponse,
            Response,
            StreamingResponse,
        )
        from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
    except ImportError:
        raise DPMarginalsError("the aggregator needs the service extra: "
                               "pip install 'dpmarginals[service]'") from None
    return SimpleNamespace(
        Depends=Depends, FastAPI=FastAPI, Query=Query, Request=Request, PathParam=PathParam,
        run_in_threadpool=run_in_threadpool, JSONResponse=JSONResponse,
        PlainTextResponse=PlainTextResponse, Response=Response,
        StreamingResponse=StreamingResponse,
        HTTPAuthorizationCredentials=HTTPAuthorizationCredentials, HTTPBearer=HTTPBearer)


def _admin_guard(fa: Any, token: str) -> list[Any]:
    """The dependency that guards the admin endpoints (a constant-time token check)."""
    Depends, HTTPAuthorizationCredentials = fa.Depends, fa.HTTPAuthorizationCredentials
    bearer = fa.HTTPBearer(auto_error=False, description="the admin token")
    def require_admin(
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    ) -> None:
        given = "" if credentials is None else credentials.credentials
        if not given or not hmac.compare_digest(given.encode(), token.encode()):
            raise ServiceError(401, "unauthorized", "this endpoint needs the admin token "
                               "(Authorization: Bearer <token>)")

    return [Depends(require_admin)]



def _add_error_handlers(app: Any, fa: Any) -> None:
    """Every error as ``{"error": code, "reason": ...}`` with its HTTP status."""
    Request, JSONResponse = fa.Request, fa.JSONResponse

    @app.exception_handler(ServiceError)
    async def _service_error(request: Request, exc: ServiceError) -> JSONResponse:
        return _error_response(exc.status, exc.code, exc.reason, **exc.extra)

    @app.exception_handler(ReportError)
    async def _report_error(request: Request, exc: ReportError) -> JSONResponse:
        status = {"duplicate_report": 409, "plan_mismatch": 409}.get(exc.code, 422)
        extra: dict[str, Any] = {}
        if exc.index is not None:
            extra["index"] = exc.index
        if exc.duplicates:
            extra["duplicates"] = exc.duplicates
        return _error_response(status, exc.code, str(exc), **extra)

    @app.exception_handler(StoreError)
    async def _store_error(request: Request, exc: StoreError) -> JSONResponse:
        return _error_response(503, "store_unavailable", str(exc))

    @app.exception_handler(sqlite3.Error)
    async def _sqlite_error(request: Request, exc: Exception) -> JSONResponse:
        return _error_response(503, "store_unavailable", f"the store failed: {exc}")

    try:
        import psycopg
    except ImportError:  # PostgreSQL is optional
        psycopg = None
    if psycopg is not None:
        app.add_exception_handler(psycopg.Error, _sqlite_error)  # type: ignore[arg-type]

    @app.exception_handler(DPMarginalsError)
    async def _user_error(request: Request, exc: DPMarginalsError) -> JSONResponse:
        return _error_response(422, "invalid_request", str(exc))


def _add_campaign_endpoints(app: Any, fa: Any, agg: Aggregator, admin: list[Any]) -> None:
    """The service's health; admin: create and list campaigns."""
    Request, JSONResponse, run_in_threadpool = fa.Request, fa.JSONResponse, fa.run_in_threadpool
    the_store = agg.store

    @app.get("/health", tags=["service"], summary="Liveness and the store's kind")
    def health() -> dict[str, str]:
        return {"status": "ok", "store": the_store.kind, "version": __version__}

    @app.post("/campaigns", tags=["admin"], status_code=201, dependencies=admin,
              summary="Create a campaign from a plan (idempotent for the same plan)",
              openapi_extra=_body(CREATE_SCHEMA),
              responses={200: {"description": "the campaign existed with this plan"},
                         **_errors(400, 401, 409, 413, 422)})
    async def create_campaign(request: Request) -> JSONResponse:
        body = _parse_json(await _read_body(request, agg.max_body_bytes))
        if not isinstance(body, dict) or set(body) != {"id", "plan"}:
            raise ServiceError(422, "invalid_request", 'the body must be {"id": ..., "plan": '
                               '{...}}')
        name, spec = body["id"], body["plan"]
        if not isinstance(name, str) or not re.fullmatch(CAMPAIGN_PATTERN, name):
            raise ServiceError(422, "invalid_request", "id must be 1-64 characters of "
                               "letters, digits, '_', '.', '-' (starting with a letter or digit)")
        if not isinstance(spec, dict):
            raise ServiceError(422, "invalid_plan", "plan must be a JSON object")
        try:
            plan = Plan.from_dict(spec)
        except DPMarginalsError as exc:
            raise ServiceError(422, "invalid_plan", str(exc)) from None
        except (AttributeError, OverflowError, RecursionError) as exc:
            raise ServiceError(422, "invalid_plan", f"malformed plan: {exc!r}"[:300]) from None
        try:
            campaign, created = await run_in_threadpool(the_store.create_campaign, name, plan)
        except DPMarginalsError as exc:
            code = 409 if "exists with another plan" in str(exc) else 422
            raise ServiceError(code, "invalid_plan" if code == 422 else "campaign_exists",
                               str(exc)) from None
        return JSONResponse({"id": campaign.name, "plan_hash": plan.hash, "groups": plan.m,
                             "created": created}, status_code=201 if created else 200)

    @app.get("/campaigns", tags=["admin"], dependencies=admin, summary="List the campaigns",
             responses=_errors(401))
    def list_campaigns() -> dict[str, Any]:
        return {"campaigns": [{"id": n, "plan_hash": h} for n, h in the_store.campaigns()]}


def _add_client_endpoints(app: Any, fa: Any, agg: Aggregator, CampaignId: Any) -> None:
    """Clients: the plan, a group assignment, reports one at a time or in batches."""
    Request, Query, run_in_threadpool = fa.Request, fa.Query, fa.run_in_threadpool

    @app.get("/campaigns/{campaign}/plan", tags=["clients"], summary="The public plan",
             responses=_errors(404, 422))
    def get_plan(campaign: CampaignId) -> dict[str, Any]:
        return agg.campaign(campaign).plan.to_dict()

    @app.get("/campaigns/{campaign}/assignment", tags=["clients"],
             summary="A group for a user (or `count` groups for `count` users)",
             responses=_errors(404, 422))
    def assignment(
        campaign: CampaignId,
        count: Annotated[int | None, Query(ge=1, le=MAX_ASSIGNMENTS)] = None,
    ) -> dict[str, Any]:
        found = agg.campaign(campaign)
        groups = agg.assign(found, 1 if count is None else count)
        out: dict[str, Any] = {"campaign": campaign, "plan_hash": found.plan.hash}
        if count is None:
            out["group"] = groups[0]
        else:
            out["groups"] = groups
        return out

    @app.post("/campaigns/{campaign}/reports", tags=["clients"], status_code=201,
              summary="Submit one report", openapi_extra=_body(REPORT_SCHEMA),
              responses=_errors(400, 404, 409, 413, 422, 503))
    async def post_report(campaign: CampaignId, request: Request) -> dict[str, Any]:
        body = await _read_body(request, agg.max_body_bytes)
        return await run_in_threadpool(agg.ingest, campaign, body, batch=False)

    @app.post("/campaigns/{campaign}/reports/batch", tags=["clients"], status_code=201,
              summary="Submit a batch of reports (stored atomically: all or none)",
              openapi_extra=_body(BATCH_SCHEMA),
              responses=_errors(400, 404, 409, 413, 422, 503))
    async def post_batch(campaign: CampaignId, request: Request) -> dict[str, Any]:
        body = await _read_body(request, agg.max_body_bytes)
        return await run_in_threadpool(agg.ingest, campaign, body, batch=True)


def _add_analyst_endpoints(app: Any, fa: Any, agg: Aggregator, CampaignId: Any) -> None:
    """Analysts: reports per group, and marginals from the plan's method's synopsis."""
    Query, Response, JSONResponse = fa.Query, fa.Response, fa.JSONResponse
    PlainTextResponse = fa.PlainTextResponse
    the_store = agg.store

    @app.get("/campaigns/{campaign}/status", tags=["analysts"],
             summary="Reports received per group", responses=_errors(404, 422))
    def status(campaign: CampaignId) -> dict[str, Any]:
        found = agg.campaign(campaign)
        users = the_store.users(found)
        return {"campaign": campaign, "plan_hash": found.plan.hash,
                "method": found.plan.method, "epsilon": found.plan.epsilon,
                "reports": int(users.sum()),
                "groups": [{"group": g, "attributes": list(spec.attributes),
                            "oracle": spec.oracle, "cells": spec.cells, "reports": int(n)}
                           for g, (spec, n) in enumerate(zip(found.plan.groups, users,
                                                             strict=True))]}

    @app.get("/campaigns/{campaign}/marginals", tags=["analysts"],
             summary="A marginal table estimated from the stored reports",
             responses={200: {"content": {"text/csv": {}}}, **_errors(404, 409, 422)})
    def marginals(
        campaign: CampaignId,
        attributes: Annotated[str, Query(min_length=1, max_length=MAX_QUERY_LENGTH,
                                         description="comma-separated attribute names")],
        format: Annotated[Literal["json", "csv"], Query()] = "json",
        std: Annotated[bool, Query(description="also per-cell standard errors (`std`; "
                                   "a bootstrap for reconstructed tables: can be slow)")] = False,
    ) -> Response:
        found = agg.campaign(campaign)
        attrs = [a.strip() for a in attributes.split(",") if a.strip()]
        if not attrs:
            raise ServiceError(422, "invalid_request", "attributes names no attribute")
        from ..synopsis.base import check_query

        domain = answer_domain(found.plan)
        cells = domain.project(check_query(domain, attrs)).cells()
        if cells > MAX_ANSWER_CELLS:  # (unknown/repeated attributes: 422 above)
            raise ServiceError(422, "invalid_request", f"the marginal over {attrs} has "
                               f"{cells:,} cells; the service answers at most "
                               f"{MAX_ANSWER_CELLS:,}")
        synopsis, total = agg.synopsis(found)
        table = synopsis.marginal(attrs)
        if std:
            from ..synopsis.stderr import standard_errors

            table = table.replace(std=standard_errors(synopsis, table.attributes, table.values)[0])
        if format == "csv":
            return PlainTextResponse(table.to_frame().to_csv(index=False), media_type="text/csv")
        return JSONResponse({"campaign": campaign, "plan_hash": found.plan.hash,
                             "reports": total, **table.to_dict()})


def _add_export_endpoint(app: Any, fa: Any, agg: Aggregator, admin: list[Any],
                         CampaignId: Any) -> None:
    """Admin: every stored report, as JSON lines."""
    StreamingResponse = fa.StreamingResponse
    the_store = agg.store

    @app.get("/campaigns/{campaign}/reports", tags=["admin"], dependencies=admin,
             summary="Export every stored report (JSON lines, ordered by report id)",
             responses={200: {"content": {"application/x-ndjson": {}}},
                        **_errors(401, 404, 422)})
    def export_reports(campaign: CampaignId) -> StreamingResponse:
        found = agg.campaign(campaign)

        def lines() -> Iterator[str]:
            for report in the_store.reports(found):
                yield json.dumps(report, separators=(",", ":")) + "\n"

        return StreamingResponse(lines(), media_type="application/x-ndjson")
