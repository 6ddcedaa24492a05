"""The fleet keeper: one resident process per fleet that delivers every owed preview as
soon as the recipient's pane can take it, with no command running (docs/delivery.md,
"The fleet keeper").

``cafleet fleet keep FLEET_ID`` runs it (``fleet create`` and any command that leaves a
preview owed start it detached when none runs: :mod:`cafleet.delivery.supervision.keeper_control`, which also
holds its lock and its record). It runs the one drain (:func:`cafleet.delivery.keystrokes.drain.drain`)
with the seed's rules unchanged: oldest first, revalidated under the pane-input lock,
stamped only after a confirmed submission. It only adds *when* the drain runs:

- it sleeps on the store's change waiter (:class:`cafleet.store.changes.Changes`: ``PRAGMA
  data_version`` every :data:`WAKE` s on SQLite, LISTEN/NOTIFY on PostgreSQL) and, when
  woken, reads which members of the fleet are owed a preview (one query);
- a member owed something is tried at once; while its pane cannot take the preview (a
  prompt awaiting its user, no input box yet, a person's text in the box, its pane lock
  busy, its host unreachable) it is tried again after a back-off of its own:
  :data:`FIRST_RETRY` s, doubling to :data:`MAX_RETRY` s, plus twice what the failed
  attempt took (a host that takes seconds to time out is not retried back to back). A
  pane becoming ready is not a database change, so this short poll of the panes that are
  owed something is what notices it; the panes of members owed nothing are never read;
- it checks that its fleet is live on every wake-up (one query), and that its Director's
  pane is still the one recorded: every :data:`DIRECTOR_LOOK` s in ``/proc`` (the
  processes the pane's recorded identity names: the tmux server and the pane's process, or
  herdr's shell with its start time; no subprocess), and every :data:`DIRECTOR_CHECK` s,
  or at once when that look finds one gone, with the multiplexer itself (identity
  checked). On PostgreSQL it also checks every :data:`DIRECTOR_LOOK` s, and after any
  database error, that its lock's session is still open; once it is not, it takes the lock
  again on a new session (:class:`LockRetaker`), or ends rather than run beside a second one;
- it beats (:class:`Heartbeat`): every :func:`keeper_control.beat_every
  <cafleet.delivery.supervision.keeper_control.beat_every>` s (5 by default) from the loop itself, so that a
  keeper stopped (SIGSTOP) or hung in a call stops beating and its readers call it stalled.

It also keeps each member's usage current (docs/usage.md, "Stored totals"): every
:data:`USAGE_EVERY` s it reads what is new in the records of the fleet's members that have a
usage source (only the bytes appended since the last read, from the offsets stored with the
totals) and stores their totals, so that the budget gate, the WebUI and ``fleet watch`` read
one row per member instead of the agent's files. A fleet with no such member costs one
query; a member whose files did not change costs a ``stat`` per file and no write.

Every ``CAFLEET_NOTICE_INTERVAL`` s it also looks at every member's pane and puts a notice
in the Director's inbox for each new trouble (:mod:`cafleet.delivery.supervision.notices`). And it moves
each ``member exec`` of the fleet on (:class:`cafleet.delivery.execs.Watcher`): types its line
as soon as the pane can take it, gives up on one that never started or whose process
vanished (a notice each), and nudges a member that took no turn after one ended.

Each try takes the pane's lock once without waiting (``wait_for_lock=False``): a busy pane
is being typed into by another process, and is tried again after its back-off.

It ends, with a last log line ``keeper for fleet F ended: <why>``, when the fleet is
deleted, when the Director's pane is gone or no longer its own, on SIGTERM or SIGINT
(between two tries, never while typing), when the database file is deleted or replaced,
or (PostgreSQL) when its lock's session ended. It ignores SIGHUP.

:class:`Deliverer` is the delivering part alone: ``fleet watch`` runs it between its
rounds when the keeper is turned off (``CAFLEET_KEEPER=off``).
"""

from __future__ import annotations

import signal
import time

from cafleet import clock, config
from cafleet.broker import notifications
from cafleet.delivery.keystrokes import drain
from cafleet.delivery.supervision import keeper_control
from cafleet.errors import CafleetError, DatabaseError, DatabaseGone, DatabaseUnreachable, clause
from cafleet.faults import NO_HOOKS
from cafleet.store.changes import RECONNECT_TIMEOUT, Changes, Stopped, StopRequests

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from collections.abc import Callable

    from cafleet.faults import Hooks
    from cafleet.store.protocol import Store

