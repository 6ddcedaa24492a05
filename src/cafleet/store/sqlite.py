"""Opening the database: diagnosis first, then the per-connection pragmas.

Every command goes through :func:`open_store`, which returns a :class:`SqliteStore` whose
connection has passed the format diagnosis (docs/storage.md) (initialising a missing or empty
file in one transaction). The command body reuses that connection.

Journal mode: WAL, chosen by measurement (docs/storage.md): readers never block the
writer, so ``message wait``/``listen`` loops and the WebUI do not stall senders, and a
commit costs one WAL append instead of a rollback-journal write plus database write.
``synchronous`` stays at SQLite's default FULL so that a committed message survives a
power loss, not only a process crash.
"""

from __future__ import annotations

import os

from cafleet import clock
from cafleet.errors import DatabaseError, DatabaseGone
from cafleet.faults import NO_HOOKS
from cafleet.store import (
    DEFAULT_BUSY_TIMEOUT,
    ReadSnapshot,
    diagnosis,
    keeper_base,
    schema,
    sqlite_driver as sqlite3,
)

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.faults import Hooks
    from cafleet.store.protocol import KeeperRecord, LockSpace, Problem, Store as StoreInterface, Trigger

# The oldest SQLite that reads every statement cafleet sends: UPDATE ... RETURNING (ACK).
# Python uses the system's libsqlite3 (docs/storage.md "Which SQLite").
MIN_SQLITE = (3, 35)


# --- what a failed SQLite call means, told by SQLite's own error name -----------------------
# Every SQLite exception carries ``sqlite_errorname`` (``SQLITE_FULL``, ``SQLITE_BUSY``,
# ``SQLITE_CORRUPT``, ``SQLITE_READONLY_ROLLBACK``...). cafleet classifies by that name,
# never by the wording of the message, and turns each class into one line that says what
# is wrong with the file or its folder and what to do. The advice never suggests moving a
# healthy file away: a full disk or a read-only folder is not a damaged database.


class StorageFault(DatabaseError):
    """The file system or the file failed under a healthy format (full, read-only, I/O,
    damaged page). ``fix`` is the advice `cafleet doctor` prints."""

    def __init__(self, message: str, fix: str) -> None:
        super().__init__(message)
        self.fix = fix


def errorname(exc: BaseException) -> str:
    return getattr(exc, "sqlite_errorname", None) or ""


def base_name(exc: BaseException) -> str:
    """``SQLITE_IOERR_WRITE`` -> ``SQLITE_IOERR``: the primary result code's name."""
    name = errorname(exc)
    parts = name.split("_")
    return "_".join(parts[:2]) if len(parts) > 2 else name


# The file system or the process environment failed; the format may be fine.
ENVIRONMENT = frozenset(
    (
        "SQLITE_BUSY",
        "SQLITE_LOCKED",
        "SQLITE_FULL",
        "SQLITE_IOERR",
        "SQLITE_CANTOPEN",
        "SQLITE_READONLY",
        "SQLITE_PERM",
        "SQLITE_NOMEM",
        "SQLITE_AUTH",
        "SQLITE_NOLFS",
        "SQLITE_PROTOCOL",
    )
)


def is_environment(exc: BaseException) -> bool:
    return base_name(exc) in ENVIRONMENT


def _disk_full(path: str) -> bool:
    try:
        stats = os.statvfs(os.path.dirname(path) or "/")
    except OSError:
        return False
    return stats.f_bavail == 0 or (stats.f_files > 0 and stats.f_favail == 0)


def _folder_read_only(path: str) -> bool:
    folder = os.path.dirname(path) or "/"
    return os.path.isdir(folder) and not os.access(folder, os.W_OK | os.X_OK)


def full(path: str) -> StorageFault:
    return StorageFault(
        f"disk full: database {path} cannot be written; free space on its file system and try again.",
        f"free space on the file system holding {path}; the database itself is fine, do not move it away",
    )


