"""Trace-driven simulation on the scheduling core, with a simulated clock.

    result = simulate("trace.swf.gz", policy="fifo", backfill="easy")
    print(result.summary())

The engine is a discrete-event loop: submissions at their trace times, ends at start +
run time, and one scheduling pass (`Scheduler.iterate`, the same pass the commands and the
server run) after all events of one instant, optionally also every `period` seconds while
jobs wait (Cobalt passes every 15 s).  Events of one instant are taken ends first, then
submissions in trace order, so runs are deterministic.
"""
from __future__ import annotations

import functools
import gc
import heapq
import json
import math
import os
from dataclasses import dataclass, field
from typing import Callable, Iterable

from ..config import build
from ..core.errors import SchedulerError
from ..core.jobs import Job, Request
from ..core.scheduler import Scheduler
from . import swf
from .metrics import Metrics, compute

INF = math.inf


class SimulationError(SchedulerError):
    """A workload the simulator cannot replay (unsorted, or no machine size)."""


@dataclass(frozen=True)
class Machine:
    """What the trace runs on: `nodes` nodes of `ppn` cores.  Exclusive nodes take
    ceil(procs / ppn) whole nodes per job; shared nodes take `procs` cores."""

    nodes: int
    ppn: int = 1
    shared: bool = False

    def config(self) -> list[dict]:
        width = len(str(self.nodes - 1))
        return [{"names": f"n[{0:0{width}d}-{self.nodes - 1:0{width}d}]" if self.nodes > 1 else "n0",
                 "cores": self.ppn, "shared": self.shared}]

    @property
    def units(self) -> int:
        return self.nodes * self.ppn if self.shared else self.nodes


