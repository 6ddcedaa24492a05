"""A dialog whose options are buttons without numbers, and which of them is selected
(docs/delivery.md, "Answering a blocked member"; :mod:`cafleet.delivery.keystrokes.dialog`).

Read from the screens the pinned opencode drew (``tests/fixtures/screens``, recorded by
``scripts/capture_agent_screens.py``): its permission prompt and the confirmation its
``Allow always`` button leads to, as plain text (``.txt``) and with their colours
(``.ansi``, ``capture-pane -e``), as drawn and after one right arrow. Numbered dialogs keep
their own numbers and digits; buttons are numbered 1..N left to right and answered with
arrows and Enter. Runs without the agents installed.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cafleet.delivery.keystrokes import dialog, screen

FOLDER = Path(__file__).resolve().parent / "fixtures" / "screens" / "opencode-1.18.33"
PERMISSION = ((1, "Allow once"), (2, "Allow always"), (3, "Reject"))
ALWAYS = ((1, "Confirm"), (2, "Cancel"))


def recorded(name: str) -> str:
    return (FOLDER / name).read_text(encoding="utf-8")


def plain(coloured: str) -> str:
    return "\n".join(re.sub(screen._ANSI, "", row).rstrip(" ") for row in coloured.split("\n"))


@pytest.mark.parametrize(
    ("name", "options", "selected"),
    [
        ("permission.ansi", PERMISSION, 1),  # as drawn: "Allow once" selected
        ("permission_moved.ansi", PERMISSION, 2),  # after one right arrow
        ("always.ansi", ALWAYS, 1),
    ],
)
def test_buttons_are_numbered_left_to_right_and_the_selected_one_is_read_from_its_colour(name, options, selected):
    coloured = recorded(name)
    seen = dialog.read("opencode", coloured, marked=True)
    assert seen is not None
    assert seen.options == options and not seen.numbered and seen.selected == selected
    bare = dialog.read("opencode", plain(coloured))  # the text every reader sees: the same dialog
    assert bare is not None
    assert (bare.digest, bare.options, bare.text) == (seen.digest, seen.options, seen.text)
    assert bare.selected is None  # without colours nothing tells the selected button
    assert seen.as_json()["options"][0] == {"number": 1, "label": options[0][1]}
    assert seen.as_json()["numbered"] is False


def test_moving_the_selection_keeps_the_digest():
    """The text of the prompt does not change when the selection moves: the answer checks
    the digest after its arrows, so it must stay the notice's."""
    drawn = dialog.read("opencode", recorded("permission.ansi"), marked=True)
    moved = dialog.read("opencode", recorded("permission_moved.ansi"), marked=True)
    assert drawn is not None and moved is not None
    assert drawn.digest == moved.digest and (drawn.selected, moved.selected) == (1, 2)


@pytest.mark.parametrize(
    ("name", "choice", "keys"),
    [
        ("permission.ansi", 1, ("right", 0)),  # selected already: Enter alone
        ("permission.ansi", 3, ("right", 2)),
        ("permission_moved.ansi", 1, ("left", 1)),
        ("permission_moved.ansi", 3, ("right", 1)),
        ("always.ansi", 2, ("right", 1)),
    ],
)
def test_the_arrows_that_move_the_selection_to_the_chosen_button(name, choice, keys):
    seen = dialog.read("opencode", recorded(name), marked=True)
    assert seen is not None
    assert dialog.moves("opencode", seen, choice) == keys


def test_no_arrows_without_a_known_selection_or_for_a_numbered_dialog():
    bare = dialog.read("opencode", recorded("permission.txt"))
    assert bare is not None and dialog.moves("opencode", bare, 1) is None
    question = dialog.read("opencode", recorded("question.txt"))
    assert question is not None and question.numbered
    assert question.options == ((1, "Red"), (2, "Blue"), (3, "Type your own answer"))
    assert dialog.moves("opencode", question, 2) is None
    assert dialog.keys_for("opencode", 2) == ("2", False)  # its question takes digits


def test_no_button_or_every_button_on_the_bars_colour_tells_no_selection():
    coloured = recorded("permission.ansi")
    picked = re.search(r"\x1b\[48;5;(\d+)m \x1b\[38;5;\d+mAllow once", coloured)
    assert picked is not None
    flat = coloured.replace(f"\x1b[48;5;{picked.group(1)}m", "\x1b[48;5;234m")  # every button alike
    seen = dialog.read("opencode", flat, marked=True)
    assert seen is not None and seen.options == PERMISSION and seen.selected is None
    rows = coloured.split("\n")
    at = next(i for i, row in enumerate(rows) if "Allow always" in row)
    rows[at] = rows[at].replace("\x1b[48;5;234m", f"\x1b[48;5;{picked.group(1)}m")  # every button lit
    seen = dialog.read("opencode", "\n".join(rows), marked=True)
    assert seen is not None and seen.selected is None


def test_only_the_agents_own_button_rows_near_the_bottom_are_options():
    """A row of other words is no button row (the labels are the agent's, never the
    model's), and the agent's own labels far above the bottom (the transcript quoting them)
    give no options either."""
    rows = recorded("permission.txt").split("\n")
    at = next(i for i, row in enumerate(rows) if "Allow once   Allow always   Reject" in row)
    other = list(rows)
    other[at] = other[at].replace("Reject", "Delete everything")
    assert dialog._buttons("opencode", other) is None
    assert dialog._buttons("claude", rows) is None  # claude draws no buttons
    room = dialog.OPTIONS_TAIL - sum(1 for row in rows[at + 1 :] if row.strip())  # drawn rows it may have under it
    far = rows[: at + 1] + ["  ┃  filler"] * (room + 1) + rows[at + 1 :]
    seen = dialog.read("opencode", "\n".join(far))
    assert seen is not None and seen.options == ()
    near = rows[: at + 1] + ["  ┃  filler"] * room + rows[at + 1 :]
    seen = dialog.read("opencode", "\n".join(near))
    assert seen is not None and seen.options == PERMISSION


@pytest.mark.parametrize("agent", ["claude", "codex"])
def test_numbered_dialogs_keep_their_numbers_and_digits(agent):
    folder = next(path for path in FOLDER.parent.iterdir() if path.name.startswith(f"{agent}-"))
    for state in ("permission", "question"):
        seen = dialog.read(agent, (folder / f"{state}.txt").read_text(encoding="utf-8"))
        assert seen is not None and seen.numbered and seen.options[0][0] == 1
        assert dialog.moves(agent, seen, 1) is None
        assert dialog.keys_for(agent, 2) == ("2", False)  # the digit alone picks it (tests/test_answer_real.py)
