"""Fleets: bootstrap with the root Director, listing, soft deletion."""

from __future__ import annotations

from cafleet import clock, validation
from cafleet.broker import records
from cafleet.broker.records import encode_pane
from cafleet.errors import Conflict, NotFound

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.broker.records import FleetDeletion, FleetRecord, FleetSummary, MemberPlacement, NewFleet
    from cafleet.store.protocol import Store

DIRECTOR_NAME = "Director"
DIRECTOR_DESCRIPTION = "Root Director of the fleet"
LIST_HINT = "`cafleet fleet list` shows the live fleets."

_FLEET_COLUMNS = (
    "f.fleet_id, f.name, f.director_member_id, "
    "(SELECT count(*) FROM members m WHERE m.fleet_id = f.fleet_id AND m.status = 'active'), "
    "f.created_at, f.deleted_at, "
    # A member whose status this version does not know: one probe of idx_members_fleet_status.
    "(SELECT m.member_id FROM members m WHERE m.fleet_id = f.fleet_id "
    "AND m.status NOT IN ('active', 'deregistered') LIMIT 1)"
)


def _fleet_summary(store: Store, row) -> FleetSummary:
    """A row of _FLEET_COLUMNS as a fleet record without ``deleted_at`` (which a live
    fleet's listing has no use for); a member with an unknown status refuses it."""
    if row[6] is not None:
        records.unknown_member_status(store, row[6])
    return {
        "fleet_id": row[0],
        "name": row[1],
        "director_member_id": row[2],
        "active_members": row[3],
        "created_at": row[4],
    }


def create_fleet(
    store: Store,
    *,
    name: str,
    coding_agent: str,
    backend: str,
    session: str,
    window_id: str,
    pane_id: str,
    identity: str | None = None,
) -> NewFleet:
    """Insert fleet, Director, the Director's placement and the back-filled reference in one commit.

    First, in a transaction of its own, cafleet's auxiliary pending index when the file
    lacks it (a new file's baseline is exactly the seed's tables): every message belongs to
    a fleet, so the first fleet is where it starts to serve (docs/storage.md). A store that
    refuses to create it (a PostgreSQL role that does not own the tables) goes without it;
    a locked or unusable store fails the fleet's own transaction next, with its own line."""
    validation.name(name, "the fleet name")
    from cafleet.errors import DatabaseError
    from cafleet.store.schema import AUX_INDEXES

    # the indexes over the required tables (an auxiliary table's come with that table)
    try:  # noqa: SIM105 - contextlib stays off the hot commands' path
        store.create_auxiliary([name for name, sql in AUX_INDEXES.items() if " ON cafleet_aux_" not in sql])
    except DatabaseError:  # a role that may not create it (it does not own `messages`): slower, not wrong
        pass
    with store.write():
        now = clock.now()
        fleet_id = store.insert(
            "INSERT INTO fleets (name, created_at, deleted_at, director_member_id) VALUES (?, ?, NULL, NULL)",
            (name, now),
            "fleet_id",
        )
        placement = Placement(backend, session, window_id, pane_id, coding_agent, identity)
        member_id = insert_member(store, fleet_id, DIRECTOR_NAME, DIRECTOR_DESCRIPTION, now, placement)
        store.execute("UPDATE fleets SET director_member_id = ? WHERE fleet_id = ?", (member_id, fleet_id))
    return {"fleet_id": fleet_id, "name": name, "director_member_id": member_id, "created_at": now}


class Placement:
    """Where a new member's agent runs: the multiplexer ``backend``, its ``session``,
    ``window_id`` and ``pane_id`` (None while the pane is pending), the ``coding_agent``,
    and the ``identity`` stored with the pane id (``records.encode_pane``)."""

    __slots__ = ("backend", "coding_agent", "identity", "pane_id", "session", "window_id")

    def __init__(
        self,
        backend: str,
        session: str,
        window_id: str,
        pane_id: str | None,
        coding_agent: str,
        identity: str | None = None,
    ) -> None:
        self.backend, self.session, self.window_id = backend, session, window_id
        self.pane_id, self.coding_agent, self.identity = pane_id, coding_agent, identity


