"""The profile: the machine's free units over time, as the planner sees them.

A step function from `now` on, over units (bits of an int; see topology.py): segment i is
[times[i], times[i+1]).  Running jobs occupy their units until their expected end;
reservations block their units for the jobs that may not use them; each job the plan
reserves for occupies its units from its planned start.

Invariants of a Profile (`naive_free` in tests/test_backlog.py is the readable model: the
free units at t are the available ones less every occupy and release replayed at t):

    times[0] == now < times[1] < ... ; segment i is [times[i], times[i+1]), the last open
    the parallel lists times, free, rel, take, resv have one entry per segment
    at the boundary i > 0 the units rel[i] become free and take[i] stop being free:
        rel[i] & take[i] == 0, and rel[0] == take[0] == 0
    free[i] is segment i's free mask for i < _known, derived front to back:
        free[i] == (free[i-1] | rel[i] | take[i]) ^ take[i];  free[i] is None from _known on
    resv[i] lists the reservation occurrences covering segment i (name, units, real)
    takes holds, sorted, every time after now where some unit stops being free
    _ends holds bookings from now whose end is not yet a boundary (see occupy); while it is
        not empty, takes is empty, _known == 1 and only segment 0 is exact
    _far_t, _far_m: far masks, exact free masks at sorted times after now, kept by every
        change: _far_m[j] is the free mask of the segment holding _far_t[j] (see `_at`)
"""
from __future__ import annotations

import math
from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Iterator

from .backlog import shortest_first
from .jobs import Allocation, Request
from .reservations import Access
from .topology import Tiers, Topology

