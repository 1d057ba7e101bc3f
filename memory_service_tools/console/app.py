"""The console's Starlette application: the login form, one route per page, probes and static assets.

Each page is a `routes` module with a ``build(view)`` function that reads through `Gateway` and returns the
template's values; `_page` wraps it with the token check, the address parsing and the failure rendering.
The token lives only in an HttpOnly, SameSite=Strict cookie: never in an address, a form the page echoes,
or a log line. Every page is a GET (read-only); the only POSTs set and clear that cookie.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from collections.abc import Callable
from contextlib import asynccontextmanager
from importlib.resources import files
from typing import Any
from urllib.parse import urlencode
from urllib.parse import urlsplit

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.middleware.base import RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.responses import RedirectResponse
from starlette.responses import Response
from starlette.routing import Mount
from starlette.routing import Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from memory_service_grpc_client import ClientSecurity
from memory_service_grpc_client import MemoryClient
from memory_service_tools.console import routes
from memory_service_tools.console.gateway import INGEST
from memory_service_tools.console.gateway import QUERY
from memory_service_tools.console.gateway import CallFailure
from memory_service_tools.console.gateway import Gateway
from memory_service_tools.console.gateway import TokenRefused
from memory_service_tools.console.page_view import ConsoleConfig
from memory_service_tools.console.page_view import PageView
from memory_service_tools.console.views import Address
from memory_service_tools.console.views import BadAddress

TOKEN_COOKIE = "cb_console_token"
TOKEN_MAX_AGE_SECONDS = 8 * 3600  # a forgotten browser tab does not keep the token for days
MAX_TOKEN_CHARS = 4096


Build = Callable[[PageView], dict[str, Any]]


# Pages carry data read under a visitor's token: no caching, no framing, no referrer (with its query) sent to
# another site (same-origin keeps the Origin header a sign-in is checked against), and
# scripts only from the console itself (the graph's data is a JSON block, never run).
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
        "frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def _safe_next(target: str) -> str:
    """A same-site path to return to after login (anything else goes to the start page)."""
    parts = urlsplit(target)
    if (
        parts.scheme
        or parts.netloc
        or not target.startswith("/")
        or target.startswith("//")
        or "\\" in target
        or any(ord(c) < 32 for c in target)
    ):
        return "/"
    return target


def _same_origin(request: Request) -> bool:
    """Whether a form post comes from the console's own pages (a browser sends Origin on every POST)."""
    origin = request.headers.get("origin")
    if origin is None:
        return True  # not a browser (or a very old one): the cookie's SameSite=Strict still holds
    parts = urlsplit(origin)
    # The host only: behind a TLS-terminating proxy the console sees http while the browser says https.
    return parts.netloc == request.headers.get("host", "")


def create_app(config: ConsoleConfig) -> Starlette:
    """The console application over one pair of channels shared by every visitor.

    Args:
        config: addresses and settings (`ConsoleConfig`).

    Returns:
        A Starlette ASGI app; serve it with uvicorn (``cb console``).
    """
    security = ClientSecurity(
        token="",
        ca_file=config.security.ca_file,
        cert_file=config.security.cert_file,
        key_file=config.security.key_file,
    )
    # Reads are sent once: a page shows an unreachable service at once rather than after retries.
    client = MemoryClient(config.ingest_addr, config.query_addr, security=security, retry_reads=False)
    package = files("memory_service_tools.console")
    templates = Jinja2Templates(directory=str(package / "templates"))
    templates.env.globals["urlencode"] = urlencode
    addresses = {INGEST: config.ingest_addr, QUERY: config.query_addr}

    def login_page(request: Request, message: str, status: int) -> Response:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return templates.TemplateResponse(
            request,
            "login.html",
            {"message": message, "next": _safe_next(target), "title": "Sign in"},
            status_code=status,
        )

    def page(template: str, build: Build) -> Callable[[Request], Response]:
        def endpoint(request: Request) -> Response:
            token = request.cookies.get(TOKEN_COOKIE, "")
            if not token:
                return login_page(request, "Enter a bearer token to read the services.", 401)
            gateway = Gateway(client.with_token(token), addresses)
            values: dict[str, Any] = {}
            status = 200
            try:
                address = Address.of(request)
                values = build(PageView(request, gateway, address, config))
            except TokenRefused as exc:
                return login_page(request, f"The services refused the token: {exc}", 401)
            except BadAddress as exc:
                address = Address(request.query_params.get("ns", ""), None, "")
                gateway.failures.append(
                    CallFailure(
                        "console", "address", "INVALID_ARGUMENT", str(exc), ((exc.name, exc.description),)
                    )
                )
                status = 400
            return templates.TemplateResponse(
                request,
                template,
                {
                    **values,
                    "address": address,
                    "failures": gateway.failures,
                    "down": gateway.down_services(),
                    "addresses": addresses,
                    "path": request.url.path,
                },
                status_code=status,
            )

        return endpoint

    async def login_form(request: Request) -> Response:
        return templates.TemplateResponse(
            request,
            "login.html",
            {"message": "", "next": _safe_next(request.query_params.get("next", "/")), "title": "Sign in"},
        )

    async def login(request: Request) -> Response:
        if not _same_origin(request):
            return PlainTextResponse("cross-site sign-in refused", status_code=403)
        form = await request.form()
        token = str(form.get("token", "")).strip()
        target = _safe_next(str(form.get("next", "/")))
        if not token or len(token) > MAX_TOKEN_CHARS or any(c.isspace() for c in token):
            return templates.TemplateResponse(
                request,
                "login.html",
                {
                    "message": "token: enter the bearer token (one word, no spaces).",
                    "next": target,
                    "title": "Sign in",
                },
                status_code=400,
            )
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(
            TOKEN_COOKIE,
            token,
            max_age=TOKEN_MAX_AGE_SECONDS,
            httponly=True,
            samesite="strict",
            secure=config.secure_cookie,
            path="/",
        )
        return response

    async def logout(request: Request) -> Response:
        if not _same_origin(request):
            return PlainTextResponse("cross-site sign-out refused", status_code=403)
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(
            TOKEN_COOKIE, path="/", httponly=True, samesite="strict", secure=config.secure_cookie
        )
        return response

    async def alive(_request: Request) -> Response:
        return PlainTextResponse("ok")

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        yield
        client.close()

    async def secured(request: Request, call_next: RequestResponseEndpoint) -> Response:
        started = time.perf_counter()
        response = await call_next(request)
        # The time the console spent on the page (its calls to the services and the rendering), for the
        # browser's developer tools and bench/bench_console.py (W3C Server Timing).
        response.headers["Server-Timing"] = f"page;dur={(time.perf_counter() - started) * 1000:.1f}"
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        return response

    return Starlette(
        middleware=[Middleware(BaseHTTPMiddleware, dispatch=secured)],
        routes=[
            Route("/login", login_form, methods=["GET"]),
            Route("/login", login, methods=["POST"]),
            Route("/logout", logout, methods=["POST"]),
            Route("/healthz", alive),
            Route("/readyz", alive),
            Mount("/static", StaticFiles(directory=str(package / "static")), name="static"),
            *(Route(path, page(template, build)) for path, template, build in routes.PAGES),
        ],
        lifespan=lifespan,
    )
