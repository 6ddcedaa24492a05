"""claude's records (docs/usage.md): ``<config dir>/projects/*/<session id>.jsonl``, one
``"type":"assistant"`` line per content block, each repeating the call's ``message.usage``;
a call is counted once per ``(message.id, requestId)``, its last line winning. No
dollars: the price table (:mod:`cafleet.agents.usage.totals`). Also the session a live
claude process says it is in now (after ``/clear``).
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Iterable

from cafleet.agents.usage.totals import FileState, TranscriptReader, Unreadable, Usage, read_count, read_name


def claude_transcripts(config_dir: str, session_id: str) -> list[str]:
    """``<config dir>/projects/*/<session id>.jsonl`` (long cwds are cut and hashed in the
    folder name, so the folder is not computed but searched)."""
    projects = os.path.join(config_dir, "projects")
    name = session_id + ".jsonl"
    found = []
    try:
        with os.scandir(projects) as entries:
            for entry in entries:
                path = os.path.join(entry.path, name)
                if entry.is_dir() and os.path.isfile(path):
                    found.append(path)
    except OSError:
        pass
    return sorted(found)


def _started_with(pid: int, session_id: str) -> bool:
    """Whether process ``pid`` was started with ``--session-id <session_id>`` (its
    ``/proc/<pid>/cmdline``, before any ``--``): what cafleet put in the member's argv. A
    member cannot change another process's argv, so this ties the pid to the member; a
    system without /proc ties nothing."""
    try:
        with open(f"/proc/{int(pid)}/cmdline", "rb") as handle:
            args = handle.read(1 << 20).split(b"\0")
    except OSError:
        return False
    want = session_id.encode()
    for arg, following in itertools.pairwise(args):
        if arg == b"--":
            return False
        if (arg == b"--session-id" and following == want) or arg == b"--session-id=" + want:
            return True
    return False


def is_session_id(value) -> bool:
    return type(value) is str and len(value) == 36 and all(c in "0123456789abcdef-" for c in value)


def claude_live_session(config_dir: str, pid: int, cwd: str, *, spawn_session: str) -> str | None:
    """The session the claude process ``pid`` says it is in now (``<config dir>/sessions/<pid>.json``,
    which ``/clear`` rewrites with the new session's id), when ``pid`` is the process
    cafleet started with ``--session-id <spawn_session>`` and the file names that pid and
    ``cwd``; else None. The file is the member's own to write: the session it names is a
    claim, checked against the session's transcript before it counts
    (:func:`cafleet.agents.previews.claude_previews`, docs/usage.md)."""
    if not _started_with(pid, spawn_session):
        return None
    try:
        with open(os.path.join(config_dir, "sessions", f"{int(pid)}.json"), "rb") as handle:
            live = json.loads(handle.read(1 << 20).decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(live, dict) or live.get("pid") != pid or live.get("cwd") != cwd:
        return None
    session = live.get("sessionId")
    return session if is_session_id(session) else None


def parse_lines(data: bytes, state: FileState) -> None:
    """Count the calls in ``data``, complete transcript lines, into ``state``."""
    for line in data.split(b"\n"):
        if b'"usage"' not in line or b'"assistant"' not in line:
            continue  # most lines: user turns, tool results, metadata
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            state.unreadable += 1
            continue
        if not isinstance(record, dict) or record.get("type") != "assistant":
            continue
        message = record.get("message")
        if not isinstance(message, dict) or "usage" not in message:
            continue
        try:
            usage = message["usage"]
            if not isinstance(usage, dict):
                raise Unreadable
            key = (read_name(message.get("id")), read_name(record.get("requestId")))
            call = (
                read_name(message.get("model"), "unknown"),
                {
                    "input": read_count(usage.get("input_tokens")),
                    "cache_write": read_count(usage.get("cache_creation_input_tokens")),
                    "cache_read": read_count(usage.get("cache_read_input_tokens")),
                    "output": read_count(usage.get("output_tokens")),
                },
            )
        except Unreadable:
            state.unreadable += 1
            continue
        state.keep(key, call)


def claude_usage(
    config_dir: str, session_ids: Iterable[str], reader: TranscriptReader | None = None
) -> tuple[Usage, list[str]]:
    """The usage in the transcripts of ``session_ids``, and the files read."""
    reader = reader or TranscriptReader()
    paths = []
    for session_id in session_ids:
        for path in claude_transcripts(config_dir, session_id):
            paths.append(path)
            reader.read(path, parse_lines)
    return reader.summed(paths, "<synthetic>"), paths  # claude's own placeholder lines, no API call
