"""The backlog's sieve and the profile's change-based storage, against naive models."""
import random

import pytest
from helpers import job, scheduler

from hpcsched import Request
from hpcsched.core import backlog, profile
from hpcsched.core.backlog import Backlog
from hpcsched.core import counts, fitting
from hpcsched.core.counts import HeldGroup
from hpcsched.core.profile import INF, Profile
from hpcsched.core.topology import Node, lowest, mask_of, set_bits
from hpcsched.machines.nodepool import NodePool, _lowest_in_tiers


def passes(need, wall, upper, horizon, lasting):
    """The walk's bound test, spelled out: may this job start?"""
    bound = lasting if wall > horizon else upper
    return bound > 0 and need <= bound


def check_sieve(b, model, rnd):
    """A sieved reading passes over exactly the jobs the bound test refuses."""
    upper, horizon, lasting = rnd.randrange(0, 20), rnd.choice([50.0, 500.0, INF]), rnd.randrange(0, 10)
    lasting = min(lasting, upper)
    c = b.cursor()
    c.sieve = (upper or -1, horizon, lasting or -1)
    got = list(c)
    want = [j for k in sorted(model) for j, need in [model[k]]
            if passes(need, j.walltime, upper, horizon, lasting)]
    assert got == want
    assert c.passed == len(model) - len(want)


def check_backlog_invariants(b):
    """The invariants backlog.py's docstring states."""
    keys = [k for block in b._blocks for k in block.keys]
    assert keys == sorted(set(keys)) and len(keys) == len(b)
    assert all(0 < len(block.keys) <= 2 * backlog.BLOCK for block in b._blocks)
    assert b._maxes == [block.keys[-1] for block in b._blocks]


def check_profile_invariants(p):
    """The invariants profile.py's docstring states."""
    n = len(p.times)
    assert p.times[0] == p.now and all(a < b for a, b in zip(p.times, p.times[1:]))
    assert len(p.free) == len(p.rel) == len(p.take) == len(p.resv) == len(p.held) == n
    assert p.rel[0] == p.take[0] == 0 and all(r & t == 0 for r, t in zip(p.rel, p.take))
    for i in range(1, n):
        if i < p.known:
            assert p.free[i] == (p.free[i - 1] | p.rel[i] | p.take[i]) ^ p.take[i]
        else:
            assert p.free[i] is None
    assert p.takes == sorted(p.takes) and all(t > p.now for t in p.takes)
    if p.rooms_valid():  # the room list, kept in step by changes, is what building it gives
        assert p._room == [p.mask(k).bit_count() - p.held[k] for k in range(n)]
    if p._counts is not None:  # and so are the free counts a base profile keeps
        assert p._counts == [p.mask(k).bit_count() for k in range(n)]
    if p.pending:  # bookings from now waiting for their ends: only segment 0 is known
        assert not p.takes and p.known == 1 and p._counts is None and not p.rooms_valid()
    # far masks: sorted times after now, each the mask worked out front to back there
    assert p.far_t == sorted(set(p.far_t)) and all(t > p.now for t in p.far_t)
    assert len(p.far_m) == len(p.far_t)
    if p.far_t and not p.pending:
        masks = front_to_back(p)
        assert p.far_m == [masks[p.segment(t)] for t in p.far_t]


def front_to_back(p):
    """Every segment's free mask, worked out from segment 0's by the rule alone."""
    masks = [p.free[0]]
    for k in range(1, len(p.times)):
        masks.append((masks[-1] | p.rel[k] | p.take[k]) ^ p.take[k])
    return masks


@pytest.mark.parametrize("seed", range(6))
def test_backlog_keeps_order_and_sieves_exactly(seed, monkeypatch):
    monkeypatch.setattr(backlog, "BLOCK", 4)  # many small blocks: splits and empty blocks
    rnd = random.Random(seed)
    b, model = Backlog(), {}
    for n in range(400):
        if model and rnd.random() < 0.4:
            key = rnd.choice(sorted(model))
            b.remove(key)
            del model[key]
        else:
            key = (rnd.randrange(50), n)
            j = job(1, float(rnd.choice([10, 100, 1000, 5000])))
            j.id = n
            model[key] = (j, rnd.randrange(1, 20))
            b.add(key, j, model[key][1])
        if n % 7 == 0:  # block summaries made here are then kept up to date by adds and removes
            check_sieve(b, model, rnd)
            check_backlog_invariants(b)
    assert len(b) == len(model)
    ordered = [model[k][0] for k in sorted(model)]
    assert list(b.cursor()) == ordered and b.last() is ordered[-1]
    for _ in range(30):
        check_sieve(b, model, rnd)
    for block in b._blocks:  # each kept summary is what summarising afresh gives
        if block.walls is not None:
            kept = (block.walls, block.by_wall, block.least)
            block.summarise()
            assert kept == (block.walls, block.by_wall, block.least)


def test_backlog_rebuilt_from_sorted_entries_reads_the_same():
    jobs = [job(1, 10.0) for _ in range(200)]
    entries = [((i,), j, 1 + i % 7) for i, j in enumerate(jobs)]
    assert list(Backlog(entries).cursor()) == jobs


def naive_free(ops, available, t):
    """Units free at time t after the (kind, units, t0, t1) operations, one time at a time."""
    busy = 0
    for kind, units, t0, t1 in ops:
        if t0 <= t < t1:
            busy = busy | units if kind == "occupy" else busy & ~units
    return available & ~busy


