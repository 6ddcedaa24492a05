"""The operator's manual reach into a member's pane, outside the send path: ``member capture``
reads its screen and ``member prompt`` types one line into its agent and submits it, under
the pane-input lock; :func:`live_placement` finds the pane for them and for ``member
answer`` (:mod:`cafleet.delivery.keystrokes.answer`).

The ``hooks`` calls (the command's, passed in) are the test seam's pause and trace points (:mod:`cafleet.faults`).
"""

from __future__ import annotations

from cafleet import config
from cafleet.broker import members
from cafleet.delivery.keystrokes.placement import reach
from cafleet.errors import CafleetError
from cafleet.faults import NO_HOOKS

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.broker.records import PlacementRecord
    from cafleet.faults import Hooks
    from cafleet.store.protocol import Store


def live_placement(store: Store, member_id: int) -> tuple[PlacementRecord, str]:
    """An active member's placement and its pane id; Conflict when it has no pane."""
    from cafleet.errors import Conflict

    record = members.get_member(store, member_id)
    placement = record["placement"]
    if record["status"] != "active" or placement is None:
        raise Conflict(f"member {member_id} is deregistered; it has no pane.")
    pane_id = placement["pane_id"]
    if pane_id is None:
        raise Conflict(f"member {member_id} has no pane yet (its creation is pending).")
    return placement, pane_id


def capture_member(store: Store, member_id: int, lines: int, ansi: bool) -> dict:
    """The last ``lines`` of the member's pane (``member capture``)."""
    placement, pane_id = live_placement(store, member_id)
    screen = reach(placement).capture(pane_id, lines, ansi=ansi)
    return {"member_id": member_id, "pane_id": pane_id, "text": screen}


def prompt_member(
    store: Store, settings: config.Settings, member_id: int, text: str, *, force: bool = False, hooks: Hooks = NO_HOOKS
) -> dict:
    """Type one line into the member's agent and submit it, under the pane lock (``member
    prompt``). New work like a message: refused for a member over its budget or its
    fleet's unless ``force`` (the one gate, :func:`cafleet.delivery.keystrokes.drain.refuse_over_budget`)."""
    from cafleet.delivery.keystrokes import lock, submit
    from cafleet.delivery.keystrokes.drain import refuse_over_budget
    from cafleet.errors import UsageError

    if not text.strip() or "\n" in text or "\r" in text:
        raise UsageError("the prompt must be one non-blank line.")
    placement, pane_id = live_placement(store, member_id)
    if not force:
        refuse_over_budget(store, settings.environ, member_id, "prompt")
    locks, timeout = store.locks, settings.lock_timeout
    mux = reach(placement)
    try:
        with lock.placement_lock(locks, placement, timeout, hooks) as held:
            mux = held.guard(mux)  # the lock is checked before each keystroke too
            submit.type_prompt(
                mux,
                pane_id,
                text,
                placement["coding_agent"],
                pacing=submit.Pacing(settings.submit_settle),
                hooks=hooks,
            )
    except lock.LockLost as error:
        from cafleet.delivery.keystrokes.drain import after_lost_lock

        typed = getattr(mux, "typed", False)
        raise CafleetError(after_lost_lock(locks, placement, text, timeout, error, typed) + ".") from None
    return {"member_id": member_id, "pane_id": pane_id, "submitted": True}
