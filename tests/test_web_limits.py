"""`cafleet server` against slow and greedy clients: real server processes, real sockets on
127.0.0.1.

A client that opens a connection and never finishes its request must be closed after the
request timeout; more connections than the server can hold are refused, each refusal
costing no descriptor for long and the log at most a line per burst, never a traceback
per connection (the server runs with a low RLIMIT_NOFILE so the descriptor limit is
reached quickly and boundedly).
"""

from __future__ import annotations

STORES = ("sqlite", "postgres")  # every test here runs on both stores (tests/conftest.py)

import contextlib
import resource
import signal
import socket
import subprocess
import sys
import time

import pytest

from tests.support.tmux_fixtures import wait_for
from tests.support.web_server import ROOT, free_port, read_line


class Server:
    def __init__(self, env: dict, *, nofile: int | None = None, **settings: str) -> None:
        self.port = free_port()

        def limit() -> None:
            if nofile is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cafleet", "server", "--port", str(self.port)],
            env=dict(env, **settings),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=str(ROOT),
            preexec_fn=limit,
        )
        self.first_line = read_line(self.proc.stdout, 30)
        assert self.first_line == f"serving the cafleet WebUI at http://127.0.0.1:{self.port}/", self.stop()
        login = read_line(self.proc.stdout, 30)
        assert "/login?token=" in login, self.stop()
        self.auth = f"Authorization: Bearer {login.rsplit('token=', 1)[-1]}\r\n"  # a header line of each request

    def get(self, path: str = "/api/fleets", timeout: float = 30) -> bytes:
        """One complete request on a fresh connection; the raw answer."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as sock:
            sock.sendall(
                f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n{self.auth}Connection: close\r\n\r\n".encode()
            )
            return read_all(sock)

    def stop(self) -> tuple[int, str, str]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            out, err = self.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
        return self.proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


def read_all(sock: socket.socket) -> bytes:
    chunks = []
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


@pytest.fixture
def servers(env, store):
    started: list[Server] = []

    def start(**kwargs) -> Server:
        server = Server(env, **kwargs)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def test_a_half_open_request_is_closed_after_the_request_timeout(servers):
    # Long enough that a loaded machine still answers the complete request below within it.
    server = servers(CAFLEET_SERVER_REQUEST_TIMEOUT="3")
    with (
        socket.create_connection(("127.0.0.1", server.port), timeout=60) as idle,
        socket.create_connection(("127.0.0.1", server.port), timeout=60) as partial,
    ):
        partial.sendall(
            f"GET /api/fleets HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n{server.auth}".encode()
        )  # no end
        started = time.monotonic()
        # recv returns b"" (or a reset) once the server closes; the 60 s socket timeout only
        # bounds a failure.
        assert read_all(partial) == b""
        assert read_all(idle) == b""
        assert time.monotonic() - started < 50
    assert server.get().startswith(b"HTTP/1.1 200 ")  # the server still answers
    code, _out, err = server.stop()
    assert (code, err) == (0, "")


def test_a_slow_body_is_closed_after_the_request_timeout_too(servers):
    server = servers(CAFLEET_SERVER_REQUEST_TIMEOUT="0.5")
    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as slow:
        slow.sendall(
            (
                f"POST /api/messages HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n{server.auth}"
                "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
            ).encode()
        )
        answer = read_all(slow)
    assert answer == b"" or answer.startswith(b"HTTP/1.1 4"), answer
    code, _out, err = server.stop()
    assert (code, err) == (0, "")


@pytest.mark.parametrize(
    "name,value",
    [
        ("CAFLEET_SERVER_REQUEST_TIMEOUT", "0"),
        ("CAFLEET_SERVER_REQUEST_TIMEOUT", "1e10"),
        ("CAFLEET_SERVER_REQUEST_TIMEOUT", "nan"),
        ("CAFLEET_SERVER_REQUEST_TIMEOUT", "soon"),
        ("CAFLEET_SERVER_MAX_CONNECTIONS", "0"),
        ("CAFLEET_SERVER_MAX_CONNECTIONS", "-1"),
        ("CAFLEET_SERVER_MAX_CONNECTIONS", "1e3"),
        ("CAFLEET_SERVER_MAX_CONNECTIONS", "9" * 5000),
    ],
)
# SQLite only, for the suite's time: refused before `cafleet server` opens its store, whatever the store.
@pytest.mark.stores("sqlite")
def test_bad_limits_are_refused_before_listening(cli, env, store, name, value):
    port = free_port()
    result = cli("server", "--port", str(port), environ=dict(env, **{name: value}))
    assert (result.code, result.out) == (2, "")
    assert result.err.startswith(f"Error: {name} must be ") and result.err.count("\n") == 1, result.err
    assert len(result.err) < 300
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))  # nothing was left listening


def test_a_kept_alive_connection_is_closed_after_the_keepalive_timeout(servers):
    server = servers(CAFLEET_SERVER_REQUEST_TIMEOUT="0.5")
    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as sock:
        sock.sendall(f"GET /api/fleets HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n{server.auth}\r\n".encode())
        answer = read_all(sock)  # the answer, then the close once the connection sat idle
    assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b"[]")


def answers(sockets: list[socket.socket], request: bytes, timeout: float) -> list[bytes | None]:
    """Send ``request`` on every socket, then read each until the server closes it; None for
    a socket still open at the deadline (the deadline only bounds a failure)."""
    import selectors

    for sock in sockets:
        # refused and closed already: its answer (if any) is still readable
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(request)
        sock.setblocking(False)
    results: dict[socket.socket, bytearray] = {sock: bytearray() for sock in sockets}
    done: dict[socket.socket, bool] = {}
    selector = selectors.DefaultSelector()
    for sock in sockets:
        selector.register(sock, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    while len(done) < len(sockets) and time.monotonic() < deadline:
        for key, _ in selector.select(max(0.0, deadline - time.monotonic())):
            sock = key.fileobj
            try:
                chunk = sock.recv(65536)
            except BlockingIOError:
                continue
            except ConnectionResetError:
                chunk = b""
            if chunk:
                results[sock] += chunk
            else:
                done[sock] = True
                selector.unregister(sock)
    selector.close()
    return [bytes(results[sock]) if sock in done else None for sock in sockets]


def accept_queue(port: int) -> int | None:
    """Connections waiting in the kernel's accept queue of the listening socket on ``port``."""
    with open("/proc/net/tcp") as table:
        for line in table.readlines()[1:]:
            fields = line.split()
            if fields[1].endswith(f":{port:04X}") and fields[3] == "0A":  # LISTEN
                return int(fields[4].split(":")[1], 16)
    return None