INF = math.inf
HORIZON = 366 * 86400.0  # with a standing cyclic reservation, the planner looks no further ahead than this
LAID_OUT = 7 * 86400.0  # a pass starts with reservation occurrences laid out this far ahead
STRIDE = 8  # segments `_enough` works out before counting units again
FAR = 16  # segments between two far masks a base profile lays out (see `_lay_far`)
# segments from now past which `earliest_count` reads a moving count's runs rather than
# scanning (nearer, the scan is cheaper: on KTH-SP2 reading runs for every move was slower)
RUNS_FROM = 64
RUNS_LOG = 4096  # changes a profile logs for its counts' runs before it cuts them all back

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
        # per segment: units promised to reservations held as counts, on no unit in
        # particular (conservative backfill on interchangeable nodes: see `hold`)
        self.held: list[int] = [0]
        self.holding = 0  # how many such reservations are held
        self.reservations = [(r, u) for r, u in reservations]
        self.slop = slop
        self.horizon = now
        self._laid: dict[str, float] = {}
        # how far ahead a start may end: without end (a reservation held however far ahead its
        # job ends), but where a cyclic reservation repeats for ever, one year
        self.limit = now + HORIZON if any(r.period and not r.last for r, _ in self.reservations) else INF
        self.changes = 0  # bumped whenever free units change
        # times after `now` at which units stop being free (bookings, reservations): the
        # only places a unit's free period can end, which is what `tiers` looks for
        self.takes: list[float] = []
        self._rooms_key, self._room, self._lows = None, [], []  # (see _rooms)
        self._runs_by_need, self._ladders = {}, {}  # (see _Runs, stays)
        self._counts: list[int] | None = None  # free units per segment, where kept (see derive)
        self._ends: list[tuple[float, int]] = []  # bookings from now not yet ended in the lists
        # far masks (see `_at`): the times, and the free masks there
        self._far_t: list[float] = []
        self._far_m: list[int] = []
        # [the latest time a far mask was read at or made for], shared with the profile this
        # one was copied from, which lays its far masks that far for the next copy
        self._reach = [now]
        self._copies: list[float] | None = None  # the last copy's _reach (see derive)

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
            p.resv, p.held = [()] * n, [0] * n
        return p

    def derive(self, now: float, reservations=(), slop: float = 0.0, rooms: bool = False) -> "Profile":
        """A copy from `now` on, with reservations laid out, for one pass to plan in
        (this profile, of running jobs only, is kept up to date between passes).  With
        `rooms`, the copy's room list is worked out from this profile's free counts where it
        keeps them (`keep_counts`; conservative passes read the list), else when first read."""
        self.drop_before(now)  # (which records pending ends)
        if self._copies is not None:
            self._lay_far(self._copies[0])
        p = Profile(now, 0, reservations, slop)
        self._copies = p._reach  # (a list, not the copy: the copy is freed with its pass)
        p.times, p.free, p.rel, p.take = self.times[:], self.free[:], self.rel[:], self.take[:]
        p.resv, p.held, p._known, p.holding = self.resv[:], self.held[:], self._known, self.holding
        p._far_t, p._far_m = self._far_t[:], self._far_m[:]
        if rooms and self._counts is not None:  # (else the copy works its list out if asked)
            p._room = [c - h for c, h in zip(self._counts, self.held)]
            p._keep_rooms()
        p.ensure(now + LAID_OUT)
        return p

    def keep_counts(self, keep: bool) -> None:
        """Keep free counts per segment from now on (`derive` gives copies their room lists
        from them), or stop: then a booking from now on an idle profile touches segment 0
        alone (`occupy`), and an end only the masks already worked out, not thousands of
        masks as wide as the machine (conservative backfill while nothing waits)."""
        if not keep:
            self._counts = None
            if self._known > 1:
                self.free[1:self._known] = [None] * (self._known - 1)
                self._known = 1
        elif self._counts is None:
            self.settle()
            self.mask(len(self.times) - 1)
            self._counts = [f.bit_count() for f in self.free]

    def drop_before(self, now: float) -> None:
        """Forget the segments that ended by `now`; the profile starts at `now`."""
        self.settle()
        k = bisect_right(self.times, now) - 1
        if k > 0:
            self.mask(k)
            del self.times[:k], self.free[:k], self.rel[:k], self.take[:k], self.resv[:k], self.held[:k]
            self._known -= k
            self.rel[0] = self.take[0] = 0
            if self._counts is not None:
                del self._counts[:k]
        self.times[0] = self.now = now
        if self._far_t and self._far_t[0] <= now:
            j = bisect_right(self._far_t, now)
            del self._far_t[:j], self._far_m[:j]

    # --- structure -------------------------------------------------------------------
    def mask(self, k: int) -> int:
        """The units free in segment k."""
        if k >= self._known:
            if self._ends:  # (every reader past segment 0 settles first: a bug if not)
                raise AssertionError("a segment after now read with bookings pending")
            i = self._known - 1
            self.free[i + 1:k + 1] = self._chain(i, self.free[i], k)[1:]
            self._known = k + 1
        return self.free[k]

    def _chain(self, i: int, m: int, k: int) -> list[int]:
        """The free masks of segments i..k, from segment i's (`m`), worked out front to
        back by the rule in the module docstring."""
        rel, take, masks = self.rel, self.take, [m]
        for x in range(i + 1, k + 1):
            m = ((m | rel[x] | take[x]) ^ take[x]) if take[x] else m | rel[x]
            masks.append(m)
        return masks

    # Far masks: a head job that waits for most of the machine reads a segment hundreds of
    # boundaries ahead, and working its mask out front to back costs a mask operation a
    # boundary, every pass.  A base profile lays out exact masks every FAR segments as far
    # as its last copy read (`_lay_far`), every change keeps them exact (`_far_change`,
    # one operation per far mask it spans), and a copy reads a segment from the nearest
    # one before it (`_at`), leaving its known prefix short.  (A performance trick of
    # `earliest`: the share tree's heads on RICC read about 200 segments ahead, FIFO's 25;
    # its replay of RICC records 250,000-330,000 took 16.4 s against 18.4-18.8 s without.)
    def _at(self, k: int) -> int:
        """The units free in segment k, worked out from the nearest exact mask before it
        without filling the known prefix up to it, and kept as a far mask."""
        if k < self._known:
            return self.free[k]
        i, m = self._exact_before(k)
        m = self._chain(i, m, k)[-1]
        self._found(k, m)
        return m

    def _exact_before(self, k: int) -> tuple[int, int]:
        """(i, segment i's free mask) for the latest i <= k whose mask is exact: the
        known prefix's last or a far mask's."""
        if self._ends:  # (every reader past segment 0 settles first: a bug if not)
            raise AssertionError("a segment after now read with bookings pending")
        i = self._known - 1
        j = bisect_right(self._far_t, self.times[k]) - 1
        if j >= 0:
            f = bisect_right(self.times, self._far_t[j]) - 1
            if f > i:
                return f, self._far_m[j]
        return i, self.free[i]

    def _back(self, k: int) -> Iterator[int]:
        """The free masks of segments k, k - 1, ..., 0, read as far as asked."""
        while k >= self._known:
            i, m = self._exact_before(k)
            yield from reversed(self._chain(i, m, k))
            k = i - 1
        free = self.free
        for x in range(k, -1, -1):
            yield free[x]

    def _lay_far(self, reach: float) -> None:
        """Far masks every FAR segments out to `reach`, and none more than 2 * FAR past
        it (each costs every change over it an operation); none for a reach under 2 * FAR
        segments, which a copy's known prefix serves as well.  Worked out front to back
        from the last far mask, so a profile lays only what is new since."""
        self.settle()
        times, ft, fm = self.times, self._far_t, self._far_m
        k = bisect_right(times, reach) - 1
        if k < 2 * FAR:  # (a read this near: the copy's known prefix serves it)
            del ft[:], fm[:]
            return
        cut = bisect_right(ft, times[min(k + 2 * FAR, len(times) - 1)])
        del ft[cut:], fm[cut:]
        if ft and ft[-1] >= times[k]:
            return
        i, m = self._exact_before(k)
        masks = self._chain(i, m, k)
        for x in range(FAR, len(masks), FAR):
            ft.append(times[i + x])
            fm.append(masks[x])

    def _far_change(self, units: int, t0: float, t1: float, busy: bool) -> None:
        """Keep the far masks inside [t0, t1) exact as `units` become busy (or free) there."""
        ft, fm = self._far_t, self._far_m
        for j in range(bisect_left(ft, t0), bisect_left(ft, t1)):
            fm[j] = (fm[j] | units) ^ units if busy else fm[j] | units

    def _split(self, t: float) -> int:
        """Index of the segment starting exactly at `t`, creating it if needed."""
        i = bisect_right(self.times, t) - 1
        if self.times[i] == t:
            return i
        kept = self._rooms_valid()
        self.times.insert(i + 1, t)
        self.rel.insert(i + 1, 0)
        self.take.insert(i + 1, 0)
        self.resv.insert(i + 1, self.resv[i])
        self.held.insert(i + 1, self.held[i])
        if i < self._known - 1:  # inside the known prefix, which stays as short as it is
            self.free.insert(i + 1, self.free[i])
            self._known += 1
        else:
            self.free.insert(i + 1, None)
        if kept:  # (the new segment has its neighbour's room)
            self._room.insert(i + 1, self._room[i])
            self._keep_rooms(i + 1)
        if self._counts is not None:
            self._counts.insert(i + 1, self._counts[i])
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
        """Make `units` busy (or free) over [t0, t1): the segments spanned, None if none.
        They are free throughout it (or busy throughout it), as `occupy` and `release` say."""
        if t0 <= self.now:
            if t1 <= self.now:
                return None
            span = range(0, self._split(t1) if t1 < INF else len(self.times))
        elif t1 <= t0:
            return None
        else:
            span = self._span(t0, t1)
        if self._far_t:
            self._far_change(units, t0, t1, busy)
        kept, counts = self._rooms_valid(), self._counts
        # With kept lists, the spanned masks are worked out now, once, rather than by their
        # readers later (without this, conservative lublin_256 and KTH-SP2 ran 5-10 % slower).
        if kept or counts is not None:
            self.mask(span.stop - 1)
        if span.start:
            self._edge(span.start, units, busy)
        if span.stop < len(self.times):
            self._edge(span.stop, units, not busy)
        # Every segment gains or loses all of `units`: the known masks change by them, the
        # later ones follow from the edges when read, and one count serves every kept list.
        free, a, b = self.free, span.start, span.stop
        known = min(b, self._known)
        free[a:known] = [m ^ units for m in free[a:known]]
        if kept or counts is not None:
            n = -units.bit_count() if busy else units.bit_count()
            if kept:
                self._room[a:b] = [r + n for r in self._room[a:b]]
            if counts is not None:
                counts[a:b] = [c + n for c in counts[a:b]]
        self.changes += 1
        if kept:
            self._keep_rooms(a + 1)
        return span

    def occupy(self, units: int, t0: float, t1: float) -> None:
        """Take `units` out of the free set over [t0, t1): they are free throughout it (a
        unit is never booked twice at once, which these masks could not say)."""
        if t0 <= self.now < t1 and not self.takes and self._counts is None and not self._rooms_valid():
            # A booking from now while no unit stops being free after now (a pass filling
            # an idle machine): a start now reads segment 0 alone (`fit`), so only segment 0
            # changes; its end joins the others' in one merge when something reads further
            # (`settle`), not one insertion into every list per booking.
            self.free[0] = (self.free[0] | units) ^ units
            if self._far_t:
                self._far_change(units, t0, t1, True)
            if self._known > 1:
                self.free[1:self._known] = [None] * (self._known - 1)
                self._known = 1
            self._ends.append((t1, units))
            self.changes += 1
            return
        self.settle()
        if self._change(units, t0, t1, True) is not None and t0 > self.now:
            insort(self.takes, t0)

    def settle(self) -> None:
        """Make the pending bookings' ends boundaries (see `occupy`): few one by one, many
        in one merge of the lists."""
        if not self._ends:
            return
        ends, self._ends = self._ends, []
        times, n = self.times, len(self.times)
        fresh = sorted({t for t, _ in ends if t < INF and ((i := bisect_left(times, t)) == n or times[i] != t)})
        if len(fresh) < 64:
            for t in fresh:
                self._split(t)
        else:
            # new segment j goes after old segment at[j] - 1, whose reservations and
            # promises it has; it changes nothing at its start (bookings' ends come next)
            at = [bisect_right(times, t) for t in fresh]

            def widen(old: list, fill=None) -> list:
                out, prev = [], 0
                for p in at:
                    out += old[prev:p]
                    out.append(old[p - 1] if fill is None else fill)
                    prev = p
                out += old[prev:]
                return out
            self.resv[:], self.held[:] = widen(self.resv), widen(self.held)
            self.rel[:], self.take[:] = widen(self.rel, 0), widen(self.take, 0)
            times += fresh
            times.sort()
            self.free[:] = [self.free[0]] + [None] * (len(times) - 1)  # (_known is 1)
        rel, take = self.rel, self.take
        for t, units in ends:
            if t < INF:
                i = bisect_left(times, t)
                if take[i]:
                    self._edge(i, units, False)
                else:
                    rel[i] = rel[i] | units if rel[i] else units  # (no copy of a booking's units)

    def release(self, units: int, t0: float, t1: float) -> None:
        """Give `units` back to the free set over [t0, t1) (undo an `occupy`, or the part of
        one from t0 on): they are busy throughout it."""
        self.settle()
        span = self._change(units, t0, t1, False)
        if span is not None:
            self._unsplit(span)

    def _unsplit(self, span: range) -> None:
        """A boundary at either end of `span` that no longer changes anything goes, so
        profiles do not silt up (given-back promises and bookings leave none behind)."""
        self._unsplit_at(span.stop)
        self._unsplit_at(span.start)

    def _unsplit_at(self, k: int) -> None:
        """Boundary k goes if it changes nothing."""
        if (0 < k < len(self.times) and not self.rel[k] and not self.take[k]
                and self.resv[k] == self.resv[k - 1] and self.held[k] == self.held[k - 1]):
            kept = self._rooms_valid()
            del self.times[k], self.free[k], self.rel[k], self.take[k], self.resv[k], self.held[k]
            if k < self._known:
                self._known -= 1
            if kept:
                del self._room[k]
                self._keep_rooms(k)
            if self._counts is not None:
                del self._counts[k]

    def hold(self, count: int, t0: float, t1: float) -> None:
        """Promise `count` units, on no unit in particular, over [t0, t1) (a negative count
        gives a promise back).  Exact where any units serve the job: all units free at a
        time stay free until a booking takes them, so jobs started in time order can
        always be given units when, at every time, the promised counts fit (an interval
        graph is coloured greedily in start order)."""
        self.settle()
        if t1 <= max(t0, self.now):
            if count < 0 and t0 < t1:  # a promise whose time went by: it holds nothing now
                self.holding -= 1
            return
        span = self._span(max(t0, self.now), t1)
        self._promised(span, count)
        self.holding += 1 if count > 0 else -1
        if count < 0:
            self._unsplit(span)

    def shift(self, count: int, old: tuple[float, float], new: tuple[float, float]) -> None:
        """`hold(-count, *old)`, then `hold(count, *new)`, changing only the segments where
        the two windows differ: a count moved earlier mostly overlaps where it stood (on
        RICC's first 10,000 jobs a move's windows span 193 segments and differ in 3)."""
        self.settle()
        now = self.now
        o0, o1, n0, n1 = max(old[0], now), old[1], max(new[0], now), new[1]
        if not (o0 < o1 and n0 < n1 and o0 < n1 and n0 < o1):  # (apart, or one is over)
            self.hold(-count, *old)
            self.hold(count, *new)
            return
        for a, b, c in ((n0, o0, count), (o0, n0, -count), (o1, n1, count), (n1, o1, -count)):
            if a < b:
                self._promised(self._span(a, b), c)
        times = self.times
        for t in (o1, o0):  # (the later first: its index stays right)
            k = bisect_left(times, t)
            if t != n0 and t != n1 and k < len(times) and times[k] == t:
                self._unsplit_at(k)

    def _promised(self, span: range, count: int) -> None:
        """Add `count` to the units promised over `span` (and to the room list, if kept)."""
        a, b = span.start, span.stop
        self.held[a:b] = [h + count for h in self.held[a:b]]
        kept = self._rooms_valid()
        if kept:
            self._room[a:b] = [r - count for r in self._room[a:b]]
        self.changes += 1
        if kept:
            self._keep_rooms(a + 1)

    def promise(self, count: int, t0: float, t1: float) -> bool:
        """`hold(count, t0, t1)` if `count` units are free and unpromised throughout
        [t0, t1) (now <= t0 < t1; no site reservations), else change nothing but
        boundaries and say False."""
        self.settle()
        if t1 <= t0:  # (nothing to hold, as `hold` says)
            return self.room(t0, t1) >= count
        span = self._span(t0, t1)
        free, held = self.free, self.held
        self.mask(span.stop - 1)
        for k in span:
            if free[k].bit_count() - held[k] < count:
                return False
        self._promised(span, count)
        self.holding += 1
        return True

    def overpromised(self) -> bool:
        """Is some segment promised more units than it has free (no site reservations)?"""
        return bool(self.holding) and min(self._rooms()) < 0

    def room(self, t0: float, t1: float, access: AccessKey = ()) -> int:
        """The fewest units usable and not promised at any time in [t0, t1)."""
        self.settle()
        self.ensure(t1)
        times, n = self.times, len(self.times)
        k = self.segment(t0)
        if not access and not self.reservations:  # (read from the room list)
            return min(self._rooms()[k:bisect_left(times, t1, k + 1)])
        least = self.usable(k, access).bit_count() - self.held[k]
        k += 1
        while k < n and times[k] < t1:
            least = min(least, self.usable(k, access).bit_count() - self.held[k])
            k += 1
        return least

    def earliest_count(self, duration: float, access: AccessKey, need: int, not_before: float,
                       own: float = INF) -> float | None:
        """The earliest start at or after `not_before` with `need` units unpromised for
        `duration` (counts only: a reservation `hold` keeps).  One scan: a segment without
        room rules out every start up to it.  `own` (no site reservations): the start of
        this job's own count of `need`, still held, which it may move earlier: a start
        before it, as if given back (its own window has room for it), or None; asked
        from now of a count far from now, it is read from the count's runs (see _Runs)."""
        self.settle()
        times, held = self.times, self.held
        c = self.segment(max(not_before, self.now))
        k = c  # segments c..k-1 are known to have room
        # Without site reservations, the same scan read from the room list, where no segment
        # comes or goes, passing over segments without room in a tight loop: 1.2x faster on
        # a conservative replay of RICC than one loop reading room through a call.
        if not self.reservations:
            room, limit = self._rooms(), self.limit
            n = len(times) if own == INF else bisect_left(times, own)  # (from `own` on: room)
            if n > RUNS_FROM and own < INF and c == 0:  # (a long way from now: read from runs)
                t = (self._runs_by_need.get(need) or self._new_runs(need)).earliest(duration, n)
                return None if t is None or t + duration > limit else t
            while c < n:
                if room[c] < need:  # (no start in a segment without room)
                    c += 1
                    continue
                t = times[c] if times[c] > not_before else not_before
                end = t + duration
                if end > limit:
                    return None
                if k <= c:
                    k = c + 1
                while k < n and times[k] < end:
                    if room[k] < need:
                        break
                    k += 1
                else:
                    return t
                c = k = k + 1
            return None
        while c < len(times):
            t = times[c] if times[c] > not_before else not_before
            end = t + duration
            if end > self.limit:
                return None
            if end > self.horizon:
                self.ensure(end)
            while k < len(times) and times[k] < end:
                if self.usable(k, access).bit_count() - held[k] < need:
                    break
                k += 1
            else:
                return t
            c = k = k + 1
        return None

    def stays(self, need: int, t0: float, duration: float) -> bool:
        """Is a count of `need` held over [t0, t0 + `duration`) (t0 after now; no site
        reservations) the earliest it can be?  If the segment just before t0 had room for
        it, a start there would overlap only its own promise later on, so it could move;
        if not, only a window ending by that segment could be earlier: none is if no run
        of segments with room before it lasts `duration`.  (The answer giving the count
        back and asking `earliest_count` gives: see `_Runs`.)

        Runs with room for fewer units last at least as long, so one for 1 unit, then for
        the power of two at or below `need`, settle most answers before `need`'s own: a
        pass reads a few counts' runs, not one per distinct count it keeps."""
        room = self._rooms()  # (settled: the times are all there)
        k = bisect_left(self.times, t0) - 1
        if room[k] >= need:
            return False
        duration -= self._slack(t0)  # (a run's length is a difference: a hair short of an exact fit)
        for runs in self._ladders.get(need) or self._new_ladder(need):
            if runs.longest(k) < duration:
                return True
        return False

    def _slack(self, t: float) -> float:
        """How far a run's length (end - start) can fall short of the longest duration that
        ends within it (start + duration <= end), near time `t`: a few units in the last place.
        Where a count might fit within that, `stays` says it might move and `earliest_count`,
        which adds, decides."""
        return 4 * math.ulp(max(abs(t), abs(self.now)))

    def staying(self, group: "HeldGroup", may: Callable[[int], bool]) -> int:
        """How many of `group`'s counts, from the first, stay where they are held (as
        `stays` answers for each): all of them if the group's summary says so, which reads
        a few room entries and runs rather than a bisection and ladder per count; else
        they are asked in turn, up to the first that would move.  `may(units)` False says
        a count of that many stays (as `plan._Freed` tells, from where room grew).

        A count stays if the segment before its start has no room for it and no run with
        room for it lasts its duration before that segment.  The summary reads room before
        the starts across all of them at once, and runs up to the last start: they last
        longest for the fewest units, so the counts that run longer than the runs for the
        fewest cannot move, and of the others the fewest units they need read the runs
        again, until none is left (they all stay) or the fewest no longer grows."""
        if not may(group.fewest):
            return len(group.counts)
        room, times = self._rooms(), self.times  # (settled: the times are all there)
        first, last = bisect_left(times, group.first) - 1, bisect_left(times, group.last) - 1
        if max(room[first:last + 1]) < group.fewest:
            (walls, least), need, by_need = group.by_duration(), group.fewest, self._runs_by_need
            while True:
                # (runs for fewer units last as long or longer: without runs for `need` yet,
                # those for the power of two at or below it, which `stays` reads too)
                runs = by_need.get(need) or by_need.get(rung := 1 << (need.bit_length() - 1)) or self._new_runs(rung)
                i = bisect_right(walls, runs.longest(last) + self._slack(group.last))  # (the counts that may last no longer)
                if not i:
                    return len(group.counts)
                if least[i - 1] == need:
                    break
                need = least[i - 1]
        stays = self.stays
        for n, (t0, count, duration) in enumerate(group.counts):
            if may(count) and not stays(count, t0, duration):
                return n
        return len(group.counts)

    def _new_ladder(self, need: int) -> tuple["_Runs", ...]:
        """The runs `stays` reads for a count of `need`, in turn: for 1 unit, for the power
        of two at or below `need`, for `need` (each once)."""
        by_need, needs = self._runs_by_need, dict.fromkeys((1, 1 << max(need.bit_length() - 1, 0), need))
        ladder = self._ladders[need] = tuple(by_need.get(n) or self._new_runs(n) for n in needs if n <= need)
        return ladder

    def _new_runs(self, need: int) -> "_Runs":
        """Start keeping the runs of a count of `need` (read as far as asked: see _Runs)."""
        runs = self._runs_by_need[need] = _Runs(self, self._rooms(), need)
        return runs

    def most(self, t0: float, t1: float) -> int:
        """The most units free and not promised at any time in [t0, t1) (no site
        reservations; -1 if the span is over)."""
        if t1 <= self.now:
            return -1
        room, times = self._rooms(), self.times
        i = max(bisect_right(times, t0) - 1, 0)
        return max(room[i:bisect_left(times, t1, i + 1)])

    # The units free and not promised per segment (no site reservations), as a list: built
    # when first asked (or worked out from the base's counts: see derive), then kept in
    # step by bookings, promises and new boundaries; a booking counts only what it changes
    # in the segments it spans.  (A performance trick of the count reads of conservative
    # backfill: `earliest_count`, `stays`.)
    def _rooms(self) -> list[int]:
        if self._ends:  # (settle's own test, spared a call: asked once a kept count a pass)
            self.settle()
        if self._rooms_key != (self.changes, len(self.times), self.now):  # (`_rooms_valid`, spared a call)
            self.mask(len(self.times) - 1)
            self._room = [f.bit_count() - h for f, h in zip(self.free, self.held)]
            self._keep_rooms()
        return self._room

    def _rooms_valid(self) -> bool:
        return self._rooms_key == (self.changes, len(self.times), self.now)

    def _keep_rooms(self, kept: int | None = None) -> None:
        """The room list is up to date.  `kept`: how many leading entries of each count's
        runs (`_Runs.best`) the change left right, the rest read again when asked; None:
        none are (a new list)."""
        self._rooms_key = (self.changes, len(self.times), self.now)
        if kept is None:
            self._runs_by_need, self._ladders, self._lows = {}, {}, []
        elif self._runs_by_need:
            lows = self._lows
            lows.append(kept)
            if len(lows) > RUNS_LOG:  # (each count's runs cut back now, so the list stays short)
                for runs in self._runs_by_need.values():
                    runs.longest(0)
                    runs.seen = 0
                lows.clear()

    def windows(self, access: AccessKey = ()) -> list[tuple[float, int]]:
        """How long the units free now stay free: [(until, units)], soonest first, the last
        entry's `until` being infinity (free for good, as far as the plan knows)."""
        self.settle()
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
        self.settle()
        if len(self.times) > 1 and self.times[1] <= now:
            return False
        kept = self._rooms_valid()
        self.times[0] = self.now = now
        if self._far_t and self._far_t[0] <= now:  # (inside segment 0 since a boundary went)
            j = bisect_right(self._far_t, now)
            del self._far_t[:j], self._far_m[:j]
        if kept:  # (segment 0 starts later: its room is the same)
            self._keep_rooms()
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
        self.settle()  # (takes come: see occupy)
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
            m = self.free[k] if k < self._known else self._at(k)
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
        if self._ends and (t0 > self.now or self.takes):
            self.settle()
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
        return m if (m and need == 1) or m.bit_count() >= need else 0  # (one unit: no count)

    def tiers(self, m: int, t0: float, t1: float, access: AccessKey) -> Tiers:
        """Split free units `m` of window [t0, t1) into preference tiers, tightest first:
        by how soon after t1 their free period ends, then by how late before t0 it began.

        Read lazily, and only before the profile next changes: a head's start in a deep
        profile has a tier for nearly every segment before it and takes all or nearly all
        of their units, so a choice that wants them all reads none (`Tiers.units`), and
        one that leaves a few reads them last first where it can (`_since_now`).  (A
        performance trick of `earliest`; tests/test_backlog.py's `naive_tiers` is the
        readable version.)"""
        if self._ends and (t0 > self.now or self.takes):
            self.settle()
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
        k = self.segment(t0) - 1
        if k < 0 and len(after) == 1:  # (a start now with nothing taken after it: one tier)
            return Tiers(m)
        plain = not (self.reservations or access) and k >= 0  # (usable units: the free masks)
        before = self._before(m, k, None if plain else access)
        if len(after) > 1:
            return Tiers(m, _across(after, before))
        if plain and not (self.takes and self.takes[0] <= self.times[k]):
            return Tiers(m, before, lambda: self._since_now(m, k))
        return Tiers(m, before)

    def _before(self, m: int, k: int, access: AccessKey | None) -> Iterator[int]:
        """Units of `m` (free in segment k + 1) by how late before it their free period
        began, latest first: read from segment k back to the first, as far as asked."""
        rem = m
        for f in self._back(k) if access is None else (self.usable(x, access) for x in range(k, -1, -1)):
            if not rem:
                return
            if gone := rem ^ (rem & f):
                yield gone
                rem ^= gone
        if rem:
            yield rem

    def _since_now(self, m: int, k: int) -> Iterator[int]:
        """`_before`'s tiers last first, where no unit stops being free up to segment k:
        free masks only grow from now to there, so the units of `m` free since now come
        first, then those that came free at each boundary in turn."""
        rel, f, seen = self.rel, self.free[0], 0
        for j in range(k + 1):
            if j:
                f |= rel[j]  # (no take up to k)
            if came := (m & f) ^ seen:
                yield came
                seen |= came
        if came := m ^ seen:
            yield came

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
        self.settle()
        eligible = topology.eligible(request)
        times = self.times  # (segments may be added as it goes)
        c = self.segment(max(not_before, self.now))
        plain = not (self.reservations or access)  # (a segment's usable units: its free mask)
        while c < len(times):
            if plain:
                c = self._enough(c, eligible, need)
                if c == len(times):
                    break
            t = times[c] if times[c] > not_before else not_before
            end = t + duration
            if end > self.limit:
                return None
            if end > self.horizon:
                self.ensure(end)
            if plain or (eligible & self.usable(c, access)).bit_count() >= need:  # (`_enough` said so)
                m = self.window(t, end, access, eligible, need)
                if m and (not self.holding or self.room(t, end, access) >= need):
                    alloc = topology.choose(request, self.tiers(m, t, end, access))
                    if alloc is not None:
                        return t, alloc
            c += 1
        return None

    def _enough(self, c: int, eligible: int, need: int) -> int:
        """The first segment from c with `need` units of `eligible` free (len(times) if
        none), no site reservations laid out: `earliest`'s first test of a segment.  (A
        performance trick of `earliest`: a head job of a deep queue is tested against
        every segment until enough units come free.)

        Where no unit is taken, free units only grow: so a far mask with too few says
        every segment up to it has too few, and the search moves there.  From then on,
        counting a mask's units costs several times what working it out does, so segments
        are read a stride at a time: where no unit is taken inside a stride, if its last
        segment has too few, so has every one before it, and if not, the first with
        enough is found by halving the stride.  The first two strides are STRIDE segments
        long, each later one twice the last, up to 8 * STRIDE.  The segment found is kept
        as a far mask (the start's window and choice read it next)."""
        times, take, n = self.times, self.take, len(self.times)
        m = self._at(c)
        if m.bit_count() >= need and (m & eligible).bit_count() >= need:
            return c
        ft, fm = self._far_t, self._far_m
        for j in range(bisect_right(ft, times[c]), len(ft)):  # (segment c lacks units)
            k = bisect_right(times, ft[j], c) - 1
            f = fm[j]
            if any(take[c + 1:k + 1]) or f.bit_count() >= need and (f & eligible).bit_count() >= need:
                break
            c, m = k, f
        size, strides = STRIDE, 0  # (segment c lacks units: every stride starts after one that does)
        while c < n - 1:
            stop = min(c + size, n - 1)
            if c + 1 == self._known:  # (on from the known prefix: it grows, for the reads after)
                m = self.mask(stop)
                masks = self.free[c:stop + 1]
            else:
                masks = self._chain(c, m, stop)
                m = masks[-1]
            if not any(take[c + 1:stop + 1]):
                if m.bit_count() < need or (m & eligible).bit_count() < need:
                    c, strides = stop, strides + 1  # (none in the stride)
                    if strides >= 2 and size < 8 * STRIDE:
                        size += size
                    continue
                lo, hi = 0, stop - c
                while hi - lo > 1:  # lo lacks, hi has: the first that has, by halves
                    x = (lo + hi) // 2
                    f = masks[x]
                    if f.bit_count() >= need and (f & eligible).bit_count() >= need:
                        hi = x
                    else:
                        lo = x
                return self._found(c + hi, masks[hi])
            for x in range(1, len(masks)):
                f = masks[x]
                if f.bit_count() >= need and (f & eligible).bit_count() >= need:
                    return self._found(c + x, f)
            c = stop
        return n

    def _found(self, k: int, m: int) -> int:
        """Segment k, as far as a search or `_at` read: its free mask `m` kept as a far
        mask (unless known already), and the reach moved out to it."""
        t = self.times[k]
        if t > self._reach[0]:
            self._reach[0] = t
        if k >= self._known:
            j = bisect_right(self._far_t, t)
            if not (j and self._far_t[j - 1] == t):
                self._far_t.insert(j, t)
                self._far_m.insert(j, m)
        return k


