"""Messages: send (with the self-send rule), broadcast, poll, show, ACK, and the reads
of a member's own inbox (``pending_after`` for listen and wait).

Who is owed a preview lives in :mod:`cafleet.broker.notifications`; the admin views of a
fleet's messages live in :mod:`cafleet.broker.timeline`.

The ``hooks`` calls (the command's, passed in) are the test seam's pause points (:mod:`cafleet.faults`):
with the null hooks (every command but a test's) each is a call that does nothing, so
the broker's only I/O stays the database's.
"""

from __future__ import annotations

from cafleet import clock, validation
from cafleet.broker import fleets, records
from cafleet.errors import CafleetError, Conflict, NotFound
from cafleet.faults import NO_HOOKS

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from collections.abc import Callable

    from cafleet.broker.records import BroadcastResult, MessageRecord, SendFailure
    from cafleet.faults import Hooks
    from cafleet.store.protocol import Store

_SELECT = f"SELECT {records.MESSAGE_COLUMNS} FROM messages "


def validate_text(text: str) -> str:
    """A body a member or the Director may send: a valid body (:func:`validation.body`)
    with no line that begins like a notice's header (:func:`validation.not_a_notice`): only
    cafleet writes notices (:mod:`cafleet.broker.notices`), so nobody can take a message for one."""
    return validation.not_a_notice(validation.body(text))


def _sender_and_recipient(store: Store, from_id: int, to_id: int) -> int:
    """Check the send rules inside the write transaction, with the fleet's Director, in one
    read; return the fleet id."""
    rows = {
        row[0]: row[1:]
        for row in store.execute(
            f"SELECT m.member_id, m.fleet_id, m.status, f.deleted_at, f.director_member_id, {fleets.DIRECTOR_COLUMNS} "
            f"FROM members m JOIN fleets f ON f.fleet_id = m.fleet_id {fleets.DIRECTOR_JOINS}"
            "WHERE m.member_id IN (?, ?)",
            (from_id, to_id),
        ).fetchall()
    }
    for role, member_id in (("sender", from_id), ("recipient", to_id)):
        if member_id not in rows:
            raise NotFound(f"{role} member {member_id} not found.")
    fleet_id, sender_status, deleted_at, director_id, *director = rows[from_id]
    if rows[to_id][0] != fleet_id:
        raise Conflict(f"members {from_id} and {to_id} are not in the same fleet; messages never cross fleets.")
    if deleted_at is not None:
        raise Conflict(f"fleet {fleet_id} was deleted at {deleted_at}; it accepts no new messages.")
    for role, member_id, status in (("sender", from_id, sender_status), ("recipient", to_id, rows[to_id][1])):
        if records.member_status(member_id, status) != "active":
            raise Conflict(f"{role} member {member_id} is deregistered; it can no longer send or receive messages.")
    fleets.refuse_unless_directed(fleet_id, director_id, director)
    return fleet_id


def send(store: Store, from_id: int, to_id: int, text: str, hooks: Hooks = NO_HOOKS) -> MessageRecord:
    """Persist one message with the exact body and return its public record.

    A self-send is stamped notified on insert: it produces no pane input and stays
    pending until ACKed.
    """
    validate_text(text)
    with store.write():
        _sender_and_recipient(store, from_id, to_id)
        now = clock.now()  # taken under the write lock, so created_at follows message_id
        message_id = store.insert(
            "INSERT INTO messages (from_member_id, to_member_id, created_at, status_state, status_timestamp, text, notified_at) "
            "VALUES (?, ?, ?, 'input_required', ?, ?, ?)",
            (from_id, to_id, now, now, text, now if records.is_self_send(from_id, to_id) else None),
            "message_id",
        )
        hooks.pause("send.before_commit")
    return {
        "message_id": message_id,
        "from_member_id": from_id,
        "to_member_id": to_id,
        "created_at": now,
        "status_state": "input_required",
        "status_timestamp": now,
        "text": text,
    }


def broadcast_recipients(store: Store, director_id: int) -> list[int]:
    """Every other active member of the Director's live fleet; only the root Director may broadcast."""
    columns = "m.fleet_id, m.status, f.director_member_id, f.deleted_at"
    fleet_id, status, fleet_director, deleted_at = records.member_with_fleet(
        store, director_id, columns, "sender member"
    )
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


def broadcast(
    store: Store,
    director_id: int,
    text: str,
    refuse: Callable[[int], str | None] | None = None,
    each: Callable[[MessageRecord | SendFailure], None] | None = None,
) -> BroadcastResult:
    """Fan-out: one ordinary message per recipient, each inserted and committed in a
    transaction of its own, so one recipient's failure (a constraint of the database, a
    busy file) leaves every other row as it is and is reported for that recipient alone.

    ``refuse(to_id)``: why a recipient gets no message (over its budget), or None.
    ``each(entry)``: called as each recipient is done, with its message record or its
    ``{"to_member_id", "error"}`` failure, so a caller can print every committed id at once."""
    validate_text(text)
    sent: list[MessageRecord] = []
    failed: list[SendFailure] = []
    for to_id in broadcast_recipients(store, director_id):
        why = refuse(to_id) if refuse is not None else None
        if not why:
            try:
                record = send(store, director_id, to_id, text)
            except CafleetError as error:
                why = str(error)
            except Exception as error:  # noqa: BLE001 -- a bug met by one row must not hide the rows committed before it
                why = f"internal error ({type(error).__name__}: {error}); rerun with CAFLEET_DEBUG=1 and report it"
            else:
                sent.append(record)
                if each is not None:
                    each(record)
                continue
        failure: SendFailure = {"to_member_id": to_id, "error": why}
        failed.append(failure)
        if each is not None:
            each(failure)
    return {"sent": sent, "failed": failed}


