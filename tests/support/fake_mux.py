"""A stand-in multiplexer that replays the recorded screens of the pinned agents.

For the fast tests of delivery's decisions (tests/test_submit_steps.py): one pane that
shows what the pinned claude, codex or opencode really drew (the plain ``capture-pane``
texts under ``tests/fixtures/screens/<agent>-<version>/``, docs/testing.md), changed only
the way those recordings show each change:

- the box's text: the ``typed`` recording (``working_typed`` once something was
  submitted), its ``half typed words`` replaced by what the box holds;
- a submitted line: the ``working`` recording, whose echo row of a recorded preview is
  replaced by one row per line submitted so far (drawn as that agent draws it);
- any other state (``permission``, ``question``, ``startup``, ``fresh``, ...): the
  recording as it is.

Nothing here runs on a timer: the screen changes only with the keys it is sent and the
captures it answers (an Enter the agent ignores, an echo drawn some captures late), so a
test's outcome never depends on how fast the machine is. :class:`FakeClock` makes a
submission's waits instant: its ``sleep`` only moves its own time on.
"""

from __future__ import annotations

from pathlib import Path

from cafleet.errors import PaneGone

SCREENS = Path(__file__).resolve().parent.parent / "fixtures" / "screens"
TYPED = "half typed words"  # what the recordings' box holds in the typed states
RECORDED_HEAD = "[cafleet msg 1 from 1 "  # the recorded preview echoed in the working states
AGENTS = ("claude", "codex", "opencode")
WORKING = ("working", "queued")
PANE_ID = "%7"


def recordings(agent: str) -> dict[str, str]:
    """Every recorded screen of the pinned ``agent``, by state."""
    (folder,) = SCREENS.glob(f"{agent}-*")
    return {path.stem: path.read_text(encoding="utf-8") for path in sorted(folder.glob("*.txt"))}


class FakeClock:
    """A clock whose ``sleep`` returns at once and moves its time on by that much."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(seconds, 0.0)


class RecordedPane:
    """One pane of a pinned agent, drawn from its recordings (a stand-in for
    :class:`cafleet.mux.base.Multiplexer`'s pane methods; its one pane is ``pane``).

    ``state``: the recording shown while nothing was typed or submitted. ``box``: what
    the box holds at the start (a person's text, or a leftover of ours). ``enters``: what
    each Enter does, in turn (then ``"submit"`` for the rest): ``"submit"`` (the box's
    text is echoed into the transcript), ``"ignore"`` (it stays in the box, as an Enter
    that came too soon), ``"clear"`` (the box is emptied and nothing echoed, as claude
    while it starts), or an int: submitted, but the echo is drawn only that many captures
    later, or the name of a dialog's recording (``"permission"``, ``"question"``): the
    Enter is not taken and that dialog opens. ``draw_after``: captures before typed text
    shows in the box (None: never, a frozen agent)."""

    PANE = PANE_ID  # its pane's id, unless it is given another

    def __init__(
        self,
        agent: str,
        state: str = "idle",
        *,
        box: str = "",
        pane: str = PANE_ID,
        enters: tuple = (),
        draw_after: int | None = 0,
    ) -> None:
        self.agent, self.state, self.box, self.pane = agent, state, box, pane
        self.screens = recordings(agent)
        self.enters = list(enters)
        self.draw_after = draw_after
        self.keys: list[tuple] = []  # every key sent: ("text", s), ("enter",), ("backspace", n)
        self.submitted: list[str] = []  # what the agent took, in order
        self.echoed = 0  # how many of those its transcript shows
        self.history: list[str] = []  # rows scrolled up out of the screen
        self.captures = 0
        self._shown_after: int | None = None  # the capture from which typed text shows
        self._echo_after: int | None = None
        self.gone = False

    # --- the multiplexer's pane methods -------------------------------------------------

    def capture(self, pane_id: str, lines: int = 50, ansi: bool = False) -> str:
        self._check(pane_id)
        self.captures += 1
        if self._echo_after is not None and self.captures >= self._echo_after:
            self.echoed, self._echo_after = len(self.submitted), None
        rows = self.history + self.screen().split("\n")
        while rows and not rows[-1].strip():
            rows.pop()
        return "\n".join(rows[-lines:] if lines > 0 else rows)

    def type_text(self, pane_id: str, text: str) -> None:
        self._check(pane_id)
        self.keys.append(("text", text))
        self.box += text
        if self.draw_after is not None and self._shown_after is None:
            self._shown_after = self.captures + self.draw_after

    def press_enter(self, pane_id: str) -> None:
        self._check(pane_id)
        self.keys.append(("enter",))
        what = self.enters.pop(0) if self.enters else "submit"
        if what in ("permission", "question"):
            self.state = what
        if what in ("ignore", "permission", "question") or not self.box:
            return
        line, self.box, self._shown_after = self.box, "", None
        if what == "clear":
            return
        self.submitted.append(line)
        if isinstance(what, int):
            self._echo_after = self.captures + what
        else:
            self.echoed = len(self.submitted)

    def press_backspace(self, pane_id: str, count: int) -> None:
        self._check(pane_id)
        self.keys.append(("backspace", count))
        self.box = self.box[: max(len(self.box) - count, 0)]
        if not self.box:
            self._shown_after = None

    def pane_exists(self, pane_id: str) -> bool:
        return pane_id == self.pane and not self.gone

    def kill(self, pane_id: str) -> bool:
        existed = self.pane_exists(pane_id)
        self.gone = self.gone or existed
        return existed

    # --- what the test does to the pane -------------------------------------------------

    def scroll_out(self) -> None:
        """A long answer follows: the transcript's echo rows scroll up into the history."""
        self.history += [self._echo_row(line) for line in self.submitted[: self.echoed]]
        self.submitted, self.echoed = [], 0

    def screen(self) -> str:
        """The screen as the agent would draw it now (the recordings, changed as above)."""
        if self.state not in ("idle", "replied", "fresh", *WORKING):
            return self.screens[self.state]
        box = self.box if self._box_shown() else ""
        working = self.state in WORKING or self.echoed > 0
        if not box:
            text = self.screens["working" if self.echoed else self.state]
        else:
            text = self.screens["working_typed" if working else "typed"].replace(TYPED, box, 1)
        if self.echoed or working:
            text = self._with_echoes(text)
        return text

    # --- inside -------------------------------------------------------------------------

    def _box_shown(self) -> bool:
        if not self.keys or all(key[0] != "text" for key in self.keys):
            return True  # the box's text from the start (a person's, a leftover) shows
        if self.draw_after is None:
            return False
        return self._shown_after is not None and self.captures >= self._shown_after

    def _with_echoes(self, text: str) -> str:
        rows = text.split("\n")
        for index, row in enumerate(rows):
            if RECORDED_HEAD in row:
                echoes = [self._echo_row(line, row) for line in self.submitted[: self.echoed]]
                return "\n".join(rows[:index] + echoes + rows[index + 1 :])
        return text

    def _echo_row(self, line: str, recorded: str | None = None) -> str:
        if recorded is None:
            recorded = next(r for r in self.screens["working"].split("\n") if RECORDED_HEAD in r)
        return recorded[: recorded.index(RECORDED_HEAD)] + line

    def _check(self, pane_id: str) -> None:
        if pane_id != self.pane or self.gone:
            raise PaneGone(f"pane {pane_id} is gone.", pane=pane_id)
