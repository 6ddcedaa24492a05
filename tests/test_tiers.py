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
            self.tiers[item.nodeid.split("[")[0]] = sorted(m.name for m in item.iter_markers() if m.name in %r)

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

    assert tiers["tests/test_cli_fleet.py::test_fleet_create_text_and_json"] == ["tmux"]  # tmux_server fixture
    # a test that imports and calls the tmux fleet helper itself; its neighbours stay fast
    assert tiers["tests/test_web_api.py::test_a_send_through_the_api_types_the_preview_into_the_members_pane"] == [
        "tmux"
    ]
    assert [] in [marks for test, marks in tiers.items() if test.startswith("tests/test_web_api.py")]
    assert all(marks == ["tmux"] for test, marks in tiers.items() if test.startswith("tests/test_delivery_e2e.py"))
    assert of("tests/test_submit.py") == {"tmux"}  # its own private tmux server
    assert of("tests/test_submit_steps.py") == set()  # recorded screens, no multiplexer
    assert of("tests/test_web_browser.py") == {"browser", "tmux"}  # the screens tests use real panes
    assert tiers["tests/test_web_browser.py::test_dashboard_shows_the_fleet_sends_as_director_and_updates_live"] == [
        "browser"
    ]
    assert of("tests/test_storm.py") == {"slow"}
    # one whole-tree import check is slow (conftest.SLOW_TESTS); the parser's own tests are fast
    assert tiers["tests/test_parser.py::test_hot_commands_import_no_help_or_suggestion_machinery"] == ["slow"]
    assert {tuple(marks) for test, marks in tiers.items() if test.startswith("tests/test_parser.py")} == {(), ("slow",)}


def test_every_test_named_slow_exists():
    """conftest.SLOW_TESTS names tests by module and function: a renamed or removed test
    must leave the table too, or the table would quietly mark nothing."""
    from tests.conftest import SLOW_TESTS

    for module, names in SLOW_TESTS.items():
        text = (ROOT / "tests" / f"{module}.py").read_text(encoding="utf-8")
        for name in names:
            assert f"def {name}(" in text, f"{module}::{name}"
