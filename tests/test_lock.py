"""The pane-input lock across real processes: a holder makes others time out within
the bound, a killed holder frees it, equal keys share it and different keys do not.

Each test that takes a lock runs on both stores: on SQLite the lock is an ``flock`` on a
file in a lock folder, on PostgreSQL a session advisory lock in the test's database
(``where`` is then its URL). A killed holder's advisory lock is released when the
server ends its session, so on PostgreSQL a check right after a kill first waits
(bounded) for that session to leave ``pg_stat_activity``. What is about the lock file
itself (its name, its folder, spellings of the database path) is SQLite's.
"""

from __future__ import annotations

STORES = ("sqlite", "postgres")  # the lock tests run on both stores (tests/conftest.py)

import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from cafleet.delivery.keystrokes.lock import pane_lock
from cafleet.errors import LockTimeout
from cafleet.mux.base import PaneContext
from cafleet.store.engines import lock_space
from cafleet.store.sqlite_locks import FileLocks

SESSION = "$1@/tmp/tmux-1000/default"
HOLDER_APP = "cafleet-lock-holder"  # the holders' PostgreSQL sessions are named so (PGAPPNAME)

HOLDER = textwrap.dedent(
    """
    import sys, time
    from cafleet.delivery.keystrokes.lock import pane_lock
    from cafleet.store.engines import lock_space
    from cafleet.store.sqlite_locks import FileLocks
    where, backend, session, pane = sys.argv[1:5]
    with pane_lock(lock_space(where) if "://" in where else FileLocks(where), backend, session, pane, timeout=5):
        print("held", flush=True)
        time.sleep(60)
    """
)


def space(where):
    """The lock space at ``where``: a lock folder (SQLite's flock files) or the database URL
    (PostgreSQL's advisory locks)."""
    where = str(where)
    return lock_space(where) if "://" in where else FileLocks(where)


def lock_path(folder, backend: str, session: str, pane_id: str) -> Path:
    """The lock file of a placement key in a lock folder."""
    return Path(FileLocks(folder).pane_path(backend, session, pane_id))


@pytest.fixture
def where(tmp_path, store_kind, database_url):
    """A lock folder (SQLite) or the database URL (PostgreSQL: advisory locks)."""
    if store_kind == "postgres":
        import cafleet.store.postgres  # noqa: F401  imported before any timing, as a command has it

        return database_url
    return tmp_path / "state" / "locks"


def holders_ended(where) -> None:
    """Return once killed holders can hold nothing: at once for an ``flock`` (the kernel
    releases it with the process); on PostgreSQL once the server has ended their sessions."""
    if isinstance(where, str):
        from tests.support.postgres import sessions
        from tests.support.tmux_fixtures import wait_for

        wait_for(lambda: sessions(where, HOLDER_APP) == 0, timeout=30, what="the server to end the holder's session")


@pytest.fixture
def holder(where, env):
    """Start a child process holding the lock for a key; stop it by its own pid."""
    children: list[subprocess.Popen] = []

    def start(backend: str = "tmux", session: str = SESSION, pane: str = "%3") -> subprocess.Popen:
        child = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(where), backend, session, pane],
            stdout=subprocess.PIPE,
            text=True,
            env=dict(env, PGAPPNAME=HOLDER_APP),
        )
        children.append(child)
        assert child.stdout.readline() == "held\n"
        return child

    yield start
    for child in children:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=10)


def test_held_lock_times_out_within_the_bound(holder, where):
    holder()
    started = time.monotonic()
    with pytest.raises(LockTimeout) as caught, pane_lock(space(where), "tmux", SESSION, "%3", timeout=0.3):
        pytest.fail("the lock was taken while another process holds it")
    waited = time.monotonic() - started
    assert 0.3 <= waited < 30  # never early; the upper bound only tells "gave up" from "hung"
    assert str(caught.value) == (
        "the pane-input lock for pane %3 is still held by another cafleet process after 0.3 s; "
        "try again when that delivery has finished"
    )
    assert caught.value.pane == "%3"  # the pane it names, as a value


def test_waiting_sleeps_instead_of_spinning(holder, where):
    holder()
    cpu = time.process_time()
    with pytest.raises(LockTimeout), pane_lock(space(where), "tmux", SESSION, "%3", timeout=0.5):
        pass
    assert time.process_time() - cpu < 0.1


def test_killed_holder_frees_the_lock(holder, where):
    child = holder()
    if isinstance(where, str):
        from tests.support.postgres import sessions

        assert sessions(where, HOLDER_APP) == 1  # so the wait below is not vacuous
    os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=10)
    holders_ended(where)
    with pane_lock(space(where), "tmux", SESSION, "%3", timeout=0):  # one non-blocking try: free now
        pass


def test_waiter_gets_the_lock_when_the_holder_dies_mid_wait(holder, where):
    child = holder()
    killer = subprocess.Popen(["sh", "-c", f"sleep 0.3 && kill -KILL {child.pid}"])
    started = time.monotonic()
    with pane_lock(space(where), "tmux", SESSION, "%3", timeout=60):  # the timeout only bounds a failure
        waited = time.monotonic() - started
    killer.wait(timeout=10)
    assert waited >= 0.25  # it did wait for the holder, and got the lock without timing out


