"""A PostgreSQL session: connecting through libpq (keepalives, the read margin, the
settings of a session), the advisory-lock keys, and a failure as cafleet's one line."""

from __future__ import annotations

# BLAKE2 from the interpreter's own module, without hashlib's Python layer (libpq maps
# OpenSSL's libcrypto in anyway; docs/performance.md "On PostgreSQL").
try:
    from _blake2 import blake2b
except ImportError:  # an interpreter built without it
    from hashlib import blake2b

from cafleet.errors import DatabaseError, DatabaseUnreachable
from cafleet.faults import NO_HOOKS
from cafleet.store import libpq

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from typing import Any

    from cafleet.faults import Hooks


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


def redacted(url: str) -> str:
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

    error = _translated(exc, redacted(url), busy_timeout)
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
    url: str, busy_timeout: float, schema_name: str, settings: bool = True, hooks: Hooks = NO_HOOKS
) -> libpq.Connection:
    """An autocommit connection with keepalives, ``search_path`` set to the schema and
    ``lock_timeout`` to the busy timeout; with ``settings=False`` the caller sends
    :func:`settings_sql` itself (the store's open folds it into its diagnosis). With test
    ``hooks`` that trace SQL (:mod:`cafleet.faults`), each statement sent goes to them."""
    try:
        conn = libpq.Connection.connect(url, read_timeout=busy_timeout + READ_MARGIN, **_defaults(busy_timeout))
    except libpq.Error as exc:
        raise translate(exc, url, busy_timeout) from None
    if hooks.trace_sql is not None:
        conn.trace = hooks.trace_sql
    if settings:
        try:
            conn.execute(settings_sql(schema_name, busy_timeout))
        except libpq.Error as exc:
            conn.close()
            raise translate(exc, url, busy_timeout) from None
    return conn


def _defaults(busy_timeout: float) -> dict[str, Any]:
    """The keepalives and a connect timeout, which libpq takes where neither the URL nor a
    ``PG*`` variable (``PGCONNECT_TIMEOUT``) says otherwise."""
    return {**KEEPALIVES, "connect_timeout": max(2, int(busy_timeout) + 1)}


def settings_sql(schema_name: str, busy_timeout: float) -> str:
    """The connection's settings as one statement. Sent as a statement rather than as the
    startup packet's ``options``: a pooler such as PgBouncer refuses a connection whose
    startup packet carries parameters it does not know. ``schema_name`` is a checked
    lower-case name (its declaration in :mod:`cafleet.config`), so it is quoted here, never bound."""
    return (
        f"SELECT set_config('search_path', '\"{schema_name}\"', false), "
        f"set_config('lock_timeout', '{max(1, int(busy_timeout * 1000))}ms', false)"
    )


def rollback_quietly(conn) -> None:
    try:
        if conn.info.transaction_status != libpq.IDLE:
            conn.execute("ROLLBACK")
    except libpq.Error:
        pass
