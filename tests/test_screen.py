"""Pane-state cues (docs/delivery.md) on realistic screens of each agent, and the input box finder."""

from __future__ import annotations

import pytest

from cafleet.delivery.keystrokes.screen import CUES, PaneState, classify, input_box

AWAITING, WORKING, IDLE, UNKNOWN = (
    PaneState.AWAITING_USER,
    PaneState.WORKING,
    PaneState.IDLE,
    PaneState.UNKNOWN,
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
╹▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀
                                  tab agents  ctrl+p commands
"""

OPENCODE_WORKING = """
┃  add a health endpoint
┃

┃
┃  Ask anything... "Fix a TODO in the codebase"
┃
┃  Build · claude-sonnet-4 Anthropic
╹▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀
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
        ("opencode", OPENCODE_PERMISSION.replace("△", " "), AWAITING),  # glyph left undrawn
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
    coloured = "\x1b[1m\x1b[38;5;244m ❯ 1. Yes\x1b[0m\n" + "\n" * 30 + "\x1b]8;;http://x\x07link\x1b]8;;\x07\n"
    assert classify("claude", coloured) == AWAITING


def test_cues_look_only_at_their_window():
    # "esc to interrupt" scrolled more than ten lines up is history, not a working agent
    history = "✶ Thinking… (esc to interrupt)\n" + "\n".join(f"line {i}" for i in range(12))
    assert classify("claude", history + f"\n{RULE}\n❯\n{RULE}\n") == IDLE
    assert classify("claude", history + f"\n{RULE}\n❯\n" + "\n".join(["x"] * 12)) == UNKNOWN


def test_input_box_is_the_last_composer_row_not_the_transcript():
    screen = f"""
❯ [cafleet msg 1 from 2 2025-06-01T12:34:56.789012+00:00]⏎old
{RULE}
❯ [cafleet msg 2 from 2 2025-06-01T12:35:00.000000+00:00]⏎new one
{RULE}
  ⏵⏵ bypass permissions on (shift+tab to cycle)
"""
    assert input_box("claude", screen) == ["❯ [cafleet msg 2 from 2 2025-06-01T12:35:00.000000+00:00]⏎new one"]


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


# --- cues a message can fake -----------------------------------------------------------------

# What each cue stands for, as the agent draws it: every cue of CUES must match one of these
# rows (checked below), and each row is then quoted in a message body.
CUE_TEXTS = {
    "claude": [
        " ❯ 1. Yes",
        "Do you want to proceed?",
        " Esc to cancel · Tab to amend · ctrl+e to explain",
        "Enter to select · ↑/↓ to navigate · Esc to cancel",
        "Enter to continue · Esc to cancel",
        "✶ Deliberating… (4s · ↓ 120 tokens · esc to interrupt)",
        "  ⏵⏵ bypass permissions on · esc to interrupt",
    ],
    "codex": [
        "› 1. Yes, proceed (y)",
        "Apply the patch to src/main.rs? [y/N]",
        "  Press enter to confirm or esc to cancel",
        "  tab to add notes | enter to submit answer",
        "  Question 1/2 (1 unanswered)",
        "• Working (12s • esc to interrupt)",
        "Waiting for startup",
    ],
    "opencode": [
        "┃  △ Permission required",
        "┃   Allow once   Allow always   Reject",
        "┃  △ Reject permission",
        "┃  △ Always allow",
        "┃   Confirm   Cancel                          ⇆ select  enter confirm",
        "┃  3. Type your own answer",
        "┃  ↑↓ select  enter submit  esc dismiss",
        "  ⬝⬝⬝■■  esc interrupt",
    ],
    "standin": ["❯ 1. Yes", "Do you want to proceed?", "working… (esc to interrupt)", "Waiting for startup"],
}
HEADER = "[cafleet msg 7 from 3 2025-06-01T12:34:56.789012+00:00]⏎"


def all_cues(agent: str) -> list[tuple]:
    cues = CUES[agent]
    return [*cues.awaiting, *cues.working, *cues.starting]


def echoed(agent: str, quoted: str) -> str:
    """An idle screen of ``agent`` whose transcript shows a preview quoting ``quoted``:
    once on the header's row and once where a wrapped row starts."""
    text = quoted.strip()
    if agent == "claude":
        return (
            f"❯ {HEADER}please check {text}\n  {text}\n\n⏺ Noted.\n\n{RULE}\n❯\u00a0\n{RULE}\n"
            "  ⏵⏵ bypass permissions on (shift+tab to cycle)\n"
        )
    if agent == "codex":
        return f"› {HEADER}please check {text}\n  {text}\n\n• Noted.\n\n› Ask Codex to do anything\n\n  100% context left\n"
    if agent == "opencode":
        return (
            f"┃  {HEADER}please check {text}\n┃  {text}\n┃\n\n   Noted.\n\n┃\n"
            '┃  Ask anything... "Fix broken tests"\n┃\n┃  Build · claude-sonnet-4 Anthropic\n'
            "╹▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀\n                                  tab agents  ctrl+p commands\n"
        )
    return (
        f"cafleet stand-in agent · member 5 · Ctrl-C quits\n• {HEADER}{text}\n• {text}\n────────────────────────\n>\n"
    )


def typed(agent: str, quoted: str) -> str:
    """An idle screen of ``agent`` with a preview quoting ``quoted`` typed in its input box
    (on the first row and on a wrapped row), not yet submitted."""
    text = quoted.strip()
    if agent == "claude":
        return f"⏺ Done.\n\n{RULE}\n❯ {HEADER}please check {text}\n  {text}\n{RULE}\n  ? for shortcuts\n"
    if agent == "codex":
        return f"• Done.\n\n› {HEADER}please check {text}\n  {text}\n\n  100% context left\n"
    if agent == "opencode":
        return (
            f"   Done.\n\n┃\n┃  {HEADER}please check {text}\n┃  {text}\n┃\n┃  Build · claude-sonnet-4 Anthropic\n"
            "╹▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀▀\n                                  tab agents  ctrl+p commands\n"
        )
    return f"cafleet stand-in agent · member 5 · Ctrl-C quits\n────────────────────────\n> {HEADER}{text}\n"


@pytest.mark.parametrize("agent", sorted(CUES))
def test_every_cue_is_quoted_by_the_fake_table(agent):
    import re

    for cue in all_cues(agent):
        assert any(re.search(cue[0], row) for row in CUE_TEXTS[agent]), f"{agent} cue {cue[0]!r} is not quoted"


@pytest.mark.parametrize(("agent", "quoted"), [(a, q) for a in sorted(CUES) for q in CUE_TEXTS[a]])
def test_a_message_quoting_a_cue_does_not_change_the_state(agent, quoted):
    from cafleet.delivery.keystrokes.screen import box_text, starting

    for screen in (echoed(agent, quoted), typed(agent, quoted)):
        assert classify(agent, screen) == IDLE, screen
        assert not starting(agent, screen), screen
    assert box_text(agent, echoed(agent, quoted)) == ""
    assert box_text(agent, typed(agent, quoted)).startswith(HEADER)


# --- the input box's content ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("agent", "screen"),
    [
        ("claude", CLAUDE_IDLE),
        ("claude", CLAUDE_IDLE_BOXED),  # Try "…" hint
        ("claude", f"{RULE}\n❯\u00a0\n{RULE}\n"),  # 2.x pads the empty composer with a no-break space
        ("codex", CODEX_IDLE),
        ("codex", CODEX_WORKING),
        ("codex", "› Find and fix a bug in @filename\n\n  gpt-5 medium · 100% left\n"),
        ("codex", "› Implement {feature}\n"),
        ("codex", "› Run /review on my current changes\n"),
        ("codex", "› How many files have been modified?\n"),
        ("opencode", OPENCODE_IDLE),
        ("opencode", OPENCODE_WORKING),
        ("opencode", '┃\n┃  Run a command... "ls -la"\n┃\n┃  Shell\n'),
        ("standin", STANDIN_IDLE),
        ("standin", '────────────────────────\n> Try "fix the tests"\n'),
    ],
)
def test_an_empty_box_is_recognised_with_its_placeholder(agent, screen):
    from cafleet.delivery.keystrokes.screen import box_text

    assert box_text(agent, screen) == ""


