"""The PostgreSQL store: ``CAFLEET_DATABASE_URL=postgresql://...`` (or ``postgres://``).

Imported only when such a URL is configured (``tests/test_hot_imports.py`` proves the
SQLite path never loads it). It talks to the server through libpq, the client library every
PostgreSQL program uses, bound thinly by :mod:`cafleet.store.libpq` (docs/decisions.md
"PostgreSQL client"): the URL, the ``PG*`` environment variables, the passfile, the service
file, TLS and the login are libpq's own. cafleet's tables live in a schema of their own
(``CAFLEET_PG_SCHEMA``, default ``cafleet``), which is the connection's ``search_path``;
the broker's queries name tables without a schema.

:class:`PgStore` implements the one store interface (:class:`cafleet.store.protocol.Store`,
as the SQLite :class:`~cafleet.store.sqlite.SqliteStore` does). Every statement is sent as
the broker wrote it, in the SQL both engines read alike, with sqlite3's ``?`` placeholders,
whose values go to the server apart from the text (:mod:`cafleet.store.libpq`); where the engines differ, the
difference is one of this class's methods (docs/storage.md "Differences, and where they
live"). A write transaction takes one transaction-scoped
advisory lock first, so writers run one at a time as they do on SQLite (``BEGIN
IMMEDIATE``), and every rule the broker checks inside a write holds under READ COMMITTED
exactly as it does there. Each write transaction ends with ``NOTIFY`` on the schema's
channel, without a payload: a hint that something changed, which a waiting process answers
by reading again (see :class:`NotifyWaiter`).
"""

from __future__ import annotations

import select
import time

# BLAKE2 and MD5 from the interpreter's own modules, without hashlib's Python layer (libpq
# maps OpenSSL's libcrypto in anyway; docs/performance.md "On PostgreSQL").
try:
    from _blake2 import blake2b
    from _md5 import md5
except ImportError:  # an interpreter built without them
    from hashlib import blake2b, md5

from cafleet.store import libpq

from cafleet import clock
from cafleet.errors import DatabaseError, DatabaseUnreachable
from cafleet.store import ReadSnapshot, diagnosis, keeper_base, role_text, schema

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from typing import Any

    from cafleet.faults import Hooks
    from cafleet.store.protocol import KeeperRecord, LockSpace, Problem, Store as StoreInterface, Trigger

DEFAULT_SCHEMA = "cafleet"
FALLBACK_POLL = 2.0  # seconds: a waiter re-reads this often even when no notification came
ABSENCE_FRESH = 1.0  # seconds: how long the open's "this auxiliary table is missing" is trusted
# TCP keepalives: a connection to a host that died (and the advisory locks it holds) is
# closed within about idle + interval * count seconds instead of the kernel's two hours.
# Every wait for the server's answer lasts at most the busy timeout (which bounds a lock
# wait, as lock_timeout) and this many seconds more; past it the connection is closed with
# one line, so a server that stops answering never holds a command.
READ_MARGIN = 10.0
KEEPALIVES: dict[str, Any] = {"keepalives": 1, "keepalives_idle": 5, "keepalives_interval": 2, "keepalives_count": 3}


def lock_key(*parts: str) -> int:
    """A signed 64-bit advisory-lock key: BLAKE2b of cafleet's namespace and ``parts``
    (PostgreSQL's ``hashtext`` is 32 bits and collides; this one is ours alone)."""
    text = "\0".join(("cafleet", *parts)).encode("utf-8", "surrogatepass")
    return int.from_bytes(blake2b(text, digest_size=8).digest(), "big", signed=True)


# --- the schema, rendered from store/schema.py's declaration ----------------------------
# An identity column -> BIGINT identity (never reuses an id, like AUTOINCREMENT); INTEGER ->
# BIGINT; INT4 -> INTEGER; REAL (SQLite's 8-byte float) -> DOUBLE PRECISION; TEXT and
# VARCHAR(255) unchanged. fleets and members reference each other, so fleets' foreign key
# is added after members (LATE_FOREIGN_KEYS).

# Rendered when first needed (a new schema's initialisation, an auxiliary object's
# creation; module __getattr__ below): an open of a healthy schema needs only the names.
AUX_TABLE_NAMES = tuple(table.name for table in schema.DECLARED_AUX_TABLES)  # outside the format, optional
AUX_INDEX_NAMES = tuple(index.name for index in schema.DECLARED_AUX_INDEXES)
AUX_NAMES = (*AUX_TABLE_NAMES, *AUX_INDEX_NAMES)
TABLES: dict[str, str]
LATE_FOREIGN_KEYS: tuple[str, ...]
INDEXES: dict[str, str]  # the same statements on both engines
AUX_INDEXES: dict[str, str]
AUX_TABLES: dict[str, str]
_DDL: list[schema.Rendered] = []


def ddl() -> schema.Rendered:
    """This engine's DDL, rendered from the declaration once per process."""
    if not _DDL:
        _DDL.append(schema.render(schema.POSTGRES))
    return _DDL[0]


# What the catalogue must show, as read back by _SHAPE_QUERY (the test suite checks that a
# freshly initialised schema reads back exactly this). An auxiliary table whose columns
# read back otherwise is reported "altered" by `cafleet doctor` (never a reason to refuse
# the schema).
# A column's kind as format_type() reads it back.
CATALOGUE_TYPES: dict[str, str] = {
    "int": "bigint",
    "int4": "integer",
    "text": "text",
    "real": "double precision",
    "varchar255": "character varying(255)",
}


