"""Commands the Director runs in a member's pane (``cafleet member exec``; docs/delivery.md,
"Commands run in a member's pane").

The command is stored (:mod:`cafleet.broker.execs`), never typed: the member's pane gets
one fixed line naming only the exec's id, ``! cafleet member exec-run ID``, through the
agent's own shell mode (``!``), so no part of the command passes through keystrokes or
quoting. The line goes through a preview's gate (:func:`cafleet.delivery.keystrokes.submit.
submit_shell_line`, under the pane-input lock: never into a dialog, never onto someone's
half-typed text, never while the agent starts); a pane that cannot take it now is tried
again by the fleet keeper (or ``member exec --wait``) until it can.

``member exec-run ID`` (:func:`run`), in the member's pane, claims the row once, runs the
command with ``/bin/sh -c`` in the pane's working directory and environment (its output
goes to the pane, so into the agent's own context), records the exit status (128 + N for
signal N) and prints one summary line. The Director's notice is posted with the status.

:class:`Watcher` (the keeper's, and ``member exec --wait``'s) moves each exec of a fleet on:
dispatch (with a back-off per exec), ``never_started`` once it was dispatched
``CAFLEET_EXEC_START_AFTER`` s ago and has not started, ``vanished`` when the process that
claimed it is gone without a status (only on this host: a remote member's runner is on
its own host), and the grace period's nudge: when the exec finished
``CAFLEET_EXEC_GRACE`` s ago and the member took no turn of its own since (no message sent
or ACKed, no working cue on its screen), one line ``[cafleet exec ID ended: …] Continue with
the output above.`` is typed (the same gate), once.
"""

from __future__ import annotations

import contextlib
import os
import time

from cafleet import clock
from cafleet.broker import execs
from cafleet.errors import CafleetError, DatabaseError, clause
from cafleet.faults import NO_HOOKS

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.faults import Hooks
    from cafleet.store.protocol import Store

LINE = "! cafleet member exec-run {exec_id}"
NUDGE = "[cafleet exec {exec_id} ended: {status}] Continue with the output above."
FIRST_RETRY = 0.25
MAX_RETRY = 2.0


def create(
    store: Store, settings, member_id: int, command: str, on_stored=None, hooks: Hooks = NO_HOOKS
) -> tuple[dict, str | None]:
    """Store the exec, then try its dispatch once; (record, why it was not dispatched)."""
    record = execs.create(store, member_id, command)
    if on_stored is not None:
        on_stored(record)
    keeper = _keeper(store, settings, record["fleet_id"], hooks)  # it judges, and nudges, whatever happens here
    try:
        failure = dispatch(store, settings, record["exec_id"], hooks=hooks)
    except Exception as error:  # noqa: BLE001 -- stored, its id printed: any fault now is a reason, never an error
        from cafleet.delivery.keystrokes.drain import _unexpected

        failure = _unexpected(error)
    if failure is not None:
        failure += (
            "; the fleet keeper types it as soon as the pane can take it"
            if keeper
            else "; `cafleet member exec --wait` or `cafleet fleet watch` types it as soon as the pane can take it"
        )
    with contextlib.suppress(CafleetError):  # the record as stored stands
        record = execs.get(store, record["exec_id"])
    return record, failure


def _keeper(store: Store, settings, fleet_id: int, hooks: Hooks) -> bool:
    try:
        from cafleet.delivery.supervision import keeper_control

        return keeper_control.ensure(
            store, settings, fleet_id, hooks.program
        ).running  # running: not off, stalled or unable to start
    except Exception:  # noqa: BLE001 -- a keeper that cannot start only changes the advice; the exec is stored
        return False


def dispatch(
    store: Store, settings, exec_id: int, *, wait_for_lock: bool = True, hooks: Hooks = NO_HOOKS
) -> str | None:
    """Type the exec's line into its member's pane and submit it; None when it was (or
    needs no typing any more), else why not (it stays owed)."""
    from cafleet.broker import notifications
    from cafleet.delivery.keystrokes import lock, submit
    from cafleet.delivery.keystrokes.placement import reach
    from cafleet.errors import LockTimeout

    record = execs.get(store, exec_id)
    if record["state"] != "created":
        return None
    member_id = record["member_id"]
    target = notifications.notification_target(store, member_id)
    if target is None:
        return f"member {member_id} has no pane that can take input"
    timeout = settings.lock_timeout if wait_for_lock else 0
    try:
        with lock.placement_lock(store.locks, target, timeout, hooks) as held:
            if notifications.notification_target(store, member_id) != target:
                return f"member {member_id}'s placement changed"
            if execs.get(store, exec_id)["state"] != "created":
                return None  # typed by another process meanwhile
            other = execs.running_for(store, record["fleet_id"], member_id)
            if other is not None:
                return f"member {member_id}'s pane is running exec {other['exec_id']}"
            mux = held.guard(reach(target))
            submit.submit_shell_line(
                mux,
                target["pane_id"],
                LINE.format(exec_id=exec_id),
                target["coding_agent"],
                settings.submit_settle,
                hooks=hooks,
            )
            execs.mark_dispatched(store, exec_id)
    except LockTimeout as error:
        return None if not wait_for_lock else clause(error)
    except (CafleetError, OSError) as error:
        from cafleet.delivery.keystrokes.drain import _unexpected

        return _unexpected(error)
    return None


