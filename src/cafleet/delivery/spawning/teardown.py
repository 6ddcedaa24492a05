"""Members' panes closed with their members: fleet deletion closing its member panes (never
the Director's) and member deletion, each pane killed under its pane-input lock, then the
deregistered members' worktrees released (docs/delivery.md).

Every pane is reached through :func:`~cafleet.delivery.keystrokes.placement.reach`, which
binds the placement's recorded identity to the multiplexer client: a pane whose id now
names another pane (its server restarted) is *stale*, and it is not closed.

The ``hooks`` calls (the command's, passed in) are the test seam's pause points (:mod:`cafleet.faults`).

The registry change and the pane kill happen while the lock is held, so a concurrent
drain that was waiting for the lock re-checks and finds the member gone instead of
typing into a pane that is being closed.
"""

from __future__ import annotations

import enum
from contextlib import ExitStack
from dataclasses import dataclass

from cafleet import config
from cafleet.broker import fleets, members
from cafleet.delivery.keystrokes.placement import reach
from cafleet.errors import CafleetError, clause
from cafleet.faults import NO_HOOKS

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from cafleet.broker.records import MemberDetail, MemberPlacement
    from cafleet.faults import Hooks
    from cafleet.store.protocol import Store


class PaneFate(enum.Enum):
    """What became of a member's pane when the member or its fleet was deleted."""

    CLOSED = "closed"
    ALREADY_GONE = "already gone"
    NONE = "none"  # pending placement: no pane was ever recorded
    STALE = "stale"  # the id names a pane cafleet did not create; left open
    DAMAGED = "damaged"  # a stored value of the placement does not match its encoding; left open
    NOT_CLOSED = "not closed"  # the multiplexer failed, or someone holds the pane's input lock


@dataclass(frozen=True)
class PaneOutcome:
    """A pane's fate at deletion and, when it was left open, why (a clause); rendered by
    :meth:`text` at the edge (``pane_status`` in ``member delete`` and ``fleet delete``)."""

    fate: PaneFate
    reason: str | None = None

    @property
    def left_open(self) -> bool:
        """Whether a pane may still be open (its agent may still write)."""
        return self.fate not in (PaneFate.CLOSED, PaneFate.ALREADY_GONE, PaneFate.NONE)

    def text(self) -> str:
        if self.fate in (PaneFate.STALE, PaneFate.DAMAGED):
            return f"{self.fate.value}, left open ({self.reason})"
        if self.fate is PaneFate.NOT_CLOSED:
            return f"not closed ({self.reason})"
        return self.fate.value


CLOSED = PaneOutcome(PaneFate.CLOSED)
ALREADY_GONE = PaneOutcome(PaneFate.ALREADY_GONE)
NO_PANE = PaneOutcome(PaneFate.NONE)


def _kill(placement: Mapping[str, Any]) -> PaneOutcome:
    from cafleet.errors import DamagedPlacement, PaneStale

    try:
        return CLOSED if reach(placement).kill(placement["pane_id"]) else ALREADY_GONE
    except PaneStale as error:
        return PaneOutcome(PaneFate.STALE, clause(error))
    except DamagedPlacement as error:
        return PaneOutcome(PaneFate.DAMAGED, clause(error))
    except CafleetError as error:
        return PaneOutcome(PaneFate.NOT_CLOSED, str(error))


def delete_fleet(
    store: Store, settings: config.Settings, fleet_id: int, *, discard_worktrees: bool = False, hooks: Hooks = NO_HOOKS
):
    """Soft-delete the fleet and close its member panes (never the Director's), each under
    its pane-input lock.

    The locks of the panes listed beforehand are taken first (in key order); a pane whose
    lock cannot be had within the lock timeout is left alone and reported, since someone
    is typing into it. The panes actually closed are those whose placements the delete
    removed, read in its own transaction: a member created after the listing is closed
    too (under its own lock, taken afterwards), so it leaves no orphan pane.
    """
    from cafleet.errors import LockTimeout

    fleets.get_fleet(store, fleet_id)
    listed = [p for p in fleets.fleet_placements(store, fleet_id) if p["pane_id"]]
    locks, timeout = store.locks, settings.lock_timeout
    closed: dict[int, PaneOutcome] = {}
    removed: list[MemberPlacement] = []
    late: list[MemberPlacement] = []
    with ExitStack() as held:
        locked, busy = set(), set()
        if listed:
            from cafleet.delivery.keystrokes.lock import pane_lock

            for key in sorted({_key(p) for p in listed}):  # sorted: no deadlock with other multi-lock holders
                try:
                    held.enter_context(pane_lock(locks, *key, timeout, hooks))
                    locked.add(key)
                except LockTimeout:
                    busy.add(key)
        result = fleets.delete_fleet(store, fleet_id, closing=removed)
        for placement in removed:
            key = _key(placement)
            if not placement["pane_id"]:
                closed[placement["member_id"]] = NO_PANE
            elif key in busy:
                closed[placement["member_id"]] = _busy(placement)
            elif key in locked:
                closed[placement["member_id"]] = _kill(placement)
            else:
                late.append(placement)
    for placement in late:  # registered after the listing: its own lock, alone, so no lock-order issue
        from cafleet.delivery.keystrokes.lock import placement_lock

        try:
            with placement_lock(locks, placement, timeout, hooks):
                closed[placement["member_id"]] = _kill(placement)
        except LockTimeout:
            closed[placement["member_id"]] = _busy(placement)
    kept = _release_fleet(store, settings.environ, fleet_id, closed, discard_worktrees)
    return result, sorted(closed.items()), kept


