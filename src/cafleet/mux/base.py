"""The multiplexer protocol every backend implements.

Pane ids are opaque strings (``%7`` for tmux, ``w1:p1`` for herdr). ``session`` is the
backend's own opaque session string as stored in ``member_placements.mux_session``: for
tmux it is ``<session_id>@<socket_path>`` so that any process (WebUI, a member's pane, a
test) reaches the right tmux server; for herdr it is herdr's session/workspace id.

Every implementation runs its subprocesses with an argv (never a shell) and a timeout,
and raises :class:`cafleet.errors.MuxError` (or :class:`cafleet.errors.PaneGone`) with one
clear line on failure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence


@dataclass(frozen=True)
class PaneContext:
    """Where a pane lives: enough to store a placement and to reach the pane again."""

    backend: str  # "tmux" | "herdr"
    session: str  # opaque, stored in member_placements.mux_session
    window_id: str  # stored in member_placements.mux_window_id
    pane_id: str  # stored in member_placements.mux_pane_id


class Multiplexer(Protocol):
    name: str  # "tmux" | "herdr"

    def current_pane(self) -> PaneContext:
        """The pane this process runs in (TMUX_PANE / ``herdr pane current``)."""

    def split(
        self,
        window_id: str,
        argv: Sequence[str],
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        target_pane: str | None = None,
    ) -> str:
        """Open a new pane in ``window_id`` running ``argv`` (no shell), without taking
        focus from the current pane. Return the new pane id."""

    def capture(self, pane_id: str, lines: int = 50, ansi: bool = False) -> str:
        """The last ``lines`` lines of the pane's screen."""

    def kill(self, pane_id: str) -> bool:
        """Close the pane. Return False when it was already gone (not an error)."""

    def pane_exists(self, pane_id: str) -> bool:
        """Whether the pane is still there."""

    def type_text(self, pane_id: str, text: str) -> None:
        """Type ``text`` literally (never interpreted as key names)."""

    def press_enter(self, pane_id: str) -> None:
        """Send one Enter key press."""
