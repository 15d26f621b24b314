"""Parse and simulate real traces: seconds, jobs per second, peak memory.

    python3 benchmarks/simulate.py [--traces DIR] [--only KTH|LUBLIN|RICC] [--runs RUN ...] [--repeat N]
                                   [--timeout S] [--breakdown] [--units]

For each trace: the time to merely parse it (read every record); the time to parse it,
map every record onto the machine and build its Job object, which any replay through the
scheduling core does before it schedules anything; and the time to simulate it under FIFO
without backfill, with EASY and with conservative backfill (on RICC, conservative and EASY
also on its first 50,000 jobs, as a full conservative replay there is long), and under
CC-IN2P3's fair share (examples/ccin2p3.toml: Grid Engine's share tree, EASY backfill).  Each runs in
a fresh child process so
that its peak resident memory is its own.  The figures the general core reaches here are
the accepted reference (about 3 s for KTH-SP2 and 80-90 s for RICC-2010 under EASY; the
project keeps one scheduling core rather than a faster second copy of a policy); peak
memory stays under 1 GB.

--runs keeps only the replays named (parse, floor, none, easy, conservative, sharetree,
50000:easy, 50000:conservative): `--only RICC --runs easy sharetree` is the share tree against FIFO.
--repeat N runs them N times, interleaved; each ratio with a target is printed for each
run and as their median (a 2-core VM's timings drift by 10 % and more from run to run).

--breakdown adds a run under EASY that times every call into the scheduling core, to show
where a replay's time goes per job: accepting jobs (`submit`), ending them (`job_ended`
and `forget`), scheduling passes (`iterate`), and the rest (reading and mapping the trace,
the event loop, the metrics).  The timers add about half a microsecond per call.

--units replays one job stream, lublin_256's first 4,000 jobs with every size scaled from
its 256 processors, on pools of 1,000, 10,000 and 100,000 units, under EASY and under
conservative backfill: how each grows with the machine (conservative should
grow no worse than EASY); then the same jobs each of one unit on 24,515 units, where
nothing waits (conservative should cost what EASY does).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRACES = {"KTH": "KTH-SP2-1996-2.1-cln.swf.gz", "LUBLIN": "lublin_256.swf.gz", "RICC": "RICC-2010-2.swf.gz"}
#: trace -> the replays timed: (what the child runs, label); "N:mode" replays the first N jobs
RUNS = {
    "KTH": [("parse", "parse only"), ("floor", "parse+map+jobs"), ("none", "FIFO"), ("easy", "FIFO + EASY"),
            ("conservative", "FIFO + conserv."), ("sharetree", "share tree+EASY")],
    "LUBLIN": [("easy", "FIFO + EASY"), ("conservative", "FIFO + conserv.")],
    "RICC": [("parse", "parse only"), ("floor", "parse+map+jobs"), ("none", "FIFO"), ("easy", "FIFO + EASY"),
             ("50000:easy", "50k + EASY"), ("50000:conservative", "50k + conserv."),
             ("sharetree", "share tree+EASY")],
}
MEMORY_MB = 1024
#: (traces, replay, the replay it is compared with, label, the target ratio)
RATIOS = [({"RICC"}, "sharetree", "easy", "share tree / FIFO, both EASY", 1.5),
          ({"KTH", "LUBLIN"}, "conservative", "easy", "conservative / EASY", 3.0),
          ({"RICC"}, "50000:conservative", "50000:easy", "50k conservative / EASY", 3.0)]

CHILD = r"""
import resource, sys, time
sys.path.insert(0, {root!r})
from hpcsched.sim import swf
from hpcsched.sim.simulate import simulate
path, what = {path!r}, {what!r}
config = None
if what.endswith("sharetree"):
    import tomllib
    with open({root!r} + "/examples/ccin2p3.toml", "rb") as f:
        config = tomllib.load(f)
t = time.perf_counter()
if what == "parse":
    n = sum(1 for _ in swf.read(path))