def unlearned(p):
    """A copy of `p` that knows only its first segment's mask."""
    q = p.derive(p.now)
    q.free = [q.free[0]] + [None] * (len(q.times) - 1)
    q.known = 1
    return q


@pytest.mark.parametrize("seed", range(8))
def test_profile_masks_match_a_naive_timeline(seed):
    """Bookings, early ends and undone bookings, read at every boundary and at random
    times, agree with replaying the operations at that time."""
    rnd = random.Random(seed)
    units_n, available = 24, (1 << 24) - 1
    running = []  # (end, units) of jobs busy at 0
    free_units = list(range(units_n))
    rnd.shuffle(free_units)
    for _ in range(8):
        u = sum(1 << free_units.pop() for _ in range(2))
        running.append((float(rnd.randrange(1, 20) * 10), u))  # coarse times: edges coincide
    p = Profile.from_running(0.0, available, running)
    ops = [("occupy", u, -INF, e) for e, u in running]
    booked = []
    for _ in range(40):
        r = rnd.random()
        if r < 0.5:
            t0 = rnd.choice([0.0, float(rnd.randrange(0, 30) * 10)])
            t1 = t0 + rnd.randrange(1, 20) * 10
            free = p.mask(p.segment(t0))
            for k in range(p.segment(t0), len(p.times)):
                if p.times[k] < t1:
                    free &= p.mask(k)
            bits = [b for b in range(units_n) if free >> b & 1]
            if not bits:
                continue
            u = sum(1 << b for b in rnd.sample(bits, min(len(bits), rnd.randrange(1, 4))))
            p.occupy(u, t0, t1)
            ops.append(("occupy", u, t0, t1))
            booked.append((u, t0, t1))
        elif booked:  # undo a booking, or end it early at some point inside it
            u, t0, t1 = booked.pop(rnd.randrange(len(booked)))
            cut = t0 if rnd.random() < 0.5 else rnd.choice([t0 + 10, t0 + (t1 - t0) * rnd.random()])
            p.release(u, cut, t1)
            ops.append(("release", u, cut, t1))
        check_profile_invariants(p)
        if rnd.random() < 0.5:  # the room list built, so that later changes keep it in step
            p.rooms()
        if rnd.random() < 0.3:  # free counts kept (for copies' room lists) or not, from now on
            p.keep_counts(rnd.random() < 0.7)
            check_profile_invariants(p)
        if rnd.random() < 0.2:  # and the room list a copy gets from the kept counts, or works out
            q = p.derive(p.now, rooms=True)
            assert q.rooms_valid() == (p._counts is not None)
            assert q.rooms() == [q.mask(k).bit_count() - q.held[k] for k in range(len(q.times))]
            if p._counts is not None:
                assert p._counts == [p.mask(k).bit_count() for k in range(len(p.times))]
        probes = p.times + [rnd.uniform(0, 500) for _ in range(5)]
        for when in probes:  # worked out from the changes alone
            q = unlearned(p)
            assert q.mask(q.segment(when)) == naive_free(ops, available, when), (seed, when)
        if rnd.random() < 0.3:  # and sometimes learnt in place, so that later changes meet known segments
            when = rnd.choice(p.times)
            assert p.mask(p.segment(when)) == naive_free(ops, available, when), (seed, when)
    # a derived copy starts later and reads the same; the original is untouched by it
    q = p.derive(50.0)
    for when in q.times + [60.0, 250.0]:
        assert q.mask(q.segment(when)) == naive_free(ops, available, max(when, 50.0))


class NaivePlanner:
    """Flux's planner as a list of spans, every read a scan of them: the reference model of
    Profile's span interface (add_span, remove_span, room, counts.earliest_count)."""

    def __init__(self, now, available):
        self.now, self.available, self.spans = now, available, {}

    def room_at(self, t):
        busy, held = 0, 0
        for units, count, t0, t1 in self.spans.values():
            if t0 <= t < t1:
                busy, held = busy | units, held + count
        return (self.available & ~busy).bit_count() - held

    def room(self, t0, t1):
        t0 = max(t0, self.now)
        edges = {t for _, _, a, b in self.spans.values() for t in (a, b) if t0 < t < t1}
        return min(self.room_at(t) for t in [t0, *edges])

    def earliest(self, need, duration, not_before):
        not_before = max(not_before, self.now)
        edges = sorted({t for _, _, a, b in self.spans.values() for t in (a, b) if t > not_before})
        return next((t for t in [not_before, *edges] if self.room(t, t + duration) >= need), None)


