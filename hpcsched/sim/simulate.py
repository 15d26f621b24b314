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
import re
from dataclasses import dataclass, field
from typing import Callable, Iterable

from .. import sitefilter
from ..config import DRIVER_KEYS, build
from ..core.jobs import Job, Request
from ..drain.accounts import GROUPS, Accounts, JobRecord, groups_from
from ..drain.accounts import text as drain_text
from ..drain.samples import Recorder
from . import estimates, swf
from .engine import Engine, Finished, SimulationError
from .metrics import SIZE_CLASSES, Metrics, classes, compute


@dataclass(frozen=True)
class Machine:
    """What the trace runs on: `nodes` nodes of `ppn` cores.  Exclusive nodes take
    ceil(procs / ppn) whole nodes per job; shared nodes take `procs` cores.  A site's own
    [[nodes]] tables (`tables`) describe it instead when the replay has a --config."""

    nodes: int
    ppn: int = 1
    shared: bool = False
    tables: tuple = ()
    name: str = ""  # a built-in machine (machines/): blocks on a Blue Gene, nids on a Cray
    share: float = 0.0  # > 0: a record of p processors takes ceil(p * share) nodes

    @classmethod
    def from_tables(cls, tables: list[dict]) -> Machine:
        """The machine of a site's [[nodes]] tables: its node count, its largest core
        count (what a trace's processors are packed by), shared if any table is."""
        from ..core import nodelist
        try:
            names = [n for t in tables for n in nodelist.expand(str(t["names"]))]  # (as NodePool reads them)
            ppn = max(int(t.get("cores", 1)) for t in tables)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise SimulationError(f"nodes: {e}") from None
        return cls(len(names), ppn, any(t.get("shared", False) for t in tables), tuple(tables))

    def config(self) -> list[dict]:
        if self.tables:
            return [dict(t) for t in self.tables]
        width = len(str(self.nodes - 1))
        return [{"names": f"n[{0:0{width}d}-{self.nodes - 1:0{width}d}]" if self.nodes > 1 else "n0",
                 "cores": self.ppn, "shared": self.shared}]

    @property
    def units(self) -> int:
        return self.nodes * self.ppn if self.shared else self.nodes


