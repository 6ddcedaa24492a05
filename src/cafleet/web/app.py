"""The WebUI application: routes, database connections, and JSON errors for everything.

Handlers that touch the database are plain functions, so Starlette runs them in its
worker threads and a slow SQLite call (busy timeout, a pane notification after a send)
never blocks the event loop. Each request borrows one validated connection from a small
pool and gives it back with no transaction open: nothing holds a write lock across an
``await``.

The pool is bounded: at most ``POOL_SIZE`` connections are open at once, however many
requests and event streams there are (a request that finds them all busy waits up to the
busy timeout, then is answered 503). With the one change waiter every event stream shares
(:class:`cafleet.web.events.SharedChanges`), that bounds what a server process costs the
database: on PostgreSQL ``POOL_SIZE`` sessions, one LISTEN session, and the advisory-lock
session of each send whose preview is being typed (at most one per pooled connection).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from cafleet import config as settings, errors
from cafleet.config.declarations import DEFAULT_SERVER_MAX_STREAMS
from cafleet.store import DEFAULT_BUSY_TIMEOUT
from cafleet.store.engines import location_identity, open_store, replaced_error
from cafleet.store.protocol import Store
from cafleet.web import api, events, graph, screens, security
from cafleet.web.login import Login, PublicAddress, new_token

STATIC_DIR = os.path.join(os.path.dirname(__file__), "static")
POOL_SIZE = 8  # database connections a server process has open at most (docs/webui.md)


@dataclass
class WebConfig:
    """Everything the application needs to know about where it runs."""

    database: str
    allowed_hosts: frozenset[str]
    environ: Mapping[str, str] = field(default_factory=settings.process_environ)
    busy_timeout: float = DEFAULT_BUSY_TIMEOUT
    stopping: Callable[[], bool] = lambda: False  # the server is shutting down: end event streams
    gone: Callable[[Exception], None] = lambda _error: None  # the database file was deleted or replaced
    poll_interval: float = 0.25  # how often the event streams' shared change waiter looks
    keepalive_interval: float = 15.0  # a comment line on an idle event stream
    max_streams: int = DEFAULT_SERVER_MAX_STREAMS  # open event streams at most; 503 past it
    settings: settings.Settings | None = None  # the server command's; built from ``environ`` when not given
    login: Login = field(default_factory=lambda: Login(new_token()))  # the API's secret (cafleet.web.login)
    public: PublicAddress | None = None  # --public: the address people open, in front of the server

    def __post_init__(self) -> None:
        if self.settings is None:
            self.settings = settings.Settings(self.environ, self.database)


class StorePool:
    """A few validated connections reused across requests (diagnosis runs once per
    connection): at most ``limit`` lent out at once, ``keep`` of them kept while idle."""

    def __init__(
        self,
        database: str,
        busy_timeout: float,
        keep: int = 4,
        gone: Callable[[Exception], None] | None = None,
        limit: int = POOL_SIZE,
        schema: str | None = None,
        trusted_owner: str | None = None,
    ) -> None:
        self.database = database
        self.schema = schema  # PostgreSQL only: CAFLEET_PG_SCHEMA and CAFLEET_PG_TRUSTED_OWNER, from the settings
        self.trusted_owner = trusted_owner
        self.busy_timeout = busy_timeout
        self.keep = keep
        self.limit = limit
        self.identity = location_identity(database)  # the file `cafleet server` diagnosed at start-up
        self.gone = gone
        self._idle: list[Store] = []
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(limit)
        self._closed = False

    def open(self) -> Store:
        """Another connection to the file that ``cafleet server`` diagnosed at start-up,
        opened and diagnosed by :func:`open_store` like every other connection (its header
        check keeps one descriptor per file open for the life of the process, so it never
        drops the locks of this process's other connections)."""
        return open_store(self.database, self.busy_timeout, self.schema, self.trusted_owner)

    def check_file(self) -> None:
        """Refuse to serve once the path names another file (or none): a new connection
        would open, or create, a file the fleet's processes do not use, and a pooled one
        reads a file nobody else sees. The server is told to stop."""
        now = location_identity(self.database)
        if self.identity is None:  # not there yet when the app was made (only in tests): the first file counts
            self.identity = now
        elif now != self.identity:
            error = replaced_error(self.database)
            if self.gone is not None:
                self.gone(error)
            raise error

    @contextmanager
    def borrow(self) -> Iterator[Store]:
        """A connection for the ``with`` body; waits up to the busy timeout while all
        ``limit`` are lent out, then raises a one-line DatabaseError (503)."""
        self.check_file()
        if not self._slots.acquire(timeout=self.busy_timeout):
            raise errors.DatabaseError(
                f"all {self.limit} database connections of this server are in use "
                f"(waited {self.busy_timeout:g} s); try again."
            )
        try:
            with self._lock:
                store = self._idle.pop() if self._idle else None
            if store is not None and not store.usable():  # its server ended it meanwhile (PostgreSQL)
                store.close()
                store = None
            if store is None:
                store = self.open()
        except BaseException:
            self._slots.release()
            raise
        healthy = False
        try:
            yield store
            healthy = True
        except errors.CafleetError as error:
            healthy = not isinstance(error, errors.DatabaseError)  # a 404 or 409 leaves the connection fine
            raise
        except Exception as error:  # a driver's, raised while a result was read: a damaged page, a full disk
            translated = store.classify(error)
            if translated is None:
                raise
            raise translated from None
        finally:
            try:
                store.end_transaction()
            except Exception:  # noqa: BLE001 -- the connection died during the request: dropped; the request's own error stands
                healthy = False
            self._give_back(store, healthy)

    def _give_back(self, store: Store, healthy: bool) -> None:
        try:
            with self._lock:
                if healthy and not self._closed and len(self._idle) < self.keep:
                    self._idle.append(store)
                    return
            store.close()
        finally:
            self._slots.release()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for store in idle:
            store.close()


_STATUS = (
    (errors.NotFound, 404),
    (errors.Conflict, 409),
    (errors.UsageError, 422),
    (errors.DatabaseError, 503),
)


def status_for(error: errors.CafleetError) -> int:
    for kind, status in _STATUS:
        if isinstance(error, kind):
            return status
    return 500


async def _cafleet_error(_request: Request, exc: Exception) -> JSONResponse:
    if isinstance(exc, api.ApiError):
        return JSONResponse({"error": exc.message}, status_code=exc.status, headers=exc.headers)
    assert isinstance(exc, errors.CafleetError)
    return JSONResponse({"error": str(exc)}, status_code=status_for(exc))


async def _http_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    return JSONResponse(
        {"error": str(exc.detail).lower().rstrip(".")}, status_code=exc.status_code, headers=exc.headers
    )


class ErrorBoundary:
    """Turns an unexpected exception into a JSON 500 and one log line, never a traceback
    in the response (``CAFLEET_DEBUG=1`` logs the traceback too)."""

    def __init__(self, app, debug: bool) -> None:
        self.app = app
        self.debug = debug

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except ClientDisconnect:
            return  # the client went away (or was closed by the request timeout): nobody to answer
        except Exception as exc:  # noqa: BLE001 -- the boundary: anything not handled above is a bug
            line = (
                f"cafleet server: internal error on {scope.get('method')} {scope.get('path')}: "
                f"{type(exc).__name__}: {exc}"
            )
            print(line, file=sys.stderr, flush=True)
            if self.debug:
                import traceback

                traceback.print_exc()
            if started:
                return
            status, headers, body = security.json_error(
                500, f"internal error ({type(exc).__name__}); see the server log"
            )
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": body})


async def _index(_request: Request) -> FileResponse:
    return FileResponse(os.path.join(STATIC_DIR, "index.html"), headers={"cache-control": "no-cache"})


async def _login(request: Request) -> Response:
    """``/login?token=T``: the session cookie for the right token, then the page."""
    login: Login = request.app.state.config.login
    if not login.token_matches(request.query_params.get("token", "")):
        return PlainTextResponse(
            "refused: this login link's token is wrong or from an earlier start of the server; "
            "open the link `cafleet server` printed when it started.\n",
            status_code=403,
        )
    response = RedirectResponse("/", status_code=303, headers={"cache-control": "no-store"})
    response.set_cookie(
        login.cookie_name, login.session, httponly=True, samesite="strict", secure=login.secure, path="/"
    )
    return response


async def _attention(_request: Request) -> FileResponse:
    return FileResponse(os.path.join(STATIC_DIR, "attention.html"), headers={"cache-control": "no-cache"})


async def _no_icon(_request: Request) -> Response:
    return Response(status_code=204)  # browsers ask for one; an empty answer keeps the log clean


def create_app(config: WebConfig) -> Starlette:
    """The ASGI application over ``config.database``, which the caller has diagnosed with
    ``open_store`` before listening, so a refused file never gets a server."""
    chosen = config.settings
    assert chosen is not None  # filled in by WebConfig.__post_init__
    pool = StorePool(
        config.database,
        config.busy_timeout,
        gone=lambda error: config.gone(error),
        schema=chosen.pg_schema,
        trusted_owner=chosen.pg_trusted_owner,
    )
    changes = events.SharedChanges(pool, config.poll_interval)
    app = Starlette(
        routes=_routes(),
        middleware=[
            Middleware(
                security.SecurityMiddleware, allowed=config.allowed_hosts, login=config.login, public=config.public
            ),
            Middleware(ErrorBoundary, debug=chosen.debug),
        ],
        exception_handlers={
            errors.CafleetError: _cafleet_error,
            api.ApiError: _cafleet_error,
            HTTPException: _http_error,
        },
        lifespan=_lifespan(pool, changes),
    )
    app.state.config = config
    app.state.pool = pool
    app.state.changes = changes
    app.state.streams = events.StreamSlots(config.max_streams)
    app.state.screens = screens.ScreenCache()
    app.state.screen_rate = screens.RateLimit()
    app.state.graphs = graph.GraphCache()
    return app


def _routes() -> list[Route | Mount]:
    """The pages, the JSON API and the event stream, and the static files."""
    return [
        Route("/", _index),
        Route("/favicon.ico", _no_icon),
        Route("/login", _login),
        Route("/attention", _attention),
        Route("/api/attention", api.attention_everywhere),
        Route("/api/fleets", api.list_fleets),
        Route("/api/fleets/{fleet_id}", api.fleet_detail),
        Route("/api/fleets/{fleet_id}/messages", api.fleet_messages),
        Route("/api/fleets/{fleet_id}/usage", api.fleet_usage),
        Route("/api/members/{member_id}/inbox", api.member_inbox),
        Route("/api/members/{member_id}/diff", api.member_diff),
        Route("/api/messages", api.send_message, methods=["POST"]),
        Route("/api/members/{member_id}/answer", api.answer_member, methods=["POST"]),
        Route("/api/fleets/{fleet_id}/screens", screens.fleet_screens),
        Route("/api/fleets/{fleet_id}/graph", graph.graph),
        Route("/api/events", events.stream),
        Mount("/static", StaticFiles(directory=STATIC_DIR), name="static"),
    ]


def _lifespan(pool: StorePool, changes: events.SharedChanges):
    """The application's lifespan: the accept-error log while it serves; the change waiter
    and the pool closed when it ends."""

    @asynccontextmanager
    async def lifespan(_app):
        import asyncio

        from cafleet.web.connections import install_accept_error_log

        install_accept_error_log(asyncio.get_running_loop())
        try:
            yield
        finally:
            changes.close()
            pool.close()

    return lifespan
