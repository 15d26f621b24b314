"""Trace-driven simulation on the scheduling core: a trace replayed by the engine.

    result = simulate("trace.swf.gz", policy="fifo", backfill="easy")
    print(result.summary())

Each record is mapped onto the machine (`map_record`) as it is read and submitted at its
trace time; the engine (engine.py) ends it at start + run time.  Submissions of one
instant go in trace order, so runs are deterministic.
"""
from __future__ import annotations

import functools
import gc
import json
import math
import os
from dataclasses import dataclass, field
from typing import Callable, Iterable

from ..config import build
from ..core.jobs import Job, Request
from ..drain.accounts import GROUPS, Accounts, JobRecord
from ..drain.accounts import text as drain_text
from ..drain.samples import Recorder
from . import swf
from .engine import Engine, Finished, SimulationError
from .metrics import Metrics, compute


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
    return Job(id=rec.job, owner=f"u{rec.user}", group=f"g{rec.group}", request=request, walltime=walltime)


@functools.lru_cache(maxsize=4096)
def _request(nodes: int, ppn: int, cores: int) -> Request:
    """Requests are immutable and a trace repeats a few sizes: one object per size."""
    return Request(nodes=nodes, ppn=ppn, cores=cores) if not cores else Request(cores=cores)


@dataclass
class Result:
    jobs: list[Finished]
    metrics: Metrics
    machine: Machine
    mapping: MapStats
    policy: str
    backfill: str
    header: swf.Header = field(default_factory=swf.Header)
    drain: dict | None = None  # the drain report (drain/accounts.py), if it was accounted

    def summary(self) -> str:
        out = self.metrics.text(self)
        if self.drain is not None:
            out += "\n" + drain_text(self.drain, daily=False)
        return out

    def to_json(self) -> dict:
        return {"policy": self.policy, "backfill": self.backfill, "epoch": self.header.unix_start_time or 0,
                "machine": {"nodes": self.machine.nodes, "ppn": self.machine.ppn, "shared": self.machine.shared},
                "mapping": vars(self.mapping) | {"simulated": self.mapping.simulated},
                "metrics": self.metrics.to_json(), "drain": self.drain,
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


def arrivals(records: Iterable[swf.Record], machine: Machine, mapping: MapStats):
    """The engine's arrivals from trace records, mapped onto `machine` as they are read."""
    for rec in records:
        mapped = map_record(rec, machine, mapping)
        if mapped is not None:
            request, wall, run = mapped
            yield rec.submit, job_for(rec, request, wall), run, rec


def record(job: int, submit: float, procs: int, run: float, req_time: float = -1, user: int = 1,
           group: int = 1, queue: int = -1, status: int = 1) -> swf.Record:
    """A trace record from the fields that matter, for workloads built in code or tests."""
    return swf.Record(job, submit, -1, run, procs, -1, -1, procs, req_time, -1, status, user, group, -1,
                      queue, -1, -1, -1)


def simulate(workload, *, policy: str = "fifo", backfill: str = "easy", nodes: int | None = None,
             ppn: int | None = None, shared: bool = False, period: float | None = None,
             skip_bad: bool = False, warmup: float = 0.0, config: dict | None = None,
             progress: Callable[[int, int], None] | None = None, drain: bool = True,
             groups=GROUPS, placement: str = "first-fit") -> Result:
    """Replay `workload` (an SWF path, or Records / `record(...)` tuples sorted by submit
    time) under a policy and backfill mode; returns the schedule and its metrics.

    `config` may give extra scheduler settings (priority options, queues); the machine
    always comes from the trace header or `nodes`/`ppn`/`shared`, its node `placement`
    from the argument (first-fit or contiguous; see machines/nodepool.py).  `warmup` excludes that
    fraction of the first jobs (by submit order) from the per-job statistics.  With `drain`,
    every pass's node picture is accounted (drain/), reported by job-size `groups`.  Python's
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
    cfg.setdefault("placement", placement)
    cfg.setdefault("queues", {"batch": {}})
    cfg["priority"] = dict(cfg.get("priority", {}), policy=policy)
    cfg["backfill"] = backfill
    if period:
        cfg.setdefault("interval", period)
    sched = build(cfg)
    mapping = MapStats()
    engine = Engine(sched, period, progress and (lambda done: progress(mapping.records, done)))
    recorder = Recorder(sched, Accounts(offset=_utc_offset(header)), header.unix_start_time or 0.0) if drain else None
    # A replay keeps two objects per job (its record and its Finished) to the end and
    # leaves no cyclic garbage, so Python's cycle collector would only scan them over and
    # over, all of them at every full collection (8 % of a RICC replay when measured).  It
    # is paused for the replay, as timeit pauses it, and restored after.
    collecting = gc.isenabled()
    gc.disable()
    try:
        finished, acc = engine.run(arrivals(records, machine, mapping), watch=recorder and recorder.watch)
        metrics = compute(finished, acc, warmup)
        report = recorder and recorder.accounts.report(job_records(finished, recorder.epoch), groups=groups)
    finally:
        if collecting:
            gc.enable()
    mapping.skipped_bad_lines = read_stats.skipped
    return Result(finished, metrics, machine, mapping, policy, backfill, header, report)


def job_records(finished: list[Finished], epoch: float = 0.0) -> dict[str, JobRecord]:
    """The drain report's job records from a replay's finished jobs."""
    return {str(f.record.job): JobRecord(str(f.record.job), f.size, f.start + epoch, f.end + epoch, f.backfill)
            for f in finished}


def swf_job_records(path: str, ppn: int = 1) -> dict[str, JobRecord]:
    """An SWF trace's jobs as drain job records (times offset by its UnixStartTime):
    size = processors / ppn, rounded up."""
    epoch = float(swf.header(path).unix_start_time or 0)
    out = {}
    for r in swf.read(path):
        procs = r.procs if r.procs > 0 else r.req_procs
        start = r.submit + r.wait + epoch if r.wait >= 0 else None
        end = start + r.run if start is not None and r.run >= 0 else None
        out[str(r.job)] = JobRecord(str(r.job), max(1, math.ceil(procs / ppn)), start, end)
    return out


def _utc_offset(header: swf.Header) -> float:
    """The trace's UTC offset at its start (days begin at local midnight), 0 if unknown."""
    if not header.time_zone or header.unix_start_time is None:
        return 0.0
    try:
        from datetime import datetime
        from zoneinfo import ZoneInfo
        return datetime.fromtimestamp(header.unix_start_time, ZoneInfo(header.time_zone)).utcoffset().total_seconds()
    except Exception:  # no such zone, or no time zone data on this machine
        return 0.0
