"""Where SQLite's SQL and PostgreSQL's differ, for the queries cafleet writes once.

The broker writes each query once, in the SQL both engines agree on, with ``?``
placeholders. The PostgreSQL store passes every statement through :func:`postgres` (once
per distinct text; the result is cached), which changes only what PostgreSQL spells
differently:

- ``?`` placeholders become ``%s`` and a literal ``%`` becomes ``%%`` (pgwire's
  format), outside string literals only;
- ``a IS NOT b`` between two values becomes ``a IS DISTINCT FROM b`` (SQLite's
  null-safe comparison; ``IS NOT NULL`` is left alone);
- ``CROSS JOIN t x ON ...`` (in SQLite a join whose order the planner keeps) becomes
  ``JOIN t x ON ...`` (PostgreSQL allows no ON after CROSS JOIN);
- a unary ``+`` before a column (SQLite's way to keep an index out of a term) is
  dropped.

The other differences are methods of each store, not text: a new row's id
(``Store.insert``: ``lastrowid`` against ``RETURNING``), the write lock (``BEGIN
IMMEDIATE`` with the writers' queue against a transaction-scoped advisory lock), and
waiting for another process's commit (``PRAGMA data_version`` against LISTEN/NOTIFY).
Upserts are written ``INSERT ... ON CONFLICT (...) DO UPDATE SET x = excluded.x``, which
both engines read alike. ``PRAGMA`` is never sent to PostgreSQL: the statements that use
it live in the SQLite store only.
"""

from __future__ import annotations

import re

_CROSS_JOIN_ON = re.compile(r"\bCROSS JOIN (\w+ \w+) ON\b")
_IS_NOT_VALUE = re.compile(r"\bIS NOT (?!NULL\b|DISTINCT\b|TRUE\b|FALSE\b)")
_UNARY_PLUS = re.compile(r"(?<=[(\s])\+(?=[A-Za-z_])")

_CACHE: dict[tuple[str, bool], str] = {}


def postgres(sql: str, with_params: bool) -> str:
    """``sql`` as PostgreSQL reads it; ``with_params``: parameters are passed (so ``?``
    and ``%`` are rewritten for pgwire, whose placeholders are psycopg's)."""
    key = (sql, with_params)
    text = _CACHE.get(key)
    if text is None:
        text = _CACHE[key] = _translate(sql, with_params)
    return text


def _translate(sql: str, with_params: bool) -> str:
    parts = sql.split("'")  # even indexes are outside string literals ('' stays balanced)
    for i in range(0, len(parts), 2):
        part = parts[i]
        part = _CROSS_JOIN_ON.sub(r"JOIN \1 ON", part)
        part = _IS_NOT_VALUE.sub("IS DISTINCT FROM ", part)
        part = _UNARY_PLUS.sub("", part)
        if with_params:
            part = part.replace("%", "%%").replace("?", "%s")
        parts[i] = part
    if with_params:
        for i in range(1, len(parts), 2):
            parts[i] = parts[i].replace("%", "%%")
    return "'".join(parts)
