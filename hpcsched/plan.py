"""Planning: start what fits in priority order, reserve for the top jobs, backfill the rest.

The planner sees the machine as a *profile*: the free units (see topology.py) over time, a
step function kept as the units freed and taken at each boundary.  Running jobs occupy
their units until their expected end; reservations block their units for jobs that may not
use them; each job the walk reserves for occupies its units from its planned start.  A job
may start now only if some allocation is free over its whole walltime window in this
profile, so it can never delay a reservation already made.  The reservation depth says how many waiting jobs get
one: 0 none (first fit), 1 EASY, `ALL` conservative (Maui's RESERVATIONDEPTH).

Which free units a job gets is chosen *tightest in time*: first the units whose free period
ends soonest after the job would end, then those that became free most recently before it
would start.  So a backfilled job prefers nodes a reservation needs only later, and a
reservation prefers nodes that are busy now, which leaves the nodes free now to backfill.
On a machine of identical nodes this makes the planner start exactly the jobs count-based
EASY (Lifka) starts.
"""
from __future__ import annotations

import math
from bisect import bisect_left, bisect_right, insort
from dataclasses import dataclass, field
from typing import Callable, Iterable, NamedTuple

from .backlog import Cursor
from .jobs import Job, Request
from .reservations import Access
from .timefmt import hms
from .topology import Allocation, Topology

ALL = math.inf  # reservation depth for conservative backfill
INF = math.inf
HORIZON = 366 * 86400.0  # the planner looks no further ahead than this

#: A job's reservation access: sorted ((reservation name, Access), ...) of every
#: reservation it may use; () for most jobs.
AccessKey = tuple


