"""The pane-input lock (docs/delivery.md): one exclusive lock per concrete placement key
``(backend, session, pane)``, held across processes for a whole batch of keystrokes and for
placement changes.

It is an ``flock`` on a small file in ``lock_dir`` (kept beside the database by the
caller). ``flock`` belongs to the open file, so the operating system releases it when the
holder exits or is killed: a crashed sender can never wedge a pane. The file name is a
hash of the key, so equal keys from any number of placements meet on the same file and
no session or pane string ever becomes a path. Lock files are never deleted: removing one
while another process waits on its descriptor would let two holders in at once (the
classic unlink race), and a file per pane ever used costs nothing.

The wait is bounded: a non-blocking attempt is retried with short sleeps (10-50 ms)
until ``timeout``, then :class:`~cafleet.errors.LockTimeout` is raised; ``timeout=0`` is
one attempt that never waits (``message wait`` probes other members' panes that way). The
lock is not re-entrant: taking it twice in one process waits for itself and times out.

A lock folder or file that cannot be used (the folder is a file, sits below one, is on a
read-only mount or belongs to another user; the lock file is a folder) raises
:class:`LockUnavailable`, a :class:`~cafleet.errors.CafleetError` with one line naming
the path, never a bare ``OSError``: the drain turns it into the not-notified warning.

The folder itself comes from :func:`cafleet.config.lock_dir`, beside the *resolved*
database file, so every spelling of one database (a symlink, ``..``) meets on one lock.

On PostgreSQL (``lock_dir`` is then the database URL) the lock is a session advisory lock
held by a connection of its own (:class:`cafleet.store.postgres.AdvisoryLock`), shared by
every process on every host using that database and released when the holder's session
ends, TCP keepalives bounding how long a dead host keeps it. Its key is a 64-bit BLAKE2b
hash of a cafleet namespace and ``(backend, host, session, pane)``: ``host`` is this
machine's name for a local placement and empty for a remote one, whose session string
(``ssh://host/...``) already names its host. The wait is bounded the same way (polled
``pg_try_advisory_lock``), with the same :class:`~cafleet.errors.LockTimeout` line.

A session can end under a living holder (an administrator's ``pg_terminate_backend``, a
server restart, an idle timeout, keepalives giving up on a partitioned host), and its
advisory lock with it, after which another process may take the lock and type into the
same pane. So :func:`pane_lock` yields a :class:`Held`, and the typing code sends keys
only through ``held.guard(mux)``: before each call that sends keys (``type_text``,
``press_enter``, ``press_backspace``) it asks the lock's own session, in one round trip,
whether the lock is still held, and raises :class:`LockLost` (one line) when it is not,
so that nothing more is typed. A check cannot make the next keystroke atomic with it: a
session ended in the milliseconds between the answer and the keystroke is noticed at the
next keystroke call. An ``flock`` cannot be lost while its holder lives, so on SQLite
``guard`` returns the multiplexer itself: nothing is checked and nothing costs more.
"""

from __future__ import annotations

import fcntl
import os
import time
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from cafleet.errors import CafleetError, LockTimeout

TYPE_CHECKING = False
if TYPE_CHECKING:
    from cafleet.faults import Hooks

_MIN_SLEEP = 0.01
_MAX_SLEEP = 0.05


class LockUnavailable(CafleetError):
    """The lock folder or file cannot be created, opened or locked (an ``OSError``)."""


class LockLost(CafleetError):
    """The pane-input lock was lost while held (its PostgreSQL session ended): typing stopped."""


ENTERED_KEPT = 32  # message ids an Enter was pressed for, kept in a lock file


class Held:
    """What :func:`pane_lock` yields: :meth:`guard` makes a multiplexer check the lock
    before each call that sends keys; :meth:`check` is that check.

    On SQLite the held lock file also records the message ids whose preview got an Enter
    in this pane and is not yet stamped (:meth:`note_entered`, :meth:`entered_before`,
    :meth:`forget_entered`): the file is only ever read or written by its lock's holder,
    so that record needs no lock of its own, and it outlives the process that pressed the
    Enter (a crash, a later retry by another process). The last ``ENTERED_KEPT`` are kept.
    On PostgreSQL there is no such file: nothing is recorded and ``entered_before`` is
    always false."""

    __slots__ = ("pane_id", "_advisory", "_fd")

    def __init__(self, pane_id: str, advisory=None, fd: int | None = None) -> None:
        self.pane_id = pane_id
        self._advisory = advisory  # the AdvisoryLock on PostgreSQL; None for an flock
        self._fd = fd  # the flock'd lock file on SQLite

    def _entered(self) -> list[int]:
        if self._fd is None:
            return []
        try:
            data = os.pread(self._fd, 4096, 0)
        except OSError:
            return []
        return [int(word) for word in data.split() if word.isdigit() and len(word) <= 19]

    def _write_entered(self, ids: list[int]) -> None:
        if self._fd is None:
            return
        data = " ".join(map(str, ids[-ENTERED_KEPT:])).encode("ascii")
        try:
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, data, 0)
        except OSError:
            pass  # a record that cannot be kept only means a later retry may type again

    @property
    def keeps_entered(self) -> bool:
        """Whether this lock records Enters (SQLite's lock file; not PostgreSQL's)."""
        return self._fd is not None

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
        if self._advisory is not None and not self._advisory.held():
            raise LockLost(
                f"the pane-input lock for pane {self.pane_id} was lost (its database session ended), so typing stopped",
                pane=self.pane_id,
            )

    def guard(self, mux):
        """``mux``, checking this lock before each keystroke call; on SQLite ``mux`` itself."""
        return mux if self._advisory is None else GuardedMux(mux, self)


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


