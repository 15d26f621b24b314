"""`hpcsched demo`: the embedded default test rig scheduling a small mixed workload.

Everything goes through the library API with a simulated clock: routing into
prod-capability / prod-short / prod-long, EASY backfill around a capability job, a held job
released later, and an afterok dependency.
"""
from __future__ import annotations

import heapq

from .config import build, default_config
from .core.jobs import Dependency, DepType, Hold, Job, Request
from .core.timefmt import hms

WORKLOAD = [  # (name, owner, nodes, walltime, run time, extra)
    ("big-sim", "alice", 12, 3600, 3000, {}),
    ("capability", "bob", 16, 1800, 1500, {}),
    ("post", "alice", 2, 900, 600, {"after": "big-sim"}),
    ("short-a", "carol", 2, 1200, 1100, {}),
    ("short-b", "carol", 3, 7200, 5000, {}),
    ("long-run", "dave", 2, 8 * 3600, 6 * 3600, {}),
    ("held", "erin", 1, 600, 300, {"hold": True}),
]


def run(out) -> int:
    sched = build(default_config())
    ids, runs = {}, {}
    for name, owner, nodes, wall, run_time, extra in WORKLOAD:
        deps = [Dependency(DepType.AFTEROK, ids[extra["after"]])] if "after" in extra else []
        job = sched.submit(Job(name=name, owner=owner, request=Request(nodes=nodes), walltime=wall,
                               dependencies=deps, holds={Hold.USER} if extra.get("hold") else set()), 0)
        ids[name], runs[job.id] = job.id, run_time
        out.write(f"submitted {job.id} {name:<11} {nodes:>2} nodes {hms(wall)} -> {job.queue} ({job.state.value})\n")
    events = [(1000.0, 1, "release")]  # erin releases her hold at t=1000
    now = 0.0
    while True:
        plan = sched.iterate(now)
        for st in plan.started:
            job = sched.job(st.job_id)
            heapq.heappush(events, (now + runs[job.id], 0, job.id))
            out.write(f"t={hms(now)} start {job.id} {job.name:<11} on {','.join(st.allocation.nodes)}"
                      f"{'  (backfill)' if st.backfill else ''}\n")
        for jid, (t, _) in sorted(plan.reserved.items()):
            out.write(f"t={hms(now)}   job {jid} {sched.job(jid).name}: {plan.reason(jid)}\n")
        if not events:
            break
        now, kind, what = heapq.heappop(events)
        if kind == 0:
            job = sched.job_ended(what, now, 0)
            out.write(f"t={hms(now)} end   {job.id} {job.name}\n")
        else:
            sched.release(ids["held"], now)
            out.write(f"t={hms(now)} release {ids['held']} held\n")
    out.write("\njob  name         queue            submit    start      end     wait\n")
    for job in sched.jobs.values():
        out.write(f"{job.id:<4} {job.name:<12} {job.queue:<16} {hms(job.submit_time)} {hms(job.start_time)} "
                  f"{hms(job.end_time)} {hms(job.start_time - job.submit_time)}\n")
    return 0
