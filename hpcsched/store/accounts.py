"""The accounting log's day files, kept in step with the journal: a crash loses no record.

A change that makes accounting records (Torque's lines; pbs/accounting.py formats them)
writes them ahead, with its journal record's sequence number, to `accounting.pending`
in the store's directory; then journals the change; then appends them to their day's
file ($HPCSCHED_HOME/accounting/YYYYMMDD, named by each line's stamp) and removes the
pending file, all under the store's lock.  The next writer to take the lock finds a
pending file only if its writer died (or could not write the log): its lines are
appended if their change was journaled and the day file does not end with them already,
else dropped (`mend`).  So each record is written once, and only for a change that stands.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

DIRECTORY = "accounting"
PENDING = "accounting.pending"


def _by_day(lines: list[str]) -> dict[str, str]:
    """Lines (each `MM/DD/YYYY HH:MM:SS;...\\n`) grouped by day file name, in order."""
    days: dict[str, list[str]] = {}
    for line in lines:
        days.setdefault(f"{line[6:10]}{line[0:2]}{line[3:5]}", []).append(line)
    return {day: "".join(group) for day, group in days.items()}


def ahead(home: Path, seq: int, lines: list[str]) -> None:
    """Keep the lines of the change about to be journaled as record `seq` (OSError: not
    kept).  Written in place: a file torn by a death here is one whose change never stood."""
    with open(os.open(home / PENDING, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as f:
        f.write(json.dumps({"seq": seq, "lines": lines}))


def append(home: Path, lines: list[str]) -> None:
    """Append the lines to their day files (one write each; O_APPEND keeps lines whole) and
    drop the pending copy.  A file that cannot be written (a full disk) is reported on
    stderr and the change stands; the pending copy stays for the next writer to try."""
    directory = home / DIRECTORY
    try:
        for day, text in _by_day(lines).items():
            directory.mkdir(parents=True, exist_ok=True)
            fd = os.open(directory / day, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)  # (the server's alone)
            try:
                os.write(fd, text.encode("utf-8", "backslashreplace"))
            finally:
                os.close(fd)
    except OSError as e:
        _, kind, job = lines[0].split(";", 3)[:3]
        more = f" and {len(lines) - 1} more" if len(lines) > 1 else ""
        print(f"hpcsched: accounting record {kind} of job {job.split('.')[0]}{more} not written "
              f"({e.strerror}); kept for the next change to write", file=sys.stderr)
        return
    _drop(home)


def mend(home: Path, last_seq: int) -> None:
    """A pending file left behind: its lines appended where the day file lacks them, if
    the journal's newest record is their change; else dropped.  Hold the store's lock."""
    try:
        with open(home / PENDING, encoding="utf-8") as f:
            pending = json.load(f)
        seq, lines = pending["seq"], pending["lines"]
    except FileNotFoundError:
        return
    except (OSError, ValueError, KeyError, TypeError):
        seq, lines = None, []  # (torn or not ours: nothing can be told from it)
    ours = seq == last_seq and isinstance(lines, list) and all(isinstance(x, str) for x in lines)
    missing = [text for day, text in _by_day(lines).items() if not _ends_with(home / DIRECTORY / day, text)] \
        if ours else []
    if missing:
        append(home, missing)
    else:
        _drop(home)


def _drop(home: Path) -> None:
    """The pending copy goes (a copy that stays is read as written by `mend`: no harm)."""
    try:
        os.unlink(home / PENDING)
    except OSError:
        pass


def _ends_with(path: Path, text: str) -> bool:
    data = text.encode("utf-8", "backslashreplace")
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - len(data)))
            return f.read() == data
    except OSError:
        return False
