"""Schedule metrics as the literature defines them (algorithms.md section 9).

wait = start - submit; response = end - submit; slowdown = response / run (run floored
at 1 s); bounded slowdown = max(1, response / max(run, 10 s)); utilization = busy unit
seconds / (units x window), the window running from the first submission to the last end
(= makespan); loss of capacity = unit-seconds left idle while some job waited, over the
same capacity.  Every convention is printed with the figures.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

TAU = 10.0
SIZE_CLASSES = [(1, 1), (2, 4), (5, 16), (17, 64), (65, 256), (257, 1024), (1025, math.inf)]


def _class(size: int) -> str:
    for lo, hi in SIZE_CLASSES:
        if lo <= size <= hi:
            return f"{lo}" if lo == hi else f"{lo}+" if hi == math.inf else f"{lo}-{hi}"
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
    jobs: int = 0
    counted: int = 0
    warmup_excluded: int = 0
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
            out.append(f"hpcsched simulation: policy={result.policy} backfill={result.backfill} "
                       f"machine={m.nodes} nodes x {m.ppn} {'shared ' if m.shared else ''}cores")
            out.append(f"trace: {mp.records} records, {mp.simulated} simulated; skipped: "
                       f"{mp.skipped_bad_lines} malformed lines, {mp.skipped_no_procs} without processors, "
                       f"{mp.skipped_never_ran} never ran, {mp.skipped_too_large} larger than the machine")
            out.append(f"       {mp.estimate_from_run} without a requested time (run time used as estimate), "
                       f"{mp.cut_at_request} cut at their requested time")
        out.append(f"jobs: {self.jobs} finished, {self.counted} in the statistics "
                   f"({self.warmup_excluded} warm-up jobs excluded)")
        out.append(f"utilization {self.utilization:.4f}  loss of capacity {self.loss_of_capacity:.4f}  "
                   f"makespan {self.makespan:.0f} s  started by backfill {self.backfill_share:.4f}  "
                   f"passes {self.passes}")
        out.append(f"{'metric':<14}{'mean':>14}{'median':>14}{'p95':>14}{'max':>14}")
        for name, s in self.overall.items():
            out.append(f"{name:<14}{s['mean']:>14.2f}{s['median']:>14.2f}{s['p95']:>14.2f}{s['max']:>14.2f}")
        out.append(f"by size (units): {'class':<10}{'jobs':>8}{'mean wait':>14}{'mean bsld':>12}")
        for cls, s in self.by_size.items():
            out.append(f"{'':<17}{cls:<10}{s['wait']['count']:>8}{s['wait']['mean']:>14.2f}"
                       f"{s['bsld']['mean']:>12.2f}")
        out.append(f"by queue:        {'queue':<10}{'jobs':>8}{'mean wait':>14}{'mean bsld':>12}")
        for q, s in self.by_queue.items():
            out.append(f"{'':<17}{q:<10}{s['wait']['count']:>8}{s['wait']['mean']:>14.2f}"
                       f"{s['bsld']['mean']:>12.2f}")
        out.append("conventions: wait = start - submit; response = end - submit; slowdown = response / "
                   "max(run, 1 s); bsld = max(1, response / max(run, 10 s)); every simulated job counts "
                   "except the warm-up fraction (first jobs by submit time); utilization and loss of "
                   "capacity over [first submit, last end] in allocation units (nodes, or cores on "
                   "shared nodes)")
        return "\n".join(out)


def _per_job(jobs) -> dict[str, list[float]]:
    wait, resp, sld, bsld = [], [], [], []
    for f in jobs:
        w, run = f.start - f.record.submit, f.end - f.start
        r = w + run
        wait.append(w)
        resp.append(r)
        sld.append(r / max(run, 1.0))
        bsld.append(max(1.0, r / max(run, TAU)))
    return {"wait": wait, "response": resp, "slowdown": sld, "bsld": bsld}


def compute(finished, acc: dict, warmup: float = 0.0) -> Metrics:
    """Metrics of a finished simulation (`acc`: the engine's time integrals)."""
    by_submit = sorted(finished, key=lambda f: (f.record.submit, f.record.job))
    skip = int(len(by_submit) * warmup)
    counted = by_submit[skip:]
    m = Metrics(jobs=len(finished), counted=len(counted), warmup_excluded=skip, passes=acc.get("passes", 0),
                units=acc.get("units", 0))
    per = _per_job(counted)
    m.overall = {k: stats(v) for k, v in per.items()}
    # the same figures over subsets of the counted jobs (by index)
    groups: dict[str, list[int]] = {}
    queues: dict[int, list[int]] = {}
    classes: dict[int, str] = {}
    for i, f in enumerate(counted):
        c = classes.get(f.units)
        if c is None:
            c = classes[f.units] = _class(f.units)
        groups.setdefault(c, []).append(i)
        queues.setdefault(f.record.queue, []).append(i)

    def subset(idx: list[int]) -> dict[str, dict[str, float]]:
        return {k: stats([v[i] for i in idx]) for k, v in per.items()}

    order = [_class(lo) for lo, _ in SIZE_CLASSES]
    m.by_size = {c: subset(groups[c]) for c in order if c in groups}
    m.by_queue = {str(q): subset(queues[q]) for q in sorted(queues, key=str)}
    first, last = acc.get("first"), acc.get("last", 0.0)
    if finished and first is not None:
        m.makespan = last - first
        capacity = acc["units"] * m.makespan
        if capacity > 0:
            m.utilization = acc["busy"] / capacity
            m.loss_of_capacity = acc["idle_while_waiting"] / capacity
        m.backfill_share = sum(1 for f in finished if f.backfill) / len(finished)
    return m
