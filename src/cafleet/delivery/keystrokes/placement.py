"""Reaching a member's pane through its placement, with the pane's identity checked.

Kept apart from :mod:`cafleet.delivery.spawning.panes` (member creation and deletion) so that the
send path imports only what typing a preview needs.
"""

from __future__ import annotations

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any


def reach(placement: Mapping[str, Any]):
    """The multiplexer client for a concrete placement, checking its recorded identity
    before every call that targets the pane (PaneStale when it no longer matches); a
    placement whose stored values do not match their encoding is DamagedPlacement."""
    from cafleet.mux.detect import check_placement, multiplexer_for_placement

    check_placement(placement)  # no stored value reaches the multiplexer unchecked
    mux = multiplexer_for_placement(placement["backend"], placement["session"])
    mux.expect(placement["pane_id"], placement.get("identity"), recorded_at(placement))
    return mux


def recorded_at(placement: Mapping[str, Any]) -> float | None:
    """When the placement was written (epoch seconds), for legacy placements' check."""
    from cafleet import clock

    created = placement.get("created_at")
    return clock.to_epoch(created) if created else None
