"""The wake-up primitive (`cafleet.store.changes`) and what rests on it: `message wait`
never misses a commit that lands between its read and its wait, ends with a reason when
its member can no longer receive, and the long-running commands stop cleanly on a signal.

Every window is reached exactly with the pause hook (tests/support/pause.py), never by
sleeping and hoping."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from cafleet.broker import fleets, members, messages
from cafleet.store.changes import Changes
from cafleet.store.engines import open_store
from tests.support.hooked import cafleet_argv
from tests.support.pause import default_sigint, held_commands


@pytest.fixture
def trio(build):
    return build.fleet()


@pytest.fixture
def held(tmp_path):
    """``held(environ, point, *args)``: a real command paused at ``point`` (tests/support/pause.py)."""
    yield from held_commands(tmp_path)


def spawn(env, *args):
    return subprocess.Popen(
        [*cafleet_argv(env), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=default_sigint,
    )


def finish(proc, what, timeout=60):
    """Output of a command that must end by itself; the timeout only bounds a failure."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{what} did not end within {timeout} s")


# --- the primitive, driven directly with two connections ------------------------------------


def test_changes_baseline_is_taken_when_created(db_path, trio):
    _, _, (m1, m2) = trio
    reader, writer = open_store(db_path), open_store(db_path)
    try:
        changes = Changes(reader, 0.01)
        assert changes.changed() is False
        messages.send(writer, m1, m2, "between the baseline and the read")
        assert changes.changed() is True  # a commit after the baseline, before any look, is seen
        assert changes.changed() is False  # once
        messages.send(writer, m1, m2, "before the wait")
        assert changes.wait() is True  # a wait that starts after a commit returns at once
        assert changes.wait(until=time.monotonic() + 0.05) is False  # nothing since: the bound ends it
        messages.send(reader, m1, m2, "own commit")
        assert changes.changed() is False  # only other connections' commits count
    finally:
        reader.close()
        writer.close()


def test_changes_deadline_ends_every_wait(db_path, trio):
    reader = open_store(db_path)
    try:
        changes = Changes(reader, 0.01, deadline=time.monotonic() - 1)
        assert changes.wait() is False
        assert list(changes) == []
    finally:
        reader.close()


# --- message wait: the window between the read and the wait ---------------------------------


def test_wait_sees_a_message_committed_between_its_read_and_its_wait(env, cli, trio, held):
    """The inbox is read and found empty; a message is committed; only then does the wait
    begin. Nothing else commits afterwards, so a wait that took its baseline after the read
    would sleep until its 600 s timeout; the right one returns the message at once."""
    _, _, (m1, m2) = trio
    waiter, release = held(env, "wait.empty", "message", "wait", str(m2), "--timeout", "600", "--json")
    sent = cli("message", "send", "--from-member-id", str(m1), "--to-member-id", str(m2), "in the window", "--json")
    assert sent.code == 0
    release()
    out, err = finish(waiter, "message wait (woken by a message committed in its window)")
    assert (waiter.returncode, err) == (0, b"")
    assert [r["message_id"] for r in json.loads(out)] == [sent.json()["message_id"]]


# --- message wait: a member that can no longer receive --------------------------------------


def gone(how, store, fleet_id, member_id):
    if how == "deregistered":
        members.deregister_member(store, member_id)
        return f"member {member_id} was deregistered"
    fleets.delete_fleet(store, fleet_id)
    return f"fleet {fleet_id} was deleted"


def expected_error(reason, member_id):
    who = "it" if reason.startswith("member") else f"member {member_id}"
    return (
        f"Error: {reason}, so {who} receives no more messages; "
        f"`cafleet message poll {member_id}` still lists what it received.\n"
    )


@pytest.mark.parametrize("how", ["deregistered", "fleet-deleted"])
def test_wait_for_a_member_that_cannot_receive_fails_at_once(env, store, trio, how):
    fleet_id, _, (_m1, m2) = trio
    reason = gone(how, store, fleet_id, m2)
    waiter = spawn(env, "message", "wait", str(m2))  # no timeout: only the check can end it
    out, err = finish(waiter, "message wait for a member that cannot receive")
    assert (waiter.returncode, out, err.decode()) == (1, b"", expected_error(reason, m2))


@pytest.mark.parametrize("how", ["deregistered", "fleet-deleted"])
def test_wait_ends_when_its_member_stops_receiving_while_it_waits(env, store, trio, held, how):
    fleet_id, _, (_m1, m2) = trio
    waiter, release = held(env, "wait.empty", "message", "wait", str(m2), "--timeout", "600")
    reason = gone(how, store, fleet_id, m2)  # after the wait's own check: only the wake-up can see it
    release()
    out, err = finish(waiter, "message wait whose member stopped receiving")
    assert (waiter.returncode, out, err.decode()) == (1, b"", expected_error(reason, m2))


def test_wait_interrupted_exits_130_and_prints_nothing(env, trio, held):
    _, _, (_m1, m2) = trio
    waiter, _release = held(env, "wait.empty", "message", "wait", str(m2), "--timeout", "600")
    waiter.send_signal(signal.SIGINT)
    out, err = finish(waiter, "message wait after SIGINT")
    assert (waiter.returncode, out, err) == (130, b"", b"")


