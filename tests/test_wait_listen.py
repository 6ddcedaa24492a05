"""`message wait` and `message listen` across real processes."""

from __future__ import annotations

STORES = ("sqlite", "postgres")  # every test here runs on both stores (tests/conftest.py)

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.support.pause import default_sigint, held_commands


@pytest.fixture
def trio(build):
    return build.fleet()


@pytest.fixture
def held(tmp_path):
    """``held(environ, point, *args)``: a real command paused at ``point`` (tests/support/pause.py)."""
    yield from held_commands(tmp_path)


def spawn(env, *args, **kwargs):
    return subprocess.Popen(
        [sys.executable, "-m", "cafleet", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=default_sigint,
        **kwargs,
    )


def messages_dump(store):
    return store.execute("SELECT * FROM messages ORDER BY message_id").fetchall()


def test_wait_returns_at_once_when_messages_are_pending(cli, trio):
    _, _, (m1, m2) = trio
    cli("message", "send", "--from-member-id", str(m1), "--to-member-id", str(m2), "ready")
    result = cli("message", "wait", str(m2), "--timeout", "5", "--json")
    assert result.code == 0
    assert [r["text"] for r in result.json()] == ["ready"]


def test_wait_timeout_prints_nothing_and_exits_3(cli, trio):
    _, _, (m1, m2) = trio
    started = time.monotonic()
    result = cli("message", "wait", str(m2), "--timeout", "0.3")
    assert (result.code, result.out, result.err) == (3, "", "")
    assert time.monotonic() - started >= 0.3  # never early; how late is load's business


def test_wait_wakes_for_a_message_without_spinning(env, cli, trio, held, tmp_path, store_kind):
    """A quiet wait neither re-reads its inbox nor checks for changes more often than its
    interval allows. Counted, not timed: the command appends each loop turn to a trace file
    (cafleet.faults.trace_point), and a sleep never ends early, so in ``elapsed`` seconds
    there can be at most ``elapsed / step`` checks whatever the machine's load. How fast it
    wakes is a benchmark's business (bench/); here it must wake, with the message."""
    from cafleet.delivery.inbox import DEFAULT_INTERVAL
    from cafleet.store.changes import BLOCKING_STEP
    from cafleet.store.postgres import FALLBACK_POLL

    _, _, (m1, m2) = trio
    trace = tmp_path / "trace"
    quiet_env = {k: v for k, v in env.items() if k != "CAFLEET_WAIT_INTERVAL"}  # default interval
    quiet_env["CAFLEET_TEST_TRACE"] = str(trace)
    waiter, release = held(quiet_env, "wait.empty", "message", "wait", str(m2), "--timeout", "600", "--json")
    assert trace.read_text(encoding="utf-8") == "wait.read\n"  # the one read before it waits
    released = time.monotonic()
    release()
    time.sleep(2.0)
    assert waiter.poll() is None
    lines = trace.read_text(encoding="utf-8").split("\n")[:-1]  # whole lines only
    elapsed = time.monotonic() - released
    if store_kind == "postgres":  # blocks in LISTEN a step at a time, re-reads on its fallback poll
        again = lines.count("wait.read") - 1
        assert again <= elapsed / FALLBACK_POLL + 1, lines
        checks = lines.count("changes.check")  # a step ends at its time or with a read again
        assert 0 < checks <= elapsed / BLOCKING_STEP + 1 + again, lines
        assert lines.count("store.wait") <= 2 * checks, lines  # one block, then the step's end
    else:
        assert lines.count("wait.read") == 1, lines  # nothing committed: nothing read again
        assert 0 < lines.count("changes.check") <= elapsed / DEFAULT_INTERVAL + 1, len(lines)
    sent = cli("message", "send", "--from-member-id", str(m1), "--to-member-id", str(m2), "wake up", "--json").json()
    out, err = waiter.communicate(timeout=60)  # bounds a failure; the wait itself is for 600 s
    assert waiter.returncode == 0, err
    assert [r["message_id"] for r in json.loads(out)] == [sent["message_id"]]
    assert trace.read_text(encoding="utf-8").count("wait.read") >= 2  # woke by reading again


def test_wait_unknown_member(cli):
    result = cli("message", "wait", "77", "--timeout", "0.1")
    assert (result.code, result.err) == (1, "Error: member 77 not found.\n")


def test_listen_streams_oldest_first_then_new_and_changes_nothing(env, cli, trio, store):
    fleet_id, director, (m1, m2) = trio
    first = [
        cli("message", "send", "--from-member-id", str(m1), "--to-member-id", str(m2), f"old {i}", "--json").json()
        for i in range(2)
    ]
    acked = cli("message", "send", "--from-member-id", str(m1), "--to-member-id", str(m2), "done", "--json").json()
    cli("message", "ack", str(acked["message_id"]))
    before = messages_dump(store)
    listener = spawn(env, "message", "listen", str(m2), "--json")
    try:
        lines = [json.loads(listener.stdout.readline()) for _ in range(2)]
        assert [r["message_id"] for r in lines] == [r["message_id"] for r in first]
        assert "notified_at" not in lines[0]
        assert messages_dump(store) == before  # read-only
        new = cli(
            "message", "send", "--from-member-id", str(director), "--to-member-id", str(m2), "new one", "--json"
        ).json()
        line = json.loads(listener.stdout.readline())
        assert line["message_id"] == new["message_id"] and line["text"] == "new one"
        cli("message", "ack", str(first[0]["message_id"]))  # an ACK is not a new line
        cli("fleet", "delete", str(fleet_id))
        final = json.loads(listener.stdout.readline())
        assert final == {"event": "end", "reason": f"fleet {fleet_id} was deleted"}
        assert listener.wait(timeout=60) == 0
        assert listener.stderr.read() == b""
    finally:
        if listener.poll() is None:
            listener.kill()
            listener.wait()


def test_listen_text_lines_and_deregistration(env, cli, trio, store):
    _, _, (m1, m2) = trio
    listener = spawn(env, "message", "listen", str(m2))
    try:
        sent = cli(
            "message", "send", "--from-member-id", str(m1), "--to-member-id", str(m2), "two\nlines", "--json"
        ).json()
        line = listener.stdout.readline().decode()
        assert line == f"[msg {sent['message_id']} | from:{m1} | {sent['status_timestamp']}] two⏎lines\n"
        from cafleet.broker import members

        members.deregister_member(store, m2)
        assert listener.stdout.readline() == f"listen ended: member {m2} was deregistered\n".encode()
        assert listener.wait(timeout=60) == 0
    finally:
        if listener.poll() is None:
            listener.kill()
            listener.wait()


@pytest.mark.parametrize("sig, json_output", [(signal.SIGINT, False), (signal.SIGTERM, True)])
def test_listen_ends_with_its_end_line_on_signals(env, cli, trio, sig, json_output):
    _, _, (m1, m2) = trio
    listener = spawn(env, "message", "listen", str(m2), *(["--json"] if json_output else []))
    try:
        cli("message", "send", "--from-member-id", str(m1), "--to-member-id", str(m2), "first")
        assert listener.stdout.readline()  # a line is out: the stream is running, its handlers set
        listener.send_signal(sig)
        out, err = listener.communicate(timeout=30)
    finally:
        if listener.poll() is None:
            listener.kill()
            listener.wait()
    name = signal.Signals(sig).name
    end = (
        json.dumps({"event": "end", "reason": f"stopped by {name}"}, separators=(",", ":"))
        if json_output
        else f"listen ended: stopped by {name}"
    )
    assert (listener.returncode, out.decode(), err) == (0, end + "\n", b"")


def test_listen_ends_cleanly_when_stdout_closes(env, cli, trio):
    _, _, (m1, m2) = trio
    read_fd, write_fd = os.pipe()
    listener = subprocess.Popen(
        [sys.executable, "-m", "cafleet", "message", "listen", str(m2)],
        env=env,
        stdout=write_fd,
        stderr=subprocess.PIPE,
    )
    os.close(write_fd)
    try:
        cli("message", "send", "--from-member-id", str(m1), "--to-member-id", str(m2), "first")
        assert os.read(read_fd, 1000).startswith(b"[msg ")
        os.close(read_fd)
        cli("message", "send", "--from-member-id", str(m1), "--to-member-id", str(m2), "into the void")
        assert listener.wait(timeout=60) == 0
        assert listener.stderr.read() == b""
    finally:
        if listener.poll() is None:
            listener.kill()
            listener.wait()
