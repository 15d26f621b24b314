"""This checkout against an earlier commit: a replay's CPU and a first pass's time, as ratios.

    python3 benchmarks/versus.py [--ref 4361bb6] [--repeat 3] [--only replay|pass]

The reference commit is checked out into a temporary git worktree (removed at the end);
each measure runs in a fresh child process, the two trees taking turns (reference, this,
reference, this, ...), since this VM's timings drift by 20-40 % from run to run.  Printed:
each pair's ratio (this / reference), then the min and median of the ratios.

- replay: `hpcsched simulate` of KTH-SP2 under FIFO with EASY backfill, the CPU time
  (user + system) of the child; this tree by default (drain-time accounting is opt-in
  here: the reference's default run accounted it) and with `--drain` (the reference has
  no such option: its default run is the base of both ratios).
- pass: one scheduling pass of benchmarks/pass_scale.py's pool cases (half the machine
  busy, the rest queued), the same set-up code run in both trees.

Also this tree's drain accounting as a share of a replay that keeps it: (replay --drain -
replay) / replay --drain, per pair (printed: it is opt-in, so a replay that does not ask
for it pays nothing).

Targets: replay (no drain accounting) <= 1.0x, replay --drain <= 1.05x, each pass row
<= 1.05x.
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KTH = os.path.join(ROOT, "..", "shared", "traces", "KTH-SP2-1996-2.1-cln.swf.gz")
POOLS = [(49152, 10000), (816, 100000)]
TARGETS = {"replay": 1.0, "replay --drain": 1.05, "pass": 1.05}

PASS = r"""
import gc, random, sys, time
sys.path.insert(0, {root!r})
from hpcsched import Job, Request, build
nodes, queued, seed = {nodes}, {queued}, {seed}
width = len(str(nodes - 1))
sched = build({{"nodes": [{{"names": f"n[{{0:0{{width}}d}}-{{nodes - 1:0{{width}}d}}]"}}],
               "queues": {{"batch": {{}}}}, "priority": {{"policy": "fifo"}}, "backfill": "easy"}})
rng = random.Random(seed)
busy = 0
while busy < nodes // 2:
    size = min(nodes // 2 - busy, max(1, int(2 ** rng.uniform(0, max(1, (nodes // 8).bit_length())))))
    sched.submit(Job(owner=f"u{{rng.randrange(50)}}", request=Request(nodes=size),
                     walltime=rng.uniform(3600, 86400)), now=0)
    busy += size
sched.iterate(0)
for _ in range(queued):
    size = max(1, int(2 ** rng.uniform(0, (nodes // 4).bit_length() - 1)))
    sched.submit(Job(owner=f"u{{rng.randrange(200)}}", request=Request(nodes=size),
                     walltime=float(rng.randrange(300, 86400, 60))), now=rng.uniform(0, 60))
gc.collect()
t = time.perf_counter()
plan = sched.iterate(60.0)
print(time.perf_counter() - t, len(plan.started))
"""


def _cpu(argv: list[str], cwd: str) -> float:
    """The CPU seconds (user + system) a child spends running `argv`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, cwd=cwd, check=True, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _pass(root: str, nodes: int, queued: int, seed: int) -> tuple[float, int]:
    out = subprocess.run([sys.executable, "-c", PASS.format(root=root, nodes=nodes, queued=queued, seed=seed)],
                         check=True, capture_output=True, text=True).stdout.split()
    return float(out[0]), int(out[1])


def _report(label: str, pairs: list[tuple[float, float]], unit: str, target: float) -> bool:
    ratios = [new / ref for ref, new in pairs]
    ok = statistics.median(ratios) <= target
    print(f"{label:<34} ref {statistics.median([r for r, _ in pairs]):7.3f} {unit}  this "
          f"{statistics.median([n for _, n in pairs]):7.3f} {unit}  ratio min {min(ratios):.2f} median "
          f"{statistics.median(ratios):.2f} ({' '.join(f'{r:.2f}' for r in ratios)})  target <= {target}: "
          f"{'met' if ok else 'MISSED'}", flush=True)
    return ok


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ref", default="4361bb6")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", choices=("replay", "pass"))
    args = ap.parse_args(argv)
    if args.only != "pass" and not os.path.exists(KTH):
        print(f"versus: {KTH} is absent: the replay is skipped", file=sys.stderr)
        args.only = "pass"
    tmp = tempfile.mkdtemp(prefix="hpcsched-versus-")
    ref = os.path.join(tmp, "ref")
    subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", "-q", ref, args.ref], check=True)
    met = True
    try:
        print(f"this checkout against {args.ref}, {args.repeat} interleaved pairs each")
        if args.only != "pass":
            trace = os.path.abspath(KTH)
            run = [sys.executable, "-m", "hpcsched", "simulate", trace, "--policy", "fifo", "--backfill", "easy",
                   "--quiet"]
            plain, drained = [], []
            for _ in range(args.repeat):
                base = _cpu(run, ref)
                plain.append((base, _cpu(run, ROOT)))
                drained.append((base, _cpu(run + ["--drain"], ROOT)))
            met &= _report("replay", plain, "s", TARGETS["replay"])
            met &= _report("replay --drain", drained, "s", TARGETS["replay --drain"])
            shares = [(d[1] - p[1]) / d[1] for p, d in zip(plain, drained)]
            print(f"{'drain accounting (opt-in), share':<34} median {statistics.median(shares):.1%} "
                  f"({' '.join(f'{x:.1%}' for x in shares)}) of a replay that keeps it", flush=True)
        if args.only != "replay":
            for nodes, queued in POOLS:
                pairs = []
                for seed in range(args.repeat):
                    (a, sa), (b, sb) = _pass(ref, nodes, queued, seed), _pass(ROOT, nodes, queued, seed)
                    assert sa == sb, f"the two trees started {sa} and {sb} jobs"
                    pairs.append((a, b))
                met &= _report(f"pass ({nodes} nodes x {queued} queued)", pairs, "s", TARGETS["pass"])
    finally:
        subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", ref], check=False)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
