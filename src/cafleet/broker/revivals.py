"""The keeper's revivals (docs/delivery.md, "The keeper revives a member"): which fleets opted
in (``fleet create --revive``: the auxiliary table ``cafleet_aux_fleet_revive``, with how
many revivals of one member an hour it allows) and each revival tried (the auxiliary table
``cafleet_aux_revivals``: who tried it, when, and how it ended). Persistence only: the
decisions are :mod:`cafleet.delivery.supervision.revival`.

A row's ``actor`` is ``keeper`` (the keeper started the member again, or tried to),
``gave_up`` (the keeper reached the fleet's limit and stopped reviving the member) or
``director`` (``member revive``: the Director brought it back by hand, which starts the
count again). Rows are kept: they are the member's history. Reads work on a database
without the tables (no fleet opted in, nothing tried).
"""

from __future__ import annotations

from cafleet import clock
from cafleet.broker import records

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.store.protocol import Store

FLEET_TABLE = "cafleet_aux_fleet_revive"
TABLE = "cafleet_aux_revivals"
MEMBER_INDEX = "idx_cafleet_aux_revivals_member"
KEEPER, GAVE_UP, DIRECTOR = "keeper", "gave_up", "director"
DEFAULT_PER_HOUR = 3  # `fleet create --revive`


def set_fleet(store: Store, fleet_id: int, per_hour: int) -> None:
    """Let the keeper revive ``fleet_id``'s members, at most ``per_hour`` times each an hour
    (0: not at all)."""
    store.create_auxiliary([FLEET_TABLE])
    with store.write():
        store.execute(
            f"INSERT INTO {FLEET_TABLE} (fleet_id, per_hour) VALUES (?, ?) "
            "ON CONFLICT (fleet_id) DO UPDATE SET per_hour = excluded.per_hour",
            (fleet_id, per_hour),
        )


def per_hour(store: Store, fleet_id: int) -> int | None:
    """How many revivals of one member an hour the fleet allows its keeper; None: it opted out."""
    if not records.has_table(store, FLEET_TABLE):
        return None
    row = store.execute(f"SELECT per_hour FROM {FLEET_TABLE} WHERE fleet_id = ?", (fleet_id,)).fetchone()
    return None if row is None or row[0] < 1 else int(row[0])


def record(store: Store, fleet_id: int, member_id: int, actor: str, outcome: str) -> None:
    """One revival tried (or given up) for ``member_id``, now."""
    store.create_auxiliary([TABLE, MEMBER_INDEX])
    with store.write():
        store.execute(
            f"INSERT INTO {TABLE} (fleet_id, member_id, at, actor, outcome) VALUES (?, ?, ?, ?, ?)",
            (fleet_id, member_id, clock.now(), actor, outcome),
        )


def since_director(store: Store, member_id: int) -> list[tuple[float, str]]:
    """``(epoch seconds, actor)`` of the member's rows after its last ``director`` one,
    oldest first: what the keeper counts."""
    if not records.has_table(store, TABLE):
        return []
    rows = store.execute(
        f"SELECT at, actor FROM {TABLE} WHERE member_id = ? AND revival_id > COALESCE("
        f"(SELECT MAX(revival_id) FROM {TABLE} WHERE member_id = ? AND actor = ?), 0) ORDER BY revival_id",
        (member_id, member_id, DIRECTOR),
    ).fetchall()
    return [(clock.epoch_or_none(row[0]) or 0.0, row[1]) for row in rows]
