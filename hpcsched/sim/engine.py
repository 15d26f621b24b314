"""The simulated-clock event loop: how the library is driven through time.

    finished, acc = Engine(scheduler).run(arrivals, events=[(1000.0, release)], watch=show)

`arrivals` are (submit time, Job, run time, tag) in submit order, read lazily (a trace
streams).  At each instant the loop ends the jobs whose run time is up (`job_ended`, and
`forget` unless `keep`), submits that instant's arrivals in order, calls that instant's
`events` (callables taking (scheduler, now)), then runs one scheduling pass, the pass
the commands and the server run; also every `period` seconds while jobs wait (Cobalt
passes every 15 s).  A started job ends at its start plus its run time.  So runs are
deterministic: ends first, then submissions in arrival order, then events (in time
order, then the order they were added).  While jobs wait there is also a pass when a
reservation begins or ends or a deferred job becomes eligible (`Scheduler.wakeup`).  A submission the core refuses (no queue takes
it) is kept in `rejected` with the reason, and the replay goes on.

An `Estimates` model (sim/estimates.py) may stand between the trace and the planner: it
sets each job's walltime (the planner's estimate) as the job is submitted, learns from
each end, and gives a new estimate when a running job outlives its own.

The server (`server/loop.py`) is the real-time twin: the same calls into the same core,
on the wall clock, with real processes ending the jobs.
"""
from __future__ import annotations

import heapq
import itertools
import math
from typing import Callable, Iterable

from .. import sitefilter
from ..core.errors import Rejected, SchedulerError, Unplaceable
from ..core.jobs import Job
from ..core.plan import Plan
from ..core.scheduler import Scheduler

INF = math.inf


class SimulationError(SchedulerError):
    """A workload the simulator cannot replay (unsorted, or no machine size)."""


class Finished:
    """One replayed job: the tag it arrived with (a trace record in a replay) and what the
    simulation did with it."""

    __slots__ = ("record", "submit", "start", "end", "size", "units", "backfill", "queue")

    def __init__(self, record, submit: float, start: float, end: float, size: int, units: int, backfill: bool,
                 queue: str = ""):
        self.record, self.submit, self.start, self.end = record, submit, start, end
        self.size, self.units, self.backfill, self.queue = size, units, backfill, queue

    @property
    def wait(self) -> float:
        return self.start - self.submit

    @property
    def run(self) -> float:
        return self.end - self.start

    @property
    def response(self) -> float:
        return self.end - self.submit

    def __repr__(self) -> str:
        return (f"Finished({self.record!r}, submit={self.submit:g}, start={self.start:g}, end={self.end:g}, "
                f"size={self.size}, units={self.units}, backfill={self.backfill}, queue={self.queue!r})")

    def as_record(self):
        """The trace record with the simulated submit (a replay at another load moves it),
        wait and run time."""
        return self.record._replace(submit=self.submit, wait=self.wait, run=self.run)