def translate(exc: BaseException, path: str, busy_timeout: float = DEFAULT_BUSY_TIMEOUT) -> DatabaseError:
    """One line for a failed SQLite call on ``path``; the error keeps SQLite's base error
    name as ``sqlite_base`` (SQLITE_CANTOPEN, ...) for callers that retry a transient one."""
    error = _translate(exc, path, busy_timeout)
    error.sqlite_base = base_name(exc)  # type: ignore[attr-defined]
    error.sqlite_name = errorname(exc)  # type: ignore[attr-defined]
    return error


# Another process is opening the file at this moment: its log index (-shm) is being made
# or recovered, which a connection that may not write the index cannot wait out by itself.
OPENING_ELSEWHERE = frozenset(("SQLITE_READONLY_RECOVERY", "SQLITE_READONLY_CANTINIT", "SQLITE_BUSY_RECOVERY"))


def _translate(exc: BaseException, path: str, busy_timeout: float) -> DatabaseError:
    name = errorname(exc)
    base = base_name(exc)
    if name in OPENING_ELSEWHERE:
        return DatabaseError(f"database {path} is being opened by another process ({name}); try again.")
    if base in ("SQLITE_BUSY", "SQLITE_LOCKED"):
        return DatabaseError.locked(path, busy_timeout)
    if base == "SQLITE_FULL" or (base in ("SQLITE_IOERR", "SQLITE_CANTOPEN") and _disk_full(path)):
        return full(path)
    if base in ("SQLITE_READONLY", "SQLITE_CANTOPEN", "SQLITE_PERM", "SQLITE_AUTH"):
        folder = os.path.dirname(path) or "/"
        if _folder_read_only(path):
            return StorageFault(
                f"the database folder {folder} is read-only; cafleet writes {os.path.basename(path)} and its "
                "-wal and -shm files there, so make the folder writable or choose another CAFLEET_DATABASE_URL.",
                f"make {folder} writable (the database itself is fine, do not move it away)",
            )
        if base == "SQLITE_CANTOPEN":
            return StorageFault(
                f"cannot open database {path}; check that the folder exists and is writable.",
                f"check that {folder} exists and is writable",
            )
        return StorageFault(
            f"database {path} is read-only; check the file and folder permissions.",
            f"make {path} and its folder writable",
        )
    if base == "SQLITE_IOERR":
        return StorageFault(
            f"disk I/O error on database {path} ({name}); check the disk and its free space, then try again.",
            f"check the disk holding {path}",
        )
    if base == "SQLITE_CONSTRAINT":  # a UNIQUE index, a trigger's RAISE, a foreign key
        from cafleet.errors import constraint_refused

        return constraint_refused(path, str(exc))
    if base in ("SQLITE_CORRUPT", "SQLITE_NOTADB"):
        return StorageFault(
            f"database {path} is damaged ({exc}); cafleet cannot read it. Restore it from a backup, "
            f"or save what can be saved with `sqlite3 {path} .recover`.",
            f"restore {path} from a backup (`sqlite3 {path} .recover` saves what is readable)",
        )
    return DatabaseError(f"database {path} failed: {exc}.")


def as_database_error(exc: BaseException, path: str | None, busy_timeout: float) -> DatabaseError | None:
    """A SQLite exception that escaped the store (raised while a cursor was being read) as
    the same one line; ``None`` for anything else."""
    if not errorname(exc) or path is None:
        return None
    if base_name(exc) == "SQLITE_CONSTRAINT":
        return None  # a broken rule is a bug or a foreign row, not a storage fault
    return translate(exc, path, busy_timeout)


