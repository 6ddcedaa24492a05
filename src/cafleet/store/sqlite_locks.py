"""The lock space of a SQLite file: ``flock``'d files beside it (docs/delivery.md).

The pane-input locks (:class:`FileLock`, one file per pane) and a fleet keeper's lock,
record and log (:class:`KeeperFiles`), reached through :class:`FileLocks`
(``store.locks``, :func:`cafleet.store.engines.lock_space`). Loaded by the commands
that type into a pane or run a keeper, not by every command that opens the file.
"""

from __future__ import annotations

import os

from cafleet.faults import NO_HOOKS
from cafleet.store import keeper_base

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.faults import Hooks
    from cafleet.store.protocol import KeeperRecord, LockSpace, Store as StoreInterface


class FileLocks:
    """The lock space of a SQLite file (docs/delivery.md): ``flock``'d files in ``folder``,
    kept beside the *resolved* database file (:meth:`beside`), so every spelling of one
    database (a symlink, ``..``) meets on one lock per pane, as SQLite puts its own
    -wal/-shm beside the resolved file. ``flock`` belongs to the open file, so the kernel
    releases it when the holder exits or is killed, however it dies, and a living holder
    never loses it. Lock files are never deleted: removing one while another process
    waits on its descriptor would let two holders in at once (the classic unlink race),
    and a file per pane ever used costs nothing."""

    __slots__ = ("folder",)

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = os.fspath(folder)

    @classmethod
    def beside(cls, path: str) -> FileLocks:
        """The lock space of the database file at ``path``: ``locks`` beside the resolved file."""
        return cls(os.path.join(os.path.dirname(os.path.realpath(path)), "locks"))

    def pane_path(self, backend: str, session: str, pane_id: str) -> str:
        """The lock file of a placement key (pure: nothing is created). Its name is a hash
        of the key, so equal keys from any number of placements meet on the same file and
        no session or pane string ever becomes a path."""
        import hashlib

        key = "\0".join((backend, session, pane_id)).encode("utf-8", "surrogatepass")
        return os.path.join(self.folder, f"pane-{hashlib.sha256(key).hexdigest()[:32]}.lock")

    def pane(self, backend: str, session: str, pane_id: str, hooks: Hooks = NO_HOOKS) -> FileLock:  # noqa: ARG002 -- the protocol's signature; an flock has no test point
        return FileLock(self.pane_path(backend, session, pane_id), self.folder)

    def keeper(self, fleet_id: int, location_key: str, schema: str, environ) -> KeeperFiles:  # noqa: ARG002 -- the protocol's signature; the file names the database
        return KeeperFiles(self.folder, keeper_base(self.folder, location_key, fleet_id))


class FileLock:
    """One pane-input lock file: :meth:`try_acquire` is one non-blocking ``flock``. The file
    also carries a note for its holders (:meth:`read_note`, :meth:`write_note`): it is only
    ever read or written by the lock's holder, so the note needs no lock of its own, and
    it outlives the process that wrote it."""

    __slots__ = ("fd", "fix", "path")
    failures: tuple[type[BaseException], ...] = (OSError,)
    can_be_lost = False  # a living holder keeps an flock
    keeps_notes = True

    def __init__(self, path: str, folder: str) -> None:
        self.path = path
        self.fd: int | None = None
        self.fix = f"; {folder} must be a folder this user can write"

    def open(self) -> None:
        os.makedirs(os.path.dirname(self.path), mode=0o700, exist_ok=True)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)

    def try_acquire(self) -> bool:
        """One attempt at the ``flock``: False when another holds it (any other ``OSError``
        is raised: ENOLCK, EBADF...)."""
        import fcntl

        assert self.fd is not None, "open() first"
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False

    def held(self) -> bool:
        return self.fd is not None

    def read_note(self) -> bytes:
        if self.fd is None:
            return b""
        try:
            return os.pread(self.fd, 4096, 0)
        except OSError:
            return b""

    def write_note(self, data: bytes) -> None:
        if self.fd is None:
            return
        try:
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, data, 0)
        except OSError:
            pass  # a note that cannot be kept only means a later holder does not read it

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the only descriptor releases the flock
            self.fd = None


