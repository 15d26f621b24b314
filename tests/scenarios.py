"""Seeded scenarios for a live server: a stream of ordinary commands, with the server killed
(SIGKILL) or stopped (qterm) and started again at random moments, then the invariants every
run must keep.  `run(root, seed, steps)` plays one and returns what broke ([] if nothing):

    lost        a job qsub gave an id for is unknown at the end, or never finished
    twice       a job's script started more often than the accounting log says it was started
    overbooked  two runs held one core at once (the accounting log's starts and ends)
    status      a job that ran to its end undisturbed is recorded with another exit status
    order       a job ran although its afterok parent did not end with status 0, or before it ended
    records     a job's accounting records do not tell one story (two Q, an end with no start)
    stray       a process of a job outlived it
    server      the server died on its own, or wrote a traceback
    reservation a job ran outside the pbs_rsub reservation it was submitted to, or one not
                submitted to it could run on its nodes into its window (by its walltime), if
                it started, or still ran, after the reservation was made
    scripts     (a site with a prologue and an epilogue, half the seeds) a job's script ran
                with no prologue passed before it, or a run was recorded ended before its
                epilogue was done
    offline     a job started on a node while pbsnodes -o had it offline
    limits      two of a user's jobs ran at once in queue short (max_running_per_user 1), or
                a job started from short while qstop had it stopped (qrun aside)
    security    (a multi-user site) a user's command on another's job or reservation did
                not fail, or a job ran as someone other than its owner

Seeds 0 modulo 3 play a Torque-flavored site, 1 a Cobalt one (qsub -n -t of a script file,
qalter -t and -n, cqadm --run, --stopq, --startq and --admin-release; the other commands keep
Torque's form), 2 an OpenPBS one (select=, -J, qrun -H (host:ncpus=1)).  Jobs go to queue
batch or short, and move between them.  Some are `qsub -I` sessions, their commands on
stdin, played in the background and judged as the others once their qsub has ended (one
whose session met a server killed or stopped, as disturbed).  Every job writes `S id time` to an events file as
it starts and `E id time status` as it ends, so what ran is known apart from what the
server says ran; the site's prologue writes `P id time` and its epilogue `X id time` as it
starts and `Y id time status` as it ends.  The prologue aborts every job numbered 4 modulo
9 (status 1) and holds each numbered 7 modulo 9 once (status 2: a system hold the scenario
releases).  tests/test_scenarios.py plays a few scenarios per CI run;
benchmarks/scenarios.py plays many.
"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / "bin"
NODES, CORES = 2, 2
FLAVORS = ("torque", "cobalt", "openpbs")  # by seed modulo 3
SHORT = '[queues.short]\nmax_walltime = "00:10:00"\nmax_running_per_user = 1\n'
SETTLE = 90.0  # seconds the jobs left at the end may take to finish
SESSION = 600  # seconds a qsub -I may wait for its job and run its session (a scenario's whole length)

#: the commands a scenario draws from, with their weights
STEPS = {"submit": 30, "delete": 5, "hold": 4, "release": 4, "alter": 3, "resize": 2, "rerun": 3, "signal": 2,
         "suspend": 2, "resume": 2, "qrun": 2, "offline": 2, "online": 2, "kill": 4, "crash": 3, "qterm": 2, "wait": 10,
         "rsub": 2, "rjob": 3, "rdel": 1, "move": 3, "stop": 1, "start": 1, "interactive": 3}


PROLOGUE = """#!/bin/sh
n=${1%%.*}; echo "P $n $(date +%s.%N)" >> "$EVENTS"; sleep 0.2
case $(( ${n%%[*} % 9 )) in
4) exit 1;;
7) [ -e "$EVENTS.held.$n" ] || { : > "$EVENTS.held.$n"; exit 2; };;
esac
"""
EPILOGUE = """#!/bin/sh
n=${1%%.*}; echo "X $n $(date +%s.%N)" >> "$EVENTS"; sleep 0.3; echo "Y $n $(date +%s.%N) ${10}" >> "$EVENTS"
"""


class Rig:
    """A site on this host (2 nodes of 2 cores), its server, and the jobs given to it;
    with `scripts`, the site's prologue and epilogue (above).  With `users` (real Unix
    users: tests/multiuser.py), a multi-user site: a root server, each user's commands run
    as that user from a work directory of its own, the managers' as root."""

    def __init__(self, root: Path, scripts: bool = False, users: tuple[str, ...] = (), flavor: str = "torque"):
        from hpcsched.store.site import init_site
        self.home, self.work, self.scripts, self.flavor = root / "home", root / "work", scripts, flavor
        self.users, self.multi = users or ("alice",), bool(users)
        init_site(self.home, nodes=NODES, cores=CORES, managers=["root" if users else "boss"], multi_user=self.multi)
        config = self.home / "config.toml"
        text = "server_interval = 0.25\nkill_grace = 1\n"
        if scripts:  # (run as the server: on a multi-user site, into the job owner's, $2, events)
            events = f"{self.work}/$2/events" if users else str(self.work / "events")
            for name, body in (("prologue", PROLOGUE), ("epilogue", EPILOGUE)):
                (root / name).write_text(body.replace("$EVENTS", events))
                text += f'{name} = ["sh", "{root / name}"]\n'
        config.write_text(text + config.read_text().replace("keep_completed = 300", "keep_completed = 86400")
                          .replace('flavor = "torque"', f'flavor = "{flavor}"') + SHORT)
        self.work.mkdir()
        if users:
            import pwd
            os.chmod(root, 0o755)
            for user in users:  # (its events file its own, whoever appends first)
                pw = pwd.getpwnam(user)
                self.workdir(user).mkdir(mode=0o755)
                (self.workdir(user) / "events").touch(mode=0o644)
                for path in (self.workdir(user), self.workdir(user) / "events"):
                    os.chown(path, pw.pw_uid, pw.pw_gid)
        self.env = dict(os.environ, HPCSCHED_HOME=str(self.home))  # (the server's; on one user's site, hers)
        self.env.pop("HPCSCHED_FLAVOR", None)
        self.env.pop("HPCSCHED_USER", None)
        if not users:
            (root / "alice").mkdir()
            self.env.update(HPCSCHED_USER="alice", HOME=str(root / "alice"))
        self.server: subprocess.Popen | None = None
        self.logs: list[str] = []  # every server's stderr
        self.jobs: dict[str, dict] = {}  # id qsub printed -> what was asked of it
        self.resvs: dict[str, dict] = {}  # pbs_rsub's id -> its window and nodes (as pbs_rstat -f said)
        self.offline: dict[str, list] = {}  # node -> [from, until (None: still)] while pbsnodes -o held it
        self.stopped_short: list = []  # [from, until] while qstop held queue short
        self.written = 0  # Cobalt job scripts written
        self.sessions: list[tuple[threading.Thread, dict, list]] = []  # qsub -I's: the thread, asked, its answer
        self.starts = 0  # servers started so far
        self.broken: list[str] = []

    def workdir(self, user: str) -> Path:
        """Where the user's commands run, its jobs start and write their events."""
        return self.work / user if self.multi else self.work

    def cmd(self, *argv: str, stdin: str | None = None, manager: bool = False,
            user: str | None = None, timeout: int = 60) -> subprocess.CompletedProcess:
        """A command as `user` (the first user by default), or as a manager; one still
        running after `timeout` seconds is killed."""
        user = user or self.users[0]
        if self.multi:
            from multiuser import run_as
            who = "root" if manager else user
            status, out, err = run_as(who, self.home, argv[0], list(argv[1:]),
                                      cwd=str(self.work if manager else self.workdir(user)),
                                      stdin=(stdin or "").encode(), timeout=timeout)
            p = subprocess.CompletedProcess(argv, status, out, err)
        else:
            env = dict(self.env, HPCSCHED_USER="boss") if manager else self.env
            p = subprocess.run([str(BIN / argv[0]), *argv[1:]], input=stdin, capture_output=True, text=True,
                               env=env, cwd=self.work, timeout=timeout)
        self.said(argv, p.stderr)
        return p

    def node(self, name: str, offline: bool) -> None:
        """pbsnodes -o (or -c) as a manager; while it surely was offline is kept."""
        asked = time.time()
        if self.cmd("pbsnodes", "-o" if offline else "-c", name, manager=True).returncode == 0:
            span(self.offline.setdefault(name, []), offline, asked)

    def short(self, stop: bool) -> None:
        """qstop (or qstart; a Cobalt site's cqadm --stopq, --startq) short as a manager; while
        it surely was stopped is kept."""
        asked = time.time()
        argv = ["cqadm", "--stopq" if stop else "--startq"] if self.flavor == "cobalt" else \
            ["qstop" if stop else "qstart"]
        if self.cmd(*argv, "short", manager=True).returncode == 0:
            span(self.stopped_short, stop, asked)

    def resources(self, nodes: int, cores: int, walltime: int | None = None, cobalt: bool = True) -> list[str]:
        """The options for `nodes` nodes of `cores` cores, in the site's flavor: a Cobalt
        qsub's or qalter's -n (whole nodes) and -t, unless not `cobalt` (pbs_rsub's)."""
        wall = [f"walltime={walltime}"] if walltime else []
        if self.flavor == "cobalt" and cobalt:
            return ["-n", str(nodes), *(["-t", time.strftime("%H:%M:%S", time.gmtime(walltime))] if walltime else [])]
        if self.flavor == "openpbs":
            return ["-l", f"select={nodes}:ncpus={cores}", *(["-l", *wall] if wall else [])]
        return ["-l", ",".join([f"nodes={nodes}:ppn={cores}", *wall])]

    def qsub(self, options: list[str], sleep: float, status: int, user: str) -> subprocess.CompletedProcess:
        """qsub of a job that pauses `sleep` s and exits `status`: its script on stdin, or on
        a Cobalt site in a file of the user's, given as the command."""
        body = script(sleep, status, self.flavor)
        if self.flavor != "cobalt":
            return self.cmd("qsub", *options, stdin=body, user=user)
        self.written += 1
        path = self.workdir(user) / f"job{self.written}.sh"
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(0o755)
        return self.cmd("qsub", *options, str(path), user=user)

    def someone(self, rng: random.Random) -> str:
        """A user to act (on a single-user site, its one user: no draw)."""
        return rng.choice(self.users) if self.multi else self.users[0]

    def other(self, user: str) -> str:
        return next(u for u in self.users if u != user)

    def refused(self, p: subprocess.CompletedProcess, argv, actor: str, owner: str) -> bool:
        """Was this a user acting on another's job or reservation?  It must fail."""
        if actor == owner:
            return False
        if p.returncode == 0:
            self.broken.append(f"security: {actor}'s {' '.join(argv)} on {owner}'s succeeded: {p.stdout.strip()}")
        return True

    def said(self, argv, err: str) -> None:
        """A command's stderr: a traceback in it is a break."""
        if "Traceback" in err:
            self.broken.append(f"server: {' '.join(argv)} wrote a traceback: {err.strip()[-300:]}")

    def start(self) -> None:
        self.starts += 1
        self.server = subprocess.Popen([sys.executable, "-m", "hpcsched", "server"], cwd=ROOT, env=self.env,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                       start_new_session=True)
        for _ in range(400):  # until it answers commands (a killed one's socket file may stay)
            if self.server.poll() is not None or self.answers():
                break
            time.sleep(0.05)

    def answers(self) -> bool:
        import socket
        with socket.socket(socket.AF_UNIX) as s:
            try:
                s.connect(str(self.home / "commands.sock"))
                return True
            except OSError:
                return False

    def stopped(self) -> None:
        """The server has exited: keep what it wrote, and say so if it died on its own."""
        _, err = self.server.communicate(timeout=30)
        self.logs.append(err)
        if "Traceback" in err:
            self.broken.append(f"server: a traceback in its log: {err.strip()[-300:]}")
        self.server = None

    def kill(self) -> None:
        os.killpg(self.server.pid, signal.SIGKILL)  # (the server's group: its jobs run in their own sessions)
        self.server.wait(30)
        self.stopped()

    def qterm(self) -> None:
        if self.cmd("qterm", manager=True).returncode == 0:
            self.server.wait(30)
            self.stopped()
        else:
            self.kill()


