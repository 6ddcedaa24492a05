"""Members: registration (pending or concrete placement), pane-id patch, deregistration,
roster and detail views."""

from __future__ import annotations

from cafleet import clock, validation
from cafleet.broker import activity, fleets, records
from cafleet.broker.records import decode_pane, encode_pane
from cafleet.errors import Conflict, NotFound

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.broker.records import MemberBrief, MemberDetail, PlacementRecord
    from cafleet.store.protocol import Store

# A member's row: first what its roster record reads (_brief), then the rest of its
# detail record (_detail).
_MEMBER_SQL = (
    "SELECT m.member_id, m.name, m.status, f.director_member_id, p.backend, p.mux_pane_id, p.coding_agent, "
    "m.fleet_id, m.description, m.registered_at, m.deregistered_at, p.mux_session, p.mux_window_id, p.created_at "
    "FROM members m JOIN fleets f ON f.fleet_id = m.fleet_id "
    "LEFT JOIN member_placements p ON p.member_id = m.member_id "
)


def _brief(row, last: str | None) -> MemberBrief:
    member_id, name, status, director_id, backend, stored_pane, coding_agent = row[:7]
    return {
        "member_id": member_id,
        "name": name,
        "kind": "director" if director_id == member_id else "member",
        "status": records.member_status(member_id, status),
        "backend": backend,
        "coding_agent": coding_agent,
        "pane_id": decode_pane(stored_pane)[0],
        "last_activity_at": last,
        "idle_seconds": clock.idle_seconds(last),
    }


def _detail(row, last: str | None) -> MemberDetail:
    backend, stored_pane, coding_agent = row[4:7]
    fleet_id, description, registered_at, deregistered_at, session, window_id, placed_at = row[7:]
    pane_id, identity = decode_pane(stored_pane)
    return {
        **_brief(row, last),
        "description": description,
        "registered_at": registered_at,
        "deregistered_at": deregistered_at,
        "fleet_id": fleet_id,
        "placement": None
        if backend is None
        else {
            "backend": backend,
            "session": session,
            "window_id": window_id,
            "pane_id": pane_id,
            "identity": identity,
            "coding_agent": coding_agent,
            "created_at": placed_at,
        },
    }


def _row(store: Store, member_id: int):
    row = store.execute(_MEMBER_SQL + "WHERE m.member_id = ?", (member_id,)).fetchone()
    if row is None:
        raise NotFound(f"member {member_id} not found.")
    return row


def get_member(store: Store, member_id: int) -> MemberDetail:
    """Detail view of one member, deregistered included."""
    return _detail(_row(store, member_id), activity.last_activity(store, member_id))


def _roster_rows(store: Store, fleet_id: int) -> tuple[list, dict[int, str | None]]:
    """The rows of a live fleet's members that are not deregistered, by id, and each one's
    last activity (one walk for the whole roster).

    Rows with a status this version does not know are read too, so that decoding refuses
    them instead of the roster leaving them out in silence."""
    fleets.require_live(store, fleet_id)
    rows = store.execute(
        _MEMBER_SQL + f"WHERE m.fleet_id = ? AND m.{records.NOT_DEREGISTERED} ORDER BY m.member_id", (fleet_id,)
    ).fetchall()
    return rows, activity.last_activities(store, [row[0] for row in rows])


def roster(store: Store, fleet_id: int) -> list[MemberBrief]:
    """Active members of a live fleet, Director first, then by id: their roster records."""
    rows, last = _roster_rows(store, fleet_id)
    return [_brief(row, last[row[0]]) for row in rows]


def roster_detail(store: Store, fleet_id: int) -> list[MemberDetail]:
    """The same members as :func:`roster`, each one's detail record (as :func:`get_member`)
    from the same single read, for callers that inspect panes; :func:`brief` turns one
    back into the roster record."""
    rows, last = _roster_rows(store, fleet_id)
    return [_detail(row, last[row[0]]) for row in rows]


def brief(record: MemberDetail) -> MemberBrief:
    """The roster record of a detail record (the same keys as :func:`roster`'s)."""
    return {
        "member_id": record["member_id"],
        "name": record["name"],
        "kind": record["kind"],
        "status": record["status"],
        "backend": record["backend"],
        "coding_agent": record["coding_agent"],
        "pane_id": record["pane_id"],
        "last_activity_at": record["last_activity_at"],
        "idle_seconds": record["idle_seconds"],
    }


