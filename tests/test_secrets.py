"""A database password is never printed and never in a process's argv.

The server is the session's real PostgreSQL cluster; the database belongs to a role that
must log in with its password (SCRAM over the socket), so a command that lost the password
on the way could not connect. Each URL spelling libpq accepts is tried: the password in the
userinfo, in a ``password=`` query parameter, percent-encoded; a keyword/value string and a
mistyped scheme (refused by cafleet) carry one too.
"""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path
from urllib.parse import quote

import pytest

from cafleet.credentials import redact, scrub, split_password
from tests.support.pane_fleet import cafleet, tmux_fleet
from tests.support.remote_fleet import create_remote, fleet_with_hosts, proc_environ, remote_panes, short_directory
from tests.support.tmux_fixtures import wait_for
from tests.support.web_server import make_app, web_client

PASSWORD = "Pw-7f3kq:/x#y&z"  # a ':', '/', '#' and '&' that URLs must percent-encode
ENCODED = quote(PASSWORD, safe="")


def leaks(text: str) -> bool:
    return any(form in text for form in (PASSWORD, ENCODED, "7f3kq"))


@pytest.fixture
def base(pg_cluster) -> str:
    """``postgresql://<role>@/<db>?host=<socket dir>``: the role needs PASSWORD."""
    return pg_cluster.password_database(PASSWORD)


def userinfo_form(base: str) -> str:
    return base.replace("@/", f":{ENCODED}@/", 1)


def query_form(base: str) -> str:
    return f"{base}&password={ENCODED}"


def encoded_key_form(base: str) -> str:
    """``pass%77ord=``: a percent-encoded key, which libpq decodes to ``password``."""
    return f"{base}&pass%77ord={ENCODED}"


FORMS = {"userinfo": userinfo_form, "query": query_form, "encoded key": encoded_key_form}


def run(env: dict, url: str, *args: str):
    return cafleet(args, dict(env, CAFLEET_DATABASE_URL=url))


def test_redact_and_scrub_hide_every_spelling():
    assert redact("postgresql://alice:s3cretpw@db/x") == "postgresql://alice:***@db/x"
    assert redact("postgresql://alice@db/x?sslmode=require&password=s3cretpw&a=b") == (
        "postgresql://alice@db/x?sslmode=require&password=***&a=b"
    )
    assert redact("host=db password='s3 cret' dbname=x") == "host=db password=*** dbname=x"
    assert redact("host=db PASSWORD = s3cretpw") == "host=db PASSWORD = ***"
    assert redact("postgresql://db/x?sslpassword=keypass1") == "postgresql://db/x?sslpassword=***"
    quoted = 'invalid percent-encoded token: "s3%ZZcretpw"'
    assert scrub(quoted, "postgresql://a:s3%ZZcretpw@db/x") == 'invalid percent-encoded token: "***"'
    assert scrub("nothing secret here", "/var/lib/cafleet.db") == "nothing secret here"
    assert split_password(f"postgresql://a:{ENCODED}@db/x?sslmode=require") == (
        "postgresql://a@db/x?sslmode=require",
        PASSWORD,
    )
    assert split_password(f"postgresql://a@db/x?password={ENCODED}&sslmode=require") == (
        "postgresql://a@db/x?sslmode=require",
        PASSWORD,
    )
    assert split_password("postgresql://a@db/x") == ("postgresql://a@db/x", None)
    # Before: a percent-encoded key was a password to libpq but not to cafleet, printed in clear.
    assert redact("postgresql://a@db/x?pass%77ord=s3cretpw&ssl%70assword=k1&%61pp=y") == (
        "postgresql://a@db/x?pass%77ord=***&ssl%70assword=***&%61pp=y"
    )
    assert scrub("said s3cretpw", "postgresql://a@db/x?pass%77ord=s3cretpw") == "said ***"
    assert split_password(f"postgresql://a@db/x?pass%77ord={ENCODED}&b=c") == ("postgresql://a@db/x?b=c", PASSWORD)


