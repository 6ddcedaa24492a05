"""Waking on LISTEN/NOTIFY: the PostgreSQL store's change waiter."""

from __future__ import annotations

import time

from cafleet.errors import DatabaseError
from cafleet.store import libpq
from cafleet.store.postgres.session import FALLBACK_POLL, connect, translate

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from typing import Protocol

    from cafleet.faults import Hooks

    class Listened(Protocol):
        """What the waiter reads of the store it came from (a PgStore)."""

        url: str
        busy_timeout: float
        schema: str
        channel: str
        hooks: Hooks


class NotifyWaiter:
    """Waits for another process's commit: LISTEN first, so the caller's read that follows
    cannot miss a commit, then a notification or the fallback poll, whichever comes first.

    A notification is only a hint (sent on commit, merged within a transaction, lost while
    disconnected), so :meth:`wait` answering True means "read again", never "here is the
    change"; and a dropped connection is answered by listening again at once and answering
    True, so the caller re-reads whatever it missed. When that new LISTEN cannot be had,
    the next :meth:`wait` raises :class:`~cafleet.errors.DatabaseUnreachable` (one line):
    the caller's :meth:`~cafleet.store.changes.Changes.recover` backs off and calls
    :meth:`reopen`, bounded by its reconnection time."""

    __slots__ = ("conn", "last_read", "store")
    blocks = True  # :meth:`wait` sleeps in the connection until a notification comes
    apart = True  # it listens on a session of its own: the store it came from may be closed

    def __init__(self, store: Listened) -> None:
        self.store = store
        self.conn: libpq.Connection | None = None
        self.last_read = time.monotonic()
        self._listen()

    def _listen(self) -> None:
        # LISTEN needs neither search_path nor lock_timeout: no settings round trip.
        conn = connect(
            self.store.url, self.store.busy_timeout, self.store.schema, settings=False, hooks=self.store.hooks
        )
        try:
            conn.execute("LISTEN " + libpq.quote_ident(self.store.channel))
        except libpq.Error as exc:
            conn.close()
            raise translate(exc, self.store.url, self.store.busy_timeout) from None
        self.conn = conn

    def reopen(self) -> None:
        """LISTEN on a new connection (raises when none can be had); the caller reads next."""
        self._drop()
        self._listen()
        self.last_read = time.monotonic()

    def wait(self, deadline: float | None) -> bool:
        """True when the caller should read again; False once ``deadline`` has passed."""
        if self.conn is None:
            self.reopen()  # the last try failed: this one raises if it fails too
            return True  # whatever came meanwhile was not announced
        while True:
            # test-only count (cafleet.faults)
            self.store.hooks.trace("store.wait")
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return False
            if now - self.last_read >= FALLBACK_POLL:
                self.last_read = now
                return True
            timeout = self.last_read + FALLBACK_POLL - now
            if deadline is not None:
                timeout = min(timeout, deadline - now)
            try:
                # list(): the generator holds the connection's lock until it is closed.
                if list(self.conn.notifies(timeout=timeout, stop_after=1)):
                    self.last_read = time.monotonic()
                    return True
            except (libpq.OperationalError, DatabaseError):
                # The session ended (a restart, an administrator, a timeout): listen again
                # at once; if that fails too, the next wait raises. Either way, read again.
                try:  # noqa: SIM105 - contextlib stays off the hot commands' path
                    self.reopen()
                except DatabaseError:
                    pass
                self.last_read = time.monotonic()
                return True

    def changed(self) -> bool:
        """Without waiting (a millisecond at most): read again? A queued notification, the
        fallback poll being due, or a connection that had to be re-established say yes."""
        now = time.monotonic()
        try:
            if self.conn is None:
                self._listen()
                self.last_read = now
                return True
            if list(self.conn.notifies(timeout=0.001, stop_after=1)) or now - self.last_read >= FALLBACK_POLL:
                self.last_read = now
                return True
        except (libpq.OperationalError, DatabaseError):
            self._drop()
            return True
        return False

    def _drop(self) -> None:
        if self.conn is not None:
            try:  # noqa: SIM105 - contextlib stays off the hot commands' path
                self.conn.close()
            except libpq.Error:
                pass
            self.conn = None

    def close(self) -> None:
        self._drop()
