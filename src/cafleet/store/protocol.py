"""The one interface both stores implement (docs/architecture.md, "The Store seam").

Everything above ``store/`` (the broker, delivery, the CLI and the WebUI) reaches the
database through these methods only: it never touches a driver connection, never asks
which engine it has, and never parses a location's scheme (:func:`cafleet.store.
is_postgres_url` is the one place that does). :class:`cafleet.store.connection.Store`
(a SQLite file) and :class:`cafleet.store.postgres.PgStore` (a PostgreSQL schema) are
held to it by the type checker (each module ends with a conformance check).

A third engine is a module beside those two: a class with these methods, its own open
(diagnosing its catalogue against :mod:`cafleet.store.schema`'s declaration, rendered in
its dialect) and a branch in :func:`cafleet.store.connection.open_store` chosen by the
location's scheme.

This module is imported only by the type checker (``TYPE_CHECKING``): ``typing`` stays
off the hot commands' path (tests/test_hot_imports.py).
"""

from __future__ import annotations

from typing import Any, ContextManager, Iterable, Iterator, Literal, Protocol, TypedDict

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


class Store(Protocol):
    """A diagnosed connection to cafleet's tables.

    - open and diagnose: :func:`cafleet.store.connection.open_store` (the location
      chooses the engine); :meth:`reopen` where a server can end the session;
    - reads: :meth:`execute` (``?`` placeholders), inside :meth:`read` for one snapshot;
    - writes: :meth:`write`, one transaction at a time per database, and :meth:`insert`;
    - waiting: :meth:`change_waiter`;
    - the pane-input lock's primitive: an ``flock`` beside the file, an advisory lock on
      the server (:class:`cafleet.store.postgres.AdvisoryLock`), each one attempt that
      never waits; :mod:`cafleet.delivery.lock` holds the one bounded wait around it;
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
    hooks: Hooks | None  # the command's test hooks (cafleet.faults), reached by every point; None outside a test
    BEGIN_READ: str

    @property
    def display_name(self) -> str: ...

    def execute(self, sql: str, params: Any = ()) -> Cursor: ...

    def insert(self, sql: str, params: Any, key: str) -> int: ...

    def read(self) -> ContextManager[Any]: ...

    def write(self) -> ContextManager[Any]: ...

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
