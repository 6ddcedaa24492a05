"""Messages: send (with the self-send rule), broadcast, poll, show, ACK, and the
notification bookkeeping the delivery layer needs (pending selection, conditional stamp).

The ``pause_point`` calls are test-only fault-injection hooks (:mod:`cafleet.faults`):
without ``CAFLEET_TEST_PAUSE_AT`` each is one dictionary lookup and does nothing, so the
broker's only I/O stays the database's.
"""

from __future__ import annotations

from cafleet import clock, validation
from cafleet.broker import fleets, records
from cafleet.errors import CafleetError, Conflict, NotFound
from cafleet.faults import pause_point

_SELECT = f"SELECT {records.MESSAGE_COLUMNS} FROM messages "


def validate_text(text: str) -> str:
    return validation.body(text)


def _sender_and_recipient(store, from_id: int, to_id: int) -> int:
    """Check the send rules inside the write transaction; return the fleet id."""
    rows = {
        row[0]: row[1:]
        for row in store.execute(
            "SELECT m.member_id, m.fleet_id, m.status, f.deleted_at, f.director_member_id FROM members m "
            "JOIN fleets f ON f.fleet_id = m.fleet_id WHERE m.member_id IN (?, ?)",
            (from_id, to_id),
        ).fetchall()
    }
    for role, member_id in (("sender", from_id), ("recipient", to_id)):
        if member_id not in rows:
            raise NotFound(f"{role} member {member_id} not found.")
    fleet_id, sender_status, deleted_at, director_id = rows[from_id]
    if rows[to_id][0] != fleet_id:
        raise Conflict(f"members {from_id} and {to_id} are not in the same fleet; messages never cross fleets.")
    if deleted_at is not None:
        raise Conflict(f"fleet {fleet_id} was deleted at {deleted_at}; it accepts no new messages.")
    for role, member_id, status in (("sender", from_id, sender_status), ("recipient", to_id, rows[to_id][1])):
        if records.member_status(member_id, status) != "active":
            raise Conflict(f"{role} member {member_id} is deregistered; it can no longer send or receive messages.")
    fleets.check_director(store, fleet_id, director_id)
    return fleet_id


def send(store, from_id: int, to_id: int, text: str) -> dict:
    """Persist one message with the exact body and return its public record.

    A self-send is stamped notified on insert: it produces no pane input and stays
    pending until ACKed.
    """
    validate_text(text)
    with store.write():
        _sender_and_recipient(store, from_id, to_id)
        now = clock.now()  # taken under the write lock, so created_at follows message_id
        message_id = store.execute(
            "INSERT INTO messages (from_member_id, to_member_id, created_at, status_state, status_timestamp, text, notified_at) "
            "VALUES (?, ?, ?, 'input_required', ?, ?, ?)",
            (from_id, to_id, now, now, text, now if from_id == to_id else None),
        ).lastrowid
        pause_point("send.before_commit")
    return {
        "message_id": message_id,
        "from_member_id": from_id,
        "to_member_id": to_id,
        "created_at": now,
        "status_state": "input_required",
        "status_timestamp": now,
        "text": text,
    }


def broadcast_recipients(store, director_id: int) -> list[int]:
    """Every other active member of the Director's live fleet; only the root Director may broadcast."""
    row = store.execute(
        "SELECT m.fleet_id, m.status, f.director_member_id, f.deleted_at FROM members m "
        "JOIN fleets f ON f.fleet_id = m.fleet_id WHERE m.member_id = ?",
        (director_id,),
    ).fetchone()
    if row is None:
        raise NotFound(f"sender member {director_id} not found.")
    fleet_id, status, fleet_director, deleted_at = row
    if deleted_at is not None:
        raise Conflict(f"fleet {fleet_id} was deleted at {deleted_at}; it accepts no new messages.")
    records.member_status(director_id, status)
    fleets.check_director(store, fleet_id, fleet_director)  # the Director is active and placed
    if fleet_director != director_id:
        raise Conflict(f"member {director_id} is not the Director of fleet {fleet_id}; only the Director broadcasts.")
    rows = store.execute(
        f"SELECT member_id, status FROM members WHERE fleet_id = ? AND {records.NOT_DEREGISTERED} AND member_id != ? "
        "ORDER BY member_id",
        (fleet_id, director_id),
    ).fetchall()
    # Every recipient is decoded before anything is sent: a status this version does not know
    # stops the whole fan-out rather than leaving that member out in silence.
    return [member_id for member_id, status in rows if records.member_status(member_id, status)]