#: the commands on one job (an array's subjob, at times), by a step's kind
OPERATIONS = ("delete", "hold", "release", "alter", "resize", "rerun", "signal", "suspend", "resume", "qrun",
              "move")


def script(sleep: float, status: int, flavor: str = "torque") -> str:
    """A job's script: `S`, a pause, `E` to the events file in its work directory (a Cobalt
    job's own: where qsub ran)."""
    jid = "$COBALT_JOBID" if flavor == "cobalt" else "${PBS_JOBID%%.*}"
    return (('' if flavor == "cobalt" else 'cd "$PBS_O_WORKDIR"\n') +
            f'echo "S {jid} $(date +%s.%N) $(id -un)" >> events\n'
            f'sleep {sleep}\necho "E {jid} $(date +%s.%N) {status}" >> events\nexit {status}\n')


def span(spans: list, on: bool, asked: float) -> None:
    """Keep [from, until] spans of a state set on (from now) and off (from `asked`)."""
    if on and not (spans and spans[-1][1] is None):
        spans.append([time.time(), None])
    elif not on and spans and spans[-1][1] is None:
        spans[-1][1] = asked


def ask(sleep: float, status: int, disturbed: bool = False) -> dict:
    """What a submission asked of its job (its script's pause and status), as `judge` reads it."""
    return {"sleep": sleep, "status": status, "disturbed": disturbed, "after": None, "array": False,
            "walltime": 30, "resv": None, "owner": None, "free": False, "forced": False}