class KeeperFiles:
    """A fleet keeper's lock, record and log in a file lock space (docs/delivery.md, "The
    fleet keeper"): an ``flock`` on ``<base>.lock``; the record, ``key value`` lines in
    ``<base>.state``, written (atomically: a temporary file renamed over it) once the lock
    is held and removed when it is let go, whose modification time is the heartbeat (no
    write to the database, so no other process's change waiter wakes for it); the log
    ``<base>.log``. A record can outlive a keeper killed with SIGKILL, so it carries the
    holder's process start time for the reader to check."""

    __slots__ = ("fd", "folder", "lock_path", "log_path", "record", "state_path")

    def __init__(self, folder: str, base: str) -> None:
        self.folder = folder
        self.lock_path, self.state_path, self.log_path = base + ".lock", base + ".state", base + ".log"
        self.fd: int | None = None
        self.record: dict[str, str] | None = None

    def unwritable(self, error: OSError) -> str:
        return (
            f"its lock folder {self.folder} cannot be written ({error}); "
            "make it a writable folder (it holds the pane-input locks and the keeper's lock and log)"
        )

    def holder(self, store: StoreInterface) -> KeeperRecord | None:  # noqa: ARG002 -- the protocol's signature; the record is a file
        record = read_record(self.state_path)
        if record is None:
            return None
        try:
            pid, start = int(record["pid"]), record["start"]
        except (KeyError, ValueError):
            return None
        try:
            import time

            age: float | None = max(0.0, time.time() - os.stat(self.state_path).st_mtime)  # the heartbeat
        except OSError:
            age = None  # removed as it was read: its keeper is ending
        return {
            "pid": pid,
            "start": start,
            "since": record.get("since"),
            "host": record.get("host"),
            "log": record.get("log"),
            "age": age,
        }

    def acquire(self, record: dict[str, str], busy_timeout: float) -> bool:  # noqa: ARG002 -- the protocol's signature; an flock never waits
        import fcntl

        os.makedirs(os.path.dirname(self.lock_path), mode=0o700, exist_ok=True)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self.fd = fd
        self.record = record
        self._write_record()
        return True

    def _write_record(self) -> None:
        assert self.record is not None
        temporary = f"{self.state_path}.{self.record['pid']}.tmp"
        out = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        with open(out, "w", encoding="utf-8") as handle:
            handle.write("".join(f"{key} {value}\n" for key, value in self.record.items()))
        os.replace(temporary, self.state_path)  # a reader sees the old record or the new one, never half

    def beat(self) -> bool:
        """The record's modification time moved (a record removed by hand is written again)."""
        if self.fd is None:
            return False
        try:
            os.utime(self.state_path)
        except OSError:
            try:  # noqa: SIM105 - contextlib stays off the hot commands' path
                self._write_record()
            except OSError:
                pass  # readers see no record: "not running", which the next command's start corrects
        return True

    def alive(self) -> bool:
        return self.fd is not None  # an flock is never lost while its holder lives

    def release(self) -> None:
        """Withdraw the record (if it is still ours) and let go of the lock."""
        if self.fd is not None:
            mine = read_record(self.state_path)
            if mine is not None and self.record is not None and mine.get("pid") == self.record["pid"]:
                try:  # noqa: SIM105 - contextlib stays off the hot commands' path
                    os.unlink(self.state_path)
                except OSError:
                    pass
            os.close(self.fd)  # closing the only descriptor releases the flock
            self.fd = None


def read_record(path: str) -> dict[str, str] | None:
    """The ``key value`` lines of a keeper's state file; None when there is none (or it is unreadable)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            text = handle.read(4096)
    except OSError:
        return None
    record = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        record[key] = value
    return record


if TYPE_CHECKING:  # the type checker holds the file lock space to the one interface

    def _locks_conform(space: FileLocks) -> LockSpace:
        return space
