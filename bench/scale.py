"""Benchmark: the hot commands on the database of a long-lived installation, in one run.

    python bench/scale.py [--runs N] [--messages N] [--members N] [--hot-share F] [--hot-size N]
                          [--without-auxiliary]

Builds three databases, each in a child process:

* *large*: ``--messages`` messages (default 1,000,000) between ``--members`` members
  (default 1,000): old fleets of ten, deleted, their members deregistered, plus one hot,
  live fleet of ``--hot-size`` members that carries ``--hot-share`` of all the traffic;
* *hot*: the same hot fleet and its history, nothing else;
* *small*: the same hot fleet with no history.

Every measured command runs against the hot fleet on the three databases, interleaved.
The report gives the medians and two ratios: large/small (the target is at most 1.1x,
1.2x on the stress run) and large/hot, which isolates what the other fleets' messages
cost. ``--without-auxiliary`` drops cafleet's auxiliary pending index from the three
databases: a file made before it existed, read by commands that must still work. ``message listen``
never exits, so it is timed to its first line (the pending message), then stopped with
SIGTERM. Everything else runs from the small spawn runner of ``hot_commands.py``, whose
helpers this script reuses.
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
sys.path.insert(0, HERE)

from cafleet.broker import fleets, members
from cafleet.store.engines import open_store
from hot_commands import cafleet_bin, fill_history, pending_ids, run_plan

SESSION = "$0@/nonexistent/cafleet-bench-socket"  # never reached: nothing is owed a preview
HOT_START = 1_738_368_000  # 2025-02-01T00:00:00Z: the hot fleet's traffic follows the old fleets'


def iso(seconds: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000000+00:00", time.gmtime(seconds))


def hot_traffic(director: int, workers: list[int], count: int):
    """Rows of a busy fleet: the Director hands out tasks and every member reports back,
    all of it ACKed; previews to members were typed (notified), the Director's never are."""
    for n in range(count):
        worker = workers[n % len(workers)]
        sender, recipient = (director, worker) if n % 2 == 0 else (worker, director)
        created = HOT_START + n
        notified = iso(created + 1) if recipient != director else None
        yield (sender, recipient, iso(created), iso(created + 30), f"hot message {n}: status and results", notified)