WAKE = 0.25  # seconds between two looks for another process's commit (SQLite)
FIRST_RETRY = 0.25  # seconds before a member whose pane could not take its preview is tried again
MAX_RETRY = 1.0  # the back-off's ceiling: a pane that becomes ready gets its preview within about this
DIRECTOR_LOOK = 2.0  # seconds between two looks in /proc at the Director's pane's processes
DIRECTOR_CHECK = 30.0  # seconds between two full checks of the Director's pane (one multiplexer call)
ERROR_PAUSE = 1.0  # seconds to wait after a database error or an unexpected one before going on
USAGE_EVERY = 2.0  # seconds between two reads of what is new in the members' usage records


class UsageKeeper:
    """Keeps the fleet's stored usage totals current (see the module's text); ``say`` gets
    one line per new problem, not one per round."""

    def __init__(self, store: Store, fleet_id: int, say) -> None:
        self.store = store
        self.fleet_id = fleet_id
        self.say = say
        self.problem = ""

    def round(self) -> int:
        """Read what is new and store it; return the bytes read."""
        from cafleet.delivery import usage
        from cafleet.delivery.spawning import restore

        try:
            read = usage.refresh(self.store, self.fleet_id)[1]
            restore.pin_sessions(self.store, self.fleet_id)  # what `fleet restore` resumes, kept early
        except DatabaseError:
            raise
        except (CafleetError, OSError) as error:
            text = clause(error)
            if text != self.problem:
                self.problem = text
                self.say(f"usage not read: {text}; trying again every {USAGE_EVERY:g} s")
            return 0
        self.problem = ""
        return read


class Deliverer:
    """Delivers the fleet's owed previews through the drain, each recipient on its own
    back-off (see the module's text); ``say`` gets one line per change worth logging."""

    def __init__(self, store: Store, settings: config.Settings, fleet_id: int, say, hooks: Hooks = NO_HOOKS) -> None:
        self.store = store
        self.settings = settings
        self.fleet_id = fleet_id
        self.say = say
        self.hooks = hooks
        self.retries: dict[int, list] = {}  # member id -> [failures so far, next try (monotonic), last reason]
        self.on_delivered: Callable[[int, int], None] | None = None  # for each preview delivered

    def round(self) -> float | None:
        """Try every owed recipient that is due; return when the next one is due
        (``time.monotonic()``), or None when nothing is owed."""
        owed = notifications.recipients_owed_notifications(self.store, self.fleet_id)
        for member_id in set(self.retries) - set(owed):
            del self.retries[member_id]  # ACKed, delivered by another process, or deregistered
        for member_id in owed:
            entry = self.retries.get(member_id)
            if entry is None or entry[1] <= time.monotonic():
                self.attempt(member_id)
        return min((entry[1] for entry in self.retries.values()), default=None)

    def attempt(self, member_id: int) -> None:
        started = time.monotonic()
        stamped: set[int] = set()
        try:
            if notifications.notification_target(self.store, member_id) is None:
                failure: str | None = "its pane is not recorded yet"
            else:
                failure = drain.drain(
                    self.store, self.settings, member_id, set(), stamped, wait_for_lock=False, hooks=self.hooks
                )
        except DatabaseError:
            raise
        except CafleetError as error:  # the drain's own faults are reasons; nothing ends the keeper
            failure = clause(error)
        except OSError as error:
            failure = f"pane input failed with an operating-system error ({error})"
        for message_id in sorted(stamped):
            self.say(f"delivered the preview of message {message_id} to member {member_id}")
            if self.on_delivered is not None:
                self.on_delivered(member_id, message_id)
        owed = notifications.owed_message_ids(self.store, member_id)
        if not owed:
            self.retries.pop(member_id, None)
            return
        entry = self.retries.setdefault(member_id, [0, 0.0, None])
        entry[0] += 1
        took = time.monotonic() - started
        entry[1] = time.monotonic() + min(MAX_RETRY, FIRST_RETRY * 2 ** (entry[0] - 1)) + 2 * took
        reason = failure or "its pane-input lock is held by another process"
        if reason != entry[2]:  # one line per reason, not one per try
            entry[2] = reason
            ids = ", ".join(map(str, owed))
            self.say(f"member {member_id} still owed message{'s' if len(owed) > 1 else ''} {ids}: {reason}; retrying")


