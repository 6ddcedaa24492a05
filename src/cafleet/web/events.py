"""Server-sent events: a fleet's changes pushed to the browser as they happen.

Any process may write the database (a CLI send, an ACK, a drain stamping a preview, a
member being created), so the stream cannot rely on hearing about writes from this
server. Instead the server process keeps **one** change waiter for all its streams
(:class:`SharedChanges`, over :class:`cafleet.store.changes.Changes`: SQLite's ``PRAGMA
data_version`` on a connection of its own, one trivial query; PostgreSQL's notification
queued on its one LISTEN session, no query). Every ``poll_interval`` one stream looks (the
first whose tick finds a look due) and a commit by another connection moves the waiter's
*generation*; a stream whose generation is behind reads its fleet again through the
server's bounded connection pool. So an idle stream holds no database connection at all,
and the database sees the same sessions for one open page as for a hundred. A stream takes
its baseline generation before its first snapshot is read, and a stream moves its
baseline only to the generation it saw before a read that succeeded.

When something changed, the stream diffs a cheap snapshot of the fleet:

- the highest message id seen → ``message`` events for every newer row;
- the unacknowledged messages and whether each was notified → ``ack`` when one left the
  set, ``notified`` when its stamp appeared (completed rows never change again);
- the roster without ``idle_seconds`` (which ticks by itself) → ``roster``; member states
  (alive, idle, silent, blocked, dead: a pane can die without any write) are re-inspected every
  ``STATE_INTERVAL`` seconds as well, one multiplexer call per member.

Each event's data is JSON: a message event carries the timeline record (with
``notified``), a roster event the same ``{"fleet", "members"}`` as ``GET /api/fleets/ID``.
A database error ends the stream with a ``failure`` event (the browser reconnects). A
comment line every ``keepalive_interval`` keeps proxies and the browser from timing out.

At most ``max_streams`` streams are open at once (``CAFLEET_SERVER_MAX_STREAMS``); one
more is answered 503 with ``Retry-After: 2``, the delay after which the page's
EventSource reconnects anyway. At most ``READERS`` streams read at once (half the pool),
so requests always find a connection however many pages are open.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time

import anyio
from starlette.requests import Request
from starlette.responses import StreamingResponse

from cafleet.broker import timeline
from cafleet.errors import CafleetError
from cafleet.store.changes import Changes
from cafleet.web import api

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from cafleet.store.protocol import Store

BATCH = 500
STATE_INTERVAL = 5.0
READERS = 4  # event streams reading their fleet at once: half the connection pool
RETRY_AFTER = 2  # seconds, as the stream's own `retry: 2000`


class SharedChanges:
    """The one change waiter of a server process, shared by every event stream.

    :meth:`check` looks (one ``PRAGMA data_version``, or the notifications queued on the
    LISTEN session) and moves :attr:`generation` when another connection committed; any
    failure of the waiter moves it too (every stream reads again, and meets the error in
    its own read if it lasts) and the waiter is made again at the next look, its new
    baseline moving the generation once more. The waiter is made at the first
    :meth:`baseline`, before that stream's first read.
    """

    def __init__(self, pool, interval: float) -> None:
        self.pool = pool
        self.interval = interval
        self.generation = 0
        self._changes: Changes | None = None
        self._store = None
        self._lock = threading.Lock()
        self._claimed_at = float("-inf")
        self._closed = False

    def baseline(self) -> int:
        """The generation a new stream compares with; listening from now on."""
        with self._lock:
            self._ensure()
            return self.generation

    def claim(self) -> bool:
        """Whether the calling stream should look now (from the event loop only): at most
        one look per ``interval`` for all streams together."""
        now = time.monotonic()
        if now - self._claimed_at < self.interval:
            return False
        self._claimed_at = now
        return True

    def check(self) -> int:
        """Look now; the generation afterwards."""
        with self._lock:
            try:
                self._ensure()
                assert self._changes is not None
                if self._changes.changed():
                    self.generation += 1
            except CafleetError:
                self._drop()
                self.generation += 1
            return self.generation

    def _ensure(self) -> None:
        if self._changes is not None:
            return
        if self._closed:
            raise CafleetError("the server is stopping.")
        store = self.pool.open()
        try:
            changes = Changes(store, self.interval)  # the baseline: before any stream's read that follows
        except BaseException:
            store.close()
            raise
        if changes.waiter.apart:
            store.close()  # the waiter listens on a session of its own; this one would sit idle
            store = None
        self._changes, self._store = changes, store
        self.generation += 1  # what was committed before this baseline is read again

    def _drop(self) -> None:
        changes, store = self._changes, self._store
        self._changes = self._store = None
        for closing in (changes, store):
            if closing is not None:
                with contextlib.suppress(Exception):  # already broken: nothing more to release
                    closing.close()

    def rest(self) -> None:
        """Let go of the waiter while no stream is open (on PostgreSQL its LISTEN session,
        which would otherwise queue notifications nobody reads); the next look makes it
        again."""
        with self._lock:
            self._drop()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._drop()


class StreamSlots:
    """How many event streams are open (event loop only), and the limiter of their reads."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open = 0
        self._readers: anyio.CapacityLimiter | None = None

    @property
    def readers(self) -> anyio.CapacityLimiter:
        if self._readers is None:  # made inside the event loop
            self._readers = anyio.CapacityLimiter(READERS)
        return self._readers

    def take(self) -> bool:
        if self.open >= self.limit:
            return False
        self.open += 1
        return True

    def release(self) -> None:
        self.open -= 1


