"""Blocking reads of a member's inbox: ``message wait`` and ``message listen``.

Neither spins. The store's change waiter (``store.change_waiter``) is created before the
first read, so a commit that lands between that read and the wait is never missed, and
after each wake-up the inbox is read again:

- SQLite: between checks the process sleeps, and a check is one ``PRAGMA data_version``
  read (it changes only when another connection commits), so a waiting process costs a
  few microseconds of CPU per check. The check interval bounds how soon a message from
  another process is seen (default 0.05 s, ``CAFLEET_WAIT_INTERVAL``).
- PostgreSQL: ``LISTEN`` on a connection of its own, woken by the ``NOTIFY`` every write
  transaction sends, with a fallback read every few seconds (a notification is a hint,
  and is lost while the connection is down; see ``store/postgres.py``).
"""

from __future__ import annotations

import signal
import time

from cafleet.broker import messages

DEFAULT_INTERVAL = 0.05


class _Stop(Exception):
    pass


def check_interval(environ) -> float:
    from cafleet.config import positive_float_env

    value = positive_float_env(environ, "CAFLEET_WAIT_INTERVAL", DEFAULT_INTERVAL)
    return min(max(value, 0.005), 5.0)


def wait_for_messages(store, member_id: int, timeout: float | None, interval: float = DEFAULT_INTERVAL) -> list[dict]:
    """Unacknowledged incoming messages as soon as there is one; [] after ``timeout``."""
    deadline = None if timeout is None else time.monotonic() + timeout
    waiter = store.change_waiter(interval)  # the baseline comes before the first read
    try:
        records = messages.poll(store, member_id)
        while not records and waiter.wait(deadline):
            records = messages.poll(store, member_id)
        return records
    finally:
        waiter.close()


def listen(store, member_id: int, emit, interval: float = DEFAULT_INTERVAL) -> str | None:
    """Emit each pending incoming message once, oldest first, then new ones as they come.

    Read-only. Returns why the stream ended (member deregistered, fleet deleted) or None
    when stopped by SIGINT/SIGTERM.
    """

    def stop(signum, frame):
        raise _Stop()

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    waiter = None
    try:
        last_id = 0
        waiter = store.change_waiter(interval)  # the baseline comes before the first read
        while True:
            state, fleet_id = messages.member_standing(store, member_id)
            if state == "deregistered":
                return f"member {member_id} was deregistered"
            if state == "fleet-deleted":
                return f"fleet {fleet_id} was deleted"
            for record in messages.pending_after(store, member_id, last_id):
                emit(record)
                last_id = max(last_id, record["message_id"])
            waiter.wait(None)
    except _Stop:
        return None
    finally:
        if waiter is not None:
            waiter.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