def keep(
    store: Store,
    settings: config.Settings,
    fleet_id: int,
    say,
    reconnect: float = RECONNECT_TIMEOUT,
    hooks: Hooks = NO_HOOKS,
) -> str:
    """Run the fleet's keeper until it should end; return why it ended (the caller logs it).

    Returns at once, saying so, when another keeper holds the fleet's lock."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with StopRequests() as stop:  # from its first step, a SIGTERM ends the keeper with its last line
            return _keep(store, settings, fleet_id, say, reconnect, stop, hooks)
    except Stopped as stopped:
        return str(stopped)


def _keep(
    store: Store, settings: config.Settings, fleet_id: int, say, reconnect: float, stop: StopRequests, hooks: Hooks
) -> str:
    problem = keeper_control.director_problem(store, fleet_id)  # the fleet exists (NotFound otherwise)
    if problem is not None:
        return problem
    lock = keeper_control.FleetLock(store, settings, fleet_id)
    try:
        acquired = lock.acquire(clock.now())
    except OSError as error:
        return f"its lock or record in {lock.where.lock.folder} cannot be written ({error})"
    if not acquired:
        other = keeper_control.status(store, settings, fleet_id)
        return f"another keeper already runs for fleet {fleet_id} ({other.describe()}), so this one is not needed"
    try:
        say(f"keeper for fleet {fleet_id} started (database {_shown(settings.database)})")
        # test-only hook (cafleet.faults): said it started, not running yet
        hooks.pause("keep.started")
        return _run(store, settings, fleet_id, lock, say, reconnect, stop, hooks)
    finally:
        lock.release()


def _run(
    store: Store,
    settings: config.Settings,
    fleet_id: int,
    lock: keeper_control.FleetLock,
    say,
    reconnect: float,
    stop: StopRequests,
    hooks: Hooks,
) -> str:
    from cafleet.delivery.execs import Watcher
    from cafleet.delivery.supervision.notices import Noticer
    from cafleet.delivery.supervision.outbox import Outbox

    deliverer = Deliverer(store, settings, fleet_id, say, hooks)
    commands = Watcher(store, settings, fleet_id, say, hooks=hooks)  # `member exec`: typed, judged, nudged
    spend = UsageKeeper(store, fleet_id, say)
    noticer = Noticer(store, settings, fleet_id, say, hooks)
    outbox = Outbox(store, settings, fleet_id, say)  # notices posted out, off the loop's thread
    changes = None
    try:
        opened = _first_changes(store, stop, reconnect, hooks)  # the baseline before the first read
        if isinstance(opened, str):
            return opened
        changes = opened
        retake = LockRetaker(lock, say, reconnect, stop)
        director = DirectorWatch(store, fleet_id, lock, retake)
        heartbeat = Heartbeat(lock, retake, keeper_control.beat_every(settings.keeper_stalled_after))
        next_usage = time.monotonic()
        last_error = ""
        while True:
            try:
                ended = heartbeat.beat()
                if ended is None:
                    ended = director.ended()
                if ended is not None:
                    return ended
                due = deliverer.round()
                exec_due = commands.round()
                if exec_due is not None:
                    due = exec_due if due is None else min(due, exec_due)
                if time.monotonic() >= next_usage:
                    spend.round()
                    next_usage = time.monotonic() + USAGE_EVERY
                stop.check()
                wake = min(director.wake(), next_usage, noticer.round(), heartbeat.due)  # the Director's notices
                wake = min(wake, outbox.round() or wake)  # after the notices: one just posted goes out now
                stop.check()
                changes.wait(until=wake if due is None else min(due, wake))
            except DatabaseGone as gone:
                return clause(gone)
            except DatabaseUnreachable as error:  # the server ended the store's session
                if not lock.held() and (why := retake(error)) is not None:
                    return why
                try:
                    changes.recover(error)  # a new connection and LISTEN, with back-off
                except DatabaseUnreachable as gave_up:
                    return clause(gave_up)
                continue
            except Exception as error:  # noqa: BLE001 -- the database busy or unreachable for a while, or a bug
                if isinstance(error, DatabaseError) and not lock.held() and (why := retake(error)) is not None:
                    return why
                text = clause(error) if isinstance(error, CafleetError) else _internal(error)
                if text != last_error:  # said once, not once a second
                    say(f"{text}; retrying every {ERROR_PAUSE:g} s")
                    last_error = text
                stop.sleep(ERROR_PAUSE)
                continue
            last_error = ""
    finally:
        outbox.close()
        if changes is not None:
            changes.close()


def _first_changes(store: Store, stop: StopRequests, reconnect: float, hooks: Hooks):
    """The keeper's change stream, opened as its loop starts; a database that lets nobody
    in is tried again for ``reconnect`` seconds, as the loop's own reconnection does, and
    then the keeper ends saying so (the returned text) instead of failing with an error."""
    deadline, pause = time.monotonic() + reconnect, 0.1
    while True:
        try:
            return Changes(store, WAKE, stop=stop, reconnect=reconnect, hooks=hooks)
        except DatabaseUnreachable as error:
            if time.monotonic() + pause >= deadline:
                return f"{clause(error)}; gave up reconnecting after {reconnect:.1f} s"
            stop.sleep(pause)
            pause = min(pause * 2, 2.0)


class LockRetaker:
    """When the keeper's lock's session ended (a server restart, a failover to a standby,
    an administrator): the lock taken again on a new session, tried at once and then after
    pauses from 0.1 s doubling to 2 s, for at most ``reconnect`` seconds (the setting the
    keeper's store reconnects by). Never two keepers: taking the lock never waits, so a
    keeper that started meanwhile keeps it and this one ends."""

    def __init__(self, lock: keeper_control.FleetLock, say, reconnect: float, stop: StopRequests) -> None:
        self.lock, self.say, self.reconnect, self.stop = lock, say, reconnect, stop

    def __call__(self, cause: Exception | None) -> str | None:
        """None once the lock is this keeper's again; else why the keeper ends."""
        because = f" ({clause(cause)})" if isinstance(cause, CafleetError) else ""
        deadline, pause = time.monotonic() + self.reconnect, 0.1
        while True:
            try:
                taken = self.lock.retake()
            except (DatabaseError, OSError) as error:
                if time.monotonic() + pause >= deadline:
                    failure = clause(error) if isinstance(error, CafleetError) else str(error)
                    return (
                        f"its lock's database session ended{because} and no new one could be had ({failure}); "
                        f"gave up after {self.reconnect:.1f} s"
                    )
                self.stop.sleep(pause)
                pause = min(pause * 2, 2.0)
                continue
            if not taken:
                return f"its lock's database session ended{because} and another keeper took the lock"
            self.say(f"its lock's database session ended{because}; the lock is taken again on a new session")
            return None


class Heartbeat:
    """The keeper's heartbeat (:meth:`keeper_control.FleetLock.beat
    <cafleet.delivery.supervision.keeper_control.FleetLock.beat>`), every ``every`` seconds, from the loop itself:
    a keeper stopped or hung in a call stops beating. On PostgreSQL a beat that finds the
    lock's session gone takes the lock again (``retake``), or says why the keeper ends."""

    def __init__(self, lock: keeper_control.FleetLock, retake: LockRetaker, every: float) -> None:
        self.lock, self.retake, self.every = lock, retake, every
        self.due = time.monotonic() + every  # the lock was taken (and the record written) just now

    def beat(self) -> str | None:
        """Beat when due; None, or why the keeper ends."""
        now = time.monotonic()
        if now < self.due:
            return None
        self.due = now + self.every
        if self.lock.beat():
            return None
        return self.retake(None)


class DirectorWatch:
    """When the keeper ends because of its Director or its fleet: the Director's processes
    (in /proc) and the lock's session are looked at every ``DIRECTOR_LOOK`` seconds, the
    multiplexer only every ``DIRECTOR_CHECK`` (or at once when a process is gone), and
    whether the fleet was deleted on every other round."""

    def __init__(self, store: Store, fleet_id: int, lock: keeper_control.FleetLock, retake: LockRetaker) -> None:
        self.store, self.fleet_id, self.lock, self.retake = store, fleet_id, lock, retake
        self.processes = keeper_control.director_processes(store, fleet_id)
        self.next_look = time.monotonic() + DIRECTOR_LOOK
        self.next_check = time.monotonic() + DIRECTOR_CHECK

    def wake(self) -> float:
        """When the next look is due."""
        return min(self.next_look, self.next_check)

    def ended(self) -> str | None:
        """Why the keeper ends now, or None."""
        now = time.monotonic()
        if now >= self.next_look:
            if self.processes is not None and not keeper_control.processes_alive(self.processes):
                self.next_check = now  # one is gone: ask the multiplexer why, now
            if not self.lock.held() and (why := self.retake(None)) is not None:
                return why
            self.next_look = now + DIRECTOR_LOOK
        if now >= self.next_check:
            problem = keeper_control.director_problem(self.store, self.fleet_id)
            if problem is not None:
                return problem
            if self.processes is not None and not keeper_control.processes_alive(self.processes):
                self.processes = None  # /proc does not show the pane's processes here: full checks only
            self.next_check = time.monotonic() + DIRECTOR_CHECK
        elif _deleted(self.store, self.fleet_id):
            return f"fleet {self.fleet_id} was deleted"
        return None


def _internal(error: Exception) -> str:
    return f"internal error ({type(error).__name__}: {error})"


def _deleted(store: Store, fleet_id: int) -> bool:
    from cafleet.broker import fleets

    return fleets.get_fleet(store, fleet_id)["deleted_at"] is not None


def _shown(database: str) -> str:
    from cafleet.credentials import redact

    return redact(database)
