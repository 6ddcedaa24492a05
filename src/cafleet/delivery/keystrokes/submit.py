"""Typing a preview or a prompt into a coding agent's input box and submitting it (docs/delivery.md).

One line, never two. The preview is rendered as a header and a body, but a newline means a
different thing in every input box: Enter-like in some, "insert line break" (Ctrl-J,
Shift-Enter, bracketed paste) in others, and a multi-line paste is collapsed into a
``[Pasted text #1 +1 lines]`` placeholder by claude and opencode, hiding the text we need
to see to confirm the submission. Bracketed paste would also mean typing ESC bytes, which
claude reads as "interrupt" when they arrive split. So the text is flattened: every line
break, including the one between header and body, is typed as the visible mark ``⏎``,
which the body already uses for its own line breaks. The one typed line starts with the
header, so every partial or repeated input still carries its message id.

The typed text is only ever ours, and Enter only ever submits our text. The steps, each
bounded in time:

1. capture the pane. A preview whose header already shows in the transcript or queue was
   taken by the agent after an earlier attempt stopped waiting for its echo (a lagging
   agent's late Enter): it counts as submitted, and nothing is typed (a prompt line, which
   may be meant twice, is always typed). With ``earlier`` (the caller's record says an
   earlier attempt pressed Enter for this preview in this pane) the pane's history is
   searched too, ``HISTORY_LINES`` rows back: a long answer may have pushed the echo out
   of the captured rows; and the caller's ``recorded()`` may say the agent's own record
   holds it (opencode's database: it redraws in place and leaves no history). Otherwise type nothing when it shows a prompt awaiting its user
   (:class:`PaneAwaitingUser`: a digit would pick an option, Enter would approve), when it
   shows no input box of that agent or the agent is still starting (:class:`PaneNotReady`:
   a shell, ``sleep``, codex's ``Waiting for startup``), or when the box already holds
   text (:class:`PaneInputBusy`: a person or the agent is composing; it is never cleared,
   overwritten or submitted). The exception is our own unedited text from an earlier
   attempt: this very line whole (drawn after an attempt gave up) is submitted as it
   stands, steps 2 and 3 skipped; the start of this very line (cut short by a killed
   sender), or another preview of ours that ``ours`` names (its header names a message to
   this member, the rest is the start of that preview, cut with ``…`` or not), is removed
   with as many BackSpaces as it can hold, and the line typed whole;
2. type the line literally (``send-keys -l``: never key names), after
   :func:`~cafleet.delivery.keystrokes.preview.flatten`, so no control character is ever sent. A line
   whose last word holds ``@``, ``$`` or ``/`` gets one trailing space, so that no file-
   mention or command completion is open when Enter is pressed (the first Enter would
   accept the completion, not submit);
3. wait ``settle`` seconds, then up to ``echo_timeout`` for the line's first characters
   (the *marker*, ``[cafleet msg <id> from <sender> …`` for a preview) to show in the
   agent's input box (:func:`~cafleet.delivery.keystrokes.screen.input_box`). If they never show, no
   Enter is pressed: the typed characters are removed where that is safe (the box shows
   exactly our line: one BackSpace per typed character, never Escape) and the attempt fails;
4. if a prompt awaiting the user appeared meanwhile, stop before Enter (rows that are
   just our own typed text are ignored, so a hostile body cannot fake a prompt);
5. press Enter and watch for the marker to show *outside* the box — echoed into the
   transcript or listed in the agent's queue — more often than before typing. That is the
   confirmation. While the text stays in the box, Enter is retried up to
   ``enter_retries`` times, ``confirm_timeout`` apart; when it left the box but never
   reached the transcript (claude clears its composer while it starts), the attempt fails
   as *vanished*, without another Enter, once ``VANISH_WAIT`` confirm timeouts passed
   with no echo (an agent on a loaded machine may take seconds to draw one; calling the
   text vanished too early would owe it again and type it twice);
6. otherwise remove our text where safe and raise :class:`SubmissionNotConfirmed`.

A failed attempt leaves the message owed: the next send, ``message wait`` or ``fleet
watch`` retries it. Escape is never sent: it would discard a human's half-typed input or
dismiss a permission prompt.

The settle delay defaults to 0.3 s, overridable with ``CAFLEET_SUBMIT_SETTLE`` (seconds):
codex takes an Enter arriving within ~120 ms of fast typed input as a newline, claude's
input box needs a moment after a burst before Enter counts as submit; 0.3 s covers both
with margin at a cost paid once per message.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from typing import Any, TypeVar

from cafleet.config import DEFAULT_SUBMIT_SETTLE
from cafleet.delivery.keystrokes import screen
from cafleet.delivery.keystrokes.preview import ELLIPSIS, NEWLINE_MARK, flatten
from cafleet.errors import CafleetError, UsageError
from cafleet.faults import NO_HOOKS
from cafleet.mux.base import Multiplexer

TYPE_CHECKING = False
if TYPE_CHECKING:
    from cafleet.faults import Hooks

# How long typed text may take to show in the box before the attempt gives up without
# Enter. Generous: an agent on a loaded machine can draw it seconds late; text drawn after
# the attempt gave up stays in the box, where the next attempt submits it (step 1).
DEFAULT_ECHO_TIMEOUT = 6.0
DEFAULT_CONFIRM_TIMEOUT = 2.0
VANISH_WAIT = 3  # confirm timeouts to wait for the echo of a text that left the box
CAPTURE_LINES = 50
# How far back the retry of a preview that had an Enter looks for its echo (step 1).
HISTORY_LINES = 2000
MARKER_LEN = 24
PREVIEW_HEAD = "[cafleet msg "  # how every preview line starts
_POLL = 0.05
T = TypeVar("T")
# What a row of the input box may start with besides the typed text itself.
_BOX_GLYPHS = " \t│┃▌›>❯"


class PaneAwaitingUser(CafleetError):
    """The pane shows a permission prompt or a question for its user: nothing is typed."""


class PaneNotReady(CafleetError):
    """The pane shows no input box of its agent, or the agent is still starting: nothing
    is typed."""


class PaneInputBusy(CafleetError):
    """The agent's input box already holds text someone else typed: the preview is held
    and nothing is typed; the text is left as it is."""


class SubmissionNotConfirmed(CafleetError):
    """The typed text was not seen leaving the agent's input box into its transcript or
    queue after Enter."""


class Pacing:
    """How a submission is paced (steps 3 and 5): ``settle`` seconds after typing, up to
    ``echo_timeout`` for the typed line to show, ``enter_retries`` further Enter presses
    ``confirm_timeout`` apart. The same for a preview and a prompt. ``clock`` is what
    measures and waits those seconds: the real one (:class:`Clock`) unless a test gives
    its own."""

    __slots__ = ("clock", "confirm_timeout", "echo_timeout", "enter_retries", "settle")

    def __init__(
        self,
        settle: float = DEFAULT_SUBMIT_SETTLE,
        enter_retries: int = 3,
        confirm_timeout: float = DEFAULT_CONFIRM_TIMEOUT,
        echo_timeout: float = DEFAULT_ECHO_TIMEOUT,
        clock: Clock | None = None,
    ) -> None:
        self.settle, self.enter_retries = settle, enter_retries
        self.confirm_timeout, self.echo_timeout = confirm_timeout, echo_timeout
        self.clock = clock


# --- the steps and what carries them out ---------------------------------------------------
#
# A submission's decisions are generators of steps (below: :func:`_submission`,
# :func:`_ready`, :func:`_typing`, :func:`_outcome`, :func:`_erase_ours`, ...). They never
# touch the pane or the clock: each yields what it needs done (an action) and is sent back
# what came of it (a screen, a pair ``(held, screen)``, a callback's value); what it
# decides from a screen is a pure function of that screen and of what it saw before.
# :func:`run` is the one loop that carries the actions out on a multiplexer's pane, so
# tests can drive the same steps against recorded screens (tests/support/fake_mux.py).


class Capture:
    """Read the pane, ``lines`` rows (with its escapes when ``ansi``): the screen comes back."""

    __slots__ = ("ansi", "lines")

    def __init__(self, lines: int, ansi: bool = False) -> None:
        self.lines, self.ansi = lines, ansi


class Watch:
    """Read the pane (``CAPTURE_LINES`` rows) until ``check(screen)`` holds or ``timeout``
    seconds pass, ``_POLL`` apart: ``(held, the last screen)`` comes back."""

    __slots__ = ("ansi", "check", "timeout")

    def __init__(self, timeout: float, check: Callable[[str], bool], ansi: bool = False) -> None:
        self.timeout, self.check, self.ansi = timeout, check, ansi


class Keys:
    """Send keys to the pane: ``text`` typed literally, else one Enter (``enter``), else
    ``backspaces`` BackSpaces."""

    __slots__ = ("backspaces", "enter", "text")

    def __init__(self, text: str | None = None, enter: bool = False, backspaces: int = 0) -> None:
        self.text, self.enter, self.backspaces = text, enter, backspaces


class Pause:
    """Wait ``seconds`` (the settle delay)."""

    __slots__ = ("seconds",)

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds


class Call:
    """Ask the caller (its callbacks): ``function(*args)``'s value comes back."""

    __slots__ = ("args", "function")

    def __init__(self, function: Callable[..., Any], *args: Any) -> None:
        self.function, self.args = function, args


