"""Submissions to a running server: one qsub's latency idle and under load, and many at once.

    python3 benchmarks/submit.py [--probes 50] [--clients 16] [--each 500]

Sets up a rig in a temporary directory (16 single-core nodes on this host), starts
`hpcsched server`, and times the real command (`python3 -S bin/qsub`, a fresh interpreter
as a user's shell runs it):

1. idle: `--probes` held submissions one after another;
2. loaded: the same while a feeder submits 8 one-second jobs a second, so about 8 jobs a
   second start and 8 end;
3. concurrent: `--clients` clients each submitting `--each` held jobs as fast as they can;
   then checks that every submission got its own job and that the store holds them all.

Also the client's own CPU for a forwarded qsub and `qstat -f` of one job, against a bare
interpreter's (and Slurm's sbatch and scontrol where a Slurm controller answers).

Targets: median <= 15 ms idle, <= 25 ms loaded; client CPU within 3 ms of the bare
interpreter; >= 150 submissions/s concurrent, none lost or duplicated.
"""
from __future__ import annotations

import argparse
import compileall
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from hpcsched.pbs import front  # noqa: E402
from hpcsched.store.journaled import Batch  # noqa: E402
from hpcsched.store.site import init_site, load_site  # noqa: E402

QSUB = [sys.executable, "-S", os.path.join(ROOT, "bin", "qsub")]


def figures(times: list[float]) -> str:
    times = sorted(times)
    return (f"median {statistics.median(times) * 1000:5.1f} ms  p95 {times[int(0.95 * (len(times) - 1))] * 1000:5.1f} ms"
            f"  p99 {times[int(0.99 * (len(times) - 1))] * 1000:5.1f} ms")


def qsub(*args: str) -> tuple[float, str]:
    t = time.perf_counter()
    done = subprocess.run([*QSUB, *args], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"qsub failed: {done.stderr.strip()}")
    return time.perf_counter() - t, done.stdout.strip()


def probes(n: int, script: str) -> list[float]:
    return [qsub("-h", script)[0] for _ in range(n)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--probes", type=int, default=50)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--each", type=int, default=500)
    args = ap.parse_args(argv)
    compileall.compile_dir(os.path.join(ROOT, "hpcsched"), quiet=1)
    with tempfile.TemporaryDirectory() as tmp:
        home = os.path.join(tmp, "home")
        os.environ["HPCSCHED_HOME"] = home
        os.environ.pop("HPCSCHED_USER", None)
        init_site(home, nodes=16, cores=1)
        script = os.path.join(tmp, "job.sh")
        with open(script, "w") as f:
            f.write("#!/bin/sh\nsleep 1\n")
        os.chdir(tmp)
        server = subprocess.Popen([sys.executable, "-m", "hpcsched", "server", "--interval", "5"],
                                  cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            while not front.server_answers():
                time.sleep(0.05)
            probes(5, script)  # (warm caches)
            idle = probes(args.probes, script)
            print(f"qsub, idle server:          {figures(idle)}")
            client_cpu(args.probes, script)

            stop = threading.Event()

            def feeder() -> None:  # 8 one-second jobs a second: ~8 starts and 8 ends a second
                due = time.perf_counter()
                while not stop.is_set():
                    qsub("-l", "walltime=60", script)
                    due += 1 / 8
                    time.sleep(max(0.0, due - time.perf_counter()))
            feed = threading.Thread(target=feeder)
            feed.start()
            time.sleep(3)  # (into the steady state)
            loaded = probes(args.probes, script)
            stop.set()
            feed.join()
            print(f"qsub, 8 jobs/s start & end: {figures(loaded)}")

            # each client a shell loop, as users' scripts submit: the figure is the
            # commands' and the server's, not this benchmark's own process spawning
            loop = f'for i in $(seq {args.each}); do {shlex.join([*QSUB, "-h", script])} || exit 1; done'
            before = len(_jobs(home))
            cpu = _cpu(server.pid)
            t = time.perf_counter()
            outs = [open(os.path.join(tmp, f"client{k}.out"), "w+") for k in range(args.clients)]
            clients = [subprocess.Popen(["sh", "-c", loop], stdout=out) for out in outs]
            failed = sum(c.wait() != 0 for c in clients)
            wall = time.perf_counter() - t
            cpu = _cpu(server.pid) - cpu
            total = args.clients * args.each
            got = []
            for out in outs:
                out.seek(0)
                got += out.read().split()
                out.close()
            stored = len(_jobs(home)) - before
            print(f"{args.clients} clients x {args.each} qsub: {total / wall:6.1f} submissions/s ({wall:.1f} s); "
                  f"ids {len(set(got))} distinct of {len(got)}, {stored} new jobs stored"
                  f"{f', {failed} clients failed' if failed else ''}; the server's CPU: "
                  f"{cpu / total * 1000:.2f} ms a submission")
            ok = len(set(got)) == len(got) == total == stored
            print("none lost or duplicated" if ok else "LOST OR DUPLICATED SUBMISSIONS")
        finally:
            server.terminate()
            server.wait()
    for flags in (["-S"], []):
        t = min(_run([sys.executable, *flags, "-c", "pass"]) for _ in range(5))
        print(f"(a bare '{os.path.basename(sys.executable)} {' '.join(flags + ['-c', 'pass'])}' takes "
              f"{t * 1000:.0f} ms here)")
    return 0 if ok else 1


def client_cpu(n: int, script: str) -> None:
    """A forwarded command's own CPU (user + system of the client process alone), median of
    `n`, beside a bare interpreter's; and beside Slurm's sbatch and scontrol where a Slurm
    controller answers here.  Target: qsub and qstat -f one job within 3 ms of the bare
    interpreter."""
    job = qsub("-h", script)[1]
    bare = _client([sys.executable, "-S", "-c", "pass"], n)
    print(f"client CPU, median of {n}: bare 'python3 -S -c pass' {bare * 1000:.1f} ms", flush=True)
    for label, argv in (("qsub -h", [*QSUB, "-h", script]),
                        ("qstat -f one job", [sys.executable, "-S", os.path.join(ROOT, "bin", "qstat"), "-f", job])):
        cpu = _client(argv, n)
        print(f"  {label:<17} {cpu * 1000:5.1f} ms: the interpreter + {(cpu - bare) * 1000:.1f} ms "
              f"(target + 3 ms: {'met' if cpu - bare <= 0.003 else 'MISSED'})", flush=True)
        slurm = ["sbatch", "--hold", "--wrap", "true"] if label == "qsub -h" else ["scontrol", "show", "job"]
        if shutil.which(slurm[0]) and subprocess.run(["scontrol", "ping"], capture_output=True).returncode == 0:
            theirs = _client(slurm, n)
            print(f"  {'':<17} {' '.join(slurm[:2])}: {theirs * 1000:.1f} ms, ratio {cpu / theirs:.2f}")
    if not shutil.which("sbatch"):
        print("  (no Slurm here: the ratios to sbatch and scontrol are not measured)")


def _client(argv: list[str], n: int) -> float:
    """Median CPU seconds (user + system) of a child running `argv`."""
    times = []
    for _ in range(n):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(argv, capture_output=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        times.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(times)


def _jobs(home: str) -> dict:
    batch = Batch(load_site(home))
    with batch.open(write=False):
        return dict(batch.sched.jobs)


def _cpu(pid: int) -> float:
    """CPU seconds process `pid` has used (user + system)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _run(argv: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(argv, capture_output=True)
    return time.perf_counter() - t


if __name__ == "__main__":
    sys.exit(main())
