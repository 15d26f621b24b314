"""Weighted factors, as Slurm's priority/multifactor plugin and Moab's priority sum them.

    priority = weight_age * age + weight_fairshare * fairshare + weight_size * size
             + weight_queue * queue + weight_user * user

each factor in [0, 1]:

    age        seconds eligible / max_age, at most 1 (Slurm's PriorityMaxAge, 7 days)
    fairshare  2 ** (-U / S), Slurm's classic factor: U the user's decayed usage over
               everyone's, S the user's share of the whole tree (shares fixed, not only
               the active nodes'), or 1 / (users with usage on record) with no tree
    size       nodes / machine nodes (1 - that with favor_small)
    queue      the queue's priority / the highest queue priority (Slurm's partition
               factor, Moab's class priority); 0 when no queue has one
    user       (qsub -p + 1024) / 2047 (Moab's user priority; PBS's -p range)

Highest first; equal priorities in submission order, then job id.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..core.jobs import Job
from ..core.policy import Context, Policy, tie_break
from ..core.usage import key_of
from .sharetree import Node, ShareTree


@dataclass
class Multifactor(Policy):
    weight_age: float = 1000.0
    weight_fairshare: float = 10000.0
    weight_size: float = 0.0
    weight_queue: float = 1000.0
    weight_user: float = 0.0
    max_age: float = 7 * 86400.0
    favor_small: bool = False
    queue_priorities: dict[str, float] = field(default_factory=dict)  # (the router's, set by the config)
    tree: ShareTree | None = None

    name = "multifactor"
    static = False
    reads_usage = True
    weighs_job_priority = True
    weighs_queue_priority = True

    def prioritise(self, jobs: list[Job], ctx: Context) -> None:
        self._begin(ctx)
        for job in jobs:
            job.score = self._score(job, ctx)

    def _begin(self, ctx: Context) -> None:
        """This pass's usage, shares and top queue priority (once per moment and usage)."""
        moment = (ctx.now, ctx.usage.version)
        if getattr(self, "_moment", None) == moment:
            return
        self._moment = moment
        self._users = ctx.usage.by("user", ctx.now)
        self._total = sum(self._users.values())
        self._flat = not self.tree or not (self.tree.root.children or self.tree.root.templates)
        self._shares: dict[tuple, float] = {}
        self._top = max(self.queue_priorities.values(), default=0.0)

    def _score(self, job: Job, ctx: Context) -> float:
        weights = self.weight_age, self.weight_fairshare, self.weight_size, self.weight_queue, self.weight_user
        return sum(w * f for w, f in zip(weights, self._factors(job, ctx)))

    def _share(self, job: Job) -> float:
        """The job's user's share of the whole machine (Slurm's normalised shares)."""
        if self._flat:
            return 1.0 / len(self._users) if self._users else 1.0
        key = key_of(job)
        share = self._shares.get(key)
        if share is None:
            share = self._shares[key] = _share_of(self.tree.node_of(key))
        return share

    def _factors(self, job: Job, ctx: Context) -> tuple[float, ...]:
        age = min(job.eligible(ctx.now) / self.max_age, 1.0) if self.max_age > 0 else 1.0
        share = self._share(job)
        used = self._users.get(job.owner, 0.0) / self._total if self._total > 0 else 0.0
        fair = 2.0 ** (-used / share) if share > 0 else 0.0
        size = ctx.size(job) / ctx.machine_nodes
        if self.favor_small:
            size = 1.0 - size
        queue = self.queue_priorities.get(job.queue, 0.0) / self._top if self._top > 0 else 0.0
        user = (job.priority + 1024) / 2047
        return age, fair, size, queue, user

    def key(self, job: Job, ctx: Context) -> tuple:
        return (-job.score,) + tie_break(job)

    def describe(self, job: Job, ctx: Context) -> dict[str, float]:
        self._begin(ctx)
        names = ("age", "fairshare", "size", "queue", "user")
        return {"priority": self._score(job, ctx), **{n: f for n, f in zip(names, self._factors(job, ctx))}}


def _share_of(node: Node) -> float:
    """The product of a node's shares among all its siblings, root down."""
    share = 1.0
    while node.parent is not None:
        siblings = node.parent.children.values()
        total = sum(c.shares for c in siblings)
        share *= node.shares / total if total > 0 else 0.0
        node = node.parent
    return share
