"""The SQLite driver module, loaded as cheaply as possible.

``sqlite3`` (the DB-API wrapper) imports ``datetime`` and ``collections`` only to register
default type adapters that cafleet never uses (timestamps are stored as text). The C
module ``_sqlite3`` underneath carries the same ``connect``, connection and exception
classes (they are the very objects ``sqlite3`` re-exports), and importing it directly
saves several milliseconds on every command (docs/performance.md). If a Python build
ever lacks it, the public module is used.
"""

from __future__ import annotations

try:
    import _sqlite3 as driver

    driver.connect  # noqa: B018 - present since Python 3.11
except (ImportError, AttributeError):  # pragma: no cover - other Python builds
    import sqlite3 as driver  # type: ignore[no-redef]  # the same API under its public name

connect = driver.connect
Connection = driver.Connection
Error = driver.Error
DatabaseError = driver.DatabaseError
OperationalError = driver.OperationalError
IntegrityError = driver.IntegrityError
