"""cafleet's screen cues on the screens the real agents drew.

``tests/fixtures/screens/<agent>-<version>/<state>.txt`` are plain ``capture-pane`` texts
of the pinned claude, codex and opencode (200x50 panes), recorded by
``scripts/capture_agent_screens.py`` against the scripted model API. Each state has an
expected classification and input box; after a version bump, re-capture, and the
failures here name the state whose cue changed. Runs without the agents installed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cafleet.delivery.keystrokes import screen
from tests.support.real_agents import composer_text

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "screens"
TYPED = "half typed words"  # what the capture script types

IDLE, WORKING, AWAITING = screen.PaneState.IDLE, screen.PaneState.WORKING, screen.PaneState.AWAITING_USER

# state -> (classification, what the input box holds: "" empty, a text, or None: not checked)
EXPECTED = {
    "idle": (IDLE, ""),
    "typed": (IDLE, TYPED),
    "working": (WORKING, ""),
    "working_typed": (WORKING, TYPED),
    "queued": (WORKING, ""),
    "replied": (IDLE, ""),
    "fresh": (IDLE, ""),  # started with no prompt: the first placeholder hint
    "permission": (AWAITING, None),
    "question": (AWAITING, None),
    "always": (AWAITING, None),  # opencode: the confirmation its "Allow always" button leads to
}
REQUIRED = {
    "claude": set(EXPECTED) - {"always"},
    "opencode": set(EXPECTED),  # its question tool is on with OPENCODE_ENABLE_QUESTION_TOOL
    "codex": set(EXPECTED) - {"always"},  # its question overlay (request_user_input) recorded in Plan mode
}


# Every hint, placeholder, working indicator and dialog each pinned agent draws: the
# recorded state that shows it and the text it shows there (docs/agents.md).
DRAWN = {
    "claude": [
        ("idle", "❯"),  # the empty composer
        ("fresh", "? for shortcuts"),  # started with no prompt
        ("queued", "❯ Press up to edit queued messages"),  # a line waits in the queue
        ("working", "Thundering… ("),  # the spinner row
        ("queued", "esc to interrupt"),
        ("permission", "Do you want to proceed?"),
        ("question", "Enter to select · ↑/↓ to navigate · Esc to cancel"),
    ],
    "opencode": [
        ("fresh", 'Ask anything… "'),  # the start page's placeholder
        ("idle", "┃  Cafleet · Claude Sonnet 4.5"),  # the box's agent · model row
        ("working", "esc interrupt"),
        ("queued", "esc interrupt"),
        ("permission", "△ Permission required"),
        ("permission", "Allow once   Allow always   Reject"),  # buttons, no numbers
        ("always", "△ Always allow"),
        ("always", "Confirm   Cancel"),
        ("question", "↑↓ select  enter submit  esc dismiss"),
        ("question", "3. Type your own answer"),
    ],
    "codex": [
        ("idle", "› Ask Codex to do anything"),  # the empty composer's placeholder hint
        ("fresh", "› Ask Codex to do anything"),  # started with no prompt
        ("fresh", "? for shortcuts"),
        ("idle", "← for agents · ? for shortcuts"),  # the footer after a turn
        ("working", "• Working ("),  # the status row
        ("working", "esc to interrupt"),
        ("working_typed", "tab to queue message"),  # text in the box while it works
        ("queued", "Messages to be submitted after next tool call"),  # a line waits in the queue
        ("queued", "↳ queued line"),
        ("permission", "Would you like to run the following command?"),
        ("permission", "› 1. Yes, proceed (y)"),
        ("permission", "Press enter to confirm or esc to cancel"),
        ("question", "Question 1/1 (1 unanswered)"),  # request_user_input, in Plan mode
        ("question", "enter to submit answer"),
    ],
}


def fixture_dirs() -> list[Path]:
    return sorted(path for path in FIXTURES.iterdir() if path.is_dir()) if FIXTURES.is_dir() else []


def cases() -> list[tuple[str, Path]]:
    found = []
    for folder in fixture_dirs():
        agent = folder.name.rsplit("-", 1)[0]
        found += [pytest.param(agent, path, id=f"{folder.name}/{path.stem}") for path in sorted(folder.glob("*.txt"))]
    return found


def test_every_real_agent_has_its_screens_recorded():
    agents = {folder.name.rsplit("-", 1)[0]: folder for folder in fixture_dirs()}
    assert set(agents) >= set(REQUIRED)
    for agent, states in REQUIRED.items():
        recorded = {path.stem for path in agents[agent].glob("*.txt")}
        assert states <= recorded, f"{agents[agent].name} lacks {sorted(states - recorded)}"


@pytest.mark.parametrize(("agent", "state", "shows"), [(a, st, t) for a, drawn in DRAWN.items() for st, t in drawn])
def test_every_hint_and_dialog_a_pinned_agent_draws_is_recorded(agent, state, shows):
    """Each is on a recorded screen, which reads as its state (idle with an empty box for a
    hint or placeholder, working, awaiting the user for a dialog)."""
    folder = next(path for path in fixture_dirs() if path.name.rsplit("-", 1)[0] == agent)
    shown = (folder / f"{state}.txt").read_text(encoding="utf-8")
    assert shows in shown.replace("\xa0", " ")
    expected_state, holds = EXPECTED[state]
    assert screen.classify(agent, shown) == expected_state
    if holds == "":
        assert screen.box_text(agent, shown) == ""


@pytest.mark.parametrize(("agent", "path"), cases())
def test_recorded_screen_reads_as_its_state(agent, path):
    shown = path.read_text(encoding="utf-8")
    state = path.stem
    if state == "startup":  # whatever the first frame is, it is never a dialog
        assert screen.classify(agent, shown) != AWAITING
        return
    expected_state, holds = EXPECTED[state]
    assert screen.classify(agent, shown) == expected_state
    box = screen.input_box(agent, shown)
    if expected_state == AWAITING:
        # a dialog takes the keys: whatever box is found, nothing may be typed into it
        assert box is None or not screen.box_text(agent, shown), box
        return
    assert box, "no input box found"
    if holds is not None:
        assert composer_text(agent, shown) == holds, box
        # what cafleet itself reads as typed text: a hint the agent draws in an empty box
        # (claude's "Press up to edit queued messages") is no one's text
        assert screen.box_text(agent, shown) == holds, box
    # the box is the composer only: never the transcript's echo of a preview
    assert not any("[cafleet msg" in row for row in box), box


@pytest.mark.parametrize(("agent", "path"), [c for c in cases() if c.values[1].stem == "working"])
def test_recorded_working_screen_shows_the_preview_in_the_transcript(agent, path):
    """The preview the capture sent sits in the transcript above the composer: what a
    confirmation can look for once the text has left the box."""
    shown = path.read_text(encoding="utf-8")
    assert "[cafleet msg 1 from 1 " in shown
    assert "Please look at the build." in shown


def test_opencode_sidebar_beside_the_box_is_not_typed_text():
    """At 200 columns opencode draws its session sidebar on the prompt box's own rows; the
    box ends at the width of its ``╹▀▀▀`` bottom border, so an empty box stays empty."""
    folder = next(path for path in fixture_dirs() if path.name.startswith("opencode-"))
    rows = (folder / "idle.txt").read_text(encoding="utf-8").splitlines()
    edge = next(i for i, row in enumerate(rows) if row.lstrip().startswith("╹▀"))
    width = len(rows[edge].rstrip())
    for i in range(edge - 4, edge - 1):  # the box's blank rows above its footer row
        assert rows[i].strip() == "┃"
        rows[i] = rows[i].ljust(width + 4) + "• OpenCode 1.18.33"
    shown = "\n".join(rows)
    assert screen.box_text("opencode", shown) == ""
    rows[edge - 3] = rows[edge - 3].replace("┃           ", "┃  half typed", 1)
    assert screen.box_text("opencode", "\n".join(rows)) == "half typed"
