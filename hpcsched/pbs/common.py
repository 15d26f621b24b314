"""What every PBS-style command shares: job ids, state letters, errors and exit codes.

Exit statuses follow PBS (error code mod 256): 153 unknown job, 35 finished job (OpenPBS
without -x), 188 limits, 170/172 unknown queue, 159 unauthorized, 175 bad user (root on a multi-user site), 2 usage.
"""
from __future__ import annotations

import functools
import re
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Callable, TextIO

from .. import __version__ as VERSION
from ..core.errors import ConfigError, SchedulerError
from ..core.jobs import (ACTIVE, COMPLETED, DELETED, DEP_FAIL, DEP_HOLD, EXITING, HELD, QUEUED, RUNNING, WAITING,
                         Hold, Job)
from ..core.timefmt import hms
from . import options
from .errors import SYSTEM, USAGE, CommandError, UsageError

NO_SERVER = "no server is running: the job waits until `hpcsched server` starts"

#: the most a count or a number of seconds given to a command may be (a 32-bit PBS long)
LARGEST = (1 << 31) - 1

UNKNOWN_JOB = 153
FINISHED = 35
LIMITS = 188
UNAUTHORIZED = 159
BAD_STATE = 170  # PBSE_BADSTATE 15018 mod 256
BAD_DEPEND = 192  # PBSE_BADDEPEND 15040 mod 256
BAD_USER = 175  # PBSE_BADUSER 15023 mod 256: the job's owner may not run jobs here
BAD_GROUP = 176  # PBSE_BADGRP 15024 mod 256: the job's group is not one of its owner's



def full_id(job_id: int, server: str) -> str:
    return f"{job_id}.{server}"


_ID = re.compile(r"^(\d+)(\[(\d*)\])?(?:\.(\S+))?$")
ALL = -1  # `123[]`: every subjob of array 123


def parse_ref(text: str) -> tuple[int, int | None]:
    """`123[.server]` -> (123, None); `123[5]` -> (123, 5); `123[]` -> (123, ALL)."""
    m = _ID.match(text.strip())
    if not m:
        raise CommandError(f"illegally formed job identifier: {text}", UNKNOWN_JOB)
    if m.group(2) is None:
        return int(m.group(1)), None
    return int(m.group(1)), int(m.group(3)) if m.group(3) else ALL


def parse_id(text: str) -> int:
    """`123`, `123.server` or `123.server.domain` -> 123; CommandError for anything else."""
    jid, index = parse_ref(text)
    if index is not None:
        raise CommandError(f"illegally formed job identifier: {text}", UNKNOWN_JOB)
    return jid


def gpus_held(jobs) -> dict[str, set[int]]:
    """node -> the GPUs running jobs were given there (the server journals them at launch)."""
    held: dict[str, set[int]] = {}
    for job in jobs:
        if job.state in ACTIVE:
            for node, gpus in job.extra.get("gpus", {}).items():
                held.setdefault(node, set()).update(gpus)
    return held


def display_id(job: Job, server: str) -> str:
    """`123.server`, or `123[5].server` for a subjob of array 123."""
    if job.array_id:
        return f"{job.array_id}[{job.array_index}].{server}"
    return f"{job.id}.{server}"


def short_id(job: Job) -> str:
    """`123`, or `123[5]` for a subjob: how Maui's commands and the server's log name a job."""
    return f"{job.array_id}[{job.array_index}]" if job.array_id else str(job.id)


def output_seq(job: Job, flavor: str) -> str:
    """SEQ in the default output names NAME.oSEQ / NAME.eSEQ: for subjob 12[3], Torque
    writes `12-3`, OpenPBS `12.3`."""
    if not job.array_id:
        return str(job.id)
    return f"{job.array_id}{'-' if flavor == 'torque' else '.'}{job.array_index}"


def expand(text: str, job: Job) -> str:
    """Cobalt's `$jobid` and `$COBALT_JOBID` (or `${jobid}`) in `text` as the job's id."""
    from string import Template
    return Template(text).safe_substitute(jobid=job.id, COBALT_JOBID=job.id) if "$" in text else text


def local_time(fmt: str, t: float) -> str:
    """`t` in local time; one no calendar here can show (past year 9999, say a reservation
    an older hpcsched took) as its epoch seconds, not a traceback."""
    try:
        return time.strftime(fmt, time.localtime(t))
    except (OverflowError, ValueError, OSError):
        return f"{t:.0f}"