def _built_machine(described, header: swf.Header, records, size_map: str) -> Machine:
    """The sizes of a machine of machines/ (a built-in name or a [machine] table), and the
    share of it one trace processor stands for."""
    from ..core.errors import ConfigError
    from ..machines import build as build_machine
    if size_map not in ("share", "procs"):
        raise SimulationError(f"size map {size_map!r} is not share or procs")
    try:
        topo = build_machine(described, None)
    except ConfigError as e:
        raise SimulationError(str(e)) from None
    nodes = topo.node_count
    ppn = max(1, sum(n.cores for n in topo.all_nodes()) // nodes)
    share = 0.0
    if size_map == "share":
        procs = header.max_procs or header.max_nodes
        if not procs and isinstance(records, list):  # (records built in code: their largest)
            procs = max((r.procs if r.procs > 0 else r.req_procs for r in records), default=0)
        if not procs:
            raise SimulationError("the trace header has neither MaxProcs nor MaxNodes: give --size-map procs")
        share = nodes / procs
    name = described if isinstance(described, str) else str(described.get("name", described.get("kind", "")))
    return Machine(nodes, ppn, False, (), name or "machine", share)


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
    if nodes > MAX_NODES or ppn > MAX_PPN:  # checked before a node is built
        raise SimulationError(f"a machine of {nodes} nodes x {ppn} cores: at most {MAX_NODES} nodes of "
                              f"{MAX_PPN} cores (give --nodes/--ppn, or fix the header's MaxProcs)")
    return Machine(nodes, ppn, shared)


MAX_NODES = 1 << 20  # a million nodes: ten times Sequoia's
MAX_PPN = 1 << 12
# a replay's times stay within this many seconds of the trace's start (68 years, SWF's
# 32-bit seconds): past it the day-by-day drain accounts and the metrics' series would
# walk for ever (a submit time of 1e30 hung the replay)
MAX_SECONDS = (1 << 31) - 1


@dataclass
class MapStats:
    """How the trace was mapped onto the machine (reported in every summary)."""

    records: int = 0
    skipped_bad_lines: int = 0
    skipped_no_procs: int = 0  # neither allocated nor requested processors known
    skipped_never_ran: int = 0  # run time unknown (-1): cancelled before it started
    skipped_too_large: int = 0  # more processors than the machine has
    skipped_cancelled: int = 0  # status 5 (cancelled), with --cancelled drop
    estimate_from_run: int = 0  # no requested time: the actual run time was used
    cut_at_request: int = 0  # ran longer than requested: killed at the request
    rejected: int = 0  # refused by every queue the router offered (reasons in `rejections`)
    unplaceable: int = 0  # of them, those no shape the machine's placement allows holds
    rejections: dict = field(default_factory=dict)  # reason (job numbers blanked) -> count

    @property
    def simulated(self) -> int:
        return (self.records - self.skipped_no_procs - self.skipped_never_ran
                - self.skipped_too_large - self.skipped_cancelled - self.rejected)


LOADS = (0.01, 100.0)  # the factors a replay's load may be scaled by (TraceMap.load)


@dataclass(frozen=True)
class TraceMap:
    """How a trace's fields become jobs (documented in man 1 hpcsched):

    user u<N> -> owner; group g<N> -> group and account (fair share's users, groups and
    projects); CPU time x processors -> the CPU time it reports; queue: the router chooses
    ("router", the default) or the record's queue number names it ("trace": through
    `queues` {number: name}, else q<N>); requested time -> walltime, the run time when
    none is recorded; cancelled records (status 5) kept ("keep") or dropped ("drop");
    `load` > 1 compresses the arrivals (every gap since the first submission divided by
    it, so the offered load is multiplied by it; < 1 stretches them), Feitelson's way of
    replaying a log at another load with its jobs unchanged."""

    queue: str = "router"
    queues: tuple = ()  # ((number, name), ...)
    cancelled: str = "keep"
    load: float = 1.0

    def __post_init__(self):
        if not (isinstance(self.load, (int, float)) and math.isfinite(self.load) and LOADS[0] <= self.load <= LOADS[1]):
            raise SimulationError(f"load {self.load!r}: a factor from {LOADS[0]:g} to {LOADS[1]:g}")
        if self.queue not in ("router", "trace"):
            raise SimulationError(f"queue mapping {self.queue!r}: use router or trace")
        if self.cancelled not in ("keep", "drop"):
            raise SimulationError(f"cancelled {self.cancelled!r}: use keep or drop")

    def queue_of(self, rec: swf.Record) -> str:
        if self.queue == "router":
            return ""
        return dict(self.queues).get(rec.queue, f"q{rec.queue}")


def map_record(rec: swf.Record, machine: Machine, stats: MapStats, tmap: TraceMap = TraceMap()
               ) -> tuple[Request, float, float] | None:
    """(request, walltime, run time) for one record, or None if it cannot be replayed
    (SimulationError if its submit or run time lies past MAX_SECONDS)."""
    stats.records += 1
    if rec.status == 5 and tmap.cancelled == "drop":
        stats.skipped_cancelled += 1
        return None
    procs = rec.procs if rec.procs > 0 else rec.req_procs
    if procs <= 0:
        stats.skipped_no_procs += 1
        return None
    if rec.run < 0:
        stats.skipped_never_ran += 1
        return None
    if machine.share:
        wanted = max(1, math.ceil(procs * machine.share))
        if wanted > machine.nodes:
            stats.skipped_too_large += 1
            return None
    elif procs > machine.nodes * machine.ppn:
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
    if not -MAX_SECONDS <= rec.submit <= MAX_SECONDS or run > MAX_SECONDS:
        what, value = ("submit time", rec.submit) if run <= MAX_SECONDS else ("run time", run)
        raise SimulationError(f"job {rec.job}: {what} {value:g} s is out of range (a replay's times lie within "
                              f"{MAX_SECONDS} s of 0)")
    if machine.share:
        request = _request(wanted, 1, 0)
    elif machine.shared:
        request = _request(0, 1, procs)
    elif machine.ppn == 1:
        request = _request(procs, 1, 0)
    else:
        request = _request(math.ceil(procs / machine.ppn), min(procs, machine.ppn), 0)
    return request, estimate, run


def job_for(rec: swf.Record, request: Request, walltime: float, queue: str = "") -> Job:
    """The job a trace record submits: owner u<user>, group and account g<group>, the
    record's id, the queue the mapping names (none: the router's choice), and the CPU time
    it will report when it ends (average per processor x processors; charged by the cpu
    usage metric)."""
    group = f"g{rec.group}"
    return Job(id=rec.job, owner=f"u{rec.user}", group=group, account=group, queue=queue, request=request,
               walltime=walltime, cpu_time=rec.cpu * rec.procs if rec.cpu > 0 and rec.procs > 0 else 0.0)


@functools.lru_cache(maxsize=4096)
def _request(nodes: int, ppn: int, cores: int) -> Request:
    """Requests are immutable and a trace repeats a few sizes: one object per size."""
    return Request(nodes=nodes, ppn=ppn, cores=cores) if not cores else Request(cores=cores)


NO_DRAIN = "drain time: not accounted (opt-in: hpcsched simulate --drain, drain = true in a replay file)"


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
    estimate: str = "request"
    trace_map: TraceMap = field(default_factory=TraceMap)
    gantt: dict | None = None  # a window's node occupancy (Strip.occupancy), for a report
    bank: dict | None = None  # the allocations' end state (bank_report), if the site has them

    def summary(self) -> str:
        out = self.metrics.text(self)
        if self.drain is not None:
            out += "\n" + drain_text(self.drain, daily=False)
        else:
            out += "\n" + NO_DRAIN
        return out

    def to_json(self) -> dict:
        return {"policy": self.policy, "backfill": self.backfill, "estimate": self.estimate,
                "trace_map": {"queue": self.trace_map.queue, "queues": dict(self.trace_map.queues),
                              "cancelled": self.trace_map.cancelled, "load": self.trace_map.load},
                "epoch": self.header.unix_start_time or 0,
                "machine": {"nodes": self.machine.nodes, "ppn": self.machine.ppn, "shared": self.machine.shared,
                            **({"name": self.machine.name, "share": self.machine.share} if self.machine.name else {})},
                "mapping": vars(self.mapping) | {"simulated": self.mapping.simulated},
                "metrics": self.metrics.to_json(), "drain": self.drain, "gantt": self.gantt,
                **({"bank": self.bank} if self.bank is not None else {}),
                "jobs": [{"job": f.record.job, "submit": f.submit, "start": f.start, "end": f.end,
                          "wait": f.wait, "run": f.run, "size": f.size, "units": f.units, "queue": f.queue,
                          "backfill": f.backfill} for f in self.jobs]}

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


def arrivals(records: Iterable[swf.Record], machine: Machine, mapping: MapStats, tmap: TraceMap = TraceMap()):
    """The engine's arrivals from trace records, mapped onto `machine` as they are read
    (their submit times scaled by the map's `load`)."""
    load, origin = tmap.load, None
    for rec in records:
        mapped = map_record(rec, machine, mapping, tmap)
        if mapped is not None:
            request, wall, run = mapped
            t = rec.submit
            if load != 1:
                origin = t if origin is None else origin
                t = origin + (t - origin) / load
            yield t, job_for(rec, request, wall, tmap.queue_of(rec)), run, rec


def record(job: int, submit: float, procs: int, run: float, req_time: float = -1, user: int = 1,
           group: int = 1, queue: int = -1, status: int = 1) -> swf.Record:
    """A trace record from the fields that matter, for workloads built in code or tests."""
    return swf.Record(job, submit, -1, run, procs, -1, -1, procs, req_time, -1, status, user, group, -1,
                      queue, -1, -1, -1)


def simulate(workload, *, policy: str | None = None, backfill: str | None = None, nodes: int | None = None,
             ppn: int | None = None, shared: bool = False, period: float | None = None,
             skip_bad: bool = False, warmup: float = 0.0, cooldown: bool = False, config: dict | None = None,
             progress: Callable[..., None] | None = None, drain: bool = False,
             groups=None, placement: str | None = None, estimate: str = "request",
             trace_map: TraceMap = TraceMap(), size_classes=None, capability: int | None = None,
             series_step: float = 86400.0, gantt=(0.0, 2.0), machine: str | None = None,
             size_map: str = "share", capability_split=()) -> Result:
    """Replay `workload` (an SWF path, or Records / `record(...)` tuples sorted by submit
    time) under a site's configuration; returns the schedule and its metrics.

    `config` is a site configuration (what `hpcsched.toml` holds: queues and router,
    reservations, priority policy and options, nodes, backfill); `policy`, `backfill`,
    `placement` and the machine options override it.  The machine is, in order: `machine`
    (a built-in name; "pool" passes over the config's [machine]) or the config's
    [machine], `nodes`/`ppn`/`shared`, the config's
    [[nodes]], the trace header's MaxProcs.  On a built-in machine a record keeps its
    share of the trace's machine (`size_map` "share": p of MaxProcs processors take
    ceil(p / MaxProcs x the machine's nodes) nodes), or (`size_map` "procs") takes
    ceil(p / cores per node) nodes.  A reservation
    whose start is a date is placed on the trace's clock through its UnixStartTime.
    `estimate` is the runtime estimate model (estimates.py), `trace_map` how records
    become jobs.  `warmup` excludes that fraction of the first jobs (by submit order) from
    the per-job statistics, `cooldown` the jobs ending after the last submission.  With
    `drain` (opt-in: it costs about a tenth of a replay's time), every pass's node picture is
    accounted (drain/), reported by job-size
    `groups` (None: the size classes of the waits, up to the machine's size; Blue Waters'
    own on the built-in bluewaters).  `gantt` (start day, days after the first submission) is the window whose
    node occupancy the result keeps for a report.  Python's cycle collector is paused
    while it runs and restored after."""
    read_stats = swf.ReadStats()
    header, records, nodes = _workload(workload, skip_bad, read_stats, machine, nodes, config)
    cfg, machine, policy, backfill = _site(config, machine, nodes, ppn, shared, header, records, size_map,
                                           placement, policy, backfill, period)
    site_filter = cfg.get("submit_filter")
    if site_filter is not None and not isinstance(site_filter, str):
        raise SimulationError("submit_filter: the simulator runs Python filters (\"module:function\") only")
    sched = _scheduler(cfg)
    mapping = MapStats()
    total, epoch = header.number("MaxRecords") or header.number("MaxJobs"), header.unix_start_time or 0
    engine = Engine(sched, period, submit_filter=site_filter and sitefilter.load(site_filter), progress=progress and (
        lambda done: progress(mapping.records, done, (sched.last_pass or 0.0) + epoch, total)),
                    estimates=None if estimate == "request" else estimates.model(estimate))
    recorder = Recorder(sched, Accounts(offset=_utc_offset(header)), header.unix_start_time or 0.0) if drain else None
    strip = Strip(*gantt) if gantt else None
    blocks = FreeBlocks(sched) if sched.topology.places_blocks else None
    watch = _watching([w.watch for w in (recorder, strip, blocks) if w])
    # A replay keeps two objects per job (its record and its Finished) to the end and
    # leaves no cyclic garbage, so Python's cycle collector would only scan them over and
    # over, all of them at every full collection (8 % of a RICC replay when measured).  It
    # is paused for the replay, as timeit pauses it, and restored after.
    collecting = gc.isenabled()
    gc.disable()
    try:
        finished, acc = engine.run(arrivals(records, machine, mapping, trace_map), watch=watch)
        metrics = compute(finished, acc, warmup, cooldown, size_classes, capability, series_step, capability_split)
        if blocks:
            metrics.free_blocks = blocks.shares()
        if recorder and groups is None:
            groups = drain_groups(sched, machine, size_classes)
        report = recorder and recorder.accounts.report(job_records(finished, recorder.epoch), groups=groups)
    finally:
        if collecting:
            gc.enable()
    mapping.skipped_bad_lines = read_stats.skipped
    mapping.rejected, mapping.unplaceable = len(engine.rejected), engine.unplaceable
    for _, reason in engine.rejected:
        shape = re.sub(r"\d+(?:[.:]\d+)*", "N", reason)
        mapping.rejections[shape] = mapping.rejections.get(shape, 0) + 1
    return Result(finished, metrics, machine, mapping, policy, backfill, header, report, estimate, trace_map,
                  strip.occupancy(finished, acc["units"]) if strip else None,
                  bank_report(sched.bank, sched.last_pass or 0.0) if sched.bank is not None else None)




def _workload(workload, skip_bad: bool, read_stats, machine: str | None, nodes: int | None, config: dict | None):
    """(the trace's header, its records, the node count): an SWF path streams its records
    (its header sizes the machine); a list of records on a pool with no size given is
    sized by its widest job."""
    if isinstance(workload, (str, os.PathLike)):
        header = swf.header(workload)  # sizes the machine; the records then stream
        records = swf.read(workload, skip_bad=skip_bad, stats=read_stats)
    else:
        header = swf.Header()
        records = [r if isinstance(r, swf.Record) else record(*r) for r in workload]
        on_pool = machine == "pool" or (machine is None and (config or {}).get("machine") is None)
        if nodes is None and not (config or {}).get("nodes") and on_pool:
            nodes = max((r.procs if r.procs > 0 else r.req_procs for r in records), default=1)
    return header, records, nodes


def _site(config, machine, nodes, ppn, shared, header, records, size_map, placement, policy, backfill, period):
    """The replay's site configuration: the machine (built-in, the options', the config's
    nodes, or the header's), placement, policy and backfill as given or configured:
    (cfg, the machine's shape, policy, backfill)."""
    cfg = dict(config or {})
    if machine == "pool":  # a pool of nodes, whatever machine the config describes
        cfg.pop("machine", None)
    elif machine is not None:
        cfg["machine"] = machine
        cfg.pop("nodes", None)
    if cfg.get("machine") is not None:
        if nodes is not None or ppn is not None or shared:
            raise SimulationError("give a machine or --nodes/--ppn/--shared, not both")
        shape = _built_machine(cfg["machine"], header, records, size_map)
    elif nodes is None and ppn is None and not shared and cfg.get("nodes"):
        shape = Machine.from_tables(cfg["nodes"])
    else:
        shape = machine_for(header, nodes, ppn, shared)
    machine = shape
    if not machine.name:
        cfg["nodes"] = machine.config()
    cfg["placement"] = placement or cfg.get("placement", "first-fit")
    cfg.setdefault("queues", {"batch": {}})
    cfg["priority"] = dict(cfg.get("priority", {}))
    cfg["priority"]["policy"] = policy = policy or cfg["priority"].get("policy", "fifo")
    cfg["backfill"] = backfill = backfill or cfg.get("backfill", "easy")
    if period:
        cfg.setdefault("interval", period)
    _clocked(cfg, header.unix_start_time)
    return cfg, machine, policy, backfill


def _scheduler(cfg: dict):
    """The core for a replay: no ledger line per job, usage kept only for a policy that reads it."""
    sched = build(cfg, extra_keys=DRIVER_KEYS)
    if sched.bank is not None:
        sched.bank.keep_ledger = False  # totals per project: a ledger line per job is no replay's business
    sched.usage.kept = sched.policy.reads_usage  # (a replay reports no usage: kept for a policy that reads it)
    return sched


def _watching(watchers: list):
    """What watches every pass: None, the one watcher, or each in turn."""
    if len(watchers) <= 1:
        return watchers[0] if watchers else None

    def watch(plan):
        for w in watchers:
            w(plan)
    return watch


class FreeBlocks:
    """On a Blue Gene: the share of the replay's time during which at least one block of
    each large size (an eighth of the machine and up) was wholly free (ALCF: how often a
    32K block is there for a capability job)."""

    def __init__(self, sched):
        self.sched, bg = sched, sched.topology
        self.sizes = [s for s in bg.sizes if s * 8 >= bg.node_count]
        self.blocks = {s: [b.units for b in bg.blocks if b.size == s] for s in self.sizes}
        self.time = dict.fromkeys(self.sizes, 0.0)
        self.free: list[int] = []  # the sizes free since the last pass
        self.first = self.last = None

    def watch(self, plan) -> None:
        t = plan.now
        if self.last is not None:
            for s in self.free:
                self.time[s] += t - self.last
        else:
            self.first = t
        self.last = t
        avail = self.sched.topology.available()
        free = avail ^ (avail & self.sched.runs.busy)
        self.free = [s for s in self.sizes if any(u & free == u for u in self.blocks[s])]

    def shares(self) -> dict[str, float]:
        span = (self.last - self.first) if self.first is not None else 0.0
        return {str(s): round(self.time[s] / span, 6) if span > 0 else 0.0 for s in self.sizes}


def bank_report(bank, now: float) -> dict:
    """The bank's end state: per project, allocated this period, charged in it, balance and
    standing, and everything charged over the replay."""
    projects = {}
    for project, acct in sorted(bank.accounts.items()):
        k = acct.period(now)
        projects[project] = {"allocated": acct.granted(k) if k is not None else 0.0,
                             "charged": acct.charged[k] if k is not None else 0.0,
                             "balance": acct.balance(now), "standing": bank.standing(project, now)}
    return {"unit": bank.unit, "projects": projects,
            "charged": {p: round(v, 6) for p, v in sorted(bank.used.items())}}


class Strip:
    """The allocations of the jobs that occupy a window of the replay, for a Gantt strip:
    each start seen by the pass watcher in the window, or up to a week before it, kept as
    runs of consecutive units; `occupancy` keeps those still running in the window."""

    LOOKBACK = 7 * 86400.0

    def __init__(self, start_day: float, days: float):
        self.offset, self.length = start_day * 86400.0, days * 86400.0
        self.first: float | None = None
        self.starts: dict[int, tuple[float, list]] = {}

    def watch(self, plan) -> None:
        if self.first is None:
            self.first = plan.now
            self.lo, self.hi = plan.now + self.offset - self.LOOKBACK, plan.now + self.offset + self.length
        if plan.started and self.lo <= plan.now < self.hi:
            for st in plan.started:
                bits = format(st.allocation.units, "b")[::-1]
                self.starts[st.job_id] = (plan.now, [[m.start(), m.end() - m.start()]
                                                     for m in re.finditer("1+", bits)])

    def occupancy(self, finished, units: int) -> dict:
        t0 = (self.first or 0.0) + self.offset
        t1 = t0 + self.length
        jobs = [[f.record.job, f.start, f.end, self.starts[f.record.job][1]] for f in finished
                if f.record.job in self.starts and f.end > t0 and f.start < t1]
        return {"window": [t0, t1], "units": units, "jobs": sorted(jobs, key=lambda j: (j[1], j[0]))}


def _on_trace_clock(table: dict, epoch: int | None, keys=("start",), where: str = "reservations") -> dict:
    """A configured table with its times on the trace's clock: a date becomes seconds
    after the trace's UnixStartTime (numbers already are trace seconds)."""
    if not isinstance(table, dict):
        return table
    out = dict(table)
    for key in keys:
        value = table.get(key)
        if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)):
            continue
        from ..config import _time
        if epoch is None:
            raise SimulationError(f"{where}: a date needs the trace's UnixStartTime; give seconds instead")
        out[key] = _time(value, f"{where}.{key}") - epoch
    return out


