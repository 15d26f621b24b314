"""CC-IN2P3's change of fair-share window on a real trace: 24 hours against 90 days.

    python3 examples/ccin2p3_window.py [trace.swf.gz] [--windows 1:00:00:00,90:00:00:00]
                                       [--key usage.window|usage.half_life] [--load F] [--pledges]

The trace (KTH-SP2 by default: its user and group fields are real) is replayed under
examples/ccin2p3.toml (Grid Engine's share tree, equal shares per group, run time x slots,
a 90-day half-life, compensation factor 2, EASY backfill) once per history window (with
--key usage.half_life, once per half-life instead: CC-IN2P3's 2,160-hour half-life is 90
days too; --load F replays the trace at F times its load; --pledges gives each group
shares in proportion to the unit-hours it asks for over the trace, as pledges would).
Groups are split by what they asked for: the *large* groups are the fewest whose
unit-hours make half of the trace's, the *small* ones the rest.  Printed per window:

    mean wait (hours) of the small groups' jobs and of the large groups' jobs
    share: each week, every group that had a job waiting or running has a target of
           1 / (such groups) (equal shares); the mean over those group-weeks of the
           unit-hours it received that week / its target, for small and large groups

The paper (section 3.3) saw small groups wait less with the longer window and the largest
groups not harmed.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from hpcsched.sim.run import replay  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TRACE = os.path.join(HERE, "..", "..", "shared", "traces", "KTH-SP2-1996-2.1-cln.swf.gz")
WEEK = 7 * 86400.0


def split(jobs) -> tuple[set, set]:
    """(large, small) groups by unit-hours asked for."""
    demand: dict[int, float] = {}
    for f in jobs:
        demand[f.record.group] = demand.get(f.record.group, 0.0) + f.units * (f.end - f.start)
    total, large, acc = sum(demand.values()), set(), 0.0
    for g, d in sorted(demand.items(), key=lambda kv: (-kv[1], kv[0])):
        if acc >= total / 2:
            break
        large.add(g)
        acc += d
    return large, set(demand) - large


def shares(jobs) -> dict[int, list[float]]:
    """group -> [received / target] for each week it was active."""
    first = min(f.submit for f in jobs)
    weeks = int((max(f.end for f in jobs) - first) // WEEK) + 1
    got = [dict() for _ in range(weeks)]
    active = [set() for _ in range(weeks)]
    for f in jobs:
        for w in range(int((f.submit - first) // WEEK), int((f.end - first) // WEEK) + 1):
            active[w].add(f.record.group)
            lo, hi = max(f.start, first + w * WEEK), min(f.end, first + (w + 1) * WEEK)
            if hi > lo:
                got[w][f.record.group] = got[w].get(f.record.group, 0.0) + f.units * (hi - lo)
    out: dict[int, list[float]] = {}
    for w in range(weeks):
        total = sum(got[w].values())
        if not total or not active[w]:
            continue
        target = 1.0 / len(active[w])
        for g in active[w]:
            out.setdefault(g, []).append(got[w].get(g, 0.0) / total / target)
    return out


def pledged(trace: str, config: str) -> str:
    """The config with a share-tree node per group of the trace, its shares its unit-hours
    asked for (run time x processors): a temporary file, removed at exit."""
    import atexit
    import tempfile

    from hpcsched.sim import swf
    demand: dict[int, float] = {}
    for r in swf.read(trace):
        demand[r.group] = demand.get(r.group, 0.0) + max(r.run, 0) * max(r.procs, 1)
    text = open(config).read()
    head = text[:text.index("[sharetree.nodes.Root]")]
    nodes = [f"[sharetree.nodes.Root]\nchildren = {[f'g{g}' for g in sorted(demand)]!r}\n".replace("'", '"')]
    for g in sorted(demand):  # (each group its own `default` user node: a node has one parent)
        nodes.append(f'[sharetree.nodes.g{g}]\nshares = {max(1, round(demand[g] / 3600))}\nchildren = ["u{g}"]\n'
                     f'[sharetree.nodes.u{g}]\nname = "default"\nshares = 10\n')
    fd, path = tempfile.mkstemp(suffix=".toml", dir=os.path.dirname(config))  # (its trace path relative to it)
    with os.fdopen(fd, "w") as f:
        f.write(head + "\n".join(nodes))
    atexit.register(os.remove, path)
    return path


def mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs) if xs else float("nan")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", nargs="?", default=TRACE)
    ap.add_argument("--windows", default="1:00:00:00,90:00:00:00")
    ap.add_argument("--key", choices=["usage.window", "usage.half_life"], default="usage.window")
    ap.add_argument("--load", type=float, default=1.0)
    ap.add_argument("--pledges", action="store_true")
    args = ap.parse_args(argv)
    if not os.path.exists(args.trace):
        print(f"ccin2p3_window: {args.trace}: no such file", file=sys.stderr)
        return 2
    print(f"{os.path.basename(args.trace)} under examples/ccin2p3.toml" +
          (f", at {args.load:g} times its load" if args.load != 1 else ""))
    print(f"{args.key.split('.')[1]:>12} {'small wait h':>13} {'large wait h':>13} {'small got/target':>17} "
          f"{'large got/target':>17}  utilization")
    config = os.path.join(HERE, "ccin2p3.toml")
    if args.pledges:
        config = pledged(args.trace, config)
    for window in args.windows.split(","):
        result = replay({"trace": args.trace, "config": config, "drain": False, args.key: window,
                         "load": args.load})
        jobs = result.jobs
        large, small = split(jobs)
        per_group = shares(jobs)
        wait = {kind: mean(f.wait / 3600 for f in jobs if f.record.group in groups)
                for kind, groups in (("small", small), ("large", large))}
        got = {kind: mean(r for g in groups for r in per_group.get(g, ()))
               for kind, groups in (("small", small), ("large", large))}
        print(f"{window:>12} {wait['small']:>13.2f} {wait['large']:>13.2f} {got['small']:>17.3f} "
              f"{got['large']:>17.3f}  {result.metrics.utilization:11.3f}", flush=True)
    print(f"(large: the {len(large)} groups asking for half the unit-hours; small: the other {len(small)})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
