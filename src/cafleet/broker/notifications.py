"""Notifications: who is eligible for a pane preview and which messages are owed one.

The rules live here once, as SQL terms every read below is built from:

- :data:`ELIGIBLE` — the recipient is an active member of a live (not deleted) fleet, is
  not the fleet's root Director (who polls and listens instead), and has a placement
  whose pane is concrete (a member whose pane is still being created is typed into once
  the pane is recorded, by the next send or retry).
- :data:`OWED` — the message is unacknowledged, no preview was recorded for it, and it is
  not a self-send (those are stamped on insert and never typed).

The delivery layer (``delivery/keystrokes/drain.py``, ``delivery/supervision/watch.py``) asks these questions;
it never writes its own SQL for them.

The repeated ``status_state != 'completed'`` beside ``= 'input_required'`` is deliberate:
it is the predicate of the auxiliary pending index (``store/schema.py``), and repeating it
is what lets SQLite read that partial index (only what is pending) instead of everything a
member ever received. The CROSS JOINs keep the fleet's members the outer loop whatever
statistics SQLite holds. ``tests/test_query_plans.py`` checks both per function.
"""

from __future__ import annotations

from cafleet import clock
from cafleet.broker.records import NOT_ROOT_DIRECTOR

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.broker.records import NotificationTarget
    from cafleet.store.protocol import Store

# The tables the eligibility rule reads, in the order SQLite must loop over them.
ELIGIBLE_FROM = "members m CROSS JOIN fleets f CROSS JOIN member_placements p"
ELIGIBLE = (
    "f.fleet_id = m.fleet_id AND p.member_id = m.member_id AND m.status = 'active' AND f.deleted_at IS NULL "
    f"AND {NOT_ROOT_DIRECTOR} AND p.mux_pane_id IS NOT NULL"
)


def pending(alias: str) -> str:
    """Unacknowledged, in the form that reads the auxiliary pending index."""
    return f"{alias}.status_state != 'completed' AND {alias}.status_state = 'input_required'"


def unnotified(alias: str) -> str:
    """No preview recorded, and not a self-send (:func:`cafleet.broker.records.is_self_send`)."""
    return f"{alias}.notified_at IS NULL AND {alias}.from_member_id != {alias}.to_member_id"


def owed(alias: str) -> str:
    return f"{pending(alias)} AND {unnotified(alias)}"


OWED = owed("msg")


def notification_target(store: Store, member_id: int) -> NotificationTarget | None:
    """The recipient's concrete placement if it is eligible (:data:`ELIGIBLE`); None otherwise."""
    row = store.execute(
        "SELECT p.backend, p.mux_session, p.mux_window_id, p.mux_pane_id, p.coding_agent, m.fleet_id, p.created_at "
        f"FROM {ELIGIBLE_FROM} WHERE m.member_id = ? AND {ELIGIBLE}",
        (member_id,),
    ).fetchone()
    if row is None:
        return None
    from cafleet.broker.records import decode_concrete_pane

    backend, session, window_id, stored_pane, coding_agent, fleet_id, created_at = row
    pane_id, identity = decode_concrete_pane(stored_pane)  # ELIGIBLE: the pane id is not NULL
    return {
        "backend": backend,
        "session": session,
        "window_id": window_id,
        "pane_id": pane_id,
        "coding_agent": coding_agent,
        "fleet_id": fleet_id,
        "created_at": created_at,
        "identity": identity,
    }


def next_pending_notification(store: Store, member_id: int, attempted) -> dict | None:
    """The oldest message owed a preview for this recipient, skipping ``attempted`` ids.

    Eligibility is the caller's question (:func:`notification_target`, asked again under
    the pane lock): this reads the messages only."""
    rows = store.execute(
        f"SELECT msg.message_id, msg.from_member_id, msg.created_at, msg.text FROM messages msg "
        f"WHERE msg.to_member_id = ? AND {OWED} ORDER BY msg.created_at, msg.message_id",
        (member_id,),
    )
    for message_id, from_id, created_at, text in rows:
        if message_id not in attempted:
            rows.close()
            return {"message_id": message_id, "from_member_id": from_id, "created_at": created_at, "text": text}
    return None


