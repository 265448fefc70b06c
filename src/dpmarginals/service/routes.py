"""Endpoints as data: a :class:`Route` per endpoint, registered by :func:`add_routes`.

A route's handler is made for each app by ``make(fa, agg, guards)``: FastAPI's names (imported
only when an app is made), the app's aggregator and its guards (see
:func:`~dpmarginals.service.app.create_app`).  The handler's annotations are FastAPI's
parameters, and its name is the route's name and operation id.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["Route", "add_routes"]

#: ``make(fa, agg, guards)``: the handler of one app.
HandlerMaker = Callable[[Any, Any, Any], Callable[..., Any]]


@dataclass(frozen=True)
class Route:
    """One endpoint: ``app.add_api_route``'s arguments, the handler made by ``make``.

    ``guard`` names the guards' dependencies it runs first (``"admin"``: the admin token;
    ``"limited"``: the per-source request rate); ``openapi_extra`` and ``responses`` go
    to the OpenAPI schema as given.
    """

    method: str
    path: str
    make: HandlerMaker
    summary: str
    tags: tuple[str, ...]
    status_code: int | None = None
    guard: Literal["admin", "limited"] | None = None
    openapi_extra: Mapping[str, Any] | None = None
    responses: Mapping[int | str, Any] | None = None


def add_routes(app: Any, routes: Iterable[Route], fa: Any, agg: Any, guards: Any) -> None:
    """Register ``routes`` on ``app`` in order, each with its handler made for this app."""
    for route in routes:
        app.add_api_route(route.path, route.make(fa, agg, guards), methods=[route.method],
                          summary=route.summary, tags=list(route.tags),
                          status_code=route.status_code,
                          dependencies=getattr(guards, route.guard) if route.guard else None,
                          openapi_extra=route.openapi_extra, responses=route.responses)