def lock_path(lock_dir: str | os.PathLike[str], backend: str, session: str, pane_id: str) -> Path:
    """The lock file for a placement key (pure: nothing is created)."""
    import hashlib

    key = "\0".join((backend, session, pane_id)).encode("utf-8", "surrogatepass")
    return Path(lock_dir) / f"pane-{hashlib.sha256(key).hexdigest()[:32]}.lock"


@contextmanager
def pane_lock(
    lock_dir: str | os.PathLike[str],
    backend: str,
    session: str,
    pane_id: str,
    timeout: float,
    hooks: Hooks | None = None,
) -> Iterator[Held]:
    """Hold the pane-input lock for the key while the ``with`` body runs; the body types
    through ``held.guard(mux)``. ``hooks``: the command's test hooks (``store.hooks``;
    :mod:`cafleet.faults`), which count each try that finds the lock held."""
    if timeout < 0:
        raise ValueError("timeout must not be negative")
    from cafleet.store import is_postgres_url

    if isinstance(lock_dir, str) and is_postgres_url(lock_dir):
        with _advisory_lock(lock_dir, backend, session, pane_id, timeout, hooks) as held:
            yield held
        return
    path = lock_path(lock_dir, backend, session, pane_id)
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as error:
        raise _unavailable(error, lock_dir, pane_id) from None
    try:
        try:
            _acquire(lambda: _try_flock(fd), pane_id, timeout, hooks)
        except OSError as error:  # not BlockingIOError: that one is retried (ENOLCK, EBADF...)
            raise _unavailable(error, lock_dir, pane_id) from None
        yield Held(pane_id, fd=fd)
    finally:
        os.close(fd)  # closing the only descriptor releases the flock


def placement_lock(
    lock_dir: str | os.PathLike[str],
    placement: Mapping[str, Any],
    timeout: float,
    hooks: Hooks | None = None,
    *,
    pane_id: str | None = None,
) -> AbstractContextManager[Held]:
    """:func:`pane_lock` for the pane of a placement (a ``member_placements`` row's view:
    ``backend``, ``session``, ``pane_id``); ``pane_id`` names a pane the placement does not
    record yet (the pane just opened for a new member)."""
    pane = placement["pane_id"] if pane_id is None else pane_id
    return pane_lock(lock_dir, placement["backend"], placement["session"], pane, timeout, hooks)


def _try_flock(fd: int) -> bool:
    """One attempt at the ``flock``: False when another holds it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def advisory_key(backend: str, session: str, pane_id: str) -> int:
    """The PostgreSQL advisory-lock key of a placement (pure)."""
    import socket

    from cafleet.store.postgres import lock_key

    host = "" if session.startswith("ssh://") else socket.gethostname()
    return lock_key("pane-input", backend, host, session, pane_id)


@contextmanager
def _advisory_lock(
    url: str, backend: str, session: str, pane_id: str, timeout: float, hooks: Hooks | None
) -> Iterator[Held]:
    from cafleet.errors import DatabaseError
    from cafleet.store.postgres import AdvisoryLock

    held = AdvisoryLock(url, advisory_key(backend, session, pane_id), hooks)
    try:
        try:
            held.open()
            _acquire(held.try_acquire, pane_id, timeout, hooks)
        except DatabaseError as error:
            raise LockUnavailable(
                f"the pane-input lock for pane {pane_id} cannot be taken ({error})", pane=pane_id
            ) from None
        yield Held(pane_id, held)
    finally:
        held.release()


def _unavailable(error: OSError, lock_dir, pane_id: str) -> LockUnavailable:
    return LockUnavailable(
        f"the pane-input lock for pane {pane_id} cannot be taken ({error}); "
        f"{os.fspath(lock_dir)} must be a folder this user can write",
        pane=pane_id,
    )


def _acquire(attempt: Callable[[], bool], pane_id: str, timeout: float, hooks: Hooks | None = None) -> None:
    """The one bounded wait for either engine's lock: ``attempt`` (an ``flock`` or
    ``pg_try_advisory_lock``, never waiting) retried with short sleeps until ``timeout``."""
    deadline = time.monotonic() + timeout
    pause = _MIN_SLEEP
    while True:
        if attempt():
            return
        if hooks is not None:  # test-only count (cafleet.faults): a try found it held
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