@pytest.mark.parametrize("form", sorted(FORMS))
def test_no_line_of_any_command_prints_the_password(env, base, form, pg_cluster):
    url = FORMS[form](base)
    printed = []

    ok = run(env, url, "fleet", "list")
    assert ok.code == 0, ok  # the password really was needed and used
    printed.append(ok)
    for args in (("doctor",), ("doctor", "--json"), ("setup", "--json")):
        result = run(env, url, *args)
        printed.append(result)
        assert "***" in result.out or args[0] == "setup", result

    wrong = FORMS[form](base).replace(ENCODED, quote("Wrong-" + PASSWORD, safe=""))
    refused = run(env, wrong, "fleet", "list")
    assert refused.code == 1 and "password authentication failed" in refused.err, refused
    printed.append(refused)
    printed.append(run(env, wrong, "doctor"))

    missing = url.replace("/p_", "/nope_", 1)
    gone = run(env, missing, "message", "poll", "1")
    assert gone.code == 1 and gone.err.startswith("Error: "), gone
    printed.append(gone)

    garbled = url.replace(ENCODED, "%ZZ" + ENCODED, 1)  # libpq quotes the bad token in its error
    bad = run(env, garbled, "fleet", "list")
    assert bad.code == 1 and bad.err.startswith("Error: "), bad
    printed.append(bad)

    for result in printed:
        assert not leaks(result.out + result.err), result


def test_locations_cafleet_refuses_are_quoted_without_their_password(env, pg_cluster):
    for location in (
        f"host={pg_cluster.socket_dir} dbname=x password={PASSWORD.replace('#', '')}",
        f"host=x password='{PASSWORD}'",
        f"postgresq://alice:{ENCODED}@db/x",
        f"sqlite://alice:{ENCODED}@db/x",
    ):
        for args in (("fleet", "list"), ("doctor",), ("doctor", "--json")):
            result = run(env, location, *args)
            assert result.code != 0, result
            assert "CAFLEET_DATABASE_URL" in result.out + result.err, result
            assert not leaks(result.out + result.err), result


