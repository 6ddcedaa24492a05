"""Activity (§6): the latest message a member sent, received, or ACKed.

Both lookups ride the message indexes:
- incoming: the newest ``status_timestamp`` of rows addressed to the member is either a
  received ``created_at`` (pending rows) or an ACK time (completed rows), and since
  ``created_at <= status_timestamp`` it is exactly the latest of "received" and "ACKed";
  one descending step of ``(to_member_id, status_timestamp)``.
- sent: walk ``(from_member_id, status_timestamp)`` newest first; because
  ``created_at <= status_timestamp``, the walk stops as soon as a row's
  ``status_timestamp`` is older than the best ``created_at`` seen.
"""

from __future__ import annotations


def last_activity(store, member_id: int) -> str | None:
    incoming = store.execute(
        "SELECT status_timestamp FROM messages WHERE to_member_id = ? ORDER BY status_timestamp DESC LIMIT 1",
        (member_id,),
    ).fetchone()
    best = incoming[0] if incoming else None
    cursor = store.execute(
        "SELECT created_at, status_timestamp FROM messages WHERE from_member_id = ? ORDER BY status_timestamp DESC",
        (member_id,),
    )
    for created_at, status_timestamp in cursor:
        if best is not None and status_timestamp < best:
            break
        if best is None or created_at > best:
            best = created_at
    cursor.close()
    return best