class FleetWatch:
    """The last seen state of one fleet, and the events that bring a viewer up to date.
    It holds no connection: each read borrows one from ``pool``."""

    def __init__(self, pool, fleet_id: int, changes: SharedChanges, settings=None) -> None:
        self.pool = pool
        self.fleet_id = fleet_id
        self.changes = changes
        self.settings = settings  # given: roster events carry the fleet keeper's state (docs/delivery.md)
        self.seen = changes.baseline()  # before the snapshot
        with pool.borrow() as store, api.read_snapshot(store):
            newest = timeline.fleet_timeline(store, fleet_id, limit=1)
            self.last_id = newest[0]["message_id"] if newest else 0
            self.open = timeline.fleet_open_messages(store, fleet_id)
            self.states = api.member_states(store, fleet_id)
            self.states_at = time.monotonic()
            self.roster_key = _roster_key(
                self._with_keeper(store, api.fleet_view(store, fleet_id, self.states, self.settings))
            )

    def due(self) -> bool:
        """Whether :meth:`poll` has something to read: a commit was seen since the last
        read, or the member states are due for another look."""
        return self.changes.generation != self.seen or time.monotonic() - self.states_at >= STATE_INTERVAL

    def poll(self) -> list[tuple[str, Mapping[str, Any]]]:
        """Events since the last call; [] at once when nobody has committed meanwhile and
        the member states are not due for another look."""
        generation = self.changes.generation  # taken before the read: a later commit is read next time
        states_due = time.monotonic() - self.states_at >= STATE_INTERVAL
        if generation == self.seen and not states_due:
            return []
        with self.pool.borrow() as store, api.read_snapshot(store):
            if states_due:
                self.states = api.member_states(store, self.fleet_id)
                self.states_at = time.monotonic()
            events = self._changes(store)
        self.seen = generation
        return events

    def _changes(self, store: Store) -> list[tuple[str, Mapping[str, Any]]]:
        fleet_id = self.fleet_id
        events: list[tuple[str, Mapping[str, Any]]] = []
        while True:
            batch = timeline.fleet_messages_after(store, fleet_id, self.last_id, limit=BATCH)
            events += [("message", record) for record in batch]
            if batch:
                self.last_id = batch[-1]["message_id"]
            if len(batch) < BATCH:
                break
        still_open = timeline.fleet_open_messages(store, fleet_id)
        for message_id, was_notified in sorted(self.open.items()):
            now_notified = still_open.get(message_id)
            if now_notified is None or now_notified != was_notified:
                record = timeline.fleet_message(store, fleet_id, message_id)
                if record is not None:
                    events.append(("ack" if now_notified is None else "notified", record))
        self.open = still_open
        view = api.fleet_view(store, fleet_id, self.states, self.settings)
        if any(m["kind"] != "director" and m["member_id"] not in self.states for m in view["members"]):
            self.states = api.member_states(store, fleet_id)  # someone joined: look at the new pane now
            self.states_at = time.monotonic()
            view = api.fleet_view(store, fleet_id, self.states, self.settings)
        key = _roster_key(self._with_keeper(store, view))
        if key != self.roster_key:
            self.roster_key = key
            events.append(("roster", view))
        return events

    def _with_keeper(self, store: Store, view: dict) -> dict:
        """``view`` with ``GET /api/fleets/ID``'s ``keeper`` (a stalled keeper is no write
        either: it is read at each look), when this watch was given the settings."""
        if self.settings is not None:
            from cafleet.delivery.supervision import keeper_control

            found = keeper_control.status(store, self.settings, self.fleet_id)
            view["keeper"] = dict(found.as_dict(), enabled=bool(self.settings.keeper))
        return view


