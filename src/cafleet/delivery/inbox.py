"""Blocking reads of a member's inbox: ``message wait`` and ``message listen``.

Neither spins: both wait on :class:`cafleet.store.changes.Changes`, whose baseline is
taken before each read it guards, so a message committed between a read and the wait
that follows it wakes the reader at its next check, and after each wake-up the inbox is
read again. A check asks the store's change waiter (``store.change_waiter``):

- SQLite: one ``PRAGMA data_version`` read (it changes only when another connection
  commits), a few microseconds of CPU;
- PostgreSQL: a notification queued on a ``LISTEN`` connection of its own (every write
  transaction sends a ``NOTIFY``), with a fallback read every few seconds (a notification
  is a hint, and is lost while the connection is down; see ``store/postgres.py``).

Between checks the process sleeps; the check interval bounds how soon a message from
another process is seen (default 0.05 s, ``CAFLEET_WAIT_INTERVAL``).

Both end when their member can no longer receive: ``wait`` with an error (exit 1),
``listen`` with its end line.
"""

from __future__ import annotations

import time

from cafleet.broker import messages
from cafleet.errors import Conflict, DatabaseGone
from cafleet.faults import pause_point, trace_point
from cafleet.store.changes import Changes, StopRequests, Stopped

DEFAULT_INTERVAL = 0.05


def check_interval(environ) -> float:
    from cafleet.config import positive_float_env

    value = positive_float_env(environ, "CAFLEET_WAIT_INTERVAL", DEFAULT_INTERVAL)
    return min(max(value, 0.005), 5.0)


def gone_reason(store, member_id: int) -> str | None:
    """Why ``member_id`` can no longer receive messages, or None while it can."""
    state, fleet_id = messages.member_standing(store, member_id)
    if state == "deregistered":
        return f"member {member_id} was deregistered"
    if state == "fleet-deleted":
        return f"fleet {fleet_id} was deleted"
    return None


def require_receiving(store, member_id: int) -> None:
    """Raise (exit 1) when ``member_id`` can no longer receive: nothing will ever arrive."""
    reason = gone_reason(store, member_id)
    if reason:
        who = "it" if reason.startswith("member") else f"member {member_id}"
        raise Conflict(
            f"{reason}, so {who} receives no more messages.",
            hint=f"`cafleet message poll {member_id}` still lists what it received.",
        )


def wait_for_messages(store, member_id: int, timeout: float | None, interval: float = DEFAULT_INTERVAL) -> list[dict]:
    """Unacknowledged incoming messages as soon as there is one; [] after ``timeout``.

    Raises :class:`Conflict` as soon as the member is deregistered or its fleet deleted.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    changes = Changes(store, interval, deadline=deadline)  # baseline before the read
    try:
        while True:
            trace_point("wait.read")
            require_receiving(store, member_id)
            records = messages.poll(store, member_id)
            if records:
                return records
            pause_point("wait.empty")  # test-only hook (cafleet.faults): read, nothing found, not waiting yet
            if not changes.wait():
                return []
    finally:
        changes.close()


def listen(store, member_id: int, emit, interval: float = DEFAULT_INTERVAL) -> str:
    """Emit each pending incoming message once, oldest first, then new ones as they come.

    Read-only. Returns why the stream ended: member deregistered, fleet deleted, the
    database file deleted or replaced, or stopped by SIGINT/SIGTERM (taking effect between
    lines, never in the middle of one).
    """
    changes = None
    try:
        with StopRequests() as stop:
            changes = Changes(store, interval, stop=stop)  # baseline before the first read
            last_id = 0
            while True:
                reason = gone_reason(store, member_id)
                if reason:
                    return reason
                for record in messages.pending_after(store, member_id, last_id):
                    emit(record)
                    last_id = max(last_id, record["message_id"])
                stop.check()
                changes.wait()
    except Stopped as stopped:  # outside the ``with``: a signal while it restores is caught too
        return str(stopped)
    except DatabaseGone as gone:
        return str(gone).rstrip(".")
    finally:
        if changes is not None:
            changes.close()