elif what == "floor":
    from hpcsched.sim.simulate import MapStats, job_for, machine_for, map_record
    machine, stats, n = machine_for(swf.header(path)), MapStats(), 0
    for rec in swf.read(path):
        mapped = map_record(rec, machine, stats)
        if mapped is not None:
            job_for(rec, *mapped[:2])
            n += 1
elif what == "breakdown":
    from hpcsched.core.scheduler import Scheduler
    spent = dict.fromkeys(("submit", "end", "pass"), 0.0)
    clock = time.perf_counter

    def timed(part, call):
        def wrapper(*args):
            t0 = clock()
            out = call(*args)
            spent[part] += clock() - t0
            return out
        return wrapper
    for part, name in (("submit", "submit"), ("end", "job_ended"), ("end", "forget"), ("pass", "iterate")):
        setattr(Scheduler, name, timed(part, getattr(Scheduler, name)))
    r = simulate(path, policy="fifo", backfill="easy")
    n = r.metrics.jobs
    print(*spent.values(), r.metrics.passes, end=" ")
elif what.startswith(("units:", "serial:")):  # the first N jobs, sizes scaled onto U units (serial: one unit each)
    import math
    kind, first, units, mode = what.split(":")
    f, records = int(units) / (swf.header(path).max_procs or 256) if kind == "units" else 0, []
    for rec in swf.read(path):
        if len(records) == int(first):
            break
        records.append(rec._replace(procs=(math.ceil(rec.procs * f) or 1) if rec.procs > 0 else rec.procs,
                                    req_procs=(math.ceil(rec.req_procs * f) or 1) if rec.req_procs > 0 else rec.req_procs))
    r = simulate(records, policy="fifo", backfill=mode, nodes=int(units))
    n = r.metrics.jobs
elif ":" in what:  # the first N jobs
    first, mode = what.split(":")
    records = []
    for rec in swf.read(path):
        if len(records) == int(first):
            break
        records.append(rec)
    if config:
        r = simulate(records, config=config, nodes=swf.header(path).max_procs)
    else:
        r = simulate(records, policy="fifo", backfill=mode, nodes=swf.header(path).max_procs)
    n = r.metrics.jobs
elif config:
    r = simulate(path, config=config)
    n = r.metrics.jobs
else:
    r = simulate(path, policy="fifo", backfill=what)
    n = r.metrics.jobs
