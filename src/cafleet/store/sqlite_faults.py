"""What a failed SQLite call means, told by SQLite's own error name.

Every SQLite exception carries ``sqlite_errorname`` (``SQLITE_FULL``, ``SQLITE_BUSY``,
``SQLITE_CORRUPT``, ``SQLITE_READONLY_ROLLBACK``...). cafleet classifies by that name,
never by the wording of the message, and turns each class into one line that says what
is wrong with the file or its folder and what to do. The advice never suggests moving a
healthy file away: a full disk or a read-only folder is not a damaged database.

Imported with the first failure (:func:`cafleet.store.sqlite.failure`): a command that
meets none never loads it.
"""

from __future__ import annotations

import os

from cafleet.errors import DatabaseError
from cafleet.store import DEFAULT_BUSY_TIMEOUT, diagnosis


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


def unreadable(exc: BaseException, path: str, busy_timeout: float, what: str) -> DatabaseError:
    """A SQLite error met while the file at ``path`` was diagnosed: a hot journal, a fault
    of the file system or the environment (its one line), or else a refusal: the file
    cannot be read as ``what``."""
    if errorname(exc) == "SQLITE_READONLY_ROLLBACK":
        return diagnosis.hot_journal(path)
    if is_environment(exc):
        return translate(exc, path, busy_timeout)
    return diagnosis.Refused(f"{path} cannot be read as {what} ({exc}); it was left unchanged.")