def resolve(jobs: dict, text: str, server: str) -> list[Job]:
    """The jobs an id names (an array name gives all its subjobs); CommandError 153 if none."""
    jid, index = parse_ref(text)
    if index is None:
        job = jobs.get(jid)
        found = [job] if job is not None and not job.array_id else []
    else:
        found = [j for j in jobs.values() if j.array_id == jid and (index == ALL or j.array_index == index)]
        found.sort(key=lambda j: j.array_index)
    if not found:
        shown = f"{jid}[{'' if index == ALL else index}]" if index is not None else str(jid)
        raise CommandError(f"Unknown Job Id {shown}.{server}", UNKNOWN_JOB)
    return found


#: flavor -> the state letter for each core state (finished is C in Torque, F in OpenPBS)
_LETTERS = {flavor: {QUEUED: "Q", HELD: "H", DEP_HOLD: "H", DEP_FAIL: "H",
                     WAITING: "W", RUNNING: "R", EXITING: "E",
                     COMPLETED: done, DELETED: done}
            for flavor, done in (("torque", "C"), ("openpbs", "F"))}


def state_letter(job: Job, flavor: str) -> str:
    return "S" if is_suspended(job) else _LETTERS[flavor][job.state]


def counted(job, flavor: str) -> bool:
    """Is the job among a queue's or the server's total_jobs (qstat -Q's Tot)?  Every job
    not finished, and under Torque the completed jobs it still shows (state C); OpenPBS's
    finished jobs are history, not counted."""
    return job.state not in (COMPLETED, DELETED) or flavor == "torque"


def group_of(job: Job) -> str:
    """The job's group as accounting and checkjob give it: the one it ran under (qsub -W
    group_list), else its owner's primary group, else (an owner this host does not know)
    the owner's name, as Torque writes it."""
    return job.group or _primary_group(job.owner)


@functools.lru_cache(maxsize=256)
def _primary_group(user: str) -> str:
    import grp
    import pwd
    try:
        return grp.getgrgid(pwd.getpwnam(user).pw_gid).gr_name
    except (KeyError, OverflowError):
        return user


def is_suspended(job: Job) -> bool:
    """Stopped by qsig -s suspend (state S): it keeps its nodes; its walltime stands still."""
    return job.state == RUNNING and job.suspended_at is not None


def run_time(job: Job, now: float) -> float:
    """The walltime the job has used: from its start to its end (or `now`; or to when it
    really ended, where it ended while no server ran: `ran_until`), less the time it was
    suspended."""
    end = job.end_time if job.end_time is not None else now
    end = min(end, job.extra.get("ran_until", end))
    return max(0.0, end - job.start_time - job.suspended(end))


def resources_used(job: Job, now: float) -> dict[str, str]:
    """resources_used as qstat -f, the end mail and the epilogue show it, in Torque's order
    (cput, mem, vmem, walltime): up to `now`, or to the job's end."""
    return {"cput": hms(job.cpu_time), **memory_used(job), "walltime": hms(run_time(job, now))}


def memory_used(job: Job) -> dict[str, str]:
    """resources_used.mem and .vmem as PBS shows them: the peaks the server measured over
    the job's processes, in kilobytes (nothing for a job it has not measured)."""
    return {name: kb(job.extra[f"used_{name}"]) for name in ("mem", "vmem") if f"used_{name}" in job.extra}


def kb(size: int) -> str:
    """Bytes as PBS shows a size it measured: whole kilobytes, rounded up."""
    return f"{-(-size // 1024)}kb"


def hold_letters(job: Job) -> str:
    """PBS Hold_Types: some of u, o, s (dependency holds count as s), or n."""
    kinds = {h.value for h in job.holds}
    if job.state in (DEP_HOLD, DEP_FAIL):
        kinds.add(Hold.SYSTEM.value)
    return "".join(k for k in "uos" if k in kinds) or "n"


def may_touch(site, user: str, job: Job, hold: str = "u") -> bool:
    """PBS: owners act on their own jobs (user holds), and so do the users a Cobalt job
    names (--run_users); operators also on others' and on operator holds; system holds
    are for managers."""
    if hold == "s":
        return site.is_manager(user)
    if hold == "o":
        return site.is_operator(user)
    return user == job.owner or user in job.extra.get("cobalt", {}).get("run_users", ()) or site.is_operator(user)


def may_see(site, user: str, job: Job) -> bool:
    """qmgr's query_other_jobs (true by default): false, a user sees only their own jobs
    and the Cobalt jobs naming them (--run_users); operators and managers see every one,
    in qstat, qselect, showq, checkjob, showstart, tracejob and mdiag -p alike."""
    return site.config.get("query_other_jobs", True) or user == job.owner or site.is_operator(user) \
        or user in job.extra.get("cobalt", {}).get("run_users", ())


