"""The simulator as a policy lab: a sweep's parallel speed-up and a big trace's report.

    python3 benchmarks/lab.py [--traces DIR] [--only sweep|report] [--pairs N]

sweep: 8 configurations of KTH-SP2 (FIFO or Simon x request or exact estimates x
first-fit or contiguous placement, all EASY) run one after another in one process, then
as one `sweep` on every core; the ratio parallel / sequential (target <= 0.6 on 2 cores),
for `--pairs` pairs in turn, as this VM drifts 20-40 % from run to run.

report: RICC-2010 (448k jobs) replayed under EASY once, then its HTML report written from
the result (to_json included), and again from its results.json as `hpcsched report` does:
seconds and bytes (targets <= 10 s, <= 5 MB).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from hpcsched.sim import report, sweep  # noqa: E402
from hpcsched.sim.run import check  # noqa: E402
from hpcsched.sim.simulate import simulate  # noqa: E402


def sweep_bench(traces: str, pairs: int) -> None:
    kth = os.path.join(traces, "KTH-SP2-1996-2.1-cln.swf.gz")
    if not os.path.exists(kth):
        print(f"sweep: {kth} absent, skipped")
        return
    cells = [{"label": f"{p}/{e}/{pl}", "varying": {}, "settings": check(
        {"trace": kth, "priority.policy": p, "estimate": e, "placement": pl, "drain": False})}
             for p in ("fifo", "simon") for e in ("request", "perfect") for pl in ("first-fit", "contiguous")]
    print(f"sweep of {len(cells)} KTH-SP2 cells on {os.cpu_count()} cores")
    for k in range(pairs):
        t = time.monotonic()
        one = sweep.run(cells, workers=1)
        seq = time.monotonic() - t
        t = time.monotonic()
        par = sweep.run(cells)
        wall = time.monotonic() - t
        same = [o["row"]["mean_wait"] for o in one] == [o["row"]["mean_wait"] for o in par]
        print(f"  pair {k + 1}: one after another {seq:6.1f} s   sweep {wall:6.1f} s   ratio {wall / seq:.2f}"
              f"   (same figures: {same})")


def report_bench(traces: str) -> None:
    ricc = os.path.join(traces, "RICC-2010-2.swf.gz")
    if not os.path.exists(ricc):
        print(f"report: {ricc} absent, skipped")
        return
    t = time.monotonic()
    result = simulate(ricc, drain=False)
    print(f"RICC-2010 replay under EASY: {time.monotonic() - t:.1f} s ({result.metrics.jobs} jobs)")
    with tempfile.TemporaryDirectory() as tmp:
        page = os.path.join(tmp, "ricc.html")
        t = time.monotonic()
        with open(page, "w") as f:
            f.write(report.html([report.run_of(result.to_json(), "RICC EASY")]))
        took = time.monotonic() - t
        print(f"  report from the result: {took:.2f} s, {os.path.getsize(page) / 1e6:.2f} MB")
        results = os.path.join(tmp, "results.json")
        with open(results, "w") as f:
            result.write_json(f)
        t = time.monotonic()
        with open(page, "w") as f:
            f.write(report.html(report.load(results)))
        took = time.monotonic() - t
        print(f"  report from results.json ({os.path.getsize(results) / 1e6:.0f} MB): {took:.2f} s, "
              f"{os.path.getsize(page) / 1e6:.2f} MB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", default=os.path.join(ROOT, "..", "shared", "traces"))
    ap.add_argument("--only", choices=["sweep", "report"])
    ap.add_argument("--pairs", type=int, default=2)
    args = ap.parse_args()
    if args.only in (None, "sweep"):
        sweep_bench(args.traces, args.pairs)
    if args.only in (None, "report"):
        report_bench(args.traces)


if __name__ == "__main__":
    main()
