"""The stores: the SQLite file (store/connection.py) and a PostgreSQL schema
(store/postgres.py), both behind one interface (store/protocol.py); the schema declared once
(store/schema.py) and the format diagnosis that runs before any write."""

from __future__ import annotations

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.store.protocol import Store


def is_postgres_url(location: str) -> bool:
    """Whether a database location names a PostgreSQL server (else it is a SQLite file)."""
    return location.startswith(("postgresql://", "postgres://"))


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
