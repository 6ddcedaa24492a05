"""The rows that tie a member to its coding agent's own usage records, and its budgets
(the auxiliary table ``cafleet_aux_member_usage_sources``), and each member's usage as
last read (``cafleet_aux_member_usage_totals``, the stored totals; docs/usage.md).

The table is cafleet's own, outside the format, on both stores, and never part of a new
database's baseline: the first write that needs it (``member create`` recording a source,
``fleet budget`` setting a fleet's budget) creates it in a transaction of its own. Every
read works on a database without it (made by another implementation, or where no member
was created yet): its members simply have no attribution. Each query is written once for both engines (upserts as ``ON CONFLICT ... DO
UPDATE``, which both read alike; docs/storage.md "Differences, and where they live").
"""

from __future__ import annotations

from cafleet import clock
from cafleet.broker import records

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.store.protocol import Store

TABLE = "cafleet_aux_member_usage_sources"
FLEET_TABLE = "cafleet_aux_fleet_budgets"
TOTALS_TABLE = "cafleet_aux_member_usage_totals"
_COLUMNS = ("member_id", "coding_agent", "session_id", "data_dir", "cwd", "started_at", "budget_usd", "budget_tokens")
_UPSERT_SOURCE = (
    f"INSERT INTO {TABLE} ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))}) "
    "ON CONFLICT (member_id) DO UPDATE SET " + ", ".join(f"{c} = excluded.{c}" for c in _COLUMNS[1:])
)


def record_source(
    store: Store,
    member_id: int,
    *,
    coding_agent: str,
    session_id: str | None,
    data_dir: str | None,
    cwd: str,
    budget_usd: float | None = None,
    budget_tokens: int | None = None,
) -> None:
    """Remember where ``member_id``'s agent writes its usage, and its budgets (the table
    is created first, in a transaction of its own, when the database has none yet)."""
    store.create_auxiliary([TABLE, TOTALS_TABLE])
    with store.write():
        store.execute(
            _UPSERT_SOURCE,
            (member_id, coding_agent, session_id, data_dir, cwd, clock.now(), budget_usd, budget_tokens),
        )


def sources(store: Store, member_ids: list[int]) -> dict[int, dict]:
    """``{member_id: source row}`` for those of ``member_ids`` that have one."""
    from cafleet.broker.records import rows_by_member

    return {row[0]: dict(zip(_COLUMNS, row)) for row in rows_by_member(store, TABLE, _COLUMNS, member_ids)}


def fleet_members(store: Store, fleet_id: int) -> list[dict]:
    """Every member the fleet ever had (deregistered ones spent too), by id, with its
    agent: ``[{"member_id", "name", "status", "coding_agent"}]``. An unknown fleet is
    refused as ``fleet show`` refuses it."""
    from cafleet.broker import fleets

    fleets.get_fleet(store, fleet_id)
    from cafleet.broker.records import decode_pane

    rows = store.execute(
        "SELECT m.member_id, m.name, m.status, p.coding_agent, p.backend, p.mux_pane_id FROM members m "
        "LEFT JOIN member_placements p ON p.member_id = m.member_id WHERE m.fleet_id = ? ORDER BY m.member_id",
        (fleet_id,),
    ).fetchall()
    return [
        {
            "member_id": r[0],
            "name": r[1],
            "status": r[2],
            "coding_agent": r[3],
            "backend": r[4],
            "identity": decode_pane(r[5])[1],
        }
        for r in rows
    ]


_HOLDS = "' ' || {0}.session_id || ' ' LIKE '% ' || ? || ' %'"  # session ids hold no LIKE wildcards


def add_session(store: Store, member_id: int, session_id: str) -> None:
    """Remember one more claude session of the member (after ``/clear``): the
    ``session_id`` column holds the member's session ids, space-separated, oldest first.
    A session another member holds is never added (a session is one member's)."""
    with store.write():
        store.execute(
            f"UPDATE {TABLE} SET session_id = session_id || ' ' || ? WHERE member_id = ? "
            f"AND NOT ({_HOLDS.format(TABLE)}) "
            f"AND NOT EXISTS (SELECT 1 FROM {TABLE} o WHERE o.member_id != ? AND {_HOLDS.format('o')})",
            (session_id, member_id, session_id, member_id, session_id),
        )


