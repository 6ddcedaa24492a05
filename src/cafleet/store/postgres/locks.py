"""The PostgreSQL lock space: session advisory locks, each on a connection of its own,
for the pane-input locks and the fleet keepers' locks (whose record rides on the lock
session's ``application_name``)."""

from __future__ import annotations

import select

from cafleet import clock
from cafleet.errors import DatabaseError
from cafleet.faults import NO_HOOKS
from cafleet.store import keeper_base, libpq
from cafleet.store.postgres.session import DEFAULT_SCHEMA, connect, lock_key, translate

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.faults import Hooks
    from cafleet.store.protocol import KeeperRecord, LockSpace, Store as StoreInterface


# --- the pane-input lock --------------------------------------------------------------------


# Whether this session holds the advisory lock of a bigint key: pg_locks shows the key's
# high half as classid, its low half as objid, and objsubid 1.
_HOLDS_LOCK = (
    "SELECT EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() "
    "AND classid = ?::bigint::oid AND objid = ?::bigint::oid AND objsubid = 1 AND granted)"
)


class AdvisoryLocks:
    """The lock space of a PostgreSQL database (:class:`cafleet.store.protocol.LockSpace`):
    session advisory locks on the server, shared by every process on every host using it.
    ``url`` is the location as given (with its password: each lock opens a session)."""

    __slots__ = ("url",)

    def __init__(self, url: str) -> None:
        self.url = url

    def pane(self, backend: str, session: str, pane_id: str, hooks: Hooks = NO_HOOKS) -> AdvisoryLock:
        return AdvisoryLock(self.url, pane_key(backend, session, pane_id), hooks)

    def keeper(self, fleet_id: int, location_key: str, schema_name: str, environ) -> KeeperSession:
        folder = state_home(environ)  # the locks have no folder: the log goes to the user's state folder
        log_path = keeper_base(folder, location_key, fleet_id) + ".log"
        return KeeperSession(self.url, lock_key("fleet-keeper", schema_name, str(fleet_id)), folder, log_path)


def pane_key(backend: str, session: str, pane_id: str) -> int:
    """The advisory-lock key of a placement's pane-input lock (pure): ``host`` in it is this
    machine's name for a local placement and empty for a remote one, whose session string
    (``ssh://host/...``) already names its host."""
    import socket

    host = "" if session.startswith("ssh://") else socket.gethostname()
    return lock_key("pane-input", backend, host, session, pane_id)


def state_home(environ) -> str:
    """``$XDG_STATE_HOME/cafleet/keepers`` (else under ``$HOME/.local/state``): where a
    fleet keeper of a PostgreSQL database keeps its log."""
    import os

    state = environ.get("XDG_STATE_HOME", "")
    if not os.path.isabs(state):
        home = environ.get("HOME", "")
        state = os.path.join(home if os.path.isabs(home) else "/tmp", ".local", "state")
    return os.path.join(state, "cafleet", "keepers")


