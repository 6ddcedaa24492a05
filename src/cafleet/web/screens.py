"""Member screens for the WebUI: bounded captures, shared by every browser that watches.

``GET /api/fleets/{id}/screens?members=1,2&lines=40`` answers the screens of the listed
members of one fleet. The costs are bounded on three sides:

- **one capture per member per interval**, however many pages watch, and **one
  multiplexer call per server** for all the members a request names (tmux's
  ``inspect_many``: one SSH call per host for members on other hosts): the
  :class:`ScreenCache` keeps each member's last capture for ``interval`` seconds and
  lets concurrent requests for the same member wait for one capture instead of making
  their own;
- **lines and bytes**: every capture is ``MAX_LINES`` lines at most and each screen sent
  is cut to its last ``MAX_SCREEN_BYTES`` bytes (at a line boundary); a request names at
  most ``MAX_MEMBERS`` members;
- **rate per client**: each client address gets ``RATE`` requests per second (a burst of
  ``BURST``); beyond that it is answered 429, saying when to retry.

A pane is reached only through :func:`cafleet.delivery.spawning.panes.reach`, which checks the
placement's recorded identity in the same call: a pane whose id now names another pane
is reported ``stale`` and never captured. The text keeps only the colour and style
sequences (SGR) of the pane; every other escape or control sequence (cursor movement,
OSC 52 clipboard writes, title changes, hyperlinks) is removed here, and the page draws
what is left with ``textContent`` only.
"""

from __future__ import annotations

import math
import re
import threading
import time

from starlette.requests import Request
from starlette.responses import JSONResponse

from cafleet.broker import members as broker_members
from cafleet.errors import CafleetError, Conflict, DamagedPlacement, PaneGone, PaneStale, clause

TYPE_CHECKING = False  # true for the type checker only
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

INTERVAL = 1.0  # seconds a capture is reused: at most one multiplexer call per member per second
MAX_LINES = 120  # lines captured per member (a request asks for at most this many)
DEFAULT_LINES = 40
MAX_SCREEN_BYTES = 32 * 1024  # bytes of one screen in an answer (UTF-8, escapes included)
MAX_MEMBERS = 64  # members in one request
RATE = 8.0  # requests per second per client address ...
BURST = 16.0  # ... with this many at once

# CSI: ESC [ parameters intermediates final; OSC/DCS/SOS/PM/APC: up to BEL or ST;
# any other two-byte escape; C0 and C1 controls except newline and tab.
_SEQUENCE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"
    r"|\x1b[\]PX^_][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[ -/]*[0-~]?"
    r"|[\x00-\x08\x0b-\x1a\x1c-\x1f\x7f-\x9f]"
)
_SGR = re.compile(r"\x1b\[[0-9;:]*m\Z")


def clean(text: str) -> str:
    """The screen with only its SGR sequences (colours, bold, ...) and printable text."""
    return _SEQUENCE.sub(lambda match: match.group(0) if _SGR.match(match.group(0)) else "", text)


def bounded(text: str, lines: int, max_bytes: int = MAX_SCREEN_BYTES) -> tuple[str, bool]:
    """The last ``lines`` lines of ``text``, then its last ``max_bytes`` UTF-8 bytes cut at a
    line boundary; and whether anything was cut by the byte bound."""
    rows = text.split("\n")[-lines:]
    out = "\n".join(rows)
    if len(out.encode("utf-8")) <= max_bytes:
        return out, False
    kept, size = [], 0
    for row in reversed(rows):
        size += len(row.encode("utf-8")) + 1
        if size > max_bytes:
            break
        kept.append(row)
    if not kept:  # one line longer than the bound: keep its tail
        tail = rows[-1].encode("utf-8")[-max_bytes:].decode("utf-8", "ignore")
        return clean(tail), True  # a cut through an escape sequence leaves no fragment
    return "\n".join(reversed(kept)), True