def make_database(
    path: str,
    total_messages: int,
    total_members: int,
    hot_share: float,
    hot_size: int,
    acks: int,
    auxiliary: bool = True,
) -> dict:
    """One database as described in the module docstring; returns the ids the commands use."""
    store = open_store(path)
    hot_messages = int(total_messages * hot_share)
    old_members = total_members - hot_size
    if total_messages > hot_messages and old_members >= 10:
        # Old installations: fleets of ten, their members deregistered and the fleets deleted.
        fill_history(store, total_messages - hot_messages, fleets_count=old_members // 10, members_per_fleet=10)
        with store.write():
            store.execute("UPDATE fleets SET deleted_at = '2025-01-31T00:00:00.000000+00:00' WHERE name LIKE 'old%'")
    fleet = fleets.create_fleet(
        store, name="hot", coding_agent="claude", backend="tmux", session=SESSION, window_id="@0", pane_id="%0"
    )
    fleet_id, director = fleet["fleet_id"], fleet["director_member_id"]
    workers = [
        members.register_member(
            store,
            fleet_id=fleet_id,
            name=f"w{i}",
            description="bench",
            backend="tmux",
            session=SESSION,
            window_id="@0",
            coding_agent="claude",
            pane_id=f"%{i + 1}",
        )
        for i in range(hot_size - 2)
    ]
    # A member still being created (pending placement) receives the messages to ACK, so no
    # message in the hot fleet is owed a preview that `message wait` would try to type.
    acker = members.register_member(
        store,
        fleet_id=fleet_id,
        name="acker",
        description="bench",
        backend="tmux",
        session=SESSION,
        window_id="@0",
        coding_agent="claude",
    )
    if hot_messages:
        with store.write():
            store.conn.executemany(
                "INSERT INTO messages (from_member_id, to_member_id, created_at, status_state, status_timestamp, text,"
                " notified_at) VALUES (?, ?, ?, 'completed', ?, ?, ?)",
                hot_traffic(director, workers, hot_messages),
            )
    now = iso(int(time.time()))
    with store.write():  # the one pending message: for the Director, from a member
        pending = store.execute(
            "INSERT INTO messages (from_member_id, to_member_id, created_at, status_state, status_timestamp, text)"
            " VALUES (?, ?, ?, 'input_required', ?, 'done: tests pass, ready for review')",
            (workers[0], director, now, now),
        ).lastrowid
    if not auxiliary:
        from cafleet.store import schema

        for name in schema.AUX_INDEXES:
            store.execute(f"DROP INDEX IF EXISTS {name}")
    store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    return {
        "fleet_id": fleet_id,
        "director": director,
        "member": workers[0],
        "pending": pending,
        "acks": pending_ids(path, acker, acks, director),
    }


def build_in_child(path: str, args, messages: int, members_count: int, hot_share: float) -> dict:
    """Build in a child process so that this one stays small (see hot_commands.py)."""
    import json
    import subprocess

    argv = [
        sys.executable,
        __file__,
        "--build",
        path,
        "--messages",
        str(messages),
        "--members",
        str(members_count),
        "--hot-share",
        str(hot_share),
        "--hot-size",
        str(args.hot_size),
        "--runs",
        str(args.runs),
    ]
    if args.without_auxiliary:
        argv.append("--without-auxiliary")
    return json.loads(subprocess.run(argv, check=True, capture_output=True, text=True).stdout)


def first_line_seconds(argv: list[str], env: dict) -> float:
    """Seconds from spawning ``argv`` to its first line on stdout; then stop it by its pid."""
    import subprocess

    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    try:
        line = proc.stdout.readline()
        elapsed = time.perf_counter() - started
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    if not line:
        raise SystemExit(f"{' '.join(argv)} printed nothing")
    return elapsed


def count_rows(path: str) -> tuple[int, int]:
    store = open_store(path)
    try:
        return (
            store.execute("SELECT count(*) FROM messages").fetchone()[0],
            store.execute("SELECT count(*) FROM members").fetchone()[0],
        )
    finally:
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--members", type=int, default=1_000)
    parser.add_argument("--hot-share", type=float, default=0.02, help="share of all messages in the hot fleet")
    parser.add_argument("--hot-size", type=int, default=20, help="members of the hot fleet, Director included")
    parser.add_argument(
        "--without-auxiliary",
        action="store_true",
        help="drop cafleet's auxiliary pending index (a file made before it existed)",
    )
    parser.add_argument("--build", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.build:
        import json

        print(
            json.dumps(
                make_database(
                    args.build,
                    args.messages,
                    args.members,
                    args.hot_share,
                    args.hot_size,
                    args.runs,
                    auxiliary=not args.without_auxiliary,
                )
            )
        )
        return
    cafleet = cafleet_bin()
    import compileall  # measure with bytecode caches, as an installed cafleet runs

    compileall.compile_dir(os.path.join(HERE, "..", "src"), quiet=1)
    workdir = tempfile.mkdtemp(prefix="cafleet-scale-")
    try:
        paths = small, hot, large = tuple(os.path.join(workdir, f"{name}.db") for name in ("small", "hot", "large"))
        t0 = time.perf_counter()
        ids = {
            small: build_in_child(small, args, 0, args.hot_size, 0.0),
            hot: build_in_child(hot, args, int(args.messages * args.hot_share), args.hot_size, 1.0),
            large: build_in_child(large, args, args.messages, args.members, args.hot_share),
        }
        print(f"databases ready in {time.perf_counter() - t0:.0f} s")
        for label, path in zip(("small", "hot", "large"), paths):
            message_count, member_count = count_rows(path)
            print(
                f"  {label:<5} {message_count:>9,} messages {member_count:>5,} members "
                f"{os.path.getsize(path) / 2**20:>5.0f} MiB"
            )
        base_env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("CAFLEET_", "TMUX", "HERDR")) and k != "PYTHONDONTWRITEBYTECODE"
        }

        def commands(path: str, run: int) -> dict:
            i = ids[path]
            return {
                "message poll": ["message", "poll", str(i["director"])],
                "message wait": ["message", "wait", str(i["director"]), "--timeout", "0"],
                "member list": ["member", "list", str(i["fleet_id"])],
                "message show": ["message", "show", str(i["pending"])],
                "message ack": ["message", "ack", str(i["acks"][run])],
            }

        plan = []
        for run in range(args.runs):
            plan.append(("bare", [sys.executable, "-c", "pass"], {}))
            for path in paths:
                for name, argv in commands(path, run).items():
                    plan.append((f"{name}|{path}", cafleet + argv, {"CAFLEET_DATABASE_URL": path}))
        samples: dict[str, list[float]] = {}
        for label, elapsed, _peak in run_plan(plan, base_env, workdir):
            samples.setdefault(label, []).append(elapsed)
        for _ in range(args.runs):  # listen, to its first line, interleaved the same way
            for path in paths:
                argv = [*cafleet, "message", "listen", str(ids[path]["director"])]
                samples.setdefault(f"message listen|{path}", []).append(
                    first_line_seconds(argv, dict(base_env, CAFLEET_DATABASE_URL=path))
                )
        bare = statistics.median(samples["bare"])
        print(f"python -c pass: median {bare * 1000:.1f} ms over {args.runs} runs")
        print(
            f"{'command':<15} {'small':>8} {'hot':>8} {'large':>8} {'large/small':>12} {'large/hot':>10} "
            f"{'small/bare':>11}"
        )
        for name in [*commands(small, 0), "message listen"]:
            s, h, g = (statistics.median(samples[f"{name}|{path}"]) for path in paths)
            print(
                f"{name:<15} {s * 1000:>5.1f} ms {h * 1000:>5.1f} ms {g * 1000:>5.1f} ms {g / s:>11.2f}x "
                f"{g / h:>9.2f}x {s / bare:>10.2f}x"
            )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
