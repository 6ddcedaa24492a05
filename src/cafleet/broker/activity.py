"""Activity: the latest message a member sent, received, or ACKed.

Both lookups ride the message indexes:
- incoming: the newest ``status_timestamp`` of rows addressed to the member is either a
  received ``created_at`` (pending rows) or an ACK time (completed rows), and since
  ``created_at <= status_timestamp`` it is exactly the latest of "received" and "ACKed";
  one descending step of ``(to_member_id, status_timestamp)``.
- sent: step down ``(from_member_id, status_timestamp)`` one distinct timestamp at a time.
  Because ``created_at <= status_timestamp``, the walk stops at the first timestamp that is
  not newer than the best ``created_at`` found. Within one timestamp the newest message id
  comes first, and cafleet takes ``created_at`` inside the write transaction that assigns
  the id, so that row carries the group's newest ``created_at``: each step is one index
  seek, and rows that share a timestamp (a bulk import, a coarse clock) cost one step
  together instead of one each. The walk is bounded by ``WALK_LIMIT`` steps; a member
  whose messages were ACKed in more distinct instants after its last send than that gets
  the newest time found within the bound.
"""

from __future__ import annotations

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.store.protocol import Store

WALK_LIMIT = 64

_NEWEST_SENT = (
    "SELECT created_at, status_timestamp FROM messages WHERE from_member_id = ? "
    "ORDER BY status_timestamp DESC, message_id DESC LIMIT 1"
)
_NEXT_SENT = (
    "SELECT created_at, status_timestamp FROM messages WHERE from_member_id = ? AND status_timestamp < ? "
    "ORDER BY status_timestamp DESC, message_id DESC LIMIT 1"
)


def last_activity(store: Store, member_id: int) -> str | None:
    incoming = store.execute(
        "SELECT status_timestamp FROM messages WHERE to_member_id = ? ORDER BY status_timestamp DESC LIMIT 1",
        (member_id,),
    ).fetchone()
    best = incoming[0] if incoming else None
    row = store.execute(_NEWEST_SENT, (member_id,)).fetchone()
    for _ in range(WALK_LIMIT):
        if row is None:
            break
        created_at, status_timestamp = row
        if best is not None and status_timestamp <= best:
            break
        if best is None or created_at > best:
            best = created_at
        row = store.execute(_NEXT_SENT, (member_id, status_timestamp)).fetchone()
    return best