def test_same_key_from_two_placements_shares_one_lock(holder, where):
    from cafleet.store.postgres import pane_key

    first = PaneContext(backend="tmux", session="$1@" + "/tmp/tmux-1000/default", window_id="@1", pane_id="%3")
    second = PaneContext(
        backend="tmux", session="".join(["$1@/tmp/", "tmux-1000/default"]), window_id="@2", pane_id="%3"
    )
    assert lock_path(where, first.backend, first.session, first.pane_id) == lock_path(
        where, second.backend, second.session, second.pane_id
    )
    assert pane_key(first.backend, first.session, first.pane_id) == pane_key(
        second.backend, second.session, second.pane_id
    )
    holder(first.backend, first.session, first.pane_id)
    with (
        pytest.raises(LockTimeout),
        pane_lock(space(where), second.backend, second.session, second.pane_id, timeout=0.1),
    ):
        pass


@pytest.mark.parametrize(
    ("backend", "session", "pane"),
    [("tmux", SESSION, "%4"), ("tmux", "$2@/tmp/tmux-1000/default", "%3"), ("herdr", SESSION, "%3")],
)
def test_different_keys_do_not_block_each_other(holder, where, backend, session, pane):
    holder()
    with pane_lock(space(where), backend, session, pane, timeout=0):  # one non-blocking try: not blocked
        pass


def test_key_parts_cannot_run_together(tmp_path):
    from cafleet.store.postgres import pane_key

    assert lock_path(tmp_path, "tmux", "a", "b%1") != lock_path(tmp_path, "tmux", "ab", "%1")
    assert pane_key("tmux", "a", "b%1") != pane_key("tmux", "ab", "%1")


def test_release_on_exit_and_on_error(where):
    with pane_lock(space(where), "tmux", SESSION, "%3", timeout=1):
        pass
    with pytest.raises(RuntimeError), pane_lock(space(where), "tmux", SESSION, "%3", timeout=1):
        raise RuntimeError("boom")
    # Free again: an flock at once; a PostgreSQL advisory lock once the server has ended the
    # closed session, a moment after the client closed it (the bound only bounds a failure).
    with pane_lock(space(where), "tmux", SESSION, "%3", timeout=10):
        pass


@pytest.mark.stores("sqlite")  # the lock file itself; an advisory lock has none
def test_release_on_exit_and_on_error_keeps_the_file(where):
    with pane_lock(space(where), "tmux", SESSION, "%3", timeout=1):
        pass
    with pytest.raises(RuntimeError), pane_lock(space(where), "tmux", SESSION, "%3", timeout=1):
        raise RuntimeError("boom")
    path = lock_path(where, "tmux", SESSION, "%3")
    assert path.exists()  # never deleted: another process may be waiting on it
    assert stat.S_IMODE(where.stat().st_mode) == 0o700
    assert [p.name for p in where.iterdir()] == [path.name]
    assert path.name.startswith("pane-") and "%" not in path.name and "/" not in path.name


def test_not_reentrant_within_one_process(where):
    with (
        pane_lock(space(where), "tmux", SESSION, "%3", timeout=1),
        pytest.raises(LockTimeout),
        pane_lock(space(where), "tmux", SESSION, "%3", timeout=0.05),
    ):
        pass


# --- one lock per pane whatever the database path spelling ----------------------------------


def spellings(tmp_path, db_path: str) -> dict[str, str]:
    """Other names of the database file at ``db_path``: through a symlinked folder, and
    through a symlink to the file itself (in another folder)."""
    folder = tmp_path / "alias-folder"
    folder.symlink_to(os.path.dirname(db_path), target_is_directory=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "link.db").symlink_to(db_path)
    return {"folder symlink": str(folder / os.path.basename(db_path)), "file symlink": str(elsewhere / "link.db")}


@pytest.mark.stores("sqlite")  # spellings of a file's path; a PostgreSQL URL names a server
@pytest.mark.parametrize("spelling", ["folder symlink", "file symlink"])
def test_two_spellings_of_one_database_share_each_pane_lock(tmp_path, env, cli, build, store, db_path, spelling):
    """A sender reaching the database through another name sees the lock the first holds:
    it reports the busy lock instead of typing into the pane at the same time."""
    fleet_id, director, _ = build.fleet(members_count=0)
    member = build.member(fleet_id, "worker", pane_id="%5")
    other = spellings(tmp_path, db_path)[spelling]

    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, lock_space(db_path).folder, "tmux", "$0@/nonexistent/socket", "%5"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert child.stdout.readline() == "held\n"
        result = cli(
            "message",
            "send",
            "--from-member-id",
            str(director),
            "--to-member-id",
            str(member),
            "task",
            environ=dict(env, CAFLEET_DATABASE_URL=other, CAFLEET_LOCK_TIMEOUT="0.2"),
        )
    finally:
        child.kill()
        child.wait(timeout=10)
    assert (result.code, result.out) == (0, f"sent message 1 to member {member}\n")
    assert "the pane-input lock for pane %5 is still held by another cafleet process after 0.2 s" in result.err


