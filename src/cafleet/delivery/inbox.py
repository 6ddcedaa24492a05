"""Blocking reads of a member's inbox: ``message wait`` and ``message listen``.

Neither spins: both wait on :class:`cafleet.store.changes.Changes`, whose baseline is
taken before each read it guards, so a message committed between a read and the wait
that follows it wakes the reader at its next check, and after each wake-up the inbox is
read again. A check asks the store's change waiter (``store.change_waiter``):

- SQLite: one ``PRAGMA data_version`` read (it changes only when another connection
  commits), a few microseconds of CPU;
- PostgreSQL: a notification queued on a ``LISTEN`` connection of its own (every write
  transaction sends a ``NOTIFY``), with a fallback read every few seconds (a notification
  is a hint, and is lost while the connection is down; see ``store/postgres/waiter.py``).

Between checks the process sleeps; the check interval bounds how soon a message from
another process is seen (default 0.05 s, ``CAFLEET_WAIT_INTERVAL``).

Both end when their member can no longer receive: ``wait`` with an error (exit 1),
``listen`` with its end line.

While they wait, both look after their fleet's keeper (``tend``, every :data:`TEND_EVERY`
s): a keeper that died meanwhile (killed, its PostgreSQL session gone) is started again by
the Director's wait, so a member that blocks on a dialog while nothing else runs still
gets its notice to the Director (docs/delivery.md, "The fleet keeper").

A PostgreSQL server that ends their sessions (a restart, ``pg_terminate_backend``,
``idle_session_timeout``) does not end them: each reconnects with back-off
(:meth:`Changes.recover`) and reads again, so nothing committed meanwhile is missed and,
``listen`` printing only ids above the last one it printed, nothing is printed twice. After
``reconnect`` seconds without a connection that works, the last failure is raised: ``wait``
exits 1 with it, ``listen`` prints its end line and then exits 1 with it.
"""

from __future__ import annotations

import time

from cafleet.broker import messages
from cafleet.config import declared
from cafleet.errors import Conflict, DatabaseGone, DatabaseUnreachable, clause
from cafleet.faults import NO_HOOKS
from cafleet.store.changes import RECONNECT_TIMEOUT, Changes, Stopped, StopRequests

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from collections.abc import Callable

    from cafleet.broker.records import MessageRecord
    from cafleet.faults import Hooks
    from cafleet.store.protocol import Store

DEFAULT_INTERVAL = declared("CAFLEET_WAIT_INTERVAL").default  # commands pass their own setting
TEND_EVERY = 10.0  # seconds between two looks at the fleet's keeper by a waiting `message wait` or `listen`


def gone_reason(store: Store, member_id: int) -> str | None:
    """Why ``member_id`` can no longer receive messages, or None while it can."""
    return _why_gone(member_id, *messages.member_standing(store, member_id))


def _why_gone(member_id: int, state: str, fleet_id: int) -> str | None:
    if state == "deregistered":
        return f"member {member_id} was deregistered"
    if state == "fleet-deleted":
        return f"fleet {fleet_id} was deleted"
    return None


def require_receiving(store: Store, member_id: int) -> None:
    """Raise (exit 1) when ``member_id`` can no longer receive: nothing will ever arrive."""
    _refuse_gone(member_id, gone_reason(store, member_id))


def _refuse_gone(member_id: int, reason: str | None) -> None:
    if reason:
        who = "it" if reason.startswith("member") else f"member {member_id}"
        raise Conflict(
            f"{reason}, so {who} receives no more messages.",
            hint=f"`cafleet message poll {member_id}` still lists what it received.",
        )


def wait_for_messages(
    store: Store,
    member_id: int,
    timeout: float | None,
    interval: float = DEFAULT_INTERVAL,
    reconnect: float = RECONNECT_TIMEOUT,
    tend: Callable[[], object] | None = None,
    hooks: Hooks = NO_HOOKS,
) -> list[MessageRecord]:
    """Unacknowledged incoming messages as soon as there is one; [] after ``timeout``.

    Raises :class:`Conflict` as soon as the member is deregistered or its fleet deleted,
    and :class:`DatabaseUnreachable` when ``reconnect`` seconds (or the timeout) pass
    without a connection to the server that works. ``tend`` is called every
    :data:`TEND_EVERY` s while it waits (the fleet's keeper, see the module's text).
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    next_tend = None if tend is None else time.monotonic() + TEND_EVERY
    changes = Changes(store, interval, deadline=deadline, reconnect=reconnect, hooks=hooks)  # baseline before the read
    try:
        while True:
            try:
                if tend is not None and next_tend is not None and time.monotonic() >= next_tend:
                    tend()
                    next_tend = time.monotonic() + TEND_EVERY
                hooks.trace("wait.read")
                state, fleet_id, records = messages.standing_and_inbox(store, member_id)  # one statement
                _refuse_gone(member_id, _why_gone(member_id, state, fleet_id))
                if records:
                    return records
                # test-only hook (cafleet.faults): read, nothing found, not waiting yet
                hooks.pause("wait.empty")
                if not changes.wait(until=next_tend) and (
                    next_tend is None or (deadline is not None and time.monotonic() >= deadline)
                ):
                    return []  # the timeout, not the next look at the keeper
            except DatabaseUnreachable as error:  # the server ended the session: reconnect, read again
                changes.recover(error)
    finally:
        changes.close()


def listen(
    store: Store,
    member_id: int,
    emit,
    interval: float = DEFAULT_INTERVAL,
    reconnect: float = RECONNECT_TIMEOUT,
    tend: Callable[[], object] | None = None,
    hooks: Hooks = NO_HOOKS,
) -> str:
    """Emit each pending incoming message once, oldest first, then new ones as they come.

    Read-only. Returns why the stream ended: member deregistered, fleet deleted, the
    database file deleted or replaced, or stopped by SIGINT/SIGTERM (taking effect between
    lines, never in the middle of one). Raises :class:`DatabaseUnreachable` when it gave
    up reconnecting to a server that ended its sessions (the caller prints the end line).
    ``tend`` is called every :data:`TEND_EVERY` s (the fleet's keeper, see the module's text).
    """
    changes = None
    next_tend = None if tend is None else time.monotonic() + TEND_EVERY
    try:
        with StopRequests() as stop:
            changes = Changes(
                store, interval, stop=stop, reconnect=reconnect, hooks=hooks
            )  # baseline before the first read
            last_id = 0
            while True:
                try:
                    if tend is not None and next_tend is not None and time.monotonic() >= next_tend:
                        tend()
                        next_tend = time.monotonic() + TEND_EVERY
                    reason = gone_reason(store, member_id)
                    if reason:
                        return reason
                    for record in messages.pending_after(store, member_id, last_id):
                        emit(record)
                        last_id = max(last_id, record["message_id"])
                    stop.check()
                    changes.wait(until=next_tend)
                except DatabaseUnreachable as error:  # the server ended the session: reconnect, read again
                    changes.recover(error)
    except Stopped as stopped:  # outside the ``with``: a signal while it restores is caught too
        return str(stopped)
    except DatabaseGone as gone:
        return clause(gone)
    finally:
        if changes is not None:
            changes.close()