def require_member(store: Store, member_id: int) -> None:
    if store.execute("SELECT 1 FROM members WHERE member_id = ?", (member_id,)).fetchone() is None:
        raise NotFound(f"member {member_id} not found.")


def poll(store: Store, member_id: int) -> list[MessageRecord]:
    """Unacknowledged incoming messages, newest status_timestamp first, then highest id.

    "Unacknowledged" is "not completed", so a row whose state this version does not know
    is read and refused by decoding, never skipped.

    The member is looked up only when nothing came back: a message's recipient is a member
    (a foreign key, and members are never deleted), so rows prove it exists, and a poll
    with messages is one statement (one round trip on PostgreSQL, docs/performance.md).
    """
    rows = store.execute(
        _SELECT + f"WHERE to_member_id = ? AND {records.UNACKED} ORDER BY status_timestamp DESC, message_id DESC",
        (member_id,),
    ).fetchall()
    if not rows:
        require_member(store, member_id)
    return _with_notices(store, [records.message(row) for row in rows])


def _with_notices(store: Store, found: list[MessageRecord]) -> list[MessageRecord]:
    """The records, with the notices among them marked (``kind``: :mod:`cafleet.broker.notices`);
    nothing more is read unless one of them is a self-send."""
    if any(r["from_member_id"] == r["to_member_id"] for r in found):
        from cafleet.broker import notices

        notices.annotate(store, found)
    return found


def show(store: Store, message_id: int) -> MessageRecord:
    row = store.execute(_SELECT + "WHERE message_id = ?", (message_id,)).fetchone()
    if row is None:
        raise NotFound(f"message {message_id} not found.")
    return _with_notices(store, [records.message(row)])[0]


def waiting_for(store: Store, member_id: int) -> int:
    """How many messages wait for ``member_id``: unACKed, not sent to itself."""
    row = store.execute(
        "SELECT COUNT(*) FROM messages WHERE to_member_id = ? AND status_state = 'input_required' "
        "AND from_member_id != to_member_id",
        (member_id,),
    ).fetchone()
    return int(row[0])


def ack(store: Store, message_id: int, hooks: Hooks = NO_HOOKS) -> MessageRecord:
    """input_required → completed, stamping status_timestamp; a second ACK is refused."""
    with store.write():
        now = clock.now()
        # One conditional UPDATE decides: of racing ACKs, only one finds the row still
        # input_required (under SQLite's write lock and under PostgreSQL's READ COMMITTED,
        # where the loser re-checks the row the winner committed).
        rows = store.execute(
            "UPDATE messages SET status_state = 'completed', status_timestamp = ? "
            f"WHERE message_id = ? AND status_state = 'input_required' RETURNING {records.MESSAGE_COLUMNS}",
            (now, message_id),
        ).fetchall()
        updated = bool(rows)
        record = records.message(rows[0]) if rows else show(store, message_id)
        hooks.pause("ack.before_commit")
    hooks.pause("ack.after_commit")
    if not updated:
        raise Conflict(
            f"message {message_id} is already acknowledged (at {record['status_timestamp']})."
            if record["status_state"] == "completed"
            else f"message {message_id} cannot be acknowledged."
        )
    return record


def member_standing(store: Store, member_id: int) -> tuple[str, int]:
    """('active' | 'deregistered' | 'fleet-deleted', fleet_id): whether a member may still
    receive, for long-running streams (not the pane state of ``supervision.pane_state``)."""
    status, deleted_at, fleet_id = records.member_with_fleet(store, member_id, "m.status, f.deleted_at, m.fleet_id")
    if deleted_at is not None:
        return "fleet-deleted", fleet_id
    return records.member_status(member_id, status), fleet_id


_STANDING_AND_INBOX = (
    "SELECT m.status, f.deleted_at, m.fleet_id, "
    + ", ".join(f"msg.{column}" for column in records.MESSAGE_KEYS)
    + " FROM members m JOIN fleets f ON f.fleet_id = m.fleet_id "
    f"LEFT JOIN messages msg ON msg.to_member_id = m.member_id AND msg.{records.UNACKED} "
    "WHERE m.member_id = ? ORDER BY msg.status_timestamp DESC, msg.message_id DESC"
)


def standing_and_inbox(store: Store, member_id: int) -> tuple[str, int, list[MessageRecord]]:
    """:func:`member_standing` and :func:`poll` in one statement (``message wait``'s read
    after each wake-up: one round trip on PostgreSQL, not two): the member's standing, its
    fleet and its unacknowledged messages, in poll's order. NotFound for no such member."""
    rows = store.execute(_STANDING_AND_INBOX, (member_id,)).fetchall()
    if not rows:
        raise NotFound(f"member {member_id} not found.")
    status, deleted_at, fleet_id = rows[0][:3]
    state = "fleet-deleted" if deleted_at is not None else records.member_status(member_id, status)
    found = [records.message(row[3:]) for row in rows if row[3] is not None]  # no message: one row of NULLs
    return state, fleet_id, _with_notices(store, found)


def pending_after(store: Store, member_id: int, after_id: int) -> list[MessageRecord]:
    """Unacknowledged incoming messages with id > after_id, oldest first (for listen)."""
    rows = store.execute(
        _SELECT + f"WHERE to_member_id = ? AND {records.UNACKED} AND message_id > ? ORDER BY created_at, message_id",
        (member_id, after_id),
    ).fetchall()
    return _with_notices(store, [records.message(row) for row in rows])
