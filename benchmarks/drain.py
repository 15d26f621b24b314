"""Drain-time accounting: how fast Moab logs are read, and what accounting costs a replay.

    python3 benchmarks/drain.py                 # 10^6 and 10^7 lines, then KTH with/without
    python3 benchmarks/drain.py --lines 1000000 --no-replay

Logs: generated Blue Waters-shaped (26,864 nodes, one sample per node per 45 s iteration,
2 % of the nodes changing state, reservation or jobs at each iteration), written to a
temporary directory and read once; each size is read in a child process so that its peak
memory (ru_maxrss) is its own.  Targets: >= 1,000,000 lines/s on one core,
memory that does not grow with the number of lines.

Replay: KTH-SP2 under EASY with drain accounting on and off, as interleaved pairs (this VM
drifts 20-40 % between runs); target: accounting costs <= 15 %.
"""
from __future__ import annotations

import argparse
import os
import random
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
KTH = os.path.join(ROOT, "..", "shared", "traces", "KTH-SP2-1996-2.1-cln.swf.gz")
NODES = 26864
MONTH_LINES = NODES * 30 * 86400 / 45  # one sample per node per 45 s for 30 days: ~1.5e9


def generate(path: str, lines: int, nodes: int = NODES, seed: int = 1) -> None:
    """`lines` status lines, iterations of every node 45 s apart, in Moab's format."""
    from hpcsched.drain.moablog import line
    rng = random.Random(seed)
    status = {n: ("Busy", [], [str(1000 + n // 64)]) for n in range(nodes)}
    t0, written, it = 1420005600.0, 0, 0
    with open(path, "w") as f:
        while written < lines:
            t = t0 + it * 45
            for n in rng.sample(range(nodes), nodes // 50):
                state = rng.choice(["Idle", "Idle", "Busy", "Running", "Down"])
                rsv = [str(rng.randrange(2000, 2100))] if rng.random() < 0.5 else []
                jobs = [str(rng.randrange(1000, 1500))] if state in ("Busy", "Running") else []
                status[n] = (state, rsv, jobs)
            block = [line(t + n * 1e-4, str(n), *status[n], offset=-21600, iteration=it)
                     for n in range(min(nodes, lines - written))]
            f.write("".join(block))
            written += len(block)
            it += 1


def read_child(path: str) -> None:
    """(In a child) read one log; print lines, seconds and peak memory."""
    from hpcsched.drain import moablog
    t = time.perf_counter()
    acc, q = moablog.read([path])
    dt = time.perf_counter() - t
    rep = acc.report()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{q.lines} {dt:.3f} {rss:.1f} {rep['drain_pct']:.3f} {q.malformed}")


def bench_logs(sizes: list[int]) -> None:
    print(f"{'lines':>12} {'seconds':>9} {'lines/s':>12} {'peak MB':>9}  drain %  malformed")
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            path = os.path.join(tmp, f"log{n}")
            generate(path, n)
            out = subprocess.run([sys.executable, __file__, "--child", path], capture_output=True, text=True,
                                 check=True).stdout.split()
            lines, secs, rss, pct, bad = int(out[0]), float(out[1]), float(out[2]), out[3], out[4]
            rate = lines / secs
            print(f"{lines:>12,} {secs:>9.2f} {rate:>12,.0f} {rss:>9.1f}  {pct:>7}  {bad}")
            os.remove(path)
    print(f"projected for a Blue Waters month ({MONTH_LINES:,.0f} lines at 45 s; 2e9 at ~34 s): "
          f"{MONTH_LINES / rate / 60:.0f} min ({2e9 / rate / 60:.0f} min) on one core at the last rate")


def bench_replay(pairs: int) -> None:
    from hpcsched.sim.simulate import simulate
    if not os.path.exists(KTH):
        print("KTH trace not present: replay skipped")
        return
    times = {False: [], True: []}
    for _ in range(pairs):
        for drain in (False, True):
            t = time.perf_counter()
            simulate(KTH, drain=drain)
            times[drain].append(time.perf_counter() - t)
    off, on = min(times[False]), min(times[True])
    print(f"KTH-SP2 EASY replay, best of {pairs} interleaved pairs: without drain {off:.2f} s, "
          f"with {on:.2f} s: +{100 * (on - off) / off:.1f} % (target <= 15 %)")
    print("  all pairs (off, on): " + ", ".join(f"({a:.2f}, {b:.2f})" for a, b in zip(times[False], times[True])))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, action="append", help="log sizes (default 10^6 and 10^7)")
    ap.add_argument("--pairs", type=int, default=3, help="replay pairs (default 3)")
    ap.add_argument("--no-replay", action="store_true")
    ap.add_argument("--no-logs", action="store_true")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return read_child(args.child)
    if not args.no_logs:
        bench_logs(args.lines or [10 ** 6, 10 ** 7])
    if not args.no_replay:
        bench_replay(args.pairs)


if __name__ == "__main__":
    main()