def test_unusable_lock_folder_is_a_one_line_lock_error(tmp_path):
    from cafleet.delivery.keystrokes.lock import LockUnavailable

    blocked = tmp_path / "locks"
    blocked.write_text("a file where the folder should be\n")
    with pytest.raises(LockUnavailable) as caught, pane_lock(FileLocks(blocked), "tmux", SESSION, "%3", timeout=1):
        pytest.fail("a lock was taken in a folder that is a file")
    assert str(caught.value) == (
        f"the pane-input lock for pane %3 cannot be taken ([Errno 17] File exists: {str(blocked)!r}); "
        f"{blocked} must be a folder this user can write"
    )


def test_zero_timeout_is_one_attempt(holder, where):
    holder()
    cpu = time.process_time()
    with pytest.raises(LockTimeout), pane_lock(space(where), "tmux", SESSION, "%3", timeout=0):
        pass
    assert time.process_time() - cpu < 0.1


class KeyLog:
    """A multiplexer stand-in that only records the calls it gets (nothing here reaches a pane)."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def type_text(self, pane_id: str, text: str) -> None:
        self.calls.append(("type", pane_id, text))

    def press_enter(self, pane_id: str) -> None:
        self.calls.append(("enter", pane_id))

    def press_backspace(self, pane_id: str, count: int) -> None:
        self.calls.append(("backspace", pane_id, count))

    def capture(self, pane_id: str, lines: int = 50, ansi: bool = False) -> str:
        self.calls.append(("capture", pane_id))
        return ""


def test_keystrokes_are_checked_against_the_lock_only_where_a_living_holder_can_lose_it(where, store_kind):
    """An flock is held for as long as its holder lives: the guard is the multiplexer itself
    (nothing checked, nothing added). An advisory lock dies with its session: each call that
    sends keys asks first, and once the session was ended none is made."""
    from cafleet.delivery.keystrokes.lock import LockLost

    keys = KeyLog()
    with pane_lock(space(where), "tmux", SESSION, "%3", timeout=5) as held:
        held.check()
        guarded = held.guard(keys)
        if store_kind == "sqlite":
            assert guarded is keys
            return
        guarded.type_text("%3", "abc")
        guarded.press_enter("%3")
        assert keys.calls == [("type", "%3", "abc"), ("enter", "%3")] and guarded.typed

        import psycopg

        from cafleet.store.postgres import pane_key

        key = pane_key("tmux", SESSION, "%3")
        with psycopg.connect(where, autocommit=True) as admin:
            [(pid,)] = admin.execute(
                "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1 "
                "AND classid = %s::bigint::oid AND objid = %s::bigint::oid",
                ((key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF),
            ).fetchall()
            assert admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)
            from tests.support.tmux_fixtures import wait_for

            wait_for(
                lambda: (
                    admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone() == (0,)
                ),
                timeout=30,
                what="the server to end the lock's session",
            )
        message = "the pane-input lock for pane %3 was lost (its database session ended), so typing stopped"
        for call in (lambda: guarded.type_text("%3", "d"), lambda: guarded.press_enter("%3"), held.check):
            with pytest.raises(LockLost) as caught:
                call()
            assert str(caught.value) == message
        with pytest.raises(LockLost):
            guarded.press_backspace("%3", 3)
        assert guarded.capture("%3") == ""  # reading the pane is no keystroke: it goes through
        assert keys.calls == [("type", "%3", "abc"), ("enter", "%3"), ("capture", "%3")]
    with pane_lock(space(where), "tmux", SESSION, "%3", timeout=0):  # free: the ended session held nothing
        pass


def test_the_lock_file_records_the_previews_an_enter_was_pressed_for(where, store_kind):
    """The held lock file keeps, across holders, the message ids whose preview got an Enter
    in that pane and was not stamped (the retry of one of them may search the pane's
    history for its echo: delivery/keystrokes/submit.py); the last 32 are kept. An advisory lock
    (PostgreSQL) has no file: nothing is recorded."""
    with pane_lock(space(where), "tmux", "main", "%1", 1) as held:
        assert not held.entered_before(7)
        held.note_entered(7)
    if store_kind == "postgres":
        with pane_lock(space(where), "tmux", "main", "%1", 1) as held:
            assert not held.entered_before(7)
        return
    with pane_lock(space(where), "tmux", "main", "%2", 1) as other:
        assert not other.entered_before(7)  # another pane's record
    with pane_lock(space(where), "tmux", "main", "%1", 1) as held:
        assert held.entered_before(7) and not held.entered_before(8)
        held.forget_entered(7)
    with pane_lock(space(where), "tmux", "main", "%1", 1) as held:
        assert not held.entered_before(7)
        for message_id in range(1, 41):
            held.note_entered(message_id)
        assert not held.entered_before(8) and held.entered_before(9) and held.entered_before(40)
