"""The profile: the machine's free units over time, as the planner sees them.

A step function from `now` on, over units (bits of an int; see topology.py): segment i is
[times[i], times[i+1]).  Running jobs occupy their units until their expected end;
reservations block their units for the jobs that may not use them; each job the plan
reserves for occupies its units from its planned start.

Invariants of a Profile (`naive_free` in tests/test_backlog.py is the readable model: the
free units at t are the available ones less every occupy and release replayed at t):

    times[0] == now < times[1] < ... ; segment i is [times[i], times[i+1]), the last open
    the parallel lists times, free, rel, take, resv, held have one entry per segment
    spans: what add_span added and remove_span has not given back (its id -> the span)
    at the boundary i > 0 the units rel[i] become free and take[i] stop being free:
        rel[i] & take[i] == 0, and rel[0] == take[0] == 0
    free[i] is segment i's free mask for i < known, derived front to back:
        free[i] == (free[i-1] | rel[i] | take[i]) ^ take[i];  free[i] is None from known on
    resv[i] lists the reservation occurrences covering segment i (name, units, real)
    takes holds, sorted, every time after now where some unit stops being free
    pending holds bookings from now whose end is not yet a boundary (see occupy); while it is
        not empty, takes is empty, known == 1 and only segment 0 is exact
    far_t, far_m: far masks, exact free masks at sorted times after now, kept by every
        change: far_m[j] is the free mask of the segment holding far_t[j] (see `at`)
"""
from __future__ import annotations

import math
from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterator

from .reservations import Access