def broadcast(store, director_id: int, text: str) -> dict:
    """Fan-out: one ordinary message per recipient, each committed on its own."""
    validate_text(text)
    sent, failed = [], []
    for to_id in broadcast_recipients(store, director_id):
        try:
            sent.append(send(store, director_id, to_id, text))
        except CafleetError as error:
            failed.append({"to_member_id": to_id, "error": str(error)})
    return {"sent": sent, "failed": failed}


def require_member(store, member_id: int) -> None:
    if store.execute("SELECT 1 FROM members WHERE member_id = ?", (member_id,)).fetchone() is None:
        raise NotFound(f"member {member_id} not found.")


def poll(store, member_id: int) -> list[dict]:
    """Unacknowledged incoming messages, newest status_timestamp first, then highest id.

    "Unacknowledged" is "not completed", so a row whose state this version does not know
    is read and refused by decoding, never skipped.
    """
    require_member(store, member_id)
    rows = store.execute(
        _SELECT + f"WHERE to_member_id = ? AND {records.UNACKED} "
        "ORDER BY status_timestamp DESC, message_id DESC",
        (member_id,),
    ).fetchall()
    return [records.message(row) for row in rows]


def show(store, message_id: int) -> dict:
    row = store.execute(_SELECT + "WHERE message_id = ?", (message_id,)).fetchone()
    if row is None:
        raise NotFound(f"message {message_id} not found.")
    return records.message(row)


def ack(store, message_id: int) -> dict:
    """input_required → completed, stamping status_timestamp; a second ACK is refused."""
    with store.write():
        now = clock.now()
        updated = store.execute(
            "UPDATE messages SET status_state = 'completed', status_timestamp = ? "
            "WHERE message_id = ? AND status_state = 'input_required'",
            (now, message_id),
        ).rowcount
        record = show(store, message_id)
        pause_point("ack.before_commit")
    pause_point("ack.after_commit")
    if not updated:
        raise Conflict(
            f"message {message_id} is already acknowledged (at {record['status_timestamp']})."
            if record["status_state"] == "completed"
            else f"message {message_id} cannot be acknowledged."
        )
    return record


def member_state(store, member_id: int) -> tuple[str, int | None]:
    """('active' | 'deregistered' | 'fleet-deleted', fleet_id) for long-running streams."""
    row = store.execute(
        "SELECT m.status, f.deleted_at, m.fleet_id FROM members m JOIN fleets f ON f.fleet_id = m.fleet_id "
        "WHERE m.member_id = ?",
        (member_id,),
    ).fetchone()
    if row is None:
        raise NotFound(f"member {member_id} not found.")
    status, deleted_at, fleet_id = row
    if deleted_at is not None:
        return "fleet-deleted", fleet_id
    return records.member_status(member_id, status), fleet_id


def pending_after(store, member_id: int, after_id: int) -> list[dict]:
    """Unacknowledged incoming messages with id > after_id, oldest first (for listen)."""
    rows = store.execute(
        _SELECT + f"WHERE to_member_id = ? AND {records.UNACKED} AND message_id > ? "
        "ORDER BY created_at, message_id",
        (member_id, after_id),
    ).fetchall()
    return [records.message(row) for row in rows]


# --- notification bookkeeping (used by the delivery layer) -------------------------------

