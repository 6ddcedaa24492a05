"""Shared fixtures: an isolated environment per test, in-process and subprocess CLI runners,
and a fleet built directly through the broker (no panes) for message tests."""

from __future__ import annotations

import io
import os
import subprocess
from pathlib import Path

import pytest

from cafleet.broker import fleets, members
from cafleet.cli.context import Context
from cafleet.cli.main import main
from cafleet.store.engines import open_store
from tests.support.environ import isolated_environ
from tests.support.hooked import cafleet_argv

pytest_plugins = [
    p
    for p in ["tests.support.tmux_fixtures", "tests.support.web_panes"]
    if __import__("importlib.util").util.find_spec(p)
]


class Result:
    def __init__(self, code: int, out: bytes, err: bytes) -> None:
        self.code = code
        self.out_bytes = out
        self.err_bytes = err
        self.out = out.decode("utf-8")
        self.err = err.decode("utf-8")

    def json(self):
        import json

        return json.loads(self.out)

    def __repr__(self) -> str:
        return f"Result(code={self.code}, out={self.out!r}, err={self.err!r})"


# --- both stores ----------------------------------------------------------------------------
# A test module that sets ``STORES = ("sqlite", "postgres")`` runs each of its tests that
# uses ``env`` (directly or through ``db_path``, ``store``, ``cli``...) once per store: on
# "postgres" CAFLEET_DATABASE_URL names a fresh database on one real server per session
# (tests/support/postgres.py). Without the server binaries or psycopg that half is skipped
# with the reason.


def pytest_generate_tests(metafunc):
    stores = getattr(metafunc.module, "STORES", None)
    only = metafunc.definition.get_closest_marker(
        "stores"
    )  # @pytest.mark.stores("sqlite"): what it inspects is one store's, or its comment says why once is enough
    if only is not None:
        stores = only.args
    if stores and "store_kind" in metafunc.fixturenames:
        metafunc.parametrize("store_kind", stores, indirect=True)


@pytest.fixture(scope="session")
def pg_cluster():
    from tests.support import postgres

    reason = postgres.missing_reason()
    if reason:
        pytest.skip(reason)
    cluster = postgres.Cluster()
    try:
        cluster.start()
    except BaseException:
        cluster.stop()
        raise
    yield cluster
    cluster.stop()


@pytest.fixture
def store_kind(request) -> str:
    return getattr(request, "param", "sqlite")


@pytest.fixture
def database_url(store_kind, tmp_path, request) -> str:
    """The test's CAFLEET_DATABASE_URL: a SQLite file in tmp_path, or a fresh PostgreSQL database."""
    if store_kind == "postgres":
        return request.getfixturevalue("pg_cluster").fresh_database()
    return str(tmp_path / "db" / "cafleet.db")


@pytest.fixture
def env(tmp_path, monkeypatch, database_url) -> dict:
    """A clean environment rooted in tmp_path; also applied to os.environ for the test."""
    clean = isolated_environ(tmp_path / "home", CAFLEET_DATABASE_URL=database_url, CAFLEET_WAIT_INTERVAL="0.02")
    for key in list(os.environ):
        if key not in clean:
            monkeypatch.delenv(key)
    for key, value in clean.items():
        monkeypatch.setenv(key, value)
    return clean


@pytest.fixture
def db_path(env) -> str:
    return env["CAFLEET_DATABASE_URL"]


@pytest.fixture
def cli(env):
    """Run a command in-process: cli("message", "poll", "3", input=b"...")."""

    def run(*args: str, input: bytes = b"", environ: dict | None = None) -> Result:
        out, err = io.BytesIO(), io.BytesIO()
        ctx = Context(environ=dict(environ or env), stdin=io.BytesIO(input), stdout=out, stderr=err)
        code = main(list(args), ctx)
        return Result(code, out.getvalue(), err.getvalue())

    return run


@pytest.fixture
def run_cli(env):
    """Run a command in a real subprocess (`python -m cafleet`)."""

    def run(*args: str, input: bytes = b"", environ: dict | None = None, timeout: float = 60) -> Result:
        proc = subprocess.run(
            [*cafleet_argv(environ or env), *args],
            input=input,
            capture_output=True,
            env=environ or env,
            timeout=timeout,
        )
        return Result(proc.returncode, proc.stdout, proc.stderr)

    return run


