"""Which keeper runs for a fleet, and starting one (docs/delivery.md, "The fleet keeper").

The keeper itself (:mod:`cafleet.delivery.keeper`) is one resident process per fleet. This
module is what every other command needs of it, kept apart so that a command can ask
"does one run?" without loading the keeper's loop (and so that the drain, which the keeper
runs, can ask it without an import cycle).

**One per fleet: the lock.** A keeper runs only while it holds its fleet's keeper lock, and
the lock dies with its holder:

- SQLite: an ``flock`` on ``<lock folder>/keeper-<tag>-<fleet id>.lock``, in the folder of
  the pane-input locks (beside the resolved database file, :func:`cafleet.config.lock_dir`);
  ``<tag>`` is a hash of the resolved database path, so two databases in one folder never
  share a keeper. The kernel releases it when the process dies, however it dies.
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

**Starting one.** :func:`spawn` runs ``python -m cafleet fleet keep FLEET_ID`` detached: its
own session (``start_new_session``: no controlling terminal, not in the pane's process
group, so closing the pane that started it does not signal it), standard input closed,
standard output and error appended to ``keeper-<tag>-<fleet id>.log`` (beside the lock on
SQLite; under ``$XDG_STATE_HOME/cafleet/keepers`` for PostgreSQL, whose locks have no
folder), working directory ``/``; the keeper ignores SIGHUP itself. The spawner never
waits for it. Two keepers started at once meet on the lock and the second ends at once.
"""

from __future__ import annotations

import os

from cafleet import config
from cafleet.errors import clause

TYPE_CHECKING = False  # `typing` stays off the send path, which reads the record
if TYPE_CHECKING:
    from typing import Any

    from cafleet.store.protocol import Store

LOG_LIMIT = 1 << 20  # bytes: a larger log is moved to <log>.1 when the next keeper starts
APP_NAME = "cafleet-keeper"


class Keeper:
    """What is known of a fleet's keeper: ``running``, and while it runs its ``pid`` (None
    when unknown), ``since`` (ISO-8601 UTC), ``host`` and ``log`` (its log file's path)."""

    __slots__ = ("running", "pid", "since", "host", "log")

    def __init__(self, running: bool, pid=None, since=None, host=None, log=None) -> None:
        self.running = running
        self.pid = pid
        self.since = since
        self.host = host
        self.log = log

    def as_dict(self) -> dict:
        return {"running": self.running, "pid": self.pid, "since": self.since, "host": self.host, "log": self.log}

    def describe(self) -> str:
        """``running, pid 123 since … (log …)`` or ``not running``."""
        if not self.running:
            return "not running"
        text = "running" + (f", pid {self.pid}" if self.pid is not None else "")
        if self.since:
            text += f" since {self.since}"
        if self.host and self.host != _hostname():
            text += f" on {self.host}"
        return text + (f" (log {self.log})" if self.log else "")


class Where:
    """Where a fleet's keeper lock, record and log are, for one store."""

    __slots__ = ("fleet_id", "postgres", "lock_path", "state_path", "log_path", "key", "url", "schema")

    def __init__(self, store: Store, settings: config.Settings, fleet_id: int) -> None:
        import hashlib

        db_path = settings.db_path

        self.fleet_id = fleet_id
        from cafleet.store import is_postgres_url

        self.postgres = is_postgres_url(db_path)
        self.url = db_path
        self.schema = store.schema  # read on PostgreSQL only: the lock's key
        identity = store.location_key()  # where the database is, not how it was spelled
        folder = _state_home(settings.environ) if self.postgres else settings.lock_dir
        tag = hashlib.sha256(identity.encode("utf-8", "surrogateescape")).hexdigest()[:16]
        base = os.path.join(folder, f"keeper-{tag}-{fleet_id}")
        self.lock_path, self.state_path, self.log_path = base + ".lock", base + ".state", base + ".log"
        self.key = 0
        if self.postgres:
            from cafleet.store.postgres import lock_key

            self.key = lock_key("fleet-keeper", self.schema, str(fleet_id))


