"""Cobalt's utility-function priority (ALCF Mira)."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..core.jobs import Job
from ..core.policy import Context, Policy


@dataclass
class Cobalt(Policy):
    """ALCF's utility function (algorithms.md section 1).

    Cobalt adds (eligible ** 2 / clamp(walltime) ** 3) * (size / machine) * weight to the
    score every `interval` seconds, with times in minutes as Cobalt keeps them.  Here the
    score is that rate integrated over the eligible time exactly, so it does not depend on
    how often passes run (a simulator passing on every event, a server passing every few
    seconds, or one pass an hour later all accrue the same): over a pass that saw the
    eligible time go from e0 to e1 minutes, the score grows by
    rate * (e1 ** 3 - e0 ** 3) / 3 * (60 / interval), the limit of Cobalt's sum as its
    passes grow frequent.  Jobs in `backfill_queues` always sort below production jobs.
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
        # a submit filter's starting score (per project program, say), else the queue's
        job.score = job.initial_score if job.initial_score is not None else self.initial_scores.get(job.queue, 0.0)

    def on_route_change(self, job: Job) -> None:
        # Anti-gaming: a qalter that changes the routed queue starts the score afresh (and
        # the scheduler its eligible time), as if the job were submitted now.
        self.on_submit(job)

    def on_dependencies_met(self, job: Job, parents: list[Job]) -> None:
        inherited = [self.dep_frac * p.score_at_start for p in parents if p.score_at_start is not None]
        job.score = max([job.score, *inherited])

    def increment(self, job: Job, ctx: Context) -> float:
        """Cobalt's increment for one `interval` at the job's eligible time now."""
        return (job.eligible(ctx.now) / 60.0) ** 2 * self._rate(job, ctx)

    def _rate(self, job: Job, ctx: Context) -> float:
        wall = min(max(job.walltime, self.wall_floor), self.wall_ceiling) / 60.0
        weight = self.project_weights.get(job.account, 1.0)
        return (self._nodes(job, ctx) / ctx.machine_nodes) * weight / wall ** 3

    @staticmethod
    def _nodes(job: Job, ctx: Context) -> int:
        """The nodes the job asks for, as the paper's utility counts them (a 4,097-node job
        is 4,097, though it holds an 8,192-node block and is charged for it)."""
        return job.request.nodes or ctx.size(job)

    def prioritise(self, jobs: list[Job], ctx: Context) -> None:
        if ctx.elapsed <= 0:
            return
        per_minute = 60.0 / self.interval / 3.0
        back = ctx.elapsed / 60.0
        for job in jobs:
            e1 = job.eligible(ctx.now) / 60.0
            e0 = e1 - back if e1 > back else 0.0  # (eligible only since the last pass: from 0)
            job.score += self._rate(job, ctx) * (e1 ** 3 - e0 ** 3) * per_minute

    def key(self, job: Job, ctx: Context) -> tuple:
        return (job.queue in self.backfill_queues, -job.score, job.submit_time, job.id)

    def describe(self, job: Job, ctx: Context) -> dict[str, float]:
        return {"score": job.score, "eligible_minutes": job.eligible(ctx.now) / 60.0,
                "score_walltime_minutes": min(max(job.walltime, self.wall_floor), self.wall_ceiling) / 60.0,
                "size_fraction": self._nodes(job, ctx) / ctx.machine_nodes,
                "project_weight": self.project_weights.get(job.account, 1.0)}
