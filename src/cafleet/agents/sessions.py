"""Which of its agent's own sessions a member resumes when it is started again (``fleet
restore``, ``member revive``; docs/delivery.md, "A fleet outlives its panes").

A leaf, like :mod:`cafleet.agents.usage`, whose finding of a member's records it reuses
(:mod:`cafleet.agents.usage.codex`, :mod:`cafleet.agents.usage.opencode`):

* claude: the session id cafleet chose at creation (``--session-id``), kept in the database;
  nothing is read from claude's folder.
* codex: the member's first rollout (``$CODEX_HOME/sessions/…/rollout-*.jsonl``, written
  since the spawn, whose first user message carries the member's identity lines): the
  session id its ``session_meta`` line (or else its file name) holds.
* opencode: the member's first root session in its ``opencode.db`` (agent ``cafleet``, its
  pane's folder, created since the spawn, its first prompt carrying the identity lines).

For codex and opencode the first one found is kept in the database (:func:`cafleet.broker.
spawns.pin_session`), normally by the keeper seconds after the spawn: a session another
process writes later into the same folder never replaces it. What a process of the same
Unix user could still do to those folders is in docs/security.md.
"""

from __future__ import annotations

import json
import os
import re

UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
OPENCODE_ID = re.compile(r"ses_[0-9A-Za-z]{6,64}")


def codex_session(codex_home: str, *, started_at: str, fleet_id: int, member_id: int) -> str | None:
    """The session id of the member's first rollout, or None (no rollout found yet)."""
    from cafleet.agents.usage.codex import codex_rollouts

    found = []
    for path in codex_rollouts(codex_home, started_at=started_at, fleet_id=fleet_id, member_id=member_id):
        session, stamp = _rollout_session(path)
        if session is not None:
            found.append((stamp, os.path.basename(path), session))
    return min(found)[2] if found else None


def _rollout_session(path: str) -> tuple[str | None, str]:
    """(session id, its start as the rollout says) from a rollout's first line, else its name."""
    try:
        with open(path, "rb") as handle:
            first = handle.readline(1 << 20)
        meta = json.loads(first)
        payload = meta.get("payload") if meta.get("type") == "session_meta" else None
        session = payload.get("id") if isinstance(payload, dict) else None
        stamp = payload.get("timestamp") if isinstance(payload, dict) else None
        if isinstance(session, str) and UUID.fullmatch(session):
            return session, stamp if isinstance(stamp, str) else ""
    except (OSError, ValueError, AttributeError, RecursionError):
        pass
    named = UUID.findall(os.path.basename(path))
    return (named[-1], "") if named else (None, "")


def opencode_session(data_folder: str, *, cwd: str, started_at: str, fleet_id: int, member_id: int) -> str | None:
    """The id of the member's first root opencode session, or None (none found yet)."""
    from cafleet.agents.usage.opencode import member_rows

    rows = member_rows(
        data_folder,
        "SELECT s.id FROM session s JOIN mine ON s.id = mine.id "
        "WHERE s.parent_id IS NULL ORDER BY s.time_created, s.id LIMIT 1",
        cwd=cwd,
        started_at=started_at,
        fleet_id=fleet_id,
        member_id=member_id,
    )
    session = rows[0][0] if rows else None
    return session if isinstance(session, str) and OPENCODE_ID.fullmatch(session) else None


def valid(agent: str, session: str | None) -> bool:
    """Whether ``session`` has the form ``agent``'s session ids have (what goes on its command line)."""
    if not session:
        return False
    if agent in ("claude", "codex"):
        return UUID.fullmatch(session) is not None
    if agent == "opencode":
        return OPENCODE_ID.fullmatch(session) is not None
    return False
