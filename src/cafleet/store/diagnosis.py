"""Format diagnosis (docs/storage.md): decide whether a file may be used, initialised, or must
be refused, without ever writing to a file that is refused.

The identity checks read the 100-byte SQLite header directly, so a foreign file is
refused without SQLite ever opening it (no journal, no WAL, no lock). Only a file that
claims cafleet's identity, or a zero-identity file that still needs a look inside, is
opened, and a zero-identity file is looked at through a read-only connection.
"""

from __future__ import annotations

import os

from cafleet.errors import DatabaseError
from cafleet.store import schema

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.store.protocol import Problem

SQLITE_MAGIC = b"SQLite format 3\x00"

# Results of the header check.
MISSING = "missing"
EMPTY = "empty"
CAFLEET = "cafleet"
ZERO_IDENTITY = "zero-identity"


class Refused(DatabaseError):
    """The file is not usable by this cafleet; it was left byte-identical."""


def read_header_state(path: str) -> str:
    """Classify the file from its header alone. Raises :class:`Refused`."""
    try:
        header = _read_header(path)
    except FileNotFoundError:
        return MISSING
    except IsADirectoryError:
        raise Refused(f"database path {path} is a directory, not a file.") from None
    except OSError as exc:
        raise Refused(f"cannot read database {path}: {exc.strerror or exc}.") from None
    if not header:
        return EMPTY
    if len(header) < 100 or not header.startswith(SQLITE_MAGIC):
        raise Refused(f"{path} is not a SQLite database; point CAFLEET_DATABASE_URL at a cafleet database file.")
    application_id = int.from_bytes(header[68:72], "big")
    if application_id == schema.APPLICATION_ID:
        return CAFLEET
    if application_id != 0:
        raise Refused(
            f"{path} is not a cafleet database (application_id {application_id}); "
            "point CAFLEET_DATABASE_URL at a cafleet database file."
        )
    return ZERO_IDENTITY


# One read-only descriptor per database path, kept open for the life of the process.
# Closing any descriptor of a file drops every POSIX lock this process holds on it,
# including the locks of its own open SQLite connections: another process could then
# believe it is the last user, checkpoint and delete the WAL under those connections,
# and they would silently stop seeing new commits. Never closing avoids that.
_HEADER_FDS: dict[str, int] = {}


def _read_header(path: str) -> bytes:
    fd = _HEADER_FDS.get(path)
    if fd is not None:
        current, kept = os.stat(path), os.fstat(fd)
        if (current.st_dev, current.st_ino) != (kept.st_dev, kept.st_ino):
            fd = None  # the file was replaced; the old descriptor stays open (see above)
    if fd is None:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        _HEADER_FDS[path] = fd
    return os.pread(fd, 100, 0)


def not_cafleet(path: str) -> Refused:
    return Refused(
        f"{path} is not a cafleet database (populated, no cafleet identity or ledger); "
        "point CAFLEET_DATABASE_URL at a cafleet database file."
    )


def hot_journal(path: str) -> Refused:
    return Refused(
        f"database {path} has a hot journal ({path}-journal) left by a writer that stopped mid-transaction; "
        "cafleet left both files unchanged. Let the program that wrote it recover it (or open it once with the "
        "sqlite3 shell), then try again."
    )


def _no_such_object(exc: Exception) -> bool:
    """A query failed because the schema lacks what it names (SQLITE_ERROR: no such
    table/column), as opposed to a fault of the file system or of the file itself."""
    return getattr(exc, "sqlite_errorname", None) == "SQLITE_ERROR"  # SQLite's own name for the error


def check_ledger_and_shape(conn, path: str) -> None:
    """The common case in one query: the ledger version and the stored DDL of every
    required object; anything unexpected falls back to the step-by-step checks."""
    from cafleet.store.sqlite_driver import OperationalError

    required = (*schema.TABLES.items(), *schema.INDEXES.items())
    names = tuple(name for name, _ in required)
    try:
        rows = conn.execute(
            f"SELECT name, sql, (SELECT max(version) FROM {schema.LEDGER_TABLE}) FROM sqlite_master "
            f"WHERE name IN ({','.join('?' * len(names))})",
            names,
        ).fetchall()
    except OperationalError as exc:
        if not _no_such_object(exc):
            raise
        rows = []
    if len(rows) == len(required) and rows[0][2] == schema.HEAD_VERSION:
        stored = {name: sql for name, sql, _ in rows}
        if all(stored.get(name) == sql for name, sql in required):
            return
    check_ledger(conn, path)
    check_shape(conn, path)


def auxiliary_problems(conn) -> dict[str, Problem]:
    """``{name: "missing" | "altered"}`` for cafleet's auxiliary indexes and tables. They
    are never a reason to refuse a file: without them commands work (only slower without
    the index; without the tables, with no usage attribution or budgets)."""
    expected = {**schema.AUX_INDEXES, **schema.AUX_TABLES}
    names = tuple(expected)
    stored = dict(
        conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE type IN ('index', 'table') "
            f"AND name IN ({','.join('?' * len(names))})",
            names,
        ).fetchall()
    )
    return compare_auxiliary(stored, expected)


def compare_auxiliary(found: dict, expected: dict) -> dict[str, Problem]:
    """Both engines' auxiliary check: ``expected`` maps each auxiliary index and table (in
    that order) to what its engine's catalogue must show of it, ``found`` what it shows."""
    problems: dict[str, Problem] = {}
    for name, shape in expected.items():
        table = schema.COMES_WITH.get(name)
        if table is not None and table not in found:
            continue  # the index comes with its table, and that table is reported
        if name not in found:
            problems[name] = "missing"
        elif found[name] != shape:
            problems[name] = "altered"
    return problems


