"""What one client may cost the WebUI's HTTP server: time to send a request, and a place
among a bounded number of open connections.

uvicorn's h11 protocol times out only an idle kept-alive connection; a client that opens a
connection and sends half a request (or nothing) holds a descriptor for ever, and enough of
them exhaust the process's descriptors, after which the event loop cannot accept anything.
So the server's protocol is uvicorn's h11 protocol with two additions:

- a request timer, armed whenever the connection waits for a request (when it opens and
  after each response), disarmed once the whole request (headers and body) has arrived; it
  closes the connection when it fires;
- a connection limit, checked as each connection opens: over it, the connection is answered
  ``503`` and closed at once, and the log gets one line per burst of refusals (then a count
  at most every ``REPORT_EVERY`` seconds), never a line or traceback per connection.

The limit and the listen backlog are kept below the descriptor limit (``RLIMIT_NOFILE``)
with room for what each connection's request may also open (a pooled SQLite connection,
a multiplexer client), so the loop's ``accept`` does not run out of descriptors; should it still (another part of the process
holding many), the loop's "out of system resource" reports are rate-limited the same way.
"""

from __future__ import annotations

import sys
import time

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

DEFAULT_REQUEST_TIMEOUT = 10.0
DEFAULT_KEEPALIVE_TIMEOUT = 5.0
DEFAULT_MAX_CONNECTIONS = 100
FDS_PER_CONNECTION = 4  # the socket, plus what its request may open (a pooled SQLite connection: database, WAL)
RESERVED_FDS = 32  # standard streams, the listening socket, the loop, the connection pool
REPORT_EVERY = 10.0
MAX_BACKLOG = 128

_REFUSAL_BODY = b'{"error": "the server holds too many connections; retry shortly"}'
REFUSAL = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nconnection: close\r\n"
    b"content-length: %d\r\n\r\n%s" % (len(_REFUSAL_BODY), _REFUSAL_BODY)
)


class Limits:
    def __init__(
        self,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        keepalive_timeout: float = DEFAULT_KEEPALIVE_TIMEOUT,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
    ) -> None:
        self.request_timeout = request_timeout
        self.keepalive_timeout = min(keepalive_timeout, request_timeout)
        self.max_connections, self.backlog = fitting(max_connections)


def fitting(wanted: int) -> tuple[int, int]:
    """(connections, backlog) that fit in the descriptor limit.

    The backlog matters as much as the limit: asyncio accepts up to ``backlog`` connections
    in one go before any of them can be refused and closed, so each of those needs a
    descriptor for a moment too.
    """
    import resource

    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return wanted, MAX_BACKLOG
    budget = max(2, soft - RESERVED_FDS)
    connections = max(1, min(wanted, budget // (FDS_PER_CONNECTION + 1)))
    backlog = max(1, min(MAX_BACKLOG, budget - connections * FDS_PER_CONNECTION))
    return connections, backlog


class BurstLog:
    """One stderr line when a burst of events starts, then at most one count per period."""

    def __init__(self, first_line: str, more_line: str, every: float = REPORT_EVERY, stream=None) -> None:
        self.first_line, self.more_line, self.every = first_line, more_line, every
        self.stream = stream
        self.reported_at: float | None = None
        self.unreported = 0

    def event(self) -> None:
        now = time.monotonic()
        if self.reported_at is None or now - self.reported_at >= self.every:
            line = self.first_line if self.unreported == 0 else self.more_line.format(count=self.unreported + 1)
            self.unreported = 0
            self.reported_at = now
            print(line, file=self.stream or sys.stderr, flush=True)
        else:
            self.unreported += 1


def protocol_class(limits: Limits) -> type:
    """uvicorn's h11 protocol with the request timer and the connection limit."""
    refusals = BurstLog(
        f"cafleet server: refused a connection: {limits.max_connections} are open, the most this server holds "
        "(CAFLEET_SERVER_MAX_CONNECTIONS, bounded by the open-file limit); further refusals are counted",
        f"cafleet server: refused {{count}} connection(s) in the last {REPORT_EVERY:g} s: "
        f"{limits.max_connections} are open, the most this server holds",
    )

    class GuardedH11Protocol(H11Protocol):
        _refused = False
        _request_timer = None

        def connection_made(self, transport) -> None:
            if len(self.connections) >= limits.max_connections:
                self._refused = True
                refusals.event()
                transport.write(REFUSAL)
                transport.close()
                return
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            if self._refused:
                return
            super().data_received(data)
            if self.conn.their_state is h11.DONE:  # the whole request is in
                self._disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and self.conn.their_state is not h11.DONE:
                self._arm()  # waiting for the next request on this connection

        def connection_lost(self, exc) -> None:
            if self._refused:
                return
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            self._request_timer = self.loop.call_later(limits.request_timeout, self._request_timed_out)

        def _disarm(self) -> None:
            if self._request_timer is not None:
                self._request_timer.cancel()
                self._request_timer = None

        def _request_timed_out(self) -> None:
            self._request_timer = None
            if not self.transport.is_closing():
                self.transport.close()

    return GuardedH11Protocol


def install_accept_error_log(loop) -> None:
    """Rate-limit the loop's reports of failed ``accept`` calls (out of descriptors or
    memory) to one line per burst; any other report goes to the loop's default handler."""
    import errno

    resource_errors = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}
    failures = BurstLog(
        "cafleet server: cannot accept connections: out of file descriptors or memory; retrying",
        f"cafleet server: {{count}} accept failures in the last {REPORT_EVERY:g} s (out of file descriptors or memory)",
    )

    def handler(loop, context) -> None:
        exc = context.get("exception")
        if isinstance(exc, OSError) and exc.errno in resource_errors:
            failures.event()
            return
        loop.default_exception_handler(context)

    loop.set_exception_handler(handler)