def _state_home(environ) -> str:
    state = environ.get("XDG_STATE_HOME", "")
    if not os.path.isabs(state):
        home = environ.get("HOME", "")
        state = os.path.join(home if os.path.isabs(home) else "/tmp", ".local", "state")
    return os.path.join(state, "cafleet", "keepers")


def _hostname() -> str:
    import socket

    return socket.gethostname()


# --- reading the record -------------------------------------------------------------------


def status(store: Store, settings: config.Settings, fleet_id: int) -> Keeper:
    """Whether a keeper runs for the fleet now, and which (never touches the lock)."""
    where = Where(store, settings, fleet_id)
    if where.postgres:
        return _pg_status(store, where)
    record = read_record(where.state_path)
    if record is None:
        return Keeper(False)
    try:
        pid, start = int(record["pid"]), record["start"]
    except (KeyError, ValueError):
        return Keeper(False)
    host = record.get("host")
    if host == _hostname() and process_start(pid) != start:
        return Keeper(False)  # dead, a zombie, or its pid now names another process
    return Keeper(True, pid, record.get("since"), host, record.get("log"))


def read_record(path: str) -> dict | None:
    """The ``key value`` lines of a state file; None when there is none (or it is unreadable)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            text = handle.read(4096)
    except OSError:
        return None
    record = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        record[key] = value
    return record


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


_PG_HOLDER = (
    "SELECT a.application_name FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid "
    "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
    "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
    "AND l.classid::text = ? AND l.objid::text = ?"
)


def _pg_status(store: Store, where: Where) -> Keeper:
    unsigned = where.key & 0xFFFFFFFFFFFFFFFF
    rows = store.execute(_PG_HOLDER, (str(unsigned >> 32), str(unsigned & 0xFFFFFFFF))).fetchall()
    if not rows:
        return Keeper(False)
    words = (rows[0][0] or "").split(" ")
    if len(words) < 3 or words[0] != APP_NAME or not words[1].isdigit():
        return Keeper(True, log=where.log_path)  # held, by a session whose name cannot be read
    since = None
    try:
        from cafleet.clock import from_epoch

        since = from_epoch(float(words[2]))
    except ValueError:
        pass
    return Keeper(True, int(words[1]), since, " ".join(words[3:]) or None, where.log_path)


# --- holding the lock (the keeper's side) --------------------------------------------------


class FleetLock:
    """The keeper's hold on its fleet's keeper lock, and its record while it holds it."""

    def __init__(self, store: Store, settings: config.Settings, fleet_id: int) -> None:
        self.where = Where(store, settings, fleet_id)
        self.busy_timeout = store.busy_timeout
        self.fd: int | None = None
        self.advisory: Any = None  # PostgreSQL: the advisory lock, on a session of its own
        self.record: dict | None = None

    def acquire(self, since: str) -> bool:
        """Take the lock without waiting and publish this process's record; False when
        another keeper holds it."""
        from cafleet import clock

        record = {
            "pid": str(os.getpid()),
            "start": process_start(os.getpid()) or "",
            "since": since,
            "host": _hostname(),
            "log": self.where.log_path,
        }
        where = self.where
        if where.postgres:
            from cafleet.store.postgres import AdvisoryLock

            advisory = AdvisoryLock(where.url, where.key)
            advisory.open(self.busy_timeout)
            try:
                acquired = advisory.try_acquire_as(
                    f"{APP_NAME} {record['pid']} {clock.to_epoch(since):.6f} {record['host']}"
                )
            except BaseException:
                advisory.release()
                raise
            if not acquired:
                advisory.release()
                return False
            self.advisory = advisory
            self.record = record
            return True
        import fcntl

        os.makedirs(os.path.dirname(where.lock_path), mode=0o700, exist_ok=True)
        fd = os.open(where.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self.fd = fd
        self.record = record
        temporary = f"{where.state_path}.{record['pid']}.tmp"
        out = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        with open(out, "w", encoding="utf-8") as handle:
            handle.write("".join(f"{key} {value}\n" for key, value in record.items()))
        os.replace(temporary, where.state_path)  # a reader sees the old record or the new one, never half
        return True

    def retake(self) -> bool:
        """After the lock's session ended (a server restart, a failover to a standby, an
        administrator): let the dead session go and take the lock again on a new one,
        without waiting, with the same record. False when another keeper took it meanwhile;
        raises :class:`~cafleet.errors.DatabaseError` while no session can be had."""
        since = self.record["since"] if self.record is not None else ""
        self.release()
        return self.acquire(since)

    def held(self) -> bool:
        """Whether the lock is still ours: always on SQLite; on PostgreSQL, whether the
        lock's session is still open (:meth:`AdvisoryLock.alive
        <cafleet.store.postgres.AdvisoryLock.alive>`: no round trip while nothing arrived,
        unless the server ends idle sessions)."""
        if self.advisory is None:
            return self.fd is not None
        return self.advisory.alive()

    def release(self) -> None:
        """Withdraw the record (if it is still ours) and let go of the lock."""
        if self.advisory is not None:
            self.advisory.release()
            self.advisory = None
        if self.fd is not None:
            mine = read_record(self.where.state_path)
            if mine is not None and self.record is not None and mine.get("pid") == self.record["pid"]:
                try:
                    os.unlink(self.where.state_path)
                except OSError:
                    pass
            os.close(self.fd)  # closing the only descriptor releases the flock
            self.fd = None


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
    from cafleet.delivery.placement import reach

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

    if settings.environ.get("CAFLEET_HOST"):
        return False  # a member's pane on another host
    director = fleets.get_fleet(store, fleet_id)["director_member_id"]
    placement = members.get_member(store, director)["placement"] if director is not None else None
    return placement is not None and not placement["session"].startswith("ssh://")


# --- starting one -------------------------------------------------------------------------

# What this process started: (pid, when). It is not started again while that process lives
# or for STARTING s after (it may still be taking the lock and writing its record); a
# long-lived process (the WebUI, `fleet watch`) starts another once it has died.
_STARTED: dict[tuple[str, int], tuple[int, float]] = {}
STARTING = 5.0


def ensure(store: Store, settings: config.Settings, fleet_id: int) -> Keeper | None:
    """The fleet's running keeper, started here when the setting allows, none runs, this is
    the Director's host and the Director's pane is there; None when no keeper will retry."""
    found = status(store, settings, fleet_id)
    if found.running:
        return found
    if not settings.keeper:  # CAFLEET_KEEPER=off: commands start none
        return None
    import time

    where = Where(store, settings, fleet_id)
    key = (where.log_path, fleet_id)
    if key in _STARTED:
        pid, when = _STARTED[key]
        if process_start(pid) is not None or time.monotonic() - when < STARTING:
            return Keeper(True, pid, None, _hostname(), where.log_path)
    if not director_here(store, settings, fleet_id) or director_problem(store, fleet_id) is not None:
        return None
    pid = spawn(settings.environ, where.log_path, fleet_id, store.hooks.program if store.hooks is not None else None)
    _STARTED[key] = (pid, time.monotonic())
    return Keeper(True, pid, None, _hostname(), where.log_path)


def spawn(environ, log_path: str, fleet_id: int, program=None) -> int:
    """Start ``python -m cafleet fleet keep FLEET_ID`` detached (see the module's text);
    returns its pid without waiting for it. ``program``: how this process runs cafleet
    (its test hooks', :mod:`cafleet.faults`; by default ``python -m cafleet``)."""
    import subprocess

    from cafleet.config import child_environ
    from cafleet.faults import PROGRAM

    os.makedirs(os.path.dirname(log_path), mode=0o700, exist_ok=True)
    try:
        if os.path.getsize(log_path) > LOG_LIMIT:
            os.replace(log_path, log_path + ".1")
    except OSError:
        pass
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        child = subprocess.Popen(
            [*(program or PROGRAM), "fleet", "keep", str(fleet_id)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=child_environ(environ),
            cwd="/",
            start_new_session=True,
            close_fds=True,
        )
    finally:
        os.close(log)
    return child.pid


def stop(store: Store, settings: config.Settings, fleet_id: int, timeout: float = 10.0) -> int | None:
    """End the fleet's keeper on this host with SIGTERM and wait (at most ``timeout`` s)
    until it is gone; returns its pid, or None when none ran here."""
    import signal
    import time

    found = status(store, settings, fleet_id)
    if not found.running or found.pid is None or found.host not in (None, _hostname()):
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
