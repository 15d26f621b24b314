"""PSC Simon's two-bin priority with a cap on large jobs running (Cray XT3)."""
from __future__ import annotations

from dataclasses import dataclass

from ..core.jobs import Job
from ..core.policy import Context, Policy, submission_order, tie_break


def _most_processors_first(job: Job) -> int:
    return -job.request.processors


@dataclass
class Simon(Policy):
    """PSC Simon's two bins (algorithms.md section 3).

    Upper bin: jobs holding at least `large` processors, counted as every core of the whole
    nodes they get (PSC scheduled whole nodes), not the `nodes x ppn` they asked for; first
    come first served, but round-robin over users (each user's first job, then each
    user's second, ...) so that no user dominates.  Lower bin: by decreasing processors
    requested (the paper's words).  Upper bin first.  At most `max_large_running` large
    jobs run at once.
    """

    large: int = 1024
    max_large_running: int = 2

    name = "simon"
    static = False
    limits = True

    def __post_init__(self):
        # queued job id -> its bin (is it large?), worked out once: a queued job's request
        # changes only while it is out of the order (see Policy.dequeue)
        self._bins: dict[int, bool] = {}

    def is_large(self, job: Job, ctx: Context) -> bool:
        return ctx.processors(job) >= self.large

    def _queued_large(self, job: Job, ctx: Context) -> bool:
        large = self._bins.get(job.id)
        if large is None:
            large = self._bins[job.id] = self.is_large(job, ctx)
        return large

    def enqueue(self, job: Job, key, need: int) -> None:
        self._bins.pop(job.id, None)  # (worked out afresh once it is in the order)

    def dequeue(self, job: Job) -> None:
        self._bins.pop(job.id, None)

    def order(self, jobs: list[Job], ctx: Context) -> list[Job]:
        upper: list[Job] = []
        lower: list[Job] = []
        for j in jobs:
            (upper if self._queued_large(j, ctx) else lower).append(j)
        upper = submission_order(upper)
        turn: dict[str, int] = {}
        ranked = []
        for j in upper:
            k = turn.get(j.owner, 0)
            turn[j.owner] = k + 1
            ranked.append(((0, k) + tie_break(j), j))
        ranked.sort(key=lambda p: p[0])
        lower = submission_order(lower)
        lower.sort(key=_most_processors_first)  # (stable: by decreasing processors, then the tie-break)
        return [j for _, j in ranked] + lower

    def hold_back(self, job: Job, ctx: Context, running: dict) -> str | None:
        if not self._queued_large(job, ctx):
            return None
        if "simon_large" not in running:
            running["simon_large"] = sum(1 for j in ctx.running if self.is_large(j, ctx))
        if running["simon_large"] >= self.max_large_running:
            return f"{self.max_large_running} large jobs (>= {self.large} processors) already run"
        return None

    def started(self, job: Job, ctx: Context, running: dict) -> None:
        if self._queued_large(job, ctx) and "simon_large" in running:
            running["simon_large"] += 1

    def describe(self, job: Job, ctx: Context) -> dict[str, float]:
        return {"bin": 0.0 if self.is_large(job, ctx) else 1.0, "processors": float(ctx.processors(job)),
                "requested": float(job.request.processors),
                "submit_time": job.submit_time}
