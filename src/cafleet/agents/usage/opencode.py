"""opencode's records (docs/usage.md): ``<data dir>/opencode.db``, opened read-only, its
table ``session`` (see :func:`opencode_usage`), and the member's sessions there
(:func:`member_rows`), which ``fleet restore`` and the preview lookups ask the same way.
"""

from __future__ import annotations

import json
import os

from cafleet.agents.usage.totals import MAX_NAME, Unreadable, Usage, millis, read_count, read_dollars

# The member's sessions as a query's head: table ``mine`` holds the ids of its root sessions
# (parameters: its pane's cwd, its spawn in milliseconds, :func:`member_identity`) and
# of all their descendants; the query that follows joins it.
MEMBER_SESSIONS = (
    "WITH RECURSIVE mine(id) AS ("
    "  SELECT s.id FROM session s WHERE s.directory = ? AND s.agent = 'cafleet' AND s.parent_id IS NULL"
    "  AND s.time_created >= ? AND EXISTS (SELECT 1 FROM part p WHERE p.session_id = s.id AND p.data LIKE ?)"
    "  UNION SELECT c.id FROM session c JOIN mine ON c.parent_id = mine.id) "
)


def member_identity(fleet_id: int, member_id: int) -> str:
    """The identity lines of cafleet.agents.prompt.render_spawn_prompt, as a LIKE pattern
    for the JSON string that stores the spawn prompt."""
    return f"%- fleet id: {int(fleet_id)}\\n- your member id: {int(member_id)}\\n%"


def database(data_folder: str) -> str:
    """opencode's database in its data folder."""
    return os.path.join(data_folder, "opencode.db")


def member_rows(
    data_folder: str, select: str, more: tuple = (), *, cwd: str, started_at: str, fleet_id: int, member_id: int
) -> list[tuple] | None:
    """The rows of ``select`` (a query that joins ``mine``, the member's sessions:
    :data:`MEMBER_SESSIONS`; ``more``, its own parameters) in the member's opencode
    database, opened read-only. None when there is no database; no rows when it cannot be
    opened or its tables differ from opencode 1.18's (nothing is guessed, docs/usage.md)."""
    import sqlite3
    from urllib.parse import quote

    path = database(data_folder)
    if not os.path.isfile(path):
        return None
    try:
        conn = sqlite3.connect(f"file:{quote(path)}?mode=ro", uri=True, timeout=5.0)
    except sqlite3.Error:
        return []
    try:
        return conn.execute(
            MEMBER_SESSIONS + select, (cwd, millis(started_at), member_identity(fleet_id, member_id), *more)
        ).fetchall()
    except sqlite3.Error:
        return []
    finally:
        conn.close()


def opencode_usage(
    data_folder: str, *, cwd: str, started_at: str, fleet_id: int, member_id: int
) -> tuple[Usage, list[str]]:
    """The member's usage in ``<data folder>/opencode.db``, opened read-only.

    Its sessions: the root sessions of agent ``cafleet`` in ``cwd`` created at or after
    ``started_at`` whose first prompt carries the member's identity lines (the spawn
    prompt names its fleet and member id, so two members in one directory never mix),
    and all their descendants (subagents; a parent's totals leave its children out).
    Dollars are opencode's own (``cost``); calls are its ``step-finish`` parts.
    """
    total = Usage()
    rows = member_rows(
        data_folder,
        "SELECT s.model, s.cost, s.tokens_input, s.tokens_cache_write, s.tokens_cache_read, "
        "s.tokens_output + s.tokens_reasoning, "
        "(SELECT count(*) FROM part p WHERE p.session_id = s.id AND json_extract(p.data, '$.type') = 'step-finish') "
        "FROM session s JOIN mine ON s.id = mine.id",
        cwd=cwd,
        started_at=started_at,
        fleet_id=fleet_id,
        member_id=member_id,
    )
    if rows is None:
        return total, []
    for model, cost, tokens_in, write, read, out, calls in rows:
        try:
            name = json.loads(model).get("id") if model else None
        except (ValueError, TypeError, AttributeError, RecursionError):
            name = None
        if not calls and not (tokens_in or out):
            continue
        try:
            tokens = {
                "input": read_count(tokens_in),
                "cache_write": read_count(write),
                "cache_read": read_count(read),
                "output": read_count(out),
            }
            usd = read_dollars(cost)
        except Unreadable:
            total.unreadable += 1
            continue
        model_name = name if type(name) is str and 0 < len(name) <= MAX_NAME else "unknown"
        total.add(model_name, tokens, usd=usd, calls=int(calls or 0))
    return total, [database(data_folder)]
