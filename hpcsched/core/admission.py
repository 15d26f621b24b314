"""Admission and limits: which queue a job joins, whether the machine and the queues let
it in, and the counts the limits read as jobs wait, start and end.

Invariants: `in_queue[q]` and `in_queue_user[(q, owner)]` count the jobs of queue q (of
that owner) not finished: the scheduler counts a job in when it joins a queue and out
when it finishes or leaves it.  `tally`, once a limit first reads it, counts the running
jobs (see Tally).  A `Gate` is one pass's copy of it, counting the walk's starts too.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Iterable

from .bank import Bank
from .calendar import Entry
from .errors import InvalidRequest, Rejected, Unplaceable
from .jobs import Allocation, Job, Request
from .quotas import Quotas
from .route import Queue, Router
from .timefmt import hms
from .topology import Topology


class Admission:
    """The router, the machine's shape and the quotas, asked whether a job may join a queue."""

    def __init__(self, topology: Topology, router: Router, bank: Bank | None, quotas: Quotas,
                 calendar: list[Entry]):
        self.topology, self.router, self.bank, self.quotas, self.calendar = topology, router, bank, quotas, calendar
        # jobs in each queue, and each user's there, waiting or running (PBS's max_queued)
        self.in_queue: dict[str, int] = {}
        self.in_queue_user: dict[tuple[str, str], int] = {}
        self.bound = any(q.nodes for q in router.queues.values())  # some queue is bound to nodes
        # the running jobs' counts the queue and quota limits read, kept as jobs start and end
        # from the first pass a limit gates (None until then: nothing reads them)
        self.tally: Tally | None = None
        self._fits: dict[Request, bool] = {}
        self._placed: dict[tuple[Request, str], Request] = {}

    def placed(self, job: Job) -> Request:
        """What the machine places for `job`: its request, within its queue's nodes if the
        queue is bound to some (ALCF's prod-long on a third of Mira)."""
        return self.bound_to(job.request, self.router.queues.get(job.queue))

    def bound_to(self, request: Request, queue: Queue | None) -> Request:
        """`request` within `queue`'s nodes (the nodes of both, if it names its own)."""
        if queue is None or not queue.nodes:
            return request
        key = (request, queue.name)
        req = self._placed.get(key)
        if req is None:
            bound = set(queue.nodes)
            within = tuple(n for n in request.within if n in bound) if request.within else queue.nodes
            req = self._placed[key] = replace(request, within=within)
        return req

    def fits_anywhere(self, request: Request) -> bool:
        ok = self._fits.get(request)
        if ok is None:
            ok = self._fits[request] = self.topology.fits_anywhere(request)
        return ok

    def route(self, job: Job, now: float) -> str:
        """Route `job` (not counted in the queue tallies) and check the machine can hold it.
        Sets the job's allocation standing, which may send it to the backfill queue."""
        if not (job.walltime > 0 and math.isfinite(job.walltime)):
            raise Rejected(f"walltime must be positive, not {job.walltime!r}")
        size, machine = self.topology.size(job.request), self.topology.node_count
        queue = self.router.route(job, size, machine, self.in_queue, self.in_queue_user)
        bank = self.bank
        job.standing = "" if bank is None else bank.standing(job.account, now)
        if job.standing == "ok":
            job.standing = ""
        elif job.standing:
            action = bank.action(job.account)
            if action == "refuse":  # (a Director's Discretionary project: no overburn either)
                raise Rejected(f"project {job.account or '(none)'} has no allocation left")
            # exhausted (backfill), or overburning with a job that is not capability-sized:
            # Cobalt sends it to the backfill queue
            if (action == "backfill" and job.standing == "exhausted") or \
                    (job.standing == "overburn" and not queue.capability):
                q = self.router.queues.get(bank.backfill_queue)
                if q is None:
                    raise Rejected(f"project {job.account} has no allocation left and there is no "
                                   f"queue {bank.backfill_queue}")
                why = q.refuse(job, size, machine, self.in_queue.get(q.name, 0),
                               self.in_queue_user.get((q.name, job.owner), 0))
                if why:
                    raise Rejected(f"project {job.account} has no allocation left: {why}")
                queue = q
        if not self.fits_anywhere(job.request):
            gpus = f" with {job.request.gpus} GPUs each" if job.request.gpus else ""
            within = job.request.within
            if within:  # (kept to some nodes: -l host=, nidmask, Cobalt's location)
                named = ", ".join(within[:3]) + (", ..." if len(within) > 3 else "")
                raise Rejected(f"requests more than the nodes it may use have ({size} nodes{gpus} within {named})")
            topo = self.topology
            if topo.eligible(job.request).bit_count() >= topo.need(job.request):  # (the nodes are there: no shape holds them)
                placement = getattr(topo, "placement", "")
                shape = "cuboid of routers" if placement == "cuboid" else f"{placement} placement"
                raise Unplaceable(f"no {shape} on this machine holds {size} nodes{gpus} (it has {machine})")
            widest = max(node.cores for node in self.topology.all_nodes())
            if job.request.cores == 0 and job.request.ppn > widest:  # (the chunk, not the count, is too big)
                raise Rejected(f"requests more than the machine has (ppn={job.request.ppn}: its widest node has "
                               f"{widest} cores)")
            raise Rejected(f"requests more than the machine has ({size} nodes{gpus} of {machine})")
        if job.consumes or self.quotas:
            why = self.quotas.check(replace(job, queue=queue.name))
            if why:
                raise Rejected(why)
        if queue.nodes:
            if job.request.within and not set(job.request.within) & set(queue.nodes):
                raise Rejected(f"none of its nodes is among queue {queue.name}'s")
            try:
                if not self.fits_anywhere(self.bound_to(job.request, queue)):
                    raise Rejected(f"does not fit the nodes of queue {queue.name}")
            except InvalidRequest as e:
                raise Rejected(f"queue {queue.name}: {e}") from None
        for entry in self.calendar:  # a whole-machine drain that recurs bounds every job's walltime
            if entry.every and not entry.nodes and job.walltime > entry.every - entry.duration:
                raise Rejected(f"walltime {hms(job.walltime)} cannot fit between two drains of calendar "
                               f"{entry.name} ({hms(entry.every - entry.duration)} apart)")
        return queue.name


    def shrink_score(self, job: Job, now: float) -> None:
        """A starting score shrunk for a project past its allocation (Cobalt)."""
        if job.standing == "exhausted" and self.bank.action(job.account) == "backfill":
            job.score *= self.bank.score_factor(job.account, now)

    def count(self, job: Job, delta: int) -> None:
        """Count `job` into (1) or out of (-1) its queue's jobs."""
        self.in_queue[job.queue] = self.in_queue.get(job.queue, 0) + delta
        key = (job.queue, job.owner)
        self.in_queue_user[key] = self.in_queue_user.get(key, 0) + delta

    def count_running(self, tally: Tally, job: Job, sign: int, allocation: Allocation | None = None) -> None:
        """Add (1) or take away (-1) a running job in the counts queue and quota limits read
        (`allocation`: where it starts, before the job holds it)."""
        tally.count(job, sign, self.topology.size(job.request))
        if self.quotas:
            self.quotas.count(job, tally.quotas, sign, allocation)

    def tallies(self, running: Iterable[Job]) -> Tally:
        """The running jobs' counts, made from `running` when first asked for and kept from
        then on (the scheduler counts each start and end in: `count_running`)."""
        if self.tally is None:
            self.tally = Tally()
            for job in running:
                self.count_running(self.tally, job, 1)
        return self.tally


