#!/usr/bin/env python3
"""Re-capture the screens the real claude and opencode draw, as test fixtures.

Runs each pinned agent (``$CAFLEET_AGENT_PREFIX/node_modules/.bin``, or ``--prefix``)
offline in a private tmux server against the scripted model API of the test suite, drives
it into each state and writes the plain ``capture-pane`` text to
``tests/fixtures/screens/<agent>-<version>/<state>.txt``. tests/test_screen_fixtures.py
then checks cafleet's screen cues on every file, so after a version bump the diff of
these files and that test's failures show exactly which cue changed.

    CAFLEET_AGENT_PREFIX=.cache/agents .venv/bin/python scripts/capture_agent_screens.py [claude] [opencode]

States: ``startup`` (the first screen drawn), ``idle`` (empty composer), ``typed`` (text in
the composer, not submitted), ``working`` (a reply held open), ``working_typed`` (the same
with text in the composer), ``queued`` (a line submitted while working: claude's
``Press up to edit queued messages`` hint), ``replied`` (the transcript after a turn),
``fresh`` (the program started with no prompt: its first placeholder hint, opencode's
``Ask anything… "…"``), ``permission`` (a shell command awaiting approval), ``question``
(the agent asks its user a question: claude's ``AskUserQuestion``, opencode's
``question`` tool).
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
    from cafleet.delivery import screen
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
        write_fixture(agent, version, state, text, out)
    return shots


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("agents", nargs="*", default=["claude", "opencode"])
    parser.add_argument("--prefix", help="npm prefix holding the pinned agents (default $CAFLEET_AGENT_PREFIX)")
    parser.add_argument("--out", type=Path, default=FIXTURES)
    args = parser.parse_args(argv)
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
        capture(agent, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