class CatalogueShape:
    """What PostgreSQL's catalogue shows of store/schema.py's declaration, line by line as
    _SHAPE_QUERY renders it, for the required tables: ``columns`` (table -> column
    lines), ``constraints`` (table -> constraint definitions) and ``indexes`` (name ->
    "table (columns)"); the auxiliary tables' lines are :func:`expected_aux_columns`."""

    __slots__ = ("columns", "constraints", "indexes")

    def __init__(self) -> None:
        self.columns = {
            table.name: tuple(_catalogue_column(c) for c in table.columns) for table in schema.DECLARED_TABLES
        }
        self.constraints = {table.name: _catalogue_constraints(table) for table in schema.DECLARED_TABLES}
        self.indexes = {index.name: f"{index.table} ({', '.join(index.columns)})" for index in schema.DECLARED_INDEXES}


def catalogue_shape() -> CatalogueShape:
    return CatalogueShape()


def expected_aux_columns() -> dict[str, tuple[str, ...]]:
    """The auxiliary tables' column lines (``cafleet doctor``'s "altered" check)."""
    return {table.name: tuple(_catalogue_column(c) for c in table.columns) for table in schema.DECLARED_AUX_TABLES}


def _catalogue_column(column: schema.Column) -> str:
    kind = CATALOGUE_TYPES[column.kind]
    text = f"{column.name} {kind}"
    if column.not_null or column.primary:
        text += " NOT NULL"
    if column.identity:
        text += " identity"
    if column.default is not None:
        text += f" DEFAULT {column.default}::{kind}"
    return text


def _catalogue_constraints(table: schema.Table) -> tuple[str, ...]:
    constraints = [f"PRIMARY KEY ({', '.join(table.primary_key)})"]
    for column in table.columns:
        if column.references is not None:
            parent, key, on_delete = column.references
            constraints.append(f"FOREIGN KEY ({column.name}) REFERENCES {parent}({key}) ON DELETE {on_delete}")
    return tuple(constraints)


_SHAPE = catalogue_shape()
EXPECTED_COLUMNS: dict[str, tuple[str, ...]] = _SHAPE.columns
EXPECTED_CONSTRAINTS: dict[str, tuple[str, ...]] = _SHAPE.constraints
EXPECTED_AUX_COLUMNS: dict[str, tuple[str, ...]]  # expected_aux_columns(), when first asked for
EXPECTED_INDEXES: dict[str, str] = _SHAPE.indexes


