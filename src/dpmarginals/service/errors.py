"""Every error the aggregator answers, in one shape: ``{"error": code, "reason": text}``.

:class:`ServiceError` carries a status, a machine-readable code and a reason for a person
(and optional extra fields: a batch's ``index``, ``duplicates``).  :func:`add_error_handlers`
maps everything else to that shape too: FastAPI's request validation (422
``invalid_request``, naming the parameter), Starlette's 404 and 405 (``not_found``,
``method_not_allowed``), report and plan errors, store failures (503), and, as the last
resort, any unexpected exception (500 ``internal_error``, without the traceback).
"""

# No "from __future__ import annotations": FastAPI reads the handlers' annotations.
import logging
import sqlite3
from typing import Any

from ..core.errors import DPMarginalsError
from ..protocol.reports import ReportError
from .store import StoreError

__all__ = ["ERROR_CODES", "ERROR_SCHEMA", "ServiceError", "add_error_handlers",
           "error_response", "responses"]

_log = logging.getLogger("dpmarginals.service")

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

#: status -> what it means (the OpenAPI descriptions; docs/deployment.md lists the codes).
ERROR_CODES: dict[int, str] = {
    400: "the body is not JSON, or a header is malformed",
    401: "token missing or wrong",
    403: "the report has no valid, unused ticket",
    404: "no such campaign (or path)",
    405: "method not allowed on this path",
    408: "the body did not arrive in time",
    409: "conflict (duplicate report id or spent ticket, another plan, no or too few "
         "reports yet)",
    410: "the campaign is closed or expired",
    413: "body or batch too large",
    422: "invalid request (the reason says why)",
    429: "too many requests or tickets from this source; retry after Retry-After seconds",
    503: "busy or the store could not commit; retry after Retry-After seconds",
}


class ServiceError(Exception):
    """An error answered with ``status`` and ``{"error": code, "reason": reason, ...}``.

    ``headers`` are added to the answer (``Retry-After``, ``Connection: close``).
    """

    def __init__(self, status: int, code: str, reason: str, *,
                 headers: dict[str, str] | None = None, **extra: Any) -> None:
        super().__init__(reason)
        self.status, self.code, self.reason, self.extra = status, code, reason, extra
        self.headers = headers or {}


def error_response(status: int, code: str, reason: str, *,
                   headers: dict[str, str] | None = None, **extra: Any) -> Any:
    """The JSON answer of an error (``WWW-Authenticate`` on 401)."""
    from fastapi.responses import JSONResponse

    out = dict(headers or {})
    if status == 401:
        out.setdefault("WWW-Authenticate", "Bearer")
    return JSONResponse({"error": code, "reason": reason, **extra}, status_code=status,
                        headers=out or None)


def responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for these error statuses (all with :data:`ERROR_SCHEMA`)."""
    return {c: {"description": ERROR_CODES[c],
                "content": {"application/json": {"schema": ERROR_SCHEMA}}} for c in codes}


def _location(loc: Any) -> str:
    parts = [str(p) for p in (loc or ())]
    where = {"path": "path parameter", "query": "query parameter", "header": "header",
             "body": "body"}.get(parts[0] if parts else "", "")
    name = ".".join(parts[1:]) if len(parts) > 1 else ""
    return f"{where} {name!r}" if where and name else (where or "request")


def _validation_reason(errors: Any) -> str:
    """FastAPI's validation errors as one line naming each parameter and its value."""
    items = []
    for err in list(errors)[:5]:
        value = err.get("input")
        shown = "" if value is None or isinstance(value, dict) else f" (got {value!r:.60})"
        items.append(f"{_location(err.get('loc'))}: {err.get('msg', 'invalid')}{shown}")
    return "; ".join(items) or "invalid request"


def add_error_handlers(app: Any) -> None:
    """Every error as ``{"error": code, "reason": ...}`` with its HTTP status."""
    from fastapi import Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException

    @app.exception_handler(ServiceError)
    async def _service_error(request: Request, exc: ServiceError) -> JSONResponse:
        return error_response(exc.status, exc.code, exc.reason, headers=exc.headers,
                              **exc.extra)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(422, "invalid_request", _validation_reason(exc.errors()))

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code,
                                                                 "invalid_request")
        reason = {404: f"no such path: {request.url.path[:200]}",
                  405: f"{request.method} is not allowed on {request.url.path[:200]}"}.get(
                      exc.status_code, str(exc.detail)[:300])
        return error_response(exc.status_code, code, reason, headers=exc.headers)

    @app.exception_handler(ReportError)
    async def _report_error(request: Request, exc: ReportError) -> JSONResponse:
        status = {"duplicate_report": 409, "plan_mismatch": 409, "ticket_used": 409}.get(
            exc.code, 422)
        extra: dict[str, Any] = {}
        if exc.index is not None:
            extra["index"] = exc.index
        if exc.duplicates:
            extra["duplicates"] = exc.duplicates
        return error_response(status, exc.code, str(exc), **extra)

    @app.exception_handler(StoreError)
    async def _store_error(request: Request, exc: StoreError) -> JSONResponse:
        return error_response(503, "store_unavailable", str(exc), headers={"Retry-After": "1"})

    async def _database_error(request: Request, exc: Exception) -> JSONResponse:
        return error_response(503, "store_unavailable", f"the store failed: {exc}"[:300],
                              headers={"Retry-After": "1"})

    app.add_exception_handler(sqlite3.Error, _database_error)
    try:
        import psycopg
    except ImportError:  # PostgreSQL is optional
        psycopg = None
    if psycopg is not None:
        app.add_exception_handler(psycopg.Error, _database_error)

    @app.exception_handler(DPMarginalsError)
    async def _user_error(request: Request, exc: DPMarginalsError) -> JSONResponse:
        return error_response(422, "invalid_request", str(exc)[:500])

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        _log.exception("unexpected error on %s %s", request.method, request.url.path)
        return error_response(500, "internal_error", "the service failed on this request "
                              f"({type(exc).__name__}); the operator's log has the details")
