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
    from cafleet.store.faults import errorname

    return errorname(exc) == "SQLITE_ERROR"


def check_ledger_and_shape(conn, path: str) -> None:
    """The common case in one query: the ledger version and the stored DDL of every
    required object; anything unexpected falls back to the step-by-step checks."""
    from cafleet.store.sqlite import OperationalError

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


def auxiliary_problems(conn) -> dict[str, str]:
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
    problems = {}
    for name, sql in expected.items():
        if name not in stored:
            problems[name] = "missing"
        elif stored[name] != sql:
            problems[name] = "altered"
    return problems


def check_ledger(conn, path: str) -> int:
    """Return the ledger version; refuse a newer or missing ledger before any shape check."""
    from cafleet.store.sqlite import OperationalError

    try:
        row = conn.execute(f"SELECT max(version) FROM {schema.LEDGER_TABLE}").fetchone()
    except OperationalError as exc:
        if not _no_such_object(exc):
            raise
        raise Refused(
            f"database {path} has cafleet's identity but its schema ledger "
            f"{schema.LEDGER_TABLE} is missing or damaged; it was left unchanged."
        ) from None
    version = row[0]
    if not isinstance(version, int) or version < 1:
        raise Refused(f"database {path} has an empty or invalid schema ledger; it was left unchanged.")
    if version > schema.HEAD_VERSION:
        raise Refused(
            f"database schema {version} is newer than this cafleet (head {schema.HEAD_VERSION}); upgrade cafleet."
        )
    return version


def check_shape(conn, path: str) -> None:
    """Verify every required table, column, index and foreign key structurally."""
    problem = first_shape_problem(conn)
    if problem:
        raise Refused(f"database {path} has an incompatible schema: {problem}; it was left unchanged.")


def first_shape_problem(conn) -> str | None:
    """The first required table/column/index/foreign key that is missing or altered."""
    tables = {
        name: (sql or "")
        for name, sql in conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'").fetchall()
    }
    shape = schema.expected_shape()
    for table, expected_columns in shape.columns.items():
        if table not in tables:
            return f"table {table} is missing"
        actual = {
            row[1]: (row[1], (row[2] or "").upper(), row[3], row[4], row[5])
            for row in conn.execute(f"PRAGMA table_xinfo({table})").fetchall()
        }
        for column in expected_columns:
            name = column[0]
            if name not in actual:
                return f"column {table}.{name} is missing"
            if actual[name] != column:
                return (
                    f"column {table}.{name} is altered (expected {_describe(column)}, found {_describe(actual[name])})"
                )
        extra_required = [
            name
            for name, col in actual.items()
            if name not in {c[0] for c in expected_columns} and col[2] and col[3] is None
        ]
        if extra_required:
            return f"column {table}.{extra_required[0]} is NOT NULL without a default, so cafleet cannot insert rows"
        if table in schema.AUTOINCREMENT_TABLES and "AUTOINCREMENT" not in tables[table].upper():
            return f"table {table} lost AUTOINCREMENT on its primary key"
        foreign_keys = {
            (row[3], row[2], row[4], (row[6] or "").upper())
            for row in conn.execute(f"PRAGMA foreign_key_list({table})").fetchall()
        }
        for fk in shape.foreign_keys[table]:
            if fk not in foreign_keys:
                return f"foreign key {table}.{fk[0]} -> {fk[1]}.{fk[2]} ON DELETE {fk[3]} is missing or altered"
    for index, (table, columns) in shape.index_columns.items():
        found = False
        for row in conn.execute(f"PRAGMA index_list({table})").fetchall():
            index_columns = tuple(r[2] for r in conn.execute(f"PRAGMA index_info({_quote(row[1])})").fetchall())
            if index_columns == columns and not row[2] and not row[4]:  # neither UNIQUE nor partial
                found = True
                break
        if not found:
            return f"index {index} on {table} ({', '.join(columns)}) is missing or altered"
    return None


def _describe(column: tuple) -> str:
    name, ctype, notnull, default, pk = column
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