INF = math.inf
HORIZON = 366 * 86400.0  # with a standing cyclic reservation, the planner looks no further ahead than this
LAID_OUT = 7 * 86400.0  # a pass starts with reservation occurrences laid out this far ahead
STRIDE = 8  # segments `fitting._enough` works out before counting units again
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
    free mask is worked out front to back when first read (`free[i]`, known for i < `known`),
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
        self.known = 1
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
        self._rooms_key, self._room, self.lows = None, [], []  # (see _rooms)
        self.runs_by_need, self.ladders = {}, {}  # (see counts.Runs, counts.stays)
        self._counts: list[int] | None = None  # free units per segment, where kept (see derive)
        self.pending: list[tuple[float, int]] = []  # bookings from now not yet ended in the lists
        # far masks (see `at`): the times, and the free masks there
        self.far_t: list[float] = []
        self.far_m: list[int] = []
        # [the latest time a far mask was read at or made for], shared with the profile this
        # one was copied from, which lays its far masks that far for the next copy
        self.reach = [now]
        self._copies: list[float] | None = None  # the last copy's _reach (see derive)
        # span id -> (units, count, t0, t1) of each span added and not yet removed (add_span)
        self.spans: dict[int, tuple[int, int, float, float]] = {}
        self._last_span = 0

    @classmethod
    def from_running(cls, now: float, available: int, busy: list[tuple[float, int]]) -> "Profile":
        """Build from (expected end, units) pairs of running jobs, each pair a span of its
        units that are available (`spans` lists their ids in the pairs' order); their ends
        become boundaries in one merge (see `occupy`)."""
        p = cls(now, available)
        for e, units in busy:
            p.add_span(-INF, e, units & available)
        p.settle()
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
        self._copies = p.reach  # (a list, not the copy: the copy is freed with its pass)
        p.times, p.free, p.rel, p.take = self.times[:], self.free[:], self.rel[:], self.take[:]
        p.resv, p.held, p.known, p.holding = self.resv[:], self.held[:], self.known, self.holding
        p.far_t, p.far_m = self.far_t[:], self.far_m[:]
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
            if self.known > 1:
                self.free[1:self.known] = [None] * (self.known - 1)
                self.known = 1
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
            self.known -= k
            self.rel[0] = self.take[0] = 0
            if self._counts is not None:
                del self._counts[:k]
        self.times[0] = self.now = now
        if self.far_t and self.far_t[0] <= now:
            j = bisect_right(self.far_t, now)
            del self.far_t[:j], self.far_m[:j]

    # --- structure -------------------------------------------------------------------
    def mask(self, k: int) -> int:
        """The units free in segment k."""
        if k >= self.known:
            if self.pending:  # (every reader past segment 0 settles first: a bug if not)
                raise AssertionError("a segment after now read with bookings pending")
            i = self.known - 1
            self.free[i + 1:k + 1] = self.chain(i, self.free[i], k)[1:]
            self.known = k + 1
        return self.free[k]

    def chain(self, i: int, m: int, k: int) -> list[int]:
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
    # one before it (`at`), leaving its known prefix short.  (A performance trick of
    # `earliest`: the share tree's heads on RICC read about 200 segments ahead, FIFO's 25;
    # its replay of RICC records 250,000-330,000 took 16.4 s against 18.4-18.8 s without.)
    def at(self, k: int) -> int:
        """The units free in segment k, worked out from the nearest exact mask before it
        without filling the known prefix up to it, and kept as a far mask."""
        if k < self.known:
            return self.free[k]
        i, m = self._exact_before(k)
        m = self.chain(i, m, k)[-1]
        self.found(k, m)
        return m

    def _exact_before(self, k: int) -> tuple[int, int]:
        """(i, segment i's free mask) for the latest i <= k whose mask is exact: the
        known prefix's last or a far mask's."""
        if self.pending:  # (every reader past segment 0 settles first: a bug if not)
            raise AssertionError("a segment after now read with bookings pending")
        i = self.known - 1
        j = bisect_right(self.far_t, self.times[k]) - 1
        if j >= 0:
            f = bisect_right(self.times, self.far_t[j]) - 1
            if f > i:
                return f, self.far_m[j]
        return i, self.free[i]

    def back(self, k: int) -> Iterator[int]:
        """The free masks of segments k, k - 1, ..., 0, read as far as asked."""
        while k >= self.known:
            i, m = self._exact_before(k)
            yield from reversed(self.chain(i, m, k))
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
        times, ft, fm = self.times, self.far_t, self.far_m
        k = bisect_right(times, reach) - 1
        if k < 2 * FAR:  # (a read this near: the copy's known prefix serves it)
            del ft[:], fm[:]
            return
        cut = bisect_right(ft, times[min(k + 2 * FAR, len(times) - 1)])
        del ft[cut:], fm[cut:]
        if ft and ft[-1] >= times[k]:
            return
        i, m = self._exact_before(k)
        masks = self.chain(i, m, k)
        for x in range(FAR, len(masks), FAR):
            ft.append(times[i + x])
            fm.append(masks[x])

    def _far_change(self, units: int, t0: float, t1: float, busy: bool) -> None:
        """Keep the far masks inside [t0, t1) exact as `units` become busy (or free) there."""
        ft, fm = self.far_t, self.far_m
        for j in range(bisect_left(ft, t0), bisect_left(ft, t1)):
            fm[j] = (fm[j] | units) ^ units if busy else fm[j] | units

    def _split(self, t: float) -> int:
        """Index of the segment starting exactly at `t`, creating it if needed."""
        i = bisect_right(self.times, t) - 1
        if self.times[i] == t:
            return i
        kept = self.rooms_valid()
        self.times.insert(i + 1, t)
        self.rel.insert(i + 1, 0)
        self.take.insert(i + 1, 0)
        self.resv.insert(i + 1, self.resv[i])
        self.held.insert(i + 1, self.held[i])
        if i < self.known - 1:  # inside the known prefix, which stays as short as it is
            self.free.insert(i + 1, self.free[i])
            self.known += 1
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
        if self.far_t:
            self._far_change(units, t0, t1, busy)
        kept, counts = self.rooms_valid(), self._counts
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
        known = min(b, self.known)
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
        if t0 <= self.now < t1 and not self.takes and self._counts is None and not self.rooms_valid():
            # A booking from now while no unit stops being free after now (a pass filling
            # an idle machine): a start now reads segment 0 alone (`fit`), so only segment 0
            # changes; its end joins the others' in one merge when something reads further
            # (`settle`), not one insertion into every list per booking.
            self.free[0] = (self.free[0] | units) ^ units
            if self.far_t:
                self._far_change(units, t0, t1, True)
            if self.known > 1:
                self.free[1:self.known] = [None] * (self.known - 1)
                self.known = 1
            self.pending.append((t1, units))
            self.changes += 1
            return
        self.settle()
        if self._change(units, t0, t1, True) is not None and t0 > self.now:
            insort(self.takes, t0)

    # --- spans: Flux's planner interface ----------------------------------------------
    # A span books units or promises a count over a window and is given back by its id
    # (Flux's planner_add_span, planner_rem_span); `room` is the room during [t0, t1) and
    # counts.earliest_count the earliest time with room for a count.  The kept profile of
    # running jobs (running.py) is kept by spans; a pass books and promises directly.
    def add_span(self, t0: float, t1: float, units: int = 0, count: int = 0) -> int:
        """Book `units` (`occupy`) and promise `count` more on no unit in particular (`hold`)
        over [t0, t1), as one span: its id, which `remove_span` takes."""
        if units:
            self.occupy(units, t0, t1)
        if count:
            self.hold(count, t0, t1)
        self._last_span += 1
        self.spans[self._last_span] = (units, count, t0, t1)
        return self._last_span

    def remove_span(self, span: int) -> None:
        """Give back what span `span` holds from now on (KeyError if none has that id)."""
        units, count, t0, t1 = self.spans.pop(span)
        if units:
            self.release(units, t0, t1)
        if count:
            self.hold(-count, t0, t1)

    def settle(self) -> None:
        """Make the pending bookings' ends boundaries (see `occupy`): few one by one, many
        in one merge of the lists."""
        if not self.pending:
            return
        ends, self.pending = self.pending, []
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
            self.free[:] = [self.free[0]] + [None] * (len(times) - 1)  # (known is 1)
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
            kept = self.rooms_valid()
            del self.times[k], self.free[k], self.rel[k], self.take[k], self.resv[k], self.held[k]
            if k < self.known:
                self.known -= 1
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
        kept = self.rooms_valid()
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
        return bool(self.holding) and min(self.rooms()) < 0

    def room(self, t0: float, t1: float, access: AccessKey = ()) -> int:
        """The fewest units usable and not promised at any time in [t0, t1)."""
        self.settle()
        self.ensure(t1)
        times, n = self.times, len(self.times)
        k = self.segment(t0)
        if not access and not self.reservations:  # (read from the room list)
            return min(self.rooms()[k:bisect_left(times, t1, k + 1)])
        least = self.usable(k, access).bit_count() - self.held[k]
        k += 1
        while k < n and times[k] < t1:
            least = min(least, self.usable(k, access).bit_count() - self.held[k])
            k += 1
        return least

    # The units free and not promised per segment (no site reservations), as a list: built
    # when first asked (or worked out from the base's counts: see derive), then kept in
    # step by bookings, promises and new boundaries; a booking counts only what it changes
    # in the segments it spans.  (A performance trick of the count reads of conservative
    # backfill: `earliest_count`, `stays`.)
    def rooms(self) -> list[int]:
        if self.pending:  # (settle's own test, spared a call: asked once a kept count a pass)
            self.settle()
        if self._rooms_key != (self.changes, len(self.times), self.now):  # (`_rooms_valid`, spared a call)
            self.mask(len(self.times) - 1)
            self._room = [f.bit_count() - h for f, h in zip(self.free, self.held)]
            self._keep_rooms()
        return self._room

    def rooms_valid(self) -> bool:
        return self._rooms_key == (self.changes, len(self.times), self.now)

    def _keep_rooms(self, kept: int | None = None) -> None:
        """The room list is up to date.  `kept`: how many leading entries of each count's
        runs (`counts.Runs.best`) the change left right, the rest read again when asked; None:
        none are (a new list)."""
        self._rooms_key = (self.changes, len(self.times), self.now)
        if kept is None:
            self.runs_by_need, self.ladders, self.lows = {}, {}, []
        elif self.runs_by_need:
            lows = self.lows
            lows.append(kept)
            if len(lows) > RUNS_LOG:  # (each count's runs cut back now, so the list stays short)
                for runs in self.runs_by_need.values():
                    runs.longest(0)
                    runs.seen = 0
                lows.clear()

    def advance(self, now: float) -> bool:
        """Move the profile's start to `now` if nothing changes in between (no segment
        boundary in (self.now, now]); False if it cannot."""
        self.settle()
        if len(self.times) > 1 and self.times[1] <= now:
            return False
        kept = self.rooms_valid()
        self.times[0] = self.now = now
        if self.far_t and self.far_t[0] <= now:  # (inside segment 0 since a boundary went)
            j = bisect_right(self.far_t, now)
            del self.far_t[:j], self.far_m[:j]
        if kept:  # (segment 0 starts later: its room is the same)
            self._keep_rooms()
        return True

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
    def free_now(self) -> int:
        """The units free now (site reservations not taken out: see `usable`)."""
        return self.free[0]

    def reserved_now(self) -> bool:
        """Does a site reservation's occurrence (or the slop before one) cover now?"""
        return bool(self.resv[0])

    def next_take(self, t: float) -> float | None:
        """The first time after `t` at which some unit stops being free (None: none)."""
        i = bisect_right(self.takes, t)
        return self.takes[i] if i < len(self.takes) else None

    def usable(self, k: int, access: AccessKey = ()) -> int:
        """Units a job with `access` may take in segment k."""
        if not access:
            m = self.free[k] if k < self.known else self.at(k)
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

    def found(self, k: int, m: int) -> int:
        """Segment k, as far as a search or `at` read: its free mask `m` kept as a far
        mask (unless known already), and the reach moved out to it."""
        t = self.times[k]
        if t > self.reach[0]:
            self.reach[0] = t
        if k >= self.known:
            j = bisect_right(self.far_t, t)
            if not (j and self.far_t[j - 1] == t):
                self.far_t.insert(j, t)
                self.far_m.insert(j, m)
        return k
