"""A multi-user site's submission cost against a single-user one's, and many users at once.

    sudo python3 benchmarks/multiuser.py [--probes 60] [--clients 16] [--each 100]

As root (it makes the test users hpcst_alice and hpcst_bob, as tests/multiuser.py does,
and removes them after if it made them).  Two sites in a temporary directory every user
can pass through: a single-user site owned by alice, its server run as alice, and a
multi-user site with a root server.  Each submission is the real command run as alice
(`setpriv` to her ids, then `python3 -S bin/qsub`, a fresh interpreter as a shell runs
it), with an interpreter the users may execute (--python, default /usr/bin/python3).

1. idle: `--probes` held submissions to each site, interleaved one for one (this VM's
   drift falls on both alike); the ratio of the medians, multi-user over single-user
   (target <= 1.1);
2. concurrent: `--clients` shell loops, alice's and bob's in turn, each submitting
   `--each` held jobs to the multi-user site as fast as it answers; submissions a second
   and their ratio to the target of 150 (>= 1.0), and a check that each got its own job.
"""
from __future__ import annotations

import argparse
import os
import pwd
import shlex
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from multiuser import USERS, MultiSite, drop_users, make_users, new_base  # noqa: E402
from submit import _cpu  # noqa: E402  (this directory: the script's own)

from hpcsched.store.journaled import Batch  # noqa: E402
from hpcsched.store.site import init_site, load_site  # noqa: E402

TARGET_RATIO, TARGET_RATE = 1.1, 150.0


def as_user(user: str, argv: list[str]) -> list[str]:
    pw = pwd.getpwnam(user)
    return ["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--init-groups", *argv]


def qsub(user: str, home: str, python: str, script: str) -> float:
    env = {"HPCSCHED_HOME": home, "PATH": "/usr/bin:/bin", "HOME": pwd.getpwnam(user).pw_dir}
    t = time.perf_counter()
    done = subprocess.run(as_user(user, [python, "-S", os.path.join(ROOT, "bin", "qsub"), "-h", script]),
                          capture_output=True, text=True, env=env, cwd=os.path.dirname(script))
    if done.returncode:
        raise SystemExit(f"qsub as {user} failed: {done.stderr.strip()}")
    return time.perf_counter() - t


def stored(home) -> int:
    batch = Batch(load_site(home))
    with batch.open(write=False):
        return len(batch.sched.jobs)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--probes", type=int, default=60)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--each", type=int, default=100)
    ap.add_argument("--python", default="/usr/bin/python3", help="an interpreter (>= 3.11) the users may run")
    args = ap.parse_args(argv)
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        print("run as root (it makes two Unix users), with setpriv installed", file=sys.stderr)
        return 2
    base = new_base()
    made = make_users(base)
    multi = single = None
    try:
        alice = pwd.getpwnam(USERS[0])
        check = subprocess.run(as_user(USERS[0], [args.python, "-c", "import sys; assert sys.version_info >= (3, 11)"]),
                               capture_output=True)
        if check.returncode:
            print(f"{args.python} is not a Python >= 3.11 that {USERS[0]} may run (--python)", file=sys.stderr)
            return 2
        scripts = {}
        for user in USERS:
            pw = pwd.getpwnam(user)
            scripts[user] = os.path.join(pw.pw_dir, "bench.sh")
            with open(scripts[user], "w") as f:
                f.write("#!/bin/sh\ntrue\n")
            os.chown(scripts[user], pw.pw_uid, pw.pw_gid)
        # the single-user site: alice's own, her server
        one = base / "single"
        init_site(one, nodes=2, cores=2, managers=[USERS[0]])
        for p in [one, *one.rglob("*")]:
            os.lchown(p, alice.pw_uid, alice.pw_gid)
        env = dict(os.environ, HPCSCHED_HOME=str(one), PYTHONPATH=ROOT)
        env.pop("HPCSCHED_USER", None)
        single = subprocess.Popen(as_user(USERS[0], [args.python, "-m", "hpcsched", "server", "--interval", "5"]),
                                  env=env, cwd=str(base), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        multi = MultiSite(base)
        multi.start()
        while not (one / "commands.sock").exists():
            assert single.poll() is None, "the single-user server did not start"
            time.sleep(0.05)
        for _ in range(3):  # (warm caches)
            qsub(USERS[0], str(one), args.python, scripts[USERS[0]])
            qsub(USERS[0], str(multi.home), args.python, scripts[USERS[0]])
        alone, shared = [], []
        for k in range(args.probes):  # interleaved, the first of each pair alternating
            pair = [(alone, one), (shared, multi.home)]
            for times, home in pair if k % 2 == 0 else pair[::-1]:
                times.append(qsub(USERS[0], str(home), args.python, scripts[USERS[0]]))
        ratio = statistics.median(shared) / statistics.median(alone)
        print(f"idle qsub, single-user site: median {statistics.median(alone) * 1000:6.1f} ms")
        print(f"idle qsub, multi-user site:  median {statistics.median(shared) * 1000:6.1f} ms")
        print(f"  ratio multi/single {ratio:.2f} (target <= {TARGET_RATIO})")

        before = stored(multi.home)
        cpu = _cpu(multi.server.pid)
        loops, outs = [], []
        t = time.perf_counter()
        for k in range(args.clients):
            user = USERS[k % 2]
            line = shlex.join([args.python, "-S", os.path.join(ROOT, "bin", "qsub"), "-h", scripts[user]])
            loop = f"for i in $(seq {args.each}); do {line} || exit 1; done"
            out = open(base / f"client{k}.out", "w+")
            outs.append(out)
            loops.append(subprocess.Popen(as_user(user, ["sh", "-c", loop]), stdout=out,
                                          env={"HPCSCHED_HOME": str(multi.home), "PATH": "/usr/bin:/bin",
                                               "HOME": pwd.getpwnam(user).pw_dir}, cwd=str(base)))
        failed = sum(p.wait() != 0 for p in loops)
        wall = time.perf_counter() - t
        cpu = _cpu(multi.server.pid) - cpu
        ids = []
        for out in outs:
            out.seek(0)
            ids += out.read().split()
            out.close()
        total = args.clients * args.each
        rate = total / wall
        print(f"{args.clients} clients x {args.each} qsub on the multi-user site: {rate:6.1f} submissions/s "
              f"({wall:.1f} s){f', {failed} clients failed' if failed else ''}; the server's CPU "
              f"{cpu / total * 1000:.2f} ms a submission (the rest is the clients' interpreters, "
              f"{os.cpu_count()} cores here)")
        print(f"  ratio to {TARGET_RATE:.0f}/s: {rate / TARGET_RATE:.2f} (target >= 1.0)")
        new = stored(multi.home) - before
        ok = len(set(ids)) == len(ids) == total == new
        print(f"  ids {len(set(ids))} distinct of {len(ids)}, {new} new jobs stored: "
              f"{'none lost or duplicated' if ok else 'LOST OR DUPLICATED SUBMISSIONS'}")
        return 0 if ok and not failed else 1
    finally:
        if multi is not None:
            multi.stop()
        if single is not None:
            single.terminate()
            single.wait()
        drop_users(made)
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