@pytest.mark.parametrize(
    ("agent", "screen", "text"),
    [
        ("claude", f"{RULE}\n❯ fix the te\n{RULE}\n", "fix the te"),
        ("claude", f"{RULE}\n❯ first line\n  second line\n{RULE}\n  ? for shortcuts\n", "first line second line"),
        ("claude", '╭────────╮\n│ > Try "x" but mine │\n╰────────╯\n', 'Try "x" but mine'),
        ("codex", "› Ask Codex to do anything, please\n\n  100% context left\n", "Ask Codex to do anything, please"),
        ("codex", "› half\n  typed\n\n  100% context left\n", "half typed"),
        ("opencode", "┃\n┃  half typed\n┃\n┃  Build · claude-sonnet-4 Anthropic\n", "half typed"),
        ("standin", "────────────────────────\n> half typed\n", "half typed"),
    ],
)
def test_typed_text_in_the_box_is_read(agent, screen, text):
    from cafleet.delivery.keystrokes.screen import box_text

    assert box_text(agent, screen) == text


def test_no_box_means_no_text():
    from cafleet.delivery.keystrokes.screen import box_text

    assert box_text("claude", CLAUDE_PERMISSION) is None
    assert box_text("codex", CODEX_APPROVAL) is None
    assert box_text("opencode", OPENCODE_PERMISSION) is None
    assert box_text("standin", "$ sleep 100\n") is None
    assert box_text("aider", STANDIN_IDLE) is None


