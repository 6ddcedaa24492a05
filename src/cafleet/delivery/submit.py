"""Typing a preview or a prompt into a coding agent's input box and submitting it (docs/delivery.md).

One line, never two. The preview has two lines (header, body), but a newline means a
different thing in every input box: Enter-like in some, "insert line break" (Ctrl-J,
Shift-Enter, bracketed paste) in others, and a multi-line paste is collapsed into a
``[Pasted text #1 +1 lines]`` placeholder by claude and opencode, hiding the text we need
to see to confirm the submission. Bracketed paste would also mean typing ESC bytes, which
claude reads as "interrupt" when they arrive split. So the text is flattened: every line
break, including the one between header and body, is typed as the visible mark ``⏎``,
which the body already uses for its own line breaks. The one typed line starts with the
header, so every partial or repeated input still carries its message id.

The steps, each bounded in time:

1. capture the pane; if it shows a prompt awaiting its user, type nothing and raise
   :class:`PaneAwaitingUser` (a digit would pick an option, Enter would approve);
2. type the line literally (``send-keys -l``: never key names), after
   :func:`~cafleet.delivery.preview.flatten`, so no control character is ever sent;
3. wait ``settle`` seconds, then up to ``echo_timeout`` for the line's first characters
   (the *marker*, ``[cafleet msg <id> from <sender> …`` for a preview) to show in the
   agent's input box (:func:`~cafleet.delivery.screen.input_box`);
4. if a prompt awaiting the user appeared meanwhile, stop before Enter (rows that are
   just our own typed text are ignored, so a hostile body cannot fake a prompt);
5. press Enter and watch for the marker to leave the input box while the box is still
   drawn; retry Enter up to ``enter_retries`` times, ``confirm_timeout`` apart;
6. otherwise raise :class:`SubmissionNotConfirmed`.

Confirmation means "seen in the input box, then seen gone from it". A pane whose screen
shows no input box of that agent (a shell, ``sleep``, an agent still starting) can never
confirm: Enter is pressed once (leaving typed text unsubmitted would glue it to the next
input) and the attempt fails, so the message is retried later. Escape is never sent: it
would discard a human's half-typed input or dismiss a permission prompt.

The settle delay defaults to 0.3 s, overridable with ``CAFLEET_SUBMIT_SETTLE`` (seconds):
codex takes an Enter arriving within ~120 ms of fast typed input as a newline, claude's
input box needs a moment after a burst before Enter counts as submit; 0.3 s covers both
with margin at a cost paid once per message.
"""

from __future__ import annotations

import time
from typing import Callable, Mapping

from cafleet.delivery import screen
from cafleet.delivery.preview import flatten
from cafleet.errors import CafleetError, UsageError
from cafleet.faults import pause_point
from cafleet.mux.base import Multiplexer

DEFAULT_ECHO_TIMEOUT = 2.0
DEFAULT_CONFIRM_TIMEOUT = 2.0
CAPTURE_LINES = 50
MARKER_LEN = 24
_POLL = 0.05
# What a row of the input box may start with besides the typed text itself.
_BOX_GLYPHS = " \t│┃▌›>❯"


class PaneAwaitingUser(CafleetError):
    """The pane shows a permission prompt or a question for its user: nothing is typed."""


class SubmissionNotConfirmed(CafleetError):
    """The typed text was not seen leaving the agent's input box after Enter."""


def settle_delay(environ: Mapping[str, str]) -> float:
    """The settle delay: ``CAFLEET_SUBMIT_SETTLE`` seconds from ``environ``, else 0.3."""
    from cafleet.config import submit_settle

    return submit_settle(environ)


def submit_preview(
    mux: Multiplexer,
    pane_id: str,
    text: str,
    agent: str,
    *,
    settle: float | None = None,
    enter_retries: int = 3,
    confirm_timeout: float = DEFAULT_CONFIRM_TIMEOUT,
    echo_timeout: float = DEFAULT_ECHO_TIMEOUT,
) -> None:
    """Type the rendered preview ``text`` as one line into ``pane_id`` and submit it."""
    _submit(mux, pane_id, flatten(text), agent, settle, enter_retries, confirm_timeout, echo_timeout)