ENTER = Keys(enter=True)
Action = Capture | Watch | Keys | Pause | Call
Steps = Generator[Action, Any, T]


class Clock:
    """The real clock a submission waits on: ``monotonic()`` and ``sleep(seconds)``."""

    __slots__ = ()

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


def run(steps: Steps[T], mux: Multiplexer, pane_id: str, clock: Clock | None = None) -> T:
    """Carry out ``steps`` on ``pane_id``, one action at a time; their value comes back
    (and what they raise, or what the multiplexer raises, goes up)."""
    clock = clock or Clock()
    reply: Any = None
    while True:
        try:
            action = steps.send(reply)
        except StopIteration as done:
            return done.value
        if isinstance(action, Watch):
            reply = _watch(mux, pane_id, action, clock)
        elif isinstance(action, Capture):
            reply = mux.capture(pane_id, action.lines, ansi=action.ansi)
        elif isinstance(action, Keys):
            if action.text is not None:
                mux.type_text(pane_id, action.text)
            elif action.enter:
                mux.press_enter(pane_id)
            else:
                mux.press_backspace(pane_id, action.backspaces)
            reply = None
        elif isinstance(action, Pause):
            clock.sleep(action.seconds)
            reply = None
        else:
            reply = action.function(*action.args)


def _watch(mux: Multiplexer, pane_id: str, watch: Watch, clock: Clock) -> tuple[bool, str]:
    """Capture until ``watch.check`` holds or its timeout passes; the last capture comes back."""
    deadline = clock.monotonic() + watch.timeout
    while True:
        shown = mux.capture(pane_id, CAPTURE_LINES, ansi=watch.ansi)
        if watch.check(shown):
            return True, shown
        remaining = deadline - clock.monotonic()
        if remaining <= 0:
            return False, shown
        clock.sleep(min(_POLL, remaining))


