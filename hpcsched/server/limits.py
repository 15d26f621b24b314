"""A running job's limits and what it uses, as pbs_mom keeps them.

Set by the kernel on the job's processes (the job's wrapper sets them with `ulimit` just
before it runs the job, so they travel with it to whichever host a launcher picks, and the
wrapper's own files are not held to them), in the shell's units, rounded up:

    pcput        ulimit -t  CPU seconds of each process (SIGXCPU, then SIGKILL)
    file         ulimit -f  the largest file a process may write (512-byte blocks)
    pmem         ulimit -d  each process's data (heap) size (KB)
    vmem, pvmem  ulimit -v  each process's address space (KB): the smaller, never below pmem

and `nice`, the job's nice value, taken as it starts (a negative one only where the kernel
allows it).  Watched by the server over all of the job's processes together, from one
look at /proc (`Usage`): `cput` (CPU seconds), `mem` (resident memory) and `vmem`
(virtual memory).  A job past one is killed as a job past its walltime is.  The peaks of
`mem` and `vmem` are the job's resources_used.mem and .vmem, as Torque reports them.
"""
from __future__ import annotations

import math
import os
from typing import Iterable, NamedTuple

from ..core.jobs import Job
from ..pbs import attributes
from ..pbs.common import kb
from ..pbs.errors import UsageError

#: the largest limit (in the shell's units) a limit is kept to; past it there is none
_ULIMIT_MAX = 2 ** 53
_PAGE = os.sysconf("SC_PAGE_SIZE")
_TICKS = os.sysconf("SC_CLK_TCK")


def asked(job: Job) -> dict[str, int]:
    """The job's limits (attributes.limits: bytes, seconds, nice), with a select job's
    memory (asked in its chunks) as its `mem`."""
    res = job.extra.get("resources", {})
    try:
        out = attributes.limits(res)
    except UsageError:  # (a store written before the checks: a value qsub refuses now is none)
        out = {}
    if "mem" not in out and "select" in res and job.request.mem:
        out["mem"] = job.request.mem * job.request.nodes * 2 ** 20
    return out


def ulimits(limits: dict[str, int]) -> str:
    """The job's kernel limits as `ulimit` flags and values ('-t 90 -f 4'), for its wrapper."""
    out = []
    if "pcput" in limits:
        out.append(("-t", max(1, limits["pcput"])))
    if "file" in limits:
        out.append(("-f", -(-limits["file"] // 512)))
    if "pmem" in limits:
        out.append(("-d", -(-limits["pmem"] // 1024)))
    space = [limits[k] for k in ("vmem", "pvmem") if k in limits]
    if space:
        out.append(("-v", -(-max(min(space), limits.get("pmem", 0)) // 1024)))
    return " ".join(f"{flag} {value}" for flag, value in out if value <= _ULIMIT_MAX)


class Use(NamedTuple):
    cpu: float  # seconds, with the children the processes reaped
    mem: int  # resident bytes
    vmem: int  # virtual bytes


class Usage:
    """One look at every process in /proc: what each process group (a job's wrapper leads
    its own) and any set of processes (a job's cgroup) uses."""

    def __init__(self):
        self.procs: dict[int, tuple[int, Use]] = {}  # pid -> (process group, use)
        self.groups: dict[int, set[int]] = {}  # process group -> its pids
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/stat") as f:
                    data = f.read()
            except OSError:
                continue
            # after the command's name: state ppid pgrp ... utime(11) stime cutime cstime
            # ... vsize(20) rss(21, pages)
            fields = data[data.rindex(")") + 2:].split()
            if fields[0] == "Z":
                continue
            cpu = sum(int(x) for x in fields[11:15]) / _TICKS
            pid, group = int(name), int(fields[2])
            self.procs[pid] = (group, Use(cpu, int(fields[21]) * _PAGE, int(fields[20])))
            self.groups.setdefault(group, set()).add(pid)

    def of(self, pgid: int, members: Iterable[int] = ()) -> Use:
        """The sum over process group `pgid` and the processes `members`."""
        pids = self.groups.get(pgid, set()) | {pid for pid in members if pid in self.procs}
        uses = [self.procs[pid][1] for pid in pids]
        return Use(sum(u.cpu for u in uses), sum(u.mem for u in uses), sum(u.vmem for u in uses))


def seconds_over(name: str, used: float, limit: float) -> str:
    """pbs_mom's words for a time past its limit, whole seconds: the use rounded up, so it
    reads past the limit ('walltime 61 exceeded limit 60', never '60 exceeded limit 60')."""
    return f"{name} {math.ceil(used)} exceeded limit {int(limit)}"


def over(job: Job, limits: dict[str, int], use: Use) -> tuple[str, str] | None:
    """(the limit, what pbs_mom says: 'mem 2048kb exceeded limit 1024kb') for a job past its
    cput, mem or vmem; else None."""
    if job.cput > 0 and use.cpu > job.cput:
        return "cput", seconds_over("cput", use.cpu, job.cput)
    for name in ("mem", "vmem"):
        if name in limits and getattr(use, name) > limits[name]:
            return name, f"{name} {kb(getattr(use, name))} exceeded limit {kb(limits[name])}"
    return None

