"""A real cafleet WebUI for tests: the app in-process (``make_app``), on a real uvicorn in a
thread (``threaded_server``), or as `cafleet server` in a subprocess (``ServerProcess``);
and a reader for its server-sent event streams."""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from cafleet.web.app import WebConfig, create_app
from cafleet.web.login import Login
from cafleet.web.security import allowed_hosts

ROOT = Path(__file__).resolve().parent.parent.parent
BASE = "http://127.0.0.1:8000"
TOKEN = "token-of-the-tests-own-servers"  # the in-process apps'; `cafleet server` makes its own
AUTH = {"authorization": f"Bearer {TOKEN}"}


def make_app(db_path: str, env: dict, **options):
    options.setdefault("login", Login(TOKEN))
    config = WebConfig(database=db_path, allowed_hosts=allowed_hosts("127.0.0.1", 8000, True), environ=env, **options)
    return create_app(config)


def web_client(app, base_url: str = BASE, **options):
    """Starlette's TestClient on ``app``, logged in with the tests' token."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Starlette 1.x prefers httpx2 for its TestClient; httpx works
        from starlette.testclient import TestClient

    return TestClient(app, base_url=base_url, headers=AUTH, **options)


def count_messages(store) -> int:
    return store.execute("SELECT count(*) FROM messages").fetchone()[0]


@contextmanager
def threaded_server(db_path: str, env: dict, **options):
    """The app on a real uvicorn in a thread, on a loopback port bound before the app exists."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    port = sock.getsockname()[1]
    options.setdefault("login", Login(TOKEN))
    config = WebConfig(database=db_path, allowed_hosts=allowed_hosts("127.0.0.1", port, True), environ=env, **options)
    server = uvicorn.Server(uvicorn.Config(create_app(config), log_level="warning", lifespan="on", ws="none"))
    config.stopping = lambda: server.should_exit
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}", server, thread
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


class SSEReader:
    """Reads a server-sent event stream in a thread; events and comments land in queues.
    ``client``: an ``httpx.Client`` shared by many readers (making one costs an SSL
    context, tens of milliseconds); without it each reader makes its own."""

    def __init__(self, url: str, client: httpx.Client | None = None, headers: dict | None = None) -> None:
        self.url = url
        self.asking = AUTH if headers is None else headers  # the request's headers
        self.client = client
        self.events: queue.Queue = queue.Queue()
        self.comments: queue.Queue = queue.Queue()
        self.status: int | None = None
        self.headers: httpx.Headers | None = None
        self.opened = threading.Event()
        self.ended = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        assert self.opened.wait(10), "event stream did not open"

    def _run(self) -> None:
        try:
            opener = self.client.stream if self.client is not None else httpx.stream
            with opener("GET", self.url, headers=self.asking, timeout=httpx.Timeout(30, read=None)) as response:
                self.status, self.headers = response.status_code, response.headers
                self.opened.set()
                name, data = None, []
                for line in response.iter_lines():
                    if line.startswith(":"):
                        self.comments.put(line[1:].strip())
                    elif line.startswith("event: "):
                        name = line[len("event: ") :]
                    elif line.startswith("data: "):
                        data.append(line[len("data: ") :])
                    elif line == "" and data:
                        self.events.put((name, json.loads("\n".join(data))))
                        name, data = None, []
        except httpx.HTTPError:
            pass
        finally:
            self.opened.set()
            self.ended.set()

    def next(self, timeout: float = 30.0) -> tuple[str, dict]:  # the timeout only bounds a failure
        try:
            return self.events.get(timeout=timeout)
        except queue.Empty:
            pytest.fail(f"no server-sent event within {timeout} s")

    def take(self, count: int, timeout: float = 30.0) -> list[tuple[str, dict]]:
        return [self.next(timeout) for _ in range(count)]

    def quiet(self, seconds: float) -> bool:
        """True when no event arrives for ``seconds``."""
        try:
            event = self.events.get(timeout=seconds)
        except queue.Empty:
            return True
        pytest.fail(f"unexpected event {event!r}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServerProcess:
    """`python -m cafleet server` in a subprocess; ``url`` once it printed its address, and
    ``login`` (its login link), ``token`` and ``headers`` (a bearer of the token) once it
    printed the login line."""

    def __init__(self, env: dict, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cafleet", "server", *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=str(ROOT),
        )
        self.first_line = read_line(self.proc.stdout, 20)
        self.url = self.first_line.rsplit(" ", 1)[-1] if self.first_line.startswith("serving ") else None
        self.login = self.token = None
        self.headers: dict[str, str] = {}
        if self.url is not None:
            line = read_line(self.proc.stdout, 20)
            assert line.startswith("log in: "), line
            self.login = line[len("log in: ") :]
            self.token = self.login.rsplit("token=", 1)[-1]
            self.headers = {"authorization": f"Bearer {self.token}"}

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10) -> tuple[int, str, str]:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate(timeout=5)
            pytest.fail(f"cafleet server did not stop within {timeout} s after signal {sig}")
        return self.proc.returncode, out.decode(), err.decode()


def read_line(stream, timeout: float) -> str:
    """One line from a pipe, or "" when the process ends or ``timeout`` passes."""
    import selectors

    selector = selectors.DefaultSelector()
    selector.register(stream, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    buffer = b""
    fd = stream.fileno()
    try:
        while not buffer.endswith(b"\n"):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not selector.select(remaining):
                break
            chunk = os.read(fd, 1)
            if not chunk:
                break
            buffer += chunk
    finally:
        selector.close()
    return buffer.decode().strip()
