"""A real HTTP receiver on 127.0.0.1 for the notices posted out (tests/test_notify.py,
bench/notify.py): ``http.server`` in a thread, recording every POST and what it answered."""

from __future__ import annotations

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Receiver:
    """An HTTP server on 127.0.0.1 that records each POST (path, headers, body, the status
    it answered, ``at``: ``time.time()`` when its body was read, ``answered``: when it was
    answered): ``statuses`` are answered
    first, in order, then 200; while ``hold`` is set, each request waits (at most
    ``hold_for`` s) for ``release`` before it is answered."""

    def __init__(self, port: int = 0, statuses=(), hold: bool = False, hold_for: float = 20.0) -> None:
        self.requests: list[dict] = []
        self.statuses = list(statuses)
        self.hold = hold
        self.hold_for = hold_for
        self.release = threading.Event()
        self.open = 0
        self.arrived = 0  # requests whose body was read, answered or not
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                at = time.time()
                with receiver.lock:
                    receiver.open += 1
                    receiver.arrived += 1
                if receiver.hold:
                    receiver.release.wait(receiver.hold_for)
                with receiver.lock:
                    status = receiver.statuses.pop(0) if receiver.statuses else 200
                    receiver.requests.append(
                        {
                            "path": self.path,
                            "headers": dict(self.headers),
                            "body": body,
                            "status": status,
                            "at": at,
                            "answered": time.time(),
                        }
                    )
                    receiver.open -= 1
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def ok(self, path: str | None = None) -> list[dict]:
        with self.lock:
            return [r for r in self.requests if 200 <= r["status"] < 300 and path in (None, r["path"])]

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


def free_port() -> int:
    """A port nothing listens on (bound, then closed: connections to it are refused)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
