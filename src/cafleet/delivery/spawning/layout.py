"""Where a new member's pane opens on this machine (docs/delivery.md, "Where members
appear"): beside the Director while a split leaves every pane at least the size an agent's
screen needs, else in the fleet's own windows.

Each member's pane is at least ``CAFLEET_PANE_MIN_WIDTH`` × ``CAFLEET_PANE_MIN_HEIGHT``
(80 × 20), and the Director's pane never shrinks below that. The placements:

- ``split``: a split in the Director's window, of the pane (the Director's, or one of the
  fleet's members there) whose halves are largest, side by side when its width allows, else
  one above the other: chosen only while both halves keep the minimum. With ``--placement
  split`` a split is made even below it (tmux itself refuses a pane too small to split).
- ``window``: the fleet's own windows in the Director's session (named ``cafleet-<fleet
  id>-<fleet name>``, tagged with the window option ``@cafleet_fleet`` = ``<fleet id>:<a
  digest of the database>``, laid out tiled): the first whose tiled layout still leaves every
  pane the minimum with one more; else a new one. It never fails for lack of room: a new
  window always opens.
- ``auto`` (the default): ``split`` while it fits, then ``window``.

The choice and the split run under a lock of the Director's session (the pane-input lock's
mechanism, keyed ``layout``), so two ``member create`` at once never both take the last
room. The rules (:func:`best_split`, :func:`tiled_fits`) are pure; tmux's tiled layout is
``rows`` and ``columns`` grown alternately (rows first) until they hold every pane, each
pane ``(width - (columns - 1)) // columns`` wide and ``(height - (rows - 1)) // rows`` high.

herdr (:func:`_open_herdr`): the same rules with herdr's words and sizes. ``pane layout``
reports each pane's rectangle with its frame (a one-cell border on each side once a tab
holds two panes): a half is ``size // 2`` less the two cells of that border, and so is the
side not halved. The fleet's windows are its tabs in the Director's workspace labelled
``cafleet-<fleet id>-<fleet name>`` that hold a pane of one of the fleet's members (herdr
has no option to tag a tab with, and a label alone may be another database's fleet of the
same id and name); one is split as the Director's is (herdr has no tiled layout); a new one
is ``tab create``, its root shell running the member.
"""

from __future__ import annotations

from dataclasses import dataclass

from cafleet import config
from cafleet.errors import CafleetError

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from cafleet.mux.base import Program

AUTO, SPLIT, WINDOW = "auto", "split", "window"
PLACEMENTS = (AUTO, SPLIT, WINDOW)
TAG_OPTION = "@cafleet_fleet"
HERDR_FRAME = 2  # cells of a herdr pane's rectangle, across and down, its border takes


def tiled_grid(panes: int) -> tuple[int, int]:
    """(rows, columns) of tmux's tiled layout for ``panes`` panes."""
    rows = columns = 1
    while rows * columns < panes:
        rows += 1
        if rows * columns < panes:
            columns += 1
    return rows, columns


def tiled_fits(width: int, height: int, panes: int, min_width: int, min_height: int) -> bool:
    """Whether ``panes`` panes tiled in a ``width`` × ``height`` window are each at least
    ``min_width`` × ``min_height``."""
    rows, columns = tiled_grid(panes)
    return (width - (columns - 1)) // columns >= min_width and (height - (rows - 1)) // rows >= min_height


def best_split(
    panes: Sequence[tuple[str, int, int]],
    min_width: int,
    min_height: int,
    force: bool = False,
    *,
    divider: int = 1,
    frame: int = 0,
) -> tuple[str, bool] | None:
    """Of ``panes`` ((pane id, width, height): those that may be split), the one to split
    and whether side by side: the split whose smaller half is largest (in cells), among the
    splits that leave both halves at least the minimum; None when none does (``force``:
    the largest pane all the same, split along its longer side in cells of an agent's
    screen). A half is ``(size - divider) // 2`` (tmux: a one-cell divider between the
    halves) less ``frame``, and so is the side not halved (herdr: a border inside each
    pane's rectangle)."""
    best: tuple[int, str, bool] | None = None
    for pane_id, width, height in panes:
        for beside in (True, False):
            half_w = (width - divider) // 2 if beside else width
            half_h = height if beside else (height - divider) // 2
            half_w, half_h = half_w - frame, half_h - frame
            if half_w >= min_width and half_h >= min_height:
                area = half_w * half_h
                if best is None or area > best[0]:
                    best = (area, pane_id, beside)
    if best is not None:
        return best[1], best[2]
    if force and panes:
        pane_id, width, height = max(panes, key=lambda pane: pane[1] * pane[2])
        return pane_id, width / max(min_width, 1) >= height / max(min_height, 1)
    return None


def fleet_tag(fleet_id: int, database: str) -> str:
    """The window option value marking the fleet's own windows: its id and a digest of the
    database it lives in (two databases may both have a fleet 1)."""
    import hashlib

    from cafleet.credentials import redact

    return f"{fleet_id}:{hashlib.sha256(redact(database).encode()).hexdigest()[:12]}"  # no password in it


def window_name(fleet_id: int, fleet_name: str | None) -> str:
    from cafleet import render

    return f"cafleet-{fleet_id}" + (f"-{render.inline(fleet_name)}" if fleet_name else "")


