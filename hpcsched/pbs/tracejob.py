"""tracejob: a job's story, from the accounting log (A) and the server's own log (S), as
Torque prints it.

The server's log is the store's journal: every change to a job is a record there (its
submission, holds and releases, alterations, runs, its end, its deletion).  The journal
holds what happened since the store was last compacted; the accounting log holds every
day.  `-n DAYS` looks back that many days (default 1, as Torque).

    Job: 12.headnode

    11/23/2026 10:00:00  S    enqueuing into batch, state 1 hop 1
    11/23/2026 10:00:00  A    queue=batch
"""
from __future__ import annotations

import sys
import time

from ..core.jobs import number
from ..store.journal import Store
from ..store.journaled import Batch
from ..store.site import load_site, whoami
from . import accounting, common
from .common import Command
from .errors import UsageError


def _stamp(t: float) -> str:
    return common.local_time("%m/%d/%Y %H:%M:%S", t)


def _server_lines(records: list[dict], job_id: int) -> list[tuple[float, str]]:
    """What the journal says about job `job_id`, in words."""
    out = []
    for rec in records:
        op, now = rec.get("op"), rec.get("now", 0.0)
        if op == "submit" and rec.get("job", {}).get("id") == job_id or op == "submit_array" and (
                number(job_id) == rec.get("first") and job_id != rec.get("first") if rec.get("numbered") else
                0 <= job_id - rec.get("first", 0) < sum(hi - lo + 1 for lo, hi in rec.get("indices", ()))):
            queue = rec["job"].get("queue") or "the default queue"
            out.append((now, f"enqueuing into {queue}, state 1 hop 1"))
        elif op == "forget" and job_id in rec.get("ids", ()):
            out.append((now, "dequeuing from the server (job history retention)"))
        elif rec.get("id") != job_id:
            continue
        elif op == "hold":
            out.append((now, f"Holds {rec.get('kind', 'u')} set"))
        elif op == "release":
            out.append((now, f"Holds {rec.get('kind', 'u')} released"))
        elif op == "alter":
            out.append((now, "Job Modified: " + ", ".join(sorted(rec.get("changes", {})))))
        elif op == "run":
            out.append((now, "Job Run at request of an operator (qrun)"))
        elif op == "exiting":
            out.append((now, f"Job exiting: its process ended (Exit_status={rec.get('exit_status')}), "
                             "its epilogue runs"))
        elif op == "ended":
            out.append((now, f"Exit_status={rec.get('exit_status')}"))
        elif op == "delete":
            out.append((now, "Job deleted at request of its owner or an operator"))
        elif op == "requeue":
            out.append((now, "Job requeued"))
        elif op in ("suspend", "resume"):
            out.append((now, f"Job {'suspended' if op == 'suspend' else 'resumed'} at request of an operator (qsig)"))
        elif op == "process" and "comment" in rec:
            out.append((now, rec["comment"]))
        elif op == "process" and "launched" in rec.get("set", {}):
            out.append((now, "Job started by the server"))
        elif op == "process" and "over" in rec.get("set", {}):
            out.append((now, f"Job exceeded its {rec['set']['over']} limit: killed"))
    return out


def tracejob(opts: list[tuple[str, str]], operands: list[str], out, now: float) -> int:
    if len(operands) != 1:
        raise UsageError("give one job id")
    o = dict(opts)
    try:
        days = int(o.get("n", "1"))
        if days < 1:
            raise ValueError
    except ValueError:
        raise UsageError(f"illegal -n value {o.get('n')!r}") from None
    common.parse_ref(operands[0])  # malformed: one line, status 153
    site = load_site()
    since = time.mktime(time.localtime(now)[:3] + (0, 0, 0, 0, 0, -1)) - (days - 1) * 86400
    batch = Batch.of(site)
    with batch.open(write=False):
        jobs = batch.sched.jobs
        store = Store(site.home)
        with store.locked(exclusive=False):
            _, records = store.read()
    try:
        found = common.resolve(jobs, operands[0], site.server)
    except common.CommandError:
        found = []
    viewer = whoami()
    if len(found) == 1:
        job = found[0]
        if not common.may_see(site, viewer, job):  # (qmgr's query_other_jobs = false)
            raise common.deny("tracejob", job, site)
        shown, job_id = common.display_id(job, site.server), job.id
    else:  # forgotten by the server: the accounting log may still have it
        jid, index = common.parse_ref(operands[0])
        shown = f"{jid}[{index}].{site.server}" if index not in (None, common.ALL) else f"{jid}.{site.server}"
        job_id = jid if index is None else None
    lines = [(t, "S", text) for t, text in (_server_lines(records, job_id) if job_id is not None else [])]
    private = not site.config.get("query_other_jobs", True) and not site.is_operator(viewer)
    for entry in accounting.read(site.home):
        if entry.job_id != shown or private and entry.fields.get("user", viewer) != viewer:
            continue
        when = time.mktime(time.strptime(entry.when, "%m/%d/%Y %H:%M:%S"))
        body = " ".join(f"{k}={v}" for k, v in entry.fields.items())
        lines.append((when, "A", body if entry.kind != "Q" else f"queue={entry.fields.get('queue', '')}"))
    # by the second (the accounting log has no finer times), the server's line first
    lines = sorted((x for x in lines if x[0] >= since), key=lambda x: (int(x[0]), x[1] != "S"))
    if not lines:
        sys.stderr.write(f"tracejob: no records for job {shown} in the last {days} day(s)\n")
        return common.UNKNOWN_JOB
    out.write(f"\nJob: {shown}\n\n")
    for t, source, text in lines:
        out.write(f"{_stamp(t)}  {source}    {text}\n")
    return 0


TRACEJOB = Command("tracejob", "n:aclmqsvf:w:", "usage: tracejob [-n days] job_id", tracejob)
