"""Benchmark: the hot commands of this tree against another revision's, in one run.

    python bench/before_after.py REV [--runs N] [--postgres]

Extracts ``src/`` of git revision REV into a temporary folder, byte-compiles both trees,
and runs `message poll`, `message send` and `fleet list` through the installed `cafleet`
console script with PYTHONPATH pointing at one tree or the other, interleaved, on one
SQLite file, or with ``--postgres`` on one database of a private PostgreSQL cluster
(tests/support/postgres.py). Prints the medians and their ratio (this tree over REV): of
the wall time, and of the CPU time the command itself used (user + system, from
``getrusage``), which a loaded machine disturbs far less than the wall clock.
"""

from __future__ import annotations

import argparse
import compileall
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rev")
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--postgres", action="store_true", help="on a private PostgreSQL cluster instead of SQLite")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="cafleet-ab-")
    cluster = None
    try:
        before = os.path.join(work, "before")
        os.makedirs(before)
        archive = subprocess.run(
            ["git", "-C", ROOT, "archive", args.rev, "src"], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", before], input=archive, check=True)
        trees = {"before": os.path.join(before, "src"), "after": os.path.join(ROOT, "src")}
        for tree in trees.values():
            compileall.compile_dir(tree, quiet=1)
        sys.path.insert(0, trees["after"])
        from cafleet.broker import fleets, members, messages
        from cafleet.store.engines import open_store

        db = os.path.join(work, "bench.db")
        if args.postgres:
            sys.path.insert(0, ROOT)
            from tests.support.postgres import Cluster, missing_reason

            reason = missing_reason()
            if reason:
                raise SystemExit(reason)
            cluster = Cluster()
            cluster.start()
            db = cluster.fresh_database()
        store = open_store(db)
        fleet = fleets.create_fleet(
            store, name="b", coding_agent="claude", backend="tmux", session="$0@/n", window_id="@0", pane_id="%0"
        )
        workers = [
            members.register_member(
                store,
                fleet_id=fleet["fleet_id"],
                name=f"w{i}",
                description="d",
                backend="tmux",
                session="$0@/n",
                window_id="@0",
                coding_agent="claude",
            )
            for i in range(3)
        ]
        for _ in range(5):
            messages.send(store, fleet["director_member_id"], workers[0], "task")
        store.close()
        cafleet = os.path.join(os.path.dirname(sys.executable), "cafleet")
        base = {k: v for k, v in os.environ.items() if not k.startswith(("CAFLEET_", "TMUX", "HERDR", "PG"))}
        base["CAFLEET_DATABASE_URL"] = db
        commands = {
            "message poll": ["message", "poll", str(workers[0])],
            "message send": [
                "message",
                "send",
                "--from-member-id",
                str(workers[1]),
                "--to-member-id",
                str(workers[2]),
                "x",
            ],
            "fleet list": ["fleet", "list"],
        }
        samples: dict[tuple[str, str], list[float]] = {}
        cpu: dict[tuple[str, str], list[float]] = {}
        for run in range(args.runs):
            for name, argv in commands.items():
                # each side goes first in every other round, so neither pays for the other's wake
                for side, tree in sorted(trees.items(), reverse=bool(run % 2)):
                    used = _child_cpu()
                    started = time.perf_counter()
                    subprocess.run(
                        [cafleet, *argv], env=dict(base, PYTHONPATH=tree), stdout=subprocess.DEVNULL, check=True
                    )
                    samples.setdefault((name, side), []).append(time.perf_counter() - started)
                    cpu.setdefault((name, side), []).append(_child_cpu() - used)
        print(f"{args.runs} runs each, interleaved; this tree over {args.rev}")
        for name in commands:
            b, a = statistics.median(samples[(name, "before")]), statistics.median(samples[(name, "after")])
            cb, ca = statistics.median(cpu[(name, "before")]), statistics.median(cpu[(name, "after")])
            print(
                f"{name:<13} {args.rev[:10]} {b * 1000:6.1f} ms   this tree {a * 1000:6.1f} ms   ratio {a / b:.3f}"
                f"   cpu {cb * 1000:5.1f} / {ca * 1000:5.1f} ms   ratio {ca / cb:.3f}"
            )
    finally:
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(work, ignore_errors=True)


def _child_cpu() -> float:
    """User + system seconds of every child this process waited for so far."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


if __name__ == "__main__":
    main()
