"""Benchmark: hot commands on PostgreSQL beside the same commands on SQLite, in one run.

    python bench/postgres_hot.py [--runs N]

Starts a private PostgreSQL cluster (tests/support/postgres.py: Debian's server, a Unix
socket, run as the postgres user when root), builds the same small fleet on a SQLite file
and in a PostgreSQL database, then runs each hot command on both stores, interleaved, from
the small spawning runner of bench/hot_commands.py. Prints medians as ratios: PostgreSQL
over SQLite for each command, each store over `python -c pass`, and the import of the
PostgreSQL store alone (`cafleet.store.postgres` with cafleet's own client,
`cafleet.store.pgwire`); the PostgreSQL cost per command in milliseconds is the difference
of the medians.

Then, in this process (the store already imported), the store's open alone, interleaved:
connecting, the open as it is (one round trip to accept a healthy schema), the detailed
diagnosis it falls back to (settings, catalogue query, ledger query: the open before the
fast path) and the SQLite open, as medians and ratios.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))
sys.path.insert(0, os.path.join(HERE, ".."))

from bench.hot_commands import bench_fleet, cafleet_bin, run_plan  # noqa: E402
from cafleet.broker import messages  # noqa: E402
from cafleet.store.connection import open_store  # noqa: E402


def build(url: str, acks: int):
    store = open_store(url)
    fleet_id, director, workers = bench_fleet(store)
    for i in range(5):
        messages.send(store, director, workers[0], f"task {i}")
    ack_ids = [messages.send(store, director, workers[1], "to ack")["message_id"] for _ in range(acks)]
    store.close()
    return fleet_id, director, workers, ack_ids


def open_costs(url: str, sqlite_path: str, runs: int) -> None:
    """The store's open, in process and interleaved, on each path."""
    import time

    from cafleet.store import postgres

    def connect_only():
        postgres.connect(url, 5.0, postgres.DEFAULT_SCHEMA, settings=False).close()

    def detailed():
        conn = postgres.connect(url, 5.0, postgres.DEFAULT_SCHEMA)
        assert postgres.diagnose(conn, "bench", postgres.DEFAULT_SCHEMA) == "cafleet"
        conn.close()

    cases = {
        "connect only": connect_only,
        "open (fast path)": lambda: open_store(url).close(),
        "open (detailed)": detailed,
        "sqlite open": lambda: open_store(sqlite_path).close(),
    }
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(runs):
        for name, case in cases.items():
            started = time.perf_counter()
            case()
            samples[name].append(time.perf_counter() - started)
    ms = {name: statistics.median(values) * 1000 for name, values in samples.items()}
    print(f"store open in process, {runs} runs each, interleaved (medians):")
    for name, value in ms.items():
        print(f"  {name:<18} {value:7.2f} ms  {value / ms['sqlite open']:6.2f}x sqlite open")
    print(f"  detailed / fast: {ms['open (detailed)'] / ms['open (fast path)']:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    from tests.support.postgres import Cluster, missing_reason

    reason = missing_reason()
    if reason:
        raise SystemExit(reason)
    import compileall

    compileall.compile_dir(os.path.join(HERE, "..", "src"), quiet=1)
    cafleet = cafleet_bin()
    cluster = Cluster()
    workdir = tempfile.mkdtemp(prefix="cafleet-bench-pg-")
    try:
        cluster.start()
        stores = {"sqlite": os.path.join(workdir, "bench.db"), "postgres": cluster.fresh_database()}
        setups = {kind: build(url, args.runs) for kind, url in stores.items()}
        base_env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("CAFLEET_", "TMUX", "HERDR", "PG")) and k != "PYTHONDONTWRITEBYTECODE"
        }

        def commands(kind):
            fleet_id, director, workers, _ = setups[kind]
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
                "fleet list": ["fleet", "list"],
            }

        plan = []
        for i in range(args.runs):
            plan.append(("bare", [sys.executable, "-c", "pass"], {}))
            plan.append(("import store", [sys.executable, "-c", "import cafleet.store.postgres"], {}))
            for kind, url in stores.items():
                for name, argv in commands(kind).items():
                    if argv is None:
                        argv = ["message", "ack", str(setups[kind][3][i])]
                    plan.append((f"{name}|{kind}", cafleet + argv, {"CAFLEET_DATABASE_URL": url}))
        results = run_plan(plan, base_env, workdir)
        samples: dict[str, list[float]] = {}
        for label, elapsed, _ in results:
            samples.setdefault(label, []).append(elapsed)
        bare = statistics.median(samples["bare"])
        print(f"{args.runs} runs each, interleaved; python -c pass: median {bare * 1000:.1f} ms")
        print(f"import cafleet.store.postgres: {statistics.median(samples['import store']) / bare:.2f}x bare")
        print(f"{'command':<14} {'sqlite/bare':>12} {'postgres/bare':>14} {'postgres/sqlite':>16} {'pg extra ms':>12}")
        for name in commands("sqlite"):
            lite, pg = statistics.median(samples[f"{name}|sqlite"]), statistics.median(samples[f"{name}|postgres"])
            print(
                f"{name:<14} {lite / bare:>11.2f}x {pg / bare:>13.2f}x {pg / lite:>15.2f}x {(pg - lite) * 1000:>11.1f}"
            )
        open_costs(stores["postgres"], stores["sqlite"], max(30, args.runs * 3))
    finally:
        cluster.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