@pytest.mark.parametrize("seed", range(6))
def test_spans_added_and_removed_by_id_read_as_a_naive_planner(seed):
    """Bookings (units) and promises (counts) added as spans, each given back by its id:
    the room over any window and the earliest start with room for a count are what
    scanning the spans gives."""
    rnd = random.Random(seed)
    n = 16
    available = (1 << n) - 1
    running = [(float(rnd.randrange(1, 20) * 10), 1 << u) for u in rnd.sample(range(n), 5)]
    p = Profile.from_running(0.0, available, running)
    model = NaivePlanner(0.0, available)
    ids = {}  # span id -> (units, count, t0, t1), as the model holds it
    for sid, (end, units) in zip(p.spans, running):
        ids[sid] = model.spans[sid] = (units, 0, -INF, end)
    for _ in range(60):
        if rnd.random() < 0.6 or not ids:
            t0 = float(rnd.randrange(0, 30) * 10)
            t1 = t0 + rnd.randrange(1, 20) * 10
            free = available
            for units, _, a, b in model.spans.values():
                if a < t1 and t0 < b:
                    free &= ~units
            bits = [b for b in range(n) if free >> b & 1]
            units = sum(1 << b for b in rnd.sample(bits, min(len(bits), rnd.randrange(0, 3))))
            count = rnd.randrange(0, 3) if units else rnd.randrange(1, 3)
            sid = p.add_span(t0, t1, units=units, count=count)
            assert sid not in ids
            ids[sid] = model.spans[sid] = (units, count, t0, t1)
        else:
            sid = rnd.choice(sorted(ids))
            del ids[sid], model.spans[sid]
            p.remove_span(sid)
            with pytest.raises(KeyError):
                p.remove_span(sid)
        check_profile_invariants(p)
        for _ in range(4):
            t0 = float(rnd.randrange(0, 40) * 10)
            t1 = t0 + rnd.choice([5.0, 10.0, 55.0, 200.0])
            assert p.room(t0, t1) == model.room(t0, t1), (seed, t0, t1)
            need, duration = rnd.randrange(0, n + 1), rnd.choice([10.0, 35.0, 120.0])
            not_before = float(rnd.randrange(0, 40) * 10)
            assert counts.earliest_count(p, duration, (), need, not_before) == \
                model.earliest(need, duration, not_before), (seed, need, duration, not_before)


def naive_tiers(p, m, t0, t1):
    """`tiers` spelled out unit by unit: the units of `m` grouped by how soon after t1 their
    free period ends (soonest first), then by how late before t0 it began (latest first)."""
    c, ends, groups = p.segment(t0), [t for t in p.takes if t >= t1], {}
    for u in set_bits(m):
        after = next((i for i, t in enumerate(ends) if not p.mask(p.segment(t)) >> u & 1), len(ends))
        began = next((k for k in range(c - 1, -1, -1) if not p.mask(k) >> u & 1), -1)
        groups.setdefault((after, -began), []).append(u)
    return [mask_of(groups[key]) for key in sorted(groups)]


def naive_choose_whole(pool, request, tiers):
    """Whole nodes: the lowest eligible units of the first tier, then of the next, ..."""
    eligible, got = pool.eligible(request), []
    for t in tiers:
        got += set_bits(t & eligible)[:request.nodes - len(got)]
    return mask_of(got) if len(got) == request.nodes else None


def naive_earliest(p, pool, request, wall, not_before):
    """The first of not_before and the later boundaries with the request's units free
    throughout [t, t + wall), and the units chosen there from the naive tiers."""
    p.settle()  # (bookings from now made boundaries, as every read past segment 0 does)
    for t in [not_before] + [t for t in p.times if t > not_before]:
        if t + wall > p.limit:
            return None
        m = pool.eligible(request)
        for k in range(len(p.times)):
            if p.times[k] < t + wall and (k + 1 == len(p.times) or p.times[k + 1] > t):
                m &= p.mask(k)
        if m.bit_count() >= request.nodes:
            tiers = naive_tiers(p, m, t, t + wall)
            assert list(fitting.tiers(p, m, t, t + wall, ())) == tiers
            got = fitting.tiers(p, m, t, t + wall, ())
            back = got.last_first()  # (offered where no unit stops being free before t)
            assert got.units == m and (back is None or list(back) == tiers[::-1])
            return t, naive_choose_whole(pool, request, tiers)
    return None


