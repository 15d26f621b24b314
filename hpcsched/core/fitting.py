"""Where and when a job fits in a profile: an allocation free throughout a window (`fit`),
the earliest start with one (`earliest`), the free units' tiers a machine chooses from
(`tiers`: tightest in time first), how long the units free now stay free (`windows`), and
which units are usable throughout a window (`usable_over`, `holds`).

These only read the profile (and keep its far masks: Profile.found); tests/test_backlog.py
holds their readable models (`naive_tiers`, a scan for `earliest`).
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator

from .jobs import Allocation, Request
from .profile import INF, STRIDE, AccessKey, Profile
from .topology import Tiers, Topology


def tiers(p: Profile, m: int, t0: float, t1: float, access: AccessKey) -> Tiers:
    """Split free units `m` of window [t0, t1) into preference tiers, tightest first:
    by how soon after t1 their free period ends, then by how late before t0 it began.

    Read lazily, and only before the profile next changes: a head's start in a deep
    profile has a tier for nearly every segment before it and takes all or nearly all
    of their units, so a choice that wants them all reads none (`Tiers.units`), and
    one that leaves a few reads them last first where it can (`_since_now`).  (A
    performance trick of `earliest`; tests/test_backlog.py's `naive_tiers` is the
    readable version.)"""
    if p.pending and (t0 > p.now or p.takes):
        p.settle()
    after, rem = [], m
    for t in p.takes[bisect_left(p.takes, t1):]:
        gone = rem ^ (rem & p.usable(p.segment(t), access))
        if gone:
            after.append(gone)
            rem ^= gone
            if not rem:
                break
    if rem:
        after.append(rem)
    k = p.segment(t0) - 1
    if k < 0 and len(after) == 1:  # (a start now with nothing taken after it: one tier)
        return Tiers(m)
    plain = not (p.reservations or access) and k >= 0  # (usable units: the free masks)
    before = _before(p, m, k, None if plain else access)
    if len(after) > 1:
        return Tiers(m, _across(after, before))
    if plain and not (p.takes and p.takes[0] <= p.times[k]):
        return Tiers(m, before, lambda: _since_now(p, m, k))
    return Tiers(m, before)


def _before(p: Profile, m: int, k: int, access: AccessKey | None) -> Iterator[int]:
    """Units of `m` (free in segment k + 1) by how late before it their free period
    began, latest first: read from segment k back to the first, as far as asked."""
    rem = m
    for f in p.back(k) if access is None else (p.usable(x, access) for x in range(k, -1, -1)):
        if not rem:
            return
        if gone := rem ^ (rem & f):
            yield gone
            rem ^= gone
    if rem:
        yield rem


def _since_now(p: Profile, m: int, k: int) -> Iterator[int]:
    """`_before`'s tiers last first, where no unit stops being free up to segment k:
    free masks only grow from now to there, so the units of `m` free since now come
    first, then those that came free at each boundary in turn."""
    rel, f, seen = p.rel, p.free[0], 0
    for j in range(k + 1):
        if j:
            f |= rel[j]  # (no take up to k)
        if came := (m & f) ^ seen:
            yield came
            seen |= came
    if came := m ^ seen:
        yield came


def usable_over(p: Profile, t0: float, t1: float, access: AccessKey, mask: int, need: int) -> int:
    """Units of `mask` usable over all of [t0, t1); 0 as soon as fewer than `need` remain."""
    if p.pending and (t0 > p.now or p.takes):
        p.settle()
    k = p.segment(t0)
    m = mask & p.usable(k, access)
    if k == 0:
        # From now on a unit stops being free only at a take (a booking or a
        # reservation starting); running jobs only ever give units back.  So a window
        # starting now need only look at the takes inside it.
        takes = p.takes
        i = bisect_right(takes, t0)
        while m and i < len(takes) and takes[i] < t1:
            m &= p.usable(p.segment(takes[i]), access)
            i += 1
    else:
        # Units of m are free in segment k - 1, so in segment k they are what `take[k]`
        # leaves of them, unless the reservations change there: no need to work out
        # segment k's whole free mask.
        times, take, resv, n = p.times, p.take, p.resv, len(p.times)
        k += 1
        while m and k < n and times[k] < t1:
            if resv[k] != resv[k - 1]:
                m &= p.usable(k, access)
            elif take[k]:
                m = (m | take[k]) ^ take[k]
            k += 1
    return m if (m and need == 1) or m.bit_count() >= need else 0  # (one unit: no count)


def holds(p: Profile, units: int, t0: float, t1: float, access: AccessKey) -> bool:
    """Are all of `units` usable over [t0, t1)?"""
    p.ensure(t1)
    return usable_over(p, t0, t1, access, units, units.bit_count()) == units


def fit(p: Profile, topology: Topology, request: Request, t0: float, duration: float,
        access: AccessKey, need: int) -> Allocation | None:
    """An allocation free over [t0, t0 + duration), or None."""
    p.ensure(t0 + duration)
    m = usable_over(p, t0, t0 + duration, access, topology.eligible(request), need)
    if not m:
        return None
    return topology.choose(request, tiers(p, m, t0, t0 + duration, access))


def earliest(p: Profile, topology: Topology, request: Request, duration: float, access: AccessKey,
             need: int, not_before: float) -> tuple[float, Allocation] | None:
    """The earliest start at or after `not_before` with an allocation free for `duration`."""
    p.settle()
    eligible = topology.eligible(request)
    times = p.times  # (segments may be added as it goes)
    c = p.segment(max(not_before, p.now))
    plain = not (p.reservations or access)  # (a segment's usable units: its free mask)
    while c < len(times):
        if plain:
            c = _enough(p, c, eligible, need)
            if c == len(times):
                break
        t = times[c] if times[c] > not_before else not_before
        end = t + duration
        if end > p.limit:
            return None
        if end > p.horizon:
            p.ensure(end)
        if plain or (eligible & p.usable(c, access)).bit_count() >= need:  # (`_enough` said so)
            m = usable_over(p, t, end, access, eligible, need)
            if m and (not p.holding or p.room(t, end, access) >= need):
                alloc = topology.choose(request, tiers(p, m, t, end, access))
                if alloc is not None:
                    return t, alloc
        c += 1
    return None


def _enough(p: Profile, c: int, eligible: int, need: int) -> int:
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
    times, take, n = p.times, p.take, len(p.times)
    m = p.at(c)
    if m.bit_count() >= need and (m & eligible).bit_count() >= need:
        return c
    ft, fm = p.far_t, p.far_m
    for j in range(bisect_right(ft, times[c]), len(ft)):  # (segment c lacks units)
        k = bisect_right(times, ft[j], c) - 1
        f = fm[j]
        if any(take[c + 1:k + 1]) or f.bit_count() >= need and (f & eligible).bit_count() >= need:
            break
        c, m = k, f
    size, strides = STRIDE, 0  # (segment c lacks units: every stride starts after one that does)
    while c < n - 1:
        stop = min(c + size, n - 1)
        if c + 1 == p.known:  # (on from the known prefix: it grows, for the reads after)
            m = p.mask(stop)
            masks = p.free[c:stop + 1]
        else:
            masks = p.chain(c, m, stop)
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
            return p.found(c + hi, masks[hi])
        for x in range(1, len(masks)):
            f = masks[x]
            if f.bit_count() >= need and (f & eligible).bit_count() >= need:
                return p.found(c + x, f)
        c = stop
    return n


def windows(p: Profile, access: AccessKey = ()) -> list[tuple[float, int]]:
    """How long the units free now stay free: [(until, units)], soonest first, the last
    entry's `until` being infinity (free for good, as far as the plan knows)."""
    p.settle()
    out, remaining = [], p.usable(0, access)
    for t in p.takes:
        gone = remaining ^ (remaining & p.usable(p.segment(t), access))
        if gone:
            out.append((t, gone))
            remaining ^= gone
    if remaining:
        out.append((INF, remaining))
    return out


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
