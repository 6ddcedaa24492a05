"""Opening the database: diagnosis first, then the per-connection pragmas.

Every command goes through :func:`open_store`, which returns a :class:`Store` whose
connection has passed the format diagnosis of spec §2.1 (initialising a missing or empty
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
from cafleet.errors import DatabaseError
from cafleet.store import diagnosis, schema, sqlite as sqlite3

DEFAULT_BUSY_TIMEOUT = 5.0


class Store:
    """A validated connection plus the write-transaction discipline (BEGIN IMMEDIATE)."""

    __slots__ = ("conn", "path", "busy_timeout")

    def __init__(self, conn: sqlite3.Connection, path: str, busy_timeout: float) -> None:
        self.conn = conn
        self.path = path
        self.busy_timeout = busy_timeout

    def write(self) -> "_WriteTransaction":
        """``with store.write(): ...`` runs the block in one BEGIN IMMEDIATE transaction."""
        return _WriteTransaction(self)

    def execute(self, sql: str, params=()):
        try:
            return self.conn.execute(sql, params)
        except sqlite3.OperationalError as exc:
            raise translate(exc, self.path, self.busy_timeout) from None

    def close(self) -> None:
        self.conn.close()


class _WriteTransaction:
    __slots__ = ("store",)

    def __init__(self, store: Store) -> None:
        self.store = store

    def __enter__(self) -> Store:
        self.store.execute("BEGIN IMMEDIATE")
        return self.store

    def __exit__(self, exc_type, exc, tb) -> bool:
        conn = self.store.conn
        if exc_type is None:
            try:
                conn.execute("COMMIT")
            except sqlite3.OperationalError as error:
                conn.execute("ROLLBACK")
                raise translate(error, self.store.path, self.store.busy_timeout) from None
        elif conn.in_transaction:
            conn.execute("ROLLBACK")
        return False


def translate(exc: sqlite3.Error, path: str, busy_timeout: float = DEFAULT_BUSY_TIMEOUT) -> DatabaseError:
    message = str(exc)
    if diagnosis.is_busy(exc):
        return DatabaseError(
            f"database {path} is locked by another process (waited {busy_timeout:g} s); try again."
        )
    if "readonly" in message or "read-only" in message:
        return DatabaseError(f"database {path} is read-only; check the file and folder permissions.")
    if "unable to open" in message:
        return DatabaseError(f"cannot open database {path}; check that the folder exists and is writable.")
    if "disk I/O" in message or "full" in message:
        return DatabaseError(f"database {path} cannot be written ({message}); check free space and permissions.")
    return DatabaseError(f"database {path} failed: {message}.")


def _connect(path: str, busy_timeout: float) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=busy_timeout, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA foreign_keys=ON")
    return conn


def open_store(path: str, busy_timeout: float = DEFAULT_BUSY_TIMEOUT) -> Store:
    """Diagnose ``path`` and return a Store ready for use, initialising it if new/empty."""
    state = diagnosis.read_header_state(path)
    if state == diagnosis.MISSING:
        _make_parent(path)
    elif state == diagnosis.ZERO_IDENTITY:
        state = _look_inside_zero_identity(path, busy_timeout)
    try:
        conn = _connect(path, busy_timeout)
    except sqlite3.Error as exc:
        raise translate(exc, path, busy_timeout) from None
    try:
        if state in (diagnosis.MISSING, diagnosis.EMPTY):
            _initialise(conn, path, busy_timeout)
        diagnose_open(conn, path, busy_timeout, identity_checked=state == diagnosis.CAFLEET)
    except BaseException:
        conn.close()
        raise
    return Store(conn, path, busy_timeout)


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
        if diagnosis.is_busy(exc):
            raise translate(exc, path, busy_timeout) from None
        raise diagnosis.Refused(f"{path} cannot be read as a cafleet database ({exc}); it was left unchanged.") from None


def _look_inside_zero_identity(path: str, busy_timeout: float) -> str:
    """A zero-identity file is either empty (initialise) or foreign (refuse).

    Looked at through a read-only connection so that a foreign file is never written.
    A WAL may hold another process's initialisation that the raw header does not show.
    """
    try:
        conn = sqlite3.connect(f"file:{_uri_path(path)}?mode=ro", uri=True, timeout=busy_timeout)
        try:
            application_id = conn.execute("PRAGMA application_id").fetchone()[0]
            count = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        if diagnosis.is_busy(exc):
            raise translate(exc, path, busy_timeout) from None
        raise diagnosis.Refused(f"{path} cannot be read as a SQLite database ({exc}); it was left unchanged.") from None
    if application_id == schema.APPLICATION_ID:
        return diagnosis.CAFLEET
    if application_id == 0 and count == 0:
        return diagnosis.EMPTY
    raise diagnosis.not_cafleet(path)


def _uri_path(path: str) -> str:
    from urllib.parse import quote

    return quote(path)


def _make_parent(path: str) -> None:
    parent = os.path.dirname(path)
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as exc:
        raise DatabaseError(f"cannot create the database folder {parent}: {exc.strerror or exc}.") from None
    if not os.access(parent, os.W_OK | os.X_OK):
        raise DatabaseError(f"the database folder {parent} is not writable; choose another CAFLEET_DATABASE_URL.")


def _initialise(conn: sqlite3.Connection, path: str, busy_timeout: float) -> None:
    """Create the baseline in one transaction, unless another process already did."""
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            if conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0 and (
                conn.execute("PRAGMA application_id").fetchone()[0] == 0
            ):
                conn.execute(f"PRAGMA application_id={schema.APPLICATION_ID}")
                for sql in (*schema.TABLES.values(), *schema.INDEXES.values()):
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
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    except sqlite3.OperationalError as exc:
        raise translate(exc, path, busy_timeout) from None
