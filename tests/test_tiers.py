"""The test tiers: tests/conftest.py marks each test `tmux`, `browser` or `slow` from what
it uses, so `pytest -m "not tmux and not browser and not slow"` is a fast tier that starts
no multiplexer, browser or crowd of processes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TIERS = ("tmux", "browser", "slow")

COLLECT = """
import json, sys
import pytest

class Recorder:
    tiers = {}

    def pytest_collection_finish(self, session):
        for item in session.items:
            self.tiers[item.nodeid] = sorted(m.name for m in item.iter_markers() if m.name in %r)

recorder = Recorder()
code = pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", *sys.argv[1:]], plugins=[recorder])
print(json.dumps(recorder.tiers))
""" % (TIERS,)  # noqa: UP031 - Python source as a template: its braces read plainer beside %r


def tiers_of(*paths: str) -> dict[str, list[str]]:
    done = subprocess.run(
        [sys.executable, "-c", COLLECT, *paths], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_tests_are_marked_by_what_they_use():
    tiers = tiers_of(
        "tests/test_cli_fleet.py",
        "tests/test_web_api.py",
        "tests/test_submit.py",
        "tests/test_submit_steps.py",
        "tests/test_parser.py",
        "tests/test_web_browser.py",
        "tests/test_storm.py",
        "tests/test_delivery_e2e.py",
    )

    def of(prefix: str) -> set[str]:
        found = {tier for test, marks in tiers.items() if test.startswith(prefix) for tier in marks}
        assert any(test.startswith(prefix) for test in tiers), prefix
        return found

    assert tiers["tests/test_cli_fleet.py::test_fleet_create_text_and_json[sqlite]"] == ["tmux"]  # tmux_server fixture
    # on a PostgreSQL server (a cluster per worker, a database per test): the full suite's
    assert tiers["tests/test_cli_fleet.py::test_fleet_create_text_and_json[postgres]"] == ["slow", "tmux"]
    # a test that imports and calls the tmux fleet helper itself; its neighbours stay fast
    assert tiers[
        "tests/test_web_api.py::test_a_send_through_the_api_types_the_preview_into_the_members_pane[sqlite]"
    ] == ["tmux"]
    assert [] in [marks for test, marks in tiers.items() if test.startswith("tests/test_web_api.py")]
    assert {tuple(marks) for test, marks in tiers.items() if test.startswith("tests/test_delivery_e2e.py")} == {
        ("tmux",),
        ("slow", "tmux"),
    }
    assert of("tests/test_submit.py") == {"tmux"}  # its own private tmux server
    assert of("tests/test_submit_steps.py") == set()  # recorded screens, no multiplexer
    # the screens tests use real panes; the dashboard's PostgreSQL variant is slow
    assert of("tests/test_web_browser.py") == {"browser", "slow", "tmux"}
    assert tiers[
        "tests/test_web_browser.py::test_dashboard_shows_the_fleet_sends_as_director_and_updates_live[sqlite]"
    ] == ["browser"]
    assert tiers[
        "tests/test_web_browser.py::test_dashboard_shows_the_fleet_sends_as_director_and_updates_live[postgres]"
    ] == ["browser", "slow"]
    assert of("tests/test_storm.py") == {"slow"}
    # one whole-tree import check is slow (conftest.SLOW_TESTS); the parser's own tests are fast
    assert tiers["tests/test_parser.py::test_hot_commands_import_no_help_or_suggestion_machinery"] == ["slow"]
    assert {tuple(marks) for test, marks in tiers.items() if test.startswith("tests/test_parser.py")} == {(), ("slow",)}


def test_every_test_on_a_real_agent_program_is_slow():
    """A module of the real tier (``*_real.py``, and tests/test_real_*.py) runs the pinned
    agent programs: none of its tests may fall into the fast tier."""
    paths = sorted(str(path.relative_to(ROOT)) for path in (ROOT / "tests").glob("test_*.py") if "real" in path.stem)
    tiers = tiers_of(*paths)
    assert {test.partition("::")[0] for test in tiers} == set(paths)
    assert [test for test, marks in tiers.items() if "slow" not in marks] == []


def test_the_fast_tier_lowers_every_example_count_above_its_own():
    from hypothesis import given, settings, strategies

    from tests.conftest import FAST_EXAMPLES, fewer_examples

    @settings(max_examples=FAST_EXAMPLES * 10)
    @given(strategies.integers())
    def many(number):
        pass

    @settings(max_examples=FAST_EXAMPLES // 2)
    @given(strategies.integers())
    def few(number):
        pass

    class Item:
        def __init__(self, obj) -> None:
            self.obj = obj

    fewer_examples([Item(many), Item(few), Item(lambda: None)], FAST_EXAMPLES)
    assert many._hypothesis_internal_use_settings.max_examples == FAST_EXAMPLES
    assert few._hypothesis_internal_use_settings.max_examples == FAST_EXAMPLES // 2


def test_every_test_named_slow_exists():
    """conftest.SLOW_TESTS names tests by module and function: a renamed or removed test
    must leave the table too, or the table would quietly mark nothing."""
    from tests.conftest import SLOW_TESTS

    for module, names in SLOW_TESTS.items():
        text = (ROOT / "tests" / f"{module}.py").read_text(encoding="utf-8")
        for name in names:
            assert f"def {name}(" in text, f"{module}::{name}"
