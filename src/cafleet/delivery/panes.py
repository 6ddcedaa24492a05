"""Placement mutations that touch panes, each under the pane-input lock (§4.6):
fleet deletion closing member panes, member deletion, and the pane-id patch at creation.

The registry change and the pane kill happen while the lock is held, so a concurrent
drain that was waiting for the lock re-checks and finds the member gone instead of
typing into a pane that is being closed.
"""

from __future__ import annotations

from contextlib import ExitStack

from cafleet import config
from cafleet.broker import fleets, members
from cafleet.errors import CafleetError

PANE_CLOSED = "closed"
PANE_ALREADY_GONE = "already gone"
PANE_NONE = "none"  # pending placement: no pane was ever recorded


def _lock_timeout(environ) -> float:
    from cafleet.delivery.drain import DEFAULT_LOCK_TIMEOUT

    return config.positive_float_env(environ, "CAFLEET_LOCK_TIMEOUT", DEFAULT_LOCK_TIMEOUT)


def _kill(placement: dict) -> str:
    from cafleet.mux.detect import multiplexer_for_placement

    try:
        mux = multiplexer_for_placement(placement["backend"], placement["session"])
        return PANE_CLOSED if mux.kill(placement["pane_id"]) else PANE_ALREADY_GONE
    except CafleetError as error:
        return f"not closed ({error})"


def delete_fleet(store, environ, db_path: str, fleet_id: int):
    """Soft-delete the fleet and close its member panes (never the Director's), best effort."""
    fleets.get_fleet(store, fleet_id)
    placements = fleets.fleet_placements(store, fleet_id)
    concrete = [p for p in placements if p["pane_id"]]
    closed: list[tuple[int, str]] = []
    with ExitStack() as held:
        if concrete:
            from cafleet.delivery.lock import pane_lock

            lock_dir, timeout = config.lock_dir(db_path), _lock_timeout(environ)
            keys = sorted({(p["backend"], p["session"], p["pane_id"]) for p in concrete})
            for backend, session, pane_id in keys:  # sorted: no deadlock with other multi-lock holders
                try:
                    held.enter_context(pane_lock(lock_dir, backend, session, pane_id, timeout))
                except CafleetError:
                    pass  # best effort: the registry change must not depend on a busy pane
        result = fleets.delete_fleet(store, fleet_id)
        for placement in placements:
            closed.append((placement["member_id"], _kill(placement) if placement["pane_id"] else PANE_NONE))
    return result, closed


def delete_member(store, environ, db_path: str, member_id: int) -> str:
    """§5.2: under the pane lock, kill the pane (gone is fine), then deregister."""
    member = members.check_deletable(store, member_id)
    placement = member["placement"]
    if placement is None or placement["pane_id"] is None:
        members.deregister_member(store, member_id)
        return PANE_NONE
    from cafleet.delivery.lock import pane_lock

    with pane_lock(config.lock_dir(db_path), placement["backend"], placement["session"], placement["pane_id"],
                   _lock_timeout(environ)):
        status = _kill(placement)
        if status.startswith("not closed"):
            raise CafleetError(f"member {member_id} was not deleted: its pane {placement['pane_id']} {status}.")
        members.deregister_member(store, member_id)
    return status


def record_pane(store, environ, db_path: str, member_id: int, placement: dict, pane_id: str) -> None:
    """The pane-id patch at member creation, under the new pane's lock."""
    from cafleet.delivery.lock import pane_lock

    with pane_lock(config.lock_dir(db_path), placement["backend"], placement["session"], pane_id,
                   _lock_timeout(environ)):
        members.set_pane_id(store, member_id, pane_id)
