"""Append latency of the state store as it grows (each append is locked and fsync'd).

    python3 benchmarks/store.py

An append must cost the same with 100 or 10,000 records already stored.
"""
from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from hpcsched.store.journal import Store  # noqa: E402

RECORD = {"op": "submit", "job": {"id": 0, "name": "STDIN", "owner": "alice", "queue": "batch",
                                  "request": {"nodes": 1, "ppn": 4}, "walltime": 3600.0}}


def main() -> int:
    print(f"{'stored':>8}{'median ms':>11}{'p95 ms':>9}  (200 locked, fsync'd appends)")
    with tempfile.TemporaryDirectory() as home:
        store = Store(home)
        stored = 0
        for target in (100, 10000):
            with store.locked():  # fill without timing
                while stored < target:
                    store.append(RECORD)
                    stored += 1
            times = []
            for _ in range(200):
                t = time.perf_counter()
                with store.locked():
                    store.append(RECORD)
                times.append(time.perf_counter() - t)
                stored += 1
            times.sort()
            print(f"{target:>8}{statistics.median(times) * 1000:>11.3f}{times[int(0.95 * len(times))] * 1000:>9.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