def choose(mode: str | None, fleet_default: str | None) -> str:
    """The placement asked for (``--placement``), else the fleet's default, else auto."""
    chosen = mode or fleet_default or AUTO
    if chosen not in PLACEMENTS:
        raise CafleetError(f"placement {chosen!r} is not one of {', '.join(PLACEMENTS)}.")
    return chosen


def open_local(
    settings: config.Settings,
    hooks,
    director: dict,
    mux,
    argv: Sequence[str],
    *,
    cwd: str | None,
    env: dict[str, str],
    mode: str,
    fleet_name: str | None,
    member_panes: set[str],
) -> tuple[str, str | None, str]:
    """Open a member's pane on this machine by ``mode`` (see the module's text) beside the
    Director's ``director`` placement (``backend``, ``session``, ``window_id``, ``pane_id``;
    ``mux`` its client); ``member_panes``: the fleet's members' panes (those a split may
    halve besides the Director's). (pane id, identity, window id)."""
    from cafleet.delivery.keystrokes.lock import pane_lock
    from cafleet.mux.base import Program
    from cafleet.store.engines import lock_space

    locks = lock_space(settings.database)
    new = _NewPane(settings, director, mux, Program(argv, cwd, env), mode, member_panes)
    fleet_id = int(env["CAFLEET_FLEET_ID"])
    if director["backend"] != "tmux":
        with pane_lock(locks, "herdr", director["session"], "layout", settings.lock_timeout, hooks):
            return _open_herdr(new, window_name(fleet_id, fleet_name))
    from cafleet.mux.tmux_syntax import check_session

    session_id = check_session(director["session"])[0]
    with pane_lock(locks, "tmux", director["session"], "layout", settings.lock_timeout, hooks):
        return _open_tmux(new, session_id, fleet_id, fleet_name)


@dataclass(frozen=True)
class _NewPane:
    """What opening one member's pane needs (:func:`open_local`'s arguments): the Director's
    placement and its client, the member's program (command, directory and environment),
    the mode, and the fleet's members' panes."""

    settings: config.Settings
    director: dict
    mux: Any
    program: Program
    mode: str
    member_panes: set[str]

    def splittable(self, panes: Sequence[tuple[str, int, int]]) -> list[tuple[str, int, int]]:
        """Those of ``panes`` a split may halve: the Director's and the fleet's members'."""
        return [pane for pane in panes if pane[0] == self.director["pane_id"] or pane[0] in self.member_panes]

    def split_best(
        self, window: str, panes: Sequence[tuple[str, int, int]], force: bool, **sizes: int
    ) -> tuple[str, str | None, str] | None:
        """Split in ``window`` the one of ``panes`` :func:`best_split` chooses (``sizes``: its
        divider and frame): (pane id, identity, window), or None when no split fits."""
        min_w, min_h = self.settings.pane_min_width, self.settings.pane_min_height
        choice = best_split(panes, min_w, min_h, force=force, **sizes)
        if choice is None:
            return None
        target, beside = choice
        pane_id, identity = self.mux.split_identified(window, self.program, target_pane=target, beside=beside)
        return pane_id, identity, window


def _open_tmux(new: _NewPane, session_id: str, fleet_id: int, fleet_name: str | None) -> tuple[str, str | None, str]:
    """:func:`open_local` on tmux (the module's text): a split in the Director's window
    while one fits, then the fleet's tagged windows, tiled, then a new one."""
    mux, min_w, min_h = new.mux, new.settings.pane_min_width, new.settings.pane_min_height
    if new.mode != WINDOW:
        window = new.director["window_id"]
        _w, _h, panes = mux.window_panes(window)
        opened = new.split_best(window, new.splittable(panes), force=new.mode == SPLIT)
        if opened is not None:
            return opened
    tag = fleet_tag(fleet_id, new.settings.database)
    for window, width, height, count in mux.tagged_windows(session_id, tag):
        if tiled_fits(width, height, count + 1, min_w, min_h):
            _w, _h, panes = mux.window_panes(window)
            target = max(panes, key=lambda pane: pane[1] * pane[2])[0]
            pane_id, identity = mux.split_identified(window, new.program, target_pane=target)
            mux.tile(window)
            return pane_id, identity, window
    window, pane_id, identity = mux.new_window(session_id, new.program, name=window_name(fleet_id, fleet_name), tag=tag)
    return pane_id, identity, window


def _open_herdr(new: _NewPane, name: str) -> tuple[str, str | None, str]:
    """:func:`open_local` on herdr (the module's text): the Director's tab while a split
    fits, then the fleet's tabs, then a new one."""
    mux = new.mux
    if new.mode != WINDOW:
        tab, panes = mux.tab_layout(new.director["pane_id"])
        opened = new.split_best(tab, new.splittable(panes), new.mode == SPLIT, divider=0, frame=HERDR_FRAME)
        if opened is not None:
            return opened
    from cafleet.errors import PaneGone

    for tab, pane_ids in mux.labelled_tabs(name):
        if not new.member_panes.intersection(pane_ids):
            continue  # labelled like ours, but no member of this fleet is there
        try:
            _tab, panes = mux.tab_layout(pane_ids[0])
        except PaneGone:  # closed meanwhile
            continue
        opened = new.split_best(tab, panes, False, divider=0, frame=HERDR_FRAME)
        if opened is not None:
            return opened
    tab, pane_id, identity = mux.new_tab(new.program, label=name)
    return pane_id, identity, tab
