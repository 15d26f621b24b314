"""Every way a command or a configuration writes a time, read in one place:

    parse_duration  PBS's `[[DD:]HH:]MM:SS` or seconds                    (qsub -l walltime, ...)
    wall_clock      PBS's `[[[[CC]YY]MM]DD]hhmm[.SS]`, local time          (qsub -a, -W deadline, pbs_rsub -R -E)
    maui_time       Maui's `now`, `+duration`, `HH[:MM[:SS]][_MO[/DD[/YY]]]`, epoch, ISO  (setres -s -e)
    minutes         Cobalt's whole minutes or `HH:MM:SS`                   (Cobalt's qsub -t, cqadm --time)
    epoch           seconds, a TOML date or date-time, an ISO date          (the configuration's starts)
    recurrence      iCalendar's `FREQ=...;BYDAY=...;COUNT|UNTIL`            (pbs_rsub -r)

Each raises InvalidRequest on bad input; the command or configuration reading it says so in
its own words (attributes.parse_start_after, maui.parse_when, cobalt.minutes, config._time,
rsub._rrule).
"""
from __future__ import annotations

import math
import re
from datetime import date, datetime, timedelta, timezone

from .errors import InvalidRequest
from .reservations import FREQUENCIES, pattern

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


#: the latest time a command takes (the end of year 9999: what dates can show)
LATEST = 253402300799.0
_MAUI_TIME = re.compile(r"([0-9]{1,2})(?::([0-9]{1,2}))?(?::([0-9]{1,2}))?"
                        r"(?:_([0-9]{1,2})(?:/([0-9]{1,2})(?:/([0-9]{2}|[0-9]{4}))?)?)?")
RULE_HELP = ("give FREQ=MINUTELY|HOURLY|DAILY|WEEKLY[;INTERVAL=n][;BYDAY=MO,...][;BYHOUR=h,...]"
             "[;COUNT=n|;UNTIL=YYYYMMDD[THHMMSS[Z]]]; BYDAY and BYHOUR with DAILY or WEEKLY")


