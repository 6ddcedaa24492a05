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

The members of a roster walk together: one statement takes the first step of every
member's walk (its newest incoming timestamp and its newest sent row, scalar subqueries
that are each one index seek), and each further statement the next step of every member
whose walk goes on. A roster of any size thus costs as many statements as its longest
walk has steps (one or two in practice), not two or three per member: over a slow link
to PostgreSQL that is the difference between a few round trips and dozens.
"""

from __future__ import annotations

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.store.protocol import Store

WALK_LIMIT = 64
BATCH = 200  # members per statement (SQLite's and PostgreSQL's parameter limits are far above)

_SENT = "FROM messages WHERE from_member_id = {member} {before}ORDER BY status_timestamp DESC, message_id DESC LIMIT 1"


def _sent_columns(member: str, before: str = "") -> str:
    """The newest sent row's ``created_at`` and ``status_timestamp``, as two scalar subqueries
    (one index seek each) for the member named by the SQL expression ``member``."""
    rest = _SENT.format(member=member, before=before)
    return f"(SELECT created_at {rest}), (SELECT status_timestamp {rest})"


_FIRST = (
    "SELECT m.member_id, "
    "(SELECT status_timestamp FROM messages WHERE to_member_id = m.member_id ORDER BY status_timestamp DESC LIMIT 1), "
    + _sent_columns("m.member_id")
    + " FROM members m WHERE m.member_id IN ({ids})"
)
_NEXT = (
    "SELECT walk.member_id, "
    + _sent_columns("walk.member_id", "AND status_timestamp < walk.walked ")
    + " FROM ({steps}) walk"
)


def last_activity(store: Store, member_id: int) -> str | None:
    return last_activities(store, [member_id])[member_id]


def last_activities(store: Store, member_ids: list[int]) -> dict[int, str | None]:
    """Each member's last activity (None without any), by member id."""
    best: dict[int, str | None] = {}
    for start in range(0, len(member_ids), BATCH):
        best.update(_activity_walk(store, member_ids[start : start + BATCH]))
    return best


def _activity_walk(store: Store, member_ids: list[int]) -> dict[int, str | None]:
    best: dict[int, str | None] = dict.fromkeys(member_ids)
    if not member_ids:
        return best
    rows = store.execute(_FIRST.format(ids=", ".join("?" * len(member_ids))), tuple(member_ids)).fetchall()
    sent: dict[int, tuple[str | None, str | None]] = {}
    for member_id, incoming, created_at, status_timestamp in rows:
        best[member_id] = incoming
        sent[member_id] = (created_at, status_timestamp)
    for _ in range(WALK_LIMIT):
        walking: list[tuple[int, str]] = []
        for member_id, (created_at, status_timestamp) in sent.items():
            if status_timestamp is None:
                continue  # no (further) sent row
            found = best[member_id]
            if found is not None and status_timestamp <= found:
                continue  # nothing older can be newer than what was found
            if found is None or (created_at is not None and created_at > found):
                best[member_id] = created_at
            walking.append((member_id, status_timestamp))
        if not walking:
            break
        steps = " UNION ALL ".join(["SELECT ? AS member_id, ? AS walked"] + ["SELECT ?, ?"] * (len(walking) - 1))
        params = tuple(value for pair in walking for value in pair)
        sent = {row[0]: (row[1], row[2]) for row in store.execute(_NEXT.format(steps=steps), params).fetchall()}
    return best
