"""Read what each coding agent records about its own model usage (docs/usage.md).

A leaf: files and the agents' own databases only, nothing of cafleet's. The command line
loads it only for ``member usage``/``fleet usage``, ``member create`` and a send to a
member with a budget (the stored totals' :class:`Usage`; no file is read there), and the
fleet keeper to read what is new.

* claude: ``<config dir>/projects/*/<session id>.jsonl``, one ``"type":"assistant"`` line
  per content block, each repeating the call's ``message.usage``; a call is counted once
  per ``(message.id, requestId)``, its last line winning. No dollars: the price table.
* opencode: ``<data dir>/opencode.db`` read-only, table ``session`` (see :func:`opencode_usage`).
* codex: ``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-*.jsonl`` whose first user message
  carries the member's identity lines; a ``token_usage_record`` line per response,
  counted once per ``response_id``. No dollars: the price table.

A :class:`Usage` adds calls up by model; :class:`TranscriptReader` keeps a byte offset per
file, so reading again only parses what was appended. Both dump to plain data (JSON) and
load from it: the fleet keeper stores them per member (:mod:`cafleet.delivery.usage`), so
each read of the agent's records, by whichever process, starts where the last one stopped.

Every number read is bounded where it is read: a token count is a whole number from 0 to
:data:`MAX_COUNT`, recorded dollars are finite and from 0 to :data:`MAX_RECORDED_USD`, a
model name or call id is text of at most :data:`MAX_NAME` characters. A record that breaks
a bound (or is not JSON) is *unreadable*: skipped and counted (``Usage.unreadable``), never
an error, so one hostile line cannot stop a usage read, a budget check or ``fleet watch``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping

KINDS = ("input", "cache_write", "cache_read", "output")
"""Token kinds: input not read from or written to the prompt cache, written to the
cache, read from the cache, output (reasoning included)."""

MAX_COUNT = 2**53 - 1
"""The largest token count one record may hold (the largest integer every JSON reader keeps
exact; no model call comes near it). A larger, negative or fractional count makes its
record unreadable."""
MAX_RECORDED_USD = 1e9
"""The most dollars one record of an agent's own (an opencode session) may hold."""
MAX_NAME = 200
"""The longest model name or call id a record may hold."""
MAX_LINE = 32 << 20
"""A transcript line longer than this is skipped unread (no usage line comes near it)."""
MAX_PRICE = 1_000_000.0
"""The highest price a price file may give, in dollars per million tokens."""
MAX_PRICE_FILE_BYTES = 1 << 20
PRICE_FILE_EXAMPLE = '{"models": {"claude-sonnet-4": {"input": 3.0, "output": 15.0}}}'


class _Unreadable(Exception):
    """A record that breaks a bound: skipped and counted."""


def _count(value) -> int:
    """A token count as written (absent: 0); anything but a whole number from 0 to
    MAX_COUNT makes the record unreadable."""
    if value is None:
        return 0
    if type(value) is not int or not 0 <= value <= MAX_COUNT:
        raise _Unreadable
    return value


def _name(value, absent: object = None):
    """A model name or call id: text of at most MAX_NAME characters (absent: ``absent``)."""
    if value is None:
        return absent
    if type(value) is not str or len(value) > MAX_NAME:
        raise _Unreadable
    return value


