"""`hpcsched demo`: the embedded default test rig running real jobs, in a temporary directory.

Sets up a site, starts `hpcsched server`, submits jobs with the real `qsub` (an array, a
job depending on another, one held and then released), shows `qstat` while they run, then
the finished jobs and their accounting records.  It stops the server and leaves nothing
running.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .pbs import accounting
from .store.site import init_site

ROOT = Path(__file__).resolve().parent.parent


def _command(name: str) -> list[str]:
    """Run a PBS command through this interpreter, installed or from a checkout."""
    local = ROOT / "bin" / name
    if local.exists():
        return [sys.executable, str(local)]
    return [sys.executable, "-c", f"import sys; from hpcsched.pbs.front import main; sys.exit(main({name!r}))"]


def run(out) -> int:
    with tempfile.TemporaryDirectory(prefix="hpcsched-demo-") as tmp:
        home, work, user = Path(tmp) / "home", Path(tmp) / "work", Path(tmp) / "user"
        work.mkdir()
        user.mkdir()  # the submitter's home, where PBS starts jobs (output goes where qsub ran)
        init_site(home, nodes=4, cores=2)
        config = home / "config.toml"
        config.write_text("server_interval = 1\nkill_grace = 2\n" + config.read_text())
        env = dict(os.environ, HPCSCHED_HOME=str(home), HOME=str(user))
        env.pop("HPCSCHED_FLAVOR", None)

        def sh(name, *args, stdin=None):
            p = subprocess.run(_command(name) + list(args), input=stdin, capture_output=True, text=True,
                               env=env, cwd=work, timeout=60)
            return p.stdout

        out.write(f"test rig in {tmp}: 4 nodes x 2 cores, FIFO with EASY backfill\n\n")
        server = subprocess.Popen([sys.executable, "-m", "hpcsched", "server"], env=env, cwd=ROOT,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            prep = sh("qsub", "-N", "prepare", "-l", "nodes=2:ppn=2,walltime=00:01:00",
                      stdin="#!/bin/sh\nsleep 2\necho prepared on $(sort -u $PBS_NODEFILE | tr '\\n' ' ')\n").strip()
            sweep = sh("qsub", "-N", "sweep", "-t", "1-4%2", "-l", "walltime=00:01:00",
                       stdin="#!/bin/sh\nsleep 1\necho task $PBS_ARRAYID of $PBS_JOBID\n").strip()
            post = sh("qsub", "-N", "analyse", "-W", f"depend=afterok:{prep}", "-l", "walltime=00:01:00",
                      stdin="#!/bin/sh\necho started in $(pwd), its owner\\'s home, submitted from $PBS_O_WORKDIR\n").strip()
            held = sh("qsub", "-N", "held", "-h", "-l", "walltime=00:01:00",
                      stdin="#!/bin/sh\necho released and run\n").strip()
            out.write(f"submitted: {prep} (prepare), {sweep} (array of 4, 2 at a time), {post} (afterok "
                      f"{prep}), {held} (held)\n\n")
            time.sleep(1.5)
            out.write("$ qstat -t\n" + sh("qstat", "-t") + "\n")
            sh("qrls", held)
            out.write(f"$ qrls {held}\n\n")
            deadline = time.time() + 45
            while time.time() < deadline:
                listing = sh("qstat", "-t")
                if all(line.split()[4] == "C" for line in listing.splitlines()[2:]):
                    break
                time.sleep(0.5)
            out.write("$ qstat -t   (finished: Torque keeps completed jobs as C for a while)\n"
                      + sh("qstat", "-t") + "\n")
            out.write("job output files:\n")
            for path in sorted(work.glob("*.o*")):
                out.write(f"  {path.name}: {path.read_text().strip()}\n")
            out.write("\naccounting records (server_priv/accounting style):\n")
            for e in accounting.read(home):
                out.write(f"  {e.when} {e.kind} {e.job_id:<12} exit={e.fields.get('Exit_status', '-')}\n")
        finally:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
    return 0
