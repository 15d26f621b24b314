"""A site's prologue and epilogue: Torque's scripts around every batch job.

The server runs `prologue` (as itself: root on a multi-user site) just before it starts a
job's wrapper, and `epilogue` just after the job ends, each with Torque's arguments and
with its output at the end of the job's output and error files:

    prologue  job id, user, group, job name, resource list, queue, account
    epilogue  job id, user, group, job name, session id, resource list, resources used,
              queue, account, exit status

The prologue decides whether the job runs: status 0 runs it; 1 aborts it; any other
status, a timeout (`prologue_timeout`, Torque's $prologalarm: 300 s) or a script that
cannot run puts the job back in the queue, with a system hold so that a broken script does
not start it again at every pass.  While the epilogue runs the job is E and keeps its
nodes (no job starts there before it has cleaned up); its end is recorded when the
epilogue ends, or times out; its status is only reported.  The server goes on while they
run (it reaps them as it reaps jobs).  An epilogue outlives a server that stops: the next
one waits for it by its pid and start time, as it finds running jobs again, and starts
one its predecessor died before starting (at least once, then).
"""
from __future__ import annotations

import grp
import pwd

from ..core.jobs import Job
from ..pbs import common, qstat

TIMEOUT = 300.0  # seconds a script may take (Torque's $prologalarm)
ABORT = 1  # the prologue status that aborts the job


def prologue_args(job: Job, server: str) -> list[str]:
    return [common.display_id(job, server), job.owner, group_of(job), job.name, resource_list(job), job.queue,
            job.account]


def epilogue_args(job: Job, server: str, session: int, now: float) -> list[str]:
    """For a job whose process has ended at `now` (its exit status, CPU time and peaks known)."""
    used = ",".join(f"{k}={v}" for k, v in common.resources_used(job, now).items())
    return [common.display_id(job, server), job.owner, group_of(job), job.name, str(session), resource_list(job),
            used, job.queue, job.account, str(job.exit_status)]


def resource_list(job: Job) -> str:
    return ",".join(f"{k}={v}" for k, v in qstat.resource_list(job).items())


def group_of(job: Job) -> str:
    """The group the job runs under: its -W group_list's, else its owner's own."""
    if job.group:
        return job.group
    try:
        return grp.getgrgid(pwd.getpwnam(job.owner).pw_gid).gr_name
    except (KeyError, OSError):
        return job.owner