def insert_member(store: Store, fleet_id: int, name: str, description: str, now: str, placement: Placement) -> int:
    """Insert an active member and its placement; the caller holds the write transaction.

    The one INSERT of a member, shared by the fleet's bootstrap (its Director) and
    ``members.register_member``; it lives here because members depend on fleets, never
    the other way round (``docs/architecture.md``)."""
    member_id = store.insert(
        "INSERT INTO members (fleet_id, name, description, status, registered_at, deregistered_at) "
        "VALUES (?, ?, ?, 'active', ?, NULL)",
        (fleet_id, name, description, now),
        "member_id",
    )
    store.execute(
        "INSERT INTO member_placements (member_id, mux_session, mux_window_id, mux_pane_id, backend, coding_agent, "
        "created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            member_id,
            placement.session,
            placement.window_id,
            encode_pane(placement.pane_id, placement.identity),
            placement.backend,
            placement.coding_agent,
            now,
        ),
    )
    return member_id


def list_fleets(store: Store) -> list[FleetSummary]:
    rows = store.execute(
        f"SELECT {_FLEET_COLUMNS} FROM fleets f WHERE f.deleted_at IS NULL ORDER BY f.fleet_id"
    ).fetchall()
    return [_fleet_summary(store, row) for row in rows]


# What check_director needs of the Director, as columns a query can join in
# (``f`` the fleet): its fleet, its status and whether it has a placement.
DIRECTOR_COLUMNS = "d.fleet_id, d.status, dp.member_id"
DIRECTOR_JOINS = (
    "LEFT JOIN members d ON d.member_id = f.director_member_id "
    "LEFT JOIN member_placements dp ON dp.member_id = f.director_member_id "
)


def get_fleet(store: Store, fleet_id: int) -> FleetRecord:
    """One fleet, soft-deleted included."""
    row = store.execute(f"SELECT {_FLEET_COLUMNS} FROM fleets f WHERE f.fleet_id = ?", (fleet_id,)).fetchone()
    if row is None:
        raise NotFound(f"fleet {fleet_id} not found.", LIST_HINT)
    return {**_fleet_summary(store, row), "deleted_at": row[5]}


def require_live(store: Store, fleet_id: int) -> int:
    """The fleet's Director (its member id) if the fleet is live: not deleted, and its
    Director is an active member of it with a placement (the seed's definition). Conflict
    otherwise. One statement: the Director is joined in."""
    row = store.execute(
        f"SELECT {_FLEET_COLUMNS}, {DIRECTOR_COLUMNS} FROM fleets f {DIRECTOR_JOINS}WHERE f.fleet_id = ?", (fleet_id,)
    ).fetchone()
    if row is None:
        raise NotFound(f"fleet {fleet_id} not found.", LIST_HINT)
    fleet = _fleet_summary(store, row)  # as get_fleet, a member status this version does not know is refused
    if row[5] is not None:
        raise Conflict(f"fleet {fleet_id} was deleted at {row[5]}; create a new fleet.")
    return refuse_unless_directed(fleet_id, fleet["director_member_id"], row[7:])


def check_director(store: Store, fleet_id: int, director_id: int | None) -> int:
    """``director_id``, if it is an active member of the fleet with a placement; Conflict otherwise."""
    row = None
    if director_id is not None:
        row = store.execute(
            "SELECT m.fleet_id, m.status, p.member_id FROM members m "
            "LEFT JOIN member_placements p ON p.member_id = m.member_id WHERE m.member_id = ?",
            (director_id,),
        ).fetchone()
    return refuse_unless_directed(fleet_id, director_id, row)


def refuse_unless_directed(fleet_id: int, director_id: int | None, row) -> int:
    """:func:`check_director` on a row already read (``DIRECTOR_COLUMNS``; None, or a row of
    NULLs from a join, when the member does not exist)."""
    if director_id is None:
        reason = "it has no Director"
    elif row is None or row[0] != fleet_id:
        reason = f"its Director reference names member {director_id}, who is not in this fleet"
    elif records.member_status(director_id, row[1]) != "active":
        reason = f"its Director, member {director_id}, is deregistered"
    elif row[2] is None:
        reason = f"its Director, member {director_id}, has no placement"
    else:
        return director_id
    raise Conflict(
        f"fleet {fleet_id} is not live: {reason}; it accepts no messages or members.",
        f"`cafleet fleet delete {fleet_id}` retires it.",
    )