def check_ledger(conn, path: str) -> int:
    """Return the ledger version; refuse a newer or missing ledger before any shape check."""
    from cafleet.store.sqlite_driver import OperationalError

    try:
        row = conn.execute(f"SELECT max(version) FROM {schema.LEDGER_TABLE}").fetchone()
    except OperationalError as exc:
        if not _no_such_object(exc):
            raise
        raise Refused(
            f"database {path} has cafleet's identity but its schema ledger "
            f"{schema.LEDGER_TABLE} is missing or damaged; it was left unchanged."
        ) from None
    return check_version(row[0], f"database {path}")


def check_version(version: object, where: str, located: bool = False) -> int:
    """Both engines' ledger check: refuse an empty or invalid version, or one newer than
    this cafleet's head (``located``: the refusal names ``where``)."""
    if not isinstance(version, int) or version < 1:
        raise Refused(f"{where} has an empty or invalid schema ledger; it was left unchanged.")
    if version > schema.HEAD_VERSION:
        place = f" in {where}" if located else ""
        raise Refused(
            f"database schema {version}{place} is newer than this cafleet (head {schema.HEAD_VERSION}); upgrade cafleet."
        )
    return version


def incompatible(where: str, problem: str) -> Refused:
    return Refused(f"{where} has an incompatible schema: {problem}; it was left unchanged.")


def check_shape(conn, path: str) -> None:
    """Verify every required table, column, index and foreign key structurally."""
    problem = first_shape_problem(conn)
    if problem:
        raise incompatible(f"database {path}", problem)


def first_shape_problem(conn) -> str | None:
    """The first required table/column/index/foreign key that is missing or altered."""
    return first_problem(SqliteCatalogue(conn))


def first_problem(catalogue) -> str | None:
    """Both engines' shape check, in the declaration's order: the first required table,
    column, key, reference or index that is missing or altered, as ``catalogue`` (each
    engine's reading of its own catalogue, compared with what it expects of the
    declaration) shows it; None when the shape is the declared one."""
    for table in schema.DECLARED_TABLES:
        actual = catalogue.columns(table.name)
        if actual is None:
            return f"table {table.name} is missing"
        expected = catalogue.expected_columns(table.name)
        for name, column in expected.items():
            if name not in actual:
                return f"column {table.name}.{name} is missing"
            if actual[name] != column:
                found = catalogue.describe(actual[name])
                return f"column {table.name}.{name} is altered (expected {catalogue.describe(column)}, found {found})"
        for name, column in actual.items():
            if name not in expected and catalogue.blocks_inserts(column):
                return f"column {table.name}.{name} is NOT NULL without a default, so cafleet cannot insert rows"
        problem = catalogue.keys_problem(table.name)
        if problem:
            return problem
    for index in schema.DECLARED_INDEXES:
        if not catalogue.has_index(index):
            return f"index {index.name} on {index.table} ({', '.join(index.columns)}) is missing or altered"
    return None


class SqliteCatalogue:
    """A SQLite file's catalogue as :func:`first_problem` reads it: ``sqlite_master`` and
    the table pragmas, compared with :func:`schema.expected_shape` (the declaration's DDL
    as SQLite itself reads it back)."""

    def __init__(self, conn) -> None:
        self.conn = conn
        self.shape = schema.expected_shape()
        self.tables = {
            name: (sql or "")
            for name, sql in conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'").fetchall()
        }

    def columns(self, table: str) -> dict | None:
        if table not in self.tables:
            return None
        return {
            row[1]: (row[1], (row[2] or "").upper(), row[3], row[4], row[5])
            for row in self.conn.execute(f"PRAGMA table_xinfo({table})").fetchall()
        }

    def expected_columns(self, table: str) -> dict:
        return {column[0]: column for column in self.shape.columns[table]}

    def describe(self, column: tuple) -> str:
        return _describe(column)

    def blocks_inserts(self, column: tuple) -> bool:
        return bool(column[2]) and column[3] is None

    def keys_problem(self, table: str) -> str | None:
        if table in schema.AUTOINCREMENT_TABLES and "AUTOINCREMENT" not in self.tables[table].upper():
            return f"table {table} lost AUTOINCREMENT on its primary key"
        foreign_keys = {
            (row[3], row[2], row[4], (row[6] or "").upper())
            for row in self.conn.execute(f"PRAGMA foreign_key_list({table})").fetchall()
        }
        for fk in self.shape.foreign_keys[table]:
            if fk not in foreign_keys:
                return f"foreign key {table}.{fk[0]} -> {fk[1]}.{fk[2]} ON DELETE {fk[3]} is missing or altered"
        return None

    def has_index(self, index: schema.Index) -> bool:
        for row in self.conn.execute(f"PRAGMA index_list({index.table})").fetchall():
            columns = tuple(r[2] for r in self.conn.execute(f"PRAGMA index_info({_quote(row[1])})").fetchall())
            if columns == index.columns and not row[2] and not row[4]:  # neither UNIQUE nor partial
                return True
        return False


def _describe(column: tuple) -> str:
    _name, ctype, notnull, default, pk = column
    text = f"{ctype or 'no type'}"
    if notnull:
        text += " NOT NULL"
    if default is not None:
        text += f" DEFAULT {default}"
    if pk:
        text += " PRIMARY KEY"
    return text


def _quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'
