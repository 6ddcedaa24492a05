"""A real agent in its own worktree starts working at once: no trust dialog blocks it
(docs/agents.md, docs/worktrees.md). The pinned claude and opencode, offline (tests/support/
real_agents.py); codex's twin is in tests/test_real_codex.py.

The user trusts the repository (claude: ``projects[<repo>].hasTrustDialogAccepted``), never
the member's worktree, which cafleet puts outside the repository: the member must still
reach its composer and answer its spawn prompt, in its worktree.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.support.real_agents import AGENTS, START_TIMEOUT, composer_empty, real_fleet, skip_reason

FIRST_TURN = 180.0  # seconds; bounds a failure only

pytestmark = pytest.mark.real_agent


@pytest.mark.parametrize("agent", AGENTS)
def test_a_real_member_in_its_worktree_is_not_blocked_by_a_trust_dialog(agent, tmp_path):
    reason = skip_reason(agent)
    if reason:
        pytest.skip(reason)
    with real_fleet(agent, tmp_path) as fleet:
        gitconfig = tmp_path / "gitconfig"
        gitconfig.write_text("[user]\n\tname = Test\n\temail = test@example.invalid\n")
        fleet.environ.update(GIT_CONFIG_GLOBAL=str(gitconfig), GIT_CONFIG_NOSYSTEM="1")
        for args in (["init", "--quiet", "-b", "main"], ["commit", "--quiet", "--allow-empty", "-m", "first"]):
            subprocess.run(["git", *args], cwd=fleet.workdir, env=fleet.environ, check=True, timeout=60)
        turns = len(fleet.api.turns())
        created = fleet.cafleet(
            "member",
            "create",
            "--fleet-id",
            str(fleet.fleet_id),
            "--name",
            "tree",
            "--description",
            "works in its worktree",
            "--coding-agent",
            agent,
            "--worktree",
            "--json",
            "Wait for messages.",
        )
        assert created.code == 0, created
        record = created.json()
        path = record["worktree"]["path"]
        assert not path.startswith(str(fleet.workdir) + os.sep)  # outside the trusted repository
        fleet.check_pinned(record["pane_id"], agent)
        # its spawn prompt reached the model: nothing blocked it (wait returns falsy on its timeout)
        # (the bound is generous: on a loaded machine opencode's first request from a new
        # folder was seen to take over a minute after the prompt was submitted)
        assert fleet.api.wait(lambda _: len(fleet.api.turns()) > turns, FIRST_TURN), fleet.capture(record["pane_id"])
        shown = fleet.wait_screen(
            record["pane_id"], lambda s: composer_empty(agent, s), START_TIMEOUT, f"{agent}'s composer"
        )
        assert "trust" not in shown.lower(), shown
        pid = int(fleet.server.run("display-message", "-p", "-t", record["pane_id"], "#{pane_pid}").strip())
        assert os.readlink(f"/proc/{pid}/cwd") == path