def step(rig: Rig, rng: random.Random, kind: str) -> None:
    """One command (or a kill, a qterm, a pause) of a scenario."""
    known = sorted(rig.jobs)
    some = rng.choice(known) if known else None
    if kind == "submit":
        sleep = rng.choice([0, 0.2, 0.5, 1, 2])
        status = rng.choice([0, 0, 0, 1, 3])
        walltime = rng.choice([30, 30, 30, 1])  # (1 s: it may be killed at its walltime)
        argv = ["qsub", *rig.resources(rng.randint(1, NODES), rng.randint(1, CORES), walltime)]
        asked = ask(sleep, status, disturbed=walltime == 1)
        asked["walltime"] = walltime
        cobalt = rig.flavor == "cobalt"
        if rng.random() < 0.1:
            argv.append("-h")
        if rng.random() < 0.3:
            argv += ["-q", "short"]
        if rng.random() < 0.2 and not cobalt:
            argv += ["-r", "n"]
        if known and rng.random() < 0.2 and not (cobalt and rig.jobs[some]["array"]):
            asked["after"] = some
            argv += ["--dependencies", some] if cobalt else ["-W", f"depend=afterok:{some}"]
        if rng.random() < 0.1 and not cobalt:
            argv += ["-J" if rig.flavor == "openpbs" else "-t", "0-1"]
            asked["array"] = True
        asked["owner"] = user = rig.someone(rng)
        p = rig.qsub(argv[1:], sleep, status, user)
        if p.returncode == 0:
            rig.jobs[p.stdout.strip().split(".")[0]] = asked
    elif kind in OPERATIONS and some:
        manager = kind in ("rerun", "suspend", "resume", "qrun")
        owner = rig.jobs[some]["owner"]
        actor = owner if manager or not rig.multi or rng.random() < 0.8 else rig.other(owner)
        if actor == owner:
            rig.jobs[some]["disturbed"] = True
            if kind in ("alter", "qrun") or kind == "move" and rig.jobs[some]["resv"]:
                rig.jobs[some]["free"] = True  # (its walltime changed, or a manager placed it: no reservation check)
            rig.jobs[some]["forced"] |= kind == "qrun"  # (no queue limit check)
        owned = some
        if rig.jobs[some]["array"] and rng.random() < 0.5:
            some = some.replace("[]", f"[{rng.randint(0, 1)}]")  # (one subjob)
        walltime = rng.choice([1, 60])
        argv = {"delete": ["qdel", some], "hold": ["qhold", some], "release": ["qrls", some],
                "alter": ["qalter", *(["-t", f"00:00:{walltime:02d}" if walltime < 60 else "1"]
                                      if rig.flavor == "cobalt" else ["-l", f"walltime={walltime}"]), some],
                "resize": ["qalter", *rig.resources(rng.randint(1, NODES), rng.randint(1, CORES)), some],
                "move": ["qmove", "batch" if rig.jobs[owned]["resv"] else rng.choice(["batch", "short"]), some],
                "rerun": ["qrerun", some], "signal": ["qsig", "-s", "USR1", some],
                "suspend": ["qsig", "-s", "suspend", some], "resume": ["qsig", "-s", "resume", some],
                "qrun": ["qrun", *(["-H", "(node01:ncpus=1)" if rig.flavor == "openpbs" else "node01"]
                                   if rng.random() < 0.5 else []), some]}[kind]
        if rig.flavor == "cobalt" and kind == "qrun" and len(argv) == 4:
            argv = ["cqadm", "--run=node01", some]
        p = rig.cmd(*argv, manager=manager, user=actor)
        rig.refused(p, argv, actor, owner)
    elif kind in ("offline", "online"):
        rig.node(f"node{rng.randint(1, NODES):02d}", kind == "offline")
    elif kind == "kill" and rig.server:
        rig.kill()
    elif kind == "crash" and rig.server:  # killed while it answers a qsub (or a qdel)
        deleting = some and rng.random() < 0.3
        user = rig.jobs[some]["owner"] if deleting else rig.someone(rng)
        done: list[subprocess.CompletedProcess] = []
        asking = threading.Thread(target=lambda: done.append(
            rig.cmd("qdel", some, user=user) if deleting else rig.qsub(rig.resources(1, 1, 30), 0.5, 0, user)))
        asking.start()
        time.sleep(rng.uniform(0, 0.3))
        rig.kill()
        asking.join(90)
        if deleting:
            rig.jobs[some]["disturbed"] = True
        elif done and done[0].returncode == 0:
            rig.jobs[done[0].stdout.strip().split(".")[0]] = dict(ask(0.5, 0), owner=user)
    elif kind == "qterm" and rig.server:
        rig.qterm()
    elif kind == "rsub":  # a node for a few seconds, from now or soon
        argv = ["pbs_rsub", "-D", str(rng.randint(3, 8)), *rig.resources(1, rng.randint(1, CORES), cobalt=False)]
        if rng.random() < 0.5:
            argv += ["-R", time.strftime("%H%M.%S", time.localtime(time.time() + rng.uniform(1, 4)))]
        user = rig.someone(rng)
        p = rig.cmd(*argv, user=user)
        if p.returncode == 0:
            rid = p.stdout.split(".")[0]
            said = dict(line.split(" = ", 1) for line in rig.cmd("pbs_rstat", "-f", rid, user=user).stdout.splitlines()
                        if " = " in line)
            start, end = (time.mktime(time.strptime(said[f"reserve_{k}"], "%a %b %d %H:%M:%S %Y"))
                          for k in ("start", "end"))
            rig.resvs[rid] = {"start": start, "end": end, "made": time.time(), "owner": user,
                              "nodes": {part.strip("(").split(":")[0] for part in said["resv_nodes"].split("+")}}
    elif kind == "rjob" and rig.resvs:  # a job inside a reservation
        rid = rng.choice(sorted(rig.resvs))
        sleep, status = rng.choice([0, 0.5, 1]), rng.choice([0, 0, 1])
        user = rig.someone(rng)
        argv = ["qsub", "-q", rid, *rig.resources(1, 1, 2)]
        p = rig.qsub(argv[1:], sleep, status, user)
        if not rig.refused(p, argv, user, rig.resvs[rid]["owner"]) and p.returncode == 0:
            rig.jobs[p.stdout.strip().split(".")[0]] = dict(ask(sleep, status), walltime=2, resv=rid, owner=user)
    elif kind == "rdel" and rig.resvs:
        rid = rng.choice(sorted(rig.resvs))
        owner = rig.resvs[rid]["owner"]
        user = owner if not rig.multi or rng.random() < 0.8 else rig.other(owner)
        p = rig.cmd("pbs_rdel", rid, user=user)
        if not rig.refused(p, ["pbs_rdel", rid], user, owner) and p.returncode == 0:
            rig.resvs[rid]["end"] = min(rig.resvs[rid]["end"], time.time())
            for asked in rig.jobs.values():
                if asked["resv"] == rid:
                    asked["disturbed"] = True
    elif kind == "interactive":  # qsub -I, its session's commands on stdin, in the background
        sleep, status = rng.choice([0, 0.5, 1]), rng.choice([0, 0, 2])
        user = rig.someone(rng)
        argv = ["qsub", "-I", *rig.resources(1, rng.randint(1, CORES), 30), *(["-q", "short"] if rng.random() < 0.3
                                                                            else [])]
        asked, answer = dict(ask(sleep, status), owner=user, starts=rig.starts), []

        def session():
            try:
                answer.append(rig.cmd(*argv, stdin=script(sleep, status), user=user, timeout=SESSION))
            except subprocess.TimeoutExpired as e:  # (its job left waiting for a client that is gone)
                answer.append(e)
        thread = threading.Thread(target=session, daemon=True)
        thread.start()
        rig.sessions.append((thread, asked, answer))
    elif kind in ("stop", "start"):
        rig.short(kind == "stop")
    elif kind == "wait":
        time.sleep(rng.uniform(0.1, 1.5))
    if rig.server is None and rng.random() < 0.5:  # (else commands meet a stopped server for a while)
        rig.start()
    elif rig.server is not None and rig.server.poll() is not None:
        rig.stopped()
        rig.broken.append("server: it exited on its own")
        rig.start()


