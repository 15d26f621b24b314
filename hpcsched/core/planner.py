"""The pass: prioritise, plan, apply; and what one pass leaves the next.

A pass (Scheduler.iterate) asks the policy for the runnable jobs' order, walks them in a
profile of the machine (plan.py's Walk: starts, reservations, backfill) and applies the
starts.  The planner keeps what the next pass builds on, so a pass costs what changed:

- the last walk and plan, carried on with the new jobs while nothing they counted on
  changed (`dirty` False: only arrivals since);
- the last plan's reservations (`booked`; `booked_counts`: those held as counts), kept
  where they stand unless room grew before them (`freed`: where, since the last
  compressing pass; None: unknown, every count is asked again);
- the counts the last plan held, kept in the running set's base profile too
  (`base_holds`, valid while `holds_in` is that profile), so a pass starts with them in place.

Invariant: `dirty` is False only if no job ended, no limit, node, walltime or reservation
changed since the last pass (`changed` sets it), so its decisions would stand.
"""
from __future__ import annotations

import math
from itertools import chain, islice
from typing import Iterable

from .admission import Gate
from .backlog import Sieved
from .errors import InvalidRequest
from .jobs import ACTIVE, COMPLETED, DEP_FAIL, DEP_HOLD, HELD, PENDING, QUEUED, WAITING, Allocation, Hold, Job, number
from .plan import Carried, Kept, Plan, Walk
from .policy import Context
from . import fitting
from .profile import Profile

QUOTA_HOLD = "exceeds limit"  # how a quota's reason begins (quotas.py)
QUOTA_COMMENT = "Not Running: " + QUOTA_HOLD


