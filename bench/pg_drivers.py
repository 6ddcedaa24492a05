"""Benchmark: which PostgreSQL client lets a cafleet command run near SQLite's speed.

    python bench/pg_drivers.py [--runs N] [--revision REV] [--pgwire-revision REV]

One run does everything: creates one virtualenv per candidate in a temporary folder and
installs it there with pip from the package index (psycopg 3 pure Python; psycopg 3 with
psycopg-binary; psycopg 3 with psycopg-c, built here against Debian's libpq; psycopg2-binary;
psycopg2 built against Debian's libpq (libpq-dev); pg8000; cafleet's own binding of libpq,
``cafleet.store.libpq`` of this tree, which needs nothing installed but Debian's libpq5;
and, as a reference point, the hand-written protocol client it replaced,
``cafleet.store.pgwire``, taken from ``--pgwire-revision``), starts a private PostgreSQL
cluster (tests/support/postgres.py), and then times, interleaved and paired run by run
(medians over ``--runs``):

- ``python -c pass`` in the same venv (bare); ``import ssl`` (what a TLS connection added
  to pgwire, which imported ``ssl`` only then); ``import ctypes`` alone and ``import ctypes``
  with ``ctypes.CDLL("libpq.so.5")`` (libpq and every library it needs: OpenSSL, Kerberos,
  LDAP...), so that the binding's cost splits into the ctypes import, libpq's load, and the
  module's own import (``import cafleet.store.libpq`` over ``import ctypes``; the module
  loads libpq on its first connection, not at import) and its declaration of libpq's
  functions (``libpq.lib()`` on top);
- ``import <driver>`` alone;
- a probe in each venv: import the driver, connect on the cluster's socket, send the
  store's one-round-trip open (``postgres._fast_query``: the settings and the schema digest
  query; one libpq pipeline for the binding, one simple-query message for the others) and
  the poll's read, close (what every hot command does on PostgreSQL, whatever driver);
- the hot commands themselves (``message poll``, ``message send``, ``member list``,
  ``fleet list``) on SQLite and on PostgreSQL with this tree (libpq), with the store of
  ``--pgwire-revision`` (default dbbaf4b, the parent of cdae2f9 that removed pgwire: the
  last store on pgwire) in the bare venv, and with the store of ``--revision`` (default
  34da280, the last store on psycopg) in the psycopg 3 venvs. Each older store is first
  checked to accept this tree's schema by its one-round-trip open (else its figures would
  include the detailed diagnosis).

Prints each figure over bare and each command over the same command on SQLite. A candidate
that does not install (no compiler, no libpq-dev, no index) is reported and skipped.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(ROOT, "src"))
sys.path.insert(0, ROOT)

from bench.hot_commands import hot_argvs

LIBPQ = "cafleet libpq (ctypes)"
PGWIRE = "cafleet pgwire (old)"
PSYCOPG3 = ("psycopg 3 (pure)", "psycopg 3 + psycopg-binary", "psycopg 3 + psycopg-c")
# (name, pip arguments, module imported, the API the probe uses, whose cafleet source: "new"
# this tree, "pgwire" --pgwire-revision)
CANDIDATES = [
    ("psycopg 3 (pure)", ["psycopg"], "psycopg", "psycopg", "new"),
    ("psycopg 3 + psycopg-binary", ["psycopg[binary]"], "psycopg", "psycopg", "new"),
    ("psycopg 3 + psycopg-c", ["psycopg[c]"], "psycopg", "psycopg", "new"),
    ("psycopg2-binary", ["psycopg2-binary"], "psycopg2", "psycopg2", "new"),
    ("psycopg2 (Debian libpq)", ["--no-binary", "psycopg2", "psycopg2"], "psycopg2", "psycopg2", "new"),
    ("pg8000", ["pg8000"], "pg8000", "pg8000", "new"),
    (LIBPQ, [], "cafleet.store.libpq", "libpq", "new"),
    (PGWIRE, [], "cafleet.store.pgwire", "pgwire", "pgwire"),
]

PROBE = r"""
import sys
api, url, socket_dir, query_file = sys.argv[1:5]
with open(query_file) as handle:
    settings, digest, read_query = handle.read().split("\n----\n")
