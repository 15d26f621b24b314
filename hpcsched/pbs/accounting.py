"""The accounting log in Torque's format, one file per day, and a reader for it.

    $HPCSCHED_HOME/accounting/YYYYMMDD
    MM/DD/YYYY HH:MM:SS;<type>;<job id>;key=value key=value ...

Types: Q queued, S started, E ended, D deleted, A aborted, R rerun.  A job killed by a
signal ends with Exit_status 256 + the signal number (265 for SIGKILL).  Records go with
the journaled change that makes them (`lines`, as `Batch.do`'s `records`), so the store
writes them once, even across a crash (store/accounts.py).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..core import acctline, nodelist
from ..core.jobs import Job
from ..core.timefmt import hms
from . import mail
from .common import display_id, group_of, memory_used, run_time


def _record(kind: str, job: Job, server: str, now: float) -> str:
    fields = {"user": job.owner, "group": group_of(job), "jobname": job.name, "queue": job.queue,
              "ctime": int(job.submit_time), "qtime": int(job.submit_time),
              "owner": f"{job.owner}@{job.extra.get('submit_host', server)}"}
    if job.account:
        fields["account"] = job.account
    if job.start_time is not None:
        fields["start"] = int(job.start_time)
        fields["exec_host"] = nodelist.exec_host(job.nodes, job.cores)
    fields["Resource_List.walltime"] = hms(job.walltime)
    fields["Resource_List.nodect"] = job.request.nodes if not job.request.cores else 1
    fields["Resource_List.ncpus"] = job.request.processors
    if kind in "EA":
        fields["end"] = int(now)
        fields["Exit_status"] = job.exit_status if job.exit_status is not None else -1
        if job.start_time is not None:  # (what accounting tools read a run's length from)
            fields["resources_used.walltime"] = hms(run_time(job, now))
        if job.cpu_time:
            fields["resources_used.cput"] = hms(job.cpu_time)
        fields.update((f"resources_used.{k}", v) for k, v in memory_used(job).items())
    elif kind == "D" and job.extra.get("deleted_by") == "dependency":
        fields["Exit_status"] = DEPENDENCY_EXIT
        if job.start_time is not None:
            fields["resources_used.walltime"] = hms(run_time(job, now))
    return acctline.line(now, kind, display_id(job, server), fields)


#: Torque's exit status for a job deleted because its dependency failed (JOB_EXEC_BADDEPEND... 271)
DEPENDENCY_EXIT = 271


def lines(kind: str, jobs: list[Job], server: str, now: float) -> list[str]:
    """The records of one kind for `jobs`: what a journaled change carries (`Batch.do`'s
    `records`) and the store appends to the day's file after it (store/accounts.py)."""
    return [_record(kind, job, server, now) for job in jobs]


def core_deletions(batch, now: float) -> None:
    """Record the jobs the last operation deleted on its own: those whose dependency
    failed (Torque and OpenPBS delete them; the comment names the parent with its server)
    and those left in the queue of a pbs_rsub reservation that ended.  A D record (in a
    `process` record of its own) and mail for each.  Called after every operation that
    can end a job or a reservation."""
    from .attributes import parent_id
    sched, site = batch.sched, batch.site
    deleted, sched.deleted = sched.deleted, []
    for job in deleted:
        why, change = job.comment, {}
        if why.startswith("Job deleted as result of dependency"):  # (the core's words: Scheduler._delete_for)
            failed = next(d for d in job.dependencies if d.met is False)
            why = f"Job deleted as result of dependency on job {parent_id(failed, sched.jobs, site.server)}"
            change = {"set": {"deleted_by": "dependency"}, "comment": why}
        batch.do("process", now, id=job.id, records=lambda j: lines("D", [j], site.server, now), **change)
        mail.send(site, job, mail.ABORT, f"Aborted by PBS Server\n{why}")


@dataclass
class Entry:
    when: str
    kind: str
    job_id: str
    fields: dict[str, str]


def read(home: str | os.PathLike) -> list[Entry]:
    """Every record of every day, in order (a line that is no record, damaged or not
    this format, is passed over, as Torque's tracejob passes it over)."""
    directory = Path(home) / "accounting"
    entries = []
    for path in sorted(directory.glob("[0-9]" * 8)):
        for line in path.read_bytes().decode("utf-8", "replace").splitlines():
            record = acctline.parse(line)
            if record is not None and acctline.stamp_ok(record[0]):
                entries.append(Entry(*record))
    return entries
