"""Settings read from the environment, each validated with a one-line error."""

from __future__ import annotations

import os

from cafleet.errors import ConfigError, shown

DATABASE_FILENAME = "cafleet_v8.db"
DEFAULT_MAX_TEXT_LEN = 200


def database_path(environ) -> str:
    """The database file chosen by ``CAFLEET_DATABASE_URL`` or the XDG default.

    Accepted: ``sqlite:///ABS/PATH`` (``sqlite:////abs/path`` too) or a plain absolute path.
    """
    url = environ.get("CAFLEET_DATABASE_URL", "")
    if url:
        if url.startswith("sqlite:///"):
            rest = url[len("sqlite:///"):]
            if not rest or "?" in rest:
                raise ConfigError(
                    f"CAFLEET_DATABASE_URL {shown(url)} must be sqlite:///ABS/PATH with a file path and no query string."
                )
            return os.path.normpath("/" + rest.lstrip("/"))
        if os.path.isabs(url):
            return os.path.normpath(url)
        raise ConfigError(
            f"CAFLEET_DATABASE_URL {shown(url)} is not supported; use sqlite:///ABS/PATH or an absolute file path."
        )
    data_home = environ.get("XDG_DATA_HOME", "")
    if data_home and not os.path.isabs(data_home):
        raise ConfigError(f"XDG_DATA_HOME {shown(data_home)} must be an absolute path.")
    if not data_home:
        home = environ.get("HOME", "")
        if not home or not os.path.isabs(home):
            raise ConfigError("HOME is not set to an absolute path; set CAFLEET_DATABASE_URL to an absolute path.")
        data_home = os.path.join(home, ".local", "share")
    return os.path.join(data_home, "cafleet", DATABASE_FILENAME)


def lock_dir(db_path: str) -> str:
    """Pane-input lock files live beside the database, shared by every process using it:
    beside the resolved file, so every spelling of one database (a symlink, ``..``) meets
    on one lock per pane, as SQLite puts its own -wal/-shm beside the resolved file."""
    return os.path.join(os.path.dirname(os.path.realpath(db_path)), "locks")


def positive_int_env(environ, name: str, default: int) -> int:
    raw = environ.get(name, "")
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise ConfigError(f"{name} must be a positive integer, got {shown(raw)}.")
    return value


def seconds(raw: str) -> float | None:
    """A finite, non-negative number of seconds, or None when ``raw`` is not one."""
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if 0 <= value < float("inf") else None


def positive_float_env(environ, name: str, default: float) -> float:
    raw = environ.get(name, "")
    if not raw:
        return default
    value = seconds(raw)
    if value is None:
        raise ConfigError(f"{name} must be a non-negative number of seconds, got {shown(raw)}.")
    return value


def max_text_len(environ) -> int:
    return positive_int_env(environ, "CAFLEET_MAX_TEXT_LEN", DEFAULT_MAX_TEXT_LEN)


DEFAULT_SUBMIT_SETTLE = 0.3  # seconds; see delivery/submit.py for why
DEFAULT_LOCK_TIMEOUT = 15.0  # seconds; many senders may queue behind one pane


def submit_settle(environ) -> float:
    return positive_float_env(environ, "CAFLEET_SUBMIT_SETTLE", DEFAULT_SUBMIT_SETTLE)


def lock_timeout(environ) -> float:
    return positive_float_env(environ, "CAFLEET_LOCK_TIMEOUT", DEFAULT_LOCK_TIMEOUT)
