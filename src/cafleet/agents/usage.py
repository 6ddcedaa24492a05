"""Read what each coding agent records about its own model usage (docs/usage.md).

A leaf: files and the agents' own databases only, nothing of cafleet's. The command line
loads it only for ``member usage``/``fleet usage`` and ``member create``.

* claude: ``<config dir>/projects/*/<session id>.jsonl``, one ``"type":"assistant"`` line
  per content block, each repeating the call's ``message.usage``; a call is counted once
  per ``(message.id, requestId)``, its last line winning. No dollars: the price table.
* opencode: ``<data dir>/opencode.db`` read-only, table ``session`` (see :func:`opencode_usage`).
* codex: ``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-*.jsonl`` whose first user message
  carries the member's identity lines; a ``token_usage_record`` line per response,
  counted once per ``response_id``. No dollars: the price table.

A :class:`Usage` adds calls up by model; :class:`TranscriptReader` keeps a byte offset per
file, so reading again only parses what was appended.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping

KINDS = ("input", "cache_write", "cache_read", "output")
"""Token kinds: input not read from or written to the prompt cache, written to the
cache, read from the cache, output (reasoning included)."""

PRICE_TABLE_VERSION = 1
# Dollars per million tokens, by kind, for models whose agent records no dollars. Keys
# are model-name prefixes (the longest matching one wins). Public list prices as of
# the table's version; a user overrides or extends them with CAFLEET_PRICE_FILE.
PRICES: dict[str, dict[str, float]] = {
    "claude-opus-4-5": {"input": 5.0, "cache_write": 6.25, "cache_read": 0.5, "output": 25.0},
    "claude-opus-4-1": {"input": 15.0, "cache_write": 18.75, "cache_read": 1.5, "output": 75.0},
    "claude-opus-4": {"input": 15.0, "cache_write": 18.75, "cache_read": 1.5, "output": 75.0},
    "claude-sonnet-4": {"input": 3.0, "cache_write": 3.75, "cache_read": 0.3, "output": 15.0},
    "claude-3-7-sonnet": {"input": 3.0, "cache_write": 3.75, "cache_read": 0.3, "output": 15.0},
    "claude-haiku-4-5": {"input": 1.0, "cache_write": 1.25, "cache_read": 0.1, "output": 5.0},
    "claude-3-5-haiku": {"input": 0.8, "cache_write": 1.0, "cache_read": 0.08, "output": 4.0},
    "gpt-5": {"input": 1.25, "cache_write": 0.0, "cache_read": 0.125, "output": 10.0},
    "gpt-5-mini": {"input": 0.25, "cache_write": 0.0, "cache_read": 0.025, "output": 2.0},
}


def price_table(environ: Mapping[str, str]) -> dict[str, dict[str, float]]:
    """The built-in prices, overlaid with the JSON file named by ``CAFLEET_PRICE_FILE``
    (``{"models": {"<prefix>": {"input": 3.0, "output": 15.0, ...}}}``, dollars per
    million tokens; a kind left out costs 0). A file that cannot be read is an error."""
    table = dict(PRICES)
    path = environ.get("CAFLEET_PRICE_FILE")
    if path:
        from cafleet.errors import UsageError

        try:
            with open(path, encoding="utf-8") as handle:
                loaded = json.load(handle)
            models = loaded["models"]
            for prefix, prices in models.items():
                table[str(prefix)] = {kind: float(prices.get(kind, 0.0)) for kind in KINDS}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
            raise UsageError(
                f"cannot read the price file CAFLEET_PRICE_FILE={path} ({error}); "
                'it must be JSON like {"models": {"claude-sonnet-4": {"input": 3.0, "output": 15.0}}}'
            ) from None
    return table


def price_for(model: str, table: Mapping[str, Mapping[str, float]]) -> Mapping[str, float] | None:
    best = None
    for prefix in table:
        if model.startswith(prefix) and (best is None or len(prefix) > len(best)):
            best = prefix
    return table[best] if best is not None else None


class Usage:
    """Tokens by model and kind, dollars recorded by the agent, and the calls counted."""

    __slots__ = ("models",)

    def __init__(self) -> None:
        self.models: dict[str, dict] = {}

    def add(self, model: str, tokens: Mapping[str, int], *, usd: float | None = None, calls: int = 1) -> None:
        row = self.models.setdefault(
            model or "unknown", {**{kind: 0 for kind in KINDS}, "calls": 0, "recorded_usd": None}
        )
        for kind in KINDS:
            row[kind] += int(tokens.get(kind) or 0)
        row["calls"] += calls
        if usd is not None:
            row["recorded_usd"] = (row["recorded_usd"] or 0.0) + float(usd)

    def merge(self, other: "Usage") -> None:
        for model, row in other.models.items():
            self.add(model, row, usd=row["recorded_usd"], calls=row["calls"])

    def report(self, prices: Mapping[str, Mapping[str, float]]) -> dict:
        """``{"calls", "tokens": {kind: n, "total": n}, "usd", "unpriced": [models],
        "models": {model: {kinds..., "calls", "usd", "usd_source"}}}``. A model's dollars
        are the agent's own when it recorded them, else tokens times the price table;
        a model in neither is listed in ``unpriced`` and left out of ``usd``."""
        models = {}
        totals = {kind: 0 for kind in KINDS}
        usd = 0.0
        calls = 0
        unpriced = []
        for model in sorted(self.models):
            row = self.models[model]
            out = {kind: row[kind] for kind in KINDS}
            out["calls"] = row["calls"]
            if row["recorded_usd"] is not None:
                out["usd"], out["usd_source"] = round(row["recorded_usd"], 6), "recorded"
            else:
                price = price_for(model, prices)
                if price is None:
                    out["usd"], out["usd_source"] = None, "unpriced"
                    unpriced.append(model)
                else:
                    cost = sum(row[kind] * float(price.get(kind, 0.0)) for kind in KINDS) / 1_000_000
                    out["usd"], out["usd_source"] = round(cost, 6), f"price table v{PRICE_TABLE_VERSION}"
            if out["usd"] is not None:
                usd += out["usd"]
            for kind in KINDS:
                totals[kind] += row[kind]
            calls += row["calls"]
            models[model] = out
        totals["total"] = sum(totals[kind] for kind in KINDS)
        return {"calls": calls, "tokens": totals, "usd": round(usd, 6), "unpriced": unpriced, "models": models}


def data_dir(agent: str, environ: Mapping[str, str]) -> str | None:
    """Where ``agent`` keeps its records for a pane started with ``environ``."""
    home = environ.get("HOME") or os.path.expanduser("~")
    if agent == "claude":
        return environ.get("CLAUDE_CONFIG_DIR") or os.path.join(home, ".claude")
    if agent == "codex":
        return environ.get("CODEX_HOME") or os.path.join(home, ".codex")
    if agent == "opencode":
        return os.path.join(environ.get("XDG_DATA_HOME") or os.path.join(home, ".local", "share"), "opencode")
    return None


# -- claude -----------------------------------------------------------------------------


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


def _count(value) -> int:
    """A token count as written, or 0 for anything that is not a non-negative integer."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def claude_live_session(config_dir: str, pid: int, cwd: str) -> str | None:
    """The session the claude process ``pid`` is in now (``<config dir>/sessions/<pid>.json``,
    which ``/clear`` rewrites with the new session's id), when that file is a claude's
    started in ``cwd``; else None."""
    try:
        with open(os.path.join(config_dir, "sessions", f"{int(pid)}.json"), encoding="utf-8") as handle:
            live = json.load(handle)
    except (OSError, ValueError):
        return None
    if not isinstance(live, dict) or live.get("pid") != pid or live.get("cwd") != cwd:
        return None
    session = live.get("sessionId")
    if isinstance(session, str) and len(session) == 36 and all(c in "0123456789abcdef-" for c in session):
        return session
    return None


