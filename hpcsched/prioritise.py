"""Priority policies: which waiting job comes first.

A policy sees one job and a `Context` carrying what it needs from the whole state (the
clock, the pass interval, the machine size, usage so far), so that fair share can be added
without touching the planner.  Every ordering ends with the same tie-break key,
`(submit_time, id)`: the earlier submission first, then the lower job id.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from operator import attrgetter
from typing import Callable, Iterable

from .errors import ConfigError
from .jobs import Job


@dataclass
class Context:
    now: float
    elapsed: float  # seconds since the previous pass (0 on the first)
    interval: float  # the nominal seconds between passes (Cobalt: 15)
    machine_nodes: int
    size: Callable[[Job], int]  # nodes a job occupies
    usage: Callable[[str, str], float]  # ("user"|"group"|"project", name) -> node-seconds
    running: Iterable[Job] = ()


#: The documented tie-break: earlier submission first, then the lower job id.
tie_break = attrgetter("submit_time", "id")


class Policy:
    """FIFO: submission order.  The base class every policy refines."""

    name = "fifo"
    #: True when the relative order of two jobs never changes over time or as other jobs
    #: come and go; the planner then keeps the order between passes and evaluates new
    #: submissions incrementally, calling `key(job, None)`: a static key needs no context.
    static = True

    def on_submit(self, job: Job, ctx: Context) -> None:
        """Set a new job's starting score."""

    def on_route_change(self, job: Job, ctx: Context) -> None:
        """A qalter moved the job to another queue."""

    def on_dependencies_met(self, job: Job, parents: list[Job]) -> None:
        """Every dependency of `job` is satisfied."""

    def prioritise(self, jobs: list[Job], ctx: Context) -> None:
        """Update scores of the runnable `jobs` for this pass."""

    def key(self, job: Job, ctx: Context) -> tuple:
        return tie_break(job)

    def order(self, jobs: list[Job], ctx: Context) -> list[Job]:
        return sorted(jobs, key=lambda j: self.key(j, ctx))

    def hold_back(self, job: Job, ctx: Context, running: dict) -> str | None:
        """A policy limit that keeps `job` from starting now (None: no objection).
        `running` is the pass's live tally, which the policy may keep its own counts in."""
        return None

    def started(self, job: Job, running: dict) -> None:
        """`job` starts in this pass: update the tally `hold_back` reads."""

    def describe(self, job: Job, ctx: Context) -> dict[str, float]:
        """Priority factors of `job` (mdiag -p): name -> raw value."""
        return {"queue_time": ctx.now - job.submit_time}


class Fifo(Policy):
    def order(self, jobs: list[Job], ctx: Context) -> list[Job]:
        # two stable sorts on plain attributes: no key tuples, so no garbage on a big queue
        out = sorted(jobs, key=attrgetter("id"))
        out.sort(key=attrgetter("submit_time"))
        return out


@dataclass
class Cobalt(Policy):
    """ALCF's utility function (algorithms.md section 1).

    Each pass adds (eligible ** 2 / clamp(walltime) ** 3) * (size / machine) * weight to the
    score, with times in minutes as Cobalt keeps them.  The increment is scaled by
    elapsed / interval so that a simulator passing on every event accrues what a 15 s
    cadence would.  Jobs in `backfill_queues` always sort below production jobs.
    """

    interval: float = 15.0
    wall_floor: float = 3600.0
    wall_ceiling: float = 43200.0
    project_weights: dict[str, float] = field(default_factory=dict)
    initial_scores: dict[str, float] = field(default_factory=dict)  # by queue
    backfill_queues: frozenset[str] = frozenset()
    dep_frac: float = 0.5

    name = "cobalt"
    static = False

    def on_submit(self, job: Job, ctx: Context) -> None:
        job.score = self.initial_scores.get(job.queue, 0.0)

    def on_route_change(self, job: Job, ctx: Context) -> None:
        # Anti-gaming: a qalter that changes the routed queue starts the score afresh.
        self.on_submit(job, ctx)

    def on_dependencies_met(self, job: Job, parents: list[Job]) -> None:
        inherited = [self.dep_frac * p.score_at_start for p in parents if p.score_at_start is not None]
        job.score = max([job.score, *inherited])

    def increment(self, job: Job, ctx: Context) -> float:
        eligible = job.eligible(ctx.now) / 60.0
        wall = min(max(job.walltime, self.wall_floor), self.wall_ceiling) / 60.0
        weight = self.project_weights.get(job.account, 1.0)
        return eligible ** 2 / wall ** 3 * (ctx.size(job) / ctx.machine_nodes) * weight

    def prioritise(self, jobs: list[Job], ctx: Context) -> None:
        if ctx.elapsed <= 0:
            return
        scale = ctx.elapsed / self.interval
        for job in jobs:
            job.score += self.increment(job, ctx) * scale

    def key(self, job: Job, ctx: Context) -> tuple:
        return (job.queue in self.backfill_queues, -job.score, job.submit_time, job.id)

    def describe(self, job: Job, ctx: Context) -> dict[str, float]:
        return {"score": job.score, "eligible_minutes": job.eligible(ctx.now) / 60.0,
                "score_walltime_minutes": min(max(job.walltime, self.wall_floor), self.wall_ceiling) / 60.0,
                "size_fraction": ctx.size(job) / ctx.machine_nodes,
                "project_weight": self.project_weights.get(job.account, 1.0)}


