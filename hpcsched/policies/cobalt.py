"""Cobalt's utility-function priority (ALCF Mira)."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..core.jobs import Job
from ..core.policy import Context, Policy


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

    def on_submit(self, job: Job) -> None:
        job.score = self.initial_scores.get(job.queue, 0.0)

    def on_route_change(self, job: Job) -> None:
        # Anti-gaming: a qalter that changes the routed queue starts the score afresh.
        self.on_submit(job)

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
