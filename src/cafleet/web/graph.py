"""The fleet as a picture: who messaged whom, and each member's activity in the last hour.

``GET /api/fleets/{id}/graph`` answers

- ``nodes``: every member that is active or appears in the fleet's messages, with its
  ``pending`` (unacknowledged incoming) and ``unnotified`` (of those, owed a preview:
  not to the Director, not a self-send) counts, and ``activity``: messages sent or
  received in each of the last ``BUCKETS`` minutes, oldest first;
- ``edges``: one per (sender, recipient) pair with ``count``, ``pending`` and
  ``unnotified``.

The page asks again after every message, ACK or stamp, so the answer must not cost a walk
over the fleet's whole history each time (about a second for 100,000 messages). The
server keeps a tally per fleet (:class:`GraphCache`): built once with full aggregates,
then brought up to date from the rows after the last message id it saw (a range of the
primary key) and a look at the messages it knows are still open (by primary key); the
reads, and the rules for "open" and "unnotified", are the broker's
(:mod:`cafleet.broker.traffic`). That is exact because a message row is never deleted, an
ACK is final and a notification stamp is never removed: an open message can only close or
be stamped, a closed one never changes.
"""

from __future__ import annotations

import threading
import time
from collections import deque

from starlette.requests import Request
from starlette.responses import JSONResponse

from cafleet import clock
from cafleet.broker import fleets, members, traffic

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.store.protocol import Store

BUCKETS = 60  # one-minute buckets: the last hour
BUCKET_SECONDS = 60


class FleetTally:
    """Message counts of one fleet, kept up to date incrementally (see the module doc)."""

    def __init__(self, fleet_id: int) -> None:
        self.fleet_id = fleet_id
        self.lock = threading.Lock()
        self.ready = False
        self.last_id = 0  # highest message id of the whole table already counted
        self.totals: dict[tuple[int, int], int] = {}
        self.open: dict[int, tuple[int, int, bool]] = {}  # message_id -> (from, to, unnotified)
        self.recent: deque[tuple[float, int, int]] = deque()  # (created epoch, from, to), oldest first

    def update(self, store: Store, since: float) -> None:
        """Bring the tally up to the store's read snapshot (the caller holds one open)."""
        fleet_id = self.fleet_id
        if not self.ready:
            self.last_id = traffic.last_message_id(store)
            self.totals = traffic.totals(store, fleet_id, self.last_id)
            self.open = traffic.open_messages(store, fleet_id, self.last_id)
            rows = traffic.sent_since(store, fleet_id, self.last_id, _iso(since))
            self.recent = deque(sorted((clock.to_epoch(c), f, t) for c, f, t in rows))
            self.ready = True
            return
        ours = traffic.member_ids(store, fleet_id)
        still_open = list(self.open)
        for message_id, sender, recipient, created_at, is_open, unnotified in traffic.after(store, self.last_id):
            self.last_id = message_id
            if sender not in ours:  # another fleet's message (a send never crosses fleets)
                continue
            self.totals[(sender, recipient)] = self.totals.get((sender, recipient), 0) + 1
            self.recent.append((clock.to_epoch(created_at), sender, recipient))
            if is_open:
                self.open[message_id] = (sender, recipient, unnotified)
        for message_id, is_open, unnotified in traffic.states(store, still_open):
            if not is_open:
                del self.open[message_id]
            else:
                sender, recipient, _ = self.open[message_id]
                self.open[message_id] = (sender, recipient, unnotified)
        # In id order, so nearly in time order; an entry behind a later one (a clock that
        # stepped back) only leaves a little later, and buckets ignore what is out of range.
        while self.recent and self.recent[0][0] < since:
            self.recent.popleft()


class GraphCache:
    """One :class:`FleetTally` per fleet asked for, shared by every page."""

    def __init__(self) -> None:
        self._fleets: dict[int, FleetTally] = {}
        self._lock = threading.Lock()

    def tally(self, fleet_id: int) -> FleetTally:
        with self._lock:
            return self._fleets.setdefault(fleet_id, FleetTally(fleet_id))


def fleet_graph(store: Store, fleet_id: int, cache: GraphCache | None = None, now: float | None = None) -> dict:
    """The graph of one fleet; the caller holds a read transaction (``api.read_snapshot``)."""
    fleet = fleets.get_fleet(store, fleet_id)
    director = fleet["director_member_id"]
    now = time.time() if now is None else now
    since = now - BUCKETS * BUCKET_SECONDS
    tally = (cache or GraphCache()).tally(fleet_id)
    with tally.lock:
        tally.update(store, since)
        totals = dict(tally.totals)
        still_open = list(tally.open.values())
        recent = list(tally.recent)
    pending: dict[tuple[int, int], list[int]] = {}
    for sender, recipient, unnotified in still_open:
        counts = pending.setdefault((sender, recipient), [0, 0])
        counts[0] += 1
        counts[1] += unnotified and recipient != director  # the Director polls: it is owed no preview
    edges = []
    for (sender, recipient), count in sorted(totals.items()):
        open_count, owed = pending.get((sender, recipient), (0, 0))
        edges.append({"from": sender, "to": recipient, "count": count, "pending": open_count, "unnotified": owed})
    roster = members.roster(store, fleet_id) if fleet["deleted_at"] is None else []
    nodes: dict[int, dict] = {}

    def node(member_id: int, name: str | None = None, kind: str | None = None) -> dict:
        if member_id not in nodes:
            nodes[member_id] = {
                "member_id": member_id,
                "name": name,
                "kind": kind,
                "active": False,
                "pending": 0,
                "unnotified": 0,
                "activity": [0] * BUCKETS,
            }
        return nodes[member_id]

    for entry in roster:
        node(entry["member_id"], entry["name"], entry["kind"])["active"] = True
    for edge in edges:
        node(edge["from"])
        target = node(edge["to"])
        target["pending"] += edge["pending"]
        target["unnotified"] += edge["unnotified"]
    for member_id in [member_id for member_id, entry in nodes.items() if entry["name"] is None]:
        record = members.get_member(store, member_id)  # deregistered, still in the history
        nodes[member_id].update(name=record["name"], kind=record["kind"])
    for created, sender, recipient in recent:
        index = int((created - since) // BUCKET_SECONDS)
        if 0 <= index < BUCKETS:
            node(sender)["activity"][index] += 1
            if recipient != sender:
                node(recipient)["activity"][index] += 1
    return {
        "fleet_id": fleet_id,
        "director_member_id": director,
        "bucket_seconds": BUCKET_SECONDS,
        "nodes": sorted(nodes.values(), key=lambda n: n["member_id"]),
        "edges": edges,
    }


def _iso(epoch: float) -> str:
    whole = int(epoch)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{int((epoch - whole) * 1e6):06d}+00:00"


def graph(request: Request) -> JSONResponse:
    from cafleet.web.api import parse_id, read_snapshot

    fleet_id = parse_id(request.path_params["fleet_id"], "fleet id")
    with request.app.state.pool.borrow() as store, read_snapshot(store):
        return JSONResponse(fleet_graph(store, fleet_id, request.app.state.graphs))
