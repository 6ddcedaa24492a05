"""codex's records (docs/usage.md): ``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-*.jsonl``
whose first user message carries the member's identity lines; a ``token_usage_record``
line per response, counted once per ``response_id``. No dollars: the price table
(:mod:`cafleet.agents.usage.totals`).
"""

from __future__ import annotations

import json
import os

from cafleet.agents.usage.totals import FileState, TranscriptReader, Unreadable, Usage, millis, read_count, read_name


def codex_rollouts(codex_home: str, *, started_at: str, fleet_id: int, member_id: int) -> list[str]:
    """The member's rollout files: ``<codex home>/sessions/YYYY/MM/DD/rollout-*.jsonl`` of
    the spawn day or later, written since the spawn, whose first MiB holds the member's
    identity lines (codex writes the spawn prompt as the thread's first user message)."""
    marker = f"- fleet id: {int(fleet_id)}\\n- your member id: {int(member_id)}\\n".encode()
    since = millis(started_at) / 1000 - 1
    first_day = started_at[:10].replace("-", "/")
    root = os.path.join(codex_home, "sessions")
    found = []
    for year in _listdir(root):
        for month in _listdir(os.path.join(root, year)):
            for day in _listdir(os.path.join(root, year, month)):
                if f"{year}/{month}/{day}" < _day_before(first_day):
                    continue
                folder = os.path.join(root, year, month, day)
                for name in _listdir(folder):
                    path = os.path.join(folder, name)
                    if not (name.startswith("rollout-") and name.endswith(".jsonl")):
                        continue
                    try:
                        if os.path.getmtime(path) < since:
                            continue
                        with open(path, "rb") as handle:
                            head = handle.read(1 << 20)
                    except OSError:
                        continue
                    if marker in head:
                        found.append(path)
    return found


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def _day_before(day: str) -> str:
    """``YYYY/MM/DD`` one day earlier (codex names folders by its local date)."""
    import datetime

    return (datetime.date(*map(int, day.split("/"))) - datetime.timedelta(days=1)).strftime("%Y/%m/%d")


def codex_usage(
    codex_home: str, *, started_at: str, fleet_id: int, member_id: int, reader: TranscriptReader | None = None
) -> tuple[Usage, list[str]]:
    """The usage in the member's rollout files, a call counted once per ``response_id``."""
    reader = reader or TranscriptReader()
    paths = codex_rollouts(codex_home, started_at=started_at, fleet_id=fleet_id, member_id=member_id)
    for path in paths:
        reader.read(path, parse_lines)
    return reader.summed(paths), paths


def parse_lines(data: bytes, state: FileState) -> None:
    """Count the calls in ``data``, complete rollout lines, into ``state``."""
    for line in data.split(b"\n"):
        is_usage = b'"token_usage_record"' in line
        if not is_usage and b'"turn_context"' not in line:
            continue
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            state.unreadable += 1
            continue
        payload = record.get("payload") if isinstance(record, dict) else None
        if not isinstance(payload, dict):
            continue
        kind = record.get("type")
        if kind not in ("turn_context", "token_usage_record"):
            continue
        try:
            if kind == "turn_context":
                state.model = read_name(payload.get("model"), state.model)
                continue
            usage = payload.get("usage")
            if not isinstance(usage, dict):
                raise Unreadable
            key = ("codex", read_name(payload.get("response_id")))
            cached = read_count(usage.get("cached_input_tokens"))
            written = read_count(usage.get("cache_write_input_tokens"))
            tokens = {
                "input": max(
                    read_count(usage.get("input_tokens")) - cached - written, 0
                ),  # codex's input includes cached
                "cache_write": written,
                "cache_read": cached,
                "output": read_count(usage.get("output_tokens")),  # reasoning included
            }
        except Unreadable:
            state.unreadable += 1
            continue
        state.keep(key, (state.model, tokens))
