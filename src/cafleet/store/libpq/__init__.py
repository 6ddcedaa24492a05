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

The package's modules: :mod:`.binding` (libpq loaded through ``ctypes``, its functions
declared; :func:`parse`), :mod:`.statements` (placeholders numbered, values out and back),
:mod:`.connection` (:class:`Connection` and its answers) and :mod:`.errors` (the error
classes by SQLSTATE). This module is their face: the names the stores use.
"""

from __future__ import annotations

from cafleet.store.libpq.binding import MISSING, lib, parse
from cafleet.store.libpq.connection import (
    ACTIVE,
    IDLE,
    INERROR,
    INTRANS,
    MAX_RESULT_BYTES,
    UNKNOWN,
    Connection,
    Cursor,
    Info,
    Notify,
    Result,
    connect,
)
from cafleet.store.libpq.errors import (
    DatabaseError,
    DataError,
    Error,
    IntegrityError,
    InterfaceError,
    InternalError,
    Missing,
    NotSupportedError,
    OperationalError,
    ProgrammingError,
)
from cafleet.store.libpq.statements import numbered, placeholders, quote_ident

__all__ = [
    "ACTIVE",
    "IDLE",
    "INERROR",
    "INTRANS",
    "MAX_RESULT_BYTES",
    "MISSING",
    "UNKNOWN",
    "Connection",
    "Cursor",
    "DataError",
    "DatabaseError",
    "Error",
    "Info",
    "IntegrityError",
    "InterfaceError",
    "InternalError",
    "Missing",
    "NotSupportedError",
    "Notify",
    "OperationalError",
    "ProgrammingError",
    "Result",
    "connect",
    "lib",
    "numbered",
    "parse",
    "placeholders",
    "quote_ident",
]