class _FileState:
    __slots__ = ("ident", "offset", "calls", "model")

    def __init__(self, ident) -> None:
        self.ident = ident
        self.offset = 0
        self.calls: dict[tuple, tuple[str, dict]] = {}
        self.model = "unknown"  # codex: the model of the latest turn_context line


class TranscriptReader:
    """claude's transcripts and codex's rollout files, read incrementally: per file its
    identity (device, inode), the byte offset of the last complete line parsed, and each
    call's usage by its key (claude: ``(message.id, requestId)``; codex: ``response_id``).
    A file replaced or cut short is read again from 0."""

    CHUNK = 1 << 20

    def __init__(self) -> None:
        self.files: dict[str, _FileState] = {}

    def read(self, path: str, codex: bool = False) -> dict[tuple, tuple[str, dict]]:
        try:
            info = os.stat(path)
        except OSError:
            return {}
        ident = (info.st_dev, info.st_ino)
        state = self.files.get(path)
        if state is None or state.ident != ident or info.st_size < state.offset:
            state = self.files[path] = _FileState(ident)
        if info.st_size == state.offset:
            return state.calls
        with open(path, "rb") as handle:
            handle.seek(state.offset)
            rest = b""
            while True:
                chunk = handle.read(self.CHUNK)
                if not chunk:
                    break
                data = rest + chunk
                cut = data.rfind(b"\n") + 1
                rest = data[cut:]
                if codex:
                    self._parse_codex(data[:cut], state)
                else:
                    self._parse(data[:cut], state.calls)
                state.offset += cut
        return state.calls

    @staticmethod
    def _parse_codex(data: bytes, state: _FileState) -> None:
        for line in data.split(b"\n"):
            is_usage = b'"token_usage_record"' in line
            if not is_usage and b'"turn_context"' not in line:
                continue
            try:
                record = json.loads(line)
            except ValueError:
                continue
            payload = record.get("payload") if isinstance(record, dict) else None
            if not isinstance(payload, dict):
                continue
            if record.get("type") == "turn_context":
                if isinstance(payload.get("model"), str):
                    state.model = payload["model"]
                continue
            usage = payload.get("usage")
            if record.get("type") != "token_usage_record" or not isinstance(usage, dict):
                continue
            cached = _count(usage.get("cached_input_tokens"))
            written = _count(usage.get("cache_write_input_tokens"))
            state.calls[("codex", payload.get("response_id"))] = (
                state.model,
                {
                    "input": max(
                        _count(usage.get("input_tokens")) - cached - written, 0
                    ),  # codex's input includes cached
                    "cache_write": written,
                    "cache_read": cached,
                    "output": _count(usage.get("output_tokens")),  # reasoning included
                },
            )

    @staticmethod
    def _parse(data: bytes, calls: dict) -> None:
        for line in data.split(b"\n"):
            if b'"usage"' not in line or b'"assistant"' not in line:
                continue  # most lines: user turns, tool results, metadata
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if not isinstance(record, dict) or record.get("type") != "assistant":
                continue
            message = record.get("message")
            if not isinstance(message, dict) or not isinstance(message.get("usage"), dict):
                continue
            usage = message["usage"]
            key = (message.get("id"), record.get("requestId"))
            calls[key] = (
                str(message.get("model") or "unknown"),
                {
                    "input": _count(usage.get("input_tokens")),
                    "cache_write": _count(usage.get("cache_creation_input_tokens")),
                    "cache_read": _count(usage.get("cache_read_input_tokens")),
                    "output": _count(usage.get("output_tokens")),
                },
            )


