"""`hpcsched demo`: the embedded default test rig scheduling a small mixed workload.

Everything goes through the library API on the simulator's clock (sim/engine.py): routing into
prod-capability / prod-short / prod-long, EASY backfill around a capability job, a held job
released later, and an afterok dependency.  On a built-in machine (`--machine bgq-4rack`)
the rig's 16 nodes become the machine's and each job keeps its share of them: on a Blue
Gene it gets a block, shown by name.
"""
from __future__ import annotations

from .config import build, default_config
from .core import nodelist
from .core.jobs import Dependency, DepType, Hold, Job, Request
from .core.timefmt import hms
from .sim.engine import Engine

RIG_NODES = 16  # the default configuration's
WORKLOAD = [  # (name, owner, nodes, walltime, run time, extra)
    ("big-sim", "alice", 12, 3600, 3000, {}),
    ("capability", "bob", 16, 1800, 1500, {}),
    ("post", "alice", 2, 900, 600, {"after": "big-sim"}),
    ("short-a", "carol", 2, 1200, 1100, {}),
    ("short-b", "carol", 3, 7200, 5000, {}),
    ("long-run", "dave", 2, 8 * 3600, 6 * 3600, {}),
    ("held", "erin", 1, 600, 300, {"hold": True}),
]


def run(out, machine: str | None = None) -> int:
    config = default_config()
    if machine is not None:
        del config["nodes"]
        config["machine"] = machine
    sched = build(config)
    scale = sched.topology.node_count // RIG_NODES
    ids, arrivals = {}, []
    for name, owner, nodes, wall, run_time, extra in WORKLOAD:
        deps = [Dependency(DepType.AFTEROK, ids[extra["after"]])] if "after" in extra else []
        job = Job(id=len(ids) + 1, name=name, owner=owner, request=Request(nodes=nodes * scale), walltime=wall,
                  dependencies=deps, holds={Hold.USER} if extra.get("hold") else set())
        ids[name] = job.id
        arrivals.append((0.0, job, run_time, name))

    def submitted(sched, now):  # (events run after the instant's submissions)
        for job in sched.jobs.values():
            out.write(f"submitted {job.id} {job.name:<11} {job.request.nodes:>5} nodes {hms(job.walltime)} "
                      f"-> {job.queue} ({job.state.value})\n")

    def release(sched, now):  # erin releases her hold
        sched.release(ids["held"], now)
        out.write(f"t={hms(now)} release {ids['held']} held\n")

    def show(plan):
        for job in sched.jobs.values():
            if job.end_time == plan.now:
                out.write(f"t={hms(plan.now)} end   {job.id} {job.name}\n")
        for st in plan.started:
            job = sched.job(st.job_id)
            where = nodelist.compress(list(st.allocation.nodes))
            out.write(f"t={hms(plan.now)} start {job.id} {job.name:<11} on {where}"
                      f"{'  (backfill)' if st.backfill else ''}\n")
        for jid in sorted(plan.reserved):
            out.write(f"t={hms(plan.now)}   job {jid} {sched.job(jid).name}: {plan.reason(jid)}\n")

    Engine(sched).run(arrivals, events=[(0.0, submitted), (1000.0, release)], watch=show, keep=True)
    out.write("\njob  name         queue            submit    start      end     wait\n")
    for job in sched.jobs.values():
        out.write(f"{job.id:<4} {job.name:<12} {job.queue:<16} {hms(job.submit_time)} {hms(job.start_time)} "
                  f"{hms(job.end_time)} {hms(job.start_time - job.submit_time)}\n")
    return 0
