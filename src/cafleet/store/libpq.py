"""cafleet's binding of libpq, the PostgreSQL client library every PostgreSQL program uses.

libpq does everything that touches the server: the connection string and URL, the ``PG*``
environment variables, the passfile and the service file, multi-host URLs with
``target_session_attrs``, TLS and its ``sslmode`` rules, authentication (SCRAM with
SASLprep, channel binding, GSSAPI where built), ``connect_timeout`` on the whole connect,
and the protocol itself. This module is the thin part around it that a short-lived command
can afford (``ctypes``, loaded only for a ``postgresql://`` URL; docs/decisions.md
"PostgreSQL client" has the measurements):

- statements with sqlite3's ``?`` placeholders (the broker writes one text for both
  engines), turned into ``$1``, ``$2``… and sent with their values **out of band**
  (``PQsendQueryParams``): no value is ever rendered into SQL text, so no setting
  (``client_encoding``, ``standard_conforming_strings``, ``backslash_quote``) can turn a
  value into SQL;
- several statements in one round trip through libpq's pipeline mode (:meth:`Connection.
  pipeline`);
- fail closed: a server or client encoding other than UTF8, a ``replication`` connection,
  a COPY or any other state cafleet never asks for ends the connection with one line;
  every wait for the server is bounded (``read_timeout``), and so is what one call keeps
  of its results (:data:`MAX_RESULT_BYTES`);
- values back typed by their column's type (integers, booleans, floats, numerics, bytea;
  text otherwise), errors classed by SQLSTATE as psycopg classes them.
"""

from __future__ import annotations

import ctypes
import select
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

IDLE, ACTIVE, INTRANS, INERROR, UNKNOWN = "I", "A", "T", "E", "?"  # PQtransactionStatus, by its number
_TRANSACTION = (IDLE, ACTIVE, INTRANS, INERROR, UNKNOWN)
MAX_RESULT_BYTES = 256 * 1024 * 1024  # what one call keeps of a server's answer: 16 MiB bodies, many of them
MISSING = (
    "a postgresql:// database needs libpq (libpq.so.5), which is not installed: "
    "install it (Debian: apt-get install libpq5) and try again."
)

# PQresultStatus
_EMPTY_QUERY, _COMMAND_OK, _TUPLES_OK, _COPY_OUT, _COPY_IN, _BAD_RESPONSE = 0, 1, 2, 3, 4, 5
_NONFATAL_ERROR, _FATAL_ERROR, _COPY_BOTH, _SINGLE_TUPLE, _PIPELINE_SYNC, _PIPELINE_ABORTED = 6, 7, 8, 9, 10, 11
_CONNECTION_OK = 0


class Error(Exception):
    sqlstate: str | None = None

    def __init__(self, message: str, sqlstate: str | None = None) -> None:
        # A server's words, and libpq's quoting of what a server sent, may hold terminal
        # controls (an escape that retitles the window): shown as escapes, as output is.
        if not message.replace("\n", "").replace("\t", "").isprintable():
            from cafleet.render import display_safe

            message = display_safe(message)
        super().__init__(message)
        self.sqlstate = sqlstate


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


class Missing(OperationalError):
    """libpq itself cannot be loaded."""


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


class Notify:
    """One notification: ``channel``, ``payload`` and the sending backend's ``pid``."""

    __slots__ = ("channel", "payload", "pid")

    def __init__(self, channel: str, payload: str, pid: int) -> None:
        self.channel, self.payload, self.pid = channel, payload, pid

    def __repr__(self) -> str:
        return f"Notify({self.channel!r}, {self.payload!r}, {self.pid})"


# --- loading libpq ----------------------------------------------------------------------------


class _PGnotify(ctypes.Structure):
    _fields_ = [("relname", ctypes.c_char_p), ("be_pid", ctypes.c_int), ("extra", ctypes.c_char_p)]


class _ConninfoOption(ctypes.Structure):
    _fields_ = [
        ("keyword", ctypes.c_char_p),
        ("envvar", ctypes.c_char_p),
        ("compiled", ctypes.c_char_p),
        ("val", ctypes.c_char_p),
        ("label", ctypes.c_char_p),
        ("dispchar", ctypes.c_char_p),
        ("dispsize", ctypes.c_int),
    ]


