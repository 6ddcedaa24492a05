"""Start-up stays protected: each hot command, run in a fresh interpreter, loads only the
modules listed here (beyond what a bare interpreter loads). A stray import (a web
framework, ``urllib``, ``json`` where it is not needed...) would slow every call an agent
makes; this test names it. Extend the lists only with a measurement in hand
(bench/hot_commands.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PROBE = r"""
import os, sys
from cafleet.cli.main import main
code = main(sys.argv[1:])
loaded = sorted(sys.modules)
import json
with open(os.environ["CAFLEET_TEST_MODULES_OUT"], "w") as handle:
    json.dump({"code": code, "modules": loaded}, handle)
"""

# Every command that opens the database: parsing, the store and its diagnosis, rendering.
CORE = {
    "__future__",
    "_sqlite3",
    "cafleet",
    "cafleet.cli",
    "cafleet.cli.main",
    "cafleet.cli.parser",
    "cafleet.cli.context",
    "cafleet.cli.table",
    "cafleet.clock",
    "cafleet.config",
    # the settings split by job (config/__init__.py reads them, declarations.py declares them,
    # setting.py reads one value): 0.2 ms more than the one module they were (300 fresh imports each)
    "cafleet.config.declarations",
    "cafleet.config.setting",
    "cafleet.errors",
    # the null test hooks every command carries (faults.NO_HOOKS): 0.15-0.25 ms byte-compiled
    "cafleet.faults",
    "cafleet.render",
    "cafleet.validation",
    "cafleet.store",
    "cafleet.store.sqlite",
    "cafleet.store.diagnosis",
    # the chooser (store/sqlite.py took in store/faults.py: as many modules as before; the
    # fault classification, store/sqlite_faults.py, now loads only with a failure)
    "cafleet.store.engines",
    "cafleet.store.schema",
    "cafleet.store.sqlite_driver",
    "cafleet.broker",
    "cafleet.broker.records",
    # While another connection has the log open (here: the test's own store; in a fleet,
    # `listen`, `fleet watch` or the WebUI), the damaged-log check asks the -shm's lock
    # with fcntl instead of reading the log: 0.6 ms for both imports, bench/wal_check.py.
    # A quiet database (no -wal) loads neither.
    "cafleet.store.wal",
    "fcntl",
}
MESSAGE = CORE | {
    "cafleet.cli.message",
    "cafleet.cli.body",
    "cafleet.broker.messages",
    "cafleet.broker.fleets",  # a live fleet (its Director) is checked on reads too
    "fcntl",
}  # the writers' queue (store/sqlite.py)
MEMBER = CORE | {"cafleet.cli.member", "cafleet.broker.members", "cafleet.broker.fleets", "cafleet.broker.activity"}
FLEET = CORE | {"cafleet.cli.fleet", "cafleet.broker.fleets"}
SEND = MESSAGE | {
    "cafleet.delivery",
    "cafleet.delivery.keystrokes",
    "cafleet.delivery.keystrokes.drain",
    "cafleet.broker.notifications",  # decides, per recipient, whether to notify
    "cafleet.broker.usage",
    "cafleet.delivery.authority",  # who the caller is: a walk of /proc, one query (docs/security.md)
}  # whether the recipient has a budget (docs/usage.md); the readers only when it has
# A send to a member in a pane, and wait's retry of owed previews: the delivery path
# (pane-input lock, the multiplexer subprocess, the preview's text handling).
DELIVERY = SEND | {
    "cafleet.broker.execs",  # previews hold while a `member exec` runs in the pane (one catalogue look)
    "cafleet.delivery",
    "cafleet.delivery.keystrokes.drain",
    "cafleet.delivery.keystrokes.lock",
    "cafleet.delivery.keystrokes.placement",
    "cafleet.delivery.keystrokes.preview",
    "cafleet.delivery.keystrokes.screen",
    "cafleet.delivery.keystrokes.submit",
    "cafleet.mux",
    "cafleet.mux.base",
    "cafleet.mux.detect",
    "cafleet.mux.tmux",
    "cafleet.mux.tmux_syntax",
    "cafleet.store.sqlite_locks",  # the pane-input lock's file (store.locks), out of every other command's path
    # standard library modules the delivery path uses today
    "_ast",
    "_blake2",
    "_hashlib",
    "_locale",
    "_opcode",
    "_posixsubprocess",
    "_typing",
    "_weakrefset",
    "ast",
    "collections.abc",
    "contextlib",
    "copy",
    "dataclasses",
    "dis",
    "errno",
    "fcntl",
    "fnmatch",
    "hashlib",
    "importlib",
    "importlib._bootstrap",
    "importlib._bootstrap_external",
    "importlib.machinery",
    "inspect",
    "linecache",
    "locale",
    "math",
    "ntpath",
    "opcode",
    "pathlib",
    "select",
    "selectors",
    "signal",
    "subprocess",
    "threading",
    "token",
    "tokenize",
    "typing",
    "typing.io",
    "typing.re",
    "unicodedata",
    "warnings",
    "weakref",
    "urllib",
    "urllib.parse",
    "ipaddress",  # imported by pathlib (delivery/keystrokes/lock.py)
}
WAIT = DELIVERY | {"cafleet.delivery.inbox", "cafleet.store.changes"}  # changes: the wake-up primitive
# A preview left owed with the keeper on: whether the fleet's keeper runs (its record), and
# the Director's placement, to start one (the Director's pane does not exist here).
KEEPER = DELIVERY | {
    "cafleet.delivery.supervision",
    "cafleet.delivery.supervision.keeper_control",
    "cafleet.broker.members",
    "cafleet.broker.activity",
}


def modules_after(env, imports: str = "") -> set[str]:
    """The modules a fresh interpreter holds after ``imports`` (a statement), ``json`` aside."""
    out = subprocess.run(
        [sys.executable, "-c", f"{imports}\nimport sys, json; print(json.dumps(sorted(sys.modules)))"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return set(json.loads(out)) - {"json", "json.decoder", "json.scanner", "_json", "json.encoder"}


def bare_modules(env) -> set[str]:
    return modules_after(env)


@pytest.fixture
def fleet(store, build):
    fleet_id, director, (m1, m2) = build.fleet()
    paned = build.member(fleet_id, "paned", pane_id="%5")  # on a tmux socket that does not exist
    return {"fleet": fleet_id, "director": director, "m1": m1, "m2": m2, "paned": paned}


def loaded_by(env, tmp_path, *args) -> set[str]:
    out = tmp_path / "modules.json"
    environ = dict(env, CAFLEET_TEST_MODULES_OUT=str(out), CAFLEET_LOCK_TIMEOUT="1", CAFLEET_SUBMIT_SETTLE="0")
    done = subprocess.run([sys.executable, "-c", PROBE, *args], env=environ, capture_output=True, text=True, timeout=60)
    assert out.exists(), done.stderr
    result = json.loads(out.read_text())
    assert result["code"] == 0, (args, done.stderr)
    return set(result["modules"])


def test_hot_commands_import_only_their_allowlist(env, tmp_path, fleet):
    bare = bare_modules(env)
    f, d, m1, m2, paned = (str(fleet[k]) for k in ("fleet", "director", "m1", "m2", "paned"))
    keeper_on = dict(env, CAFLEET_KEEPER="on")
    cases = [
        (["message", "send", "--from-member-id", m1, "--to-member-id", m2, "hi"], SEND),
        (["message", "send", "--from-member-id", d, "--to-member-id", paned, "hi"], DELIVERY),
        (["message", "poll", m2], MESSAGE),
        (["message", "show", "1"], MESSAGE),
        (["message", "wait", m2, "--timeout", "0"], WAIT),
        (["message", "ack", "1"], MESSAGE),
        # which members have a budget, and a worktree (docs/worktrees.md)
        (["member", "list", f], MEMBER | {"cafleet.broker.usage", "cafleet.broker.worktrees"}),
        (["member", "show", m1], MEMBER | {"cafleet.broker.worktrees"}),
        (["fleet", "list"], FLEET),
    ]
    strays = {}
    for args, allowed in cases:
        extra = loaded_by(env, tmp_path, *args) - bare - allowed
        if extra:
            strays[" ".join(args)] = sorted(extra)
    owed = ["message", "send", "--from-member-id", d, "--to-member-id", paned, "hi"]
    extra = loaded_by(keeper_on, tmp_path, *owed) - bare - KEEPER
    if extra:
        strays["keeper on: " + " ".join(owed)] = sorted(extra)
    assert strays == {}


def test_sqlite_path_never_imports_psycopg(env, tmp_path, fleet):
    """psycopg is installed here (the test extra), so only the store's dispatch keeps it out."""
    import importlib.util

    assert importlib.util.find_spec("psycopg") is not None
    d, m2, paned = (str(fleet[k]) for k in ("director", "m2", "paned"))
    for args in (
        ["message", "send", "--from-member-id", d, "--to-member-id", paned, "hi"],
        ["message", "wait", paned, "--timeout", "0"],
        ["message", "poll", m2],
        ["fleet", "list"],
    ):
        loaded = loaded_by(env, tmp_path, *args)
        postgres = sorted(
            m
            for m in loaded
            if m.split(".")[0] == "psycopg" or m in ("cafleet.store.postgres", "cafleet.store.libpq", "ctypes")
        )
        assert postgres == [], (args, postgres)


