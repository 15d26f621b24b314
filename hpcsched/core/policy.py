"""The priority policy interface, and FIFO (the default): which waiting job comes first.

A policy sees one job and a `Context` carrying what it needs from the whole state (the
clock, the pass interval, the machine size, the decayed usage), so that fair share needs
nothing from the planner.  Every ordering ends with the same tie-break key,
`(submit_time, id)`: the earlier submission first, then the lower job id.
"""
from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter
from typing import Callable, Iterable

from .jobs import Job
from .usage import Usage


@dataclass
class Context:
    now: float
    elapsed: float  # seconds since the previous pass (0 on the first)
    interval: float  # the nominal seconds between passes (Cobalt: 15)
    machine_nodes: int
    size: Callable[[Job], int]  # nodes a job occupies
    processors: Callable[[Job], int]  # processors a job holds (every core of whole nodes)
    usage: Usage  # decayed usage per (user, group, project), read at `now`
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
    #: True when `hold_back` may hold a job back: the pass then checks every job it walks.
    limits = False
    #: True when the policy weighs the job's own priority (qsub -p) or its queue's priority
    #: as factors; otherwise the scheduler ranks by them ahead of the policy's order, as
    #: PBS's FIFO does (higher queue priority first, then higher -p), if the site says so.
    weighs_job_priority = False
    weighs_queue_priority = False
    #: True when the order reads the decayed usage: running jobs are then charged at every
    #: pass; otherwise only as they start and end (a report reads them as of its moment).
    reads_usage = False

    def on_submit(self, job: Job) -> None:
        """Set a new job's starting score."""

    def on_route_change(self, job: Job) -> None:
        """A qalter moved the job to another queue."""

    def on_dependencies_met(self, job: Job, parents: list[Job]) -> None:
        """Every dependency of `job` is satisfied."""

    def enqueue(self, job: Job, key: tuple[str, str, str], need: int) -> None:
        """`job` (whose usage is `key`, taking `need` units) becomes runnable: a policy that
        keeps its own index of the runnable jobs (see `ordered`) adds it."""

    def dequeue(self, job: Job) -> None:
        """`job` is no longer runnable (it starts, is held, deleted or altered)."""

    def ordered(self, ctx: Context) -> Iterable[Job] | None:
        """The runnable jobs in order, from the policy's own index, possibly lazily (read
        only as far as the pass walks); None: the scheduler sorts them with `order`."""
        return None

    def settled(self, jobs: list[Job]) -> list[Job] | None:
        """`jobs` (runnable, new since the last pass) in the order every pass puts them,
        whatever else is queued, if the policy can tell without a context (None: it cannot).
        With it, a pass whose order moves may still carry on the last walk (see
        Scheduler.iterate) when several jobs came at once."""
        return self.order(jobs, None) if self.static else None

    def prioritise(self, jobs: list[Job], ctx: Context) -> None:
        """Update scores of the runnable `jobs` for this pass."""

    def key(self, job: Job, ctx: Context) -> tuple:
        return tie_break(job)

    def order(self, jobs: list[Job], ctx: Context) -> list[Job]:
        return sorted(jobs, key=lambda j: self.key(j, ctx))

    def hold_back(self, job: Job, ctx: Context, running: dict) -> str | None:
        """A policy limit that keeps `job` from starting now (None: no objection).
        `running` is the policy's own counts for this pass (Tally.policy), kept as it likes."""
        return None

    def started(self, job: Job, ctx: Context, running: dict) -> None:
        """`job` starts in this pass: update the counts `hold_back` reads."""

    def describe(self, job: Job, ctx: Context) -> dict[str, float]:
        """Priority factors of `job` (mdiag -p): name -> raw value."""
        return {"queue_time": ctx.now - job.submit_time}


_ID, _SUBMIT = attrgetter("id"), attrgetter("submit_time")


def submission_order(jobs: Iterable[Job]) -> list[Job]:
    """`jobs` sorted by the tie-break key: two stable sorts on plain attributes, so no key
    tuples (no garbage) on a big queue."""
    out = sorted(jobs, key=_ID)
    out.sort(key=_SUBMIT)
    return out


class Fifo(Policy):
    def order(self, jobs: list[Job], ctx: Context) -> list[Job]:
        return submission_order(jobs)