class Tally:
    """The running jobs' counts the limits read: per queue its jobs, nodes and processors,
    per (queue, owner) jobs and nodes, per array its subjobs, the quota sets' usage, and
    the policy's own counts (`policy`, Simon's large jobs).  Invariant: each sums the jobs
    counted in (`count(job, 1)`) less those counted out, job by job."""

    __slots__ = ("jobs", "user_jobs", "nodes", "user_nodes", "processors", "array", "quotas", "policy")

    def __init__(self):
        self.jobs: dict[str, int] = {}  # queue -> running jobs
        self.user_jobs: dict[tuple[str, str], int] = {}  # (queue, owner) -> running jobs
        self.nodes: dict[str, int] = {}  # queue -> nodes (allocation units) they hold
        self.user_nodes: dict[tuple[str, str], int] = {}  # (queue, owner) -> nodes
        self.processors: dict[str, int] = {}  # queue -> processors they asked for
        self.array: dict[int, int] = {}  # array id -> running subjobs
        self.quotas: dict = {}  # the quota sets' usage (quotas.py keeps it)
        self.policy: dict = {}  # the policy's own counts, for one pass (Policy.hold_back)

    def copy(self) -> "Tally":
        """A pass's own copy (the policy's counts start afresh)."""
        out = Tally()
        out.jobs, out.user_jobs, out.nodes = dict(self.jobs), dict(self.user_jobs), dict(self.nodes)
        out.user_nodes, out.processors, out.array = dict(self.user_nodes), dict(self.processors), dict(self.array)
        out.quotas = {key: dict(v) for key, v in self.quotas.items()}
        return out

    def count(self, job: Job, sign: int, size: int) -> None:
        """Add (1) or take away (-1) a running job holding `size` units (quotas apart)."""
        q, qu = job.queue, (job.queue, job.owner)
        self.jobs[q] = self.jobs.get(q, 0) + sign
        self.user_jobs[qu] = self.user_jobs.get(qu, 0) + sign
        self.nodes[q] = self.nodes.get(q, 0) + sign * size
        self.user_nodes[qu] = self.user_nodes.get(qu, 0) + sign * size
        self.processors[q] = self.processors.get(q, 0) + sign * job.request.processors
        if job.array_id:
            self.array[job.array_id] = self.array.get(job.array_id, 0) + sign


