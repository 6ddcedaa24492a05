"""Reading a pane's state from its last lines (docs/delivery.md, "Reading a pane").

Every decision about typing looks at the screen: hold when the agent waits for its user
(typing there would answer the prompt: a digit picks an option, Enter approves), hold
while it is still starting, type only into its empty input box, and confirm a submission
by seeing the typed text leave the box into the transcript or the queue. The cues of every
agent live in the one table ``CUES`` below.

**The input box is found first, by its shape**, and everything else is read relative to
it, so that text quoted in a message — echoed in the transcript above the box, or typed
into the box — can never pass for a dialog or a status line:

* ``composer`` matches the first row of the box (claude ``❯``/``>``, codex ``›``/``▌``,
  opencode the blank top row of its ``┃`` box, the stand-in ``>``); ``composer_above``,
  when set, must match the row right above it (claude and the stand-in draw a rule
  there, opencode's box starts a ``┃`` run); ``not_composer`` rejects dialog rows of the
  same shape (codex's ``› 1. Yes`` options). The box is the *last* such row, plus the
  ``continuation`` rows right under it (wrapped or further lines of the text).
  The box must end within the last ``composer_window`` non-blank rows.
* ``prompt`` is cut from the start of the box's first row, ``footer_rows`` trailing
  non-blank rows of the box are not text (opencode's agent/model line), and a box whose
  remaining text matches one of ``empty`` shows only the agent's placeholder hint
  (claude ``Try "…"``, codex's greyed suggestions, opencode ``Ask anything... "…"``):
  :func:`box_text` returns ``""`` for it.
* A cue is ``(regular expression, window)`` — searched in the last ``window`` non-blank
  rows of the screen, never in the rows of the input box — or ``(regex, window,
  "below")``, searched only in rows under the input box. Awaiting-the-user cues are
  always searched under the box: a dialog replaces the composer in every agent, so when
  a composer is on screen, whatever is above it is transcript. With no composer on
  screen they are searched in the whole window.
* ``starting`` cues mean "drawn, but not taking input yet" (codex's ``Waiting for
  startup``, which holds the Enter): :func:`starting` says so, and nothing is typed.

The order of checks is fixed: awaiting the user, then working, then idle (a composer is on
screen); a screen that matches nothing, or an agent the table does not know, is
``unknown`` — never ``idle``. ``placeholder`` matches what an agent shows in the box
instead of a long paste it collapsed (``[Pasted text #1 +3 lines]``, ``[Pasted Content
1003 chars]``, ``[Pasted ~3 lines]``).

Sources of the cues (screen text read, never code copied):

* claude: permission and question dialogs as captured from Claude Code 2.x in public issue
  threads and test fixtures of tmux tools (``Do you want to proceed?`` over ``❯ 1. Yes``,
  footers ``Esc to cancel · Tab to amend`` and ``Enter to select · ↑/↓ to navigate · Esc
  to cancel``, the ``Enter to continue · Esc to cancel`` checkpoint dialog); the spinner
  row ``✶ Deliberating… (4s · ↓ 120 tokens · esc to interrupt)``; the composer ``❯``
  (2.x, padded with a no-break space when empty) under a rule, or ``│ >`` in a rounded
  box (1.x) with the hint ``Try "…"``; the hint ``Press up to edit queued messages`` that
  2.1.197 draws in the empty composer while a submitted line waits in its queue.
* codex: the snapshot tests of openai/codex's TUI: the approval overlay (``› 1. Yes, …``
  and ``Press enter to confirm or esc to cancel``), the user-input question overlay
  (``Question 1/2``, ``› 2. Option``, ``enter to submit answer``), the composer (``›``;
  ``▌`` on every row in older releases) and its suggestion hints (``Ask Codex to do
  anything``, ``Explain this codebase``, ``Find and fix a bug in @filename`` …, and the side
  conversation's ``How many files have been modified?`` …), the status
  row ``• Working (12s • esc to interrupt)``, the queue (``↳ …`` under ``Queued follow-up
  inputs``; 0.171 heads it ``Messages to be submitted after next tool call``);
  ``Waiting for startup`` as codex-cli 0.171 draws it while starting; ``[y/n]`` from the
  spec; and the screens of 0.171.0 recorded in tests/fixtures/screens (its approval
  overlay and its Plan-mode ``request_user_input`` overlay, under which the echo of the
  last submitted line is the last ``›`` row: hence codex's ``composer_window``).
* opencode: its TUI source (anomalyco/opencode, routes/session/permission.tsx,
  question.tsx, component/prompt): the permission prompt ``△ Permission required`` with
  the buttons ``Allow once  Allow always  Reject`` and the follow-ups ``Reject
  permission`` and ``Always allow`` (buttons ``Confirm  Cancel``, recorded from 1.18.33)
  (the ``△`` is optional: it stays undrawn when keys reached opencode before it started); the question dialog (``3. Type your own answer``, ``↑↓ select  enter
  submit  esc dismiss``), which 1.18.33 draws in the prompt box's own ``┃`` frame, as
  recorded in tests/fixtures/screens (its ``question`` tool is offered to the TUI with
  ``OPENCODE_ENABLE_QUESTION_TOOL`` and a ``question: allow`` permission); the
  busy hint ``esc interrupt`` / ``esc again to interrupt`` under the prompt; the prompt
  box drawn with a ``┃`` left border, a blank top row, the agent/model line at its
  bottom and the hints ``Ask anything... "…"`` / ``Run a command... "…"``.
* standin: our own stand-in agent (cafleet.agents.standin), which draws these exact cues.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import re


class PaneState:
    """What :func:`classify` returns: plain strings, cheap to compare, print and store."""

    AWAITING_USER = "awaiting_user"
    WORKING = "working"
    IDLE = "idle"
    UNKNOWN = "unknown"


# (regular expression, searched in the last N non-blank lines[, "below": only under the box])
Cue = tuple


@dataclass(frozen=True)
class AgentCues:
    awaiting: tuple[Cue, ...]
    working: tuple[Cue, ...]
    composer: str  # the first row of the input box
    prompt: str  # cut from the start of that row to leave the typed text
    continuation: str | None = None  # rows under the first that still belong to the box
    composer_above: str | None = None  # the row right above the box must match this
    not_composer: str | None = None  # rows shaped like the composer that are dialog rows
    footer_rows: int = 0  # trailing non-blank rows of the box that are not typed text
    empty: tuple[str, ...] = ()  # what the box shows when nothing is typed
    starting: tuple[Cue, ...] = ()  # drawn but not taking input yet
    placeholder: str | None = None  # what the box shows instead of text it collapsed
    composer_window: int = 12  # the box ends within the last N non-blank rows
    # Dialogs drawn in the composer's own frame (opencode's permission prompt and question
    # dialog replace its prompt box): when every cue of one group matches a row of the box,
    # it is no input box.
    box_dialog: tuple[tuple[str, ...], ...] = ()
    # The row right under the box, whose length is the box's right edge: text beyond it on
    # the box's rows is another panel drawn beside the box (opencode's session sidebar).
    box_edge: str | None = None


_CODEX_HINTS = (
    "Ask Codex to do anything",
    "Explain this codebase",
    "Summarize recent commits",
    "Implement {feature}",
    "Find and fix a bug in @filename",
    "Write tests for @filename",
    "Improve documentation in @filename",
    "Run /review on my current changes",
    "Use /skills to list available skills",
    "Check recently modified functions for compatibility",
    "How many files have been modified?",
    "Will this algorithm scale well?",
)

CUES: dict[str, AgentCues] = {
    "claude": AgentCues(
        awaiting=(
            (r"^[\s│]*❯\s+\d+\.\s", 20),
            (r"^[\s│]*Do you want to proceed\?", 20),
            (r"^\s*Esc to cancel · Tab to amend", 20),
            (r"^\s*Enter to (select|continue) · .*Esc to cancel", 20),
        ),
        working=(
            # the spinner row: "✽ Undulating… (0s · ↓ 1 tokens)" (claude 2.1.197 drops "esc to
            # interrupt" from it, and from its footer while the composer holds text)
            (r"^[·✢✳✶✻✽*] \S[^…]*…( \(|$)", 10),
            (r"(?i)esc to interrupt", 10, "below"),
        ),
        composer=r"^[\s│]*[>❯](\s|$)",
        prompt=r"^[\s│]*[>❯]\s?",
        continuation=r"^(\s{2,}|│\s{2,})[^\s─╰│]",
        composer_above=r"─{3}",
        # the idle hint, and the hint drawn in the empty composer while a submitted line
        # waits in the queue (2.1.197): neither is anyone's text
        empty=(r'^Try ".*"$', r"^Press up to edit queued messages$"),
        placeholder=r"\[Pasted text #\d+",
    ),
    "codex": AgentCues(
        awaiting=(
            (r"^\s*[›▌]\s*\d+\.\s", 20),
            (r"(?i)\[y/n\]\s*$", 20),
            (r"^\s*Press enter to confirm or esc to cancel", 20),
            (r"enter to submit answer", 20),
            (r"^\s*Question \d+/\d+", 20),
        ),
        working=(
            (r"(?i)^[•◦]\s+\S[^()]*\(\d[^()]*esc to interrupt[^()]*\)", 10),
            (r"(?i)esc to interrupt", 10, "below"),
        ),
        composer=r"^[›▌](\s|$)",
        prompt=r"^[›▌]\s?",
        continuation=r"^(\s{2}\S|▌)",
        composer_above=r"^(?!▌)",
        not_composer=r"^\s*[›▌]\s*\d+\.\s",
        empty=tuple("^" + "".join("\\" + ch if ch in "{}?" else ch for ch in hint) + "$" for hint in _CODEX_HINTS),
        starting=((r"^([•◦]\s+)?Waiting for startup\b", 10), (r"^\s*Waiting for startup\b", 10, "below")),
        placeholder=r"\[Pasted Content \d+ chars\]",
        # codex draws at most its footer (the model line, the key hints) under the box; a
        # `›` row with more under it is the transcript's echo of a submitted line, above an
        # approval or question overlay (tests/fixtures/screens/codex-0.171.0)
        composer_window=4,
    ),
    "opencode": AgentCues(
        awaiting=(
            (r"^[\s┃]*(△\s*)?Permission required", 30),
            (r"^[\s┃]*Allow once\s+Allow always\s+Reject", 30),
            (r"^[\s┃]*(△\s*)?Reject permission", 30),
            # the confirmation "Allow always" leads to: its title and its two buttons
            (r"^[\s┃]*(△\s*)?Always allow$", 30),
            (r"^[\s┃]*Confirm\s+Cancel(\s{2,}|$)", 30),
            (r"^[\s┃]*\d+\.\s+Type your own answer", 30),
            (r"^[\s┃]*↑↓\s+select", 30),
        ),
        working=((r"(?i)esc\s+(again\s+)?(to\s+)?interrupt", 10, "below"),),
        composer=r"^\s*┃\s*$",
        prompt=r"^\s*┃\s*",
        continuation=r"^\s*┃",
        composer_above=r"^(?!\s*┃)",
        footer_rows=1,
        empty=(r'^(Ask anything|Run a command)(\.\.\.|…) ".*"$',),
        box_dialog=(
            (r"^\s*┃\s*(△\s*)?Permission required$", r"^\s*┃\s+Allow once\s+Allow always\s+Reject\b"),
            (r"^\s*┃\s*(△\s*)?Always allow$", r"^\s*┃\s+Confirm\s+Cancel\b"),
            (r"^\s*┃\s*1\.\s", r"^\s*┃\s*↑↓\s+select\b"),  # the question dialog (1.18.33)
        ),
        box_edge=r"^\s*╹▀+$",
        placeholder=r"\[Pasted ~\d+ lines\]",
    ),
    "standin": AgentCues(
        awaiting=((r"^\s*❯\s+\d+\.\s", 20), (r"^Do you want to proceed\?$", 20)),
        working=((r"^working… \(esc to interrupt\)$", 10),),
        composer=r"^>(\s|$)",
        prompt=r"^>\s?",
        continuation=r"^  [^┊]",
        composer_above=r"─{3,}$",  # a rule ends the row above (tmux may join a full row to it)
        empty=(r'^Try ".*"$',),
        starting=((r"^Waiting for startup$", 10),),
    ),
}

# CSI, OSC (to BEL or ST, never past its row: an unterminated one must not swallow the
# rows below it, a dialog's included) and the two-byte ESC forms, as ``capture -e`` emits them.
_ANSI = r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b\n]*(\x07|\x1b\\)?|[@-_])"

_compiled: dict[str, re.Pattern[str]] = {}


def classify(agent: str, screen_text: str) -> str:
    """The state of a pane running ``agent`` whose screen shows ``screen_text``."""
    cues = CUES.get(agent)
    if cues is None:
        return PaneState.UNKNOWN
    lines = _agent_lines(cues, screen_text)
    box = _box_span(cues, lines)
    if _matches(cues.awaiting, lines, box, below_only=True):
        return PaneState.AWAITING_USER
    if _matches(cues.working, lines, box):
        return PaneState.WORKING
    return PaneState.IDLE if box is not None else PaneState.UNKNOWN


def starting(agent: str, screen_text: str) -> bool:
    """Whether the screen shows ``agent`` drawn but not yet taking input (codex's
    ``Waiting for startup``): typing now would be held, or lost."""
    cues = CUES.get(agent)
    if cues is None or not cues.starting:
        return False
    lines = _agent_lines(cues, screen_text)
    return _matches(cues.starting, lines, _box_span(cues, lines))


def input_box(agent: str, screen_text: str) -> list[str] | None:
    """The rows of the agent's input box, or None when the screen shows none or the agent
    is unknown."""
    cues = CUES.get(agent)
    if cues is None:
        return None
    lines = _agent_lines(cues, screen_text)
    span = _box_span(cues, lines)
    return None if span is None else lines[span[0] : span[1]]


def box_text(agent: str, screen_text: str) -> str | None:
    """What is typed in the agent's input box, its rows joined by one space: ``""`` for an
    empty box (nothing, or only the agent's placeholder hint), None when no box shows.

    A capture with ANSI attributes (``capture(..., ansi=True)``) also tells a hint the
    table does not know: text drawn only dim (SGR 2) is a placeholder, never typed text."""
    cues = CUES.get(agent)
    if cues is None:
        return None
    lines = _agent_lines(cues, screen_text)
    span = _box_span(cues, lines)
    if span is None:
        return None
    rows = lines[span[0] : span[1]]
    if "\x1b" in screen_text and _dim_only(cues, rows, screen_text.splitlines()[span[0] : span[1]]):
        return ""
    return _text_of(cues, rows)


def _agent_lines(cues: AgentCues | None, screen_text: str) -> list[str]:
    """:func:`screen_lines`, with a panel drawn beside the input box cut off: above the
    box's bottom border (``box_edge``), text beyond the border's width is another panel's
    (opencode's session sidebar shares the box's rows), where the box's own last column is
    blank. Text running across the edge is the box's own (a narrower drawing)."""
    lines = screen_lines(screen_text)
    if cues is None or cues.box_edge is None:
        return lines
    border = _regex(cues.box_edge)
    bottom = next((i for i in range(len(lines) - 1, -1, -1) if border.search(lines[i])), None)
    if bottom is None:
        return lines
    edge = len(lines[bottom])
    for i in range(bottom):
        row = lines[i]
        if len(row) > edge and row[edge - 1] == " ":
            lines[i] = row[:edge].rstrip()
    return lines


def outside_box(agent: str, screen_text: str) -> list[str]:
    """The screen's rows that are not in the agent's input box (transcript, queue,
    status and footer rows)."""
    cues = CUES.get(agent)
    lines = _agent_lines(cues, screen_text)
    span = _box_span(cues, lines) if cues is not None else None
    return lines if span is None else lines[: span[0]] + lines[span[1] :]


def screen_lines(screen_text: str) -> list[str]:
    """The screen's rows with ANSI sequences and trailing blanks removed (blank rows kept:
    they separate the input box from what is above it)."""
    if "\x1b" in screen_text:
        screen_text = _regex(_ANSI).sub("", screen_text)
    return [line.rstrip() for line in screen_text.splitlines()]


def _box_span(cues: AgentCues, lines: list[str]) -> tuple[int, int] | None:
    """(first row, row after the last) of the input box: the last composer row, with the
    continuation rows under it; its last row must be within ``composer_window`` non-blank
    rows of the bottom."""
    composer = _regex(cues.composer)
    above = _regex(cues.composer_above) if cues.composer_above else None
    rejected = _regex(cues.not_composer) if cues.not_composer else None
    nonblank = [i for i, line in enumerate(lines) if line.strip()]
    for start in range(len(lines) - 1, -1, -1):
        row = lines[start]
        if not composer.search(row) or (rejected is not None and rejected.search(row)):
            continue
        if above is not None and not above.search(lines[start - 1] if start else ""):
            continue
        end = start + 1
        if cues.continuation:
            more = _regex(cues.continuation)
            while end < len(lines) and lines[end].strip() and more.search(lines[end]):
                end += 1
        if sum(i >= end for i in nonblank) >= cues.composer_window:
            return None  # scrolled up: history, not the live box
        for dialog in cues.box_dialog:
            if all(any(_regex(cue).search(row) for row in lines[start:end]) for cue in dialog):
                return None  # a dialog in the box's frame: nothing here takes typed text
        return start, end
    return None


def _text_of(cues: AgentCues, rows: list[str]) -> str:
    prompt = _regex(cues.prompt)
    texts = [prompt.sub("", rows[0], count=1)] + [row.lstrip(" \t│▌┃") for row in rows[1:]]
    texts = [text.rstrip(" \t│").strip() for text in texts]
    texts = [text for text in texts if text]
    if cues.footer_rows:
        texts = texts[: -cues.footer_rows]
    text = " ".join(texts)
    if any(_regex(hint).search(text) for hint in cues.empty):
        return ""
    return text


def _dim_only(cues: AgentCues, rows: list[str], raw_rows: list[str]) -> bool:
    """Whether every character typed in the box (after the prompt, outside the footer rows)
    is drawn dim, and there is at least one."""
    prompt = _regex(cues.prompt)
    seen = False
    content = [i for i, row in enumerate(rows) if row.strip()]
    if cues.footer_rows:
        content = content[: -cues.footer_rows]
    for i in content:
        row = rows[i]
        skip = len(row) - len(prompt.sub("", row, count=1)) if i == 0 else len(row) - len(row.lstrip(" \t│▌┃"))
        for ch, dim in _cells(raw_rows[i])[skip : len(row)]:
            if ch.isspace() or ch in "│┃▌":
                continue
            if not dim:
                return False
            seen = True
    return seen


def _cells(raw: str) -> list[tuple[str, bool]]:
    """The visible characters of a captured row with whether each is drawn dim."""
    ansi = _regex(_ANSI)
    cells: list[tuple[str, bool]] = []
    dim = False
    i = 0
    while i < len(raw):
        if raw[i] == "\x1b":
            found = ansi.match(raw, i)
            if found:
                sequence = found.group(0)
                if sequence.startswith("\x1b[") and sequence.endswith("m"):
                    codes = (sequence[2:-1] or "0").replace(":", ";").split(";")
                    k = 0
                    while k < len(codes):
                        code = codes[k]
                        if code in ("38", "48", "58"):  # a colour: skip its parameters
                            k += 2 if codes[k + 1 : k + 2] == ["5"] else 4 if codes[k + 1 : k + 2] == ["2"] else 0
                        elif code in ("0", ""):
                            dim = False
                        elif code == "2":
                            dim = True
                        elif code == "22":
                            dim = False
                        k += 1
                i = found.end()
                continue
        cells.append((raw[i], dim))
        i += 1
    return cells


def _matches(table: tuple[Cue, ...], lines: list[str], box: tuple[int, int] | None, below_only: bool = False) -> bool:
    """Whether a cue of ``table`` matches a row outside the input box within its window."""
    numbered = [(i, line) for i, line in enumerate(lines) if line.strip()]
    for cue in table:
        pattern, window = cue[0], cue[1]
        below = below_only or (len(cue) > 2 and cue[2] == "below")
        regex = _regex(pattern)
        for i, line in numbered[-window:]:
            if box is not None and (i < box[1] if below else box[0] <= i < box[1]):
                continue
            if regex.search(line):
                return True
    return False


def _regex(pattern: str) -> re.Pattern[str]:
    regex = _compiled.get(pattern)
    if regex is None:
        import re

        regex = _compiled[pattern] = re.compile(pattern)
    return regex
