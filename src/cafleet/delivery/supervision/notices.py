"""Notices in the Director's inbox: the fleet keeper (and ``fleet watch`` while the keeper is
off) tells the Director what needs it, so that a Director blocked in ``message wait`` wakes
for trouble (docs/delivery.md, "Notices in the Director's inbox").

Every ``CAFLEET_NOTICE_INTERVAL`` s (15) :class:`Noticer` reads the state of each active
member other than the Director (``delivery.supervision.liveness.pane_state``, their panes read
together: one multiplexer call per server, ``MuxPool.inspecting``) and posts one notice
(:mod:`cafleet.broker.notices`: a self-send of the Director) for each condition that holds
and has no open episode:

- ``awaiting_user``: the member's pane has shown a prompt awaiting its user for
  ``CAFLEET_NOTICE_AWAITING_AFTER`` s (30) as seen by this process; the notice holds the
  dialog's text (every row of the pane's visible screen, in full, hidden characters shown as
  escapes: :mod:`cafleet.delivery.keystrokes.dialog`, read with one more multiplexer call), its digest
  and the command that answers it (``cafleet member answer M CHOICE --dialog DIGEST``). A
  dialog that changes into another one (another digest) is a new episode;
- ``dead``: the member's pane is gone, exited, back at a shell or stale, with messages owed
  a preview (their ids are named);
- ``silent``: the member has neither sent a message nor ACKed one since it was registered,
  ``CAFLEET_NOTICE_SILENT_AFTER`` s (300) ago (a poll leaves no trace in the store: an ACK is
  the trace of one);
- ``unreachable``: a remote member's host cannot be reached over SSH (one notice per host);
- ``over_budget``: the member or its fleet is at or over its budget (the send path's gate,
  ``delivery.keystrokes.drain.refuse_over_budget``).

In a fleet that opted in (``fleet create --revive``) a dead member is first started again
(:mod:`cafleet.delivery.supervision.revival`, whose ``revived`` and ``not_revived`` notices are events,
each posted with its episode over); the ``dead`` notice is posted only for a member the
keeper neither revived nor waits to revive.

A condition that no longer holds ends its episode (``cleared_at``); the next time it holds
gets a new notice. A member deregistered meanwhile ends its episodes too.
"""

from __future__ import annotations

import time

from cafleet import config, render
from cafleet.broker import notices
from cafleet.delivery.supervision import liveness
from cafleet.faults import NO_HOOKS

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.broker.records import MemberDetail
    from cafleet.faults import Hooks
    from cafleet.store.protocol import Store


