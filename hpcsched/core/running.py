"""The running set: the units each running job holds, and the kept profile of their ends.

Invariants: `busy` is the OR of `units` (job id -> the units it holds).  `base`, once built,
is the machine's available units over time with each running job's units held up to its
base end (`base_end`), as one span (`span`: job id -> its span's id in `base`, while `base`
is not None); jobs starting and ending keep it so, and whatever it cannot follow
(a walltime altered, a node's state changed, a job resumed) drops it, to be built again
from the running jobs (None).  `ends` is a heap of (base end, id) of the running jobs not
yet found past it; `overrun` holds those found past it, `paused` the suspended ones: a
pass holds both on their units beyond the base (`hold_late`).
"""
from __future__ import annotations

import heapq
from .jobs import Job
from .profile import Profile
from .topology import Topology


def base_end(job: Job) -> float:
    """A running job's end as the kept profile holds it: its start and walltime, later by
    the time it was suspended before any present suspension (that one a pass adds)."""
    return job.start_time + job.walltime + job.suspended_for


class Running:
    """The units running jobs hold, kept as jobs start and end."""

    def __init__(self, topology: Topology):
        self.topology = topology
        self.units: dict[int, int] = {}  # running job id -> the units it holds
        self.busy = 0  # the OR of `units`
        self.base: Profile | None = None
        self.span: dict[int, int] = {}  # running job id -> its span in `base` (see Profile.add_span)
        self.ends: list[tuple[float, int]] = []  # (base_end, job id) of running jobs
        self.overrun: set[int] = set()  # running past their walltime
        self.paused: set[int] = set()  # suspended: they hold their units, their ends move on with the clock

    def start(self, job: Job, units: int, now: float) -> None:
        """`job` starts on `units` at `now`."""
        self.units[job.id] = units
        self.busy |= units
        if self.base is not None:
            self.span[job.id] = self.base.add_span(now, now + job.walltime, units=units)
        heapq.heappush(self.ends, (now + job.walltime, job.id))

    def stop(self, job: Job, now: float) -> None:
        """`job` ends (or is requeued) at `now`: its units are free from now."""
        jid = job.id
        units = self.units.pop(jid, None)
        if units:
            self.busy ^= units
        if units is not None and self.base is not None:
            self.base.remove_span(self.span.pop(jid))
        self.overrun.discard(jid)
        self.paused.discard(jid)

    def restored(self, job: Job, units: int) -> None:
        """A running job as a saved state has it (the base is built when first asked for)."""
        self.units[job.id] = units
        self.busy |= units
        if job.suspended_at is not None:
            self.paused.add(job.id)
        self.base = None

    def built(self, now: float, active: dict[int, Job]) -> Profile:
        """The kept profile, built from the running jobs `active` if it was dropped."""
        if self.base is None:
            self.base = Profile.from_running(now, self.topology.available(), [
                (base_end(j), self.units[j.id]) for j in active.values()])
            self.span = dict(zip(active, self.base.spans))  # (ids in the pairs' order)
            self.ends = [(base_end(j), j.id) for j in active.values()]
            heapq.heapify(self.ends)
        return self.base

    def hold_late(self, profile: Profile, now: float, active: dict[int, Job], grace: float) -> None:
        """Hold in `profile` what the base does not: a job past its walltime is still there,
        expected to end `grace` from now; a suspended one holds its units for what its
        walltime has left (past it, a grace period too).  Only its units up: one offline or
        down under it is no free unit to take."""
        ends = self.ends
        while ends and ends[0][0] <= now:
            end, jid = heapq.heappop(ends)
            job = active.get(jid)
            if job is not None and base_end(job) == end and jid not in self.paused:
                self.overrun.add(jid)
        up = self.topology.available()
        for jid in sorted(self.overrun):
            profile.occupy(self.units[jid] & up, now, now + grace)
        for jid in sorted(self.paused):
            job = active[jid]
            t0, t1 = max(now, base_end(job)), job.planned_end(now)
            if t1 <= now:
                t1 = now + grace
            if t1 > t0:
                profile.occupy(self.units[jid] & up, t0, t1)