def notification_target(store, member_id: int) -> dict | None:
    """The recipient's concrete placement if it is eligible for pane notification.

    Eligible: active member of a live fleet, not the fleet's root Director, with a
    placement whose pane is concrete. None otherwise.
    """
    row = store.execute(
        "SELECT p.backend, p.mux_session, p.mux_window_id, p.mux_pane_id, p.coding_agent, m.fleet_id, p.created_at "
        "FROM members m JOIN fleets f ON f.fleet_id = m.fleet_id "
        "JOIN member_placements p ON p.member_id = m.member_id "
        "WHERE m.member_id = ? AND m.status = 'active' AND f.deleted_at IS NULL "
        "AND m.member_id IS NOT f.director_member_id AND p.mux_pane_id IS NOT NULL",
        (member_id,),
    ).fetchone()
    if row is None:
        return None
    from cafleet.broker.records import decode_pane

    keys = ("backend", "session", "window_id", "pane_id", "coding_agent", "fleet_id", "created_at")
    target = dict(zip(keys, row))
    target["pane_id"], target["identity"] = decode_pane(target["pane_id"])
    return target


def next_pending_notification(store, member_id: int, attempted) -> dict | None:
    """The oldest message owed a preview for this recipient, skipping ``attempted`` ids."""
    rows = store.execute(
        "SELECT message_id, from_member_id, created_at, text FROM messages "
        "WHERE to_member_id = ? AND status_state = 'input_required' AND notified_at IS NULL "
        "AND from_member_id != to_member_id ORDER BY created_at, message_id",
        (member_id,),
    )
    for message_id, from_id, created_at, text in rows:
        if message_id not in attempted:
            rows.close()
            return {"message_id": message_id, "from_member_id": from_id, "created_at": created_at, "text": text}
    return None


def still_pending_notification(store, message_id: int) -> bool:
    row = store.execute(
        "SELECT 1 FROM messages WHERE message_id = ? AND status_state = 'input_required' AND notified_at IS NULL",
        (message_id,),
    ).fetchone()
    return row is not None


def stamp_notified(store, message_id: int) -> bool:
    """Record a completed submission; does nothing when the row was ACKed meanwhile."""
    with store.write():
        updated = store.execute(
            "UPDATE messages SET notified_at = ? WHERE message_id = ? AND notified_at IS NULL "
            "AND status_state = 'input_required'",
            (clock.now(), message_id),
        ).rowcount
    return bool(updated)


def recipients_owed_notifications(store, fleet_id: int) -> list[int]:
    """Members of the fleet eligible for a preview (active, not the root Director, with a
    concrete pane) that have messages owed one (for wait's retry pass).

    No index tells a pending row from an ACKed one, so every message the eligible members
    received is read. The inner select takes their ids from the recipient index alone (an
    index entry carries the message id); the outer one then reads those rows in id order,
    so each table page is read once for the whole fleet instead of once per member (their
    messages are interleaved). CROSS JOIN keeps the fleet's members the outer loop whatever
    statistics SQLite holds. The Director is left out in SQL: the drain would skip it
    anyway, and in a busy fleet it receives the most messages.
    """
    return [
        row[0]
        for row in store.execute(
            "SELECT DISTINCT msg.to_member_id FROM messages msg WHERE msg.message_id IN ("
            "SELECT received.message_id FROM messages received WHERE received.to_member_id IN ("
            "SELECT m.member_id FROM members m CROSS JOIN fleets f CROSS JOIN member_placements p "
            "WHERE m.fleet_id = ? AND m.status = 'active' AND f.fleet_id = m.fleet_id "
            "AND m.member_id IS NOT f.director_member_id AND p.member_id = m.member_id AND p.mux_pane_id IS NOT NULL)) "
            "AND msg.status_state = 'input_required' AND msg.notified_at IS NULL "
            "AND msg.from_member_id != msg.to_member_id ORDER BY msg.to_member_id",
            (fleet_id,),
        ).fetchall()
    ]


