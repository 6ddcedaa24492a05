"""The one place that chooses an engine: what the layers above ``store/`` ask of a database
location (a SQLite file's path or a ``postgresql://`` URL) without knowing which engine it
names. Each function imports the engine module it needs, and only for a location that
names it: a command on a SQLite file never loads the PostgreSQL store
(tests/test_hot_imports.py). Nothing above ``store/`` imports an engine module
(:mod:`~cafleet.store.sqlite`, :mod:`~cafleet.store.postgres` and what they use) or
tests a location's scheme itself (tests/test_architecture.py).
"""

from __future__ import annotations

from cafleet.faults import NO_HOOKS
from cafleet.store import DEFAULT_BUSY_TIMEOUT, is_postgres_url

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from collections.abc import Callable

    from cafleet.errors import DatabaseError, DatabaseGone
    from cafleet.faults import Hooks
    from cafleet.store.protocol import LockSpace, Store


def open_store(
    location: str,
    busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
    schema: str | None = None,
    trusted_owner: str | None = None,
    hooks: Hooks = NO_HOOKS,
) -> Store:
    """The diagnosed store at ``location``: a ``postgresql://`` or ``postgres://`` URL opens
    the PostgreSQL store (:mod:`cafleet.store.postgres`, imported only then; ``schema`` is
    its schema and ``trusted_owner`` the role besides the connecting one that may own it),
    anything else the SQLite file (:mod:`cafleet.store.sqlite`). ``hooks``: the
    command's test hooks (:mod:`cafleet.faults`), for the PostgreSQL store's own points
    (``store.wait``, the SQL trace); a SQLite file has none."""
    if is_postgres_url(location):
        from cafleet.store.postgres.store import open_store as open_postgres

        return open_postgres(location, busy_timeout, schema, trusted_owner, hooks)
    from cafleet.store import sqlite

    return sqlite.open_store(location, busy_timeout)


def location_identity(location: str):
    """What tells the database at ``location`` from another one put there later: a file's
    ``(st_dev, st_ino)``, None when there is no file; None for a server's database, which
    is not replaced under its URL."""
    if is_postgres_url(location):
        return None
    from cafleet.store.sqlite import file_identity

    return file_identity(location)


def replaced_error(location: str) -> DatabaseGone:
    """The one line a long-lived process ends with when the file at ``location`` was deleted
    or replaced under it (:func:`location_identity` changed)."""
    from cafleet.store.sqlite import replaced_error as replaced

    return replaced(location)


def escaped_error(error: BaseException, location: str | None, busy_timeout: float) -> DatabaseError | None:
    """A driver's exception that escaped before any store was open, as cafleet's one
    line; None for anything else (an open store's own are ``store.classify``'d)."""
    if not hasattr(error, "sqlite_errorname"):
        return None
    from cafleet.store.sqlite_faults import as_database_error

    return as_database_error(error, location, busy_timeout)


def lock_space(location: str) -> LockSpace:
    """Where the pane-input locks and the fleet keepers' locks of the database at
    ``location`` live: ``flock``'d files in a folder beside the resolved SQLite file, or
    advisory locks on the PostgreSQL server (:class:`cafleet.store.protocol.LockSpace`).
    ``store.locks`` is the same space for an open store."""
    if is_postgres_url(location):
        from cafleet.store.postgres.locks import AdvisoryLocks

        return AdvisoryLocks(location)
    from cafleet.store.sqlite_locks import FileLocks

    return FileLocks.beside(location)


def shown_location(location: str) -> str:
    """A database location as a report shows it: a file's path as it is, a URL without its
    password."""
    if is_postgres_url(location):
        from cafleet.credentials import redact

        return redact(location)
    return location


def member_location(location: str, environ) -> str:
    """The database location a member's pane on this machine gets: ``location`` itself when
    it carries no password, else the URL without it, naming a private pgpass file."""
    if not is_postgres_url(location):
        return location
    from cafleet import credentials

    bare, password = credentials.split_password(location)
    if password is None:
        return bare
    folder = credentials.private_dir(environ)
    path = credentials.write_private(folder, credentials.passfile_name(location), credentials.pgpass_line(password))
    return credentials.with_passfile(bare, path)


def remote_member_location(location: str, keep_password: Callable[[str, str], str]) -> str:
    """The database location a member's pane on another host gets: ``location`` itself when
    it carries no password, else the URL without it, naming the pgpass file that
    ``keep_password(name, pgpass line)`` wrote on that host (it returns the file's path
    there, or raises), so that the password is in no argv on either machine."""
    if not is_postgres_url(location):
        return location
    from cafleet import credentials

    bare, password = credentials.split_password(location)
    if password is None:
        return bare
    path = keep_password(credentials.passfile_name(location), credentials.pgpass_line(password))
    return credentials.with_passfile(bare, path)
