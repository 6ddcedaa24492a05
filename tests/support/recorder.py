"""A program that records every byte typed into its terminal, for keystroke tests.

Usage: ``python recorder.py OUTPUT``. It puts its terminal in raw mode (so the line
discipline neither buffers, edits nor translates what arrives), prints ``recorder ready``
once it is, and appends each byte it reads to OUTPUT until end of input.
"""

from __future__ import annotations

import os
import sys
import tty

READY = "recorder ready"


def main(path: str) -> None:
    with open(path, "ab", buffering=0) as out:
        tty.setraw(0)
        os.write(1, f"{READY}\r\n".encode())
        while True:
            data = os.read(0, 65536)
            if not data:
                break
            out.write(data)


if __name__ == "__main__":
    main(sys.argv[1])
