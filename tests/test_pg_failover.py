"""A PostgreSQL failover under a running fleet: the primary crashes, its streaming standby
is promoted, and cafleet, given both in one libpq multi-host URL with
``target_session_attrs=read-write`` (tests/support/pg_replica.py), carries on.

Synchronous replication: no message whose id a `message send` printed is lost, a send
works again within seconds of the promotion, and a `message wait` that was blocked in
LISTEN on the old primary reconnects to the new one and returns the message sent there.

Asynchronous replication (what it costs): exactly the messages committed on the primary
after the standby stopped receiving its WAL are lost; everything the standby had received
is there, and the new primary's ids never go back below the replicated ones.

Timings are printed (``pytest -s``); the only timed assertions are the generous bounds of
the failover itself (15 s from the promotion to a working send, 20 s from that send to the
waiter's return)."""

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
from cafleet.store.connection import open_store
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
