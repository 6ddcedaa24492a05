"""cafleet's own PostgreSQL client: the frontend/backend protocol (version 3.0) over a socket.

Why not psycopg: a cafleet command is a short process, and importing psycopg (its C or
ctypes libpq binding, its type adapters, logging, asyncio, importlib.metadata) cost more
than the whole same command on SQLite (docs/decisions.md "PostgreSQL driver" has the
measurement). This module imports only what a command needs: ``socket``, ``struct`` and
``hashlib``; ``ssl`` only when the connection asks for TLS, ``hmac`` only for a SCRAM
login, ``decimal`` only when a ``numeric`` value comes back.

What it keeps of libpq's behaviour, because the store relies on it:

- URLs (``postgresql://user:password@host:port/dbname?param=value``) and the ``PG*``
  environment variables (``PGHOST``, ``PGPORT``, ``PGUSER``, ``PGPASSWORD``,
  ``PGPASSFILE``, ``PGSSLMODE``, ...), a Unix socket directory as the host, Debian's
  default socket directory ``/var/run/postgresql``;
- the passfile (``passfile=``, ``PGPASSFILE``, ``~/.pgpass``; ignored when others can read
  it), looked up only when the server asks for a password;
- trust, cleartext, MD5 and SCRAM-SHA-256 logins;
- ``sslmode`` (``disable``, ``allow``, ``prefer`` — the default: TLS when a TCP server offers
  it —, ``require``, ``verify-ca``, ``verify-full``; ``sslrootcert``, ``sslcert``,
  ``sslkey``), never on a Unix socket, as libpq;
- TCP keepalives (``keepalives``, ``keepalives_idle``, ``keepalives_interval``,
  ``keepalives_count``) and ``connect_timeout``;
- LISTEN/NOTIFY (:meth:`Connection.notifies`), and session state (advisory locks, settings)
  on one connection.

The API is the small part of psycopg 3's that the store uses (``connect``, ``execute``
returning a cursor with ``fetchone``/``fetchall``/``nextset``/``rowcount``, ``notifies``,
``info``, ``closed``/``broken``, the exception classes by SQLSTATE class), with one
difference: the placeholders are sqlite3's ``?``, so the broker's statements are sent as
written to either engine (:func:`render`). Statements go as simple queries: parameters
are rendered as literals on the client, so several statements go in one message and come
back in one round trip.
"""

from __future__ import annotations

import os
import struct

# The C module behind ``socket``: the module itself builds its enums at import (most of its
# cost) and pulls in ``selectors``; a connection needs neither. ``socket`` is imported only
# for TLS, which wraps a ``socket.socket``.
import _socket as socket

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

IDLE, INTRANS, INERROR, UNKNOWN = "I", "T", "E", "?"  # ReadyForQuery's transaction status
DEFAULT_SOCKET_DIR = "/var/run/postgresql"  # Debian's libpq
_I = struct.Struct("!i")
_H = struct.Struct("!h")