@pytest.fixture
def store(db_path):
    s = open_store(db_path)
    yield s
    s.close()


class FleetBuilder:
    """Fleets and members made through the broker with pending placements (no panes)."""

    def __init__(self, store) -> None:
        self.store = store

    def fleet(self, name: str = "alpha", members_count: int = 2):
        record = fleets.create_fleet(
            self.store,
            name=name,
            coding_agent="claude",
            backend="tmux",
            session="$0@/nonexistent/socket",
            window_id="@0",
            pane_id="%0",
        )
        ids = [self.member(record["fleet_id"], f"m{i + 1}") for i in range(members_count)]
        return record["fleet_id"], record["director_member_id"], ids

    def member(self, fleet_id: int, name: str, pane_id: str | None = None) -> int:
        return members.register_member(
            self.store,
            fleet_id=fleet_id,
            name=name,
            description=f"{name} worker",
            backend="tmux",
            session="$0@/nonexistent/socket",
            window_id="@0",
            coding_agent="claude",
            pane_id=pane_id,
        )


@pytest.fixture
def build(store) -> FleetBuilder:
    return FleetBuilder(store)


def file_digest(path: str | Path) -> str:
    import hashlib

    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# --- test tiers ------------------------------------------------------------------------------
# Markers come from what a test uses, found here at collection, so no test file has to
# remember them (registered in pyproject.toml; the fast tier is
# `pytest -m "not tmux and not browser and not slow"`):
#   tmux     a real private tmux server (the herdr stand-in runs on one too)
#   browser  headless Chromium through Playwright
#   slow     many processes at once, kill-and-recover suites, the real agent programs

TIER_FIXTURES = {"tmux_server": "tmux", "herdr_env": "tmux", "mux_environ": "tmux"}
TIER_NAMES = {  # names a test or one of its fixtures calls (directly or in a nested function)
    "running_tmux_server": "tmux",
    "running_herdr": "tmux",
    "tmux_fleet": "tmux",
    "herdr_fleet": "tmux",
    "sync_playwright": "browser",
    "async_playwright": "browser",
    "chromium": "browser",  # tests/support/browser.py
}
TIER_MODULES = {  # whole modules whose multiplexer or load is their own
    "test_submit": ("tmux",),  # its own private tmux server class
    "test_demo": ("tmux", "slow"),  # `cafleet demo` starts a private tmux server
    "test_crash": ("tmux", "slow"),
    "test_load": ("slow",),
    "test_storm": ("slow",),
    "test_agent_flags_real": ("slow",),
    "test_pg_failover": ("slow",),  # two servers, a base backup, a crash and a promotion per test
}


def _called_names(function) -> set[str]:
    import inspect

    function = inspect.unwrap(getattr(getattr(function, "hypothesis", None), "inner_test", function))
    code = getattr(function, "__code__", None)
    names: set[str] = set()
    stack = [code] if code is not None else []
    while stack:
        current = stack.pop()
        names.update(current.co_names)
        stack += [c for c in current.co_consts if hasattr(c, "co_names")]
    return names


def test_tiers(item) -> set[str]:
    """The tier markers of one collected test."""
    tiers = {TIER_FIXTURES[name] for name in item.fixturenames if name in TIER_FIXTURES}
    functions = [getattr(item, "obj", None)]
    for definitions in getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {}).values():
        functions += [definition.func for definition in definitions]
    for function in functions:
        if function is not None:
            tiers |= {TIER_NAMES[name] for name in _called_names(function) & TIER_NAMES.keys()}
    tiers.update(TIER_MODULES.get(item.module.__name__.rpartition(".")[2], ()) if item.module else ())
    if item.get_closest_marker("real_agent"):
        tiers.add("slow")  # a real coding agent program
    return tiers


test_tiers.__test__ = False  # a helper, not a test


def pytest_collection_modifyitems(config, items):
    for item in items:
        for tier in sorted(test_tiers(item)):
            item.add_marker(tier)
