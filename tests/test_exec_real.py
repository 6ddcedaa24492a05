"""`cafleet member exec` on the real coding agents (docs/agents.md, "Shell mode"): the
Director runs a command in a member's pane through the agent's own `!` mode; the status is
printed and recorded, the member's model receives the output (the scripted model API's
request log) and goes on. Slow: one agent start per test; run one file at a time."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support import real_codex
from tests.support.tmux_fixtures import wait_for

pytestmark = [pytest.mark.real_agent]
SCREENS = Path(__file__).resolve().parent / "fixtures" / "exec-screens"
MARKER = "exec-output-7f3a"
COMMAND = f"echo {MARKER}; exit 4"


def _record(agent: str, version: str, state: str, text: str) -> None:
    """Keep the screen as a fixture when RECORD_EXEC_SCREENS is set."""
    if os.environ.get("RECORD_EXEC_SCREENS"):
        from tests.support.real_agents import write_fixture

        write_fixture(agent, version, state, text, SCREENS)


def login_path(env, tmp_path) -> None:
    profile = Path(env["HOME"]) / ".bash_profile"
    profile.write_text(f'PATH="{tmp_path / "agent-bin"}:$PATH"\n', encoding="utf-8")


@pytest.fixture
def held(tmp_path):
    from tests.support.pause import held_commands

    yield from held_commands(tmp_path)


def run_exec_recorded(fleet, held, agent: str, version: str, member: int, capture) -> str:
    """``member exec --wait`` held right after the line was typed (the screen recorded),
    then let go; its output comes back."""
    proc, release = held(fleet.environ, "submit.typed", "member", "exec", str(member), COMMAND, "--wait")
    typed = wait_for(
        lambda: (lambda shown: shown if "exec-run 1" in shown.split("\n", 3)[-1] or "exec-run 1" in shown else None)(
            capture()
        ),
        timeout=30,
        what="the typed line to show",
    )
    _record(agent, version, "exec_typed", typed)
    release()
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, (out, err, capture())
    assert err == b""
    return out.decode()


def nudge(fleet) -> None:
    """The keeper's grace-period step, now (grace 0): the member is told to go on."""
    from cafleet.config import Settings
    from cafleet.delivery.execs import Watcher
    from cafleet.store.engines import open_store

    store = open_store(fleet.db)
    try:
        Watcher(store, Settings(dict(fleet.environ, CAFLEET_EXEC_GRACE="0"), fleet.db), fleet.fleet_id).round()
    finally:
        store.close()


@pytest.mark.skipif(not real_codex.installed(), reason=real_codex.SKIP_REASON)
def test_codex_member_exec_wait(env, tmp_path, monkeypatch, held):
    import subprocess

    version = subprocess.run([str(real_codex.CODEX), "--version"], capture_output=True, text=True).stdout.split()[-1]
    # codex runs a `!` command in a login shell, whose /etc/profile sets PATH anew: the
    # user's own profile (the throw-away HOME's) puts cafleet back on it, as a real install's does
    login_path(env, tmp_path)
    with real_codex.codex_fleet(env, tmp_path, monkeypatch) as codex:
        fleet = codex.fleet
        member = codex.create()
        turns_before = len(codex.api.turns())
        out = run_exec_recorded(fleet, held, "codex", version, member, lambda: codex.screen(member))
        assert out.splitlines()[-1] == "exec 1 finished: exit status 4"
        assert fleet.query("SELECT exit_status, outcome FROM cafleet_aux_execs") == [(4, "finished")]
        shown = codex.screen(member)
        _record("codex", version, "exec_ran", shown)
        assert "You ran cafleet member exec-run 1" in shown and MARKER in shown
        assert "[cafleet exec 1 ended: exit status 4]" in shown
        # codex takes no model turn of its own after a `!` command: the nudge makes one,
        # and the model's request carries the command's output
        assert len(codex.api.turns()) == turns_before
        nudge(fleet)
        wait_for(lambda: len(codex.api.turns()) > turns_before, timeout=real_codex.TURN_TIMEOUT, what="a turn")
        import json

        request = json.dumps(codex.api.turns()[-1])
        assert MARKER in request
        assert "Continue with the output above." in request
        codex.wait_state(member, "idle")
        inbox = fleet.cafleet("message", "poll", str(fleet.director), "--json").json()
        assert [m["notice"]["subject"] for m in inbox if m.get("kind") == "exec_finished"] == ["exec:1"]


