"""Benchmark: hot commands on PostgreSQL beside the same commands on SQLite, in one run.

    python bench/postgres_hot.py [--runs N]

Starts a private PostgreSQL cluster (tests/support/postgres.py: Debian's server, a Unix
socket, run as the postgres user when root), builds the same small fleet on a SQLite file
and in a PostgreSQL database, then runs each hot command on both stores, interleaved, from
the small spawning runner of bench/hot_commands.py. The PostgreSQL store talks to the
server through libpq (``cafleet.store.libpq``, a ctypes binding of Debian's libpq5).
Prints medians:

- each command on PostgreSQL over the same command on SQLite (the goal: at most
  ``GOAL``, 1.75x, on a local server), each store over ``python -c pass``, and the
  milliseconds PostgreSQL adds (the difference of the medians);
- what a process pays before its first statement, over ``python -c pass``: ``import
  ctypes`` alone, ctypes and ``dlopen`` of ``libpq.so.5`` (libpq and the libraries it
  needs: OpenSSL, Kerberos, LDAP...), ``import cafleet.store.postgres`` (ctypes, the
  binding, the store), and the store imported with libpq loaded and declared;
- where the added milliseconds go: a probe process run as often as the commands times, in
  itself, each step of the PostgreSQL open (import ctypes; import cafleet.store.libpq and
  cafleet.store.postgres, each alone; dlopen libpq; declare its functions; connect; the
  open's one round trip, settings and schema digest in one pipeline; close) and the SQLite
  open it replaces; what is left of each command's added milliseconds is its own
  statements (and its exit, and noise).

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

from bench.hot_commands import bench_fleet, cafleet_bin, hot_argvs, run_plan
from cafleet.broker import messages
from cafleet.store.engines import open_store


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


GOAL = 1.75  # each hot command on PostgreSQL over its SQLite twin, on a local server

# Run in a child as often as the commands: each step of a command's open, timed in itself.
# Writes one line of milliseconds (name=value ...) to the file it is given.
PHASES = r"""
import sys, time
kind, location, out = sys.argv[1:4]
marks = [("start", time.perf_counter())]
def mark(name):
    marks.append((name, time.perf_counter()))
from cafleet.store import sqlite  # what both stores' commands import
mark("common import")
if kind == "postgres":
    import ctypes
    mark("import ctypes")
    from cafleet.store import libpq
    mark("import store.libpq")
    from cafleet.store import postgres
    mark("import store.postgres")
    ctypes.CDLL("libpq.so.5")
    mark("dlopen libpq.so.5")
    libpq.lib()
    mark("declare libpq")
    conn = postgres.connect(location, sqlite.DEFAULT_BUSY_TIMEOUT, postgres.DEFAULT_SCHEMA, settings=False)
    mark("connect")
    assert postgres.fast_accept(conn, postgres.DEFAULT_SCHEMA, sqlite.DEFAULT_BUSY_TIMEOUT) is not None
    mark("open round trip")
    conn.close()
    mark("close")
else:
    sqlite.open_store(location).close()
    mark("sqlite open+close")
with open(out, "a") as handle:
    handle.write(" ".join(f"{name.replace(' ', '_')}={(t - marks[i][1]) * 1000:.4f}" for i, (name, t) in enumerate(marks[1:])) + "\n")
