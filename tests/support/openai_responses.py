"""A scripted stand-in for the OpenAI Responses API, for running the real codex offline.

The tests start it on 127.0.0.1 and point codex at it through a custom model provider in
a throw-away ``CODEX_HOME/config.toml`` (:func:`codex_config`). Each ``POST /v1/responses``
is recorded and answered from a script: a function of the request that returns the turn's
output items (:func:`text` and :func:`tool_call` build them). A reply may also carry a
``threading.Event`` that the server waits on before answering, so a test can hold codex in
its "Working" state for as long as it needs.

codex also sends a title-generation request on a thread's first turn (no tools, and
``thread_source: thread_title`` in its metadata); :meth:`ResponsesAPI.turns` leaves those
out, and they are answered with a fixed title without consuming the script.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

Item = dict
Script = Callable[[dict], "Reply"]
PREVIEW = re.compile(r"\[cafleet msg (\d+) from (\d+) ")


class Reply:
    """What one turn answers: output ``items``, sent after ``hold`` is set (if given)."""

    def __init__(
        self, items: list[Item], hold: threading.Event | None = None, input_tokens: int = 100, output_tokens: int = 10
    ) -> None:
        self.items = items
        self.hold = hold
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens


def text(message: str) -> Item:
    return {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": message, "annotations": []}],
    }


def tool_call(name: str, arguments: dict) -> Item:
    return {"type": "function_call", "name": name, "arguments": json.dumps(arguments)}


def user_texts(request: dict) -> list[tuple[str, str]]:
    """(item id, text) of every user message in a request's input, oldest first."""
    found = []
    for item in request.get("input", []):
        if item.get("type") == "message" and item.get("role") == "user":
            for part in item.get("content", []):
                if part.get("type") == "input_text":
                    found.append((item.get("id", ""), part["text"]))
    return found


def tool_outputs(request: dict) -> list[str]:
    """What each tool call gave the model, oldest first: the ``output`` of every
    ``function_call_output`` item in a request's input (codex resends the whole
    conversation, so its last request holds them all)."""
    found = []
    for item in request.get("input", []):
        if item.get("type") == "function_call_output":
            output = item.get("output")
            found.append(output if isinstance(output, str) else json.dumps(output))
    return found


def last_input(request: dict) -> dict:
    items = request.get("input", [])
    return items[-1] if items else {}


def is_title_request(request: dict) -> bool:
    metadata = request.get("client_metadata") or {}
    return not request.get("tools") or '"thread_source":"thread_title"' in metadata.get("x-codex-turn-metadata", "")


class ResponsesAPI:
    """The server: ``url`` is the provider's base URL; ``requests`` every request body."""

    def __init__(self, script: Script | None = None) -> None:
        self.script: Script = script or (lambda request: Reply([text("ok")]))
        self.requests: list[dict] = []
        self.unknown: list[str] = []
        self._lock = threading.Lock()
        self._counter = 0
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                api.unknown.append(f"GET {self.path}")
                self._json(200, {"object": "list", "data": []})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    request = json.loads(self.rfile.read(length) or b"{}")
                except ValueError:
                    self._json(400, {"error": {"message": "bad json"}})
                    return
                if not self.path.rstrip("/").endswith("/responses"):
                    api.unknown.append(f"POST {self.path}")
                    self._json(404, {"error": {"message": "unknown path"}})
                    return
                with api._lock:
                    api.requests.append(request)
                reply = Reply([text("Cafleet member")]) if is_title_request(request) else api.script(request)
                if reply.hold is not None:
                    reply.hold.wait(120)
                self._stream(api._next_id(), reply)

            def _json(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, n: int, reply: Reply) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                response_id = f"resp_{n}"

                def event(payload: dict) -> None:
                    self.wfile.write(f"event: {payload['type']}\ndata: {json.dumps(payload)}\n\n".encode())
                    self.wfile.flush()

                event({"type": "response.created", "response": {"id": response_id}})
                for index, item in enumerate(reply.items):
                    item = dict(item, id=f"item_{n}_{index}")
                    if item["type"] == "function_call":
                        item.setdefault("call_id", f"call_{n}_{index}")
                    event({"type": "response.output_item.done", "output_index": index, "item": item})
                usage = {
                    "input_tokens": reply.input_tokens,
                    "input_tokens_details": {"cached_tokens": 0},
                    "output_tokens": reply.output_tokens,
                    "output_tokens_details": {"reasoning_tokens": 0},
                    "total_tokens": reply.input_tokens + reply.output_tokens,
                }
                event({"type": "response.completed", "response": {"id": response_id, "usage": usage}})

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _next_id(self) -> int:
        with self._lock:
            self._counter += 1
            return self._counter

    def start(self) -> ResponsesAPI:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def turns(self) -> list[dict]:
        """The recorded turn requests (title generation left out)."""
        with self._lock:
            return [r for r in self.requests if not is_title_request(r)]

    def received(self) -> list[str]:
        """Every distinct user message the model was sent, in order of first sight."""
        seen: dict[str, str] = {}
        for request in self.turns():
            for item_id, message in user_texts(request):
                seen.setdefault(item_id or message, message)
        return list(seen.values())


def codex_config(api_url: str, trusted: list[str], approval: str | None = None) -> str:
    """A ``config.toml`` that sends every request to ``api_url`` with a fake key read from
    ``CAFLEET_TEST_MODEL_KEY`` and trusts the ``trusted`` folders (no trust dialog)."""
    lines = [
        'model = "gpt-5.4"',
        'model_provider = "scripted"',
    ]
    if approval is not None:
        lines.append(f'approval_policy = "{approval}"')
    lines += [
        "",
        "[model_providers.scripted]",
        'name = "scripted"',
        f'base_url = "{api_url}"',
        'wire_api = "responses"',
        'env_key = "CAFLEET_TEST_MODEL_KEY"',
        "request_max_retries = 0",
        "stream_max_retries = 0",
    ]
    for folder in trusted:
        lines += ["", f"[projects.{json.dumps(folder)}]", 'trust_level = "trusted"']
    return "\n".join(lines) + "\n"
