"""Fleet keepers in tests: find them, read their logs, end every one a test started.

The test environment turns the keeper off (``tests/support/environ.py``); a test that
turns it on (``CAFLEET_KEEPER=on``) ends every keeper of its database at teardown
(:func:`end_keepers`), by pid: the one the fleet's record names (also one that was still
starting, once it has written its record), then any other ``cafleet fleet keep`` process
whose environment names the test's database, which fails the test (a keeper the test did
not know of was left running).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import pytest

from tests.support.tmux_fixtures import wait_for

KEEP_ARGV = b"\0-m\0cafleet\0fleet\0keep\0"


def keeper_processes(database_url: str) -> list[int]:
    """Pids of live ``cafleet fleet keep`` processes using ``database_url`` (zombies excluded)."""
    marker = f"CAFLEET_DATABASE_URL={database_url}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes()
            if KEEP_ARGV not in argv:
                continue
            environ = (entry / "environ").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state not in ("Z", "X") and any(item.startswith(marker) for item in environ):
            found.append(int(entry.name))
    return sorted(found)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def kill(pid: int, timeout: float = 10.0) -> None:
    """SIGKILL ``pid`` and wait (bounded) until it is gone."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    with contextlib.suppress(ChildProcessError):  # reap it when it is our own child (an in-process command started it)
        os.waitpid(pid, os.WNOHANG)


def end_keepers(database_url: str, recorded, settle: float = 10.0) -> list[int]:
    """End every keeper of the database: each one ``recorded()`` names (the fleet's record:
    a list of pids) is killed; any other is given ``settle`` s (bounded) to end by itself
    or to become the recorded one (a keeper that was starting); those left are killed and
    returned (strays)."""
    killed: set[int] = set()
    deadline = time.monotonic() + settle
    while True:
        for pid in recorded():
            kill(pid)
            killed.add(pid)
        left = [pid for pid in keeper_processes(database_url) if pid not in killed]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    for pid in left:
        kill(pid)
    return left


def log_lines(path: str | None) -> list[str]:
    if not path or not os.path.exists(path):
        return []
    return Path(path).read_text(encoding="utf-8").splitlines()


def assert_none_left(database_url: str, recorded=lambda: []) -> None:
    strays = end_keepers(database_url, recorded)
    if strays:
        pytest.fail(f"keeper processes {strays} were still running at the end of the test")


def keeper_on(env, monkeypatch) -> None:
    """Turn the keeper on for the test (before any pane or server starts: they inherit it)."""
    env["CAFLEET_KEEPER"] = "on"
    monkeypatch.setenv("CAFLEET_KEEPER", "on")


@contextlib.contextmanager
def kept_fleet_with_host(env, tmp_path, monkeypatch):
    """(fleet, host): a fleet with its keeper on (turned on before the fleet is created, so
    its keeper starts with it) and a host ``farhost`` reached over a real sshd; every keeper
    of the database is ended by its pid afterwards."""
    from tests.support.remote_fleet import fleet_with_hosts, short_directory

    keeper_on(env, monkeypatch)
    with (
        short_directory() as short_dir,
        fleet_with_hosts(env, tmp_path, monkeypatch, short_dir, ["farhost"]) as (fleet, [host]),
    ):
        try:
            yield fleet, host
        finally:
            end_every_keeper(fleet)


def end_every_keeper(pane_fleet) -> None:
    """End the fleet's keeper by its pid; fail if any other keeper of the database is left."""

    def recorded() -> list[int]:  # a stalled keeper (stopped, hung) holds the lock too, and is ended too
        known = keeper(pane_fleet)
        return [known["pid"]] if known["state"] != "not running" and known["pid"] else []

    assert_none_left(pane_fleet.db, recorded)


def keeper(fleet) -> dict:
    """The fleet's keeper as `fleet show --json` reports it."""
    shown = fleet.cafleet("fleet", "show", str(fleet.fleet_id), "--json")
    assert shown.code == 0, shown
    return shown.json()["keeper"]


def running_keeper(fleet, other_than: int | None = None) -> dict:
    def found():
        record = keeper(fleet)
        return record if record["running"] and record["pid"] not in (None, other_than) else None

    return wait_for(found, timeout=20, interval=0.05, what="the fleet's keeper to run")