_P, _S, _I = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int
# name: (result type, argument types); PGconn* and PGresult* are opaque pointers.
_SIGNATURES: dict[str, tuple[Any, tuple[Any, ...]]] = {
    "PQlibVersion": (_I, ()),
    "PQconnectdbParams": (_P, (ctypes.POINTER(_S), ctypes.POINTER(_S), _I)),
    "PQstatus": (_I, (_P,)),
    "PQerrorMessage": (_S, (_P,)),
    "PQfinish": (None, (_P,)),
    "PQsocket": (_I, (_P,)),
    "PQsetnonblocking": (_I, (_P, _I)),
    "PQsendQueryParams": (
        _I,
        (_P, _S, _I, ctypes.POINTER(ctypes.c_uint), ctypes.POINTER(_S), ctypes.POINTER(_I), ctypes.POINTER(_I), _I),
    ),
    "PQflush": (_I, (_P,)),
    "PQconsumeInput": (_I, (_P,)),
    "PQisBusy": (_I, (_P,)),
    "PQgetResult": (_P, (_P,)),
    "PQresultStatus": (_I, (_P,)),
    "PQresultErrorField": (_S, (_P, _I)),
    "PQresultErrorMessage": (_S, (_P,)),
    "PQresultMemorySize": (ctypes.c_size_t, (_P,)),
    "PQntuples": (_I, (_P,)),
    "PQnfields": (_I, (_P,)),
    "PQftype": (ctypes.c_uint, (_P, _I)),
    "PQfname": (_S, (_P, _I)),
    "PQgetvalue": (_S, (_P, _I, _I)),
    "PQgetisnull": (_I, (_P, _I, _I)),
    "PQcmdTuples": (_S, (_P,)),
    "PQclear": (None, (_P,)),
    "PQtransactionStatus": (_I, (_P,)),
    "PQparameterStatus": (_S, (_P, _S)),
    "PQnotifies": (ctypes.POINTER(_PGnotify), (_P,)),
    "PQfreemem": (None, (_P,)),
    "PQhost": (_S, (_P,)),
    "PQport": (_S, (_P,)),
    "PQdb": (_S, (_P,)),
    "PQbackendPID": (_I, (_P,)),
    "PQenterPipelineMode": (_I, (_P,)),
    "PQexitPipelineMode": (_I, (_P,)),
    "PQpipelineSync": (_I, (_P,)),
    "PQconninfoParse": (ctypes.POINTER(_ConninfoOption), (_S, ctypes.POINTER(ctypes.c_void_p))),
    "PQconninfo": (ctypes.POINTER(_ConninfoOption), (_P,)),
    "PQconninfoFree": (None, (ctypes.POINTER(_ConninfoOption),)),
    "PQconndefaults": (ctypes.POINTER(_ConninfoOption), ()),
    "PQsetNoticeProcessor": (_P, (_P, _P, _P)),
}
# libpq's default notice processor prints every NOTICE, WARNING and the FATAL that ends a
# session to stderr; cafleet reports what matters itself, in one line.
_QUIET = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p)(lambda _arg, _message: None)
_LIBRARY: list[Any] = []


def lib() -> Any:
    """libpq, loaded and declared once per process; :class:`Missing` when it is not there
    or too old for pipeline mode (libpq 14)."""
    if not _LIBRARY:
        try:
            pq = ctypes.CDLL("libpq.so.5")
        except OSError:
            raise Missing(MISSING) from None
        for name, (result, arguments) in _SIGNATURES.items():
            try:
                function = getattr(pq, name)
            except AttributeError:
                raise Missing(
                    f"the installed libpq lacks {name}: cafleet needs libpq 14 or newer "
                    "(Debian: apt-get install libpq5) for PostgreSQL."
                ) from None
            function.restype = result
            function.argtypes = arguments
        _LIBRARY.append(pq)
    return _LIBRARY[0]


def _text(raw: bytes | None) -> str:
    return raw.decode("utf-8", "replace") if raw else ""


def _one_line(message: str) -> str:
    """libpq's connection error as one line: one part per host it tried (a multi-host URL
    says why each failed: the primary gone, the standby read-only), without its indented
    hints."""
    return "; ".join(line.strip() for line in message.splitlines() if line.strip() and not line.startswith("\t"))


