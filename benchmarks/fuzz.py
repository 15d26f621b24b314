"""Many generated bad inputs, each judged as tests/test_fuzz.py judges a few.

    python3 benchmarks/fuzz.py [--cases 10000] [--seed 1] [--show 10]

The cases are shared among the kinds (commands 60 %, store damage 20 %, configs 10 %,
trace lines 10 %) on a test-rig site in a temporary directory; prints, per kind, the cases
run and the tracebacks, hangs, undocumented statuses, failed commands that changed the
store and damaged stores taken for sound ones (all should be 0), then the first few
failures in full.
"""
from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

from fuzz import cases, run_case  # noqa: E402
from test_fuzz import _rig  # noqa: E402

SHARE = {"command": 0.6, "store": 0.2, "config": 0.1, "trace": 0.1}
VERDICTS = ("traceback", "hang", "status", "changed", "unnoticed")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--show", type=int, default=10)
    args = ap.parse_args()
    shown = []
    print(f"{'kind':<10}{'cases':>8}" + "".join(f"{v:>11}" for v in VERDICTS) + f"{'seconds':>10}")
    totals = collections.Counter()
    for kind, share in SHARE.items():
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            os.chdir(tmp)
            os.environ.update(HPCSCHED_HOME=str(tmp / "home"), HPCSCHED_USER="alice")
            home = _rig(tmp)
            config = (home / "config.toml").read_text()
            n = max(1, int(args.cases * share))
            found = collections.Counter()
            t = time.monotonic()
            for k, case in enumerate(cases(kind, args.seed, n)):
                wrong = run_case(case, home)
                if wrong:
                    found[wrong.split(":")[0].split()[0]] += 1
                    if len(shown) < args.show:
                        shown.append(f"{kind} case {k}: {wrong}\n    {case}")
                if kind == "config":
                    (home / "config.toml").write_text(config)
            os.environ.pop("HPCSCHED_FLAVOR", None)
            totals.update(found)
            totals["cases"] += n
            print(f"{kind:<10}{n:>8}" + "".join(f"{found[v]:>11}" for v in VERDICTS)
                  + f"{time.monotonic() - t:>10.1f}")
    print(f"{'all':<10}{totals['cases']:>8}" + "".join(f"{totals[v]:>11}" for v in VERDICTS))
    for s in shown:
        print(s)


if __name__ == "__main__":
    main()
