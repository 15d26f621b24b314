"""Grid Engine's job priority: share-tree tickets, urgency and POSIX priority, weighted.

    priority = weight_urgency * norm(urgency) + weight_ticket * norm(tickets)
             + weight_priority * norm(posix priority)

norm(x) = (x - min) / (max - min) over the runnable jobs (0.5 when they are all equal) for
urgency and tickets; the POSIX priority over its fixed range, -1023 to 1024, as Grid Engine
normalises it (so -p 1 adds 1/2047 of weight_priority, not all of it).  Urgency is Grid Engine's three contributions (sge_urgency):

    sum over requested resources r of urgency[r] * amount  resource
    + weight_waiting_time * seconds since submission        waiting time
    + weight_deadline / max(seconds to deadline, 1)         deadline (jobs with -W deadline only)

The resources are Grid Engine's complexes with an urgency value: `slots` (processors;
slots_urgency, 1,000 as installed, unless `urgency` names it), `mem` (GB, over every chunk),
`gpus`, `disk` (GB of scratch) and any consumable the site declares; `queue_urgency` adds a
queue's own value to each job routed to it, as a complex attached to that queue would
(CC-IN2P3's greater weight on its multi-core queues).

so a deadline job's urgency climbs as its deadline initiation time nears, and stays at
weight_deadline once it has passed.  Tickets come from the share tree (sharetree.py),
share_tickets of them handed out.  Defaults are Grid Engine's installed ones
(algorithms.md section 5; weight_deadline 3,600,000).

Jobs of equal priority keep the share tree's order.  When every runnable job has the same
POSIX priority and (if urgency weighs) slots, and neither waiting time nor a deadline
weighs, the priority falls as the tickets do, so the order is the share tree's own, read
lazily; otherwise every job's priority is worked out and sorted.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Iterable, Iterator

from ..core.jobs import Job
from ..core.policy import Context, Policy
from .sharetree import ShareTree

_ID = attrgetter("id")
POSIX_LOW, POSIX_HIGH = -1023, 1024  # qsub -p's range


def _norm(x: float, lo: float, hi: float) -> float:
    return (x - lo) / (hi - lo) if hi - lo > 1e-12 else 0.5


def _amount(job: Job, resource: str) -> float:
    """How much of `resource` the job asks for: slots (processors), mem and disk in GB,
    gpus, else a consumable's amount."""
    req = job.request
    if resource == "slots":
        return req.processors
    chunks = req.nodes if not req.cores else 1
    if resource == "mem":
        return req.mem * chunks / 1024.0
    if resource == "gpus":
        return req.gpus * chunks
    if resource == "disk":
        return job.disk / 1024.0
    return job.consumes.get(resource, 0)