def submit_preview(
    mux: Multiplexer,
    pane_id: str,
    text: str,
    agent: str,
    *,
    pacing: Pacing | None = None,
    ours: Callable[[str], str | None] | None = None,
    earlier: bool = False,
    recorded: Callable[[], bool] | None = None,
    on_enter: Callable[[], None] | None = None,
    hooks: Hooks = NO_HOOKS,
) -> None:
    """Type the rendered preview ``text`` as one line into ``pane_id`` and submit it.

    ``ours(box_text)``, when given, names another preview of ours the box may still hold
    (step 1): the whole uncut line of the message its header names, or None. A preview
    whose header already shows in the transcript or queue was taken by the agent after an
    earlier attempt gave up (step 1): it counts as submitted and is not typed again; with
    ``earlier`` (an earlier attempt pressed Enter for it in this pane) the pane's history
    is searched for the header too, up to ``HISTORY_LINES`` rows back. ``recorded()``,
    when given, says whether the agent's own record of what it was sent already holds this
    preview (opencode, which draws in place and leaves no history to search): then too it
    counts as submitted. ``on_enter`` is called once, right before
    the first Enter. ``pacing`` defaults to ``Pacing()``."""
    pacing = pacing or Pacing()
    steps = _submission(
        pane_id,
        flatten(text),
        agent,
        pacing,
        ours,
        once=True,
        earlier=earlier,
        recorded=recorded,
        on_enter=on_enter,
        hooks=hooks,
    )
    run(steps, mux, pane_id, pacing.clock)