# --- fleet watch on a signal -----------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_fleet_watch_ends_with_its_end_event_on_signals(env, cli, trio, sig):
    """Members without panes: the watch needs no multiplexer. A Director message proves the
    stream is running before the signal is sent."""
    fleet_id, director, (m1, _m2) = trio
    watcher = spawn(env, "fleet", "watch", str(fleet_id), "--json", "--idle-after", "600")
    try:
        sent = cli("message", "send", "--from-member-id", str(m1), "--to-member-id", str(director), "hi", "--json")
        first = json.loads(watcher.stdout.readline())
        assert (first["event"], first["message_id"]) == ("message", sent.json()["message_id"])
        watcher.send_signal(sig)
        out, err = finish(watcher, "fleet watch after a signal")
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.wait()
    lines = [json.loads(line) for line in out.splitlines()]
    assert (watcher.returncode, err) == (0, b"")
    assert lines[-1]["event"] == "end"
    assert lines[-1]["detail"] == f"watch ended: stopped by {signal.Signals(sig).name}"


def test_listen_started_with_sigint_ignored_keeps_ignoring_it(env, cli, trio):
    """A background job of a non-interactive shell starts with SIGINT ignored: Ctrl-C at the
    terminal is not for it. SIGINT then SIGTERM: only SIGTERM ends the stream."""
    _, _, (m1, m2) = trio
    listener = subprocess.Popen(
        [sys.executable, "-m", "cafleet", "message", "listen", str(m2)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    try:
        cli("message", "send", "--from-member-id", str(m1), "--to-member-id", str(m2), "first")
        assert listener.stdout.readline()  # the stream is running
        listener.send_signal(signal.SIGINT)
        listener.send_signal(signal.SIGTERM)
        out, err = finish(listener, "message listen after SIGINT and SIGTERM")
    finally:
        if listener.poll() is None:
            listener.kill()
            listener.wait()
    assert (listener.returncode, out, err) == (0, b"listen ended: stopped by SIGTERM\n", b"")


# --- the database file deleted or replaced under a running reader ---------------------------


def replace_file(db_path, how):
    """Delete the database (move it away) or put another file in its place."""
    import os
    import shutil

    moved = db_path + ".moved"
    os.replace(db_path, moved)
    if how == "replaced":
        shutil.copyfile(moved, db_path)
        return "was replaced by another file"
    return "was deleted"


@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_wait_stops_when_its_database_file_is_deleted_or_replaced(env, db_path, trio, held, how):
    _, _, (_, m2) = trio
    waiter, release = held(env, "wait.empty", "message", "wait", str(m2), "--timeout", "600")
    said = replace_file(db_path, how)
    release()
    out, err = finish(waiter, "message wait on a deleted or replaced database")
    assert (waiter.returncode, out) == (1, b"")
    assert err.decode() == f"Error: database {db_path} {said} while this command was running; it stopped.\n"


@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_listen_and_watch_end_with_their_line_when_the_database_file_goes(env, cli, db_path, trio, how):
    fleet_id, director, (m1, m2) = trio
    assert cli("message", "send", "--from-member-id", str(m1), "--to-member-id", str(m2), "first").code == 0
    assert cli("message", "send", "--from-member-id", str(m1), "--to-member-id", str(director), "report").code == 0
    listener = spawn(env, "message", "listen", str(m2), "--json")
    watcher = spawn(env, "fleet", "watch", str(fleet_id), "--json")
    # each has printed its first line, so each stands in its loop on the file it opened
    assert json.loads(listener.stdout.readline())["text"] == "first"
    assert json.loads(watcher.stdout.readline())["event"] == "message"
    said = replace_file(db_path, how)
    out, err = finish(listener, "message listen on a deleted or replaced database")
    assert (listener.returncode, err) == (0, b"")
    assert json.loads(out.decode().splitlines()[-1]) == {
        "event": "end",
        "reason": f"database {db_path} {said} while this command was running; it stopped",
    }
    out, err = finish(watcher, "fleet watch on a deleted or replaced database")
    assert watcher.returncode == 0, err
    end = json.loads(out.decode().splitlines()[-1])
    assert end["event"] == "end"
    assert end["detail"].endswith(f"database {db_path} {said} while this command was running; it stopped")


def test_server_stops_rather_than_serve_another_file(env, db_path, trio):
    from tests.support.web_server import ServerProcess, free_port

    server = ServerProcess(env, "--port", str(free_port()))
    try:
        assert server.url, server.first_line
        import urllib.request

        asked = urllib.request.Request(f"{server.url}api/fleets", headers=server.headers)
        with urllib.request.urlopen(asked, timeout=30) as answer:
            assert answer.status == 200
        said = replace_file(db_path, "deleted")
        try:
            urllib.request.urlopen(asked, timeout=30)
            pytest.fail("the server answered from a deleted database")
        except urllib.error.HTTPError as refused:
            assert refused.code == 503
        server.proc.wait(timeout=30)  # it stops by itself
        _out, err = server.proc.communicate(timeout=10)
    finally:
        if server.proc.poll() is None:
            server.stop()
    assert server.proc.returncode == 1
    assert err.decode().strip().splitlines()[-1] == (
        f"Error: database {db_path} {said} while this command was running; it stopped."
    )
    import os

    assert not os.path.exists(db_path), "the server created a new empty database in the old one's place"
