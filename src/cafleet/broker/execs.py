"""Commands the Director runs in a member's pane (``cafleet member exec``; docs/delivery.md,
"Commands run in a member's pane"): the rows of the auxiliary table ``cafleet_aux_execs``
and the rules over them. No keystrokes, no subprocess: :mod:`cafleet.delivery.execs` types
the line and runs the command.

An exec's life, each step one conditional write (so each happens once, whoever races):

- :func:`create`: the Director asks (the member is an active member of a live fleet, with a
  pane, and not its Director); the table is created by the first exec, in a transaction of
  its own;
- :func:`mark_dispatched`: the line naming the exec's id was typed into the member's pane
  and submitted;
- :func:`claim`: ``member exec-run ID`` in the member's pane starts it (once: a second run
  of the same id is refused, and so is a run in another member's pane);
- :func:`finish`: the command ended, with its exit status (128 + N for signal N); or
  :func:`give_up`: dispatched but never started, or started and its process vanished
  without a status. Each of the three puts one notice in the Director's inbox, in the same
  transaction (:func:`cafleet.broker.notices.insert`), unless the fleet or its Director is
  gone.

Reads work on a database without the table (no exec was ever made).
"""

from __future__ import annotations

from cafleet import clock
from cafleet.broker import records
from cafleet.errors import Conflict, NotFound, UsageError

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.broker.records import MemberDetail
    from cafleet.store.protocol import Store

TABLE = "cafleet_aux_execs"
OPEN_INDEX = "idx_cafleet_aux_execs_open"  # nudged_at IS NULL: every exec in flight, and finished ones not yet nudged
FINISHED, NEVER_STARTED, VANISHED = "finished", "never_started", "vanished"
OUTCOMES = (FINISHED, NEVER_STARTED, VANISHED)
MAX_COMMAND_BYTES = 64 * 1024  # a shell command or a script, not a data file
SHOWN = 60  # characters of a command a notice or a summary quotes

_COLUMNS = (
    "exec_id",
    "fleet_id",
    "member_id",
    "director_id",
    "command",
    "created_at",
    "dispatched_at",
    "started_at",
    "runner",
    "finished_at",
    "exit_status",
    "outcome",
    "notice_id",
    "nudged_at",
)
_SELECT = f"SELECT {', '.join(_COLUMNS)} FROM {TABLE} "


def _record(row) -> dict:
    record = dict(zip(_COLUMNS, row))
    if record["outcome"] is not None and record["outcome"] not in OUTCOMES:
        from cafleet.errors import CorruptRow

        raise CorruptRow(f"exec {record['exec_id']} has an outcome this version does not know.")
    record["state"] = state(record)
    return record


def state(record: dict) -> str:
    """``created`` (not typed yet), ``dispatched``, ``running``, or its outcome."""
    if record["outcome"] is not None:
        return record["outcome"]
    if record["started_at"] is not None:
        return "running"
    if record["dispatched_at"] is not None:
        return "dispatched"
    return "created"


def shown_command(command: str) -> str:
    """The command as a notice or a summary quotes it: its first line, cut at ``SHOWN``
    characters (never the whole of an arbitrary input)."""
    from cafleet import render

    lines = command.strip().splitlines() or [""]
    first = render.inline(lines[0])
    more = len(lines) > 1 or len(first) > SHOWN
    return first[:SHOWN] + ("…" if more else "")


def check_command(command: str, what: str = "the command") -> str:
    """The command if it can be run: not blank, no NUL (a program argument ends there), at
    most ``MAX_COMMAND_BYTES`` of UTF-8."""
    if not command.strip():
        raise UsageError(f"{what} is empty; give the command to run.")
    if "\x00" in command:
        raise UsageError(f"{what} holds a NUL character (U+0000), which a command cannot carry; remove it.")
    if len(command.encode("utf-8", "surrogatepass")) > MAX_COMMAND_BYTES:
        raise UsageError(f"{what} is longer than {MAX_COMMAND_BYTES} bytes; put it in a script and run that.")
    return command


def create(store: Store, member_id: int, command: str) -> dict:
    """Store a new exec for ``member_id``; its record comes back."""
    from cafleet.broker import fleets, members

    check_command(command)
    member = members.get_member(store, member_id)
    _check_target(member, member_id)
    fleets.require_live(store, member["fleet_id"])
    store.create_auxiliary([TABLE, OPEN_INDEX])
    with store.write():
        member = members.get_member(store, member_id)  # again, in the transaction
        _check_target(member, member_id)
        director_id = fleets.require_live(store, member["fleet_id"])
        exec_id = store.insert(
            f"INSERT INTO {TABLE} (fleet_id, member_id, director_id, command, created_at) VALUES (?, ?, ?, ?, ?)",
            (member["fleet_id"], member_id, director_id, command, clock.now()),
            "exec_id",
        )
    return get(store, exec_id)