def _dollars(value) -> float | None:
    """Dollars an agent recorded (absent: None): finite, from 0 to MAX_RECORDED_USD."""
    if value is None:
        return None
    if type(value) not in (int, float) or not 0 <= value <= MAX_RECORDED_USD:  # NaN fails too
        raise _Unreadable
    return float(value)


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
    million tokens from 0 to MAX_PRICE; a kind left out costs 0). A file that cannot be
    read, is larger than MAX_PRICE_FILE_BYTES, is not that shape, names another kind or
    gives a price out of range (NaN, infinite, negative, text) is a usage error."""
    table = dict(PRICES)
    path = environ.get("CAFLEET_PRICE_FILE")
    if not path:
        return table
    from cafleet.errors import UsageError, shown

    where = f"the price file CAFLEET_PRICE_FILE={path}"
    shape = f"it must be JSON like {PRICE_FILE_EXAMPLE}"
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_PRICE_FILE_BYTES + 1)
    except OSError as error:
        raise UsageError(f"cannot read {where} ({error.strerror or error}); {shape}") from None
    if len(data) > MAX_PRICE_FILE_BYTES:
        raise UsageError(f"{where} is larger than {MAX_PRICE_FILE_BYTES} bytes; {shape}")
    try:
        loaded = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise UsageError(f"{where} is not JSON; {shape}") from None
    models = loaded.get("models") if isinstance(loaded, dict) else None
    if not isinstance(models, dict):
        raise UsageError(f'{where} has no "models" object; {shape}')
    for prefix, prices in models.items():
        if not isinstance(prices, dict):
            raise UsageError(f"{where} gives model {shown(prefix)} no object of prices by kind; {shape}")
        for kind, price in prices.items():
            if kind not in KINDS:
                raise UsageError(
                    f"{where} gives model {shown(prefix)} a price of unknown kind {shown(kind)}; "
                    f"the kinds are {', '.join(KINDS)}"
                )
            if type(price) not in (int, float) or not 0 <= price <= MAX_PRICE:  # NaN fails the comparison
                raise UsageError(
                    f"{where} gives model {shown(prefix)} the {kind} price {shown(json.dumps(price))}; "
                    f"a price is dollars per million tokens, a number from 0 to {int(MAX_PRICE)}"
                )
        table[prefix] = {kind: float(prices.get(kind, 0.0)) for kind in KINDS}
    return table


def price_for(model: str, table: Mapping[str, Mapping[str, float]]) -> Mapping[str, float] | None:
    best = None
    for prefix in table:
        if model.startswith(prefix) and (best is None or len(prefix) > len(best)):
            best = prefix
    return table[best] if best is not None else None


class Usage:
    """Tokens by model and kind, dollars recorded by the agent, the calls counted, and the
    records skipped as unreadable."""

    __slots__ = ("models", "unreadable")

    def __init__(self) -> None:
        self.models: dict[str, dict] = {}
        self.unreadable = 0

    def add(self, model: str, tokens: Mapping[str, int], *, usd: float | None = None, calls: int = 1) -> None:
        row = self.models.setdefault(
            model or "unknown", {**{kind: 0 for kind in KINDS}, "calls": 0, "recorded_usd": None}
        )
        for kind in KINDS:
            row[kind] += int(tokens.get(kind) or 0)
        row["calls"] += calls
        if usd is not None:
            row["recorded_usd"] = (row["recorded_usd"] or 0.0) + float(usd)

    def dump(self) -> dict:
        """Plain data for :meth:`load` (JSON)."""
        return {"models": self.models, "unreadable": self.unreadable}

    @classmethod
    def load(cls, data) -> "Usage":
        """The usage :meth:`dump` gave; anything else is an empty usage (read again)."""
        found = cls()
        try:
            for model, row in data["models"].items():
                found.add(str(model), {kind: _count(row[kind]) for kind in KINDS}, calls=_count(row["calls"]))
                recorded = row.get("recorded_usd")
                if recorded is not None:
                    found.models[str(model)]["recorded_usd"] = float(_dollars(recorded) or 0.0)
            found.unreadable = _count(data["unreadable"])
        except (KeyError, TypeError, AttributeError, ValueError, _Unreadable):
            return cls()
        return found

    def merge(self, other: "Usage") -> None:
        for model, row in other.models.items():
            self.add(model, row, usd=row["recorded_usd"], calls=row["calls"])
        self.unreadable += other.unreadable

    def report(self, prices: Mapping[str, Mapping[str, float]]) -> dict:
        """``{"calls", "tokens": {kind: n, "total": n}, "usd", "unpriced": [models],
        "unreadable_records", "models": {model: {kinds..., "calls", "usd", "usd_source"}}}``. A model's dollars
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
        return {
            "calls": calls,
            "tokens": totals,
            "usd": round(usd, 6),
            "unpriced": unpriced,
            "unreadable_records": self.unreadable,
            "models": models,
        }


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
    for arg, following in zip(args, args[1:]):
        if arg == b"--":
            return False
        if (arg == b"--session-id" and following == want) or arg == b"--session-id=" + want:
            return True
    return False


