"""The rows that tie a member to its coding agent's own usage records, and its budgets
(the auxiliary table ``cafleet_aux_member_usage_sources``; docs/usage.md).

The table is cafleet's own, outside the format: a file made without it (by an older
cafleet or another implementation) works for every command; its members simply have no
attribution until ``cafleet setup`` adds the table and new members are created.
"""

from __future__ import annotations

from cafleet import clock

TABLE = "cafleet_aux_member_usage_sources"
_COLUMNS = ("member_id", "coding_agent", "session_id", "data_dir", "cwd", "started_at", "budget_usd", "budget_tokens")


def has_table(store) -> bool:
    return store.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (TABLE,)).fetchone() is not None


def record_source(store, member_id: int, *, coding_agent: str, session_id: str | None, data_dir: str | None,
                  cwd: str) -> bool:
    """Remember where ``member_id``'s agent writes its usage; False when the file has no
    table for it (nothing is written then)."""
    if not has_table(store):
        return False
    with store.write():
        store.execute(
            f"INSERT OR REPLACE INTO {TABLE} (member_id, coding_agent, session_id, data_dir, cwd, started_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (member_id, coding_agent, session_id, data_dir, cwd, clock.now()),
        )
    return True


def sources(store, member_ids: list[int]) -> dict[int, dict]:
    """``{member_id: source row}`` for those of ``member_ids`` that have one."""
    if not member_ids or not has_table(store):
        return {}
    marks = ",".join("?" * len(member_ids))
    rows = store.execute(f"SELECT {', '.join(_COLUMNS)} FROM {TABLE} WHERE member_id IN ({marks})",
                         tuple(member_ids)).fetchall()
    return {row[0]: dict(zip(_COLUMNS, row)) for row in rows}


def fleet_members(store, fleet_id: int) -> list[dict]:
    """Every member the fleet ever had (deregistered ones spent too), by id, with its
    agent: ``[{"member_id", "name", "status", "coding_agent"}]``. An unknown fleet is
    refused as ``fleet show`` refuses it."""
    from cafleet.broker import fleets

    fleets.get_fleet(store, fleet_id)
    rows = store.execute(
        "SELECT m.member_id, m.name, m.status, p.coding_agent FROM members m "
        "LEFT JOIN member_placements p ON p.member_id = m.member_id WHERE m.fleet_id = ? ORDER BY m.member_id",
        (fleet_id,),
    ).fetchall()
    return [{"member_id": r[0], "name": r[1], "status": r[2], "coding_agent": r[3]} for r in rows]
