"""ALCF's anti-gaming rule on a real trace: a job moved to another queue after hours of
waiting starts no earlier than a twin submitted into that queue at the same moment.

    python3 examples/anti_gaming.py [trace.swf.gz] [--pairs N]

KTH-SP2 (default) is replayed under the cobalt policy with ALCF's router (the embedded
default's queues: prod-capability >= 20 %, prod-short <= 6 h, prod-long > 6 h on a third of
the machine).  A first replay finds, at N moments, a prod-long job that has waited at least
three hours and whose run fits in 6 h.  A second replay *games* each one: at its moment the
job is altered to a 6-hour walltime, which routes it to prod-short, and an identical twin is
submitted into prod-short one second before the move: two jobs that enter a queue in the
same second rank by the documented tie-break (the lower job id, here always the gamer's),
which is not what the rule is about.  Printed: each pair's start times (hours after the
move).  Under the rule the gamer's hours of waiting count for nothing, so it starts no
earlier than the twin; had it kept them, it would rank far ahead.  The paper's rule holds if no
gamer starts before its twin.
"""
from __future__ import annotations

import heapq
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from hpcsched.config import build, default_config  # noqa: E402
from hpcsched.sim import swf  # noqa: E402
from hpcsched.sim.engine import Engine  # noqa: E402
from hpcsched.sim.simulate import MapStats, arrivals, job_for, machine_for, map_record  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TRACE = os.path.join(HERE, "..", "..", "shared", "traces", "KTH-SP2-1996-2.1-cln.swf.gz")
SIX_HOURS, WAITED = 6 * 3600.0, 3 * 3600.0


def replay(trace: str, extra=(), events=()):
    """(finished jobs by record number, the scheduler) for the trace plus `extra` arrivals."""
    cfg = default_config()
    cfg["priority"] = {"policy": "cobalt"}
    header = swf.header(trace)
    machine = machine_for(header)
    cfg["nodes"] = machine.config()
    sched = build(cfg)
    stream = arrivals(swf.read(trace, skip_bad=True), machine, MapStats())
    merged = heapq.merge(stream, sorted(extra, key=lambda a: a[0]), key=lambda a: a[0])
    finished, _ = Engine(sched).run(merged, events=events)
    return {f.record.job: f for f in finished}, sched, machine


def main(argv: list[str]) -> int:
    trace = next((a for a in argv if not a.startswith("--")), TRACE)
    pairs = int(argv[argv.index("--pairs") + 1]) if "--pairs" in argv else 10
    if not os.path.exists(trace):
        print(f"anti_gaming: {trace}: no such trace")
        return 1
    base, _, machine = replay(trace)
    records = {r.job: r for r in swf.read(trace, skip_bad=True)}
    span = max(f.end for f in base.values())
    chosen = []  # (moment, record) of prod-long jobs waiting >= 3 h there, runs <= 6 h
    for k in range(1, pairs * 4 + 1):
        t = span * k / (pairs * 4 + 1)
        for f in sorted(base.values(), key=lambda f: f.submit):
            rec = records[f.record.job]
            if f.queue == "prod-long" and f.submit <= t - WAITED and f.start > t and 0 < rec.run <= SIX_HOURS \
                    and all(rec.job != c[1].job for c in chosen):
                chosen.append((t, rec))
                break
        if len(chosen) == pairs:
            break
    print(f"{os.path.basename(trace)}: {len(chosen)} jobs moved from prod-long to prod-short after waiting "
          f">= 3 h, each beside a twin submitted into prod-short a second before the move (one replay per pair)")
    print(f"{'job':>7} {'waited (h)':>10} {'gamer start (h)':>16} {'twin start (h)':>15}  gamer first?")
    early = 0
    for t, rec in chosen:
        twin = swf.Record(*((10 ** 7, t - 1) + tuple(rec)[2:]))  # (see the docstring: one second before)
        request, _, run = map_record(twin, machine, MapStats())

        def game(sched, now, jid=rec.job):
            sched.alter(jid, now, walltime=SIX_HOURS)  # into prod-short: as if submitted now
        gamed, _, _ = replay(trace, [(t - 1, job_for(twin, request, SIX_HOURS), run, twin)], [(t, game)])
        g, w = gamed[rec.job], gamed[10 ** 7]
        early += g.start < w.start
        print(f"{rec.job:>7} {(t - rec.submit) / 3600:>10.1f} {(g.start - t) / 3600:>+16.2f} "
              f"{(w.start - t) / 3600:>+15.2f}  {'YES' if g.start < w.start else 'no'}")
    print(f"gamers that started before their twin: {early} of {len(chosen)}")
    return 1 if early else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