def register_member(
    store: Store,
    *,
    fleet_id: int,
    name: str,
    description: str,
    backend: str,
    session: str,
    window_id: str,
    coding_agent: str,
    pane_id: str | None = None,
) -> int:
    """Insert an active member and its placement (pending when ``pane_id`` is None)."""
    validation.name(name, "the member name")
    validation.description(description, "the member description")
    with store.write():
        now = clock.now()
        fleets.require_live(store, fleet_id)
        placement = fleets.Placement(backend, session, window_id, pane_id, coding_agent)
        return fleets.insert_member(store, fleet_id, name, description, now, placement)


def set_pane_id(
    store: Store, member_id: int, pane_id: str, identity: str | None = None, window: tuple[str, str] | None = None
) -> None:
    """Patch a pending placement with its concrete pane (the caller holds the pane lock);
    ``window``, its (session, window id), too when they were only known once the pane
    existed (a member on another host gets a tmux session of its own there)."""
    session, window_id = window or (None, None)
    with store.write():
        updated = store.execute(
            "UPDATE member_placements SET mux_pane_id = ?, mux_session = COALESCE(?, mux_session), "
            "mux_window_id = COALESCE(?, mux_window_id) WHERE member_id = ? AND member_id IN "
            "(SELECT member_id FROM members WHERE status = 'active')",
            (encode_pane(pane_id, identity), session, window_id, member_id),
        ).rowcount
    if not updated:
        raise Conflict(f"member {member_id} is no longer active; its pane was not recorded.")


def move_placement(
    store: Store,
    member_id: int,
    *,
    was: PlacementRecord,
    backend: str,
    session: str,
    window_id: str,
    pane_id: str,
    identity: str | None,
) -> bool:
    """Move an active member's placement from the dead pane ``was`` (its placement record)
    to a new pane (``fleet restore``, ``member revive``): only while the row still names
    ``was``'s pane and session, so of two commands moving it at once one wins. False when
    it changed meanwhile (or the member left)."""
    with store.write():
        moved = store.execute(
            "UPDATE member_placements SET backend = ?, mux_session = ?, mux_window_id = ?, mux_pane_id = ?, "
            "created_at = ? WHERE member_id = ? AND mux_pane_id = ? AND mux_session = ? AND member_id IN "
            "(SELECT member_id FROM members WHERE status = 'active')",
            (
                backend,
                session,
                window_id,
                encode_pane(pane_id, identity),
                clock.now(),
                member_id,
                encode_pane(was["pane_id"], was["identity"]),
                was["session"],
            ),
        ).rowcount
    return bool(moved)


def check_deletable(store: Store, member_id: int) -> MemberDetail:
    """The member's detail, refusing the root Director and inactive members."""
    member = get_member(store, member_id)
    if member["kind"] == "director":
        raise Conflict(
            f"member {member_id} is the root Director of fleet {member['fleet_id']}.",
            f"use `cafleet fleet delete {member['fleet_id']}`.",
        )
    if member["status"] != "active":
        raise Conflict(f"member {member_id} is already deregistered (at {member['deregistered_at']}).")
    return member


def count_besides_director(store: Store, fleet_id: int) -> int:
    """How many active members the fleet has other than its Director (pending ones included:
    a member being created counts from its registration)."""
    row = store.execute(
        "SELECT count(*) FROM members m JOIN fleets f ON f.fleet_id = m.fleet_id "
        "WHERE m.fleet_id = ? AND m.status = 'active' AND m.member_id != f.director_member_id",
        (fleet_id,),
    ).fetchone()
    return int(row[0])


def deregister_member(store: Store, member_id: int) -> bool:
    """Deregister and drop the placement; messages stay. The root Director is protected.

    Returns False when the member was already deregistered (idempotent for compensation).
    """
    with store.write():
        columns = "m.status, f.director_member_id, m.fleet_id"
        status, director_id, fleet_id = records.member_with_fleet(store, member_id, columns)
        if director_id == member_id:
            raise Conflict(
                f"member {member_id} is the root Director of fleet {fleet_id}.",
                f"use `cafleet fleet delete {fleet_id}`.",
            )
        if records.member_status(member_id, status) != "active":
            return False
        store.execute("DELETE FROM member_placements WHERE member_id = ?", (member_id,))
        store.execute(
            "UPDATE members SET status = 'deregistered', deregistered_at = ? WHERE member_id = ?",
            (clock.now(), member_id),
        )
    return True
