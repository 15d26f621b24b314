"""Runtime estimate models: what the planner believes each job of a replay will run.

The trace's requested time stays the job's limit (a job is killed there); a model only
changes the walltime the planner plans with, as research on backfilling compares them:

    request   the user's request (the default; what a production scheduler knows)
    perfect   the exact run time (floored at 1 s)
    easy++    Tsafrir, Etsion and Feitelson (2007): the mean of the user's last two run
              times, never above the request (the request while the user has no history);
              a job that outlives its prediction is given its full request then.

A model sees each submission (`predict`), each end (`ended`) and each job that reaches its
estimate while still running (`corrected`), in the simulated clock's order.
"""
from __future__ import annotations

from collections import deque

from ..core.jobs import Job

MODELS = ("request", "perfect", "easy++")


class Estimates:
    """The user's request: nothing to change."""

    name = "request"

    def __init__(self):
        self._limit: dict[int, float] = {}  # job id -> its request, while it may outlive its estimate

    def predict(self, job: Job, tag, run: float, now: float) -> None:
        """Set `job.walltime` to the planner's estimate (it arrives holding its request)."""

    def ended(self, job: Job, run: float) -> None:
        """`job` ended after `run` seconds."""
        self._limit.pop(job.id, None)

    def corrected(self, job: Job, tag, now: float) -> float:
        """`job` is still running at its estimate: the new one (its request)."""
        return self._limit.pop(job.id, job.walltime)


class Perfect(Estimates):
    name = "perfect"

    def predict(self, job: Job, tag, run: float, now: float) -> None:
        job.walltime = max(run, 1.0)


class Tsafrir(Estimates):
    """EASY++'s predictor: per user, the mean of the last two run times."""

    name = "easy++"

    def __init__(self):
        super().__init__()
        self._last: dict[str, deque] = {}

    def predict(self, job: Job, tag, run: float, now: float) -> None:
        history = self._last.get(job.owner)
        if history:
            guess = max(1.0, sum(history) / len(history))
            if guess < job.walltime:
                self._limit[job.id] = job.walltime
                job.walltime = guess

    def ended(self, job: Job, run: float) -> None:
        super().ended(job, run)
        self._last.setdefault(job.owner, deque(maxlen=2)).append(run)


def model(name: str) -> Estimates:
    """A fresh model by name (one per replay: models keep history)."""
    try:
        return {"request": Estimates, "perfect": Perfect, "easy++": Tsafrir}[name]()
    except KeyError:
        raise ValueError(f"estimate model {name!r} is not one of {', '.join(MODELS)}") from None
