"""A program that draws whatever dialog a test writes, and records every key it gets.

Usage: ``python dialog_drawer.py SCREEN KEYS``. It puts its terminal in cbreak mode without
echo, and shows the text of the file SCREEN from the screen's top-left corner: once at the
start and again each time the file's text changes (the test writes a new file and renames it
over SCREEN, so the text is read whole). Each byte typed is appended to KEYS. A test
registers it as a stand-in member to put on a real pane a dialog the stand-in agent cannot
draw (a row of 300 columns, a dialog of 40 rows, a zero-width character); its screen
reads ``awaiting_user`` as the stand-in's does when it ends with the stand-in's question.
"""

from __future__ import annotations

import os
import select
import sys
import tty


def main(screen: str, keys: str) -> None:
    tty.setcbreak(0)
    shown = None
    with open(keys, "ab", buffering=0) as out:
        while True:
            with open(screen, encoding="utf-8") as source:
                text = source.read()
            if text != shown:
                # over the last frame in place, each row's rest and what is below cleared (a
                # whole-screen clear would push the frame into tmux's history); never a newline
                # after the last row (no scrolling)
                rows = text.rstrip("\n").split("\n")
                os.write(1, ("\x1b[H" + "\x1b[K\r\n".join(rows) + "\x1b[K\x1b[J").encode("utf-8"))
                shown = text
            ready, _, _ = select.select([0], [], [], 0.05)
            if ready:
                data = os.read(0, 4096)
                if not data:
                    break
                out.write(data)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