def claude_usage(
    config_dir: str, session_ids: Iterable[str], reader: TranscriptReader | None = None
) -> tuple[Usage, list[str]]:
    """The usage in the transcripts of ``session_ids``, and the files read."""
    reader = reader or TranscriptReader()
    total = Usage()
    paths = []
    seen: set[tuple] = set()
    for session_id in session_ids:
        for path in claude_transcripts(config_dir, session_id):
            paths.append(path)
            for key, (model, tokens) in reader.read(path).items():
                if key not in seen:
                    seen.add(key)
                    if model != "<synthetic>":  # claude's own placeholder lines, no API call
                        total.add(model, tokens)
    return total, paths


# -- codex ------------------------------------------------------------------------------


def codex_rollouts(codex_home: str, *, started_at: str, fleet_id: int, member_id: int) -> list[str]:
    """The member's rollout files: ``<codex home>/sessions/YYYY/MM/DD/rollout-*.jsonl`` of
    the spawn day or later, written since the spawn, whose first MiB holds the member's
    identity lines (codex writes the spawn prompt as the thread's first user message)."""
    marker = f"- fleet id: {int(fleet_id)}\\n- your member id: {int(member_id)}\\n".encode()
    since = _millis(started_at) / 1000 - 1
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
    total = Usage()
    seen: set[tuple] = set()
    paths = codex_rollouts(codex_home, started_at=started_at, fleet_id=fleet_id, member_id=member_id)
    for path in paths:
        for key, (model, tokens) in reader.read(path, codex=True).items():
            if key not in seen:
                seen.add(key)
                total.add(model, tokens)
    return total, paths


