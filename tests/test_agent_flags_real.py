"""The argv and assets cafleet gives claude, codex and opencode, checked against the real
programs by scripts/check_agent_flags.py (argument parsers, rules file, agent preset and
skill discovery; no session is started, no credentials are needed).

The programs are taken from ``$CAFLEET_AGENT_PREFIX/node_modules/.bin`` when that variable
is set (``npm install --prefix DIR @anthropic-ai/claude-code @openai/codex opencode-ai``),
else from PATH. Each agent that is absent is skipped by name; the whole file is skipped
when none is present.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "check_agent_flags.py"


def _load_script():
    spec = importlib.util.spec_from_file_location("check_agent_flags", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


check = _load_script()
PREFIX = os.environ.get("CAFLEET_AGENT_PREFIX")
BIN_DIR = Path(PREFIX) / "node_modules" / ".bin" if PREFIX else None
WHERE = str(BIN_DIR) if BIN_DIR else "PATH"
FOUND = {agent: check.locate(agent, BIN_DIR) for agent in check.CHECKERS}

pytestmark = pytest.mark.skipif(
    not any(FOUND.values()),
    reason=f"no real coding agent (claude, codex, opencode) in {WHERE}; set CAFLEET_AGENT_PREFIX to an npm prefix "
    "holding them or run scripts/check_agent_flags.py, which installs them",
)


@pytest.mark.parametrize("agent", sorted(check.CHECKERS))
def test_real_agent_accepts_what_cafleet_passes(agent):
    binary = FOUND[agent]
    if binary is None:
        pytest.skip(f"{agent} not found in {WHERE}")
    version, checks = check.check_agent(agent, binary)
    report = "\n".join([f"{agent} {version} [{binary}]"] + [item.line() for item in checks])
    assert version != "?", report
    assert [item.line() for item in checks if item.status == "FAIL"] == [], report
    assert sum(item.status == "PASS" for item in checks) >= 8, report


def test_codex_members_run_in_process_not_in_a_shared_background_server(tmp_path):
    """``--no-daemon`` is in every codex member's argv and is the real switch for it."""
    binary = FOUND["codex"]
    if binary is None:
        pytest.skip(f"codex not found in {WHERE}")
    from cafleet.agents import backends

    argv = backends.build_argv("codex", member_name="m", prompt="hi")
    assert argv[:2] == ["codex", "--no-daemon"]
    env = check.tool_env(tmp_path, binary)
    code, out, err = check.run([binary, "--help"], env, tmp_path)
    assert code == 0, err
    checks = check.check_codex_in_process(binary, [binary, *argv[1:]], out + err, env, tmp_path)
    assert [item.line() for item in checks if item.status != "PASS"] == []
    # The check fails for an argv without the switch.
    without = [binary, *[a for a in argv[1:] if a != "--no-daemon"]]
    assert check.check_codex_in_process(binary, without, out + err, env, tmp_path)[0].status == "FAIL"