def _release_fleet(store: Store, environ, fleet_id: int, closed: dict, discard: bool) -> list[tuple[int, dict]]:
    """The worktrees of the fleet's deregistered members whose panes are closed (or they
    never had one): each removed when nothing would be lost, kept otherwise. A member
    whose pane could not be closed keeps its worktree (its agent may still write)."""
    from cafleet.broker import worktrees as worktree_records

    out = []
    for row in worktree_records.in_fleet(store, fleet_id):
        if row["status"] == worktree_records.REMOVED or row["member_status"] == "active":
            continue
        if closed.get(row["member_id"], ALREADY_GONE).left_open:
            w = worktree_records
            w.set_status(store, row["member_id"], w.KEPT)
            out.append(
                (
                    row["member_id"],
                    {
                        "path": row["path"],
                        "branch": row["branch"],
                        "status": w.KEPT,
                        "lost": ["its pane is still open"],
                    },
                )
            )
            continue
        result = _release(store, environ, row["member_id"], discard)
        if result is not None:
            out.append((row["member_id"], result))
    return out


def _key(placement: Mapping[str, Any]) -> tuple[str, str, str]:
    return placement["backend"], placement["session"], placement["pane_id"]


def _busy(placement: Mapping[str, Any]) -> PaneOutcome:
    return PaneOutcome(
        PaneFate.NOT_CLOSED,
        f"its pane-input lock is held by another cafleet process; "
        f"close pane {placement['pane_id']} by hand when it is free",
    )


def delete_member(
    store: Store, settings: config.Settings, member_id: int, *, discard_worktree: bool = False, hooks: Hooks = NO_HOOKS
):
    """Member deletion: under the pane lock, kill the pane (gone is fine), then deregister;
    then its worktree, if it has one, is removed when nothing would be lost (or with
    ``discard_worktree``) and kept otherwise. ``(pane status, worktree result or None)``.
    A member already deleted whose worktree was kept gets only that second step."""
    from cafleet.broker import worktrees as worktree_records
    from cafleet.errors import Conflict

    try:
        member = members.check_deletable(store, member_id)
    except Conflict:
        row = worktree_records.get(store, member_id)
        record = members.get_member(store, member_id)
        if record["kind"] == "director" or row is None or row["status"] == worktree_records.REMOVED:
            raise
        return ALREADY_GONE, _release(store, settings.environ, member_id, discard_worktree)
    return _delete_member(store, settings, member, member_id, hooks), _release(
        store, settings.environ, member_id, discard_worktree
    )


def _release(store: Store, environ, member_id: int, discard: bool) -> dict | None:
    from cafleet.broker import records, worktrees as worktree_records

    if not records.has_table(store, worktree_records.TABLE):
        return None
    from cafleet.delivery import worktrees

    return worktrees.release(store, environ, member_id, discard=discard)


def _delete_member(
    store: Store, settings: config.Settings, member: MemberDetail, member_id: int, hooks: Hooks
) -> PaneOutcome:
    placement = member["placement"]
    if placement is None or placement["pane_id"] is None:
        members.deregister_member(store, member_id)
        return NO_PANE
    from cafleet.delivery.keystrokes.lock import placement_lock

    with placement_lock(store.locks, placement, settings.lock_timeout, hooks):
        status = _kill(placement)
        hooks.pause("delete.killed")
        if status.fate is PaneFate.NOT_CLOSED:
            raise CafleetError(f"member {member_id} was not deleted: its pane {placement['pane_id']} {status.text()}.")
        members.deregister_member(store, member_id)
    return status