class AdvisoryLock:
    """A session advisory lock on its own connection: released on unlock, on close and when
    the holder dies (the server ends its session; keepalives make that seconds).

    A session can also end under a living holder (``pg_terminate_backend``, a server
    restart, an idle timeout, keepalives giving up on a partitioned host), and with it the
    lock: :meth:`held` asks, in one round trip on the lock's own connection, whether it is
    still held. As a pane-input lock (:class:`cafleet.store.protocol.PaneLock`) it keeps no
    note."""

    failures: tuple[type[BaseException], ...] = (DatabaseError,)
    fix = ""  # the error says what is wrong with the server
    can_be_lost = True
    keeps_notes = False

    def __init__(self, url: str, key: int, hooks: Hooks = NO_HOOKS) -> None:
        self.url = url
        self.key = key
        self.hooks = hooks  # the command's test hooks (cafleet.faults)
        self.conn: libpq.Connection | None = None
        self.ping = False  # the server ends idle sessions: every alive() is a round trip

    def open(self, busy_timeout: float = 5.0) -> None:
        """The lock's own connection (raises :class:`~cafleet.errors.DatabaseError`)."""
        # pg_try_advisory_lock never waits and names no table: no settings round trip.
        self.conn = connect(self.url, busy_timeout, DEFAULT_SCHEMA, settings=False, hooks=self.hooks)

    def try_acquire(self) -> bool:
        """One attempt that never waits (the caller's loop backs off between attempts)."""
        assert self.conn is not None, "open() first"
        try:
            row = self.conn.execute("SELECT pg_try_advisory_lock(?)", (self.key,)).fetchone()
        except libpq.Error as exc:
            raise translate(exc, self.url, 5.0) from None
        return row is not None and bool(row[0])

    def try_acquire_as(self, application_name: str) -> bool:
        """:meth:`try_acquire`, naming the session (``application_name``, which other
        processes read in pg_stat_activity) and learning in the same round trip whether the
        server ends idle sessions (``idle_session_timeout``: then :meth:`alive` pings)."""
        assert self.conn is not None, "open() first"
        try:
            row = self.conn.execute(
                "SELECT set_config('application_name', ?, false), pg_try_advisory_lock(?), "
                "(SELECT setting FROM pg_settings WHERE name = 'idle_session_timeout')",
                (application_name[:63], self.key),
            ).fetchone()
        except libpq.Error as exc:
            raise translate(exc, self.url, 5.0) from None
        self.ping = bool(row) and row[2] not in (None, "0")
        return bool(row and row[1])

    def alive(self) -> bool:
        """Whether the lock's session is still open (a server restart or
        ``pg_terminate_backend`` ends it, and the lock with it), never an exception. Costs
        no round trip while nothing arrived on the session's socket (a server that ends a
        session says so first), unless the server ends idle sessions: then each call is a
        ``SELECT 1``, which keeps the session from being idle for longer than the caller's look."""
        conn = self.conn
        if conn is None or conn.closed:
            return False
        try:
            poller = select.poll()
            poller.register(conn.fileno(), select.POLLIN)
            if not poller.poll(0) and not self.ping:
                return True  # nothing unasked for: the session is as it was
            conn.execute("SELECT 1").fetchone()  # something came: ask whether the session lives
        except (libpq.Error, OSError, ValueError):  # the session is gone, and so is the lock
            return False
        return True

    def beat(self) -> bool:
        """One round trip on the lock's session (``SELECT 1``), which moves the session's
        ``pg_stat_activity.state_change``: the fleet keeper's heartbeat, which other
        processes read (:func:`cafleet.delivery.supervision.keeper_control.status`). False once the session is
        gone, and the lock with it; never an exception."""
        conn = self.conn
        if conn is None or conn.closed:
            return False
        try:
            conn.execute("SELECT 1").fetchone()
        except (libpq.Error, OSError, ValueError):
            return False
        return True

    def held(self) -> bool:
        """Whether this session still holds the lock: False once the session ended (its
        connection is closed or broken, or the query fails), never an exception."""
        conn = self.conn
        if conn is None or conn.closed or conn.broken:
            return False
        try:
            row = conn.execute(_HOLDS_LOCK, ((self.key >> 32) & 0xFFFFFFFF, self.key & 0xFFFFFFFF)).fetchone()
        except libpq.Error:
            return False
        return bool(row and row[0])

    def read_note(self) -> bytes:
        return b""

    def write_note(self, data: bytes) -> None:
        pass

    def release(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close()  # ends the session, which releases its advisory locks
            except libpq.Error:
                pass  # a session already gone holds nothing
            finally:
                self.conn = None


KEEPER_APP = "cafleet-keeper"  # the start of a keeper's lock session's application_name

# The holder's record, and how long ago its session last ran a statement: its heartbeat.
_KEEPER_HOLDER = (
    "SELECT a.application_name, EXTRACT(EPOCH FROM clock_timestamp() - a.state_change)::float8 "
    "FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid "
    "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
    "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
    "AND l.classid::text = ? AND l.objid::text = ?"
)


class KeeperSession:
    """A fleet keeper's lock and record on PostgreSQL (docs/delivery.md, "The fleet
    keeper"): a session advisory lock (key: BLAKE2b of ``fleet-keeper``, the schema and the
    fleet id) held by a connection the keeper opens for nothing else, which the server
    releases when that session ends. The record rides on the session's
    ``application_name`` (``cafleet-keeper <pid> <since, epoch seconds> <host>``), read
    from ``pg_locks`` and ``pg_stat_activity``, so it can never outlive its keeper; the
    heartbeat is the session's ``state_change``, moved by a ``SELECT 1`` (the server's own
    clock on both sides). The log is ``log_path``, in the user's state folder."""

    __slots__ = ("advisory", "folder", "key", "log_path", "url")

    def __init__(self, url: str, key: int, folder: str, log_path: str) -> None:
        self.url = url
        self.key = key
        self.folder = folder
        self.log_path = log_path
        self.advisory: AdvisoryLock | None = None

    def unwritable(self, error: OSError) -> str:
        return (
            f"its log folder {self.folder} cannot be written ({error}); "
            "make it a writable folder, or point XDG_STATE_HOME at one"
        )

    def holder(self, store: StoreInterface) -> KeeperRecord | None:
        unsigned = self.key & 0xFFFFFFFFFFFFFFFF
        rows = store.execute(_KEEPER_HOLDER, (str(unsigned >> 32), str(unsigned & 0xFFFFFFFF))).fetchall()
        if not rows:
            return None
        name, age = rows[0][0], rows[0][1]
        age = None if age is None else max(0.0, float(age))  # None: a session this role may not see
        words = (name or "").split(" ")
        if len(words) < 3 or words[0] != KEEPER_APP or not words[1].isdigit():
            # held, by a session whose name cannot be read
            return {"pid": None, "since": None, "host": None, "log": self.log_path, "age": age}
        since = None
        try:  # noqa: SIM105 - contextlib stays off the hot commands' path
            since = clock.from_epoch(float(words[2]))
        except ValueError:
            pass
        return {
            "pid": int(words[1]),
            "since": since,
            "host": " ".join(words[3:]) or None,
            "log": self.log_path,
            "age": age,
        }

    def acquire(self, record: dict[str, str], busy_timeout: float) -> bool:
        advisory = AdvisoryLock(self.url, self.key)
        advisory.open(busy_timeout)
        try:
            acquired = advisory.try_acquire_as(
                f"{KEEPER_APP} {record['pid']} {clock.to_epoch(record['since']):.6f} {record['host']}"
            )
        except BaseException:
            advisory.release()
            raise
        if not acquired:
            advisory.release()
            return False
        self.advisory = advisory
        return True

    def beat(self) -> bool:
        """One round trip on the lock's session: False once it is gone, and the lock with it."""
        return self.advisory is not None and self.advisory.beat()

    def alive(self) -> bool:
        """Whether the lock's session is still open (:meth:`AdvisoryLock.alive`)."""
        return self.advisory is not None and self.advisory.alive()

    def release(self) -> None:
        if self.advisory is not None:
            self.advisory.release()
            self.advisory = None


if TYPE_CHECKING:  # the type checker holds the PostgreSQL lock space to the one interface

    def _locks_conform(space: AdvisoryLocks) -> LockSpace:
        return space
