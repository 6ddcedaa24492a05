"""Members: registration (pending or concrete placement), pane-id patch, deregistration,
roster and detail views."""

from __future__ import annotations

from cafleet import clock, validation
from cafleet.broker import activity, fleets, records
from cafleet.broker.records import decode_pane, encode_pane
from cafleet.errors import Conflict, NotFound

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.store.protocol import Store

_MEMBER_SQL = (
    "SELECT m.member_id, m.fleet_id, m.name, m.description, m.status, m.registered_at, m.deregistered_at, "
    "f.director_member_id, f.deleted_at, "
    "p.backend, p.mux_session, p.mux_window_id, p.mux_pane_id, p.coding_agent, p.created_at "
    "FROM members m JOIN fleets f ON f.fleet_id = m.fleet_id "
    "LEFT JOIN member_placements p ON p.member_id = m.member_id "
)


def _decode(row, detail: bool, last: str | None) -> dict:
    (
        member_id,
        fleet_id,
        name,
        description,
        status,
        registered_at,
        deregistered_at,
        director_id,
        _fleet_deleted_at,
        backend,
        session,
        window_id,
        stored_pane,
        coding_agent,
        placed_at,
    ) = row
    pane_id, identity = decode_pane(stored_pane)
    record = {
        "member_id": member_id,
        "name": name,
        "kind": "director" if director_id == member_id else "member",
        "status": records.member_status(member_id, status),
        "backend": backend,
        "coding_agent": coding_agent,
        "pane_id": pane_id,
        "last_activity_at": last,
        "idle_seconds": clock.idle_seconds(last),
    }
    if detail:
        record.update(
            description=description,
            registered_at=registered_at,
            deregistered_at=deregistered_at,
            fleet_id=fleet_id,
            placement=None
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
        )
    return record


def _row(store: Store, member_id: int):
    row = store.execute(_MEMBER_SQL + "WHERE m.member_id = ?", (member_id,)).fetchone()
    if row is None:
        raise NotFound(f"member {member_id} not found.")
    return row


def get_member(store: Store, member_id: int) -> dict:
    """Detail view of one member, deregistered included."""
    return _decode(_row(store, member_id), True, activity.last_activity(store, member_id))


def roster(store: Store, fleet_id: int, *, detail: bool = False) -> list[dict]:
    """Active members of a live fleet, Director first, then by id.

    Rows with a status this version does not know are read too, so that decoding refuses
    them instead of the roster leaving them out in silence. ``detail=True`` gives each
    member's detail record (as :func:`get_member`) from the same single read, for callers
    that inspect panes; :func:`brief` turns one back into the roster record.
    """
    fleets.require_live(store, fleet_id)
    rows = store.execute(
        _MEMBER_SQL + f"WHERE m.fleet_id = ? AND m.{records.NOT_DEREGISTERED} ORDER BY m.member_id", (fleet_id,)
    ).fetchall()
    last = activity.last_activities(store, [row[0] for row in rows])  # one walk for the whole roster
    return [_decode(row, detail, last[row[0]]) for row in rows]


_DETAIL_ONLY = ("description", "registered_at", "deregistered_at", "fleet_id", "placement")


def brief(record: dict) -> dict:
    """The roster record of a detail record (the same keys as ``roster(detail=False)``)."""
    return {key: value for key, value in record.items() if key not in _DETAIL_ONLY}


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
    store: Store,
    member_id: int,
    pane_id: str,
    identity: str | None = None,
    *,
    session: str | None = None,
    window_id: str | None = None,
) -> None:
    """Patch a pending placement with its concrete pane (the caller holds the pane lock);
    ``session``/``window_id`` too when they were only known once the pane existed (a
    member on another host gets a tmux session of its own there)."""
    with store.write():
        updated = store.execute(
            "UPDATE member_placements SET mux_pane_id = ?, mux_session = COALESCE(?, mux_session), "
            "mux_window_id = COALESCE(?, mux_window_id) WHERE member_id = ? AND member_id IN "
            "(SELECT member_id FROM members WHERE status = 'active')",
            (encode_pane(pane_id, identity), session, window_id, member_id),
        ).rowcount
    if not updated:
        raise Conflict(f"member {member_id} is no longer active; its pane was not recorded.")


def check_deletable(store: Store, member_id: int) -> dict:
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
