"""Reading a pane's state from its last lines (§4.8).

Every decision about typing looks at the screen: hold when the agent waits for its user
(typing there would answer the prompt: a digit picks an option, Enter approves), and
confirm a submission by seeing the typed text leave the input box. The cues of every
agent live in the one table ``CUES`` below; each cue is a regular expression and the
number of trailing non-blank lines it is searched in. Dialog cues are anchored at the
start of their row where the dialog draws them there, so that a message quoted in the
transcript (``❯ [cafleet msg …] Esc to cancel …``) does not read as a dialog. The order of
checks is fixed: awaiting the user, then working, then idle; a screen that matches
nothing, or an agent the table does not know, is ``unknown`` — never ``idle``.

``input_line`` matches a row of the agent's input box. The input box is the last run of
consecutive matching rows (blank rows break a run): one row for claude (``❯``/``>``
composer under a rule) and current codex (``›``), every row of the box for opencode
(left border ``┃``) and older codex (``▌``). :func:`input_box` returns it. ``placeholder``
matches what an agent shows in the box instead of a long paste it collapsed
(``[Pasted text #1 +3 lines]``, ``[Pasted Content 1003 chars]``, ``[Pasted ~3 lines]``).

Sources of the cues (screen text read, never code copied):

* claude: the spec's table; permission and question dialogs as captured from Claude Code
  2.x in public issue threads and test fixtures of tmux tools (``Do you want to
  proceed?`` over ``❯ 1. Yes``, footers ``Esc to cancel · Tab to amend`` and ``Enter to
  select · ↑/↓ to navigate · Esc to cancel``, the ``Enter to continue · Esc to cancel``
  checkpoint dialog); the spinner row ``… (4s · ↓ 120 tokens · esc to interrupt)``; the
  composer ``❯`` (2.x) or ``│ >`` (1.x box).
* codex: the snapshot tests of openai/codex's TUI: the approval overlay (``› 1. Yes, …``
  and ``Press enter to confirm or esc to cancel``), the user-input question overlay
  (``Question 1/2``, ``› 2. Option``, ``enter to submit answer``), the composer (``›``;
  ``▌`` on every row in older releases), the status row ``Working (12s • esc to
  interrupt)``; ``[y/n]`` from the spec.
* opencode: its TUI source (anomalyco/opencode, routes/session/permission.tsx,
  question.tsx, component/prompt): the permission prompt ``△ Permission required`` with
  the buttons ``Allow once  Allow always  Reject`` and the follow-up ``Reject
  permission``; the question dialog (``3. Type your own answer``, ``↑↓ select``); the
  busy hint ``esc interrupt`` / ``esc again to interrupt``; the prompt box
  drawn with a ``┃`` left border.
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


Cue = tuple[str, int]  # (regular expression, searched in the last N non-blank lines)


@dataclass(frozen=True)
class AgentCues:
    awaiting: tuple[Cue, ...]
    working: tuple[Cue, ...]
    idle: tuple[Cue, ...]
    input_line: str
    placeholder: str | None = None  # what the box shows instead of text it collapsed


CUES: dict[str, AgentCues] = {
    "claude": AgentCues(
        awaiting=(
            (r"^[\s│]*❯\s+\d+\.\s", 20),
            (r"^\s*Esc to cancel · Tab to amend", 20),
            (r"^\s*Enter to (select|continue) · .*Esc to cancel", 20),
        ),
        working=((r"(?i)esc to interrupt", 10), (r"^[·✢✳✶✻✽*] \S[^…]*…( \(|$)", 10)),
        idle=((r"^[\s│]*[>❯](\s.*)?$", 6),),
        input_line=r"^[\s│]*[>❯](\s|$)",
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
        working=((r"(?i)esc to interrupt", 10),),
        idle=((r"^\s*[›▌](\s.*)?$", 8),),
        input_line=r"^\s*[›▌](\s|$)",
        placeholder=r"\[Pasted Content \d+ chars\]",
    ),
    "opencode": AgentCues(
        awaiting=(
            (r"^[\s┃]*△\s*Permission required", 30),
            (r"^[\s┃]*Allow once\s+Allow always\s+Reject", 30),
            (r"^[\s┃]*△\s*Reject permission", 30),
            (r"^[\s┃]*\d+\.\s+Type your own answer", 30),
            (r"^[\s┃]*↑↓\s+select", 30),
        ),
        working=((r"(?i)esc\s+(again\s+)?(to\s+)?interrupt", 10),),
        idle=((r"^\s*┃(\s.*)?$", 8),),
        input_line=r"^\s*┃",
        placeholder=r"\[Pasted ~\d+ lines\]",
    ),
    "standin": AgentCues(
        awaiting=((r"^\s*❯\s+\d+\.\s", 20), (r"^Do you want to proceed\?$", 20)),
        working=((r"^working… \(esc to interrupt\)$", 10),),
        idle=((r"^>(\s.*)?$", 3),),
        input_line=r"^>(\s|$)",
    ),
}

# CSI, OSC (to BEL or ST) and the two-byte ESC forms, as ``capture -e`` emits them.
_ANSI = r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)?|[@-_])"

_compiled: dict[str, re.Pattern[str]] = {}


def classify(agent: str, screen_text: str) -> str:
    """The state of a pane running ``agent`` whose screen shows ``screen_text``."""
    cues = CUES.get(agent)
    if cues is None:
        return PaneState.UNKNOWN
    lines = [line for line in screen_lines(screen_text) if line.strip()]
    for state, table in (
        (PaneState.AWAITING_USER, cues.awaiting),
        (PaneState.WORKING, cues.working),
        (PaneState.IDLE, cues.idle),
    ):
        for pattern, window in table:
            regex = _regex(pattern)
            if any(regex.search(line) for line in lines[-window:]):
                return state
    return PaneState.UNKNOWN


def input_box(agent: str, screen_text: str) -> list[str] | None:
    """The rows of the agent's input box (the last run of input-line rows), or None when
    the screen shows none or the agent is unknown."""
    cues = CUES.get(agent)
    if cues is None:
        return None
    regex = _regex(cues.input_line)
    lines = screen_lines(screen_text)
    end = len(lines)
    while end and not regex.search(lines[end - 1]):
        end -= 1
    if not end:
        return None
    start = end - 1
    while start and regex.search(lines[start - 1]):
        start -= 1
    return lines[start:end]


def screen_lines(screen_text: str) -> list[str]:
    """The screen's rows with ANSI sequences and trailing blanks removed (blank rows kept:
    they separate the input box from what is above it)."""
    if "\x1b" in screen_text:
        screen_text = _regex(_ANSI).sub("", screen_text)
    return [line.rstrip() for line in screen_text.splitlines()]


def _regex(pattern: str) -> re.Pattern[str]:
    regex = _compiled.get(pattern)
    if regex is None:
        import re

        regex = _compiled[pattern] = re.compile(pattern)
    return regex