dt = time.perf_counter() - t
print(n, dt, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def measure(path: str, what: str, timeout: float):
    code = CHILD.format(root=ROOT, path=path, what=what)
    try:
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    if p.returncode:
        raise SystemExit(f"child failed: {p.stderr.strip().splitlines()[-1]}")
    *parts, n, dt, rss = p.stdout.split()
    return int(n), float(dt), int(rss) / 1024, [float(x) for x in parts]  # ru_maxrss is KiB on Linux


def breakdown(name: str, n: int, dt: float, parts: list[float]) -> None:
    """Where one replay's time went, in seconds and microseconds per job."""
    submit, end, passes, count = parts
    rest = dt - submit - end - passes
    print(f"{name:<7}breakdown of {dt:.2f} s under EASY (timers included), per job of {n}:")
    for label, sec, calls in (("submit", submit, n), ("job_ended+forget", end, n),
                              (f"passes ({count:.0f})", passes, count), ("the rest", rest, None)):
        each = f"  {1e6 * sec / calls:6.1f} us per call" if calls else ""
        print(f"{'':<7}  {label:<18}{sec:>8.2f} s {1e6 * sec / n:>8.1f} us/job{each}")


def units(path: str, timeout: float, first: int = 4000) -> int:
    """The same job stream on machines of 1k, 10k and 100k units, EASY and conservative."""
    if not os.path.exists(path):
        print(f"skipped: {path} not found")
        return 0
    print(f"lublin_256, first {first} jobs, sizes scaled to the machine")
    print(f"{'units':>8}{'EASY s':>9}{'conserv. s':>12}{'ratio':>8}")
    seconds = {}
    for size in (1000, 10000, 100000):
        row = []
        for mode in ("easy", "conservative"):
            m = measure(path, f"units:{first}:{size}:{mode}", timeout)
            row.append(m[1] if m else float("nan"))
        seconds[size] = row
        print(f"{size:>8}{row[0]:>9.2f}{row[1]:>12.2f}{row[1] / row[0]:>7.1f}x")
    (e0, c0), (e1, c1) = seconds[1000], seconds[100000]
    print(f"growth from 1k to 100k units: EASY {e1 / e0:.1f}x, conservative {c1 / c0:.1f}x")
    row = [measure(path, f"serial:{first}:24515:{mode}", timeout) for mode in ("easy", "conservative")]
    e, c = (m[1] if m else float("nan") for m in row)
    print(f"every job one unit on 24,515 units (nothing waits): EASY {e:.2f} s, conservative {c:.2f} s, "
          f"{c / e:.1f}x (target: no more than EASY's)")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", default=os.path.join(ROOT, "..", "shared", "traces"))
    ap.add_argument("--only", choices=sorted(TRACES))
    ap.add_argument("--runs", nargs="+", metavar="RUN", help="only these replays (see above)")
    ap.add_argument("--repeat", type=int, default=1, metavar="N", help="run the replays N times, interleaved")
    ap.add_argument("--timeout", type=float, default=1800.0, help="give up on one run after S seconds")
    ap.add_argument("--breakdown", action="store_true", help="also time each kind of call into the core")
    ap.add_argument("--units", action="store_true", help="only: one job stream on 1k, 10k and 100k units")
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error("--repeat takes a whole number from 1")
    if args.units:
        return units(os.path.join(args.traces, TRACES["LUBLIN"]), args.timeout)
    print(f"{'trace':<7}{'run':<16}{'jobs':>8}{'seconds':>10}{'jobs/s':>10}{'x parse':>9}{'peak MB':>9}")
    for name, file in TRACES.items():
        if args.only and name != args.only:
            continue
        path = os.path.join(args.traces, file)
        if not os.path.exists(path):
            print(f"{name:<7}skipped: {path} not found")
            continue
        parse, seconds = None, {}
        chosen = [(what, label) for what, label in RUNS[name] if not args.runs or what in args.runs]
        for what, label in chosen * args.repeat:  # (repeats interleaved: this VM drifts)
            m = measure(path, what, args.timeout)
            if m is None:
                print(f"{name:<7}{label:<16}  did not finish in {args.timeout:.0f} s")
                continue
            n, dt, mb, _ = m
            parse = dt if what == "parse" else parse
            seconds.setdefault(what, []).append(dt)
            ratio = f"{dt / parse:8.1f}x" if parse and what != "parse" and ":" not in what else f"{'':>9}"
            verdict = "" if mb < MEMORY_MB else f"  over {MEMORY_MB} MB"
            print(f"{name:<7}{label:<16}{n:>8}{dt:>10.2f}{n / dt:>10.0f}{ratio}{mb:>9.0f}{verdict}")
        for traces, slow, fast, label, target in RATIOS:
            if name in traces and slow in seconds and fast in seconds:
                ratios = [a / b for a, b in zip(seconds[slow], seconds[fast])]  # (run by run)
                each = f" (runs: {', '.join(f'{r:.2f}x' for r in ratios)})" if len(ratios) > 1 else ""
                print(f"{name:<7}{label}: {statistics.median(ratios):.2f}x{each}, asked: <= {target:g}x")
        if args.breakdown:
            m = measure(path, "breakdown", args.timeout)
            if m is None:
                print(f"{name:<7}breakdown did not finish in {args.timeout:.0f} s")
            else:
                breakdown(name, m[0], m[1], m[3])
    return 0


if __name__ == "__main__":
    sys.exit(main())
