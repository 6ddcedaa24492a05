"""A scripted model API on 127.0.0.1 for running the real coding agents offline.

The real claude and opencode talk to it as to the Anthropic Messages API; other protocols
(the OpenAI Responses API codex speaks, say) plug in as separate modules that register
their routes (see :class:`Protocol`). Nothing here knows about cafleet.

* :class:`ModelAPI` -- a threaded stdlib HTTP server on ``127.0.0.1:0``. Every request is
  recorded (:attr:`ModelAPI.requests`); a POST is dispatched by path to a protocol's
  handler; an unknown path is logged and answered 404.
* :class:`Script` -- the queue of scripted replies. A protocol handler decides whether a
  request is a *turn* (a request of the agent's main conversation, which takes the next
  scripted reply) or a *side request* (a title, a quota probe, a summary), answered with a
  short fixed text so it never consumes the script. When the queue is empty a turn gets
  :attr:`Script.default` ("Done.").
* :class:`Reply` -- one scripted assistant turn: text and/or tool calls, the usage numbers
  to report, a delay between streamed chunks, and an optional ``hold`` event: the reply's
  first chunk is sent, then the stream waits for the event (so the agent shows "working"
  until the test releases it).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

HOLD_LIMIT = 120.0  # a held reply is released after this many seconds whatever happens


@dataclass
class ToolCall:
    name: str
    input: dict[str, Any]
    id: str = field(default_factory=lambda: "toolu_" + uuid.uuid4().hex[:20])


@dataclass
class Reply:
    """One scripted assistant turn."""

    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    input_tokens: int = 120
    output_tokens: int = 12
    chunk_delay: float = 0.0  # seconds between streamed chunks
    hold: threading.Event | None = None  # stream waits here after the first chunk
    served: threading.Event = field(default_factory=threading.Event)  # set once sent in full

    def chunks(self, size: int = 8) -> list[str]:
        return [self.text[i : i + size] for i in range(0, len(self.text), size)] or []


def text(message: str, **kwargs: Any) -> Reply:
    return Reply(text=message, **kwargs)


def bash(command: str, description: str = "Run a command", **kwargs: Any) -> Reply:
    """A reply that calls the agent's shell tool (claude's ``Bash``) with ``command``."""
    return Reply(tool_calls=[ToolCall("Bash", {"command": command, "description": description})], **kwargs)


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: Any  # parsed JSON, or the raw text when it is not JSON
    turn: bool = False  # took (or would have taken) a scripted reply
    at: float = field(default_factory=time.monotonic)


class Script:
    """The scripted replies, taken in order by turns."""

    def __init__(self, default: str = "Done.") -> None:
        self.default = default
        self._queue: deque[Reply] = deque()
        self._lock = threading.Lock()

    def push(self, *replies: Reply) -> None:
        with self._lock:
            self._queue.extend(replies)

    def take(self) -> Reply:
        with self._lock:
            if self._queue:
                return self._queue.popleft()
        return Reply(text=self.default)

    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    def clear(self) -> None:
        with self._lock:
            self._queue.clear()


Handler = Callable[["ModelAPI", "_HTTPHandler", Request], None]


class Protocol:
    """A model API protocol: ``routes`` maps (method, path) to a handler."""

    name = "?"
    routes: ClassVar[dict[tuple[str, str], Handler]] = {}


class ModelAPI:
    """The server. Use as a context manager, or call :meth:`start` and :meth:`stop`."""

    def __init__(self, *protocols: type[Protocol]) -> None:
        if not protocols:
            from tests.support.model_api_anthropic import Anthropic

            protocols = (Anthropic,)
        self.script = Script()
        self.requests: list[Request] = []
        self.unknown: list[str] = []
        self.routes: dict[tuple[str, str], Handler] = {}
        for protocol in protocols:
            self.routes.update(protocol.routes)
        self._lock = threading.RLock()  # checks passed to wait() may call turns()
        self._changed = threading.Condition(self._lock)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    # -- life cycle
    def start(self) -> ModelAPI:
        api = self

        class Bound(_HTTPHandler):
            model_api = api

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Bound)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="model-api", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> ModelAPI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._server is not None, "start the model API first"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def stopping(self) -> threading.Event:
        return self._stopping

    # -- what was asked
    def record(self, request: Request) -> None:
        with self._changed:
            self.requests.append(request)
            self._changed.notify_all()

    def turns(self) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if r.turn]

    def wait(self, check: Callable[[list[Request]], Any], timeout: float) -> Any:
        """Wait until ``check(requests)`` is truthy (re-checked on every new request);
        return its value, or the last falsy value after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                value = check(list(self.requests))
                remaining = deadline - time.monotonic()
                if value or remaining <= 0:
                    return value
                self._changed.wait(min(remaining, 0.5))


class _HTTPHandler(BaseHTTPRequestHandler):
    model_api: ModelAPI
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode("utf-8", "replace")

    def _dispatch(self, method: str) -> None:
        path = self.path.split("?", 1)[0]
        body = self._body() if method in ("POST", "PUT") else None
        request = Request(method, path, dict(self.headers.items()), body)
        handler = self.model_api.routes.get((method, path))
        if handler is None:
            self.model_api.unknown.append(f"{method} {self.path}")
            self.model_api.record(request)
            self.send_json(404, {"type": "error", "error": {"type": "not_found_error", "message": f"no route {path}"}})
            return
        handler(self.model_api, self, request)

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_HEAD(self) -> None:
        self._dispatch("HEAD")

    # -- helpers for protocol handlers
    def send_json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def start_sse(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def sse(self, event: str | None, payload: Any) -> None:
        head = f"event: {event}\n" if event else ""
        self.wfile.write(f"{head}data: {json.dumps(payload)}\n\n".encode())
        self.wfile.flush()