def parse(location: str) -> dict[str, str]:
    """The options a connection string or URL sets, as libpq reads it (percent-decoding,
    keyword spellings, quoting): ``{keyword: value}`` for those it sets. Raises
    :class:`ProgrammingError` with libpq's words when libpq refuses it."""
    pq = lib()
    error = ctypes.c_void_p()
    options = pq.PQconninfoParse(location.encode("utf-8", "surrogateescape"), ctypes.byref(error))
    if not options:
        message = ctypes.cast(error, ctypes.c_char_p).value if error.value else None
        if error.value:
            pq.PQfreemem(error)
        raise ProgrammingError(_text(message).strip() or "libpq cannot read the connection string")
    try:
        return _options(options)
    finally:
        pq.PQconninfoFree(options)


def _unset(pq: Any, defaults: dict[str, Any]) -> dict[str, Any]:
    """Those of ``defaults`` that no ``PG*`` variable (nor a compiled default) sets."""
    options = pq.PQconndefaults()
    if not options:
        return defaults
    try:
        known = _options(options)
    finally:
        pq.PQconninfoFree(options)
    return {key: value for key, value in defaults.items() if not known.get(key)}


def _options(options: Any) -> dict[str, str]:
    found: dict[str, str] = {}
    i = 0
    while options[i].keyword:
        if options[i].val is not None:
            found[options[i].keyword.decode()] = options[i].val.decode("utf-8", "surrogateescape")
        i += 1
    return found


# --- placeholders -----------------------------------------------------------------------------


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


_NUMBERED: dict[str, tuple[bytes, int]] = {}  # a statement's text -> ($n text, placeholder count)
_WORD = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_$")
_SPECIAL = "?'\"-/$"  # a placeholder, and what opens a literal, an identifier or a comment


def numbered(query: str) -> tuple[bytes, int]:
    """``query`` with its ``?`` placeholders numbered ``$1``, ``$2``…, as libpq sends it,
    and how many there are (kept per text: the broker's statements are constants)."""
    found = _NUMBERED.get(query)
    if found is None:
        pieces = placeholders(query)
        text = pieces[0] + "".join(f"${n}{piece}" for n, piece in enumerate(pieces[1:], 1))
        found = _NUMBERED[query] = (text.encode("utf-8"), len(pieces) - 1)
    return found


def placeholders(query: str) -> list[str]:
    """``query`` split at its placeholders: the text before the first ``?``, between each
    two, and after the last (one piece when there is none). A ``?`` is a placeholder
    wherever PostgreSQL would read it as a token: not inside a string literal (``'...'``,
    ``E'...'``, ``$tag$...$tag$``), a quoted identifier or a comment. PostgreSQL's own
    ``?`` operators (jsonb, geometry) cannot be written with parameters; their function
    forms can."""
    if "?" not in query:
        return [query]
    if not any(c in query for c in _SPECIAL[1:]):  # nothing that can hide a ``?``
        return query.split("?")
    pieces: list[str] = []
    start = i = 0
    while i < len(query):
        c = query[i]
        at, i = i, i + 1
        if c == "?":
            pieces.append(query[start:at])
            start = i
        elif c == "'":
            backslashes = at > 0 and query[at - 1] in "eE" and (at < 2 or query[at - 2] not in _WORD)
            i = _literal_end(query, at, backslashes)
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


# --- values going out ---------------------------------------------------------------------------
# Each value goes as text with the type its SQL literal would have had, so a statement reads
# the same as when its values were written into it: an int is integer, bigint or numeric by
# its size; a float double precision; a string, and NULL, of unknown type, resolved by where
# it stands (a column, a function's argument), as a quoted literal is.

_INT4, _INT8, _NUMERIC, _BOOL, _FLOAT8, _BYTEA, _INT8_ARRAY, _TEXT_ARRAY = 23, 20, 1700, 16, 701, 17, 1016, 1009