# -- opencode ---------------------------------------------------------------------------


def _millis(stamp: str) -> int:
    """A stored ``YYYY-MM-DDTHH:MM:SS.ffffff+00:00`` time as milliseconds since the epoch."""
    import calendar
    import time

    seconds = calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S"))
    fraction = stamp[20:26] if len(stamp) > 20 and stamp[19] == "." else "0"
    return seconds * 1000 + int(fraction.ljust(6, "0")[:3])


def opencode_usage(
    data_folder: str, *, cwd: str, started_at: str, fleet_id: int, member_id: int
) -> tuple[Usage, list[str]]:
    """The member's usage in ``<data folder>/opencode.db``, opened read-only.

    Its sessions: the root sessions of agent ``cafleet`` in ``cwd`` created at or after
    ``started_at`` whose first prompt carries the member's identity lines (the spawn
    prompt names its fleet and member id, so two members in one directory never mix),
    and all their descendants (subagents; a parent's totals leave its children out).
    Dollars are opencode's own (``cost``); calls are its ``step-finish`` parts.
    """
    import sqlite3
    from urllib.parse import quote

    path = os.path.join(data_folder, "opencode.db")
    total = Usage()
    if not os.path.isfile(path):
        return total, []
    # the identity lines of cafleet.agents.prompt.render_spawn_prompt, as stored in a JSON string
    marker = f"%- fleet id: {int(fleet_id)}\\n- your member id: {int(member_id)}\\n%"
    try:
        conn = sqlite3.connect(f"file:{quote(path)}?mode=ro", uri=True, timeout=5.0)
    except sqlite3.Error:
        return total, [path]
    try:
        rows = conn.execute(
            "WITH RECURSIVE mine(id) AS ("
            "  SELECT s.id FROM session s WHERE s.directory = ? AND s.agent = 'cafleet' AND s.parent_id IS NULL"
            "  AND s.time_created >= ? AND EXISTS (SELECT 1 FROM part p WHERE p.session_id = s.id AND p.data LIKE ?)"
            "  UNION SELECT c.id FROM session c JOIN mine ON c.parent_id = mine.id) "
            "SELECT s.model, s.cost, s.tokens_input, s.tokens_cache_write, s.tokens_cache_read, "
            "s.tokens_output + s.tokens_reasoning, "
            "(SELECT count(*) FROM part p WHERE p.session_id = s.id AND json_extract(p.data, '$.type') = 'step-finish') "
            "FROM session s JOIN mine ON s.id = mine.id",
            (cwd, _millis(started_at), marker),
        ).fetchall()
    except sqlite3.Error:
        rows = []  # an opencode whose tables differ from 1.18's: nothing counted (docs/usage.md)
    finally:
        conn.close()
    for model, cost, tokens_in, write, read, out, calls in rows:
        try:
            name = json.loads(model).get("id") if model else None
        except (ValueError, AttributeError):
            name = None
        if not calls and not (tokens_in or out):
            continue
        total.add(
            str(name or "unknown"),
            {
                "input": _count(tokens_in),
                "cache_write": _count(write),
                "cache_read": _count(read),
                "output": _count(out),
            },
            usd=cost if isinstance(cost, (int, float)) else None,
            calls=int(calls or 0),
        )
    return total, [path]
