"""Planning: start what fits in priority order, reserve for the top jobs, backfill the rest.

The planner sees the machine as a *profile*: the free units (see topology.py) over time, a
step function kept as the units freed and taken at each boundary.  Running jobs occupy
their units until their expected end; reservations block their units for jobs that may not
use them; each job the walk reserves for occupies its units from its planned start.  A job
may start now only if some allocation is free over its whole walltime window in this
profile, so it can never delay a reservation already made.  The reservation depth says
how many waiting jobs get one: 0 none (first fit), 1 EASY, `ALL` conservative (Maui's
RESERVATIONDEPTH).  With depth > 1, a job any nodes serve has its reservation held as a
count (Profile.hold), so that no reservation pins a node a later job could use first.

Which free units a job gets is chosen *tightest in time*: first the units whose free period
ends soonest after the job would end, then those that became free most recently before it
would start.  So a backfilled job prefers nodes a reservation needs only later, and a
reservation prefers nodes that are busy now, which leaves the nodes free now to backfill.
On a machine of identical nodes this makes the planner start exactly the jobs count-based
EASY (Lifka) starts, and with counts held, exactly those count-based conservative starts
(the references are in tests/oracle.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from operator import is_
from typing import Callable, Iterable, NamedTuple, Protocol

from .backlog import Sieved
from .jobs import Allocation, Job, Request
from . import counts, fitting
from .counts import HeldGroup
from .profile import AccessKey, Profile
from .timefmt import hms
from .topology import Tiers, Topology

ALL = math.inf  # reservation depth for conservative backfill
INF = math.inf
DEEP = 256  # kept counts from which a compressing pass takes runs of them at once (see Walk._stands)


class Start(NamedTuple):
    job_id: int
    allocation: Allocation
    backfill: bool  # started while a job ahead of it waited for resources


class Kept(NamedTuple):
    """Last pass's reservation of a job, as a pass keeps it in its profile: over [start,
    end), held as `count` units on no unit in particular (Profile.hold), or, with count 0,
    occupying `units`.  (A count moved or held anew is a new Kept: Walk._stands asks by
    identity.)"""
    start: float
    end: float
    count: int
    units: int


class Carried(NamedTuple):
    """What a pass hands its walk of the last one (conservative and depth-N).

    kept      job id -> Kept: last pass's reservations still valid, in the profile
    shown     job id -> last pass's (start, allocation) of each (the plan shows it again)
    compress  something freed resources since the last pass: each kept reservation is
              given back just before its job's turn, so it can only move earlier and no
              job ahead can take it (conservative backfill's guarantee)
    freed     (with compress, counts, no gate) the spans where room grew since each kept
              count was last found unable to move (see _Freed); None: unknown
    log       where this walk notes the spans it gives back, for the next compressing pass
    """
    kept: dict[int, Kept]
    shown: dict[int, tuple[float, Allocation]]
    compress: bool
    freed: list[tuple[float, float]] | None
    log: list[tuple[float, float]] | None


RESOURCES = "waiting for resources"
NO_START = "no start found within the planning horizon with the nodes now up"  # (the walk's one reason not the gate's)


@dataclass
class Plan:
    """One pass's decisions.  Reasons and estimated starts are there for every waiting job;
    estimates for jobs without a reservation are worked out on first request."""

    now: float
    started: list[Start] = field(default_factory=list)
    reserved: dict[int, tuple[float, Allocation]] = field(default_factory=dict)
    held: dict[int, int] = field(default_factory=dict)  # reserved as a count: job id -> units
    reasons: dict[int, str] = field(default_factory=dict)
    default_reason: str = RESOURCES
    profile: Profile | None = None  # the pass's final plan (valid until the next pass)
    # `since`: an earlier plan's reservations this one's are, but for the jobs in `moved`
    # (reserved anew) and those gone: what a reader of every pass updates (drain/samples.py)
    since: dict[int, tuple[float, Allocation]] | None = None
    moved: set[int] = field(default_factory=set)
    # the reason of a job the walk passed over unread, with a whole subtree the gate held
    # back (see Walk.closer): worked out when asked, against the pass's final counts
    passed_reason: Callable[[int], str | None] | None = None
    # the earliest start of a job (waiting, or one not submitted) in this pass's final plan,
    # after every start and reservation made (None: not within the planning horizon)
    earliest: Callable[[Job], float | None] | None = None
    # why a job the pass did not consider is not waiting for resources (held, a dependency,
    # running, ended), as it stands now; None for a job the scheduler does not know
    not_waiting: Callable[[int], str | None] | None = None
    _estimate: Callable[[int], float | None] | None = None
    _estimates: dict[int, float | None] = field(default_factory=dict)

    def reason(self, job_id: int) -> str | None:
        """Why the job is where it is after this pass: started, reserved, the walk's or the
        gate's reason, or (a job the pass did not walk) its hold, dependency or end; None
        for a job the scheduler does not know."""
        if any(s.job_id == job_id for s in self.started):
            return "started"
        if self.not_waiting is not None and job_id not in self.reasons and job_id not in self.reserved:
            other = self.not_waiting(job_id)
            if other != "":
                return other
        if job_id in self.reserved:
            t, alloc = self.reserved[job_id]
            where = alloc.nodes[0] if len(alloc.nodes) == 1 else f"{len(alloc.nodes)} nodes"  # (or a block)
            return f"reserved: starts at {t:.0f} (in {hms(t - self.now)}) on {where}"
        return self.reasons.get(job_id) or self.held_reason(job_id) or self.default_reason

    def held_reason(self, job_id: int) -> str | None:
        """Why the gate holds back a job the walk passed over unread (None: not such a job)."""
        if self.passed_reason is None or job_id in self.reasons:
            return None
        return self.passed_reason(job_id)

    def limited(self, job_id: int) -> bool:
        """Did a limit (the gate: a queue's, the policy's, a quota) hold the job back, so
        that its start depends on more than free nodes?"""
        return self.reasons.get(job_id, NO_START) != NO_START or self.held_reason(job_id) is not None

    def estimate(self, job_id: int) -> float | None:
        """Estimated start: now if started, the reservation if one was made, else the
        earliest fit in this pass's final plan (None: not within the planning horizon)."""
        for s in self.started:
            if s.job_id == job_id:
                return self.now
        if job_id in self.reserved:
            return self.reserved[job_id][0]
        if job_id not in self._estimates:
            self._estimates[job_id] = self._estimate(job_id) if self._estimate else None
        return self._estimates[job_id]


class Gate(Protocol):
    """The limits that may hold a runnable job back in this pass (queue and policy limits):
    `gate(job)` gives the reason, or None; where `narrows`, `narrow(job, request)` gives
    the request within the nodes the job may use now, or the reason it may use none;
    `started(job, allocation)` counts a start the walk made."""

    narrows: bool

    def __call__(self, job: Job) -> str | None: ...

    def narrow(self, job: Job, request: Request) -> Request | str: ...

    def started(self, job: Job, allocation: Allocation) -> None: ...

    def closes(self, job: Job) -> frozenset[str]:
        """After `job` was held back: the attributes (owner, group, account, queue) whose
        value, as `job` has it, holds back every job sharing it until the pass ends."""


def reach(now: float, until: float) -> float:
    """The longest walltime w with now + w <= until, exact in floating point (`until - now`
    can be a hair short of it: 11.7 - 7.8 is 3.8999999999999995, yet 7.8 + 3.9 is 11.7, a
    job ending at the shadow, which EASY starts)."""
    w = until - now
    if not math.isfinite(w) or now + w <= until < now + math.nextafter(w, INF):
        return w  # (most often the difference is it)
    step = 4 * math.ulp(max(abs(now), abs(until)))  # (the sum's rounding is within this)
    lo, hi = w - step, w + step  # now + lo <= until < now + hi: halved until they meet
    while True:
        mid = (lo + hi) / 2
        if mid == lo or mid == hi:
            return lo
        if now + mid <= until:
            lo = mid
        else:
            hi = mid


class _Now:
    """What can start now, worked out again only when the profile changes (the walk's
    caches; `current` brings them up to date).

    upper     units free now at all: no job can start on more
    horizon   seconds to the first take (a booking or a reservation starting), and
    lasting   the units free now that stay free through it: once every reservation is
              made, a job running past the horizon can use no more than these.  Most of a
              long queue fails this bound test (EASY's jobs longer than the shadow), so it
              is settled with two comparisons.  (Not with site reservations: a job's access
              may open units this count leaves out.)
    free      (shape, access) -> eligible units free now
    failed    (shape, access) -> (amount, walltime) pairs that did not fit: a job of that
              shape asking as much or more, for as long or longer, cannot fit either
    whole     shape -> may it use every unit up (then its free units now are `upper`, with
              no access and no reservation now; kept through changes)
    """

    __slots__ = ("walk", "now", "seen", "upper", "horizon", "lasting", "free", "failed", "whole")

    def __init__(self, walk: "Walk", now: float):
        self.walk, self.now, self.seen = walk, now, -1
        self.upper, self.horizon, self.lasting = 0, INF, 0
        self.free: dict[tuple, int] = {}
        self.failed: dict[tuple, list[tuple[int, float]]] = {}
        self.whole: dict[tuple, bool] = {}

    def current(self) -> bool:
        """Bring the caches up to date with the profile; True if it had changed."""
        prof = self.walk.profile
        if prof.changes == self.seen:
            return False
        self.seen = prof.changes
        self.free.clear()
        self.failed.clear()
        self.upper = prof.free_now().bit_count()
        take = prof.next_take(self.now)
        if take is not None and not prof.reservations and self.walk.backfill:
            self.horizon = reach(self.now, take)
            self.lasting = (prof.usable(0) & prof.usable(prof.segment(take))).bit_count()
        else:
            self.horizon = INF
        return True

    def hopeless(self, job: Job, need: int) -> bool:
        """The bound test: `job` cannot start now (exact once every reservation is made)."""
        bound = self.lasting if job.walltime > self.horizon else self.upper  # (lasting <= upper)
        return not bound or need > bound

    def fit(self, job: Job, req: Request, need: int, access: AccessKey) -> Allocation | None:
        """An allocation for `req` (what `job` places) free from now through its walltime, or None."""
        topo, wall = self.walk.topology, job.walltime
        shape = (topo.shape(req), access)
        count = self.free.get(shape)
        if count is None:
            whole = self.whole.get(shape[0])
            if whole is None:
                eligible = topo.eligible(req)
                whole = self.whole[shape[0]] = eligible | topo.available() == eligible
            prof = self.walk.profile
            if whole and not access and not prof.reserved_now():  # (a reservation given back since `current` adds units)
                count = self.free[shape] = self.upper if prof.changes == self.seen else prof.free_now().bit_count()
            else:
                count = self.free[shape] = (prof.usable(0, access) & topo.eligible(req)).bit_count()
        if count < need:
            return None
        amount, fails = req.cores or req.nodes, self.failed.get(shape, ())
        if fails and any(a <= amount and w <= wall for a, w in fails):
            return None
        prof = self.walk.profile
        alloc = fitting.fit(prof, topo, req, self.now, wall, access, need)
        if alloc is not None and prof.holding and prof.room(self.now, self.now + wall, access) < need:
            alloc = None  # it would take units a held reservation counts on
        if alloc is None:  # keep only the failures no other one implies
            self.failed[shape] = [(a, w) for a, w in fails if a < amount or w < wall] + [(amount, wall)]
        return alloc


class _Freed:
    """Where the room grew since every kept count was last found unable to move earlier
    (jobs ended early, reservations given back), for a compressing pass.  A count can then
    move only through a window that meets one of these spans at a time with room for it: a
    window that meets none had room before, when the count could not use it.  Room at a
    time in a span, read at any time after the span was added, is at least what it is now
    (it can have grown since only where a later span says).  So a count needing more than
    the most room read in every span stays where it is, without asking `counts.stays`."""

    __slots__ = ("profile", "spans", "read", "most")

    def __init__(self, profile: Profile, spans: Iterable[tuple[float, float]]):
        self.profile, self.spans = profile, list(spans)
        self.read, self.most = 0, -1  # spans read so far, the most room in them

    def may(self, need: int) -> bool:
        """Might a count of `need` move earlier?  (Spans added since the last read are read
        only if the answer hangs on them: the most room only grows with them.)"""
        if need > self.most and self.read < len(self.spans):
            most = max(counts.most(self.profile, a, b) for a, b in self.spans[self.read:])
            self.most, self.read = max(self.most, most), len(self.spans)
        return need <= self.most


class Walk:
    """The planning walk over the ordered runnable jobs.  For each job in priority order:

        start it if it fits now (in every window a reservation leaves free);
        else reserve its earliest start while the depth allows more reservations;
        else, without backfill, stop: nothing may pass it.

    A job the gate holds back is passed; if the gate says every job sharing its group (user,
    project) is held back too, an order that can (`Sieved.closable`) passes over them all,
    and their reasons are worked out when asked (`Plan.passed_reason`).
    """

    def __init__(self, topology: Topology, profile: Profile, depth: float,
                 access: Callable[[Job], AccessKey], gate: "Gate | None", backfill: bool = True,
                 counts: bool = False, placed: Callable[[Job], Request] | None = None):
        self.topology, self.profile, self.depth = topology, profile, depth
        # what the machine places for a job: its request, bound to its queue's nodes if any
        self.placed = placed
        self.access, self.gate, self.backfill = access, gate, backfill
        # reserve as counts (Profile.hold) for jobs any units serve, so that a reservation
        # pins no node that a later job could use first (conservative and depth-N)
        self.counts = counts
        self.held: dict[int, int] = {}  # job id -> units held as a count
        self.blocked = False  # strict order (no backfill) and a job could not start
        self.made = 0  # reservations made
        self.waiting_ahead = False  # a job walked so far waits for resources
        self.last = None  # the last job walked
        self.closer: Sieved | None = None  # the order, once it has passed over a subtree the gate held back
        # jobs read, and started, by every run so far; `late`: a job started after one that
        # did not, so with a gate the counts that job was judged by have grown since
        self.read = self.begun = 0
        self.late = False
        # `dropped`: a kept reservation was given up (past the depth, or its job held back)
        # after a job was passed over beside it, which may fit now: the next pass walks
        # afresh, as the definition tries every job without a reservation every pass
        self.passed = self.dropped = False
        self._freed: _Freed | None = None  # (see run)
        self._standing: tuple | None = None  # (now, kept, shown, plan) while runs of jobs may be taken at once
        self._stood = 0  # jobs `_stands` took last
        self._log: list[tuple[float, float]] | None = None
        self._shown_kept: dict[int, tuple[float, Allocation]] | None = None  # (Carried.shown, see run)

    def run(self, now: float, jobs: Iterable[Job], plan: Plan, carried: Carried | None = None,
            last: Job | None = None) -> None:
        """Walk `jobs` in order, carrying on from where an earlier `run` stopped, adding the
        starts, reservations and reasons it decides to `plan` (it changes no job).  `carried`:
        what the last pass left (Carried), its reservations in the profile; each stands while
        its start has not come, or, compressing, if it cannot move earlier (`_kept_count`);
        any other is given back just before its job's turn, so it can only move earlier."""
        self.last = last if last is not None else self.last  # (every job up to it has had its turn)
        if self.blocked:
            return
        prof, depth, gate = self.profile, self.depth, self.gate
        kept, compress, shown, settled = self._carry(carried)
        now_ = _Now(self, now)
        cursor, closer, whole = self._reading(jobs, now, kept, plan, settled)
        made, waiting_ahead, read = self.made, self.waiting_ahead, self.read
        for job in jobs:
            if job is None:  # (jobs `_stands` took: read, their reservations stand)
                made += self._stood
                read += self._stood
                waiting_ahead = True
                continue
            read += 1
            # (`current`'s own test first, sparing the call for the run of standing counts)
            if now_.seen != prof.changes and now_.current() and cursor is not None:
                sift = made >= depth and self.backfill and gate is None and not kept  # (no units: none passes)
                cursor.sieve = (now_.upper or -1, now_.horizon, now_.lasting or -1) if sift else None
            if cursor is not None and cursor.passed:
                waiting_ahead = self.passed = True
            if made >= depth and not now_.upper and not kept:  # nothing is free now, no reservation left to make
                break
            mine = kept.pop(job.id, None) if kept else None  # last pass's reservation, if kept
            if mine is not None and mine.start > now and (not compress or (
                    settled is not None and mine.count and made < depth
                    and (not (mine.count <= settled.most or settled.may(mine.count))  # (`may` reads on past `most`)
                         or counts.stays(prof, mine.count, mine.start, job.walltime)))):
                # nothing freed since, nothing where it could use, or it cannot move earlier: it
                # stands (a count is its job's need now: a change drops the spans, Planner.changed)
                plan.reserved[job.id] = shown[job.id]  # (its start has not come: the same)
                if mine.count:
                    self.held[job.id] = mine.count
                made += 1
                waiting_ahead = True
                continue
            if gate is None:
                request = job.request if self.placed is None else self.placed(job)
            else:
                request = self._through_gate(plan, job, mine, None if kept else closer)
                if request is None:
                    continue  # held back
            need = self.topology.need(request)
            if mine is not None:
                if made < depth and self._kept_count(plan, job, mine, request, need, now, settled):
                    made += 1
                    waiting_ahead = True
                    continue
                self._give_back(job, mine)  # given back for its turn: it can only move earlier
            given_back = mine is not None
            if made >= depth and now_.hopeless(job, need):
                self._passed_over(given_back)
                waiting_ahead = True
                continue
            acc = self.access(job)
            alloc = now_.fit(job, request, need, acc)
            if alloc is not None:  # it fits now: start it
                self._start(plan, job, alloc, now, given_back, waiting_ahead, read)
                continue
            waiting_ahead = True
            if made < depth:  # reserve its earliest start
                made += self._reserve(plan, job, request, need, acc, now, given_back)
            else:
                self._passed_over(given_back)
            if not self.backfill:  # nothing may pass it
                self.blocked = True
                plan.default_reason = f"waiting behind job {job.id} (no backfill)"
                break
        if whole:
            self._standing, cursor.stand = None, None
        if cursor is not None and cursor.passed:
            waiting_ahead = True
        self.made, self.waiting_ahead, self.read = made, waiting_ahead, read

    def _carry(self, carried: Carried | None) -> tuple[dict[int, Kept] | None, bool, dict | None, "_Freed | None"]:
        """What the walk takes of `carried`: its kept reservations (a copy: the caller's
        dict is left alone), whether it compresses, the (start, allocation) of each, and
        where room grew (`_Freed`: with compress, counts and no gate)."""
        kept = dict(carried.kept) if carried and carried.kept else None
        compress = carried is None or carried.compress
        shown = self._shown_kept = carried.shown if carried else None
        self._log = carried.log if carried else None
        self._freed = (_Freed(self.profile, carried.freed) if kept and compress and carried.freed is not None
                       and self.gate is None and self.counts else None)
        return kept, compress, shown, self._freed

    def _reading(self, jobs: Iterable[Job], now: float, kept: dict[int, Kept] | None, plan: Plan,
                 settled: "_Freed | None") -> tuple[Sieved | None, Sieved | None, bool]:
        """How the walk reads `jobs`: a sieved order (a backlog's cursor, the share tree's)
        passes over whole blocks of jobs the bound test would pass over one by one, told
        the bounds while nothing else decides; one that can (the share tree's) passes over
        every job of a subtree the gate holds back whole (`closer`); conservative,
        compressing and reading a backlog in order, a run of jobs whose counts stay where
        they are held is taken at once (`whole`, see _stands), not job by job."""
        cursor = jobs if isinstance(jobs, Sieved) else None
        closer = cursor if cursor is not None and cursor.closable and self.gate is not None else None
        whole = (settled is not None and self.depth == ALL and cursor is not None and cursor.in_order
                 and len(kept) >= DEEP)
        if whole:
            self._standing, cursor.stand = (now, kept, self._shown_kept, plan), self._stands
        return cursor, closer, whole

    def _stand(self, plan: Plan, job: Job, count: int) -> None:
        """`job`'s kept reservation stands: its start has not come, so the same (start,
        allocation) as last pass's; a count stays held."""
        plan.reserved[job.id] = self._shown_kept[job.id]
        if count:
            self.held[job.id] = count

    def _through_gate(self, plan: Plan, job: Job, mine: Kept | None, closer: Sieved | None) -> Request | None:
        """What `job` places, within the nodes the gate's quotas let it use, or None: the
        gate holds it back (its reason noted, its kept reservation given back)."""
        gate = self.gate
        why = gate(job)
        if why:
            self._held_back(plan, job, mine, why, closer)
            return None
        request = job.request if self.placed is None else self.placed(job)
        if gate.narrows:
            request = gate.narrow(job, request)
            if isinstance(request, str):
                self._held_back(plan, job, mine, request, closer)
                return None
        return request

    def _kept_count(self, plan: Plan, job: Job, mine: Kept, request: Request, need: int, now: float,
                    settled: "_Freed | None") -> bool:
        """A kept count of `job`'s need, on units any serve and no site reservation: it
        stands if it cannot move earlier (as the walk would find it again: no start now,
        the same earliest start and nodes named), or moves earlier where it can but cannot
        start now, changing the profile only where its two windows differ.  False: neither
        (it is given back for its turn)."""
        t0, count, prof = mine.start, mine.count, self.profile
        acc = self.access(job)
        if not (count == need and t0 > now and not acc and not prof.reservations
                and self.topology.interchangeable(request)):
            return False
        if settled is None and counts.stays(prof, need, t0, job.walltime):  # (else asked in `run`)
            self._stand(plan, job, count)
            return True
        t = counts.earliest_count(prof, job.walltime, acc, need, now, own=t0)
        if t is None or t <= now:
            return False
        self._moved(job, count, t0, t)
        plan.reserved[job.id] = t, self._shown(request, t, acc)
        plan.moved.add(job.id)
        return True

    def _start(self, plan: Plan, job: Job, alloc: Allocation, now: float, given_back: bool,
               backfill: bool, read: int) -> None:
        """`job` starts now on `alloc` (`backfill`: a job ahead of it waits)."""
        self.profile.occupy(alloc.units, now, now + job.walltime)
        if given_back:
            self._retook(now + job.walltime)
        plan.started.append(Start(job.id, alloc, backfill))
        self.begun += 1
        if self.begun < read:
            self.late = True
        if self.gate is not None:
            self.gate.started(job, alloc)

    def _reserve(self, plan: Plan, job: Job, request: Request, need: int, acc: AccessKey, now: float,
                 given_back: bool) -> int:
        """Reserve `job`'s earliest start (a count where any units serve it and the walk
        holds counts); 1 if one was found, else 0 (its reason noted)."""
        if self.counts and self.topology.interchangeable(request):
            found = self._hold(job, request, need, acc, now)
        else:
            found = fitting.earliest(self.profile, self.topology, request, job.walltime, acc, need, now)
            if found is not None:
                self.profile.occupy(found[1].units, found[0], found[0] + job.walltime)
        if found is None:
            plan.reasons[job.id] = NO_START
            self._passed_over(given_back)
            return 0
        plan.reserved[job.id] = found
        plan.moved.add(job.id)
        if given_back:
            self._retook(found[0] + job.walltime)
        return 1

    def _stands(self, block, lo: int, hi: int) -> int:
        """How many jobs of block.jobs[lo:hi] (a backlog's), from the first, keep a count
        that stays where it is held?  Those are taken as the walk would take them (reserved
        as they stand).  What the walk needs of the counts is kept with the block (`stood`,
        by `lo`) while the jobs and their counts are the same objects: a count moved or held
        anew is a new tuple."""
        now, kept, shown, plan = self._standing
        stood = block.stood
        if stood is None:
            stood = block.stood = {}
        ids, mine, group, jobs = stood.get(lo) or (None, None, None, None)
        if jobs != block.jobs[lo:hi] or not all(map(is_, map(kept.get, ids), mine)):
            jobs = block.jobs[lo:hi]
            ids = [job.id for job in jobs]
            mine = [kept.get(i) for i in ids]
            group = HeldGroup([(m.start, m.count, job.walltime) for m, job in zip(mine, jobs)]) if all(
                m is not None and m.count for m in mine) else None
            stood[lo] = ids, mine, group, jobs
        if group is None or group.first <= now:
            return 0
        n = counts.staying(self.profile, group, self._freed.may)
        if n:
            taken = ids[:n]
            plan.reserved.update(zip(taken, map(shown.__getitem__, taken)))
            self.held.update(zip(taken, (m.count for m in mine)))
            self._stood = n
        return n

    def _held_back(self, plan: Plan, job: Job, mine, why: str, closer: Sieved | None) -> None:
        """The gate holds `job` back: its kept reservation goes, its reason is noted, and
        `closer` (None while kept reservations must still be given back one by one)
        passes over the jobs the gate says it holds back with it."""
        self._give_back(job, mine)
        self.dropped |= mine is not None and self.passed
        plan.reasons[job.id] = why
        if closer is not None:
            attrs = self.gate.closes(job)
            if attrs and closer.close(job, attrs):
                self.closer = closer

    def _passed_over(self, given_back: bool) -> None:
        """A job neither starts nor is reserved; `given_back`: its kept reservation goes."""
        self.dropped |= given_back and self.passed
        self.passed = True

    def _hold(self, job: Job, request: Request, need: int, access: AccessKey,
              now: float) -> tuple[float, Allocation] | None:
        """Reserve `job`'s earliest start as a count; the allocation shown with it is the
        nodes it could take at that time, named for people, not booked."""
        prof = self.profile
        t = counts.earliest_count(prof, job.walltime, access, need, now)
        if t is None:
            return None
        prof.hold(need, t, t + job.walltime)
        self.held[job.id] = need
        return t, self._shown(request, t, access)

    def _shown(self, request: Request, t: float, access: AccessKey) -> Allocation:
        """A held count's allocation: the nodes it could take at `t`, named for people
        (listed only if someone looks), not booked."""
        free, topology = self.profile.usable(self.profile.segment(t), access), self.topology

        def names() -> tuple[str, ...]:
            shown = topology.choose(request, Tiers(free))
            return shown.nodes if shown else ()
        return Allocation(0, names, ())

    def _moved(self, job: Job, count: int, t0: float, t: float) -> None:
        """`job`'s kept count moves from t0 to t, earlier: what `_give_back`, `_hold` at t and
        `_retook` leave, the profile changed only where the two windows differ."""
        wall = job.walltime
        self.profile.shift(count, (t0, t0 + wall), (t, t + wall))
        self.held[job.id] = count
        self._grew((t0, t0 + wall))
        self._retook(t + wall)

    def _give_back(self, job: Job, mine: Kept | None) -> None:
        """Take a kept reservation out of the profile (held as a count or occupying units)."""
        if mine is not None:
            t0 = mine.start
            if mine.count:
                self.held.pop(job.id, None)
                self.profile.hold(-mine.count, t0, t0 + job.walltime)
            else:
                self.profile.release(mine.units, t0, t0 + job.walltime)
            self._grew((t0, t0 + job.walltime))

    def _grew(self, span: tuple[float, float]) -> None:
        """Room grew over `span`: for this walk's `_Freed` and the next compressing pass's
        (see _retook)."""
        if self._freed is not None:
            self._freed.spans.append(span)
        if self._log is not None:
            self._log.append(span)

    def _retook(self, end: float) -> None:
        """The job whose reservation was given back last took it again, earlier, until
        `end`: room grew only after that (the same units, for the same walltime)."""
        for spans in (self._freed.spans if self._freed is not None else None, self._log):
            if spans:
                t0, t1 = spans[-1]
                if end < t1:
                    spans[-1] = (max(t0, end), t1)
                else:
                    del spans[-1]