def _value(value: Any) -> tuple[int, bytes | None]:
    """(type oid, text) of one parameter; (0, None) is NULL."""
    if value is None:
        return 0, None
    if value is True or value is False:
        return _BOOL, b"t" if value else b"f"
    if isinstance(value, int):
        value = int(value)
        kind = _INT4 if -(2**31) <= value < 2**31 else _INT8 if -(2**63) <= value < 2**63 else _NUMERIC
        return kind, str(value).encode()
    if isinstance(value, str):
        return 0, _encoded(value)
    if isinstance(value, float):
        return _FLOAT8, repr(value).replace("inf", "Infinity").replace("nan", "NaN").encode()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _BYTEA, b"\\x" + bytes(value).hex().encode()
    if isinstance(value, (list, tuple)):
        return _array(value)
    if type(value).__name__ == "Decimal":
        return _NUMERIC, str(value).encode()
    raise ProgrammingError(f"cannot send a value of type {type(value).__name__} to PostgreSQL")


def _encoded(text: str) -> bytes:
    if "\0" in text:
        raise DataError("PostgreSQL text fields cannot contain NUL (0x00) bytes")
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise DataError("the text is not valid Unicode (it holds a lone surrogate)") from None


def _array(items: Any) -> tuple[int, bytes]:
    """A one-dimensional array literal: bigint[] when every item is an int, else text[]."""
    if all(isinstance(item, int) and not isinstance(item, bool) for item in items):
        return _INT8_ARRAY, ("{" + ",".join(str(int(item)) for item in items) + "}").encode()
    quoted = []
    for item in items:
        if item is None:
            quoted.append(b"NULL")
        else:
            text = _encoded(str(item))
            quoted.append(b'"' + text.replace(b"\\", b"\\\\").replace(b'"', b'\\"') + b'"')
    return _TEXT_ARRAY, b"{" + b",".join(quoted) + b"}"


# --- values coming back -------------------------------------------------------------------------

_INT_OIDS = frozenset((20, 21, 23, 26, 28, 5069))
_FLOAT_OIDS = frozenset((700, 701))


def _numeric(text: str):
    from decimal import Decimal

    return Decimal(text)


def _bytea(text: str) -> bytes:
    if text.startswith("\\x"):
        return bytes.fromhex(text[2:])
    return text.encode("latin-1")  # the escape format: not what a server of this century sends


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


class Result:
    """One statement's answer: ``rows`` (tuples), ``rowcount`` and ``columns`` (names)."""

    __slots__ = ("columns", "rowcount", "rows")

    def __init__(self, rows: list[tuple], rowcount: int, columns: list[str] | None) -> None:
        self.rows, self.rowcount, self.columns = rows, rowcount, columns


class Cursor:
    """The answer of one call, as the store reads it: the last statement's rows."""

    __slots__ = ("_result", "_row")

    def __init__(self, result: Result) -> None:
        self._result = result
        self._row = 0

    @property
    def rowcount(self) -> int:
        return self._result.rowcount

    @property
    def columns(self) -> list[str] | None:
        return self._result.columns

    def fetchone(self):
        rows = self._result.rows
        if self._row >= len(rows):
            return None
        self._row += 1
        return rows[self._row - 1]

    def fetchall(self) -> list[tuple]:
        rows = self._result.rows[self._row :]
        self._row = len(self._result.rows)
        return rows

    def __iter__(self):
        return iter(self.fetchall())

    def close(self) -> None:
        self._row = len(self._result.rows)


# --- the connection -------------------------------------------------------------------------