def wall_clock(text: str, now: float) -> float:
    """PBS's `[[[[CC]YY]MM]DD]hhmm[.SS]` in local time; as Torque and PBS read it, a bare
    hhmm already past is tomorrow, and a DDhhmm already past is that day next month."""
    m = re.match(r"^([0-9]{4,12})(?:\.([0-9]{2}))?$", text)
    if not m or len(m.group(1)) % 2:
        raise InvalidRequest(f"bad time {text!r}")
    digits, secs = m.group(1), int(m.group(2) or 0)
    base = datetime.fromtimestamp(now)
    fields = {"hour": int(digits[-4:-2]), "minute": int(digits[-2:]), "second": secs}
    rest = digits[:-4]
    try:
        if rest:
            fields["day"] = int(rest[-2:])
        if len(rest) >= 4:
            fields["month"] = int(rest[-4:-2])
        if len(rest) >= 6:
            yy = rest[:-4]
            fields["year"] = int(yy) if len(yy) == 4 else 2000 + int(yy)
        when = base.replace(microsecond=0, **fields)
        if not rest and when.timestamp() < now:
            when += timedelta(days=1)
        elif len(rest) == 2 and when.timestamp() < now:
            when = when.replace(year=when.year + when.month // 12, month=when.month % 12 + 1)
        return when.timestamp()
    except (ValueError, OverflowError, OSError):  # (also a time this zone cannot place: year 9999 east of UTC)
        raise InvalidRequest(f"bad time {text!r}") from None


def maui_time(text: str, now: float) -> float:
    """`now`, `+[[DD:]HH:]MM:SS` (from now), Maui's `HH[:MM[:SS]][_MO[/DD[/YY]]]` (local
    time; a bare time of day already past is tomorrow), epoch seconds, or an ISO date;
    between the epoch and LATEST."""
    try:
        if text == "now":
            when = now
        elif text.startswith("+"):
            when = now + parse_duration(text[1:])
        elif (m := _MAUI_TIME.fullmatch(text)) and (":" in text or "_" in text):
            hh, mi, ss, mo, dd, yy = m.groups()
            base = datetime.fromtimestamp(now).replace(microsecond=0)
            fields = {"hour": int(hh), "minute": int(mi or 0), "second": int(ss or 0)}
            if mo:
                fields["month"] = int(mo)
            if dd:
                fields["day"] = int(dd)
            if yy:
                fields["year"] = int(yy) if len(yy) == 4 else 2000 + int(yy)
            at = base.replace(**fields)
            if not mo and at.timestamp() < now:
                at += timedelta(days=1)
            when = at.timestamp()
        elif re.fullmatch(r"[0-9]{1,12}(\.[0-9]*)?", text):
            when = float(text)
        else:
            when = datetime.fromisoformat(text).timestamp()
    except (ValueError, OverflowError, OSError, InvalidRequest):
        raise InvalidRequest(f"bad time {text!r}") from None
    if not 0 <= when <= LATEST:  # (NaN and infinities fail this too)
        raise InvalidRequest(f"bad time {text!r}")
    return when


def minutes(text: str) -> float:
    """Cobalt's times: whole minutes, or HH:MM:SS (MM:SS too), as seconds."""
    parts = text.strip().split(":")
    if len(parts) > 3 or not all(re.fullmatch(r"[0-9]+", p) for p in parts):
        raise InvalidRequest(f"bad time {text!r}")
    if len(parts) == 1:
        return int(parts[0]) * 60.0
    seconds = 0
    for p in parts:
        seconds = seconds * 60 + int(p)
    return float(seconds)


def epoch(value) -> float:
    """Epoch seconds from seconds, a TOML date or date-time, or an ISO date (local time
    unless it names its offset); InvalidRequest saying what it is not, or that no calendar
    of this zone holds it."""
    try:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            t = float(value)
        elif isinstance(value, datetime):
            t = value.timestamp()
        elif isinstance(value, date):  # a TOML date: its midnight, local time
            t = datetime(value.year, value.month, value.day).timestamp()
        else:
            t = datetime.fromisoformat(str(value)).timestamp()
    except (ValueError, OverflowError, OSError):  # (9999-12-31T23:59 east of UTC is past year 9999)
        t = math.nan
    if not math.isfinite(t):
        raise InvalidRequest("a time this zone cannot place" if isinstance(value, date)
                             else "neither epoch seconds nor an ISO date")
    return t


def recurrence(text: str, start: float) -> tuple[float, float, tuple[float, ...], float]:
    """(first start, period, offsets, last start; 0 none) of an iCalendar recurrence,
    `FREQ=...;INTERVAL=n;BYDAY=MO,...;BYHOUR=h,...;COUNT=n|UNTIL=date`, from `start` on.
    BYDAY and BYHOUR pick days and hours (the minutes are `start`'s) in local time; the
    first occurrence is the first they pick at or after `start`, and the pattern then
    repeats every period, of fixed seconds (a daylight-saving change does not move it).
    InvalidRequest: its message, if any, says what a rule takes."""
    fields = {}
    for part in filter(None, text.upper().replace(" ", "").split(";")):
        key, eq, value = part.partition("=")
        if not eq or key in fields:
            raise InvalidRequest("")
        fields[key] = value
    freq = fields.get("FREQ")
    unknown = sorted(set(fields) - {"FREQ", "INTERVAL", "COUNT", "UNTIL", "BYDAY", "BYHOUR"})
    if unknown or freq not in FREQUENCIES or ("COUNT" in fields and "UNTIL" in fields) \
            or (fields.keys() & {"BYDAY", "BYHOUR"} and freq not in ("DAILY", "WEEKLY")):
        raise InvalidRequest(RULE_HELP + (f"; {unknown[0]} is not taken" if unknown else ""))
    try:
        interval = int(fields.get("INTERVAL", "1"))
        count = int(fields.get("COUNT", "0"))
        days = sorted({WEEKDAYS.index(d) for d in fields["BYDAY"].split(",")}) if "BYDAY" in fields else []
        hours = sorted({int(h) for h in fields["BYHOUR"].split(",")}) if "BYHOUR" in fields else []
        if not 1 <= interval <= 10 ** 4 or count < 0 or "COUNT" in fields and count < 1 \
                or any(not 0 <= h <= 23 for h in hours):
            raise ValueError
        first, period, offsets = pattern(freq, interval, days, hours, start)
        if "UNTIL" in fields:
            u = fields["UNTIL"]  # local time, or UTC with a Z
            until = datetime.strptime(u.removesuffix("Z"), "%Y%m%dT%H%M%S" if "T" in u else "%Y%m%d")
            last = (until.replace(tzinfo=timezone.utc) if u.endswith("Z") else until).timestamp()
            if last < first:
                raise ValueError
        elif count:
            k, i = divmod(count - 1, len(offsets))
            last = first + k * period + offsets[i]
        else:
            last = 0.0
    except (ValueError, OverflowError, OSError):
        raise InvalidRequest("") from None
    return first, period, offsets, last