def owed_message_ids(store: Store, member_id: int) -> list[int]:
    """The ids of the messages owed a preview for this recipient, oldest first (what a
    not-notified line names)."""
    return [
        row[0]
        for row in store.execute(
            f"SELECT msg.message_id FROM messages msg WHERE msg.to_member_id = ? AND {OWED} "
            "ORDER BY msg.created_at, msg.message_id",
            (member_id,),
        ).fetchall()
    ]


def still_pending_notification(store: Store, message_id: int) -> bool:
    """Whether the message is still owed its preview (not ACKed, not notified meanwhile)."""
    row = store.execute(f"SELECT 1 FROM messages msg WHERE msg.message_id = ? AND {OWED}", (message_id,)).fetchone()
    return row is not None


def preview_source(store: Store, recipient_id: int, message_id: int) -> dict | None:
    """The sender, time and body of message ``message_id`` if it was sent to
    ``recipient_id`` (in any state, ACKed or notified included): what a preview of it
    showed, to tell our own text left in that recipient's input box (delivery/keystrokes/drain.py)."""
    row = store.execute(
        "SELECT from_member_id, created_at, text FROM messages WHERE message_id = ? AND to_member_id = ?",
        (message_id, recipient_id),
    ).fetchone()
    return None if row is None else {"from_member_id": row[0], "created_at": row[1], "text": row[2]}


def stamp_notified(store: Store, message_id: int) -> bool:
    """Record a completed submission; does nothing when the row was ACKed meanwhile."""
    with store.write():
        updated = store.execute(
            "UPDATE messages SET notified_at = ? WHERE message_id = ? AND notified_at IS NULL "
            "AND status_state = 'input_required'",
            (clock.now(), message_id),
        ).rowcount
    return bool(updated)


def recipients_owed_notifications(store: Store, fleet_id: int) -> list[int]:
    """The fleet's eligible members that have messages owed a preview (for wait's retry pass).

    The inner select takes the ids of the eligible members' pending messages from the
    auxiliary pending index alone (an index entry carries the message id), so the cost
    follows what is pending, not the members' history. On a file without that index it
    reads every message they received from the recipient index instead: the same answer,
    slower. The outer select then reads those rows in id order, so each table page is read
    once for the whole fleet (it has no pending term of its own, which would tempt SQLite
    to scan the whole partial index instead).
    """
    return [
        row[0]
        for row in store.execute(
            "SELECT DISTINCT msg.to_member_id FROM messages msg WHERE msg.message_id IN ("
            f"SELECT received.message_id FROM messages received WHERE {pending('received')} "
            f"AND received.to_member_id IN (SELECT m.member_id FROM {ELIGIBLE_FROM} WHERE m.fleet_id = ? AND {ELIGIBLE})) "
            f"AND {unnotified('msg')} ORDER BY msg.to_member_id",
            (fleet_id,),
        ).fetchall()
    ]


def stale_notifications(store: Store, fleet_id: int, created_before: str) -> list[tuple[int, int]]:
    """(message_id, recipient) of previews owed since before ``created_before`` to the
    fleet's eligible members, oldest first (for ``fleet watch``'s retries).

    Each eligible member's pending rows are one slice of the auxiliary pending index,
    never a scan of every pending row."""
    return store.execute(
        f"SELECT msg.message_id, msg.to_member_id FROM {ELIGIBLE_FROM} CROSS JOIN messages msg "
        f"WHERE m.fleet_id = ? AND {ELIGIBLE} AND msg.to_member_id = m.member_id AND {OWED} "
        "AND msg.created_at < ? ORDER BY msg.created_at, msg.message_id",
        (fleet_id, created_before),
    ).fetchall()