def _real_agent_exec(agent: str, tmp_path, held) -> None:
    """The same on claude or opencode (tests/support/real_agents.py)."""
    import json

    from tests.support import real_agents

    reason = real_agents.skip_reason(agent)
    if reason:
        pytest.skip(reason)
    version = real_agents.agent_version(agent)
    with real_agents.real_fleet(agent, tmp_path) as fleet:
        home = tmp_path / "home"
        (home / ".bash_profile").write_text(f'PATH="{tmp_path / "bin"}:$PATH"\n', encoding="utf-8")
        member = fleet.create_member(agent, "worker")
        member_id, pane = member["member_id"], member["pane_id"]
        turns_before = len(fleet.api.turns())
        out = run_exec_recorded(fleet, held, agent, version, member_id, lambda: fleet.capture(pane))
        assert out.splitlines()[-1] == "exec 1 finished: exit status 4", (out, fleet.capture(pane))
        assert fleet.query("SELECT exit_status, outcome FROM cafleet_aux_execs") == [(4, "finished")]
        shown = fleet.wait_screen(pane, lambda s: MARKER in s, 30, "the output in the pane")
        _record(agent, version, "exec_ran", shown)
        took_turn = len(fleet.api.turns()) > turns_before
        print("took turn", took_turn, [json.dumps(t.body)[-600:] for t in fleet.api.turns()[turns_before:]])
        nudge(fleet)  # the grace period's step (a member that took a turn of its own is left alone)

        def received(turns):
            return any(MARKER in json.dumps(t.body) for t in turns[turns_before:])

        fleet.api.wait(received, real_agents.START_TIMEOUT)
        fleet.wait_screen(pane, lambda s: real_agents.composer_empty(agent, s), 60, f"{agent} to go on")
        inbox = fleet.cafleet("message", "poll", str(fleet.director), "--json").json()
        assert [m["notice"]["subject"] for m in inbox if m.get("kind") == "exec_finished"] == ["exec:1"]


def test_claude_member_exec_wait(tmp_path, held):
    _real_agent_exec("claude", tmp_path, held)


def test_opencode_member_exec_wait(tmp_path, held):
    _real_agent_exec("opencode", tmp_path, held)


def test_claude_member_asks_for_a_refused_command_and_the_director_runs_it(tmp_path):
    """The issue's whole story on the real claude: the member's harness refuses a command
    (`dontAsk` allows only `cafleet message`), the member asks the Director, the Director runs
    it with `member exec --wait`, the status is printed and recorded, and the member's model
    receives the output and goes on."""
    _asks("claude", tmp_path)


def test_opencode_member_asks_for_a_denied_command_and_the_director_runs_it(tmp_path):
    """The same on the real opencode, under a `deny` rule for the command."""
    _asks("opencode", tmp_path)


