"""Usage records written where the coding agents write them (docs/usage.md), for tests
that need no real agent: claude's transcript lines and its live ``sessions/<pid>.json``."""

from __future__ import annotations

import json
from pathlib import Path


def call_line(message_id: str, usage: dict, *, model: object = "claude-sonnet-4-5", request_id: object = None) -> str:
    """One ``"type":"assistant"`` line of claude's transcript with ``usage`` as given."""
    line = {
        "type": "assistant",
        "requestId": f"req_{message_id}" if request_id is None else request_id,
        "message": {"id": message_id, "model": model, "usage": usage},
    }
    return json.dumps(line) + "\n"


def call_lines(message_id: str, input_tokens: int, output_tokens: int, blocks: int = 1) -> str:
    """One model call as claude writes it into its transcript: a line per content block, each
    repeating the call's usage under the same message id and request id."""
    usage = {
        "input_tokens": input_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": output_tokens,
    }
    return call_line(message_id, usage) * blocks


def user_line(text: str) -> str:
    """A user turn as claude writes it: what was typed into its input box."""
    return json.dumps({"type": "user", "message": {"role": "user", "content": text}}) + "\n"


def write_calls(config_dir: Path, session_id: str, text: str, project: str = "-work") -> Path:
    """Append ``text`` to the transcript of ``session_id`` under ``config_dir``."""
    folder = Path(config_dir) / "projects" / project
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{session_id}.jsonl"
    with open(path, "a", encoding="utf-8") as out:
        out.write(text)
    return path


def write_live_session(config_dir: Path, pid: int, session_id: str, cwd: str) -> None:
    """claude's live ``<config dir>/sessions/<pid>.json``, naming the session it is in."""
    folder = Path(config_dir) / "sessions"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{pid}.json").write_text(json.dumps({"pid": pid, "sessionId": session_id, "cwd": cwd}), encoding="utf-8")