def runner_identity() -> str:
    """``host:pid:start``: who runs an exec (the start time, in clock ticks since boot, tells
    a reused pid apart)."""
    import socket

    return f"{socket.gethostname()}:{os.getpid()}:{_start_ticks(os.getpid()) or ''}"


def _start_ticks(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = data[data.rfind(")") + 2 :].split()
    return fields[19] if len(fields) > 19 else None


def vanished(runner: str | None) -> bool:
    """Whether the process that claimed an exec is gone, as far as this host can tell: a
    runner on another host (or one this host cannot read) never counts as gone."""
    import socket

    if not runner:
        return False
    parts = runner.rsplit(":", 2)
    if len(parts) != 3 or parts[0] != socket.gethostname() or not parts[1].isdigit():
        return False
    if not os.path.isdir("/proc/self"):
        return False  # no /proc to look in: never judged
    started = _start_ticks(int(parts[1]))
    return started is None or (parts[2] != "" and started != parts[2])


def run(store: Store, environ, exec_id: int, out) -> int:
    """``member exec-run``: claim the exec, run its command here, record how it ended. It
    runs only in its member's own pane, judged by this process's tree (never by a
    variable: :mod:`cafleet.delivery.authority`), and once."""
    import signal
    import subprocess

    from cafleet.delivery import authority

    record = execs.get(store, exec_id)
    member_id = None
    if record["started_at"] is None and record["outcome"] is None:  # else claim says why it runs no more
        authority.require_own_pane(store, environ, record["member_id"], f"exec {exec_id}")
        member_id = record["member_id"]
    record = execs.claim(store, exec_id, member_id, runner_identity())
    try:
        cwd = os.getcwd()
    except OSError:
        cwd = None
    # Signals that would end this process before it records the status are passed on to
    # the command instead (a closed pane's SIGHUP, a SIGTERM); Ctrl-C reaches both anyway.
    child: list = []

    def forward(signum, _frame):
        if child:
            with contextlib.suppress(OSError):
                child[0].send_signal(signum)

    for signum in (signal.SIGHUP, signal.SIGTERM):
        signal.signal(signum, forward)
    signal.signal(signal.SIGINT, lambda _signum, _frame: None)  # the command gets it from the terminal
    try:
        child.append(subprocess.Popen(["/bin/sh", "-c", record["command"]], cwd=cwd, env=dict(environ)))
    except OSError as error:
        status = 127
        out(f"Error: the command could not be started ({error}).")
    else:
        while True:
            try:
                code = child[0].wait()
                break
            except InterruptedError:
                continue
        status = 128 - code if code < 0 else code
    store_record = execs.finish(store, exec_id, status)
    out(f"[cafleet exec {exec_id} ended: {execs.status_text(store_record['exit_status'])}]")
    return status if 0 <= status < 256 else 1


class Watcher:
    """Moves a fleet's execs on (see the module's text); ``only``: one exec alone (``member
    exec --wait`` with the keeper off or not yet at it)."""

    def __init__(
        self, store: Store, settings, fleet_id: int, say=None, only: int | None = None, hooks: Hooks = NO_HOOKS
    ) -> None:
        self.store = store
        self.hooks = hooks
        self.settings = settings
        self.fleet_id = fleet_id
        self.say = say or (lambda _: None)
        self.only = only
        self.start_after, self.grace = settings.exec_start_after, settings.exec_grace
        self.retries: dict[int, list] = {}  # exec id -> [failures, next try (monotonic), last reason]

    def round(self) -> float | None:
        """One look at every exec in flight; when the next look is due (monotonic), or None."""
        due: float | None = None
        records = execs.in_flight(self.store, self.fleet_id)
        if self.only is not None:
            records = [r for r in records if r["exec_id"] == self.only]
        for record in records:
            next_due = self.step(record)
            if next_due is not None:
                due = next_due if due is None else min(due, next_due)
        for record in execs.nudges_due(self.store, self.fleet_id, clock.from_epoch(time.time() - self.grace)):
            if self.only is None or record["exec_id"] == self.only:
                self.nudge(record)
        return due

    def step(self, record: dict) -> float | None:
        exec_id = record["exec_id"]
        if record["state"] == "created":
            entry = self.retries.get(exec_id)
            if entry is not None and entry[1] > time.monotonic():
                return entry[1]
            failure = dispatch(self.store, self.settings, exec_id, wait_for_lock=False, hooks=self.hooks)
            if execs.get(self.store, exec_id)["state"] != "created":
                self.retries.pop(exec_id, None)
                self.say(f"typed exec {exec_id}'s line into member {record['member_id']}'s pane")
                return time.monotonic() + 0.5
            entry = self.retries.setdefault(exec_id, [0, 0.0, None])
            entry[0] += 1
            entry[1] = time.monotonic() + min(MAX_RETRY, FIRST_RETRY * 2 ** (entry[0] - 1))
            reason = failure or "its pane-input lock is held by another process"
            if reason != entry[2]:
                entry[2] = reason
                self.say(f"exec {exec_id} not typed yet into member {record['member_id']}'s pane: {reason}; retrying")
            return entry[1]
        if record["state"] == "dispatched":
            waited = time.time() - (clock.epoch_or_none(record["dispatched_at"]) or time.time())
            if waited >= self.start_after:
                why = (
                    f"`cafleet member exec-run {exec_id}` did not start within {self.start_after:g} s of its line "
                    "being typed (does the member's shell find `cafleet` on its PATH? codex runs `!` commands in "
                    "a login shell, whose profile sets PATH)"
                )
                if execs.give_up(self.store, exec_id, execs.NEVER_STARTED, why) is not None:
                    self.say(f"exec {exec_id} never started")
                return None
            return time.monotonic() + min(1.0, self.start_after - waited)
        if record["state"] == "running":
            if vanished(record["runner"]):
                why = "the process that ran it is gone (killed, or its pane closed)"
                if execs.give_up(self.store, exec_id, execs.VANISHED, why) is not None:
                    self.say(f"exec {exec_id} vanished without an exit status")
                return None
            return time.monotonic() + 1.0
        return None

    def nudge(self, record: dict) -> None:
        """Once the grace period is over: the member took a turn of its own (nothing to
        say), or it is told to go on with the output."""
        if self.took_a_turn(record):
            execs.mark_nudged(self.store, record["exec_id"])
            return
        failure = self.type_nudge(record)
        if failure is None:
            execs.mark_nudged(self.store, record["exec_id"])
            self.say(f"told member {record['member_id']} to continue with exec {record['exec_id']}'s output")

    def took_a_turn(self, record: dict) -> bool:
        from cafleet.broker import members
        from cafleet.delivery.supervision import liveness

        member_id = record["member_id"]
        row = self.store.execute(
            "SELECT EXISTS (SELECT 1 FROM messages WHERE from_member_id = ? AND created_at > ?) OR EXISTS "
            "(SELECT 1 FROM messages WHERE to_member_id = ? AND status_state = 'completed' AND status_timestamp > ?)",
            (member_id, record["finished_at"], member_id, record["finished_at"]),
        ).fetchone()
        if row[0]:
            return True
        try:
            member = members.get_member(self.store, member_id)
        except CafleetError:
            return True  # gone: nobody to tell
        if member["status"] != "active":
            return True
        state, detail = liveness.pane_state(member, liveness.MuxPool(), float("inf"))
        return (state == liveness.ALIVE and detail == "working") or state == liveness.DEAD

    def type_nudge(self, record: dict) -> str | None:
        from cafleet.broker import notifications
        from cafleet.delivery.keystrokes import lock, submit
        from cafleet.delivery.keystrokes.placement import reach
        from cafleet.errors import LockTimeout

        target = notifications.notification_target(self.store, record["member_id"])
        if target is None:
            execs.mark_nudged(self.store, record["exec_id"])
            return "no pane"
        text = NUDGE.format(exec_id=record["exec_id"], status=execs.status_text(record["exit_status"]))
        try:
            with lock.placement_lock(self.store.locks, target, 0, self.hooks) as held:
                submit.type_prompt(
                    held.guard(reach(target)),
                    target["pane_id"],
                    text,
                    target["coding_agent"],
                    pacing=submit.Pacing(self.settings.submit_settle),
                    hooks=self.hooks,
                )
        except LockTimeout:
            return "busy"
        except (CafleetError, OSError) as error:
            return str(error)
        return None


def wait(store: Store, settings, exec_id: int, interval: float = 0.25, hooks: Hooks = NO_HOOKS) -> dict:
    """Block until the exec ended (finished, never started, vanished); its record. Moves
    this exec on itself meanwhile (the keeper may be off)."""
    from cafleet.errors import DatabaseGone

    record = execs.get(store, exec_id)
    watcher = Watcher(store, settings, record["fleet_id"], only=exec_id, hooks=hooks)
    while record["outcome"] is None:
        due = None
        try:
            due = watcher.round()
            record = execs.get(store, exec_id)
        except DatabaseGone:
            raise
        except DatabaseError:  # busy for a while: the exec goes on, and so does the wait
            pass
        if record["outcome"] is not None:
            break
        pause = interval if due is None else max(0.05, min(interval, due - time.monotonic()))
        time.sleep(pause)
    return record