def visible(site, user: str, jobs: dict) -> Mapping:
    """The jobs `user` may see (may_see), as a mapping read through (no copy): what names
    a job (a dependency) finds an unseen one as it finds an unknown one."""
    if site.config.get("query_other_jobs", True) or site.is_operator(user):
        return jobs
    return _Visible(jobs, lambda job: may_see(site, user, job))


class _Visible(Mapping):
    """`jobs` less those `see` refuses (get, in, [], values... all agree)."""

    def __init__(self, jobs: dict, see):
        self.all, self.see = jobs, see

    def __getitem__(self, key):
        job = self.all[key]
        if not self.see(job):
            raise KeyError(key)
        return job

    def __iter__(self):
        return (k for k, job in self.all.items() if self.see(job))

    def __len__(self):
        return sum(1 for _ in self)


def check_reservation(sched, job: Job) -> None:
    """Refuse a job naming an advance reservation (-l advres) that does not exist or would
    never admit it, as Moab does (188), rather than let it wait for nothing."""
    res = sched.reservations.get(job.reservation)
    if res is None:
        raise CommandError(f"cannot locate reservation {job.reservation}", LIMITS)
    if not res.admits(job):
        raise CommandError(f"reservation {job.reservation} does not admit {job.owner}", LIMITS)


def deny(prog: str, job: Job, site) -> CommandError:
    return CommandError(f"Unauthorized Request  {display_id(job, site.server)}", UNAUTHORIZED)


def check_deadline(site, user: str) -> None:
    """Only the site's deadline users (and managers) give a job a deadline (-W deadline)."""
    if not site.may_set_deadline(user):
        raise CommandError(f"Unauthorized Request MSG={user} is not a deadline user (deadline_users)", UNAUTHORIZED)


def check_priority(site, user: str, priority: int) -> None:
    """Grid Engine's rule, on a site its policy orders: a user may only lower a job's POSIX
    priority (-p up to 0); operators and managers may raise it."""
    policy = site.config.get("priority", {}).get("policy") if isinstance(site.config.get("priority"), dict) else None
    if priority > 0 and policy == "gridengine" and not site.is_operator(user):
        raise CommandError(f"Unauthorized Request MSG=only operators and managers may raise a job's priority "
                           f"above 0 (-p {priority})", UNAUTHORIZED)


def command_line() -> None:
    """A closed pipe (`qstat | head`) ends the command quietly, as for any Unix tool."""
    import signal
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)


def fail(prog: str, err: Exception) -> int:
    """Print one line for `err` and return its exit status."""
    sys.stderr.write(f"{prog}: {err}\n")
    return err.status if isinstance(err, CommandError) else SYSTEM


def version(prog: str) -> int:
    """`--version` per flavor: Torque on stderr, OpenPBS `pbs_version =` on stdout."""
    import os

    from ..store.site import load_site
    try:
        flavor = load_site().flavor
    except ConfigError:
        flavor = os.environ.get("HPCSCHED_FLAVOR", "torque")
    if flavor == "openpbs":
        print(f"pbs_version = {VERSION}")
    else:
        sys.stderr.write(f"Version: {VERSION}\n")  # (Torque adds its git commit: we have none to name)
    return 0


@dataclass(frozen=True)
class Command:
    """A PBS-style command: its option table (see options.py), its usage line, and its
    action, `action(opts, operands, out, now) -> exit status`, given the options in order
    as (letter, value) pairs.  An action raises CommandError for one line and a status,
    or UsageError for a line that the usage line follows."""

    name: str
    options: str
    usage: str
    action: Callable[[list[tuple[str, str]], list[str], TextIO, float], int]
    changes: bool = False  # it changes the store: wake a waiting server after it
    permute: bool = True  # options may follow operands
    dashes: bool = False  # a `--` ending the options is kept as an operand (qsub's)

    def parse(self, argv: list[str]) -> tuple[list[tuple[str, str]], list[str]]:
        """(options in order, operands) by the command's table; UsageError if malformed."""
        return options.parse(argv, self.options, self.permute, dashes=self.dashes)

    def __call__(self, argv: list[str] | None = None, out: TextIO | None = None, now: float | None = None) -> int:
        """Run the command (`argv` None: from the real command line): `--version`, one-line
        errors with PBS exit statuses, and after a change a poke to the server."""
        if argv is None:
            command_line()
            argv = sys.argv[1:]
        if argv[:1] == ["--version"]:
            return version(self.name)
        try:
            opts, operands = self.parse(argv)
            status = self.action(opts, operands, out or sys.stdout, time.time() if now is None else now)
        except UsageError as e:
            return fail(self.name, CommandError(f"{e}\n{self.usage}", USAGE))
        except (CommandError, SchedulerError, OSError) as e:
            return fail(self.name, e)
        if self.changes:
            from ..store.journal import default_home
            from ..store.site import notify
            notify(default_home())
        return status
