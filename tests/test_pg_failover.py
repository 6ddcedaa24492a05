"""A PostgreSQL failover under a running fleet: the primary crashes, its streaming standby
is promoted, and cafleet, given both in one libpq multi-host URL with
``target_session_attrs=read-write`` (tests/support/pg_replica.py), carries on.

Synchronous replication: no message whose id a `message send` printed is lost, a send
works again within seconds of the promotion, and a `message wait` that was blocked in
LISTEN on the old primary reconnects to the new one and returns the message sent there.

Asynchronous replication (what it costs): exactly the messages committed on the primary
after the standby stopped receiving its WAL are lost; everything the standby had received
is there, and the new primary's ids never go back below the replicated ones.

The long-running commands (synchronous replication, a fleet whose Director sits in a real
pane): `message listen` and `fleet watch` streams, `cafleet server` and the fleet keeper run
across the failover; each works on the new primary within 15 s of the promotion, the streams
printing nothing twice and losing nothing, the keeper never ending and holding its lock
again on a session of the new primary (the only keeper session there).

Timings are printed (``pytest -s``); the only timed assertions are the generous bounds of
the failover itself (15 s from the promotion to a working send, and to each long-running
command working again; 20 s from that send to the waiter's return)."""

from __future__ import annotations

import io
import json
import subprocess
import threading
import time
import uuid

import pytest

from cafleet.broker import fleets, members
from cafleet.cli.context import Context
from cafleet.cli.main import main
from cafleet.store.engines import open_store
from tests.support import pg_replica
from tests.support.environ import isolated_environ
from tests.support.hooked import cafleet_argv
from tests.support.tmux_fixtures import wait_for

SEND_AFTER_PROMOTION = 15.0  # seconds from the promotion to the first send that works
WAITER_AFTER_SEND = 20.0  # seconds from that send to the waiting `message wait` returning it
DOWNTIME = 3.0  # seconds between the crash and the promotion (sends keep being tried)
RETRY_FOR = 45.0  # how long the send is retried (past the bound, so a slow recovery is measured)


@pytest.fixture
def replicas(request):
    reason = pg_replica.missing_reason()
    if reason:
        pytest.skip(reason)
    pair = pg_replica.Pair(synchronous=getattr(request, "param", True))
    try:
        pair.start()
        yield pair
    finally:
        pair.stop()


def environ_for(tmp_path, url: str, **extra: str) -> dict[str, str]:
    return isolated_environ(tmp_path / "home", CAFLEET_DATABASE_URL=url, CAFLEET_WAIT_INTERVAL="0.02", **extra)


def make_fleet(url: str, *names: str) -> dict[str, int]:
    """A fleet with members and pending placements (no panes), made through the broker on
    the multi-host URL; returns the member ids by name ("director" too)."""
    store = open_store(url)
    try:
        record = fleets.create_fleet(
            store, name="failover", coding_agent="claude", backend="tmux", session="$0@/nonexistent/socket",
            window_id="@0", pane_id="%0",
        )  # fmt: skip
        ids = {"director": record["director_member_id"]}
        for name in names:
            ids[name] = members.register_member(
                store, fleet_id=record["fleet_id"], name=name, description=f"{name} worker", backend="tmux",
                session="$0@/nonexistent/socket", window_id="@0", coding_agent="claude", pane_id=None,
            )  # fmt: skip
        return ids
    finally:
        store.close()


class Attempt:
    """One `cafleet message send` run as a subprocess: when it started and ended, its exit
    status, the id it printed (exit 0) and its error line (otherwise)."""

    def __init__(self, environ: dict, from_id: int, to_id: int, text: str, timeout: float = 30) -> None:
        self.text = text
        self.started = time.monotonic()
        try:
            done = subprocess.run(
                [*cafleet_argv(environ), "message", "send", "--from-member-id", str(from_id),
                 "--to-member-id", str(to_id), text, "--json"],
                capture_output=True, env=environ, timeout=timeout,
            )  # fmt: skip
            self.code, out, err = done.returncode, done.stdout, done.stderr
        except subprocess.TimeoutExpired as expired:  # subprocess.run killed and reaped it
            self.code, out, err = None, expired.stdout or b"", (expired.stderr or b"") + b"[timed out]"
        self.ended = time.monotonic()
        self.error = err.decode("utf-8", "replace").strip()
        self.message_id = json.loads(out)["message_id"] if self.code == 0 else None

    def __repr__(self) -> str:
        return f"Attempt({self.text!r}, code={self.code}, id={self.message_id}, error={self.error!r})"