def fleet_timeline(store, fleet_id: int, *, limit: int = 50, before_id: int | None = None) -> list[dict]:
    """A fleet's messages, newest first, paged by message id; each record adds whether a
    preview was typed (``notified``) — an admin view, not the public message record.

    CROSS JOIN makes the fleet's members the outer loop, and the unary ``+`` keeps the page
    bound off the primary key: each member's messages come from the sender index. Left to
    itself, SQLite may instead walk the whole table backwards by id hoping to meet the
    LIMIT soon, which reads every message in the database for a quiet or new fleet.
    """
    rows = store.execute(
        f"SELECT {', '.join('msg.' + c for c in records.MESSAGE_KEYS)}, msg.notified_at IS NOT NULL "
        "FROM members m CROSS JOIN messages msg ON msg.from_member_id = m.member_id "
        "WHERE m.fleet_id = ? AND (? IS NULL OR +msg.message_id < ?) ORDER BY msg.message_id DESC LIMIT ?",
        (fleet_id, before_id, before_id, limit),
    ).fetchall()
    out = []
    for row in rows:
        record = records.message(row[:-1])
        record["notified"] = bool(row[-1])
        out.append(record)
    return out


# --- admin reads for the WebUI's live stream ----------------------------------------------

_ADMIN_SELECT = (
    f"SELECT {', '.join('msg.' + c for c in records.MESSAGE_KEYS)}, msg.notified_at IS NOT NULL FROM messages msg "
)


def _admin_record(row) -> dict:
    record = records.message(row[:-1])
    record["notified"] = bool(row[-1])
    return record


def fleet_messages_after(store, fleet_id: int, after_id: int, *, limit: int = 500) -> list[dict]:
    """The fleet's messages with id > ``after_id``, oldest first, as in ``fleet_timeline``.

    Lets a watcher pick up exactly the rows committed since its last look.
    """
    rows = store.execute(
        _ADMIN_SELECT + "WHERE msg.from_member_id IN (SELECT member_id FROM members WHERE fleet_id = ?) "
        "AND msg.message_id > ? ORDER BY msg.message_id LIMIT ?",
        (fleet_id, after_id, limit),
    ).fetchall()
    return [_admin_record(row) for row in rows]


def fleet_message(store, fleet_id: int, message_id: int) -> dict | None:
    """One message of the fleet as in ``fleet_timeline``; None when it belongs elsewhere."""
    row = store.execute(
        _ADMIN_SELECT + "WHERE msg.message_id = ? "
        "AND msg.from_member_id IN (SELECT member_id FROM members WHERE fleet_id = ?)",
        (message_id, fleet_id),
    ).fetchone()
    return None if row is None else _admin_record(row)


def fleet_open_messages(store, fleet_id: int) -> dict[int, bool]:
    """``{message_id: notified}`` for the fleet's unacknowledged messages.

    These are the only rows whose visible state can still change (an ACK, a notification
    stamp): a completed row is never stamped or re-opened, so a watcher that diffs this
    map sees every state change without rereading the whole history.
    """
    rows = store.execute(
        "SELECT msg.message_id, msg.notified_at IS NOT NULL FROM messages msg "
        "WHERE msg.to_member_id IN (SELECT member_id FROM members WHERE fleet_id = ?) "
        "AND msg.status_state = 'input_required'",
        (fleet_id,),
    ).fetchall()
    return {message_id: bool(notified) for message_id, notified in rows}


def stale_notifications(store, fleet_id: int, created_before: str) -> list[tuple[int, int]]:
    """(message_id, recipient) of previews owed since before ``created_before`` to the
    fleet's eligible members, oldest first (for supervision's retries)."""
    return store.execute(
        "SELECT msg.message_id, msg.to_member_id FROM members m JOIN fleets f ON f.fleet_id = m.fleet_id "
        "JOIN messages msg ON msg.to_member_id = m.member_id "
        "WHERE m.fleet_id = ? AND m.status = 'active' AND m.member_id IS NOT f.director_member_id "
        "AND msg.status_state = 'input_required' AND msg.notified_at IS NULL "
        "AND msg.from_member_id != msg.to_member_id AND msg.created_at < ? ORDER BY msg.created_at, msg.message_id",
        (fleet_id, created_before),
    ).fetchall()
