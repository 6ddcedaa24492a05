"""`cafleet fleet watch`: one stream of what needs the Director's attention.

Stateless by design: no table or column is added; what was already reported lives in
this process, so a restart may repeat the current state once but never invents an event.
Each round (every ``interval`` seconds) inspects every member once (one multiplexer call
per member for tmux), retries previews owed for longer than one interval (each message
at most once per interval) and reports the fleet keeper (a ``keeper`` event when it starts
or stops running; a keeper that should run and does not is started when previews are
owed). With the keeper turned off (``CAFLEET_KEEPER=off``) the watch does the keeper's job
itself between rounds (:class:`cafleet.delivery.supervision.keeper.Deliverer`): each owed preview is
delivered as soon as its pane can take it. Between rounds, new messages for the Director are picked up
within a fraction of a second by waiting on :class:`cafleet.store.changes.Changes` (the
store's change waiter: ``PRAGMA data_version`` on SQLite, LISTEN/NOTIFY on PostgreSQL; no
busy loop). SIGINT/SIGTERM end the stream between rounds (never in the middle of typing a
retried preview) with an ``end`` event. A PostgreSQL server that ends the watch's sessions
(a restart, ``pg_terminate_backend``, ``idle_session_timeout``) is reconnected to with
back-off (:meth:`Changes.recover`), and the Director's inbox read again (no message is
reported twice: only ids above the last one reported are); after ``reconnect`` seconds
without a working connection :meth:`Watcher.run` raises the last failure, and the command
prints its ``end`` event and exits 1.
"""

from __future__ import annotations

import time

from cafleet import clock, config
from cafleet.broker import fleets, members, messages, notifications
from cafleet.delivery.keystrokes import drain
from cafleet.delivery.supervision import liveness
from cafleet.errors import CafleetError, Conflict, DatabaseError, DatabaseGone, DatabaseUnreachable, clause
from cafleet.faults import NO_HOOKS
from cafleet.store.changes import RECONNECT_TIMEOUT, Changes, Stopped, StopRequests

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.broker.records import MessageRecord
    from cafleet.faults import Hooks
    from cafleet.store.protocol import Store

MESSAGE_CHECK = 0.25  # seconds between checks for new Director messages (SQLite) and member rounds


def event(
    kind: str,
    fleet_id: int,
    *,
    member_id=None,
    message_id=None,
    detail: str = "",
    command: str | None = None,
    record: MessageRecord | None = None,
) -> dict:
    out = {
        "event": kind,
        "fleet_id": fleet_id,
        "member_id": member_id,
        "message_id": message_id,
        "detail": detail,
        "command": command,
        "at": clock.now(),
    }
    if record is not None:
        out["message"] = record
    return out


ACTIONS = {
    liveness.DEAD: "cafleet member delete {member_id}",
    liveness.BLOCKED: "cafleet member capture {member_id}",
    liveness.IDLE: "cafleet member capture {member_id}",
    liveness.SILENT: "cafleet member capture {member_id}",
    liveness.EXEC: "cafleet member capture {member_id}",
}