def _is_session_id(value) -> bool:
    return type(value) is str and len(value) == 36 and all(c in "0123456789abcdef-" for c in value)


def claude_live_session(config_dir: str, pid: int, cwd: str, *, spawn_session: str) -> str | None:
    """The session the claude process ``pid`` says it is in now (``<config dir>/sessions/<pid>.json``,
    which ``/clear`` rewrites with the new session's id), when ``pid`` is the process
    cafleet started with ``--session-id <spawn_session>`` and the file names that pid and
    ``cwd``; else None. The file is the member's own to write: the session it names is a
    claim, checked against the session's transcript before it counts
    (:func:`claude_previews`, docs/usage.md)."""
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
    return session if _is_session_id(session) else None


PREVIEW_START = "[cafleet msg "


def claude_previews(config_dir: str, session_id: str, limit: int = 32) -> list[tuple[int, int]]:
    """``(message id, sender id)`` of the cafleet previews that begin user turns in the
    session's transcripts (at most ``limit``; ``(0, 0)`` for a header whose numbers do not
    parse). A preview is typed only into its recipient's pane, so the messages these name
    say whose session it is (:mod:`cafleet.delivery.usage` checks them)."""
    if not _is_session_id(session_id):
        return []
    found: list[tuple[int, int]] = []
    marker = PREVIEW_START.encode()
    for path in claude_transcripts(config_dir, session_id):
        try:
            handle = open(path, "rb")
        except OSError:
            continue
        with handle:
            for line in _lines(handle):
                if marker not in line:
                    continue
                try:
                    record = json.loads(line)
                except (ValueError, RecursionError):
                    continue
                text = _user_text(record)
                if text is not None and text.startswith(PREVIEW_START):
                    found.append(_preview_header(text))
                    if len(found) >= limit:
                        return found
    return found


def _user_text(record) -> str | None:
    """The text a user turn begins with (typed into the input box), or None for any other
    line (tool results included)."""
    if not isinstance(record, dict) or record.get("type") != "user":
        return None
    message = record.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return content
    if isinstance(content, list) and content and isinstance(content[0], dict) and content[0].get("type") == "text":
        text = content[0].get("text")
        return text if isinstance(text, str) else None
    return None


def _preview_header(text: str) -> tuple[int, int]:
    """``(message id, sender id)`` from ``[cafleet msg <id> from <sender> ...``."""
    message, _, rest = text[len(PREVIEW_START) :].partition(" from ")
    sender = rest.partition(" ")[0]
    if 0 < len(message) <= 19 and 0 < len(sender) <= 19 and (message + sender).isascii():
        if message.isdigit() and sender.isdigit():
            return int(message), int(sender)
    return 0, 0


def _lines(handle) -> Iterator[bytes]:
    """The complete lines of a file read in chunks; a line longer than MAX_LINE is
    skipped unread."""
    pending: list[bytes] = []
    size = 0
    skipping = False
    while True:
        chunk = handle.read(TranscriptReader.CHUNK)
        if not chunk:
            return
        if skipping:
            start = chunk.find(b"\n") + 1
            if not start:
                continue
            chunk, skipping = chunk[start:], False
        cut = chunk.rfind(b"\n") + 1
        if not cut:
            pending.append(chunk)
            size += len(chunk)
            if size > MAX_LINE:
                pending, size, skipping = [], 0, True
            continue
        yield from (b"".join(pending) + chunk[:cut]).split(b"\n")[:-1]
        pending, size = [chunk[cut:]], len(chunk) - cut


WINDOW = 64
"""Calls of one file kept by their key, so that a later line of the same call replaces its
usage (claude writes one line per content block, together); older calls are folded into
the file's totals by model and their keys forgotten, which keeps a stored read state small."""


