"""Server-sent events: a fleet's changes pushed to the browser as they happen.

Any process may write the database (a CLI send, an ACK, a drain stamping a preview, a
member being created), so the stream cannot rely on hearing about writes from this
server. Instead each stream keeps its own connection and asks
:class:`cafleet.store.changes.Changes` a few times a second whether another connection has
committed (the store's change waiter: SQLite's ``PRAGMA data_version``, one trivial query;
PostgreSQL's notification queued on its LISTEN connection, no query; the baseline is taken
before the first snapshot is read), so an idle fleet costs almost nothing per tick. When
something changed, the stream diffs a cheap snapshot of the fleet:

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
"""

from __future__ import annotations

import json
import time

import anyio
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import StreamingResponse

from cafleet.broker import timeline
from cafleet.errors import CafleetError
from cafleet.store.changes import Changes
from cafleet.web import api

BATCH = 500
STATE_INTERVAL = 5.0


class FleetWatch:
    """The last seen state of one fleet, and the events that bring a viewer up to date."""

    def __init__(self, store, fleet_id: int) -> None:
        self.store = store
        self.fleet_id = fleet_id
        self.changes = Changes(store, 0.0)  # its baseline comes before the snapshot
        with api.read_snapshot(store):
            newest = timeline.fleet_timeline(store, fleet_id, limit=1)
            self.last_id = newest[0]["message_id"] if newest else 0
            self.open = timeline.fleet_open_messages(store, fleet_id)
            self.states = api.member_states(store, fleet_id)
            self.states_at = time.monotonic()
            self.roster_key = _roster_key(api.fleet_view(store, fleet_id, self.states))

    def poll(self) -> list[tuple[str, dict]]:
        """Events since the last call; [] at once when nobody has committed meanwhile and
        the member states are not due for another look."""
        states_due = time.monotonic() - self.states_at >= STATE_INTERVAL
        if not self.changes.changed() and not states_due:
            return []
        with api.read_snapshot(self.store):
            if states_due:
                self.states = api.member_states(self.store, self.fleet_id)
                self.states_at = time.monotonic()
            return self._changes()

    def _changes(self) -> list[tuple[str, dict]]:
        store, fleet_id = self.store, self.fleet_id
        events: list[tuple[str, dict]] = []
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
        view = api.fleet_view(store, fleet_id, self.states)
        if any(m["kind"] != "director" and m["member_id"] not in self.states for m in view["members"]):
            self.states = api.member_states(store, fleet_id)  # someone joined: look at the new pane now
            self.states_at = time.monotonic()
            view = api.fleet_view(store, fleet_id, self.states)
        key = _roster_key(view)
        if key != self.roster_key:
            self.roster_key = key
            events.append(("roster", view))
        return events

    def close(self) -> None:
        self.changes.close()
        self.store.close()


def _roster_key(view: dict) -> str:
    """What a roster event is about: everything but the idle counter, which ticks by itself
    (the attention list included: a preview becomes owed with no write at all)."""
    members = [{k: v for k, v in member.items() if k != "idle_seconds"} for member in view["members"]]
    return json.dumps([view["fleet"], members, view.get("attention")], sort_keys=True)


def format_event(name: str, data: dict) -> str:
    # Compact JSON never contains a raw newline, so one data line carries the whole event.
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False, separators=(',', ':'))}\n\n"


async def stream(request: Request) -> StreamingResponse:
    """``GET /api/events?fleet_id=N``. The snapshot is taken before the response starts,
    so a client that loads the fleet after the stream opened misses nothing."""
    fleet_id = api.parse_id(request.query_params.get("fleet_id"), "fleet_id")
    config = request.app.state.config
    watch = await run_in_threadpool(_open_watch, request.app.state.pool, fleet_id)
    return StreamingResponse(
        _events(watch, config),
        media_type="text/event-stream",
        headers={"cache-control": "no-store", "x-accel-buffering": "no"},
    )


def _open_watch(pool, fleet_id: int) -> FleetWatch:
    store = pool.open()  # held for the stream's life: data_version is per connection
    try:
        return FleetWatch(store, fleet_id)
    except BaseException:
        store.close()
        raise


async def _events(watch: FleetWatch, config):
    try:
        yield "retry: 2000\n: connected\n\n"
        quiet_since = time.monotonic()
        while not config.stopping():
            await anyio.sleep(config.poll_interval)
            try:
                batch = await anyio.to_thread.run_sync(watch.poll)
            except CafleetError as error:
                yield format_event("failure", {"error": str(error)})
                return  # the browser reconnects after the retry delay and reloads
            if batch:
                yield "".join(format_event(name, data) for name, data in batch)
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since >= config.keepalive_interval:
                yield ": keep-alive\n\n"
                quiet_since = time.monotonic()
    finally:
        watch.close()
