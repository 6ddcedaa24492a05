"""The PostgreSQL store: :class:`PgStore`, a diagnosed connection to the schema with the
one store interface, its write transaction, its open, and the catalogue reads `cafleet
doctor` asks of it (auxiliary objects, triggers and rules)."""

from __future__ import annotations

import select
import time

from cafleet.errors import DatabaseError
from cafleet.faults import NO_HOOKS
from cafleet.store import ReadSnapshot, diagnosis, libpq, schema
from cafleet.store.postgres.catalogue import (
    AUX_INDEX_NAMES,
    AUX_NAMES,
    AUX_TABLE_NAMES,
    EXPECTED_COLUMNS,
    ddl,
    diagnose,
    expected_aux_columns,
    fast_accept,
    initialise,
    read_shape,
)
from cafleet.store.postgres.session import (
    ABSENCE_FRESH,
    DEFAULT_SCHEMA,
    connect,
    lock_key,
    redacted,
    rollback_quietly,
    settings_sql,
    translate,
)

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.faults import Hooks
    from cafleet.store.postgres.locks import AdvisoryLocks
    from cafleet.store.postgres.waiter import NotifyWaiter
    from cafleet.store.protocol import Problem, Store as StoreInterface, Trigger


class PgStore:
    """A diagnosed connection to the schema, with the same interface as the SQLite Store."""

    __slots__ = (
        "absent",
        "absent_until",
        "begin",
        "busy_timeout",
        "channel",
        "conn",
        "hooks",
        "identity",
        "path",
        "present",
        "schema",
        "trusted_owner",
        "url",
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
        hooks: Hooks = NO_HOOKS,
    ) -> None:
        self.conn = conn
        self.hooks = hooks  # the command's test hooks (cafleet.faults); NO_HOOKS outside a test
        self.url = url
        self.path = redacted(url)  # what messages show
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

    def write(self) -> _PgWrite:
        return _PgWrite(self)

    def read(self) -> ReadSnapshot:
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
        from cafleet.store.postgres.locks import AdvisoryLocks

        return AdvisoryLocks(self.url)

    def classify(self, exc: BaseException) -> DatabaseError | None:
        """A driver exception that escaped :meth:`execute` as cafleet's one-line error;
        None for anything else, and for a refused constraint."""
        if isinstance(exc, libpq.Error) and not isinstance(exc, libpq.IntegrityError):
            return translate(exc, self.url, self.busy_timeout)
        return None

    def change_waiter(self, interval: float) -> NotifyWaiter:  # noqa: ARG002 -- the protocol's signature; a NOTIFY wakes the waiter, it polls on no interval
        """A waiter whose baseline is now: LISTEN before the caller's first read."""
        from cafleet.store.postgres.waiter import NotifyWaiter

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
        try:  # noqa: SIM105 - contextlib stays off the hot commands' path
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
                rollback_quietly(store.conn)
                raise translate(error, store.url, store.busy_timeout) from None
        else:
            rollback_quietly(store.conn)


def open_store(
    url: str,
    busy_timeout: float,
    schema_name: str | None = None,
    trusted_owner: str | None = None,
    hooks: Hooks = NO_HOOKS,
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
            present = fast_accept(conn, schema_name, busy_timeout, trusted_owner)
            if present is not None:
                store.present.update(present)
                store.absent = set(AUX_NAMES) - present
                store.absent_until = time.monotonic() + ABSENCE_FRESH
                return store
            conn.execute(settings_sql(schema_name, busy_timeout))  # the fast path's were rolled back or unchecked
            found = read_shape(conn, schema_name)
            if diagnose(conn, store.path, schema_name, found, trusted_owner) == "empty":
                initialise(conn, store.path, schema_name, trusted_owner)
                found = read_shape(conn, schema_name)
                diagnose(conn, store.path, schema_name, found, trusted_owner)
            store.present.update(found["column"], found["index"])
        except libpq.Error as exc:
            raise translate(exc, store.url, busy_timeout) from None
    except BaseException:
        conn.close()
        raise
    return store


def auxiliary_problems(store: PgStore) -> dict[str, Problem]:
    """``{name: "missing" | "altered"}`` for cafleet's auxiliary indexes and tables (one
    catalogue read). Never a reason to refuse the schema: without them commands work."""
    found = read_shape(store.conn, store.schema)
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


if TYPE_CHECKING:  # the type checker holds the PostgreSQL store to the one interface

    def _conforms(store: PgStore) -> StoreInterface:
        return store