class Watcher:
    def __init__(
        self,
        store: Store,
        settings: config.Settings,
        fleet_id: int,
        interval: float,
        idle_after: float,
        emit,
        reconnect: float = RECONNECT_TIMEOUT,
        hooks: Hooks = NO_HOOKS,
    ) -> None:
        self.store = store
        self.hooks = hooks
        self.reconnect = reconnect
        self.fleet_id = fleet_id
        self.interval = interval
        self.idle_after = idle_after
        self.emit = emit
        self.pool = liveness.MuxPool()
        self.last_state: dict[int, object] = {}
        self.retried_at: dict[int, float] = {}
        self.last_message_id = 0
        self.director = fleets.get_fleet(store, fleet_id)["director_member_id"]
        self.settings = settings  # validated before the stream starts
        from cafleet.delivery.supervision import keeper

        self.keeper_on = bool(settings.keeper)
        self.keeper_seen: str | None = None  # the last keeper event's detail
        self.deliverer = (
            None if self.keeper_on else keeper.Deliverer(store, self.settings, fleet_id, lambda _: None, hooks)
        )
        self.noticer = None  # the Director's notices, the keeper's job too while it is off
        if not self.keeper_on:
            from cafleet.delivery.supervision.notices import Noticer

            self.noticer = Noticer(store, settings, fleet_id, hooks=hooks)
        if self.deliverer is not None:
            self.deliverer.on_delivered = self.delivered
        self.commands = None  # `member exec`: the keeper's job too while it is off
        if not self.keeper_on:
            from cafleet.delivery.execs import Watcher as ExecWatcher

            self.commands = ExecWatcher(store, self.settings, fleet_id, hooks=hooks)
        from cafleet.delivery.supervision.budget_watch import BudgetWatch

        self.budgets = BudgetWatch(
            store, settings.environ, fleet_id, reads=not self.keeper_on
        )  # over-budget (docs/usage.md)
        self.vanished: set[int] = set()  # members whose vanished worktree was reported
        self.kept: set[int] = set()  # members whose kept worktree was reported
        self.reader: tuple | None = None  # (public URL, scrubber) for a notice's document, made at the first notice

    def run(self) -> str:
        """Stream until the fleet is deleted or a signal stops it; returns why it ended.
        Raises :class:`DatabaseUnreachable` once reconnecting to the server gave up."""
        changes = None
        try:
            with StopRequests() as stop:
                changes = Changes(
                    self.store, MESSAGE_CHECK, stop=stop, reconnect=self.reconnect, hooks=self.hooks
                )  # baseline first
                unread = True  # the Director's inbox is owed a read (a failed read stays owed)
                next_round = 0.0
                while True:
                    try:
                        if unread:
                            if fleets.get_fleet(self.store, self.fleet_id)["deleted_at"] is not None:
                                return f"fleet {self.fleet_id} was deleted"
                            self.director_messages()
                            unread = False
                        if time.monotonic() >= next_round:
                            self.interval_round()
                            next_round = time.monotonic() + self.interval
                        due, posted = self.resident_rounds()
                        if posted:  # our own commit wakes no change waiter
                            unread = True
                            continue
                        stop.check()
                        unread = changes.wait(until=next_round if due is None else min(due, next_round)) or unread
                    except DatabaseGone as gone:
                        return clause(gone)
                    except DatabaseUnreachable as error:  # the server ended the session: reconnect
                        changes.recover(error)
                        unread = True  # notifications were lost meanwhile: read the inbox again
                    except DatabaseError:
                        stop.sleep(MESSAGE_CHECK)  # busy database: try again, never end the stream for it
                    except Conflict:  # a read of the live fleet refused: deleted since the check above?
                        if fleets.get_fleet(self.store, self.fleet_id)["deleted_at"] is not None:
                            return f"fleet {self.fleet_id} was deleted"
                        raise
        except Stopped as stopped:  # outside the ``with``: a signal while it restores is caught too
            return str(stopped)
        finally:
            if changes is not None:
                changes.close()

    def interval_round(self) -> None:
        """What is looked at once per interval: members' states, stale previews, budgets,
        worktrees and the keeper."""
        self.hooks.pause("watch.round")
        self.members_round()
        self.retry_stale()
        self.budgets.round(self.emit, event)
        self.worktrees_round()
        self.keeper_round()

    def resident_rounds(self) -> tuple[float | None, bool]:
        """The rounds of what stands in for the keeper (delivery, execs, notices), each when
        on: when the soonest is due next (None: none is), and whether a notice was posted."""
        dues = [part.round() for part in (self.deliverer, self.commands) if part is not None]
        posted = False
        if self.noticer is not None:
            dues.append(self.noticer.round())
            posted, self.noticer.posted = bool(self.noticer.posted), 0
        return min((due for due in dues if due is not None), default=None), posted

    def director_messages(self) -> None:
        if self.director is None:  # a fleet without a Director (not live): nobody's inbox to read
            return
        for record in messages.pending_after(self.store, self.director, self.last_message_id):
            self.last_message_id = max(self.last_message_id, record["message_id"])
            found = event(
                "message",
                self.fleet_id,
                member_id=record["from_member_id"],
                message_id=record["message_id"],
                detail=(
                    f"notice for the Director: {record['kind']} {record['notice']['subject']}"
                    if "kind" in record
                    else f"message for the Director from member {record['from_member_id']}"
                ),
                command=f"cafleet message show {record['message_id']}",
                record=record,
            )
            if "kind" in record:
                found["notice"] = self.notice_document(record["message_id"])
            self.emit(found)

    def notice_document(self, message_id: int) -> dict | None:
        """A notice as the keeper posts it to a plain-JSON webhook (the outbox's one builder)."""
        from cafleet.broker import notify
        from cafleet.delivery.supervision import outbox

        row = notify.notice(self.store, message_id)
        if row is None:
            return None
        if self.reader is None:
            self.reader = outbox.reader(self.settings)
        return outbox.document(self.store, self.fleet_id, row, *self.reader)

    def members_round(self) -> None:
        from cafleet.broker import worktrees

        roster = members.roster_detail(self.store, self.fleet_id)
        states = liveness.fleet_states(self.store, self.fleet_id, self.pool, self.idle_after, roster=roster)
        trees = {row["member_id"]: row for row in worktrees.in_fleet(self.store, self.fleet_id)} if states else {}
        entries = {entry["member_id"]: entry for entry in roster}
        for member_id, (state, detail) in states.items():
            # An idle episode is named by the activity it follows, so activity and a new
            # episode that both fall between two rounds still give a new idle event.
            last = entries[member_id]["last_activity_at"]  # from the roster's one walk
            key = (state, last) if state == liveness.IDLE else state
            new = state in ACTIONS and self.last_state.get(member_id) != key
            if new and state == liveness.DEAD and not liveness.still_dead(self.store, entries[member_id], self.hooks):
                continue  # being deleted (or a delivery holds the pane): the next round looks again
            if new:
                found = event(
                    state,
                    self.fleet_id,
                    member_id=member_id,
                    detail=detail,
                    command=ACTIONS[state].format(member_id=member_id),
                )
                if member_id in trees:  # where the member works (docs/worktrees.md)
                    found["worktree"] = {k: trees[member_id][k] for k in ("path", "branch", "host")}
                self.emit(found)
            self.last_state[member_id] = key
        for gone in set(self.last_state) - set(states):
            del self.last_state[gone]  # deregistered meanwhile: nothing more to report

    def worktrees_round(self) -> None:
        """A ``worktree`` event, once, for an active member whose worktree folder is gone,
        and once for each worktree kept at a member's deletion, so that none piles up unseen
        (one read; none on a database without the worktree table; docs/worktrees.md)."""
        import os

        from cafleet.broker import worktrees

        for row in worktrees.in_fleet(self.store, self.fleet_id):
            member_id = row["member_id"]
            if row["status"] == worktrees.KEPT and member_id not in self.kept:
                self.kept.add(member_id)
                where = f" on host {row['host']}" if row["host"] else ""
                self.emit(
                    event(
                        "worktree",
                        self.fleet_id,
                        member_id=member_id,
                        detail=(
                            f"member {member_id}'s worktree {row['path']}{where} (branch {row['branch']}) was kept "
                            "when the member was deleted: it holds work that would be lost (the command says what "
                            "and removes it once nothing would be; --discard-worktree removes it anyway)"
                        ),
                        command=f"cafleet member delete {member_id}",
                    )
                )
            if row["member_status"] != "active" or row["status"] != worktrees.READY or row["host"] is not None:
                continue  # a worktree on another host is not looked at every round (`cafleet doctor` does)
            if os.path.isdir(row["path"]):
                self.vanished.discard(member_id)
            elif member_id not in self.vanished:
                self.vanished.add(member_id)
                self.emit(
                    event(
                        "worktree",
                        self.fleet_id,
                        member_id=member_id,
                        detail=f"member {member_id}'s worktree {row['path']} (branch {row['branch']}) is gone",
                        command="cafleet doctor",
                    )
                )

    def keeper_round(self) -> None:
        """A ``keeper`` event when the keeper's state changed; start one when none runs (its
        notices are needed whether or not previews are owed)."""
        from cafleet.delivery.supervision import keeper_control

        found = keeper_control.status(self.store, self.settings, self.fleet_id)
        if found.state == keeper_control.NOT_RUNNING and self.keeper_on:
            found = keeper_control.ensure(self.store, self.settings, self.fleet_id, self.hooks.program)
        self.budgets.reads = not found.running  # no keeper reads the usage records: this watch does
        if found.running:
            detail = f"keeper {found.describe()}"
        elif found.state == keeper_control.STALLED:  # said once, not once a round as its heartbeat ages
            detail = (
                f"keeper stalled, pid {found.pid}: no heartbeat for over {self.settings.keeper_stalled_after:g} s "
                f"(stopped or hung: {found.remedy()})"
            )
        elif self.keeper_on:
            detail = f"keeper not running: {found.why or 'the next command that needs it starts one'}"
        else:
            detail = "keeper off (CAFLEET_KEEPER=off): this watch delivers owed previews while it runs"
        if detail != self.keeper_seen:
            self.keeper_seen = detail
            self.emit(event("keeper", self.fleet_id, detail=detail))

    def delivered(self, member_id: int, message_id: int) -> None:
        self.emit(
            event(
                "notify",
                self.fleet_id,
                member_id=member_id,
                message_id=message_id,
                detail=f"preview of message {message_id} delivered on retry",
            )
        )

    def retry_stale(self) -> None:
        now = time.monotonic()
        cutoff = _iso_seconds_ago(self.interval)
        owed: dict[int, list[int]] = {}
        for message_id, recipient in notifications.stale_notifications(self.store, self.fleet_id, cutoff):
            if now - self.retried_at.get(message_id, -1e9) >= self.interval:
                owed.setdefault(recipient, []).append(message_id)
        for recipient, message_ids in owed.items():
            if notifications.notification_target(self.store, recipient) is None:
                continue
            stamped: set[int] = set()
            try:
                failure = drain.drain(self.store, self.settings, recipient, set(), stamped, hooks=self.hooks)
            except CafleetError as error:
                failure = str(error)
            for message_id in message_ids:
                self.retried_at[message_id] = now
                delivered = message_id in stamped or not notifications.still_pending_notification(
                    self.store, message_id
                )
                detail = (
                    f"preview of message {message_id} delivered on retry"
                    if delivered
                    else f"preview of message {message_id} still not delivered: {failure or 'not attempted'}"
                )
                self.emit(
                    event(
                        "notify",
                        self.fleet_id,
                        member_id=recipient,
                        message_id=message_id,
                        detail=detail,
                        command=None if delivered else f"cafleet member capture {recipient}",
                    )
                )


def _iso_seconds_ago(seconds: float) -> str:
    ns = time.time_ns() - int(seconds * 1e9)
    whole, rest = divmod(ns, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{rest // 1000:06d}+00:00"