class Planner:
    """The passes of `sched` (a Scheduler, whose jobs and indexes it reads): each plans on
    what the last one left."""

    def __init__(self, sched):
        self.sched = sched
        # last pass's reservations: job id -> (start, allocation), and the units of those
        # held as a count (the plan's own dicts: `reserved`, `held`)
        self.booked: dict[int, tuple[float, Allocation]] = {}
        self.booked_counts: dict[int, int] = {}
        self.moved: set[int] = set()  # jobs reserved anew since `_hold_in_base` last ran
        # the last pass, carried on while only new jobs arrive (see plan_pass)
        self.walk: Walk | None = None
        self.plan: Plan | None = None
        self.fresh: list[Job] = []  # jobs submitted since the last pass
        self.dirty = True
        # where room grew since the last compressing pass began (see plan._Freed); None
        # when something changed that this cannot name: then every kept count is asked
        self.freed: list[tuple[float, float]] | None = None
        # the counts last pass's plan holds, kept in the running set's base profile too so
        # that the next pass starts with them in place (see _keep): job id -> (start, end,
        # units); only while the base is the profile `holds_in` names
        self.base_holds: dict[int, tuple[float, float, int]] = {}
        self.holds_in: Profile | None = None
        self.counted = sched.settings.depth > 1  # (the last pass's `counting`)
        self.commented: set[int] = set()  # jobs whose comment says a quota holds them back

    def changed(self) -> None:
        """Something the last plan counted on changed (a limit, a node, a walltime, a
        reservation): the next pass compresses and asks every kept count whether it moves."""
        self.dirty, self.freed = True, None

    def run(self, now: float) -> Plan:
        """One pass at `now`: what time alone changed (`tick`), the plan (`plan_pass`:
        prioritise, then walk), its starts applied and what the next pass keeps of it
        (`apply_pass`)."""
        last = self.sched.last_pass
        if last is not None and now < last:
            raise InvalidRequest(f"time went backwards: pass at {now} after one at {last}")
        self.tick(now)
        plan = self.plan_pass(now, self.counting(now))
        self.apply_pass(plan, now)
        return plan

    def tick(self, now: float) -> None:
        """What the time alone changed since the last pass: deferred jobs that became
        eligible, reservations that ended, calendar events, allocation standings, usage."""
        s = self.sched
        if s._waiting:
            for jid in [j for j in s._waiting if s.jobs[j].start_after <= now]:
                s._settle(s.jobs[jid], now)
        if s.reservations:
            for name in [n for n, r in s.reservations.items() if r.expired(now)]:
                s.bookings.remove(name, now)
        if s.calendar and s.last_pass is not None:
            s.bookings.calendar_events(now)
        if s.billing is not None:
            s._restand(now)
        if s.policy.reads_usage:  # running jobs charged as they run, not only at their end
            s.usage.accrue(now)
        if s.runs.paused:  # a suspended job's hold on its units grew: every kept count is asked again
            self.changed()

    def wakeup(self, now: float) -> float:
        """The first time after `now` at which a pass may decide differently although no job
        arrives or ends: a reservation begins or ends, a deferred job (`start_after`) becomes
        eligible.  inf when nothing waits.  A driver with a clock passes then (the simulator
        does; the server passes every interval anyway)."""
        s = self.sched
        if not s._waiting and not s.reservations:
            return math.inf  # (every pass of a plain replay asks)
        soonest = min((s.jobs[j].start_after for j in s._waiting), default=math.inf)
        for r in s.reservations.values() if s.ready.jobs else ():
            for start, end in r.occurrences(now, soonest):
                soonest = min(soonest, start if start > now else end)
                break
        return soonest

    def plan_pass(self, now: float, counting: bool) -> Plan:
        """This pass's decisions: the last walk carried on with the new jobs where nothing
        it counted on changed, else the runnable jobs prioritised and walked afresh."""
        s = self.sched
        depth = s.settings.depth
        if s.bookings.front:
            s.bookings.front = {j for j in s.bookings.front if j in s.jobs and s.jobs[j].state in PENDING}
            depth = max(depth, sum(1 for j in s.bookings.front if j in s.ready.jobs))
        compress = self.dirty  # (arrivals leave it clean: see submit)
        fresh, self.fresh = self.fresh, []
        walk = self.walk
        # Nothing the last plan counted on changed since, only new jobs came: the walk over
        # the earlier jobs would come out the same in an order that changes none of its
        # decisions, so it is carried on with the new jobs (see _carry_on).  Not while a job
        # runs past its walltime (a pass expects it to end a grace period from its own now),
        # nor, with limits, once a job started after one the walk passed (see Walk.late),
        # nor after a walk gave up a reservation a job it passed over was judged beside.
        clean = (walk is not None and not self.dirty and not s.runs.overrun and not walk.dropped
                 and not (walk.gate is not None and walk.late) and walk.profile.advance(now))
        if not s.ready.jobs:
            # nothing to start or reserve: the plan is empty (estimates are still there)
            self.walk = None
            return Plan(now)
        if clean and s.policy.static and s.ready.sort_after(fresh, walk.last):
            # a static order: every new job sorts after every job the last pass walked
            fresh = s.ready.settled(fresh)  # (a static order needs no context)
            return self._carry_on(walk, now, fresh, last=fresh[-1] if fresh else None)
        gate = Gate(s, now) if self._gated() else None
        order, last = self.prioritise(now, gate.ctx if gate else None)
        if clean and not s.policy.static:
            fresh = fresh if len(fresh) <= 1 else s.ready.settled(fresh)
            if fresh is not None:
                order, leads = self._still_lead(order, walk)
                if leads:
                    # an order that moves: the jobs the last walk reserved for still lead it, in
                    # the same order, and the new jobs (if any) come after them, in the order
                    # they take among themselves in every pass (Policy.settled)
                    plan = self._carry_on(walk, now, fresh)
                    plan.passed_reason = self.plan.passed_reason  # (its gate is the walk's own)
                    return plan
        return self._walk_afresh(now, order, last, gate, depth, counting, compress)

    def _walk_afresh(self, now: float, order: Iterable[Job], last: Job | None, gate: Gate | None,
                     depth: float, counting: bool, compress: bool) -> Plan:
        """A new walk over `order`, on this pass's profile with last pass's reservations kept
        where they stand (`compress`: each asked whether it moves earlier); with a gate, the
        reason of a job it passed over unread is worked out when asked."""
        s = self.sched
        # (a kept reservation stands as the same (start, allocation): see Walk.run)
        plan = Plan(now, since=self.booked if s.settings.depth > 1 else None)
        profile = self.profile(now, holds=s.settings.depth > 1)
        walk = self.walk = Walk(s.topology, profile, depth, s.bookings.access, gate, s.settings.backfill,
                                 counts=counting, placed=s.placed if s.admission.bound else None)
        kept, in_place = self._keep(walk.profile, now)
        if not in_place:
            self.freed = None  # (counts not kept were given back: room grew, unlogged)
        freed = self.freed
        if compress:  # every kept count is settled by this walk: spans from here on are the next one's
            self.freed = []
        walk.run(now, order, plan, Carried(kept, self.booked, compress, freed, self.freed), last)
        if walk.closer is not None:  # jobs passed over with a subtree the gate held back whole
            closer, jobs, new = walk.closer, s.jobs, s.next_id  # (jobs submitted since: not this pass's)

            def held(job_id: int) -> str | None:
                job = jobs.get(job_id)
                if job is None or number(job_id) >= new or job.state != QUEUED or not closer.covers(job):
                    return None
                return gate(job)
            plan.passed_reason = held
        return plan

    def apply_pass(self, plan: Plan, now: float) -> None:
        """Start the jobs `plan` starts, keep what the next pass builds on (its reservations,
        the kept profile's counts), and give the plan its estimates."""
        s = self.sched
        for start in plan.started:
            s._apply(s.ready.jobs[start.job_id], start, now)
        if s.runs.base is not None:
            s.runs.base.settle()  # (the starts' ends, recorded in one merge: see Profile.occupy)
            if s.settings.depth > 1:  # the next pass's room list from kept counts, if jobs wait for it
                s.runs.base.keep_counts(bool(s.ready.jobs))
        if s.quotas:  # a job a quota holds back says which (qstat -f's comment), as PBS's scheduler does
            self._quota_comments(plan)
        s.last_pass = now
        self.plan = plan
        self.dirty = False
        profiles = [self.walk.profile] if self.walk else []
        if self.walk is not None and self.walk.held:
            plan.held = dict(self.walk.held)  # (the walk holds counts only for reservations it made or kept)
        if s.settings.depth > 1:
            self.booked, self.booked_counts = plan.reserved, plan.held
            self.moved |= plan.moved

        def earliest(job: Job) -> float | None:
            if not profiles:
                profiles.append(self.profile(now))
            request = s.placed(job)
            found = fitting.earliest(profiles[0], s.topology, request, job.walltime, s.bookings.access(job),
                                         s.topology.need(request), max(now, job.start_after or now))
            return found[0] if found else None

        def estimate(job_id: int) -> float | None:
            job = s.jobs.get(job_id)
            return earliest(job) if job is not None and job.state in (QUEUED, WAITING) else None

        plan.earliest, plan._estimate, plan.not_waiting = earliest, estimate, self.not_waiting
        plan.profile = profiles[0] if profiles else None

    def not_waiting(self, job_id: int) -> str | None:
        """Plan.reason of a job no walk considers ("" for a waiting one: the plan says why)."""
        s = self.sched
        job = s.jobs.get(job_id)
        if job is None:
            return None
        state = job.state
        if state is QUEUED:
            return ""
        if state is HELD:
            kinds = {Hold.USER: "user", Hold.OPERATOR: "operator", Hold.SYSTEM: "system"}
            return "held: " + ", ".join(kinds[h] for h in sorted(job.holds, key=lambda h: h.value))
        if state is WAITING:
            return f"waiting for its start time {job.start_after:.0f} (qsub -a)"
        if state is DEP_HOLD:
            parents = sorted({d.job_id for d in job.dependencies if d.met is None})
            return "waiting for a dependency on job " + ", ".join(map(str, parents))
        if state is DEP_FAIL:
            return "a dependency can never be satisfied (dep_fail)"
        if state in ACTIVE:
            return "running"
        return "ended" if state is COMPLETED else "deleted"

    def comment(self, job: Job) -> str:
        """The job's comment as qstat shows it: why a quota holds it back, if the last pass
        passed over it with others a quota holds (worked out when asked), else its own."""
        plan = self.plan
        if plan is not None and plan.passed_reason is not None and job.state == QUEUED:
            why = plan.held_reason(job.id)
            if why and why.startswith(QUOTA_HOLD):
                return "Not Running: " + why
        return job.comment

    def _quota_comments(self, plan: Plan) -> None:
        """Comment the jobs a quota held back in this pass; clear the comment of those it no longer holds."""
        s = self.sched
        held = {jid: why for jid, why in plan.reasons.items() if why.startswith(QUOTA_HOLD)}
        for jid in [j for j in self.commented if j not in held]:
            job = s.jobs.get(jid)
            if job is not None and job.comment.startswith(QUOTA_COMMENT):
                job.comment = ""
        for jid, why in held.items():
            s.jobs[jid].comment = "Not Running: " + why
        self.commented = set(held)

    def planned(self, job_id: int) -> tuple[float, Allocation] | None:
        """The start and allocation the last pass reserved for a waiting job (OpenPBS's
        estimated.start_time and exec_vnode), or None: none reserved, or no pass since load."""
        return self.plan.reserved.get(job_id) if self.plan is not None else None

    def prioritise(self, now: float, ctx: Context | None) -> tuple[Iterable[Job], Job]:
        """The runnable jobs in priority order, and the last of them."""
        s = self.sched
        backlog = s.ready.backlog
        if backlog is not None:  # static order, kept: read only as far as the walk goes
            return backlog.cursor(), backlog.last()
        ctx = ctx or s.context(now)
        order = s.policy.ordered(ctx)
        if order is None:
            runnable = list(s.ready.jobs.values())
            s.policy.prioritise(runnable, ctx)
            order = s.policy.order(runnable, ctx)
        elif not s.ready.sorted_first:
            return order, None  # (lazy: the walk reads only as far as it goes)
        if s.ready.sorted_first:  # stable: the policy's order within a tier and rank
            order = s.ready.by_tier_and_rank(order)
        return order, order[-1]

    def _carry_on(self, walk: Walk, now: float, fresh: list[Job], last: Job | None = None) -> Plan:
        """The last pass's walk carried on with the new jobs `fresh`, in their order: the
        earlier jobs' decisions stand (a job that could not start then cannot now, with as
        few units free and as many reserved), and the walk keeps its profile and its gate."""
        plan = Plan(now, reserved=dict(self.plan.reserved), reasons=dict(self.plan.reasons),
                    default_reason=self.plan.default_reason, since=self.plan.reserved)
        walk.run(now, fresh, plan, last=last)
        return plan

    def _still_lead(self, order: Iterable[Job], walk: Walk) -> tuple[Iterable[Job], bool]:
        """Do the jobs the last walk reserved for (at least one) still come first in
        `order`, in the order it reserved them?  Then each job it passed over fails in the
        same place (behind the same reservations) wherever the new order puts it.  Returns
        `order` to walk (an iterator read here is rebuilt) and the answer."""
        reserved = self.plan.reserved  # (in the order the walk reserved them)
        m = walk.made
        if not m or len(reserved) != m:
            return order, False
        if isinstance(order, Sieved):
            head = order.lead(m)  # (a walk afresh resumes this reading)
        else:
            it = iter(order)
            head = list(islice(it, m))
            if it is order:  # (a plain iterator: what was read goes back in front)
                order = chain(head, it)
        leads = [j.id for j in head] == list(reserved)
        if leads and isinstance(order, Sieved):
            order.resume()  # (no walk reads it: the reading begun goes)
        return order, leads

    def counting(self, now: float) -> bool:
        """Does the pass at `now` hold reservations as counts (conservative and depth-N, no
        site reservations, every runnable job one any units serve)?  A count is exact only
        beside other counts: beside a reservation on particular units, it can find room at
        every moment of its window but no units free throughout it.  When counting stops,
        last pass's counts are put on units, each at its start (see _onto_units); when it
        starts again, reservations on units stand as counts of as many units: a count
        promises less.  Either way the next pass compresses."""
        s = self.sched
        counting = s.settings.depth > 1 and not s.reservations and not s.ready.scattered
        if counting != self.counted:
            self.counted = counting
            if not counting and self.booked_counts:
                self._onto_units(now)
            elif counting and self.booked:
                self.booked_counts = {jid: a.units.bit_count() for jid, (_, a) in self.booked.items()}
                self.booked = dict(self.booked)  # (a reservation changed kind: no later plan is this one's but for moves)
            self.changed()
        return counting

    def _onto_units(self, now: float) -> None:
        """Last pass's counts as reservations on units, each at its own start: taken in
        start order, each finds units free throughout its window (counts alone: an
        interval graph coloured greedily, see Profile.hold).  One that finds none (none
        should) goes back, to be reserved again in queue order."""
        s = self.sched
        profile, booked = self.profile(now), {}
        for jid, (t, _) in sorted(self.booked.items(), key=lambda b: (b[1][0], b[0])):
            job = s.ready.jobs.get(jid)
            if job is None:
                continue
            request, t0 = s.placed(job), max(t, now)
            alloc = fitting.fit(profile, s.topology, request, t0, job.walltime, s.bookings.access(job),
                                s.topology.need(request))
            if alloc is not None:
                profile.occupy(alloc.units, t0, t0 + job.walltime)
                booked[jid] = (t, alloc)
        self.booked, self.booked_counts = booked, {}

    def _gated(self) -> bool:
        """Can a queue limit or the policy hold a job back? (Else the walk skips the check.)"""
        s = self.sched
        return (s.policy.limits or s._array_limits > 0 or s._advres > 0 or s.site_holds
                or bool(s.quotas) or any(q.gates for q in s.router.queues.values()))

    def profile(self, now: float, holds: bool = False) -> Profile:
        """This pass's profile: running jobs (kept between passes), reservations, overruns;
        with `holds`, also the counts last pass's plan held (see _keep)."""
        s = self.sched
        base = s.runs.built(now, s._active)
        if holds:
            self._hold_in_base(now)
        resv = [(r, s.bookings.units[r.name]) for r in s.reservations.values()]
        profile = base.derive(now, resv, s.settings.reservation_slop, rooms=holds and not resv)
        if not holds:
            for t0, t1, count, _ in self._holds().values():
                profile.hold(-count, t0, t1)
        s.runs.hold_late(profile, now, s._active, max(s.settings.overrun_grace, 1.0))
        return profile

    def _holds(self) -> dict[int, tuple[float, float, int]]:
        """The counts `_base` holds (none once it was built again)."""
        s = self.sched
        if self.holds_in is not s.runs.base:
            self.base_holds, self.holds_in = {}, s.runs.base
        return self.base_holds

    def _hold_in_base(self, now: float) -> None:
        """Make the counts the base holds last pass's, as this pass at `now` keeps them:
        those of jobs gone given back, those whose time came moved to now (none if any of
        its reservations is on units, or with site reservations).  Only those that
        change move, so a pass starts with its counts in place (see _keep).  Where the base
        already holds last pass's counts but for what its walk changed, only those are
        read: the jobs reserved anew since (`Plan.moved`), those gone, those whose time came."""
        s = self.sched
        held, booked, counts, queued = self._holds(), self.booked, self.booked_counts, s.ready.jobs
        moved, self.moved = self.moved, set()
        if s.reservations:
            want = {}  # (kept in turn, by _keep)
        elif held and self.freed is not None and len(counts) == len(booked):  # (None: a walltime may have moved)
            look = moved | (held.keys() - booked.keys()) | (held.keys() - queued.keys())
            look.update(jid for jid, span in held.items() if span.start < now)
            for jid in sorted(look):
                old, new, job = held.get(jid), None, queued.get(jid)
                if job is not None and jid in booked:
                    t0 = max(booked[jid][0], now)
                    new = Kept(t0, t0 + job.walltime, counts[jid], 0)
                if old != new:
                    if old is not None and new is not None and old.count == new.count:  # (moved: only where it moved)
                        s.runs.base.shift(new.count, (old.start, old.end), (new.start, new.end))
                        held[jid] = new
                        continue
                    if old is not None:
                        s.runs.base.hold(-old.count, old.start, old.end)
                        del held[jid]
                    if new is not None:
                        s.runs.base.hold(new.count, new.start, new.end)
                        held[jid] = new
            return
        else:
            want = {}
            for jid, (t, _) in booked.items():
                job = queued.get(jid)
                if job is None:
                    continue
                count = counts.get(jid)
                if not count:
                    want = {}  # (a reservation on units: all are kept in turn, by _keep)
                    break
                t0 = t if t > now else now
                want[jid] = Kept(t0, t0 + job.walltime, count, 0)
        if want != held:  # (the spans that differ, found as sets: most stand from pass to pass)
            base = s.runs.base
            for _, (t0, t1, count, _) in held.items() - want.items():
                base.hold(-count, t0, t1)
            for _, (t0, t1, count, _) in want.items() - held.items():
                base.hold(count, t0, t1)
        self.base_holds = want

    def _keep(self, profile: Profile, now: float) -> tuple[dict[int, Kept], bool]:
        """Last pass's reservations that still hold, occupied (or held as counts) in
        `profile` (depth > 1), as Walk.run takes them (job id -> Kept); and whether every
        one still queued was kept (False: some were given back).

        `profile` comes with last pass's counts in place, as this pass keeps them
        (`profile(holds=True)`).  If no segment is promised more units than it has free,
        each would have been promised in turn (Profile.promise), so all of them stand;
        else they are given back, and each is tried in turn."""
        s = self.sched
        kept, lost = {}, False
        if s.settings.depth <= 1:
            return kept, True
        held = self._holds()
        if held:
            if not profile.overpromised():
                return held, True  # (the walk reads a copy)
            for t0, t1, count, _ in held.values():
                profile.hold(-count, t0, t1)
        for jid, (t, alloc) in self.booked.items():
            count = self.booked_counts.get(jid, 0)
            job = s.ready.jobs.get(jid)
            if job is None:
                continue
            lost = True  # (kept here in turn, or given back)
            t0, t1, access = max(t, now), max(t, now) + job.walltime, s.bookings.access(job)
            if count:
                if not access and not profile.reservations:
                    kept_it = profile.promise(count, t0, t1)  # (the same, in one read)
                else:
                    kept_it = profile.room(t0, t1, access) >= count
                    if kept_it:
                        profile.hold(count, t0, t1)
                if kept_it:
                    kept[jid] = Kept(t0, t1, count, 0)
                continue
            units = alloc.units or s.topology.units_of(alloc.nodes, alloc.cores)
            if fitting.holds(profile, units, t0, t1, access) and (not profile.holding or
                                                         profile.room(t0, t1, access) >= units.bit_count()):
                profile.occupy(units, t0, t1)
                kept[jid] = Kept(t0, t1, 0, units)
        return kept, not lost

    # --- saved state -----------------------------------------------------------------
    def job_dict(self, job: Job) -> dict:
        """`job` as saved: with the comment a quota's hold shows (worked out when asked)."""
        d = job.to_dict()
        plan = self.plan
        if plan is not None and plan.passed_reason is not None:
            shown = self.comment(job)
            if shown != job.comment:
                d["comment"] = shown
        return d

    def booked_list(self) -> list:
        """The last plan's reservations, saved: [job id, start, nodes, cores, count]."""
        return [[jid, t, list(a.nodes), [list(c) for c in a.cores], self.booked_counts.get(jid, 0)]
                for jid, (t, a) in self.booked.items()]

    def restore(self, booked: list) -> None:
        """What a saved state keeps of the last pass (`booked_list`); the next compresses."""
        self.booked = {int(b[0]): (float(b[1]), Allocation(0, tuple(b[2]), tuple(tuple(c) for c in b[3])))
                       for b in booked}
        self.booked_counts = {int(b[0]): int(b[4]) for b in booked
                              if len(b) > 4 and int(b[4])}  # (states saved before counts: none)
        self.changed()
        self.sched.runs.base = None
        self.commented = {j.id for j in self.sched.jobs.values() if j.comment.startswith(QUOTA_COMMENT)}
