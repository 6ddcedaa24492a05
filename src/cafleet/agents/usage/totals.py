"""What every usage reader shares (docs/usage.md): the bounds a record is read within, the
price table, :class:`Usage` (tokens by model and kind) and :class:`TranscriptReader` (the
incremental read of claude's transcripts and codex's rollout files, each parsed by its
agent's module: :mod:`cafleet.agents.usage.claude`, :mod:`cafleet.agents.usage.codex`).

Every number read is bounded where it is read (:func:`read_count`, :func:`read_name`,
:func:`read_dollars`); a record that breaks a bound raises :class:`Unreadable`, and the
reader skips it and counts it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping

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


class Unreadable(Exception):
    """A record that breaks a bound: skipped and counted."""


def read_count(value) -> int:
    """A token count as written (absent: 0); anything but a whole number from 0 to
    MAX_COUNT makes the record unreadable."""
    if value is None:
        return 0
    if type(value) is not int or not 0 <= value <= MAX_COUNT:
        raise Unreadable
    return value


def read_name(value, absent: object = None):
    """A model name or call id: text of at most MAX_NAME characters (absent: ``absent``)."""
    if value is None:
        return absent
    if type(value) is not str or len(value) > MAX_NAME:
        raise Unreadable
    return value


def read_dollars(value) -> float | None:
    """Dollars an agent recorded (absent: None): finite, from 0 to MAX_RECORDED_USD."""
    if value is None:
        return None
    if type(value) not in (int, float) or not 0 <= value <= MAX_RECORDED_USD:  # NaN fails too
        raise Unreadable
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
    def load(cls, data) -> Usage:
        """The usage :meth:`dump` gave; anything else is an empty usage (read again)."""
        found = cls()
        try:
            for model, row in data["models"].items():
                found.add(str(model), {kind: read_count(row[kind]) for kind in KINDS}, calls=read_count(row["calls"]))
                recorded = row.get("recorded_usd")
                if recorded is not None:
                    found.models[str(model)]["recorded_usd"] = float(read_dollars(recorded) or 0.0)
            found.unreadable = read_count(data["unreadable"])
        except (KeyError, TypeError, AttributeError, ValueError, Unreadable):
            return cls()
        return found

    def merge(self, other: Usage) -> None:
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


def millis(stamp: str) -> int:
    """A stored ``YYYY-MM-DDTHH:MM:SS.ffffff+00:00`` time as milliseconds since the epoch."""
    import calendar
    import time

    seconds = calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S"))
    fraction = stamp[20:26] if len(stamp) > 20 and stamp[19] == "." else "0"
    return seconds * 1000 + int(fraction.ljust(6, "0")[:3])


WINDOW = 64
"""Calls of one file kept by their key, so that a later line of the same call replaces its
usage (claude writes one line per content block, together); older calls are folded into
the file's totals by model and their keys forgotten, which keeps a stored read state small."""


class FileState:
    """What a :class:`TranscriptReader` knows of one file: where its last read stopped, the
    calls counted from it, and what an agent's ``parse`` adds to with :meth:`keep`."""

    __slots__ = ("calls", "closed", "ident", "model", "offset", "size", "skipping", "unreadable")

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
    def load(cls, data: dict) -> FileState:
        state = cls((int(data["dev"]), int(data["ino"])))
        state.offset = read_count(data["offset"])
        state.size = read_count(data["size"])
        state.model = read_name(data["model"], "unknown")
        state.unreadable = read_count(data["unreadable"])
        state.skipping = data["skipping"] is True
        for model, row in data["closed"].items():
            state.closed[read_name(model)] = {
                **{kind: read_count(row[kind]) for kind in KINDS},
                "calls": read_count(row["calls"]),
            }
        for key, model, tokens in data["calls"]:
            state.calls[tuple(read_name(part) for part in key)] = (
                read_name(model, "unknown"),
                {kind: read_count(tokens[kind]) for kind in KINDS},
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
        self.files: dict[str, FileState] = {}
        self.allowance = allowance
        self.bytes_read = 0
        self.cut_short = False  # the allowance stopped a read before the end of a file

    def dump(self) -> dict:
        """Plain data (JSON) for :meth:`load`: every file's read state."""
        return {path: state.dump() for path, state in sorted(self.files.items()) if state.ident is not None}

    @classmethod
    def load(cls, data, allowance: int | None = None) -> TranscriptReader:
        """A reader that goes on where the one that gave ``data`` stopped; a state that is
        not what :meth:`dump` gives is dropped (that file is read again from 0)."""
        reader = cls(allowance)
        if isinstance(data, dict):
            for path, item in data.items():
                try:
                    reader.files[str(path)] = FileState.load(item)
                except (KeyError, TypeError, AttributeError, ValueError, Unreadable):
                    continue
        return reader

    def read(self, path: str, parse: Callable[[bytes, FileState], None]) -> FileState:
        """Parse what was appended to ``path`` since the last read, with the agent's
        ``parse`` (:func:`cafleet.agents.usage.claude.parse_lines`,
        :func:`cafleet.agents.usage.codex.parse_lines`): complete lines only."""
        state = self.files.get(path)
        try:
            info = os.stat(path)
        except OSError:
            return state or FileState(None)
        ident = (info.st_dev, info.st_ino)
        if state is None or state.ident != ident or info.st_size < state.offset:
            state = self.files[path] = FileState(ident)
        if info.st_size in (state.offset, state.size):
            return state  # nothing appended (a half-written last line is read again once it grows)
        try:
            handle = open(path, "rb")  # noqa: SIM115 - only the open's OSError is caught; the with below closes it
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

    def summed(self, paths: list[str], skip_model: str | None = None) -> Usage:
        """The usage of the files ``paths`` and of every other file this reader counted
        (one member's reader: a file that vanished keeps its spend), a kept call once."""
        total = Usage()
        seen: set[tuple] = set()
        for path in [*paths, *sorted(set(self.files) - set(paths))]:
            state = self.files.get(path)
            if state is not None:
                state.sum_into(total, seen, skip_model)
        return total


def complete_lines(handle) -> Iterator[bytes]:
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