def _asks(agent: str, tmp_path) -> None:
    import json

    from tests.support import model_api as m, real_agents

    reason = real_agents.skip_reason(agent)
    if reason:
        pytest.skip(reason)
    with real_agents.real_fleet(agent, tmp_path) as fleet:
        (tmp_path / "home" / ".bash_profile").write_text(f'PATH="{tmp_path / "bin"}:$PATH"\n', encoding="utf-8")
        if agent == "opencode":  # the member's pane gets it: `touch` is denied, not asked
            fleet.server.run(
                "set-environment", "-g", "OPENCODE_CONFIG_CONTENT", '{"permission": {"bash": {"touch *": "deny"}}}'
            )
        member = fleet.create_member(agent, "worker")
        member_id, pane = member["member_id"], member["pane_id"]
        ask = f"Please run in my pane: {COMMAND}"
        proof = fleet.workdir / "member-ran-it"  # in its own folder: only the command's rule decides
        shell = "Bash" if agent == "claude" else "bash"

        def call(command: str) -> m.Reply:
            return m.Reply(tool_calls=[m.ToolCall(shell, {"command": command, "description": "probe"})])

        fleet.api.script.clear()
        fleet.api.script.push(
            call(f"touch {proof.name}"),  # refused by the harness
            call(f"cafleet message send --from-member-id {member_id} --to-member-id {fleet.director} '{ask}'"),
            m.Reply(text="Asked the Director."),
        )
        sent = fleet.send(member_id, "Run the probe; if it is refused, ask me.")
        assert sent.code == 0, sent
        fleet.wait_screen(
            pane,
            lambda s: fleet.api.script.pending() == 0 and real_agents.composer_empty(agent, s),
            real_agents.START_TIMEOUT,
            "the member to ask",
        )
        asked = fleet.query(
            "SELECT text FROM messages WHERE from_member_id = ? AND to_member_id = ?", member_id, fleet.director
        )
        assert (ask,) in asked
        assert not proof.exists()  # the harness refused it
        turns_before = len(fleet.api.turns())
        done = fleet.cafleet("member", "exec", str(member_id), COMMAND, "--wait", timeout=180)
        assert done.code == 0, (done, fleet.capture(pane))
        assert done.out.splitlines()[-1] == "exec 1 finished: exit status 4"
        assert fleet.query("SELECT exit_status, outcome FROM cafleet_aux_execs") == [(4, "finished")]
        nudge(fleet)

        def received(turns):
            return any(MARKER + "\\n" in json.dumps(t.body) for t in turns[turns_before:])

        fleet.api.wait(received, real_agents.START_TIMEOUT)
        fleet.wait_screen(pane, lambda s: real_agents.composer_empty(agent, s), 60, f"{agent} to go on")


@pytest.mark.skipif(not real_codex.installed(), reason=real_codex.SKIP_REASON)
def test_codex_member_asks_for_a_forbidden_command_and_the_director_runs_it(env, tmp_path, monkeypatch):
    """The same story on the real codex: a rules file forbids the command, codex refuses
    the member's call, the member asks the Director, who runs it with `member exec --wait`;
    the model's next request carries the output."""
    import json

    from tests.support.openai_responses import PREVIEW, Reply, last_input, text, tool_call, user_texts

    login_path(env, tmp_path)
    proof = tmp_path / "member-ran-it"
    with real_codex.codex_fleet(env, tmp_path, monkeypatch) as codex:
        fleet = codex.fleet
        rules = Path(env["CODEX_HOME"]) / "rules" / "team.rules"
        rules.write_text('prefix_rule(pattern = ["touch"], decision = "forbidden")\n', encoding="utf-8")
        member = codex.create()
        ask = f"Please run in my pane: {COMMAND}"

        def script(request):
            last = last_input(request)
            if last.get("type") == "function_call_output":
                if "policy forbids" in str(last.get("output")):
                    send = f"cafleet message send --from-member-id {member} --to-member-id {fleet.director} '{ask}'"
                    return Reply([tool_call("exec_command", {"cmd": send, "login": False})])
                return Reply([text("asked")])
            for _, message in reversed(user_texts(request)):
                if PREVIEW.search(message):
                    return Reply([tool_call("exec_command", {"cmd": f"touch {proof}", "login": False})])
                break
            return Reply([text("ok")])

        codex.api.script = script
        assert codex.send(member, "Run the probe; if it is refused, ask me.").code == 0
        wait_for(
            lambda: fleet.query(
                "SELECT count(*) FROM messages WHERE from_member_id = ? AND to_member_id = ? AND text = ?",
                member,
                fleet.director,
                ask,
            )[0][0],
            timeout=real_codex.TURN_TIMEOUT,
            what="the member to ask the Director",
        )
        assert not proof.exists()
        codex.wait_state(member, "idle")
        turns_before = len(codex.api.turns())
        done = fleet.cafleet("member", "exec", str(member), COMMAND, "--wait", timeout=180)
        assert done.code == 0, (done, codex.screen(member))
        assert done.out.splitlines()[-1] == "exec 1 finished: exit status 4"
        assert fleet.query("SELECT exit_status, outcome FROM cafleet_aux_execs") == [(4, "finished")]

        def received() -> bool:  # the keeper's step, looked at again until the pane can take it
            nudge(fleet)  # (once typed, the exec is nudged and later steps type nothing)
            return any(MARKER + "\\n" in json.dumps(t) for t in codex.api.turns()[turns_before:])

        wait_for(received, timeout=real_codex.TURN_TIMEOUT, interval=0.5, what="the model to receive the output")
        codex.wait_state(member, "idle")
