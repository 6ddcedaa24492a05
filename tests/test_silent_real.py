"""A member silenced by its own agent's permission rules, on the real claude, codex and
opencode (marker ``real_agent``): `cafleet doctor` names the file and the rule before the
spawn, and after it, when the member is given a message it cannot answer, the fleet
keeper's silent-member notice reaches the Director blocked in ``message wait``
(docs/agents.md, "Permission rules that silence members"; docs/delivery.md, "Notices in
the Director's inbox").

Each agent runs as in tests/test_keeper_real.py (pinned, a throw-away HOME, a scripted
model API on 127.0.0.1, the keeper on), under a rule that forbids every ``cafleet
message`` command, written where that agent reads it: claude's project
``.claude/settings.json``, a codex rules file in ``CODEX_HOME/rules``, opencode's
``OPENCODE_CONFIG_CONTENT`` (merged after cafleet's agent preset, so it decides). The
scripted model answers the member's preview by running ``cafleet message send`` to the
Director and then ``cafleet message poll``; the agent refuses both. The notices'
thresholds are short here; whether the notice is posted before or after the refusal is
the keeper's timing, so the test asserts what holds after both: one notice, its episode
still open, nothing sent or ACKed by the member. Every wait bounds a failure only.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support import model_api as m, openai_responses as responses
from tests.support.agent_drivers import AGENTS, TURN_TIMEOUT, Driven, keeper_fleet, missing
from tests.support.keeper import log_lines
from tests.support.tmux_fixtures import wait_for

pytestmark = pytest.mark.real_agent

SHORT = {"CAFLEET_NOTICE_SILENT_AFTER": "5", "CAFLEET_NOTICE_INTERVAL": "0.5"}
ANSWER = "answered-the-director"
WAIT_BOUND = 120  # the Director's `message wait --timeout`: bounds a failure only


@pytest.fixture(params=AGENTS)
def driven(request, tmp_path):
    reason = missing(request.param)  # before the `env` fixture: it hides CAFLEET_AGENT_PREFIX
    if reason:
        pytest.skip(reason)
    env = monkeypatch = None
    if request.param == "codex":
        env, monkeypatch = request.getfixturevalue("env"), request.getfixturevalue("monkeypatch")
    with keeper_fleet(request.param, tmp_path, env, monkeypatch, SHORT) as driven:
        yield driven


def forbid_messages(driven: Driven) -> tuple[str, str, dict[str, str]]:
    """Write the agent's rule that forbids ``cafleet message``; return (where doctor must
    say it is, the rule as doctor names it, variables the Director's doctor reads)."""
    if driven.agent == "claude":
        path = driven.workdir / ".claude" / "settings.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"permissions": {"deny": ["Bash(cafleet message:*)"]}}), encoding="utf-8")
        return str(path), "Bash(cafleet message:*)", {}
    if driven.agent == "codex":
        path = Path(os.environ["CODEX_HOME"]) / "rules" / "team.rules"
        path.write_text('prefix_rule(pattern = ["cafleet", "message"], decision = "forbidden")\n', encoding="utf-8")
        return str(path), '["cafleet", "message"]', {}
    content = json.dumps({"agent": {"cafleet": {"permission": {"bash": {"cafleet message *": "deny"}}}}})
    driven.server.run("set-environment", "-g", "OPENCODE_CONFIG_CONTENT", content)  # the member's pane gets it
    return "OPENCODE_CONFIG_CONTENT", "cafleet message *", {"OPENCODE_CONFIG_CONTENT": content}


def script_the_answer(driven: Driven, member_id: int) -> None:
    """The member's next turn answers its preview: a send to the Director, then a poll."""
    director = driven.fleet.director
    commands = [
        f"cafleet message send --from-member-id {member_id} --to-member-id {director} {ANSWER}",
        f"cafleet message poll {member_id}",
    ]
    if driven.agent == "codex":
        left = list(commands)

        def reply(request: dict) -> responses.Reply:
            last = responses.last_input(request)
            preview = last.get("type") == "message" and responses.PREVIEW.search(_text(last))
            if left and (preview or last.get("type") == "function_call_output"):
                return responses.Reply([responses.tool_call("exec_command", {"cmd": left.pop(0), "login": False})])
            return responses.Reply([responses.text("Done.")])

        driven.api.script = reply
        return
    tool = "Bash" if driven.agent == "claude" else "bash"
    driven.api.script.clear()
    driven.api.script.push(
        *[m.Reply(tool_calls=[m.ToolCall(tool, {"command": c, "description": "cafleet"})]) for c in commands],
        m.Reply(text="Done."),
    )


