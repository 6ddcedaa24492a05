"""Which keeper runs for a fleet, and starting one (docs/delivery.md, "The fleet keeper").

The keeper itself (:mod:`cafleet.delivery.supervision.keeper`) is one resident process per fleet. This
module is what every other command needs of it, kept apart so that a command can ask
"does one run?" without loading the keeper's loop (and so that the drain, which the keeper
runs, can ask it without an import cycle).

The lock, the record and the log live in the database's lock space (``store.locks``,
:meth:`~cafleet.store.protocol.LockSpace.keeper`), which the store package chooses; what
follows is what each space does.

**One per fleet: the lock.** A keeper runs only while it holds its fleet's keeper lock, and
the lock dies with its holder:

- SQLite: an ``flock`` on ``<lock folder>/keeper-<tag>-<fleet id>.lock``, in the folder of
  the pane-input locks (beside the resolved database file); ``<tag>`` is a hash of the
  resolved database path, so two databases in one folder never share a keeper. The kernel
  releases it when the process dies, however it dies.
- PostgreSQL: a session advisory lock (key: BLAKE2b of ``fleet-keeper``, the schema and the
  fleet id) held by a connection the keeper opens for nothing else; the server releases it
  when that session ends (the process died, its host vanished: TCP keepalives, seconds).

**Who holds it: the record.** ``fleet show``, ``doctor``, ``fleet watch`` and the not-notified
lines read who runs (pid, since, host) without touching the lock (a reader that took it
for an instant could make a starting keeper believe another one runs):

- SQLite: ``keeper-<tag>-<fleet id>.state`` beside the lock, written (atomically: a temporary
  file renamed over it) by the holder once it holds the lock, removed when it ends. It
  reads as running only while a process with that pid *and the recorded start time*
  (``/proc/<pid>/stat``, so a reused pid does not count) is alive and not a zombie: the
  record of a keeper killed with SIGKILL reads "not running".
- PostgreSQL: the holder's lock connection carries its record in its ``application_name``
  (``cafleet-keeper <pid> <since, epoch seconds> <host>``); a reader asks ``pg_locks`` which
  session holds the fleet's keeper lock and ``pg_stat_activity`` for that session's name.
  The record ends with the session: it can never outlive its keeper.

**Whether it still works: the heartbeat.** A process that holds the lock may do nothing (stopped
with SIGSTOP, hung in a call): the keeper's loop itself beats every :func:`beat_every` s
(:meth:`FleetLock.beat`), and a reader calls a keeper that has not beaten for
``CAFLEET_KEEPER_STALLED_AFTER`` s (30) *stalled*; the heartbeat rides on the record, so
no reader needs a table or a write of its own:

- SQLite: the record's modification time (``os.utime`` on the state file: no write to the
  database, so no other process's change waiter wakes for it);
- PostgreSQL: the lock session's ``pg_stat_activity.state_change``, moved by a ``SELECT 1`` on
  that session (the server's own clock on both sides, so no clock skew between hosts).

**Starting one.** :func:`spawn` runs ``python -m cafleet fleet keep FLEET_ID`` detached: its
own session (``start_new_session``: no controlling terminal, not in the pane's process
group, so closing the pane that started it does not signal it), standard input closed,
standard output and error appended to ``keeper-<tag>-<fleet id>.log`` (beside the lock on
SQLite; under ``$XDG_STATE_HOME/cafleet/keepers`` for PostgreSQL, whose locks have no
folder), working directory ``/``; the keeper ignores SIGHUP itself. :func:`ensure` then
waits (at most :data:`STARTING` s, a few tenths of a second in practice) until it holds its
lock or has ended, so that what the command prints is what happens: a keeper that runs, or
why none does and what fixes it (:attr:`Keeper.why`). Two keepers started at once meet on
the lock and the second ends at once.
"""

from __future__ import annotations

import os

from cafleet import config
from cafleet.errors import clause
from cafleet.faults import PROGRAM

TYPE_CHECKING = False  # `typing` stays off the send path, which reads the record
if TYPE_CHECKING:
    from cafleet.store.protocol import Store

LOG_LIMIT = 1 << 20  # bytes: a larger log is moved to <log>.1 when the next keeper starts
HEARTBEAT = 5.0  # seconds between two heartbeats of a keeper, at most (a quarter of the stalled threshold)
RUNNING, STALLED, NOT_RUNNING = "running", "stalled", "not running"