def type_prompt(
    mux: Multiplexer,
    pane_id: str,
    text: str,
    agent: str,
    *,
    pacing: Pacing | None = None,
    hooks: Hooks = NO_HOOKS,
) -> None:
    """Type one prompt line (``member prompt``) into ``pane_id`` and submit it."""
    line = flatten(text)
    if not line.strip():
        raise UsageError("the prompt is empty; give the text to type.")
    pacing = pacing or Pacing()
    run(_submission(pane_id, line, agent, pacing, hooks=hooks), mux, pane_id, pacing.clock)


def submit_shell_line(
    mux: Multiplexer,
    pane_id: str,
    line: str,
    agent: str,
    settle: float,
    *,
    echo_timeout: float = DEFAULT_ECHO_TIMEOUT,
    hooks: Hooks = NO_HOOKS,
) -> None:
    """Type ``line`` (``! <command>``: the agent's own shell mode) into the agent's empty
    input box and press Enter once (``member exec``'s dispatch; docs/delivery.md).

    The gate is a preview's (step 1: nothing is typed into a dialog, onto someone's text,
    or while the agent starts). The ``!`` switches the box into the agent's shell mode,
    which each agent draws its own way (claude redraws its prompt, opencode's ``!``
    vanishes from the box), so the echo looked for is the rest of the line, on the last
    rows of the screen; Enter is pressed once it shows. Whether the command started is not
    read from the screen: the command itself records that (``member exec-run``), so Enter
    is never retried here."""
    run(_shell_line(pane_id, line, agent, settle, echo_timeout, hooks), mux, pane_id)


def _shell_line(pane_id: str, line: str, agent: str, settle: float, echo_timeout: float, hooks: Hooks) -> Steps[None]:
    rest = line.lstrip("!").strip()

    def shows(shown: str) -> bool:
        rows = [row for row in screen.screen_lines(shown) if row.strip()][-SHELL_ROWS:]
        return any(rest in row for row in rows) or "".join(rest.split()) in "".join("".join(r.split()) for r in rows)

    before = yield Capture(CAPTURE_LINES, ansi=True)
    box = screen.box_text(agent, before)
    if (
        (box is None or _is_whole(box, rest))
        and shows(before)
        and screen.classify(agent, before) != screen.PaneState.AWAITING_USER
        and not screen.starting(agent, before)
    ):
        # Our own line, left in the agent's shell mode by an attempt that gave up before
        # Enter (it drew too late): no input box shows while that mode holds it, so it would
        # hold every later attempt (and every preview) for good. It names this exec only,
        # which runs once whatever happens, so it is submitted as it stands.
        yield ENTER
        return
    yield from _ready(pane_id, agent, before, line)
    yield Keys(line)
    hooks.pause("submit.typed")  # the test hooks' point (cafleet.faults): typed, Enter not pressed
    yield Pause(settle)
    seen, shown = yield Watch(echo_timeout, shows)
    if not seen:
        raise SubmissionNotConfirmed(
            f"the typed line never showed in the {agent} input box of pane {pane_id}, so Enter was not "
            "pressed; what was typed is left as it is."
        )
    if screen.classify(agent, _without_typed(shown, rest)) == screen.PaneState.AWAITING_USER:
        raise PaneAwaitingUser(
            f"pane {pane_id} began showing a prompt awaiting its user while the line was typed; "
            "Enter was not pressed and the typed line is still in that pane."
        )
    yield ENTER


