"""Mail to a job's owner when it begins, ends or is aborted, as its `-m` asked.

The message is Torque's and OpenPBS's (`PBS Job Id:`, `Job Name:`, `Exec host:`, then
what happened) and goes through the site's `mail_command`, a command that reads a whole
message with its headers on stdin (`["sendmail", "-t"]`).  No command set: no mail.
It runs as a site program (siteprog.py: the site's PATH, never a caller's environment).
Mail never stops anything: a command that fails or hangs past MAIL_TIMEOUT is reported
on stderr and the job goes on.
"""
from __future__ import annotations

import subprocess
import sys

from ..core.jobs import Job
from . import siteprog
from .common import display_id, resources_used, short_id

BEGIN, END, ABORT = "b", "e", "a"
MAIL_TIMEOUT = 10.0


def wanted(job: Job, event: str, flavor: str) -> bool:
    """Whether the job's mail points ask for `event` (OpenPBS mails about a subjob only
    with `j`; Torque about each)."""
    points = job.extra.get("mail_points", "a")
    if points == "n" or event not in points:
        return False
    return not (job.array_id and flavor == "openpbs" and "j" not in points)


def message(job: Job, server: str, what: str) -> str:
    """The message: headers, then the job and what happened to it."""
    jid = display_id(job, server)
    to = job.extra.get("mail_users") or job.owner
    hosts = "+".join(f"{n}/{','.join(map(str, c))}" for n, c in zip(job.nodes, job.cores))
    lines = [f"To: {to}", f"Subject: PBS JOB {jid}", "", f"PBS Job Id: {jid}", f"Job Name:   {job.name}"]
    if hosts:
        lines.append(f"Exec host:  {hosts}")
    lines.append(what)
    if job.end_time is not None:
        lines.append(f"Exit_status={job.exit_status if job.exit_status is not None else -1}")
        if job.start_time is not None:
            lines.extend(f"resources_used.{k}={v}" for k, v in resources_used(job, job.end_time).items())
    return "\n".join(lines) + "\n"


def send(site, job: Job, event: str, what: str) -> None:
    """Mail `what` about `job` if the job asked for `event` and the site has a mail command."""
    command = site.config.get("mail_command")
    if not command or not wanted(job, event, site.flavor):
        return
    try:
        done = subprocess.run(command, input=message(job, site.server, what).encode(), stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, timeout=MAIL_TIMEOUT, env=siteprog.environment(site),
                              cwd="/", start_new_session=True,
                              **siteprog.identity(site, "mail_user"))
        if done.returncode:
            print(f"hpcsched: mail for job {short_id(job)}: {command[0]} exited {done.returncode}", file=sys.stderr)
    except (OSError, KeyError, subprocess.SubprocessError) as e:
        print(f"hpcsched: mail for job {short_id(job)}: {e}", file=sys.stderr)
