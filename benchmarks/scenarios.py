"""Many live-server scenarios, each judged as tests/test_scenarios.py judges a few.

    python3 benchmarks/scenarios.py [--seeds 1:41] [--steps 80] [--parallel 2] [--show 10] [--multi-user]

Each seed plays one scenario (tests/scenarios.py) on its own test-rig site in a temporary
directory: a real `hpcsched server`, real commands and jobs, the server killed (SIGKILL, at
times while it answers a command) or stopped by qterm and started again.  Prints per seed
its time and what broke, then the count of each kind of break over all (all should be 0).
Scenarios sleep more than they compute, so two run at once even on 2 cores.  --multi-user
(as root) plays them on a multi-user site: a root server and two real Unix users
(tests/multiuser.py makes them, and removes them after if it made them).
"""
from __future__ import annotations

import argparse
import collections
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

from scenarios import run  # noqa: E402

KINDS = ("lost", "twice", "overbooked", "status", "order", "records", "stray", "server", "reservation", "scripts",
         "offline", "limits", "security")


def play(seed: int, steps: int, users: tuple[str, ...]) -> tuple[int, float, list[str]]:
    t = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        broken = run(Path(tmp), seed, steps, users)
    return seed, time.monotonic() - t, broken


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="1:41", help="FIRST:END (END not played)")
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--show", type=int, default=10)
    ap.add_argument("--multi-user", action="store_true")
    args = ap.parse_args()
    users, made, base = (), [], None
    if args.multi_user:
        from multiuser import USERS, make_users, new_base
        base = new_base()
        users, made = USERS, make_users(base)
    first, _, end = args.seeds.partition(":")
    seeds = range(int(first), int(end or int(first) + 1))
    totals, shown = collections.Counter(), []
    t = time.monotonic()
    with ProcessPoolExecutor(args.parallel) as pool:
        for seed, seconds, broken in pool.map(play, seeds, [args.steps] * len(seeds), [users] * len(seeds)):
            print(f"seed {seed:>5}  {seconds:6.1f} s  {len(broken)} broken", flush=True)
            totals.update(line.split(":")[0] for line in broken)
            shown += [f"seed {seed}: {line}" for line in broken][:max(0, args.show - len(shown))]
    print(f"{len(seeds)} scenarios of {args.steps} steps in {time.monotonic() - t:.0f} s: "
          + ", ".join(f"{kind} {totals[kind]}" for kind in KINDS))
    for line in shown:
        print(line)
    if args.multi_user:
        from multiuser import drop_users
        drop_users(made)
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