def _text(item: dict) -> str:
    return " ".join(part.get("text", "") for part in item.get("content", []) if isinstance(part, dict))


def refusals(driven: Driven) -> list[str]:
    """What the agent told its model about the two commands (their tool results)."""
    if driven.agent == "codex":
        return [
            responses.last_input(r)["output"]
            for r in driven.api.turns()
            if responses.last_input(r).get("type") == "function_call_output"
        ]
    turns = driven.api.turns()
    found = []
    for message in (turns[-1].body or {}).get("messages", []) if turns else []:
        for block in message.get("content") if isinstance(message.get("content"), list) else []:
            if block.get("type") == "tool_result":
                inner = block.get("content")
                found.append(inner if isinstance(inner, str) else _text(block))
    return found


def test_a_member_under_a_rule_that_forbids_cafleet_message_is_reported_then_noticed(driven):
    where, rule, variables = forbid_messages(driven)
    doctor = driven.fleet.cafleet("doctor", "--json", environ=dict(driven.fleet.environ, **variables))
    findings = doctor.json()["member_permissions"]["findings"]
    assert [(f["coding_agent"], f["path"]) for f in findings] == [(driven.agent, where)], findings
    assert rule in findings[0]["rule"], findings
    assert findings[0]["commands"] == ["send", "broadcast", "poll", "show", "ack", "wait"], findings
    assert doctor.code == 1
    human = driven.fleet.cafleet("doctor", environ=dict(driven.fleet.environ, **variables))
    assert human.code == 1 and where in human.out + human.err, human

    log = driven.running_keeper()["log"]
    member_id, pane = driven.create("silenced")
    waiting = driven.start_wait(WAIT_BOUND)  # the Director blocks until something reaches its inbox
    try:
        script_the_answer(driven, member_id)
        message_id = driven.send(member_id, "Report to me when you read this.")["message_id"]
        wait_for(
            lambda: len(refusals(driven)) >= 2 and driven.api.turns(),
            timeout=TURN_TIMEOUT,
            interval=0.1,
            what=f"{driven.agent} to refuse both commands (screen: {driven.capture(pane)!r})",
        )
        driven.settle(pane)
        out, err = waiting.communicate(timeout=WAIT_BOUND + 30)
    finally:
        if waiting.poll() is None:
            waiting.kill()
            waiting.communicate()
    assert waiting.returncode == 0, (out, err, log_lines(log))
    header = f"[cafleet notice silent member:{member_id}]"
    assert header in out.decode(), (out, log_lines(log))

    # what holds after the refusal: nothing from the member, its message not ACKed, one
    # silent notice whose episode is still open, and it reads as such in --json
    said = driven.fleet.query("SELECT text FROM messages WHERE from_member_id = ?", member_id)
    assert said == [], said
    assert driven.fleet.query("SELECT status_state FROM messages WHERE message_id = ?", message_id) == [
        ("input_required",)
    ]
    assert ANSWER not in " ".join(refusals(driven)[1:])  # the poll did not return anything of the send
    episodes = driven.fleet.query(
        "SELECT kind, subject, cleared_at FROM cafleet_aux_notices WHERE member_id = ?", member_id
    )
    assert episodes == [("silent", f"member:{member_id}", None)], episodes
    shown = driven.fleet.cafleet("message", "poll", str(driven.fleet.director), "--json")
    assert shown.code == 0, shown
    [notice] = [record for record in shown.json() if record.get("kind") == "silent"]
    assert notice["notice"]["member_id"] == member_id and notice["text"].splitlines()[0] == header, notice
