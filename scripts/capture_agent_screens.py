#!/usr/bin/env python3
"""Re-capture the screens the real claude, codex and opencode draw, as test fixtures.

Runs each pinned agent (``$CAFLEET_AGENT_PREFIX/node_modules/.bin``, or ``--prefix``)
offline in a private tmux server against the scripted model API of the test suite, drives
it into each state and writes the plain ``capture-pane`` text to
``tests/fixtures/screens/<agent>-<version>/<state>.txt``. tests/test_screen_fixtures.py
then checks cafleet's screen cues on every file, so after a version bump the diff of
these files and that test's failures show exactly which cue changed.

    CAFLEET_AGENT_PREFIX=.cache/agents .venv/bin/python scripts/capture_agent_screens.py [claude] [codex] [opencode]

States: ``startup`` (the first screen drawn), ``idle`` (empty composer), ``typed`` (text in
the composer, not submitted), ``working`` (a reply held open), ``working_typed`` (the same
with text in the composer), ``queued`` (a line submitted while working: claude's
``Press up to edit queued messages`` hint), ``replied`` (the transcript after a turn),
``fresh`` (the program started with no prompt: its first placeholder hint, opencode's
``Ask anything… "…"``), ``permission`` (a shell command awaiting approval), ``question``
(the agent asks its user a question: claude's ``AskUserQuestion``, opencode's
``question`` tool, codex's ``request_user_input`` overlay in Plan mode); for opencode also
``always`` (the confirmation its ``Allow always`` button leads to) and, captured with their
colours (``capture-pane -e``, written as ``<state>.ansi``), ``permission`` and ``always`` as
drawn and ``permission_moved`` (after one right arrow: the second button selected), from
which cafleet reads the selected button. ``--only STATE …`` writes just those states. codex runs
through the scripted Responses API (tests/support/real_codex.py) instead of the
Anthropic one.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

FIXTURES = ROOT / "tests" / "fixtures" / "screens"
TYPED = "half typed words"
ONLY: set[str] = set()  # --only: the states to write (all when empty)


def question_call(agent: str):
    from tests.support.model_api import Reply, ToolCall

    if agent == "claude":
        return Reply(
            tool_calls=[
                ToolCall(
                    "AskUserQuestion",
                    {
                        "questions": [
                            {
                                "question": "Which colour should the button be?",
                                "header": "Colour",
                                "multiSelect": False,
                                "options": [
                                    {"label": "Red", "description": "A red button"},
                                    {"label": "Blue", "description": "A blue button"},
                                ],
                            }
                        ]
                    },
                )
            ]
        )
    return Reply(
        tool_calls=[
            ToolCall(
                "question",
                {
                    "questions": [
                        {
                            "question": "Which colour should the button be?",
                            "header": "Colour",
                            "options": [
                                {"label": "Red", "description": "A red button"},
                                {"label": "Blue", "description": "A blue button"},
                            ],
                        }
                    ]
                },
            )
        ]
    )


def shell_call(agent: str, command: str):
    from tests.support.model_api import Reply, ToolCall

    name = "Bash" if agent == "claude" else "bash"
    return Reply(tool_calls=[ToolCall(name, {"command": command, "description": "Create a file"})])


def capture(agent: str, out: Path, log=print) -> dict[str, str]:
    from cafleet.delivery.keystrokes import screen
    from tests.support import model_api as m
    from tests.support.real_agents import agent_version, composer_empty, real_fleet

    version = agent_version(agent)
    shots: dict[str, str] = {}

    def keep(state: str, text: str) -> None:
        shots[state] = text
        log(
            f"--- {agent} {version} {state}: classify={screen.classify(agent, text)} "
            f"box={screen.input_box(agent, text)!r}"
        )
        log(text.rstrip())

    with tempfile.TemporaryDirectory(prefix="cft-capture-") as tmp, real_fleet(agent, Path(tmp)) as fleet:
        member = fleet.create_member(agent, "capture", ready=False)
        pane = member["pane_id"]
        first = fleet.wait_screen(pane, lambda s: s.strip(), 60, "a first screen")
        keep("startup", first)
        fleet.api.wait(lambda _: fleet.api.turns(), 60)
        keep("idle", fleet.wait_composer(pane, agent))
        # the spawn prompt was a turn; the composer is empty now
        fleet.type_keys(pane, TYPED)
        keep("typed", fleet.wait_screen(pane, lambda s: TYPED in s, 20, "typed text"))
        fleet.press(pane, *["BSpace"] * len(TYPED))
        fleet.wait_composer(pane, agent, 20)

        hold = threading.Event()
        fleet.api.script.push(m.Reply(text="Working on it, then done.", hold=hold))
        sent = fleet.send(member["member_id"], "Please look at the build.")
        log(f"send: {sent!r}")
        try:
            keep("working", fleet.wait_state(pane, agent, screen.PaneState.WORKING, 30))
            fleet.type_keys(pane, TYPED)
            keep("working_typed", fleet.wait_screen(pane, lambda s: TYPED in s, 20, "typed text"))
            fleet.press(pane, *["BSpace"] * len(TYPED))
            fleet.wait_screen(pane, lambda s: TYPED not in s, 20, "the typed text erased")
            fleet.type_keys(pane, "queued line")
            fleet.wait_screen(pane, lambda s: "queued line" in s, 20, "the queued text")
            time.sleep(0.3)
            fleet.press(pane, "Enter")
            time.sleep(1.0)
            keep("queued", fleet.capture(pane))
        finally:
            hold.set()
        keep(
            "replied",
            fleet.wait_screen(
                pane,
                lambda s: composer_empty(agent, s) and fleet.api.script.pending() == 0 and "queued line" in s,
                60,
                "the replies",
            ),
        )

        # the program started with no prompt: its first empty box and placeholder hint
        fresh = fleet.start_plain(agent, "fresh")
        keep("fresh", fleet.wait_composer(fresh["pane_id"], agent))
        plain = fresh if agent == "claude" else member
        ppane = plain["pane_id"]
        fleet.wait_composer(ppane, agent)
        fleet.api.script.push(shell_call(agent, "touch made-by-the-agent"))
        fleet.type_keys(ppane, "make a file")
        fleet.wait_screen(ppane, lambda s: "make a file" in s, 20, "typed prompt")
        time.sleep(0.3)
        fleet.press(ppane, "Enter")
        keep("permission", fleet.wait_state(ppane, agent, screen.PaneState.AWAITING_USER, 30))
        if agent == "opencode":  # its buttons: the selection is drawn in colour only
            marked = lambda: fleet.server.run("capture-pane", "-p", "-e", "-t", ppane)
            time.sleep(1.0)
            keep("permission.ansi", marked())
            fleet.press(ppane, "Right")
            time.sleep(1.0)
            keep("permission_moved.ansi", marked())
            fleet.press(ppane, "Enter")  # "Allow always": its confirmation
            keep("always", fleet.wait_screen(ppane, lambda s: "Always allow" in s, 20, "the confirmation"))
            time.sleep(1.0)
            keep("always.ansi", marked())
            fleet.press(ppane, "Escape")  # Cancel: back to the three buttons
            fleet.wait_screen(ppane, lambda s: "Permission required" in s, 20, "the permission prompt again")
        fleet.press(ppane, "Escape")
        fleet.wait_screen(ppane, lambda s: screen.classify(agent, s) != screen.PaneState.AWAITING_USER, 20, "dismissed")
        fleet.wait_composer(ppane, agent, 30)

        fleet.api.script.push(question_call(agent))
        fleet.type_keys(ppane, "ask me")
        fleet.wait_screen(ppane, lambda s: "ask me" in s, 20, "typed prompt")
        time.sleep(0.3)
        fleet.press(ppane, "Enter")
        try:
            keep("question", fleet.wait_state(ppane, agent, screen.PaneState.AWAITING_USER, 30))
        except AssertionError as error:
            log(f"no question dialog: {error}")
        log(f"unknown paths: {fleet.api.unknown}")

    from tests.support.real_agents import write_fixture

    for state, text in shots.items():
        if ONLY and state not in ONLY:
            continue
        stem, _, suffix = state.partition(".")
        write_fixture(agent, version, stem, text, out, suffix or "txt")
    return shots


def capture_codex(out: Path, log=print) -> dict[str, str]:
    """codex's screens, through the scripted Responses API (tests/support/real_codex.py),
    its approval flag ``on-request`` so that an escalated command draws the approval
    dialog; ``question`` is its ``request_user_input`` overlay, drawn in Plan mode."""
    import pytest

    from cafleet.delivery.keystrokes import screen
    from tests.support import openai_responses as responses, real_codex
    from tests.support.environ import isolated_environ
    from tests.support.real_agents import agent_version, write_fixture

    agent = "codex"
    version = agent_version(agent)
    shots: dict[str, str] = {}
    plan: list[responses.Reply] = []

    def script(request: dict) -> responses.Reply:
        log(f"turn: last input {responses.last_input(request).get('type')}")
        return plan.pop(0) if plan else responses.Reply([responses.text("Done.")])

    def keep(state: str, text: str) -> None:
        shots[state] = text
        log(
            f"--- {agent} {version} {state}: classify={screen.classify(agent, text)} box={screen.input_box(agent, text)!r}"
        )
        log(text.rstrip())

    with tempfile.TemporaryDirectory(prefix="cft-capture-") as tmp, pytest.MonkeyPatch.context() as patch:
        root = Path(tmp)
        env = isolated_environ(
            root / "home", CAFLEET_DATABASE_URL=str(root / "cafleet.db"), CAFLEET_WAIT_INTERVAL="0.05"
        )
        for key in list(os.environ):
            if key not in env:
                patch.delenv(key)
        for key, value in env.items():
            patch.setenv(key, value)
        with real_codex.codex_fleet(env, root, patch, approval="on-request") as codex:
            codex.api.script = script
            fleet, server = codex.fleet, codex.fleet.server

            def shown(pane: str) -> str:
                return server.run("capture-pane", "-p", "-t", pane)

            def wait_screen(pane: str, check, timeout: float, what: str) -> str:
                deadline = time.monotonic() + timeout
                while True:
                    text = shown(pane)
                    if check(text):
                        return text
                    if time.monotonic() > deadline:
                        raise AssertionError(f"timed out waiting for {what}; the screen:\n{text}")
                    time.sleep(0.05)

            def idle_empty(text: str) -> bool:
                return screen.classify(agent, text) == screen.PaneState.IDLE and not screen.box_text(agent, text)

            def state(pane: str, wanted: str, timeout: float = 45) -> str:
                return wait_screen(pane, lambda t: screen.classify(agent, t) == wanted, timeout, wanted)

            member = codex.create("capture", wait=False)
            pane = fleet.query("SELECT mux_pane_id FROM member_placements WHERE member_id = ?", member)[0][0]
            pane = pane.split()[0]
            keep("startup", wait_screen(pane, lambda t: t.strip(), 60, "a first screen"))
            deadline = time.monotonic() + 60
            while not codex.api.turns() and time.monotonic() < deadline:
                time.sleep(0.05)
            keep("idle", wait_screen(pane, lambda t: codex.api.turns() and idle_empty(t), 60, "the empty composer"))
            server.run("send-keys", "-t", pane, "-l", TYPED)
            keep("typed", wait_screen(pane, lambda t: TYPED in t, 20, "typed text"))
            server.run("send-keys", "-t", pane, *["BSpace"] * len(TYPED))
            wait_screen(pane, idle_empty, 20, "the composer emptied")

            hold = threading.Event()
            plan.append(responses.Reply([responses.text("Working on it, then done.")], hold=hold))
            log(f"send: {codex.send(member, 'Please look at the build.')!r}")
            try:
                keep("working", state(pane, screen.PaneState.WORKING))
                server.run("send-keys", "-t", pane, "-l", TYPED)
                keep("working_typed", wait_screen(pane, lambda t: TYPED in t, 20, "typed text"))
                server.run("send-keys", "-t", pane, *["BSpace"] * len(TYPED))
                wait_screen(pane, lambda t: TYPED not in t, 20, "the typed text erased")
                server.run("send-keys", "-t", pane, "-l", "queued line")
                wait_screen(pane, lambda t: "queued line" in t, 20, "the queued text")
                time.sleep(0.3)
                server.run("send-keys", "-t", pane, "Enter")
                time.sleep(1.0)
                keep("queued", shown(pane))
            finally:
                hold.set()
            keep(
                "replied",
                wait_screen(
                    pane,
                    lambda t: idle_empty(t) and not plan and "queued line" in "".join(codex.api.received()),
                    60,
                    "the replies",
                ),
            )

            # the program started with no prompt: its first empty box and placeholder hint
            fresh = server.new_pane([str(real_codex.CODEX)], cwd=str(codex.workdir))
            keep("fresh", wait_screen(fresh, idle_empty, 60, "a fresh codex's composer"))

            marker = codex.workdir / "made-by-the-agent"
            plan.append(
                responses.Reply(
                    [
                        responses.tool_call(
                            "exec_command",
                            {
                                "cmd": f"touch {marker}",
                                "sandbox_permissions": "require_escalated",
                                "justification": "Create a file outside the sandbox?",
                            },
                        )
                    ]
                )
            )
            server.run("send-keys", "-t", pane, "-l", "make a file")
            wait_screen(pane, lambda t: "make a file" in t, 20, "the typed prompt")
            time.sleep(0.3)
            server.run("send-keys", "-t", pane, "Enter")
            keep("permission", state(pane, screen.PaneState.AWAITING_USER))
            server.run("send-keys", "-t", pane, "Escape")
            wait_screen(pane, lambda t: screen.classify(agent, t) != screen.PaneState.AWAITING_USER, 20, "dismissed")
            wait_screen(pane, idle_empty, 45, "the composer again")

            question = {
                "questions": [
                    {
                        "id": "colour",
                        "header": "Colour",
                        "question": "Which colour should the button be?",
                        "options": [
                            {"label": "Red", "description": "A red button"},
                            {"label": "Blue", "description": "A blue button"},
                        ],
                    }
                ]
            }
            plan.append(responses.Reply([responses.tool_call("request_user_input", question)]))
            # codex 0.171 answers request_user_input itself outside Plan mode ("unavailable in
            # Default mode"); shift+tab cycles the mode to Plan, whose overlay this records
            server.run("send-keys", "-t", pane, "BTab")
            wait_screen(pane, lambda t: "Plan mode" in t, 20, "Plan mode")
            server.run("send-keys", "-t", pane, "-l", "ask me")
            wait_screen(pane, lambda t: "ask me" in t, 20, "the typed prompt")
            time.sleep(0.3)
            server.run("send-keys", "-t", pane, "Enter")
            try:
                keep("question", state(pane, screen.PaneState.AWAITING_USER, 30))
            except AssertionError as error:
                log(f"no question dialog: {error}")
            log(f"unknown paths: {codex.api.unknown}")

    for name, text in shots.items():
        if not ONLY or name in ONLY:
            write_fixture(agent, version, name, text, out)
    return shots


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("agents", nargs="*", default=["claude", "codex", "opencode"])
    parser.add_argument("--prefix", help="npm prefix holding the pinned agents (default $CAFLEET_AGENT_PREFIX)")
    parser.add_argument("--out", type=Path, default=FIXTURES)
    parser.add_argument("--only", nargs="+", default=[], metavar="STATE", help="write only these states")
    args = parser.parse_args(argv)
    ONLY.update(args.only)
    import signal

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # so the tmux server and agents are stopped
    if args.prefix:
        os.environ["CAFLEET_AGENT_PREFIX"] = os.path.abspath(args.prefix)
    from tests.support.real_agents import skip_reason

    for agent in args.agents:
        reason = skip_reason(agent)
        if reason:
            print(f"Error: {reason}", file=sys.stderr)
            return 1
        if agent == "codex":
            capture_codex(args.out)
        else:
            capture(agent, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