def _across(after: list[int], before: Iterator[int]) -> Iterator[int]:
    """Every nonempty meet of a tier of `after` with one of `before`, `after` first."""
    seen = []
    for b in before:
        seen.append(b)
        if both := after[0] & b:
            yield both
    for a in after[1:]:
        for b in seen:
            if both := a & b:
                yield both


class HeldGroup:
    """Counts held together, in order, summarised for `Profile.staying`: each count's
    (start, units, duration), the earliest and latest start, the fewest units; and, worked
    out when first asked (`by_duration`), the durations sorted, with the fewest units
    among the counts lasting as long or less (`least[i]`: of the i + 1 shortest)."""

    __slots__ = ("counts", "first", "last", "fewest", "_sorted")

    def __init__(self, held: list[tuple[float, int, float]]):
        """`held`: (start, units, duration) of each count (at least one)."""
        self.counts = held
        starts = [t0 for t0, _, _ in held]
        self.first, self.last = min(starts), max(starts)
        self.fewest = min(count for _, count, _ in held)
        self._sorted: tuple[list[float], list[int]] | None = None

    def by_duration(self) -> tuple[list[float], list[int]]:
        """(durations sorted, least): see the class."""
        if self._sorted is None:
            walls, _, least = shortest_first((d for _, _, d in self.counts), (c for _, c, _ in self.counts))
            self._sorted = walls, least
        return self._sorted