class _FileState:
    __slots__ = ("ident", "offset", "size", "calls", "closed", "model", "unreadable", "skipping")

    def __init__(self, ident) -> None:
        self.ident = ident
        self.offset = 0
        self.size = 0  # the file's size at the last read (past the offset: a half-written last line)
        self.calls: dict[tuple, tuple[str, dict]] = {}  # the last WINDOW calls, oldest first
        self.closed: dict[str, dict] = {}  # model -> tokens by kind and "calls", of calls folded
        self.model = "unknown"  # codex: the model of the latest turn_context line
        self.unreadable = 0  # records skipped for a broken bound
        self.skipping = False  # inside a line longer than MAX_LINE

    def keep(self, key: tuple, call: tuple[str, dict]) -> None:
        """Count ``call`` under ``key`` (a later line of the same call replaces it)."""
        self.calls.pop(key, None)
        self.calls[key] = call
        if len(self.calls) > WINDOW:
            model, tokens = self.calls.pop(next(iter(self.calls)))
            row = self.closed.setdefault(model, {**{kind: 0 for kind in KINDS}, "calls": 0})
            for kind in KINDS:
                row[kind] += tokens[kind]
            row["calls"] += 1

    def dump(self) -> dict:
        return {
            "dev": self.ident[0],
            "ino": self.ident[1],
            "offset": self.offset,
            "size": self.size,
            "model": self.model,
            "unreadable": self.unreadable,
            "skipping": self.skipping,
            "closed": self.closed,
            "calls": [[list(key), model, tokens] for key, (model, tokens) in self.calls.items()],
        }

    @classmethod
    def load(cls, data: dict) -> "_FileState":
        state = cls((int(data["dev"]), int(data["ino"])))
        state.offset = _count(data["offset"])
        state.size = _count(data["size"])
        state.model = _name(data["model"], "unknown")
        state.unreadable = _count(data["unreadable"])
        state.skipping = data["skipping"] is True
        for model, row in data["closed"].items():
            state.closed[_name(model)] = {
                **{kind: _count(row[kind]) for kind in KINDS},
                "calls": _count(row["calls"]),
            }
        for key, model, tokens in data["calls"]:
            state.calls[tuple(_name(part) for part in key)] = (
                _name(model, "unknown"),
                {kind: _count(tokens[kind]) for kind in KINDS},
            )
        return state

    def sum_into(self, total: Usage, seen: set[tuple], skip_model: str | None = None) -> None:
        """Add this file's calls to ``total``: folded ones, and kept ones not in ``seen``."""
        total.unreadable += self.unreadable
        for model, row in self.closed.items():
            if model != skip_model:
                total.add(model, row, calls=row["calls"])
        for key, (model, tokens) in self.calls.items():
            if key not in seen:
                seen.add(key)
                if model != skip_model:
                    total.add(model, tokens)


