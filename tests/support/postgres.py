"""A real PostgreSQL server from Debian's package, for the tests.

One cluster per test session: ``initdb`` and ``pg_ctl`` run as the ``postgres`` user
(``runuser``, when the tests run as root) in a short temporary folder that user can
traverse, listening on a Unix socket only (no TCP port). Each test gets a fresh database
cloned from an empty template (about 130 ms), so no test sees another's rows.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import time
import uuid


def binaries() -> str | None:
    """The folder holding ``initdb`` and ``pg_ctl``, newest version first; None without."""
    for folder in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if os.access(os.path.join(folder, "initdb"), os.X_OK) and os.access(os.path.join(folder, "pg_ctl"), os.X_OK):
            return folder
    return None


def missing_reason() -> str | None:
    """Why the PostgreSQL tests cannot run here, or None when they can."""
    if binaries() is None:
        return "PostgreSQL server binaries are missing (Debian package postgresql; scripts/install.sh --test)"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install 'cafleet[postgres]')"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "running as root without runuser, so initdb cannot run as the postgres user"
    return None


class Cluster:
    """A private cluster; ``url(dbname)`` names a database on its socket. ``max_connections``
    is the server's session limit (the session cluster's 200 leaves room for the suite; a
    test of what happens at the limit starts a cluster of its own with a smaller one)."""

    def __init__(self, max_connections: int = 200) -> None:
        self.bin = binaries()
        self.max_connections = max_connections
        self.options = ""  # more server options for resume() (a TCP listener and TLS, say)
        # Short: the socket path (folder + "/.s.PGSQL.5432") must stay under 107 bytes.
        self.root = tempfile.mkdtemp(prefix="cfpg-", dir="/tmp")
        os.chmod(self.root, 0o755)
        self.data = os.path.join(self.root, "data")
        self.socket_dir = self.root
        self.user = "postgres" if os.geteuid() == 0 else None
        if self.user:
            shutil.chown(self.root, user=self.user)

    def _run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        command = ["runuser", "-u", self.user, "--", *argv] if self.user else list(argv)
        return subprocess.run(command, capture_output=True, text=True, check=check, timeout=120)

    def start(self) -> None:
        self._run(
            f"{self.bin}/initdb",
            "-D",
            self.data,
            "-A",
            "trust",
            "-U",
            "postgres",
            "-E",
            "UTF8",
            "--no-sync",
            "--locale=C.UTF-8",
        )
        self.resume()
        self.admin("CREATE DATABASE cafleet_template")

    def resume(self) -> None:
        """Start the server on the cluster's data (after :meth:`pause`, a restart)."""
        options = f"-k {self.socket_dir} -c listen_addresses='' -c fsync=off -c max_connections={self.max_connections}"
        options += f" {self.options}" if self.options else ""
        self._run(
            f"{self.bin}/pg_ctl",
            "-D",
            self.data,
            "-w",
            "-t",
            "60",
            "-o",
            options,
            "-l",
            os.path.join(self.root, "log"),
            "start",
        )

    def pause(self) -> None:
        """Stop the server as an administrator's fast shutdown does (every session is ended
        with "terminating connection due to administrator command"), keeping its data.
        Only for a private cluster: the session's ``pg_cluster`` is shared by every test."""
        self._run(f"{self.bin}/pg_ctl", "-D", self.data, "-m", "fast", "-w", "stop")

    def url(self, dbname: str) -> str:
        return f"postgresql://postgres@/{dbname}?host={self.socket_dir}"

    def admin(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(sql)

    def fresh_database(self) -> str:
        """A new empty database cloned from the template; returns its URL."""
        name = "t_" + uuid.uuid4().hex[:12]
        self.admin(f"CREATE DATABASE {name} TEMPLATE cafleet_template")
        return self.url(name)

    def password_database(self, password: str) -> str:
        """A new database owned by a new role that must log in with ``password`` (SCRAM over
        the socket: a ``pg_hba.conf`` line ahead of the cluster's trust lines, reloaded);
        returns its URL without the password."""
        suffix = uuid.uuid4().hex[:12]
        role, name = f"r_{suffix}", f"p_{suffix}"
        quoted = password.replace("'", "''")
        self.admin(f"CREATE ROLE {role} LOGIN PASSWORD '{quoted}'")
        self.admin(f"CREATE DATABASE {name} OWNER {role} TEMPLATE cafleet_template")
        hba = os.path.join(self.data, "pg_hba.conf")
        with open(hba, encoding="utf-8") as handle:
            rest = handle.read()
        with open(hba, "w", encoding="utf-8") as handle:
            handle.write(f"local {name} {role} scram-sha-256\n{rest}")
        self.admin("SELECT pg_reload_conf()")
        url = f"postgresql://{role}@/{name}?host={self.socket_dir}"
        import psycopg

        deadline = time.monotonic() + 30  # the reload is asynchronous: wait until it is in force
        while True:
            try:
                psycopg.connect(url + "&password=", connect_timeout=5).close()
            except psycopg.OperationalError as error:
                if "password" in str(error):
                    return url
                raise
            assert time.monotonic() < deadline, "pg_hba.conf was not reloaded"
            time.sleep(0.05)

    def stop(self) -> None:
        self._run(f"{self.bin}/pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop", check=False)
        shutil.rmtree(self.root, ignore_errors=True)


def sessions(url: str, application_name: str) -> int:
    """How many sessions named ``application_name`` (libpq's ``PGAPPNAME``) the server still
    has on the URL's database. The server releases a session's advisory locks before the
    session leaves ``pg_stat_activity``, so at 0 a killed holder's locks are free."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = %s",
            (application_name,),
        ).fetchone()
    assert row is not None
    return int(row[0])


def terminate(url: str, application_name: str) -> int:
    """End every session named ``application_name`` on the database of ``url`` (one of a
    cluster's URLs), as an administrator's ``pg_terminate_backend`` does; returns how many
    there were. Sent from the ``postgres`` database, so it works on a database that no
    longer lets anyone in."""
    import psycopg

    before, rest = url.split("@/", 1)
    name, query = rest.split("?", 1)
    with psycopg.connect(f"{before}@/postgres?{query}", autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND application_name = %s",
            (name, application_name),
        ).fetchall()
    return len(rows)
