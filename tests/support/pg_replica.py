"""A primary and a streaming standby, for failover tests.

Two private clusters of :class:`tests.support.postgres.Cluster` (the server binaries of
Debian's package, run as the ``postgres`` user), each with its own short folder holding
its data and its Unix socket (no TCP at all): the primary is made by ``initdb`` as the
session's cluster is, the standby by ``pg_basebackup -R`` from it (run as the ``postgres``
user, over the primary's socket: initdb's trust lines include ``local replication all
trust``), so it streams the primary's WAL over that socket and carries its databases.

:meth:`Pair.url` names a database on both at once, as a libpq multi-host URL with
``target_session_attrs=read-write``: libpq tries the hosts in order and keeps the first
that accepts writes, which is the primary until it is gone and the standby once promoted.

Synchronous replication (``synchronous=True``): the primary's ``synchronous_standby_names``
names the standby's ``application_name`` (which ``pg_basebackup -R`` writes into its
``primary_conninfo``) and ``synchronous_commit`` is ``on``, so a commit is acknowledged
only once the standby has flushed it. It is set with ``ALTER SYSTEM`` on the primary
*after* the base backup: a standby that inherited it would, once promoted, wait forever
for a standby of its own at every commit; and set before the standby runs it would block
the primary's own commits.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time

from tests.support import postgres

APPLICATION_NAME = "cfstandby"  # the standby's walreceiver, as the primary sees it


def missing_reason() -> str | None:
    """Why a primary and a standby cannot run here, or None when they can."""
    reason = postgres.missing_reason()
    if reason:
        return reason
    folder = postgres.binaries()
    if folder is None or not os.access(os.path.join(folder, "pg_basebackup"), os.X_OK):
        return "pg_basebackup is missing from the PostgreSQL server binaries"
    return None


def _postmaster_pid(cluster: postgres.Cluster) -> int | None:
    """The pid of the cluster's running server (``postmaster.pid``'s first line), or None."""
    try:
        with open(os.path.join(cluster.data, "postmaster.pid"), encoding="utf-8") as handle:
            pid = int(handle.readline().strip())
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return pid


class Pair:
    """``start()`` makes the primary, ``dbname`` on it, the standby from a base backup, and
    (``synchronous``) makes the primary's commits wait for the standby. ``stop()`` stops
    both and removes their folders (always: call it in a ``finally``)."""

    def __init__(self, dbname: str = "cafleet_failover", synchronous: bool = True) -> None:
        self.dbname = dbname
        self.synchronous = synchronous
        self.primary = postgres.Cluster(max_connections=100)
        self.standby = postgres.Cluster(max_connections=100)
        self.pids: list[int] = []  # every server started here, ended by its pid in stop() if still there
        self.promoted_at: float | None = None

    # --- set-up -------------------------------------------------------------------------------

    def start(self) -> None:
        primary, standby = self.primary, self.standby
        # wal_level=replica and max_wal_senders=10 are PostgreSQL 15's defaults; said anyway,
        # with hot_standby so that the standby answers reads (pg_is_in_recovery, replay LSN).
        primary.options = "-c wal_level=replica -c max_wal_senders=5 -c wal_keep_size=64MB"
        primary.start()  # initdb (trust, local replication too), the server, cafleet_template
        self._remember(primary)
        self.admin(primary, f"CREATE DATABASE {self.dbname} TEMPLATE cafleet_template")
        # The standby's folder exists (Cluster made it, owned by postgres); its data folder must not.
        standby._run(
            f"{standby.bin}/pg_basebackup",
            "-D",
            standby.data,
            "-d",
            f"host={primary.socket_dir} user=postgres application_name={APPLICATION_NAME}",
            "-R",  # standby.signal and primary_conninfo (with the application_name)
            "-X",
            "stream",
            "-c",
            "fast",
            "--no-sync",
        )
        standby.options = "-c hot_standby=on"
        standby.resume()
        self._remember(standby)
        self.wait_streaming()
        if self.synchronous:
            self.admin(primary, f"ALTER SYSTEM SET synchronous_standby_names = '{APPLICATION_NAME}'")
            self.admin(primary, "ALTER SYSTEM SET synchronous_commit = 'on'")
            self.admin(primary, "SELECT pg_reload_conf()")
            self._until(lambda: self.replication("sync_state") == "sync", 30, "the standby to become synchronous")
        self.caught_up()

    def _remember(self, cluster: postgres.Cluster) -> None:
        pid = _postmaster_pid(cluster)
        if pid is not None:
            self.pids.append(pid)

    # --- names ----------------------------------------------------------------------------------

    def url(self, dbname: str | None = None, **extra: str) -> str:
        """A libpq multi-host URL: both socket folders, the primary first, the default port
        (5432) for each, and only a read-write session accepted."""
        query = f"host={self.primary.socket_dir},{self.standby.socket_dir}&target_session_attrs=read-write"
        for key, value in extra.items():
            query += f"&{key}={value}"
        return f"postgresql://postgres@/{dbname or self.dbname}?{query}"

    # --- administration (psycopg: a client other than the product's) ----------------------------

    @staticmethod
    def admin(cluster: postgres.Cluster, sql: str, params=()) -> None:
        import psycopg

        with psycopg.connect(cluster.url("postgres"), autocommit=True, connect_timeout=5) as conn:
            conn.execute(sql, params)

    @staticmethod
    def scalar(cluster: postgres.Cluster, sql: str, params=(), dbname: str = "postgres"):
        import psycopg

        with psycopg.connect(cluster.url(dbname), autocommit=True, connect_timeout=5) as conn:
            row = conn.execute(sql, params).fetchone()
        return None if row is None else row[0]

    @staticmethod
    def _until(check, timeout: float, what: str):
        deadline = time.monotonic() + timeout
        last = None
        while True:
            try:
                last = check()
            except Exception as error:  # a server starting up or going away; kept for the failure
                last = error
            if last and not isinstance(last, Exception):
                return last
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout} s waiting for {what} (last: {last!r})")
            time.sleep(0.02)

    @staticmethod
    def sessions(cluster: postgres.Cluster, like: str) -> list[str]:
        """The ``application_name`` of every session on ``cluster`` (any database) whose
        name is ``LIKE like``, sorted (``pg_stat_activity``, read from ``postgres``)."""
        import psycopg

        with psycopg.connect(cluster.url("postgres"), autocommit=True, connect_timeout=5) as conn:
            rows = conn.execute(
                "SELECT application_name FROM pg_stat_activity WHERE application_name LIKE %s "
                "AND pid <> pg_backend_pid() ORDER BY 1",
                (like,),
            ).fetchall()
        return [row[0] for row in rows]

    def wait_streaming(self, timeout: float = 60) -> None:
        self._until(lambda: self.replication("state") == "streaming", timeout, "the standby to stream")

    def replication(self, column: str):
        """A column of the standby's row in the primary's ``pg_stat_replication`` (None without one)."""
        return self.scalar(
            self.primary, f"SELECT {column} FROM pg_stat_replication WHERE application_name = %s", (APPLICATION_NAME,)
        )

    def caught_up(self, timeout: float = 60) -> str:
        """Wait until the standby has replayed everything the primary has written so far;
        returns that LSN."""
        target = self.scalar(self.primary, "SELECT pg_current_wal_lsn()::text")
        self._until(
            lambda: self.scalar(
                self.standby, "SELECT pg_wal_lsn_diff(pg_last_wal_replay_lsn(), %s::pg_lsn) >= 0", (target,)
            ),
            timeout,
            f"the standby to replay up to {target}",
        )
        return target

    def cut_replication(self, timeout: float = 30) -> None:
        """Stop the standby's WAL receiver (an empty ``primary_conninfo``, reloaded): from
        now on the primary's commits reach the standby no more (asynchronous mode only: a
        synchronous primary would wait for it at every commit)."""
        assert not self.synchronous, "a synchronous primary would block every commit"
        self.admin(self.standby, "ALTER SYSTEM SET primary_conninfo = ''")
        self.admin(self.standby, "SELECT pg_reload_conf()")
        self._until(
            lambda: self.scalar(self.standby, "SELECT count(*) = 0 FROM pg_stat_wal_receiver"),
            timeout,
            "the standby's WAL receiver to stop",
        )

    # --- failover -------------------------------------------------------------------------------

    def crash_primary(self) -> None:
        """The primary's server stops as a crash would (``pg_ctl -m immediate``): every
        session ends at once, nothing is checkpointed; its folder stays until :meth:`stop`."""
        self.primary._run(f"{self.primary.bin}/pg_ctl", "-D", self.primary.data, "-m", "immediate", "-w", "stop")

    def promote(self, timeout: float = 60) -> float:
        """Promote the standby and wait until it accepts writes (``pg_is_in_recovery()``
        false); returns the :func:`time.monotonic` at which that was first seen."""
        self.standby._run(f"{self.standby.bin}/pg_ctl", "-D", self.standby.data, "-w", "-t", "60", "promote")
        self._until(
            lambda: self.scalar(self.standby, "SELECT NOT pg_is_in_recovery()"), timeout, "the standby to be promoted"
        )
        self.promoted_at = time.monotonic()
        return self.promoted_at

    # --- teardown -------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop both servers (immediate), end by its pid any server started here that is
        still running, and remove both folders."""
        for cluster in (self.standby, self.primary):
            if os.path.exists(os.path.join(cluster.data, "postmaster.pid")):
                cluster._run(f"{cluster.bin}/pg_ctl", "-D", cluster.data, "-m", "immediate", "-w", "stop", check=False)
        for pid in self.pids:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                continue
            except PermissionError:
                pass
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for cluster in (self.standby, self.primary):
            shutil.rmtree(cluster.root, ignore_errors=True)


def ended(proc: subprocess.Popen) -> None:
    """End a process this test started, by its pid, and reap it."""
    if proc.poll() is None:
        proc.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=30)


def terminated(proc: subprocess.Popen, timeout: float = 30) -> int | None:
    """Ask a process this test started to stop (SIGTERM, by its pid), wait for it (bounded),
    kill it if it is still there; returns its exit status (None when even that failed)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=timeout)
    ended(proc)
    return proc.returncode
