"""The PostgreSQL store: ``CAFLEET_DATABASE_URL=postgresql://...`` (or ``postgres://``).

Imported only when such a URL is configured (``tests/test_hot_imports.py`` proves the
SQLite path never loads it). It talks to the server through libpq, the client library every
PostgreSQL program uses, bound thinly by :mod:`cafleet.store.libpq` (docs/decisions.md
"PostgreSQL client"): the URL, the ``PG*`` environment variables, the passfile, the service
file, TLS and the login are libpq's own. cafleet's tables live in a schema of their own
(``CAFLEET_PG_SCHEMA``, default ``cafleet``), which is the connection's ``search_path``;
the broker's queries name tables without a schema.

:class:`PgStore` implements the one store interface (:class:`cafleet.store.protocol.Store`,
as the SQLite :class:`~cafleet.store.sqlite.SqliteStore` does). Every statement is sent as
the broker wrote it, in the SQL both engines read alike, with sqlite3's ``?`` placeholders,
whose values go to the server apart from the text (:mod:`cafleet.store.libpq`); where the engines differ, the
difference is one of this class's methods (docs/storage.md "Differences, and where they
live"). A write transaction takes one transaction-scoped
advisory lock first, so writers run one at a time as they do on SQLite (``BEGIN
IMMEDIATE``), and every rule the broker checks inside a write holds under READ COMMITTED
exactly as it does there. Each write transaction ends with ``NOTIFY`` on the schema's
channel, without a payload: a hint that something changed, which a waiting process answers
by reading again (see :class:`NotifyWaiter`).

The package's modules: :mod:`.session` (connecting through libpq, the advisory-lock keys,
a failure as one line), :mod:`.catalogue` (the DDL and what the catalogue must show of it,
the diagnosis and its fast path, the initialisation), :mod:`.store` (:class:`PgStore`,
its write transaction, its open), :mod:`.waiter` (LISTEN/NOTIFY) and :mod:`.locks` (the
lock space of advisory locks). This module imports none of them until a name of theirs
is asked for, so each command loads only what it uses.
"""

from __future__ import annotations

_MODULES = frozenset(("catalogue", "locks", "session", "store", "waiter"))


def __getattr__(name: str) -> object:
    """A name of one of the package's modules (``postgres.open_store``, for a test or a
    bench), looked up in them in turn; cafleet's own code imports the module it needs."""
    if name in _MODULES:  # a module not imported yet: the import system loads it
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from cafleet.store.postgres import catalogue, locks, session, store, waiter

    for module in (store, catalogue, session, locks, waiter):
        try:
            return getattr(module, name)
        except AttributeError:
            continue
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
