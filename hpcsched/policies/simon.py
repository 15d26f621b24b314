"""PSC Simon's two-bin priority with a cap on large jobs running (Cray XT3)."""
from __future__ import annotations

from dataclasses import dataclass

from ..core.jobs import Job
from ..core.policy import Context, Policy, tie_break


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

    def is_large(self, job: Job, ctx: Context) -> bool:
        return ctx.processors(job) >= self.large

    def order(self, jobs: list[Job], ctx: Context) -> list[Job]:
        upper = sorted((j for j in jobs if self.is_large(j, ctx)), key=tie_break)
        turn: dict[str, int] = {}
        ranked = []
        for j in upper:
            k = turn.get(j.owner, 0)
            turn[j.owner] = k + 1
            ranked.append(((0, k) + tie_break(j), j))
        ranked.sort(key=lambda p: p[0])
        lower = sorted((j for j in jobs if not self.is_large(j, ctx)),
                       key=lambda j: (-j.request.processors,) + tie_break(j))
        return [j for _, j in ranked] + lower

    def hold_back(self, job: Job, ctx: Context, running: dict) -> str | None:
        if not self.is_large(job, ctx):
            return None
        if "simon_large" not in running:
            running["simon_large"] = sum(1 for j in ctx.running if self.is_large(j, ctx))
        if running["simon_large"] >= self.max_large_running:
            return f"{self.max_large_running} large jobs (>= {self.large} processors) already run"
        return None

    def started(self, job: Job, ctx: Context, running: dict) -> None:
        if self.is_large(job, ctx) and "simon_large" in running:
            running["simon_large"] += 1

    def describe(self, job: Job, ctx: Context) -> dict[str, float]:
        return {"bin": 0.0 if self.is_large(job, ctx) else 1.0, "processors": float(ctx.processors(job)),
                "requested": float(job.request.processors),
                "submit_time": job.submit_time}
