"""Time the share tree's passes at CC-IN2P3's scale.

    python3 benchmarks/fairshare.py [--queued 10000,100000,1000000]

A machine of 816 shared nodes x 43 cores (35,088 cores), the gridengine policy over a
share tree of 30 groups x 20 users (shares 1 to 30 per group), run time x slots decayed
by a 90-day half-life, every user with some usage already; two quota sets: 1,500 slots
per group and 200 running jobs per user (so the pass passes over jobs a quota holds).  For each queue length Q:
Q single-core jobs of 1 to 24 hours are submitted round-robin over the 600 users; then

    first  the first pass (it starts 35,088 jobs and reserves for the next)
    after  a pass after one running job ends (it starts one job)

are timed (after a gc.collect()), with the submissions' time for scale (--no-quotas: the
share tree alone; --per-node-cap N: a third quota set read node by node, `hosts = "{*}"`
with N slots, which narrows every job's placement).  Targets: first <= 2 s and after <= 100 ms at 1,000,000 queued.
"""
from __future__ import annotations

import argparse
import gc
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from hpcsched import Job, Request, build  # noqa: E402

GROUPS, USERS = 30, 20


def site(quotas: bool = True, cap: int = 0) -> dict:
    nodes = {"Root": {"children": [f"g{g}" for g in range(GROUPS)]}}
    for g in range(GROUPS):
        nodes[f"g{g}"] = {"shares": 1 + g, "children": [f"g{g}/default"]}
        nodes[f"g{g}/default"] = {"shares": 1, "kind": "user"}
    return {"nodes": [{"names": "ccwl[0001-0816]", "cores": 43, "shared": True, "memory": 43 * 3000}],
            "queues": {"long": {}}, "default_queue": "long",
            "priority": {"policy": "gridengine"},
            "usage": {"metric": "slots", "half_life": 2160 * 3600.0, "window": 90 * 86400.0},
            "sharetree": {"compensation_factor": 2, "levels": ["group", "user"], "nodes": nodes},
            "quotas": [{"name": "groups", "rules": [{"groups": "{*}", "limit": {"slots": 1500}}]},
                       {"name": "users", "rules": [{"users": "{*}", "limit": {"jobs": 200}}]}] if quotas else []
            + ([{"name": "per-node", "rules": [{"hosts": "{*}", "limit": {"slots": cap}}]}] if cap else [])}


def case(queued: int, quotas: bool = True, cap: int = 0) -> tuple[float, float, float, int, int]:
    sched = build(site(quotas, cap))
    rng = random.Random(queued)
    for g in range(GROUPS):
        for u in range(USERS):
            sched.usage.charge((f"u{g}.{u}", f"g{g}", ""), rng.uniform(0, 3.6e8), 0.0)
    t0 = time.perf_counter()
    one = Request(nodes=0, ppn=0, cores=1)
    for k in range(queued):
        g, u = k % GROUPS, (k // GROUPS) % USERS
        sched.submit(Job(owner=f"u{g}.{u}", group=f"g{g}", request=one, walltime=rng.uniform(3600, 86400)), 100.0)
    submit = time.perf_counter() - t0
    gc.collect()
    t0 = time.perf_counter()
    plan = sched.iterate(200.0)
    first = time.perf_counter() - t0
    started = len(plan.started)
    victim = min(sched.running(), key=lambda j: j.id)
    sched.job_ended(victim.id, 300.0, 0)
    gc.collect()
    t0 = time.perf_counter()
    plan = sched.iterate(300.0)
    after = time.perf_counter() - t0
    return submit, first, after, started, len(plan.started)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queued", default="10000,100000,1000000")
    ap.add_argument("--no-quotas", action="store_true", help="the share tree alone")
    ap.add_argument("--per-node-cap", type=int, default=0, help="add a hosts {*} slot cap per node")
    args = ap.parse_args(argv)
    print(f"{'queued':>9} {'submit s':>9} {'first s':>8} {'started':>8} {'after ms':>9} {'started':>8}")
    for q in map(int, args.queued.split(",")):
        submit, first, after, s1, s2 = case(q, not args.no_quotas, args.per_node_cap)
        print(f"{q:>9} {submit:>9.1f} {first:>8.3f} {s1:>8} {after * 1000:>9.1f} {s2:>8}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
