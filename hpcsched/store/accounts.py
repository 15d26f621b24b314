"""The accounting log's day files, kept in step with the journal: a crash loses no record.

A change that makes accounting records (Torque's lines; pbs/accounting.py formats them)
writes them ahead, with its journal record's sequence number, to `accounting.pending`
in the store's directory; then journals the change; then appends them to their day's
file ($HPCSCHED_HOME/accounting/YYYYMMDD, named by each line's stamp) and removes the
pending file, all under the store's lock.  Lines that could not be appended (a full
disk) stay pending: every later change keeps them ahead of its own and its writer tries
them again first, and the next writer to take the lock tries those a dead writer left.
Pending lines are written only for a change that stands: every journal append drops
the pending entries numbered as or after itself (their change was never journaled), and
a writer taking the lock writes none numbered after the journal's newest record
(`mend`).  So each record is written once, and only for a change that stands.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from ..core import acctline

DIRECTORY = "accounting"
PENDING = "accounting.pending"
Entry = tuple[int, list[str]]  # (journal sequence number, the change's lines)


def _grouped(lines: list[str]) -> dict[str, list[str]]:
    """Lines (each `MM/DD/YYYY HH:MM:SS;...\\n`) grouped by day file name, in order."""
    days: dict[str, list[str]] = {}
    for line in lines:
        days.setdefault(f"{line[6:10]}{line[0:2]}{line[3:5]}", []).append(line)
    return days


def ahead(home: Path, seq: int, lines: list[str]) -> list[Entry]:
    """Before journal record `seq`: keep its lines (if any) after the unwritten lines of
    changes journaled before it, and drop any entry numbered `seq` or later (OSError: not
    kept).  Written in place: a file torn by a death here is one whose change never stood.
    Returns the entries kept."""
    old = _read(home) or []
    entries = [e for e in old if e[0] < seq] + ([(seq, lines)] if lines else [])
    if entries and entries != old:
        _keep(home, entries)
    elif old and not entries:
        _drop(home)
    return entries


def append(home: Path, entries: list[Entry], seq: int) -> None:
    """Append the lines `ahead` kept to their day files and drop the pending copy: first
    those carried from before change `seq` where their day file lacks them, then its own
    (one write a day file; O_APPEND keeps lines whole).  A file that cannot be written (a
    full disk) is reported on stderr and the change stands; the lines stay pending for
    the next change or writer to try."""
    carried = [x for s, group in entries if s != seq for x in group]
    try:
        days = _missing(home, carried) if carried else {}
        for day, group in _grouped(entries[-1][1] if entries[-1][0] == seq else []).items():
            days[day] = days.get(day, "") + "".join(group)
        _write(home, days)
    except OSError as e:
        unwritten = [x for _, group in entries for x in group]
        _, kind, job, _ = acctline.parse(unwritten[0])
        more = f" and {len(unwritten) - 1} more" if len(unwritten) > 1 else ""
        print(f"hpcsched: accounting record {kind} of job {job.split('.')[0]}{more} not written "
              f"({e.strerror}); kept for the next change to write", file=sys.stderr)
        return
    _drop(home)


def mend(home: Path, last_seq: int) -> None:
    """Pending lines a writer left behind: appended where their day file lacks them if
    their change was journaled (numbered up to the journal's newest record), else
    dropped.  Hold the store's lock."""
    old = _read(home)
    if old is None:
        return
    try:
        _write(home, _missing(home, [x for seq, group in old if seq <= last_seq for x in group]))
    except OSError:
        return  # (kept: the next append drops those of a change that never stood)
    _drop(home)


def _read(home: Path) -> list[Entry] | None:
    """The pending entries, oldest first (None: no file; []: one torn or not ours, from
    which nothing can be told)."""
    try:
        with open(home / PENDING, encoding="utf-8") as f:
            pending = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return []
    if isinstance(pending, dict) and "seq" in pending:  # (one change's, as written before carrying)
        pending = {"entries": [[pending["seq"], pending.get("lines")]]}
    try:
        entries = [(seq, lines) for seq, lines in pending["entries"]]
    except (KeyError, TypeError, ValueError):
        return []
    if all(isinstance(s, int) and isinstance(ls, list) and all(isinstance(x, str) for x in ls)
           for s, ls in entries):
        return entries
    return []


def _keep(home: Path, entries: list[Entry]) -> None:
    with open(os.open(home / PENDING, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as f:
        f.write(json.dumps({"entries": entries}))


def _write(home: Path, days: dict[str, str]) -> None:
    """Append each day's text to its file (OSError: a file could not be written)."""
    directory = home / DIRECTORY
    for day, text in days.items():
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(directory / day, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)  # (the server's alone)
        try:
            os.write(fd, text.encode("utf-8", "backslashreplace"))
        finally:
            os.close(fd)


def _missing(home: Path, lines: list[str]) -> dict[str, str]:
    """Each day's lines its file lacks: those after the longest run of them, from the
    first, that the file ends with (a write cut short by a full disk wrote a first part)."""
    missing = {}
    for day, group in _grouped(lines).items():
        tail = _tail(home / DIRECTORY / day, len("".join(group).encode("utf-8", "backslashreplace")))
        k = len(group)
        while k and not tail.endswith("".join(group[:k]).encode("utf-8", "backslashreplace")):
            k -= 1
        if k < len(group):
            missing[day] = "".join(group[k:])
    return missing


def _drop(home: Path) -> None:
    """The pending copy goes (a copy that stays is read as written by `mend`: no harm)."""
    try:
        os.unlink(home / PENDING)
    except OSError:
        pass


def _tail(path: Path, size: int) -> bytes:
    """The file's last `size` bytes (b"": no such file)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - size))
            return f.read()
    except OSError:
        return b""
