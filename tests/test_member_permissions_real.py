"""The permission check against the real claude and opencode (marker ``real_agent``): a
rule `cafleet doctor` reports before the spawn really stops the member's `cafleet message`
command, and a rule it does not report really lets it run (docs/agents.md, "Permission
rules that silence members"). The programs run as in tests/test_real_agents.py: pinned, a
throw-away HOME, the scripted model API on 127.0.0.1."""

from __future__ import annotations

import json
import re

import pytest

from tests.support import model_api as m
from tests.support.model_api_anthropic import user_texts
from tests.support.real_agents import AGENTS, composer_empty, real_fleet, skip_reason

pytestmark = pytest.mark.real_agent

TURN_TIMEOUT = 90.0  # bounds a failure only

# Per agent: files written under the working directory, and variables set for the Director
# and for the panes of members started after them. Each holds a rule that stops `cafleet
# message poll` (reported) and rules that look related but stop no message command, or are
# overridden (not reported): the real program must agree on both.
SETUPS = {
    "claude": (
        {
            ".claude/settings.json": {
                "permissions": {"deny": ["Bash(cafleet message poll:*)", "Bash(cafleet member delete:*)"]}
            }
        },
        {},
    ),
    "opencode": (
        {
            # the general deny and the agent's own send rule come before the cafleet preset's
            # allow, so they decide nothing
            "opencode.json": {
                "permission": {"bash": {"cafleet *": "deny"}},
                "agent": {"cafleet": {"permission": {"bash": {"cafleet message send *": "deny"}}}},
            }
        },
        # merged after the preset: this rule decides
        {
            "OPENCODE_CONFIG_CONTENT": json.dumps(
                {"agent": {"cafleet": {"permission": {"bash": {"cafleet message poll*": "deny"}}}}}
            )
        },
    ),
}


@pytest.fixture(params=AGENTS)
def fleet(request, tmp_path):
    reason = skip_reason(request.param)
    if reason:
        pytest.skip(reason)
    with real_fleet(request.param, tmp_path) as real:
        real.agent = request.param
        yield real


def _tool_results(fleet) -> str:
    return " ".join(user_texts(fleet.api.turns()[-1].body))


def test_real_member_under_a_reported_rule_cannot_poll_but_can_send(fleet):
    files, variables = SETUPS[fleet.agent]
    for relative, settings in files.items():
        path = fleet.workdir / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(settings))
    for name, value in variables.items():
        fleet.server.run("set-environment", "-g", name, value)  # the member's pane gets it
    doctor = fleet.cafleet("doctor", "--json", environ=dict(fleet.environ, **variables))
    findings = doctor.json()["member_permissions"]["findings"]
    where = str(path) if not variables else next(iter(variables))
    assert [(f["coding_agent"], f["path"], f["commands"]) for f in findings] == [(fleet.agent, where, ["poll"])]
    assert doctor.code == 1

    member = fleet.create_member(fleet.agent, "worker")
    member_id = member["member_id"]
    shell = "Bash" if fleet.agent == "claude" else "bash"

    def call(command: str) -> m.Reply:
        return m.Reply(tool_calls=[m.ToolCall(shell, {"command": command, "description": "cafleet"})])

    fleet.api.script.clear()
    fleet.wait_composer(member["pane_id"], fleet.agent, TURN_TIMEOUT)
    fleet.api.script.push(
        call(f"cafleet message poll {member_id}"),
        call(f"cafleet message send --from-member-id {member_id} --to-member-id {fleet.director} 'poll-was-refused'"),
        m.Reply(text="Done."),
    )
    sent = fleet.send(member_id, "Permission probe: run the poll.")
    assert sent.code == 0, sent
    message_id = int(re.search(r"sent message (\d+) ", sent.out).group(1))
    fleet.wait_screen(
        member["pane_id"],
        lambda s: fleet.api.script.pending() == 0 and composer_empty(fleet.agent, s),
        TURN_TIMEOUT,
        "the member to finish its turns",
    )
    results = _tool_results(fleet)
    # the poll did not run: its output (the message's body) never came back as a tool result
    assert results.count("Permission probe: run the poll.") == 1, results[-2000:]  # the preview only
    assert f"[cafleet msg {message_id} from " in results
    # the send, which no reported rule stops, ran
    replies = fleet.query(
        "SELECT text FROM messages WHERE from_member_id = ? AND to_member_id = ?", member_id, fleet.director
    )
    assert ("poll-was-refused",) in replies
