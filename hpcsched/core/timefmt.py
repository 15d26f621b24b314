"""Durations as PBS writes them: `[[DD:]HH:]MM:SS` or plain seconds; iCalendar's days."""
from __future__ import annotations

import re

from .errors import InvalidRequest

#: one field of a duration: ASCII digits, at most 12 of them before an optional fraction
#: (str.isdigit also takes '²', which float() then refuses)
_NUMBER = re.compile(r"[0-9]{1,12}(?:\.[0-9]{1,9})?")
#: the days of the week as iCalendar (BYDAY) names them, in datetime.weekday() order
WEEKDAYS = ("MO", "TU", "WE", "TH", "FR", "SA", "SU")


def parse_duration(text: str | int | float) -> float:
    """`"1:30:00"` -> 5400.0; `"90"` -> 90.0; `"2:00:00:00"` (days) -> 172800.0."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        if text < 0:
            raise InvalidRequest(f"negative duration {text!r}")
        return float(text)
    parts = str(text).strip().split(":")
    if not 1 <= len(parts) <= 4 or not all(_NUMBER.fullmatch(p) for p in parts):
        raise InvalidRequest(f"bad duration {text!r} (want [[DD:]HH:]MM:SS or seconds)")
    total = 0.0
    for unit, part in zip((86400, 3600, 60, 1)[-len(parts):], parts):
        total += unit * float(part)
    return total


def hms(seconds: float | None) -> str:
    """5400 -> `"01:30:00"` (hours grow past 99 as needed); None -> `"--"`."""
    if seconds is None:
        return "--"
    s = int(round(seconds))
    sign = "-" if s < 0 else ""
    s = abs(s)
    return f"{sign}{s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}"