def fleet_placements(store: Store, fleet_id: int) -> list[MemberPlacement]:
    """Placements of the fleet's active members other than the root Director (for closing panes)."""
    rows = store.execute(
        "SELECT p.member_id, p.backend, p.mux_session, p.mux_window_id, p.mux_pane_id, p.coding_agent, p.created_at, "
        "m.status "
        "FROM member_placements p JOIN members m ON m.member_id = p.member_id "
        "JOIN fleets f ON f.fleet_id = m.fleet_id "
        f"WHERE m.fleet_id = ? AND m.{records.NOT_DEREGISTERED} AND {records.NOT_ROOT_DIRECTOR} "
        "ORDER BY p.member_id",
        (fleet_id,),
    ).fetchall()
    from cafleet.broker.records import decode_pane

    placements: list[MemberPlacement] = []
    for member_id, backend, session, window_id, stored_pane, coding_agent, created_at, status in rows:
        records.member_status(member_id, status)
        pane_id, identity = decode_pane(stored_pane)
        placements.append(
            {
                "member_id": member_id,
                "backend": backend,
                "session": session,
                "window_id": window_id,
                "pane_id": pane_id,
                "coding_agent": coding_agent,
                "created_at": created_at,
                "identity": identity,
            }
        )
    return placements


def delete_fleet(store: Store, fleet_id: int, closing: list[MemberPlacement] | None = None) -> FleetDeletion:
    """Soft delete: stamp deleted_at, deregister every active member, drop their placements.

    Messages are kept. Idempotent: deleting a deleted fleet deregisters nobody. A member
    whose status this version does not know stops it before anything changes.
    ``closing``, when given, receives the dropped placements of members other than the
    root Director, read in the same transaction (so a member registered meanwhile is there).
    """
    now = clock.now()
    with store.write():
        row = store.execute("SELECT deleted_at FROM fleets WHERE fleet_id = ?", (fleet_id,)).fetchone()
        if row is None:
            raise NotFound(f"fleet {fleet_id} not found.", LIST_HINT)
        unknown = store.execute(
            "SELECT member_id FROM members WHERE fleet_id = ? AND status NOT IN ('active', 'deregistered') LIMIT 1",
            (fleet_id,),
        ).fetchone()
        if unknown is not None:
            records.unknown_member_status(store, unknown[0])
        if closing is not None:
            closing.extend(fleet_placements(store, fleet_id))
        if row[0] is None:
            store.execute("UPDATE fleets SET deleted_at = ? WHERE fleet_id = ?", (now, fleet_id))
        store.execute(
            "DELETE FROM member_placements WHERE member_id IN "
            "(SELECT member_id FROM members WHERE fleet_id = ? AND status = 'active')",
            (fleet_id,),
        )
        count = store.execute(
            "UPDATE members SET status = 'deregistered', deregistered_at = ? WHERE fleet_id = ? AND status = 'active'",
            (now, fleet_id),
        ).rowcount
    return {"fleet_id": fleet_id, "deregistered_count": count}


PLACEMENT_TABLE = "cafleet_aux_fleet_placement"


def set_default_placement(store: Store, fleet_id: int, placement: str) -> None:
    """Where the fleet's members' panes open unless ``member create --placement`` says."""
    store.create_auxiliary([PLACEMENT_TABLE])
    with store.write():
        store.execute(
            f"INSERT INTO {PLACEMENT_TABLE} (fleet_id, placement) VALUES (?, ?) "
            "ON CONFLICT (fleet_id) DO UPDATE SET placement = excluded.placement",
            (fleet_id, placement),
        )


def default_placement(store: Store, fleet_id: int) -> str | None:
    """The fleet's default placement (``fleet create --placement``), or None."""
    if not records.has_table(store, PLACEMENT_TABLE):
        return None
    row = store.execute(f"SELECT placement FROM {PLACEMENT_TABLE} WHERE fleet_id = ?", (fleet_id,)).fetchone()
    return None if row is None else str(row[0])