def run(root: Path, seed: int, steps: int = 40, users: tuple[str, ...] = ()) -> list[str]:
    """Play scenario `seed` in the empty directory `root` (on a multi-user site, with
    `users`); what broke, one line each."""
    rng = random.Random(seed)
    rig = Rig(root, scripts=rng.random() < 0.5, users=users, flavor=FLAVORS[seed % 3])
    rig.start()
    try:
        kinds, weights = zip(*STEPS.items())
        for kind in rng.choices(kinds, weights, k=steps):
            step(rig, rng, kind)
        if rig.server is None:
            rig.start()
        for node in range(1, NODES + 1):
            rig.node(f"node{node:02d}", False)
        rig.short(False)
        for jid, asked in rig.jobs.items():  # (the held and the suspended)
            rig.cmd("qrls", jid, user=asked["owner"])
            rig.cmd("qsig", "-s", "resume", jid, manager=True)
        for rid, resv in rig.resvs.items():  # (one asked for a time already past is tomorrow's)
            if resv["start"] > time.time() + 60:
                rig.cmd("pbs_rdel", rid, user=resv["owner"])
        jobs = settle(rig)  # (a session's job held by the prologue is released there, then ends)
        sessions(rig)
        rig.qterm()
    finally:
        if rig.server is not None:
            rig.kill()
    return rig.broken + judge(rig, jobs)


