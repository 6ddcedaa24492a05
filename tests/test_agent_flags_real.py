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
