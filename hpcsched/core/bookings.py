"""Bookings: advance reservations (pbs_rsub, Maui's setres, Cobalt's) and the site's
calendar (drains that recur, Kraken's capability series, Cobalt's big run).

Invariants: `reservations` names every reservation and `units` the units of each one's
nodes (the same names); a queue in `made_queues` was made by the reservation whose queue
it is, and goes with it, with its jobs.  `front` is the Kraken series: the capability jobs
reserved ahead of all others (tier < 0) since the last drain ended.
"""
from __future__ import annotations

from dataclasses import replace
from . import fitting
from .calendar import Entry
from .errors import InvalidRequest, Rejected
from .jobs import DELETED, FINISHED, PENDING, RUNNING, Job, Request
from .policy import tie_break
from .reservations import Access, Reservation
from .route import Queue


class Bookings:
    """The reservations and calendar of `sched` (a Scheduler, whose jobs they change)."""

    def __init__(self, sched, calendar: list[Entry]):
        self.sched = sched
        self.reservations: dict[str, Reservation] = {}
        self.units: dict[str, int] = {}  # reservation name -> the units of its nodes
        # queues pbs_rsub reservations made (the configuration's own win a clash on restore)
        self.made_queues: set[str] = set()
        self.calendar = calendar  # (the site's: fixed by the configuration)
        for entry in calendar:
            if entry.big_run and sched.policy.static:
                raise InvalidRequest(f"calendar {entry.name}: a big run sets scores, which policy "
                                     f"{sched.policy.name} does not order by (use cobalt)")
        self.calendar_names = frozenset(e.name for e in calendar)
        self.front: set[int] = set()  # the bimodal series: jobs reserved ahead of all others

    def access(self, job: Job) -> tuple:
        """The reservations `job` may use, and how (Access), by name."""
        if not self.reservations:
            return ()
        return tuple(sorted((r.name, a) for r in self.reservations.values()
                            if (a := r.access(job)) is not Access.BLOCKED))

    # --- reservations ----------------------------------------------------------------
    def add(self, res: Reservation, now: float) -> Reservation:
        """Add an advance reservation; a node count is turned into nodes free over its
        first occurrence (running jobs' walltimes and other reservations respected).  One
        that makes its queue (pbs_rsub) adds it, open to the reservation's users and
        groups, and takes its number from the job ids (R12 after job 11, as OpenPBS)."""
        sched, topology = self.sched, self.sched.topology
        if res.name in self.reservations:
            raise Rejected(f"reservation {res.name} already exists")
        if res.own_queue and res.queue in sched.router.queues:
            raise Rejected(f"reservation {res.name}: queue {res.queue} already exists")
        if res.nodes:
            try:
                units = topology.units_of_nodes(res.nodes, res.links)
            except InvalidRequest as e:
                raise Rejected(f"reservation {res.name}: {e}") from None
        else:
            nodes = self.free_nodes(Request(nodes=res.count), res.start, res.start + res.duration, now)
            if nodes is None:
                raise Rejected(f"reservation {res.name}: {res.count} nodes are not free "
                               f"for its whole window")
            res.nodes, units = nodes, topology.units_of_nodes(nodes, res.links)
            res.count = 0
        self.reservations[res.name] = res
        self.units[res.name] = units
        if res.own_queue:
            self.make_queue(res)
            if res.name[1:].isdigit():
                sched.next_id = max(sched.next_id, int(res.name[1:]) + 1)
        sched.planner.changed()
        return res

    def free_nodes(self, request: Request, start: float, end: float, now: float) -> tuple[str, ...] | None:
        """Whole nodes that can hold `request` over [start, end) (from `now` on), no job
        or reservation using them meanwhile; None if there are none."""
        topology = self.sched.topology
        request = replace(request, exclusive=True)
        start = max(start, now)
        alloc = fitting.fit(self.sched.planner.profile(now), topology, request, start, end - start, (),
                            topology.need(request))
        return None if alloc is None else alloc.nodes

    def make_queue(self, res: Reservation) -> None:
        """The queue a pbs_rsub reservation makes: its jobs run inside it alone (Access.BOUND),
        so none may ask for longer than it lasts."""
        self.sched.router.queues[res.queue] = Queue(res.queue, acl_users=res.users or None,
                                                    acl_groups=res.groups or None, max_walltime=res.duration)
        self.made_queues.add(res.queue)

    def remove(self, name: str, now: float | None = None) -> Reservation:
        """Remove a reservation (at `now`: one billed to a project is charged its unused part)."""
        sched = self.sched
        if name not in self.reservations:
            raise InvalidRequest(f"unknown reservation {name!r}")
        self.units.pop(name)
        sched.planner.changed()
        res = self.reservations.pop(name)
        if now is not None and sched.billing is not None and sched.billing.billed(res):
            sched.billing.bill(res, now, sched.running())
        if res.queue in self.made_queues:  # its queue goes, and the jobs still in it (OpenPBS)
            self.made_queues.discard(res.queue)
            sched.router.queues.pop(res.queue, None)
            for job in [j for j in sched.jobs.values() if j.queue == res.queue and j.state not in FINISHED]:
                self._gone_with(job, res, now)
        return res

    def alter(self, name: str, now: float, **changes) -> Reservation:
        """Change a reservation's `start`, `duration`, `users`, `groups` or `title`
        (pbs_ralter).  It keeps its nodes: time it claims anew must find them free of other
        reservations and of running jobs.  Once begun only its end moves; a standing one's
        times stay."""
        old = self.reservations.get(name)
        if old is None:
            raise Rejected(f"unknown reservation {name!r}")
        unknown = set(changes) - {"start", "duration", "users", "groups", "title"}
        if unknown:
            raise InvalidRequest(f"reservation {name}: {sorted(unknown)[0]} cannot be altered")
        new = replace(old, **changes)
        old_end, end = old.start + old.duration, new.start + new.duration
        if (new.start, new.duration) != (old.start, old.duration):
            if old.period:
                raise Rejected(f"reservation {name}: a standing reservation's times are not altered")
            if end <= now:
                raise Rejected(f"reservation {name}: it would end in the past")
            if old.start <= now and new.start != old.start:
                raise Rejected(f"reservation {name}: it has begun: only its end may change")
            # the time it claims anew: past its old end once begun (its jobs end by then),
            # else its whole new window (no job of its own runs before it begins)
            lo = max(old_end if old.start <= now else new.start, now)
            if lo < end and not self._free_for(name, lo, end, now):
                raise Rejected(f"reservation {name}: its nodes are not free for the new window")
        self.reservations[name] = new
        if new.queue in self.made_queues:
            self.make_queue(new)
        self.sched.planner.changed()
        return new

    def _free_for(self, name: str, lo: float, end: float, now: float) -> bool:
        """Are every unit of reservation `name`'s nodes free over [lo, end) but for it (on
        any machine: a Blue Gene's block too)?"""
        planner, old = self.sched.planner, self.reservations.pop(name)
        units = self.units.pop(name)
        planner.changed()
        try:
            free = fitting.usable_over(planner.profile(now), lo, end, (), units, units.bit_count())
        finally:
            self.reservations[name], self.units[name] = old, units
            planner.changed()
        return free == units

    def _gone_with(self, job: Job, res: Reservation, now: float | None) -> None:
        """A job of a reservation's own queue when the reservation ends: a waiting one is
        deleted, a running one asked to stop (EXITING; one ending already is left to end)."""
        sched = self.sched
        if job.state in PENDING or job.state == RUNNING:
            job.comment = f"Job deleted: reservation {res.name} ended"
            sched.delete(job.id, now if now is not None else sched.last_pass or 0.0)
            if job.state == DELETED:
                sched.deleted.append(job)

    def to_list(self) -> list[dict]:
        """The reservations as saved (not the calendar's: the site's configuration makes them)."""
        return [r.to_dict() for r in self.reservations.values() if r.name not in self.calendar_names]

    def restore(self, saved: list[dict]) -> None:
        """The reservations of a saved state (`to_list`), with the queues they made."""
        sched = self.sched
        for d in saved:
            res = Reservation.from_dict(d)
            self.reservations[res.name] = res
            self.units[res.name] = sched.topology.units_of_nodes(res.nodes, res.links)
            if res.own_queue and res.queue not in sched.router.queues:
                self.make_queue(res)

    # --- the calendar ----------------------------------------------------------------
    def calendar_events(self, now: float) -> None:
        """Act on each calendar occurrence that ended since the last pass."""
        for entry in self.calendar:
            end = entry.last_end(now)
            if end is None or end <= self.sched.last_pass:
                continue
            if entry.big_run:
                self.big_run(now)
            if entry.kind == "bimodal":
                self._open_series(entry)

    def _open_series(self, entry: Entry) -> None:
        """Kraken: the capability jobs queued now run back to back, in submission order."""
        sched = self.sched
        for jid in self.front:
            job = sched.jobs.get(jid)
            if job is not None and job.tier < 0:
                sched.retier(job, 0)
        machine = sched.topology.node_count
        series = sorted((j for j in sched.queued() if sched.size(j) >= entry.capability * machine and j.tier <= 0),
                        key=tie_break)
        for rank, job in enumerate(series):
            sched.retier(job, rank - len(series))
        self.front = {j.id for j in series}

    def series_hold(self, job: Job) -> str | None:
        """Why a capability `job` outside this week's series waits for the next (Kraken)."""
        if job.tier < 0:
            return None  # in this week's series
        sched = self.sched
        for entry in self.calendar:
            if entry.kind == "bimodal" and sched.size(job) >= entry.capability * sched.topology.node_count:
                return f"capability jobs run after the {entry.name} drain, in its series"
        return None

    def big_run(self, now: float) -> list[Job]:
        """Cobalt's Big Run Monday: the waiting capability jobs (in a capability queue: a
        min_fraction or min_nodes), neither in a backfill queue nor overburning, get scores
        above every other waiting job's, largest first, then by submission."""
        sched = self.sched
        if sched.policy.static:
            raise InvalidRequest(f"a big run sets scores, which policy {sched.policy.name} does not order by")
        backfill = set(getattr(sched.policy, "backfill_queues", ()))
        if sched.bank is not None:
            backfill.add(sched.bank.backfill_queue)
        capability = {name for name, q in sched.router.queues.items() if q.capability}
        waiting = list(sched.queued())
        chosen = sorted((j for j in waiting if j.queue in capability and j.queue not in backfill
                         and j.standing != "overburn"), key=lambda j: (-sched.size(j), j.submit_time, j.id))
        top = max((j.score for j in waiting), default=0.0)
        for rank, job in enumerate(chosen):
            job.score = top + len(chosen) - rank
        sched.planner.changed()
        return chosen