@pytest.mark.parametrize("seed", range(12))
def test_earliest_start_and_its_nodes_match_a_naive_reading(seed):
    """`earliest` (which passes over segments without enough free units in one loop,
    `_enough`), `tiers` (read from the free masks) and the whole-node choice (which takes
    whole tiers without a call each) against reading every window unit by unit, on pools
    where some nodes lack a feature, with bookings from now (no unit stops being free
    after now) and later ones (some do), and early ends."""
    rnd = random.Random(seed)
    n = rnd.choice([6, 40, 300])
    pool = NodePool([Node(f"n{i}", features={"ib"} if rnd.random() < 0.7 else set()) for i in range(n)])
    available = (1 << n) - 1
    busy = rnd.sample(range(n), n * 3 // 4)
    running = [(float(rnd.randrange(1, 40) * 10), 1 << u) for u in busy]
    p = Profile.from_running(0.0, available, running)
    booked = []
    for step in range(30):
        r = rnd.random()
        req = Request(nodes=rnd.randrange(1, max(2, n // 3)), features=("ib",) if rnd.random() < 0.3 else ())
        wall = float(rnd.randrange(1, 30) * 10)
        not_before = rnd.choice([0.0, 0.0, float(rnd.randrange(0, 300))])
        got = fitting.earliest(p, pool, req, wall, (), req.nodes, not_before)  # (first: masks not yet known)
        want = naive_earliest(p, pool, req, wall, not_before)
        assert (got and (got[0], got[1].units)) == want, (seed, step)
        if r < 0.3 and booked:  # an early end (or a booking undone)
            u, t0, t1 = booked.pop(rnd.randrange(len(booked)))
            p.release(u, max(t0, 0.0), t1)
        elif got is not None:  # book it: from now, or later (a unit then stops being free)
            p.occupy(got[1].units, got[0], got[0] + wall)
            booked.append((got[1].units, got[0], got[0] + wall))
        check_profile_invariants(p)
        if rnd.random() < 0.3:  # and read afresh from the changes alone
            p, p.takes = unlearned(p), p.takes


@pytest.mark.parametrize("seed", range(20))
def test_the_first_segment_with_enough_free_units_is_the_one_a_linear_scan_finds(seed):
    """`_enough` reads strides that grow to 8 * STRIDE segments and halves the one that
    has enough: on profiles hundreds of segments deep (every running job ending at its own
    time), with bookings later on (some unit stops being free: no stride may be passed
    over there) or none, it finds the first segment a scan of every mask finds."""
    rnd = random.Random(seed)
    n = rnd.choice([300, 1000])
    available = (1 << n) - 1
    running = [(float(rnd.randrange(1, 3 * n)), 1 << u) for u in rnd.sample(range(n), n - rnd.randrange(0, 5))]
    p = Profile.from_running(0.0, available, running)
    for _ in range(rnd.choice([0, 0, 3, 30])):  # bookings after now: takes inside strides
        t0 = float(rnd.randrange(1, 3 * n))
        t1 = t0 + float(rnd.randrange(1, n))
        u = lowest(fitting.usable_over(p, t0, t1, (), available, 1), rnd.randrange(1, 4))  # (free throughout)
        p.occupy(u, t0, t1)
    for _ in range(60):
        eligible = available if rnd.random() < 0.5 else rnd.getrandbits(n)
        need = rnd.randrange(1, n + 1)
        c = rnd.randrange(0, len(p.times))
        want = next((k for k in range(c, len(p.times))
                     if (p.mask(k) & eligible).bit_count() >= need), len(p.times))
        fresh = unlearned(p)  # (masks not yet worked out: the strides work them out)
        fresh.takes = p.takes
        assert fitting._enough(fresh, c, eligible, need) == want == fitting._enough(p, c, eligible, need), (seed, need, c)
    assert len(p.times) > 200


@pytest.mark.parametrize("seed", range(10))
def test_far_masks_stay_exact_as_a_base_profile_changes_and_copies_read_them(seed):
    """A base profile lays far masks out as far as its last copy read (`_lay_far`); jobs
    starting from now, jobs ending early and time moving on keep them exact, and so do a
    copy's bookings; each copy's search through them finds what a scan of the masks
    worked out front to back finds, and its reads give those masks."""
    rnd = random.Random(seed)
    n = rnd.choice([100, 300])  # (segments enough for far masks: a read 2 * FAR deep lays them)
    available = (1 << n) - 1
    running = {u: float(rnd.randrange(1, 3 * n)) for u in rnd.sample(range(n), n - 4)}
    base = Profile.from_running(0.0, available, [(e, 1 << u) for u, e in running.items()])
    now, laid = 0.0, 0
    for _ in range(30):
        p = base.derive(now)
        check_profile_invariants(p)
        for _ in range(4):  # the search, from the first segments, where heads search from
            p.settle()  # (as `earliest` does: a booking from now waits for it)
            masks = front_to_back(p)
            eligible = available if rnd.random() < 0.7 else rnd.getrandbits(n)
            need = rnd.randrange(1, n + 1)
            c = rnd.randrange(0, min(3, len(p.times)))
            want = next((k for k in range(c, len(p.times)) if (masks[k] & eligible).bit_count() >= need),
                        len(p.times))
            assert fitting._enough(p, c, eligible, need) == want, (seed, need, c)
            k = rnd.randrange(0, len(p.times))
            assert p.usable(k) == masks[k]
            assert list(p.back(k)) == masks[k::-1]
            if rnd.random() < 0.5:  # a booking in the copy, later on: a take past the far masks
                t0 = rnd.choice(p.times)
                t1 = t0 + float(rnd.randrange(1, n))
                u = lowest(fitting.usable_over(p, t0, t1, (), available, 1), rnd.randrange(1, 3))
                p.occupy(u, t0, t1)
            check_profile_invariants(p)
        laid += len(base.far_t)
        now += float(rnd.randrange(0, 12))
        base.drop_before(now)
        for u in [u for u, e in running.items() if e <= now]:
            del running[u]
        if running and rnd.random() < 0.4:  # a job ends early: its units are free from now
            u = rnd.choice(sorted(running))
            base.release(1 << u, now, running.pop(u))
        idle = [u for u in range(n) if u not in running]
        for u in rnd.sample(idle, min(len(idle), rnd.randrange(0, 4))):  # jobs start now
            running[u] = now + float(rnd.randrange(1, 3 * n))
            base.occupy(1 << u, now, running[u])
        check_profile_invariants(base)
    assert laid  # (far masks were laid)


@pytest.mark.parametrize("seed", range(6))
def test_a_future_start_chooses_from_its_last_tiers_as_from_its_first(seed):
    """Where no unit stops being free before a start, its tiers are offered last first
    too, and a whole-node choice reads the few it leaves from the back: the same tiers
    reversed, the same units as the choice read from the front (`_lowest_in_tiers`)."""
    rnd = random.Random(seed)
    n = rnd.choice([12, 80, 500])
    pool = NodePool([Node(f"n{i}", features={"ib"} if rnd.random() < 0.7 else set()) for i in range(n)])
    running = [(float(rnd.randrange(1, 60) * 10), 1 << u) for u in rnd.sample(range(n), n * 7 // 8)]
    p = Profile.from_running(0.0, (1 << n) - 1, running)
    offered = 0
    for _ in range(40):
        req = Request(nodes=rnd.randrange(1, n // 2), features=("ib",) if rnd.random() < 0.3 else ())
        t = rnd.choice(p.times)
        p.ensure(t + 100.0)
        m = fitting.usable_over(p, t, t + 100.0, (), pool.eligible(req), 1)
        tiers = fitting.tiers(p, m, t, t + 100.0, ())
        back = tiers.last_first()
        forward = list(fitting.tiers(p, m, t, t + 100.0, ()))
        if back is None or m.bit_count() <= req.nodes:
            continue
        offered += 1
        assert list(back) == forward[::-1]
        assert (pool.choose(req, fitting.tiers(p, m, t, t + 100.0, ())).units
                == _lowest_in_tiers(forward, None, req.nodes) == naive_choose_whole(pool, req, forward))
        if rnd.random() < 0.5:  # a booking from now: still no unit stops being free later
            u = lowest(p.mask(0), rnd.randrange(0, 3))
            p.occupy(u, 0.0, float(rnd.randrange(1, 60) * 10))
    assert offered > 10


@pytest.mark.parametrize("seed", range(6))
def test_bookings_from_now_wait_for_one_merge_and_fit_the_same(seed):
    """Bookings from now on a profile with no take after now change segment 0 alone (their
    ends wait in `_ends`): every fit from now in between, and every mask once they are
    merged (a few one by one, many in one merge), agree with the naive timeline."""
    rnd = random.Random(seed)
    pool = NodePool([Node(f"n{i}", cores=8, shared=True) for i in range(rnd.choice([4, 30]))])
    n = len(pool.unit_node)
    available = (1 << n) - 1
    busy = rnd.sample(range(n), n // 4)
    running = [(float(rnd.randrange(1, 40) * 10), 1 << u) for u in busy]
    p = Profile.from_running(0.0, available, running)
    ops = [("occupy", u, -INF, e) for e, u in running]
    p.hold(3, 55.0, 305.0)  # a promise, which new segments inside it carry on
    for _ in range(rnd.choice([10, n])):
        req = Request(nodes=0, ppn=0, cores=rnd.choice([1, 1, 1, 2, 5]))
        wall = float(rnd.randrange(1, 60) * 10) if rnd.random() < 0.5 else rnd.uniform(1, 600)
        need = pool.need(req)
        alloc = fitting.fit(p, pool, req, 0.0, wall, (), need)
        # the reference: a settled copy (every booking's end a boundary) read the same way
        q = p.derive(0.0) if not p.pending else None
        if q is None:
            q = Profile(0.0, available)
            q.times, q.free, q.rel, q.take = p.times[:], p.free[:], p.rel[:], p.take[:]
            q.resv, q.held, q.holding, q.pending = p.resv[:], p.held[:], p.holding, list(p.pending)
            q.settle()
        want = fitting.fit(q, pool, req, 0.0, wall, (), need)
        assert (alloc and (alloc.units, alloc.nodes)) == (want and (want.units, want.nodes))
        if alloc is None:
            continue
        p.occupy(alloc.units, 0.0, wall)
        ops.append(("occupy", alloc.units, 0.0, wall))
        check_profile_invariants(p)
        assert p.free[0] == naive_free(ops, available, 0.0)
    assert p.pending or len(ops) == len(running)  # (bookings waited)
    p.settle()
    check_profile_invariants(p)
    for when in p.times + [rnd.uniform(0, 700) for _ in range(5)]:
        assert p.mask(p.segment(when)) == naive_free(ops, available, when), (seed, when)
        assert p.held[p.segment(when)] == (3 if 55.0 <= when < 305.0 else 0)


def naive_room(p, t0, t1):
    """The fewest units free and not promised in [t0, t1), segment by segment from the masks."""
    ks = [k for k in range(len(p.times)) if p.times[k] < t1 and (k + 1 == len(p.times) or p.times[k + 1] > t0)]
    return min(p.mask(k).bit_count() - p.held[k] for k in ks)


def naive_most(p, t0, t1):
    """The most units free and not promised in [t0, t1) from now on (-1: none of it left)."""
    ks = [k for k in range(len(p.times)) if p.times[k] < t1 and (k + 1 == len(p.times) or p.times[k + 1] > t0)]
    return max((p.mask(k).bit_count() - p.held[k] for k in ks), default=-1) if t1 > p.now else -1


def naive_earliest_count(p, wall, need, not_before):
    """The first of not_before and the later boundaries where `need` units have room for `wall`."""
    for t in [not_before] + [t for t in p.times if t > not_before]:
        if t + wall > p.limit:
            return None
        if naive_room(p, t, t + wall) >= need:
            return t
    return None


def checked_earliest_count(p, wall, need, not_before=0.0):
    """`earliest_count` (read from the room list) and `room`, against the naive reads."""
    t0 = counts.earliest_count(p, wall, (), need, not_before)
    assert t0 == naive_earliest_count(p, wall, need, not_before)
    if t0 is not None:
        assert p.room(t0, t0 + wall) == naive_room(p, t0, t0 + wall)
    return t0


def busy_profile(rnd, least):
    """A profile over 4, 8 or 16 units from now (0), `least(n)` or more of them busy until
    10-110 s: (profile, units, running as (end, unit))."""
    n = rnd.choice([4, 8, 16])
    bits = list(range(n))
    rnd.shuffle(bits)
    running = [(float(rnd.randrange(1, 12) * 10), 1 << b) for b in bits[:rnd.randrange(least(n), n)]]
    return Profile.from_running(0.0, (1 << n) - 1, running), n, running


def hold_at_earliest(p, rnd, n, times, not_before):
    """Hold `times` random counts (1..n units, 10-90 s), each at its earliest start from
    `not_before()`, as a conservative pass holds them: [(need, start, walltime)]."""
    held = []
    for _ in range(times):
        need, wall = rnd.randrange(1, n + 1), float(rnd.randrange(1, 10) * 10)
        t0 = counts.earliest_count(p, wall, (), need, not_before())
        if t0 is not None:
            p.hold(need, t0, t0 + wall)
            held.append((need, t0, wall))
    return held


@pytest.mark.parametrize("seed", range(40))
def test_a_held_count_stays_exactly_when_giving_it_back_finds_it_again(seed, monkeypatch):
    """`stays` (read from cached runs) against the definition: give the count back and ask
    `earliest_count`; and `promise` against `room` then `hold`.  Counts are held at their
    earliest, as a conservative pass holds them, then room is freed (early ends, counts
    given back) and every count still held is asked, between and after further changes.
    Half the seeds read where a count would move from its runs however near now it is."""
    if seed % 2:
        monkeypatch.setattr(profile, "RUNS_FROM", 0)
    rnd = random.Random(seed)
    p, n, running = busy_profile(rnd, lambda n: n // 2)
    twin = Profile.from_running(0.0, (1 << n) - 1, running)  # holds made by `promise` instead
    held = []  # (need, t0, walltime)
    for _ in range(rnd.randrange(3, 15)):
        need, wall = rnd.randrange(1, n + 1), float(rnd.randrange(1, 10) * 10)
        t0 = checked_earliest_count(p, wall, need, rnd.choice([0.0, 0.0, float(rnd.randrange(0, 100))]))
        if t0 is None:
            continue
        assert p.room(t0, t0 + wall) >= need
        p.hold(need, t0, t0 + wall)
        assert twin.promise(need, t0, t0 + wall)
        held.append((need, t0, wall))
    assert [twin.room(t, t + 1) for t in p.times] == [p.room(t, t + 1) for t in p.times]
    assert not twin.promise(n + 1, 0.0, 10.0)  # never room for more than the machine
    ended = rnd.sample(running, rnd.randrange(0, len(running) + 1))
    for end, units in ended:  # early ends
        cut = rnd.choice([0.0, end / 2])
        p.release(units, cut, end)
    running = [r for r in running if r not in ended]
    for _ in range(len(held)):
        if rnd.random() < 0.3 and held:  # a count given back (deleted, or started)
            need, t0, wall = held.pop(rnd.randrange(len(held)))
            p.hold(-need, t0, t0 + wall)
        if rnd.random() < 0.3 and running:  # an early end while runs are cached
            end, units = running.pop(rnd.randrange(len(running)))
            p.release(units, float(rnd.randrange(0, int(end))), end)
        for need, t0, wall in held:
            if t0 <= p.now:
                continue
            own = counts.earliest_count(p, wall, (), need, 0.0, own=t0)  # (asked with the count still held)
            p.hold(-need, t0, t0 + wall)
            earliest = checked_earliest_count(p, wall, need)
            p.hold(need, t0, t0 + wall)
            assert earliest is not None and earliest <= t0
            assert counts.stays(p, need, t0, wall) == (earliest == t0), (seed, need, t0, wall, earliest)
            assert own == (earliest if earliest < t0 else None), (seed, need, t0, wall, earliest, own)


@pytest.mark.parametrize("seed", range(40))
def test_runs_kept_through_changes_are_what_reading_them_afresh_gives(seed, monkeypatch):
    """A count's runs, kept through bookings, releases, promises, moves and new and
    dropped boundaries (each cut back to what the change left right), against runs read
    afresh from the room list: every entry still kept, and the earliest start read.  Half
    the seeds cut every count's runs back after a few changes, not thousands."""
    if seed % 2:
        monkeypatch.setattr(profile, "RUNS_LOG", 3)
    rnd = random.Random(seed)
    p, n, running = busy_profile(rnd, lambda n: n // 2)
    p = p.derive(0.0, rooms=True)
    held = [list(h) for h in hold_at_earliest(p, rnd, n, rnd.randrange(3, 12), lambda: float(rnd.randrange(0, 100)))]
    needs = sorted({rnd.randrange(1, n + 1) for _ in range(4)})
    for _ in range(30):
        for need in needs:  # (runs left read as far as a random segment)
            (p.runs_by_need.get(need) or counts.new_runs(p, need)).longest(rnd.randrange(len(p.times)))
        op = rnd.random()
        if op < 0.25 and running:  # an early end
            end, units = running.pop(rnd.randrange(len(running)))
            p.release(units, float(rnd.randrange(0, int(end))), end)
        elif op < 0.5 and held:  # a count moved (new boundaries, old ones dropped)
            h = rnd.choice(held)
            t = max(0.0, h[1] + rnd.choice([-1, 1]) * float(rnd.randrange(0, 12) * 5))
            p.shift(h[0], (h[1], h[1] + h[2]), (t, t + h[2]))
            h[1] = t
        elif op < 0.7 and held:  # a count given back
            need, t0, wall = held.pop(rnd.randrange(len(held)))
            p.hold(-need, t0, t0 + wall)
        elif op < 0.85:  # a booking on units free throughout its window
            t0 = float(rnd.randrange(0, 150))
            t1 = t0 + float(rnd.randrange(1, 10) * 10)
            free = p.mask(p.segment(t0))
            for k in range(p.segment(t0), len(p.times)):
                if p.times[k] < t1:
                    free &= p.mask(k)
            if free:
                p.occupy(lowest(free, 1), t0, t1)
        else:  # a new count at its earliest
            held += [list(h) for h in hold_at_earliest(p, rnd, n, 1, lambda: float(rnd.randrange(0, 100)))]
        for need in needs:
            kept = p.runs_by_need.get(need) or counts.new_runs(p, need)
            kept.longest(0)  # (cut back to what the changes left right)
            fresh = counts.Runs(p, p.rooms(), need)
            fresh.longest(len(kept.best) - 1)
            assert (kept.best, kept.starts) == (fresh.best, fresh.starts), (seed, need)
            for k in range(len(p.times)):
                for wall in (5.0, 30.0, 200.0):
                    assert kept.earliest(wall, k) == counts.Runs(p, p.rooms(), need).earliest(wall, k), (seed, need, k)


def profile_state(p):
    """What a profile says, boundaries and all (not how much of it is worked out yet)."""
    n = len(p.times)
    return (p.times, p.rel, p.take, p.resv, p.held, [p.mask(k) for k in range(n)], p.rooms(), p.holding,
            p.takes, p.far_t, p.far_m)


@pytest.mark.parametrize("seed", range(40))
def test_a_count_shifted_leaves_the_profile_giving_it_back_and_holding_it_again_leaves(seed):
    """`shift` (only the segments where the windows differ) against `hold(-count, old)`
    then `hold(count, new)`: the same boundaries, promises, masks and room list, moves
    earlier, later, cut short at now, overlapping or apart, in a plain profile, a base one
    (with its free counts kept, as the scheduler's running-jobs profile keeps them) and a
    pass's copy (with its room list)."""
    import copy
    rnd = random.Random(seed)
    p, n, running = busy_profile(rnd, lambda n: n // 2)
    kind = seed % 3
    if kind:
        p.keep_counts(True)  # (the base keeps its free counts from now on)
        copied = p.derive(0.0, rooms=True)
        assert copied.rooms_valid()
        p = copied if kind == 2 else p
    held = [list(h) for h in hold_at_earliest(p, rnd, n, rnd.randrange(3, 15), lambda: float(rnd.randrange(0, 100)))]
    for _ in range(20):
        if not held:
            break
        if rnd.random() < 0.2 and running:  # an early end: boundaries and masks change under the counts
            end, units = running.pop(rnd.randrange(len(running)))
            p.release(units, min(end, float(rnd.randrange(0, 120))), end)
        h = rnd.choice(held)
        need, t0, wall = h
        t = max(0.0, t0 + rnd.choice([-1, 1]) * float(rnd.randrange(0, 12) * 5))
        new_wall = wall if rnd.random() < 0.8 else float(rnd.randrange(1, 10) * 10)
        twin = copy.deepcopy(p)
        twin.hold(-need, t0, t0 + wall)
        twin.hold(need, t, t + new_wall)
        p.shift(need, (t0, t0 + wall), (t, t + new_wall))
        check_profile_invariants(p)
        assert profile_state(p) == profile_state(twin), (seed, need, t0, wall, t, new_wall)
        h[1:] = [t, new_wall]


@pytest.mark.parametrize("seed", range(20))
def test_a_profile_moved_to_a_later_now_keeps_its_room_list(seed):
    """`advance` (a pass carried on with new jobs only) keeps the room list, which is what
    building it again gives, and what is read from it (counts, room, whether a count
    stays: runs cached before it moved are read again) is a fresh copy's."""
    rnd = random.Random(seed)
    p, n, running = busy_profile(rnd, lambda n: 1)
    held = hold_at_earliest(p, rnd, n, rnd.randrange(1, 10), lambda: float(rnd.randrange(0, 50)))
    asked = [(need, t0, wall, counts.stays(p, need, t0, wall)) for need, t0, wall in held if t0 > 0]  # (runs cached)
    later = rnd.uniform(0.0, p.times[1] if len(p.times) > 1 else 100.0)
    p.rooms()
    assert p.advance(later) and p.rooms_valid()
    check_profile_invariants(p)
    fresh = p.derive(later, rooms=True)
    for need in range(1, n + 1):
        for wall in (5.0, 30.0, 200.0):
            assert counts.earliest_count(p, wall, (), need, later) == counts.earliest_count(fresh, wall, (), need, later)
            assert p.room(later, later + wall) == fresh.room(later, later + wall)
    for need, t0, wall, _ in asked:
        if t0 > later:
            assert counts.stays(p, need, t0, wall) == counts.stays(fresh, need, t0, wall)


@pytest.mark.parametrize("seed", range(40))
def test_a_count_needing_more_room_than_the_freed_spans_have_stays_where_it_is(seed):
    """plan._Freed against `stays`: counts found unable to move, then room freed in logged
    spans (early ends, counts given back; new counts taken too), some of them read before
    later spans are added: a count `may` rules out still stays.  And `counts.most`
    against the room read segment by segment."""
    assert sum(freed_spans_trial(random.Random(seed * 8 + trial)) for trial in range(8))  # (some ruled out)


def test_a_group_of_counts_stays_as_far_as_each_count_stays():
    """`counts.staying` against `stays` of each count that `may` does not rule out: groups
    of counts held at their earliest, after early ends freed room (and with the runs of
    some counts cached).  It counts exactly the counts before the first that would move,
    and its summary settles many groups that all stay without asking each."""
    summary = each = 0
    for seed in range(200):
        rnd = random.Random(seed)
        p, n, running = busy_profile(rnd, lambda n: n // 2)
        held = hold_at_earliest(p, rnd, n, rnd.randrange(3, 20), lambda: rnd.choice([0.0, float(rnd.randrange(0, 100))]))
        for end, units in rnd.sample(running, rnd.randrange(0, len(running) + 1)):
            p.release(units, rnd.choice([0.0, end / 2]), end)
        later = [h for h in held if h[1] > p.now]
        for _ in range(10 if later else 0):
            if rnd.random() < 0.5:
                counts.stays(p, *rnd.choice(later))  # (runs cached before the group is asked)
            group = rnd.sample(later, rnd.randrange(1, len(later) + 1))
            asked, stays = [], counts.stays
            counts.stays = lambda q, *count: asked.append(count) or stays(q, *count)  # (what `staying` asks of each)
            try:
                most = rnd.choice([n, n, rnd.randrange(0, n + 1)])  # (a count of more stays, as plan._Freed says)
                found = counts.staying(p, HeldGroup([(t0, need, wall) for need, t0, wall in group]),
                                       lambda need: need <= most)
            finally:
                counts.stays = stays
            stay = [need > most or stays(p, need, t0, wall) for need, t0, wall in group]
            assert found == (stay + [False]).index(False), (seed, group)
            if all(stay):
                summary, each = summary + (not asked), each + bool(asked)
    assert summary and each, (summary, each)


def freed_spans_trial(rnd) -> int:
    """One trial; how many counts `may` ruled out."""
    from hpcsched.core.plan import _Freed
    p, n, running = busy_profile(rnd, lambda n: n // 2)
    held = hold_at_earliest(p, rnd, n, rnd.randrange(3, 20), lambda: rnd.choice([0.0, float(rnd.randrange(0, 100))]))
    settled = [h for h in held if h[1] > 0 and counts.stays(p, *h)]
    spans = []
    for end, units in rnd.sample(running, rnd.randrange(0, len(running) + 1)):  # early ends
        cut = rnd.choice([0.0, end / 2, float(rnd.randrange(0, int(end)))])
        p.release(units, cut, end)
        spans.append((cut, end))
    freed, ruled_out = _Freed(p, spans), 0
    for _ in range(rnd.randrange(1, 6)):
        for need, t0, wall in settled:
            for a, b in freed.spans:
                assert counts.most(p, a, b) == naive_most(p, a, b)
            if not freed.may(need):
                ruled_out += 1
                assert counts.stays(p, need, t0, wall), (need, t0, wall, freed.spans)
        others = [h for h in held if h not in settled]
        if others and rnd.random() < 0.6:  # a count given back: room grows there
            need, t0, wall = others[rnd.randrange(len(others))]
            held.remove((need, t0, wall))
            p.hold(-need, t0, t0 + wall)
            freed.spans.append((t0, t0 + wall))
        else:  # a new count taken: room shrinks, no span
            need, wall = rnd.randrange(1, n + 1), float(rnd.randrange(1, 10) * 10)
            t0 = counts.earliest_count(p, wall, (), need, 0.0)
            if t0 is not None:
                p.hold(need, t0, t0 + wall)
                held.append((need, t0, wall))
    return ruled_out


def test_altering_a_queued_jobs_walltime_lets_it_backfill():
    s = scheduler(4)
    s.submit(job(3, 100), 0)
    s.iterate(0)
    big = s.submit(job(4, 100), 1)  # waits for the first: reservation at 100
    long = s.submit(job(1, 500), 2)  # would delay it
    assert [st.job_id for st in s.iterate(2).started] == []
    s.alter(long.id, 3, walltime=50.0)
    assert [st.job_id for st in s.iterate(3).started] == [long.id]
    assert big.state.value == "queued"


def test_conservative_keeps_free_counts_only_while_jobs_wait():
    """Nothing waiting (every job started on arrival), a conservative scheduler's profile of
    running jobs keeps no free count per segment and no mask past now worked out, so a start
    touches one segment and an end only those known; once a job waits, counts are kept for
    the next pass's room list (and are what the masks say)."""
    from hpcsched import ALL
    sched = scheduler(64, depth=ALL)
    for i in range(40):
        sched.submit(job(1, wall=float(100 + 10 * i)), now=float(i))
        sched.iterate(float(i))
    base = sched.runs.base
    assert len(sched.running()) == 40 and base._counts is None and base.known == 1
    sched.job_ended(sched.running()[0].id, 40.0, 0)
    sched.submit(job(64, wall=50.0), now=40.0)
    sched.iterate(40.0)
    assert base._counts == [base.mask(k).bit_count() for k in range(len(base.times))]
