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


# --- collection ------------------------------------------------------------------------------
# Every xdist worker imports every test module, and pytest rewrites each one's asserts as it
# does (seconds a worker). Where PYTHONDONTWRITEBYTECODE keeps Python from writing bytecode
# beside the sources, what collection compiles is kept in pytest's cache folder instead
# (.pytest_cache/d/bytecode), so every run after the first reads it back.


@pytest.hookimpl(wrapper=True)
def pytest_collection(session):
    import sys

    cache = getattr(session.config, "cache", None)  # None under `-p no:cacheprovider`
    if cache is None or not sys.dont_write_bytecode or sys.pycache_prefix:
        return (yield)
    sys.pycache_prefix, sys.dont_write_bytecode = str(cache.mkdir("bytecode")), False
    try:
        return (yield)
    finally:
        sys.pycache_prefix, sys.dont_write_bytecode = None, True


# --- test tiers ------------------------------------------------------------------------------
# Markers come from what a test uses, found here at collection, so no test file has to
# remember them (registered in pyproject.toml; the fast tier is
# `pytest -m "not tmux and not browser and not slow"`):
#   tmux     a real private tmux server (the herdr stand-in runs on one too)
#   browser  headless Chromium through Playwright
#   slow     many processes at once, kill-and-recover suites, the real agent programs,
#            a PostgreSQL server (the session's cluster, or a test's `postgres` store)
#            and single tests that take seconds each (SLOW_TESTS, below)

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
    "test_pg_conformance": ("slow",),  # each connection option beside psql, over TLS, SCRAM, a CRL
    "test_query_plans": ("slow",),  # three databases of thousands of rows, built for the module
}