def beat_every(stalled_after: float) -> float:
    """Seconds between two heartbeats of a keeper whose readers call it stalled after
    ``stalled_after`` s without one: four beats fit in that span, at most one every
    :data:`HEARTBEAT` s (the keeper's idle cost)."""
    return min(HEARTBEAT, stalled_after / 4)


class Keeper:
    """What is known of a fleet's keeper: its ``state`` (``running``; ``stalled``: it holds
    its lock but has not beaten for ``CAFLEET_KEEPER_STALLED_AFTER`` s; ``not running``),
    ``running`` (the state is running), and while one holds the lock its ``pid`` (None when
    unknown), ``since`` (ISO-8601 UTC), ``host``, ``log`` (its log file's path) and
    ``heartbeat_age`` (seconds since its last heartbeat; None when unknown). ``why``, set by
    :func:`ensure` when none runs (or it is stalled): one sentence saying why, and what fixes it."""

    __slots__ = ("heartbeat_age", "host", "log", "pid", "since", "state", "why")

    def __init__(self, running: bool, pid=None, since=None, host=None, log=None, heartbeat_age=None, why=None) -> None:
        self.state = RUNNING if running else NOT_RUNNING
        self.pid = pid
        self.since = since
        self.host = host
        self.log = log
        self.heartbeat_age = heartbeat_age
        self.why = why

    @property
    def running(self) -> bool:
        return self.state == RUNNING

    def as_dict(self) -> dict:
        age = self.heartbeat_age
        return {
            "running": self.running,
            "state": self.state,
            "pid": self.pid,
            "since": self.since,
            "host": self.host,
            "log": self.log,
            "heartbeat_age": None if age is None else round(age, 1),
        }

    def describe(self) -> str:
        """``running, pid 123 since … (log …)``, ``stalled, pid 123 since …: no heartbeat for
        … (… what to do …) (log …)`` or ``not running``."""
        if self.state == NOT_RUNNING:
            return "not running"
        text = self.state + (f", pid {self.pid}" if self.pid is not None else "")
        if self.since:
            text += f" since {self.since}"
        if self.host and self.host != _hostname():
            text += f" on {self.host}"
        if self.state == STALLED:
            text += f": no heartbeat for {self.heartbeat_age:.0f} s (stopped or hung: {self.remedy()})"
        return text + (f" (log {self.log})" if self.log else "")

    def remedy(self) -> str:
        """What to do about a stalled keeper."""
        if self.pid is None:
            return "end it, and the next command starts another"
        where = f" on {self.host}" if self.host and self.host != _hostname() else ""
        return (
            f"`kill -CONT {self.pid}`{where} if it was stopped, else `kill {self.pid}` "
            "and the next command starts another"
        )


class Where:
    """Where a fleet's keeper lock, record and log are, for one store: ``lock``, the
    :class:`~cafleet.store.protocol.KeeperLock` of the store's lock space."""

    __slots__ = ("fleet_id", "lock", "log_path")

    def __init__(self, store: Store, settings: config.Settings, fleet_id: int) -> None:
        self.fleet_id = fleet_id
        # where the database is (not how it was spelled) and, on PostgreSQL, its schema: the lock's key
        self.lock = store.locks.keeper(fleet_id, store.location_key(), store.schema, settings.environ)
        self.log_path = self.lock.log_path


def _hostname() -> str:
    return os.uname().nodename  # what socket.gethostname() returns, without importing socket


# --- reading the record -------------------------------------------------------------------


def status(store: Store, settings: config.Settings, fleet_id: int) -> Keeper:
    """Whether a keeper runs for the fleet now, and which (never touches the lock): one
    that holds the lock but has not beaten for ``CAFLEET_KEEPER_STALLED_AFTER`` s is stalled."""
    where = Where(store, settings, fleet_id)
    record = where.lock.holder(store)
    if record is None:
        return Keeper(False)
    # A record that can outlive its keeper (a file) carries the holder's start time: it reads as
    # running only while a process with that pid and that start time is alive and not a
    # zombie (dead, a zombie, or its pid now names another process: not running).
    start = record.get("start")
    if start is not None and record["host"] == _hostname() and process_start(record["pid"] or 0) != start:
        return Keeper(False)
    found = Keeper(True, record["pid"], record["since"], record["host"], record["log"], record["age"])
    age = found.heartbeat_age
    if age is not None and age > settings.keeper_stalled_after:
        found.state = STALLED
    return found


