"""The server's side of its nodes over ssh (`launcher = "ssh"`): each request a run of
`hpcsched node` on the job's host (node.py), one connection kept a host (ssh's
ControlMaster).  No daemon of ours listens on the network.

What the server knows of a host is what it last heard: `seen[host][key]`, the node's word
on each run there, and `heard[host]`, when.  A run's end reaches the server at once: a
waiter (`node wait KEY` over ssh, a child of the server) ends with it, and its SIGCHLD
starts a step; every job_stat_rate seconds, and whenever a waiter ends, the server asks
the host for its runs, renewing their leases there: node_check_rate from the host's last
answer.  A host that does not answer is `failing` from its first failure, and down after
node_check_rate of it; its jobs are requeued once every lease a request may have given a
run there has surely run out (`fence_by`: a node's keeper kills a run past its lease,
node.py), so that no job runs twice at once, whatever was lost on the way.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time

from ..pbs.pbsdsh import node_request

SSH = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-o", "ServerAliveInterval=10",
       "-o", "ServerAliveCountMax=3"]
NODE_COMMAND = ["hpcsched", "node"]
CALL_TIMEOUT = 20.0  # seconds one request may take, connection included (the step waits for it)
CHECK_RATE = 150.0  # Torque's node_check_rate: seconds a node may not answer before it is down
STAT_RATE = 45.0  # Torque's job_stat_rate: seconds between the server's looks at a host's runs
DOWN_NOTE = "unreachable over ssh"  # a down node's note, when the server marked it so
#: seconds a node's keeper may take, past its run's lease, to kill the run (it looks every
#: node.KEEP_POLL, a second): the server requeues a down node's jobs no sooner
FENCE = 2.0


#: ssh's words for a failure before any command ran on the host (no connection made, or
#: refused); any other (the connection lost after it was made) leaves that unknown
UNSENT = re.compile(r"^ssh: (connect to host \S+ port \d+: |Could not resolve hostname )|Permission denied"
                    r"|Host key verification failed")


class Refused(Exception):
    """The host answered, and its node command refused the request (one line)."""


class Nodes:
    """The hosts of a site's jobs, as the server reaches them."""

    def __init__(self, site_key: str):
        self.site_key = site_key
        self.started = time.time()  # (a lease a server before this one gave ends node_check_rate after it, at most)
        self.control = None
        self.seen: dict[str, dict[str, dict]] = {}  # host -> key -> the node's last word on the run
        self.heard: dict[str, float] = {}  # host -> when it last answered
        self.asked: dict[str, float] = {}  # host -> when the server last asked it for its runs
        self.failing: dict[str, tuple[float, str]] = {}  # host -> (since when, why) it does not answer
        self.waiters: dict[str, subprocess.Popen] = {}  # key -> its `node wait` over ssh
        self.stopped: set[int] = set()  # pids of waiters stopped, until the server has reaped them
        self.swept: set[str] = set()  # hosts cleaned of runs of jobs no longer there, since the start
        self.unsent = False  # did the last request, failed, surely not reach the node command (any attempt)?
        self.fence_by: dict[str, float] = {}  # host -> when its runs have all been killed there if it hears nothing more

    def configure(self, cfg: dict) -> None:
        """Take the site's settings (at start, and when they change)."""
        self.site_ssh = list(cfg.get("ssh") or SSH)
        self.ssh = self.site_ssh
        if not any("control" in word.lower() for word in self.site_ssh):
            # one connection a host, kept a minute after its last use, in a directory of the
            # server's own (a site's ssh line that sets ControlMaster or ControlPath: its own)
            if self.control is None:
                self.control = tempfile.mkdtemp(prefix="hpcsched-ssh-")
            self.ssh = [*self.site_ssh, "-o", "ControlMaster=auto", "-o", f"ControlPath={self.control}/%C",
                        "-o", "ControlPersist=60"]
        self.command = list(cfg.get("node_command") or NODE_COMMAND)
        self.spool = cfg.get("node_spool")  # with {host}; None: the node's own default
        self.check_rate = float(cfg.get("node_check_rate", CHECK_RATE))
        self.stat_rate = min(float(cfg.get("job_stat_rate", STAT_RATE)), self.check_rate / 3)

    def key(self, job_id: int, run: int) -> str:
        return f"{self.site_key}.{job_id}.{run}"

    def sisters(self) -> dict:
        """How a run reaches the job's other hosts (pbsdsh): the site's ssh without the
        server's own connection sharing, and the node command and spool."""
        return {"ssh": self.site_ssh, "command": self.command, "spool": self.spool}

    def argv(self, host: str, *words: str) -> list[str]:
        return node_request(self.ssh, self.command, self.spool, host, *words)

    # --- requests ------------------------------------------------------------------------
    def call(self, host: str, *words: str, stdin: str = "", again: bool = True, lease: float | None = None) -> dict | None:
        """One request to the host's node command: its answer, or None when the host did
        not answer (ssh failed: `failing` says why).  Refused: it answered no.  A request
        whose answer was lost (ssh's own failure, exit status 255, after the command may
        have run) is asked once more when `again`: every request but a signal's may be
        (a second `run` of a run that started answers as the first did).  A request that
        sets runs' `lease` there (seconds from when it arrives) and may have arrived moves
        `fence_by[host]`: by then every run there has ended, unless the host hears more."""
        known = host in self.failing  # (a host already silent is not asked twice a time)
        self.unsent = True  # (until an attempt may have reached the node command)
        for _ in range(2 if again and not known else 1):
            got = self._call(host, words, stdin)
            unsent = got is None and bool(UNSENT.search(self.failing[host][1]))
            if lease is not None and not unsent:  # (it arrived before the request's end, if at all)
                self.fence_by[host] = max(self.fence_by.get(host, 0.0), time.time() + lease)
            self.unsent = self.unsent and unsent
            if got is not None:
                break
        return got

    def lease(self, host: str, now: float) -> float:
        """How long the host's runs may still run unheard: node_check_rate from the last
        answer, or from the first failure since it (a host not heard yet: from now)."""
        since = self.failing[host][0] if host in self.failing else self.heard.get(host, now)
        return max(0.0, since + self.check_rate - now)

    def _call(self, host: str, words, stdin: str) -> dict | None:
        now = time.time()
        done = self._ssh(host, self.argv(host, *words), stdin.encode(), now)
        if done is None:
            return None
        self._answered(host, now)
        if done.returncode != 0:
            raise Refused(done.said[-1] if done.said else f"exit status {done.returncode}")
        try:
            return json.loads(done.stdout)
        except ValueError:
            raise Refused(f"not the node command's answer: {done.stdout[:200]!r}") from None

    def _ssh(self, host: str, argv: list[str], stdin: bytes, now: float) -> subprocess.CompletedProcess | None:
        """Run an ssh line to the host: the ended process (`said`: its stderr's lines), or
        None when the host was not reached (ssh's own failure, exit status 255; a timeout):
        `failing` says why."""
        try:
            # (ssh's own output to a file, not a pipe: a connection master kept on after
            # this request would hold a pipe open, and the server would wait on it)
            with tempfile.TemporaryFile() as err:
                done = subprocess.run(argv, input=stdin, stdout=subprocess.PIPE, stderr=err, timeout=CALL_TIMEOUT)
                err.seek(0)
                done.said = err.read().decode("utf-8", "replace").strip().splitlines()
        except subprocess.TimeoutExpired:
            return self._failed(host, now, f"no answer in {CALL_TIMEOUT:g} s")
        except OSError as e:
            return self._failed(host, now, f"{argv[0]}: {e.strerror or e}")
        if done.returncode == 255:
            return self._failed(host, now, done.said[-1] if done.said else "exit status 255")
        return done

    def _answered(self, host: str, now: float) -> None:
        self.heard[host] = now
        self.failing.pop(host, None)

    def _failed(self, host: str, now: float, why: str) -> None:
        since = self.failing.get(host, (now, ""))[0]
        self.failing[host] = (since, why)
        self.swept.discard(host)  # (once back, what ran there of jobs since requeued is cleaned up)
        return None

    def run(self, host: str, key: str, spec: dict) -> dict | None:
        return self.call(host, "run", key, stdin=json.dumps(spec), lease=spec["lease"])

    def stale(self, host: str, live: list[str]) -> None:
        """Clean up the host's runs of this site but `live` ones (jobs that ended, or were
        requeued, while it was out of reach or the server down)."""
        try:
            keys = (self.call(host, "list") or {}).get("keys", [])
        except Refused:
            return
        for key in keys:
            if key.startswith(self.site_key + ".") and key not in live:
                self.cleanup([host], key)
                self.forget([host], key)
        self.swept.add(host)

    def signal(self, host: str, key: str, sigs: list[int]) -> None:
        try:
            self.call(host, "signal", key, *map(str, sigs), again=False)
        except Refused:
            pass

    def cleanup(self, hosts: list[str], key: str) -> list[str]:
        """Kill what is left of a run on each of its hosts; what was killed, for the log."""
        left = []
        for host in dict.fromkeys(h for h in hosts if h not in self.failing):
            try:
                got = self.call(host, "cleanup", key) or {}
            except Refused:
                continue
            left += [f"{host}:{p}" for p in got.get(key, {}).get("killed", ())]
        return left

    def forget(self, hosts: list[str], key: str) -> None:
        self.stop_waiting(key)
        for host in dict.fromkeys(h for h in hosts if h not in self.failing):
            try:
                self.call(host, "forget", key)
            except Refused:
                pass

    # --- looking ---------------------------------------------------------------------------
    def look(self, now: float, runs: dict[str, list[str]], children: dict[int, int]) -> list[str]:
        """Ask each host with runs for them when it is due: job_stat_rate passed, or a
        waiter of one of its runs ended (a run's end, or a dropped connection: then a new
        waiter reattaches); a failing host only every job_stat_rate.  Returns the hosts
        that answered after failing (or for the first time): up again."""
        back = []
        for pid in [p for p in self.stopped if p in children]:
            del children[pid]
            self.stopped.discard(pid)
        for host, keys in runs.items():
            ended = [k for k in keys if self._waiter_ended(k, children)]
            if host in self.failing:
                due = now >= self.asked.get(host, 0) + self.stat_rate
            else:
                due = ended or now >= self.asked.get(host, 0) + self.stat_rate or \
                    any(k not in self.seen.get(host, {}) for k in keys)
            if not due:
                continue
            self.asked[host] = now
            was = host in self.failing or host not in self.heard
            lease = self.lease(host, now)  # (none left: the runs' leases stand as they are)
            try:
                got = self.call(host, "status", *(("--lease", f"{lease:.3f}") if lease else ()), *keys,
                                lease=lease or None)
            except Refused:
                continue
            if got is None:
                continue
            self.seen[host] = got
            if was:
                back.append(host)
            for key in keys:
                if got.get(key, {}).get("state") == "running" and key not in self.waiters:
                    self.waiters[key] = subprocess.Popen(self.argv(host, "wait", key), stdin=subprocess.DEVNULL,
                                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                                         start_new_session=True)
        return back

    def _waiter_ended(self, key: str, children: dict[int, int]) -> bool:
        """Has the run's waiter ended (its SIGCHLD reaped into `children`)?  Forgotten if so."""
        proc = self.waiters.get(key)
        if proc is None:
            return False
        if children.pop(proc.pid, None) is None and proc.poll() is None:
            return False
        del self.waiters[key]
        return True

    def stop_waiting(self, key: str) -> None:
        proc = self.waiters.pop(key, None)
        if proc is not None and proc.poll() is None:
            proc.kill()
            self.stopped.add(proc.pid)  # (its end, reaped by the server: forgotten at the next look)

    def check(self, host: str, command: list[str]) -> bool | None:
        """Run a site's node check (prejob_check) on the host: did it pass?  None: the host
        was not reached."""
        now = time.time()
        done = self._ssh(host, [*self.ssh, host, shlex.join(command)], b"", now)
        if done is None:
            return None
        self._answered(host, now)
        return done.returncode == 0

    def ping(self, host: str) -> str | None:
        """None when the host's node command answers; else why not."""
        try:
            if self.call(host, "ping") is not None:
                return None
        except Refused as e:
            return str(e)
        return self.failing[host][1]

    def down_since(self, host: str, now: float) -> float | None:
        """When a failing host's silence began, if it has lasted node_check_rate."""
        if host not in self.failing:
            return None
        since = self.failing[host][0]
        return since if now >= since + self.check_rate else None

    def fenced(self, host: str, now: float) -> bool:
        """Have the host's runs surely been killed there by their leases (the server
        having said nothing since)?"""
        return now >= max(self.fence_by.get(host, 0.0), self.started + self.check_rate) + FENCE

    def next_due(self, hosts) -> float | None:
        return min((self.asked.get(h, 0) + self.stat_rate for h in hosts), default=None)

    def close(self) -> None:
        """The server stops: its waiters go (the runs go on), and its connections."""
        for key in list(self.waiters):
            self.stop_waiting(key)
        if self.control:
            for name in os.listdir(self.control):  # (each host's connection master: told to stop)
                subprocess.run([*self.site_ssh, "-o", f"ControlPath={os.path.join(self.control, name)}", "-O", "exit", "x"],
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            shutil.rmtree(self.control, ignore_errors=True)