def test_codex_waiting_for_startup():
    from cafleet.delivery.keystrokes.screen import starting

    screen = "• Waiting for startup\n\n› Ask Codex to do anything\n\n  100% context left\n"
    assert starting("codex", screen)
    assert starting("codex", "› Ask Codex to do anything\n\n  Waiting for startup\n")
    assert not starting("codex", CODEX_IDLE)
    assert not starting("claude", screen)


def test_a_dim_hint_the_table_does_not_know_is_an_empty_box():
    from cafleet.delivery.keystrokes.screen import box_text

    # A suggestion a later codex release may draw: dim, so a placeholder.
    hint = "\x1b[1m›\x1b[0m \x1b[2mDraft the release notes\x1b[22m\n\n  100% context left\n"
    assert box_text("codex", hint) == ""
    # Typed text is drawn plain (or coloured, even with a 256-colour or RGB "2" inside).
    assert box_text("codex", "› \x1b[38;2;2;2;2mDraft the release notes\x1b[0m\n") == "Draft the release notes"
    assert box_text("codex", "› \x1b[38;5;2mhalf\x1b[2m typed\n") == "half typed"
    assert box_text("claude", f"{RULE}\n\x1b[2m❯\x1b[0m fix the te\n{RULE}\n") == "fix the te"
    assert box_text("opencode", "┃\n┃  \x1b[2mhint\x1b[0m\n┃\n┃  \x1b[1mBuild\x1b[0m · model\n") == ""


def test_the_echo_of_a_submission_is_outside_the_box():
    """Confirmation counts the preview's first characters outside the input box: claude's
    transcript row, codex's queue row, opencode's user message, the stand-in's echo."""
    from cafleet.delivery.keystrokes.screen import outside_box

    marker = "[cafleet msg 7 from 3 20"
    screens = {
        "claude": f"❯ {HEADER}do it\n\n✶ Thinking… (esc to interrupt)\n\n{RULE}\n❯ {HEADER}next\n{RULE}\n",
        "codex": f"• Working (3s • esc to interrupt)\n\n• Queued follow-up inputs\n  ↳ {HEADER}do it\n\n"
        f"› {HEADER}next\n\n  100% context left\n",
        "opencode": f"┃  {HEADER}do it\n┃\n\n┃\n┃  {HEADER}next\n┃\n┃  Build · model\n",
        "standin": f"• {HEADER}do it\n────────────────────────\n> {HEADER}next\n",
    }
    for agent, screen in screens.items():
        assert sum(marker in row for row in outside_box(agent, screen)) == 1, agent
        assert any(marker in row for row in input_box(agent, screen)), agent