def process_start(pid: int) -> str | None:
    """The start time of a live process (clock ticks since boot, ``/proc/<pid>/stat``
    field 22); None when there is no such process or it is a zombie."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if not fields or fields[0] in ("Z", "X", "x"):
        return None
    return fields[19] if len(fields) > 19 else None


# --- holding the lock (the keeper's side) --------------------------------------------------


class FleetLock:
    """The keeper's hold on its fleet's keeper lock, and its record while it holds it."""

    def __init__(self, store: Store, settings: config.Settings, fleet_id: int) -> None:
        self.where = Where(store, settings, fleet_id)
        self.busy_timeout = store.busy_timeout
        self.record: dict | None = None

    def acquire(self, since: str) -> bool:
        """Take the lock without waiting and publish this process's record; False when
        another keeper holds it."""
        record = {
            "pid": str(os.getpid()),
            "start": process_start(os.getpid()) or "",
            "since": since,
            "host": _hostname(),
            "log": self.where.log_path,
        }
        if not self.where.lock.acquire(record, self.busy_timeout):
            return False
        self.record = record
        return True

    def beat(self) -> bool:
        """The keeper's heartbeat (see the module's text): the record's modification time
        moved (a record removed by hand is written again), or on PostgreSQL one round trip
        on the lock's session. False when that session is gone (and the lock with it)."""
        return self.where.lock.beat()

    def retake(self) -> bool:
        """After the lock's session ended (a server restart, a failover to a standby, an
        administrator): let the dead session go and take the lock again on a new one,
        without waiting, with the same record. False when another keeper took it meanwhile;
        raises :class:`~cafleet.errors.DatabaseError` while no session can be had."""
        since = self.record["since"] if self.record is not None else ""
        self.release()
        return self.acquire(since)

    def held(self) -> bool:
        """Whether the lock is still ours: always, once taken, on SQLite; on PostgreSQL,
        whether the lock's session is still open (no round trip while nothing arrived,
        unless the server ends idle sessions)."""
        return self.where.lock.alive()

    def release(self) -> None:
        """Withdraw the record (if it is still ours) and let go of the lock."""
        self.where.lock.release()


# --- the Director's pane ------------------------------------------------------------------


def director_problem(store: Store, fleet_id: int) -> str | None:
    """Why the fleet's keeper should not run (fleet deleted, its Director's pane gone or
    stale), or None. A multiplexer that does not answer is not a reason: it may be busy."""
    from cafleet.broker import fleets, members
    from cafleet.errors import CafleetError, DamagedPlacement, PaneStale

    fleet = fleets.get_fleet(store, fleet_id)
    if fleet["deleted_at"] is not None:
        return f"fleet {fleet_id} was deleted"
    director = fleet["director_member_id"]
    placement = members.get_member(store, director)["placement"] if director is not None else None
    if placement is None or placement["pane_id"] is None:
        return f"fleet {fleet_id}'s Director has no pane"
    from cafleet.delivery.keystrokes.placement import reach

    pane = placement["pane_id"]
    try:
        if not reach(placement).pane_exists(pane):
            return f"the Director's pane {pane} is gone"
    except (PaneStale, DamagedPlacement) as error:
        return f"the Director's pane is no longer its own ({clause(error)})"
    except CafleetError:
        return None
    return None


def director_processes(store: Store, fleet_id: int) -> list[tuple[int, str | None]] | None:
    """The processes whose life the Director's pane identity records, as (pid, start time
    or None), for a cheap ``/proc`` look between two full checks: tmux ``<server pid>:
    <server start>:<pane pid>`` gives the server and the pane's process, herdr ``<shell
    pid>:<start ticks>`` the shell with its start. None when there is nothing to look at
    (a legacy placement, a remote pane)."""
    from cafleet.broker import fleets, members

    director = fleets.get_fleet(store, fleet_id)["director_member_id"]
    placement = members.get_member(store, director)["placement"] if director is not None else None
    if placement is None or placement["session"].startswith("ssh://"):
        return None
    parts = (placement.get("identity") or "").split(":")
    if not all(part.isdigit() for part in parts):
        return None
    if placement["backend"] == "tmux" and len(parts) == 3:
        return [(int(parts[0]), None), (int(parts[2]), None)]
    if placement["backend"] == "herdr" and len(parts) == 2:
        return [(int(parts[0]), parts[1])]
    return None