class Error(Exception):
    sqlstate: str | None = None

    def __init__(self, message: str, sqlstate: str | None = None, fields: dict | None = None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate
        self.fields = fields or {}


class InterfaceError(Error):
    pass


class DatabaseError(Error):
    pass


class OperationalError(DatabaseError):
    pass


class DataError(DatabaseError):
    pass


class IntegrityError(DatabaseError):
    pass


class ProgrammingError(DatabaseError):
    pass


class InternalError(DatabaseError):
    pass


class NotSupportedError(DatabaseError):
    pass


# The class of a server error by its SQLSTATE's first two characters, as psycopg maps them.
_BY_CLASS: dict[str, type[Error]] = {
    "08": OperationalError,
    "0A": NotSupportedError,
    "20": ProgrammingError,
    "21": ProgrammingError,
    "22": DataError,
    "23": IntegrityError,
    "24": InternalError,
    "25": InternalError,
    "26": InternalError,
    "27": InternalError,
    "28": OperationalError,
    "2B": InternalError,
    "2D": InternalError,
    "2F": InternalError,
    "34": OperationalError,
    "3D": ProgrammingError,
    "3F": ProgrammingError,
    "40": OperationalError,
    "42": ProgrammingError,
    "44": ProgrammingError,
    "53": OperationalError,
    "54": OperationalError,
    "55": OperationalError,
    "57": OperationalError,
    "58": OperationalError,
    "F0": InternalError,
    "P0": InternalError,
    "XX": InternalError,
}


def _server_error(fields: dict[str, str]) -> Error:
    state = fields.get("C", "")
    message = fields.get("M", "")
    for code, label in (("D", "DETAIL"), ("H", "HINT")):
        if fields.get(code):
            message += f"\n{label}:  {fields[code]}"
    return _BY_CLASS.get(state[:2], DatabaseError)(message, state, fields)


class Notify:
    """One notification: ``channel``, ``payload`` and the sending backend's ``pid``."""

    __slots__ = ("channel", "payload", "pid")

    def __init__(self, channel: str, payload: str, pid: int) -> None:
        self.channel, self.payload, self.pid = channel, payload, pid

    def __repr__(self) -> str:
        return f"Notify({self.channel!r}, {self.payload!r}, {self.pid})"


# --- connection parameters --------------------------------------------------------------------

_ENV = {
    "host": "PGHOST",
    "hostaddr": "PGHOSTADDR",
    "port": "PGPORT",
    "dbname": "PGDATABASE",
    "user": "PGUSER",
    "password": "PGPASSWORD",
    "passfile": "PGPASSFILE",
    "options": "PGOPTIONS",
    "application_name": "PGAPPNAME",
    "sslmode": "PGSSLMODE",
    "sslrootcert": "PGSSLROOTCERT",
    "sslcert": "PGSSLCERT",
    "sslkey": "PGSSLKEY",
    "connect_timeout": "PGCONNECT_TIMEOUT",
    "client_encoding": "PGCLIENTENCODING",
    "channel_binding": "PGCHANNELBINDING",
    "gssencmode": "PGGSSENCMODE",
    "target_session_attrs": "PGTARGETSESSIONATTRS",
}
_KNOWN = {
    *_ENV,
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_count",
    "fallback_application_name",
    "sslpassword",
    "sslcompression",
    "sslcrl",
    "sslsni",
    "requiressl",
    "krbsrvname",
    "gsslib",
    "service",
    "replication",
    "tcp_user_timeout",
}


def _unquote(text: str) -> str:
    """Percent-decoding (``%2F`` -> ``/``), of UTF-8, refusing what libpq refuses, with its
    words (urllib.parse would import ``re``)."""
    if "%" not in text:
        return text
    raw, i = bytearray(), 0
    while i < len(text):
        if text[i] == "%":
            pair = text[i + 1 : i + 3]
            if len(pair) != 2 or any(c not in "0123456789abcdefABCDEF" for c in pair):
                raise ProgrammingError(f'invalid percent-encoded token: "{text}"')
            if pair == "00":
                raise ProgrammingError(f'forbidden value %00 in percent-encoded value: "{text}"')
            raw.append(int(pair, 16))
            i += 3
            continue
        raw += text[i].encode("utf-8", "surrogatepass")
        i += 1
    return raw.decode("utf-8", "surrogateescape")


def parse_url(url: str) -> dict[str, str]:
    """The parameters a ``postgresql://`` or ``postgres://`` URL names (percent-decoded)."""
    for scheme in ("postgresql://", "postgres://"):
        if url.startswith(scheme):
            rest = url[len(scheme) :]
            break
    else:
        raise ProgrammingError(f'invalid connection URI: "{url}" does not start with postgresql://')
    params: dict[str, str] = {}
    rest, _, query = rest.partition("?")
    authority, slash, path = rest.partition("/")
    if slash and path:
        params["dbname"] = _unquote(path)
    _parse_authority(authority, params)
    for item in query.split("&") if query else ():
        key, equals, value = item.partition("=")
        if not equals:
            raise ProgrammingError(f'missing "=" after "{key}" in connection URI query parameter')
        key = _unquote(key)
        if key == "ssl" and value == "true":
            key, value = "sslmode", "require"
        if key not in _KNOWN:
            raise ProgrammingError(f'invalid URI query parameter: "{key}"')
        params[key] = _unquote(value)
    return params


def _parse_authority(authority: str, params: dict[str, str]) -> None:
    """``user:password@host:port`` (each part optional) into ``params``."""
    if "@" in authority:
        userinfo, _, authority = authority.rpartition("@")
        user, colon, password = userinfo.partition(":")
        if user:
            params["user"] = _unquote(user)
        if colon:
            params["password"] = _unquote(password)
    if not authority:
        return
    if "," in authority:
        raise NotSupportedError("several hosts in one URL are not supported by cafleet; name one host")
    if authority.startswith("["):  # [IPv6]:port
        host, _, port = authority[1:].partition("]")
        port = port[1:] if port.startswith(":") else ""
    else:
        host, _, port = authority.partition(":")
    if host:
        params["host"] = _unquote(host)
    if port:
        params["port"] = port


def conninfo(url: str, overrides: dict[str, Any]) -> dict[str, str]:
    """The URL's parameters, then ``overrides``, then the environment's, then the defaults."""
    params = parse_url(url)
    for key, value in overrides.items():
        if value is not None:
            params[key] = str(value)
    from cafleet.config import process_environ

    environ = process_environ()  # libpq's PG* variables are the process's own, as libpq reads them
    for key, var in _ENV.items():
        if key not in params and environ.get(var):
            params[key] = environ[var]
    if not params.get("user"):
        import pwd

        params["user"] = pwd.getpwuid(os.getuid()).pw_name
    params.setdefault("dbname", params["user"])
    params.setdefault("port", "5432")
    params.setdefault("sslmode", "prefer")
    if not params.get("host") and not params.get("hostaddr"):
        params["host"] = DEFAULT_SOCKET_DIR
    return params


def _passfile_password(params: dict[str, str], host: str) -> str | None:
    """The password of the first matching passfile line (libpq's rules), or None."""
    path = params.get("passfile") or os.path.join(os.path.expanduser("~"), ".pgpass")
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as handle:
            if os.fstat(handle.fileno()).st_mode & 0o077:
                return None  # libpq ignores a passfile that others can read
            lines = handle.read().splitlines()
    except OSError:
        return None
    if host.startswith("/") and host == DEFAULT_SOCKET_DIR:
        host = "localhost"
    wanted = (host, params["port"], params["dbname"], params["user"])
    for line in lines:
        if not line or line.startswith("#"):
            continue
        fields: list[str] = []
        field: list[str] = []
        chars = iter(line)
        for ch in chars:
            if ch == "\\":
                field.append(next(chars, ""))
            elif ch == ":" and len(fields) < 4:
                fields.append("".join(field))
                field = []
            else:
                field.append(ch)
        fields.append("".join(field))
        if len(fields) == 5 and all(f == "*" or f == w for f, w in zip(fields[:4], wanted)):
            return fields[4]
    return None


# --- literals -----------------------------------------------------------------------------------


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def literal(value: Any) -> str:
    """``value`` as an SQL constant (with ``standard_conforming_strings`` either way)."""
    if value is None:
        return "NULL"
    if value is True:
        return "true"
    if value is False:
        return "false"
    kind = type(value)
    if kind is int:
        return str(value) if value >= 0 else f"({value})"
    if kind is str:
        if "\0" in value:
            raise DataError("PostgreSQL text fields cannot contain NUL (0x00) bytes")
        if "\\" in value:
            return "E'" + value.replace("\\", "\\\\").replace("'", "''") + "'"
        return "'" + value.replace("'", "''") + "'"
    if kind is float:
        if value != value or value in (float("inf"), float("-inf")):
            return f"'{value!r}'::float8".replace("inf", "Infinity").replace("nan", "NaN")
        return f"({value!r}::float8)"
    if isinstance(value, (list, tuple)):
        return "ARRAY[" + ",".join(literal(item) for item in value) + "]" if value else "'{}'"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "'\\x" + bytes(value).hex() + "'::bytea"
    if isinstance(value, int):  # a bool was answered above; an IntEnum
        return literal(int(value))
    if isinstance(value, str):
        return literal(str(value))
    if type(value).__name__ == "Decimal":
        return f"'{value}'::numeric"
    raise ProgrammingError(f"cannot send a value of type {kind.__name__} to PostgreSQL")


def render(query: str, params: Any) -> str:
    """``query`` with each ``?`` placeholder replaced by the next of ``params``' literals.

    The placeholders are sqlite3's (qmark), so the broker's statements reach both engines
    in one text. A ``?`` is a placeholder wherever PostgreSQL would read it as a token:
    not inside a string literal (``'...'``, ``E'...'``, ``$tag$...$tag$``), a quoted
    identifier or a comment (:func:`placeholders` finds them, with no regular expression).
    PostgreSQL's own ``?`` operators (jsonb, geometry) cannot be written with parameters;
    their function forms can. ``%`` is an ordinary character."""
    if isinstance(params, dict):
        raise ProgrammingError("named parameters are not supported; write ? placeholders and pass a sequence")
    pieces = _PIECES.get(query)
    if pieces is None:
        pieces = _PIECES[query] = placeholders(query)
    count = len(pieces) - 1
    given = len(params)
    if count != given:
        which = "more" if count > given else "fewer"
        raise ProgrammingError(f"the query has {which} placeholders than parameters ({count} against {given})")
    if not count:
        return query
    out = [pieces[0]]
    for value, piece in zip(params, pieces[1:]):
        out.append(literal(value))
        out.append(piece)
    return "".join(out)


_PIECES: dict[str, list[str]] = {}  # a statement's text -> its text between placeholders
_WORD = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_$")
_SPECIAL = "?'\"-/$"  # a placeholder, and what opens a literal, an identifier or a comment


def placeholders(query: str) -> list[str]:
    """``query`` split at its placeholders: the text before the first ``?``, between each
    two, and after the last (one piece when there is none)."""
    if "?" not in query:
        return [query]
    if not any(c in query for c in _SPECIAL[1:]):  # nothing that can hide a ``?``
        return query.split("?")
    ahead = [query.find(c) for c in _SPECIAL]  # where each special character comes next
    pieces: list[str] = []
    start = i = 0
    while True:
        at = -1  # the nearest special character at or after i
        for k, found in enumerate(ahead):
            if 0 <= found < i:
                found = ahead[k] = query.find(_SPECIAL[k], i)
            if found >= 0 and (at < 0 or found < at):
                at = found
        if at < 0:
            break
        c, i = query[at], at + 1
        if c == "?":
            pieces.append(query[start:at])
            start = i
        elif c == "'":
            i = _literal_end(query, at, at > 0 and query[at - 1] in "eE" and (at < 2 or query[at - 2] not in _WORD))
        elif c == '"':
            i = _closed(query, '"', i, "quoted identifier")
        elif c == "-" and query.startswith("--", at):
            newline = query.find("\n", at)
            i = len(query) if newline < 0 else newline + 1
        elif c == "/" and query.startswith("/*", at):
            i = _comment_end(query, at)
        elif c == "$" and (at == 0 or query[at - 1] not in _WORD):
            i = _dollar_end(query, at)
    pieces.append(query[start:])
    return pieces


def _closed(query: str, quote: str, i: int, what: str) -> int:
    """The index after the ``quote`` that closes what opened before ``i``; a doubled quote
    is one character of the text and goes on."""
    while True:
        close = query.find(quote, i)
        if close < 0:
            raise ProgrammingError(f"a {what} is not closed in the query")
        if not query.startswith(quote, close + 1):
            return close + 1
        i = close + 2


def _literal_end(query: str, i: int, backslashes: bool) -> int:
    """The index after the string literal that opens at ``i`` (``E'...'``: ``\\'`` too is
    a quote of the text)."""
    if not backslashes:
        return _closed(query, "'", i + 1, "string literal")
    i += 1
    while i < len(query):
        c = query[i]
        if c == "\\":
            i += 2
        elif c == "'":
            if not query.startswith("'", i + 1):
                return i + 1
            i += 2
        else:
            i += 1
    raise ProgrammingError("a string literal is not closed in the query")


def _comment_end(query: str, i: int) -> int:
    """The index after the ``/* ... */`` comment (nested ones inside) that opens at ``i``."""
    depth, i = 1, i + 2
    while depth:
        opening, closing = query.find("/*", i), query.find("*/", i)
        if closing < 0:
            raise ProgrammingError("a comment is not closed in the query")
        if 0 <= opening < closing:
            depth, i = depth + 1, opening + 2
        else:
            depth, i = depth - 1, closing + 2
    return i


def _dollar_end(query: str, i: int) -> int:
    """The index after the dollar-quoted string that opens at ``i`` (``$$`` or ``$tag$``,
    a tag being a name); ``i + 1`` when the ``$`` opens none (``$1``, an operator)."""
    close = query.find("$", i + 1)
    tag = query[i : close + 1]
    if close < 0 or (len(tag) > 2 and (tag[1] in "0123456789" or any(c not in _WORD for c in tag[1:-1]))):
        return i + 1
    end = query.find(tag, close + 1)
    if end < 0:
        raise ProgrammingError("a dollar-quoted string is not closed in the query")
    return end + len(tag)


# --- values that come back --------------------------------------------------------------------

_INT_OIDS = frozenset((20, 21, 23, 26, 28, 5069))
_FLOAT_OIDS = frozenset((700, 701))


def _numeric(text: str):
    from decimal import Decimal

    return Decimal(text)


def _bytea(text: str) -> bytes:
    if text.startswith("\\x"):
        return bytes.fromhex(text[2:])
    return text.encode("latin-1")  # escape format: not what a server of this century sends


def _converter(oid: int):
    if oid in _INT_OIDS:
        return int
    if oid == 16:
        return lambda text: text == "t"
    if oid in _FLOAT_OIDS:
        return float
    if oid == 1700:
        return _numeric
    if oid == 17:
        return _bytea
    return None  # text as it is


class Column:
    __slots__ = ("name", "type_code")

    def __init__(self, name: str, type_code: int) -> None:
        self.name, self.type_code = name, type_code

    def __getitem__(self, index: int):
        return (self.name, self.type_code)[index]


class _Result:
    __slots__ = ("description", "rows", "rowcount")

    def __init__(self) -> None:
        self.description: list[Column] | None = None
        self.rows: list[tuple] = []
        self.rowcount = -1


class Cursor:
    """The results of one ``execute``: one result set per statement sent."""

    def __init__(self, results: list[_Result]) -> None:
        self._results = results or [_Result()]
        self._set = 0
        self._row = 0

    @property
    def _current(self) -> _Result:
        return self._results[self._set]

    @property
    def description(self):
        return self._current.description

    @property
    def rowcount(self) -> int:
        return self._current.rowcount

    def nextset(self) -> bool | None:
        if self._set + 1 >= len(self._results):
            return None
        self._set += 1
        self._row = 0
        return True

    def fetchone(self):
        rows = self._current.rows
        if self._row >= len(rows):
            return None
        self._row += 1
        return rows[self._row - 1]

    def fetchall(self) -> list[tuple]:
        rows = self._current.rows[self._row :]
        self._row = len(self._current.rows)
        return rows

    def fetchmany(self, size: int = 1) -> list[tuple]:
        rows = self._current.rows[self._row : self._row + size]
        self._row += len(rows)
        return rows

    def __iter__(self):
        while True:
            row = self.fetchone()
            if row is None:
                return
            yield row

    def close(self) -> None:
        pass


class Info:
    """Where the connection went and its state, as psycopg's ``conn.info`` names them."""

    def __init__(self, conn: "Connection", params: dict[str, str]) -> None:
        self._conn = conn
        self.host = params.get("host") or params.get("hostaddr", "")
        self.hostaddr = params.get("hostaddr", "")
        self.port = int(params["port"])
        self.dbname = params["dbname"]
        self.user = params["user"]
        self.backend_pid = 0
        self.parameters: dict[str, str] = {}

    @property
    def transaction_status(self) -> str:
        return UNKNOWN if self._conn.broken else self._conn._status

    def parameter_status(self, name: str) -> str | None:
        return self.parameters.get(name)

    @property
    def server_version(self) -> int:
        text = self.parameters.get("server_version", "0").split()[0]
        parts = [int(p) for p in text.split(".") if p.isdigit()]
        return parts[0] * 10000 + (parts[1] if len(parts) > 1 else 0) if parts and parts[0] >= 10 else 0


# --- the connection -------------------------------------------------------------------------


class Connection:
    """One session on a server. Every statement runs in autocommit unless it opens a
    transaction itself (``BEGIN``), as psycopg's ``autocommit=True`` connections do."""

    def __init__(self) -> None:
        self.sock: Any = None
        self.info: Info
        self.broken = False
        self._closed = False
        self._status = IDLE
        self._buffer = bytearray()  # what came from the server; read from _pos on
        self._pos = 0
        self._notifies: list[Notify] = []
        self.trace: Any = None  # a callable given each query as written, before its parameters
        self.autocommit = True

    @classmethod
    def connect(cls, url: str, **overrides: Any) -> "Connection":
        """A session on the server ``url`` names, ``overrides`` (libpq's parameter names)
        over it. Always autocommit: there is no other mode."""
        params = conninfo(url, overrides)
        conn = cls()
        conn.info = Info(conn, params)
        conn._open(params)
        return conn

    # -- state --

    @property
    def closed(self) -> bool:
        return self._closed or self.broken

    def fileno(self) -> int:
        if self.sock is None:
            raise OperationalError("the connection is closed")
        return self.sock.fileno()

    def close(self) -> None:
        if self.sock is not None:
            try:
                if not self.broken:
                    self.sock.sendall(b"X\0\0\0\4")
            except OSError:
                pass
            try:
                self.sock.close()
            except OSError:
                pass
        self.sock = None
        self._closed = True

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- opening --

    def _open(self, params: dict[str, str]) -> None:
        host = params.get("hostaddr") or params["host"]
        port = params["port"]
        if not port.isdigit():
            raise OperationalError(f'invalid port number: "{port}"')
        unix = host.startswith("/")
        where = (
            f'connection to server on socket "{host}/.s.PGSQL.{port}"'
            if unix
            else f'connection to server at "{host}", port {port}'
        )
        timeout_text = params.get("connect_timeout", "0") or "0"
        try:
            seconds = float(int(timeout_text))
        except ValueError:
            raise OperationalError(
                f'invalid integer value "{timeout_text}" for connection option "connect_timeout"'
            ) from None
        timeout = max(seconds, 2.0) if seconds > 0 else None
        try:
            self.sock = self._socket(host, int(port), unix, timeout, params)
            mode = params["sslmode"]
            if mode not in ("disable", "allow", "prefer", "require", "verify-ca", "verify-full"):
                raise OperationalError(f'invalid sslmode value: "{mode}"')
            if not unix and mode not in ("disable", "allow"):
                self._negotiate_tls(params, host, mode)
            self._startup(params, host)
            if timeout is not None:
                self.sock.settimeout(None)
        except Error as exc:
            self.close()
            detail = f"FATAL:  {exc}" if exc.sqlstate else str(exc)
            raise OperationalError(f"connection failed: {where} failed: {detail}", None) from None
        except OSError as exc:
            self.close()
            reason = exc.strerror or str(exc) or type(exc).__name__
            if isinstance(exc, TimeoutError):
                reason = "timeout expired"
            hint = (
                "\n\tIs the server running locally and accepting connections on that socket?"
                if unix
                else "\n\tIs the server running on that host and accepting TCP/IP connections?"
            )
            if reason.startswith("could not translate host name"):
                hint = ""
            raise OperationalError(f"connection failed: {where} failed: {reason}{hint}") from None

    def _socket(self, host: str, port: int, unix: bool, timeout: float | None, params: dict[str, str]):
        if unix:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout)
            try:
                sock.connect(f"{host}/.s.PGSQL.{port}")
            except BaseException:
                sock.close()
                raise
            return sock
        last: OSError | None = None
        try:
            addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            reason = exc.strerror or str(exc)
            raise OSError(0, f'could not translate host name "{host}" to address: {reason}') from None
        for family, kind, proto, _, address in addresses:
            sock = socket.socket(family, kind, proto)
            sock.settimeout(timeout)
            try:
                sock.connect(address)
            except OSError as exc:
                sock.close()
                last = exc
                continue
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if params.get("keepalives", "1") != "0":
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
                for key, option in (
                    ("keepalives_idle", "TCP_KEEPIDLE"),
                    ("keepalives_interval", "TCP_KEEPINTVL"),
                    ("keepalives_count", "TCP_KEEPCNT"),
                ):
                    if params.get(key) and hasattr(socket, option):
                        sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), int(params[key]))
            return sock
        raise last or OSError(f"could not translate host name {host!r} to an address")

    def _negotiate_tls(self, params: dict[str, str], host: str, mode: str) -> None:
        self.sock.sendall(_I.pack(8) + _I.pack(80877103))  # SSLRequest
        answer = self._recv_exact(1)
        if answer == b"N":
            if mode != "prefer":
                raise OperationalError("server does not support SSL, but SSL was required")
            return
        if answer != b"S":
            raise OperationalError("received invalid response to SSL negotiation")
        import socket as socket_module
        import ssl

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        home = os.path.join(os.path.expanduser("~"), ".postgresql")
        root = params.get("sslrootcert") or os.path.join(home, "root.crt")
        verify = mode in ("verify-ca", "verify-full") or (mode == "require" and params.get("sslrootcert"))
        if verify:
            if root == "system":
                context.load_default_certs()
            else:
                context.load_verify_locations(root)
            context.check_hostname = mode == "verify-full"
            context.verify_mode = ssl.CERT_REQUIRED
        else:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        cert = params.get("sslcert") or os.path.join(home, "postgresql.crt")
        if os.path.exists(cert):
            key = params.get("sslkey") or os.path.join(home, "postgresql.key")
            context.load_cert_chain(cert, key, password=params.get("sslpassword") or None)
        timeout = self.sock.gettimeout()
        plain = socket_module.socket(fileno=self.sock.detach())  # ssl wraps socket.socket objects
        plain.settimeout(timeout)
        self.sock = context.wrap_socket(plain, server_hostname=host if params.get("sslsni", "1") != "0" else None)

    def _startup(self, params: dict[str, str], host: str) -> None:
        body = bytearray(_I.pack(196608))
        startup = {
            "user": params["user"],
            "database": params["dbname"],
            "client_encoding": "UTF8",
        }
        name = params.get("application_name") or params.get("fallback_application_name")
        if name:
            startup["application_name"] = name
        if params.get("options"):
            startup["options"] = params["options"]
        for key, value in startup.items():
            body += key.encode() + b"\0" + value.encode("utf-8", "surrogateescape") + b"\0"
        body += b"\0"
        self.sock.sendall(_I.pack(len(body) + 4) + body)
        scram: Any = None
        while True:
            kind, data = self._read_message()
            if kind == b"R":
                code = _I.unpack_from(data)[0]
                if code == 0:
                    continue
                if code in (3, 5):
                    password = self._password(params, host)
                    if code == 5:
                        import hashlib

                        user = params["user"].encode()
                        inner = hashlib.md5(password.encode() + user).hexdigest().encode()
                        secret = b"md5" + hashlib.md5(inner + bytes(data[4:8])).hexdigest().encode()
                    else:
                        secret = password.encode()
                    self._send(b"p", secret + b"\0")
                elif code == 10:
                    mechanisms = bytes(data[4:]).split(b"\0")
                    if b"SCRAM-SHA-256" not in mechanisms:
                        raise OperationalError("the server asks for a SASL mechanism cafleet does not support")
                    scram = _Scram(self._password(params, host))
                    first = scram.first()
                    self._send(b"p", b"SCRAM-SHA-256\0" + _I.pack(len(first)) + first)
                elif code == 11:
                    self._send(b"p", scram.final(bytes(data[4:])))
                elif code == 12:
                    scram.verify(bytes(data[4:]))
                else:
                    raise OperationalError(f"authentication method {code} is not supported by cafleet")
            elif kind == b"E":
                raise _server_error(_fields(data))
            elif kind == b"Z":
                self._status = chr(data[0])
                return
            else:
                self._handle_async(kind, data)

    def _password(self, params: dict[str, str], host: str) -> str:
        password = params.get("password")
        if password is None:
            password = _passfile_password(params, host)
        if password is None:
            raise OperationalError("fe_sendauth: no password supplied")
        return password

    # -- the wire --

    def _send(self, kind: bytes, body: bytes) -> None:
        self.sock.sendall(kind + _I.pack(len(body) + 4) + body)

    def _recv_exact(self, size: int) -> bytes:
        while len(self._buffer) - self._pos < size:
            self._fill()
        data = bytes(self._buffer[self._pos : self._pos + size])
        self._pos += size
        return data

    def _fill(self) -> None:
        if self._pos:  # drop what was read before appending (never one message at a time)
            del self._buffer[: self._pos]
            self._pos = 0
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionResetError(0, "server closed the connection unexpectedly")
        self._buffer += chunk

    def _complete(self) -> bool:
        """Whether a whole message is buffered."""
        available = len(self._buffer) - self._pos
        return available >= 5 and available >= _I.unpack_from(self._buffer, self._pos + 1)[0] + 1

    def _read_message(self) -> tuple[bytes, memoryview]:
        while not self._complete():
            self._fill()
        buffer, pos = self._buffer, self._pos
        end = pos + 1 + _I.unpack_from(buffer, pos + 1)[0]
        kind = bytes(buffer[pos : pos + 1])
        data = memoryview(bytes(buffer[pos + 5 : end]))
        self._pos = end
        return kind, data

    def _handle_async(self, kind: bytes, data: memoryview) -> None:
        if kind == b"A":
            pid = _I.unpack_from(data)[0]
            channel, payload = bytes(data[4:]).split(b"\0")[:2]
            self._notifies.append(Notify(channel.decode(), payload.decode(), pid))
        elif kind == b"S":
            name, value = bytes(data).split(b"\0")[:2]
            self.info.parameters[name.decode()] = value.decode()
        elif kind == b"K":
            self.info.backend_pid = _I.unpack_from(data)[0]
        # "N" (a notice) and anything else unasked for: nothing to do

    def _lost(self, exc: BaseException) -> OperationalError:
        self.broken = True
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
        reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        return OperationalError(f"consuming input failed: {reason}")

    def _check_usable(self) -> None:
        if self.closed or self.sock is None:
            raise OperationalError("the connection is closed")

    # -- statements --

    def execute(self, query: Any, params: Any = None) -> Cursor:
        self._check_usable()
        text = str(query)
        if self.trace is not None:
            self.trace(text)
        sql = render(text, params) if params is not None else text  # no parameters: sent as written
        return Cursor(self._simple_query(sql))

    def executemany(self, query: Any, params_seq: Any) -> None:
        for params in params_seq:
            self.execute(query, params)

    def transaction(self) -> "_Transaction":
        """``with conn.transaction():`` BEGIN, then COMMIT, or ROLLBACK on an exception."""
        return _Transaction(self)

    def cursor(self) -> "_CursorShim":
        return _CursorShim(self)

    def _simple_query(self, sql: str) -> list[_Result]:
        body = sql.encode("utf-8") + b"\0"
        try:
            self.sock.sendall(b"Q" + _I.pack(len(body) + 4) + body)
        except OSError as exc:
            raise self._lost(exc) from None
        results: list[_Result] = []
        current = _Result()
        error: Error | None = None
        converters: list = []
        try:
            while True:
                kind, data = self._read_message()
                if kind == b"D":
                    count = _H.unpack_from(data)[0]
                    row: list = []
                    offset = 2
                    for i in range(count):
                        size = _I.unpack_from(data, offset)[0]
                        offset += 4
                        if size < 0:
                            row.append(None)
                            continue
                        value = bytes(data[offset : offset + size]).decode("utf-8", "surrogateescape")
                        offset += size
                        convert = converters[i]
                        row.append(convert(value) if convert is not None else value)
                    current.rows.append(tuple(row))
                elif kind == b"T":
                    current.description = _columns(data)
                    converters = [_converter(c.type_code) for c in current.description]
                elif kind == b"C":
                    tag = bytes(data[:-1]).decode()
                    last = tag.rsplit(" ", 1)[-1]
                    current.rowcount = int(last) if last.isdigit() else -1
                    results.append(current)
                    current = _Result()
                elif kind == b"I":
                    results.append(current)
                    current = _Result()
                elif kind == b"E":
                    fields = _fields(data)
                    error = _server_error(fields)
                    if fields.get("S") in ("FATAL", "PANIC"):
                        self.broken = True
                        raise error
                elif kind == b"Z":
                    self._status = chr(data[0])
                    break
                else:
                    self._handle_async(kind, data)
        except Error:
            self._lost(OSError())
            raise
        except OSError as exc:
            raise self._lost(exc) from None
        if error is not None:
            raise error
        return results

    def notifies(self, timeout: float | None = None, stop_after: int | None = None):
        """Yield notifications as they come, for at most ``timeout`` seconds (None: ever)
        and at most ``stop_after`` of them."""
        import time

        deadline = None if timeout is None else time.monotonic() + timeout
        given = 0
        while True:
            while self._notifies:
                yield self._notifies.pop(0)
                given += 1
                if stop_after is not None and given >= stop_after:
                    return
            self._check_usable()
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return
            if not self._wait_readable(remaining):
                return
            self._read_pending()

    def _wait_readable(self, timeout: float | None) -> bool:
        if self._complete():
            return True
        pending = getattr(self.sock, "pending", None)  # TLS: bytes already decrypted
        if pending is not None and pending():
            return True
        import select

        poller = select.poll()
        poller.register(self.sock.fileno(), select.POLLIN)
        return bool(poller.poll(None if timeout is None else max(0, int(timeout * 1000 + 0.999))))

    def _read_pending(self) -> None:
        """Read what the server sent unasked (notifications, notices, a FATAL error)."""
        try:
            if not self._complete():
                self._fill()  # the socket is readable: this does not block
            while self._complete():
                kind, data = self._read_message()
                if kind == b"E":
                    error = _server_error(_fields(data))
                    self._lost(OSError())
                    raise error
                self._handle_async(kind, data)
        except OSError as exc:
            raise self._lost(exc) from None


