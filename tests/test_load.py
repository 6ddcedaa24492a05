"""Load: many processes at once sending, waiting, ACKing, polling and listening against
one database file, at the default busy timeout.

Senders (some from the Director, some member to member) spread their messages over four
receivers, each running ``message wait`` + ``message ack`` until it has ACKed its share,
and over one member nobody ACKs, which two ``message listen`` processes stream. Two
pollers read receivers' inboxes the whole time. Afterwards: nothing lost, nothing
duplicated, every body exact, no process wrote to stderr (so no "database is locked"),
every wait returned only its member's unacknowledged messages and each exactly once,
every listen printed every message to its member once, in order, and the file is intact.

The members have pending placements (no pane), so no preview is typed: this is the
database under load. bench/load.py adds a real pane receiving previews and reports rates
and latencies (docs/performance.md, "Load").
"""

from __future__ import annotations

STORES = ("sqlite", "postgres")  # every test here runs on both stores (tests/conftest.py)

import json
import signal
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

from tests.support.tmux_fixtures import wait_for

ROOT = Path(__file__).resolve().parent.parent
SENDERS = 8
PER_SENDER = 75
RECEIVERS = 4
POLLERS = 2
LISTENERS = 2


class Worker:
    """A load worker whose JSON lines go to a file (a pipe nobody reads would fill up
    and stall a busy worker)."""

    def __init__(self, env, folder: Path, *args: str) -> None:
        self.out = folder / f"{'-'.join(args[:2])}-{id(self)}.jsonl"
        with open(self.out, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.support.load_workers", *args],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.PIPE,
            )

    def finish(self) -> list[dict]:
        _, err = self.proc.communicate(timeout=360)  # the timeouts only bound a failure
        assert (self.proc.returncode, err) == (0, b""), err.decode()
        return [json.loads(line) for line in self.out.read_bytes().splitlines()]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


class Listener:
    """``cafleet message listen --json`` whose lines are collected by a thread."""

    def __init__(self, env, member: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cafleet", "message", "listen", str(member), "--json"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.lines: list[dict] = []
        self.end: dict | None = None  # the last line, printed when the stream ends
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            item = json.loads(line)
            if item.get("event") == "end":
                self.end = item
            else:
                self.lines.append(item)

    def stop(self) -> tuple[int, bytes]:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=60)
        self.thread.join(timeout=60)
        return self.proc.returncode, self.proc.stderr.read()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def test_many_processes_lose_nothing_duplicate_nothing_and_never_report_a_lock(env, build, store, tmp_path, store_kind):
    fleet_id, director, receivers = build.fleet(members_count=RECEIVERS)
    listened = build.member(fleet_id, "listened")
    targets = [*receivers, listened]
    stop_polling = tmp_path / "stop-polling"

    # Who sends what to whom, decided up front: sender i sends PER_SENDER messages
    # round-robin over the targets (rotated by i, itself left out).
    plan = {}
    for i in range(SENDERS):
        sender = director if i % 2 == 0 else receivers[i % RECEIVERS]
        rotated = targets[i % len(targets) :] + targets[: i % len(targets)]
        plan[f"s{i}"] = (sender, [m for m in rotated if m != sender])
    expected = {
        f"{tag}-{k}": (sender, to[k % len(to)])  # text -> (sender, recipient)
        for tag, (sender, to) in plan.items()
        for k in range(PER_SENDER)
    }
    share = Counter(recipient for _, recipient in expected.values())

    listeners = [Listener(env, listened) for _ in range(LISTENERS)]
    receiving = {m: Worker(env, tmp_path, "receive", str(m), str(share[m]), "--deadline", "300") for m in receivers}
    polling = [Worker(env, tmp_path, "poll", str(receivers[i]), str(stop_polling)) for i in range(POLLERS)]
    sending = [
        Worker(env, tmp_path, "send", str(sender), ",".join(map(str, to)), str(PER_SENDER), tag)
        for tag, (sender, to) in plan.items()
    ]
    try:
        sent = [record for w in sending for record in w.finish()]
        received = {m: w.finish() for m, w in receiving.items()}
        for listener in listeners:
            wait_for(
                lambda listener=listener: len(listener.lines) >= share[listened],
                timeout=120,
                what="every listened message",
            )
        stop_polling.touch()
        polled = [w.finish() for w in polling]
        stopped = [listener.stop() for listener in listeners]
    finally:  # whatever failed, no process outlives the test
        stop_polling.touch()
        for process in [*receiving.values(), *sending, *polling, *listeners]:
            process.kill()

    # Every send printed a distinct id; the file holds exactly those rows, bodies exact.
    ids = [r["id"] for r in sent]
    assert len(ids) == len(set(ids)) == len(expected)
    rows = store.execute(
        "SELECT message_id, from_member_id, to_member_id, text, status_state FROM messages ORDER BY message_id"
    ).fetchall()
    assert [r[0] for r in rows] == sorted(ids)
    assert {r[3]: (r[1], r[2]) for r in rows} == expected
    by_id = {r[0]: r for r in rows}

    # Each receiver's waits returned only its own messages, each once; it ACKed all of them.
    for member, records in received.items():
        waited = [m for r in records if r["op"] == "wait" for m in r["messages"]]
        assert all(to == member for _, to, _ in waited)
        assert Counter(mid for mid, _, _ in waited) == Counter({r[0]: 1 for r in rows if r[2] == member})
        assert sorted(r["id"] for r in records if r["op"] == "ack") == sorted(mid for mid, _, _ in waited)
    assert {r[4] for r in rows if r[2] != listened} == {"completed"}
    assert {r[4] for r in rows if r[2] == listened} == {"input_required"}

    # Each listener printed every message to its member once, oldest first, exact.
    to_listened = [r[0] for r in rows if r[2] == listened]
    for listener, (code, err) in zip(listeners, stopped):
        assert (code, err) == (0, b"")
        assert listener.end == {"event": "end", "reason": "stopped by SIGTERM"}
        assert [line["message_id"] for line in listener.lines] == to_listened
        assert all(line["text"] == by_id[line["message_id"]][3] for line in listener.lines)

    # The pollers ran throughout and only ever saw their member's messages.
    for member, records in zip(receivers, polled):
        assert len(records) > 0
        assert all(set(r["to"]) <= {member} for r in records)

    if store_kind == "sqlite":
        assert store.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert store.execute("PRAGMA foreign_key_check").fetchall() == []