# Single tests of otherwise fast modules that take seconds each, measured with `--durations`
# (docs/testing.md, "The fast tier"): waits that are the point of the test (a timeout, a byte
# a second, a receiver that comes back), many processes or connections, exhaustive property
# and whole-tree runs. The full suite runs them.
SLOW_TESTS = {
    "test_architecture": ("test_tests_share_helpers_through_support_only",),
    "test_authority": (
        "test_the_caller_is_its_process_tree_whatever_its_variables_say",
        "test_the_directors_pane_may_direct_and_its_variables_only_narrow",
    ),
    "test_cli_messages": (
        "test_any_bytes_from_a_file_are_stored_exactly_or_refused_in_one_line",
        "test_body_and_usage_errors",
        "test_broadcast_reports_a_recipient_the_database_refuses_and_every_committed_id",
    ),
    "test_exec": ("test_exec_refuses_bad_input_with_one_line",),
    "test_hostile_input": (
        "test_any_bytes_by_file_or_stdin_round_trip_or_are_refused",
        "test_any_environment_value_gives_success_or_one_error_line",
        "test_any_id_is_a_usage_error_or_a_clean_not_found",
        "test_any_text_argument_round_trips_or_is_refused_as_blank",
        "test_argv_bytes_that_are_not_utf8_are_refused",
        "test_bad_environment_bytes_in_a_real_process",
        "test_five_mib_body_through_a_real_process",
        "test_very_long_bodies_round_trip_by_file_and_stdin",
    ),
    "test_hot_imports": (
        "test_hot_commands_import_only_their_allowlist",
        "test_postgres_path_loads_libpq_through_cafleets_binding_and_no_driver",
        "test_sqlite_path_never_imports_psycopg",
    ),
    "test_libpq": ("test_any_text_round_trips_as_data_whatever_the_session_settings",),
    "test_lock": (
        "test_different_keys_do_not_block_each_other",
        "test_waiting_sleeps_instead_of_spinning",
    ),
    "test_notice_forgery": ("test_the_director_cannot_post_itself_a_notice_nor_broadcast_one",),
    "test_notify": (
        "test_a_fleets_own_notify_url_is_where_its_notices_go_instead_of_the_setting",
        "test_a_keeper_a_member_starts_never_takes_the_members_notify_url",
        "test_a_post_answered_503_is_tried_again_and_posted_exactly_once",
        "test_a_post_to_a_receiver_that_is_down_is_made_when_it_comes_back",
        "test_a_receiver_that_takes_30_s_holds_up_neither_another_url_nor_another_fleets_notice",
        "test_a_slow_receiver_does_not_hold_up_a_preview",
        "test_slack_and_ntfy_get_their_own_shapes_and_no_post_holds_a_password",
        "test_the_notice_of_a_member_blocked_on_a_dialog_is_posted_with_its_text_and_digest",
    ),
    "test_parser": ("test_hot_commands_import_no_help_or_suggestion_machinery",),
    "test_pg_hostile": (
        "test_a_huge_row_trickled_a_byte_a_second",
        "test_a_login_answered_a_byte_a_second_ends_at_the_connect_timeout",
        "test_a_query_never_answered",
    ),
    "test_roundtrips": ("test_member_lists_round_trips_do_not_grow_with_the_fleet",),
    "test_secrets": (
        "test_locations_cafleet_refuses_are_quoted_without_their_password",
        "test_no_line_of_any_command_prints_the_password",
    ),
    "test_storage": (
        "test_concurrent_first_use_initialises_once",
        "test_opening_while_others_open_and_close_is_never_refused",
    ),
    "test_storage_faults": ("test_writers_queue_serialises_concurrent_writers",),
    "test_tiers": ("test_tests_are_marked_by_what_they_use", "test_every_test_on_a_real_agent_program_is_slow"),
    "test_usage_hostile": ("test_an_out_of_range_number_in_a_record_is_skipped_and_counted_everywhere",),
    "test_wait_listen": ("test_wait_wakes_for_a_message_without_spinning",),
    "test_wake": (
        "test_listen_and_watch_end_with_their_line_when_the_database_file_goes",
        "test_server_stops_rather_than_serve_another_file",
    ),
    "test_web_api": (
        "test_event_stream_pushes_writes_from_other_processes",
        "test_server_prints_its_url_serves_and_stops_cleanly_on_sigterm",
        "test_server_takes_host_and_port_from_the_environment_and_ends_on_ctrl_c",
    ),
    "test_web_limits": (
        "test_a_half_open_request_is_closed_after_the_request_timeout",
        "test_a_kept_alive_connection_is_closed_after_the_keepalive_timeout",
        "test_a_slow_body_is_closed_after_the_request_timeout_too",
    ),
    "test_web_security": (
        "test_a_server_bound_by_another_spelling_of_loopback_answers_that_name",
        "test_every_spelling_of_every_interface_is_refused",  # a `cafleet server` each; the variable's two stay
    ),
    "test_web_streams": (
        "test_a_stream_past_the_cap_is_refused_503_with_retry_after_and_a_closed_one_frees_its_slot",
        "test_the_pool_lends_at_most_its_limit_and_answers_the_next_borrower_with_one_line",
        "test_two_hundred_streams_against_a_hundred_session_server_leave_every_command_working",
    ),
    "test_worktrees": ("test_a_worktree_on_another_host_follows_the_same_rules_over_ssh",),
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
    module = item.module.__name__.rpartition(".")[2] if item.module else ""
    tiers.update(TIER_MODULES.get(module, ()))
    if getattr(item, "originalname", item.name) in SLOW_TESTS.get(module, ()):
        tiers.add("slow")
    if (
        "pg_cluster" in item.fixturenames
        or getattr(getattr(item, "callspec", None), "params", {}).get("store_kind") == "postgres"
    ):
        tiers.add("slow")  # a PostgreSQL server: initdb per worker, a database cloned per test
    if item.get_closest_marker("real_agent"):
        tiers.add("slow")  # a real coding agent program
    return tiers


test_tiers.__test__ = False  # a helper, not a test


# The fast tier (a `-m` that leaves out the slow tests collected) tries each hypothesis property
# on at most FAST_EXAMPLES examples; any other run (the full suite, a module run on its own)
# tries each on its own count.
FAST_EXAMPLES = 20


@pytest.hookimpl(wrapper=True)  # marks before `-m` deselects; counts what it left
def pytest_collection_modifyitems(config, items):
    for item in items:
        for tier in sorted(test_tiers(item)):
            item.add_marker(tier)
    slow_collected = any(item.get_closest_marker("slow") for item in items)
    yield
    if config.option.markexpr and slow_collected and not any(item.get_closest_marker("slow") for item in items):
        fewer_examples(items, FAST_EXAMPLES)


def fewer_examples(items, most: int) -> None:
    """Each hypothesis test of ``items`` tries at most ``most`` examples."""
    from hypothesis import settings

    for item in items:
        test = getattr(getattr(item, "obj", None), "__func__", getattr(item, "obj", None))
        chosen = getattr(test, "_hypothesis_internal_use_settings", None)
        if chosen is not None and chosen.max_examples > most:
            test._hypothesis_internal_use_settings = settings(chosen, max_examples=most)
