"""qsub and qstat latency with 100 and 10,000 jobs stored.

    python3 benchmarks/commands.py [--runs 20]

Each figure is measured twice: the whole command as a user runs it (a fresh interpreter,
`python3 bin/qsub`, the package byte-compiled as an install leaves it), and the command's own work in an interpreter that has already
imported hpcsched (what a long-lived caller or a server would pay).  Targets: qsub median
<= 40 ms at 10,000 jobs; qstat listing 10,000 jobs <= 150 ms.
"""
from __future__ import annotations

import argparse
import compileall
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from hpcsched import qstat, qsub  # noqa: E402
from hpcsched.site import init_site  # noqa: E402


def figures(times: list[float]) -> str:
    times = sorted(times)
    return f"median {statistics.median(times) * 1000:7.1f} ms  p95 {times[int(0.95 * (len(times) - 1))] * 1000:7.1f} ms"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args(argv)
    # byte-compile as an installed package is, so that a fresh interpreter does not
    # compile hpcsched from source on every command (PYTHONDONTWRITEBYTECODE may be set)
    compileall.compile_dir(os.path.join(ROOT, "hpcsched"), quiet=1)
    with tempfile.TemporaryDirectory() as home:
        os.environ["HPCSCHED_HOME"] = home
        os.environ.setdefault("HPCSCHED_USER", "bench")
        init_site(home, nodes=4, cores=4)
        stored = 0
        for target in (100, 10000):
            while stored < target:
                qsub.submit(["-l", "walltime=600"], stdin=io.StringIO("true\n"), cwd=home, env={})
                stored += 1
            inproc_sub, inproc_stat, proc_sub, proc_stat = [], [], [], []
            for _ in range(args.runs):
                t = time.perf_counter()
                qsub.submit(["-l", "walltime=600"], stdin=io.StringIO("true\n"), cwd=home, env={})
                inproc_sub.append(time.perf_counter() - t)
                t = time.perf_counter()
                qstat.run([], out=io.StringIO())
                inproc_stat.append(time.perf_counter() - t)
                stored += 1
            for _ in range(max(3, args.runs // 4)):
                t = time.perf_counter()
                subprocess.run([sys.executable, os.path.join(ROOT, "bin", "qsub"), "-l", "walltime=600"],
                               input="true\n", capture_output=True, text=True, check=True)
                proc_sub.append(time.perf_counter() - t)
                t = time.perf_counter()
                subprocess.run([sys.executable, os.path.join(ROOT, "bin", "qstat")], capture_output=True, check=True)
                proc_stat.append(time.perf_counter() - t)
                stored += 1
            print(f"{target:>6} jobs stored")
            print(f"  qsub   in-process  {figures(inproc_sub)}   whole command {figures(proc_sub)}")
            print(f"  qstat  in-process  {figures(inproc_stat)}   whole command {figures(proc_stat)}")
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        print(f"(a bare '{os.path.basename(sys.executable)} -c pass' takes {(time.perf_counter() - t) * 1000:.0f} ms here)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
