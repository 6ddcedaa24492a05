"""Opening the database: diagnosis first, then the per-connection pragmas.

Every command goes through :func:`open_store`, which returns a :class:`SqliteStore` whose
connection has passed the format diagnosis (docs/storage.md) (initialising a missing or empty
file in one transaction). The command body reuses that connection.

Journal mode: WAL, chosen by measurement (docs/storage.md): readers never block the
writer, so ``message wait``/``listen`` loops and the WebUI do not stall senders, and a
commit costs one WAL append instead of a rollback-journal write plus database write.
``synchronous`` stays at SQLite's default FULL so that a committed message survives a
power loss, not only a process crash.

Beside this module, loaded only when needed: :mod:`cafleet.store.sqlite_faults` (what a
failed SQLite call means, as one line) and :mod:`cafleet.store.sqlite_locks` (the lock
space beside the file).
"""

from __future__ import annotations

import os

from cafleet import clock
from cafleet.errors import DatabaseError, DatabaseGone
from cafleet.store import (
    DEFAULT_BUSY_TIMEOUT,
    ReadSnapshot,
    diagnosis,
    schema,
    sqlite_driver as sqlite3,
)

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.store.protocol import Problem, Store as StoreInterface, Trigger
    from cafleet.store.sqlite_locks import FileLocks

# The oldest SQLite that reads every statement cafleet sends: UPDATE ... RETURNING (ACK).
# Python uses the system's libsqlite3 (docs/storage.md "Which SQLite").
MIN_SQLITE = (3, 35)


def failure(exc: BaseException, path: str, busy_timeout: float) -> DatabaseError:
    """A failed SQLite call on ``path`` as cafleet's one line
    (:func:`cafleet.store.sqlite_faults.translate`, imported with the first failure)."""
    from cafleet.store import sqlite_faults

    return sqlite_faults.translate(exc, path, busy_timeout)


