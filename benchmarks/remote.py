"""From `qsub` to a job's start on another host, over ssh (`launcher = "ssh"`).

    sudo python3 benchmarks/remote.py [--jobs 10]

Makes two hosts as the tests do (tests/cluster.py: network namespaces joined by a bridge,
an OpenSSH sshd in each; needs root, `ip` and sshd, and says what is missing otherwise),
starts `hpcsched server` on a site whose nodes they are, and times, job after job, from
`qsub` returning to the job's first line running on its host: with the server's default
connection sharing (ssh's ControlMaster), with a new connection every request, and, for
comparison, the `local` launcher (every node is this host).  Each job is submitted once
the one before has ended.  Prints min / median / max milliseconds of each.
"""
from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from cluster import Namespaces, missing, site, start_server  # noqa: E402

QSUB = os.path.join(ROOT, "bin", "qsub")
#: the tests' step (0.5 s) would time the step, not the path: a step every 30 s, so that
#: what starts a job is qsub's poke, as on a site
SETTINGS = "server_interval = 30\nkill_grace = 1\nnode_check_rate = 150\n"


def starts(home: Path, env: dict, work: Path, jobs: int) -> list[float]:
    """Seconds from each qsub's return to its job's first line, one job at a time."""
    out = []
    for i in range(jobs):
        mark = work / f"start{i}"
        done = subprocess.run([QSUB, "-l", "walltime=60", "-o", "/dev/null", "-e", "/dev/null"],
                              input=f"date +%s.%N > {mark}\n", capture_output=True, text=True, env=env, cwd=work)
        returned = time.time()
        if done.returncode:
            raise SystemExit(f"qsub failed: {done.stderr.strip()}")
        deadline = returned + 30
        while not (mark.exists() and mark.read_text().strip()):
            if time.time() > deadline:
                raise SystemExit(f"job {i} never started (see {work.parent}/server.log)")
            time.sleep(0.002)
        out.append(float(mark.read_text()) - returned)
        time.sleep(0.3)  # (it ends, and the server sees it end)
    return out


def measure(kind: str, hosts, jobs: int) -> list[float]:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        home, env, work, _ = site(tmp, hosts, SETTINGS)
        config = home / "config.toml"
        text = config.read_text()
        if kind == "local":
            text = text.replace('launcher = "ssh"\n', "")
        elif kind == "ssh, a connection a request":
            text = text.replace('ssh = ["ssh", "-F"', 'ssh = ["ssh", "-o", "ControlMaster=no", "-F"')
        config.write_text(text)
        server = start_server(home, env, tmp / "server.log")
        try:
            return starts(home, env, work, jobs)
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=10)
    args = ap.parse_args()
    why = missing()
    if why:
        raise SystemExit(f"remote.py: network namespaces with sshd: {why}")
    with tempfile.TemporaryDirectory() as tmp:
        hosts = Namespaces(Path(tmp))
        try:
            print(f"qsub -> a job's first line on its host, {args.jobs} jobs one after another (ms)")
            for kind in ("local", "ssh, ControlMaster (the default)", "ssh, a connection a request"):
                times = [1000 * t for t in measure(kind, hosts, args.jobs)]
                print(f"  {kind:34s} min {min(times):7.1f}  median {statistics.median(times):7.1f}  "
                      f"max {max(times):7.1f}")
        finally:
            hosts.close()


if __name__ == "__main__":
    main()
