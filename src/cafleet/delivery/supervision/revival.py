"""The keeper revives a member whose agent died, in a fleet that opted in (``fleet create
--revive``; docs/delivery.md, "The keeper revives a member").

At each look of the Director's notices (:class:`cafleet.delivery.supervision.notices.Noticer`, every
``CAFLEET_NOTICE_INTERVAL`` s) a member found dead (its pane gone, closed or not its own,
its agent exited; not a host that does not answer) and still dead under its pane's lock is
started again by :func:`cafleet.delivery.spawning.restore.restore_member`, exactly as ``member
revive`` does: its conversation resumed, its id, messages and options kept. Each try is a
row of :mod:`cafleet.broker.revivals` and a notice to the Director (``revived``), whatever
its outcome.

The limit, per member: at most the fleet's ``per_hour`` tries in any hour, the n-th try of
that hour no sooner than :data:`BACKOFF` × 2^(n-2) s after the one before (the first at
once). A member dead again with its hour's tries spent is given up: one notice
(``not_revived``) and no more tries until the Director brings it back with ``member
revive``, which starts the count again. A member the keeper gave up on, or waits to
revive, is left to the ``dead`` notice's rules.
"""

from __future__ import annotations

import time

from cafleet import config, render
from cafleet.broker import notices, revivals
from cafleet.faults import NO_HOOKS

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.broker.records import MemberDetail
    from cafleet.faults import Hooks
    from cafleet.store.protocol import Store

BACKOFF = 30.0  # seconds between a member's first two tries in an hour; doubling after
HOUR = 3600.0
WAITING, REVIVED, GAVE_UP, GIVEN_UP = "waiting", "revived", "gave up", "given up"


def due(history: list[tuple[float, str]], per_hour: int, now: float) -> str | float:
    """What to do with a dead member whose rows since its last ``member revive`` are
    ``history``: ``"revive"``, ``"give up"``, ``"given up"`` (already), or when the next try
    is due (epoch seconds)."""
    if history and history[-1][1] == revivals.GAVE_UP:
        return GIVEN_UP
    tries = [at for at, actor in history if actor == revivals.KEEPER and at > now - HOUR]
    if len(tries) >= per_hour:
        return "give up"
    if not tries:
        return "revive"
    next_try = tries[-1] + BACKOFF * 2 ** (len(tries) - 1)
    return "revive" if now >= next_try else next_try


class Reviver:
    """Revives the dead members of one fleet that opted in (see the module's text)."""

    def __init__(self, store: Store, settings: config.Settings, fleet_id: int, say, hooks: Hooks = NO_HOOKS) -> None:
        self.store, self.settings, self.fleet_id, self.say = store, settings, fleet_id, say
        self.hooks = hooks
        self.per_hour: int | None = None

    def refresh(self) -> None:
        """Read whether the fleet opted in (once per look: one query)."""
        self.per_hour = revivals.per_hour(self.store, self.fleet_id)

    def consider(self, member: MemberDetail, director: MemberDetail, why: str) -> str | None:
        """A member found dead (``why``): revive it, give up on it, or wait; what was done
        (:data:`REVIVED`, :data:`GAVE_UP`, :data:`WAITING`, :data:`GIVEN_UP`), or None when
        the fleet did not opt in."""
        if self.per_hour is None:
            return None
        member_id = member["member_id"]
        verdict = due(revivals.since_director(self.store, member_id), self.per_hour, time.time())
        if verdict == GIVEN_UP:
            return GIVEN_UP
        if isinstance(verdict, float):
            return WAITING
        name = render.inline(member["name"])
        if verdict == "give up":
            text = (
                f"The keeper revived member {member_id} ({name}) {self.per_hour} time"
                f"{'s' if self.per_hour != 1 else ''} in the last hour and it died again ({render.inline(why)}); "
                f"it is not revived again. `cafleet member capture {member_id}` shows what its pane last showed "
                f"if it is still open; `cafleet member revive {member_id}` starts it again and lets the keeper "
                "revive it again."
            )
            self._tell(member_id, "not_revived", revivals.GAVE_UP, text)
            self.say(f"gave up reviving member {member_id}: it died again after {self.per_hour} revivals in an hour")
            return GAVE_UP
        from cafleet.delivery.spawning.restore import LOST, restore_member

        result = restore_member(self.store, self.settings, member, director, hooks=self.hooks)
        outcome = result["outcome"]
        if outcome not in (LOST, "restored", "started fresh"):
            return None  # alive meanwhile, or started again by another command: nothing was tried
        tries = sum(1 for at, actor in revivals.since_director(self.store, member_id) if actor == revivals.KEEPER)
        pane = f" in pane {render.inline(result['pane_id'])}" if outcome != LOST else ""
        said = f"{outcome}{pane}: {render.inline(result['detail'])}"
        text = (
            f"Member {member_id} ({name}) died ({render.inline(why)}); the keeper started it again: {said}. "
            f"(Revival {tries + 1} of at most {self.per_hour} an hour; `cafleet member show {member_id}`.)"
            if outcome != LOST
            else f"Member {member_id} ({name}) died ({render.inline(why)}) and the keeper could not start it again: "
            f"{render.inline(result['detail'])}. It tries again later, at most {self.per_hour} times an hour."
        )
        self._tell(member_id, "revived", revivals.KEEPER, text, outcome=said)
        self.say(f"revived member {member_id}: {said}")
        return REVIVED

    def _tell(self, member_id: int, kind: str, actor: str, text: str, outcome: str = "") -> None:
        """The try's row, then its notice (an event: its episode is over as it is posted)."""
        from cafleet.broker import fleets

        revivals.record(self.store, self.fleet_id, member_id, actor, outcome or kind)
        director_id = fleets.get_fleet(self.store, self.fleet_id)["director_member_id"]
        if director_id is None:
            return
        self.store.create_auxiliary([notices.TABLE])
        header = notices.HEADER.format(kind=kind, subject=f"member:{member_id}")
        with self.store.write():
            if notices.can_tell(self.store, self.fleet_id, director_id):
                notices.insert(
                    self.store,
                    self.fleet_id,
                    director_id,
                    notices.Notice(kind, f"member:{member_id}", member_id, None, f"{header}\n{text}"),
                    cleared=True,
                )