class ScreenCache:
    """The last capture of each member, reused for ``interval`` seconds.

    Keyed by member id and the placement's pane and identity, so a member whose pane was
    recorded again is never answered with another pane's screen. ``calls`` counts
    multiplexer calls made, ``captures`` the member screens they captured (for tests and
    the cost measurement): :meth:`get_many` captures every due member of one server in
    one call.
    """

    def __init__(self, interval: float = INTERVAL, capture=None, capture_many=None) -> None:
        self.interval = interval
        self.calls = 0
        self.captures = 0
        self._capture = capture or _capture
        # a single capture given alone is used for each member (tests); else the batched one
        self._capture_many = capture_many or (_capture_many if capture is None else None)
        self._entries: dict[tuple, tuple[float, dict]] = {}
        self._locks: dict[tuple, threading.Lock] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _key(member_id: int, placement: Mapping[str, Any]) -> tuple:
        return (member_id, placement["backend"], placement["session"], placement["pane_id"], placement.get("identity"))

    def get(self, member_id: int, placement: Mapping[str, Any]) -> dict:
        return self.get_many([(member_id, placement)])[0]

    def get_many(self, wanted: Sequence[tuple[int, Mapping[str, Any]]]) -> list[dict]:
        """The screens of ``wanted`` (member id and placement each), in its order: each
        member's last capture while younger than ``interval``, the others captured now, one
        multiplexer call per server. A request for a member whose capture is under way
        waits for it instead of making its own."""
        keys = [self._key(member_id, placement) for member_id, placement in wanted]
        with self._lock:
            locks = {key: self._locks.setdefault(key, threading.Lock()) for key in keys}
        ordered = sorted(locks, key=repr)  # one order for every request: two never wait on each other
        for key in ordered:
            locks[key].acquire()
        try:
            now = time.monotonic()
            due: dict[tuple, Mapping[str, Any]] = {}
            for key, (_member_id, placement) in zip(keys, wanted):
                entry = self._entries.get(key)
                if entry is None or now - entry[0] >= self.interval:
                    due[key] = placement
            if due:
                if self._capture_many is not None:
                    shot, calls = self._capture_many(list(due.values()))
                else:
                    shot, calls = [self._capture(placement) for placement in due.values()], len(due)
                with self._lock:
                    self.calls += calls
                    self.captures += len(due)
                    at = time.monotonic()
                    for key, screen in zip(due, shot):
                        self._entries[key] = (at, screen)
                    self._forget_old()
            return [self._entries[key][1] for key in keys]
        finally:
            for key in reversed(ordered):
                locks[key].release()

    def _forget_old(self) -> None:
        """Drop entries nobody asked for lately (deleted members, panes recorded again)."""
        if len(self._entries) < 256:
            return
        cutoff = time.monotonic() - 60 * self.interval
        for key in [k for k, (at, _) in self._entries.items() if at < cutoff]:
            del self._entries[key]
            self._locks.pop(key, None)


def _capture(placement: Mapping[str, Any]) -> dict:
    """One multiplexer call: the pane's last ``MAX_LINES`` lines with colours, or why not."""
    from cafleet.delivery.spawning.panes import reach

    pane = placement["pane_id"]
    try:
        text = reach(placement).capture(pane, MAX_LINES, ansi=True)
    except CafleetError as error:
        return _failed(pane, error)
    return {"status": "ok", "error": None, "text": clean(text)}


def _failed(pane: str, error: CafleetError) -> dict:
    if isinstance(error, PaneStale):
        return {"status": "stale", "error": clause(error), "text": ""}
    if isinstance(error, DamagedPlacement):
        return {"status": "damaged", "error": clause(error), "text": ""}
    if isinstance(error, PaneGone):
        return {"status": "gone", "error": clause(error), "text": ""}
    return {"status": "error", "error": f"pane {pane} cannot be captured ({clause(error)})", "text": ""}


def _capture_many(placements: list[Mapping[str, Any]]) -> tuple[list[dict], int]:
    """:func:`_capture` of each placement, the panes of one server captured in one
    multiplexer call (``Tmux.inspect_many``, each pane's identity checked in it); a backend
    without that read, or a pane id two placements name with different identities, is
    captured alone. (The screens, the multiplexer calls made.)"""
    from cafleet.delivery.supervision.liveness import MuxPool

    pool = MuxPool()
    shot: list[dict | None] = [None] * len(placements)
    groups: dict[int, tuple[Any, dict[str, tuple], list[tuple[int, str]]]] = {}
    calls = 0
    for index, placement in enumerate(placements):
        pane = placement["pane_id"]
        try:
            mux = pool.get(placement["backend"], placement["session"])
        except CafleetError as error:
            shot[index] = _failed(pane, error)
            continue
        group = groups.setdefault(id(mux), (mux, {}, []))
        expected = (placement.get("identity"), placement.get("created_at"))
        if not hasattr(mux, "inspect_many") or group[1].setdefault(pane, expected) != expected:
            shot[index] = _capture(placement)  # on its own, with a client of its own
            calls += 1
            continue
        try:
            pool.reach(placement)  # its stored values checked, its pane's identity expected
        except CafleetError as error:
            shot[index] = _failed(pane, error)
            continue
        group[2].append((index, pane))
    for mux, _expected, wanted in groups.values():
        if not wanted:
            continue
        before = mux.calls
        found = mux.inspect_many([pane for _index, pane in wanted], MAX_LINES, ansi=True)
        calls += mux.calls - before  # one, and one more after a gone pane or for a batch too long for one
        for index, pane in wanted:
            answer = found[pane]
            if isinstance(answer, CafleetError):
                shot[index] = _failed(pane, answer)
            elif not answer[0]:
                shot[index] = _failed(pane, mux.gone(pane))
            else:
                shot[index] = {"status": "ok", "error": None, "text": clean(answer[3])}
    return [screen or {"status": "error", "error": "not captured", "text": ""} for screen in shot], calls