class Info:
    """Where the connection went and its state (psycopg's ``conn.info`` names)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    @property
    def transaction_status(self) -> str:
        handle = self._conn.handle
        return _TRANSACTION[lib().PQtransactionStatus(handle)] if handle else UNKNOWN

    def parameter_status(self, name: str) -> str | None:
        handle = self._conn.handle
        value = lib().PQparameterStatus(handle, name.encode()) if handle else None
        return None if value is None else value.decode("utf-8", "replace")

    @property
    def host(self) -> str:
        return _text(lib().PQhost(self._conn.handle))

    @property
    def port(self) -> int:
        text = _text(lib().PQport(self._conn.handle))
        return int(text) if text.isdigit() else 5432

    @property
    def dbname(self) -> str:
        return _text(lib().PQdb(self._conn.handle))

    @property
    def backend_pid(self) -> int:
        return lib().PQbackendPID(self._conn.handle)

    def options(self) -> dict[str, str]:
        """The options the connection was made with, every source applied (the URL, the
        ``PG*`` variables, the service file, the defaults), as libpq reports them."""
        pq = lib()
        options = pq.PQconninfo(self._conn.handle)
        if not options:
            return {}
        try:
            return _options(options)
        finally:
            pq.PQconninfoFree(options)


class Connection:
    """One session on a server, in autocommit unless a statement opens a transaction
    (``BEGIN``). Every wait for the server lasts at most ``read_timeout`` seconds; past
    it, or on anything cafleet never asks for, the connection is closed with one line."""

    def __init__(self, handle: int, read_timeout: float) -> None:
        self.handle: int | None = handle
        self.read_timeout = read_timeout
        self.info = Info(self)
        self.trace: Any = None  # a callable given each round trip's statements as written
        self._notifies: list[Notify] = []

    @classmethod
    def connect(cls, location: str, read_timeout: float = 30.0, **defaults: Any) -> Connection:
        """A session on the server ``location`` (a URL or a keyword/value string) names.
        ``defaults`` (libpq's keywords) apply where the location and the ``PG*``
        variables say nothing (libpq's own reading of the environment, ``PQconndefaults``,
        tells which a variable sets)."""
        pq = lib()
        if defaults:
            defaults = _unset(pq, defaults)
        if "replication" in location.lower():
            replication = parse(location).get("replication", "")
            if replication not in ("", "0", "false", "off", "no"):
                raise NotSupportedError(
                    f"the database URL asks for a replication connection (replication={replication}), "
                    "which cannot run cafleet's statements; remove replication from it."
                )
        keys = [*defaults, "dbname"]
        values = [str(value) for value in defaults.values()] + [location]
        keywords = (ctypes.c_char_p * (len(keys) + 1))(*[k.encode() for k in keys], None)
        settings = (ctypes.c_char_p * (len(values) + 1))(*[v.encode("utf-8", "surrogateescape") for v in values], None)
        handle = pq.PQconnectdbParams(keywords, settings, 1)
        if not handle:
            raise OperationalError("out of memory while connecting")
        conn = cls(handle, read_timeout)
        pq.PQsetNoticeProcessor(handle, ctypes.cast(_QUIET, ctypes.c_void_p), None)
        if pq.PQstatus(handle) != _CONNECTION_OK:
            message = _one_line(_text(pq.PQerrorMessage(handle)))
            conn.close()
            raise OperationalError(message or "the connection failed")
        try:
            conn._check_encoding("server_encoding")
            conn._check_encoding("client_encoding")
            if pq.PQsetnonblocking(handle, 1) != 0:
                raise OperationalError(_text(pq.PQerrorMessage(handle)).strip())
        except Error:
            conn.close()
            raise
        return conn

    def _check_encoding(self, name: str) -> None:
        value = self.info.parameter_status(name)
        if value != "UTF8":
            where = "database" if name == "server_encoding" else "connection"
            fix = "use a database created with ENCODING 'UTF8'" if where == "database" else "remove client_encoding"
            raise NotSupportedError(
                f"the {where}'s {name} is {value or 'not reported'}, and cafleet reads and writes UTF8 only; "
                f"{fix} (from the URL, PGCLIENTENCODING or the role's settings)."
            )

    # -- state --

    @property
    def closed(self) -> bool:
        return self.handle is None

    @property
    def broken(self) -> bool:
        return self.handle is None or lib().PQstatus(self.handle) != _CONNECTION_OK

    def fileno(self) -> int:
        if self.handle is None:
            raise OperationalError("the connection is closed")
        return lib().PQsocket(self.handle)

    def close(self) -> None:
        handle, self.handle = self.handle, None
        if handle:
            lib().PQfinish(handle)

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- statements --

    def execute(self, query: str, params: Any = ()) -> Cursor:
        """One statement, its ``?`` placeholders given ``params`` out of band."""
        return Cursor(self._run([(query, params)])[-1])

    def pipeline(self, statements: list[tuple[str, Any]]) -> Cursor:
        """Several statements in one round trip (libpq's pipeline mode, one sync: they
        form one implicit transaction unless they open their own); the cursor holds the
        last one's answer. The first statement that fails raises, and those after it did
        not run."""
        return Cursor(self._run(statements)[-1])

    def _run(self, statements: list[tuple[str, Any]]) -> list[Result]:
        pq = lib()
        handle = self._usable()
        if self.trace is not None:
            self.trace("; ".join(query for query, _ in statements))
        prepared = [_prepared(query, params or ()) for query, params in statements]  # before anything is sent
        piped = len(statements) > 1
        if piped and not pq.PQenterPipelineMode(handle):
            raise self._failed()
        for text, count, types, values in prepared:
            if not pq.PQsendQueryParams(handle, text, count, types, values, None, None, 0):
                raise self._abandon(_text(pq.PQerrorMessage(handle)).strip() or "libpq could not send the statement")
        if piped and not pq.PQpipelineSync(handle):
            raise self._failed()
        deadline = time.monotonic() + self.read_timeout
        self._flush(handle, deadline)
        results, error = self._collect(handle, len(statements), deadline)
        if self.broken:
            failed = self._failed()
            raise error or failed
        if piped:
            self._end_pipeline(handle, deadline)
        if error is not None:
            raise error
        try:
            self._check_encoding("client_encoding")  # a SET may have changed it: nothing more runs then
        except Error:
            self.close()
            raise
        return results

    def _collect(self, handle: int, statements: int, deadline: float) -> tuple[list[Result], Error | None]:
        """Each statement's answer, and the first failure among them (those after it were
        aborted); a state cafleet never asks for (a COPY) or an answer past
        :data:`MAX_RESULT_BYTES` closes the connection and raises."""
        pq = lib()
        results: list[Result] = []
        error: Error | None = None
        kept = 0
        for _ in range(statements):
            for result in self._results(handle, deadline):
                try:
                    status = pq.PQresultStatus(result)
                    kept += pq.PQresultMemorySize(result)
                    if kept > MAX_RESULT_BYTES:
                        raise self._abandon(
                            f"the server's answer is larger than {MAX_RESULT_BYTES // (1024 * 1024)} MiB; "
                            "cafleet stopped reading it and closed the connection"
                        )
                    if status in (_COMMAND_OK, _TUPLES_OK, _EMPTY_QUERY):
                        results.append(_result(pq, result, status))
                    elif status in (_FATAL_ERROR, _NONFATAL_ERROR, _BAD_RESPONSE):
                        failure = _server_error(pq, result)
                        if failure.sqlstate is None:  # libpq's own: the server broke the protocol
                            self.close()
                            raise failure
                        error = error or failure
                    elif status != _PIPELINE_ABORTED:
                        raise self._abandon(f"the server answered with a state cafleet never asks for ({status})")
                finally:
                    pq.PQclear(result)
        return results, error

    def _usable(self) -> int:
        handle = self.handle
        if handle is None:
            raise OperationalError("the connection is closed")
        if lib().PQstatus(handle) != _CONNECTION_OK:
            raise self._failed()
        return handle

    def _flush(self, handle: int, deadline: float) -> None:
        pq = lib()
        while True:
            pending = pq.PQflush(handle)
            if pending == 0:
                return
            if pending < 0:
                raise self._failed()
            if self._wait(select.POLLIN | select.POLLOUT, deadline) & select.POLLIN and not pq.PQconsumeInput(handle):
                raise self._failed()

    def _results(self, handle: int, deadline: float):
        """The results of the next statement, up to libpq's NULL that ends them."""
        pq = lib()
        while True:
            while pq.PQisBusy(handle):
                self._wait(select.POLLIN, deadline)
                if not pq.PQconsumeInput(handle):
                    raise self._failed()
            self._take_notifies(pq, handle)
            result = pq.PQgetResult(handle)
            if not result:
                return
            yield result

    def _end_pipeline(self, handle: int, deadline: float) -> None:
        """Read up to the sync's result and leave pipeline mode."""
        pq = lib()
        synced = False
        for _ in range(3):
            for result in self._results(handle, deadline):
                synced = synced or pq.PQresultStatus(result) == _PIPELINE_SYNC
                pq.PQclear(result)
                if synced:
                    break
            if synced and pq.PQexitPipelineMode(handle):
                return
        raise self._abandon("the server's answer to a pipeline did not end with its sync")

    def _wait(self, events: int, deadline: float) -> int:
        """Wait until the socket is ready for ``events``; closes the connection and
        raises once ``deadline`` has passed."""
        poller = select.poll()
        poller.register(lib().PQsocket(self.handle), events)
        remaining = deadline - time.monotonic()
        ready = poller.poll(max(0, int(remaining * 1000) + 1)) if remaining > 0 else []
        if not ready:
            raise self._abandon(f"the server sent no complete answer within {self.read_timeout:g} s")
        return ready[0][1]

    def _failed(self) -> Error:
        """libpq's own words for a failure of the connection (it is closed when broken)."""
        message = _text(lib().PQerrorMessage(self.handle)).strip() if self.handle else ""
        if self.broken:
            self.close()
        return OperationalError(message.splitlines()[0] if message else "the connection to the server was lost")

    def _abandon(self, message: str) -> OperationalError:
        self.close()
        return OperationalError(message)

    # -- notifications --

    def _take_notifies(self, pq: Any, handle: int) -> None:
        while True:
            notify = pq.PQnotifies(handle)
            if not notify:
                return
            item = notify.contents
            self._notifies.append(Notify(_text(item.relname), _text(item.extra), item.be_pid))
            pq.PQfreemem(notify)

    def notifies(self, timeout: float | None = None, stop_after: int | None = None) -> list[Notify]:
        """Notifications that came, waiting at most ``timeout`` seconds (None: for ever)
        for the first; at most ``stop_after`` of them."""
        pq = lib()
        handle = self._usable()
        if not self._notifies:
            deadline = None if timeout is None else time.monotonic() + timeout
            while True:
                if not pq.PQconsumeInput(handle):
                    raise self._failed()
                self._take_notifies(pq, handle)
                if self._notifies:
                    break
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return []
                poller = select.poll()
                poller.register(pq.PQsocket(handle), select.POLLIN)
                if not poller.poll(None if remaining is None else max(0, int(remaining * 1000) + 1)):
                    return []
        count = len(self._notifies) if stop_after is None else stop_after
        given, self._notifies = self._notifies[:count], self._notifies[count:]
        return given


