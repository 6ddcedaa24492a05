"""Pane-state cues (docs/delivery.md) on realistic screens of each agent, and the input box finder."""

from __future__ import annotations

import pytest

from cafleet.delivery.screen import CUES, PaneState, classify, input_box

AWAITING, WORKING, IDLE, UNKNOWN = (
    PaneState.AWAITING_USER, PaneState.WORKING, PaneState.IDLE, PaneState.UNKNOWN,
)
RULE = "─" * 60

CLAUDE_IDLE = f"""
❯ fix the failing parser test

⏺ Fixed the parser; the suite is green.

✻ Worked for 3m 2s

{RULE}
❯
{RULE}
  ⏵⏵ bypass permissions on (shift+tab to cycle)
"""

CLAUDE_IDLE_BOXED = """
> explain the lock module

⏺ The lock is an flock on a file per pane.

╭──────────────────────────────────────────────────╮
│ > Try "write a test for <filepath>"               │
╰──────────────────────────────────────────────────╯
  ? for shortcuts
"""

CLAUDE_WORKING = f"""
❯ refactor the parser

⏺ Reading src/parser.py…

✶ Deliberating… (4s · ↓ 120 tokens · esc to interrupt)

{RULE}
❯
{RULE}
  ⏵⏵ bypass permissions on · esc to interrupt
"""

CLAUDE_PERMISSION = f"""
❯ Run this exact bash command: touch /tmp/fixture-test-file.txt

⏺ Bash(touch /tmp/fixture-test-file.txt)
  ⎿  Waiting…

{RULE}
 Bash command

   touch /tmp/fixture-test-file.txt
   Create empty test file in /tmp

 Do you want to proceed?
 ❯ 1. Yes
   2. Yes, and always allow access to tmp/ from this project
   3. No

 Esc to cancel · Tab to amend · ctrl+e to explain
"""

CLAUDE_PERMISSION_OLD = """
╭──────────────────────────────────────────────╮
│ Bash command                                 │
│                                              │
│   rm -rf build                               │
│                                              │
│ Do you want to proceed?                      │
│ ❯ 1. Yes                                     │
│   2. No, and tell Claude what to do (esc)    │
╰──────────────────────────────────────────────╯
"""

CLAUDE_QUESTION = """
 ☐ Fruit

Which fruit do you prefer?

  1. Apple
❯ 2. Banana
  3. Type something.

Enter to select · ↑/↓ to navigate · Esc to cancel
"""

CODEX_IDLE = """
› explain this codebase

• The repository is a message broker for coding agents.

› Ask Codex to do anything

  100% context left · ? for shortcuts
"""

CODEX_IDLE_OLD = """
▌ short
▌
▌
▌
▌
▌

⏎ send   ⌃J newline   ⌃T transcript   ⌃C quit
"""

CODEX_WORKING = """
› run the tests

• Working (12s • esc to interrupt)

› Ask Codex to do anything

  98% context left
"""

CODEX_APPROVAL = """
  Would you like to run the following command?

  Reason: need workspace access

  $ cargo test -p broker

› 1. Yes, proceed (y)
  2. Yes, and don't ask again for this command (a)
  3. No, and tell Codex what to do differently (esc)

  Press enter to confirm or esc to cancel
"""

CODEX_QUESTION = """
  Question 1/2 (1 unanswered)
  Choose an option.

    1. Option 1  First choice.
  › 2. Option 2  Second choice.
    3. Option 3  Third choice.

  tab to add notes | enter to submit answer
  ctrl + p prev | ctrl + n next | esc to interrupt
"""

CODEX_YES_NO = """
Apply the patch to src/main.rs? [y/N]
"""

OPENCODE_IDLE = """
┃  add a health endpoint
┃

   Added GET /health returning 200.

┃
┃  Ask anything... "Fix a TODO in the codebase"
┃
┃  Build · claude-sonnet-4 Anthropic
╹▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀
                                  tab agents  ctrl+p commands
"""

OPENCODE_WORKING = """
┃  add a health endpoint
┃

┃
┃  Ask anything... "Fix a TODO in the codebase"
┃
┃  Build · claude-sonnet-4 Anthropic
╹▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀
  ⬝⬝⬝■■  esc interrupt
"""

OPENCODE_PERMISSION = """
┃  △ Permission required
┃    # Remove the build directory
┃
┃    $ rm -rf build
┃
┃   Allow once   Allow always   Reject               ⇆ select  enter confirm
"""

OPENCODE_QUESTION = """
┃  Which database should the service use?
┃  1. SQLite
┃     One file, no server.
┃  2. Postgres
┃  3. Type your own answer
┃
┃  ↑↓ select  enter submit  esc dismiss
"""