SHELL_ROWS = 8  # the last non-blank rows where a shell-mode line must show before Enter


def with_terminator(line: str) -> str:
    """``line`` as typed: with one trailing space when its last word holds ``@``, ``$`` or
    ``/`` (a file mention, a skill or a command the agent would offer to complete)."""
    last = line.replace(NEWLINE_MARK, " ").rsplit(None, 1)[-1] if line.strip() else ""
    if line[-1:].isspace() or not any(ch in last for ch in "@$/"):
        return line
    return line + " "


def _submission(
    pane_id: str,
    line: str,
    agent: str,
    pacing: Pacing,
    ours: Callable[[str], str | None] | None = None,
    once: bool = False,
    earlier: bool = False,
    recorded: Callable[[], bool] | None = None,
    on_enter: Callable[[], None] | None = None,
    hooks: Hooks = NO_HOOKS,
) -> Steps[None]:
    """The steps of one submission (the module's steps 1 to 6) of ``line`` into ``pane_id``."""
    settle, enter_retries = pacing.settle, pacing.enter_retries
    confirm_timeout, echo_timeout = pacing.confirm_timeout, pacing.echo_timeout
    if settle < 0 or enter_retries < 0 or confirm_timeout < 0 or echo_timeout < 0:
        raise ValueError("settle, enter_retries and the timeouts must not be negative")
    line = with_terminator(line)
    marker = _marker(line)
    cues = screen.CUES.get(agent)
    placeholder = cues.placeholder if cues else None

    before = yield Capture(CAPTURE_LINES, ansi=True)
    if once and _taken_already(agent, before, marker, placeholder):
        return
    if once and earlier and _taken_already(agent, (yield Capture(HISTORY_LINES)), marker, placeholder):
        return  # its echo scrolled up out of the captured rows (a long answer followed it)
    if once and recorded is not None and (yield Call(recorded)):
        return  # the agent's own record holds it: taken, though its screen does not show it
    before = yield from _ready(pane_id, agent, before, line, ours)
    ends = (marker, _tail_marker(line))
    echoes = (_echoes(agent, before, ends[:1]), _echoes(agent, before, ends))
    # A placeholder already in the box before typing proves nothing about our text.
    box_before = screen.input_box(agent, before)
    if placeholder and box_before and _holds(box_before, None, placeholder):
        placeholder = None

    if _is_whole(screen.box_text(agent, before), line):
        # This very line, whole and unedited, drawn after an earlier attempt gave up: it
        # is submitted as it stands (typing it again would take as long to draw, and give
        # up again). Waiting longer for a slow draw instead would press Enter into an agent
        # that lags, whose late submission after the confirmation gave up types it twice.
        seen, shown = True, before
    else:
        seen, shown = yield from _typing(agent, line, settle, echo_timeout, marker, placeholder, hooks)
    if not seen:
        removed = yield from _erase_ours(agent, shown, line)
        raise SubmissionNotConfirmed(
            f"the typed text never showed in the {agent} input box of pane {pane_id}, so "
            "Enter was not pressed" + ("; the typed text was removed." if removed else "."),
            pane=pane_id,
        )
    for presses in range(enter_retries + 1):
        if screen.classify(agent, _without_typed(shown, line)) == screen.PaneState.AWAITING_USER:
            raise PaneAwaitingUser(
                f"pane {pane_id} began showing a prompt awaiting its user while text was "
                "typed; Enter was not pressed and the typed text is still in that pane."
                if presses == 0
                else f"pane {pane_id} began showing a prompt awaiting its user before the "
                "submission was confirmed; Enter was not pressed again.",
                pane=pane_id,
            )
        if on_enter is not None:
            yield Call(on_enter)
            on_enter = None
        hooks.trace("submit.enter")
        yield ENTER
        outcome, shown = yield from _outcome(agent, ends, placeholder, echoes, confirm_timeout)
        if outcome == _ECHOED:
            return
        if outcome == _VANISHED:
            raise SubmissionNotConfirmed(
                f"the typed text vanished from the {agent} input box of pane {pane_id} without "
                "reaching its transcript or queue (the agent cleared its input, as it does "
                "while starting); Enter is not retried.",
                pane=pane_id,
            )
    removed = yield from _erase_ours(agent, shown, line)
    raise SubmissionNotConfirmed(
        f"the typed text was still in the input box of pane {pane_id} after "
        f"{enter_retries + 1} Enter presses; the submission is not confirmed"
        + ("; the typed text was removed." if removed else "."),
        pane=pane_id,
    )


