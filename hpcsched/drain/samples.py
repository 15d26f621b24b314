"""What a pass leaves on each node, in Moab's terms: state, reservation list, job list.

States: Down (down or on the bad list), Drained (offline, nothing running), Draining
(offline, a job still running), and on nodes up: Idle (nothing running), Busy (all of it
in use), Running (some of it in use: a shared node).  A node's reservation list holds,
soonest first, every site reservation and every waiting job's reservation that covers it.

A job reservation held as a count (conservative backfill on interchangeable nodes) covers
no node in particular; it is shown on the nodes it would take, *tightest* as the planner
takes them: nodes busy now first, then the lowest idle ones (see plan.py).

`samples` lists every node (the spec, and what logs are written from); `tally` gives the
same picture as counts per combination and drained nodes per reservation, with a few mask
operations per reservation that can cover a node the ones before it do not, instead of
work per node (the simulator's hot path).  A test checks one against the other.
"""
from __future__ import annotations

import math
from bisect import bisect_left, insort
from operator import itemgetter
from typing import Iterator

from ..core.plan import Plan
from ..core.scheduler import Scheduler
from ..core.topology import NodeState, lowest, set_bits
from .accounts import IDLE, STATES, combo

DOWN, BUSY, RUNNING, DRAINED, DRAINING = (STATES.index(s) for s in ("Down", "Busy", "Running", "Drained",
                                                                   "Draining"))
_DRAIN, _UNALLOCATED = combo(IDLE, True, False), combo(IDLE, False, False)
_BUSY_RSV, _BUSY = combo(BUSY, True, True), combo(BUSY, False, True)
_START_ID = itemgetter(0, 1)  # a reservation's (start, id): the order tallies read them in
# past this many changes, and a quarter of the reservations, the sampler groups them afresh (see _read)
RESORT = 64


def _chain(group: list[tuple[str, int, int | None]]) -> list[tuple[str, int, int | None]]:
    """What a tally reads of the reservations starting at one time, (id, job id, count
    held) by id: every one on units, and of the counts held only each larger than every
    one before it.  A count no larger takes only units a larger one there takes, as
    `Sampler._reservations` shows them (the units busy now first, then the lowest idle
    ones), so it covers nothing new; a conservative pass keeps hundreds of reservations
    at a few dozen starts."""
    out, most = [], 0
    for entry in group:
        count = entry[2]
        if not count:
            out.append(entry)
        elif count > most:
            most = count
            out.append(entry)
    return out


def _state(m: int, used: int, down: int, offline: int) -> int:
    """The Moab state of the node with units `m`, `used` of them by running jobs."""
    if m & down:
        return DOWN
    if m & offline:
        return DRAINING if used else DRAINED
    return IDLE if not used else BUSY if used == m else RUNNING