class Profile:
    """Free units over time, from `now` on: segment i is [times[i], times[i+1]).

    Stored as changes: at times[i], the units `rel[i]` become free and the units `take[i]`
    stop being free (no unit is in both).  So booking a job, or giving back one that ended
    early, costs a few mask operations however many segments its window spans; a segment's
    free mask is worked out front to back when first read (`free[i]`, known for i < `_known`),
    and a pass reads only as far as it plans.

    Masks lose units as `(m | u) ^ u` or `m ^ (m & u)`, never `m & ~u`: the negative int
    `~u` makes that three times slower on a machine of thousands of units.
    """

    def __init__(self, now: float, free_units: int, reservations=(), slop: float = 0.0):
        self.now = now
        self.times: list[float] = [now]
        self.free: list[int | None] = [free_units]
        self.rel: list[int] = [0]
        self.take: list[int] = [0]
        self._known = 1
        # per segment: ((reservation name, units, real), ...); real is False in the slop
        # before an occurrence, which blocks but does not admit bound jobs
        self.resv: list[tuple] = [()]
        self.reservations = [(r, u) for r, u in reservations]
        self.slop = slop
        self.horizon = now
        self._laid: dict[str, float] = {}
        self.limit = now + HORIZON
        self.changes = 0  # bumped whenever free units change
        # times after `now` at which units stop being free (bookings, reservations): the
        # only places a unit's free period can end, which is what `tiers` looks for
        self.takes: list[float] = []

    @classmethod
    def from_running(cls, now: float, available: int, busy: list[tuple[float, int]]) -> "Profile":
        """Build from (expected end, units) pairs of running jobs."""
        p = cls(now, available)
        ends = sorted({e for e, _ in busy if e > now})
        if ends:
            at = {e: i for i, e in enumerate(ends, 1)}
            n = len(ends) + 1
            p.times = [now] + ends
            p.rel, p.take = [0] * n, [0] * n
            free = available
            for e, units in busy:
                if e > now:
                    p.rel[at[e]] |= units & available
                    free = (free | units) ^ units
            p.free = [free] + [None] * (n - 1)
            p.resv = [()] * n
        return p

    def derive(self, now: float, reservations=(), slop: float = 0.0) -> "Profile":
        """A copy from `now` on, with reservations laid out, for one pass to plan in
        (this profile, of running jobs only, is kept up to date between passes)."""
        self.drop_before(now)
        p = Profile(now, 0, reservations, slop)
        p.times, p.free, p.rel, p.take = self.times[:], self.free[:], self.rel[:], self.take[:]
        p.resv, p._known = self.resv[:], self._known
        p.ensure(now + 7 * 86400.0)
        return p

    def drop_before(self, now: float) -> None:
        """Forget the segments that ended by `now`; the profile starts at `now`."""
        k = bisect_right(self.times, now) - 1
        if k > 0:
            self.mask(k)
            del self.times[:k], self.free[:k], self.rel[:k], self.take[:k], self.resv[:k]
            self._known -= k
            self.rel[0] = self.take[0] = 0
        self.times[0] = self.now = now

    # --- structure -------------------------------------------------------------------
    def mask(self, k: int) -> int:
        """The units free in segment k."""
        if k >= self._known:
            free, rel, take = self.free, self.rel, self.take
            m = free[self._known - 1]
            for i in range(self._known, k + 1):
                m = ((m | rel[i] | take[i]) ^ take[i]) if take[i] else m | rel[i]
                free[i] = m
            self._known = k + 1
        return self.free[k]

    def _split(self, t: float) -> int:
        """Index of the segment starting exactly at `t`, creating it if needed."""
        i = bisect_right(self.times, t) - 1
        if self.times[i] == t:
            return i
        self.times.insert(i + 1, t)
        self.rel.insert(i + 1, 0)
        self.take.insert(i + 1, 0)
        self.resv.insert(i + 1, self.resv[i])
        if i < self._known - 1:  # inside the known prefix, which stays as short as it is
            self.free.insert(i + 1, self.free[i])
            self._known += 1
        else:
            self.free.insert(i + 1, None)
        return i + 1

    def _span(self, t0: float, t1: float) -> range:
        i0 = self._split(max(t0, self.now))
        i1 = self._split(t1) if t1 < INF else len(self.times)
        return range(i0, i1)

    def _edge(self, i: int, units: int, busy: bool) -> None:
        """At boundary i, `units` stop being free (`busy`) or become free: a change the
        other way already recorded there cancels out instead, so no unit is in both."""
        undo, add = (self.rel, self.take) if busy else (self.take, self.rel)
        back = undo[i] & units
        undo[i] ^= back
        add[i] |= units ^ back

    def _change(self, units: int, t0: float, t1: float, busy: bool) -> range | None:
        """Make `units` busy (or free) over [t0, t1): the segments spanned, None if none."""
        if t0 <= self.now:
            if t1 <= self.now:
                return None
            span = range(0, self._split(t1) if t1 < INF else len(self.times))
        elif t1 <= t0:
            return None
        else:
            span = self._span(t0, t1)
        if span.start:
            self._edge(span.start, units, busy)
        if span.stop < len(self.times):
            self._edge(span.stop, units, not busy)
        free = self.free
        for k in range(span.start, min(span.stop, self._known)):
            free[k] = (free[k] | units) ^ units if busy else free[k] | units
        self.changes += 1
        return span

    def occupy(self, units: int, t0: float, t1: float) -> None:
        """Take `units` out of the free set over [t0, t1)."""
        if self._change(units, t0, t1, True) is not None and t0 > self.now:
            insort(self.takes, t0)

    def release(self, units: int, t0: float, t1: float) -> None:
        """Give `units` back to the free set over [t0, t1) (undo an `occupy`)."""
        span = self._change(units, t0, t1, False)
        if span is None:
            return
        # a boundary that no longer changes anything goes, so profiles do not silt up
        for k in (span.stop, span.start):
            if (0 < k < len(self.times) and not self.rel[k] and not self.take[k]
                    and self.resv[k] == self.resv[k - 1]):
                del self.times[k], self.free[k], self.rel[k], self.take[k], self.resv[k]
                if k < self._known:
                    self._known -= 1

    def windows(self, access: AccessKey = ()) -> list[tuple[float, int]]:
        """How long the units free now stay free: [(until, units)], soonest first, the last
        entry's `until` being infinity (free for good, as far as the plan knows)."""
        out, remaining = [], self.usable(0, access)
        for t in self.takes:
            gone = remaining ^ (remaining & self.usable(self.segment(t), access))
            if gone:
                out.append((t, gone))
                remaining ^= gone
        if remaining:
            out.append((INF, remaining))
        return out

    def advance(self, now: float) -> bool:
        """Move the profile's start to `now` if nothing changes in between (no segment
        boundary in (self.now, now]); False if it cannot."""
        if len(self.times) > 1 and self.times[1] <= now:
            return False
        self.times[0] = self.now = now
        return True

    def holds(self, units: int, t0: float, t1: float, access: AccessKey) -> bool:
        """Are all of `units` usable over [t0, t1)?"""
        self.ensure(t1)
        return self.window(t0, t1, access, units, units.bit_count()) == units

    def ensure(self, until: float) -> None:
        """Lay out reservation occurrences up to `until` (cyclic ones are unbounded)."""
        until = min(until, self.limit)
        if until <= self.horizon:
            return
        for res, units in self.reservations:
            last = self._laid.get(res.name, -INF)
            for s, e in res.occurrences(self.now, until + self.slop):
                if s <= last:
                    continue  # laid out by an earlier call
                if self.slop:
                    self._mark(res.name, units, s - self.slop, s, False)
                self._mark(res.name, units, s, e, True)
                self._laid[res.name] = s
        self.horizon = until

    def _mark(self, name: str, units: int, t0: float, t1: float, real: bool) -> None:
        if t1 <= self.now:
            return
        entry = ((name, units, real),)
        for k in self._span(t0, t1):
            self.resv[k] = self.resv[k] + entry
        # both edges can end a free period: the start for jobs it blocks, the end for
        # the jobs bound to it
        for t in (t0, t1):
            if self.now < t < INF:
                insort(self.takes, t)

    # --- queries ---------------------------------------------------------------------
    def usable(self, k: int, access: AccessKey = ()) -> int:
        """Units a job with `access` may take in segment k."""
        if not access:
            m = self.free[k] if k < self._known else self.mask(k)
            for _, units, _ in self.resv[k]:
                m = (m | units) ^ units
            return m
        rights = dict(access)
        bound_to = any(a is Access.BOUND for a in rights.values())
        m, inside = self.mask(k), 0
        for name, units, real in self.resv[k]:
            a = rights.get(name)
            if a is Access.ALLOWED:
                continue
            if a is Access.BOUND and real:
                inside |= units
                continue
            m = (m | units) ^ units
        return m & inside if bound_to else m

    def segment(self, t: float) -> int:
        return bisect_right(self.times, t) - 1

    def window(self, t0: float, t1: float, access: AccessKey, mask: int, need: int) -> int:
        """Units of `mask` usable over all of [t0, t1); 0 as soon as fewer than `need` remain."""
        k = self.segment(t0)
        m = mask & self.usable(k, access)
        if k == 0:
            # From now on a unit stops being free only at a take (a booking or a
            # reservation starting); running jobs only ever give units back.  So a window
            # starting now need only look at the takes inside it.
            takes = self.takes
            i = bisect_right(takes, t0)
            while m and i < len(takes) and takes[i] < t1:
                m &= self.usable(self.segment(takes[i]), access)
                i += 1
        else:
            # Units of m are free in segment k - 1, so in segment k they are what `take[k]`
            # leaves of them, unless the reservations change there: no need to work out
            # segment k's whole free mask.
            times, take, resv, n = self.times, self.take, self.resv, len(self.times)
            k += 1
            while m and k < n and times[k] < t1:
                if resv[k] != resv[k - 1]:
                    m &= self.usable(k, access)
                elif take[k]:
                    m = (m | take[k]) ^ take[k]
                k += 1
        return m if m.bit_count() >= need else 0

    def tiers(self, m: int, t0: float, t1: float, access: AccessKey) -> list[int]:
        """Split free units `m` of window [t0, t1) into preference tiers, tightest first."""
        after, rem = [], m
        for t in self.takes[bisect_left(self.takes, t1):]:
            gone = rem ^ (rem & self.usable(self.segment(t), access))
            if gone:
                after.append(gone)
                rem ^= gone
                if not rem:
                    break
        if rem:
            after.append(rem)
        before, rem = [], m
        k = self.segment(t0) - 1
        while rem and k >= 0 and len(before) < 64:
            gone = rem ^ (rem & self.usable(k, access))
            if gone:
                before.append(gone)
                rem ^= gone
            k -= 1
        if rem:
            before.append(rem)
        if len(before) == 1:
            return after
        if len(after) == 1:
            return before
        return [both for a in after for b in before if (both := a & b)]

    def fit(self, topology: Topology, request: Request, t0: float, duration: float,
            access: AccessKey, need: int) -> Allocation | None:
        """An allocation free over [t0, t0 + duration), or None."""
        self.ensure(t0 + duration)
        m = self.window(t0, t0 + duration, access, topology.eligible(request), need)
        if not m:
            return None
        return topology.choose(request, self.tiers(m, t0, t0 + duration, access))

    def earliest(self, topology: Topology, request: Request, duration: float, access: AccessKey,
                 need: int, not_before: float) -> tuple[float, Allocation] | None:
        """The earliest start at or after `not_before` with an allocation free for `duration`."""
        eligible = topology.eligible(request)
        times = self.times  # (segments may be added as it goes)
        c = self.segment(max(not_before, self.now))
        while c < len(times):
            t = times[c] if times[c] > not_before else not_before
            end = t + duration
            if end > self.limit:
                return None
            if end > self.horizon:
                self.ensure(end)
            m = self.usable(c, access)
            if (eligible & m).bit_count() >= need:
                m = self.window(t, end, access, eligible, need)
                if m:
                    alloc = topology.choose(request, self.tiers(m, t, end, access))
                    if alloc is not None:
                        return t, alloc
            c += 1
        return None


