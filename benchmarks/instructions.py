"""Count the instructions a replay executes, under valgrind's callgrind: the same on every
run, where this VM's clock drifts 20-40 %, so a change of a few per cent in the scheduling
core shows, and two checkouts compare in one command.

    python3 benchmarks/instructions.py [--traces DIR] [--trace NAME] [--first N] [--mode MODE] [ROOT ...]

Each ROOT (default: this checkout) is a checkout of hpcsched, say one made with `git
worktree add`, whose code replays the first N jobs (default 5,000) of the trace (default
RICC-2010) under FIFO with MODE backfill (default conservative) and drain accounting, as
`benchmarks/simulate.py` does; the roots run side by side, each package copied to a path
as long as the others' with the hash seed fixed, so that a count is the same on every run
(to within a few thousand instructions).  For each it prints the instructions, the change
from the first ROOT, and a hash of every job's start, so that the same decisions show too.
Under valgrind a replay runs some 50 times slower: 90-100 s for RICC's first 5,000 jobs.
Without valgrind it says so and exits 0.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRACES = {"KTH": "KTH-SP2-1996-2.1-cln.swf.gz", "LUBLIN": "lublin_256.swf.gz", "RICC": "RICC-2010-2.swf.gz"}

CHILD = r"""
import hashlib, sys
sys.path.insert(0, {root!r})
from hpcsched.sim import swf
from hpcsched.sim.simulate import simulate
records = []
for rec in swf.read({path!r}):
    if len(records) == {first}:
        break
    records.append(rec)
r = simulate(records, policy="fifo", backfill={mode!r}, nodes=swf.header({path!r}).max_procs, drain=True)
print(hashlib.sha256(repr([(j.submit, j.start, j.end, j.units) for j in r.jobs]).encode()).hexdigest()[:16])
"""


def start(root: str, path: str, first: int, mode: str) -> subprocess.Popen:
    """One replay by the code in `root`, under callgrind (the counts do not depend on what
    else runs, so the roots run side by side)."""
    code = CHILD.format(root=os.path.abspath(root), path=path, first=first, mode=mode)
    env = dict(os.environ, PYTHONHASHSEED="0")  # (the same string hashes, so the same work)
    return subprocess.Popen(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                             sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)


def count(root: str, child: subprocess.Popen) -> tuple[int, str]:
    """(instructions, starts hash) of `child`'s replay."""
    out, err = child.communicate()
    refs = re.search(r"I\s+refs:\s+([\d,]+)", err)
    if child.returncode or refs is None:
        raise SystemExit(f"replay failed under {root}: {(err.strip().splitlines() or ['?'])[-1]}")
    return int(refs.group(1).replace(",", "")), out.split()[-1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("roots", nargs="*", default=[ROOT], metavar="ROOT")
    ap.add_argument("--traces", default=os.path.join(ROOT, "..", "shared", "traces"))
    ap.add_argument("--trace", choices=sorted(TRACES), default="RICC")
    ap.add_argument("--first", type=int, default=5000)
    ap.add_argument("--mode", choices=("none", "easy", "conservative"), default="conservative")
    args = ap.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("valgrind is not installed: nothing counted")
        return 0
    path = os.path.join(args.traces, TRACES[args.trace])
    if not os.path.exists(path):
        print(f"{path}: not found: nothing counted")
        return 0
    print(f"{args.trace}, first {args.first:,} jobs, FIFO + {args.mode}")
    with tempfile.TemporaryDirectory() as tmp:
        # Each root's package runs from a copy at a path as long as every other's: the count
        # moves with the memory layout, which moves with the length of the path the code
        # is imported from (the same code counted 2.9 % apart from paths of 7 and 10 characters).
        # Compiled first: a fresh checkout would count its compiling.
        copies = []
        for i, root in enumerate(args.roots):
            copy = os.path.join(tmp, f"{i:03d}")
            shutil.copytree(os.path.join(root, "hpcsched"), os.path.join(copy, "hpcsched"),
                            ignore=shutil.ignore_patterns("__pycache__"))
            subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {copy!r}); "
                            "import hpcsched.sim.simulate"], check=True)
            copies.append(copy)
        children = [start(copy, path, args.first, args.mode) for copy in copies]
        base = None
        for root, child in zip(args.roots, children):
            n, starts = count(root, child)
            change = "" if base is None else f"  {100 * (n - base) / base:+.1f} %"
            base = n if base is None else base
            print(f"{n:>18,} instructions  starts {starts}{change}  {root}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