def session_holder(store: Store, session_id: str, *, besides: int) -> int | None:
    """The member other than ``besides`` whose row holds ``session_id``, or None."""
    row = store.execute(
        f"SELECT o.member_id FROM {TABLE} o WHERE o.member_id != ? AND {_HOLDS.format('o')}",
        (besides, session_id),
    ).fetchone()
    return None if row is None else row[0]


def previews_are_for(store: Store, member_id: int, previews: list[tuple[int, int]]) -> bool:
    """Whether every ``(message id, sender id)`` names a stored message from that sender
    to ``member_id`` (the previews a session's transcript begins turns with)."""
    from cafleet.validation import MAX_ID

    wanted = {(message, sender) for message, sender in previews}
    ids = sorted({message for message, _ in wanted if 0 < message <= MAX_ID})
    if not ids or len(ids) != len(wanted):
        return False
    rows = store.execute(
        f"SELECT message_id, from_member_id, to_member_id FROM messages WHERE message_id IN ({','.join('?' * len(ids))})",
        tuple(ids),
    ).fetchall()
    return len(rows) == len(ids) and all((row[0], row[1]) in wanted and row[2] == member_id for row in rows)


def budgets_for_send(store: Store, member_id: int) -> dict | None:
    """The budgets that may refuse a send to ``member_id``: ``{"member": (usd, tokens) or
    None, "fleet": (fleet_id, usd, tokens) or None}``, or None when neither is set. On
    the send path: which auxiliary tables exist (a PostgreSQL store knows from its
    diagnosis) and one query joining the member to each that does (primary-key lookups);
    a database without them costs only the first."""
    names = store.tables_present([TABLE, FLEET_TABLE])
    if not names:
        return None
    columns, joins = ["NULL", "NULL"], ""
    if TABLE in names:
        columns = ["s.budget_usd", "s.budget_tokens"]
        joins += f" LEFT JOIN {TABLE} s ON s.member_id = m.member_id"
    if FLEET_TABLE in names:  # the Director is never refused
        columns += ["b.fleet_id", "b.budget_usd", "b.budget_tokens"]
        joins += (
            f" JOIN fleets f ON f.fleet_id = m.fleet_id LEFT JOIN {FLEET_TABLE} b ON b.fleet_id = m.fleet_id "
            "AND (f.director_member_id IS NULL OR f.director_member_id != m.member_id)"
        )
    else:
        columns += ["NULL", "NULL", "NULL"]
    row = store.execute(
        f"SELECT {', '.join(columns)} FROM members m{joins} WHERE m.member_id = ?", (member_id,)
    ).fetchone()
    if row is None:
        return None
    mine = (row[0], row[1]) if row[0] is not None or row[1] is not None else None
    fleet = (row[2], row[3], row[4]) if row[3] is not None or row[4] is not None else None
    return {"member": mine, "fleet": fleet} if mine or fleet else None


# -- stored totals ------------------------------------------------------------------------


def stored_totals(store: Store, member_ids: list[int]) -> dict[int, tuple[str, str, str]]:
    """``{member_id: (totals, state, updated_at)}`` (JSON text as stored) for those of
    ``member_ids`` whose usage was read; none without the table."""
    from cafleet.broker.records import rows_by_member

    rows = rows_by_member(store, TOTALS_TABLE, ("member_id", "totals", "state", "updated_at"), member_ids)
    return {row[0]: (row[1], row[2], row[3]) for row in rows}


