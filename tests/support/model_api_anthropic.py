"""The Anthropic Messages API for :mod:`tests.support.model_api` (claude, opencode).

``POST /v1/messages`` streams (SSE) or answers in one JSON body, as the request asks. A
request that offers tools is a turn of the agent's conversation and takes the next
scripted reply; one without tools (a session title, a quota probe) is a side request and
gets a short fixed text. ``POST /v1/messages/count_tokens`` and ``GET /v1/models`` get
minimal valid answers.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, ClassVar

from tests.support.model_api import HOLD_LIMIT, Handler, ModelAPI, Protocol, Reply, Request

SIDE_REPLY = "Cafleet test"
MODEL = "claude-sonnet-4-5"


def is_turn(body: Any) -> bool:
    return isinstance(body, dict) and bool(body.get("tools"))


def user_texts(body: Any) -> list[str]:
    """Every text the user side of a Messages request holds, in order (tool results too)."""
    found: list[str] = []
    for message in (body or {}).get("messages", []) if isinstance(body, dict) else []:
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            found.append(content)
            continue
        for block in content or []:
            if block.get("type") == "text":
                found.append(block.get("text", ""))
            elif block.get("type") == "tool_result":
                inner = block.get("content")
                if isinstance(inner, str):
                    found.append(inner)
                else:
                    found.extend(part.get("text", "") for part in inner or [] if part.get("type") == "text")
    return found


def tool_results(body: Any) -> list[str]:
    """What each tool call gave the model, oldest first: the text of every ``tool_result``
    block a Messages request holds (each turn resends the whole conversation, so the last
    request holds them all)."""
    found: list[str] = []
    for message in (body or {}).get("messages", []) if isinstance(body, dict) else []:
        content = message.get("content")
        for block in content if isinstance(content, list) else []:
            if block.get("type") != "tool_result":
                continue
            inner = block.get("content")
            if isinstance(inner, str):
                found.append(inner)
            else:
                found.append("\n".join(part.get("text", "") for part in inner or [] if part.get("type") == "text"))
    return found


def _content(reply: Reply) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if reply.text:
        blocks.append({"type": "text", "text": reply.text})
    for call in reply.tool_calls:
        blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": call.input})
    return blocks


def _usage(reply: Reply) -> dict[str, int]:
    return {
        "input_tokens": reply.input_tokens,
        "output_tokens": reply.output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def _messages(api: ModelAPI, http, request: Request) -> None:
    body = request.body if isinstance(request.body, dict) else {}
    request.turn = is_turn(body)
    reply = api.script.take() if request.turn else Reply(text=SIDE_REPLY, input_tokens=20, output_tokens=3)
    api.record(request)
    model = body.get("model") or MODEL
    stop = "tool_use" if reply.tool_calls else "end_turn"
    message_id = "msg_" + uuid.uuid4().hex[:24]
    if not body.get("stream"):
        if reply.hold is not None:
            reply.hold.wait(HOLD_LIMIT)
        http.send_json(
            200,
            {
                "id": message_id,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": _content(reply),
                "stop_reason": stop,
                "stop_sequence": None,
                "usage": _usage(reply),
            },
        )
        reply.served.set()
        return
    try:
        _stream(api, http, reply, model, message_id, stop)
    except (BrokenPipeError, ConnectionResetError):
        return
    reply.served.set()


def _stream(api: ModelAPI, http, reply: Reply, model: str, message_id: str, stop: str) -> None:
    http.start_sse()
    start_usage = dict(_usage(reply), output_tokens=1)
    http.sse(
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": message_id,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": start_usage,
            },
        },
    )
    held = reply.hold

    def pause() -> None:
        nonlocal held
        if held is not None:
            held.wait(HOLD_LIMIT)
            held = None
        elif reply.chunk_delay:
            time.sleep(reply.chunk_delay)

    index = 0
    if reply.text or held is not None:
        http.sse(
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}},
        )
        chunks = reply.chunks() or [""]
        for number, chunk in enumerate(chunks):
            if number:
                pause()
            http.sse(
                "content_block_delta",
                {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": chunk}},
            )
        pause()  # a held reply with one chunk waits here
        http.sse("content_block_stop", {"type": "content_block_stop", "index": index})
        index += 1
    for call in reply.tool_calls:
        http.sse(
            "content_block_start",
            {
                "type": "content_block_start",
                "index": index,
                "content_block": {"type": "tool_use", "id": call.id, "name": call.name, "input": {}},
            },
        )
        http.sse(
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "input_json_delta", "partial_json": json.dumps(call.input)},
            },
        )
        http.sse("content_block_stop", {"type": "content_block_stop", "index": index})
        index += 1
    http.sse(
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": reply.output_tokens},
        },
    )
    http.sse("message_stop", {"type": "message_stop"})


def _count_tokens(api: ModelAPI, http, request: Request) -> None:
    api.record(request)
    http.send_json(200, {"input_tokens": 100})


def _models(api: ModelAPI, http, request: Request) -> None:
    api.record(request)
    http.send_json(
        200,
        {
            "data": [
                {
                    "type": "model",
                    "id": MODEL,
                    "display_name": "Claude Sonnet 4.5",
                    "created_at": "2025-09-29T00:00:00Z",
                }
            ],
            "has_more": False,
            "first_id": MODEL,
            "last_id": MODEL,
        },
    )


def _head(api: ModelAPI, http, request: Request) -> None:
    api.record(request)  # claude probes the base URL with HEAD / at start
    http.send_response(200)
    http.send_header("Content-Length", "0")
    http.end_headers()


class Anthropic(Protocol):
    name = "anthropic"
    routes: ClassVar[dict[tuple[str, str], Handler]] = {
        ("POST", "/v1/messages"): _messages,
        ("POST", "/v1/messages/count_tokens"): _count_tokens,
        ("GET", "/v1/models"): _models,
        ("HEAD", "/"): _head,
    }