def _prepared(query: str, params: Any) -> tuple[bytes, int, Any, Any]:
    """What ``PQsendQueryParams`` takes for one statement: its ``$n`` text, the number of
    parameters, their types and their values as text (NULL for None)."""
    if isinstance(params, dict):
        raise ProgrammingError("named parameters are not supported; write ? placeholders and pass a sequence")
    text, count = numbered(query)
    if count != len(params):
        which = "more" if count > len(params) else "fewer"
        raise ProgrammingError(f"the query has {which} placeholders than parameters ({count} against {len(params)})")
    types = (ctypes.c_uint * count)()
    values = (ctypes.c_char_p * count)()
    for i, value in enumerate(params):
        types[i], values[i] = _value(value)
    return text, count, types, values


def _result(pq: Any, result: int, status: int) -> Result:
    if status != _TUPLES_OK:
        count = pq.PQcmdTuples(result)
        return Result([], int(count) if count else -1, None)
    fields = pq.PQnfields(result)
    columns = [_text(pq.PQfname(result, i)) for i in range(fields)]
    converters = [_converter(pq.PQftype(result, i)) for i in range(fields)]
    getvalue, isnull = pq.PQgetvalue, pq.PQgetisnull
    rows = []
    try:
        for row in range(pq.PQntuples(result)):
            values: list[Any] = []
            for column, convert in enumerate(converters):
                if isnull(result, row, column):
                    values.append(None)
                    continue
                text = getvalue(result, row, column).decode("utf-8")
                values.append(text if convert is None else convert(text))
            rows.append(tuple(values))
    except (UnicodeDecodeError, ValueError) as exc:
        raise DataError(f"the server sent a value cafleet cannot read ({type(exc).__name__})") from None
    return Result(rows, len(rows), columns)


def _server_error(pq: Any, result: int) -> Error:
    state = _text(pq.PQresultErrorField(result, ord("C")))
    message = _text(pq.PQresultErrorField(result, ord("M"))) or _text(pq.PQresultErrorMessage(result)).strip()
    for code, label in ((ord("D"), "DETAIL"), (ord("H"), "HINT")):
        extra = _text(pq.PQresultErrorField(result, code))
        if extra:
            message += f"\n{label}:  {extra}"
    return _BY_CLASS.get(state[:2], DatabaseError)(message or "the statement failed", state or None)


def connect(location: str, **kwargs: Any) -> Connection:
    return Connection.connect(location, **kwargs)
