"""Row decoding shared by the broker modules: stored enums are checked, never trusted."""

from __future__ import annotations

from cafleet.errors import CorruptRow

MEMBER_STATUSES = ("active", "deregistered")
MESSAGE_STATES = ("input_required", "completed")

MESSAGE_COLUMNS = "message_id, from_member_id, to_member_id, created_at, status_state, status_timestamp, text"
MESSAGE_KEYS = tuple(MESSAGE_COLUMNS.split(", "))


def member_status(member_id: int, value) -> str:
    if value not in MEMBER_STATUSES:
        raise CorruptRow(
            f"member {member_id} has an unknown status {value!r} in the database "
            f"(expected {' or '.join(MEMBER_STATUSES)}); repair the row or use a newer cafleet."
        )
    return value


def message(row) -> dict:
    """The public message record (never includes notified_at)."""
    record = dict(zip(MESSAGE_KEYS, row))
    if record["status_state"] not in MESSAGE_STATES:
        raise CorruptRow(
            f"message {record['message_id']} has an unknown status_state {record['status_state']!r} in the database "
            f"(expected {' or '.join(MESSAGE_STATES)}); repair the row or use a newer cafleet."
        )
    return record
