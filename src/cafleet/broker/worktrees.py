"""The records of members' git worktrees and of fleets whose members get one by default
(the auxiliary tables ``cafleet_aux_member_worktrees`` and ``cafleet_aux_fleet_worktrees``;
docs/worktrees.md). Persistence only: the git commands are :mod:`cafleet.delivery.worktrees`.

Like every auxiliary table, each is created by the first write that needs it, in a
transaction of its own, and every read works on a database without it (no member has a
worktree). A row is written *before* ``git worktree add`` runs (status ``adding``), so a
crash at any point leaves either nothing in git or a record that names what git holds.
Rows are never deleted: a removed worktree keeps its row (status ``removed``), so its
path is never given to another member (``path`` is UNIQUE).
"""

from __future__ import annotations

from cafleet import clock
from cafleet.broker import records

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.store.protocol import Store

TABLE = "cafleet_aux_member_worktrees"
FLEET_TABLE = "cafleet_aux_fleet_worktrees"
COLUMNS = ("member_id", "repo", "path", "branch", "base", "base_commit", "status", "created_at", "removed_at", "host")
ADDING, READY, KEPT, REMOVED = "adding", "ready", "kept", "removed"


def record(
    store: Store,
    member_id: int,
    *,
    repo: str,
    path: str,
    branch: str,
    base: str,
    base_commit: str,
    host: str | None = None,
) -> None:
    """Record the worktree about to be added for ``member_id`` (status ``adding``). A path
    some member ever had is refused by the table's UNIQUE constraint; the caller checks
    first, so that is only a race with another creation."""
    from cafleet.errors import Conflict

    store.create_auxiliary([TABLE])
    with store.write():
        taken = store.execute(f"SELECT member_id FROM {TABLE} WHERE path = ?", (path,)).fetchone()
        if taken is not None:
            raise Conflict(f"the worktree path {path} was member {taken[0]}'s; a worktree is never reused.")
        store.execute(
            f"INSERT INTO {TABLE} ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})",
            (member_id, repo, path, branch, base, base_commit, ADDING, clock.now(), None, host),
        )


def set_status(store: Store, member_id: int, status: str) -> None:
    with store.write():
        store.execute(
            f"UPDATE {TABLE} SET status = ?, removed_at = ? WHERE member_id = ?",
            (status, clock.now() if status == REMOVED else None, member_id),
        )


def public(row: dict | None) -> dict | None:
    """The form ``member show``/``list`` and the WebUI give a worktree row."""
    if row is None:
        return None
    keys = ("path", "branch", "base", "base_commit", "status", "created_at", "removed_at", "host")
    return {key: row[key] for key in keys}


def _row(row) -> dict:
    return dict(zip(COLUMNS, row))


def get(store: Store, member_id: int) -> dict | None:
    if not records.has_table(store, TABLE):
        return None
    row = store.execute(f"SELECT {', '.join(COLUMNS)} FROM {TABLE} WHERE member_id = ?", (member_id,)).fetchone()
    return None if row is None else _row(row)


def for_members(store: Store, member_ids: list[int]) -> dict[int, dict]:
    """``{member_id: worktree row}`` for those of ``member_ids`` that have one."""
    from cafleet.broker.records import rows_by_member

    return {row[0]: _row(row) for row in rows_by_member(store, TABLE, COLUMNS, member_ids)}


def in_fleet(store: Store, fleet_id: int) -> list[dict]:
    """The worktree rows of the fleet's members (any status), with the member's status."""
    from cafleet.broker.records import rows_in_fleet

    rows = rows_in_fleet(store, TABLE, f"{', '.join('a.' + c for c in COLUMNS)}, m.status", fleet_id)
    return [dict(_row(row[:-1]), member_status=row[-1]) for row in rows]


def outstanding(store: Store) -> list[dict]:
    """Every worktree not removed, with its member's status and fleet (for ``doctor``)."""
    if not records.has_table(store, TABLE):
        return []
    rows = store.execute(
        f"SELECT {', '.join('w.' + c for c in COLUMNS)}, m.status, m.fleet_id FROM {TABLE} w "
        f"JOIN members m ON m.member_id = w.member_id WHERE w.status != ? ORDER BY w.member_id",
        (REMOVED,),
    ).fetchall()
    return [dict(_row(row[:-2]), member_status=row[-2], fleet_id=row[-1]) for row in rows]


def all_paths(store: Store) -> set[str]:
    """Every path a worktree of this machine (no host) ever had."""
    if not records.has_table(store, TABLE):
        return set()
    return {row[0] for row in store.execute(f"SELECT path FROM {TABLE} WHERE host IS NULL").fetchall()}


def set_fleet_default(store: Store, fleet_id: int, worktrees: bool) -> None:
    store.create_auxiliary([FLEET_TABLE])
    with store.write():
        store.execute(
            f"INSERT INTO {FLEET_TABLE} (fleet_id, worktrees) VALUES (?, ?) "
            "ON CONFLICT (fleet_id) DO UPDATE SET worktrees = excluded.worktrees",
            (fleet_id, 1 if worktrees else 0),
        )


def fleet_default(store: Store, fleet_id: int) -> bool:
    """Whether the fleet's members get a worktree when ``member create`` does not say."""
    if not records.has_table(store, FLEET_TABLE):
        return False
    row = store.execute(f"SELECT worktrees FROM {FLEET_TABLE} WHERE fleet_id = ?", (fleet_id,)).fetchone()
    return bool(row and row[0])