def _check_target(member: MemberDetail, member_id: int) -> None:
    if member["status"] != "active":
        raise Conflict(f"member {member_id} is deregistered; it has no pane to run a command in.")
    if member["kind"] == "director":
        raise UsageError(
            f"member {member_id} is its fleet's Director: `member exec` runs a command in a member's pane, "
            "never in the Director's own; run it yourself."
        )
    placement = member["placement"]
    if placement is None or placement["pane_id"] is None:
        raise Conflict(f"member {member_id} has no pane yet (its creation is pending); try again when it has.")


def get(store: Store, exec_id: int) -> dict:
    row = None
    if records.has_table(store, TABLE, recheck=True):
        row = store.execute(_SELECT + "WHERE exec_id = ?", (exec_id,)).fetchone()
    if row is None:
        raise NotFound(f"exec {exec_id} not found.")
    return _record(row)


def in_flight(store: Store, fleet_id: int) -> list[dict]:
    """The fleet's execs that have not ended, oldest first; none without the table."""
    if not records.has_table(store, TABLE):
        return []
    rows = store.execute(
        _SELECT + "WHERE fleet_id = ? AND nudged_at IS NULL AND outcome IS NULL ORDER BY exec_id", (fleet_id,)
    ).fetchall()
    return [_record(row) for row in rows]


def running_for(store: Store, fleet_id: int, member_id: int) -> dict | None:
    """The member's exec that was dispatched and has not ended (its previews hold
    meanwhile), or None; no read beyond the catalogue's when no exec was ever made."""
    if not records.has_table(store, TABLE):
        return None
    row = store.execute(
        _SELECT + "WHERE fleet_id = ? AND member_id = ? AND nudged_at IS NULL AND outcome IS NULL "
        "AND dispatched_at IS NOT NULL ORDER BY exec_id LIMIT 1",
        (fleet_id, member_id),
    ).fetchone()
    return None if row is None else _record(row)


def nudges_due(store: Store, fleet_id: int, finished_before: str) -> list[dict]:
    """The fleet's execs that finished at or before ``finished_before`` and whose member
    was not nudged yet (:func:`mark_nudged` records one nudge, or that none is needed)."""
    if not records.has_table(store, TABLE):
        return []
    rows = store.execute(
        _SELECT + "WHERE fleet_id = ? AND nudged_at IS NULL AND outcome = ? AND finished_at <= ? ORDER BY exec_id",
        (fleet_id, FINISHED, finished_before),
    ).fetchall()
    return [_record(row) for row in rows]


def mark_dispatched(store: Store, exec_id: int) -> bool:
    """Record that the exec's line was submitted in its member's pane (once)."""
    with store.write():
        cursor = store.execute(
            f"UPDATE {TABLE} SET dispatched_at = ? WHERE exec_id = ? AND dispatched_at IS NULL AND outcome IS NULL",
            (clock.now(), exec_id),
        )
    return cursor.rowcount == 1


def mark_nudged(store: Store, exec_id: int) -> bool:
    with store.write():
        cursor = store.execute(
            f"UPDATE {TABLE} SET nudged_at = ? WHERE exec_id = ? AND nudged_at IS NULL", (clock.now(), exec_id)
        )
    return cursor.rowcount == 1


def claim(store: Store, exec_id: int, member_id: int | None, runner: str) -> dict:
    """Start the exec, exactly once: refused when it was started already, has ended, or
    ``member_id`` (the member whose pane runs it, by its process tree) is another member's."""
    with store.write():
        record = get(store, exec_id)
        if member_id is not None and member_id != record["member_id"]:
            raise Conflict(
                f"exec {exec_id} is for member {record['member_id']}, and this pane is member {member_id}'s; "
                "nothing was run."
            )
        if record["started_at"] is not None:
            raise Conflict(
                f"exec {exec_id} was already started at {record['started_at']}; it runs once, so nothing was run again."
            )
        if record["outcome"] is not None:
            raise Conflict(f"exec {exec_id} ended ({record['outcome'].replace('_', ' ')}); nothing was run.")
        now = clock.now()
        store.execute(
            f"UPDATE {TABLE} SET started_at = ?, runner = ?, dispatched_at = COALESCE(dispatched_at, ?) "
            "WHERE exec_id = ? AND started_at IS NULL AND outcome IS NULL",
            (now, runner, now, exec_id),
        )
    return get(store, exec_id)


