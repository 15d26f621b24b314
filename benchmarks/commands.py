"""qsub and qstat latency with 100 and 10,000 jobs stored, with and without a server.

    python3 benchmarks/commands.py [--runs 20]

Three figures per command: its own work in an interpreter that has hpcsched imported
(in-process, no server); the whole command as a user runs it, a fresh interpreter
(`python3 -S bin/qsub`, what bin/'s shebang runs; the package byte-compiled as an
install leaves it) with no server, so it reads the store itself; and the same command
while `hpcsched server` runs, which answers it from the state it keeps loaded.  The jobs
are held (-h) so that the server does not start 10,000 of them.  Targets: qsub median
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

from hpcsched.pbs import front as commands  # noqa: E402
from hpcsched.pbs import qstat, qsub  # noqa: E402
from hpcsched.store.site import init_site  # noqa: E402

SUBMIT = ["-h", "-l", "walltime=600"]


def figures(times: list[float]) -> str:
    times = sorted(times)
    return f"median {statistics.median(times) * 1000:6.1f} ms  p95 {times[int(0.95 * (len(times) - 1))] * 1000:6.1f} ms"


def timed(argv: list[str], stdin: str | None = None) -> float:
    t = time.perf_counter()
    subprocess.run(argv, input=stdin, capture_output=True, text=True, check=True)
    return time.perf_counter() - t


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args(argv)
    # byte-compile as an installed package is, so that a fresh interpreter does not
    # compile hpcsched from source on every command (PYTHONDONTWRITEBYTECODE may be set)
    compileall.compile_dir(os.path.join(ROOT, "hpcsched"), quiet=1)
    py = [sys.executable, "-S"]
    qsub_cmd, qstat_cmd = [*py, os.path.join(ROOT, "bin", "qsub"), *SUBMIT], [*py, os.path.join(ROOT, "bin", "qstat")]
    with tempfile.TemporaryDirectory() as home:
        os.environ["HPCSCHED_HOME"] = home
        os.environ.setdefault("HPCSCHED_USER", "bench")
        init_site(home, nodes=4, cores=4)
        for target in (100, 10000):
            stored = int(qsub.submit(SUBMIT, stdin=io.StringIO("true\n"), cwd=home, env={})[0].split(".")[0])
            while stored < target:
                stored = int(qsub.submit(SUBMIT, stdin=io.StringIO("true\n"), cwd=home, env={})[0].split(".")[0])
            inproc_sub, inproc_stat, proc_sub, proc_stat, srv_sub, srv_stat = [], [], [], [], [], []
            for _ in range(args.runs):
                t = time.perf_counter()
                qsub.submit(SUBMIT, stdin=io.StringIO("true\n"), cwd=home, env={})
                inproc_sub.append(time.perf_counter() - t)
                t = time.perf_counter()
                qstat.QSTAT([], out=io.StringIO())
                inproc_stat.append(time.perf_counter() - t)
            for _ in range(max(3, args.runs // 4)):
                proc_sub.append(timed(qsub_cmd, "true\n"))
                proc_stat.append(timed(qstat_cmd))
            server = subprocess.Popen([sys.executable, "-m", "hpcsched", "server"], cwd=ROOT,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                while not os.path.exists(os.path.join(home, commands.SOCKET)):
                    time.sleep(0.05)
                time.sleep(1.0)  # let its first step (loading the store) finish
                for _ in range(args.runs):
                    srv_sub.append(timed(qsub_cmd, "true\n"))
                    srv_stat.append(timed(qstat_cmd))
            finally:
                server.terminate()
                server.wait()
            print(f"{target:>6} jobs stored")
            print(f"  qsub   in-process {figures(inproc_sub)} | command {figures(proc_sub)}"
                  f" | command, server running {figures(srv_sub)}")
            print(f"  qstat  in-process {figures(inproc_stat)} | command {figures(proc_stat)}"
                  f" | command, server running {figures(srv_stat)}")
        for flags in (["-S"], []):
            t = min(timed([sys.executable, *flags, "-c", "pass"]) for _ in range(5))
            print(f"(a bare '{os.path.basename(sys.executable)} {' '.join(flags + ['-c', 'pass'])}' "
                  f"takes {t * 1000:.0f} ms here)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
