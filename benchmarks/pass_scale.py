"""Time one scheduling pass at scale.

    python3 benchmarks/pass_scale.py [--repeat 3] [--policy fifo|cobalt|simon] [--backfill easy]

Each case: a machine (a pool of N whole nodes, a built-in Blue Gene/Q of blocks, or a
built-in Cray with its placement), half of it busy with running jobs, Q jobs queued with
random sizes (log-uniform, 1 node to a quarter of the machine) and walltimes (5 min to
24 h); then one pass (prioritise, order, plan with reservations and backfill, apply) is
timed, after a gc.collect() so that a collection the set-up left pending is not counted.
Prints the median and best of --repeat fresh runs, and what the pass decided.  The rows of
one machine at several queue lengths, and of machines of several sizes, show how the cost
grows.  `--only mira` runs the cases whose label starts so.
"""
from __future__ import annotations

import argparse
import gc
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from hpcsched import Job, Request, build, parse_backfill  # noqa: E402

def pool(nodes: int) -> dict:
    width = len(str(nodes - 1))
    return {"nodes": [{"names": f"n[{0:0{width}d}-{nodes - 1:0{width}d}]"}]}


# (label, machine config, queued, target seconds or None)
CASES = [("pool", pool(1024), 1000, None), ("pool", pool(49152), 10000, 0.050), ("pool", pool(816), 100000, 1.0),
         ("bgq-4rack", {"machine": "bgq-4rack"}, 10000, None),
         ("mira", {"machine": "mira"}, 1000, None), ("mira", {"machine": "mira"}, 10000, 0.050),
         ("mira", {"machine": "mira"}, 30000, None),
         ("xt3 cuboid", {"machine": "xt3", "placement": "cuboid"}, 10000, None),
         ("kraken cuboid", {"machine": "kraken", "placement": "cuboid"}, 10000, None),
         ("bluewaters first-fit", {"machine": "bluewaters"}, 10000, None),
         ("bluewaters cuboid", {"machine": "bluewaters", "placement": "cuboid"}, 1000, None),
         ("bluewaters cuboid", {"machine": "bluewaters", "placement": "cuboid"}, 10000, 0.200),
         ("bluewaters cuboid", {"machine": "bluewaters", "placement": "cuboid"}, 30000, None)]


def setup(machine: dict, queued: int, policy: str, backfill: str, seed: int):
    sched = build({**machine, "queues": {"batch": {}}, "priority": {"policy": policy}, "backfill": backfill})
    topo = sched.topology
    nodes = topo.node_count
    rng = random.Random(seed)
    for _ in range(100000):  # fill half the machine
        busy = topo.measure(sched.busy)
        if busy >= nodes // 2:
            break
        size = min(nodes // 2 - busy, max(1, int(2 ** rng.uniform(0, max(1, (nodes // 8).bit_length())))))
        sched.submit(Job(owner=f"u{rng.randrange(50)}", request=Request(nodes=size),
                         walltime=rng.uniform(3600, 86400)), now=0)
        sched.iterate(0)
    for _ in range(queued):
        size = max(1, int(2 ** rng.uniform(0, (nodes // 4).bit_length() - 1)))
        sched.submit(Job(owner=f"u{rng.randrange(200)}", request=Request(nodes=size),
                         walltime=float(rng.randrange(300, 86400, 60))), now=rng.uniform(0, 60))
    return sched


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--policy", default="fifo")
    ap.add_argument("--backfill", default="easy")
    ap.add_argument("--only", default="", help="run the cases whose label starts with this")
    args = ap.parse_args(argv)
    parse_backfill(args.backfill)
    print(f"one scheduling pass, policy={args.policy} backfill={args.backfill}, "
          f"median (best) of {args.repeat} fresh runs")
    for label, machine, queued, target in CASES:
        if not label.startswith(args.only):
            continue
        times = []
        for r in range(args.repeat):
            sched = setup(machine, queued, args.policy, args.backfill, seed=r)
            nodes = sched.topology.node_count
            gc.collect()  # time the pass, not a collection the set-up left pending
            t0 = time.perf_counter()
            plan = sched.iterate(60.0)
            times.append(time.perf_counter() - t0)
        verdict = "" if target is None else f"  target <= {target * 1000:.0f} ms: " \
                                            f"{'met' if statistics.median(times) <= target else 'MISSED'}"
        print(f"{label:<21}{nodes:>6} nodes x {queued:>6} queued: {statistics.median(times) * 1000:8.1f} ms "
              f"({min(times) * 1000:.1f}); started {len(plan.started)}, reserved {len(plan.reserved)}"
              f"{verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