class Noticer:
    def __init__(
        self, store: Store, settings: config.Settings, fleet_id: int, say=None, hooks: Hooks = NO_HOOKS
    ) -> None:
        self.store = store
        self.hooks = hooks
        self.environ = settings.environ
        self.fleet_id = fleet_id
        self.say = say or (lambda _: None)
        self.awaiting_after = settings.notice_awaiting_after
        self.silent_after = settings.notice_silent_after
        self.interval = settings.notice_interval
        self.next_look = 0.0  # time.monotonic() of the next look
        # member id -> (digest, first seen with that digest, first seen blocked at all)
        self.blocked: dict[int, tuple[str, float, float]] = {}
        self.opened: dict[tuple[str, str], dict] = {}
        self.posted = 0  # notices posted so far (the caller may reset it)
        self.pool = liveness.MuxPool()
        self.down: set[str] = set()
        from cafleet.delivery.supervision.revival import Reviver

        self.reviver = Reviver(store, settings, fleet_id, self.say, hooks)  # a fleet that opted in (`--revive`)
        self.director: MemberDetail | None = None

    def round(self) -> float:
        """Look when due; return when the next look is due (``time.monotonic()``)."""
        now = time.monotonic()
        if now >= self.next_look:
            self.next_look = now + self.interval
            self.look()
        return self.next_look

    def look(self) -> None:
        from cafleet.broker import fleets, members

        fleet = fleets.get_fleet(self.store, self.fleet_id)
        if fleet["deleted_at"] is not None:
            return
        roster = members.roster_detail(self.store, self.fleet_id)  # Conflict unless the fleet is live
        director = fleet["director_member_id"]
        if director is None:  # never: a fleet without a Director is not live
            return
        holding: dict[tuple[str, str], tuple[int | None, str | None, str]] = {}
        self.opened = opened = notices.open_episodes(self.store, self.fleet_id)
        self.down = set()  # hosts found unreachable in this look: their other members are not tried
        self.director = next((e for e in roster if e["member_id"] == director), None)
        self.reviver.refresh()
        watched = [
            entry
            for entry in roster
            if entry["member_id"] != director and entry["kind"] != "director" and entry["status"] == "active"
        ]
        with self.pool.inspecting(watched):  # every pane read in one multiplexer call per server
            for entry in watched:
                self.conditions(entry, holding)
        for member_id in set(self.blocked) - {e["member_id"] for e in roster}:
            del self.blocked[member_id]
        ended = []
        for key, episode in opened.items():
            now_holding = holding.get(key)
            if now_holding is None or (key[0] == "awaiting_user" and now_holding[1] != episode["digest"]):
                ended.append(episode["message_id"])
        if ended:
            notices.clear(self.store, ended)
            for key in [k for k, e in opened.items() if e["message_id"] in ended]:
                del opened[key]
        for (kind, subject), (about, digest, text) in sorted(holding.items(), key=lambda item: item[0][1]):
            if (kind, subject) in opened:
                continue
            posted = notices.post(
                self.store, self.fleet_id, director, notices.Notice(kind, subject, about, digest, text)
            )
            if posted is not None:
                self.posted += 1
                self.say(f"notice {posted} to the Director: {kind} {subject}")

    def conditions(self, entry: MemberDetail, holding: dict) -> None:
        from cafleet.broker import notifications

        member_id = entry["member_id"]
        name = render.inline(entry["name"])
        placement = entry["placement"]
        session = placement["session"] if placement is not None else ""
        host = session[len("ssh://") :].split("/", 1)[0] if session.startswith("ssh://") else None
        if host is not None and host in self.down:
            return  # one SSH timeout per host per look, not one per member
        screens: dict[int, str] = {}
        state, detail = liveness.pane_state(entry, self.pool, float("inf"), screens=screens)
        if state == liveness.BLOCKED and member_id in screens:
            self.awaiting(entry, name, holding)
        else:
            self.blocked.pop(member_id, None)
        if state == liveness.DEAD and host is not None and " over SSH" in detail:
            self.down.add(host)
            subject = f"host:{host}"
            if ("unreachable", subject) not in holding:
                holding[("unreachable", subject)] = (
                    member_id,
                    None,
                    f"{notices.HEADER.format(kind='unreachable', subject=subject)}\n"
                    f"Host {render.inline(host)} cannot be reached (member {member_id}, {name}: "
                    f"{render.inline(detail)}). Previews owed to its members wait until it answers again; "
                    f"check it with `ssh {render.inline(host)} true`.",
                )
        elif state == liveness.DEAD and liveness.still_dead(self.store, entry, self.hooks):
            from cafleet.delivery.supervision.revival import REVIVED, WAITING

            revived = self.director and self.reviver.consider(entry, self.director, detail)
            owed = [] if revived in (REVIVED, WAITING) else notifications.owed_message_ids(self.store, member_id)
            if owed:
                ids = ", ".join(map(str, owed))
                subject = f"member:{member_id}"
                holding[("dead", subject)] = (
                    member_id,
                    None,
                    f"{notices.HEADER.format(kind='dead', subject=subject)}\n"
                    f"Member {member_id} ({name}) cannot take previews: {render.inline(detail)}. "
                    f"Message{'s' if len(owed) > 1 else ''} {ids} "
                    f"{'are' if len(owed) > 1 else 'is'} owed a preview and stay pending. "
                    f"`cafleet member revive {member_id}` starts it again with its conversation resumed; "
                    f"`cafleet member delete {member_id}` and a new member take its work over instead.",
                )
        if self.silent(entry):
            subject = f"member:{member_id}"
            holding[("silent", subject)] = (
                member_id,
                None,
                f"{notices.HEADER.format(kind='silent', subject=subject)}\n"
                f"Member {member_id} ({name}) has neither sent nor ACKed a message since it was spawned at "
                f"{render.inline(entry['registered_at'])} ({self.silent_after:g} s or more). "
                f"See what its pane shows: `cafleet member capture {member_id}`.",
            )
        over = self.over_budget(member_id)
        if over is not None:
            subject = f"member:{member_id}"
            holding[("over_budget", subject)] = (
                member_id,
                None,
                f"{notices.HEADER.format(kind='over_budget', subject=subject)}\n"
                f"Member {member_id} ({name}) is over its budget: {render.inline(over)} "
                f"See `cafleet member usage {member_id}`; raise the budget or stop giving it work.",
            )

    def awaiting(self, entry: MemberDetail, name: str, holding: dict) -> None:
        from cafleet.delivery.keystrokes import dialog
        from cafleet.errors import CafleetError

        member_id = entry["member_id"]
        placement = entry["placement"]
        subject = f"member:{member_id}"
        episode = self.opened.get(("awaiting_user", subject))
        if placement is None or placement["pane_id"] is None:
            return
        try:  # the dialog's own window, every row of it (the look read the screen's last rows)
            mux = self.pool.get(placement["backend"], placement["session"])
            shown = dialog.capture(mux, placement["pane_id"])
        except CafleetError:
            if episode is not None:  # not read this time: the episode goes on
                holding[("awaiting_user", subject)] = (member_id, episode["digest"], "")
            return
        seen = dialog.read(placement["coding_agent"], shown)
        if seen is None:
            self.blocked.pop(member_id, None)
            return
        now = time.monotonic()
        known = self.blocked.get(member_id)
        if known is None:
            known = self.blocked[member_id] = (seen.digest, now, now)
        elif known[0] != seen.digest:
            known = self.blocked[member_id] = (seen.digest, now, known[2])
        if episode is not None:
            if episode["digest"] == seen.digest or now - known[1] < self.awaiting_after:
                # The same dialog, or another one not yet shown this long: the episode goes
                # on (a screen that redraws its dialog at every look never gets a notice per
                # look, and a keeper that restarts does not notice it again).
                holding[("awaiting_user", subject)] = (member_id, episode["digest"], "")
                return
            waited = now - known[1]  # another dialog, shown this long: a new episode
        else:
            waited = now - known[2]  # blocked this long, whatever it showed meanwhile
            if waited < self.awaiting_after:
                return
        pane = placement["pane_id"]
        shown_lines = "\n".join(f"    {line}" if line else "" for line in seen.lines)
        if dialog.ESCAPE_OPEN in seen.text:
            shown_lines += (
                f"\n({dialog.ESCAPE_OPEN}U+XXXX{dialog.ESCAPE_CLOSE}: a character the screen does not draw as itself.)"
            )
        if seen.options and seen.numbered:
            answer = (
                f"Answer it: `cafleet member answer {member_id} CHOICE --dialog {seen.digest}` "
                f"(CHOICE: {seen.choices()}), or in pane {render.inline(pane)}."
            )
        elif seen.options:
            buttons = ", ".join(f"{number} {label}" for number, label in seen.options)
            answer = (
                f"Answer it: `cafleet member answer {member_id} CHOICE --dialog {seen.digest}` "
                f"(CHOICE: its buttons numbered left to right: {buttons}), or in pane {render.inline(pane)}."
            )
        else:
            answer = f"It has no numbered option: answer it in pane {render.inline(pane)}."
        holding[("awaiting_user", subject)] = (
            member_id,
            seen.digest,
            f"{notices.HEADER.format(kind='awaiting_user', subject=subject)}\n"
            f"Member {member_id} ({name}) has waited for its user for {int(waited)} s or more; "
            f"its screen shows (dialog {seen.digest}):\n{shown_lines}\n{answer}",
        )

    def silent(self, entry: MemberDetail) -> bool:
        from cafleet import clock

        since = clock.epoch_or_none(entry["registered_at"])
        if since is None or time.time() - since < self.silent_after:
            return False
        member_id = entry["member_id"]
        row = self.store.execute(
            "SELECT EXISTS (SELECT 1 FROM messages WHERE from_member_id = ?) OR EXISTS "
            "(SELECT 1 FROM messages WHERE to_member_id = ? AND status_state = 'completed')",
            (member_id, member_id),
        ).fetchone()
        return not row[0]

    def over_budget(self, member_id: int) -> str | None:
        from cafleet.delivery.keystrokes.drain import refuse_over_budget
        from cafleet.errors import OverBudget

        try:
            refuse_over_budget(self.store, self.environ, member_id, "send")
        except OverBudget as error:
            return str(error)
        return None
