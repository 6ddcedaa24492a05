"""The multiplexer protocol every backend implements, and what a new pane runs (:class:`Program`).

Pane ids are opaque strings (``%7`` for tmux, ``w1:p1`` for herdr). ``session`` is the
backend's own opaque session string as stored in ``member_placements.mux_session``: for
tmux it is ``<session_id>@<socket_path>`` so that any process (WebUI, a member's pane, a
test) reaches the right tmux server; for herdr it is ``<workspace_id>[@<socket_path>]``.
A tmux session on another host is prefixed ``ssh://[user@]host[:port]/`` (:mod:`cafleet.mux.ssh`).

A placement also records the pane's *identity*: what tells the pane cafleet created
apart from a later pane that got the same id (tmux numbers panes from ``%0`` again when a
server restarts on the same socket). It is stored inside ``mux_pane_id`` as
``<pane id> <identity>`` (``cafleet.broker.records.encode_pane``); a value without a
space is a placement recorded before identities existed (*legacy*: checked by pane id only).

Every implementation runs its subprocesses with an argv (never a shell) and a timeout,
and raises :class:`cafleet.errors.MuxError` (or :class:`cafleet.errors.PaneGone`) with one
clear line on failure.
"""

from __future__ import annotations

# Plain classes on purpose: `dataclasses` and `typing` cost more to import than a whole
# cafleet command, and this module is on the send path. So the type checker sees
# `Multiplexer` as a `typing.Protocol` (every backend is checked against it where one is
# returned as a Multiplexer) while at run time it is a plain class and `typing` is never
# imported: `TYPE_CHECKING` is false here and true for the type checker.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Protocol
else:
    Protocol = object


class PaneContext:
    """Where a pane lives: enough to store a placement and to reach the pane again."""

    __slots__ = ("backend", "identity", "pane_id", "session", "window_id")

    def __init__(self, backend: str, session: str, window_id: str, pane_id: str, identity: str | None = None) -> None:
        self.backend = backend  # "tmux" | "herdr"
        self.session = session  # opaque, stored in member_placements.mux_session
        self.window_id = window_id  # stored in member_placements.mux_window_id
        self.pane_id = pane_id  # stored in member_placements.mux_pane_id (with the identity)
        self.identity = identity  # the pane's identity now (None when the backend cannot tell)

    def _key(self) -> tuple:
        return (self.backend, self.session, self.window_id, self.pane_id)

    def __eq__(self, other) -> bool:
        return isinstance(other, PaneContext) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return "PaneContext(backend={!r}, session={!r}, window_id={!r}, pane_id={!r})".format(*self._key())


class Program:
    """What a new pane runs: ``argv`` (no shell) in the directory ``cwd`` (None: the
    backend's default), with ``env`` added to its environment. The backend checks each
    part before it opens the pane."""

    __slots__ = ("argv", "cwd", "env")

    def __init__(self, argv: Sequence[str], cwd: str | None = None, env: dict[str, str] | None = None) -> None:
        self.argv = argv
        self.cwd = cwd
        self.env = env


class Multiplexer(Protocol):
    """The interface every backend provides (structural: backends do not inherit it)."""

    name: str  # "tmux" | "herdr"

    def current_pane(self) -> PaneContext:
        """The pane this process runs in (TMUX_PANE / ``herdr pane current``)."""

    def split_identified(
        self, window_id: str, program: Program, *, target_pane: str | None = None
    ) -> tuple[str, str | None]:
        """Open a new pane in ``window_id`` (beside ``target_pane`` when given) running
        ``program``, without taking focus from the current pane. Return the new pane's id
        and identity."""

    def identity(self, pane_id: str) -> str | None:
        """The pane's identity now; PaneGone when there is no such pane."""

    def expect(self, pane_id: str, identity: str | None, recorded_at: float | None = None) -> None:
        """From now on, every call of this client that targets ``pane_id`` first checks that
        the pane still has ``identity`` and raises PaneStale (touching nothing) if not.
        None (a legacy placement) checks the pane id, and where the backend knows when its
        server started (tmux) that it started before ``recorded_at`` (epoch seconds), the
        placement's ``created_at``."""

    def capture(self, pane_id: str, lines: int = 50, ansi: bool = False) -> str:
        """The last ``lines`` lines of the pane's screen (with tmux, its history above the
        visible screen included); ``lines`` 0: the whole visible screen and nothing else."""

    def kill(self, pane_id: str) -> bool:
        """Close the pane. Return False when it was already gone (not an error); PaneStale
        (nothing closed) when it no longer has its expected identity."""

    def pane_exists(self, pane_id: str) -> bool:
        """Whether the pane is still there."""

    def type_text(self, pane_id: str, text: str) -> None:
        """Type ``text`` literally (never interpreted as key names)."""

    def press_enter(self, pane_id: str) -> None:
        """Send one Enter key press."""

    def press_backspace(self, pane_id: str, count: int) -> None:
        """Send ``count`` BackSpace key presses (to remove text cafleet typed itself)."""

    def press_arrow(self, pane_id: str, direction: str, count: int) -> None:
        """Send ``count`` presses of the arrow key ``direction`` (``left``, ``right``, ``up``
        or ``down``): how an agent's dialog without numbered options moves its selection."""

    def pane_dead(self, pane_id: str) -> bool:
        """Whether the pane still exists but its program has exited."""

    def pane_current_command(self, pane_id: str) -> str:
        """The name of the program in the pane's foreground (a shell once the agent exits)."""

    def inspect(self, pane_id: str, lines: int = 30) -> tuple[bool, bool, str, str]:
        """(exists, dead, foreground command, screen tail) with as few calls as the backend
        allows; a gone pane is (False, False, "", ""), not an error; a pane that lost its
        expected identity raises PaneStale."""