def __getattr__(name: str) -> object:
    rendered = ddl()
    values = {
        "TABLES": rendered.tables,
        "LATE_FOREIGN_KEYS": rendered.late_foreign_keys,
        "INDEXES": rendered.indexes,
        "AUX_INDEXES": rendered.aux_indexes,
        "AUX_TABLES": rendered.aux_tables,
    }
    if name == "EXPECTED_AUX_COLUMNS":
        return expected_aux_columns()
    if name in values:
        return values[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# One round trip: every relation of the schema, every column, every constraint and every
# index definition, as (kind, table, text).
_SHAPE_QUERY = """
SELECT 'relation', c.relname, c.relkind::text FROM pg_class c
  JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = ?
UNION ALL
SELECT 'column', c.relname, a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
  || CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END
  || CASE WHEN a.attidentity <> '' THEN ' identity' ELSE '' END
  || COALESCE(' DEFAULT ' || pg_get_expr(d.adbin, d.adrelid), '')
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
  JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
  LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
  WHERE n.nspname = ? AND c.relkind = 'r'
UNION ALL
SELECT 'constraint', c.relname, pg_get_constraintdef(k.oid) FROM pg_constraint k
  JOIN pg_class c ON c.oid = k.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace
  WHERE n.nspname = ?
UNION ALL
SELECT 'index', i.relname, t.relname || ' ('
  || array_to_string(ARRAY(SELECT pg_get_indexdef(x.indexrelid, k, true) FROM generate_series(1, x.indnkeyatts) k), ', ')
  || ')'
  || CASE WHEN x.indisunique THEN ' unique' ELSE '' END
  || COALESCE(' WHERE ' || pg_get_expr(x.indpred, x.indrelid), '')
  FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid
  JOIN pg_namespace n ON n.oid = t.relnamespace WHERE n.nspname = ?
UNION ALL
SELECT 'owner', '', pg_get_userbyid(n.nspowner)::text FROM pg_namespace n WHERE n.nspname = ?
UNION ALL
SELECT 'owner', c.relname, pg_get_userbyid(c.relowner)::text FROM pg_class c
  JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = ?
UNION ALL
SELECT 'user', '', current_user::text
"""


class PgStore:
    """A diagnosed connection to the schema, with the same interface as the SQLite Store."""

    __slots__ = (
        "conn",
        "path",
        "url",
        "schema",
        "busy_timeout",
        "identity",
        "channel",
        "present",
        "trusted_owner",
        "begin",
        "absent",
        "absent_until",
        "hooks",
    )
    engine = "postgresql"
    BEGIN_READ = "BEGIN ISOLATION LEVEL REPEATABLE READ"  # one consistent view, as on SQLite
    # Each broadcast worker holds a session and each pane-input lock is one more: 8 workers
    # take at most 16 of a server's connections (max_connections is 100 by default).
    broadcast_workers = 8

    def __init__(
        self,
        conn: libpq.Connection,
        url: str,
        schema_name: str,
        busy_timeout: float,
        trusted_owner: str = "",
        hooks: Hooks | None = None,
    ) -> None:
        self.conn = conn
        self.hooks = hooks  # the command's test hooks (cafleet.faults); None outside a test
        self.url = url
        self.path = _redact(url)  # what messages show
        self.schema = schema_name
        self.busy_timeout = busy_timeout
        self.trusted_owner = trusted_owner  # CAFLEET_PG_TRUSTED_OWNER: "" trusts the connecting role alone
        self.identity = (url, schema_name)
        self.channel = "cafleet_" + schema_name
        # Tables and indexes known to exist (from the diagnosis' catalogue read, or a later
        # look): cafleet never drops one, so a name found once is not asked for again. This
        # keeps a round trip off the send path's budget check (docs/performance.md) and off
        # `fleet create`'s look for the pending index.
        self.present: set[str] = set()
        # Whether a write transaction's opening (BEGIN and the writers' lock) is still to go,
        # in one pipeline with its first statement: one round trip fewer per write (_PgWrite).
        self.begin = False
        # Auxiliary objects the open's catalogue read found missing, trusted as missing
        # until absent_until (monotonic): a command's first look (the send's budget check)
        # needs no round trip of its own, and a long-lived process asks again later.
        self.absent: set[str] = set()
        self.absent_until = 0.0

    def tables_present(self, names, recheck: bool = False) -> set[str]:
        """Which of ``names`` are tables in this store's schema; asks the catalogue only
        about those not already known to exist. ``recheck``: also about those the open found
        absent less than a second ago (a row just read may come from a table created since)."""
        return self._present(names, recheck)

    def _present(self, names, recheck: bool = False) -> set[str]:
        """Which of ``names`` (tables or indexes) exist in the schema: one catalogue read for
        those not already known to (cafleet never drops one, so a name found stays found)."""
        names = list(names)
        fresh = self.absent if time.monotonic() < self.absent_until and not recheck else ()
        unknown = [name for name in names if name not in self.present and name not in fresh]
        if unknown:
            rows = self.execute(
                "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                f"WHERE n.nspname = ? AND c.relname IN ({','.join('?' * len(unknown))})",
                [self.schema, *unknown],
            ).fetchall()
            self.present.update(row[0] for row in rows)
        return {name for name in names if name in self.present}

    def create_auxiliary(self, names) -> list[str]:
        """Create those of cafleet's auxiliary tables and indexes ``names`` that the schema
        lacks, in one write transaction of their own (the writers' lock serialises racing
        creators; ``IF NOT EXISTS`` makes the later one a no-op), and return them. Never
        part of the initialising transaction, which creates exactly the seed's tables."""
        names = list(names)
        found = self._present(names)
        missing = [name for name in names if name not in found]
        if missing:
            statements = {**ddl().aux_tables, **ddl().aux_indexes}
            with self.write():
                for name in missing:
                    self.execute(schema.create_if_missing(statements[name]))
            self.present.update(missing)
        return missing

    def execute(self, sql: str, params=()):
        """Run one statement, its ``?`` placeholders' values sent apart from the text."""
        try:
            if self.begin:  # the first statement of a write: the transaction's opening goes with it
                self.begin = False
                return self.conn.pipeline([("BEGIN", ()), (self.write_lock(), ()), (sql, params)])
            return self.conn.execute(sql, params)
        except libpq.DataError as exc:
            if "NUL" in str(exc) and any("\0" in p for p in params if isinstance(p, str)):
                raise DatabaseError(
                    "PostgreSQL text cannot hold the character U+0000 (NUL); remove it from the text and try again."
                ) from None
            raise translate(exc, self.url, self.busy_timeout) from None
        except libpq.Error as exc:
            raise translate(exc, self.url, self.busy_timeout) from None

    def write_lock(self) -> str:
        """The writers' lock a write transaction takes first (bounded by lock_timeout)."""
        return f"SELECT pg_advisory_xact_lock({lock_key('writers', self.schema)})"

    def insert(self, sql: str, params, key: str) -> int:
        """Run an INSERT and return the new row's ``key`` column (its generated id)."""
        return self.execute(sql + " RETURNING " + key, params).fetchone()[0]

    def write(self) -> "_PgWrite":
        return _PgWrite(self)

    def read(self) -> "ReadSnapshot":
        """``with store.read(): ...``: the block's reads in one REPEATABLE READ transaction
        (``BEGIN_READ``), one consistent view as on SQLite; always ended."""
        return ReadSnapshot(self)

    def end_transaction(self) -> None:
        """Roll back a transaction left open; raises when the connection is broken."""
        if self.conn.info.transaction_status != libpq.IDLE:
            self.conn.execute("ROLLBACK")

    def auxiliary_problems(self) -> dict[str, Problem]:
        """``{name: "missing" | "altered"}`` for cafleet's auxiliary tables and indexes."""
        return auxiliary_problems(self)

    def triggers_and_rules(self) -> list[Trigger] | None:
        """Every trigger and rule on a required table (`cafleet doctor`)."""
        return triggers_and_rules(self)

    def member_environment(self) -> dict[str, str]:
        """What a member's pane needs besides CAFLEET_DATABASE_URL to reach this store: the
        schema, and the trusted owner, so that its cafleet accepts the tables as this one does."""
        environment = {"CAFLEET_PG_SCHEMA": self.schema}
        if self.trusted_owner:
            environment["CAFLEET_PG_TRUSTED_OWNER"] = self.trusted_owner
        return environment

    def location_key(self) -> str:
        """The schema's identity as one string: where the server is, not how the URL spelled
        it (a passfile, a password), and the schema. The hosts are all those the location
        names (libpq's reading of it), not the one answering now: after a failover to a
        standby it is the same fleet."""
        options = self.conn.info.options()
        hosts = options.get("host") or options.get("hostaddr", "")
        return f"{hosts}\0{options.get('port', '')}\0{options.get('dbname', '')}\0{self.schema}"

    @property
    def display_name(self) -> str:
        """The store as a report names it: the URL without its password, and the schema."""
        return f"{self.path} (schema {self.schema})"

    @property
    def locks(self) -> AdvisoryLocks:
        """The pane-input locks and the fleet keepers' locks: advisory locks on the server."""
        return AdvisoryLocks(self.url)

    def classify(self, exc: BaseException) -> DatabaseError | None:
        """A driver exception that escaped :meth:`execute` as cafleet's one-line error;
        None for anything else, and for a refused constraint."""
        if isinstance(exc, libpq.Error) and not isinstance(exc, libpq.IntegrityError):
            return translate(exc, self.url, self.busy_timeout)
        return None

    def change_waiter(self, interval: float) -> "NotifyWaiter":  # noqa: ARG002 -- the protocol's signature; a NOTIFY wakes the waiter, it polls on no interval
        """A waiter whose baseline is now: LISTEN before the caller's first read."""
        return NotifyWaiter(self)

    def file_replaced(self) -> bool:
        return False

    def usable(self) -> bool:
        """Whether this idle connection can serve again, without a round trip: open, outside
        a transaction, and nothing unasked for waiting on its socket. A server that ends the
        session (a restart, ``pg_terminate_backend``, an idle timeout) sends its reason and
        closes, which the client would only notice on the next query."""
        conn = self.conn
        if conn.closed or conn.info.transaction_status != libpq.IDLE:
            return False
        poller = select.poll()  # not select(): a descriptor above 1023 is fine
        poller.register(conn.fileno(), select.POLLIN)
        return not poller.poll(0)

    def check_file(self) -> None:
        return None

    def reopen(self) -> None:
        """Replace the connection with a new one that passed the diagnosis again, as a
        command's open does (one round trip on a healthy schema): after the server ended
        the session (a restart, ``pg_terminate_backend``, ``idle_session_timeout``).
        Raises what the open raises; the old connection is kept until a new one is had."""
        fresh = open_store(self.url, self.busy_timeout, self.schema, self.trusted_owner, self.hooks)
        old, self.conn = self.conn, fresh.conn
        self.present |= fresh.present
        self.absent, self.absent_until = fresh.absent, fresh.absent_until
        try:
            old.close()
        except libpq.Error:
            pass

    def close(self) -> None:
        self.conn.close()


class _PgWrite:
    __slots__ = ("store",)

    def __init__(self, store: PgStore) -> None:
        self.store = store

    def __enter__(self) -> PgStore:
        store = self.store
        # The transaction and the writers' lock (bounded by lock_timeout) go to the server
        # with the first statement, in its round trip (PgStore.execute): none here.
        store.begin = True
        return store

    def __exit__(self, exc_type, exc, tb) -> None:
        store = self.store
        if store.begin:  # no statement ran: no transaction was opened, nothing to end
            store.begin = False
            return
        if exc_type is None:
            try:
                store.conn.pipeline([(f"NOTIFY {libpq.quote_ident(store.channel)}", ()), ("COMMIT", ())])
            except libpq.Error as error:
                _rollback_quietly(store.conn)
                raise translate(error, store.url, store.busy_timeout) from None
        else:
            _rollback_quietly(store.conn)


def _rollback_quietly(conn) -> None:
    try:
        if conn.info.transaction_status != libpq.IDLE:
            conn.execute("ROLLBACK")
    except libpq.Error:
        pass


def _redact(url: str) -> str:
    """:func:`cafleet.credentials.redact`, whose regular expressions (and ``re``) are
    loaded only when ``url`` can hold a password: a ``password`` parameter (or a
    percent-encoded key, which may spell one), or a colon
    between a ``://`` and the ``@`` after it (``user:password@``). Otherwise neither of
    its patterns can match, and the URL is its own redaction."""
    lower = url.lower()
    may_hold = "password" in lower or "%" in url.partition("?")[2]  # pass%77ord= is a password to libpq
    at = url.find("@")
    while not may_hold and at >= 0:
        start = url.rfind("://", 0, at)
        may_hold = start >= 0 and ":" in url[start + 3 : at]
        at = url.find("@", at + 1)
    if not may_hold:
        return url
    from cafleet.credentials import redact

    return redact(url)


def translate(exc: BaseException, url: str, busy_timeout: float) -> DatabaseError:
    """One line for a failed PostgreSQL call on ``url``, by SQLSTATE; the URL's password
    is never in it, nor anything libpq quoted of it (:func:`cafleet.credentials.scrub`)."""
    from cafleet.credentials import scrub

    error = _translated(exc, _redact(url), busy_timeout)
    error.message = scrub(error.message, url)
    return error


def _translated(exc: BaseException, where: str, busy_timeout: float) -> DatabaseError:
    if isinstance(exc, libpq.Missing):
        return DatabaseError(str(exc))
    state = getattr(exc, "sqlstate", None) or ""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if state == "55P03":  # lock_not_available: lock_timeout expired
        return DatabaseError.locked(where, busy_timeout)
    if state.startswith("08") or isinstance(exc, libpq.OperationalError):
        return DatabaseUnreachable(f"cannot reach database {where}: {first}; check the server and the URL.")
    if state.startswith("28"):
        return DatabaseError(f"database {where} refused the login: {first}.")
    if state == "42501":
        return DatabaseError(f"database {where}: permission denied ({first}).")
    if state.startswith("23") or state == "P0001":  # integrity constraint, or a trigger's RAISE EXCEPTION
        from cafleet.errors import constraint_refused

        return constraint_refused(where, first)
    return DatabaseError(f"database {where} failed: {first}.")


def connect(
    url: str, busy_timeout: float, schema_name: str, settings: bool = True, hooks: Hooks | None = None
) -> libpq.Connection:
    """An autocommit connection with keepalives, ``search_path`` set to the schema and
    ``lock_timeout`` to the busy timeout; with ``settings=False`` the caller sends
    :func:`_settings_sql` itself (the store's open folds it into its diagnosis). With test
    ``hooks`` that trace SQL (:mod:`cafleet.faults`), each statement sent goes to them."""
    try:
        conn = libpq.Connection.connect(url, read_timeout=busy_timeout + READ_MARGIN, **_defaults(busy_timeout))
    except libpq.Error as exc:
        raise translate(exc, url, busy_timeout) from None
    if hooks is not None and hooks.trace_sql is not None:
        conn.trace = hooks.trace_sql
    if settings:
        try:
            conn.execute(_settings_sql(schema_name, busy_timeout))
        except libpq.Error as exc:
            conn.close()
            raise translate(exc, url, busy_timeout) from None
    return conn


def _defaults(busy_timeout: float) -> dict[str, Any]:
    """The keepalives and a connect timeout, which libpq takes where neither the URL nor a
    ``PG*`` variable (``PGCONNECT_TIMEOUT``) says otherwise."""
    return {**KEEPALIVES, "connect_timeout": max(2, int(busy_timeout) + 1)}


def _settings_sql(schema_name: str, busy_timeout: float) -> str:
    """The connection's settings as one statement. Sent as a statement rather than as the
    startup packet's ``options``: a pooler such as PgBouncer refuses a connection whose
    startup packet carries parameters it does not know. ``schema_name`` is a checked
    lower-case name (its declaration in :mod:`cafleet.config`), so it is quoted here, never bound."""
    return (
        f"SELECT set_config('search_path', '\"{schema_name}\"', false), "
        f"set_config('lock_timeout', '{max(1, int(busy_timeout * 1000))}ms', false)"
    )


def open_store(
    url: str,
    busy_timeout: float,
    schema_name: str | None = None,
    trusted_owner: str | None = None,
    hooks: Hooks | None = None,
) -> PgStore:
    """Connect, diagnose the schema (initialising an empty one) and return the store.
    ``schema_name`` (``CAFLEET_PG_SCHEMA``, read by the command's settings; None is the
    default schema) is checked again by its one declaration, since it is quoted into SQL.
    ``trusted_owner`` (``CAFLEET_PG_TRUSTED_OWNER``) is the one role besides the connecting
    one that may own the schema and cafleet's tables."""
    from cafleet.config import declared

    schema_name = declared("CAFLEET_PG_SCHEMA").parse(schema_name or DEFAULT_SCHEMA)
    trusted_owner = trusted_owner or ""
    conn = connect(url, busy_timeout, schema_name, settings=False, hooks=hooks)
    store = PgStore(conn, url, schema_name, busy_timeout, trusted_owner, hooks)
    try:
        try:
            present = _fast_accept(conn, schema_name, busy_timeout, trusted_owner)
            if present is not None:
                store.present.update(present)
                store.absent = set(AUX_NAMES) - present
                store.absent_until = time.monotonic() + ABSENCE_FRESH
                return store
            conn.execute(_settings_sql(schema_name, busy_timeout))  # the fast path's were rolled back or unchecked
            found = _read_shape(conn, schema_name)
            if diagnose(conn, store.path, schema_name, found, trusted_owner) == "empty":
                _initialise(conn, store.path, schema_name, trusted_owner)
                found = _read_shape(conn, schema_name)
                diagnose(conn, store.path, schema_name, found, trusted_owner)
            store.present.update(found["column"], found["index"])
        except libpq.Error as exc:
            raise translate(exc, store.url, busy_timeout) from None
    except BaseException:
        conn.close()
        raise
    return store


# --- the diagnosis's fast path ---------------------------------------------------------------
# A healthy schema is accepted after one round trip: the settings, then one query over
# pg_catalog reading the ledger's version and an MD5 digest of the required shape, each line
# rendered exactly as _SHAPE_QUERY renders it (so what the digest accepts, the detailed check
# accepts too). The digest of the baseline is computed here from EXPECTED_*. Anything else
# (an empty schema, another one, a newer ledger, a damaged or merely different shape, a
# server without md5()) falls back to the detailed diagnosis, which names what is wrong.
# Auxiliary objects are left out of the digest, as the detailed check leaves them out.
#
# A new backend starts with its catalogue caches cold, so what the query names costs more
# than what it reads (docs/performance.md): the required objects are looked up by regclass
# casts of qualified names, not by joining pg_namespace and pg_class (planning those joins
# cost more than the rest of the open), and lines are built with concat(), one function, not
# with || and COALESCE, whose operators each have to be resolved. A missing object makes
# the cast fail, which is a fallback too. Table names render unqualified because the
# settings put the schema alone on search_path; a different search_path renders them
# qualified, so the digest differs and the detailed path (which sets it again) runs.

_FAST_LINES = """
SELECT concat('column ', a.attrelid::regclass, ' ', a.attname, ' ', format_type(a.atttypid, a.atttypmod),
  CASE WHEN a.attnotnull THEN ' NOT NULL' END, CASE WHEN a.attidentity <> '' THEN ' identity' END,
  CASE WHEN d.adbin IS NOT NULL THEN ' DEFAULT ' END, pg_get_expr(d.adbin, d.adrelid)) AS line
  FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
  WHERE a.attrelid = ANY('{TABLES}'::regclass[]) AND a.attnum > 0 AND NOT a.attisdropped
UNION ALL
SELECT concat('constraint ', k.conrelid::regclass, ' ', pg_get_constraintdef(k.oid)) FROM pg_constraint k
  WHERE k.conrelid = ANY('{TABLES}'::regclass[]) AND k.contype <> 'n'
UNION ALL
SELECT concat('index ', x.indexrelid::regclass, ' ', x.indrelid::regclass, ' (', concat_ws(', ', {KEY_COLUMNS}), ')',
  CASE WHEN x.indisunique THEN ' unique' END, CASE WHEN x.indpred IS NOT NULL THEN ' WHERE ' END,
  pg_get_expr(x.indpred, x.indrelid))
  FROM pg_index x WHERE x.indexrelid = ANY('{INDEXES}'::regclass[])
"""
_fast_queries: dict[tuple[str, float, bool], tuple[str, str]] = {}
_baseline: list[str] = []


def _fast_query(schema_name: str, busy_timeout: float, trusted_owner: str = "") -> tuple[str, str]:
    """The settings and the digest query, two statements sent in one round trip; the
    digest query takes the trusted owner, when there is one, as its parameters."""
    key = (schema_name, busy_timeout, bool(trusted_owner))
    query = _fast_queries.get(key)
    if query is None:
        query = _fast_queries[key] = _build_fast_query(schema_name, busy_timeout, bool(trusted_owner))
    return query


def _build_fast_query(schema_name: str, busy_timeout: float, trusted: bool = False) -> tuple[str, str]:
    def names(objects) -> str:  # a regclass[] literal; a checked schema name needs no quotes in it
        return "{" + ",".join(f"{schema_name}.{name}" for name in objects) + "}"

    # An index's key columns one by one (no set-returning subquery to plan), up to one more
    # than any required index has, so that a longer index renders differently.
    width = 1 + max(definition.count(",") + 1 for definition in EXPECTED_INDEXES.values())
    columns = ", ".join(f"NULLIF(pg_get_indexdef(x.indexrelid, {k}, true), '')" for k in range(1, width + 1))
    lines = (
        _FAST_LINES.replace("{TABLES}", names(EXPECTED_COLUMNS))
        .replace("{INDEXES}", names(EXPECTED_INDEXES))
        .replace("{KEY_COLUMNS}", columns)
    )
    # Which auxiliary objects exist: to_regclass() is a cache lookup, with no scan to plan.
    auxiliary = "".join(f", to_regclass('{schema_name}.{name}') IS NOT NULL" for name in AUX_NAMES)
    return _settings_sql(schema_name, busy_timeout), (
        f'SELECT (SELECT max(version) FROM "{schema_name}".{schema.LEDGER_TABLE}), '
        + f"md5(string_agg(line, E'\\n' ORDER BY line COLLATE \"C\")), {owned_clause(schema_name, trusted)}"
        + f"{auxiliary} FROM ({lines}) lines"
    )


def owned_clause(schema_name: str, trusted: bool) -> str:
    """The fast query's ownership test: true when the schema and every table cafleet uses
    that exists belong to the connecting role or, when ``trusted``, the trusted owner (the
    query's parameter, given twice), looked up by oid as the digest's objects are.
    False or an error means "diagnose in detail", which names the owner and refuses
    (bench/pg_owner_check.py measures what it adds)."""
    owners = "current_user" + (", ?::text" if trusted else "")
    tables = "{" + ",".join(f"{schema_name}.{name}" for name in EXPECTED_COLUMNS) + "}"
    aux_oids = ", ".join(f"to_regclass('{schema_name}.{name}')" for name in AUX_TABLE_NAMES)
    return (
        f"(SELECT pg_get_userbyid(nspowner) IN ({owners}) FROM pg_namespace WHERE oid = '{schema_name}'::regnamespace)"
        f" AND NOT EXISTS (SELECT FROM pg_class WHERE (oid = ANY('{tables}'::regclass[]) OR oid IN ({aux_oids}))"
        f" AND pg_get_userbyid(relowner) NOT IN ({owners}))"
    )


def baseline_digest() -> str:
    """The MD5 digest the fast path expects: EXPECTED_* as the catalogue renders them,
    sorted and joined by newlines (computed once per process)."""
    if not _baseline:
        lines = [f"column {table} {column}" for table, columns in EXPECTED_COLUMNS.items() for column in columns]
        lines += [f"constraint {table} {c}" for table, constraints in EXPECTED_CONSTRAINTS.items() for c in constraints]
        lines += [f"index {name} {definition}" for name, definition in EXPECTED_INDEXES.items()]
        _baseline.append(md5("\n".join(sorted(lines)).encode(), usedforsecurity=False).hexdigest())
    return _baseline[0]


def _fast_accept(conn, schema_name: str, busy_timeout: float, trusted_owner: str = "") -> set[str] | None:
    """When one round trip shows the ledger at the head version, exactly the baseline's
    shape and every object owned by the connecting role or ``trusted_owner`` (the settings
    are then in effect): the tables present, required and auxiliary, and the auxiliary
    indexes present (PgStore.present). None means "diagnose in detail"."""
    try:
        settings, digest = _fast_query(schema_name, busy_timeout, trusted_owner)
        row = conn.pipeline([(settings, ()), (digest, (trusted_owner,) * 2 if trusted_owner else ())]).fetchone()
    except libpq.Error:
        if conn.broken or conn.closed:
            raise
        return None  # a missing ledger or object, no md5(): the detailed diagnosis says what
    if row is None or row[:3] != (schema.HEAD_VERSION, baseline_digest(), True):
        return None
    return {*EXPECTED_COLUMNS, *(name for name, present in zip(AUX_NAMES, row[3:]) if present)}


def _read_shape(conn, schema_name: str) -> dict[str, dict[str, set[str]]]:
    found: dict[str, dict[str, set[str]]] = {
        "relation": {},
        "column": {},
        "constraint": {},
        "index": {},
        "owner": {},  # "" -> the schema's owner; a relation's name -> its owner
        "user": {},  # "" -> the connecting role
    }
    for kind, table, text in conn.execute(_SHAPE_QUERY, (schema_name,) * _SHAPE_QUERY.count("?")).fetchall():
        found[kind].setdefault(table, set()).add(text)
    return found


def diagnose(conn, where: str, schema_name: str, found: dict | None = None, trusted_owner: str = "") -> str:
    """ "empty" (initialise it) or "cafleet" (use it); refuses anything else with one line,
    having only read. ``found``: the schema's shape as :func:`_read_shape` read it. A schema
    or a table of cafleet's owned by a role other than the connecting one and
    ``trusted_owner`` is refused first, even an empty schema: its owner can read and change
    everything in it."""
    if found is None:
        found = _read_shape(conn, schema_name)
    place = f"schema {schema_name} of database {where}"
    check_owners(found, place, trusted_owner)
    if not found["relation"]:
        return "empty"
    if schema.LEDGER_TABLE not in found["column"]:
        raise diagnosis.Refused(
            f"{place} holds something else (no cafleet ledger {schema.LEDGER_TABLE}); it was left unchanged. "
            "Choose another schema with CAFLEET_PG_SCHEMA or another database."
        )
    try:
        version = conn.execute(f'SELECT max(version) FROM "{schema_name}".{schema.LEDGER_TABLE}').fetchone()[0]
    except libpq.Error as exc:
        raise diagnosis.Refused(f"{place} has an unreadable schema ledger ({exc}); it was left unchanged.") from None
    diagnosis.check_version(version, place, located=True)
    problem = first_shape_problem(found)
    if problem:
        raise diagnosis.incompatible(place, problem)
    return "cafleet"


def check_owners(found: dict[str, dict[str, set[str]]], place: str, trusted_owner: str) -> None:
    """Refuse (one line) when the schema, or one of cafleet's tables (required or auxiliary)
    that exists, belongs to a role other than the connecting one and ``trusted_owner``."""
    user = next(iter(found["user"].get("", {""})))
    allowed = {user, trusted_owner} - {""}
    objects = [("", place)] + [
        (table, f"table {table} in {place}")
        for table in (*EXPECTED_COLUMNS, *AUX_TABLE_NAMES)
        if table in found["owner"]
    ]
    for name, what in objects:
        owner = next(iter(found["owner"].get(name, ())), None)
        if owner is None or owner in allowed:
            continue
        trusted = f" nor by the trusted owner {role_text(trusted_owner)}" if trusted_owner else ""
        refused = diagnosis.Refused(
            f"{what} is owned by role {role_text(owner)}, not by {role_text(user)} that connects{trusted}: "
            "its owner can read and change every message, so cafleet left it unchanged; use a schema of your own "
            f"(CAFLEET_PG_SCHEMA) or, if you trust that role, set CAFLEET_PG_TRUSTED_OWNER={role_text(owner)}."
        )
        refused.fix = (  # type: ignore[attr-defined]
            f"set CAFLEET_PG_SCHEMA to a schema of your own, or CAFLEET_PG_TRUSTED_OWNER={role_text(owner)} "
            "if that role may read every message; nothing was changed"
        )
        raise refused


def first_shape_problem(found: dict[str, dict[str, set[str]]]) -> str | None:
    """The first required object missing or altered (:func:`diagnosis.first_problem`)."""
    return diagnosis.first_problem(PgCatalogue(found))


class PgCatalogue:
    """A schema's catalogue as :func:`diagnosis.first_problem` reads it: the lines
    :func:`_read_shape` read, compared with :data:`EXPECTED_COLUMNS` and the rest of the
    declaration's catalogue shape."""

    def __init__(self, found: dict[str, dict[str, set[str]]]) -> None:
        self.found = found

    def columns(self, table: str) -> dict[str, str] | None:
        lines = self.found["column"].get(table)
        return None if lines is None else {line.split(" ", 1)[0]: line for line in lines}

    def expected_columns(self, table: str) -> dict[str, str]:
        return {line.split(" ", 1)[0]: line for line in EXPECTED_COLUMNS[table]}

    def describe(self, line: str) -> str:
        return line

    def blocks_inserts(self, line: str) -> bool:
        return " NOT NULL" in line and " DEFAULT " not in line and "identity" not in line

    def keys_problem(self, table: str) -> str | None:
        for constraint in EXPECTED_CONSTRAINTS[table]:
            if constraint not in self.found["constraint"].get(table, ()):
                return f"constraint {constraint} on {table} is missing or altered"
        return None

    def has_index(self, index: schema.Index) -> bool:
        return EXPECTED_INDEXES[index.name] in self.found["index"].get(index.name, ())


def _initialise(conn, where: str, schema_name: str, trusted_owner: str) -> None:
    """Create the schema, the seed's tables and indexes and the ledger row in one
    transaction (cafleet's auxiliary objects come later, each where it is first needed:
    :meth:`PgStore.create_auxiliary`). Concurrent
    first opens queue on an advisory lock; the one that finds the schema filled meanwhile
    does nothing. A schema that did not exist is created without IF NOT EXISTS, so one that
    another role created meanwhile fails the transaction instead of being filled."""
    conn.pipeline([("BEGIN", ()), ("SELECT pg_advisory_xact_lock(?)", (lock_key("initialise", schema_name),))])
    try:
        _fill(conn, where, schema_name, trusted_owner)
        conn.execute("COMMIT")
    finally:
        _rollback_quietly(conn)


def _fill(conn, where: str, schema_name: str, trusted_owner: str) -> None:
    """The initialising transaction's work, under its lock."""
    found = _read_shape(conn, schema_name)
    if found["relation"]:
        return  # another process initialised it while this one waited (the caller diagnoses it)
    check_owners(found, f"schema {schema_name} of database {where}", trusted_owner)
    create = "CREATE SCHEMA IF NOT EXISTS {}" if "" in found["owner"] else "CREATE SCHEMA {}"
    conn.execute(create.format(libpq.quote_ident(schema_name)))
    rendered = ddl()
    for statement in (*rendered.tables.values(), *rendered.late_foreign_keys, *rendered.indexes.values()):
        conn.execute(statement)
    conn.execute(
        f"INSERT INTO {schema.LEDGER_TABLE} (version, name, applied_on, checksum) VALUES (?, ?, ?, ?)",
        (schema.HEAD_VERSION, "baseline", clock.now(), schema.baseline_checksum()),
    )


def auxiliary_problems(store: PgStore) -> dict[str, Problem]:
    """``{name: "missing" | "altered"}`` for cafleet's auxiliary indexes and tables (one
    catalogue read). Never a reason to refuse the schema: without them commands work."""
    found = _read_shape(store.conn, store.schema)
    expected: dict[str, object] = {name: "present" for name in AUX_INDEX_NAMES}  # an index: present or missing
    expected.update((name, set(columns)) for name, columns in expected_aux_columns().items())
    shown: dict[str, object] = {name: "present" for name in AUX_INDEX_NAMES if name in found["index"]}
    shown.update((name, found["column"][name]) for name in AUX_TABLE_NAMES if name in found["column"])
    return diagnosis.compare_auxiliary(shown, expected)


# Triggers (not the foreign keys' internal ones) and rules on the required tables: cafleet
# creates none, so each one was added by someone else. A trigger's function is named with
# its schema (format(), not regprocedure, which drops a schema on the search_path).
_TRIGGERS_QUERY = """
SELECT 'trigger', c.relname::text, t.tgname::text,
  format('%I.%I(%s)', pn.nspname, p.proname, pg_get_function_identity_arguments(p.oid)),
  pg_get_userbyid(p.proowner)::text, p.prosecdef, pn.nspname = 'pg_catalog', current_user::text
  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_proc p ON p.oid = t.tgfoid
  JOIN pg_namespace pn ON pn.oid = p.pronamespace
  WHERE c.relnamespace = ?::regnamespace AND c.relname = ANY(?) AND NOT t.tgisinternal
UNION ALL
SELECT 'rule', c.relname::text, r.rulename::text, NULL, NULL, NULL, NULL, current_user::text
  FROM pg_rewrite r JOIN pg_class c ON c.oid = r.ev_class
  WHERE c.relnamespace = ?::regnamespace AND c.relname = ANY(?) AND r.rulename <> '_RETURN'
ORDER BY 1 DESC, 2, 3
"""


def triggers_and_rules(store: PgStore) -> list[Trigger]:
    """Every trigger and rule on a required table, for `cafleet doctor` (one catalogue read).
    ``foreign``: a trigger whose function belongs to a role that is neither the connecting
    one nor the trusted owner (a built-in function is nobody's), so every write to that
    table runs another role's code; a rule can only be made by the table's owner."""
    try:
        rows = store.conn.execute(_TRIGGERS_QUERY, (store.schema, list(EXPECTED_COLUMNS)) * 2).fetchall()
    except libpq.Error as exc:
        raise translate(exc, store.url, store.busy_timeout) from None
    found: list[Trigger] = []
    for kind, table, name, function, function_owner, definer, builtin, user in rows:
        found.append(
            {
                "kind": kind,
                "name": name,
                "table": table,
                "function": function,
                "function_owner": function_owner,
                "security_definer": definer,
                "foreign": kind == "trigger" and not builtin and function_owner not in {user, store.trusted_owner},
            }
        )
    return found


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

    __slots__ = ("store", "conn", "last_read")
    blocks = True  # :meth:`wait` sleeps in the connection until a notification comes
    apart = True  # it listens on a session of its own: the store it came from may be closed

    def __init__(self, store: PgStore) -> None:
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
            if self.store.hooks is not None:  # test-only count (cafleet.faults)
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
                try:
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
            try:
                self.conn.close()
            except libpq.Error:
                pass
            self.conn = None

    def close(self) -> None:
        self._drop()


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

    def pane(self, backend: str, session: str, pane_id: str, hooks: Hooks | None = None) -> AdvisoryLock:
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

    def __init__(self, url: str, key: int, hooks: Hooks | None = None) -> None:
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
        processes read (:func:`cafleet.delivery.keepers.status`). False once the session is
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

    __slots__ = ("url", "key", "folder", "log_path", "advisory")

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
        try:
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


if TYPE_CHECKING:  # the type checker holds the PostgreSQL store and its locks to the one interface

    def _conforms(store: PgStore) -> StoreInterface:
        return store

    def _locks_conform(space: AdvisoryLocks) -> LockSpace:
        return space