class _Runs:
    """For one count: how long the longest run of segments with room for it lasts before
    each segment, and where the run holding each segment began, read as far as asked.  A
    conservative pass asks `Profile.stays` of every reservation it keeps, and where one
    moves, `earliest_count` from now; each change of the profile leaves the runs before
    its first changed segment as they were (moves change segments from the new start on,
    next to the count's old one), so the runs are read again only from there, not from
    now once a reservation.  (A performance trick of `stays` and `earliest_count`:
    tests/test_backlog.py checks it against runs read afresh, and against giving the
    count back and scanning.)

    It keeps the profile's lists and start, not the profile: a profile keeps its runs, and
    a cycle between the two would keep every pass's profile, masks and all, until the
    cycle collector came round (hundreds of them, gigabytes, on a long conservative replay)."""

    __slots__ = ("times", "now", "room", "need", "best", "starts", "lows", "seen")

    def __init__(self, profile: Profile, room: list[int], need: int):
        self.times, self.now, self.room, self.need = profile.times, profile.now, room, need
        self.best = [0.0]  # best[j]: the longest run within segments 0..j-1
        self.starts: list[float | None] = [None]  # starts[j]: where the run holding segment j-1 began
        self.lows, self.seen = profile._lows, len(profile._lows)  # (changes since read: see _keep_rooms)

    def longest(self, k: int) -> float:
        """The longest time a run of segments with room lasts within segments 0..k-1."""
        lows, best = self.lows, self.best
        if self.seen < len(lows):  # the profile changed: runs are right only before its first change
            kept = min(lows[self.seen:])
            self.seen = len(lows)
            if kept < len(best):
                del best[kept:], self.starts[kept:]
        if k < len(best):
            return best[k]
        times, room, need, starts = self.times, self.room, self.need, self.starts
        start, top = starts[-1], best[-1]
        for j in range(len(best) - 1, k):
            if room[j] < need:
                start = None
            else:
                if start is None:
                    start = times[j] if j else self.now
                if times[j + 1] - start > top:
                    top = times[j + 1] - start
            best.append(top)
            starts.append(start)
        return top

    def earliest(self, duration: float, k: int) -> float | None:
        """The earliest start of a run within segments 0..k-1 lasting `duration`, else of
        the run reaching segment k-1 (None: neither is there)."""
        if self.longest(k) >= duration:
            return self.starts[bisect_left(self.best, duration, 0, k + 1)]
        return self.starts[k]
