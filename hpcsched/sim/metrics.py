"""Schedule metrics as the literature defines them (algorithms.md section 9).

wait = start - submit; response = end - submit; slowdown = response / run (run floored
at 1 s); bounded slowdown = max(1, response / max(run, 10 s)); utilization = busy unit
seconds / (units x window), the window running from the first submission to the last end
(= makespan); loss of capacity = unit-seconds left idle while some job waited, over the
same capacity.  The per-job figures are given overall, by size class (configurable lowest
sizes), by the queue the router chose, by user and by group; the capability share is the
unit-hours of jobs at or above a threshold size over all unit-hours; utilization and queue
length are also a time series.  Jobs left out of the per-job figures: the warm-up (the
first fraction by submit time) and, with cool-down, jobs that end after the last
submission.  Every convention is printed with the figures.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

TAU = 10.0
TOP = 10  # users and groups listed in the text summary (JSON has them all)
#: the default size classes' lowest sizes (units): 1, 2-4, 5-16, 17-64, 65-256, 257-1024, 1025+
LOWEST = (1, 2, 5, 17, 65, 257, 1025)
SIZE_CLASSES = [(lo, hi - 1) for lo, hi in zip(LOWEST, LOWEST[1:])] + [(LOWEST[-1], math.inf)]
SERIES_STEPS = {"hour": 3600.0, "day": 86400.0, "week": 604800.0}


def classes(lowest) -> list[tuple[int, float]]:
    """Size classes from increasing lowest sizes: [(lo, hi)], the last open-ended."""
    lowest = list(lowest)
    if not lowest or lowest[0] < 1 or any(b <= a for a, b in zip(lowest, lowest[1:])):
        raise ValueError("size classes: give increasing lowest sizes from 1, e.g. 1,2,5,17")
    if lowest[0] != 1:
        lowest.insert(0, 1)
    return [(lo, hi - 1) for lo, hi in zip(lowest, lowest[1:])] + [(lowest[-1], math.inf)]


def _label(lo: int, hi: float) -> str:
    return f"{lo}" if lo == hi else f"{lo}+" if hi == math.inf else f"{lo}-{hi}"


def _class(size: int, table=SIZE_CLASSES) -> str:
    for lo, hi in table:
        if lo <= size <= hi:
            return _label(lo, hi)
    return "?"


def stats(values: list[float]) -> dict[str, float]:
    """mean, median, p95 (nearest rank) and max; zeros for an empty list."""
    if not values:
        return {"count": 0, "mean": 0.0, "median": 0.0, "p95": 0.0, "max": 0.0}
    v = sorted(values)
    n = len(v)
    median = v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2
    return {"count": n, "mean": math.fsum(v) / n, "median": median,
            "p95": v[max(0, math.ceil(0.95 * n) - 1)], "max": v[-1]}


@dataclass
class Metrics:
    overall: dict[str, dict[str, float]] = field(default_factory=dict)
    by_size: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    by_queue: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    by_user: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    by_group: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    unit_hours: dict[str, dict[str, float]] = field(default_factory=dict)  # "user"/"group" -> name -> hours
    jobs: int = 0
    counted: int = 0
    warmup_excluded: int = 0
    cooldown_excluded: int = 0
    capability_size: int = 0
    capability_share: float = 0.0
    capability_by_queue: dict[str, float] = field(default_factory=dict)  # each queue's own share
    capability_split: dict[str, float] = field(default_factory=dict)  # threshold -> share (Mira: 8K, 16K)
    free_blocks: dict[str, float] = field(default_factory=dict)  # Blue Gene: block size -> share of time one was free
    series_step: float = 86400.0
    series: dict[str, list[float]] = field(default_factory=dict)  # "utilization", "queue" per step
    utilization: float = 0.0
    loss_of_capacity: float = 0.0
    makespan: float = 0.0
    backfill_share: float = 0.0
    passes: int = 0
    units: int = 0

    def to_json(self) -> dict:
        return dict(vars(self))

    def text(self, result=None) -> str:
        out = []
        if result is not None:
            m, mp = result.machine, result.mapping
            tm = result.trace_map
            out.append(f"hpcsched simulation: policy={result.policy} backfill={result.backfill} "
                       f"estimate={result.estimate} machine={m.name + ' ' if m.name else ''}{m.nodes} nodes x {m.ppn} "
                       f"{'shared ' if m.shared else ''}cores" +
                       (f" (a trace processor is {m.share:.4g} nodes)" if m.share else ""))
            out.append(f"trace: {mp.records} records, {mp.simulated} simulated; skipped: "
                       f"{mp.skipped_bad_lines} malformed lines, {mp.skipped_no_procs} without processors, "
                       f"{mp.skipped_never_ran} never ran, {mp.skipped_too_large} larger than the machine, "
                       f"{mp.skipped_cancelled} cancelled (dropped)")
            out.append(f"       {mp.estimate_from_run} without a requested time (run time used as estimate), "
                       f"{mp.cut_at_request} cut at their requested time; queue from the "
                       f"{'router' if tm.queue == 'router' else 'trace'}; {mp.rejected - mp.unplaceable} refused by "
                       f"every queue, {mp.unplaceable} that no placement on the machine holds")
            for reason, count in sorted(mp.rejections.items(), key=lambda kv: (-kv[1], kv[0]))[:3]:
                out.append(f"       refused {count}x: {reason}")
        out.append(f"jobs: {self.jobs} finished, {self.counted} in the statistics "
                   f"({self.warmup_excluded} warm-up jobs excluded, {self.cooldown_excluded} cool-down)")
        out.append(f"utilization {self.utilization:.4f}  loss of capacity {self.loss_of_capacity:.4f}  "
                   f"makespan {self.makespan:.0f} s  started by backfill {self.backfill_share:.4f}  "
                   f"passes {self.passes}")
        out.append(f"capability share {self.capability_share:.4f} of unit-hours "
                   f"(jobs of {self.capability_size} units or more)" +
                   "".join(f"; {share:.4f} at {size}+" for size, share in self.capability_split.items()))
        if self.free_blocks:
            out.append("time with a free block: " + "  ".join(f"{size}: {share:.4f}"
                                                              for size, share in self.free_blocks.items()))
        out.append(f"{'metric':<14}{'mean':>14}{'median':>14}{'p95':>14}{'max':>14}")
        for name, s in self.overall.items():
            out.append(f"{name:<14}{s['mean']:>14.2f}{s['median']:>14.2f}{s['p95']:>14.2f}{s['max']:>14.2f}")
        out.append(f"by size (units): {'class':<10}{'jobs':>8}{'mean wait':>14}{'mean bsld':>12}")
        for cls, s in self.by_size.items():
            out.append(f"{'':<17}{cls:<10}{s['wait']['count']:>8}{s['wait']['mean']:>14.2f}"
                       f"{s['bsld']['mean']:>12.2f}")
        out.append(f"by queue:        {'queue':<16}{'jobs':>8}{'mean wait':>14}{'mean bsld':>12}{'capability':>12}")
        for q, s in self.by_queue.items():
            out.append(f"{'':<17}{q:<16}{s['wait']['count']:>8}{s['wait']['mean']:>14.2f}"
                       f"{s['bsld']['mean']:>12.2f}{self.capability_by_queue.get(q, 0.0):>12.4f}")
        for kind, table in (("user", self.by_user), ("group", self.by_group)):
            hours = self.unit_hours.get(kind, {})
            top = sorted(table, key=lambda k: (-hours.get(k, 0.0), k))[:TOP]
            out.append(f"by {kind} (the {len(top)} of {len(table)} with most unit-hours): "
                       f"{kind:<8}{'jobs':>8}{'unit-hours':>12}{'mean wait':>14}{'mean bsld':>12}")
            for k in top:
                s = table[k]
                out.append(f"{'':<17}{k:<10}{s['wait']['count']:>8}{hours.get(k, 0.0):>12.1f}"
                           f"{s['wait']['mean']:>14.2f}{s['bsld']['mean']:>12.2f}")
        out.append("conventions: wait = start - submit; response = end - submit; slowdown = response / "
                   "max(run, 1 s); bsld = max(1, response / max(run, 10 s)); every simulated job counts "
                   "except the warm-up fraction (first jobs by submit time) and, with cool-down, jobs "
                   "ending after the last submission; queues are the ones the router chose; "
                   "utilization and loss of capacity over [first submit, last end] in allocation units "
                   "(nodes, or cores on shared nodes)")
        return "\n".join(out)


def _per_job(jobs) -> dict[str, list[float]]:
    wait, resp, sld, bsld = [], [], [], []
    for f in jobs:
        w, run = f.start - f.submit, f.end - f.start
        r = w + run
        wait.append(w)
        resp.append(r)
        sld.append(r / max(run, 1.0))
        bsld.append(max(1.0, r / max(run, TAU)))
    return {"wait": wait, "response": resp, "slowdown": sld, "bsld": bsld}


def compute(finished, acc: dict, warmup: float = 0.0, cooldown: bool = False, size_classes=None,
            capability: int | None = None, step: float = 86400.0, split=()) -> Metrics:
    """Metrics of a finished simulation (`acc`: the engine's time integrals)."""
    table = classes(size_classes) if size_classes else SIZE_CLASSES
    by_submit = sorted(finished, key=lambda f: (f.submit, f.record.job))
    skip = int(len(by_submit) * warmup)
    counted = by_submit[skip:]
    cooled = 0
    if cooldown and by_submit:
        last_submit = by_submit[-1].submit
        kept = [f for f in counted if f.end <= last_submit]
        cooled, counted = len(counted) - len(kept), kept
    m = Metrics(jobs=len(finished), counted=len(counted), warmup_excluded=skip, cooldown_excluded=cooled,
                passes=acc.get("passes", 0), units=acc.get("units", 0), series_step=step)
    per = _per_job(counted)
    m.overall = {k: stats(v) for k, v in per.items()}
    # the same figures over subsets of the counted jobs (by index)
    groups: dict[str, list[int]] = {}
    queues: dict[str, list[int]] = {}
    users: dict[str, list[int]] = {}
    owners: dict[str, list[int]] = {}
    labels: dict[int, str] = {}
    for i, f in enumerate(counted):
        c = labels.get(f.units)
        if c is None:
            c = labels[f.units] = _class(f.units, table)
        groups.setdefault(c, []).append(i)
        queues.setdefault(f.queue, []).append(i)
        users.setdefault(f"u{f.record.user}", []).append(i)
        owners.setdefault(f"g{f.record.group}", []).append(i)

    def subset(idx: list[int]) -> dict[str, dict[str, float]]:
        return {k: stats([v[i] for i in idx]) for k, v in per.items()}

    order = [_label(lo, hi) for lo, hi in table]
    m.by_size = {c: subset(groups[c]) for c in order if c in groups}
    m.by_queue = {q: subset(queues[q]) for q in sorted(queues)}
    m.by_user = {u: subset(users[u]) for u in sorted(users)}
    m.by_group = {g: subset(owners[g]) for g in sorted(owners)}
    hours: dict[str, dict[str, float]] = {"user": {}, "group": {}}
    for f in finished:
        h = f.units * (f.end - f.start) / 3600.0
        for kind, name in (("user", f"u{f.record.user}"), ("group", f"g{f.record.group}")):
            hours[kind][name] = hours[kind].get(name, 0.0) + h
    m.unit_hours = hours
    m.capability_size = capability if capability else max(1, math.ceil(0.2 * m.units))
    total = sum(f.units * (f.end - f.start) for f in finished)
    if total > 0:
        m.capability_share = sum(f.units * (f.end - f.start) for f in finished
                                 if f.units >= m.capability_size) / total
        for size in split:
            m.capability_split[str(size)] = sum(f.units * (f.end - f.start) for f in finished
                                                if f.units >= size) / total
    per_queue: dict[str, list[float]] = {}
    for f in finished:
        tally = per_queue.setdefault(f.queue, [0.0, 0.0])
        tally[0] += f.units * (f.end - f.start)
        if f.units >= m.capability_size:
            tally[1] += f.units * (f.end - f.start)
    m.capability_by_queue = {q: (c / t if t > 0 else 0.0) for q, (t, c) in sorted(per_queue.items())}
    first, last = acc.get("first"), acc.get("last", 0.0)
    if finished and first is not None:
        m.makespan = last - first
        capacity = acc["units"] * m.makespan
        if capacity > 0:
            m.utilization = acc["busy"] / capacity
            m.loss_of_capacity = acc["idle_while_waiting"] / capacity
        m.backfill_share = sum(1 for f in finished if f.backfill) / len(finished)
        m.series = series(finished, first, last, step, m.units)
    return m


def series(finished, first: float, last: float, step: float, units: int) -> dict[str, list[float]]:
    """Utilization and mean queue length (waiting jobs) per `step` from `first` to `last`:
    each job's busy and waiting intervals spread over the steps they cover, O(jobs + steps)."""
    n = max(1, math.ceil((last - first) / step))
    busy, queue = _spread(((f.start, f.end, f.units) for f in finished), first, step, n), \
        _spread(((f.submit, f.start, 1) for f in finished), first, step, n)
    return {"start": [first + i * step for i in range(n)],
            "utilization": [b / (units * step) if units else 0.0 for b in busy],
            "queue": [q / step for q in queue]}


def _spread(intervals, origin: float, step: float, n: int) -> list[float]:
    """Weight x seconds of each [a, b) falling in each of n steps from `origin`: the partial
    steps at both ends directly, the whole ones between through a difference array."""
    part = [0.0] * (n + 1)
    whole = [0.0] * (n + 2)
    for a, b, w in intervals:
        if b <= a:
            continue
        i, j = int((a - origin) // step), int((b - origin) // step)
        if i == j:
            part[min(i, n)] += w * (b - a)
            continue
        part[i] += w * (origin + (i + 1) * step - a)
        part[min(j, n)] += w * (b - (origin + j * step))
        whole[i + 1] += w
        whole[min(j, n + 1)] -= w
    out, level = [], 0.0
    for k in range(n):
        level += whole[k]
        out.append(part[k] + level * step)
    return out
