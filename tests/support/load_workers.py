"""Load workers: one role per process, each running real cafleet commands in a loop
against one database, for tests/test_load.py and bench/load.py.

    python -m tests.support.load_workers send FROM TO[,TO...] COUNT TAG [--gap S] [--until FILE] [--spawn]
    python -m tests.support.load_workers receive MEMBER EXPECTED [--deadline S] [--spawn]
    python -m tests.support.load_workers poll MEMBER STOP_FILE [--gap S] [--spawn]

* ``send`` sends COUNT messages from FROM, the k-th to the (k mod n)-th of the TO list,
  body ``<TAG>-<k>``, sleeping ``--gap`` seconds between sends (and stopping early once
  the file ``--until`` exists);
* ``receive`` loops ``message wait MEMBER`` and ACKs every message each wait returned,
  until it has ACKed EXPECTED messages (or ``--deadline`` passed: exit 1);
* ``poll`` loops ``message poll MEMBER`` until STOP_FILE exists, ``--gap`` seconds apart.

Each command runs in-process through ``cafleet.cli.main.main`` with a fresh context, so
it opens its own connection, diagnoses the file, does its work and closes, as one
``cafleet`` invocation does after interpreter start-up; with ``--spawn`` each is a real
``python -m cafleet`` process instead. Every operation prints one JSON line on stdout
with wall-clock ``start``/``end`` (``time.time()``, comparable across processes):
``{"op": "send", "id", "to", "text", "notified", "created_at", ...}``, ``{"op": "wait", "messages": [[id, to,
created_at], ...], ...}``, ``{"op": "ack", "id", ...}``, ``{"op": "poll", "ids", ...}``.
A command that fails (any exit status but 0, or 3 for a wait that timed out) or writes
anything on stderr ends the worker: its stderr is copied and the exit status is 1.

``LOAD_WITHOUT_WRITERS_QUEUE=1`` in a worker's environment turns the writers' queue off
for its in-process commands (SQLite's busy handler alone), for bench/write_queue.py's
before/after in one run.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import time

WAIT_TIMEOUT = "5"
NO_WRITERS_QUEUE = "LOAD_WITHOUT_WRITERS_QUEUE"  # in-process commands only
WAIT_TIMED_OUT = 3


class Runner:
    """Runs one cafleet command and returns (exit status, stdout)."""

    def __init__(self, spawn: bool) -> None:
        self.spawn = spawn

    def __call__(self, *args: str) -> tuple[int, str]:
        if self.spawn:
            from tests.support.hooked import cafleet_argv

            done = subprocess.run([*cafleet_argv(os.environ), *args], capture_output=True, timeout=120)
            code, out, err = done.returncode, done.stdout, done.stderr
        else:
            from cafleet.cli.main import main
            from tests.support.hooked import context

            stdout, stderr = io.BytesIO(), io.BytesIO()
            code = main(list(args), context(stdin=io.BytesIO(), stdout=stdout, stderr=stderr))
            out, err = stdout.getvalue(), stderr.getvalue()
        if err or code not in (0, WAIT_TIMED_OUT):
            sys.stderr.write(f"cafleet {' '.join(args[:2])} exited {code}: {err.decode('utf-8', 'replace')}")
            sys.exit(1)
        return code, out.decode("utf-8")


def emit(**record) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def send(
    run: Runner, sender: str, targets: list[str], count: int, tag: str, gap: float, until: str | None = None
) -> None:
    for k in range(count):
        if until is not None and os.path.exists(until):
            return
        to, text = targets[k % len(targets)], f"{tag}-{k}"
        start = time.time()
        _, out = run("message", "send", "--from-member-id", sender, "--to-member-id", to, text, "--json")
        end = time.time()
        record = json.loads(out)
        emit(
            op="send",
            id=record["message_id"],
            to=record["to_member_id"],
            text=record["text"],
            notified=record["notified"],
            created_at=record["created_at"],
            start=start,
            end=end,
        )
        if gap:
            time.sleep(gap)


def receive(run: Runner, member: str, expected: int, deadline: float) -> None:
    acked = 0
    give_up = time.monotonic() + deadline
    while acked < expected:
        if time.monotonic() > give_up:
            sys.stderr.write(f"member {member} ACKed {acked} of {expected} messages before the deadline\n")
            sys.exit(1)
        start = time.time()
        code, out = run("message", "wait", member, "--timeout", WAIT_TIMEOUT, "--json")
        end = time.time()
        if code == WAIT_TIMED_OUT:
            continue
        records = json.loads(out)
        emit(
            op="wait",
            messages=[[r["message_id"], r["to_member_id"], r["created_at"]] for r in records],
            start=start,
            end=end,
        )
        for record in records:
            start = time.time()
            run("message", "ack", str(record["message_id"]), "--json")
            emit(op="ack", id=record["message_id"], start=start, end=time.time())
            acked += 1


def poll(run: Runner, member: str, stop_file: str, gap: float) -> None:
    while not os.path.exists(stop_file):
        start = time.time()
        _, out = run("message", "poll", member, "--json")
        emit(
            op="poll",
            member=int(member),
            to=sorted({r["to_member_id"] for r in json.loads(out)}),
            start=start,
            end=time.time(),
        )
        if gap:
            time.sleep(gap)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spawn", action="store_true", help="run each command as a real process")
    roles = parser.add_subparsers(dest="role", required=True)
    p_send = roles.add_parser("send")
    p_send.add_argument("sender")
    p_send.add_argument("targets")
    p_send.add_argument("count", type=int)
    p_send.add_argument("tag")
    p_send.add_argument("--gap", type=float, default=0.0)
    p_send.add_argument("--until", help="stop early once this file exists")
    p_receive = roles.add_parser("receive")
    p_receive.add_argument("member")
    p_receive.add_argument("expected", type=int)
    p_receive.add_argument("--deadline", type=float, default=60.0)
    p_poll = roles.add_parser("poll")
    p_poll.add_argument("member")
    p_poll.add_argument("stop_file")
    p_poll.add_argument("--gap", type=float, default=0.0)
    args = parser.parse_args()
    if os.environ.get(NO_WRITERS_QUEUE) == "1":  # bench/write_queue.py: SQLite's busy handler alone
        from cafleet.store.sqlite import SqliteStore

        SqliteStore.write_queue = lambda self: None  # type: ignore[method-assign]
    run = Runner(args.spawn)
    if args.role == "send":
        send(run, args.sender, args.targets.split(","), args.count, args.tag, args.gap, args.until)
    elif args.role == "receive":
        receive(run, args.member, args.expected, args.deadline)
    else:
        poll(run, args.member, args.stop_file, args.gap)


if __name__ == "__main__":
    main()
