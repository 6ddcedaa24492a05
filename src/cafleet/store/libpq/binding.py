"""libpq itself, loaded through ``ctypes`` once per process and its functions declared,
and what the binding reads through them without a connection: a connection string's
options (:func:`parse`) and libpq's defaults."""

from __future__ import annotations

import ctypes

from cafleet.store.libpq.errors import Missing, ProgrammingError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

MISSING = (
    "a postgresql:// database needs libpq (libpq.so.5), which is not installed: "
    "install it (Debian: apt-get install libpq5) and try again."
)


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
QUIET = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p)(lambda _arg, _message: None)
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


def decoded(raw: bytes | None) -> str:
    return raw.decode("utf-8", "replace") if raw else ""


def one_line(message: str) -> str:
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
        raise ProgrammingError(decoded(message).strip() or "libpq cannot read the connection string")
    try:
        return read_options(options)
    finally:
        pq.PQconninfoFree(options)


def unset_defaults(pq: Any, defaults: dict[str, Any]) -> dict[str, Any]:
    """Those of ``defaults`` that no ``PG*`` variable (nor a compiled default) sets."""
    options = pq.PQconndefaults()
    if not options:
        return defaults
    try:
        known = read_options(options)
    finally:
        pq.PQconninfoFree(options)
    return {key: value for key, value in defaults.items() if not known.get(key)}


def read_options(options: Any) -> dict[str, str]:
    found: dict[str, str] = {}
    i = 0
    while options[i].keyword:
        if options[i].val is not None:
            found[options[i].keyword.decode()] = options[i].val.decode("utf-8", "surrogateescape")
        i += 1
    return found