def test_postgres_path_loads_libpq_through_cafleets_binding_and_no_driver(env, tmp_path, pg_cluster):
    """On PostgreSQL a hot command loads libpq through cafleet's thin binding
    (cafleet.store.libpq, ctypes): no driver package, and no Python ``ssl`` (libpq does TLS)."""
    from cafleet.broker import fleets
    from cafleet.store.engines import open_store

    url = pg_cluster.fresh_database()
    store = open_store(url)
    created = fleets.create_fleet(
        store, name="f", coding_agent="claude", backend="tmux", session="$0@/none", window_id="@0", pane_id="%0"
    )
    store.close()
    pg_env = dict(env, CAFLEET_DATABASE_URL=url)
    director, fleet_id = str(created["director_member_id"]), str(created["fleet_id"])
    for args in (["message", "poll", director], ["fleet", "list"], ["member", "list", fleet_id]):
        loaded = loaded_by(pg_env, tmp_path, *args)
        assert "cafleet.store.libpq" in loaded, args
        drivers = sorted(m for m in loaded if m.split(".")[0] in ("psycopg", "psycopg2", "pg8000", "ssl", "_ssl"))
        assert drivers == [], (args, drivers)


def test_a_quiet_database_never_loads_the_log_check(env, tmp_path):
    """With no other connection the last one removed the -wal: one stat, no import."""
    from cafleet.store.engines import open_store

    path = str(tmp_path / "quiet.db")
    open_store(path).close()
    loaded = loaded_by(dict(env, CAFLEET_DATABASE_URL=path), tmp_path, "fleet", "list")
    assert "cafleet.store.sqlite" in loaded
    assert {"cafleet.store.wal", "fcntl"} & loaded == set()


def test_the_budget_gate_loads_no_agents_reader(env):
    """A send to a member with a budget loads :mod:`cafleet.delivery.usage` for the stored
    totals; the agents' readers and preview lookups come only with a read of their files."""
    out = modules_after(env, "import cafleet.delivery.usage")
    assert "cafleet.agents.usage.totals" in out
    readers = {"cafleet.agents.usage.claude", "cafleet.agents.usage.codex", "cafleet.agents.usage.opencode"}
    assert sorted((readers | {"cafleet.agents.previews"}) & out) == []
