"""Why WAL: sends per second with and without concurrent readers, WAL vs rollback journal.

    python bench/journal_mode.py [--seconds S]

Each mode gets a fresh cafleet database. One writer process commits sends (BEGIN
IMMEDIATE, one message each, as `message send` does) for S seconds while 0 or 3 reader
processes loop over the poll query, as `message wait`/`listen` and the WebUI do.
Reported: writer commits per second and how many reads failed with "database is locked".
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))

from cafleet.broker import fleets, members, messages
from cafleet.store import sqlite_driver as sqlite
from cafleet.store.engines import open_store


def writer(path, ids, seconds, out):
    store = open_store(path)
    count, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        messages.send(store, ids[0], ids[1], "payload")
        count += 1
    out.put(("writes", count))


def reader(path, member_id, seconds, out):
    conn = sqlite.connect(path, timeout=5.0, isolation_level=None)
    reads = errors = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            conn.execute(
                "SELECT * FROM messages WHERE to_member_id = ? AND status_state = 'input_required' "
                "ORDER BY status_timestamp DESC LIMIT 50",
                (member_id,),
            ).fetchall()
            reads += 1
        except sqlite.OperationalError:
            errors += 1
    out.put(("reads", reads, errors))


def trial(mode: str, readers: int, seconds: float) -> tuple[float, int, int]:
    path = os.path.join(tempfile.mkdtemp(prefix="cafleet-jm-"), "x.db")
    store = open_store(path)
    store.conn.execute(f"PRAGMA journal_mode={mode}")
    fleet = fleets.create_fleet(
        store, name="jm", coding_agent="claude", backend="tmux", session="s", window_id="@0", pane_id="%0"
    )
    worker = members.register_member(
        store,
        fleet_id=fleet["fleet_id"],
        name="w",
        description="d",
        backend="tmux",
        session="s",
        window_id="@0",
        coding_agent="claude",
    )
    store.close()
    ids = (fleet["director_member_id"], worker)
    out = multiprocessing.Queue()
    procs = [multiprocessing.Process(target=writer, args=(path, ids, seconds, out))]
    procs += [multiprocessing.Process(target=reader, args=(path, worker, seconds, out)) for _ in range(readers)]
    for p in procs:
        p.start()
    results = [out.get() for _ in procs]
    for p in procs:
        p.join()
    writes = sum(r[1] for r in results if r[0] == "writes")
    reads = sum(r[1] for r in results if r[0] == "reads")
    errors = sum(r[2] for r in results if r[0] == "reads")
    return writes / seconds, reads, errors


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    print(f"{'journal':<8} {'readers':>7} {'sends/s':>9} {'reads':>8} {'read errors':>12}")
    for mode in ("wal", "delete"):
        for readers in (0, 3):
            rate, reads, errors = trial(mode, readers, args.seconds)
            print(f"{mode:<8} {readers:>7} {rate:>9.0f} {reads:>8} {errors:>12}")


if __name__ == "__main__":
    main()