def spent_totals(store: Store, member_id: int | None = None, fleet_id: int | None = None) -> list[tuple]:
    """The budget gate's one query: ``[(member_id, coding_agent, totals JSON or None)]``
    for the member (primary key) or for every member of the fleet that has a usage source
    (``idx_members_fleet_status``, then primary keys); None where it was never read. Which
    tables exist is asked first (PostgreSQL knows from its diagnosis)."""
    tables = store.tables_present([TABLE, TOTALS_TABLE])
    if TABLE not in tables:
        return []
    where = "s.member_id = ?" if member_id is not None else "m.fleet_id = ?"
    totals, join = (
        ("t.totals", f" LEFT JOIN {TOTALS_TABLE} t ON t.member_id = m.member_id")
        if TOTALS_TABLE in tables
        else ("NULL", "")
    )
    return store.execute(
        f"SELECT s.member_id, s.coding_agent, {totals} FROM members m JOIN {TABLE} s ON s.member_id = m.member_id"
        f"{join} WHERE {where}",
        (member_id if member_id is not None else fleet_id,),
    ).fetchall()


def save_totals(store: Store, member_id: int, totals: str, state: str) -> None:
    """Store a member's usage as just read (JSON text), replacing the last; the table is
    created first, in a transaction of its own, when the database has none yet."""
    store.create_auxiliary([TOTALS_TABLE])
    with store.write():
        store.execute(
            f"INSERT INTO {TOTALS_TABLE} (member_id, updated_at, totals, state) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (member_id) DO UPDATE SET updated_at = excluded.updated_at, totals = excluded.totals, "
            "state = excluded.state",
            (member_id, clock.now(), totals, state),
        )


def sourced_members(store: Store, fleet_id: int) -> list[int]:
    """The fleet's members (deregistered ones too: their files may still grow) whose usage
    is read: those with a usage source. One query; none without the table."""
    from cafleet.broker.records import rows_in_fleet

    return [row[0] for row in rows_in_fleet(store, TABLE, "a.member_id", fleet_id)]


def set_fleet_budget(store: Store, fleet_id: int, usd: float | None, tokens: int | None) -> None:
    """Set a live fleet's budget in dollars and/or tokens, keeping the one given as None
    (the options' default: unchanged); with both None, clear it. The budget table is
    created first, in a transaction of its own, when the database has none yet."""
    from cafleet.broker import fleets

    fleets.require_live(store, fleet_id)
    if usd is None and tokens is None and not records.has_table(store, FLEET_TABLE):
        return  # nothing to clear
    store.create_auxiliary([FLEET_TABLE, TOTALS_TABLE])
    with store.write():
        if usd is None and tokens is None:
            store.execute(f"DELETE FROM {FLEET_TABLE} WHERE fleet_id = ?", (fleet_id,))
        else:
            store.execute(
                f"INSERT INTO {FLEET_TABLE} (fleet_id, budget_usd, budget_tokens) VALUES (?, ?, ?) "
                f"ON CONFLICT (fleet_id) DO UPDATE SET budget_usd = COALESCE(excluded.budget_usd, {FLEET_TABLE}.budget_usd), "
                f"budget_tokens = COALESCE(excluded.budget_tokens, {FLEET_TABLE}.budget_tokens)",
                (fleet_id, usd, tokens),
            )


def fleet_budget(store: Store, fleet_id: int) -> tuple | None:
    """``(usd, tokens)`` of the fleet's budget, or None."""
    if not records.has_table(store, FLEET_TABLE):
        return None
    row = store.execute(
        f"SELECT budget_usd, budget_tokens FROM {FLEET_TABLE} WHERE fleet_id = ?", (fleet_id,)
    ).fetchone()
    return None if row is None else (row[0], row[1])


def capped_members(store: Store, fleet_id: int) -> set[int]:
    """The active members of the fleet that have a budget of their own."""
    if not records.has_table(store, TABLE):
        return set()
    rows = store.execute(
        f"SELECT s.member_id FROM {TABLE} s JOIN members m ON m.member_id = s.member_id "
        "WHERE m.fleet_id = ? AND m.status = 'active' AND (s.budget_usd IS NOT NULL OR s.budget_tokens IS NOT NULL)",
        (fleet_id,),
    ).fetchall()
    return {row[0] for row in rows}
