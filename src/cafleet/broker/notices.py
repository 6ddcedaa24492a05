"""The notices in a Director's inbox (docs/delivery.md, "Notices in the Director's inbox").

A notice is stored under the seed's rules as a **self-send of the Director**: a row of
``messages`` from the Director to itself, stamped notified on insertion (so no pane input
ever), pending until the Director ACKs it; poll, wait, listen and show return it like any
message. Its body starts with the fixed header line ``[cafleet notice <kind> <subject>]``.

Only cafleet makes a notice (this module, called by the keeper, ``fleet watch`` and the
execs' ends): what tells one apart is its row in the auxiliary table below, keyed by the
message id, which no sender chooses, never its text. A message sent through ``message
send``/``broadcast`` or the WebUI with a line that begins like the header is refused
(:func:`cafleet.validation.not_a_notice`); text output shows a notice whole and marks a
stored look-alike as no notice (:func:`cafleet.render.shown_body`).

The auxiliary table ``cafleet_aux_notices`` (outside the format, created by the first
notice, in a transaction of its own) records, per notice, its kind, what it is about
(``member:5``, ``host:box``), the dialog's digest, and when its condition cleared. A row
not cleared is an open *episode*: no second notice of that kind about that subject is
posted until it cleared (:func:`post` checks that in the transaction that inserts both
rows). Reads work on a database without the table.
"""

from __future__ import annotations

from dataclasses import dataclass

from cafleet import clock, render, validation
from cafleet.broker import records

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.broker.records import MessageRecord
    from cafleet.store.protocol import Store

TABLE = "cafleet_aux_notices"
KINDS = (
    "awaiting_user",
    "dead",
    "silent",
    "unreachable",
    "over_budget",
    "exec_finished",
    "exec_never_started",
    "exec_vanished",
    "revived",
    "not_revived",
)
HEADER = render.NOTICE_START + "{kind} {subject}]"  # a sent message never begins a line like it


def open_episodes(store: Store, fleet_id: int) -> dict[tuple[str, str], dict]:
    """``{(kind, subject): {"message_id", "member_id", "digest", "opened_at"}}`` of the
    fleet's notices whose condition has not cleared."""
    if not records.has_table(store, TABLE):
        return {}
    rows = store.execute(
        f"SELECT kind, subject, message_id, member_id, digest, opened_at FROM {TABLE} "
        "WHERE fleet_id = ? AND cleared_at IS NULL",
        (fleet_id,),
    ).fetchall()
    return {(r[0], r[1]): {"message_id": r[2], "member_id": r[3], "digest": r[4], "opened_at": r[5]} for r in rows}


@dataclass(frozen=True)
class Notice:
    """What one notice says: its kind, what it is about (``subject``, and the member when
    there is one), the dialog's digest (awaiting_user), and the message text."""

    kind: str
    subject: str
    member_id: int | None
    digest: str | None
    text: str


def post(store: Store, fleet_id: int, director_id: int, notice: Notice) -> int | None:
    """Put one notice in the Director's inbox and open its episode, in one transaction;
    return its message id, or None when an episode of that kind and subject is open."""
    validation.body(notice.text)
    store.create_auxiliary([TABLE])
    with store.write():
        if store.execute(
            f"SELECT 1 FROM {TABLE} WHERE fleet_id = ? AND kind = ? AND subject = ? AND cleared_at IS NULL",
            (fleet_id, notice.kind, notice.subject),
        ).fetchone():
            return None
        if not can_tell(store, fleet_id, director_id):
            return None
        return insert(store, fleet_id, director_id, notice)


def can_tell(store: Store, fleet_id: int, director_id: int) -> bool:
    """Whether a notice can go to ``director_id`` now: False when the fleet was deleted or
    has another Director meanwhile (nobody to tell); NotFound or Conflict, as a send to it
    would, when that Director is no longer active and placed."""
    from cafleet.broker import fleets

    fleet = fleets.get_fleet(store, fleet_id)
    if fleet["deleted_at"] is not None or fleet["director_member_id"] != director_id:
        return False
    fleets.check_director(store, fleet_id, director_id)
    return True


def insert(store: Store, fleet_id: int, director_id: int, notice: Notice, cleared: bool = False) -> int:
    """The notice's two rows, in the caller's write transaction (the table exists, the
    Director was checked); ``cleared``: a notice about something that happened once (an
    exec that ended), whose episode is over as it is posted."""
    kind, subject, member_id, digest, text = notice.kind, notice.subject, notice.member_id, notice.digest, notice.text
    now = clock.now()
    message_id = store.insert(
        "INSERT INTO messages (from_member_id, to_member_id, created_at, status_state, status_timestamp, text, "
        "notified_at) VALUES (?, ?, ?, 'input_required', ?, ?, ?)",
        (director_id, director_id, now, now, text, now),
        "message_id",
    )
    store.execute(
        f"INSERT INTO {TABLE} (message_id, fleet_id, kind, subject, member_id, digest, opened_at, cleared_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (message_id, fleet_id, kind, subject, member_id, digest, now, now if cleared else None),
    )
    return message_id


def clear(store: Store, message_ids) -> None:
    """End the episodes of these notices (their conditions cleared)."""
    ids = sorted(message_ids)
    if not ids:
        return
    with store.write():
        store.execute(
            f"UPDATE {TABLE} SET cleared_at = ? WHERE cleared_at IS NULL AND message_id IN ({','.join('?' * len(ids))})",
            (clock.now(), *ids),
        )


def annotate(store: Store, listed: list[MessageRecord]) -> list[MessageRecord]:
    """Add ``kind`` (the notice's kind) and ``notice`` (``{"subject", "member_id",
    "dialog"}``) to the records among ``listed`` that are notices; no read at all when
    none is a self-send."""
    selfs = [r["message_id"] for r in listed if r["from_member_id"] == r["to_member_id"]]
    # recheck: the open may have found no table moments before the keeper's first notice
    # created it, and a self-send just read may be that notice
    if not selfs or not records.has_table(store, TABLE, recheck=True):
        return listed
    rows = store.execute(
        f"SELECT message_id, kind, subject, member_id, digest FROM {TABLE} "
        f"WHERE message_id IN ({','.join('?' * len(selfs))})",
        tuple(selfs),
    ).fetchall()
    found = {r[0]: r[1:] for r in rows}
    for record in listed:
        entry = found.get(record["message_id"])
        if entry is not None:
            record["kind"] = entry[0]
            record["notice"] = {"subject": entry[1], "member_id": entry[2], "dialog": entry[3]}
    return listed
