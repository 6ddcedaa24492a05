"""The fleet as a picture: who messaged whom, and each member's activity in the last hour.

``GET /api/fleets/{id}/graph`` answers

- ``nodes``: every member that is active or appears in the fleet's messages, with its
  ``pending`` (unacknowledged incoming) and ``unnotified`` (of those, owed a preview:
  not to the Director, not a self-send) counts, and ``activity``: messages sent or
  received in each of the last ``BUCKETS`` minutes, oldest first;
- ``edges``: one per (sender, recipient) pair with ``count``, ``pending`` and
  ``unnotified``.

Two aggregate reads in one read transaction, each walking the fleet's messages through
the sender index (the same CROSS JOIN as the timeline). The page asks again when the
event stream reports a message, an ACK or a stamp.
"""

from __future__ import annotations

import time

from starlette.requests import Request
from starlette.responses import JSONResponse

from cafleet import clock
from cafleet.broker import fleets, members

BUCKETS = 60  # one-minute buckets: the last hour
BUCKET_SECONDS = 60


def fleet_graph(store, fleet_id: int, now: float | None = None) -> dict:
    fleet = fleets.get_fleet(store, fleet_id)
    director = fleet["director_member_id"]
    now = time.time() if now is None else now
    rows = store.execute(
        "SELECT msg.from_member_id, msg.to_member_id, count(*), "
        "sum(msg.status_state = 'input_required'), "
        "sum(msg.status_state = 'input_required' AND msg.notified_at IS NULL) "
        "FROM members m CROSS JOIN messages msg ON msg.from_member_id = m.member_id "
        "WHERE m.fleet_id = ? GROUP BY msg.from_member_id, msg.to_member_id",
        (fleet_id,),
    ).fetchall()
    edges = []
    for sender, recipient, count, pending, unnotified in rows:
        owed = unnotified if recipient != director and sender != recipient else 0
        edges.append({"from": sender, "to": recipient, "count": count, "pending": pending, "unnotified": owed})
    since_epoch = now - BUCKETS * BUCKET_SECONDS
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(since_epoch)) + ".000000+00:00"
    recent = store.execute(
        "SELECT msg.from_member_id, msg.to_member_id, msg.created_at "
        "FROM members m CROSS JOIN messages msg ON msg.from_member_id = m.member_id "
        "WHERE m.fleet_id = ? AND msg.created_at >= ?",
        (fleet_id, since),
    ).fetchall()
    roster = members.roster(store, fleet_id) if fleet["deleted_at"] is None else []
    nodes: dict[int, dict] = {}

    def node(member_id: int, name: str | None = None, kind: str | None = None) -> dict:
        if member_id not in nodes:
            nodes[member_id] = {"member_id": member_id, "name": name, "kind": kind, "active": False,
                                "pending": 0, "unnotified": 0, "activity": [0] * BUCKETS}
        return nodes[member_id]

    for entry in roster:
        node(entry["member_id"], entry["name"], entry["kind"])["active"] = True
    for edge in edges:
        node(edge["from"])
        target = node(edge["to"])
        target["pending"] += edge["pending"]
        target["unnotified"] += edge["unnotified"]
    missing = [member_id for member_id, entry in nodes.items() if entry["name"] is None]
    for member_id in missing:  # deregistered members that still appear in the history
        record = members.get_member(store, member_id)
        nodes[member_id].update(name=record["name"], kind=record["kind"])
    for sender, recipient, created_at in recent:
        index = int((clock.to_epoch(created_at) - since_epoch) // BUCKET_SECONDS)
        if 0 <= index < BUCKETS:
            node(sender)["activity"][index] += 1
            if recipient != sender:
                node(recipient)["activity"][index] += 1
    return {"fleet_id": fleet_id, "director_member_id": director, "bucket_seconds": BUCKET_SECONDS,
            "nodes": sorted(nodes.values(), key=lambda n: n["member_id"]), "edges": edges}


def graph(request: Request) -> JSONResponse:
    from cafleet.web.api import parse_id, read_snapshot

    fleet_id = parse_id(request.path_params["fleet_id"], "fleet id")
    with request.app.state.pool.borrow() as store, read_snapshot(store):
        return JSONResponse(fleet_graph(store, fleet_id))
