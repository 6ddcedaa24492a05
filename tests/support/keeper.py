"""Fleet keepers in tests: find them, read their logs, end every one a test started.

The test environment turns the keeper off (``tests/support/environ.py``); a test that
turns it on (``CAFLEET_KEEPER=on``) ends every keeper of its database at teardown
(:func:`end_keepers`), by pid: first the one the fleet's record names, then any other
``cafleet fleet keep`` process whose environment names the test's database, which fails
the test (a keeper the test did not know of was left running).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

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
    try:  # reap it when it is our own child (an in-process command started it)
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def end_keepers(database_url: str, known: list[int], settle: float = 10.0) -> list[int]:
    """Kill the ``known`` keepers, then wait (bounded) for the rest to end by themselves;
    kill and return those that did not (strays)."""
    for pid in known:
        kill(pid)
    deadline = time.monotonic() + settle
    while keeper_processes(database_url) and time.monotonic() < deadline:
        time.sleep(0.05)
    strays = keeper_processes(database_url)
    for pid in strays:
        kill(pid)
    return strays


def log_lines(path: str | None) -> list[str]:
    if not path or not os.path.exists(path):
        return []
    return Path(path).read_text(encoding="utf-8").splitlines()


def assert_none_left(database_url: str, known: list[int]) -> None:
    strays = end_keepers(database_url, known)
    if strays:
        pytest.fail(f"keeper processes {strays} were still running at the end of the test")
