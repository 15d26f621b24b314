"""Why a profile keeps its segments as parallel lists, not one record per segment (#77).

    python3 benchmarks/segments.py [--trace KTH|RICC] [--jobs 5000] [--backfill easy|conservative]
                                   [--pool 49152]

Replays a trace's first --jobs jobs (KTH-SP2 on its 100 nodes, or RICC-2010 on 1,024 as
benchmarks/conservative.md does; FIFO, EASY or conservative backfill) and records every
pass's copy of the kept profile (Profile.derive): how many there are and how many segments
each copies; with --pool N, also benchmarks/pass_scale.py's pass on a pool of N nodes (half
busy, 10,000 queued).  Then, at the mean segment count, times the copy as the profile
makes it (a slice of each of six lists) against the same segments as records (one mutable
object each, so a copy makes one object per segment), and a booking's mask update
(`Profile._change`) both ways.  Printed: each figure, and what the copies would add.
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
import timeit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
TRACES = {"KTH": (os.path.join(ROOT, "..", "shared", "traces", "KTH-SP2-1996-2.1-cln.swf.gz"), 100),
          "RICC": (os.path.join(ROOT, "..", "shared", "traces", "RICC-2010-2.swf.gz"), 1024)}


class Segment:
    """A segment as one record: what `Profile` keeps in its parallel lists at one index."""

    __slots__ = ("free", "rel", "take", "resv", "held")

    def __init__(self, free, rel, take, resv, held):
        self.free, self.rel, self.take, self.resv, self.held = free, rel, take, resv, held


def copies(trace: str, jobs: int, backfill: str) -> tuple[list[int], float]:
    """The segment count of every kept-profile copy a replay of `trace`'s first `jobs`
    makes, and the replay's CPU seconds."""
    from hpcsched.core.profile import Profile
    from hpcsched.sim import swf
    from hpcsched.sim.simulate import simulate
    sizes, derive = [], Profile.derive

    def counted(self, *args, **kwargs):
        sizes.append(len(self.times))
        return derive(self, *args, **kwargs)
    Profile.derive = counted
    path, nodes = TRACES[trace]
    records = list(swf.read(path))[:jobs]
    t = time.process_time()
    try:
        simulate(records, policy="fifo", backfill=backfill, nodes=nodes, drain=False)
    finally:
        Profile.derive = derive
    return sizes, time.process_time() - t


def pass_copies(nodes: int) -> tuple[list[int], float]:
    """The segment counts of the copies one pass_scale pass on `nodes` makes, and its time."""
    import gc

    from pass_scale import pool, setup

    from hpcsched.core.profile import Profile
    sched = setup(pool(nodes), 10000, "fifo", "easy", 0)
    sizes, derive = [], Profile.derive

    def counted(self, *args, **kwargs):
        sizes.append(len(self.times))
        return derive(self, *args, **kwargs)
    Profile.derive = counted
    gc.collect()
    t = time.perf_counter()
    try:
        sched.iterate(60.0)
    finally:
        Profile.derive = derive
    return sizes, time.perf_counter() - t


def per_call(fn, number: int = 2000) -> float:
    return min(timeit.repeat(fn, number=number, repeat=5)) / number


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", choices=sorted(TRACES), default="KTH")
    ap.add_argument("--jobs", type=int, default=5000)
    ap.add_argument("--backfill", choices=("easy", "conservative"), default="easy")
    ap.add_argument("--pool", type=int, help="also a pass on a pool of this many nodes")
    args = ap.parse_args(argv)
    path, nodes = TRACES[args.trace]
    if not os.path.exists(path):
        print(f"segments: {path} is absent", file=sys.stderr)
        return 1
    sizes, cpu = copies(args.trace, args.jobs, args.backfill)
    compare(f"{args.trace}, first {args.jobs} jobs on {nodes} nodes (FIFO, {args.backfill}; {cpu:.2f} s CPU)",
            sizes, cpu, nodes)
    if args.pool:
        sizes, seconds = pass_copies(args.pool)
        compare(f"one pass on {args.pool} nodes, half busy, 10,000 queued ({seconds * 1e3:.1f} ms)", sizes, seconds,
                args.pool)
    return 0


def compare(what: str, sizes: list[int], cpu: float, width: int) -> None:
    """Time a copy and a booking's update of segments of the mean size, both ways."""
    if not sizes:
        print(f"{what}: no copy of the kept profile")
        return
    n = max(1, round(statistics.mean(sizes)))
    rnd = random.Random(1)
    free = [rnd.getrandbits(width) for _ in range(n)]
    lists = [free, [0] * n, [0] * n, [()] * n, [0] * n, [float(i) for i in range(n)]]
    records = [Segment(f, 0, 0, (), 0) for f in free]
    units = rnd.getrandbits(width)

    def change_lists():
        free[:] = [m ^ units for m in free]

    def change_records():
        for s in records:
            s.free ^= units

    copy_l = per_call(lambda: [lst[:] for lst in lists])
    copy_r = per_call(lambda: (lists[5][:], [Segment(s.free, s.rel, s.take, s.resv, s.held) for s in records]))
    change_l, change_r = per_call(change_lists), per_call(change_records)
    print(f"{what}: {len(sizes)} copies of the kept profile, {statistics.mean(sizes):.1f} segments each on "
          f"average (max {max(sizes)})")
    print(f"a copy of {n} segments: parallel lists {copy_l * 1e6:.2f} us, records {copy_r * 1e6:.2f} us "
          f"({copy_r / copy_l:.1f}x): the copies would add {(copy_r - copy_l) * len(sizes):.2f} s "
          f"({(copy_r - copy_l) * len(sizes) / cpu:.0%} of it)")
    print(f"a booking's mask update over {n} segments: lists {change_l * 1e6:.2f} us, records "
          f"{change_r * 1e6:.2f} us ({change_r / change_l:.2f}x)")


if __name__ == "__main__":
    sys.exit(main())