def machine_for(header: swf.Header, nodes: int | None = None, ppn: int | None = None,
                shared: bool = False) -> Machine:
    """The machine a trace runs on: options first, then the header.

    With no options, each of the header's MaxProcs processors is a schedulable unit
    (nodes = MaxProcs, ppn = 1), as the archive's logs record processors; give --nodes and
    --ppn to schedule whole nodes instead."""
    if ppn is None:
        ppn = 1
    if nodes is None:
        procs = header.max_procs or header.max_nodes
        if procs is None:
            raise SimulationError("the trace header has neither MaxProcs nor MaxNodes: give --nodes")
        nodes = max(1, procs // ppn)
    if nodes < 1 or ppn < 1:
        raise SimulationError("--nodes and --ppn must be at least 1")
    return Machine(nodes, ppn, shared)


@dataclass
class MapStats:
    """How the trace was mapped onto the machine (reported in every summary)."""

    records: int = 0
    skipped_bad_lines: int = 0
    skipped_no_procs: int = 0  # neither allocated nor requested processors known
    skipped_never_ran: int = 0  # run time unknown (-1): cancelled before it started
    skipped_too_large: int = 0  # more processors than the machine has
    estimate_from_run: int = 0  # no requested time: the actual run time was used
    cut_at_request: int = 0  # ran longer than requested: killed at the request

    @property
    def simulated(self) -> int:
        return (self.records - self.skipped_no_procs - self.skipped_never_ran
                - self.skipped_too_large)


def map_record(rec: swf.Record, machine: Machine, stats: MapStats) -> tuple[Request, float, float] | None:
    """(request, walltime, run time) for one record, or None if it cannot be replayed."""
    stats.records += 1
    procs = rec.procs if rec.procs > 0 else rec.req_procs
    if procs <= 0:
        stats.skipped_no_procs += 1
        return None
    if rec.run < 0:
        stats.skipped_never_ran += 1
        return None
    capacity = machine.nodes * machine.ppn
    if procs > capacity:
        stats.skipped_too_large += 1
        return None
    estimate = rec.req_time
    if estimate <= 0:
        stats.estimate_from_run += 1
        estimate = rec.run
    estimate = max(float(estimate), 1.0)
    run = float(rec.run)
    if run > estimate:
        stats.cut_at_request += 1
        run = estimate
    if machine.shared:
        request = _request(0, 1, procs)
    elif machine.ppn == 1:
        request = _request(procs, 1, 0)
    else:
        request = _request(math.ceil(procs / machine.ppn), min(procs, machine.ppn), 0)
    return request, estimate, run


def job_for(rec: swf.Record, request: Request, walltime: float) -> Job:
    """The job a trace record submits: owner u<user>, group g<group>, the record's id."""
    return Job.trusted({"id": rec.job, "owner": f"u{rec.user}", "group": f"g{rec.group}", "request": request,
                        "walltime": walltime})


@functools.lru_cache(maxsize=4096)
def _request(nodes: int, ppn: int, cores: int) -> Request:
    """Requests are immutable and a trace repeats a few sizes: one object per size."""
    return Request(nodes=nodes, ppn=ppn, cores=cores) if not cores else Request(cores=cores)


class Finished:
    """One replayed job: its trace record and what the simulation did with it."""

    __slots__ = ("record", "start", "end", "size", "units", "backfill")

    def __init__(self, record: swf.Record, start: float, end: float, size: int, units: int, backfill: bool):
        self.record, self.start, self.end = record, start, end
        self.size, self.units, self.backfill = size, units, backfill

    @property
    def submit(self) -> float:
        return self.record.submit

    @property
    def wait(self) -> float:
        return self.start - self.record.submit

    @property
    def run(self) -> float:
        return self.end - self.start

    @property
    def response(self) -> float:
        return self.end - self.record.submit

    def as_record(self) -> swf.Record:
        """The trace record with the simulated wait and run time."""
        return self.record._replace(wait=self.wait, run=self.run)


@dataclass
class Result:
    jobs: list[Finished]
    metrics: Metrics
    machine: Machine
    mapping: MapStats
    policy: str
    backfill: str
    header: swf.Header = field(default_factory=swf.Header)

    def summary(self) -> str:
        return self.metrics.text(self)

    def to_json(self) -> dict:
        return {"policy": self.policy, "backfill": self.backfill,
                "machine": {"nodes": self.machine.nodes, "ppn": self.machine.ppn, "shared": self.machine.shared},
                "mapping": vars(self.mapping) | {"simulated": self.mapping.simulated},
                "metrics": self.metrics.to_json(),
                "jobs": [{"job": f.record.job, "submit": f.submit, "start": f.start, "end": f.end,
                          "wait": f.wait, "run": f.run, "size": f.size, "backfill": f.backfill}
                         for f in self.jobs]}

    def write_json(self, out) -> None:
        """`to_json()` as JSON: the summary indented, then one line per job (the C encoder
        writes those; an indented dump of every job is ten times slower)."""
        data = self.to_json()
        jobs = data.pop("jobs")
        head = json.dumps(data, indent=1)
        out.write(head[:-2] + ',\n "jobs": [')
        out.write(",".join("\n  " + json.dumps(j) for j in jobs))
        out.write("\n ]\n}\n")

    def write_swf(self, out) -> int:
        comments = ["Version: 2.2", f"Note: schedule simulated by hpcsched, policy={self.policy} "
                    f"backfill={self.backfill}",
                    f"MaxNodes: {self.machine.nodes}", f"MaxProcs: {self.machine.nodes * self.machine.ppn}"]
        if self.header.unix_start_time is not None:
            comments.append(f"UnixStartTime: {self.header.unix_start_time}")
        if self.header.time_zone:
            comments.append(f"TimeZoneString: {self.header.time_zone}")
        return swf.write(out, (f.as_record() for f in sorted(self.jobs, key=lambda f: f.record.job)),
                         comments)

    def start_times(self) -> dict[int, float]:
        return {f.record.job: f.start for f in self.jobs}


class Engine:
    """The discrete-event loop around one Scheduler."""

    def __init__(self, scheduler: Scheduler, machine: Machine, period: float | None = None,
                 progress: Callable[[int, int], None] | None = None):
        self.scheduler, self.machine, self.period, self.progress = scheduler, machine, period, progress

    def run(self, records: Iterable[swf.Record], mapping: MapStats) -> tuple[list[Finished], dict]:
        sched, period, progress = self.scheduler, self.period, self.progress
        ends: list[tuple[float, int]] = []  # (end time, job id)
        pending: dict[int, tuple] = {}  # running: record, start, size, units, backfill
        records_by_id: dict[int, tuple[swf.Record, float]] = {}  # waiting: record, run
        finished: list[Finished] = []
        source = iter(records)
        nxt = self._next(source, mapping)
        total_units = sched.topology.available().bit_count()
        busy_units = 0
        busy = idle_while_waiting = 0.0  # unit-seconds
        first = last_t = None
        last_end, passes = 0.0, 0
        next_tick = INF
        while nxt is not None or ends or (next_tick < INF and sched.runnable):
            now = min(nxt[0].submit if nxt is not None else INF, ends[0][0] if ends else INF,
                      next_tick if sched.runnable else INF)
            if last_t is not None:
                dt = now - last_t
                busy += busy_units * dt
                if sched.runnable:
                    idle_while_waiting += (total_units - busy_units) * dt
            last_t = now
            while ends and ends[0][0] == now:
                _, jid = heapq.heappop(ends)
                rec, start, size, units, backfill = pending.pop(jid)
                sched.job_ended(jid, now, 0)
                sched.forget(jid)
                busy_units -= units
                finished.append(Finished(rec, start, now, size, units, backfill))
                last_end = now
            while nxt is not None and nxt[0].submit == now:
                rec, (request, wall, run) = nxt
                job = sched.submit(job_for(rec, request, wall), now)
                records_by_id[job.id] = (rec, run)
                if first is None:
                    first = now
                nxt = self._next(source, mapping)
                if nxt is not None and nxt[0].submit < now:
                    raise SimulationError(f"trace not sorted by submit time at job {nxt[0].job}")
            plan = sched.iterate(now)
            passes += 1
            for st in plan.started:
                jid = st.job_id
                rec, run = records_by_id.pop(jid)
                units = st.allocation.units.bit_count()
                busy_units += units
                pending[jid] = (rec, now, sched.topology.size(sched.jobs[jid].request), units, st.backfill)
                heapq.heappush(ends, (now + run, jid))
            if period:
                next_tick = (math.floor(now / period) + 1) * period
            if progress:
                progress(mapping.records, len(finished))
        acc = {"busy": busy, "idle_while_waiting": idle_while_waiting, "first": first, "last": last_end,
               "passes": passes, "units": total_units}
        return finished, acc

    def _next(self, source, mapping: MapStats):
        for rec in source:
            mapped = map_record(rec, self.machine, mapping)
            if mapped is not None:
                return rec, mapped
        return None


def record(job: int, submit: float, procs: int, run: float, req_time: float = -1, user: int = 1,
           group: int = 1, queue: int = -1, status: int = 1) -> swf.Record:
    """A trace record from the fields that matter, for workloads built in code or tests."""
    return swf.Record(job, submit, -1, run, procs, -1, -1, procs, req_time, -1, status, user, group, -1,
                      queue, -1, -1, -1)


def simulate(workload, *, policy: str = "fifo", backfill: str = "easy", nodes: int | None = None,
             ppn: int | None = None, shared: bool = False, period: float | None = None,
             skip_bad: bool = False, warmup: float = 0.0, config: dict | None = None,
             progress: Callable[[int, int], None] | None = None) -> Result:
    """Replay `workload` (an SWF path, or Records / `record(...)` tuples sorted by submit
    time) under a policy and backfill mode; returns the schedule and its metrics.

    `config` may give extra scheduler settings (priority options, queues); the machine
    always comes from the trace header or `nodes`/`ppn`/`shared`.  `warmup` excludes that
    fraction of the first jobs (by submit order) from the per-job statistics.  Python's
    cycle collector is paused while it runs (for every thread) and restored after."""
    read_stats = swf.ReadStats()
    if isinstance(workload, (str, os.PathLike)):
        header = swf.header(workload)  # sizes the machine; the records then stream
        records = swf.read(workload, skip_bad=skip_bad, stats=read_stats)
    else:
        header = swf.Header()
        records = [r if isinstance(r, swf.Record) else record(*r) for r in workload]
        if nodes is None:
            nodes = max((r.procs if r.procs > 0 else r.req_procs for r in records), default=1)
    machine = machine_for(header, nodes, ppn, shared)
    cfg = dict(config or {})
    cfg["nodes"] = machine.config()
    cfg.setdefault("queues", {"batch": {}})
    cfg["priority"] = dict(cfg.get("priority", {}), policy=policy)
    cfg["backfill"] = backfill
    if period:
        cfg.setdefault("interval", period)
    sched = build(cfg)
    mapping = MapStats()
    engine = Engine(sched, machine, period, progress)
    # A replay keeps two objects per job (its record and its Finished) to the end and
    # leaves no cyclic garbage, so Python's cycle collector would only scan them over and
    # over, all of them at every full collection (6.7 s of 86 s on RICC's 448k jobs).  It
    # is paused for the replay, as timeit pauses it, and restored after.
    collecting = gc.isenabled()
    gc.disable()
    try:
        finished, acc = engine.run(records, mapping)
        metrics = compute(finished, acc, warmup)
    finally:
        if collecting:
            gc.enable()
    mapping.skipped_bad_lines = read_stats.skipped
    return Result(finished, metrics, machine, mapping, policy, backfill, header)