def sessions(rig: Rig) -> None:
    """Wait for the qsub -I sessions, and judge their jobs as the others: one whose session
    met a server killed or stopped, or whose qsub did not end, as disturbed."""
    import re
    for thread, asked, answer in rig.sessions:
        thread.join(SETTLE)
        p = answer[0] if answer else None
        said = p.stdout if isinstance(p, subprocess.CompletedProcess) else (p and p.stdout) or ""
        said = said.decode() if isinstance(said, bytes) else said
        found = re.search(r"waiting for job ([0-9]+)", said)
        if found:
            asked["disturbed"] = asked.pop("starts") != rig.starts or not isinstance(p, subprocess.CompletedProcess)
            rig.jobs[found.group(1)] = asked


def settle(rig: Rig) -> dict:
    """Wait until every job has finished (or SETTLE has passed); the store's jobs by id."""
    from hpcsched.core.jobs import FINISHED
    from hpcsched.store.journaled import Batch
    from hpcsched.store.site import load_site
    deadline = time.time() + SETTLE
    while True:
        with Batch(load_site(rig.home)).open(write=False) as batch:
            jobs = dict(batch.sched.jobs)
        if all(j.state in FINISHED for j in jobs.values()) or time.time() > deadline:
            return jobs
        for job in jobs.values():  # (held by the prologue: released once, as an operator would)
            if any(h.value == "s" for h in job.holds):
                rig.cmd(*(["cqadm", "--admin-release"] if rig.flavor == "cobalt" else ["qrls", "-h", "s"]),
                        f"{job.array_id}[{job.array_index}]" if job.array_id else str(job.id), manager=True)
            elif job.state.value == "dep_fail":  # (a Cobalt site keeps it, as Cobalt does: its user deletes it)
                rig.cmd("qdel", str(job.id), manager=True)
        time.sleep(0.25)