class SqliteStore:
    """A validated connection plus the write-transaction discipline (BEGIN IMMEDIATE)."""

    __slots__ = ("_queue", "busy_timeout", "conn", "hooks", "identity", "path")
    engine = "sqlite"
    schema = "main"  # the one database of the file, as SQL qualifies a table with it
    BEGIN_READ = "BEGIN"  # a deferred transaction: its first read fixes the snapshot
    broadcast_workers = 32  # recipients of a broadcast whose previews are typed at the same time

    def __init__(
        self, conn: sqlite3.Connection, path: str, busy_timeout: float, identity=None, hooks: Hooks = NO_HOOKS
    ) -> None:
        self.conn = conn
        self.hooks = hooks  # the command's test hooks (cafleet.faults); NO_HOOKS outside a test
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
        return FileLocks.beside(self.path)

    def classify(self, exc: BaseException) -> DatabaseError | None:
        """An exception of this engine's driver that escaped :meth:`execute` (raised while a
        result was read: a damaged page, a full disk) as cafleet's one-line error; None for
        anything else, and for a refused constraint (a bug or a foreign row, not a fault)."""
        if isinstance(exc, sqlite3.DatabaseError) and not isinstance(exc, sqlite3.IntegrityError):
            return translate(exc, self.path, self.busy_timeout)
        return None

    def execute(self, sql: str, params=()):
        try:
            return self.conn.execute(sql, params)
        except sqlite3.DatabaseError as exc:  # a refused constraint too: ConstraintRefused
            raise translate(exc, self.path, self.busy_timeout) from None

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
                raise translate(error, self.store.path, self.store.busy_timeout) from None
        else:
            _rollback_quietly(conn)
            if exc_type is not None and issubclass(exc_type, sqlite3.DatabaseError):
                raise translate(exc, self.store.path, self.store.busy_timeout) from None
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
    hooks: Hooks = NO_HOOKS,
) -> StoreInterface:
    """Diagnose the SQLite file at ``path`` and return a SqliteStore ready for use, initialising
    it if new/empty. The layers above open a store with
    :func:`cafleet.store.engines.open_store`, which chooses the engine by the location.
    ``hooks``: the command's test hooks (:mod:`cafleet.faults`), reached by every point
    through the store.

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
        raise translate(exc, path, busy_timeout) from None
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
                raise translate(exc, path, busy_timeout) from None
    except BaseException:
        conn.close()
        raise
    return SqliteStore(conn, path, busy_timeout, identity, hooks)


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
        if errorname(exc) == "SQLITE_READONLY_ROLLBACK":
            raise diagnosis.hot_journal(path) from None
        if is_environment(exc):
            raise translate(exc, path, busy_timeout) from None
        raise diagnosis.Refused(
            f"{path} cannot be read as a cafleet database ({exc}); it was left unchanged."
        ) from None


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
    (SQLITE_READONLY_RECOVERY and kin, :data:`OPENING_ELSEWHERE`), which this
    connection, not allowed to write the index, cannot do itself. A folder that really
    cannot be read still fails, after ~0.4 s."""
    import time

    for pause in (*_CANTOPEN_RETRIES, None):
        try:
            return _diagnose_read_only(path, state, busy_timeout)
        except DatabaseError as error:
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
        raise translate(exc, path, busy_timeout) from None
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
        if errorname(exc) == "SQLITE_READONLY_ROLLBACK":
            raise diagnosis.hot_journal(path) from None
        if is_environment(exc):
            raise translate(exc, path, busy_timeout) from None
        raise diagnosis.Refused(f"{path} cannot be read as a SQLite database ({exc}); it was left unchanged.") from None
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
    where it is first needed, in a transaction of its own (:meth:`SqliteStore.create_auxiliary`)."""
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
        raise translate(exc, path, busy_timeout) from None


# --- the lock space: flock'd files beside the file -------------------------------------------


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


if TYPE_CHECKING:  # the type checker holds the SQLite store and its locks to the one interface

    def _conforms(store: SqliteStore) -> StoreInterface:
        return store

    def _locks_conform(space: FileLocks) -> LockSpace:
        return space
