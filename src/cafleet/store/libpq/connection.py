"""One session on a PostgreSQL server through libpq: :class:`Connection` (statements, a
pipeline, notifications, every wait bounded), what it answers (:class:`Result`,
:class:`Cursor`) and where it went (:class:`Info`)."""

from __future__ import annotations

import ctypes
import select
import time

from cafleet.store.libpq.binding import QUIET, decoded, lib, one_line, parse, read_options, unset_defaults
from cafleet.store.libpq.errors import (
    DataError,
    Error,
    NotSupportedError,
    OperationalError,
    for_sqlstate,
)
from cafleet.store.libpq.statements import converter, query_params

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

IDLE, ACTIVE, INTRANS, INERROR, UNKNOWN = "I", "A", "T", "E", "?"  # PQtransactionStatus, by its number
_TRANSACTION = (IDLE, ACTIVE, INTRANS, INERROR, UNKNOWN)
MAX_RESULT_BYTES = 256 * 1024 * 1024  # what one call keeps of a server's answer: 16 MiB bodies, many of them

# PQresultStatus
_EMPTY_QUERY, _COMMAND_OK, _TUPLES_OK, _COPY_OUT, _COPY_IN, _BAD_RESPONSE = 0, 1, 2, 3, 4, 5
_NONFATAL_ERROR, _FATAL_ERROR, _COPY_BOTH, _SINGLE_TUPLE, _PIPELINE_SYNC, _PIPELINE_ABORTED = 6, 7, 8, 9, 10, 11
_CONNECTION_OK = 0


class Notify:
    """One notification: ``channel``, ``payload`` and the sending backend's ``pid``."""

    __slots__ = ("channel", "payload", "pid")

    def __init__(self, channel: str, payload: str, pid: int) -> None:
        self.channel, self.payload, self.pid = channel, payload, pid

    def __repr__(self) -> str:
        return f"Notify({self.channel!r}, {self.payload!r}, {self.pid})"


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
        return decoded(lib().PQhost(self._conn.handle))

    @property
    def port(self) -> int:
        text = decoded(lib().PQport(self._conn.handle))
        return int(text) if text.isdigit() else 5432

    @property
    def dbname(self) -> str:
        return decoded(lib().PQdb(self._conn.handle))

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
            return read_options(options)
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
            defaults = unset_defaults(pq, defaults)
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
        pq.PQsetNoticeProcessor(handle, ctypes.cast(QUIET, ctypes.c_void_p), None)
        if pq.PQstatus(handle) != _CONNECTION_OK:
            message = one_line(decoded(pq.PQerrorMessage(handle)))
            conn.close()
            raise OperationalError(message or "the connection failed")
        try:
            conn._check_encoding("server_encoding")
            conn._check_encoding("client_encoding")
            if pq.PQsetnonblocking(handle, 1) != 0:
                raise OperationalError(decoded(pq.PQerrorMessage(handle)).strip())
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
        prepared = [query_params(query, params or ()) for query, params in statements]  # before anything is sent
        piped = len(statements) > 1
        if piped and not pq.PQenterPipelineMode(handle):
            raise self._failed()
        for text, count, types, values in prepared:
            if not pq.PQsendQueryParams(handle, text, count, types, values, None, None, 0):
                raise self._abandon(decoded(pq.PQerrorMessage(handle)).strip() or "libpq could not send the statement")
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
        message = decoded(lib().PQerrorMessage(self.handle)).strip() if self.handle else ""
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
            self._notifies.append(Notify(decoded(item.relname), decoded(item.extra), item.be_pid))
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


def _result(pq: Any, result: int, status: int) -> Result:
    if status != _TUPLES_OK:
        count = pq.PQcmdTuples(result)
        return Result([], int(count) if count else -1, None)
    fields = pq.PQnfields(result)
    columns = [decoded(pq.PQfname(result, i)) for i in range(fields)]
    converters = [converter(pq.PQftype(result, i)) for i in range(fields)]
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
    state = decoded(pq.PQresultErrorField(result, ord("C")))
    message = decoded(pq.PQresultErrorField(result, ord("M"))) or decoded(pq.PQresultErrorMessage(result)).strip()
    for code, label in ((ord("D"), "DETAIL"), (ord("H"), "HINT")):
        extra = decoded(pq.PQresultErrorField(result, code))
        if extra:
            message += f"\n{label}:  {extra}"
    return for_sqlstate(state)(message or "the statement failed", state or None)


def connect(location: str, **kwargs: Any) -> Connection:
    return Connection.connect(location, **kwargs)