def _typing(
    agent: str,
    line: str,
    settle: float,
    echo_timeout: float,
    marker: str,
    placeholder: str | None,
    hooks: Hooks,
) -> Steps[tuple[bool, str]]:
    """Type ``line`` and wait (after ``settle``) for the box to show it: (seen, the screen)."""
    yield Keys(line)
    # the test hooks' points (cafleet.faults): typed, Enter not pressed; bench/keeper_real.py's times
    hooks.pause("submit.typed")
    hooks.trace("submit.typed")
    yield Pause(settle)
    seen, shown = yield Watch(echo_timeout, lambda s: _box_holds(agent, s, marker, placeholder))
    hooks.trace("submit.shown" if seen else "submit.not_shown")
    return seen, shown


def gate(pane_id: str, agent: str, shown: str) -> str:
    """What the agent's input box on the screen ``shown`` holds ("" when empty), when
    typing may begin there; otherwise raise why not: :class:`PaneAwaitingUser` for a
    prompt awaiting its user, :class:`PaneNotReady` while the agent starts or when no
    input box of that agent shows."""
    if screen.classify(agent, shown) == screen.PaneState.AWAITING_USER:
        raise PaneAwaitingUser(
            f"pane {pane_id} shows a prompt awaiting its user, so nothing was typed; "
            "answer it in that pane and the message will be retried.",
            pane=pane_id,
        )
    if screen.starting(agent, shown):
        raise PaneNotReady(f"pane {pane_id} shows {agent} still starting, so nothing was typed.", pane=pane_id)
    text = screen.box_text(agent, shown)
    if text is None:
        raise PaneNotReady(
            f"pane {pane_id} does not show the {agent} input box (is that agent running there?), so nothing was typed.",
            pane=pane_id,
        )
    return text


def _ready(
    pane_id: str, agent: str, shown: str, line: str, ours: Callable[[str], str | None] | None = None
) -> Steps[str]:
    """Raise unless the pane shows the agent's empty input box (after removing a leftover
    start of ``line``, or of another preview of ours that ``ours`` names, from an earlier
    attempt); the screen that shows it comes back."""
    text = gate(pane_id, agent, shown)
    if not text or _is_whole(text, line):
        return shown  # empty, or this very line whole: submitted as it stands
    count = _leftover_count(text, line)
    if not count and ours is not None:
        count = _own_preview_count(text, (yield Call(ours, text)))
    if count:
        yield Keys(backspaces=count)
        cleared, shown = yield Watch(DEFAULT_ECHO_TIMEOUT, lambda s: screen.box_text(agent, s) == "", ansi=True)
        if cleared:
            return shown
    raise PaneInputBusy(
        f"held: input box has text in pane {pane_id} (someone is typing there), so nothing "
        "was typed and that text was left as it is.",
        pane=pane_id,
    )