class TranscriptReader:
    """claude's transcripts and codex's rollout files, read incrementally: per file its
    identity (device, inode), the byte offset of the last complete line parsed, the usage
    of the last :data:`WINDOW` calls by their key (claude: ``(message.id, requestId)``;
    codex: ``response_id``), older calls' totals by model, and the count of unreadable
    records. A file replaced or cut short is read again from 0; a half-written last line is
    left for the next read; a line longer than MAX_LINE is skipped unread. A file that
    vanished or cannot be read keeps what was counted from it (spend stays spent).

    ``allowance``: the most bytes one use may read (None: no bound); a read that reaches
    it stops after its last complete line, and the next one goes on from there.
    ``bytes_read`` counts the bytes read from the files."""

    CHUNK = 1 << 20

    def __init__(self, allowance: int | None = None) -> None:
        self.files: dict[str, _FileState] = {}
        self.allowance = allowance
        self.bytes_read = 0
        self.cut_short = False  # the allowance stopped a read before the end of a file

    def dump(self) -> dict:
        """Plain data (JSON) for :meth:`load`: every file's read state."""
        return {path: state.dump() for path, state in sorted(self.files.items()) if state.ident is not None}

    @classmethod
    def load(cls, data, allowance: int | None = None) -> "TranscriptReader":
        """A reader that goes on where the one that gave ``data`` stopped; a state that is
        not what :meth:`dump` gives is dropped (that file is read again from 0)."""
        reader = cls(allowance)
        if isinstance(data, dict):
            for path, item in data.items():
                try:
                    reader.files[str(path)] = _FileState.load(item)
                except (KeyError, TypeError, AttributeError, ValueError, _Unreadable):
                    continue
        return reader

    def read(self, path: str, codex: bool = False) -> _FileState:
        state = self.files.get(path)
        try:
            info = os.stat(path)
        except OSError:
            return state or _FileState(None)
        ident = (info.st_dev, info.st_ino)
        if state is None or state.ident != ident or info.st_size < state.offset:
            state = self.files[path] = _FileState(ident)
        if info.st_size in (state.offset, state.size):
            return state  # nothing appended (a half-written last line is read again once it grows)
        parse = self._parse_codex if codex else self._parse
        try:
            handle = open(path, "rb")
        except OSError:
            return state
        with handle:
            handle.seek(state.offset)
            pending: list[bytes] = []
            size = 0
            while True:
                want = self.CHUNK
                if self.allowance is not None:
                    want = min(want, self.allowance - self.bytes_read)
                    if want <= 0:
                        self.cut_short = True
                        break
                chunk = handle.read(want)
                if not chunk:
                    state.size = handle.tell()  # read to its end: unchanged until it grows
                    break
                self.bytes_read += len(chunk)
                if state.skipping:  # the rest of an over-long line
                    start = chunk.find(b"\n") + 1
                    state.offset += start or len(chunk)
                    if not start:
                        continue
                    chunk, state.skipping = chunk[start:], False
                cut = chunk.rfind(b"\n") + 1
                if not cut:
                    pending.append(chunk)
                    size += len(chunk)
                    if size > MAX_LINE:
                        state.offset += size
                        pending, size, state.skipping = [], 0, True
                    continue
                data = b"".join(pending) + chunk[:cut]
                parse(data, state)
                state.offset += len(data)
                pending, size = [chunk[cut:]], len(chunk) - cut
        return state

    @staticmethod
    def _parse_codex(data: bytes, state: _FileState) -> None:
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
                    state.model = _name(payload.get("model"), state.model)
                    continue
                usage = payload.get("usage")
                if not isinstance(usage, dict):
                    raise _Unreadable
                key = ("codex", _name(payload.get("response_id")))
                cached = _count(usage.get("cached_input_tokens"))
                written = _count(usage.get("cache_write_input_tokens"))
                tokens = {
                    "input": max(
                        _count(usage.get("input_tokens")) - cached - written, 0
                    ),  # codex's input includes cached
                    "cache_write": written,
                    "cache_read": cached,
                    "output": _count(usage.get("output_tokens")),  # reasoning included
                }
            except _Unreadable:
                state.unreadable += 1
                continue
            state.keep(key, (state.model, tokens))

    @staticmethod
    def _parse(data: bytes, state: _FileState) -> None:
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
                    raise _Unreadable
                key = (_name(message.get("id")), _name(record.get("requestId")))
                call = (
                    _name(message.get("model"), "unknown"),
                    {
                        "input": _count(usage.get("input_tokens")),
                        "cache_write": _count(usage.get("cache_creation_input_tokens")),
                        "cache_read": _count(usage.get("cache_read_input_tokens")),
                        "output": _count(usage.get("output_tokens")),
                    },
                )
            except _Unreadable:
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
            reader.read(path)
    return _summed(reader, paths, "<synthetic>"), paths  # claude's own placeholder lines, no API call


def _summed(reader: TranscriptReader, paths: list[str], skip_model: str | None = None) -> Usage:
    """The usage of the files ``paths`` and of every other file the reader counted before
    (one member's reader: a file that vanished keeps its spend), a kept call once."""
    total = Usage()
    seen: set[tuple] = set()
    for path in [*paths, *sorted(set(reader.files) - set(paths))]:
        state = reader.files.get(path)
        if state is not None:
            state.sum_into(total, seen, skip_model)
    return total


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
    paths = codex_rollouts(codex_home, started_at=started_at, fleet_id=fleet_id, member_id=member_id)
    for path in paths:
        reader.read(path, codex=True)
    return _summed(reader, paths), paths


