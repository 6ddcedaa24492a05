"""What a member was started with, so that it can be started again (``fleet restore``,
``member revive``; docs/delivery.md, "A fleet outlives its panes"): the auxiliary tables
``cafleet_aux_member_spawns`` and ``cafleet_aux_fleet_revive``. Persistence only: the
panes are :mod:`cafleet.delivery.restore`.

A spawn row is written by ``member create`` before the member's pane opens: its model and
effort, the spawn prompt as given (the template: it is rendered again for the same ids),
the folder its pane started in (NULL: a host's own default) and, once known, the session
of its agent that a restore resumes (``session_id``; claude's is chosen by cafleet at
creation, codex's and opencode's are read from the agent's own records the first time they
are looked for, and kept: a session found later never replaces it). ``revivals`` holds the
times the keeper revived the member in the last hour (JSON), for its limit and backoff.

Like every auxiliary table, each is created by the first write that needs it, and every
read works on a database without it (a member created before it existed is restored with
cafleet's default spawn prompt, and says so).
"""

from __future__ import annotations

from cafleet.broker import records

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.store.protocol import Store

TABLE = "cafleet_aux_member_spawns"
FLEET_TABLE = "cafleet_aux_fleet_revive"
COLUMNS = ("member_id", "model", "effort", "prompt", "cwd", "session_id", "revivals")


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
            (member_id, model, effort, prompt, cwd, session_id, "[]"),
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


def set_revivals(store: Store, member_id: int, times: list[str]) -> None:
    """The times the keeper revived the member in the last hour (oldest first)."""
    import json

    with store.write():
        store.execute(f"UPDATE {TABLE} SET revivals = ? WHERE member_id = ?", (json.dumps(times), member_id))


def revivals(row: dict | None) -> list[str]:
    """The revival times a spawn row holds (an unreadable value: none)."""
    import json

    try:
        times = json.loads((row or {}).get("revivals") or "[]")
    except ValueError:
        return []
    return [t for t in times if isinstance(t, str)] if isinstance(times, list) else []


def set_fleet_revive(store: Store, fleet_id: int, per_hour: int) -> None:
    """Let the keeper revive the fleet's members whose agent died, ``per_hour`` times an hour
    each at most (0: never)."""
    store.create_auxiliary([FLEET_TABLE])
    with store.write():
        store.execute(f"DELETE FROM {FLEET_TABLE} WHERE fleet_id = ?", (fleet_id,))
        store.execute(f"INSERT INTO {FLEET_TABLE} (fleet_id, per_hour) VALUES (?, ?)", (fleet_id, per_hour))


def fleet_revive(store: Store, fleet_id: int) -> int:
    """How many times an hour the keeper may revive each of the fleet's members (0: never)."""
    if not records.has_table(store, FLEET_TABLE):
        return 0
    row = store.execute(f"SELECT per_hour FROM {FLEET_TABLE} WHERE fleet_id = ?", (fleet_id,)).fetchone()
    return 0 if row is None else int(row[0])