class SqliteStore:
    """A validated connection plus the write-transaction discipline (BEGIN IMMEDIATE)."""

    __slots__ = ("_queue", "busy_timeout", "conn", "identity", "path")
    engine = "sqlite"
    schema = "main"  # the one database of the file, as SQL qualifies a table with it
    BEGIN_READ = "BEGIN"  # a deferred transaction: its first read fixes the snapshot
    broadcast_workers = 32  # recipients of a broadcast whose previews are typed at the same time

    def __init__(self, conn: sqlite3.Connection, path: str, busy_timeout: float, identity=None) -> None:
        self.conn = conn
        self.path = path
        self.busy_timeout = busy_timeout
        self.identity = identity if identity is not None else file_identity(path)
        self._queue: _WriteQueue | None = None

    def write_queue(self) -> _WriteQueue | None:
        """The writers' queue beside the database, opened on the first write."""
        if self._queue is None:
            self._queue = _WriteQueue(self.path)
        return self._queue if self._queue.fd >= 0 else None

    def write(self) -> _WriteTransaction:
        """``with store.write(): ...`` runs the block in one BEGIN IMMEDIATE transaction."""
        return _WriteTransaction(self)

    def read(self) -> ReadSnapshot:
        """``with store.read(): ...`` runs the block's reads in one read transaction, so they
        see one state of the file (under WAL it never blocks a writer); always ended."""
        return ReadSnapshot(self)

    def end_transaction(self) -> None:
        """Roll back a transaction left open (a borrowed connection given back); raises the
        driver's error when the connection is broken, which the caller drops."""
        if self.conn.in_transaction:
            self.conn.execute("ROLLBACK")

    def auxiliary_problems(self) -> dict[str, Problem]:
        """``{name: "missing" | "altered"}`` for cafleet's auxiliary tables and indexes."""
        return diagnosis.auxiliary_problems(self.conn)

    def triggers_and_rules(self) -> list[Trigger] | None:
        """Other roles' triggers and rules on the required tables (`cafleet doctor`): None,
        a SQLite file has no roles (whoever can write the file owns everything in it)."""
        return None

    def member_environment(self) -> dict[str, str]:
        """What a member's pane needs besides CAFLEET_DATABASE_URL to reach this store: nothing."""
        return {}

    def location_key(self) -> str:
        """The database's identity as one string, however it was spelled: the resolved file."""
        return os.path.realpath(self.path)

    @property
    def display_name(self) -> str:
        """The store as a report names it (no secret in it): the file's path."""
        return self.path

    @property
    def locks(self) -> FileLocks:
        """The pane-input locks and the fleet keepers' locks: files beside the resolved file."""
        from cafleet.store.sqlite_locks import FileLocks

        return FileLocks.beside(self.path)

    def classify(self, exc: BaseException) -> DatabaseError | None:
        """An exception of this engine's driver that escaped :meth:`execute` (raised while a
        result was read: a damaged page, a full disk) as cafleet's one-line error; None for
        anything else, and for a refused constraint (a bug or a foreign row, not a fault)."""
        if isinstance(exc, sqlite3.DatabaseError) and not isinstance(exc, sqlite3.IntegrityError):
            return failure(exc, self.path, self.busy_timeout)
        return None

    def execute(self, sql: str, params=()):
        try:
            return self.conn.execute(sql, params)
        except sqlite3.DatabaseError as exc:  # a refused constraint too: ConstraintRefused
            raise failure(exc, self.path, self.busy_timeout) from None

    def insert(self, sql: str, params, key: str) -> int:  # noqa: ARG002 -- the protocol's signature; lastrowid needs no column name
        """Run an INSERT and return the new row's id (``key`` names its column; the
        PostgreSQL store reads it back with RETURNING: :meth:`cafleet.store.postgres.store.PgStore.insert`)."""
        return self.execute(sql, params).lastrowid

    def change_waiter(self, interval: float) -> DataVersionWaiter:
        """A waiter for other connections' commits whose baseline is taken now, before
        the caller's first read."""
        return DataVersionWaiter(self, interval)

    def tables_present(self, names, recheck: bool = False) -> set[str]:  # noqa: ARG002 -- the protocol's signature; the file is read every time
        """Which of ``names`` are tables of this database (auxiliary tables are optional);
        always read from the file (``recheck`` is for the PostgreSQL store's cached look)."""
        names = list(names)
        rows = self.execute(
            f"SELECT name FROM sqlite_master WHERE type = 'table' AND name IN ({','.join('?' * len(names))})", names
        ).fetchall()
        return {row[0] for row in rows}

    def create_auxiliary(self, names) -> list[str]:
        """Create those of cafleet's auxiliary tables and indexes ``names`` that the file
        lacks, in one write transaction of their own, and return them. Called where one is
        first needed (and by ``cafleet setup``); never part of the baseline, which is exactly
        the seed's tables (docs/storage.md). One read when they all exist."""
        names = list(names)
        rows = self.execute(
            f"SELECT name FROM sqlite_master WHERE name IN ({','.join('?' * len(names))})", names
        ).fetchall()
        missing = [name for name in names if name not in {row[0] for row in rows}]
        if missing:
            statements = {**schema.AUX_TABLES, **schema.AUX_INDEXES}
            with self.write():
                for name in missing:
                    self.execute(schema.create_if_missing(statements[name]))
        return missing

    def file_replaced(self) -> bool:
        """True when ``path`` no longer names the file this store opened (deleted, or
        replaced by another file): one ``stat``, cheap enough for every few checks of a
        waiting loop. The open connection keeps reading the old file, so a loop that sees
        True must stop (see :meth:`check_file`) instead of serving a ghost."""
        return file_identity(self.path) != self.identity

    def check_file(self) -> None:
        """Raise a one-line :class:`DatabaseError` when :meth:`file_replaced`."""
        if self.file_replaced():
            raise replaced_error(self.path)

    def usable(self) -> bool:
        """Whether an idle connection can serve again (the WebUI's pool asks before reuse):
        always, a SQLite connection is a file handle no server can end."""
        return True

    def close(self) -> None:
        self.conn.close()
        if self._queue is not None:
            self._queue.close()


