"""The ``amber serve`` application: the API, the dashboard, ``/metrics``, and the guard
in front of them (``amber.web.auth``)."""

from __future__ import annotations

import html
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from importlib import resources
from typing import TYPE_CHECKING

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, Field

from amber.errors import (
    AmberError,
    AnalysisStateError,
    CheckpointConflict,
    NotFound,
    NotSupported,
    ReviewAlreadyDecided,
    StoreUnavailable,
    VersionConflictError,
)
from amber.web import api
from amber.web.auth import COOKIE, SAFE_METHODS, Guard
from amber.web.metrics import CONTENT_TYPE, Metrics

if TYPE_CHECKING:
    from amber.runtime.app import App
    from amber.runtime.worker import Worker
    from amber.stack import Stack

STATIC = resources.files("amber.web") / "static"
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
        " connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def _status_of(exc: AmberError) -> int:
    if isinstance(exc, NotFound):
        return 404
    if isinstance(
        exc, AnalysisStateError | ReviewAlreadyDecided | CheckpointConflict | VersionConflictError
    ):
        return 409
    if isinstance(exc, StoreUnavailable):
        return 503
    if isinstance(exc, NotSupported):
        return 501
    return 400


def _error(status: int, message: str, kind: str = "refused") -> JSONResponse:
    return JSONResponse({"error": message, "type": kind}, status_code=status)


class Login(BaseModel):
    """The token, typed into the dashboard's login page."""

    token: str = Field(max_length=1024)


def _page(name: str, token: str | None = None) -> HTMLResponse:
    text = (STATIC / name).read_text(encoding="utf-8")
    text = text.replace("{{TOKEN}}", html.escape(token or "", quote=True))
    return HTMLResponse(text)


def create_app(context: api.Context, guard: Guard, worker: Worker | None = None) -> FastAPI:
    """The ASGI application serving ``context`` behind ``guard`` (and running ``worker``
    in a thread while it is up)."""
    metrics = Metrics(context.stack)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        metrics.attach()
        thread = None
        if worker is not None:
            thread = threading.Thread(target=worker.run, name="amber-serve-worker", daemon=True)
            thread.start()
        try:
            yield
        finally:
            if worker is not None and thread is not None:
                worker.stop()
                thread.join(30)
            metrics.detach()

    app = FastAPI(
        title="amber",
        summary="Analyses, checkpoints, steps, reviews and sessions of amber.",
        openapi_url="/api/openapi.json",
        docs_url="/api/docs",
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.context = context
    app.state.guard = guard
    app.state.metrics = metrics
    app.include_router(api.router)
    app.mount("/static", StaticFiles(directory=str(STATIC)), name="static")

    @app.middleware("http")
    async def guarded(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        response = _refusal(guard, request) or await call_next(request)
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        return response

    @app.exception_handler(AmberError)
    async def amber_error(_: Request, exc: AmberError) -> JSONResponse:
        return _error(_status_of(exc), exc.message, type(exc).__name__)

    @app.exception_handler(RequestValidationError)
    async def bad_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()))
        return _error(422, f"{where}: {first.get('msg', 'invalid request')}", "InvalidValue")

    @app.get("/", include_in_schema=False)
    def index(request: Request) -> HTMLResponse:
        if not guard.may_read(_headers(request), request.cookies.get(COOKIE)):
            return _page("login.html")
        return _page("index.html", guard.token)

    @app.post("/api/login", tags=["access"])
    def login(body: Login) -> Response:
        """Exchange the token for a session cookie (HttpOnly, SameSite=Strict)."""
        if not guard.token_ok(body.token):
            return _error(401, "that is not the token", "Unauthorized")
        response = JSONResponse({"ok": True})
        response.set_cookie(COOKIE, guard.session_value(), httponly=True, samesite="strict")
        return response

    @app.get("/metrics", include_in_schema=False)
    def prometheus() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    return app


def _headers(request: Request) -> dict[str, str]:
    return {k.lower(): v for k, v in request.headers.items()}


def _refusal(guard: Guard, request: Request) -> Response | None:
    """Why a request is refused, or None when it may go on (see ``amber.web.auth``)."""
    headers = _headers(request)
    host = headers.get("host")
    if not guard.host_ok(host):
        return _error(421, f"this server does not answer to host {host!r}", "MisdirectedRequest")
    method, path = request.method.upper(), request.url.path
    if method == "OPTIONS":
        return _error(405, "no cross-origin requests", "MethodNotAllowed")
    if path.startswith("/static/"):
        return None
    if method not in SAFE_METHODS:
        if not guard.origin_ok(headers.get("origin"), host, headers.get("sec-fetch-site")):
            return _error(403, "a change must come from this server's own pages", "Forbidden")
        if path != "/api/login" and not guard.may_change(headers):
            return _error(401, "a change needs the token in X-Amber-Token", "Unauthorized")
        return None
    if path != "/" and not guard.may_read(headers, request.cookies.get(COOKIE)):
        return _error(401, "this server needs its token (AMBER_SERVE_TOKEN)", "Unauthorized")
    return None


def build(
    stack: Stack,
    app: App,
    host: str = "127.0.0.1",
    port: int = 8765,
    allow_hosts: Iterable[str] = (),
    workers: int = 0,
) -> tuple[FastAPI, Guard]:
    """The application for ``stack`` and ``app`` on ``host:port`` (``ConfigError`` when
    ``host`` is beyond loopback and no ``AMBER_SERVE_TOKEN`` is set); with ``workers``
    > 0, a worker of the app runs that many analyses at once in this process."""
    import redis

    from amber.persistence import SyncPersistenceManager
    from amber.runtime.worker import Worker

    guard = Guard.build(stack.settings.serve_token, host, port, allow_hosts)
    persistence = None
    if isinstance(stack.redis, redis.Redis):  # the persistence module is not for clusters
        persistence = SyncPersistenceManager(client=stack.redis, prefix=stack.keys.prefix)
    worker = Worker(stack, app, workers) if workers > 0 else None
    context = api.Context(stack, app, persistence)
    return create_app(context, guard, worker), guard
