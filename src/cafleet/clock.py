"""Timestamps: UTC ISO-8601 with microseconds and an explicit offset.

``YYYY-MM-DDTHH:MM:SS.ffffff+00:00`` sorts as text in time order. Built with ``time``
rather than ``datetime`` because this runs on every command and ``datetime`` costs more to
import than the whole query it stamps.
"""

from __future__ import annotations

import time


def now() -> str:
    ns = time.time_ns()
    seconds, rest = divmod(ns, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + ".%06d+00:00" % (rest // 1000)


def to_epoch(timestamp: str) -> float:
    """Seconds since the epoch for a timestamp written by :func:`now` (UTC, +00:00)."""
    year, month, day = int(timestamp[0:4]), int(timestamp[5:7]), int(timestamp[8:10])
    hours, minutes = int(timestamp[11:13]), int(timestamp[14:16])
    seconds = float(timestamp[17:26]) if timestamp[19:20] == "." else float(timestamp[17:19])
    # Days from 1970-01-01 to the civil date (proleptic Gregorian), without datetime.
    y = year - (month <= 2)
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    days = era * 146097 + doe - 719468
    return days * 86400 + hours * 3600 + minutes * 60 + seconds


def idle_seconds(last_activity: str | None) -> int | None:
    if last_activity is None:
        return None
    return max(0, int(time.time() - to_epoch(last_activity)))
