"""The ready jobs: those QUEUED (waiting for nothing but resources), in the order a pass
reads them.

A pass walks them in the policy's order after two keys, each only where it exists: the
job's tier (Kraken's standby and capability series: lower first) and its rank (its
queue's priority, then its own qsub -p, higher first, where the site ranks by them and the
policy does not weigh them).  For a static policy the whole order is kept between passes
in a Backlog, so a pass reads only as far as it walks.

Invariants: `jobs` holds exactly the QUEUED jobs (in the order they became so); the
policy's queue and the backlog hold each of them keyed (tier, rank, policy key, id);
`ranks` counts those with a rank and `scattered` those no count can hold
(Topology.interchangeable); `tiered` is True once any job has had a tier.
"""
from __future__ import annotations

from typing import Callable, Iterable

from .backlog import Backlog
from .jobs import Job, Request
from .policy import Policy
from .route import Router
from .topology import Topology
from .usage import key_of

UNRANKED = (0, 0)


class Ready:
    """The QUEUED jobs and their order."""

    def __init__(self, topology: Topology, router: Router, policy: Policy, by_queue: bool, by_job: bool,
                 placed: Callable[[Job], Request]):
        self.topology, self.router, self.policy, self.placed = topology, router, policy, placed
        self.by_queue = by_queue and not policy.weighs_queue_priority  # (PBS's by_queue)
        self.by_job = by_job and not policy.weighs_job_priority
        self.jobs: dict[int, Job] = {}
        self.backlog: Backlog | None = Backlog() if policy.static else None
        self.tiered = False  # some job has had a tier (the order then sorts by it first)
        self.ranks = 0  # ready jobs with a rank (the order then sorts by it)
        # ready jobs no count can hold: while any waits, every reservation is on units (a
        # count beside one on units may find no units; see Planner.counting)
        self.scattered = 0

    def add(self, job: Job) -> None:
        """`job` becomes QUEUED."""
        self.jobs[job.id] = job
        self.enter(job)

    def remove(self, job: Job) -> None:
        """`job` is QUEUED no more."""
        del self.jobs[job.id]
        self.leave(job)

    def enter(self, job: Job) -> None:
        """A QUEUED `job` takes its place in the order (after `leave`: anew, its key changed)."""
        self._count(job, 1)
        need = self.topology.need(self.placed(job))
        self.policy.enqueue(job, key_of(job), need)
        if self.backlog is not None:
            self.backlog.add(self._key(job), job, need)

    def leave(self, job: Job) -> None:
        """`job` leaves the order (for good, or to enter it again with another key)."""
        self._count(job, -1)
        self.policy.dequeue(job)
        if self.backlog is not None:
            self.backlog.remove(self._key(job))

    def _key(self, job: Job) -> tuple:
        """`job`'s place in the backlog: (tier, rank, the policy's key, id)."""
        return job.tier, self.rank(job), self.policy.key(job, None), job.id

    def tier_rank(self, job: Job) -> tuple:
        """The keys sorted on before the policy's (stable sorts keep its order within)."""
        return job.tier, self.rank(job)

    def _count(self, job: Job, sign: int) -> None:
        self.ranks += sign * (self.rank(job) != UNRANKED)
        self.scattered += sign * (not self.topology.interchangeable(self.placed(job)))

    def rank(self, job: Job) -> tuple[int, int]:
        """Ranked ahead of the policy's order: its queue's priority, then its own (-p),
        higher first, where the site ranks by them and the policy does not weigh them."""
        q = self.router.queues.get(job.queue) if self.by_queue else None
        qp = q.priority if q is not None else 0
        jp = job.priority if self.by_job else 0
        return (-qp, -jp) if qp or jp else UNRANKED

    @property
    def sorted_first(self) -> bool:
        """Do tiers or ranks sort the order before the policy's key?"""
        return self.tiered or self.ranks > 0

    def by_tier_and_rank(self, jobs: Iterable[Job]) -> list[Job]:
        """`jobs` sorted by tier and rank, the given order kept within each (stable)."""
        return sorted(jobs, key=self.tier_rank)

    def settled(self, fresh: list[Job]) -> list[Job] | None:
        """New jobs in the order they take among themselves in every pass (None: the
        policy cannot tell): the policy's, then by tier and rank."""
        fresh = self.policy.settled(fresh)
        if fresh is not None and self.sorted_first:
            fresh.sort(key=self.tier_rank)  # (stable: the policy's order within)
        return fresh

    def sort_after(self, fresh: list[Job], last: Job | None) -> bool:
        """Do all new jobs sort after `last`?  (Static policies only: keys need no context.)"""
        if last is None or not fresh:
            return True
        key = self.policy.key
        if not self.sorted_first:  # (every tier and rank alike: the policy's key alone)
            bound = key(last, None)
            return all(key(j, None) > bound for j in fresh)
        bound = self._key(last)[:3]
        return all(self._key(j)[:3] > bound for j in fresh)

    def restore(self, jobs: Iterable[Job]) -> None:
        """The QUEUED jobs of a saved state, in the order they became so: the policy's
        queue filled by id, the backlog in one sort (not an insertion per job)."""
        for job in jobs:
            self.jobs[job.id] = job
        needs = {j.id: self.topology.need(self.placed(j)) for j in self.jobs.values()}
        for job in sorted(self.jobs.values(), key=lambda j: j.id):
            self.policy.enqueue(job, key_of(job), needs[job.id])
            self._count(job, 1)
        if self.backlog is not None:
            self.backlog = Backlog(sorted((self._key(j), j, needs[j.id])
                                          for j in self.jobs.values()))