def _clocked(cfg: dict, epoch: int | None) -> None:
    """Every date of a site config on the trace's clock: reservations, calendar entries,
    allocation periods and overburn windows."""
    cfg["reservations"] = [_on_trace_clock(r, epoch) for r in cfg.get("reservations", [])]
    if isinstance(cfg.get("calendar"), list):
        cfg["calendar"] = [_on_trace_clock(e, epoch, where="calendar") for e in cfg["calendar"]]
    alloc = cfg.get("allocations")
    if isinstance(alloc, dict):
        alloc = _on_trace_clock(alloc, epoch, ("start", "end"), "allocations")
        if "overburn" in alloc:
            alloc["overburn"] = _on_trace_clock(alloc["overburn"], epoch, ("start", "end"), "allocations.overburn")
        if isinstance(alloc.get("projects"), dict):
            alloc["projects"] = projects = dict(alloc["projects"])
            for name, p in projects.items():
                where = f"allocations.projects.{name}"
                p = projects[name] = _on_trace_clock(p, epoch, ("start", "end"), where)
                if isinstance(p, dict) and "overburn" in p:
                    p["overburn"] = _on_trace_clock(p["overburn"], epoch, ("start", "end"), f"{where}.overburn")
        cfg["allocations"] = alloc


def drain_groups(sched, machine: str | None, size_classes=None) -> tuple[tuple[str, int], ...]:
    """Drain-by-size groups for a replay: Blue Waters' on its machine, else the classes its
    waits are reported by (`size_classes`, else the default ones), those that can occur on
    the machine (lowest size at most its units)."""
    if machine == "bluewaters":
        return GROUPS
    units = sched.topology.measure(sched.topology.available()) or 1
    lowest = [lo for lo, _ in (classes(size_classes) if size_classes else SIZE_CLASSES) if lo <= units]
    return groups_from(lowest or [1])


