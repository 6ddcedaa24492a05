"""Benchmark: notices posted out, in one run (docs/performance.md, "Notices posted out").

    python bench/notify.py [--members 8] [--seconds 20] [--windows 3] [--notices 20] [--store sqlite|postgres]

Two throw-away fleets side by side, each as bench/keeper.py builds one (a private tmux
server on a socket in a temporary folder, the Director in a pane that runs ``sleep``,
SQLite, or with ``--store postgres`` a fresh database each on a private PostgreSQL cluster
(tests/support/postgres.py), the keeper on, started by ``fleet create``), each with ``--members`` stand-in
members that sit idle at their input line. One fleet's keeper has ``CAFLEET_NOTIFY_URL``
naming a real HTTP receiver on 127.0.0.1 (tests/support/http_receiver.py, in this process);
the other has none. Two measurements:

* **idle CPU, notifications on vs off**: both keepers' CPU (``/proc/<pid>/schedstat`` plus
  the tmux clients they waited for, as bench/keeper.py reads it) over the same
  ``--windows`` windows of ``--seconds`` s each, nothing owed and no notice due, as a share
  of one core; the goal is on / off <= 1.2. The two are measured at the same time, so the
  machine's noise falls on both.
* **inbox notice -> post issued**, ``--notices`` times: a notice put in the Director's
  inbox by another process (as ``exec-run`` in a member's pane puts an exec's end: this
  process, through the broker), a random 0.2-1 s apart so the keeper's loop is met at every
  phase; the delay is from the notice message's ``created_at`` to the receiver having read
  the post's body (``time.time()`` on the same machine). Median, p95, max; the goal is 1 s.
  Then once for a notice the keeper makes itself: a member drawing a permission prompt,
  with ``CAFLEET_NOTICE_AWAITING_AFTER=0`` (the delay from that notice's ``created_at``).

``CAFLEET_NOTICE_SILENT_AFTER=86400`` keeps "silent" notices out of the idle windows.
Nothing outside the temporary folder is touched; both keepers are ended by their pids and
both tmux servers killed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

import contextlib

from cafleet.broker import notices
from cafleet.store.engines import open_store
from keeper import Fleet, cpu, epoch, p95  # bench/keeper.py's fleet and readings
from tests.support.http_receiver import Receiver

QUIET = {"CAFLEET_NOTICE_SILENT_AFTER": "86400", "CAFLEET_NOTICE_AWAITING_AFTER": "0"}


def build(work: str, url: str | None, members: int, extra: dict[str, str]) -> Fleet:
    os.mkdir(work)
    fleet = Fleet(work, url or os.path.join(work, "k.db"))
    fleet.env.update(QUIET, **extra)
    fleet.start()
    panes = [fleet.member(f"idle-{i}")[1] for i in range(members)]
    for pane in panes:
        fleet.wait(
            lambda p=pane: any(row.startswith(">") for row in fleet.tmux("capture-pane", "-p", "-t", p).splitlines()),
            "a stand-in's input line",
        )
    return fleet


def post_notice(fleet: Fleet, subject: str) -> tuple[int, float]:
    """A notice in the Director's inbox, from this process: (its message id, created_at)."""
    store = open_store(fleet.url)
    try:
        header = notices.HEADER.format(kind="exec_finished", subject=subject)
        notice = notices.Notice("exec_finished", subject, None, None, f"{header}\nexec {subject} ended with 0")
        message_id = notices.post(store, fleet.fleet_id, fleet.director, notice)
        row = store.execute("SELECT created_at FROM messages WHERE message_id = ?", (message_id,)).fetchone()
    finally:
        store.close()
    assert message_id is not None
    return message_id, epoch(row[0])


def arrived(receiver: Receiver, message_id: int) -> float | None:
    for request in receiver.ok():
        if json.loads(request["body"])["message_id"] == message_id:
            return request["at"]
    return None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--members", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--notices", type=int, default=20)
    parser.add_argument("--store", choices=("sqlite", "postgres"), default="sqlite")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="cafleet-notify-bench-")
    receiver = Receiver()
    fleets: list[Fleet] = []
    cluster = None
    try:
        urls: list[str | None] = [None, None]
        if args.store == "postgres":
            from tests.support.postgres import Cluster

            cluster = Cluster()
            cluster.start()
            urls = [cluster.fresh_database(), cluster.fresh_database()]
        plain = build(os.path.join(work, "plain"), urls[0], args.members, {})
        fleets.append(plain)
        posting = build(os.path.join(work, "notify"), urls[1], args.members, {"CAFLEET_NOTIFY_URL": receiver.url()})
        fleets.append(posting)
        log = posting.keeper().get("log") or ""
        posting.wait(lambda: "notices are posted to" in Path(log).read_text(encoding="utf-8"), "the outbox to start")
        print(
            f"store {args.store}; {args.members} stand-in members in each fleet; keepers: off pid {plain.keeper_pid}, on pid {posting.keeper_pid}"
        )
        time.sleep(2)  # the members' first looks settle
        used = {plain.keeper_pid: 0.0, posting.keeper_pid: 0.0}
        spent = 0.0
        for window in range(args.windows):
            before = {pid: cpu(pid) for pid in used}
            t0 = time.monotonic()
            time.sleep(args.seconds)
            took = time.monotonic() - t0
            shares = {}
            for pid in used:
                used[pid] += cpu(pid) - before[pid]
                shares[pid] = 100 * (cpu(pid) - before[pid]) / took
            spent += took
            print(
                f"  window {window + 1}: off {shares[plain.keeper_pid]:.3f}%, on {shares[posting.keeper_pid]:.3f}% of a core"
            )
        off, on = (100 * used[pid] / spent for pid in (plain.keeper_pid, posting.keeper_pid))
        print(
            f"keeper idle CPU, {args.members} members, {args.windows} x {args.seconds:g} s: "
            f"notifications off {off:.3f}%, on {on:.3f}% of a core; on/off {on / off:.2f}x (goal <= 1.2x)"
        )
        delays = []
        for i in range(args.notices):
            time.sleep(random.uniform(0.2, 1.0))
            message_id, created = post_notice(posting, f"bench:{i}")
            at = posting.wait(lambda m=message_id: arrived(receiver, m), "the post", timeout=30)
            delays.append(at - created)
        print(
            f"inbox notice -> post received, {len(delays)} notices from another process: "
            f"median {1000 * statistics.median(delays):.0f} ms, p95 {1000 * p95(delays):.0f} ms, "
            f"max {1000 * max(delays):.0f} ms (goal <= 1000 ms)"
        )
        member_id, pane, _ = posting.member("asking", "--permission-prompt")
        posting.wait(lambda: "2. No" in posting.tmux("capture-pane", "-p", "-t", pane), "the prompt")

        def own_notice():
            for request in receiver.ok():
                doc = json.loads(request["body"])
                if doc["kind"] == "awaiting_user" and doc["member"]["id"] == member_id:
                    return request["at"] - epoch(doc["created_at"])
            return None

        delay = posting.wait(own_notice, "the keeper's own notice posted", timeout=60)
        print(f"inbox notice -> post received, the keeper's own awaiting_user notice: {1000 * delay:.0f} ms")
        for fleet in fleets:
            if fleet.keeper()["pid"] != fleet.keeper_pid:
                print("note: a keeper was replaced during the run")
    finally:
        for fleet in fleets:
            if getattr(fleet, "keeper_pid", None):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(fleet.keeper_pid, signal.SIGTERM)
            subprocess.run(["tmux", "-S", fleet.socket, "kill-server"], capture_output=True)
        receiver.close()
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
