"""What the damaged-log check costs (docs/storage.md, "A damaged write-ahead log").

    python bench/wal_check.py [--sends N] [--runs N]

Three figures, each the median of --runs:

* the check on a quiet database (no ``-wal``: the last connection removed it), i.e. the
  one ``stat`` every open pays;
* the check on a live database (another process has the log open, as ``message listen``,
  ``fleet watch`` or ``cafleet server`` do): ``stat``, the ``-shm`` lock query, nothing read;
  plus the import of ``cafleet.store.wal`` (and ``fcntl``) in a fresh interpreter after
  the modules every command loads, paid once per command then;
* the read of a log a killed writer left with N sends in it (no checkpoint), against
  SQLite's own recovery of the same log (the first read of a copy); and of one restarted
  after a checkpoint (one send at its start, the older generation's frames after it).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))

from cafleet.store import sqlite_driver as sqlite, wal
from cafleet.store.sqlite import _check_log, open_store

WRITER = r"""
import sys, time
sys.path.insert(0, sys.argv[3])
from cafleet.broker import fleets, members, messages
from cafleet.store.engines import open_store
store = open_store(sys.argv[1])
store.conn.execute("PRAGMA wal_autocheckpoint=0")
fleet = fleets.create_fleet(store, name="b", coding_agent="claude", backend="tmux",
                            session="$0@/nonexistent", window_id="@0", pane_id="%0")
member = members.register_member(store, fleet_id=fleet["fleet_id"], name="m", description="d", backend="tmux",
                                 session="$0@/nonexistent", window_id="@0", coding_agent="claude")
for i in range(int(sys.argv[2])):
    messages.send(store, fleet["director_member_id"], member, f"message {i}")
if sys.argv[4] == "restarted":  # the log starts again at frame 1; the older frames stay behind
    store.conn.execute("PRAGMA wal_checkpoint").fetchone()
    messages.send(store, fleet["director_member_id"], member, "after the checkpoint")
print("done", flush=True)
time.sleep(600)
"""

HOLDER = r"""
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1])
conn.execute("SELECT count(*) FROM messages").fetchone()
print("open", flush=True)
time.sleep(600)
"""


def median_us(call, runs: int, inner: int = 200) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(inner):
            call()
        samples.append((time.perf_counter() - start) / inner * 1e6)
    return statistics.median(samples)


def crashed_log(folder: str, sends: int, mode: str = "plain") -> str:
    path = os.path.join(folder, f"crashed-{mode}.db")
    src = os.path.join(HERE, "..", "src")
    proc = subprocess.Popen([sys.executable, "-c", WRITER, path, str(sends), src, mode], stdout=subprocess.PIPE)
    assert proc.stdout.readline() == b"done\n"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    return path


def copy(path: str, to: str) -> str:
    for side in ("", "-wal", "-shm"):
        shutil.copyfile(path + side, to + side)
    return to


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sends", type=int, default=200)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    import compileall

    compileall.compile_dir(os.path.join(HERE, "..", "src"), quiet=1)  # imports measured as installed
    folder = tempfile.mkdtemp(prefix="cafleet-walbench-")
    try:
        quiet = os.path.join(folder, "quiet.db")
        open_store(quiet).close()
        print(f"quiet database (no -wal): {median_us(lambda: _check_log(quiet), args.runs):.1f} us per open")

        live = os.path.join(folder, "live.db")
        open_store(live).close()
        holder = subprocess.Popen([sys.executable, "-c", HOLDER, live], stdout=subprocess.PIPE)
        try:
            assert holder.stdout.readline() == b"open\n"
            writer = open_store(live)  # a commit leaves frames in the live -wal
            writer.execute("INSERT INTO asset_installs VALUES ('x', 'y', 'z', 'w')")
            writer.close()
            assert os.path.getsize(live + "-wal") > 32 and wal.in_use(live)
            cost = median_us(lambda: _check_log(live), args.runs)
            print(f"live database (another process has the log open): {cost:.1f} us per open, nothing read")
        finally:
            os.kill(holder.pid, signal.SIGKILL)
            holder.wait()
        imports = []
        for _ in range(args.runs):
            out = subprocess.run(
                [sys.executable, "-X", "importtime", "-c", "import cafleet.store.sqlite, cafleet.store.wal, fcntl"],
                capture_output=True,
                text=True,
                env=dict(os.environ, PYTHONPATH=os.path.join(HERE, "..", "src")),
            ).stderr
            rows = [row for row in out.splitlines() if row.rstrip().endswith(("cafleet.store.wal", " fcntl"))]
            imports.append(sum(int(row.split("|")[1]) for row in rows))
        print(
            "  and once per command then, the import of cafleet.store.wal and fcntl after the store's modules: "
            f"{statistics.median(imports):.0f} us"
        )

        for mode, what in (("plain", "one generation"), ("restarted", "restarted after a checkpoint")):
            crashed = crashed_log(folder, args.sends, mode)
            size = os.path.getsize(crashed + "-wal")
            frames = (size - 32) // (24 + 4096)
            ours, sqlite_recovery = [], []
            for run in range(args.runs):
                target = copy(crashed, os.path.join(folder, f"copy-{mode}-{run}.db"))
                start = time.perf_counter()
                _check_log(target)
                ours.append(time.perf_counter() - start)
                start = time.perf_counter()
                conn = sqlite.connect(f"file:{target}?mode=ro", uri=True)
                conn.execute("SELECT count(*) FROM messages").fetchone()
                sqlite_recovery.append(time.perf_counter() - start)
                conn.close()
            print(
                f"log left by a killed writer, {what}: {frames} frames ({size / 1e6:.1f} MB): checked in "
                f"{statistics.median(ours) * 1e3:.1f} ms; SQLite's own recovery of it "
                f"{statistics.median(sqlite_recovery) * 1e3:.1f} ms"
            )
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
