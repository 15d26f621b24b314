"""Counts held in a profile (conservative backfill, depth > 1): where one could start and
whether it could move earlier, read from the profile's room list (Profile.rooms: units free
and not promised per segment) rather than from its masks.

    earliest_count  the earliest start with room for a count for its duration
    stays           can a count held over a window move earlier?  (read from `Runs`)
    staying         how many counts of a HeldGroup stay, read across them at once
    most            the most room at any time in a window

These only read the profile (and keep `Runs`, caches of its room list that the profile
drops when the list is made anew: Profile.keep_rooms).  tests/test_backlog.py checks
each against giving the count back and scanning.
"""
from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Callable

from .backlog import shortest_first
from .profile import INF, RUNS_FROM, AccessKey, Profile


def earliest_count(p: Profile, duration: float, access: AccessKey, need: int, not_before: float,
                   own: float = INF) -> float | None:
    """The earliest start at or after `not_before` with `need` units unpromised for
    `duration` (counts only: a reservation `hold` keeps).  One scan: a segment without
    room rules out every start up to it.  `own` (no site reservations): the start of
    this job's own count of `need`, still held, which it may move earlier: a start
    before it, as if given back (its own window has room for it), or None; asked
    from now of a count far from now, it is read from the count's runs (see Runs)."""
    p.settle()
    times, held = p.times, p.held
    c = p.segment(max(not_before, p.now))
    k = c  # segments c..k-1 are known to have room
    # Without site reservations, the same scan read from the room list, where no segment
    # comes or goes, passing over segments without room in a tight loop: 1.2x faster on
    # a conservative replay of RICC than one loop reading room through a call.
    if not p.reservations:
        room, limit = p.rooms(), p.limit
        n = len(times) if own == INF else bisect_left(times, own)  # (from `own` on: room)
        if n > RUNS_FROM and own < INF and c == 0:  # (a long way from now: read from runs)
            t = (p.runs_by_need.get(need) or new_runs(p, need)).earliest(duration, n)
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
        if end > p.limit:
            return None
        if end > p.horizon:
            p.ensure(end)
        while k < len(times) and times[k] < end:
            if p.usable(k, access).bit_count() - held[k] < need:
                break
            k += 1
        else:
            return t
        c = k = k + 1
    return None


def stays(p: Profile, need: int, t0: float, duration: float) -> bool:
    """Is a count of `need` held over [t0, t0 + `duration`) (t0 after now; no site
    reservations) the earliest it can be?  If the segment just before t0 had room for
    it, a start there would overlap only its own promise later on, so it could move;
    if not, only a window ending by that segment could be earlier: none is if no run
    of segments with room before it lasts `duration`.  (The answer giving the count
    back and asking `earliest_count` gives: see `Runs`.)

    Runs with room for fewer units last at least as long, so one for 1 unit, then for
    the power of two at or below `need`, settle most answers before `need`'s own: a
    pass reads a few counts' runs, not one per distinct count it keeps."""
    room = p.rooms()  # (settled: the times are all there)
    k = bisect_left(p.times, t0) - 1
    if room[k] >= need:
        return False
    duration -= _slack(p, t0)  # (a run's length is a difference: a hair short of an exact fit)
    for runs in p.ladders.get(need) or _new_ladder(p, need):
        if runs.longest(k) < duration:
            return True
    return False


def _slack(p: Profile, t: float) -> float:
    """How far a run's length (end - start) can fall short of the longest duration that
    ends within it (start + duration <= end), near time `t`: a few units in the last place.
    Where a count might fit within that, `stays` says it might move and `earliest_count`,
    which adds, decides."""
    return 4 * math.ulp(max(abs(t), abs(p.now)))


def staying(p: Profile, group: "HeldGroup", may: Callable[[int], bool]) -> int:
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
    room, times = p.rooms(), p.times  # (settled: the times are all there)
    first, last = bisect_left(times, group.first) - 1, bisect_left(times, group.last) - 1
    if max(room[first:last + 1]) < group.fewest:
        (walls, least), need, by_need = group.by_duration(), group.fewest, p.runs_by_need
        while True:
            # (runs for fewer units last as long or longer: without runs for `need` yet,
            # those for the power of two at or below it, which `stays` reads too)
            runs = by_need.get(need) or by_need.get(rung := 1 << (need.bit_length() - 1)) or new_runs(p, rung)
            i = bisect_right(walls, runs.longest(last) + _slack(p, group.last))  # (the counts that may last no longer)
            if not i:
                return len(group.counts)
            if least[i - 1] == need:
                break
            need = least[i - 1]
    for n, (t0, count, duration) in enumerate(group.counts):
        if may(count) and not stays(p, count, t0, duration):
            return n
    return len(group.counts)


def most(p: Profile, t0: float, t1: float) -> int:
    """The most units free and not promised at any time in [t0, t1) (no site
    reservations; -1 if the span is over)."""
    if t1 <= p.now:
        return -1
    room, times = p.rooms(), p.times
    i = max(bisect_right(times, t0) - 1, 0)
    return max(room[i:bisect_left(times, t1, i + 1)])


def _new_ladder(p: Profile, need: int) -> tuple[Runs, ...]:
    """The runs `stays` reads for a count of `need`, in turn: for 1 unit, for the power
    of two at or below `need`, for `need` (each once)."""
    by_need, needs = p.runs_by_need, dict.fromkeys((1, 1 << max(need.bit_length() - 1, 0), need))
    ladder = p.ladders[need] = tuple(by_need.get(n) or new_runs(p, n) for n in needs if n <= need)
    return ladder


def new_runs(p: Profile, need: int) -> Runs:
    """Start keeping the runs of a count of `need` (read as far as asked: see Runs)."""
    runs = p.runs_by_need[need] = Runs(p, p.rooms(), need)
    return runs


class HeldGroup:
    """Counts held together, in order, summarised for `staying`: each count's
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


class Runs:
    """For one count: how long the longest run of segments with room for it lasts before
    each segment, and where the run holding each segment began, read as far as asked.  A
    conservative pass asks `stays` of every reservation it keeps, and where one
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
        self.lows, self.seen = profile.lows, len(profile.lows)  # (changes since read: see _keep_rooms)

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