@dataclass
class GridEngine(Policy):
    weight_ticket: float = 0.01
    weight_urgency: float = 0.1
    weight_priority: float = 1.0
    weight_waiting_time: float = 0.0
    weight_deadline: float = 3600000.0
    slots_urgency: float = 1000.0
    urgency: dict = field(default_factory=dict)  # resource -> urgency per unit requested
    queue_urgency: dict = field(default_factory=dict)  # queue -> urgency of each job routed there
    share_tickets: float = 10000.0
    tree: ShareTree | None = None  # (from the site's [sharetree]; None: no tickets)

    name = "gridengine"
    static = False
    reads_usage = True
    weighs_job_priority = True  # -p is the POSIX priority factor

    def __post_init__(self):
        self._classes: Counter = Counter()  # (posix priority, resource urgency if it weighs) of the runnable jobs
        # (the resources that weigh, with their urgency per unit: most sites only slots)
        self._weights = [(name, w) for name, w in {"slots": self.slots_urgency, **self.urgency}.items() if w]
        self._resources_weigh = bool(self.weight_urgency and (self._weights or any(self.queue_urgency.values())))
        self._deadlines = 0  # runnable jobs with a deadline
        self._explained: tuple | None = None
        if self.tree is None:
            self.tree = ShareTree({"Root": {}})

    def enqueue(self, job: Job, key, need: int) -> None:
        self.tree.add(job, key, need)
        self._classes[self._class(job)] += 1
        self._deadlines += job.deadline is not None

    def dequeue(self, job: Job) -> None:
        self.tree.remove(job)
        self._deadlines -= job.deadline is not None
        c = self._class(job)
        self._classes[c] -= 1
        if not self._classes[c]:
            del self._classes[c]

    def _class(self, job: Job) -> tuple[int, float]:
        return job.priority, self.resource_urgency(job) if self._resources_weigh else 0.0

    def resource_urgency(self, job: Job) -> float:
        """The job's resource urgency: each requested resource's urgency times the amount,
        and its queue's own."""
        total = self.queue_urgency.get(job.queue, 0.0) if self.queue_urgency else 0.0
        for name, weight in self._weights:
            total += weight * _amount(job, name)
        return total

    def _compute(self, ctx: Context) -> None:
        self.tree.compute(ctx.usage, ctx.now)

    def ordered(self, ctx: Context) -> Iterable[Job]:
        self._compute(ctx)
        if len(self._classes) <= 1 and not self._timed():  # the tree's order
            return self.tree.order()
        return [job for _, job in sorted(self._priorities(self.tree.ranked(), ctx), key=lambda p: -p[0][0])]

    def _timed(self) -> bool:
        """Does urgency move with time (waiting time, or a deadline, weighs)?"""
        return bool(self.weight_urgency and (self.weight_waiting_time or self._deadlines and self.weight_deadline))

    def settled(self, jobs: list[Job]) -> list[Job] | None:
        """Jobs ranked at one node of the tree come in job-id order at every node above it,
        so whatever the tickets; with one POSIX priority and slots class among them and an
        urgency that does not move, their priorities fall as their tickets do (ties keep
        the tree's order)."""
        where = self.tree.node_at
        node = where(jobs[0])
        if node is None or self._timed() or self.weight_ticket < 0 or any(where(j) is not node for j in jobs):
            return None
        if len({self._class(j) for j in jobs}) > 1:
            return None
        return sorted(jobs, key=_ID)

    def _priorities(self, ranked: Iterator, ctx: Context) -> list[tuple[tuple, Job]]:
        """Every runnable job's (priority, tickets, urgency, posix), in the share tree's order."""
        rows = [(-v * self.share_tickets, job) for v, _, job in ranked]
        if not rows:
            return []
        tix = [t for t, _ in rows]
        urg = [self.resource_urgency(j) + self.weight_waiting_time * (ctx.now - j.submit_time)
               + self._deadline(j, ctx.now) for _, j in rows]
        pri = [j.priority for _, j in rows]
        tlo, thi, ulo, uhi = min(tix), max(tix), min(urg), max(urg)
        out = []
        for (t, job), u, p in zip(rows, urg, pri):
            prio = (self.weight_urgency * _norm(u, ulo, uhi) + self.weight_ticket * _norm(t, tlo, thi)
                    + self.weight_priority * _norm(p, POSIX_LOW, POSIX_HIGH))
            out.append(((prio, t, u, p), job))
        return out

    def _deadline(self, job: Job, now: float) -> float:
        """The deadline contribution to `job`'s urgency (0 without a deadline)."""
        return 0.0 if job.deadline is None else self.weight_deadline / max(job.deadline - now, 1.0)

    def explain(self, ctx: Context) -> dict[int, dict[str, float]]:
        """Every runnable job's factors (mdiag -p), worked out in full."""
        self._compute(ctx)
        return {job.id: {"priority": prio, "tickets": t, "urgency": u, "deadline": self._deadline(job, ctx.now),
                         "posix_priority": float(p)}
                for (prio, t, u, p), job in self._priorities(self.tree.ranked(), ctx)}

    def describe(self, job: Job, ctx: Context) -> dict[str, float]:
        key = (ctx.now, ctx.usage.version, sum(self._classes.values()))  # (the same moment, usage and queue)
        if self._explained is None or self._explained[0] != key:
            self._explained = (key, self.explain(ctx))
        return self._explained[1].get(job.id, {"priority": 0.0})
