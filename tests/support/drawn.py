"""A real pane that draws whatever dialog a test writes, registered as a member of any
coding agent (tests/support/dialog_drawer.py records the keys it gets), and opencode's
permission prompt as that agent draws it, colours included.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tests.support.tmux_fixtures import wait_for

DRAWER = Path(__file__).resolve().parent / "dialog_drawer.py"


def visible(fleet, pane: str) -> str:
    """The pane's whole visible screen, wrapped rows joined: the window a notice reads a
    dialog from (``delivery.dialog.capture``)."""
    return fleet.server.run("capture-pane", "-p", "-J", "-t", pane)


class Drawn:
    """A member whose pane runs tests/support/dialog_drawer.py, registered as a member of
    ``agent`` (claude unless told): a real pane on which the test draws the dialog it needs (rows wider than the
    pane, a dialog of 40 rows, a zero-width character); the keys it gets are recorded."""

    def __init__(self, fleet, folder: Path, rows: list[str], agent: str = "claude") -> None:
        from cafleet.broker import members
        from cafleet.store.engines import open_store

        self.fleet = fleet
        self.screen, self.keys = folder / "drawn.screen", folder / "drawn.keys"
        self.screen.write_text("\n".join(rows), encoding="utf-8")
        self.keys.write_bytes(b"")
        shown = fleet.cafleet("member", "show", str(fleet.director), "--json").json()["placement"]
        store = open_store(str(fleet.db))
        try:
            self.member_id = members.register_member(
                store,
                fleet_id=fleet.fleet_id,
                name="drawn",
                description="a drawn dialog",
                backend="tmux",
                session=shown["session"],
                window_id=shown["window_id"],
                coding_agent=agent,
            )
            self.pane = fleet.server.new_pane([sys.executable, str(DRAWER), str(self.screen), str(self.keys)])
            members.set_pane_id(store, self.member_id, self.pane)
        finally:
            store.close()
        self.wait(rows)

    def show(self, rows: list[str]) -> None:
        """Draw ``rows`` instead (the file replaced whole), and wait until the pane shows them."""
        ahead = self.screen.with_suffix(".next")
        ahead.write_text("\n".join(rows), encoding="utf-8")
        os.replace(ahead, self.screen)
        self.wait(rows)

    def wait(self, rows: list[str]) -> None:
        import re

        from cafleet.delivery.keystrokes import screen

        plain = [re.sub(screen._ANSI, "", row).rstrip(" ") for row in rows]  # rows may be drawn in colour

        def drawn() -> bool:
            shown = visible(self.fleet, self.pane).split("\n")
            return [row.rstrip(" ") for row in shown[: len(rows)]] == plain

        wait_for(drawn, what="the pane to show the dialog")

    def answer(self, *args: str):
        return self.fleet.cafleet("member", "answer", str(self.member_id), *args)


SGR = "\x1b[{}m"
BAR, TEXT, PANEL, PICKED, MUTED, ON_PICKED = "38;5;215", "38;5;15", "48;5;234", "48;5;215", "38;5;8", "38;5;232"


def buttons(selected: int | None, labels=("Allow once", "Allow always", "Reject")) -> list[str]:
    """opencode 1.18.33's permission prompt as it draws it (tests/fixtures/screens), its
    selected button painted in the frame bar's colour (None: every button alike)."""
    row = f"  {SGR.format(BAR)}┃{SGR.format(TEXT)}{SGR.format(PANEL)}  "
    for number, label in enumerate(labels, 1):  # each button: a blank, its label, a blank; one blank between
        ground, ink = (PICKED, ON_PICKED) if number == selected else (PANEL, MUTED)
        row += f"{SGR.format(ground)} {SGR.format(ink)}{label}{SGR.format(TEXT)} {SGR.format(PANEL)} "
    row += f"          ⇆ select  enter confirm{SGR.format(0)}"
    framed = ["", "△ Permission required", "  # Shell command", "", "$ touch made-by-the-agent", "", ""]
    return [f"  ┃  {line}".rstrip() for line in framed] + [row, "  ┃"]