class Sampler:
    """Reads a scheduler after each pass (its topology must not change shape)."""

    def __init__(self, sched: Scheduler):
        self.sched = sched
        topo = sched.topology
        self.nodes = topo.all_nodes()
        self.node_units = [topo.units_of_nodes([n.name]) for n in self.nodes]
        # one unit per node, node i on unit i: masks of units are masks of nodes
        self.simple = all(m == 1 << i for i, m in enumerate(self.node_units))
        self.every = (1 << len(self.node_units)) - 1
        # units past the nodes' (a Blue Gene's cables): no node's, so masked off
        self.links = self.simple and (topo.available() | self.every) != self.every
        # machine nodes a listed node stands for (a Blue Gene lists boards of 32)
        self.weight = topo.measure(self.node_units[0]) if self.simple and self.nodes else 1
        self._site: dict[tuple[str, ...], int] = {}  # a site reservation's nodes -> units
        # the job reservations of the last plan read, by start, each start's by id as (id,
        # job id, count held): brought up to date from plan to plan by what each changed
        # (Plan.since, .moved), as a conservative pass keeps most of a long queue's
        # reservations as they stood; with the starts in order and what a tally reads of
        # each start's (see _chain)
        self._seen: dict | None = None
        self._groups: dict[float, list[tuple[str, int, int | None]]] = {}
        self._starts: list[float] = []
        self._chains: dict[float, list[tuple[str, int, int | None]]] = {}
        # start -> (units busy now and free then, count, the units it was shown on) of the
        # counts a tally showed on busy units alone: the same again, the same units
        self._busy_shown: dict[float, tuple[int, int, int]] = {}
        # the units idle at the last tally, and what it worked out for each start (see _reservations)
        self._idle, self._at = 0, {}

    # --- the pieces ----------------------------------------------------------------------
    def _reservations(self, plan: Plan, idle: int, new_only: bool = False) -> Iterator[tuple[float, str, int]]:
        """(start, id, units) of every reservation, soonest first (ties by id).  With
        `new_only`, those that cover no node an earlier one does not are left out: they
        change neither a tally's picture nor whom it charges, and in a conservative pass
        most of the queue is such (a held count's units are worked out only if needed);
        and held counts that take only units busy now, which no drained node is charged
        to, come last, one per start."""
        sched, topo, prof = self.sched, self.sched.topology, plan.profile
        out = []
        now = plan.now
        for name, res in sched.reservations.items():
            when = next(res.occurrences(now, math.inf), None)
            if when is None:
                continue
            units = self._site.get(res.nodes)  # (by nodes: a name may come back on others)
            if units is None:
                units = self._site[res.nodes] = topo.units_of_nodes(res.nodes)
            out.append((when[0], name, units, 0))
        reserved, held = plan.reserved, plan.held
        if out or not new_only:
            out += [(t, str(jid), alloc.units, held.get(jid)) for jid, (t, alloc) in reserved.items()]
            out.sort(key=_START_ID)
        else:  # (job reservations alone: those that can cover anything new, as far as the caller reads)
            out = ((t, rid, reserved[jid][1].units, count) for t, rid, jid, count in self._read(plan))
        covered = 0
        # start -> (units busy now, free then; their number; idle ones; the units free then),
        # each start's taken from last pass's where nothing busy now and nothing free then changed
        at: dict[float, tuple[int, int, int, int]] = {}
        last_at = self._at if idle == self._idle else {}
        # With `new_only`, a count that takes only units busy now is charged no drained
        # node: those of one start are worked out once, for its largest count, at the end.
        busy_only: dict[float, tuple[int, str]] = {}  # start -> (largest such count, its id)
        for t, rid, units, count in out:
            if count:
                then = at.get(t)
                if then is None:
                    free = prof.usable(prof.segment(max(t, now)))  # (a count whose time came, not started: from now)
                    then = last_at.get(t)
                    if then is None or then[3] != free:
                        busy_then = (free | idle) ^ idle
                        then = (busy_then, busy_then.bit_count(), free & idle, free)
                    at[t] = then
                busy_then, n, idle_then, _ = then
                if new_only and busy_then | covered == covered and (n >= count or idle_then | covered == covered):
                    continue  # whichever it takes, they are covered already
                if n > count:
                    if new_only:
                        if count > busy_only.get(t, (0, ""))[0]:
                            busy_only[t] = (count, rid)
                        continue
                    units = lowest(busy_then, count)
                else:
                    units = busy_then | lowest(idle_then, count - n)
            elif new_only and units | covered == covered:
                continue
            covered |= units
            yield t, rid, units
        if not new_only:
            return  # (every count was read in turn; the nodes kept for tallies stay as they are)
        self._at, self._idle = at, idle
        last, self._busy_shown = self._busy_shown, {}
        for t, (count, rid) in busy_only.items():
            busy_then = at[t][0]
            seen = last.get(t)  # (most starts show the same count on the same units as last pass)
            if seen and seen[1] == count and seen[0] == busy_then:
                units = seen[2]
            else:
                # Its lowest `count` units cover none that are not covered if as many come
                # below the lowest one not covered: then they need not be worked out.
                fresh = busy_then ^ (busy_then & covered)
                if (busy_then & ((fresh ^ (fresh - 1)) >> 1)).bit_count() >= count:
                    continue
                units = lowest(busy_then, count)
            self._busy_shown[t] = (busy_then, count, units)
            if units | covered != covered:
                covered |= units
                yield t, rid, units

    def _read(self, plan: Plan) -> Iterator[tuple[float, str, int, int | None]]:
        """(start, id, job id, count held) of `plan`'s reservations that can cover a unit
        the ones before them do not, soonest first (ties by id): see _chain."""
        reserved, seen, groups, chains, starts = (plan.reserved, self._seen, self._groups, self._chains,
                                                  self._starts)
        if reserved is not seen:  # (else the same plan read again)
            held = plan.held
            gone = set()
            if plan.since is not None and plan.since is seen:
                # `reserved` is `since` less the jobs gone, with the jobs in `moved` (see Plan):
                # the counts say whether any went, sparing two long key sets most passes
                if len(seen) - len(reserved) + len(plan.moved - seen.keys()):
                    gone = seen.keys() - reserved.keys()
            if (plan.since is None or plan.since is not seen
                    or len(gone) + len(plan.moved) > max(RESORT, len(reserved) // 4)):
                groups.clear()
                for jid, (t, _) in reserved.items():
                    groups.setdefault(t, []).append((str(jid), jid, held.get(jid)))
                for group in groups.values():
                    group.sort()
                chains.clear()
                chains.update((t, _chain(group)) for t, group in groups.items())
                starts[:] = sorted(groups)
            else:
                changed = set()
                for jid in gone | (plan.moved & seen.keys()):
                    t = seen[jid][0]
                    group = groups[t]
                    del group[bisect_left(group, (str(jid),))]
                    changed.add(t)
                for jid in plan.moved:
                    t = reserved[jid][0]
                    insort(groups.setdefault(t, []), (str(jid), jid, held.get(jid)))
                    changed.add(t)
                for t in changed:
                    if not groups[t]:  # (its last reservation gone)
                        del groups[t], chains[t], starts[bisect_left(starts, t)]
                        continue
                    if t not in chains:  # (its first)
                        insort(starts, t)
                    chains[t] = _chain(groups[t])
            self._seen = reserved
        for t in starts:
            for rid, jid, count in chains[t]:
                yield t, rid, jid, count

    def _jobs(self) -> int:
        """Units running jobs hold."""
        busy = 0
        for job in self.sched.running():
            busy |= job.allocation.units
        return busy

    def _down(self) -> tuple[int, int]:
        """(units of nodes down or bad, units of nodes offline)."""
        down = offline = 0
        for n, m in zip(self.nodes, self.node_units):
            if n.state == NodeState.UP:
                continue
            if n.state == NodeState.OFFLINE:
                offline |= m
            else:
                down |= m
        return down, offline

    # --- per node: the spec --------------------------------------------------------------
    def samples(self, plan: Plan) -> list[tuple[str, str, list[str], list[str]]]:
        """(node, state, rsvlist, joblist) of every node after `plan`'s pass."""
        busy = self._jobs()
        down, offline = self._down()
        on: dict[int, list[str]] = {}  # unit -> ids of the jobs running on it
        for job in sorted(self.sched.running(), key=lambda j: j.id):
            for u in set_bits(job.allocation.units):
                on.setdefault(u, []).append(str(job.id))
        avail = self.sched.topology.available()
        idle = avail ^ (avail & busy)
        reservations = list(self._reservations(plan, idle))
        out = []
        for node, m in zip(self.nodes, self.node_units):
            jobs: list[str] = []
            for u in set_bits(m):
                jobs.extend(j for j in on.get(u, ()) if j not in jobs)
            used = m & busy
            state = _state(m, used, down, offline)
            rsv = [rid for _, rid, units in reservations if units & m]
            out.append((node.name, STATES[state], rsv, jobs))
        return out

    # --- counted: the simulator's -------------------------------------------------------
    def tally(self, plan: Plan) -> tuple[dict[int, int], dict[str, int]]:
        """(listed nodes per combination, drained listed nodes per reservation id) after
        `plan`'s pass: what `samples` says, counted."""
        sched = self.sched
        avail, busy = sched.topology.available(), sched.runs.busy
        if self.links:
            avail, busy = avail & self.every, busy & self.every
        if self.simple and avail == self.every:
            down = offline = 0
        else:
            down, offline = self._down()
        idle = avail ^ (avail & busy)
        reservations, covered = [], 0
        if len(plan.reserved) == 1 and not (plan.held or sched.reservations):
            # (EASY's one reservation, on units: read as it is, not grouped as a long queue's are)
            [(jid, (t, alloc))] = plan.reserved.items()
            reservations, covered = [(t, str(jid), alloc.units)], alloc.units
        elif plan.reserved or sched.reservations:
            for r in self._reservations(plan, idle, new_only=True):
                reservations.append(r)
                covered |= r[2]
                if self.simple and covered & self.every == self.every:
                    break  # the later ones change neither the picture nor who is charged
        charges: dict[str, int] = {}
        if not self.simple:
            return self._tally_nodes(busy, down, offline, reservations, covered, charges), charges
        drained = idle & covered
        if drained:
            left = drained
            for _, rid, units in reservations:
                mine = left & units
                if mine:
                    charges[rid] = mine.bit_count()
                    left ^= mine
                    if not left:
                        break
        if not (down or offline):  # (the usual case: every node up)
            running = busy & covered
            counts = {_DRAIN: drained.bit_count(), _UNALLOCATED: (idle ^ drained).bit_count(),
                      _BUSY_RSV: running.bit_count(), _BUSY: (busy ^ running).bit_count()}
            return {c: n for c, n in counts.items() if n}, charges
        counts = {}
        for state, mask in ((DOWN, down), (DRAINED, offline ^ (offline & busy)), (DRAINING, offline & busy),
                            (IDLE, idle), (BUSY, avail & busy)):
            r = mask & covered
            for has_rsv, m in ((True, r), (False, mask ^ r)):
                j = m & busy
                for has_job, part in ((True, j), (False, m ^ j)):
                    if part:
                        counts[combo(state, has_rsv, has_job)] = part.bit_count()
        return counts, charges

    def _tally_nodes(self, busy, down, offline, reservations, covered, charges) -> dict[int, int]:
        """`tally` node by node, for machines whose nodes have several units."""
        counts: dict[int, int] = {}
        for m in self.node_units:
            used = m & busy
            state = _state(m, used, down, offline)
            has_rsv = bool(m & covered)
            c = combo(state, has_rsv, bool(used))
            counts[c] = counts.get(c, 0) + 1
            if state == IDLE and has_rsv:
                rid = next(rid for _, rid, units in reservations if units & m)
                charges[rid] = charges.get(rid, 0) + 1
        return counts


class Recorder:
    """Drain accounting of a run, pass by pass: `watch(plan)` after every pass (the
    engine's watch hook); each pass's picture holds until the next one.  A picture the
    next pass repeats goes on accruing, added to the accounts when it changes and when
    they are read through `accounts`.

    `epoch` is added to the scheduler's times (a trace's UnixStartTime); with `log`, a
    moablog.DailyWriter, every node's sample is also written, as a live server does."""

    def __init__(self, sched: Scheduler, accounts, epoch: float = 0.0, log=None):
        self.sampler = Sampler(sched)
        self._accounts = accounts
        accounts.node_count = accounts.node_count or len(self.sampler.nodes) * self.sampler.weight
        self.epoch, self.log = epoch, log
        self.since: float | None = None  # when the picture was first seen
        self.seen: float | None = None  # and last seen
        self.picture: tuple[dict, dict] = ({}, {})
        self.passes = 0

    @property
    def accounts(self):
        """The accounts, with the picture accrued to its last pass."""
        if self.since is not None and self.seen > self.since:
            self._accounts.add_all(self.since, self.seen, *self.picture)
            self.since = self.seen
        return self._accounts

    def watch(self, plan: Plan) -> None:
        t = plan.now + self.epoch
        picture = counts, charges = self.sampler.tally(plan)
        w = self.sampler.weight
        if w != 1:  # listed nodes to the machine's
            picture = {c: n * w for c, n in counts.items()}, {r: n * w for r, n in charges.items()}
        if picture != self.picture:
            if self.since is not None:
                self._accounts.add_all(self.since, t, *self.picture)
            self.since, self.picture = t, picture
        self.seen = t
        if self.log is not None:
            self.log.write(t, self.sampler.samples(plan), self.passes)
        self.passes += 1