def take_back(mux: Multiplexer, pane_id: str, text: str, agent: str) -> str:
    """After typing stopped part-way (the pane-input lock was lost), remove what this
    process typed of ``text`` (a preview or a prompt, as :func:`submit_preview` or
    :func:`type_prompt` typed it), under the lock again: only when the input box shows
    exactly that line or the start of it, with one BackSpace per typed character (the
    rule of a leftover, step 1), never Escape. What happened, as a phrase for the error."""
    return run(_taking_back(text, agent), mux, pane_id)


def _taking_back(text: str, agent: str) -> Steps[str]:
    line = with_terminator(flatten(text))
    box = screen.box_text(agent, (yield Capture(CAPTURE_LINES, ansi=True)))
    if not box:
        return "none of the typed text was left in the input box"
    count = _leftover_count(box, line)
    if not count:
        return "the input box holds other text, which was left as it is"
    yield Keys(backspaces=count)
    if (yield Watch(DEFAULT_ECHO_TIMEOUT, lambda s: screen.box_text(agent, s) == "", ansi=True))[0]:
        return "the typed text was taken back"
    return "the typed text could not be taken back (the input box did not clear)"


def _leftover_count(text: str, line: str) -> int:
    """How many BackSpaces remove ``text`` when the box shows only the start of our own
    ``line`` (for a preview, at least ``[cafleet msg <id> from``): the typed characters up to the end of the
    shown text, plus the blanks that may follow it unseen. 0 when it is anything else."""
    import re

    header = re.match(r"\[cafleet msg \d+ from ", line)
    if not text.startswith(header.group(0).rstrip() if header else _marker(line)):
        return 0
    want = "".join(text.split())
    seen = 0
    for index, ch in enumerate(line):
        if seen == len(want):
            end = index
            while end < len(line) and line[end].isspace():
                end += 1
            return end
        if ch.isspace():
            continue
        if ch != want[seen]:
            return 0
        seen += 1
    return len(line) if seen == len(want) else 0


def _is_whole(text: str | None, line: str) -> bool:
    """Whether the box's ``text`` is exactly our ``line``, every character of it (the box
    shows its rows joined by blanks)."""
    return text is not None and text != "" and "".join(text.split()) == "".join(line.split())


def _own_preview_count(text: str, whole: str | None) -> int:
    """How many BackSpaces remove ``text`` when it is one of our own previews, unedited:
    ``whole`` is that preview's uncut line, and the box shows its start, or its start cut
    with ``…`` (typed by a sender with a shorter ``CAFLEET_MAX_TEXT_LEN``). Counted as for a
    leftover (:func:`_leftover_count`), plus the ``…`` and the blank a line may end with
    (:func:`with_terminator`): a BackSpace too many in an emptied box removes nothing. 0
    when ``whole`` is None or the text is anything else."""
    if not whole:
        return 0
    count = _leftover_count(text, with_terminator(whole))
    if count or not text.endswith(ELLIPSIS):
        return count
    cut = _leftover_count(text[: -len(ELLIPSIS)].rstrip(), whole)
    return cut + len(ELLIPSIS) + 1 if cut else 0


def _erase_ours(agent: str, shown: str, line: str) -> Steps[bool]:
    """Remove our typed ``line`` when the box shows exactly that and nothing else: one
    BackSpace per typed character. Whether it was removed."""
    text = screen.box_text(agent, shown)
    if not text or "".join(text.split()) != "".join(line.split()):
        return False
    yield Keys(backspaces=len(line))
    cleared, _shown = yield Watch(DEFAULT_ECHO_TIMEOUT, lambda s: screen.box_text(agent, s) == "", ansi=True)
    return cleared


_ECHOED, _VANISHED, _IN_BOX = "echoed", "vanished", "in box"


