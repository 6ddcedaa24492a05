"""`message wait` and `message listen` across real processes."""

from __future__ import annotations

STORES = ("sqlite", "postgres")  # every test here runs on both stores (tests/conftest.py)

import json
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from tests.support.hooked import cafleet_argv
from tests.support.pause import default_sigint, held_commands
from tests.support.postgres import terminate
from tests.support.tmux_fixtures import wait_for


@pytest.fixture
def trio(build):
    return build.fleet()


@pytest.fixture
def held(tmp_path):
    """``held(environ, point, *args)``: a real command paused at ``point`` (tests/support/pause.py)."""
    yield from held_commands(tmp_path)


def spawn(env, *args, **kwargs):
    return subprocess.Popen(
        [*cafleet_argv(env), *args],
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
    _, _, (_m1, m2) = trio
    started = time.monotonic()
    result = cli("message", "wait", str(m2), "--timeout", "0.3")
    assert (result.code, result.out, result.err) == (3, "", "")
    assert time.monotonic() - started >= 0.3  # never early; how late is load's business


def test_wait_wakes_for_a_message_without_spinning(env, cli, trio, held, tmp_path, store_kind):
    """A quiet wait neither re-reads its inbox nor checks for changes more often than its
    interval allows. Counted, not timed: the command appends each loop turn to a trace file
    (a trace point, cafleet.faults), and a sleep never ends early, so in ``elapsed`` seconds
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


# --- the server ends the session (PostgreSQL) -------------------------------------------------
# A restart, pg_terminate_backend or idle_session_timeout ends a command's sessions: its
# store's and its LISTEN's. Each command is told apart by its own application_name
# (libpq's PGAPPNAME) and counts its reconnection attempts in its trace (store.reconnect).


def traced(env, tmp_path, name: str) -> tuple[dict, object, str]:
    trace = tmp_path / f"{name}.trace"
    app = f"cafleet-{name}-{uuid.uuid4().hex[:8]}"
    return dict(env, CAFLEET_TEST_TRACE=str(trace), PGAPPNAME=app), trace, app


def count(trace, name: str) -> int:
    return trace.read_text(encoding="utf-8").split("\n").count(name) if trace.exists() else 0


def until_running(proc, check, what: str) -> None:
    """Wait (bounded) for ``check``; fail at once, with what it said, if ``proc`` exited."""

    def done():
        return proc.poll() is not None or check()

    wait_for(done, timeout=60, what=what)
    if proc.poll() is not None:
        out, err = proc.communicate()
        pytest.fail(f"exited {proc.returncode} instead: {out!r} {err!r}")


def send(cli, from_id, to_id, text, environ=None) -> dict:
    result = cli(
        "message", "send", "--from-member-id", str(from_id), "--to-member-id", str(to_id), text, "--json",
        **({"environ": environ} if environ else {}),
    )  # fmt: skip
    assert result.code == 0, result
    return result.json()


@pytest.mark.stores("postgres")
@pytest.mark.parametrize("ending", ["terminated", "idle_session_timeout"])
def test_wait_reconnects_when_the_server_ends_its_sessions(env, cli, trio, tmp_path, db_path, pg_cluster, ending):
    """Terminated by an administrator, or by the server's idle_session_timeout (0.3 s, set on
    the database once the wait is waiting, so that its start is not raced, and given to its
    sessions by ending them once; reset before the send, so the sender is not raced either)."""
    _, _, (m1, m2) = trio
    environ, trace, app = traced(env, tmp_path, "wait")
    database = db_path.split("@/", 1)[1].split("?", 1)[0]
    waiter = spawn(environ, "message", "wait", str(m2), "--timeout", "600", "--json")
    try:
        until_running(waiter, lambda: count(trace, "store.wait") > 0, "the wait to block in LISTEN")
        if ending == "idle_session_timeout":
            pg_cluster.admin(f"ALTER DATABASE {database} SET idle_session_timeout = '300ms'")
        assert terminate(db_path, app) >= 2  # its store's session and its LISTEN's
        if ending == "idle_session_timeout":  # the sessions it reconnected with end by the timeout
            until_running(waiter, lambda: count(trace, "store.reconnect") >= 3, "reconnections after timeouts")
            pg_cluster.admin(f"ALTER DATABASE {database} RESET idle_session_timeout")
        until_running(waiter, lambda: count(trace, "store.reconnect") > 0, "a reconnection")
        sent = send(cli, m1, m2, "after the session ended")
        out, err = waiter.communicate(timeout=60)  # bounds a failure
    finally:
        pg_cluster.admin(f"ALTER DATABASE {database} RESET idle_session_timeout")
        if waiter.poll() is None:
            waiter.kill()
            waiter.wait()
    assert (waiter.returncode, err) == (0, b""), err
    assert [r["message_id"] for r in json.loads(out)] == [sent["message_id"]]


@pytest.mark.stores("postgres")
def test_listen_reconnects_losing_and_repeating_nothing_and_ends_with_its_line_when_it_gives_up(
    env, cli, trio, tmp_path, db_path, pg_cluster
):
    _, _, (m1, m2) = trio
    environ, trace, app = traced(env, tmp_path, "listen")
    environ["CAFLEET_PG_RECONNECT_TIMEOUT"] = "1"
    listener = spawn(environ, "message", "listen", str(m2), "--json")
    database = db_path.split("@/", 1)[1].split("?", 1)[0]
    try:
        sent = [send(cli, m1, m2, "one")]
        lines = [json.loads(listener.stdout.readline())]
        for n, text in enumerate(("two", "three"), 1):
            assert terminate(db_path, app) >= 2
            until_running(listener, lambda n=n: count(trace, "store.reconnect") >= n, "a reconnection")
            sent.append(send(cli, m1, m2, text))
            lines.append(json.loads(listener.stdout.readline()))
        assert [line["message_id"] for line in lines] == [record["message_id"] for record in sent]
        # Now the server lets nobody into the database: each try fails, and after 1 s it ends.
        pg_cluster.admin(f"ALTER DATABASE {database} ALLOW_CONNECTIONS false")
        terminate(db_path, app)
        out, err = listener.communicate(timeout=60)
    finally:
        pg_cluster.admin(f"ALTER DATABASE {database} ALLOW_CONNECTIONS true")
        if listener.poll() is None:
            listener.kill()
            listener.wait()
    assert listener.returncode == 1
    assert [json.loads(line) for line in out.decode().splitlines()] == [
        {"event": "end", "reason": err.decode().removeprefix("Error: ").rstrip("\n").removesuffix(".")}
    ]  # no message twice: the three lines came before, then only the end line
    assert err.decode().startswith("Error: cannot reach database ") and err.count(b"\n") == 1
    assert "not currently accepting connections" in err.decode() and "gave up reconnecting after" in err.decode()
    assert count(trace, "store.reconnect") > 3  # it kept trying, backing off, until its bound


@pytest.mark.slow
@pytest.mark.stores("postgres")
def test_wait_and_listen_resume_across_a_server_restart(env, tmp_path):
    """A real restart, on a private server (the session's is shared): a fast shutdown ends
    every session, the server stays down while both commands retry, then comes back; each
    reads again and gets what was sent, once. Stopped for good, a listener gives up."""
    from cafleet.broker import fleets, members, messages
    from cafleet.store.engines import open_store
    from tests.support.postgres import Cluster

    cluster = Cluster()
    started: list[subprocess.Popen] = []
    try:
        cluster.start()
        url = cluster.fresh_database()
        store = open_store(url)
        fleet = fleets.create_fleet(
            store, name="r", coding_agent="claude", backend="tmux", session="$0@/nonexistent/socket",
            window_id="@0", pane_id="%0",
        )  # fmt: skip
        m1, m2 = (
            members.register_member(
                store,
                fleet_id=fleet["fleet_id"],
                name=name,
                description="worker",
                backend="tmux",
                session="$0@/nonexistent/socket",
                window_id="@0",
                coding_agent="claude",
            )
            for name in ("m1", "m2")
        )
        environ = dict(env, CAFLEET_DATABASE_URL=url, CAFLEET_PG_RECONNECT_TIMEOUT="30")
        listen_env, listen_trace, _ = traced(environ, tmp_path, "listen")
        wait_env, wait_trace, _ = traced(environ, tmp_path, "wait")
        listener = spawn(listen_env, "message", "listen", str(m2), "--json")
        waiter = spawn(wait_env, "message", "wait", str(m1), "--timeout", "600", "--json")
        started += [listener, waiter]
        before = messages.send(store, m1, m2, "before")
        assert json.loads(listener.stdout.readline())["message_id"] == before["message_id"]
        until_running(waiter, lambda: count(wait_trace, "store.wait") > 0, "the wait to block in LISTEN")
        store.close()
        cluster.pause()
        for proc, trace in ((listener, listen_trace), (waiter, wait_trace)):
            until_running(proc, lambda trace=trace: count(trace, "store.reconnect") >= 2, "tries while down")
        cluster.resume()
        store = open_store(url)
        for_wait = messages.send(store, m2, m1, "for the wait")
        after = messages.send(store, m1, m2, "after")
        store.close()
        out, err = waiter.communicate(timeout=60)
        assert (waiter.returncode, err) == (0, b""), err
        assert [r["message_id"] for r in json.loads(out)] == [for_wait["message_id"]]
        assert json.loads(listener.stdout.readline())["message_id"] == after["message_id"]
        listener.send_signal(signal.SIGTERM)
        out, err = listener.communicate(timeout=60)
        assert (listener.returncode, err) == (0, b"")
        assert [json.loads(line) for line in out.decode().splitlines()] == [
            {"event": "end", "reason": "stopped by SIGTERM"}  # the restart printed nothing twice
        ]
        # Stopped for good: a listener bound to 1 s of reconnecting gives up, with its end line.
        short_env, short_trace, _ = traced(dict(environ, CAFLEET_PG_RECONNECT_TIMEOUT="1"), tmp_path, "short")
        short = spawn(short_env, "message", "listen", str(m2), "--json")
        started.append(short)
        assert [json.loads(short.stdout.readline())["text"] for _ in range(2)] == ["before", "after"]
        until_running(short, lambda: count(short_trace, "store.wait") > 0, "the listener to block in LISTEN")
        cluster.pause()
        out, err = short.communicate(timeout=60)
        assert short.returncode == 1 and err.startswith(b"Error: cannot reach database ") and err.count(b"\n") == 1
        assert b"gave up reconnecting after" in err
        assert [json.loads(line)["event"] for line in out.decode().splitlines()] == ["end"]
    finally:
        for proc in started:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        cluster.stop()
