"""The scheduling core: the one pass every driver (library, simulator, commands, server) runs.

    route       submit / alter: the router picks the job's queue (admission.py)
    prioritise  iterate: the policy orders the ready jobs (ready.py, policy.py, policies/)
    plan        iterate: the walk starts, reserves and backfills in a profile (planner.py, plan.py)
    apply       iterate: the starts the plan decided change the jobs, after the walk

`Scheduler` holds the jobs and moves them through their states (jobs.py's TRANSITIONS);
`_move` is the only place a job changes state, and keeps every index in step: `ready`
(QUEUED), `_waiting`, `_active` and `runs` (running), the queues' counts (`admission`).
Its parts: `admission`, `ready`, `planner`, `runs`, `bookings`, `billing`, each in its own
module with its invariant.  It does no I/O and never reads a clock: every call takes `now`
(seconds on the caller's clock).  Its whole state round-trips through plain JSON-able
dicts (`to_dict` / `restore`), each part saving its own.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

from .admission import Admission
from .bank import Bank
from .billing import Billing
from .bookings import Bookings
from .calendar import Entry
from .depends import Registry
from .errors import BadDependency, InvalidRequest, InvalidState, Rejected, UnknownJob
from .jobs import (ACTIVE, COMPLETED, DELETED, EXITING, FINISHED, PENDING, QUEUED, RUNNING,
                   WAITING, Allocation, Dependency, DepType, Hold, Job, Request, State, SUBJOB, number)
from .plan import Plan, Start
from .policy import Context, Fifo, Policy
from .planner import QUOTA_COMMENT, Planner
from .profile import Profile
from .reservations import Reservation
from .route import Router
from .topology import NodeState, Tiers, Topology
from .quotas import Quotas
from .ready import Ready
from .running import Running
from .usage import Usage, key_of

STATE_VERSION = 1
STANDBY = 1  # the tier of a job whose project is out of allocation under "standby"

#: What `alter` may change on a job that waits, and on one that runs.
ALTERABLE = frozenset({"name", "walltime", "request", "queue", "priority", "start_after", "deadline", "account",
                       "group", "dependencies", "comment", "extra", "score", "consumes", "cput", "disk",
                       "array_limit", "reservation"})
ALTERABLE_RUNNING = frozenset({"name", "walltime", "comment", "extra", "array_limit"})


@dataclass
class Settings:
    """Planner settings (the site config's top-level planning keys)."""

    depth: float = 1  # reservation depth: 0 none, 1 EASY, ALL conservative
    backfill: bool = True  # False: no job starts past the first that cannot (strict order)
    interval: float = 15.0  # nominal seconds between passes (a policy's accrual unit)
    overrun_grace: float = 300.0  # a job past its walltime is expected to end this much later
    reservation_slop: float = 0.0  # keep this much clear before a reservation (Cobalt: 180)
    dependency_failure: str = "hold"  # a dependency that can never be met: "hold" the job
    #   (Cobalt's dep_fail, released when the user fixes it) or "delete" it (Torque, OpenPBS)
    queue_priority: bool = True  # jobs of a higher-priority queue first (PBS's by_queue)
    job_priority: bool = True  # then a higher qsub -p first (unless the policy weighs them)

    def __post_init__(self):
        if self.dependency_failure not in ("hold", "delete"):
            raise InvalidRequest(f"dependency_failure must be hold or delete, not {self.dependency_failure!r}")


def _altered(job: Job, changes: dict) -> Job:
    """A copy of `job` with `changes` (as qalter or a journal gives them), each checked
    alone: one `job` may not have in its state, or a value out of range, is refused."""
    allowed = ALTERABLE if job.state in PENDING else ALTERABLE_RUNNING if job.state in ACTIVE else frozenset()
    for key in changes:
        if key not in ALTERABLE:
            raise InvalidRequest(f"cannot alter {key!r}")
        if key not in allowed:
            raise InvalidState(f"job {job.id} is {job.state.value}: cannot alter {key}")
    new = job.copy()
    for key, value in changes.items():
        if key == "request" and isinstance(value, dict):
            value = Request.from_dict(value)
        if key == "dependencies":
            value = [d if isinstance(d, Dependency)  # or [kind, job id(, of)] as stored
                     else Dependency(DepType(d[0]), int(d[1]), None, int(d[2]) if len(d) > 2 else 0)
                     for d in value]
        setattr(new, key, value)
    if "walltime" in changes and not (new.walltime > 0 and math.isfinite(new.walltime)):
        raise Rejected(f"walltime must be positive, not {new.walltime!r}")
    if "array_limit" in changes and not (job.array_id and type(new.array_limit) is int and new.array_limit >= 0):
        raise Rejected(f"a slot limit is a whole number >= 0 for an array's subjob, not {new.array_limit!r}")
    return new


class Scheduler:
    """Jobs, queues, reservations and a machine, and the pass that schedules them."""

    def __init__(self, topology: Topology, router: Router, policy: Policy | None = None,
                 settings: Settings | None = None, bank: Bank | None = None, calendar: Iterable[Entry] = (),
                 usage: Usage | None = None, quotas: Quotas | None = None):
        self.topology = topology
        self.router = router
        self.policy = policy or Fifo()
        self.settings = settings or Settings()
        self.bank = bank  # allocations (None: nothing is charged)
        self.calendar = list(calendar)
        # the site's own rules may hold a runnable job back: a project refused at zero, a
        # capability job outside its week's series (fixed by the configuration)
        self.site_holds = any(e.kind == "bimodal" for e in self.calendar) or (bank is not None and (
            bank.on_exhausted == "refuse" or any(a.on_exhausted == "refuse" for a in bank.accounts.values())))
        self.billing = Billing(bank, topology) if bank is not None else None
        self.jobs: dict[int, Job] = {}
        self.bookings = Bookings(self, self.calendar)
        self.reservations = self.bookings.reservations  # (the same dict, never rebound)
        self.next_id = 1
        self.last_pass: float | None = None
        self.usage = usage or Usage()
        self.quotas = quotas or Quotas()  # resource quota sets and consumables (none: no limits)
        if self.quotas.host_sets:
            self.quotas.on_nodes(topology.all_nodes())
        self.admission = Admission(topology, router, bank, self.quotas, self.calendar)
        self._init_indexes()
        self.planner = Planner(self)  # what one pass leaves the next

    def _init_indexes(self) -> None:
        """The jobs' indexes and counts, kept in step by `_move` (rebuilt from `jobs` on restore)."""
        self.ready = Ready(self.topology, self.router, self.policy, self.settings.queue_priority,
                           self.settings.job_priority, self.admission.placed)  # the QUEUED jobs, in order
        self._active: dict[int, Job] = {}
        self._waiting: set[int] = set()
        self.runs = Running(self.topology)  # the units running jobs hold, and their kept profile
        self._deps = Registry()
        #: jobs the core deleted itself (a dependency failed, their reservation ended),
        #: oldest first: a driver writes their records and clears the list
        self.deleted: list[Job] = []
        self.node_notes: dict[str, str] = {}  # operators' notes on nodes (pbsnodes -N)
        self._array_limits = 0  # jobs with an array slot limit ever seen (turns the gate on)
        self._advres = 0  # jobs bound to a named reservation ever seen (turns the gate on)

    # --- reading ---------------------------------------------------------------------
    def job(self, job_id: int) -> Job:
        try:
            return self.jobs[int(job_id)]
        except (KeyError, ValueError, TypeError):
            raise UnknownJob(job_id) from None

    @property
    def runnable(self) -> int:
        """How many jobs are QUEUED (waiting for nothing but resources)."""
        return len(self.ready.jobs)

    def queued(self) -> Iterable[Job]:
        """The QUEUED jobs (a view: not to be changed while read)."""
        return self.ready.jobs.values()

    def running(self) -> list[Job]:
        return list(self._active.values())

    @property
    def busy(self) -> int:
        """The units running jobs hold (the OR of their allocations' units)."""
        return self.runs.busy

    def size(self, job: Job) -> int:
        return self.topology.size(job.request)

    def placed(self, job: Job) -> Request:
        """What the machine places for `job` (Admission.placed)."""
        return self.admission.placed(job)

    def profile(self, now: float) -> Profile:
        """The free units over time from `now`, as a pass starts planning (running jobs,
        overruns and reservations; no waiting job placed yet)."""
        return self.planner.profile(now)

    def order(self, now: float) -> list[Job]:
        """The runnable jobs in the order a pass at `now` walks them (showq lists them so)."""
        return list(self.planner.prioritise(now, None)[0]) if self.ready.jobs else []

    def planned(self, job_id: int) -> tuple[float, Allocation] | None:
        """The start and allocation the last pass reserved for a waiting job (Planner.planned)."""
        return self.planner.planned(job_id)

    def comment(self, job: Job) -> str:
        """The job's comment as qstat shows it (Planner.comment)."""
        return self.planner.comment(job)

    def context(self, now: float, running: Iterable[Job] | None = None) -> Context:
        elapsed = 0.0 if self.last_pass is None else now - self.last_pass
        return Context(now, elapsed, self.settings.interval, self.topology.node_count, self.size,
                       lambda job: self.topology.occupies(job.request),
                       self.usage, self._active.values() if running is None else running)

    def _rate(self, job: Job) -> float:
        """What a running job accrues a second in the site's usage metric (nothing while
        it is suspended)."""
        if job.suspended_at is not None:
            return 0.0
        metric = self.usage.metric
        return float(self.topology.occupies(job.request) if metric == "slots" else
                     self.size(job) if metric == "nodes" else 0)

    # --- bookkeeping -----------------------------------------------------------------
    def _move(self, job: Job, new: State, now: float) -> None:
        """The only place a job changes state: keeps every index in step."""
        old = job.state
        if old == new:
            return
        job.move_to(new, now)
        planner = self.planner
        planner.dirty = True
        jid = job.id
        freed = planner.freed
        if old == QUEUED:
            self.ready.remove(job)
            booked = planner.booked.get(jid)
            if booked is not None and new != RUNNING and freed is not None:  # (a pass's starts: its walk logged them)
                freed.append((booked[0], booked[0] + job.walltime))  # its reservation is given back
        elif old == WAITING:
            self._waiting.discard(jid)
        elif old in ACTIVE and new not in ACTIVE:
            # it ends (or is requeued): its usage stops accruing, and it counts as finished
            if self.usage.kept:
                self.usage.ended(key_of(job), self._rate(job), now, job.cpu_time)
            if self.admission.tally is not None:
                self.admission.count_running(self.admission.tally, job, -1)
            del self._active[jid]
            runs = self.runs
            if freed is not None:  # its units are free from now, not from its expected end
                end = job.planned_end(now)
                if jid in runs.overrun or (jid in runs.paused and end <= now):  # (held a grace period: hold_late)
                    end = now + max(self.settings.overrun_grace, 1.0)
                freed.append((now, end))
            runs.stop(job, now)
        if new == QUEUED:
            self.ready.add(job)
        elif new == WAITING:
            self._waiting.add(jid)
        elif new in ACTIVE and old not in ACTIVE:
            self._active[jid] = job
            if self.admission.tally is not None:
                self.admission.count_running(self.admission.tally, job, 1)
        if (old in FINISHED) != (new in FINISHED):  # (it leaves the queue, or comes back to it)
            self.admission.count(job, -1 if new in FINISHED else 1)

    def _settle(self, job: Job, now: float) -> None:
        self._move(job, job.pending_state(now), now)

    def _link_dependencies(self, job: Job) -> None:
        """Check the parents exist, and decide what their ends decided already."""
        self._deps.link(job, self.jobs)

    def _failed(self, job: Job) -> Dependency | None:
        """A dependency of `job` that can never be met, if failures delete jobs."""
        if self.settings.dependency_failure == "delete":
            return next((d for d in job.dependencies if d.met is False), None)
        return None

    # --- the pass API ----------------------------------------------------------------
    def submit(self, job: Job, now: float) -> Job:
        """Accept `job` (the scheduler keeps the object), route it and set its state.

        `job.id` 0 takes the next id; a given id must be new, and ids stay increasing.
        Raises Rejected with the reason in words.
        """
        if job.id in self.jobs:
            raise Rejected(f"job id {job.id} is already in use")
        if job.id < 0:
            raise Rejected(f"job id {job.id} is negative")
        if job.id >= SUBJOB and not job.array_id:
            raise Rejected(f"job id {job.id}: ids from 2**32 on are subjobs' (jobs.subjob_id)")
        job.submitted_queue = job.queue or self.router.default
        job.tier = 0
        job.queue = self.admission.route(job, now)
        self._link_dependencies(job)
        if job.id == 0:
            job.id = self.next_id
        self.next_id = max(self.next_id, number(job.id) + 1)
        job.submit_time = now
        job.state, job.eligible_since, job.eligible_time = QUEUED, now, 0.0
        job.start_time = job.end_time = job.exit_status = None
        job.allocation = None
        self.jobs[job.id] = job
        if job.standing == "exhausted" and self.bank.action(job.account) == "standby":
            job.tier, self.ready.tiered = STANDBY, True  # Kraken: after every other job (before it joins the order)
        self.ready.add(job)
        self._array_limits += job.array_limit > 0
        self._advres += bool(job.reservation)
        self.admission.count(job, 1)
        self._deps.register(job, self.jobs)
        self.policy.on_submit(job)
        self.admission.shrink_score(job, now)
        if job.dependencies and all(d.met for d in job.dependencies):
            self.policy.on_dependencies_met(job, [self.jobs[d.job_id] for d in job.dependencies])
        dirty = self.planner.dirty
        # a parent that failed already deletes it at once, as a parent failing a moment
        # later would: a pipeline behaves the same whichever comes first
        failed = self._failed(job)
        if failed is not None:
            self._delete_for(job, failed, now)
            return job
        self._settle(job, now)
        # a new job changes nothing the last pass planned (unless it brings a limit the
        # last walk did not check)...
        self.planner.dirty = dirty or job.array_limit > 0
        if job.state == QUEUED:
            self.planner.fresh.append(job)  # ...it only joins the queue
        return job

    def iterate(self, now: float) -> Plan:
        """Run one scheduling pass at `now`: start what can start and plan the rest (Planner.run).

        The jobs started are RUNNING on return, on the nodes in `plan.started`; the caller
        launches them (and calls `requeue` if a launch fails).
        """
        return self.planner.run(now)

    def _apply(self, job: Job, start: Start, now: float) -> None:
        """A start the plan decided: the job runs on its allocation from `now`."""
        a = start.allocation
        job.allocation, job.start_time = a, now  # (its node names are listed when first read)
        job.score_at_start, job.run_count = job.score, job.run_count + 1
        if job.comment.startswith(QUOTA_COMMENT):
            job.comment = ""  # (the scheduler's own comment; an operator's stays)
        self._move(job, RUNNING, now)
        if self.usage.kept:
            self.usage.started(key_of(job), self._rate(job), now)
        self.runs.start(job, a.units, now)
        if self._deps:
            self._dependants(job, self._deps.started(job), False, now)

    def wakeup(self, now: float) -> float:
        """When a pass may next decide differently with no arrival or end (Planner.wakeup)."""
        return self.planner.wakeup(now)

    def run_now(self, job_id: int, now: float, nodes: tuple[str, ...] = ()) -> Start:
        """qrun: start a queued job now, ahead of its turn, on free nodes (only `nodes`,
        if given).  Priority, queue limits and reservations are the operator's call;
        nodes in use are never shared."""
        job = self.job(job_id)
        if job.state != QUEUED:
            raise InvalidState(f"job {job.id} is {job.state.value}, not queued")
        request = job.request if nodes else self.placed(job)  # (an operator's nodes override the queue's)
        free = self.planner.profile(now).free[0] & self.topology.eligible(request)
        if nodes:
            free &= self.topology.units_of_nodes(nodes)
        alloc = self.topology.choose(request, Tiers(free))
        if alloc is None:
            raise Rejected(f"job {job.id}: not enough free resources to run it now")
        start = Start(job.id, alloc, False)
        self._apply(job, start, now)
        self.planner.changed()
        return start

    def job_ended(self, job_id: int, now: float, exit_status: int, cpu_time: float | None = None) -> Job:
        """A running (or exiting) job has ended: free its nodes, charge its usage (its
        `cpu_time`, as the driver set it or reports it now, under the cpu metric), settle
        its dependants."""
        job = self.job(job_id)
        if job.state not in ACTIVE:
            raise InvalidState(f"job {job.id} is {job.state.value}, not running")
        job.end_time, job.exit_status = now, exit_status
        if cpu_time is not None:
            job.cpu_time = cpu_time
        if self.billing is not None:
            self.billing.charge(job, now, self.reservations.values())
        self._move(job, COMPLETED, now)
        self._dependants(job, self._deps.ended(job), True, now)
        return job

    def delete(self, job_id: int, now: float) -> Job:
        """qdel: a waiting job is deleted at once; a running one goes EXITING until the
        caller reports its end with `job_ended`."""
        job = self.job(job_id)
        if job.state in PENDING:
            job.end_time = now
            self._move(job, DELETED, now)
            self._dependants(job, self._deps.ended(job), True, now)
        elif job.state == RUNNING:
            self.exiting(job_id, now)
        else:
            raise InvalidState(f"job {job.id} is {job.state.value}: nothing to delete")
        return job

    def exiting(self, job_id: int, now: float, exit_status: int | None = None, cpu_time: float | None = None) -> Job:
        """A running job is ending: EXITING, its nodes held, until `job_ended`.  qdel asks
        it to stop; or its process has ended (`exit_status`, `cpu_time`) and the site's
        epilogue runs on its nodes, as Torque's job stays E until its epilogue is done."""
        job = self.job(job_id)
        if job.state not in ACTIVE:
            raise InvalidState(f"job {job.id} is {job.state.value}, not running")
        self._move(job, EXITING, now)
        if exit_status is not None:
            job.exit_status = exit_status
        if cpu_time is not None:
            job.cpu_time = cpu_time
        return job

    def requeue(self, job_id: int, now: float) -> Job:
        """Put a running job back in the queue (a launch failed, or it is to be rerun)."""
        job = self.job(job_id)
        if job.state != RUNNING:
            raise InvalidState(f"job {job.id} is {job.state.value}, not running")
        self._move(job, QUEUED, now)  # frees its nodes (it needs the start time)
        job.allocation, job.start_time = None, None
        job.suspended_at, job.suspended_for = None, 0.0  # (a new run's walltime is whole)
        self._settle(job, now)
        return job

    def suspend(self, job_id: int, now: float) -> Job:
        """A running job is suspended (qsig -s suspend, scontrol suspend): it keeps its
        units and its walltime stands still, so its expected end moves on with the clock;
        it accrues no usage meanwhile."""
        job = self.job(job_id)
        if job.state != RUNNING or job.suspended_at is not None:
            raise InvalidState(f"job {job.id} is {'suspended' if job.state == RUNNING else job.state.value}, "
                               "not running")
        if self.usage.kept:
            self.usage.rerate(key_of(job), -self._rate(job), now)
        job.suspended_at = now
        self.runs.paused.add(job.id)
        self.runs.overrun.discard(job.id)  # (past its walltime, it is not expected to end soon any more)
        self.planner.changed()
        return job

    def resume(self, job_id: int, now: float) -> Job:
        """A suspended job runs on: it is expected to end what its walltime has left from now."""
        job = self.job(job_id)
        if job.state != RUNNING or job.suspended_at is None:
            raise InvalidState(f"job {job.id} is {'not suspended' if job.state == RUNNING else job.state.value}")
        job.suspended_for, job.suspended_at = job.suspended(now), None
        if self.usage.kept:
            self.usage.rerate(key_of(job), self._rate(job), now)
        self.runs.paused.discard(job.id)
        self.runs.base = None  # (its end moved: running jobs' ends are built again)
        self.planner.changed()
        return job

    def hold(self, job_id: int, now: float, kind: Hold = Hold.USER) -> Job:
        """qhold: add a user (u), operator (o) or system (s) hold to a waiting job."""
        return self._hold(job_id, now, Hold(kind), True)

    def release(self, job_id: int, now: float, kind: Hold = Hold.USER) -> Job:
        """qrls: remove that hold; the job goes back to whatever else it waits for."""
        return self._hold(job_id, now, Hold(kind), False)

    def _hold(self, job_id: int, now: float, kind: Hold, on: bool) -> Job:
        job = self.job(job_id)
        if job.state not in PENDING:
            verb = "held" if on else "released"
            raise InvalidState(f"job {job.id} is {job.state.value}: only a waiting job can be {verb}")
        if on:
            job.holds.add(kind)
        else:
            job.holds.discard(kind)
        self._settle(job, now)
        return job

    def alter(self, job_id: int, now: float, **changes) -> Job:
        """qalter: change a waiting job (re-routed and re-checked), or a running job's
        name and walltime.  Nothing changes if any part is refused."""
        job = self.job(job_id)
        new = _altered(job, changes)
        if job.state in PENDING:
            self.admission.count(job, -1)
            try:
                if changes.keys() & {"walltime", "request", "queue", "account", "group", "consumes", "cput", "disk"}:
                    # route again from where the job was submitted, or the queue asked for now
                    new.submitted_queue = new.queue = changes.get("queue", job.submitted_queue)
                    new.queue = self.admission.route(new, now)
                if "dependencies" in changes:
                    self._link_dependencies(new)
                    failed = self._failed(new)
                    if failed is not None:  # qalter refuses it: an alteration never deletes a job
                        raise BadDependency(f"dependency on job {failed.job_id}{'[]' if failed.of else ''} "
                                            f"can never be met")
            finally:
                self.admission.count(job, 1)
        rerouted = new.queue != job.queue
        if rerouted:
            self.admission.count(job, -1)
        queued = job.state == QUEUED
        if queued:
            self.ready.leave(job)  # its key, walltime or need may change: it goes back in anew
        for key in ALTERABLE | {"submitted_queue", "standing"}:
            setattr(job, key, getattr(new, key))
        self._array_limits += job.array_limit > 0  # (an array's new slot limit turns its gate on)
        self._advres += bool(job.reservation)
        if rerouted:
            job.submit_time = now  # (as if submitted now: it ranks after jobs already waiting)
        if queued:
            self.ready.enter(job)
        if rerouted:
            self.admission.count(job, 1)
            # another queue: the job waits afresh, as if submitted now (Cobalt's
            # anti-gaming rule: its queue time and eligible time restart here, its score
            # in the policy), so it ranks with a job submitted at this moment, not above it
            job.eligible_time = 0.0
            job.eligible_since = now if job.state == QUEUED else None
            self.policy.on_route_change(job)
            self.admission.shrink_score(job, now)
        if "dependencies" in changes:
            self._deps.register(job, self.jobs)
            if job.dependencies and all(d.met for d in job.dependencies):
                self.policy.on_dependencies_met(job, [self.jobs[d.job_id] for d in job.dependencies])
        if job.state in PENDING:
            self._settle(job, now)
        elif "walltime" in changes:
            self.runs.base = None  # a running job's expected end moved: rebuild the profile
        self.planner.changed()
        return job

    def set_usage(self, kind: str, name: str | None, now: float, amount: float | None = None) -> int:
        """An operator's reset (`amount` None) or setting of a user's, group's or project's
        decayed usage (Usage.set_by_name); how many usage records it touched."""
        n = self.usage.set_by_name(kind, name, now, amount, getattr(self.policy, "tree", None))
        self.planner.changed()
        return n

    def forget(self, job_id: int) -> Job:
        """Drop a finished job from memory (a trace replay or a retention policy does)."""
        job = self.job(job_id)
        if job.state not in FINISHED:
            raise InvalidState(f"job {job.id} is {job.state.value}, not finished")
        del self.jobs[job.id]
        self._deps.forget(job.id)
        return job

    def _dependants(self, parent: Job, kids: list[int], ended: bool, now: float) -> None:
        """`parent` started or ended: decide what waits on it, and settle those jobs.  A
        failed dependency deletes its job when the settings say so, and that deletion is
        an end for the jobs waiting on it in turn (a work list, not recursion: chains are
        as long as a pipeline)."""
        work = [(parent, kids, ended)]
        while work:
            parent, kids, ended = work.pop()
            for cid in kids:
                child = self.jobs.get(cid)
                if child is None or child.state not in PENDING:
                    continue
                self._deps.decide(child, parent, ended)
                deps = child.dependencies
                if all(d.met for d in deps):
                    self.policy.on_dependencies_met(child, [self.jobs[d.job_id] for d in deps if d.job_id in self.jobs])
                failed = self._failed(child)
                if failed is None:
                    self._settle(child, now)
                    continue
                work.append((child, self._delete_for(child, failed, now), True))

    def _delete_for(self, job: Job, failed: Dependency, now: float) -> list[int]:
        """Delete a waiting job whose dependency `failed` can never be met (Torque,
        OpenPBS); the jobs waiting on it in turn."""
        job.comment = f"Job deleted as result of dependency on job {failed.job_id}{'[]' if failed.of else ''}"
        job.end_time = now
        self._move(job, DELETED, now)
        self.deleted.append(job)
        return self._deps.ended(job)

    # --- allocations and calendars -------------------------------------------------------
    def post(self, kind: str, project: str, amount: float, now: float, job: int = 0, note: str = "",
             user: str = "") -> None:
        """An operator's deposit, set, refund or charge (gdeposit, gchalloc, grefund, gcharge)."""
        if self.bank is None:
            raise InvalidRequest("this site has no allocations")
        if kind not in ("deposit", "set", "refund", "charge"):
            raise InvalidRequest(f"unknown bank operation {kind!r}")
        if job and kind == "refund":
            self.job(job)  # (an unknown id is refused)
        self.bank.post(kind, project, amount, now, job=job, note=note, user=user)

    def _restand(self, now: float) -> None:
        """Follow each account's standing: a project's waiting jobs go to standby when it runs
        out (Kraken) and back when it is refilled or a new period begins."""
        changed = self.billing.restand(now)
        if not changed:
            return
        self.planner.changed()
        for project in changed:
            if self.bank.action(project) != "standby":
                continue
            tier = STANDBY if self.billing.standing[project] == "exhausted" else 0
            for job in self.jobs.values():
                if job.account == project and job.state in PENDING and job.tier >= 0 and job.tier != tier:
                    self.retier(job, tier)

    def retier(self, job: Job, tier: int) -> None:
        """Put a waiting job in `tier` (ordered by tier first: Kraken's standby and series)."""
        queued = job.state == QUEUED
        if queued:
            self.ready.leave(job)
        job.tier = tier
        self.ready.tiered = self.ready.tiered or tier != 0
        if queued:
            self.ready.enter(job)
        self.planner.changed()

    # --- reservations and nodes (bookings.py) ------------------------------------------
    def add_reservation(self, res: Reservation, now: float) -> Reservation:
        return self.bookings.add(res, now)

    def remove_reservation(self, name: str, now: float | None = None) -> Reservation:
        return self.bookings.remove(name, now)

    def alter_reservation(self, name: str, now: float, **changes) -> Reservation:
        return self.bookings.alter(name, now, **changes)

    def free_nodes(self, request: Request, start: float, end: float, now: float) -> tuple[str, ...] | None:
        return self.bookings.free_nodes(request, start, end, now)

    def big_run(self, now: float) -> list[Job]:
        return self.bookings.big_run(now)

    def note_node(self, name: str, note: str) -> None:
        """An operator's note on a node (pbsnodes -N); "" removes it.  The pass never reads it."""
        self.topology.node(name)  # an unknown name is refused
        if note:
            self.node_notes[name] = note
        else:
            self.node_notes.pop(name, None)

    def set_node_state(self, name: str, state: NodeState) -> None:
        self.topology.set_state(name, NodeState(state))
        self.planner.changed()
        self.runs.base = None  # the schedulable units changed

    # --- planning helpers ------------------------------------------------------------
    # --- state as plain dicts ----------------------------------------------------------
    def to_dict(self) -> dict:
        """The whole state as plain JSON-able dicts (`restore` loads it); each part saves its own."""
        return {"version": STATE_VERSION, "next_id": self.next_id, "last_pass": self.last_pass,
                "jobs": [self.planner.job_dict(j) for j in self.jobs.values()],
                "reservations": self.bookings.to_list(),
                "nodes": self.topology.node_states(), "node_notes": dict(self.node_notes),
                "usage": self.usage.to_dict(),
                **({"bank": self.bank.to_dict()} if self.bank is not None else {}),
                "booked": self.planner.booked_list()}

    def restore(self, state: dict) -> "Scheduler":
        """Load a state saved by `to_dict` into this (freshly configured) scheduler."""
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            found = state.get("version") if isinstance(state, dict) else None
            raise InvalidRequest(f"state version {found!r} is not supported (this is version {STATE_VERSION})")
        try:
            for name, value in state.get("nodes", {}).items():
                self.topology.set_state(name, NodeState(value))
            self.node_notes = {str(k): str(v) for k, v in state.get("node_notes", {}).items()}
            self.bookings.restore(state.get("reservations", []))
            for d in state.get("jobs", []):
                self._restore_job(Job.from_dict(d))
            self._restore_order()
            self.next_id = int(state.get("next_id", max(map(number, self.jobs), default=0) + 1))
            self.last_pass = state.get("last_pass")
            self.planner.restore(state.get("booked", []))
            if self.bank is not None:
                self.bank.restore(state.get("bank", {}))
            usage = state.get("usage", {})
            self.usage.restore(usage if "records" in usage else {},  # (states before decayed usage: none)
                               [(key_of(j), self._rate(j)) for j in self._active.values()],
                               state.get("last_pass"))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise InvalidRequest(f"state is malformed: {e}") from None
        return self

    def _restore_job(self, job: Job) -> None:
        """A saved job in the indexes its state puts it in."""
        self.jobs[job.id] = job
        self._array_limits += job.array_limit > 0
        self._advres += bool(job.reservation)
        self.ready.tiered = self.ready.tiered or bool(job.tier)
        if job.tier < 0 and job.state in PENDING:
            self.bookings.front.add(job.id)
        if job.state == WAITING:
            self._waiting.add(job.id)
        elif job.state in ACTIVE:
            self._active[job.id] = job
            units = self.topology.units_of(job.nodes, job.cores)
            self.runs.restored(job, units)
            job.allocation = Allocation(units, job.nodes, job.cores)
        if job.state not in FINISHED:
            self.admission.count(job, 1)

    def _restore_order(self) -> None:
        """The dependencies and the policy's order of the jobs restored."""
        for job in self.jobs.values():  # after all jobs: an array's tally counts its subjobs
            if job.dependencies and job.state in PENDING:
                self._deps.register(job, self.jobs)
        self.ready.restore([j for j in self.jobs.values() if j.state == QUEUED])
