"""The admin timeline: a fleet's messages as the WebUI shows them (every sender, every
state, plus whether a preview was typed, and the notices marked), paged and followed live.

One rule says which fleet a message belongs to: its recipient's (:data:`BELONGS_BY`).
The sender is always in the same fleet (a send across fleets is refused), so the rule
only has to be one; the recipient is the side whose pending index also serves the
open-messages read. One builder (:func:`_admin_record`) makes every record.
"""

from __future__ import annotations

from cafleet.broker import records

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.broker.records import AdminMessage
    from cafleet.store.protocol import Store

# The member column that places a message in a fleet.
BELONGS_BY = "to_member_id"
_IN_FLEET = f"msg.{BELONGS_BY} IN (SELECT member_id FROM members WHERE fleet_id = ?)"

_ADMIN_COLUMNS = f"{', '.join('msg.' + c for c in records.MESSAGE_KEYS)}, msg.notified_at IS NOT NULL"
_ADMIN_SELECT = f"SELECT {_ADMIN_COLUMNS} FROM messages msg "


def _admin_record(row) -> AdminMessage:
    """The public message record plus ``notified`` (an admin view, never the public one)."""
    return {**records.message(row[:-1]), "notified": bool(row[-1])}


def _admin_records(store: Store, rows) -> list[AdminMessage]:
    """The records of ``rows``, the notices among them marked as ``message poll`` marks them
    (``kind`` and ``notice``, :func:`cafleet.broker.notices.annotate`: only cafleet's own
    notices, never a message whose text looks like one); nothing more is read unless one
    of them is a self-send."""
    found = [_admin_record(row) for row in rows]
    if any(r["from_member_id"] == r["to_member_id"] for r in found):
        from cafleet.broker import notices

        notices.annotate(store, found)  # type: ignore[arg-type]  # an AdminMessage is a MessageRecord and more
    return found


def fleet_timeline(store: Store, fleet_id: int, *, limit: int = 50, before_id: int | None = None) -> list[AdminMessage]:
    """A fleet's messages, newest first, paged by message id.

    CROSS JOIN makes the fleet's members the outer loop, and the unary ``+`` keeps the page
    bound off the primary key: each member's messages come from the recipient index. Left
    to itself, SQLite may instead walk the whole table backwards by id hoping to meet the
    LIMIT soon, which reads every message in the database for a quiet or new fleet.
    """
    rows = store.execute(
        f"SELECT {_ADMIN_COLUMNS} FROM members m CROSS JOIN messages msg "
        f"WHERE msg.{BELONGS_BY} = m.member_id AND m.fleet_id = ? AND (CAST(? AS BIGINT) IS NULL OR +msg.message_id < ?) ORDER BY msg.message_id DESC LIMIT ?",
        (fleet_id, before_id, before_id, limit),
    ).fetchall()
    return _admin_records(store, rows)


def fleet_messages_after(store: Store, fleet_id: int, after_id: int, *, limit: int = 500) -> list[AdminMessage]:
    """The fleet's messages with id > ``after_id``, oldest first, as in ``fleet_timeline``.

    Lets a watcher pick up exactly the rows committed since its last look.
    """
    rows = store.execute(
        _ADMIN_SELECT + f"WHERE {_IN_FLEET} AND msg.message_id > ? ORDER BY msg.message_id LIMIT ?",
        (fleet_id, after_id, limit),
    ).fetchall()
    return _admin_records(store, rows)


def fleet_message(store: Store, fleet_id: int, message_id: int) -> AdminMessage | None:
    """One message of the fleet as in ``fleet_timeline``; None when it belongs elsewhere."""
    row = store.execute(_ADMIN_SELECT + f"WHERE msg.message_id = ? AND {_IN_FLEET}", (message_id, fleet_id)).fetchone()
    return None if row is None else _admin_records(store, [row])[0]


def fleet_open_messages(store: Store, fleet_id: int) -> dict[int, bool]:
    """``{message_id: notified}`` for the fleet's unacknowledged messages.

    These are the only rows whose visible state can still change (an ACK, a notification
    stamp): a completed row is never stamped or re-opened, so a watcher that diffs this
    map sees every state change without rereading the whole history. The ``!= 'completed'``
    term lets SQLite read the auxiliary pending index.
    """
    rows = store.execute(
        f"SELECT msg.message_id, msg.notified_at IS NOT NULL FROM messages msg WHERE {_IN_FLEET} "
        "AND msg.status_state != 'completed' AND msg.status_state = 'input_required'",
        (fleet_id,),
    ).fetchall()
    return {message_id: bool(notified) for message_id, notified in rows}
