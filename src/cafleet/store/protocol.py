"""The one interface both stores implement (docs/architecture.md, "The Store seam").

Everything above ``store/`` (the broker, delivery, the CLI and the WebUI) reaches the
database through these methods only: it never touches a driver connection, never asks
which engine it has, and never parses a location's scheme (:func:`cafleet.store.
is_postgres_url` is the one test, and :mod:`cafleet.store.engines` the one chooser). :class:`cafleet.store.sqlite.SqliteStore`
(a SQLite file) and :class:`cafleet.store.postgres.store.PgStore` (a PostgreSQL schema) are
held to it by the type checker (each module ends with a conformance check).

A third engine is a module beside those two: a class with these methods, its own open
(diagnosing its catalogue against :mod:`cafleet.store.schema`'s declaration, rendered in
its dialect) and a branch in :func:`cafleet.store.engines.open_store` (and its lock
space's in :func:`cafleet.store.engines.lock_space`) chosen by the location's scheme.

This module is imported only by the type checker (``TYPE_CHECKING``): ``typing`` stays
off the hot commands' path (tests/test_hot_imports.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager
from typing import Any, Literal, NotRequired, Protocol, TypedDict

from cafleet.errors import DatabaseError
from cafleet.faults import Hooks

Problem = Literal["missing", "altered"]  # what `cafleet doctor` says of an auxiliary object


class Trigger(TypedDict):
    """A trigger or rule on a required table (:meth:`Store.triggers_and_rules`)."""

    kind: Literal["trigger", "rule"]
    name: str
    table: str
    function: str | None  # the trigger's function, named with its schema; None for a rule
    function_owner: str | None
    security_definer: bool | None
    foreign: bool  # its function belongs to a role neither connecting nor trusted


class Cursor(Protocol):
    """The result of :meth:`Store.execute`: rows as tuples."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...

    def close(self) -> None: ...  # lets go of the rest of the rows, unread


class ChangeWaiter(Protocol):
    """Waits for another process's commit (:meth:`Store.change_waiter`)."""

    blocks: bool  # wait() sleeps in the engine until a change comes (else in steps)
    apart: bool  # it holds a session of its own: the store it came from may be closed

    def wait(self, deadline: float | None) -> bool: ...

    def changed(self) -> bool: ...

    def close(self) -> None: ...


class PaneLock(Protocol):
    """One pane-input lock of a :class:`LockSpace`, not yet taken. :mod:`cafleet.delivery.keystrokes.lock`
    holds the one bounded wait around :meth:`try_acquire` and turns a failure into its line."""

    failures: tuple[type[BaseException], ...]  # what open() and try_acquire() raise when the lock cannot be had at all
    fix: str  # appended to that refusal: what the user can do ("" when the error says it)
    can_be_lost: bool  # whether a living holder can lose it (its database session ended)
    keeps_notes: bool  # whether it keeps a small note for its holders (read_note, write_note)

    def open(self) -> None: ...

    def try_acquire(self) -> bool: ...  # one attempt that never waits

    def held(self) -> bool: ...  # still held (one round trip where it can be lost); never raises

    def read_note(self) -> bytes: ...

    def write_note(self, data: bytes) -> None: ...

    def release(self) -> None: ...


class KeeperRecord(TypedDict):
    """Who holds a fleet's keeper lock, as its record says: ``pid``, ``since`` and ``host``
    (None when unknown), its ``log``, ``age`` (seconds since its last heartbeat, None when
    unknown) and, for a record that can outlive its holder (a file), the holder's process
    ``start`` time, which a reader on that host checks."""

    pid: int | None
    since: str | None
    host: str | None
    log: str | None
    age: float | None
    start: NotRequired[str]


class KeeperLock(Protocol):
    """A fleet keeper's lock, its record and its log, in a :class:`LockSpace`."""

    folder: str  # where its log is (a file lock space keeps its lock and record there too)
    log_path: str

    def unwritable(self, error: OSError) -> str: ...  # why no keeper starts here: its folder, and the fix

    def holder(self, store: Store) -> KeeperRecord | None: ...  # never touches the lock

    def acquire(self, record: dict[str, str], busy_timeout: float) -> bool: ...

    def beat(self) -> bool: ...

    def alive(self) -> bool: ...

    def release(self) -> None: ...


class LockSpace(Protocol):
    """Where a database's pane-input locks and fleet keepers' locks live: ``flock``'d files
    beside a SQLite file (:class:`cafleet.store.sqlite_locks.FileLocks`), or advisory locks on
    the PostgreSQL server (:class:`cafleet.store.postgres.locks.AdvisoryLocks`)."""

    def pane(self, backend: str, session: str, pane_id: str, hooks: Hooks = ...) -> PaneLock: ...

    def keeper(self, fleet_id: int, location_key: str, schema: str, environ: Any) -> KeeperLock: ...


class Store(Protocol):
    """A diagnosed connection to cafleet's tables.

    - open and diagnose: :func:`cafleet.store.engines.open_store` (the location
      chooses the engine); :meth:`reopen` where a server can end the session;
    - reads: :meth:`execute` (``?`` placeholders), inside :meth:`read` for one snapshot;
    - writes: :meth:`write`, one transaction at a time per database, and :meth:`insert`;
    - waiting: :meth:`change_waiter`;
    - locks: :attr:`locks`, the database's :class:`LockSpace` (the pane-input locks and
      the fleet keepers' locks): ``flock``'d files beside the file, advisory locks on the
      server, each lock one attempt that never waits; :mod:`cafleet.delivery.keystrokes.lock` holds
      the one bounded wait around it;
    - auxiliary tables and indexes: :meth:`tables_present`, :meth:`create_auxiliary`,
      :meth:`auxiliary_problems`;
    - errors: every failure is one of cafleet's own (:mod:`cafleet.errors`); a driver's
      exception that escaped a read is :meth:`classify`'d;
    - names: :attr:`path` and :attr:`display_name` never hold a secret.
    """

    path: str  # the location as messages show it: a file's path, a URL without its password
    busy_timeout: float
    identity: Any  # what tells this database from another one opened later at the same location
    engine: str  # a name for tests and reports, never branched on above store/
    schema: str  # the namespace SQL qualifies cafleet's tables with: a PostgreSQL schema, SQLite's "main"
    BEGIN_READ: str
    broadcast_workers: int  # how many recipients of a broadcast are notified at once, each on a store of its own

    @property
    def display_name(self) -> str: ...

    @property
    def locks(self) -> LockSpace: ...  # this database's lock space (cafleet.store.engines.lock_space)

    def execute(self, sql: str, params: Any = ()) -> Cursor: ...

    def insert(self, sql: str, params: Any, key: str) -> int: ...

    def read(self) -> AbstractContextManager[Any]: ...

    def write(self) -> AbstractContextManager[Any]: ...

    def end_transaction(self) -> None: ...

    def change_waiter(self, interval: float) -> ChangeWaiter: ...

    def tables_present(self, names: Iterable[str], recheck: bool = False) -> set[str]: ...

    def create_auxiliary(self, names: Iterable[str]) -> list[str]: ...

    def auxiliary_problems(self) -> dict[str, Problem]: ...

    def triggers_and_rules(self) -> list[Trigger] | None: ...

    def member_environment(self) -> dict[str, str]: ...

    def location_key(self) -> str: ...

    def classify(self, exc: BaseException) -> DatabaseError | None: ...

    def file_replaced(self) -> bool: ...

    def check_file(self) -> None: ...

    def usable(self) -> bool: ...

    def close(self) -> None: ...
