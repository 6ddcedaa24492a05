"""Traffic: a fleet's messages counted by sender and recipient, read in the steps a tally
kept up to date needs (the WebUI's graph, :mod:`cafleet.web.graph`).

"Open" is :func:`cafleet.broker.notifications.pending` and "unnotified" is
:func:`cafleet.broker.notifications.unnotified` (no preview recorded, not a self-send):
the same rules the drain reads, never written again here. Which recipients are owed a
preview at all (not the Director) is the caller's question.

Every read takes ``up_to``/``after`` bounds on the primary key, so a caller that counted
the rows up to an id reads only what is newer next time; a message row is never deleted,
an ACK is final and a notification stamp is never removed, so an open message can only
close or be stamped, and a closed one never changes.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from cafleet.broker.notifications import pending, unnotified

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.store.protocol import Store

CHUNK = 500  # ids per IN (...) look-up

_OPEN = pending("msg")
_UNNOTIFIED = unnotified("msg")


def last_message_id(store: Store) -> int:
    """The highest message id of the whole table (0 when there is none)."""
    return store.execute("SELECT coalesce(max(message_id), 0) FROM messages").fetchone()[0]


def member_ids(store: Store, fleet_id: int) -> set[int]:
    """Every member id the fleet ever had."""
    return {row[0] for row in store.execute("SELECT member_id FROM members WHERE fleet_id = ?", (fleet_id,))}


def totals(store: Store, fleet_id: int, up_to: int) -> dict[tuple[int, int], int]:
    """(sender, recipient) -> how many messages the fleet's members sent, ids up to ``up_to``."""
    return {
        (sender, recipient): count
        for sender, recipient, count in store.execute(
            "SELECT msg.from_member_id, msg.to_member_id, count(*) "
            "FROM members m CROSS JOIN messages msg "
            "WHERE msg.from_member_id = m.member_id AND m.fleet_id = ? AND +msg.message_id <= ? GROUP BY msg.from_member_id, msg.to_member_id",
            (fleet_id, up_to),
        )
    }


def open_messages(store: Store, fleet_id: int, up_to: int) -> dict[int, tuple[int, int, bool]]:
    """message id -> (sender, recipient, unnotified) of the open messages to the fleet's
    members, ids up to ``up_to``."""
    return {
        message_id: (sender, recipient, bool(owed))
        for message_id, sender, recipient, owed in store.execute(
            f"SELECT msg.message_id, msg.from_member_id, msg.to_member_id, {_UNNOTIFIED} FROM messages msg "
            "WHERE msg.to_member_id IN (SELECT member_id FROM members WHERE fleet_id = ?) "
            f"AND {_OPEN} AND msg.message_id <= ?",
            (fleet_id, up_to),
        )
    }


def sent_since(store: Store, fleet_id: int, up_to: int, since: str) -> list[tuple[str, int, int]]:
    """(created_at, sender, recipient) of what the fleet's members sent at or after
    ``since`` (an ISO timestamp), ids up to ``up_to``."""
    return store.execute(
        "SELECT msg.created_at, msg.from_member_id, msg.to_member_id "
        "FROM members m CROSS JOIN messages msg "
        "WHERE msg.from_member_id = m.member_id AND m.fleet_id = ? AND +msg.message_id <= ? AND msg.created_at >= ?",
        (fleet_id, up_to, since),
    ).fetchall()


def after(store: Store, last_id: int) -> list[tuple[int, int, int, str, bool, bool]]:
    """(message id, sender, recipient, created_at, open, unnotified) of every message of
    the whole table after ``last_id``, in id order."""
    return [
        (message_id, sender, recipient, created_at, bool(is_open), bool(owed))
        for message_id, sender, recipient, created_at, is_open, owed in store.execute(
            f"SELECT msg.message_id, msg.from_member_id, msg.to_member_id, msg.created_at, {_OPEN}, {_UNNOTIFIED} "
            "FROM messages msg WHERE msg.message_id > ? ORDER BY msg.message_id",
            (last_id,),
        )
    ]


def states(store: Store, message_ids: Iterable[int]) -> Iterator[tuple[int, bool, bool]]:
    """(message id, open, unnotified) of each of ``message_ids``, looked up by primary key."""
    ids = list(message_ids)
    for start in range(0, len(ids), CHUNK):
        chunk = ids[start : start + CHUNK]
        marks = ",".join("?" * len(chunk))
        for message_id, is_open, owed in store.execute(
            f"SELECT msg.message_id, {_OPEN}, {_UNNOTIFIED} FROM messages msg WHERE msg.message_id IN ({marks})",
            chunk,
        ):
            yield message_id, bool(is_open), bool(owed)