def finish(store: Store, exec_id: int, status: int) -> dict:
    """Record the exit status of a started exec and tell the Director (once)."""
    from cafleet.broker import members, notices

    store.create_auxiliary([notices.TABLE])  # its notice may be the database's first
    with store.write():
        record = get(store, exec_id)
        if record["outcome"] is not None or record["started_at"] is None:
            return record  # ended already (judged vanished meanwhile): the first word stands
        now = clock.now()
        store.execute(
            f"UPDATE {TABLE} SET finished_at = ?, exit_status = ?, outcome = ? WHERE exec_id = ? AND outcome IS NULL",
            (now, status, FINISHED, exec_id),
        )
        record.update(finished_at=now, exit_status=status, outcome=FINISHED, state=FINISHED)
        name = _name(members, store, record["member_id"])
        text = (
            f"Exec {exec_id} (`{shown_command(record['command'])}`) in member {record['member_id']}'s pane ({name}) "
            f"finished: {status_text(status)}. Its output is in the member's own context; "
            f"`cafleet member capture {record['member_id']}` shows its pane."
        )
        _notice(store, record, "exec_finished", text)
    return get(store, exec_id)


def give_up(store: Store, exec_id: int, outcome: str, why: str) -> dict | None:
    """End an exec that will never report (``never_started``, ``vanished``) and tell the
    Director; None when it had ended or changed meanwhile (the first word stands)."""
    from cafleet.broker import members, notices

    store.create_auxiliary([notices.TABLE])  # its notice may be the database's first
    with store.write():
        record = get(store, exec_id)
        if record["outcome"] is not None:
            return None
        if (outcome == NEVER_STARTED) != (record["started_at"] is None):
            return None  # it started meanwhile, or this is no longer the judgement to make
        now = clock.now()
        store.execute(  # nothing to nudge about: nothing ran to the end
            f"UPDATE {TABLE} SET finished_at = ?, outcome = ?, nudged_at = ? WHERE exec_id = ? AND outcome IS NULL",
            (now, outcome, now, exec_id),
        )
        record.update(finished_at=now, outcome=outcome, state=outcome)
        name = _name(members, store, record["member_id"])
        member_id = record["member_id"]
        if outcome == NEVER_STARTED:
            text = (
                f"Exec {exec_id} (`{shown_command(record['command'])}`) was typed into member {member_id}'s pane "
                f"({name}) but never started: {why}. Nothing was run; see `cafleet member capture {member_id}` "
                "and run `cafleet member exec` again if it is still needed."
            )
        else:
            text = (
                f"Exec {exec_id} (`{shown_command(record['command'])}`) in member {member_id}'s pane ({name}) "
                f"ended without an exit status: {why}. See `cafleet member capture {member_id}`."
            )
        _notice(store, record, "exec_" + outcome, text)
    return get(store, exec_id)


def _name(members, store: Store, member_id: int) -> str:
    from cafleet import render

    try:
        return render.inline(members.get_member(store, member_id)["name"])
    except NotFound:
        return "deleted"


def _notice(store: Store, record: dict, kind: str, text: str) -> None:
    """The notice of an exec's end, in the caller's transaction; none when its fleet or its
    Director is gone (nobody to tell)."""
    from cafleet.broker import notices

    try:
        if not notices.can_tell(store, record["fleet_id"], record["director_id"]):
            return
    except (NotFound, Conflict):
        return
    header = notices.HEADER.format(kind=kind, subject=f"exec:{record['exec_id']}")
    notice = notices.Notice(kind, f"exec:{record['exec_id']}", record["member_id"], None, f"{header}\n{text}")
    notice_id = notices.insert(store, record["fleet_id"], record["director_id"], notice, cleared=True)
    store.execute(f"UPDATE {TABLE} SET notice_id = ? WHERE exec_id = ?", (notice_id, record["exec_id"]))
    record["notice_id"] = notice_id


def status_text(status: int | None) -> str:
    """``exit status 0``; ``killed by signal 9 (exit status 137)``."""
    if status is None:
        return "no exit status"
    if status > 128 and status - 128 < 65:
        import signal

        try:
            name = signal.Signals(status - 128).name
        except ValueError:
            name = f"signal {status - 128}"
        return f"exit status {status} (killed by {name})"
    return f"exit status {status}"


def public(record: dict) -> dict:
    """The exec as ``--json`` gives it."""
    return {key: record[key] for key in (*_COLUMNS, "state") if key not in ("runner", "nudged_at")}