class Gate:
    """One pass's limits that hold a runnable job back: its queue's running limits, its
    array's slot limit and the policy's own.  It counts the jobs running, including those
    the walk starts, so that each check sees the starts before it."""

    def __init__(self, sched, now: float):
        self.sched = sched
        self.running = list(sched._active.values())  # grows as the walk starts jobs
        self.ctx = sched.context(now, self.running)
        # the running jobs' counts, kept by the scheduler as jobs start and end: a copy
        self.admission = sched.admission
        self.tally = self.admission.tallies(self.running).copy()
        self.narrows = bool(sched.quotas.host_sets)  # the quotas narrow where a job may go
        self._narrowed: dict[tuple, Request | str] = {}
        self._closes: dict[tuple, frozenset[str]] = {}

    def __call__(self, job: Job) -> str | None:
        sched, tally = self.sched, self.tally
        q = sched.router.queues.get(job.queue)
        if q is not None:
            mine = (q.name, job.owner)
            why = q.hold_back(job, sched.size(job), sched.topology.node_count, tally.jobs.get(q.name, 0),
                              tally.user_jobs.get(mine, 0), tally.nodes.get(q.name, 0),
                              tally.processors.get(q.name, 0), tally.user_nodes.get(mine, 0))
            if why:
                return why
        if job.array_limit and tally.array.get(job.array_id, 0) >= job.array_limit:
            return f"array {job.array_id} already runs its limit of {job.array_limit} subjobs"
        if job.reservation:  # (bound to it alone: one gone, or not the job's to use, binds it nowhere)
            res = sched.reservations.get(job.reservation)
            if res is None:
                return f"its reservation {job.reservation} does not exist"
            if not res.admits(job):
                return f"its reservation {job.reservation} does not admit {job.owner}"
        if sched.site_holds:  # the site's own rules: a project refused at zero, Kraken's series
            why = (sched.billing is not None and sched.billing.refused(job)) or sched.bookings.series_hold(job)
            if why:
                return why
        if sched.quotas:
            why = sched.quotas.hold_back(job, tally.quotas)
            if why:
                return why
        return sched.policy.hold_back(job, self.ctx, tally.policy)

    def narrow(self, job: Job, request: Request) -> Request | str:
        """`request` within the nodes the quotas' host sets let `job` use now, or the
        reason none may.  (Jobs alike, by names and request, share one answer until the
        walk starts a job.)"""
        key = (job.owner, job.group, job.account, job.queue, request, tuple(job.consumes.items()))
        out = self._narrowed.get(key)
        if out is None:
            found = self.sched.quotas.narrow(job, self.tally.quotas)
            if found is None:
                out = request
            else:
                hosts, why = found
                if request.within:
                    allowed = set(hosts)
                    hosts = tuple(n for n in request.within if n in allowed)
                out = replace(request, within=hosts) if hosts else why
            self._narrowed[key] = out
        return out

    def closes(self, job: Job) -> frozenset[str]:
        """After `job` was held back: its attributes whose value alone holds back every job
        sharing it for the rest of the pass (see Quotas.closes).  (Jobs alike by names
        share one answer until the walk starts a job.)"""
        if not self.sched.quotas:
            return frozenset()
        key = (job.owner, job.group, job.account, job.queue)
        out = self._closes.get(key)
        if out is None:
            out = self._closes[key] = self.sched.quotas.closes(job, self.tally.quotas)
        return out

    def started(self, job: Job, allocation: Allocation) -> None:
        self.running.append(job)
        self._narrowed.clear()
        self._closes.clear()
        self.admission.count_running(self.tally, job, 1, allocation)
        self.sched.policy.started(job, self.ctx, self.tally.policy)
