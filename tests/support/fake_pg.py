"""A hostile PostgreSQL server on 127.0.0.1, for what a real server never does.

A real server (tests/support/postgres.py) shows how cafleet behaves when the server is
honest. What the client must also survive is a server, or a machine in the middle, that
lies: plaintext injected after the server agreed to TLS (CVE-2021-23222), a message whose
length field claims 2 GiB, a byte a second, a message type the protocol does not have, a
COPY nobody asked for, silence. No real server can be made to do these, so
:class:`FakePg` stands in for one: a listening TCP socket on a free port of 127.0.0.1,
served by threads of the test's own process, whose bytes are written here by hand with
``struct`` (protocol 3.0, https://www.postgresql.org/docs/current/protocol-message-formats.html).
It speaks only as much of the protocol as a test's ``behaviour`` asks for.

``FakePg(behaviour)`` calls ``behaviour(session)`` for each connection a client opens, in
a thread of its own; the :class:`Session` reads the client's requests
(:meth:`Session.startup`, :meth:`Session.read_query`) and sends what the behaviour says.
What the server saw is kept in :attr:`FakePg.events` (``"ssl-request"``, ``"startup"``,
``"query"``...), so a test can tell that a client got as far as the hostile part, or
stopped before it. :meth:`FakePg.stop` closes the listener and every connection and joins
the threads; use the server as a context manager (or from a fixture) so it always runs.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Callable

SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104
CANCEL_REQUEST = 80877102
PROTOCOL_3 = 196608
TICK = 0.1  # seconds: how often a blocked read or wait looks at whether the server is stopping

# What a PostgreSQL 15 server reports at the end of a normal login.
PARAMETERS = {
    "server_encoding": "UTF8",
    "client_encoding": "UTF8",
    "server_version": "15.0",
    "standard_conforming_strings": "on",
    "integer_datetimes": "on",
    "DateStyle": "ISO, MDY",
}
TEXT_OID = 25


# --- the server's messages, by hand ---------------------------------------------------------


def message(kind: bytes, body: bytes = b"") -> bytes:
    """A backend message: its type byte, its length (which counts itself), its body."""
    return kind + struct.pack("!I", len(body) + 4) + body


def cstring(text: str) -> bytes:
    return text.encode() + b"\0"


def authentication_ok() -> bytes:
    return message(b"R", struct.pack("!I", 0))


def parameter_status(name: str, value: str) -> bytes:
    return message(b"S", cstring(name) + cstring(value))


def backend_key_data(pid: int = 4242, secret: int = 0x5EC2E7) -> bytes:
    return message(b"K", struct.pack("!II", pid, secret))


def ready_for_query(status: bytes = b"I") -> bytes:
    return message(b"Z", status)


def greeting() -> bytes:
    """A whole successful login's answer: AuthenticationOk, the parameters,
    BackendKeyData and ReadyForQuery (idle)."""
    params = b"".join(parameter_status(name, value) for name, value in PARAMETERS.items())
    return authentication_ok() + params + backend_key_data() + ready_for_query()


def row_description(*names: str) -> bytes:
    """One text column per name."""
    body = struct.pack("!H", len(names))
    for name in names:
        # table oid, column number, type oid, type size, type modifier, format (text)
        body += cstring(name) + struct.pack("!IHIhih", 0, 0, TEXT_OID, -1, -1, 0)
    return message(b"T", body)


def data_row(*values: str) -> bytes:
    body = struct.pack("!H", len(values))
    for value in values:
        raw = value.encode()
        body += struct.pack("!i", len(raw)) + raw
    return message(b"D", body)


def command_complete(tag: str) -> bytes:
    return message(b"C", cstring(tag))


def parse_complete() -> bytes:
    return message(b"1")


def bind_complete() -> bytes:
    return message(b"2")


class ClientGone(Exception):
    """The client closed the connection, or the server is stopping."""


class Session:
    """One client connection, as a behaviour sees it."""

    def __init__(self, server: FakePg, sock: socket.socket) -> None:
        self.server = server
        self.sock = sock

    # -- reading the client ----------------------------------------------------------------
    def recv_exact(self, size: int) -> bytes:
        data = b""
        while len(data) < size:
            if self.server.stopping.is_set():
                raise ClientGone
            try:
                chunk = self.sock.recv(size - len(data))
            except TimeoutError:
                continue
            except OSError:
                raise ClientGone from None
            if not chunk:
                raise ClientGone
            data += chunk
        return data

    def startup(self, on_ssl: Callable[[Session], None] | None = None) -> bool:
        """Read the client's requests up to its StartupMessage: a GSSAPI-encryption request
        is refused (``N``), an SSLRequest is given to ``on_ssl`` (refused without one).
        False for a cancel request (a connection of its own, which then ends)."""
        while True:
            (length,) = struct.unpack("!I", self.recv_exact(4))
            body = self.recv_exact(length - 4)
            (code,) = struct.unpack_from("!I", body)
            if code == GSSENC_REQUEST:
                self.server.record("gssenc-request")
                self.send(b"N")
            elif code == SSL_REQUEST:
                self.server.record("ssl-request")
                if on_ssl is None:
                    self.send(b"N")
                else:
                    on_ssl(self)
            elif code == CANCEL_REQUEST:
                self.server.record("cancel-request")
                return False
            else:
                self.server.record("startup")
                return True

    def read_query(self) -> list[bytes]:
        """The type bytes of the client's messages up to a Sync (``S``, the end of an
        extended-protocol query or of a pipeline of them) or a simple Query (``Q``)."""
        kinds: list[bytes] = []
        while True:
            kind = self.recv_exact(1)
            (length,) = struct.unpack("!I", self.recv_exact(4))
            self.recv_exact(length - 4)
            if kind == b"X":  # Terminate
                raise ClientGone
            kinds.append(kind)
            if kind in (b"S", b"Q"):
                self.server.record("query")
                return kinds

    # -- answering -------------------------------------------------------------------------
    def send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError:
            raise ClientGone from None

    def trickle(self, data: bytes, interval: float = 1.0) -> None:
        """Send ``data`` one byte every ``interval`` seconds."""
        for i in range(len(data)):
            self.send(data[i : i + 1])
            if self.server.stopping.wait(interval):
                raise ClientGone

    def start_tls(self, context) -> None:
        """Complete a TLS handshake as the server (``context`` is a server-side
        :class:`ssl.SSLContext`); from then on the session reads and writes through it."""
        import ssl

        tls = context.wrap_socket(self.sock, server_side=True, do_handshake_on_connect=False)
        tls.settimeout(5)
        try:
            tls.do_handshake()
        except (ssl.SSLError, OSError):
            self.server.record("tls-failed")
            _close(tls)
            raise ClientGone from None
        tls.settimeout(TICK)
        self.sock = tls
        self.server.record("tls")

    def hold(self) -> None:
        """Say nothing more; read and drop whatever the client sends, until it closes."""
        while True:
            self.recv_exact(1)


class FakePg:
    """A listening socket on 127.0.0.1 whose connections are served by ``behaviour``."""

    def __init__(self, behaviour: Callable[[Session], None]) -> None:
        self.behaviour = behaviour
        self.stopping = threading.Event()
        self.events: list[str] = []
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))  # a free port, chosen by the kernel
        self.listener.listen(8)
        self.listener.settimeout(TICK)
        self.port: int = self.listener.getsockname()[1]
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._acceptor = threading.Thread(target=self._accept, name=f"fake-pg-{self.port}", daemon=True)
        self._acceptor.start()

    def url(self, **query: str) -> str:
        options = "&".join(f"{key}={value}" for key, value in query.items())
        return f"postgresql://u@127.0.0.1:{self.port}/db" + (f"?{options}" if options else "")

    def record(self, event: str) -> None:
        with self._lock:
            self.events.append(event)

    def count(self, event: str) -> int:
        with self._lock:
            return self.events.count(event)

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                sock, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            sock.settimeout(TICK)
            self.record("connection")
            thread = threading.Thread(target=self._serve, args=(sock,), daemon=True)
            with self._lock:
                self._sockets.append(sock)
                self._threads.append(thread)
            thread.start()

    def _serve(self, sock: socket.socket) -> None:
        session = Session(self, sock)
        try:
            self.behaviour(session)
        except ClientGone:
            pass
        except Exception as exc:  # a bug of the behaviour: the test sees it in events
            self.record(f"behaviour failed: {type(exc).__name__}: {exc}")
        finally:
            self.record("closed")
            _close(session.sock)

    def stop(self) -> None:
        self.stopping.set()
        _close(self.listener)
        self._acceptor.join(5)
        with self._lock:
            sockets, threads = list(self._sockets), list(self._threads)
        for sock in sockets:
            _close(sock)
        for thread in threads:
            thread.join(5)

    def __enter__(self) -> FakePg:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
