"""The real codex TUI (the pinned npm release) as fleet members, offline; shared by
tests/test_real_codex.py and tests/test_keeper_real.py.

:func:`codex_fleet` starts a private tmux server whose first pane is the Director (a byte
recorder, tests/support/pane_fleet.py) and a scripted Responses API on 127.0.0.1
(tests/support/openai_responses.py); codex runs in a throw-away ``CODEX_HOME`` whose
``config.toml`` sends every model request there and trusts the member's folder, so no
login, trust or onboarding screen is drawn. The binary is the one in
``$CAFLEET_AGENT_PREFIX/node_modules/.bin`` (scripts/test.sh installs it), reached through
a private bin folder that is first on the member's PATH: a ``codex`` elsewhere on the
machine is never started.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cafleet.delivery.keystrokes import screen
from tests.support.openai_responses import PREVIEW, ResponsesAPI, codex_config
from tests.support.pane_fleet import tmux_fleet
from tests.support.tmux_fixtures import wait_for

PREFIX = os.environ.get("CAFLEET_AGENT_PREFIX")
CODEX = Path(PREFIX, "node_modules", ".bin", "codex") if PREFIX else None
SKIP_REASON = (
    "the pinned codex is not installed: set CAFLEET_AGENT_PREFIX to the npm prefix that "
    "scripts/test.sh fills (.cache/agents)"
)

START_TIMEOUT = 45.0
TURN_TIMEOUT = 45.0


def installed() -> bool:
    return CODEX is not None and CODEX.exists()


def bin_dir(tmp_path: Path, approval: str | None = None) -> Path:
    """A folder holding ``codex`` (the pinned binary, or a wrapper that changes its
    approval flag) and ``cafleet`` (this interpreter's), to put first on PATH."""
    bin_dir = tmp_path / "agent-bin"
    bin_dir.mkdir()
    if approval is None:
        (bin_dir / "codex").symlink_to(CODEX)
    else:
        wrapper = bin_dir / "codex"
        wrapper.write_text(
            "#!/bin/sh\n"
            "# the member argv asks for --ask-for-approval never; this test needs a dialog\n"
            f'for a; do shift; if [ "$a" = never ]; then set -- "$@" {approval}; else set -- "$@" "$a"; fi; done\n'
            f'exec {CODEX} "$@"\n',
            encoding="utf-8",
        )
        wrapper.chmod(0o755)
    cafleet = Path(sys.executable).with_name("cafleet")
    if cafleet.exists():
        (bin_dir / "cafleet").symlink_to(cafleet)
    else:
        shim = bin_dir / "cafleet"
        shim.write_text(f'#!/bin/sh\nexec {sys.executable} -m cafleet "$@"\n', encoding="utf-8")
        shim.chmod(0o755)
    return bin_dir


class CodexFleet:
    """A tmux fleet plus the scripted model API its codex members talk to."""

    def __init__(self, fleet, api: ResponsesAPI, workdir: Path) -> None:
        self.fleet = fleet
        self.api = api
        self.workdir = workdir

    def create(self, name: str = "coder", wait: bool = True) -> int:
        result = self.fleet.cafleet(
            "member",
            "create",
            "--fleet-id",
            str(self.fleet.fleet_id),
            "--name",
            name,
            "--description",
            f"{name} on codex",
            "--coding-agent",
            "codex",
            "--json",
            "Wait for messages from your Director.",
        )
        assert result.code == 0, result
        member_id = result.json()["member_id"]
        if wait:
            self.wait_idle(member_id)
        return member_id

    def screen(self, member_id: int) -> str:
        shown = self.fleet.cafleet("member", "capture", str(member_id), "--lines", "60")
        assert shown.code == 0, shown
        return shown.out

    def wait_state(self, member_id: int, state: str, timeout: float = START_TIMEOUT) -> str:
        def reached():
            shown = self.screen(member_id)
            return shown if screen.classify("codex", shown) == state else None

        return wait_for(reached, timeout=timeout, interval=0.1, what=f"codex member {member_id} to be {state}")

    def wait_idle(self, member_id: int) -> str:
        """Idle with its spawn prompt answered (the first turn is over)."""
        wait_for(lambda: self.api.turns(), timeout=START_TIMEOUT, interval=0.1, what="codex's first turn")
        return self.wait_state(member_id, screen.PaneState.IDLE)

    def send(self, to_id: int, body: str):
        return self.fleet.send(self.fleet.director, to_id, body)

    def received_previews(self) -> dict[int, int]:
        """How many distinct user messages named each message id."""
        counts: dict[int, int] = {}
        for message in self.api.received():
            for found in PREVIEW.finditer(message):
                counts[int(found.group(1))] = counts.get(int(found.group(1)), 0) + 1
        return counts


@contextmanager
def codex_fleet(env: dict, tmp_path: Path, monkeypatch, approval: str | None = None) -> Iterator[CodexFleet]:
    """A live fleet whose members are the pinned codex; ``approval`` replaces the member
    argv's ``--ask-for-approval never`` (``on-request`` draws approval dialogs)."""
    api = ResponsesAPI().start()
    workdir = tmp_path / "work"
    workdir.mkdir()
    codex_home = Path(env["HOME"]) / ".codex"
    codex_home.mkdir(parents=True)
    (codex_home / "config.toml").write_text(codex_config(api.url, [str(workdir)]), encoding="utf-8")
    folder = bin_dir(tmp_path, approval)
    env.update(
        CODEX_HOME=str(codex_home),
        CAFLEET_TEST_MODEL_KEY="sk-test-not-a-real-key",
        PATH=f"{folder}{os.pathsep}{env['PATH']}",
        CAFLEET_SUBMIT_SETTLE="0.3",
    )
    for key in ("CODEX_HOME", "CAFLEET_TEST_MODEL_KEY", "PATH", "CAFLEET_SUBMIT_SETTLE"):
        monkeypatch.setenv(key, env[key])
    setup = subprocess.run(
        [sys.executable, "-m", "cafleet", "setup", "--coding-agent", "codex"], env=env, capture_output=True, timeout=60
    )
    assert setup.returncode == 0, setup.stderr
    monkeypatch.chdir(workdir)
    try:
        with tmux_fleet(env, tmp_path, monkeypatch) as fleet:
            fleet.environ["CAFLEET_SUBMIT_SETTLE"] = "0.3"
            yield CodexFleet(fleet, api, workdir)
    finally:
        api.stop()