# -- opencode ---------------------------------------------------------------------------


def _millis(stamp: str) -> int:
    """A stored ``YYYY-MM-DDTHH:MM:SS.ffffff+00:00`` time as milliseconds since the epoch."""
    import calendar
    import time

    seconds = calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S"))
    fraction = stamp[20:26] if len(stamp) > 20 and stamp[19] == "." else "0"
    return seconds * 1000 + int(fraction.ljust(6, "0")[:3])


_OPENCODE_SESSIONS = (
    "WITH RECURSIVE mine(id) AS ("
    "  SELECT s.id FROM session s WHERE s.directory = ? AND s.agent = 'cafleet' AND s.parent_id IS NULL"
    "  AND s.time_created >= ? AND EXISTS (SELECT 1 FROM part p WHERE p.session_id = s.id AND p.data LIKE ?)"
    "  UNION SELECT c.id FROM session c JOIN mine ON c.parent_id = mine.id) "
)


def _opencode_identity(fleet_id: int, member_id: int) -> str:
    """The identity lines of cafleet.agents.prompt.render_spawn_prompt, as a LIKE pattern
    for the JSON string that stores the spawn prompt."""
    return f"%- fleet id: {int(fleet_id)}\\n- your member id: {int(member_id)}\\n%"


def opencode_user_text_starts(
    data_folder: str, *, cwd: str, started_at: str, fleet_id: int, member_id: int, start: str
) -> bool:
    """Whether the member's opencode sessions (as :func:`opencode_usage` finds them) hold a
    user message whose text begins with ``start``: opencode records a submitted line as
    soon as it takes it, so a preview's header found there was delivered, whatever the
    screen shows (opencode draws in place: no history to search). False when the file or
    its tables cannot be read."""
    import sqlite3
    from urllib.parse import quote

    path = os.path.join(data_folder, "opencode.db")
    if not start or not os.path.isfile(path):
        return False
    try:
        conn = sqlite3.connect(f"file:{quote(path)}?mode=ro", uri=True, timeout=5.0)
    except sqlite3.Error:
        return False
    try:
        row = conn.execute(
            _OPENCODE_SESSIONS + "SELECT 1 FROM part p JOIN mine ON p.session_id = mine.id "
            "JOIN message m ON m.id = p.message_id WHERE json_extract(m.data, '$.role') = 'user' "
            "AND json_extract(p.data, '$.type') = 'text' AND substr(json_extract(p.data, '$.text'), 1, ?) = ? LIMIT 1",
            (cwd, _millis(started_at), _opencode_identity(fleet_id, member_id), len(start), start),
        ).fetchone()
    except sqlite3.Error:
        return False  # an opencode whose tables differ from 1.18's
    finally:
        conn.close()
    return row is not None


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
    marker = _opencode_identity(fleet_id, member_id)
    try:
        conn = sqlite3.connect(f"file:{quote(path)}?mode=ro", uri=True, timeout=5.0)
    except sqlite3.Error:
        return total, [path]
    try:
        rows = conn.execute(
            _OPENCODE_SESSIONS + "SELECT s.model, s.cost, s.tokens_input, s.tokens_cache_write, s.tokens_cache_read, "
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
        except (ValueError, TypeError, AttributeError, RecursionError):
            name = None
        if not calls and not (tokens_in or out):
            continue
        try:
            tokens = {
                "input": _count(tokens_in),
                "cache_write": _count(write),
                "cache_read": _count(read),
                "output": _count(out),
            }
            usd = _dollars(cost)
        except _Unreadable:
            total.unreadable += 1
            continue
        model_name = name if type(name) is str and 0 < len(name) <= MAX_NAME else "unknown"
        total.add(model_name, tokens, usd=usd, calls=int(calls or 0))
    return total, [path]
