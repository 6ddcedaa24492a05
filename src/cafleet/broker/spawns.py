"""What a member was started with, so that it can be started again (``fleet restore``,
``member revive``; docs/delivery.md, "A fleet outlives its panes"): the auxiliary table
``cafleet_aux_member_spawns``. Persistence only: the panes are
:mod:`cafleet.delivery.spawning.restore`.

A spawn row is written by ``member create`` before the member's pane opens: its model and
effort, the spawn prompt as given (the template: it is rendered again for the same ids),
the folder its pane started in (NULL: a host's own default) and, once known, the session
of its agent that a restore resumes (``session_id``; claude's is chosen by cafleet at
creation, codex's and opencode's are read from the agent's own records the first time they
are looked for, and kept: a session found later never replaces it).

Like every auxiliary table, it is created by the first write that needs it, and every
read works on a database without it (a member created before it existed is restored with
cafleet's default spawn prompt, and says so).
"""

from __future__ import annotations

from cafleet.broker import records

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.store.protocol import Store

TABLE = "cafleet_aux_member_spawns"
COLUMNS = ("member_id", "model", "effort", "prompt", "cwd", "session_id")


def record(
    store: Store,
    member_id: int,
    *,
    model: str | None,
    effort: str | None,
    prompt: str,
    cwd: str | None,
    session_id: str | None,
) -> None:
    """Remember what ``member_id`` is started with (before its pane opens)."""
    store.create_auxiliary([TABLE])
    with store.write():
        store.execute(f"DELETE FROM {TABLE} WHERE member_id = ?", (member_id,))
        store.execute(
            f"INSERT INTO {TABLE} ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})",
            (member_id, model, effort, prompt, cwd, session_id),
        )


def get(store: Store, member_id: int) -> dict | None:
    """The member's spawn row, or None (no table, or a member created before it existed)."""
    if not records.has_table(store, TABLE):
        return None
    row = store.execute(f"SELECT {', '.join(COLUMNS)} FROM {TABLE} WHERE member_id = ?", (member_id,)).fetchone()
    return None if row is None else dict(zip(COLUMNS, row))


def pin_session(store: Store, member_id: int, session_id: str) -> str:
    """Keep ``session_id`` as the member's session unless one is kept already; the one kept."""
    with store.write():
        store.execute(
            f"UPDATE {TABLE} SET session_id = ? WHERE member_id = ? AND session_id IS NULL", (session_id, member_id)
        )
        row = store.execute(f"SELECT session_id FROM {TABLE} WHERE member_id = ?", (member_id,)).fetchone()
    return session_id if row is None or row[0] is None else row[0]


def unpinned(store: Store, fleet_id: int, agents: tuple[str, ...]) -> list[tuple[int, str]]:
    """(member id, agent) of the fleet's active members of ``agents`` whose session is not
    kept yet."""
    if not records.has_table(store, TABLE):
        return []
    rows = store.execute(  # CROSS JOIN: SQLite walks the fleet's members first, by their index
        f"SELECT sp.member_id, p.coding_agent FROM members m CROSS JOIN {TABLE} sp CROSS JOIN member_placements p "
        "WHERE m.fleet_id = ? AND m.status = 'active' AND sp.member_id = m.member_id AND p.member_id = m.member_id "
        f"AND sp.session_id IS NULL AND p.coding_agent IN ({', '.join('?' * len(agents))})",
        (fleet_id, *agents),
    ).fetchall()
    return [(row[0], row[1]) for row in rows]