class DataVersionWaiter:
    """Sleeps in steps of ``interval`` until ``PRAGMA data_version`` changes (it changes
    only when another connection commits), so a waiting process costs a few microseconds
    of CPU per check. ``wait`` answers True (read again) or False once the deadline passed."""

    __slots__ = ("interval", "store", "version")
    blocks = False  # :meth:`wait` sleeps in steps, reading the store's connection
    apart = False  # it reads the store's own connection: the store must stay open

    def __init__(self, store: SqliteStore, interval: float) -> None:
        self.store = store
        self.interval = interval
        self.version = self._data_version()

    def _data_version(self) -> int:
        return self.store.execute("PRAGMA data_version").fetchone()[0]

    def changed(self) -> bool:
        """Without sleeping: has another connection committed since the last look?"""
        current = self._data_version()
        if current == self.version:
            return False
        self.version = current
        return True

    def wait(self, deadline: float | None) -> bool:
        import time

        while True:
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                time.sleep(min(self.interval, remaining))
            else:
                time.sleep(self.interval)
            current = self._data_version()
            if current != self.version:
                self.version = current
                return True

    def close(self) -> None:
        return None


def file_identity(path: str):
    """``(st_dev, st_ino)`` of the file at ``path``, or None when there is none."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return (stat.st_dev, stat.st_ino)


def replaced_error(path: str) -> DatabaseGone:
    if file_identity(path) is None:
        return DatabaseGone(f"database {path} was deleted while this command was running; it stopped.")
    return DatabaseGone(f"database {path} was replaced by another file while this command was running; it stopped.")


class _WriteQueue:
    """Writers of one database queue on an ``flock`` of a small file beside it, taken just
    before ``BEGIN IMMEDIATE`` and released after COMMIT or ROLLBACK.

    SQLite's own busy handler has no queue: a writer that finds the lock taken sleeps (up
    to 100 ms a round) and may lose several rounds to luckier ones, which makes the tail of
    `message send` under contention. A writer blocked in ``flock`` is woken by the kernel
    the moment the holder releases it. The OS releases the lock of a process that dies, so
    a crash never leaves the queue stuck. The wait is bounded by the busy timeout, like
    SQLite's. When the file cannot be opened (a read-only folder), writers fall back to
    SQLite's busy handler alone; other programs writing the database never see the file.
    """

    __slots__ = ("fd",)
    SUFFIX = "-writers.lock"

    def __init__(self, path: str) -> None:
        try:
            self.fd = os.open(path + self.SUFFIX, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        except OSError:
            self.fd = -1

    def acquire(self, timeout: float) -> bool:
        """Take the lock (True), or give up after ``timeout`` seconds (False)."""
        import fcntl

        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            pass
        except OSError:
            return True  # no queue on this file system: SQLite's busy handler still serialises
        if timeout <= 0:
            return False
        try:
            return _blocking_flock(self.fd, timeout)
        except ValueError:  # not the main thread: no timer signal here, so poll
            return _polling_flock(self.fd, timeout)

    def release(self) -> None:
        import fcntl

        try:  # noqa: SIM105 - contextlib stays off the hot commands' path
            fcntl.flock(self.fd, fcntl.LOCK_UN)
        except OSError:
            pass

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class _QueueTimeout(Exception):
    pass


def _blocking_flock(fd: int, timeout: float) -> bool:
    """A blocking ``flock`` cut short by a one-shot SIGALRM after ``timeout`` seconds
    (main thread only: ``signal`` raises ValueError elsewhere)."""
    import _signal
    import fcntl

    def expired(_signum, _frame):
        raise _QueueTimeout()

    previous = _signal.signal(_signal.SIGALRM, expired)
    try:
        _signal.setitimer(_signal.ITIMER_REAL, timeout)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            return True
        except _QueueTimeout:
            return False
        finally:
            _signal.setitimer(_signal.ITIMER_REAL, 0)
    finally:
        _signal.signal(_signal.SIGALRM, previous)


def _polling_flock(fd: int, timeout: float) -> bool:
    import fcntl
    import time

    deadline = time.monotonic() + timeout
    pause = 0.0005
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(pause)
            pause = min(pause * 2, 0.005)


class _WriteTransaction:
    __slots__ = ("queued", "store")

    def __init__(self, store: SqliteStore) -> None:
        self.store = store
        self.queued = False

    def __enter__(self) -> SqliteStore:
        store = self.store
        queue = store.write_queue()
        if queue is not None:
            if not queue.acquire(store.busy_timeout):
                raise DatabaseError.locked(store.path, store.busy_timeout)
            self.queued = True
        try:
            store.execute("BEGIN IMMEDIATE")
        except BaseException:
            self._release()
            raise
        return store

    def _release(self) -> None:
        if self.queued:
            self.queued = False
            queue = self.store.write_queue()
            if queue is not None:
                queue.release()

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            return self._finish(exc_type, exc)
        finally:
            self._release()

    def _finish(self, exc_type, exc) -> bool:
        conn = self.store.conn
        if exc_type is None:
            try:
                conn.execute("COMMIT")
            except sqlite3.DatabaseError as error:
                # A COMMIT that failed on a full disk or an I/O error has already been
                # rolled back by SQLite; only a transaction still open needs ROLLBACK.
                _rollback_quietly(conn)
                raise failure(error, self.store.path, self.store.busy_timeout) from None
        else:
            _rollback_quietly(conn)
            if exc_type is not None and issubclass(exc_type, sqlite3.DatabaseError):
                raise failure(exc, self.store.path, self.store.busy_timeout) from None
        return False


def _rollback_quietly(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        try:  # noqa: SIM105 - contextlib stays off the hot commands' path
            conn.execute("ROLLBACK")
        except sqlite3.DatabaseError:
            pass  # the original failure is the one worth reporting


def _connect(path: str, busy_timeout: float) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=busy_timeout, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA foreign_keys=ON")
    return conn


def _check_sqlite_version() -> None:
    """Refuse, before anything is made, a SQLite library older than :data:`MIN_SQLITE`."""
    version = sqlite3.driver.sqlite_version
    major, minor = version.split(".")[:2]
    if (int(major), int(minor)) < MIN_SQLITE:
        raise DatabaseError(
            f"this Python's SQLite library is {version}; cafleet needs SQLite {MIN_SQLITE[0]}.{MIN_SQLITE[1]} "
            "or newer (UPDATE ... RETURNING): use a Python linked with a newer libsqlite3."
        )


def open_store(
    path: str,
    busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
) -> StoreInterface:
    """Diagnose the SQLite file at ``path`` and return a SqliteStore ready for use, initialising
    it if new/empty. The layers above open a store with
    :func:`cafleet.store.engines.open_store`, which chooses the engine by the location.

    An existing file is diagnosed through a connection that cannot write (see
    :func:`_diagnose_read_only`); only a file that passed is opened for writing, so a
    refused file and its ``-wal``, ``-shm`` and ``-journal`` stay byte-identical.
    """
    _check_sqlite_version()
    state = diagnosis.read_header_state(path)
    if state == diagnosis.MISSING:
        _make_parent(path)
    elif state in (diagnosis.CAFLEET, diagnosis.ZERO_IDENTITY):
        _check_log(path)
        state = _diagnose_read_only_retrying(path, state, busy_timeout)
    identity = file_identity(path)
    try:
        conn = _connect(path, busy_timeout)
    except sqlite3.Error as exc:
        raise failure(exc, path, busy_timeout) from None
    try:
        if state in (diagnosis.MISSING, diagnosis.EMPTY):
            _initialise(conn, path, busy_timeout)
            diagnose_open(conn, path, busy_timeout)
            identity = file_identity(path)
        else:
            # One read opens the -wal and -shm: a full disk or a read-only folder shows
            # here, at open, as what it is.
            try:
                conn.execute("PRAGMA schema_version").fetchone()
            except sqlite3.DatabaseError as exc:
                raise failure(exc, path, busy_timeout) from None
    except BaseException:
        conn.close()
        raise
    return SqliteStore(conn, path, busy_timeout, identity)


def _check_log(path: str) -> None:
    """Refuse a ``-wal`` that SQLite's recovery would cut short, losing committed writes
    (:mod:`cafleet.store.wal`), before any connection reads it. One ``stat`` when there is
    no log with a frame in it (a quiet database: the last connection to close removed it)."""
    try:
        if os.stat(path + "-wal").st_size < 32 + 24 + 512:  # the log's header and one frame of the smallest page
            return
    except OSError:
        return
    from cafleet.store import wal

    wal.check(path)


def diagnose_open(
    conn: sqlite3.Connection, path: str, busy_timeout: float = DEFAULT_BUSY_TIMEOUT, identity_checked: bool = False
) -> None:
    """The identity/ledger/shape checks on an open connection (no writes).

    ``identity_checked``: the file header already carried cafleet's application_id.
    """
    try:
        if not identity_checked and conn.execute("PRAGMA application_id").fetchone()[0] != schema.APPLICATION_ID:
            raise diagnosis.not_cafleet(path)
        diagnosis.check_ledger_and_shape(conn, path)
    except sqlite3.DatabaseError as exc:
        from cafleet.store.sqlite_faults import unreadable

        raise unreadable(exc, path, busy_timeout, "a cafleet database") from None


def _read_only_uri(path: str) -> str:
    """A URI for a connection that cannot change ``path`` or its side files.

    - no ``-wal``: ``immutable=1`` reads the main file alone (it is the whole database)
      without creating a ``-wal`` or ``-shm``, unless a ``-journal`` is present: then
      ``mode=ro``, which answers SQLITE_READONLY_ROLLBACK instead of rolling a hot
      journal back;
    - ``-wal`` and ``-shm``: ``mode=ro&readonly_shm=1`` reads the log without writing
      the shared-memory index (a crashed writer's ``-shm`` keeps its bytes);
    - ``-wal`` without ``-shm`` (rare: a crash, then the index was removed): ``mode=ro``,
      which has to create the index file to read the log.
    """
    uri = f"file:{_uri_path(path)}?mode=ro"
    if os.path.exists(path + "-wal"):
        return uri + "&readonly_shm=1" if os.path.exists(path + "-shm") else uri
    if os.path.exists(path + "-journal"):
        return uri
    return uri + "&immutable=1"


_CANTOPEN_RETRIES = (0.01, 0.03, 0.06, 0.1, 0.2)  # seconds between tries


def _diagnose_read_only_retrying(path: str, state: str, busy_timeout: float) -> str:
    """:func:`_diagnose_read_only`, tried again when the read-only open meets another
    process's open or close: the side files it chose its URI by can appear or vanish in
    between (SQLITE_CANTOPEN: the last connection closing removed its ``-wal`` and
    ``-shm``), or the log index is being made by the process opening the file after it
    (SQLITE_READONLY_RECOVERY and kin, :data:`cafleet.store.sqlite_faults.OPENING_ELSEWHERE`),
    which this connection, not allowed to write the index, cannot do itself. A folder that really
    cannot be read still fails, after ~0.4 s."""
    import time

    for pause in (*_CANTOPEN_RETRIES, None):
        try:
            return _diagnose_read_only(path, state, busy_timeout)
        except DatabaseError as error:
            from cafleet.store.sqlite_faults import OPENING_ELSEWHERE

            transient = getattr(error, "sqlite_base", None) == "SQLITE_CANTOPEN" or (
                getattr(error, "sqlite_name", None) in OPENING_ELSEWHERE
            )
            if pause is None or not transient:
                raise
            time.sleep(pause)
    raise AssertionError("unreachable")


def _diagnose_read_only(path: str, state: str, busy_timeout: float) -> str:
    """Run the whole format diagnosis through a read-only connection.

    Returns CAFLEET (accepted) or EMPTY (a zero-identity file with nothing in it: to be
    initialised). Raises :class:`diagnosis.Refused` or a one-line storage fault. A
    read-only connection never checkpoints, never rolls a journal back and never deletes
    a side file when it closes.
    """
    try:
        conn = sqlite3.connect(_read_only_uri(path), uri=True, timeout=busy_timeout, isolation_level=None)
    except sqlite3.Error as exc:
        raise failure(exc, path, busy_timeout) from None
    try:
        if state == diagnosis.ZERO_IDENTITY:
            state = _look_inside_zero_identity(conn, path, busy_timeout)
            if state == diagnosis.EMPTY:
                return state
        diagnose_open(conn, path, busy_timeout, identity_checked=state == diagnosis.CAFLEET)
        return diagnosis.CAFLEET
    finally:
        conn.close()


def _look_inside_zero_identity(conn: sqlite3.Connection, path: str, busy_timeout: float) -> str:
    """A zero-identity file is either empty (initialise) or foreign (refuse).

    A WAL may hold another process's initialisation that the raw header does not show.
    """
    try:
        application_id = conn.execute("PRAGMA application_id").fetchone()[0]
        count = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
    except sqlite3.DatabaseError as exc:
        from cafleet.store.sqlite_faults import unreadable

        raise unreadable(exc, path, busy_timeout, "a SQLite database") from None
    if application_id == schema.APPLICATION_ID:
        return diagnosis.CAFLEET
    if application_id == 0 and count == 0:
        return diagnosis.EMPTY
    raise diagnosis.not_cafleet(path)


_URI_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789/._-~")


def _uri_path(path: str) -> str:
    """``path`` percent-encoded for a ``file:`` URI, byte by byte (a path that is not
    valid UTF-8 survives). Written out rather than ``urllib.parse.quote``, whose import
    would cost every command that opens the database."""
    return "".join(chr(b) if b in _URI_SAFE else f"%{b:02X}" for b in os.fsencode(path))


def _make_parent(path: str) -> None:
    parent = os.path.dirname(path)
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as exc:
        raise DatabaseError(f"cannot create the database folder {parent}: {exc.strerror or exc}.") from None
    if not os.access(parent, os.W_OK | os.X_OK):
        raise DatabaseError(f"the database folder {parent} is not writable; choose another CAFLEET_DATABASE_URL.")


def _initialise(conn: sqlite3.Connection, path: str, busy_timeout: float) -> None:
    """Create the baseline in one transaction, unless another process already did: exactly
    the seed's tables, indexes and ledger row. cafleet's auxiliary objects come later, each
    where it is first needed, in a transaction of its own
    (:meth:`SqliteStore.create_auxiliary`)."""
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            if conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0 and (
                conn.execute("PRAGMA application_id").fetchone()[0] == 0
            ):
                conn.execute(f"PRAGMA application_id={schema.APPLICATION_ID}")
                for sql in (*schema.TABLES.values(), *schema.INDEXES.values()):  # exactly the seed's
                    conn.execute(sql)
                conn.execute(
                    f"INSERT INTO {schema.LEDGER_TABLE} (version, name, applied_on, checksum) VALUES (?, ?, ?, ?)",
                    (schema.HEAD_VERSION, "baseline", clock.now(), schema.baseline_checksum()),
                )
                conn.execute("COMMIT")
                conn.execute("PRAGMA journal_mode=WAL")
            else:
                conn.execute("ROLLBACK")
        except BaseException:
            _rollback_quietly(conn)
            raise
    except sqlite3.DatabaseError as exc:
        raise failure(exc, path, busy_timeout) from None


if TYPE_CHECKING:  # the type checker holds the SQLite store to the one interface

    def _conforms(store: SqliteStore) -> StoreInterface:
        return store