def show(environ: dict, message_id: int) -> tuple[int, dict | None, str]:
    """`cafleet message show ID --json`, in this process: (exit status, record, stderr)."""
    out, err = io.BytesIO(), io.BytesIO()
    code = main(
        ["message", "show", str(message_id), "--json"],
        Context(environ=dict(environ), stdin=io.BytesIO(), stdout=out, stderr=err),
    )
    return code, (json.loads(out.getvalue()) if code == 0 else None), err.getvalue().decode()


def send_until_it_works(environ: dict, from_id: int, to_id: int, text: str) -> tuple[Attempt, list[Attempt]]:
    """Retry the send (each try a new command) until one exits 0, for at most RETRY_FOR s;
    returns that attempt and the failed ones before it."""
    failed: list[Attempt] = []
    give_up = time.monotonic() + RETRY_FOR
    while True:
        attempt = Attempt(environ, from_id, to_id, text)
        if attempt.code == 0:
            return attempt, failed
        failed.append(attempt)
        if time.monotonic() > give_up:
            pytest.fail(f"no send worked in {RETRY_FOR} s after the promotion; the last tries: {failed[-3:]}")
        time.sleep(0.1)


def distinct_errors(attempts: list[Attempt]) -> list[str]:
    seen: list[str] = []
    for attempt in attempts:
        if attempt.error not in seen:
            seen.append(attempt.error)
    return seen


def trace_count(path, name: str) -> int:
    return path.read_text(encoding="utf-8").split("\n").count(name) if path.exists() else 0