class Start(NamedTuple):
    job_id: int
    allocation: Allocation
    backfill: bool  # started while a job ahead of it waited for resources


RESOURCES = "waiting for resources"


@dataclass
class Plan:
    """One pass's decisions.  Reasons and estimated starts are there for every waiting job;
    estimates for jobs without a reservation are worked out on first request."""

    now: float
    started: list[Start] = field(default_factory=list)
    reserved: dict[int, tuple[float, Allocation]] = field(default_factory=dict)
    reasons: dict[int, str] = field(default_factory=dict)
    default_reason: str = RESOURCES
    profile: Profile | None = None  # the pass's final plan (valid until the next pass)
    _estimate: Callable[[int], float | None] | None = None
    _estimates: dict[int, float | None] = field(default_factory=dict)

    def reason(self, job_id: int) -> str:
        if any(s.job_id == job_id for s in self.started):
            return "started"
        if job_id in self.reserved:
            t, alloc = self.reserved[job_id]
            return f"reserved: starts at {t:g} (in {hms(t - self.now)}) on {len(alloc.nodes)} nodes"
        return self.reasons.get(job_id, self.default_reason)

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


class Walk:
    """The planning walk over the ordered runnable jobs (allocate, reserve, backfill)."""

    def __init__(self, topology: Topology, profile: Profile, depth: float,
                 access: Callable[[Job], AccessKey], gate: Callable[[Job], str | None] | None,
                 backfill: bool = True):
        self.topology, self.profile, self.depth = topology, profile, depth
        self.access, self.gate, self.backfill = access, gate, backfill
        self.blocked = False  # strict order (no backfill) and a job could not start
        self.made = 0  # reservations made
        self.waiting_ahead = False  # a job walked so far waits for resources
        self.last = None  # the last job walked

    def run(self, now: float, jobs: Iterable[Job], plan: Plan, on_start: Callable[[Job, Start], None],
            kept: dict[int, tuple[float, int]] | None = None, last: Job | None = None) -> None:
        """Walk `jobs` in order, carrying on from where an earlier `run` stopped.

        `kept` holds last pass's reservations still valid, already occupied in the
        profile: each job's own is given back just before its turn, so that it can only
        move earlier and no job ahead can take it (conservative backfill's guarantee that
        no reservation is ever delayed)."""
        topo, prof, depth, gate, access = self.topology, self.profile, self.depth, self.gate, self.access
        need_of = topo.need
        kept = dict(kept) if kept else None  # (the caller's dict is left alone)
        made, waiting_ahead = self.made, self.waiting_ahead
        if last is not None:
            self.last = last  # every job up to it has had its turn, walked or cut short
        if self.blocked:
            return
        failed: dict[tuple, list[tuple[int, float]]] = {}  # shape -> (amount, walltime) that did not fit now
        free_now: dict[tuple, int] = {}  # (shape, access) -> eligible units free now
        seen = -1  # prof.changes when the caches here were filled
        upper = 0  # units free now at all: no job can start on more
        # Once every reservation is made, a job running past the first take (a booking
        # or a reservation starting) can only have units free now that stay free through
        # it: `lasting` of them.  Most of a long queue fails that test (EASY's jobs longer
        # than the shadow), so it is settled here with two comparisons.  (Not with site
        # reservations: a job's access may open units this count leaves out.)
        horizon, lasting = INF, 0
        # A backlog's cursor passes over whole blocks of jobs that bound test would skip.
        cursor = jobs if isinstance(jobs, Cursor) else None
        for job in jobs:
            if prof.changes != seen:
                failed.clear()
                free_now.clear()
                seen = prof.changes
                upper = prof.free[0].bit_count()
                i = bisect_right(prof.takes, now)
                if i < len(prof.takes) and not prof.reservations and self.backfill:
                    horizon = prof.takes[i] - now
                    lasting = (prof.usable(0) & prof.usable(prof.segment(prof.takes[i]))).bit_count()
                else:
                    horizon = INF
                if cursor is not None:
                    sift = made >= depth and self.backfill and gate is None and not kept
                    # (no units: no job passes, as `not bound` below)
                    cursor.sieve = (upper or -1, horizon, lasting or -1) if sift else None
            if cursor is not None and cursor.passed:
                waiting_ahead = True
            if made >= depth and not upper and not kept:
                break  # nothing is free now and no reservation is left to make
            if kept and job.id in kept:
                t0, units = kept.pop(job.id)
                prof.release(units, t0, t0 + job.walltime)
            if gate is not None:
                why = gate(job)
                if why:
                    plan.reasons[job.id] = why
                    continue
            req = job.request
            need = need_of(req)
            if made >= depth:  # the common cases in a full machine, settled by comparisons
                bound = lasting if job.walltime > horizon else upper  # (lasting <= upper)
                if not bound or need > bound:
                    waiting_ahead = True
                    continue
            wall, acc = job.walltime, access(job)
            shape = (topo.shape(req), acc)
            amount = req.cores or req.nodes
            alloc = None
            count = free_now.get(shape)
            if count is None:
                count = free_now[shape] = (prof.usable(0, acc) & topo.eligible(req)).bit_count()
            fails = failed.get(shape, ())
            if count >= need and not (fails and any(a <= amount and w <= wall for a, w in fails)):
                alloc = prof.fit(topo, req, now, wall, acc, need)
                if alloc is None:  # keep only the failures no other one implies
                    failed[shape] = [(a, w) for a, w in fails if a < amount or w < wall] + [(amount, wall)]
            if alloc is not None:
                prof.occupy(alloc.units, now, now + wall)
                start = Start(job.id, alloc, waiting_ahead)
                plan.started.append(start)
                on_start(job, start)
                continue
            waiting_ahead = True
            if made < depth:
                found = prof.earliest(topo, req, wall, acc, need, now)
                if found is None:
                    plan.reasons[job.id] = "no start found within the planning horizon with the nodes now up"
                else:
                    t, alloc = found
                    prof.occupy(alloc.units, t, t + wall)
                    plan.reserved[job.id] = found
                    made += 1
            if not self.backfill:
                self.blocked = True
                plan.default_reason = f"waiting behind job {job.id} (no backfill)"
                break
        if cursor is not None and cursor.passed:
            waiting_ahead = True
        self.made, self.waiting_ahead = made, waiting_ahead