def processes_alive(processes: list[tuple[int, str | None]]) -> bool:
    """Whether each (pid, start) is a live process (with that start time, when given)."""
    for pid, start in processes:
        found = process_start(pid)
        if found is None or (start is not None and found != start):
            return False
    return True


def director_here(store: Store, settings: config.Settings, fleet_id: int) -> bool:
    """Whether this process runs on the Director's host (a keeper must run there)."""
    from cafleet.broker import fleets, members

    if settings.host:
        return False  # a member's pane on another host
    director = fleets.get_fleet(store, fleet_id)["director_member_id"]
    placement = members.get_member(store, director)["placement"] if director is not None else None
    return placement is not None and not placement["session"].startswith("ssh://")


# --- starting one -------------------------------------------------------------------------

# What this process started: (pid, when). It is not started again while that process lives
# or for STARTING s after (it may still be taking the lock and writing its record); a
# long-lived process (the WebUI, `fleet watch`, `message wait`) starts another once it has died.
_STARTED: dict[tuple[str, int], tuple[int, float]] = {}
STARTING = 5.0  # seconds a command waits, at most, for the keeper it started to hold its lock or end
# A keeper this process started that ended at once: why, and when. A long-lived process does
# not start another for AGAIN_AFTER s (`fleet watch` would otherwise start one every round).
_ENDED: dict[tuple[str, int], tuple[str, float]] = {}
AGAIN_AFTER = 30.0


def ensure(store: Store, settings: config.Settings, fleet_id: int, program: tuple[str, ...] = PROGRAM) -> Keeper:
    """The fleet's keeper: the one that runs; else one started here (by ``program``: how this
    process runs cafleet again, :attr:`cafleet.faults.Hooks.program`), when the setting allows,
    this is the Director's host and the Director's pane is there, once it holds its lock.
    When none runs (a stalled one included, which holds the lock: a second would end at
    once) its :attr:`~Keeper.why` says why and what fixes it."""
    found = status(store, settings, fleet_id)
    if found.state == STALLED:
        found.why = (
            f"The fleet keeper of fleet {fleet_id} is stalled (pid {'unknown' if found.pid is None else found.pid}, "
            f"no heartbeat for {found.heartbeat_age:.0f} s: stopped or hung), so it retries nothing until it runs "
            f"again: {found.remedy()}"
        )
    if found.state != NOT_RUNNING:
        return found
    if not settings.keeper:  # CAFLEET_KEEPER=off: commands start none
        found.why = "The fleet keeper is off (CAFLEET_KEEPER=off)"
        return found
    import time

    where = Where(store, settings, fleet_id)
    key = (where.log_path, fleet_id)
    if key in _STARTED:
        pid, when = _STARTED[key]
        if process_start(pid) is not None or time.monotonic() - when < STARTING:
            return Keeper(True, pid, None, _hostname(), where.log_path)
    if key in _ENDED and time.monotonic() - _ENDED[key][1] < AGAIN_AFTER:
        return Keeper(False, why=_ENDED[key][0])
    if not director_here(store, settings, fleet_id):
        where_not = (
            "on a member's host (CAFLEET_HOST is set)"
            if settings.host
            else "on this host (the Director's pane, which a keeper runs beside, is elsewhere or not recorded)"
        )
        return Keeper(
            False,
            why=(
                f"No fleet keeper runs for fleet {fleet_id}, and none is started {where_not}: "
                "any command on the Director's host starts one"
            ),
        )
    problem = director_problem(store, fleet_id)
    if problem is not None:
        return Keeper(False, why=f"No fleet keeper can run for fleet {fleet_id}: {problem}")
    try:
        log = open_log(where.log_path)
    except OSError as error:
        return Keeper(False, why=_unwritable(where, fleet_id, error))
    try:
        child = spawn(settings.environ, log, fleet_id, program, drop=_untrusted(store, settings))
    except OSError as error:
        return Keeper(False, why=f"No fleet keeper could be started for fleet {fleet_id}: {error}")
    finally:
        os.close(log)
    _STARTED[key] = (child.pid, time.monotonic())
    return _started(store, settings, fleet_id, child, where)


# Where a fleet's notices are posted, and the link they carry (docs/delivery.md, "Notices
# posted out"): a keeper takes them from the Director's or the person's environment only, so
# that a member cannot send the fleet's notices (other members' dialogs) elsewhere by
# starting the keeper with its own.
DIRECTORS_SETTINGS = ("CAFLEET_NOTIFY_URL", "CAFLEET_PUBLIC_URL")


