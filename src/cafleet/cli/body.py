"""Message bodies from a positional TEXT or ``--file PATH`` (``-`` = stdin).

Read as bytes and decoded as strict UTF-8 with no newline translation, so the stored body
is exactly what was given. Problems with the body are usage errors (exit 2).
"""

from __future__ import annotations

from cafleet import validation
from cafleet.errors import UsageError


def read_body(ctx, text: str | None, file: str | None) -> str:
    if text is not None and file is not None:
        raise UsageError("give the body either as TEXT or with --file, not both.")
    if text is not None:
        return validation.body(text, "TEXT", hint="pass the body with --file instead.")
    if file is None:
        raise UsageError("missing the body: give TEXT or --file PATH (--file - reads stdin).")
    data = _read_bytes(ctx, file)
    where = "standard input" if file == "-" else f"file {file}"
    try:
        body = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise UsageError(
            f"{where} is not valid UTF-8 (byte 0x{data[error.start]:02x} at offset {error.start})."
        ) from None
    if not body:
        raise UsageError(f"{where} is empty; a message needs a non-blank body.")
    return validation.body(body)


def _read_bytes(ctx, path: str) -> bytes:
    if path == "-":
        return ctx.stdin.read()
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        raise UsageError(f"file {path} does not exist.") from None
    except IsADirectoryError:
        raise UsageError(f"{path} is a directory, not a file.") from None
    except OSError as error:
        raise UsageError(f"cannot read file {path}: {error.strerror or error}.") from None
