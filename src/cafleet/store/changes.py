"""Waking up when another process commits: the one primitive behind ``message wait``,
``message listen``, ``fleet watch`` and the WebUI event stream.

``PRAGMA data_version`` is a per-connection counter that changes when *another* connection
commits, so one check is one trivial query and a quiet database costs nothing else. The
rule that makes it correct: take the baseline **before** the read it guards. A reader
that reads first and takes the baseline afterwards never hears of a commit that lands in
between, and can sleep forever next to a pending message. :class:`Changes` takes its
baseline when it is created, so the pattern is always::

    changes = Changes(store, interval)   # baseline first
    while not (found := read()):         # then the read
        if not changes.wait():           # any commit since the baseline wakes it
            break                        # deadline passed

:class:`StopRequests` turns SIGINT/SIGTERM into a stop request that a loop sees at its next
safe point (while it sleeps between checks, never in the middle of printing a line or
typing a preview); a second signal stops it wherever it is.

A PostgreSQL server can end a reader's sessions under it (a restart, an administrator's
``pg_terminate_backend``, ``idle_session_timeout``): the store then raises
:class:`~cafleet.errors.DatabaseUnreachable`, and the loop calls :meth:`Changes.recover`,
which reconnects the store and its LISTEN with back-off and returns, so the loop reads
again; what was committed meanwhile is found by that read, as after any wake-up::

    while True:
        try:
            ...read...
            changes.wait()
        except DatabaseUnreachable as error:
            changes.recover(error)       # raises, as one line, once it gives up
"""

from __future__ import annotations

import signal
import time

from cafleet.errors import DatabaseUnreachable
from cafleet.faults import NO_HOOKS

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.faults import Hooks
    from cafleet.store.protocol import Store


BLOCKING_STEP = 1.0  # seconds a waiter that blocks (PostgreSQL LISTEN) waits between file checks
RECONNECT_TIMEOUT = 30.0  # seconds of failed reconnection before a reader gives up (CAFLEET_PG_RECONNECT_TIMEOUT)
RECONNECT_FIRST = 0.1  # seconds before the second try (the first is at once), doubling ...
RECONNECT_LONGEST = 2.0  # ... up to this


class Stopped(BaseException):
    """A stop was requested by a signal; ``name`` is ``SIGINT`` or ``SIGTERM``. Like
    KeyboardInterrupt it is not an ``Exception``, so no ``except Exception`` swallows it."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.name = signal.Signals(signum).name
        super().__init__(f"stopped by {self.name}")


class _Wake(BaseException):
    pass


class StopRequests:
    """While entered, SIGINT and SIGTERM request a stop instead of ending the process
    (a signal ignored on entry, like SIGINT in a shell's background job, stays ignored).

    :meth:`sleep` is where a loop waits: a signal that arrives during it ends the sleep at
    once and :meth:`sleep` raises :class:`Stopped`; a signal that arrives elsewhere is
    remembered and raised by the next :meth:`sleep` (or :meth:`check`). A second signal
    raises :class:`Stopped` immediately, wherever the loop is.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.signum: int | None = None
        self._sleeping = False
        self._previous: dict = {}

    def __enter__(self) -> StopRequests:
        for sig in self.SIGNALS:
            if signal.getsignal(sig) != signal.SIG_IGN:  # an ignored signal stays ignored (a background job)
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}

    def _handle(self, signum, _frame) -> None:
        if self.signum is not None:
            raise Stopped(self.signum)  # asked twice: stop now
        self.signum = signum
        if self._sleeping:
            raise _Wake()

    def check(self) -> None:
        if self.signum is not None:
            raise Stopped(self.signum)

    def sleep(self, seconds: float) -> None:
        self.during(time.sleep, seconds)

    def during(self, block, *args):
        """``block(*args)`` (a sleep, or a wait for a notification), ended at once by a
        stop request; returns what it returned (None when a request ended it)."""
        result = None
        try:
            self._sleeping = True
            try:
                if self.signum is None:
                    result = block(*args)
            finally:
                self._sleeping = False
        except _Wake:
            pass
        self.check()
        return result