def _outcome(
    agent: str,
    ends: tuple[str, str],
    placeholder: str | None,
    echoes: tuple[int, int],
    timeout: float,
) -> Steps[tuple[str, str]]:
    """After an Enter: watch until the line's first characters show outside the box more
    often than before typing (``echoes[0]``), or — once the box no longer holds them — its
    first or last characters do (``echoes[1]``: the start of a long echo may have scrolled
    away); that is the confirmation. Otherwise, when ``timeout`` passes: still in the box,
    or vanished (the box was seen without it, and it never reached the transcript or
    queue). Only a screen that shows the input box counts, so text in a hidden box is never
    taken for an echo."""
    marker = ends[0]
    left = False

    def check(shown: str) -> bool:
        nonlocal left
        box = screen.input_box(agent, shown)
        if box is None:  # no box to tell our text's rows from the transcript's: look again
            return False
        if _echoes(agent, shown, ends[:1]) > echoes[0]:
            return True
        if _holds(box, marker, placeholder):
            return False
        left = True
        return _echoes(agent, shown, ends) > echoes[1]

    echoed, shown = yield Watch(timeout, check)
    if not echoed and left:
        # It left the box: most likely taken, and an agent on a loaded machine may draw the
        # echo late. Calling it vanished too early would owe it again and type it twice.
        echoed, shown = yield Watch(timeout * (VANISH_WAIT - 1), check)
    if echoed:
        return _ECHOED, shown
    if _box_holds(agent, shown, marker, placeholder):
        return _IN_BOX, shown
    return (_VANISHED if left else _IN_BOX), shown


def _taken_already(agent: str, shown: str, marker: str, placeholder: str | None) -> bool:
    """Whether a line whose first characters name it uniquely (a preview's header names
    its message) already shows outside the input box: the agent took an earlier attempt's
    Enter after that attempt stopped waiting for the echo. Only a screen that shows the
    input box, not holding the line, counts, so a line still in a box never passes."""
    if screen.input_box(agent, shown) is None or _box_holds(agent, shown, marker, placeholder):
        return False
    return _echoes(agent, shown, (marker,)) > 0


def _echoes(agent: str, shown: str, pieces: tuple[str, ...]) -> int:
    """How many rows outside the input box (transcript and queue) show one of ``pieces``."""
    return sum(any(piece in row for piece in pieces) for row in screen.outside_box(agent, shown))


def _tail_marker(line: str) -> str:
    """The last characters of the typed line as a row would show them: at most
    ``MARKER_LEN``, after any zero-width character, without edge blanks."""
    import unicodedata

    text = line.strip()
    start = max(0, len(text) - MARKER_LEN)
    for i in range(len(text) - 1, start - 1, -1):
        if unicodedata.category(text[i]) in ("Mn", "Me", "Cf"):
            start = i + 1
            break
    return text[start:].lstrip() or text[-MARKER_LEN:]


def _marker(line: str) -> str:
    """The first characters of the typed line, as the input box will show them: at most
    ``MARKER_LEN``, cut before any zero-width character (ZWJ, combining mark), which a
    terminal may store differently, and without edge spaces, which a capture trims."""
    import unicodedata

    text = line.strip()
    end = min(len(text), MARKER_LEN)
    for i, ch in enumerate(text[:end]):
        if unicodedata.category(ch) in ("Mn", "Me", "Cf"):
            end = i
            break
    return text[:end].rstrip() or text[:MARKER_LEN]


def _box_holds(agent: str, shown: str, marker: str, placeholder: str | None) -> bool:
    box = screen.input_box(agent, shown)
    return box is not None and _holds(box, marker, placeholder)


def _holds(box: list[str], marker: str | None, placeholder: str | None) -> bool:
    """Whether the box shows our text: its marker (on one row, or across the rows of a
    narrow box), or a collapsed-paste placeholder."""
    if marker is not None:
        if any(marker in row for row in box):
            return True
        if "".join(marker.split()) in "".join("".join(row.split()) for row in box):
            return True
    if placeholder is None:
        return False
    import re

    return any(re.search(placeholder, row) for row in box)


def _without_typed(shown: str, typed: str) -> str:
    """The screen without rows that are only a piece of our own typed text."""
    kept = []
    for row in screen.screen_lines(shown):
        piece = row.strip(_BOX_GLYPHS)
        if not (piece and piece in typed):
            kept.append(row)
    return "\n".join(kept)
