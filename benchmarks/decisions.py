"""The decision check: do a fixed set of replays still make exactly the same decisions?

    python3 benchmarks/decisions.py [--traces DIR] [--only NAME ...] [--dump DIR] [--rebase]

Every workload below is replayed through the scheduling core, and every start it makes is
recorded as (job id, start time, node names, cores, started by backfill).  A SHA-256 of
those lines is compared with the digest committed in `decisions.json`; a workload prints
IDENTICAL or DIFFERENT (exit status 1 if any differs).  Run it before and after every
change to the core.  A change that is meant to move decisions re-bases the file with
`--rebase` (say in the commit how many jobs moved: `--dump` writes every workload's
lines, to diff against a dump made before).  Workloads whose trace is absent are skipped.
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from hpcsched import Scheduler  # noqa: E402
from hpcsched.sim import swf  # noqa: E402
from hpcsched.sim.simulate import simulate  # noqa: E402

DIGESTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "decisions.json")
KTH, RICC = "KTH-SP2-1996-2.1-cln.swf.gz", "RICC-2010-2.swf.gz"
HPC2N, LUBLIN = "HPC2N-2002-2.2-excerpt3170.swf.gz", "lublin_256.swf.gz"

#: name -> (trace, first N records or None for all, simulate() options)
WORKLOADS = {
    "kth-easy": (KTH, None, dict(policy="fifo", backfill="easy")),
    "kth-conservative": (KTH, 6000, dict(policy="fifo", backfill="conservative")),
    "kth-none": (KTH, None, dict(policy="fifo", backfill="none")),
    "kth-depth3": (KTH, None, dict(policy="fifo", backfill="depth=3")),
    "ricc-easy": (RICC, 20000, dict(policy="fifo", backfill="easy", nodes=8192)),
    "ricc-none": (RICC, 20000, dict(policy="fifo", backfill="none", nodes=8192)),
    "hpc2n-cobalt": (HPC2N, None, dict(policy="cobalt", backfill="easy", period=15)),
    "lublin-simon": (LUBLIN, None, dict(policy="simon", backfill="easy")),
    "lublin-simon-nodes": (LUBLIN, None, dict(policy="simon", backfill="easy", nodes=32, ppn=8)),
    "lublin-simon-shared": (LUBLIN, None, dict(policy="simon", backfill="easy", nodes=32, ppn=8, shared=True)),
    # the limits a pass checks as it walks: Simon's cap on large jobs, a queue's per-user cap
    "lublin-simon-capped": (LUBLIN, None, dict(policy="simon", backfill="easy",
                                               config={"priority": {"large": 64, "max_large_running": 2}})),
    "hpc2n-cobalt-peruser": (HPC2N, None, dict(policy="cobalt", backfill="easy", period=15,
                                                config={"queues": {"batch": {"max_running_per_user": 3}}})),
}


def decisions(path: str, first: int | None, options: dict) -> list[str]:
    """Replay and return one line per start, in the order the passes made them."""
    lines: list[str] = []
    iterate = Scheduler.iterate

    def recording(self, now):
        plan = iterate(self, now)
        for s in plan.started:
            a = s.allocation
            lines.append(f"{s.job_id} {now:g} {','.join(a.nodes)} "
                         f"{';'.join('.'.join(map(str, c)) for c in a.cores)} {int(s.backfill)}")
        return plan

    workload = path
    if first is not None:
        workload = []
        for rec in swf.read(path):
            if len(workload) == first:
                break
            workload.append(rec)
        if "nodes" not in options:
            options = dict(options, nodes=swf.header(path).max_procs)
    Scheduler.iterate = recording
    try:
        simulate(workload, **options)
    finally:
        Scheduler.iterate = iterate
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", default=os.path.join(ROOT, "..", "shared", "traces"))
    ap.add_argument("--only", nargs="+", choices=sorted(WORKLOADS), help="check only these workloads")
    ap.add_argument("--dump", metavar="DIR", help="write each workload's decision lines to DIR/NAME.txt.gz")
    ap.add_argument("--rebase", action="store_true", help="store the digests found as the new reference")
    args = ap.parse_args(argv)
    with open(DIGESTS) as f:
        stored = json.load(f)
    found, differs = dict(stored), False
    for name in args.only or WORKLOADS:
        trace, first, options = WORKLOADS[name]
        path = os.path.join(args.traces, trace)
        if not os.path.exists(path):
            print(f"{name:22s} skipped: {path} not found")
            continue
        t = time.perf_counter()
        lines = decisions(path, first, options)
        digest = hashlib.sha256("\n".join(lines).encode()).hexdigest()
        found[name] = {"starts": len(lines), "sha256": digest}
        verdict = "IDENTICAL" if stored.get(name) == found[name] else "DIFFERENT"
        differs |= verdict == "DIFFERENT"
        print(f"{name:22s} {len(lines):7d} starts {time.perf_counter() - t:7.1f} s  {verdict}", flush=True)
        if args.dump:
            os.makedirs(args.dump, exist_ok=True)
            with gzip.open(os.path.join(args.dump, f"{name}.txt.gz"), "wt") as f:
                f.write("\n".join(lines) + "\n")
    if args.rebase:
        with open(DIGESTS, "w") as f:
            json.dump(found, f, indent=1, sort_keys=True)
            f.write("\n")
        print(f"re-based {DIGESTS}")
        return 0
    return 1 if differs else 0


if __name__ == "__main__":
    sys.exit(main())