class Engine:
    """The discrete-event loop around one Scheduler."""

    def __init__(self, scheduler: Scheduler, period: float | None = None,
                 progress: Callable[[int], None] | None = None, estimates=None, submit_filter=None):
        self.scheduler, self.period, self.progress, self.estimates = scheduler, period, progress, estimates
        self.submit_filter = submit_filter  # the site's Python filter (sitefilter.py), run on each arrival
        self.rejected: list[tuple[object, str]] = []  # (tag, reason) of refused submissions
        self.unplaceable = 0  # of them, those no shape the machine's placement allows holds
        self._timed: list[tuple[float, int, Callable]] = []  # (time, order added, event)
        self._added = itertools.count()

    def at(self, t: float, event: Callable[[Scheduler, float], None]) -> None:
        """Call `event(scheduler, t)` at `t` (a pass follows), after the events already due then."""
        heapq.heappush(self._timed, (t, next(self._added), event))

    def run(self, arrivals: Iterable[tuple[float, Job, float, object]],
            events: Iterable[tuple[float, Callable[[Scheduler, float], None]]] = (),
            watch: Callable[[Plan], None] | None = None, keep: bool = False) -> tuple[list[Finished], dict]:
        """Run to the end; (the jobs in the order they ended, the machine's accounting:
        busy and idle-while-waiting unit-seconds, first submit, last end, passes, units)."""
        sched, period, progress = self.scheduler, self.period, self.progress
        ends: list[tuple[float, int]] = []  # (end time, job id)
        running: dict[int, tuple] = {}  # job id -> tag, submit, start, size, units, backfill, queue
        waiting: dict[int, tuple] = {}  # job id -> tag, run time
        for t, event in events:
            self.at(t, event)
        timed = self._timed
        finished: list[Finished] = []
        source = iter(arrivals)
        nxt = next(source, None)
        total_units = sched.topology.measure(sched.topology.available())
        busy_units = 0
        busy = idle_while_waiting = 0.0  # unit-seconds
        first = last_t = None
        last_end, passes = 0.0, 0
        next_tick = INF
        while nxt is not None or ends or timed or next_tick < INF:
            now = min(nxt[0] if nxt is not None else INF, ends[0][0] if ends else INF,
                      timed[0][0] if timed else INF, next_tick)
            if last_t is not None:
                dt = now - last_t
                busy += busy_units * dt
                if sched.runnable:
                    idle_while_waiting += (total_units - busy_units) * dt
            last_t = now
            while ends and ends[0][0] == now:  # the jobs whose run time is up end
                busy_units -= self._end(heapq.heappop(ends)[1], now, running, finished, keep)
                last_end = now
            while nxt is not None and nxt[0] == now:  # then this instant's arrivals, in order
                _, job, run, tag = nxt
                self._arrive(job, run, tag, now, waiting)
                if first is None:
                    first = now
                nxt = next(source, None)
                if nxt is not None and nxt[0] < now:
                    raise SimulationError(f"arrivals not sorted by submit time at job {nxt[1].id or nxt[3]}")
            while timed and timed[0][0] == now:  # then its events
                heapq.heappop(timed)[2](sched, now)
            plan = sched.iterate(now)  # and one pass
            passes += 1
            busy_units += self._started(plan, now, waiting, running, ends)
            if watch:
                watch(plan)
            # a pass also when a reservation begins or ends or a deferred job becomes eligible
            next_tick = sched.wakeup(now)
            if period and sched.runnable:
                next_tick = min(next_tick, (math.floor(now / period) + 1) * period)
            if progress:
                progress(len(finished))
        acc = {"busy": busy, "idle_while_waiting": idle_while_waiting, "first": first, "last": last_end,
               "passes": passes, "units": total_units}
        return finished, acc

    def _end(self, jid: int, now: float, running: dict, finished: list, keep: bool) -> int:
        """Running job `jid` ends at `now` (forgotten unless `keep`), kept as Finished; the
        units it held."""
        sched = self.scheduler
        tag, submit, start, size, units, backfill, queue = running.pop(jid)
        ended = sched.job_ended(jid, now, 0)
        if not keep:
            sched.forget(jid)
        finished.append(Finished(tag, submit, start, now, size, units, backfill, queue))
        if self.estimates:
            self.estimates.ended(ended, now - start)
        return units

    def _arrive(self, job: Job, run: float, tag, now: float, waiting: dict) -> None:
        """`job` arrives: its estimate set, the site's filter run, submitted (waiting for a
        start) or kept in `rejected` with the reason."""
        sched = self.scheduler
        if self.estimates:
            self.estimates.predict(job, tag, run, now)
        try:
            if self.submit_filter is not None:
                sitefilter.apply(self.submit_filter, job, sched, now)
            job = sched.submit(job, now)
        except Rejected as e:
            self.rejected.append((tag, str(e)))
            self.unplaceable += isinstance(e, Unplaceable)
        else:
            waiting[job.id] = (tag, run)

    def _started(self, plan: Plan, now: float, waiting: dict, running: dict, ends: list) -> int:
        """The jobs `plan` started run until their run times are up (and past its estimate,
        one is given a new one); the units they took."""
        sched, taken = self.scheduler, 0
        for st in plan.started:
            jid = st.job_id
            tag, run = waiting.pop(jid)
            units = sched.topology.measure(st.allocation.units)
            taken += units
            job = sched.jobs[jid]
            running[jid] = (tag, job.submit_time, now, sched.topology.size(job.request), units, st.backfill,
                            job.queue)
            heapq.heappush(ends, (now + run, jid))
            if self.estimates and run > job.walltime:
                self.at(now + job.walltime, self._outlived(jid, tag, running))
        return taken

    def _outlived(self, jid: int, tag, running: dict) -> Callable[[Scheduler, float], None]:
        """The event of a running job reaching its estimate: it is given a new one."""
        def event(sched: Scheduler, now: float) -> None:
            if jid in running:
                sched.alter(jid, now, walltime=self.estimates.corrected(sched.jobs[jid], tag, now))
        return event
