"""Message bodies from a positional TEXT or ``--file PATH`` (``-`` = stdin).

Read as bytes and decoded as strict UTF-8 with no newline translation, so the stored body
is exactly what was given. A file or stream is read to at most its allowed length plus one
byte, so an endless one (``/dev/zero``) is refused as too long without being held in
memory. Problems with the body are usage errors (exit 2).
"""

from __future__ import annotations

from cafleet import validation
from cafleet.errors import UsageError

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.cli.context import Context


def read_body(
    ctx: Context,
    text: str | None,
    file: str | None,
    *,
    limit: int = validation.MAX_BODY_BYTES,
    what: str = "a body",
    nul: bool = True,
) -> str:
    """The body, at most ``limit`` bytes of UTF-8 (``what`` names it in the error); with
    ``nul`` False a NUL character is refused too (a spawn prompt becomes a program
    argument, which ends at NUL)."""
    if text is not None and file is not None:
        raise UsageError("give the body either as TEXT or with --file, not both.")
    if text is not None:
        return validation.body(text, "TEXT", hint="pass the body with --file instead.")
    if file is None:
        raise UsageError("missing the body: give TEXT or --file PATH (--file - reads stdin).")
    where = "standard input" if file == "-" else f"file {file}"
    data = _read_bytes(ctx, file, limit + 1)
    if len(data) > limit:
        raise UsageError(f"{where} is longer than {limit} bytes, the most {what} may hold.")
    try:
        body = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise UsageError(
            f"{where} is not valid UTF-8 (byte 0x{data[error.start]:02x} at offset {error.start})."
        ) from None
    if not body:
        raise UsageError(f"{where} is empty; a message needs a non-blank body.")
    if not nul and "\x00" in body:
        raise UsageError(
            f"{where} holds a NUL character (U+0000) at offset {data.index(0)}, which {what} cannot carry; remove it."
        )
    return validation.body(body)


def _read_bytes(ctx: Context, path: str, most: int) -> bytes:
    """At most ``most`` bytes of the file (``-``: standard input)."""
    if path == "-":
        return _read_up_to(ctx.stdin, most)
    try:
        with open(path, "rb") as handle:
            return _read_up_to(handle, most)
    except FileNotFoundError:
        raise UsageError(f"file {path} does not exist.") from None
    except IsADirectoryError:
        raise UsageError(f"{path} is a directory, not a file.") from None
    except OSError as error:
        raise UsageError(f"cannot read file {path}: {error.strerror or error}.") from None


def _read_up_to(stream, most: int) -> bytes:
    """Read until end of file or ``most`` bytes, whichever comes first (a pipe or a
    terminal may return less than asked before its end)."""
    chunks, size = [], 0
    while size < most:
        chunk = stream.read(most - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)