def sessions_of(pg_cluster, role: str) -> int:
    import psycopg

    with psycopg.connect(pg_cluster.url("postgres"), autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE usename = %s", (role,)).fetchone()[0]


def test_the_webui_never_shows_the_password(env, base, pg_cluster):
    url = query_form(base)
    role = base.split("//", 1)[1].split("@", 1)[0]
    with web_client(make_app(url, env), raise_server_exceptions=False) as client:
        assert client.get("/api/fleets").status_code == 200
        pg_cluster.admin(f"ALTER ROLE {role} PASSWORD 'changed-elsewhere'")
        pg_cluster.admin(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '" + role + "'"
        )  # fmt: skip
        # pg_terminate_backend only signals: wait until the sessions are gone (their reason
        # sent), so the pool sees its idle connection ended and logs in again
        wait_for(lambda: sessions_of(pg_cluster, role) == 0, what=f"{role}'s sessions to end")
        answer = client.get("/api/fleets")
        assert answer.status_code == 503, answer.text
        assert "password authentication failed" in answer.text and not leaks(answer.text), answer.text


# --- no password in any argv ------------------------------------------------------------------


class ArgvWatch:
    """Every process's argv, read from /proc while member creation runs (a tight loop in a
    thread), and every ``tmux`` and ``ssh`` client's argv exactly, through wrappers first on
    the Director's PATH that record their arguments and exec the real program."""

    def __init__(self, tmp_path: Path) -> None:
        self.folder = tmp_path / "argv-wrappers"
        self.folder.mkdir()
        self.log = tmp_path / "argv.log"
        for program in ("tmux", "ssh"):
            real = subprocess.run(["sh", "-c", f"command -v {program}"], capture_output=True, text=True).stdout.strip()
            wrapper = self.folder / program
            wrapper.write_text(
                f'#!/bin/sh\nprintf "%s\\0" {program} "$@" >> {self.log}\necho >> {self.log}\nexec {real} "$@"\n'
            )
            wrapper.chmod(0o755)
        self.seen: set[bytes] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.scan()

    def scan(self) -> None:
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                try:
                    with open(f"/proc/{entry.name}/cmdline", "rb") as handle:
                        self.seen.add(handle.read())
                except OSError:
                    pass

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.scan()  # the processes still running: tmux servers, the members' programs

    def recorded(self) -> list[bytes]:
        return self.log.read_bytes().split(b"\n") if self.log.exists() else []

    def leaked(self) -> list[bytes]:
        forms = [PASSWORD.encode(), ENCODED.encode(), b"7f3kq"]
        return [argv for argv in [*self.seen, *self.recorded()] if any(form in argv for form in forms)]


@pytest.fixture
def short_dir():
    with short_directory() as path:
        yield path


def member_url_of(pid: int) -> str:
    return proc_environ(pid)["CAFLEET_DATABASE_URL"]


@pytest.mark.tmux
def test_member_create_puts_no_password_in_any_argv_and_the_member_still_connects(
    env, base, tmp_path, monkeypatch, pg_cluster
):
    url = query_form(base)
    env["CAFLEET_DATABASE_URL"] = url
    monkeypatch.setenv("CAFLEET_DATABASE_URL", url)
    with tmux_fleet(env, tmp_path, monkeypatch) as fleet:
        watch = ArgvWatch(tmp_path)
        environ = dict(fleet.environ, PATH=f"{watch.folder}{os.pathsep}{fleet.environ['PATH']}")
        with watch:
            created = fleet.cafleet(
                "member", "create", "--fleet-id", str(fleet.fleet_id), "--name", "alice", "--description", "a",
                "--coding-agent", "standin", "--json", "Wait.", environ=environ,
            )  # fmt: skip
            assert created.code == 0, created
            fleet.wait_ready(created.json()["member_id"])
        assert any(b"split-window" in argv for argv in watch.recorded()), "the tmux wrapper was not used"
        assert watch.leaked() == []

        pane_pid = int(fleet.server.run("display-message", "-p", "-t", created.json()["pane_id"], "#{pane_pid}"))
        member_url = member_url_of(pane_pid)
        assert not leaks(member_url) and "passfile=" in member_url, member_url
        passfile = Path(member_url.split("passfile=", 1)[1])
        assert passfile.stat().st_mode & 0o777 == 0o600 and passfile.parent.stat().st_mode & 0o777 == 0o700
        member = fleet.cafleet(
            "message", "poll", str(created.json()["member_id"]), environ=dict(env, CAFLEET_DATABASE_URL=member_url)
        )
        assert member.code == 0, member  # the member's own cafleet logs in with the password from the file


@pytest.mark.tmux
@pytest.mark.slow
def test_member_create_on_another_host_puts_no_password_in_any_argv(env, base, tmp_path, monkeypatch, short_dir):
    url = query_form(base)
    env["CAFLEET_DATABASE_URL"] = url
    monkeypatch.setenv("CAFLEET_DATABASE_URL", url)
    with fleet_with_hosts(env, tmp_path, monkeypatch, short_dir, ["farhost"]) as (fleet, [host]):
        watch = ArgvWatch(tmp_path)
        fleet.environ["PATH"] = f"{watch.folder}{os.pathsep}{fleet.environ['PATH']}"
        with watch:
            created = create_remote(fleet, host, "far", "--json")
            assert created.code == 0, created
            record = created.json()
        assert any(b"new-session" in argv and argv.startswith(b"ssh\0") for argv in watch.recorded())
        assert watch.leaked() == []

        pane_pid = int(remote_panes(host)[record["pane_id"]])
        member_url = member_url_of(pane_pid)
        assert not leaks(member_url) and "passfile=" in member_url, member_url
        member = fleet.cafleet(
            "message", "poll", str(record["member_id"]), environ=dict(env, CAFLEET_DATABASE_URL=member_url)
        )
        assert member.code == 0, member
