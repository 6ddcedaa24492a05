"""Benchmark: hot commands against a bare interpreter start, in one run.

    python bench/hot_commands.py [--runs N] [--history N]

Prints, for each hot command, the median wall time as a ratio of `python -c pass` (same
interpreter), the peak RSS of the command's process, and the ratio of the same command on
a database holding N messages of history to an almost empty one. Ratios, not absolute
seconds: the machine is shared and noisy, and both sides of each ratio are measured
interleaved in the same run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))

from cafleet.broker import fleets, members
from cafleet.store.engines import open_store


def cafleet_bin() -> list[str]:
    script = os.path.join(os.path.dirname(sys.executable), "cafleet")
    if os.path.exists(script):
        return [script]
    found = shutil.which("cafleet")
    if found:
        return [found]
    raise SystemExit("cafleet is not installed next to this interpreter; run `pip install .` first")


def run_plan(plan, env, workdir):
    """Run every (label, argv) from the small runner process; see _spawn_runner.py."""
    import marshal
    import subprocess

    plan_path, results_path = os.path.join(workdir, "plan"), os.path.join(workdir, "results")
    with open(plan_path, "wb") as handle:
        marshal.dump((env, plan), handle)
    subprocess.run(
        [sys.executable, "-S", os.path.join(HERE, "_spawn_runner.py"), plan_path, results_path], check=True, env=env
    )
    with open(results_path, "rb") as handle:
        return marshal.load(handle)


def hot_argvs(fleet_id: int, director: int, workers: list[int]) -> dict[str, list[str] | None]:
    """The hot commands every benchmark of them times, on a fleet of :func:`bench_fleet`: the
    worker polls and reports to the Director, the roster, a message shown. ``message ack``
    is None: each run acks a message of its own (the caller fills it in)."""
    return {
        "message poll": ["message", "poll", str(workers[0])],
        "message send": [
            "message",
            "send",
            "--from-member-id",
            str(workers[2]),
            "--to-member-id",
            str(director),
            "status: ok",
        ],
        "message ack": None,
        "member list": ["member", "list", str(fleet_id)],
        "message show": ["message", "show", "1"],
    }


def bench_fleet(store) -> tuple[int, int, list[int]]:
    """A fleet with a Director and five members on pending placements (no panes)."""
    fleet = fleets.create_fleet(
        store,
        name="bench",
        coding_agent="claude",
        backend="tmux",
        session="$0@/nonexistent",
        window_id="@0",
        pane_id="%0",
    )
    fleet_id, director = fleet["fleet_id"], fleet["director_member_id"]
    workers = [
        members.register_member(
            store,
            fleet_id=fleet_id,
            name=f"w{i}",
            description="bench",
            backend="tmux",
            session="$0@/nonexistent",
            window_id="@0",
            coding_agent="claude",
        )
        for i in range(5)
    ]
    return fleet_id, director, workers


def make_database(path: str, history: int):
    store = open_store(path)
    fleet_id, director, workers = bench_fleet(store)
    if history:
        fill_history(store, history)
    # a realistic inbox: a few pending messages for the polled member
    with store.write():
        for i in range(5):
            now = time.strftime("%Y-%m-%dT%H:%M:%S.000000+00:00", time.gmtime())
            store.execute(
                "INSERT INTO messages (from_member_id, to_member_id, created_at, status_state, status_timestamp, text)"
                " VALUES (?, ?, ?, 'input_required', ?, ?)",
                (director, workers[0], now, now, f"task {i}"),
            )
    store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    return fleet_id, director, workers


def fill_history(store, count: int, fleets_count: int = 200, members_per_fleet: int = 10) -> None:
    """Old, acknowledged traffic in many other fleets (a long-lived installation)."""
    ids = []
    with store.write():
        for f in range(fleets_count):
            fleet_id = store.execute(
                "INSERT INTO fleets (name, created_at) VALUES (?, '2025-01-01T00:00:00.000000+00:00')", (f"old{f}",)
            ).lastrowid
            group = [
                store.execute(
                    "INSERT INTO members (fleet_id, name, description, status, registered_at, deregistered_at)"
                    " VALUES (?, ?, 'old', 'deregistered', '2025-01-01T00:00:00.000000+00:00',"
                    " '2025-01-02T00:00:00.000000+00:00')",
                    (fleet_id, f"m{i}"),
                ).lastrowid
                for i in range(members_per_fleet)
            ]
            ids.append(group)
        rows = []
        for n in range(count):
            group = ids[n % fleets_count]
            a, b = group[n % members_per_fleet], group[(n + 1) % members_per_fleet]
            ts = f"2025-01-01T{(n // 3600) % 24:02d}:{(n // 60) % 60:02d}:{n % 60:02d}.{n % 1000000:06d}+00:00"
            rows.append((a, b, ts, ts, f"old message {n}", ts))
        store.conn.executemany(
            "INSERT INTO messages (from_member_id, to_member_id, created_at, status_state, status_timestamp, text, notified_at)"
            " VALUES (?, ?, ?, 'completed', ?, ?, ?)",
            rows,
        )


def pending_ids(path: str, to_id: int, count: int, from_id: int) -> list[int]:
    store = open_store(path)
    out = []
    with store.write():
        for _ in range(count):
            now = time.strftime("%Y-%m-%dT%H:%M:%S.000000+00:00", time.gmtime())
            out.append(
                store.execute(
                    "INSERT INTO messages (from_member_id, to_member_id, created_at, status_state, status_timestamp, text)"
                    " VALUES (?, ?, ?, 'input_required', ?, 'to ack')",
                    (from_id, to_id, now, now),
                ).lastrowid
            )
    store.close()
    return out


def build_in_child(path: str, history: int, acks: int):
    """Build a database in a child process, so this process stays small: a spawned child's
    peak RSS includes the memory of the process that spawned it."""
    import json
    import subprocess

    out = subprocess.run(
        [sys.executable, __file__, "--build", path, "--history", str(history), "--runs", str(acks)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    fleet_id, director, workers, ack_ids = json.loads(out)
    return (fleet_id, director, workers), ack_ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=25)
    parser.add_argument("--history", type=int, default=300_000)
    parser.add_argument("--build", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.build:
        import json

        fleet_id, director, workers = make_database(args.build, args.history)
        print(json.dumps([fleet_id, director, workers, pending_ids(args.build, workers[1], args.runs, director)]))
        return
    cafleet = cafleet_bin()
    # Measure with bytecode caches, as an installed cafleet runs: compile the sources once
    # and let every child read the .pyc files.
    import compileall

    compileall.compile_dir(os.path.join(HERE, "..", "src"), quiet=1)
    workdir = tempfile.mkdtemp(prefix="cafleet-bench-")
    try:
        small, large = os.path.join(workdir, "small.db"), os.path.join(workdir, "large.db")
        t0 = time.perf_counter()
        setups, ack_ids = {}, {}
        for path, history in ((small, 0), (large, args.history)):
            setups[path], ack_ids[path] = build_in_child(path, history, args.runs)
        print(f"databases ready in {time.perf_counter() - t0:.1f}s (history: {args.history} messages)")
        base_env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("CAFLEET_", "TMUX", "HERDR")) and k != "PYTHONDONTWRITEBYTECODE"
        }

        def commands(path):
            return hot_argvs(*setups[path])  # "message ack" filled per run

        bare = [sys.executable, "-c", "pass"]
        # What every cafleet command pays before running a line of cafleet: the console
        # script that pip writes imports `re`, and the SQLite library must be loaded.
        floor = [sys.executable, "-c", "import re, _sqlite3"]
        plan = []
        for i in range(args.runs):
            plan.append(("bare", bare, {}))
            plan.append(("floor", floor, {}))
            for path in (small, large):
                for name, argv in commands(path).items():
                    if argv is None:
                        argv = ["message", "ack", str(ack_ids[path][i])]
                    plan.append((f"{name}|{path}", cafleet + argv, {"CAFLEET_DATABASE_URL": path}))
        results = run_plan(plan, base_env, workdir)
        samples: dict[str, list[float]] = {}
        rss: dict[str, int] = {}
        for label, elapsed, peak in results:
            samples.setdefault(label, []).append(elapsed)
            name = label.split("|")[0]
            rss[name] = max(rss.get(name, 0), peak)
        bare_times, floor_times = samples["bare"], samples["floor"]
        rss["python -c pass"] = rss["bare"]
        bare_median = statistics.median(bare_times)
        floor_median = statistics.median(floor_times)
        print(
            f"python -c pass: median {bare_median * 1000:.1f} ms over {args.runs} runs, "
            f"peak RSS {rss['python -c pass'] / 1024:.1f} MiB"
        )
        print(f"floor (python -c 'import re, _sqlite3'): {floor_median / bare_median:.2f}x bare")
        print(f"{'command':<14} {'vs bare':>8} {'vs floor':>9} {'history/small':>14} {'peak RSS':>9}")
        for name in commands(small):
            small_median = statistics.median(samples[f"{name}|{small}"])
            large_median = statistics.median(samples[f"{name}|{large}"])
            print(
                f"{name:<14} {small_median / bare_median:>7.2f}x {small_median / floor_median:>8.2f}x "
                f"{large_median / small_median:>13.2f}x "
                f"{rss[name] / 1024:>6.1f} MiB"
            )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