"""
PG_STEPS = [
    "import ctypes",
    "import store.libpq",
    "import store.postgres",
    "dlopen libpq.so.5",
    "declare libpq",
    "connect",
    "open round trip",
    "close",
]


def phase_medians(path: str) -> dict[str, float]:
    samples: dict[str, list[float]] = {}
    with open(path) as handle:
        for line in handle:
            for item in line.split():
                name, value = item.split("=")
                samples.setdefault(name.replace("_", " "), []).append(float(value))
    return {name: statistics.median(values) for name, values in samples.items()}


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
        phases = os.path.join(workdir, "phases.py")
        with open(phases, "w") as handle:
            handle.write(PHASES)
        phase_out = {kind: os.path.join(workdir, f"phases-{kind}.txt") for kind in stores}

        def commands(kind):
            fleet_id, director, workers, _ = setups[kind]
            return {**hot_argvs(fleet_id, director, workers), "fleet list": ["fleet", "list"]}

        python = sys.executable
        imports = {
            "import ctypes": "import ctypes",
            "ctypes + dlopen libpq.so.5": "import ctypes; ctypes.CDLL('libpq.so.5')",
            "import cafleet.store.postgres": "import cafleet.store.postgres",
            "  + libpq loaded and declared": "import cafleet.store.postgres as p; p.libpq.lib()",
        }
        plan = []
        for i in range(args.runs):
            plan.append(("bare", [python, "-c", "pass"], {}))
            for label, code in imports.items():
                plan.append((label, [python, "-c", code], {}))
            for kind, url in stores.items():
                plan.append((f"phases|{kind}", [python, phases, kind, url, phase_out[kind]], {}))
                for name, argv in commands(kind).items():
                    if argv is None:
                        argv = ["message", "ack", str(setups[kind][3][i])]
                    plan.append((f"{name}|{kind}", cafleet + argv, {"CAFLEET_DATABASE_URL": url}))
        results = run_plan(plan, base_env, workdir)
        samples: dict[str, list[float]] = {}
        for label, elapsed, _ in results:
            samples.setdefault(label, []).append(elapsed)
        med = {label: statistics.median(values) * 1000 for label, values in samples.items()}
        bare = med["bare"]
        print(f"{args.runs} runs each, interleaved; python -c pass: median {bare:.1f} ms")
        print(f"\n{'process':<32} {'/bare':>7} {'ms over bare':>13}")
        for label in imports:
            print(f"{label:<32} {med[label] / bare:>6.2f}x {med[label] - bare:>13.1f}")
        print(
            f"\n{'command':<14} {'sqlite/bare':>12} {'postgres/bare':>14} {'postgres/sqlite':>16} {'pg extra ms':>12}"
            f"  goal <= {GOAL}x"
        )
        extra = {}
        for name in commands("sqlite"):
            lite, pg = med[f"{name}|sqlite"], med[f"{name}|postgres"]
            extra[name] = pg - lite
            verdict = "met" if pg / lite <= GOAL else "NOT met"
            print(
                f"{name:<14} {lite / bare:>11.2f}x {pg / bare:>13.2f}x {pg / lite:>15.2f}x {pg - lite:>12.1f}"
                f"  {verdict}"
            )
        pg_steps, lite_steps = phase_medians(phase_out["postgres"]), phase_medians(phase_out["sqlite"])
        fixed = sum(pg_steps[step] for step in PG_STEPS)
        lite_open = lite_steps["sqlite open+close"]
        print(
            f"\nwhere PostgreSQL's milliseconds go (a probe process, each step timed in itself, medians of {args.runs}):"
        )
        for step in PG_STEPS:
            print(f"  {step:<28} {pg_steps[step]:7.2f} ms")
        print(f"  {'PostgreSQL open, all steps':<28} {fixed:7.2f} ms")
        print(f"  {'SQLite open+close':<28} {lite_open:7.2f} ms (what the PostgreSQL open replaces)")
        print(f"  {'open added':<28} {fixed - lite_open:7.2f} ms")
        print(f"  (import cafleet.store.sqlite, both stores: {pg_steps['common import']:.2f} ms on the PostgreSQL")
        print(f"   probe, {lite_steps['common import']:.2f} ms on the SQLite one)")
        print("\nthe milliseconds each command adds on PostgreSQL, accounted for (the steps' medians above):")
        print(
            f"{'command':<14} {'added':>7} {'imports':>8} {'libpq load':>11} {'connect':>8}"
            f" {'open RT - sqlite open':>22} {'statements, rest':>17}"
        )
        imported = sum(pg_steps[step] for step in PG_STEPS[:3])
        loaded = pg_steps["dlopen libpq.so.5"] + pg_steps["declare libpq"]
        connected = pg_steps["connect"]
        opened = pg_steps["open round trip"] + pg_steps["close"] - lite_open
        for name, value in extra.items():
            rest = value - imported - loaded - connected - opened
            print(
                f"{name:<14} {value:>7.1f} {imported:>8.1f} {loaded:>11.1f} {connected:>8.1f}"
                f" {opened:>22.1f} {rest:>17.1f}"
            )
        open_costs(stores["postgres"], stores["sqlite"], max(30, args.runs * 3))
    finally:
        cluster.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
