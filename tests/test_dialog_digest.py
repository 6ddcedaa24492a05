"""A dialog's digest names the dialog: two dialogs a reader can tell apart never share one
(docs/delivery.md, "The dialog and its digest"; issue 29, item 4 and the label of item 7).

Built from the screens the pinned claude, codex and opencode drew
(``tests/fixtures/screens``, recorded by ``scripts/capture_agent_screens.py``): each
dialog is changed the way a model could change it (a command row longer than 160
characters, a dialog taller than the notice's old 16 rows and than the old 30-row window,
a zero-width or other hidden character, a no-break space for a space) and must get another
digest, with the difference in the text the notice shows. Runs without the agents installed.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from cafleet.delivery.keystrokes import dialog

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "screens"
AGENTS = ("claude", "codex", "opencode")
# The row of each recorded dialog a model writes: the command of the permission dialog, the
# question of the question dialog (as drawn, after the frame bar and the indentation).
WRITTEN = {
    ("claude", "permission"): "touch made-by-the-agent",
    ("codex", "permission"): "$ touch /tmp/cft-capture-r3fem7cq/work/made-by-the-agent",
    ("opencode", "permission"): "$ touch made-by-the-agent",
    ("claude", "question"): "Which colour should the button be?",
    ("codex", "question"): "Which colour should the button be?",
    ("opencode", "question"): "Which colour should the button be?",
}
CASES = [pytest.param(agent, state, id=f"{agent}-{state}") for agent, state in WRITTEN]
# Characters a screen does not draw as themselves: format characters (zero-width space, word
# joiner, BOM, soft hyphen, bidi override and mark, a tag), default-ignorable letters and marks
# (Hangul filler, variation selector, combining grapheme joiner), a blank graphic (the blank
# Braille cell). Each is put into a word of the written row.
HIDDEN = "\u200b\u2060\ufeff\u00ad\u202e\u200e\U000e0041\u3164\ufe0f\u034f\u2800"
# Spaces that look like U+0020 and that a shell reads as part of a word.
SPACES = "\u00a0\u2003\u3000\u202f"


def recorded(agent: str, state: str) -> str:
    folder = next(path for path in FIXTURES.iterdir() if path.name.rsplit("-", 1)[0] == agent)
    return (folder / f"{state}.txt").read_text(encoding="utf-8")


def written_row(agent: str, state: str, rows: list[str]) -> int:
    """The index of the dialog's written row: the last row that shows it (the transcript
    above may show the command too)."""
    text = WRITTEN[(agent, state)]
    found = [i for i, row in enumerate(rows) if row.lstrip(" ┃").rstrip() == text]
    assert found, f"{agent}'s {state} screen no longer shows {text!r}"
    return found[-1]


def variant(agent: str, state: str, change) -> dict:
    """The recorded dialog with its written row changed by ``change(indent, text) -> rows``
    (the rows that replace it); read as a notice reads it (the dialog as JSON)."""
    rows = recorded(agent, state).split("\n")
    at = written_row(agent, state, rows)
    row = rows[at].rstrip()
    text = row.lstrip(" ┃")
    rows[at : at + 1] = change(row[: len(row) - len(text)], text)
    seen = dialog.read(agent, "\n".join(rows))
    assert seen is not None, f"the changed {agent} {state} screen no longer reads awaiting_user"
    return seen.as_json()


def read_recorded(agent: str, state: str) -> dict:
    seen = dialog.read(agent, recorded(agent, state))
    assert seen is not None
    return seen.as_json()


_ESCAPE = re.compile("\u27e6U\\+([0-9A-F]{4,6})\u27e7")


def unshown(text: str) -> str:
    """What ``dialog.shown`` escaped, back: it has an inverse, so no two rows share a text."""
    return _ESCAPE.sub(lambda match: chr(int(match.group(1), 16)), text)


# --- long rows ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("agent", "state"), CASES)
def test_a_row_that_differs_past_its_160th_character_is_another_dialog(agent, state):
    """`echo …(170 characters)… && rm -rf ~` and `… && echo ok` were one digest: each row
    was cut at 160 code points before it was digested."""
    filler = "echo " + "x" * 170

    def ending(tail):
        return lambda indent, text: [f"{indent}{text} && {filler} && {tail}"]

    harmful, harmless = variant(agent, state, ending("rm -rf ~")), variant(agent, state, ending("echo ok"))
    assert harmful["digest"] != harmless["digest"]
    # the notice shows the whole row: what the digest covers is what the Director reads
    assert f"{filler} && rm -rf ~" in harmful["text"] and f"{filler} && echo ok" in harmless["text"]


# --- tall dialogs ------------------------------------------------------------------------------


@pytest.mark.parametrize(("agent", "state"), CASES)
def test_a_tall_dialog_that_differs_only_in_its_top_rows_is_another_dialog(agent, state):
    """A command of 36 lines (a heredoc) whose first line differs: that row is more than 16
    drawn rows and more than 30 rows above the bottom, where the digest used to stop."""

    def script(first):
        return lambda indent, text: [
            f"{indent}{text}",
            f"{indent}{first}",
            *(f"{indent}printf 'step {n}\\n'" for n in range(1, 36)),
        ]

    harmful, harmless = variant(agent, state, script("rm -rf ~")), variant(agent, state, script("echo ok"))
    assert harmful["digest"] != harmless["digest"]
    rows = harmful["text"].split("\n")
    top = next(i for i, row in enumerate(rows) if row.endswith("rm -rf ~"))
    assert len(rows) - top > 36  # far above the options, and shown
    assert harmful["options"] == read_recorded(agent, state)["options"]  # the options are the dialog's own


# --- hidden characters -------------------------------------------------------------------------


@pytest.mark.parametrize(("agent", "state"), CASES)
def test_a_hidden_character_makes_another_dialog_and_the_notice_shows_it(agent, state):
    """`rm -rf bu\\u200bild` was `rm -rf build`: format characters were removed and other
    spaces turned into U+0020 before the digest. Each is now kept, and shown as an escape,
    so the text the notice shows tells the two apart as the digest does."""
    plain = read_recorded(agent, state)
    failures = []
    for ch in HIDDEN + SPACES:
        if ch in SPACES:
            change = lambda indent, text, ch=ch: [indent + text.replace(" ", ch, 1)]
        else:
            change = lambda indent, text, ch=ch: [indent + text[:5] + ch + text[5:]]
        hidden = variant(agent, state, change)
        escape = f"\u27e6U+{ord(ch):04X}\u27e7"
        if hidden["digest"] == plain["digest"]:
            failures.append(f"U+{ord(ch):04X}: the same digest")
        elif escape not in hidden["text"] or ch in hidden["text"]:  # the character itself could not be seen
            failures.append(f"U+{ord(ch):04X}: another digest, but the notice does not show why")
    assert failures == [], f"{agent} {state}: a hidden character did not make a visibly different dialog"


def test_a_trailing_blank_is_the_same_dialog():
    """Blanks at a row's end are not drawn: the same dialog (only U+0020: a trailing no-break
    space is part of the command's last word, and shown)."""
    screen = recorded("claude", "permission")
    same = dialog.read("claude", screen.replace("Do you want to proceed?", "Do you want to proceed?   "))
    other = dialog.read("claude", screen.replace("touch made-by-the-agent\n", "touch made-by-the-agent\u00a0\n"))
    assert same is not None and other is not None
    assert same.digest == read_recorded("claude", "permission")["digest"]
    assert other.digest != same.digest and "made-by-the-agent\u27e6U+00A0\u27e7" in other.text