def job_records(finished: list[Finished], epoch: float = 0.0) -> dict[str, JobRecord]:
    """The drain report's job records from a replay's finished jobs."""
    return {str(f.record.job): JobRecord(str(f.record.job), f.size, f.start + epoch, f.end + epoch, f.backfill)
            for f in finished}


def swf_job_records(path: str, skipped: list[str] | None = None, ppn: int = 1) -> dict[str, JobRecord]:
    """An SWF trace's jobs as drain job records (times offset by its UnixStartTime):
    size = processors / ppn, rounded up.  With `skipped`, malformed lines are passed over
    and counted there."""
    epoch = float(swf.header(path).unix_start_time or 0)
    out, stats = {}, swf.ReadStats()
    for r in swf.read(path, skip_bad=skipped is not None, stats=stats):
        procs = r.procs if r.procs > 0 else r.req_procs
        start = r.submit + r.wait + epoch if r.wait >= 0 else None
        end = start + r.run if start is not None and r.run >= 0 else None
        out[str(r.job)] = JobRecord(str(r.job), max(1, math.ceil(procs / ppn)), start, end)
    if stats.skipped:
        skipped.append(f"{path}: {stats.skipped} malformed line{'s' if stats.skipped > 1 else ''} "
                       f"(the first: {stats.first_bad})")
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
