"""Job records to join drain with: Torque accounting logs, simulator results, SWF traces.

Every reader returns {job id: JobRecord}, the id as Moab's reservation lists name the job
(a Torque id's number: "1292428.bw" -> "1292428").  A job's last record wins (a rerun job
ends once more).  A line a reader cannot use raises ValueError naming file and line, or,
given a `skipped` list, is passed over and named there (`hpcsched drain --skip-bad`).
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path

from ..core import acctline, nodelist
from ..core.errors import InvalidRequest
from .accounts import JobRecord


def read(path: str, swf=None, skipped: list[str] | None = None) -> dict[str, JobRecord]:
    """By content: results.json (a simulation's), an SWF trace (read by `swf(path,
    skipped)`, the simulator's reader: see sim/simulate.py), or a Torque accounting log."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as f:
        head = f.read(4096)
    if head.lstrip().startswith("{"):
        return results_json(path)
    if head.lstrip().startswith(";") or _swf_like(head):
        if swf is None:
            raise ValueError(f"{path}: an SWF trace, and no SWF reader was given")
        return swf(path, skipped)
    return torque(path, skipped)


def _swf_like(head: str) -> bool:
    line = next((x for x in head.splitlines() if x.strip() and not x.startswith(";")), "")
    return len(line.split()) == 18 and all(_number(x) for x in line.split())


def _number(x: str) -> bool:
    try:
        float(x)
    except ValueError:
        return False
    return True


def results_json(path: str) -> dict[str, JobRecord]:
    """A simulation's results.json (`hpcsched simulate --out`): sizes, times, backfill.
    Its times are the trace's, offset by the header's UnixStartTime when it had one."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        epoch = float(data.get("epoch") or 0.0)
        return {str(j["job"]): JobRecord(str(j["job"]), int(j["size"]), float(j["start"]) + epoch,
                                         float(j["end"]) + epoch, bool(j["backfill"]))
                for j in data["jobs"]}
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: not a results.json of hpcsched simulate ({e})") from None


def torque(path: str, skipped: list[str] | None = None) -> dict[str, JobRecord]:
    """A Torque/PBS accounting log (hpcsched's own, or a site's): S and E records.  Size is
    Resource_List.nodect, else the hosts in exec_host; a job with S and no E is running."""
    out: dict[str, JobRecord] = {}
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = _torque_record(line, f"{path}:{n}")
            except ValueError as e:
                if skipped is None:
                    raise
                skipped.append(str(e))
                continue
            if rec is not None:
                out[rec.id] = rec
    return out


def _torque_record(line: str, where: str) -> JobRecord | None:
    """One accounting-log line's job record (None: not an S or E record of a job that ran)."""
    record = acctline.parse(line)
    if record is None:
        raise ValueError(f"{where}: not <date>;<type>;<job id>;<attributes>")
    _, kind, jid, fields = record
    if kind not in ("S", "E"):
        return None
    jid = jid.split(".", 1)[0]
    try:
        size = int(fields["Resource_List.nodect"]) if "Resource_List.nodect" in fields else \
            len({host for host, _ in nodelist.exec_hosts(fields.get("exec_host", ""))}) or 1
        start = float(fields["start"]) if "start" in fields else None
        end = float(fields["end"]) if kind == "E" and "end" in fields else None
    except (ValueError, InvalidRequest):
        raise ValueError(f"{where}: a number that does not parse") from None
    if kind == "E" and start is None and end is not None:
        return None  # ended without running (deleted while queued)
    return JobRecord(jid, size, start, end)


def merge(paths, swf=None, skipped: list[str] | None = None) -> dict[str, JobRecord]:
    """Every record of `paths` (files, or directories of daily files), later ones winning."""
    jobs: dict[str, JobRecord] = {}
    for p in paths:
        for q in (sorted(Path(p).iterdir()) if Path(p).is_dir() else [p]):
            try:
                jobs.update(read(str(q), swf, skipped))
            except FileNotFoundError:
                raise OSError(f"{q}: no such file") from None
            except (OSError, EOFError) as e:  # (unreadable, or a damaged gzip stream: the file named)
                raise OSError(f"{q}: {getattr(e, 'strerror', None) or e}") from None
    return jobs
