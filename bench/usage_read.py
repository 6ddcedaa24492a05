"""Reading claude transcripts for `member usage`: a full read of ~100 MB, and a re-read
after 1 MB was appended, by the same reader (only the new bytes are parsed). Then the
budget check a send makes when no budget is set, against the send's own commit.

    python bench/usage_read.py [--megabytes 100] [--postgres]

The transcript is written in claude's shape (docs/usage.md): user turns and tool results
(most of the bytes, skipped without JSON parsing), and assistant calls written as two
lines each (one per content block) repeating the call's usage. Reported: seconds and MB/s
of the full read, seconds of the incremental re-read, their ratio, and a check that the
calls counted equal the calls written. With ``--postgres`` the budget check also runs on a
private PostgreSQL cluster (tests/support/postgres.py), beside SQLite in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))

from cafleet.agents.usage.claude import claude_usage
from cafleet.agents.usage.totals import TranscriptReader

SESSION = "3f1c2a4e-1111-4222-8333-444455556666"


def write_calls(handle, start: int, target_bytes: int) -> int:
    """Append calls until ``target_bytes`` were written; returns the calls written."""
    filler = "x" * 3000  # a tool result: file contents, command output
    written = calls = 0
    number = start
    while written < target_bytes:
        user = json.dumps(
            {
                "type": "user",
                "message": {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": f"toolu_{number}", "content": filler}],
                },
            }
        )
        usage_row = {
            "input_tokens": 10 + number % 7,
            "cache_creation_input_tokens": 3,
            "cache_read_input_tokens": 1000,
            "output_tokens": 20,
        }
        blocks = [
            json.dumps(
                {
                    "type": "assistant",
                    "requestId": f"req_{number}",
                    "message": {
                        "id": f"msg_{number}",
                        "model": "claude-sonnet-4-5",
                        "role": "assistant",
                        "content": [{"type": kind, "text": "ok"}],
                        "usage": usage_row,
                    },
                }
            )
            for kind in ("text", "tool_use")
        ]
        chunk = "\n".join([user, *blocks]) + "\n"
        handle.write(chunk)
        written += len(chunk)
        calls += 1
        number += 1
    return calls


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=100)
    parser.add_argument("--postgres", action="store_true", help="also time the budget check on PostgreSQL")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        folder = os.path.join(root, "projects", "-home-user-work")
        os.makedirs(folder)
        path = os.path.join(folder, SESSION + ".jsonl")
        with open(path, "w", encoding="utf-8") as handle:
            calls = write_calls(handle, 0, args.megabytes << 20)
        size = os.path.getsize(path)

        reader = TranscriptReader()
        began = time.perf_counter()
        found, _ = claude_usage(root, [SESSION], reader)
        full = time.perf_counter() - began
        counted = sum(row["calls"] for row in found.models.values())

        with open(path, "a", encoding="utf-8") as handle:
            more = write_calls(handle, calls, 1 << 20)
        began = time.perf_counter()
        found, _ = claude_usage(root, [SESSION], reader)
        again = time.perf_counter() - began
        recounted = sum(row["calls"] for row in found.models.values())

    print(f"transcript: {size / 1e6:.0f} MB, {calls} calls in {2 * calls} assistant lines")
    print(
        f"full read: {full:.2f} s ({size / 1e6 / full:.0f} MB/s), counted {counted} calls "
        f"({'ok' if counted == calls else 'WRONG'})"
    )
    print(
        f"re-read after 1 MB appended: {again * 1000:.1f} ms, counted {recounted} calls "
        f"({'ok' if recounted == calls + more else 'WRONG'}); full read / re-read = {full / again:.0f}x"
    )
    with tempfile.TemporaryDirectory() as root:
        budget_check(os.path.join(root, "cafleet.db"), "sqlite")
    if args.postgres:
        sys.path.insert(0, os.path.join(HERE, ".."))
        from tests.support.postgres import Cluster, missing_reason

        reason = missing_reason()
        if reason:
            raise SystemExit(reason)
        cluster = Cluster()
        try:
            cluster.start()
            budget_check(cluster.fresh_database(), "postgres", rounds=500)
        finally:
            cluster.stop()
    return 0 if counted == calls and recounted == calls + more else 1


def budget_check(url: str, kind: str, rounds: int = 2000) -> None:
    """``budgets_for_send`` with no budget set (tables present, and a database without
    them) as a fraction of one ``messages.send`` (its write transaction), on one store."""
    from cafleet.broker import fleets, members, messages, usage as budgets
    from cafleet.store.engines import open_store

    store = open_store(url)
    fleet = fleets.create_fleet(
        store,
        name="b",
        coding_agent="claude",
        backend="tmux",
        session="s",
        window_id="@1",
        pane_id="%1",
        identity=None,
    )
    worker = members.register_member(
        store,
        fleet_id=fleet["fleet_id"],
        name="w",
        description="w",
        backend="tmux",
        session="s",
        window_id="@1",
        coding_agent="claude",
    )
    director = fleet["director_member_id"]

    def per_call(action) -> float:
        began = time.perf_counter()
        for _ in range(rounds):
            action()
        return (time.perf_counter() - began) / rounds

    send = per_call(lambda: messages.send(store, director, worker, "payload"))
    with_tables = per_call(lambda: budgets.budgets_for_send(store, worker))
    for name in (budgets.TABLE, budgets.FLEET_TABLE):
        store.execute(f"DROP TABLE IF EXISTS {name}")
    store.close()
    store = open_store(url)  # as the next command would find the database
    without = per_call(lambda: budgets.budgets_for_send(store, worker))
    store.close()
    print(
        f"{kind} budget check, no budget set: {with_tables * 1e6:.0f} us with the tables, {without * 1e6:.0f} us "
        f"without; one send's commit: {send * 1e6:.0f} us (check / send = {with_tables / send:.2f})"
    )


if __name__ == "__main__":
    sys.exit(main())