@pytest.mark.parametrize(("agent", "state"), CASES)
def test_the_digest_is_the_sha256_of_the_text_the_notice_shows(agent, state):
    seen = read_recorded(agent, state)
    assert seen["digest"] == hashlib.sha256(seen["text"].encode("utf-8")).hexdigest()[: dialog.DIGEST_LEN]
    assert all(row.isprintable() for row in seen["text"].split("\n"))  # nothing in it drives a terminal


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.text(alphabet=st.one_of(st.characters(), st.sampled_from(" \u27e6\u27e7U+0123456789ABCDEF\u200b\u00a0"))))
def test_the_shown_row_has_an_inverse(row):
    """Every row is shown as printable text from which the row (without its trailing
    U+0020 blanks) is read back: two rows that differ are never shown alike."""
    shown = dialog.shown(row)
    assert shown.isprintable() or shown == ""
    assert unshown(shown) == row.rstrip(" ")


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.text(alphabet=st.characters(blacklist_characters="\n"), max_size=40), max_size=40))
@example(["\x1b]"])  # an OSC with no end: it hid the dialog below it, which then read as none
def test_every_row_above_a_dialog_is_in_its_text(rows):
    """Whatever the screen holds above the dialog, every row of it is in the text, whole
    (only blank rows at the top dropped): screens that differ have texts that differ."""
    tail = ["Do you want to proceed?", "❯ 1. Yes", "  2. No"]
    seen = dialog.read("standin", "\n".join([*rows, *tail]))
    assert seen is not None
    expected = [row.rstrip(" ") for row in rows]
    while expected and not expected[0]:
        expected.pop(0)
    assert [unshown(line) for line in seen.lines] == [*expected, *tail]


