"""Terminal multiplexers (tmux, herdr) behind one small protocol.

Stored placement values are checked against their backend's encoding before any of them
reaches a multiplexer, SSH or a shell (each backend's ``check_*`` functions, called where
a stored value enters it: ``from_session``, ``expect``, ``split_identified``). The checks use string
methods, not ``re``: they run on every send.

This module holds what every backend shares: those checks' building blocks, the checks
of a new pane's command and directory, and how a screen, a text to type and a stale pane
are handled.
"""

from __future__ import annotations

from cafleet.errors import DamagedPlacement, MuxError, PaneStale

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

CHUNK_BYTES = 8192  # the most one call types: a tmux command must fit in 16 KiB


def first_line(text: str) -> str:
    """The first non-blank line of a tool's stderr, cut short for a one-line error, with
    every control and format character shown as an escape (:func:`cafleet.render.inline`):
    a tool's stderr, or a host's shell, can hold escape sequences and bidi controls."""
    from cafleet.render import inline

    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return inline(line[:200])


def is_number(text: str) -> bool:
    """ASCII decimal digits only, at most 19 of them (a pid, a time, a tmux index)."""
    return 0 < len(text) <= 19 and text.isascii() and text.isdigit()


# Characters no socket path cafleet records contains and a hostile writer would: shell and
# tmux format metacharacters, quotes and whitespace. Control characters are refused too.
_PATH_REFUSED = frozenset("#$`;'\"\\ \t&|<>(){}*?!")


def is_socket_path(path: str) -> bool:
    """An absolute path of printable characters without shell or format metacharacters."""
    return (
        path.startswith("/") and len(path) <= 4096 and path.isprintable() and not any(c in _PATH_REFUSED for c in path)
    )


def printable(value: object) -> str:
    """A stored value as it may be shown: itself when it is printable and short, else
    quoted with escapes (so no control or bidi character reaches a terminal) and cut."""
    from cafleet.errors import shown

    text = str(value)
    return text if text.isprintable() and " " not in text and len(text) <= 40 else shown(text)


def damaged(what: str, value: object, form: str, *, pane: str | None = None) -> DamagedPlacement:
    """The one-line error for a stored ``what`` that is not of its ``form`` (``pane``: the
    stored pane id, when that is the value it quotes)."""
    from cafleet.errors import shown

    return DamagedPlacement(
        f"the stored {what} {shown(value)} is not {form}: the placement is damaged, so nothing was "
        "typed into its pane, read from it or closed; repair the row or delete the member",
        pane=pane,
    )


def check_argv(argv: Sequence[str]) -> None:
    """A new pane's command: at least one word (it runs without a shell)."""
    if not argv:
        raise MuxError("cannot open a pane without a command to run.")


def check_cwd(cwd: str | None) -> None:
    """A new pane's working directory, when one is given: an existing directory."""
    import os

    if cwd is not None and not os.path.isdir(cwd):
        raise MuxError(f"the working directory {cwd} does not exist.")


def stale(backend: str, pane_id: str, why: str) -> PaneStale:
    """The one-line error for a pane id that now names a pane cafleet did not create."""
    return PaneStale(
        f"{backend} pane {pane_id} is stale: {why}, so its id now names a pane cafleet did not "
        "create; nothing was typed into it or closed",
        pane=pane_id,
    )


def tail_lines(text: str, lines: int) -> str:
    """The last ``lines`` lines of a screen dump (every line when ``lines`` is 0), after
    dropping trailing blank lines."""
    rows = text.split("\n")
    while rows and not rows[-1].strip():
        rows.pop()
    return "\n".join(rows[-lines:] if lines > 0 else rows)


def text_chunks(text: str, limit: int = CHUNK_BYTES) -> list[str]:
    """Split ``text`` into pieces of at most ``limit`` UTF-8 bytes on character boundaries.

    Lone surrogates cannot be encoded (nor typed) and become ``?``.
    """
    data = text.encode("utf-8", "replace")
    chunks = []
    start = 0
    while start < len(data):
        end = min(start + limit, len(data))
        while end < len(data) and data[end] & 0xC0 == 0x80:  # inside a multi-byte character
            end -= 1
        chunks.append(data[start:end].decode("utf-8"))
        start = end
    return chunks
