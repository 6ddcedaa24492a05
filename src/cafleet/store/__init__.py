"""The stores: the SQLite file (store/sqlite.py) and a PostgreSQL schema
(the package store/postgres/), both behind one interface (store/protocol.py); the schema declared once
(store/schema.py) and the format diagnosis that runs before any write.

What the layers above ask of a database location without knowing which engine it names
is in :mod:`cafleet.store.engines`, the one chooser; this module holds what every engine
shares (the one test of a location, :func:`is_postgres_url`; a read snapshot; the default
busy timeout; a keeper's file names; how a role is named) and imports none of them.
"""

from __future__ import annotations

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.store.protocol import Store


DEFAULT_BUSY_TIMEOUT = 5.0  # seconds a write waits for another writer (CAFLEET_BUSY_TIMEOUT's default)


def is_postgres_url(location: str) -> bool:
    """Whether a database location names a PostgreSQL server (else it is a SQLite file)."""
    return location.startswith(("postgresql://", "postgres://"))


def role_text(name: str | None) -> str:
    """A database role's name as a message shows it: as it is, or quoted when it would not
    read as one word (None, a rule's absent function owner, as ``None``)."""
    return name if name and name.isprintable() and " " not in name and '"' not in name else repr(name)


def keeper_base(folder: str, location_key: str, fleet_id: int) -> str:
    """``<folder>/keeper-<tag>-<fleet id>``, the start of a fleet keeper's file names (its
    log; on SQLite its lock and record too): ``<tag>`` is a hash of the database's location
    key (``store.location_key()``), so two databases sharing a folder never share a keeper."""
    import hashlib
    import os

    tag = hashlib.sha256(location_key.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return os.path.join(folder, f"keeper-{tag}-{fleet_id}")


class ReadSnapshot:
    """A read transaction of either store, begun by its ``BEGIN_READ`` statement."""

    __slots__ = ("store",)

    def __init__(self, store: Store) -> None:
        self.store = store

    def __enter__(self):
        self.store.execute(self.store.BEGIN_READ)
        return self.store

    def __exit__(self, exc_type, exc, tb) -> None:
        self.store.end_transaction()