class Changes:
    """Commits by other connections since the baseline, taken when this is created.

    ``interval`` is the sleep between checks (one ``PRAGMA data_version`` each);
    ``deadline`` (a :func:`time.monotonic` value) ends :meth:`wait`; ``stop`` (a
    :class:`StopRequests`) makes the sleeps interruptible; ``reconnect`` bounds
    :meth:`recover`.
    """

    def __init__(
        self,
        store: Store,
        interval: float,
        *,
        deadline: float | None = None,
        stop: StopRequests | None = None,
        reconnect: float = RECONNECT_TIMEOUT,
        hooks: Hooks = NO_HOOKS,
    ) -> None:
        self.store = store
        self.hooks = hooks  # the command's test hooks (cafleet.faults)
        self.interval = interval
        self.deadline = deadline
        self.stop = stop
        self.reconnect = reconnect
        self._lost_since: float | None = None  # when the reads began to fail, until one works again
        self._pause = 0.0  # before the next try to reconnect
        self._check_file = store.check_file  # one `stat` on SQLite, nothing on PostgreSQL
        self.waiter = store.change_waiter(interval)  # the baseline, before the read it guards

    def changed(self) -> bool:
        """Whether another connection committed since the last check (no sleep); moves the
        baseline, so the caller must read after this returns True.

        First the path is checked to still name the file this store opened (one ``stat``):
        a database deleted or replaced under a waiting reader raises
        :class:`~cafleet.errors.DatabaseGone` instead of leaving it to wait on a ghost."""
        self._check_file()
        return self.waiter.changed()

    def close(self) -> None:
        """Let go of what the waiter holds (PostgreSQL: its LISTEN connection)."""
        self.waiter.close()

    def recover(self, error: DatabaseUnreachable) -> None:
        """After ``error`` from a read or a wait: get the store a new connection and the
        waiter a new LISTEN, at once and then after pauses from 0.1 s doubling to 2 s, and
        return so that the caller reads again (both come before that read, so it misses
        nothing). Raises :class:`~cafleet.errors.DatabaseUnreachable` (one line, the last
        failure's) once the reads have failed for ``reconnect`` seconds, or the deadline has
        passed, with no connection that worked; a refusal by the diagnosis (the schema was
        replaced, another role owns it) at once. A store with no session to lose (SQLite) raises ``error``.

        The time is counted from the first failure until a read gets through (the caller's
        next :meth:`wait`), so a server that accepts connections and ends them before they
        serve a read is given up on too."""
        reopen = getattr(self.store, "reopen", None)
        if reopen is None:
            raise error
        now = time.monotonic()
        if self._lost_since is None:
            self._lost_since = now
        give_up = self._lost_since + self.reconnect
        if self.deadline is not None:
            give_up = min(give_up, self.deadline)
        while True:
            remaining = give_up - time.monotonic()
            if remaining <= 0 and self._pause > 0:  # at least one try, even with a bound of 0
                elapsed = time.monotonic() - self._lost_since
                raise DatabaseUnreachable(
                    f"{error.message.removesuffix('.')}; gave up reconnecting after {elapsed:.1f} s."
                ) from None
            if self._pause > 0:
                nap = min(self._pause, max(0.0, remaining))
                if self.stop is not None:
                    self.stop.sleep(nap)  # a stop request ends the pause (Stopped)
                else:
                    time.sleep(nap)
            self._pause = min(max(self._pause * 2, RECONNECT_FIRST), RECONNECT_LONGEST)
            self.hooks.trace("store.reconnect")  # test-only count (cafleet.faults)
            try:
                reopen()
                waiter_reopen = getattr(self.waiter, "reopen", None)
                if waiter_reopen is not None:
                    waiter_reopen()
                return
            except DatabaseUnreachable as again:
                error = again

    def wait(self, until: float | None = None) -> bool:
        """Sleep until another connection commits (True) or until ``until`` or the deadline
        passes (False). Raises :class:`Stopped` on a stop request.

        It sleeps before it looks: a commit since the baseline is seen by the first check,
        one interval later, and a reader fed by a steady stream of commits still reads at
        most once per interval instead of spinning."""
        self._lost_since, self._pause = None, 0.0  # the caller's reads got through
        ends = [t for t in (until, self.deadline) if t is not None]
        end = min(ends) if ends else None
        blocks = self.waiter.blocks  # it can wait for a change itself (LISTEN)
        while True:
            self.hooks.trace("changes.check")  # test-only count (cafleet.faults)
            step = max(self.interval, BLOCKING_STEP) if blocks else self.interval
            if end is None:
                nap = step
            else:
                remaining = end - time.monotonic()
                if remaining <= 0:
                    return False
                nap = min(step, remaining)
            if blocks:
                self._check_file()
                until_step = time.monotonic() + nap
                woke = self.stop.during(self.waiter.wait, until_step) if self.stop else self.waiter.wait(until_step)
                if woke:
                    return True
                continue
            if self.stop is not None:
                self.stop.sleep(nap)
            else:
                time.sleep(nap)
            if self.changed():
                return True

    def __iter__(self):
        """Yield once per change until the deadline."""
        while self.wait():
            yield
