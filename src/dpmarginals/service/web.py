"""The analyst's web page: campaigns, a marginal as a table and a heatmap, CSV download.

``add_web_page(app)`` serves ``static/`` (plain HTML, CSS and JavaScript, package data: no
build step, nothing fetched from elsewhere) at ``/ui/``, and redirects ``/`` there.  The
page reads the JSON API only (``/campaigns``, ``/status``, ``/plan``, ``/marginals`` with
``std=true``), sending the analyst's token from the page's token field (kept in the tab's
``sessionStorage``) as ``Authorization: Bearer``.

Everything the API returns is attacker-controlled text (campaign ids, attribute names,
value labels, error reasons): the script puts it in the page as text only, never as
HTML, and the page is served with a Content-Security-Policy that allows no inline
script or style and no origin but the service's own.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

__all__ = ["CONTENT_SECURITY_POLICY", "PAGE_FILES", "add_web_page"]

#: URL path -> (file in ``static/``, media type).
PAGE_FILES: dict[str, tuple[str, str]] = {
    "/ui/": ("index.html", "text/html; charset=utf-8"),
    "/ui/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/ui/app.css": ("app.css", "text/css; charset=utf-8"),
}

CONTENT_SECURITY_POLICY = "; ".join([
    "default-src 'none'", "script-src 'self'", "style-src 'self'", "img-src 'self'",
    "connect-src 'self'", "base-uri 'none'", "form-action 'none'", "frame-ancestors 'none'",
])

HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def page_file(name: str) -> bytes:
    """The bytes of one file of the page (package data)."""
    return resources.files(__package__).joinpath("static", name).read_bytes()


def add_web_page(app: Any) -> None:
    """Serve the page's files at ``/ui/`` (``/ui`` and ``/`` redirect there)."""
    from fastapi.responses import RedirectResponse, Response

    def serve(body: bytes, media_type: str) -> Any:
        def endpoint() -> Response:
            return Response(body, media_type=media_type, headers=HEADERS)
        return endpoint

    for path, (name, media_type) in PAGE_FILES.items():
        app.add_api_route(path, serve(page_file(name), media_type), methods=["GET"],
                          include_in_schema=False)

    def to_page() -> RedirectResponse:
        return RedirectResponse("ui/", status_code=307)

    app.add_api_route("/", to_page, methods=["GET"], include_in_schema=False)
    app.add_api_route("/ui", to_page, methods=["GET"], include_in_schema=False)