# --- the options and their labels --------------------------------------------------------------


def test_an_options_label_is_its_first_column_without_padding_or_frame():
    """`member answer` printed `Red                A red button` for codex's question and
    `Yes … │` for a dialog in a box: the padding before a description column or a right
    frame bar, and the bar, were part of the label."""
    assert read_recorded("codex", "question")["options"] == [
        {"number": 1, "label": "Red"},
        {"number": 2, "label": "Blue"},
        {"number": 3, "label": "None of the above"},
    ]
    rows = recorded("claude", "permission").split("\n")
    top = next(i for i, row in enumerate(rows) if row.strip() == "Do you want to proceed?")
    for i in range(top, top + 4):  # the question and its three options, in a box of 72 columns
        rows[i] = f"│{rows[i].ljust(70)}│"
    boxed = dialog.read("claude", "\n".join(rows))
    assert boxed is not None
    assert boxed.options == ((1, "Yes"), (2, "Yes, and always allow access to work/ from this project"), (3, "No"))
    rows = recorded("opencode", "question").split("\n")
    at = next(i for i, row in enumerate(rows) if row.rstrip().endswith("1. Red"))
    rows[at] = rows[at].rstrip().ljust(160) + "132 tokens"  # the sidebar beside the option, at 200 columns
    beside = dialog.read("opencode", "\n".join(rows))
    assert beside is not None and beside.options[0] == (1, "Red")


@pytest.mark.parametrize(("agent", "state"), [("claude", "permission"), ("opencode", "permission")])
def test_a_numbered_list_in_the_transcript_is_no_option(agent, state):
    """The model's own numbered list above a dialog gave the dialog its options (the first
    rows numbered 1, 2): the key 1 was labelled "Fix the failing test". The options are the
    dialog's own list, near the bottom; opencode's permission dialog has buttons instead,
    numbered left to right (tests/test_dialog_buttons.py), which the list does not replace."""
    rows = recorded(agent, state).split("\n")
    at = written_row(agent, state, rows)
    listed = ["  1. Fix the failing test", "  2. Push the fix to main", "  3. Delete the old branch"]
    transcript = next(i for i in range(at - 1, -1, -1) if "touch made-by-the-agent" in rows[i])
    rows[transcript + 1 : transcript + 1] = listed
    seen = dialog.read(agent, "\n".join(rows))
    assert seen is not None
    assert seen.options == tuple((o["number"], o["label"]) for o in read_recorded(agent, state)["options"])
    assert all(line.strip() in seen.text for line in listed)  # still shown: it is on the screen
