"""Row decoding shared by the broker modules: stored enums are checked, never trusted."""

from __future__ import annotations

from cafleet.errors import CorruptRow, NotFound

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.store.protocol import Store

MEMBER_STATUSES = ("active", "deregistered")
MESSAGE_STATES = ("input_required", "completed")

# The one predicate for "not yet acknowledged". Written as "not completed" rather than
# "is input_required" so that a row with a value this version does not know is selected,
# then refused by :func:`message`, instead of being skipped in silence.
UNACKED = "status_state != 'completed'"


def is_self_send(from_id: int, to_id: int) -> bool:
    """The self-send rule: a message a member sends itself is stamped notified on insert
    and never typed into a pane (the same rule in SQL: :func:`cafleet.broker.notifications.unnotified`)."""
    return from_id == to_id


# Members that count as present: active ones, and any unknown value (refused on decoding).
NOT_DEREGISTERED = "status != 'deregistered'"

# Member ``m`` is not the root Director of its fleet ``f`` (a fleet being bootstrapped has
# none yet). A null-safe comparison both engines read alike: SQLite's ``IS NOT`` between
# two values is no PostgreSQL, and ``IS DISTINCT FROM`` needs SQLite 3.39
# (docs/storage.md "Differences, and where they live"); ``m.member_id`` is never NULL.
NOT_ROOT_DIRECTOR = "(f.director_member_id IS NULL OR m.member_id <> f.director_member_id)"


def encode_pane(pane_id: str | None, identity: str | None) -> str | None:
    """The ``mux_pane_id`` column value: ``<pane id> <identity>``, or the bare pane id when
    the identity is unknown (pane ids never contain a space)."""
    return f"{pane_id} {identity}" if pane_id is not None and identity else pane_id


def decode_pane(value: str | None) -> tuple[str | None, str | None]:
    """(pane id, identity or None) from a ``mux_pane_id`` column value (None stays None);
    a value without a space is a placement recorded before identities existed."""
    if value is None:
        return None, None
    pane_id, _, identity = value.partition(" ")
    return pane_id, identity or None


MESSAGE_COLUMNS = "message_id, from_member_id, to_member_id, created_at, status_state, status_timestamp, text"
MESSAGE_KEYS = tuple(MESSAGE_COLUMNS.split(", "))


def member_status(member_id: int, value) -> str:
    if value not in MEMBER_STATUSES:
        raise CorruptRow(
            f"member {member_id} has an unknown status {value!r} in the database "
            f"(expected {' or '.join(MEMBER_STATUSES)}); repair the row or use a newer cafleet."
        )
    return value


def unknown_member_status(store: Store, member_id: int) -> None:
    """Raise for a member already known to carry a status outside MEMBER_STATUSES."""
    row = store.execute("SELECT status FROM members WHERE member_id = ?", (member_id,)).fetchone()
    member_status(member_id, None if row is None else row[0])


def message(row) -> dict:
    """The public message record (never includes notified_at)."""
    record = dict(zip(MESSAGE_KEYS, row))
    if record["status_state"] not in MESSAGE_STATES:
        raise CorruptRow(
            f"message {record['message_id']} has an unknown status_state {record['status_state']!r} in the database "
            f"(expected {' or '.join(MESSAGE_STATES)}); repair the row or use a newer cafleet."
        )
    return record


def has_table(store: Store, name: str, recheck: bool = False) -> bool:
    """Whether the auxiliary table ``name`` exists (the store's answer, which it may
    remember: ``recheck`` asks again)."""
    return bool(store.tables_present([name], recheck))


def rows_by_member(store: Store, table: str, columns: tuple[str, ...], member_ids: list[int]) -> list[tuple]:
    """The rows (``columns``, ``member_id`` first) of the auxiliary ``table`` for those of
    ``member_ids`` that have one; none when the list is empty or the table is absent."""
    if not member_ids or not store.tables_present([table]):
        return []
    marks = ",".join("?" * len(member_ids))
    return store.execute(
        f"SELECT {', '.join(columns)} FROM {table} WHERE member_id IN ({marks})", tuple(member_ids)
    ).fetchall()


def rows_in_fleet(store: Store, table: str, columns: str, fleet_id: int) -> list[tuple]:
    """The rows of ``columns`` (``a.`` the auxiliary ``table``'s, ``m.`` the member's) for
    the members of ``fleet_id`` (any status), by member; none when the table is absent."""
    if not store.tables_present([table]):
        return []
    return store.execute(
        f"SELECT {columns} FROM {table} a JOIN members m ON m.member_id = a.member_id WHERE m.fleet_id = ? "
        "ORDER BY a.member_id",
        (fleet_id,),
    ).fetchall()


def member_with_fleet(store: Store, member_id: int, columns: str, who: str = "member") -> tuple:
    """The row of ``columns`` (``m.`` the member's, ``f.`` its fleet's) for ``member_id``,
    or NotFound naming it as ``who``."""
    row = store.execute(
        f"SELECT {columns} FROM members m JOIN fleets f ON f.fleet_id = m.fleet_id WHERE m.member_id = ?",
        (member_id,),
    ).fetchone()
    if row is None:
        raise NotFound(f"{who} {member_id} not found.")
    return row
