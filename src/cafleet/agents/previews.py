"""The cafleet previews an agent's own records show it took (docs/delivery.md, docs/usage.md):
the previews that begin user turns in a claude session's transcript, which tie a session a
member began with ``/clear`` to that member, and whether opencode recorded a preview as a
user message, which tells a retry that the preview was delivered.

A leaf, like the usage readers (:mod:`cafleet.agents.usage`), whose finding of a member's
records it reuses: files and the agents' own databases only, read-only.
"""

from __future__ import annotations

import json

from cafleet.agents.usage.claude import claude_transcripts, is_session_id
from cafleet.agents.usage.opencode import member_rows
from cafleet.agents.usage.totals import complete_lines

PREVIEW_START = "[cafleet msg "


def claude_previews(config_dir: str, session_id: str, limit: int = 32) -> list[tuple[int, int]]:
    """``(message id, sender id)`` of the cafleet previews that begin user turns in the
    session's transcripts (at most ``limit``; ``(0, 0)`` for a header whose numbers do not
    parse). A preview is typed only into its recipient's pane, so the messages these name
    say whose session it is (:mod:`cafleet.delivery.usage` checks them)."""
    if not is_session_id(session_id):
        return []
    found: list[tuple[int, int]] = []
    marker = PREVIEW_START.encode()
    for path in claude_transcripts(config_dir, session_id):
        try:
            handle = open(path, "rb")  # noqa: SIM115 - only the open's OSError is caught; the with below closes it
        except OSError:
            continue
        with handle:
            for line in complete_lines(handle):
                if marker not in line:
                    continue
                try:
                    record = json.loads(line)
                except (ValueError, RecursionError):
                    continue
                text = _user_text(record)
                if text is not None and text.startswith(PREVIEW_START):
                    found.append(_preview_header(text))
                    if len(found) >= limit:
                        return found
    return found


def _user_text(record) -> str | None:
    """The text a user turn begins with (typed into the input box), or None for any other
    line (tool results included)."""
    if not isinstance(record, dict) or record.get("type") != "user":
        return None
    message = record.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return content
    if isinstance(content, list) and content and isinstance(content[0], dict) and content[0].get("type") == "text":
        text = content[0].get("text")
        return text if isinstance(text, str) else None
    return None


def _preview_header(text: str) -> tuple[int, int]:
    """``(message id, sender id)`` from ``[cafleet msg <id> from <sender> ...``."""
    message, _, rest = text[len(PREVIEW_START) :].partition(" from ")
    sender = rest.partition(" ")[0]
    short = 0 < len(message) <= 19 and 0 < len(sender) <= 19
    if short and (message + sender).isascii() and message.isdigit() and sender.isdigit():
        return int(message), int(sender)
    return 0, 0


def opencode_user_text_starts(
    data_folder: str, *, cwd: str, started_at: str, fleet_id: int, member_id: int, start: str
) -> bool:
    """Whether the member's opencode sessions (as
    :func:`cafleet.agents.usage.opencode.opencode_usage` finds them) hold a user message
    whose text begins with ``start``: opencode records a submitted line as soon as it takes
    it, so a preview's header found there was delivered, whatever the screen shows
    (opencode draws in place: no history to search). False when the file or
    its tables cannot be read."""
    if not start:
        return False
    return bool(
        member_rows(
            data_folder,
            "SELECT 1 FROM part p JOIN mine ON p.session_id = mine.id "
            "JOIN message m ON m.id = p.message_id WHERE json_extract(m.data, '$.role') = 'user' "
            "AND json_extract(p.data, '$.type') = 'text' AND substr(json_extract(p.data, '$.text'), 1, ?) = ? LIMIT 1",
            (len(start), start),
            cwd=cwd,
            started_at=started_at,
            fleet_id=fleet_id,
            member_id=member_id,
        )
    )