STANDIN_IDLE = """cafleet stand-in agent · member 5 · Ctrl-C quits
• [cafleet msg 1 from 2 2025-06-01T12:34:56.789012+00:00]⏎hello
────────────────────────
>
"""

STANDIN_WORKING = """cafleet stand-in agent · member 5 · Ctrl-C quits
• [cafleet msg 1 from 2 2025-06-01T12:34:56.789012+00:00]⏎hello
working… (esc to interrupt)
────────────────────────
>
"""

STANDIN_PERMISSION = """cafleet stand-in agent · member 5 · Ctrl-C quits
Do you want to proceed?
❯ 1. Yes
  2. No
"""


@pytest.mark.parametrize(
    ("agent", "screen", "state"),
    [
        ("claude", CLAUDE_IDLE, IDLE),
        ("claude", CLAUDE_IDLE_BOXED, IDLE),
        ("claude", CLAUDE_WORKING, WORKING),
        ("claude", CLAUDE_PERMISSION, AWAITING),
        ("claude", CLAUDE_PERMISSION_OLD, AWAITING),
        ("claude", CLAUDE_QUESTION, AWAITING),
        ("codex", CODEX_IDLE, IDLE),
        ("codex", CODEX_IDLE_OLD, IDLE),
        ("codex", CODEX_WORKING, WORKING),
        ("codex", CODEX_APPROVAL, AWAITING),
        ("codex", CODEX_QUESTION, AWAITING),  # says "esc to interrupt" too: awaiting wins
        ("codex", CODEX_YES_NO, AWAITING),
        ("opencode", OPENCODE_IDLE, IDLE),
        ("opencode", OPENCODE_WORKING, WORKING),
        ("opencode", OPENCODE_PERMISSION, AWAITING),
        ("opencode", OPENCODE_QUESTION, AWAITING),
        ("standin", STANDIN_IDLE, IDLE),
        ("standin", STANDIN_WORKING, WORKING),
        ("standin", STANDIN_PERMISSION, AWAITING),
    ],
)
def test_classify_realistic_screens(agent, screen, state):
    assert classify(agent, screen) == state


def test_every_agent_is_in_the_one_table():
    assert sorted(CUES) == ["claude", "codex", "opencode", "standin"]


@pytest.mark.parametrize(
    ("agent", "screen"),
    [
        ("aider", CLAUDE_IDLE),  # an agent the table does not know
        ("claude", ""),  # still starting
        ("claude", "$ ls\nREADME.md  src  tests\n$ "),  # a shell, not claude
        ("codex", "Welcome to Codex\nSign in with ChatGPT\n"),
        ("opencode", CLAUDE_IDLE),
    ],
)
def test_unrecognised_is_unknown_never_idle(agent, screen):
    assert classify(agent, screen) == UNKNOWN


def test_ansi_is_stripped_and_blank_lines_do_not_count():
    coloured = (
        "\x1b[1m\x1b[38;5;244m ❯ 1. Yes\x1b[0m\n" + "\n" * 30 + "\x1b]8;;http://x\x07link\x1b]8;;\x07\n"
    )
    assert classify("claude", coloured) == AWAITING


def test_cues_look_only_at_their_window():
    # "esc to interrupt" scrolled more than ten lines up is history, not a working agent
    history = "✶ Thinking… (esc to interrupt)\n" + "\n".join(f"line {i}" for i in range(12))
    assert classify("claude", history + f"\n{RULE}\n❯\n{RULE}\n") == IDLE
    assert classify("claude", history + f"\n{RULE}\n❯\n" + "\n".join(["x"] * 6)) == UNKNOWN


def test_input_box_is_the_last_composer_row_not_the_transcript():
    screen = f"""
❯ [cafleet msg 1 from 2 2025-06-01T12:34:56.789012+00:00]⏎old
{RULE}
❯ [cafleet msg 2 from 2 2025-06-01T12:35:00.000000+00:00]⏎new one
{RULE}
  ⏵⏵ bypass permissions on (shift+tab to cycle)
"""
    assert input_box("claude", screen) == [
        "❯ [cafleet msg 2 from 2 2025-06-01T12:35:00.000000+00:00]⏎new one"
    ]


def test_input_box_spans_every_row_of_a_bordered_box():
    assert input_box("opencode", OPENCODE_IDLE) == [
        "┃",
        '┃  Ask anything... "Fix a TODO in the codebase"',
        "┃",
        "┃  Build · claude-sonnet-4 Anthropic",
    ]
    assert input_box("codex", CODEX_IDLE_OLD) == ["▌ short", "▌", "▌", "▌", "▌", "▌"]
    assert input_box("standin", STANDIN_IDLE) == [">"]


def test_no_input_box():
    assert input_box("standin", "hello\n[cafleet msg 1 from 2 x]⏎typed into sleep\n") is None
    assert input_box("aider", STANDIN_IDLE) is None
