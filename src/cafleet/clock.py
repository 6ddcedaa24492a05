"""Timestamps: UTC ISO-8601 with microseconds and an explicit offset.

``YYYY-MM-DDTHH:MM:SS.ffffff+00:00`` sorts as text in time order. Built with ``time``
rather than ``datetime`` because this runs on every command and ``datetime`` costs more to
import than the whole query it stamps.

Reading is wider than writing: another program sharing the file may store another ISO-8601
spelling (SQLite's own ``YYYY-MM-DD HH:MM:SS``, a ``Z`` suffix, another UTC offset, more or
fewer fraction digits). Those are read as the instant they name; a value without an offset
is UTC, as SQLite's date functions write it. Anything else is refused with
:class:`~cafleet.errors.CorruptRow`, never guessed.
"""

from __future__ import annotations

import time

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from typing import NoReturn

_FOREIGN = None  # compiled on first use: cafleet's own timestamps never need it


def now() -> str:
    return _format_ns(time.time_ns())


def from_epoch(seconds: float) -> str:
    """An epoch time as cafleet writes timestamps (microseconds, UTC)."""
    return _format_ns(round(seconds * 1_000_000) * 1000)


def _format_ns(ns: int) -> str:
    seconds, rest = divmod(ns, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{rest // 1000:06d}+00:00"


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Days from 1970-01-01 to the civil date (proleptic Gregorian), without datetime."""
    y = year - (month <= 2)
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def _days_in_month(year: int, month: int) -> int:
    if month == 2:
        return 29 if year % 4 == 0 and (year % 100 != 0 or year % 400 == 0) else 28
    return 30 if month in (4, 6, 9, 11) else 31


def _epoch(
    year: int, month: int, day: int, hours: int, minutes: int, seconds: int, micros: int, offset_minutes: int
) -> float:
    whole = _days_from_civil(year, month, day) * 86400 + hours * 3600 + (minutes - offset_minutes) * 60 + seconds
    return whole + micros / 1_000_000


def _refuse(timestamp) -> NoReturn:
    from cafleet.errors import CorruptRow, shown

    raise CorruptRow(
        f"the stored timestamp {shown(timestamp)} is not an ISO-8601 date and time "
        "(YYYY-MM-DDTHH:MM[:SS[.ffffff]] with Z, an offset or none for UTC); repair the row."
    )


def to_epoch(timestamp: str) -> float:
    """Seconds since the epoch for a stored timestamp; CorruptRow when it cannot be read."""
    if (
        isinstance(timestamp, str)
        and len(timestamp) == 32
        and timestamp.endswith("+00:00")
        and timestamp[19] == "."
        and timestamp[:4].isdigit()
    ):
        try:  # cafleet's own form: fixed positions
            return _checked(
                int(timestamp[0:4]),
                int(timestamp[5:7]),
                int(timestamp[8:10]),
                int(timestamp[11:13]),
                int(timestamp[14:16]),
                int(timestamp[17:19]),
                int(timestamp[20:26]),
                0,
                timestamp,
            )
        except ValueError:
            pass
    return _foreign(timestamp)


def _foreign(timestamp) -> float:
    global _FOREIGN
    if _FOREIGN is None:
        import re

        _FOREIGN = re.compile(
            r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:[.,](\d{1,9}))?)?"
            r" ?(?:([Zz])|([+-])(\d{2}):?(\d{2}))?",
            re.ASCII,
        )
    match = _FOREIGN.fullmatch(timestamp) if isinstance(timestamp, str) else None
    if match is None:
        _refuse(timestamp)
    year, month, day, hours, minutes, seconds, fraction, _zulu, sign, off_h, off_m = match.groups()
    micros = int((fraction or "0")[:6].ljust(6, "0"))
    offset = 0
    if sign is not None:
        if int(off_h) > 23 or int(off_m) > 59:
            _refuse(timestamp)
        offset = (int(off_h) * 60 + int(off_m)) * (-1 if sign == "-" else 1)
    return _checked(
        int(year), int(month), int(day), int(hours), int(minutes), int(seconds or 0), micros, offset, timestamp
    )


def _checked(year, month, day, hours, minutes, seconds, micros, offset, timestamp) -> float:
    if not (
        1 <= month <= 12 and 1 <= day <= _days_in_month(year, month) and hours <= 23 and minutes <= 59 and seconds <= 60
    ):
        _refuse(timestamp)
    return _epoch(year, month, day, hours, minutes, seconds, micros, offset)


def epoch_or_none(timestamp: str | None) -> float | None:
    """:func:`to_epoch`, or None for a missing or unreadable value (for display only)."""
    from cafleet.errors import CorruptRow

    if timestamp is None:
        return None
    try:
        return to_epoch(timestamp)
    except CorruptRow:
        return None


def idle_seconds(last_activity: str | None) -> int | None:
    """Whole seconds since ``last_activity``; None when there is none or it cannot be read
    (a roster shows the stored text and an unknown idle time rather than failing)."""
    epoch = epoch_or_none(last_activity)
    if epoch is None:
        return None
    return max(0, int(time.time() - epoch))