class _Transaction:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def __enter__(self) -> Connection:
        self.conn.execute("BEGIN")
        return self.conn

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.conn.execute("COMMIT")
        elif not self.conn.closed:
            try:
                self.conn.execute("ROLLBACK")
            except Error:
                pass


class _CursorShim:
    """``conn.cursor()`` for callers that want one: each ``execute`` is the connection's."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self._cursor: Cursor | None = None

    def execute(self, query: Any, params: Any = None) -> "_CursorShim":
        self._cursor = self.conn.execute(query, params)
        return self

    def executemany(self, query: Any, params_seq: Any) -> None:
        self.conn.executemany(query, params_seq)

    def __getattr__(self, name: str):
        return getattr(self._cursor, name)

    def __enter__(self) -> "_CursorShim":
        return self

    def __exit__(self, *exc: Any) -> None:
        pass


def _columns(data: memoryview) -> list[Column]:
    """A RowDescription's columns: each one's name and type oid."""
    count = _H.unpack_from(data)[0]
    columns, offset, raw = [], 2, bytes(data)
    for _ in range(count):
        end = raw.index(b"\0", offset)
        columns.append(Column(raw[offset:end].decode(), _I.unpack_from(raw, end + 7)[0]))
        offset = end + 19
    return columns


def _fields(data: memoryview) -> dict[str, str]:
    fields = {}
    for item in bytes(data).split(b"\0"):
        if item:
            fields[chr(item[0])] = item[1:].decode("utf-8", "replace")
    return fields


class _Scram:
    """SCRAM-SHA-256 without channel binding (RFC 5802, RFC 7677)."""

    def __init__(self, password: str) -> None:
        import binascii

        self.password = password.encode("utf-8")
        self.nonce = binascii.b2a_base64(os.urandom(18), newline=False).decode()
        self.bare = f"n=,r={self.nonce}"
        self.server_signature = b""

    def first(self) -> bytes:
        return ("n,," + self.bare).encode()

    def final(self, server_first: bytes) -> bytes:
        import binascii
        import hashlib
        import hmac

        text = server_first.decode()
        parts = dict(item.split("=", 1) for item in text.split(","))
        if not parts["r"].startswith(self.nonce):
            raise OperationalError("the server's SCRAM nonce does not extend ours")
        salted = hashlib.pbkdf2_hmac("sha256", self.password, binascii.a2b_base64(parts["s"]), int(parts["i"]))
        client_key = hmac.digest(salted, b"Client Key", "sha256")
        stored = hashlib.sha256(client_key).digest()
        without_proof = f"c=biws,r={parts['r']}"
        message = f"{self.bare},{text},{without_proof}".encode()
        signature = hmac.digest(stored, message, "sha256")
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        self.server_signature = hmac.digest(hmac.digest(salted, b"Server Key", "sha256"), message, "sha256")
        return f"{without_proof},p={binascii.b2a_base64(proof, newline=False).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        import binascii

        text = server_final.decode()
        if not text.startswith("v=") or binascii.a2b_base64(text[2:]) != self.server_signature:
            raise OperationalError("the server's SCRAM signature is wrong")


def connect(url: str, **kwargs: Any) -> Connection:
    return Connection.connect(url, **kwargs)