@dataclass
class Simon(Policy):
    """PSC Simon's two bins (algorithms.md section 3).

    Upper bin: jobs of at least `large` processors, first come first served, but
    round-robin over users (each user's first job, then each user's second, ...) so that no
    user dominates.  Lower bin: by decreasing processor count.  Upper bin first.  At most
    `max_large_running` large jobs run at once.
    """

    large: int = 1024
    max_large_running: int = 2

    name = "simon"
    static = False

    def is_large(self, job: Job) -> bool:
        return job.request.processors >= self.large

    def order(self, jobs: list[Job], ctx: Context) -> list[Job]:
        upper = sorted((j for j in jobs if self.is_large(j)), key=tie_break)
        turn: dict[str, int] = {}
        ranked = []
        for j in upper:
            k = turn.get(j.owner, 0)
            turn[j.owner] = k + 1
            ranked.append(((0, k) + tie_break(j), j))
        ranked.sort(key=lambda p: p[0])
        lower = sorted((j for j in jobs if not self.is_large(j)),
                       key=lambda j: (-j.request.processors,) + tie_break(j))
        return [j for _, j in ranked] + lower

    def hold_back(self, job: Job, ctx: Context, running: dict) -> str | None:
        if not self.is_large(job):
            return None
        if "simon_large" not in running:
            running["simon_large"] = sum(1 for j in ctx.running if self.is_large(j))
        if running["simon_large"] >= self.max_large_running:
            return f"{self.max_large_running} large jobs (>= {self.large} processors) already run"
        return None

    def started(self, job: Job, running: dict) -> None:
        if self.is_large(job) and "simon_large" in running:
            running["simon_large"] += 1

    def describe(self, job: Job, ctx: Context) -> dict[str, float]:
        return {"bin": 0.0 if self.is_large(job) else 1.0, "processors": float(job.request.processors),
                "submit_time": job.submit_time}


POLICIES = {"fifo": Fifo, "cobalt": Cobalt, "simon": Simon}


def make_policy(name: str, options: dict | None = None) -> Policy:
    """A policy by name with its options (from the site config's [priority] table)."""
    if name not in POLICIES:
        raise ConfigError(f"priority.policy: unknown policy {name!r} (choose from {', '.join(POLICIES)})")
    options = dict(options or {})
    cls = POLICIES[name]
    allowed = set(getattr(cls, "__dataclass_fields__", {}))
    for key in options:
        if key not in allowed:
            raise ConfigError(f"priority.{key}: unknown option for policy {name}")
    if "backfill_queues" in options:
        options["backfill_queues"] = frozenset(options["backfill_queues"])
    for key, value in options.items():
        expected = cls.__dataclass_fields__[key].default
        if isinstance(expected, (int, float)) and not isinstance(expected, bool):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"priority.{key}: must be a non-negative number")
        if key in ("project_weights", "initial_scores"):
            if not isinstance(value, dict) or not all(isinstance(v, (int, float)) for v in value.values()):
                raise ConfigError(f"priority.{key}: must be a table of numbers")
    if name == "cobalt" and options.get("interval", 15.0) <= 0:
        raise ConfigError("priority.interval: must be positive")
    return cls(**options)