open_query = settings + ";\n" + digest  # one simple-query message: the two statements in one round trip
if api == "libpq":
    from cafleet.store import libpq
    conn = libpq.connect(url)
    conn.pipeline([(settings, ()), (digest, ())])  # one round trip, as the store's open
    conn.execute(read_query).fetchall()
elif api == "pgwire":
    from cafleet.store import pgwire
    conn = pgwire.connect(url)
    conn.execute(open_query)
    conn.execute(read_query).fetchall()
elif api == "psycopg":
    import psycopg
    conn = psycopg.connect(url, autocommit=True)
    conn.execute(open_query)
    conn.execute(read_query).fetchall()
elif api == "psycopg2":
    import psycopg2
    conn = psycopg2.connect(url)
    conn.autocommit = True
    cur = conn.cursor()
    cur.execute(open_query)
    cur.execute(read_query)
    cur.fetchall()
else:  # pg8000: one statement per message (the extended protocol), so the open is two
    import pg8000.native
    database = url.split("@/", 1)[1].split("?")[0]
    conn = pg8000.native.Connection("postgres", unix_sock=socket_dir + "/.s.PGSQL.5432", database=database)
    for statement in (settings, digest):
        conn.run(statement)
    conn.run(read_query)
conn.close()
"""


def install(workdir: str, index: int, name: str, pip_args: list[str]) -> tuple[str | None, str]:
    """A venv with the candidate in it: (its python, what was installed) or (None, why not)."""
    venv = os.path.join(workdir, f"venv{index}")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    python = os.path.join(venv, "bin", "python")
    if not pip_args:
        return python, "nothing (standard library only)"
    pip = [sys.executable, "-m", "pip", "--python", python, "install", "-q", "--disable-pip-version-check"]
    done = subprocess.run(pip + pip_args, capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["pip failed"])[-1]
        return None, f"not installed: {last[:160]}"
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "--python", python, "list", "--format=freeze", "--disable-pip-version-check"],
        capture_output=True,
        text=True,
    ).stdout.split()
    return python, ", ".join(p for p in listed if p.lower().startswith(("psycopg", "pg8000", "scramp")))


CHECK_OPEN = """
import sys
from cafleet.store import postgres
conn = postgres.connect(sys.argv[1], 5.0, postgres.DEFAULT_SCHEMA, settings=False)
sys.exit(0 if postgres.fast_accept(conn, postgres.DEFAULT_SCHEMA, 5.0) is not None else 3)
"""


def extract(revision: str, into: str) -> str:
    """The ``src`` folder of ``revision``, unpacked under ``into`` and byte-compiled."""
    import compileall

    os.makedirs(into)
    archive = subprocess.run(["git", "-C", ROOT, "archive", revision, "src"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", into], input=archive.stdout, check=True)
    compileall.compile_dir(os.path.join(into, "src"), quiet=1)
    return os.path.join(into, "src")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=11)
    parser.add_argument("--revision", default="34da280", help="a revision whose store runs on psycopg 3")
    parser.add_argument(
        "--pgwire-revision", default="dbbaf4b", help="a revision whose store runs on cafleet.store.pgwire"
    )
    args = parser.parse_args()
    from bench.hot_commands import bench_fleet, run_plan
    from cafleet.broker import messages
    from cafleet.store import postgres
    from cafleet.store.engines import open_store
    from tests.support.postgres import Cluster, missing_reason

    reason = missing_reason()
    if reason:
        raise SystemExit(reason)
    workdir = tempfile.mkdtemp(prefix="cafleet-bench-drivers-")
    cluster = Cluster()
    try:
        import compileall

        compileall.compile_dir(os.path.join(ROOT, "src"), quiet=1)
        paths = {
            "new": {"PYTHONPATH": os.path.join(ROOT, "src")},
            "psycopg": {"PYTHONPATH": extract(args.revision, os.path.join(workdir, "old-psycopg"))},
            "pgwire": {"PYTHONPATH": extract(args.pgwire_revision, os.path.join(workdir, "old-pgwire"))},
        }
        installed: dict[str, tuple[str, str, str, dict]] = {}
        for i, (name, pip_args, module, api, tree) in enumerate(CANDIDATES):
            python, what = install(workdir, i, name, pip_args)
            if tree == "pgwire":
                what += f"; cafleet's source of {args.pgwire_revision}"
            print(f"{name:<28} {what}", flush=True)
            if python:
                installed[name] = (python, module, api, paths[tree])

        cluster.start()
        stores = {"sqlite": os.path.join(workdir, "bench.db"), "postgres": cluster.fresh_database()}
        setups = {}
        for kind, url in stores.items():
            store = open_store(url)
            fleet_id, director, workers = bench_fleet(store)
            for n in range(5):
                messages.send(store, director, workers[0], f"task {n}")
            setups[kind] = (fleet_id, director, workers)
            store.close()
        query_file = os.path.join(workdir, "queries.sql")
        read = (
            "SELECT message_id, from_member_id, created_at, text FROM messages "
            f"WHERE to_member_id = {setups['postgres'][2][0]} AND status_state = 'pending' ORDER BY message_id"
        )
        settings_sql, digest_sql = postgres._fast_query(postgres.DEFAULT_SCHEMA, 5.0)
        with open(query_file, "w") as handle:
            handle.write("\n----\n".join((settings_sql, digest_sql, read)))
        probe = os.path.join(workdir, "probe.py")
        with open(probe, "w") as handle:
            handle.write(PROBE)

        base_env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("CAFLEET_", "TMUX", "HERDR", "PG", "PYTHON", "VIRTUAL_ENV"))
        }
        bare_python = installed[LIBPQ][0]

        def commands(kind):
            hot = hot_argvs(*setups[kind])
            return {name: hot[name] for name in ("message poll", "message send", "member list")} | {
                "fleet list": ["fleet", "list"]
            }

        # Which store runs each command: SQLite (this tree), libpq (this tree), pgwire (the
        # store of --pgwire-revision), psycopg 3's venvs with the store of --revision.
        runners = [
            ("sqlite", bare_python, paths["new"], "sqlite"),
            ("libpq (this tree)", bare_python, paths["new"], "postgres"),
            (f"pgwire ({args.pgwire_revision})", bare_python, paths["pgwire"], "postgres"),
        ]
        for name in PSYCOPG3:
            if name in installed:
                runners.append((f"{name} ({args.revision})", installed[name][0], paths["psycopg"], "postgres"))
        url = stores["postgres"]
        for label, python, path_env, _kind in runners[2:]:  # an older store must take the fast path too
            check = subprocess.run(
                [python, "-c", CHECK_OPEN, url], env=dict(base_env, **path_env), capture_output=True, text=True
            )
            if check.returncode != 0:
                why = (check.stderr.strip().splitlines() or ["its one-round-trip open does not accept the schema"])[-1]
                print(f"note: {label}: {why}; its command figures include the detailed open")
        for name, (python, _module, api, path_env) in list(installed.items()):  # each probe works, once
            check = subprocess.run(
                [python, probe, api, url, cluster.socket_dir, query_file],
                env=dict(base_env, **path_env),
                capture_output=True,
                text=True,
            )
            if check.returncode != 0:
                print(f"{name}: the probe failed, left out: {(check.stderr.strip().splitlines() or ['?'])[-1]}")
                del installed[name]
        lib_code = "from cafleet.store import libpq; libpq.lib()"
        plan = []
        for _ in range(args.runs):
            plan.append(("bare", [bare_python, "-c", "pass"], {}))
            plan.append(("import ssl", [bare_python, "-c", "import ssl"], {}))
            plan.append(("import ctypes", [bare_python, "-c", "import ctypes"], {}))
            plan.append(("ctypes + dlopen", [bare_python, "-c", "import ctypes; ctypes.CDLL('libpq.so.5')"], {}))
            plan.append(("libpq loaded", [bare_python, "-c", lib_code], paths["new"]))
            for name, (python, module, api, path_env) in installed.items():
                plan.append((f"import|{name}", [python, "-c", f"import {module}"], path_env))
                plan.append((f"probe|{name}", [python, probe, api, url, cluster.socket_dir, query_file], path_env))
            for label, python, path_env, kind in runners:
                for command, argv in commands(kind).items():
                    env = dict(path_env, CAFLEET_DATABASE_URL=stores[kind])
                    plan.append((f"{command}|{label}", [python, "-m", "cafleet", *argv], env))
        results = run_plan(plan, base_env, workdir)
        samples: dict[str, list[float]] = {}
        for label, elapsed, _ in results:
            samples.setdefault(label, []).append(elapsed)
        med = {label: statistics.median(values) * 1000 for label, values in samples.items()}
        bare = med["bare"]
        sqlite_poll = med["message poll|sqlite"]
        print(f"\n{args.runs} runs each, interleaved; python -c pass: median {bare:.1f} ms")
        print(f"\n{'process':<44} {'/bare':>7} {'ms over bare':>13}")
        lines = [
            ("import ssl", "import ssl"),
            ("import ctypes", "import ctypes"),
            ("import ctypes; ctypes.CDLL('libpq.so.5')", "ctypes + dlopen"),
            ("import cafleet.store.libpq", f"import|{LIBPQ}"),
            ("from cafleet.store import libpq; libpq.lib()", "libpq loaded"),
        ]
        for text, label in lines:
            if label in med:
                print(f"{text:<44} {med[label] / bare:>6.2f}x {med[label] - bare:>13.1f}")
        if f"import|{LIBPQ}" in med:
            ctypes_ms, dlopen_ms = med["import ctypes"] - bare, med["ctypes + dlopen"] - med["import ctypes"]
            own_ms = med[f"import|{LIBPQ}"] - med["import ctypes"]
            declare_ms = med["libpq loaded"] - med[f"import|{LIBPQ}"] - dlopen_ms
            print(
                f"the binding, split (differences of medians): ctypes import {ctypes_ms:.1f} ms, "
                f"libpq.so.5 load {dlopen_ms:.1f} ms, cafleet.store.libpq's own import {own_ms:.1f} ms, "
                f"declaring libpq's functions {declare_ms:.1f} ms"
            )
        print(f"\n{'driver':<28} {'import/bare':>12} {'probe/bare':>11} {'probe ms':>9} {'probe/sqlite poll':>18}")
        for name in installed:
            imp, pr = med[f"import|{name}"], med[f"probe|{name}"]
            print(f"{name:<28} {imp / bare:>11.2f}x {pr / bare:>10.2f}x {pr:>9.1f} {pr / sqlite_poll:>17.2f}x")
        print(f"(SQLite message poll, this tree: {sqlite_poll:.1f} ms, {sqlite_poll / bare:.2f}x bare)")
        print(f"\n{'command':<14} {'store':<38} {'ms':>7} {'/bare':>7} {'/sqlite':>8}")
        for command in commands("sqlite"):
            lite = med[f"{command}|sqlite"]
            for label, *_ in runners:
                value = med[f"{command}|{label}"]
                print(f"{command:<14} {label:<38} {value:>7.1f} {value / bare:>6.2f}x {value / lite:>7.2f}x")
    finally:
        cluster.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
