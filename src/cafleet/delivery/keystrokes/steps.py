"""The actions a submission's steps yield, and the one loop that carries them out on a pane
(docs/delivery.md).

A submission's decisions are generators of steps (:mod:`cafleet.delivery.keystrokes.submit`:
its ``_submission``, ``_ready``, ``_typing``, ``_outcome``, ``_erase_ours``, ...). They never
touch the pane or the clock: each yields what it needs done (an action) and is sent back
what came of it (a screen, a pair ``(held, screen)``, a callback's value); what it decides
from a screen is a pure function of that screen and of what it saw before. :func:`run` is
the one loop that carries the actions out on a multiplexer's pane, so tests can drive the
same steps against recorded screens (tests/support/fake_mux.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from typing import Any, TypeVar

from cafleet.mux.base import Multiplexer

CAPTURE_LINES = 50  # the rows a watch reads, and a submission's first look
_POLL = 0.05
T = TypeVar("T")


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