def _untrusted(store: Store, settings: config.Settings) -> tuple[str, ...]:
    """The settings a keeper started by this command must not inherit: the Director's own
    when a member runs the command (by its process tree, whatever its variables say)."""
    if not any(name in settings.environ for name in DIRECTORS_SETTINGS):
        return ()
    from cafleet.delivery import authority

    return DIRECTORS_SETTINGS if authority.find(store, settings.environ).is_member else ()


def _unwritable(where: Where, fleet_id: int, error: OSError) -> str:
    return f"No fleet keeper could be started for fleet {fleet_id}: {where.lock.unwritable(error)}"


def _started(store: Store, settings: config.Settings, fleet_id: int, child, where: Where) -> Keeper:
    """Wait, at most :data:`STARTING` s, until the keeper just started holds its lock (or
    another one does) or has ended; still starting after that, it is taken as running."""
    import time

    deadline, pause = time.monotonic() + STARTING, 0.005
    while True:
        ended = child.poll() is not None  # before the look: a keeper that gave way to another is seen with it
        found = status(store, settings, fleet_id)
        if found.state != NOT_RUNNING:
            return found
        if ended:
            key = (where.log_path, fleet_id)
            _STARTED.pop(key, None)
            why = last_words(where.log_path, fleet_id, child.pid) or f"it exited with status {child.returncode}"
            said = f"The fleet keeper started for fleet {fleet_id} ended at once: {why} (log {where.log_path})"
            _ENDED[key] = (said, time.monotonic())
            return Keeper(False, why=said)
        if time.monotonic() >= deadline:
            return Keeper(True, child.pid, None, _hostname(), where.log_path)
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def last_words(log_path: str, fleet_id: int, pid: int) -> str | None:
    """Why the keeper ``pid`` ended, from its last line in its log; None when it wrote none."""
    marker = f" keeper[{pid}] keeper for fleet {fleet_id} ended: "
    try:
        with open(log_path, "rb") as handle:
            handle.seek(max(0, os.fstat(handle.fileno()).st_size - 16384))
            tail = handle.read().decode("utf-8", "replace")
    except OSError:
        return None
    for line in reversed(tail.splitlines()):
        _head, found, why = line.partition(marker)
        if found:
            return why
    return None


def open_log(log_path: str) -> int:
    """The keeper's log, opened for appending (its folder made first; a log over
    :data:`LOG_LIMIT` moved to ``<log>.1``): a descriptor the caller closes."""
    os.makedirs(os.path.dirname(log_path), mode=0o700, exist_ok=True)
    try:
        if os.path.getsize(log_path) > LOG_LIMIT:
            os.replace(log_path, log_path + ".1")
    except OSError:
        pass
    return os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)


def spawn(environ, log: int, fleet_id: int, program=None, drop: tuple[str, ...] = ()):
    """Start ``python -m cafleet fleet keep FLEET_ID`` detached (see the module's text), its
    output appended to ``log`` (:func:`open_log`); returns the child (a ``Popen``) without
    waiting for it. ``program``: how this process runs cafleet (its test hooks',
    :mod:`cafleet.faults`; by default ``python -m cafleet``); ``drop``: variables of
    ``environ`` it does not get."""
    import subprocess

    from cafleet.config import child_environ
    from cafleet.faults import PROGRAM

    return subprocess.Popen(
        [*(program or PROGRAM), "fleet", "keep", str(fleet_id)],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
        env=child_environ(environ, drop=drop),
        cwd="/",
        start_new_session=True,
        close_fds=True,
    )


def stop(store: Store, settings: config.Settings, fleet_id: int, timeout: float = 10.0) -> int | None:
    """End the fleet's keeper on this host with SIGTERM and wait (at most ``timeout`` s)
    until it is gone; returns its pid, or None when none ran here."""
    import signal
    import time

    found = status(store, settings, fleet_id)
    if found.state == NOT_RUNNING or found.pid is None or found.host not in (None, _hostname()):
        return None
    start = process_start(found.pid)
    if start is None:
        return None
    try:
        os.kill(found.pid, signal.SIGTERM)
    except OSError:
        return None
    deadline = time.monotonic() + timeout
    while process_start(found.pid) == start and time.monotonic() < deadline:
        time.sleep(0.02)
    return found.pid
