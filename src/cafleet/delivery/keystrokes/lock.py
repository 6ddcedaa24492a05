"""The pane-input lock (docs/delivery.md): one exclusive lock per concrete placement key
``(backend, session, pane)``, held across processes for a whole batch of keystrokes and for
placement changes.

The lock lives in the database's lock space (``store.locks``, or
:func:`cafleet.store.lock_space` of a location; :class:`cafleet.store.protocol.LockSpace`),
which the store package chooses: on SQLite an ``flock`` on a small file in a folder beside
the resolved database file, released by the operating system when the holder exits or is
killed, so a crashed sender can never wedge a pane; on PostgreSQL a session advisory lock
held by a connection of its own, shared by every process on every host using that
database and released when the holder's session ends, TCP keepalives bounding how long a
dead host keeps it. Equal keys from any number of placements meet on the same lock.

The wait is bounded, one loop here for either space: its lock's non-blocking attempt is
retried with short sleeps (10-50 ms) until ``timeout``, then
:class:`~cafleet.errors.LockTimeout` is raised; ``timeout=0`` is one attempt that never
waits (``message wait`` probes other members' panes that way). The lock is not re-entrant:
taking it twice in one process waits for itself and times out.

A lock that cannot be had at all (a lock folder or file that cannot be used: the folder
is a file, sits below one, is on a read-only mount or belongs to another user; the lock
file is a folder; a server that refuses the lock's session) raises
:class:`LockUnavailable`, a :class:`~cafleet.errors.CafleetError` with one line naming the
pane and what is wrong, never a bare ``OSError``: the drain turns it into the
not-notified warning.

A lock that can be lost under a living holder (an advisory lock's session ended: an
administrator's ``pg_terminate_backend``, a server restart, an idle timeout, keepalives
giving up on a partitioned host), after which another process may take the lock and type
into the same pane: so :func:`pane_lock` yields a :class:`Held`, and the typing code sends
keys only through ``held.guard(mux)``: before each call that sends keys (``type_text``,
``press_enter``, ``press_backspace``) it asks the lock, in one round trip on its own
session, whether it is still held, and raises :class:`LockLost` (one line) when it is
not, so that nothing more is typed. A check cannot make the next keystroke atomic with it:
a session ended in the milliseconds between the answer and the keystroke is noticed at
the next keystroke call. An ``flock`` cannot be lost while its holder lives, so there
``guard`` returns the multiplexer itself: nothing is checked and nothing costs more.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from cafleet.errors import CafleetError, LockTimeout
from cafleet.faults import NO_HOOKS

TYPE_CHECKING = False
if TYPE_CHECKING:
    from cafleet.faults import Hooks
    from cafleet.store.protocol import LockSpace, PaneLock

_MIN_SLEEP = 0.01
_MAX_SLEEP = 0.05


class LockUnavailable(CafleetError):
    """The lock folder or file cannot be created, opened or locked (an ``OSError``)."""


class LockLost(CafleetError):
    """The pane-input lock was lost while held (its database session ended): typing stopped."""


ENTERED_KEPT = 32  # message ids an Enter was pressed for, kept in a lock file


class Held:
    """What :func:`pane_lock` yields: :meth:`guard` makes a multiplexer check the lock
    before each call that sends keys; :meth:`check` is that check.

    Where the lock keeps a note (SQLite's lock file), the note records the message ids
    whose preview got an Enter in this pane and is not yet stamped (:meth:`note_entered`,
    :meth:`entered_before`, :meth:`forget_entered`): the note is only ever read or written
    by its lock's holder, so that record needs no lock of its own, and it outlives the
    process that pressed the Enter (a crash, a later retry by another process). The last
    ``ENTERED_KEPT`` are kept. Where it keeps none (PostgreSQL's advisory lock) nothing is
    recorded and ``entered_before`` is always false."""

    __slots__ = ("_lock", "pane_id")

    def __init__(self, pane_id: str, lock: PaneLock) -> None:
        self.pane_id = pane_id
        self._lock = lock

    def _entered(self) -> list[int]:
        data = self._lock.read_note()
        return [int(word) for word in data.split() if word.isdigit() and len(word) <= 19]

    def _write_entered(self, ids: list[int]) -> None:
        self._lock.write_note(" ".join(map(str, ids[-ENTERED_KEPT:])).encode("ascii"))

    @property
    def keeps_entered(self) -> bool:
        """Whether this lock records Enters (SQLite's lock file; not PostgreSQL's)."""
        return self._lock.keeps_notes

    def entered_before(self, message_id: int) -> bool:
        """Whether an Enter was pressed for this message's preview in this pane before."""
        return message_id in self._entered()

    def note_entered(self, message_id: int) -> None:
        ids = [i for i in self._entered() if i != message_id]
        self._write_entered([*ids, message_id])

    def forget_entered(self, message_id: int) -> None:
        ids = self._entered()
        if message_id in ids:
            self._write_entered([i for i in ids if i != message_id])

    def check(self) -> None:
        """Raise :class:`LockLost` unless the lock is still held (an ``flock`` always is)."""
        if self._lock.can_be_lost and not self._lock.held():
            raise LockLost(
                f"the pane-input lock for pane {self.pane_id} was lost (its database session ended), so typing stopped",
                pane=self.pane_id,
            )

    def guard(self, mux):
        """``mux``, checking this lock before each keystroke call; ``mux`` itself where the
        lock cannot be lost."""
        return GuardedMux(mux, self) if self._lock.can_be_lost else mux


class GuardedMux:
    """A multiplexer whose calls that send keys first check the pane-input lock; every
    other call goes straight through. ``typed``: whether any keys were sent through it."""

    def __init__(self, mux, held: Held) -> None:
        self._mux = mux
        self._held = held
        self.typed = False

    def __getattr__(self, name: str):
        return getattr(self._mux, name)

    def type_text(self, pane_id: str, text: str) -> None:
        self._held.check()
        self.typed = True
        self._mux.type_text(pane_id, text)

    def press_enter(self, pane_id: str) -> None:
        self._held.check()
        self._mux.press_enter(pane_id)

    def press_backspace(self, pane_id: str, count: int) -> None:
        self._held.check()
        self._mux.press_backspace(pane_id, count)

    def press_arrow(self, pane_id: str, direction: str, count: int) -> None:
        self._held.check()
        self.typed = True
        self._mux.press_arrow(pane_id, direction, count)


@contextmanager
def pane_lock(
    space: LockSpace,
    backend: str,
    session: str,
    pane_id: str,
    timeout: float,
    hooks: Hooks = NO_HOOKS,
) -> Iterator[Held]:
    """Hold the pane-input lock for the key, in the lock space ``space`` (``store.locks``),
    while the ``with`` body runs; the body types through ``held.guard(mux)``. ``hooks``:
    the command's test hooks (:mod:`cafleet.faults`), which count each try
    that finds the lock held."""
    if timeout < 0:
        raise ValueError("timeout must not be negative")
    lock = space.pane(backend, session, pane_id, hooks)
    try:
        try:
            lock.open()
            _acquire(lock.try_acquire, pane_id, timeout, hooks)
        except lock.failures as error:  # not a lock found held: that one is retried
            raise LockUnavailable(
                f"the pane-input lock for pane {pane_id} cannot be taken ({error}){lock.fix}", pane=pane_id
            ) from None
        yield Held(pane_id, lock)
    finally:
        lock.release()


def placement_lock(
    space: LockSpace,
    placement: Mapping[str, Any],
    timeout: float,
    hooks: Hooks = NO_HOOKS,
    *,
    pane_id: str | None = None,
) -> AbstractContextManager[Held]:
    """:func:`pane_lock` for the pane of a placement (a ``member_placements`` row's view:
    ``backend``, ``session``, ``pane_id``); ``pane_id`` names a pane the placement does not
    record yet (the pane just opened for a new member)."""
    pane = placement["pane_id"] if pane_id is None else pane_id
    return pane_lock(space, placement["backend"], placement["session"], pane, timeout, hooks)


def _acquire(attempt: Callable[[], bool], pane_id: str, timeout: float, hooks: Hooks = NO_HOOKS) -> None:
    """The one bounded wait for either lock space's lock: ``attempt`` (an ``flock`` or
    ``pg_try_advisory_lock``, never waiting) retried with short sleeps until ``timeout``."""
    deadline = time.monotonic() + timeout
    pause = _MIN_SLEEP
    while True:
        if attempt():
            return
        # test-only count (cafleet.faults): a try found it held
        hooks.trace("lock.busy")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise LockTimeout(
                f"the pane-input lock for pane {pane_id} is still held by another cafleet "
                f"process after {timeout:g} s; try again when that delivery has finished",
                pane=pane_id,
            )
        time.sleep(max(_MIN_SLEEP, min(pause, remaining)))
        pause = min(pause * 2, _MAX_SLEEP)
