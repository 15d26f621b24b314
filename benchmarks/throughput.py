"""Throughput of the live server on the local test rig: 1,000 `true` jobs.

    python3 benchmarks/throughput.py [--jobs 1000] [--nodes 16]

Sets up a rig in a temporary directory (N single-core nodes on this host), starts
`hpcsched server`, submits the jobs one by one (in-process qsub calls, as a workflow tool
embedding hpcsched would; then again as one array) and times the first submission to the
last completion.  Prints seconds and jobs per second.
"""
from __future__ import annotations

import argparse
import io
import os
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from hpcsched.core.jobs import FINISHED  # noqa: E402
from hpcsched.pbs import qsub  # noqa: E402
from hpcsched.store.journaled import Batch  # noqa: E402
from hpcsched.store.site import init_site, load_site  # noqa: E402


def finished(home) -> int:
    batch = Batch(load_site(home))
    with batch.open(write=False):
        return sum(1 for j in batch.sched.jobs.values() if j.state in FINISHED)


def run(jobs: int, nodes: int, array: bool) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        home = os.path.join(tmp, "home")
        os.environ["HPCSCHED_HOME"] = home
        init_site(home, nodes=nodes, cores=1)
        path = os.path.join(home, "config.toml")
        text = open(path).read()
        open(path, "w").write("server_interval = 1\nkill_grace = 5\n" + text)
        server = subprocess.Popen([sys.executable, "-m", "hpcsched", "server"], cwd=ROOT, env=os.environ,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            time.sleep(0.5)
            t0 = time.perf_counter()
            if array:
                qsub.submit(["-t", f"1-{jobs}", "-l", "walltime=60", "-o", f"{tmp}/", "-e", f"{tmp}/"],
                            stdin=io.StringIO("true\n"), cwd=tmp, env={})
            else:
                for _ in range(jobs):
                    qsub.submit(["-l", "walltime=60", "-o", f"{tmp}/", "-e", f"{tmp}/"],
                                stdin=io.StringIO("true\n"), cwd=tmp, env={})
                    from hpcsched.store.site import notify
                    notify(home)
            submitted = time.perf_counter() - t0
            while finished(home) < jobs:
                time.sleep(0.2)
            return submitted, time.perf_counter() - t0
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(30)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--nodes", type=int, default=16)
    args = ap.parse_args(argv)
    for array in (False, True):
        submitted, total = run(args.jobs, args.nodes, array)
        how = "one array (qsub -t)" if array else "separate qsub calls"
        print(f"{args.jobs} 'true' jobs on {args.nodes} single-core nodes, {how}: submitted in {submitted:.1f} s, "
              f"all finished after {total:.1f} s ({args.jobs / total:.1f} jobs/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