@pytest.mark.parametrize("replicas", [True], indirect=True, ids=["synchronous"])
def test_a_failover_to_a_synchronous_standby_loses_no_sent_message_and_wakes_the_waiting_member(replicas, tmp_path):
    url = replicas.url()
    environ = environ_for(tmp_path, url)
    ids = make_fleet(url, "writer", "reader", "waiting")
    trace = tmp_path / "wait.trace"
    wait_env = dict(environ, CAFLEET_TEST_TRACE=str(trace), PGAPPNAME=f"cafleet-wait-{uuid.uuid4().hex[:8]}")
    waiter = subprocess.Popen(
        [*cafleet_argv(wait_env), "message", "wait", str(ids["waiting"]), "--timeout", "300", "--json"],
        env=wait_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    returned: dict = {}

    def collect():  # the waiter's output, and when it ended
        returned["out"], returned["err"] = waiter.communicate()
        returned["at"] = time.monotonic()

    collector = threading.Thread(target=collect, daemon=True)
    collector.start()
    try:
        wait_for(
            lambda: waiter.poll() is not None or trace_count(trace, "store.wait") > 0,
            timeout=60,
            what="the wait to block in LISTEN",
        )
        assert waiter.poll() is None, f"the wait exited early: {returned}"

        # Messages sent one after another, up to and through the crash of the primary.
        before: list[Attempt] = []
        stop_sending = threading.Event()

        def keep_sending():
            n = 0
            while not stop_sending.is_set():
                n += 1
                before.append(Attempt(environ, ids["writer"], ids["reader"], f"before {n}"))

        sender = threading.Thread(target=keep_sending)
        sender.start()
        try:
            wait_for(lambda: sum(a.code == 0 for a in before) >= 10, timeout=120, what="10 sends")
            replicas.crash_primary()
            crashed = time.monotonic()
            # Down for DOWNTIME s: the sends keep failing, the wait backs off between its tries.
            wait_for(
                lambda: time.monotonic() - crashed >= DOWNTIME and any(a.started > crashed for a in before),
                timeout=60,
                what="sends while the primary is down",
            )
        finally:
            stop_sending.set()
            sender.join(timeout=120)
        printed = [a for a in before if a.code == 0]
        during = [a for a in before if a.started > crashed]
        in_flight = [a for a in before if a.code != 0 and a.started <= crashed]
        print(f"\nbefore the crash: {len(printed)} ids printed, {len(in_flight)} send(s) cut by the crash")
        print("a send while no server takes writes:", distinct_errors(during))
        # Nothing takes writes between the crash and the promotion: the standby is read-only,
        # and target_session_attrs=read-write keeps the sends off it.
        assert during and all(a.code != 0 for a in during), during
        assert all(a.error.startswith("Error: cannot reach database ") and "\n" not in a.error for a in during)
        assert waiter.poll() is None, f"the wait ended while the server was down: {returned}"

        started_promotion = time.monotonic()
        promoted = replicas.promote()
        print(f"promotion took {promoted - started_promotion:.2f} s ({promoted - crashed:.2f} s after the crash)")

        after, failed = send_until_it_works(environ, ids["writer"], ids["waiting"], "after the failover")
        to_send = after.ended - promoted
        print(f"promotion -> first send that worked: {to_send:.2f} s ({len(failed)} failed tries before it)")
        if failed:
            print("  the failed tries said:", distinct_errors(failed))
        collector.join(timeout=after.ended + WAITER_AFTER_SEND + 30 - time.monotonic())
        assert "at" in returned, "the wait did not return after the failover"
        print(f"promotion -> the waiting `message wait` returned: {returned['at'] - promoted:.2f} s")
        print(
            f"the wait's reconnection tries: {trace_count(trace, 'store.reconnect')}, "
            f"its reads: {trace_count(trace, 'wait.read')}"
        )
    finally:
        pg_replica.ended(waiter)
        collector.join(timeout=30)

    # (a) a send works again, soon after the promotion
    assert to_send <= SEND_AFTER_PROMOTION, f"the first send worked {to_send:.1f} s after the promotion"
    # (b) the blocked wait came back with the new message, once
    assert (waiter.returncode, returned["err"]) == (0, b""), returned
    assert [r["message_id"] for r in json.loads(returned["out"])] == [after.message_id]
    assert returned["at"] - after.ended <= WAITER_AFTER_SEND
    # (c) every id printed before the failover names its message on the new primary
    for attempt in printed:
        code, record, err = show(environ, attempt.message_id)
        assert code == 0, (attempt, err)
        assert record["text"] == attempt.text and record["to_member_id"] == ids["reader"]
    pending = {r["message_id"]: r["text"] for r in json.loads(_poll(environ, ids["reader"]))}
    assert {a.message_id: a.text for a in printed}.items() <= pending.items()
    extra = sorted(set(pending.values()) - {a.text for a in printed})
    print(f"committed although their send failed (cut by the crash): {extra}")
    assert set(extra) <= {a.text for a in in_flight}  # nothing else appeared
    # ids go on upwards on the new primary
    assert after.message_id > max(pending)


def _poll(environ: dict, member_id: int) -> str:
    out, err = io.BytesIO(), io.BytesIO()
    code = main(
        ["message", "poll", str(member_id), "--json"],
        Context(environ=dict(environ), stdin=io.BytesIO(), stdout=out, stderr=err),
    )
    assert code == 0, err.getvalue()
    return out.getvalue().decode()


@pytest.mark.parametrize("replicas", [False], indirect=True, ids=["asynchronous"])
def test_a_failover_to_an_asynchronous_standby_loses_exactly_what_it_had_not_received(replicas, tmp_path):
    """What asynchronous replication costs, made deterministic: the standby stops receiving
    (tests/support/pg_replica.py, ``cut_replication``) and the primary keeps acknowledging
    sends; after the crash and the promotion, exactly those are gone (``message show``:
    not found), everything sent before the cut is there, and a send works."""
    url = replicas.url()
    environ = environ_for(tmp_path, url)
    ids = make_fleet(url, "writer", "reader")
    replicated = [Attempt(environ, ids["writer"], ids["reader"], f"replicated {n}") for n in range(5)]
    assert all(a.code == 0 for a in replicated), replicated
    replicas.caught_up()
    replicas.cut_replication()
    unreplicated = [Attempt(environ, ids["writer"], ids["reader"], f"unreplicated {n}") for n in range(5)]
    assert all(a.code == 0 for a in unreplicated), unreplicated  # acknowledged: the primary waits for no one
    replicas.crash_primary()
    promoted = replicas.promote()
    after, failed = send_until_it_works(environ, ids["writer"], ids["reader"], "after the failover")
    print(f"\npromotion -> first send that worked: {after.ended - promoted:.2f} s ({len(failed)} failed tries)")
    kept = [a.message_id for a in replicated if show(environ, a.message_id)[0] == 0]
    lost = [a.message_id for a in unreplicated if show(environ, a.message_id)[0] != 0]
    print(f"replicated ids kept: {kept}; acknowledged but lost: {lost}; the first id after: {after.message_id}")
    assert kept == [a.message_id for a in replicated]
    assert lost == [a.message_id for a in unreplicated]
    code, _, err = show(environ, unreplicated[0].message_id)
    assert (code, err) == (1, f"Error: message {unreplicated[0].message_id} not found.\n")
    assert after.message_id > max(kept)
    reused = sorted({after.message_id} & set(lost))
    print(f"a lost id given to a new message: {reused or 'none'}")


# --- the long-running commands: `message listen`, `fleet watch`, the WebUI, the keeper ---------

RECONNECT_BOUND = 15.0  # seconds from the promotion to each one working on the new primary
RETAKEN = "the lock is taken again on a new session"


class Lines:
    """A running command whose standard output is JSON lines (`message listen --json`,
    `fleet watch --json`), read by a thread: each line kept with the :func:`time.monotonic`
    at which it arrived; standard error is collected by another."""

    def __init__(self, environ: dict, *args: str) -> None:
        self.proc = subprocess.Popen(
            [*cafleet_argv(environ), *args], env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        self.lines: list[tuple[float, dict]] = []
        self.err = b""
        self.readers = [
            threading.Thread(target=self._out, daemon=True),
            threading.Thread(target=self._err, daemon=True),
        ]
        for reader in self.readers:
            reader.start()

    def _out(self) -> None:
        for line in self.proc.stdout:
            try:
                record = json.loads(line)
            except ValueError:  # kept, so that an assertion shows it
                record = {"event": "not JSON", "line": line.decode("utf-8", "replace")}
            self.lines.append((time.monotonic(), record))

    def _err(self) -> None:
        self.err = self.proc.stderr.read()

    def records(self) -> list[dict]:
        return [record for _, record in list(self.lines)]

    def arrival(self, predicate) -> float | None:
        """When the first line ``predicate`` accepts arrived, or None."""
        return next((at for at, record in list(self.lines) if predicate(record)), None)

    def wait(self, predicate, what: str, timeout: float = 60) -> float:
        """Wait (bounded) for a line ``predicate`` accepts; fail at once if the command ended."""
        wait_for(lambda: self.arrival(predicate) or self.proc.poll() is not None, timeout=timeout, what=what)
        arrived = self.arrival(predicate)
        if arrived is None:
            self.stop()
            pytest.fail(f"ended ({self.proc.returncode}) before {what}: {self.records()} {self.err!r}")
        return arrived

    def stop(self) -> int | None:
        """SIGTERM (its end line follows), the rest of its output read; killed if it lingers."""
        code = pg_replica.terminated(self.proc)
        for reader in self.readers:
            reader.join(timeout=30)
        return code


class Poller:
    """``check()`` called in a thread every ``interval`` s from now until :meth:`stop`; each
    answer kept with the :func:`time.monotonic` at which it was had (an exception's text
    stands for the answer)."""

    def __init__(self, check, interval: float = 0.05) -> None:
        self.check, self.interval = check, interval
        self.answers: list[tuple[float, object]] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopping.is_set():
            try:
                answer = self.check()
            except Exception as error:  # a server going away or coming back; kept as the answer
                answer = f"{type(error).__name__}: {error}"
            self.answers.append((time.monotonic(), answer))
            self.stopping.wait(self.interval)

    def first(self, accept, after: float) -> float | None:
        """When the first answer ``accept`` takes was had after ``after``, or None."""
        return next((at for at, answer in list(self.answers) if at > after and accept(answer)), None)

    def between(self, start: float, end: float) -> list:
        return [answer for at, answer in list(self.answers) if start < at <= end]

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=30)


def web_status(server, fleet_id: int) -> int:
    import httpx

    return httpx.get(f"{server.url}api/fleets/{fleet_id}", headers=server.headers, timeout=5).status_code


def keeper_log(path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def register(url: str, fleet_id: int, placement: dict, name: str) -> int:
    """A member with a pending placement in the Director's window (through the broker)."""
    store = open_store(url)
    try:
        return members.register_member(
            store, fleet_id=fleet_id, name=name, description=f"{name} worker", backend="tmux",
            session=placement["session"], window_id=placement["window_id"], coding_agent="standin",
        )  # fmt: skip
    finally:
        store.close()


@pytest.mark.parametrize("replicas", [True], indirect=True, ids=["synchronous"])
def test_a_failover_to_a_synchronous_standby_reconnects_listen_watch_the_webui_and_the_keeper(
    replicas, tmp_path, monkeypatch
):
    """The long-running commands, all running across one failover of a fleet whose Director
    sits in a real pane (a private tmux server): `message listen` prints what was sent
    after it, once, nothing lost (a message committed while it was reconnecting, then one
    that wakes it); `fleet watch` reports the Director's new message, once; `cafleet
    server` answers a fleet page 200 again; the keeper (`fleet keep`, started here) does not
    end, logs that it took its lock again on a new session, and the new primary has exactly
    one keeper session, its own. Each within RECONNECT_BOUND s of the promotion."""
    from tests.support.keeper import end_keepers, keeper_processes
    from tests.support.pane_fleet import tmux_fleet
    from tests.support.web_server import ServerProcess, free_port

    url = replicas.url()
    # 60 s of reconnecting: far beyond the downtime, so that only a failure to reconnect ends one
    env = environ_for(tmp_path, url, CAFLEET_PG_RECONNECT_TIMEOUT="60")
    with tmux_fleet(env, tmp_path, monkeypatch) as fleet:
        director = fleet.director
        placement = fleet.cafleet("member", "show", str(director), "--json").json()["placement"]
        writer = register(url, fleet.fleet_id, placement, "writer")
        listening = register(url, fleet.fleet_id, placement, "listening")
        log = tmp_path / "keeper.log"
        keeper = server = listen = watch = web = retaken = None
        try:
            # The keeper, as `fleet create` would start it (its own session, its output to a log),
            # but by this test, so that its pid is known from the start.
            with open(log, "ab") as out:
                keeper = subprocess.Popen(
                    [*cafleet_argv(fleet.environ), "fleet", "keep", str(fleet.fleet_id)],
                    env=fleet.environ, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                    start_new_session=True,
                )  # fmt: skip

            def keeper_record():
                return fleet.cafleet("fleet", "show", str(fleet.fleet_id), "--json").json()["keeper"]

            wait_for(
                lambda: keeper.poll() is not None or keeper_record()["pid"] == keeper.pid,
                timeout=30,
                what="the keeper to hold its lock",
            )
            assert keeper.poll() is None, keeper_log(log)
            assert [name.split(" ")[1] for name in replicas.sessions(replicas.primary, "cafleet-keeper %")] == [
                str(keeper.pid)
            ]

            server = ServerProcess(env, "--port", str(free_port()))
            assert (server.url or "").startswith("http://127.0.0.1:"), server.first_line
            assert web_status(server, fleet.fleet_id) == 200

            listen = Lines(env, "message", "listen", str(listening), "--json")
            watch = Lines(fleet.environ, "fleet", "watch", str(fleet.fleet_id), "--json", "--interval", "0.5",
                          "--idle-after", "600")  # fmt: skip
            sent_before = []
            for n in range(3):
                attempt = Attempt(env, writer, listening, f"before {n}")
                assert attempt.code == 0, attempt
                sent_before.append(attempt.message_id)
            to_director = Attempt(env, writer, director, "before, for the Director")
            assert to_director.code == 0, to_director
            listen.wait(lambda r: r.get("message_id") == sent_before[-1], "listen to print the messages before")
            watch.wait(
                lambda e: e["event"] == "message" and e["message_id"] == to_director.message_id,
                "watch to report the message before",
            )

            web = Poller(lambda: web_status(server, fleet.fleet_id), interval=0.1)
            retaken = Poller(lambda: any(RETAKEN in line for line in keeper_log(log)))
            replicas.crash_primary()
            crashed = time.monotonic()
            time.sleep(DOWNTIME)  # nobody takes writes: the standby is read-only
            running = {"listen": listen.proc, "watch": watch.proc, "server": server.proc, "keeper": keeper}
            assert [name for name, proc in running.items() if proc.poll() is not None] == [], keeper_log(log)
            promoted = replicas.promote()
            print(f"\npromotion took {promoted - crashed:.2f} s after the crash")
            print(f"the WebUI while no server takes writes: {sorted(set(map(str, web.between(crashed, promoted))))}")

            # Sent as soon as a send works: committed while listen is probably still reconnecting.
            first, failed = send_until_it_works(env, writer, listening, "after the failover 1")
            print(f"promotion -> first send that worked: {first.ended - promoted:.2f} s ({len(failed)} failed)")
            for_director, _ = send_until_it_works(env, writer, director, "after the failover, for the Director")
            listen.wait(lambda r: r.get("message_id") == first.message_id, "listen to print the first message after")
            second = Attempt(env, writer, listening, "after the failover 2")  # wakes a listen back in LISTEN
            assert second.code == 0, second
            listen.wait(lambda r: r.get("message_id") == second.message_id, "listen to print the second message after")
            watch.wait(
                lambda e: e["event"] == "message" and e["message_id"] == for_director.message_id,
                "watch to report the Director's message after",
            )
            wait_for(lambda: web.first(lambda s: s == 200, promoted), timeout=60, what="the WebUI to answer 200")
            wait_for(
                lambda: retaken.first(bool, crashed) or keeper.poll() is not None,
                timeout=60,
                what="the keeper to take its lock again",
            )
            assert keeper.poll() is None, keeper_log(log)
            web.stop()
            retaken.stop()

            times = {
                "message listen printed the message sent after": listen.arrival(
                    lambda r: r.get("message_id") == first.message_id
                ),
                "fleet watch reported the Director's message": watch.arrival(
                    lambda e: e["event"] == "message" and e["message_id"] == for_director.message_id
                ),
                "the WebUI answered 200": web.first(lambda s: s == 200, promoted),
                "the keeper logged its lock taken again": retaken.first(bool, crashed),
            }
            for what, at in times.items():  # negative: before this test's own check saw the promotion
                print(f"promotion -> {what}: {at - promoted:.2f} s")
            woken = listen.arrival(lambda r: r.get("message_id") == second.message_id)
            print(f"a send started after that -> message listen printed it: {woken - second.started:.2f} s")
            print(f"the keeper's log: {keeper_log(log)}")

            # The keeper: one process, still running, the lock's one session on the new primary is its own.
            sessions = replicas.sessions(replicas.standby, "cafleet-keeper %")
            assert [name.split(" ")[1] for name in sessions] == [str(keeper.pid)], sessions
            assert keeper_processes(url) == [keeper.pid]
            assert (keeper_record()["running"], keeper_record()["pid"]) == (True, keeper.pid)
            retakes = [line for line in keeper_log(log) if RETAKEN in line]
            assert len(retakes) == 1 and "its lock's database session ended" in retakes[0], keeper_log(log)
            assert not any(" ended: " in line for line in keeper_log(log)), keeper_log(log)
            assert keeper.poll() is None
        finally:
            for poller in (web, retaken):
                if poller is not None:
                    poller.stop()
            codes = {}
            for name, stream in (("listen", listen), ("watch", watch)):
                if stream is not None:
                    codes[name] = stream.stop()
            if server is not None:
                codes["server"] = server.stop()
            if keeper is not None:
                codes["keeper"] = pg_replica.terminated(keeper)
            strays = end_keepers(url, lambda: [])  # any other keeper of this database, ended by its pid

    assert strays == [], f"keeper processes {strays} of this database were left running"
    # (a) within the bound of the promotion, each of them worked on the new primary
    late = {what: round(at - promoted, 2) for what, at in times.items() if at - promoted > RECONNECT_BOUND}
    assert late == {}, late
    # (b) listen: every message, in order, once (the one committed while it was away too), then its end line
    assert codes["listen"] == 0 and listen.err == b"", listen.err
    printed = listen.records()
    assert printed[-1] == {"event": "end", "reason": "stopped by SIGTERM"}, printed
    assert [r["message_id"] for r in printed[:-1]] == [*sent_before, first.message_id, second.message_id]
    # (c) watch: the Director's messages, each once
    assert codes["watch"] == 0 and watch.err == b"", watch.err
    reported = [e["message_id"] for e in watch.records() if e["event"] == "message"]
    assert reported == [to_director.message_id, for_director.message_id], watch.records()
    assert watch.records()[-1]["detail"] == "watch ended: stopped by SIGTERM"
    # (d) the WebUI stopped cleanly, having printed nothing besides its address (no error, no traceback)
    assert codes["server"] == (0, "", ""), codes["server"]
    # (e) the keeper ran until this test stopped it
    assert codes["keeper"] == 0 and keeper_log(log)[-1].endswith(
        f"keeper for fleet {fleet.fleet_id} ended: stopped by SIGTERM"
    ), keeper_log(log)