def _roster_key(view: dict) -> str:
    """What a roster event is about: everything but the idle counter, which ticks by itself
    (the attention list included: a preview becomes owed with no write at all), and of the
    keeper only its state and pid (its heartbeat's age ticks too)."""
    members = [{k: v for k, v in member.items() if k != "idle_seconds"} for member in view["members"]]
    keeper = view.get("keeper")
    shown = None if keeper is None else [keeper["state"], keeper["pid"]]
    return json.dumps([view["fleet"], members, view.get("attention"), shown], sort_keys=True)


def format_event(name: str, data: Mapping[str, Any]) -> str:
    # Compact JSON never contains a raw newline, so one data line carries the whole event.
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False, separators=(',', ':'))}\n\n"


class EventStream(StreamingResponse):
    """A streaming response that gives its stream slot back however it ends (the stream
    ran out, the server stopped, the client went away before or while it was sent)."""

    def __init__(self, content, slots: StreamSlots, changes: SharedChanges, **options) -> None:
        super().__init__(content, **options)
        self.slots = slots
        self.changes = changes

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await _stream_ended(self.slots, self.changes)


async def _stream_ended(slots: StreamSlots, changes: SharedChanges) -> None:
    slots.release()
    if slots.open == 0:
        await anyio.to_thread.run_sync(changes.rest)


async def stream(request: Request) -> StreamingResponse:
    """``GET /api/events?fleet_id=N``. The snapshot is taken before the response starts,
    so a client that loads the fleet after the stream opened misses nothing."""
    fleet_id = api.parse_id(request.query_params.get("fleet_id"), "fleet_id")
    state = request.app.state
    slots: StreamSlots = state.streams
    if not slots.take():
        raise api.ApiError(
            503,
            f"{slots.limit} event streams are open, the most this server serves; retry in {RETRY_AFTER} s",
            {"Retry-After": str(RETRY_AFTER)},
        )
    try:
        watch = await anyio.to_thread.run_sync(
            FleetWatch, state.pool, fleet_id, state.changes, state.config.settings, limiter=slots.readers
        )
    except BaseException:
        await _stream_ended(slots, state.changes)
        raise
    return EventStream(
        _events(watch, state.changes, state.config, slots.readers),
        slots,
        state.changes,
        media_type="text/event-stream",
        headers={"cache-control": "no-store", "x-accel-buffering": "no"},
    )


async def _events(watch: FleetWatch, changes: SharedChanges, config, readers):
    yield "retry: 2000\n: connected\n\n"
    quiet_since = time.monotonic()
    while not config.stopping():
        await anyio.sleep(config.poll_interval)
        if changes.claim():  # this stream looks for all of them this time
            await anyio.to_thread.run_sync(changes.check, limiter=readers)
        batch: list[tuple[str, Mapping[str, Any]]] = []
        if watch.due():
            try:
                batch = await anyio.to_thread.run_sync(watch.poll, limiter=readers)
            except CafleetError as error:
                yield format_event("failure", {"error": str(error)})
                return  # the browser reconnects after the retry delay and reloads
        if batch:
            yield "".join(format_event(name, data) for name, data in batch)
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= config.keepalive_interval:
            yield ": keep-alive\n\n"
            quiet_since = time.monotonic()