def type_prompt(
    mux: Multiplexer,
    pane_id: str,
    text: str,
    agent: str,
    settle: float | None = None,
    *,
    enter_retries: int = 3,
    confirm_timeout: float = DEFAULT_CONFIRM_TIMEOUT,
    echo_timeout: float = DEFAULT_ECHO_TIMEOUT,
) -> None:
    """Type one prompt line (``member prompt``) into ``pane_id`` and submit it."""
    line = flatten(text)
    if not line.strip():
        raise UsageError("the prompt is empty; give the text to type.")
    _submit(mux, pane_id, line, agent, settle, enter_retries, confirm_timeout, echo_timeout)


def _submit(
    mux: Multiplexer,
    pane_id: str,
    line: str,
    agent: str,
    settle: float | None,
    enter_retries: int,
    confirm_timeout: float,
    echo_timeout: float,
) -> None:
    if settle is None:
        import os

        settle = settle_delay(os.environ)
    if settle < 0 or enter_retries < 0 or confirm_timeout < 0 or echo_timeout < 0:
        raise ValueError("settle, enter_retries and the timeouts must not be negative")
    marker = _marker(line)
    cues = screen.CUES.get(agent)
    placeholder = cues.placeholder if cues else None

    before = mux.capture(pane_id, CAPTURE_LINES)
    if screen.classify(agent, before) == screen.PaneState.AWAITING_USER:
        raise PaneAwaitingUser(
            f"pane {pane_id} shows a prompt awaiting its user, so nothing was typed; "
            "answer it in that pane and the message will be retried."
        )
    # A placeholder already in the box before typing proves nothing about our text.
    box_before = screen.input_box(agent, before)
    if placeholder and box_before and _holds(box_before, None, placeholder):
        placeholder = None

    mux.type_text(pane_id, line)
    pause_point("submit.typed")  # test-only hook (cafleet.faults): typed, Enter not pressed
    time.sleep(settle)
    seen, shown = _poll(
        mux, pane_id, echo_timeout, lambda s: _box_holds(agent, s, marker, placeholder)
    )
    for presses in range(enter_retries + 1):
        if screen.classify(agent, _without_typed(shown, line)) == screen.PaneState.AWAITING_USER:
            raise PaneAwaitingUser(
                f"pane {pane_id} began showing a prompt awaiting its user while text was "
                "typed; Enter was not pressed and the typed text is still in that pane."
                if presses == 0
                else f"pane {pane_id} began showing a prompt awaiting its user before the "
                "submission was confirmed; Enter was not pressed again."
            )
        mux.press_enter(pane_id)
        if not seen:
            raise SubmissionNotConfirmed(
                f"the typed text never showed in the {agent} input box of pane {pane_id} "
                "(is that agent running there?); Enter was pressed once but the "
                "submission cannot be confirmed."
            )
        done, shown = _poll(
            mux, pane_id, confirm_timeout, lambda s: _box_cleared(agent, s, marker, placeholder)
        )
        if done:
            return
    raise SubmissionNotConfirmed(
        f"the typed text was still in the input box of pane {pane_id} after "
        f"{enter_retries + 1} Enter presses; the submission is not confirmed."
    )


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


def _poll(
    mux: Multiplexer, pane_id: str, timeout: float, check: Callable[[str], bool]
) -> tuple[bool, str]:
    """Capture until ``check`` holds or ``timeout`` passes; the last capture comes back."""
    deadline = time.monotonic() + timeout
    while True:
        shown = mux.capture(pane_id, CAPTURE_LINES)
        if check(shown):
            return True, shown
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False, shown
        time.sleep(min(_POLL, remaining))


def _box_holds(agent: str, shown: str, marker: str, placeholder: str | None) -> bool:
    box = screen.input_box(agent, shown)
    return box is not None and _holds(box, marker, placeholder)


def _box_cleared(agent: str, shown: str, marker: str, placeholder: str | None) -> bool:
    box = screen.input_box(agent, shown)
    return box is not None and not _holds(box, marker, placeholder)


def _holds(box: list[str], marker: str | None, placeholder: str | None) -> bool:
    """Whether the box shows our text: its marker, or a collapsed-paste placeholder."""
    if marker is not None and any(marker in row for row in box):
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