def judge(rig: Rig, jobs: dict) -> list[str]:
    from hpcsched.core.jobs import FINISHED
    from hpcsched.core import nodelist
    from hpcsched.pbs import accounting
    broken = []
    by_array: dict[int, list] = {}
    for job in jobs.values():
        by_array.setdefault(job.array_id, []).append(job)
    members = {}  # id qsub printed -> the store's jobs it names
    for jid, asked in rig.jobs.items():
        n = int(jid.split("[")[0])
        members[jid] = by_array.get(n, []) if asked["array"] else [jobs[n]] if n in jobs else []
        if not members[jid]:
            broken.append(f"lost: job {jid} is not in the store")
    for job in jobs.values():  # (those whose qsub died with the server too)
        if job.state not in FINISHED:
            broken.append(f"lost: job {job.id} never finished ({job.state.value})")

    # the accounting log, per job: starts, ends, their cores
    records: dict[str, list] = {}
    for e in accounting.read(rig.home):
        records.setdefault(e.job_id.split(".")[0], []).append(e)
    runs = []  # (start, end, job, exec_host, queue, user)
    for jid, entries in records.items():
        kinds = "".join(e.kind for e in entries)
        said = kinds if len(kinds) <= 40 else f"{kinds[:40]}... ({len(kinds)} records)"
        if kinds.count("Q") != 1 or not kinds.startswith("Q"):
            broken.append(f"records: job {jid}: {said}")
        opened = None
        for e in entries:
            when = time.mktime(time.strptime(e.when, "%m/%d/%Y %H:%M:%S"))
            if e.kind == "S":
                if opened:
                    broken.append(f"records: job {jid} started twice without an end between: {said}")
                opened = (int(e.fields["start"]), e.fields.get("exec_host", ""), e.fields.get("queue"),
                          e.fields.get("user"))
            elif e.kind in "ERA" and opened:  # (a D for a running job comes before its E)
                runs.append((opened[0], int(e.fields.get("end", when)), jid, *opened[1:]))
                opened = None
            elif e.kind == "E":
                broken.append(f"records: job {jid} ended with no start: {said}")
        if opened:
            broken.append(f"records: job {jid} started and never ended: {said}")
    held: dict[str, list] = {}
    for start, end, jid, hosts, *_ in runs:
        for node, cores in nodelist.exec_hosts(hosts):
            for core in cores:
                held.setdefault(f"{node}/{core}", []).append((start, end, jid))
    for start, end, jid, hosts, *_ in runs:  # (not a subjob's: a qrun of one frees its array)
        asked = rig.jobs.get(jid)
        nodes = {node for node, _ in nodelist.exec_hosts(hosts)}
        if asked is None or asked.get("free"):
            continue
        for rid, resv in rig.resvs.items():
            if asked["resv"] == rid:
                if not nodes <= resv["nodes"] or not resv["start"] - 1 <= start < resv["end"]:
                    broken.append(f"reservation: job {jid} of {rid} ran on {'+'.join(sorted(nodes))} from {start}, "
                                  f"outside {rid} ({'+'.join(sorted(resv['nodes']))}, {resv['start']:.0f}-"
                                  f"{resv['end']:.0f})")
            elif nodes & resv["nodes"] and start < resv["end"] - 1 and start + asked["walltime"] > resv["start"] + 1 \
                    and (start >= resv["made"] or end > resv["made"] + 1):  # (it ran, or was to, once it was made)
                broken.append(f"reservation: job {jid} ran on {'+'.join(sorted(nodes))} from {start} "
                              f"(walltime {asked['walltime']}) into {rid}'s window ({resv['start']:.0f}-"
                              f"{resv['end']:.0f})")
    for start, end, jid, hosts, *_ in runs:
        for node in {part.partition("/")[0] for part in hosts.split("+") if part}:
            for since, until in rig.offline.get(node, ()):
                if since + 1 < start and (until is None or start < until - 1):
                    broken.append(f"offline: job {jid} started on {node} at {start}, offline from {since:.0f}")
    short: dict[str, list] = {}  # user -> the runs in queue short of their jobs no qrun forced
    for start, end, jid, hosts, queue, user in runs:
        asked = rig.jobs.get(jid.split("[")[0] + "[]" if "[" in jid else jid)
        if queue != "short" or asked is None or asked["forced"]:
            continue
        short.setdefault(user, []).append((start, end, jid))
        for since, until in rig.stopped_short:
            if since + 1 < start and (until is None or start < until - 1):
                broken.append(f"limits: job {jid} started from short at {start}, stopped from {since:.0f}")
    for user, spans in short.items():
        for (s1, e1, j1), (s2, e2, j2) in overlaps(spans):
            broken.append(f"limits: {user}'s jobs {j1} ({s1}-{e1}) and {j2} ({s2}-{e2}) ran at once in short")
    for core, spans in held.items():
        for (s1, e1, j1), (s2, e2, j2) in overlaps(spans):
            broken.append(f"overbooked: {core} held by job {j1} ({s1}-{e1}) and job {j2} ({s2}-{e2})")

    # what the jobs themselves wrote, and the site's scripts, in the order written
    events: dict[str, list] = {}  # job -> its script's starts and ends
    prologued: set[str] = set()  # jobs whose prologue ran since their script last started
    epilogued: dict[str, float] = {}  # job -> when its epilogue last ended
    owners = {jid: asked["owner"] for jid, asked in rig.jobs.items()}
    lines = [line for path in {rig.workdir(user) / "events" for user in rig.users} if path.exists()
             for line in path.read_text().splitlines()]  # (each job's in one file, in order)
    for line in lines:
        kind, jid, when, *more = line.split()
        if kind == "P":
            prologued.add(jid)
        elif kind == "Y":
            epilogued[jid] = float(when)
        elif kind in "SE":
            events.setdefault(jid, []).append((kind, float(when), int(more[0]) if kind == "E" else None))
            if kind == "S":
                if rig.scripts and jid not in prologued:
                    broken.append(f"scripts: job {jid}'s script started with no prologue run before it")
                prologued.discard(jid)
                owner = owners.get(jid.split("[")[0] + "[]" if "[" in jid else jid)
                if rig.multi and more and more[0] != owner:
                    broken.append(f"security: job {jid} of {owner} ran as {more[0]}")
    if rig.scripts:
        for jid, entries in records.items():
            if "".join(e.kind for e in entries) in ("QSE", "QSDE") and jid in events:  # (ran once, to its end)
                end = int(entries[-1].fields.get("end", 0))
                if jid not in epilogued:
                    broken.append(f"scripts: job {jid} ran and ended with no epilogue run")
                elif end < int(epilogued[jid]):
                    broken.append(f"scripts: job {jid} was recorded ended at {end}, its epilogue ended at "
                                  f"{epilogued[jid]:.1f}")
    for jid, seen in events.items():
        started = sum(1 for e in records.get(jid, []) if e.kind == "S")
        if sum(1 for k, *_ in seen if k == "S") > started:
            broken.append(f"twice: job {jid}'s script started {sum(k == 'S' for k, *_ in seen)} times, "
                          f"the log has {started} starts")
    ended = {j: e for j, es in records.items() for e in es if e.kind == "E"}
    for jid, asked in rig.jobs.items():
        if asked["disturbed"] or asked["array"]:
            continue
        seen = events.get(jid, [])
        if seen and seen[-1][0] == "E" and jid in ended and int(ended[jid].fields["Exit_status"]) != seen[-1][2]:
            broken.append(f"status: job {jid} ended with {seen[-1][2]}, recorded "
                          f"{ended[jid].fields['Exit_status']}")
        parent = asked["after"]
        if parent and not rig.jobs[parent]["array"] and any(k == "S" for k, *_ in seen):
            pend = [w for k, w, _ in events.get(parent, []) if k == "E"]
            pstatus = ended.get(parent).fields["Exit_status"] if parent in ended else None
            if pstatus != "0":
                broken.append(f"order: job {jid} ran, its afterok parent {parent} ended with {pstatus}")
            elif pend and not rig.jobs[parent]["disturbed"] and min(w for k, w, _ in seen if k == "S") < pend[-1]:
                broken.append(f"order: job {jid} started before its parent {parent} ended")

    for d in (rig.home / "jobs").glob("*/run*"):
        pid = d / "pid"
        if pid.exists() and group_alive(int(pid.read_text())):
            os.killpg(int(pid.read_text()), signal.SIGKILL)
            broken.append(f"stray: job {d.parent.name}'s run {d.name} was still running")
    return broken


def overlaps(spans: list) -> list:
    """The pairs of (start, end, job) spans that overlap: each span with the one before it
    that ends last."""
    found, last = [], None
    for span in sorted(spans):
        if last is not None and span[0] < last[1]:
            found.append((last, span))
        if last is None or span[1] > last[1]:
            last = span
    return found


def group_alive(pgid: int) -> bool:
    """Is any live (non-zombie) process in process group `pgid`?"""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                data = open(f"/proc/{entry}/stat").read()
            except OSError:
                continue
            fields = data[data.rindex(")") + 2:].split()
            if fields[0] != "Z" and int(fields[2]) == pgid:
                return True
    return False
