"""The interactive API documentation (``/docs``), served without a network.

FastAPI's own pages load Swagger UI and ReDoc from a CDN (and ReDoc its fonts from Google),
so on a machine without internet access, or behind a proxy that blocks those hosts, they
were blank (issue #33).  Here ``/docs`` is the same Swagger UI page with its script and
style from the ``fastapi-offline`` package (the ``service`` extra; Swagger UI 5, which
reads the service's OpenAPI 3.1 schema), served by the service itself at
``/docs/assets/``; the Swagger validator badge (a request to validator.swagger.io) is off.
``/redoc`` redirects there (ReDoc's page fetches its logo from its vendor's CDN).  Without
that package ``/docs`` says how to install it; the schema stays at ``/openapi.json``.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

__all__ = ["ASSETS", "ASSET_PACKAGE", "add_api_docs"]

#: The installed package whose static files the pages use.
ASSET_PACKAGE = "fastapi_offline"
#: URL path -> (file of the package's ``static/``, media type).
ASSETS: dict[str, tuple[str, str]] = {
    "/docs/assets/swagger-ui-bundle.js": ("swagger-ui-bundle.js",
                                          "text/javascript; charset=utf-8"),
    "/docs/assets/swagger-ui.css": ("swagger-ui.css", "text/css; charset=utf-8"),
    "/docs/assets/favicon.png": ("favicon.png", "image/png"),
}
_HEADERS = {"X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY",
            "Referrer-Policy": "no-referrer", "Cache-Control": "max-age=86400"}


def _asset(name: str) -> bytes | None:
    try:
        return resources.files(ASSET_PACKAGE).joinpath("static", name).read_bytes()
    except (ModuleNotFoundError, FileNotFoundError, OSError):
        return None


def add_api_docs(app: Any, openapi_url: str = "/openapi.json") -> None:
    """``/docs`` (Swagger UI) with every asset from this service, and ``/redoc``
    redirecting there.  The app must be made with ``docs_url=None, redoc_url=None``."""
    from fastapi.openapi.docs import get_swagger_ui_html
    from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

    def to_docs() -> RedirectResponse:
        return RedirectResponse("/docs", status_code=307)

    app.add_api_route("/redoc", to_docs, methods=["GET"], include_in_schema=False)

    found = {path: _asset(name) for path, (name, _) in ASSETS.items()}
    if any(body is None for body in found.values()):
        def missing() -> JSONResponse:
            return JSONResponse({"error": "not_found", "reason": (
                "the interactive documentation needs the 'fastapi-offline' package (the "
                "service extra: pip install -e '.[service]'), whose Swagger UI files it "
                f"serves without a network; the OpenAPI schema is at {openapi_url}")},
                status_code=404)

        app.add_api_route("/docs", missing, methods=["GET"], include_in_schema=False)
        return

    def asset(body: bytes, media_type: str) -> Any:
        def endpoint() -> Response:
            return Response(body, media_type=media_type, headers=_HEADERS)
        return endpoint

    for path, (_, media_type) in ASSETS.items():
        app.add_api_route(path, asset(found[path], media_type),  # type: ignore[arg-type]
                          methods=["GET"], include_in_schema=False)

    def swagger() -> HTMLResponse:
        page = get_swagger_ui_html(
            openapi_url=openapi_url, title=f"{app.title} - API",
            swagger_js_url="/docs/assets/swagger-ui-bundle.js",
            swagger_css_url="/docs/assets/swagger-ui.css",
            swagger_favicon_url="/docs/assets/favicon.png",
            swagger_ui_parameters={"validatorUrl": None})
        page.headers.update({k: v for k, v in _HEADERS.items() if k != "Cache-Control"})
        return page

    app.add_api_route("/docs", swagger, methods=["GET"], include_in_schema=False)