class RateLimit:
    """A token bucket per client address."""

    def __init__(self, rate: float = RATE, burst: float = BURST) -> None:
        self.rate = rate
        self.burst = burst
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def take(self, client: str) -> float:
        """0 when the request may go ahead, else the seconds to wait."""
        now = time.monotonic()
        with self._lock:
            tokens, at = self._buckets.get(client, (self.burst, now))
            tokens = min(self.burst, tokens + (now - at) * self.rate)
            if tokens < 1.0:
                self._buckets[client] = (tokens, now)
                return (1.0 - tokens) / self.rate
            self._buckets[client] = (tokens - 1.0, now)
            if len(self._buckets) > 1024:  # forget clients whose bucket is full again
                full = [c for c, (t, a) in self._buckets.items() if t + (now - a) * self.rate >= self.burst]
                for stale in full:
                    del self._buckets[stale]
            return 0.0


def _member_list(raw: str | None) -> list[int]:
    from cafleet.web.api import ApiError, parse_id

    if raw is None or not raw.strip():
        raise ApiError(400, "members is required (comma-separated member ids)")
    parts = raw.split(",")
    if len(parts) > MAX_MEMBERS:
        raise ApiError(400, f"at most {MAX_MEMBERS} members per request, got {len(parts)}")
    ids = []
    for part in parts:
        member_id = parse_id(part.strip(), "member id")
        if member_id not in ids:
            ids.append(member_id)
    return ids


def _lines(raw: str | None) -> int:
    from cafleet.web.api import ApiError

    if raw is None:
        return DEFAULT_LINES
    from cafleet.validation import bounded_int

    value = bounded_int(raw, 1, MAX_LINES)
    if value is None:
        raise ApiError(400, f"lines must be an integer from 1 to {MAX_LINES}, got {raw[:20]!r}")
    return value


def fleet_screens(request: Request) -> JSONResponse:
    """``GET /api/fleets/{id}/screens?members=1,2&lines=N`` → ``{"fleet_id", "interval",
    "screens": [{"member_id", "pane_id", "status", "error", "text", "truncated", "captured_at"}]}``.

    ``status``: ``ok``; ``pending`` (no pane yet); ``gone`` (the pane closed); ``stale`` (its
    id names another pane now; nothing was captured); ``damaged`` (a stored value of its
    placement does not match its encoding; nothing was run); ``error`` (the multiplexer failed).
    A member of another fleet or a deregistered one is a 404/409 for the whole request.
    """
    from cafleet.web.api import ApiError, parse_id

    state = request.app.state
    client = request.client.host if request.client else "?"
    wait = state.screen_rate.take(client)
    if wait:
        # Retry-After counts whole seconds, rounded up so that a client honouring it is let in.
        raise ApiError(429, f"too many screen requests; retry in {wait:.1f} s", {"Retry-After": str(math.ceil(wait))})
    fleet_id = parse_id(request.path_params["fleet_id"], "fleet id")
    wanted = _member_list(request.query_params.get("members"))
    lines = _lines(request.query_params.get("lines"))
    with state.pool.borrow() as store:
        records = []
        for member_id in wanted:
            record = broker_members.get_member(store, member_id)
            if record["fleet_id"] != fleet_id:
                raise ApiError(404, f"member {member_id} is not in fleet {fleet_id}")
            if record["status"] != "active":
                raise Conflict(f"member {member_id} is deregistered; it has no pane.")
            records.append(record)
    cache: ScreenCache = state.screens
    placed = [(r["member_id"], r["placement"]) for r in records if r["placement"] and r["placement"]["pane_id"]]
    shot = dict(zip((member_id for member_id, _ in placed), cache.get_many(placed)))
    screens = []
    for record in records:
        placement = record["placement"]
        entry = {"member_id": record["member_id"], "pane_id": placement["pane_id"] if placement else None}
        if placement is None or placement["pane_id"] is None:
            entry.update(status="pending", error="its pane is being created", text="", truncated=False)
        else:
            screen = shot[record["member_id"]]
            text, truncated = bounded(screen["text"], lines, MAX_SCREEN_BYTES)
            entry.update(status=screen["status"], error=screen["error"], text=text, truncated=truncated)
        screens.append(entry)
    return JSONResponse({"fleet_id": fleet_id, "interval": cache.interval, "screens": screens})
