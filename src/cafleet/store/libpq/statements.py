"""A statement as libpq sends it and its values as they come back: sqlite3's ``?``
placeholders numbered ``$1``, ``$2``…, each parameter as text with the type its SQL literal
would have had, and each column's text turned back into a value by its type."""

from __future__ import annotations

import ctypes

from cafleet.store.libpq.errors import DataError, ProgrammingError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


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


def converter(oid: int):
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


def query_params(query: str, params: Any) -> tuple[bytes, int, Any, Any]:
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