@pytest.mark.slow  # a crowd of connections against a server process
def test_connections_beyond_the_limit_are_refused_with_one_log_line(servers):
    nofile = 64
    server = servers(nofile=nofile, CAFLEET_SERVER_REQUEST_TIMEOUT="120")
    crowd: list[socket.socket] = []
    try:
        for _ in range(3 * nofile):  # far beyond what the server's descriptors allow
            crowd.append(socket.create_connection(("127.0.0.1", server.port), timeout=60))
            # The server has taken it off its listen queue: it is being served or was refused.
            # (Over the queue's length, the kernel itself would hold new ones back.)
            wait_for(lambda: accept_queue(server.port) == 0, timeout=30, what="the server to accept")
        request = f"GET /api/fleets HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n{server.auth}Connection: close\r\n\r\n"
        results = answers(crowd, request.encode(), timeout=90)
    finally:
        for sock in crowd:
            sock.close()
    assert None not in results, f"{results.count(None)} of {len(crowd)} connections were never answered"
    served = [r for r in results if r.startswith(b"HTTP/1.1 200 ")]
    refused = [r for r in results if r == b"" or r.startswith(b"HTTP/1.1 503 ")]
    assert len(served) + len(refused) == len(crowd), results
    assert 1 <= len(served) <= nofile // 4 and len(refused) == len(crowd) - len(served)
    assert server.get().startswith(b"HTTP/1.1 200 ")  # once the crowd has gone, it answers again
    code, _out, err = server.stop()
    assert code == 0
    lines = err.splitlines()
    assert "Traceback" not in err
    assert 1 <= len(lines) <= 5, err[:2000]
    assert all(line.startswith("cafleet server: ") for line in lines), lines
    assert "refused" in lines[0] and "connection" in lines[0], lines
