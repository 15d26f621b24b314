"""One line of Torque's accounting log, both ways: the format's one codec.

    MM/DD/YYYY HH:MM:SS;<type>;<job id>;key=value key=value ...

The server writes lines (pbs/accounting.py), tracejob and the scenario checks read them
back, and drain accounting reads a site's logs (drain/records.py).
"""
from __future__ import annotations

import time

STAMP = "%m/%d/%Y %H:%M:%S"


def line(when: float, kind: str, job_id: str, fields: dict) -> str:
    """The record of `kind` for `job_id` at `when` (local time), newline-ended."""
    body = " ".join(f"{k}={v}" for k, v in fields.items())
    return f"{time.strftime(STAMP, time.localtime(when))};{kind};{job_id};{body}\n"


def parse(text: str) -> tuple[str, str, str, dict[str, str]] | None:
    """(stamp, type, job id, fields) of a line; None: not <stamp>;<type>;<job id>;<fields>.
    The stamp is returned as written (`stamp_ok` checks it); a word without '=' is passed
    over, as Torque's tracejob passes it over."""
    parts = text.rstrip("\n").split(";", 3)
    if len(parts) != 4:
        return None
    when, kind, job_id, body = parts
    return when, kind, job_id, dict(kv.split("=", 1) for kv in body.split() if "=" in kv)


def stamp_ok(when: str) -> bool:
    """Is `when` a stamp as the log writes them?"""
    try:
        time.strptime(when, STAMP)
    except ValueError:
        return False
    return True
