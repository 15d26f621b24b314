"""`hpcsched server`: run jobs for real on a test rig, driving the same scheduling core.

Each step: reap ended jobs, enforce walltimes and the limits the server watches (CPU
time, memory: limits.py; SIGTERM, then SIGKILL after a grace; the job ends with exit
status 256 + the signal), stop deleted jobs, run the scheduling pass
(recorded in the store's journal like any change) and launch what it started, each after
the site's prologue when there is one (scripts.py; it runs beside the server).  serve.py's
loop runs the steps every `interval` seconds and at once when a command pokes the
server's socket or a job ends (SIGCHLD), with no polling in between.

Launching (the `local` launcher: every node is this host): the job runs in its own session,
under a small shell wrapper that first writes its pid to the job's directory and at the end
its exit status.  So a server that dies, even by SIGKILL, finds its jobs again when it
starts: a pid whose start time matches is the same process; a job whose wrapper never
wrote a pid never started and is launched now; one that started and vanished without a
status is recorded as ended (or requeued when rerunnable).  No job starts twice.

Every process of a job is tracked (tracking.py: a cgroup, else the job's mark in the
environment) and killed at walltime, `qdel` and the job's end.  On a multi-user site
(privilege.py) the server learns its callers from the kernel, runs jobs as their owners
and keeps the store to itself; a user's bad path, pre-made directory or permission error
is that job's failure, never the server's.
"""
from __future__ import annotations

import contextlib
import errno
import os
import pwd
import shlex
import signal
import socket
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from enum import Enum
from pathlib import Path

from ..core.jobs import ACTIVE, EXITING, FINISHED, RUNNING, Job
from ..core.topology import NodeState
from ..drain.moablog import DailyWriter
from ..drain.samples import Sampler
from ..pbs import accounting, cobalt, common, mail, siteprog
from ..store.journal import StoreError
from ..store.journaled import Batch
from ..store.layout import WRAPPER
from ..core.errors import SchedulerError
from ..store.site import Site, config_stamp, load_site
from . import door, limits, node, privilege, remote, rundir, scripts, tracking
from .tracking import process_start


LOST = -1  # exit status of a job whose process vanished without one
INTERACTIVE_WAIT = 60.0  # seconds a started interactive job waits for its qsub -I
FAULT_RETRY = 60.0  # seconds before the server tries again what failed in its own code


#: where the log goes: the server's stderr, or the file `hpcsched server --log` names
LOG = None
def open_log(path: str) -> None:
    """Append the log to `path` (made the server's user's alone to read), from now on."""
    global LOG
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    LOG = open(fd, "a", buffering=1, encoding="utf-8", errors="replace")


def log(message: str) -> None:
    """One line (or a traceback's lines) of the server's log, stamped with the local time as
    pbs_server stamps its own: on its stderr (under systemd, journald keeps it) or in the
    file --log names."""
    out = LOG or sys.stderr
    out.write(f"{time.strftime('%m/%d/%Y %H:%M:%S')} hpcsched server: {message}\n")
    out.flush()


POLL = 1.0  # seconds between looks at what a job uses, when it has a cput, mem or vmem limit
PEAK_EVERY = 45.0  # seconds between notes of a running job's peak memory (pbs_mom's status interval)


class Server:
    def __init__(self, site: Site, interval: float | None = None, grace: float | None = None):
        self.home = Path(site.home)
        self.batch = Batch(site)
        self._given = (interval, grace)
        self._stamp = config_stamp(self.home)
        # the site scripts under way (scripts.py): (job id, run) -> (its prologue, when it
        # began); the runs whose prologue passed; job id -> (its epilogue, when it began)
        self.prologues: dict[tuple[int, int], tuple[subprocess.Popen, float]] = {}
        self.prologued: set[tuple[int, int]] = set()
        self.epilogues: dict[int, tuple[subprocess.Popen, float]] = {}
        self.door = None  # the command socket's door (serve.py's loop makes it)
        self.tracker = tracking.Tracker(self.home)
        self.nodes: remote.Nodes | None = None  # the `ssh` launcher's hosts (remote.py)
        self._configure(site)
        self.swept = False  # run directories of jobs gone removed (once a start: _step)
        self.children: dict[int, int] = {}  # pid -> wait status, reaped
        self.cpu: dict[int, float] = {}  # pid -> CPU seconds it and what it waited for used (its job's cpu_time)
        self.peaks: dict[int, tuple[int, int]] = {}  # job id -> its peak (mem, vmem) so far, in bytes
        self._usage: limits.Usage | None = None  # the last look at /proc, and when (one a POLL at most)
        self._looked = 0.0
        self._launches = 0  # jobs launched since that look
        self._uses: dict[tuple[int, int], limits.Use] = {}  # (job id, pid) -> its sum in that look
        self.sent: dict[int, tuple[int, float]] = {}  # job id -> (signal, when), as sent
        self.trouble = ""  # why the store cannot be written now ("" when it can)
        # a fault in the server's own code (a bug, not a user's error) while handling a job
        # (or the pass: key None): job id -> (when, what), so that it is set aside
        self.faults: dict[int | None, tuple[float, str]] = {}
        self._handling: int | None = None  # the job the step is busy with
        self.fault_retry = FAULT_RETRY
        self.passes = 0
        self.boot = time.time()  # jobs launched before it ran, and perhaps ended, while no server watched
        self.last_alive: float | None = None  # the last step of the server before this one (its lock's mtime)
        self._lock: int | None = None

    def _configure(self, site: Site) -> None:
        """Take the site's settings (at start, and when qmgr or an edit changes them)."""
        interval, grace = self._given
        self.site = site
        cfg = site.config
        self.scheduling = cfg.get("scheduling", True)  # qmgr's `set server scheduling = False`
        self.interval = float(interval if interval is not None else cfg.get("server_interval", 15.0))
        self.grace = float(grace if grace is not None else cfg.get("kill_grace", 30.0))
        self.check = cfg.get("prejob_check")  # a command list run per node before a job starts
        # Torque's site scripts around every batch job (scripts.py)
        self.prologue, self.epilogue = cfg.get("prologue"), cfg.get("epilogue")
        self.script_timeout = float(cfg.get("prologue_timeout", scripts.TIMEOUT))
        # the `command` launcher: run the job's wrapper through a template such as
        # ["ssh", "{host}", "{command}"] on the job's first node; "ssh": our node side on
        # each job's hosts over ssh (remote.py, node.py); absent: `local`
        launcher = cfg.get("launcher")
        self.launcher = launcher if isinstance(launcher, list) else None
        self.over_ssh = launcher == "ssh"  # (jobs launched so before a change of it are still watched so)
        if self.over_ssh:
            self.nodes = self.nodes or remote.Nodes(self.tracker.key)
            self.nodes.configure(cfg)
        # a multi-user site: the kernel names callers; as root, jobs run as their owners
        self.multi = site.multi_user
        self.as_owners = self.multi and os.geteuid() == 0
        self.max_request = int(cfg.get("max_request", door.MAX_REQUEST))  # bytes of one command's request
        self.tmpdir = cfg.get("tmpdir") or tempfile.gettempdir()  # where each run's $TMPDIR is made
        if self.door is not None:
            self.door.limit = self.max_request
        # Torque drops a finished job keep_completed seconds after it ends; OpenPBS keeps
        # history for job_history_duration (two weeks by default)
        self.retention = (site.keep_completed if site.flavor == "torque"
                          else float(cfg.get("job_history_duration", 14 * 86400)))
        # node_log: after every pass, each node's sample in Moab's format (drain/), one file
        # per local day: `hpcsched drain` reads them as it reads a Moab site's logs
        log = cfg.get("node_log", False)
        self.node_log = (self.home / "nodelog" if log is True else Path(log) if log else None)

    def _reload(self) -> None:
        """The site's configuration changed: rebuild the scheduler from the store under it,
        from this step on.  A configuration that does not load is reported and the old one
        kept (the server never stops over it)."""
        stamp = config_stamp(self.home)
        if stamp == self._stamp:
            return
        self._stamp = stamp
        try:
            site = load_site(self.home)
        except SchedulerError as e:
            log(f"configuration not applied: {e}")
            return
        kept = Batch._kept.get(str(self.home)) is self.batch
        if kept:
            self.batch.release()
        self.batch = Batch(site)
        if kept:
            self.batch.keep()
        self._configure(site)

    # --- files ---------------------------------------------------------------------------
    def jobdir(self, job: Job) -> Path:
        """This run's directory: a requeued job runs again with a fresh one (run_count)."""
        return self.home / "jobs" / str(job.id) / f"run{job.run_count}"

    @staticmethod
    def _read_int(path: Path) -> int | None:
        """A number the job's wrapper wrote (see _read)."""
        data = Server._read(path, 64)
        try:
            return int(data.strip()) if data is not None else None
        except ValueError:
            return None

    _read = staticmethod(node.read_file)  # (what the job's wrapper wrote, in the owner's directory)

    # --- one step --------------------------------------------------------------------------
    def step(self, now: float | None = None) -> int:
        """Reap, enforce, plan, launch; returns how many jobs were launched."""
        launched = 0
        self._handling = None
        try:
            self._reap_children()
            self._reload()
            self._look(now)
            with self.batch.open(write=True):
                now = time.time() if now is None else now
                try:
                    launched = self._step(now)
                except StoreError as e:
                    # the store cannot be written (a full disk): nothing of this step was
                    # kept; running jobs go on and walltimes are still enforced, no job
                    # starts or ends in the store until it can be written again
                    if self.trouble != str(e):
                        log(f"{e}; running jobs go on, none starts until it is writable")
                    self.trouble = str(e)
                    self._enforce_only(now)
                    return 0
        except StoreError:
            raise  # (a store that does not load: the server stops, saying why)
        except Exception as e:
            # a bug in the server's own code: this step ends (what it journaled stands, the
            # rest is reloaded from the store), the job it was handling (or the pass) is
            # set aside, and the server goes on with every other job, as pbs_server logs
            # an error and carries on
            self._fault(self._handling, time.time() if now is None else now, e)
            return 0
        if self.trouble:
            log("the store is writable again")
            self.trouble = ""
        if self._lock is not None:
            os.utime(self._lock)  # (this step's mark: what a server after this one reads as last_alive)
        return launched

    def _fault(self, job_id: int | None, now: float, e: Exception) -> None:
        """Set aside what failed (a job's handling; None: the rest of the step, the pass)
        for fault_retry seconds; the log says so once for each new error, with its traceback."""
        what = f"{type(e).__name__}: {e}"
        if self.faults.get(job_id, (0, ""))[1] != what:
            whose = f"handling job {job_id}" if job_id is not None else "in its step"
            log(f"internal error {whose}: {what}; set aside, tried again every {self.fault_retry:g} s\n"
                + traceback.format_exc().rstrip("\n"))
        self.faults[job_id] = (now, what)

    def _aside(self, job_id: int | None, now: float) -> bool:
        """Is this job (or the pass) set aside after a fault, for now?"""
        return job_id in self.faults and now < self.faults[job_id][0] + self.fault_retry

    def _step(self, now: float) -> int:
        """Reap, enforce, plan, launch (the store open); returns how many jobs were launched."""
        launched = 0
        sched = self.batch.sched
        self.sent = {jid: v for jid, v in self.sent.items()
                     if jid in sched.jobs and sched.jobs[jid].state in ACTIVE}
        self.faults = {jid: v for jid, v in self.faults.items()
                       if jid is None or (jid in sched.jobs and sched.jobs[jid].state in ACTIVE)}
        if self.nodes is not None:
            self._look_nodes(now)
        for job in [j for j in sched.jobs.values() if j.state in ACTIVE]:
            self._handling = job.id
            if job.id in self.faults and "launched" not in job.extra and job.state == RUNNING:
                # its launch failed in the server's own code: back to the queue, held
                self._held_back(job, now, f"the server could not launch it ({self.faults.pop(job.id)[1]})")
            elif not self._aside(job.id, now):
                self._watch(job, now)
        self._handling = None
        # finished jobs leave the server after the flavor's retention, so the store
        # holds what is live plus a bounded history
        old = [j.id for j in sched.jobs.values()
               if j.state in FINISHED and j.end_time is not None and now - j.end_time > self.retention]
        if old:
            self.batch.do("forget", now, ids=old)
            for jid in old:  # (its run directories go with it)
                _remove(self.home / "jobs" / str(jid))
        if not self.swept:  # (once a start: what a server before this one left)
            self.swept = True
            with contextlib.suppress(OSError):
                for entry in os.scandir(self.home / "jobs"):
                    if entry.name.isdigit() and int(entry.name) not in sched.jobs:
                        _remove(entry.path)
        started = []
        if self.scheduling and not self._aside(None, now):  # (qmgr's `scheduling = False`: none starts)
            plan = self.batch.do("pass", now)
            accounting.core_deletions(self.batch, now)  # (a pbs_rsub reservation ended: its waiting jobs)
            self.faults.pop(None, None)
            if self.node_log is not None:
                self._log_nodes(sched, plan, now)
            started = [sched.jobs[s.job_id] for s in plan.started]
        # a RUNNING job with no pid file was started by a pass whose launch never
        # happened (the server died in between): launch it now
        for job in sched.jobs.values():
            if job.state == RUNNING and job not in started and "launched" not in job.extra:
                started.append(job)  # (the wrapper's mkdir keeps it from running twice)
        for job in started:
            if self._aside(job.id, now):
                continue
            self._handling = job.id
            launched += self._launch(job, now)
        self._handling = None
        self._launches += launched
        return launched

    def _enforce_only(self, now: float) -> None:
        """Walltimes and deletions enforced from memory alone, while nothing can be written."""
        for job in self.batch.sched.jobs.values():
            if job.state in ACTIVE and "launched" in job.extra:
                pid = self._pid(job)
                if job.extra.get("remote") and (self._seen(job) or {}).get("state") == "running" \
                        or pid and process_start(pid) is not None:
                    self._escalate(job, pid, now, journal=False)

    def _log_nodes(self, sched, plan, now: float) -> None:
        """Append every node's sample after this pass (losing the log never stops a pass)."""
        writer = DailyWriter(self.node_log, offset=time.localtime(now).tm_gmtoff)
        try:
            writer.write(now, Sampler(sched).samples(plan), self.passes)
        except OSError as e:
            log(f"node_log: {e}")
        finally:
            writer.close()
        self.passes += 1

    def _reap_children(self) -> None:
        while True:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.children[pid] = status
            self.cpu[pid] = usage.ru_utime + usage.ru_stime

    def _status(self, job: Job) -> int | None:
        """The exit status the job's wrapper wrote: in `status`, or in its place `status.tmp`
        where a full disk refused the rename (layout.WRAPPER)."""
        d = self.jobdir(job)
        status = self._read_int(d / "status")
        return status if status is not None else self._read_int(d / "status.tmp")

    def _ran_until(self, job: Job, now: float, seen: dict | None = None) -> float | None:
        """When a job that ended while no server ran really ended: its status file's time
        (the wrapper writes it at the end; on another host, as its node says), but never
        before the last step of the server that last saw it (the owner may touch the file)
        nor after now; None for a job this server launched or one whose end it surely saw
        within a step."""
        if job.extra.get("launched", now) >= self.boot or job.start_time is None:
            return None
        written = seen.get("ended_at") if seen is not None else None
        for name in ("status", "status.tmp") if seen is None else ():
            with contextlib.suppress(OSError):
                written = os.stat(self.jobdir(job) / name).st_mtime
                break
        if written is None:
            return None
        floor = max(job.start_time, self.last_alive or job.start_time)
        return min(now, max(floor, written)) if written < now - 1 else None

    def _pid(self, job: Job) -> int | None:
        """The pid of the job's wrapper: from its pid file, or as noted at launch."""
        if self.multi:  # a pid the owner wrote counts only for a process of the owner's
            pid = job.extra.get("pid") or self._read_int(self.jobdir(job) / "pid")
            if pid and "pid" not in job.extra and self.as_owners:
                try:
                    if os.stat(f"/proc/{pid}").st_uid != pwd.getpwnam(job.owner).pw_uid:
                        return None  # someone else's: never signalled for this job
                except KeyError:
                    return None
                except OSError:
                    pass  # gone: the job's end
            return pid
        return self._read_int(self.jobdir(job) / "pid") or job.extra.get("pid")

    def _alive(self, job: Job, now: float) -> tuple[int | None, bool]:
        """(the pid of the job's wrapper on this host, is it running?).  The pid file names
        the wrapper; the start time recorded at launch (None: it had already ended) tells a
        reused pid from ours.  On a multi-user site the file is the owner's to write: the
        pid the server saw at launch comes first."""
        pid = self._pid(job)
        start = process_start(pid) if pid else None
        if pid == job.extra.get("pid") and "pid_start" in job.extra:
            return pid, start is not None and start == job.extra["pid_start"]
        if start is not None and self.multi and "pid" not in job.extra:
            # a session's wrapper wrote its pid: kept from now on (the file is the
            # owner's to rewrite; a later pid in it is not believed)
            self._note(job, now, set={"pid": pid, "pid_start": start})
        return pid, start is not None

    # --- jobs on other hosts (the `ssh` launcher: remote.py) --------------------------------
    def _key(self, job: Job) -> str:
        return self.nodes.key(job.id, job.run_count)

    def _seen(self, job: Job) -> dict | None:
        """A job on another host: its node's last word on this run ({} until the node has
        answered for it); None for a job on this host."""
        host = job.extra.get("remote")
        if not host or self.nodes is None:
            return None
        return self.nodes.seen.get(host, {}).get(self._key(job), {})

    def _look_nodes(self, now: float) -> None:
        """Ask the hosts of running jobs, and the nodes the server marked down, how things
        are; a host back brings its node up (what ran there of jobs gone is cleaned up
        first); a host silent for node_check_rate is down, and its jobs requeued or ended."""
        sched = self.batch.sched
        runs: dict[str, list[str]] = {}
        live: dict[str, list[str]] = {}  # (and those a launch may have started unsaid: kept too)
        for job in sched.jobs.values():
            if job.state in ACTIVE and job.nodes:
                live.setdefault(job.extra.get("remote") or job.nodes[0], []).append(self._key(job))
                if job.extra.get("remote") and "epilogue_at" not in job.extra:
                    runs.setdefault(job.extra["remote"], []).append(self._key(job))
        for name, note in sched.node_notes.items():
            if note.startswith(remote.DOWN_NOTE):
                runs.setdefault(name, [])
        for host in self.nodes.look(now, runs, self.children):
            if sched.node_notes.get(host, "").startswith(remote.DOWN_NOTE):
                # (up again, unless an operator has set it otherwise meanwhile: the note goes)
                down = sched.topology.node(host).state == NodeState.DOWN
                log(f"node {host}: answers again" + (": up" if down else ""))
                self.batch.do("node", now, name=host, note="", **({"state": "up"} if down else {}))
            if host not in self.nodes.swept:
                self.nodes.stale(host, live.get(host, []))
        silent = [(host, why) for host, (_, why) in self.nodes.failing.items()
                  if self.nodes.down_since(host, now) is not None]
        if silent:  # (the nodes' names asked for only then: most steps have none)
            names = {n.name for n in sched.topology.all_nodes()}
            for host, why in silent:
                if host in names:
                    self._node_down(host, now, why)

    def _node_down(self, host: str, now: float, why: str) -> None:
        """The host has not answered for node_check_rate: down, with why in its note; its
        jobs, whose runs there its keepers have killed by now (their lease), requeued when
        rerunnable (an R record), else ended (A)."""
        sched = self.batch.sched
        if not sched.node_notes.get(host, "").startswith(remote.DOWN_NOTE):
            log(f"node {host}: no answer for {self.nodes.check_rate:g} s ({why}): down")
            self.batch.do("node", now, name=host, state="down", note=_down_note(now, why))
        if not self.nodes.fenced(host, now):
            return  # (its runs' keepers there kill them once their leases run out: not yet)
        for job in [j for j in sched.jobs.values() if j.state in ACTIVE and j.extra.get("remote") == host]:
            self._handling = job.id
            self.nodes.stop_waiting(self._key(job))
            if "epilogue_at" in job.extra:
                continue  # (its end is known: its epilogue runs here)
            if job.extra.get("rerunnable", True) and job.state == RUNNING:
                self._requeue(job, now, f"its node {host} is down")
            elif job.state == EXITING:  # (deleted: it ended as killed)
                self._finish(job, 256 + (job.extra.get("signal") or signal.SIGKILL), now)
            else:
                self._finish(job, LOST, now, why=f"its node {host} went down")
        self._handling = None

    def _watch(self, job: Job, now: float) -> None:
        """Take a run of the job on from its phase (Phase): end it once its process is gone,
        signal it past a limit or deleted."""
        at = phase(job)
        if at is Phase.STARTING:
            if job.state == EXITING:  # deleted between its pass and its launch (in its prologue, say)
                self._finish(job, 256 + signal.SIGTERM, now, recorded=False)
        elif at is Phase.PURGED:  # qdel -p or -W force: it ends now, whatever it runs
            self._kill_epilogue(job)
            self._finish(job, job.exit_status if "epilogue_at" in job.extra else 256 + signal.SIGKILL, now)
        elif at is Phase.EPILOGUE:  # its process has ended: its epilogue holds its nodes
            self._after_epilogue(job, now)
        else:
            if job.extra.get("messages"):  # qmsg: its lines in the job's files
                for streams, text in job.extra["messages"]:
                    self._tell(job, text, streams)
                self._note(job, now, clear=["messages"])
            seen = self._seen(job)  # (a job on another host: its node's last word on it)
            found = self._process(job, now, seen)
            if found is None:
                return  # (not known yet: its host not heard from, its qsub -I not come)
            pid, alive = found
            if alive:
                self._deliver(job, pid, now, seen)
                self._escalate(job, pid, now)
            elif job.extra.get("rerun") and job.state == RUNNING:
                self._requeue(job, now)  # (qrerun: back to the queue however it ended)
            else:
                self._process_ended(job, pid, now, seen)

    def _process(self, job: Job, now: float, seen: dict | None) -> tuple[int | None, bool] | None:
        """(the pid of the run's wrapper, is it running?), here or as its node last said; None
        while that is not known yet."""
        if seen is not None:
            if seen.get("state") is None:
                return None  # (not heard from its host yet, since the server started or since it failed)
            pid = job.extra.get("pid")
            if seen["state"] == "none" and pid is None and not self.nodes.fenced(job.extra["remote"], now):
                return None  # (a start not confirmed that its node does not know of, yet: a late one is fenced)
            if pid is None and seen.get("pid"):  # (a start its launch could not confirm)
                pid = seen["pid"]
                self._note(job, now, set={"pid": pid, "pid_start": seen["start"], "session": pid})
            return pid, seen["state"] == "running"
        pid, alive = self._alive(job, now)
        if pid is None and job.extra.get("interactive") and job.state == RUNNING \
                and now < job.extra["launched"] + INTERACTIVE_WAIT:
            return None  # its qsub -I has not started the session yet
        return pid, alive

    def _process_ended(self, job: Job, pid: int | None, now: float, seen: dict | None) -> None:
        """The run's process is gone: its end recorded (after the site's epilogue, if any),
        or, where it never said how it ended, the job requeued (rerunnable) or aborted."""
        # (the wrapper's word, in a directory the job can write too: believed only of a
        # job that asked for files staged in)
        failed = None
        if job.extra.get("W", {}).get("stagein"):
            failed = seen.get("stagein_failed") if seen is not None else \
                (self._read(self.jobdir(job) / "stagein_failed", 2000) or b"").decode("utf-8", "replace") or None
        if failed is not None and job.state == RUNNING:
            self._stagein_failed(job, failed, now)
            self.children.pop(pid, None), self.cpu.pop(pid, None)
            return
        status = self._status(job) if seen is None else seen.get("status")
        ran_until = self._ran_until(job, now, seen) if status is not None else None
        sent = job.extra.get("signal") or self.sent.get(job.id, (None,))[0]
        if sent and (status is None or status >= 128):
            status = 256 + sent  # as PBS records a job it killed
        if status is None and pid is not None and pid in self.children:
            ws = self.children[pid]  # (forgotten only once the end is in the store)
            status = 256 + os.WTERMSIG(ws) if os.WIFSIGNALED(ws) else os.WEXITSTATUS(ws)
        if status is None and pid is None and job.extra.get("interactive"):
            # its qsub -I never came for the session (it is gone): aborted, as PBS's mom
            # gives up on a qsub it cannot reach, not requeued to wait again
            self._note(job, now, comment="its qsub -I never came for the session: aborted")
            status = LOST
        if status is None:
            if job.extra.get("rerunnable", True) and job.state == RUNNING:
                self._requeue(job, now)
                return
            status = LOST
        cpu = self.cpu.get(pid) if seen is None else seen.get("cpu")  # (None: not this server's child)
        if ran_until is not None:
            self._note(job, now, set={"ran_until": ran_until})
        if self.epilogue:
            self._epilogue(job, status, cpu, now)
        else:
            self._finish(job, status, now, cpu_time=cpu)
        self.children.pop(pid, None), self.cpu.pop(pid, None)  # (forgotten once its end is in the store)

    def _deliver(self, job: Job, pid: int | None, now: float, seen: dict | None) -> None:
        """qsig's signals to a running job, then forgotten (one the kernel refuses is dropped)."""
        pending = job.extra.get("pending_signals")
        if not pending:
            return
        if seen is not None:
            self.nodes.signal(job.extra["remote"], self._key(job), [s for s in pending if isinstance(s, int)])
        else:
            for sig in pending:
                try:
                    os.killpg(pid, sig)
                except ProcessLookupError:
                    pass
                except (OSError, ValueError, TypeError, OverflowError) as e:
                    log(f"job {common.short_id(job)}: signal {sig!r} not sent: {e}")
        self._note(job, now, clear=["pending_signals"])

    def _requeue(self, job: Job, now: float, why: str = "") -> None:
        """Back to the queue, to run again (its process lost, or qrerun): an R record."""
        log(f"job {common.short_id(job)}: requeued"
            + (f" ({why})" if why else " (qrerun)" if job.extra.get("rerun") else " (its process was lost)"))
        if job.extra.get("remote"):  # (what is left of this run on its hosts: killed, forgotten)
            self._clean(job)
            self.nodes.forget(job.nodes, self._key(job))
        rerun = accounting.lines("R", [job], self.site.server, now)  # (as it ran: its start, its hosts)
        self.batch.do("requeue", now, id=job.id, records=lambda _: rerun)
        self.peaks.pop(job.id, None)
        self._forget_prologue(job)
        if job.extra.get("tmpdir"):
            _remove(job.extra["tmpdir"])
        self._note(job, now, clear=["launched", "pid", "pid_start", "signal", "signalled_at", "over",
                                   "rerun", "used_mem", "used_vmem", "used_at", "tmpdir", "remote"])

    def _escalate(self, job: Job, pid: int, now: float, journal: bool = True) -> None:
        """A job past a limit (its walltime, which stands still while it is suspended, its
        CPU time or its memory: _past), deleted or to be rerun, gets SIGTERM, then SIGKILL
        after the grace."""
        past = self._past(job, pid, now, journal)
        if job.state == EXITING or job.extra.get("rerun") or past:
            sent, at = job.extra.get("signal"), job.extra.get("signalled_at", now)
            if not sent and job.id in self.sent:  # sent while the store could not say so
                sent, at = self.sent[job.id]
            if not sent:
                if past and past[1]:
                    self._tell(job, f"=>> PBS: job killed: {past[1]}")
                self._signal(job, pid, signal.SIGTERM, now, journal)
            elif sent == signal.SIGTERM and now >= at + self.grace:
                self._signal(job, pid, signal.SIGKILL, now, journal)

    def _past(self, job: Job, pid: int, now: float, journal: bool) -> tuple[str, str] | None:
        """The limit a running job is past, with pbs_mom's words for it ('' once said), or
        None; what it uses is noted on the way (_peaks).  A job past its CPU time or memory
        is marked (`over`): its end is that limit's abort."""
        if job.state != RUNNING:
            return None
        use = self._use(job, pid, now)
        if journal:
            self._peaks(job, use, now)
        if job.extra.get("over"):
            return job.extra["over"], ""
        used = common.run_time(job, now)
        if used > job.walltime:
            return "walltime", limits.seconds_over("walltime", used, job.walltime)
        found = limits.over(job, self._limits(job), use)
        if found and journal:
            self._note(job, now, set={"over": found[0]})
        return found

    def _look(self, now: float | None) -> None:
        """Look at /proc for what running jobs use, before a step takes the store's lock: a
        POLL after the last look, or after a launch (so a short job is seen at least once).
        A look costs about a millisecond a hundred processes, and steps come faster."""
        now = time.time() if now is None else now
        if (self._launches or abs(now - self._looked) >= POLL) and \
                self.batch.sched is not None and \
                any(j.state == RUNNING and "launched" in j.extra for j in self.batch.sched.jobs.values()):
            self._usage, self._looked, self._uses, self._launches = limits.Usage(), now, {}, 0

    def _use(self, job: Job, pid: int, now: float) -> limits.Use:
        """What the job's processes use, as the last look saw them."""
        seen = self._seen(job)
        if seen is not None:  # (on another host: as its node last said)
            return limits.Use(*seen.get("use", (0.0, 0, 0)))
        if self._usage is None:
            self._usage, self._looked, self._uses = limits.Usage(), now, {}
        if (job.id, pid) not in self._uses:
            members = self.tracker.pids(job.id, job.run_count, scan=False) if self._in_cgroup(job) else ()
            self._uses[job.id, pid] = self._usage.of(pid, members)
        return self._uses[job.id, pid]

    def _limits(self, job: Job) -> dict[str, int]:
        """The job's limits the server keeps it to (none on a `command` launcher's host:
        its processes are elsewhere; on the `ssh` launcher's, its node says what they use)."""
        return {} if self.launcher else limits.asked(job)

    def _peaks(self, job: Job, use: limits.Use, now: float) -> None:
        """Keep the job's peak memory (resources_used.mem and .vmem): noted with its end, and
        while it runs when one has grown by an eighth, at most every PEAK_EVERY seconds (as
        pbs_mom reports to pbs_server: one journal write a job, not one a step)."""
        x = job.extra
        old = self.peaks.get(job.id) or (x.get("used_mem", 0), x.get("used_vmem", 0))
        peak = self.peaks[job.id] = (max(old[0], use.mem), max(old[1], use.vmem))
        noted = (x.get("used_mem", 0), x.get("used_vmem", 0))
        if any(p > n + n // 8 for p, n in zip(peak, noted)) and \
                now >= x.get("used_at", x.get("launched", now)) + PEAK_EVERY:
            self._note(job, now, set={"used_mem": peak[0], "used_vmem": peak[1], "used_at": now})

    def _last_peaks(self, job: Job) -> dict:
        """The peaks the server saw of a job whose process has ended, to note with its end
        (and forget here)."""
        peak = self.peaks.pop(job.id, None)
        return {"used_mem": peak[0], "used_vmem": peak[1]} if peak else {}

    def _tell(self, job: Job, line: str, streams: str = "E") -> None:
        """Write a line at the end of the job's error file (E: its output file when they are
        joined) or output file (O), with the owner's rights: pbs_mom's word on a job it
        kills, a qmsg."""
        if job.extra.get("interactive") or "launched" not in job.extra:
            return
        try:
            owner = privilege.Owner.of(job.owner, job.group) if self.as_owners else None
            out, err, into = rundir.streams(job, owner, self.site.flavor)
            paths = {into if s == "E" else err if job.extra.get("join") == "eo" else out for s in streams}
            with privilege.acting_as(owner) if owner else contextlib.nullcontext():
                for path in sorted(paths):  # (joined: one file, the line once)
                    with open(path, "ab") as f:  # (a qmsg's bytes as its caller gave them)
                        f.write(os.fsencode(line + "\n"))
        except (KeyError, OSError):
            pass  # (an owner gone, a file the owner removed: the server goes on)

    def _finish(self, job: Job, status: int, now: float, why: str = "", cpu_time: float | None = None,
                recorded: bool = True) -> None:
        """The job ended with `status`: record it (E, or A when the server lost or could
        not start it; not `recorded`: one never launched has no S, so its D ends its
        accounting as a queued job's does), mail its owner, and delete what depended on it
        failing."""
        walltime = _killed(job)  # (the abort PBS mails about)
        self._clean(job)
        self._forget_prologue(job)
        peaks = self._last_peaks(job)
        noted = {"set": peaks} if peaks else {}
        aborted = status == LOST
        log(f"job {common.short_id(job)}: ended, exit status {status}" + (f" ({why})" if why else ""))
        self.batch.do("ended", now, id=job.id, exit_status=status,
                      records=(lambda job: accounting.lines("A" if aborted else "E", [job], self.site.server, now))
                      if recorded else None,
                      **({"cpu_time": cpu_time} if cpu_time is not None else {}), **noted)
        if job.extra.get("remote"):  # (its end on record: its hosts forget the run)
            self.nodes.forget(job.nodes, self._key(job))
        if aborted or walltime:
            limit = job.extra.get("over", "walltime")
            why = why or (f"Job exceeded its {limit} limit. Job was aborted" if walltime
                          else "Job lost: its process vanished without an exit status")
            mail.send(self.site, job, mail.ABORT, f"Aborted by PBS Server\n{why}")
        else:
            mail.send(self.site, job, mail.END, "Execution terminated")
        accounting.core_deletions(self.batch, now)

    def _prologue(self, job: Job, owner: privilege.Owner | None, now: float) -> int:
        """The site's prologue for this run of the job: started (its output in the job's
        files), or, once it has ended, the job launched, aborted (status 1) or requeued
        held (any other end, a timeout); the server goes on meanwhile.  Returns how many
        jobs were launched."""
        run = (job.id, job.run_count)
        if run not in self.prologues:
            args = scripts.prologue_args(job, self.site.server)
            proc, did = self._script(self.prologue, args, job, owner)
            if proc is None:
                return self._prologue_failed(job, None, did, now)
            self.prologues[run] = (proc, now)
            return 0
        end = self._script_end(*self.prologues[run], now)
        if end is None:
            return 0  # (its end pokes the server: SIGCHLD)
        status, did = end
        del self.prologues[run]
        if status != 0:
            return self._prologue_failed(job, status, did, now)
        self.prologued.add(run)
        return self._launch(job, now)

    def _forget_prologue(self, job: Job) -> None:
        """The run ends (or goes back to the queue): its prologue, if still running, is killed."""
        run = (job.id, job.run_count)
        self.prologued.discard(run)
        if run in self.prologues:
            self._kill_script(self.prologues.pop(run)[0])

    def _prologue_failed(self, job: Job, status: int | None, did: str, now: float) -> int:
        """A prologue that exited 1 aborts the job; any other failure puts it back in the
        queue with a system hold, so that a broken script does not start it at every pass."""
        if status == scripts.ABORT:
            return self._not_started(job, now, f"its prologue {did}: job aborted")
        return self._held_back(job, now, f"its prologue {did}")

    def _stagein_failed(self, job: Job, text: str, now: float) -> None:
        """Its files could not be staged in, so it never ran: back to the queue with a
        system hold (an R record), the copy's complaint in its comment and mail, as PBS
        holds a job whose stagein failed."""
        why = " ".join(text.split())[:300] or "no reason given"
        self._requeue(job, now)
        self.batch.do("hold", now, id=job.id, kind="s")
        self._note(job, now, comment=f"stagein failed ({why}): requeued and held (qrls -h s releases it)")
        mail.send(self.site, job, mail.ABORT, f"Job held: its files could not be staged in\n{text[:2000]}")

    def _held_back(self, job: Job, now: float, why: str) -> int:
        """The job could not start for a reason that may pass: back in the queue with a
        system hold, so that it does not fail again at every pass."""
        self._forget_prologue(job)
        self.batch.do("requeue", now, id=job.id)
        self.batch.do("hold", now, id=job.id, kind="s")
        self._note(job, now, comment=f"{why}: requeued and held (qrls -h s releases it)")
        return 0

    def _epilogue(self, job: Job, status: int, cpu_time: float | None, now: float) -> None:
        """The job's process ended with `status`: it is E, its nodes held, while the site's
        epilogue runs (as Torque's is), its output after the job's own; the server goes on
        meanwhile, and records the job's end once the epilogue is done (_after_epilogue)."""
        self._clean(job)  # (what the job left is killed before its epilogue, as pbs_mom does)
        noted = {"epilogue_at": now, **self._last_peaks(job),
                 **({"killed": True} if _killed(job) else {})}
        self.batch.do("exiting", now, id=job.id, exit_status=status, set=noted,
                      **({"cpu_time": cpu_time} if cpu_time is not None else {}))
        self._start_epilogue(job, now)

    def _start_epilogue(self, job: Job, now: float) -> None:
        """Start the epilogue of a job its `exiting` record made E (a restarted server: one
        its predecessor died before it could say it had started, so at least once)."""
        owner = None
        with contextlib.suppress(KeyError):
            owner = privilege.Owner.of(job.owner, job.group) if self.as_owners else None
        args = scripts.epilogue_args(job, self.site.server, job.extra.get("session", job.extra.get("pid", 0)),
                                     job.extra["epilogue_at"])
        proc, did = self._script(self.epilogue, args, job, owner) if self.epilogue else (None, "is no longer set")
        if proc is None:
            log(f"job {common.short_id(job)}: epilogue {did}")
            self._finish(job, job.exit_status, now)
        else:
            self.epilogues[job.id] = (proc, now)
            # (its pid and start time: a restarted server waits for it too)
            self._note(job, now, set={"epilogue_pid": proc.pid, "epilogue_start": _wait_start(proc.pid)})

    def _after_epilogue(self, job: Job, now: float) -> None:
        """Once the job's epilogue has ended (or timed out), the job's end is recorded and
        its nodes freed; a bad end is reported.  One a server before a restart started is
        waited for as well (its status unseen: not this server's child)."""
        if job.id in self.epilogues:
            end = self._script_end(*self.epilogues[job.id], now)
            if end is None:
                return  # (its end pokes the server: SIGCHLD)
            status, did = end
        elif self._orphan(job):
            if now < job.extra["epilogue_at"] + self.script_timeout:
                return  # (the server looks again every POLL: next_step)
            self._kill_epilogue(job)
            status, did = None, f"timed out after {self.script_timeout:g} s"
        elif "epilogue_pid" not in job.extra:  # (its server died before it said the epilogue ran)
            return self._start_epilogue(job, now)
        else:
            status, did = None, "ended while the server was restarting"
        self.epilogues.pop(job.id, None)
        if status != 0:
            log(f"job {common.short_id(job)}: epilogue {did}")
        self._finish(job, job.exit_status, now)

    def _kill_epilogue(self, job: Job) -> None:
        """Kill the job's epilogue, if one runs (this server's, or a server's before it)."""
        if job.id in self.epilogues:
            self._kill_script(self.epilogues.pop(job.id)[0])
        elif self._orphan(job):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(job.extra["epilogue_pid"], signal.SIGKILL)

    def _orphan(self, job: Job) -> bool:
        """Is the job's epilogue one a server before this one started, still running?"""
        pid, start = job.extra.get("epilogue_pid"), job.extra.get("epilogue_start")
        return job.id not in self.epilogues and None not in (pid, start) and process_start(pid) == start

    def _script_end(self, proc: subprocess.Popen, began: float, now: float) -> tuple[int | None, str] | None:
        """A site script's end: (its status, what it did), a timeout killing it (None, ...),
        or None while it runs within its time."""
        status = self._ended(proc)
        if status is not None:
            return status, f"exited {status}" if status >= 0 else f"was killed by signal {-status}"
        if now >= began + self.script_timeout:
            self._kill_script(proc)
            return None, f"timed out after {self.script_timeout:g} s"
        return None

    def _ended(self, proc: subprocess.Popen) -> int | None:
        """A site script's exit status (negative: the signal that killed it), or None while
        it runs: as the step's reaping found it (its status then taken, so that a job's
        wrapper that gets the pid next is not given it), else from the process itself."""
        if proc.pid in self.children:
            proc.returncode = os.waitstatus_to_exitcode(self.children.pop(proc.pid))
            self.cpu.pop(proc.pid, None)
        return proc.poll()

    def _kill_script(self, proc: subprocess.Popen) -> None:
        """SIGKILL to a site script's session, and its leader reaped now."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        if self._ended(proc) is None:
            proc.wait()

    def _script(self, command: list[str], args: list[str], job: Job,
                owner: privilege.Owner | None) -> tuple[subprocess.Popen | None, str]:
        """Start a site script for `job`, its output at the end of the job's files (opened
        with the owner's rights; an interactive job has none: its output is dropped):
        (the process, or None, and what went wrong)."""
        try:
            with contextlib.ExitStack() as files:
                stdout, stderr = (subprocess.DEVNULL,) * 2 if job.extra.get("interactive") else \
                    self._open_files(job, owner, files)
                # (a session of its own: a timeout kills all it started)
                return subprocess.Popen([*command, *args], stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
                                        env=self._script_env(job), start_new_session=True), ""
        except (OSError, ValueError, subprocess.SubprocessError) as e:
            return None, f"could not run ({getattr(e, 'strerror', None) or e})"

    def _script_env(self, job: Job) -> dict[str, str]:
        """The environment of the site's prologue and epilogue."""
        return siteprog.environment(self.site, PBS_JOBID=common.display_id(job, self.site.server),
                                    PBS_NODEFILE=str(self.jobdir(job) / "nodes"))

    def _in_cgroup(self, job: Job) -> bool:
        """Is every process of the job in its run's cgroup (no need to look for its mark)?"""
        return bool(job.extra.get("cgroup")) or os.path.lexists(self.jobdir(job) / "cgroup")

    def _clean(self, job: Job) -> None:
        """Kill what is left of an ended job's processes, and say so, and remove its
        $TMPDIR (pbs_mom's cleanup)."""
        if job.extra.get("tmpdir"):
            _remove(job.extra["tmpdir"])
        if "launched" not in job.extra or job.extra.get("interactive"):
            return
        if job.extra.get("remote"):
            left = self.nodes.cleanup(job.nodes, self._key(job))
        else:
            left = self.tracker.clean(job.id, job.run_count, scan=not self._in_cgroup(job))
        if left:
            log(f"job {common.short_id(job)}: killed {len(left)} leftover process"
                f"{'es' if len(left) > 1 else ''} after its end: {', '.join(left)}")

    def _note(self, job: Job, now: float, records=None, **change) -> None:
        """Journal what changed about a job's process (a `process` record, not an alter)."""
        self.batch.do("process", now, records, id=job.id, **change)

    def _started(self, job: Job) -> list[str]:
        """A launch's S record (with the launch's `process` record: accounts.py)."""
        return accounting.lines("S", [job], self.site.server, job.extra["launched"])

    def _signal(self, job: Job, pid: int, sig: int, now: float, journal: bool = True) -> None:
        """`sig` to the job's process group and to every process of the job that left it (a
        suspended job is continued too, so that it can act on the signal)."""
        # (a deleted job is EXITING, not S: its mark says it is stopped)
        sigs = (sig, signal.SIGCONT) if job.suspended_at is not None and sig != signal.SIGKILL else (sig,)
        if job.extra.get("remote"):
            self.nodes.signal(job.extra["remote"], self._key(job), [int(s) for s in sigs])
            sigs = ()
        for s in sigs:
            try:
                os.killpg(pid, s)
            except ProcessLookupError:
                pass
            except PermissionError:  # a pid that is no longer the job's wrapper
                pass
            self.tracker.signal(job.id, job.run_count, s, scan=not self._in_cgroup(job), besides=pid)
        self.sent[job.id] = (int(sig), now)
        if journal:
            self._note(job, now, set={"signal": int(sig), "signalled_at": now})

    # --- launching -------------------------------------------------------------------------
    def _launch(self, job: Job, now: float) -> int:
        """Start the job's wrapper (as its owner on a multi-user site run by root).  A user's
        error (an unknown owner, a path the owner may not write, a planted file) is this
        job's failure: it ends, aborted, with the reason in its comment and mail.  Where the
        site has a prologue, the job starts once it has passed (_prologue)."""
        if os.path.isdir(self.jobdir(job) / "started"):
            # launched by a server whose note of it was never journaled (it stopped, or a
            # full disk refused the note): its wrapper ran, so it is not run again; _watch
            # finds its pid, or its status, in the run directory
            self._note(job, now, set={"launched": now}, records=self._started)
            return 0
        try:
            owner = privilege.Owner.of(job.owner, job.group) if self.as_owners else None
        except KeyError:
            return self._not_started(job, now, f"no such user on this host: {job.owner}")
        if self.prologue:  # (an interactive job's too: its session starts once it has passed)
            if (job.id, job.run_count) not in self.prologued:
                return self._prologue(job, owner, now)
            self.prologued.discard((job.id, job.run_count))  # (passed: this launch takes it)
        if self.check and not self._scan(job, now):
            return 0
        x = job.extra
        here = not self.over_ssh or x.get("interactive")  # (on this host: else on its first node's)
        try:
            d = rundir.make(self.jobdir(job), owner, self.multi)
            scratch = self._scratch(job, owner) if here else ""
        except OSError as e:
            return self._not_started(job, now, f"its run directory: {e.strerror or e}")
        home = owner.home if owner else rundir.home(job)
        workdir = x.get("workdir") or home  # PBS starts a job in its owner's home unless -d/-w
        shell = x.get("shell") or (owner.shell if owner else "/bin/sh")
        env = self._environment(job, d / "nodes", scratch, workdir, home, shell)
        for name in ("HPCSCHED_LIMITS", "HPCSCHED_CGROUP"):  # the wrapper's, only as the server sets them
            env.pop(name, None)
        asked = limits.asked(job)
        if limits.ulimits(asked):  # (the wrapper sets them for the job: layout.WRAPPER)
            env["HPCSCHED_LIMITS"] = limits.ulimits(asked)
        gpus = self._gpus(job)
        if gpus:  # Torque's GPU file (one `node-gpuN` a line) and the first node's devices
            env.update(PBS_GPUFILE=str(d / "gpus"), CUDA_VISIBLE_DEVICES=",".join(map(str, gpus[job.nodes[0]])))
        try:
            files = rundir.files(job, env, workdir, gpus)
            rundir.write(d, files, owner)
        except OSError as e:
            if scratch:
                _remove(scratch)
            return self._not_started(job, now, f"its run directory: {e.strerror or e}")
        if not here:
            return self._launch_remote(job, now, owner, env, files, shell, workdir, gpus)
        noted = {"tmpdir": scratch, **({"gpus": gpus} if gpus else {})}
        if x.get("interactive"):
            self._note(job, now, set={"launched": now, **noted}, records=self._started)
            mail.send(self.site, job, mail.BEGIN, "Begun execution")
            return 1
        return self._launch_here(job, now, d, owner, env, shell, workdir, scratch, noted)

    def _launch_here(self, job: Job, now: float, d: Path, owner: privilege.Owner | None, env: dict[str, str],
                     shell: str, workdir: str, scratch: str, noted: dict) -> int:
        """Start the job's wrapper from this host, in a session of its own, in the run's
        cgroup, with the job's umask and nice value, its files opened as its owner (through
        a `command` launcher's template where the site has one)."""
        x = job.extra
        argv = ["/bin/sh", "-c", WRAPPER, "hpcsched-job", str(d), shell, str(d / "script"), *x.get("arguments", ())]
        if self.launcher:
            line = shlex.join(argv)
            argv = [part.replace("{host}", job.nodes[0]).replace("{command}", line).replace("{user}", job.owner)
                    for part in self.launcher]
        cgroup = self.tracker.cgroup(job.id, job.run_count, create=True)
        if cgroup:
            env["HPCSCHED_CGROUP"] = cgroup  # (the wrapper joins it: layout.WRAPPER)
        # the job and its output files get its -W umask (077 by default, as PBS's): the
        # child inherits this process's umask, set just around its creation
        old_umask = os.umask(int(x.get("W", {}).get("umask", "077"), 8))
        try:
            with contextlib.ExitStack() as files:
                with privilege.acting_as(owner) if owner else contextlib.nullcontext():
                    if owner and not (os.path.isdir(workdir) and os.access(workdir, os.X_OK, effective_ids=True)):
                        raise NotADirectoryError(errno.ENOTDIR, f"cannot enter {workdir}")
                stdout, stderr = self._open_files(job, owner, files)
                nice = limits.asked(job).get("nice")
                proc = subprocess.Popen(argv, cwd=None if owner else workdir, env=env, stdin=subprocess.DEVNULL,
                                        stdout=stdout, stderr=stderr, start_new_session=True,
                                        preexec_fn=privilege.becoming(owner, workdir, cgroup, nice)
                                        if owner or nice else None)
        except (OSError, ValueError, subprocess.SubprocessError) as e:
            # a bad path is this job's failure, not the server's
            _remove(scratch)
            return self._not_started(job, now, getattr(e, "strerror", None) or str(e))
        finally:
            os.umask(old_umask)
        # (as the owner, the wrapper joined the cgroup while still root: privilege.becoming)
        joined = cgroup is not None and owner is not None
        self._note(job, now, set={"launched": now, "pid": proc.pid, "pid_start": _wait_start(proc.pid),
                                  "session": proc.pid, **({"cgroup": cgroup} if joined else {}), **noted},
                   records=self._started)
        log(f"job {common.short_id(job)}: started for {job.owner} on {','.join(job.nodes)} (pid {proc.pid})")
        mail.send(self.site, job, mail.BEGIN, "Begun execution")
        return 1

    def _launch_remote(self, job: Job, now: float, owner: privilege.Owner | None, env: dict[str, str],
                       files: dict[str, tuple[str, int]], shell: str, workdir: str, gpus: dict) -> int:
        """Start the job's wrapper on its first node through that host's node command
        (node.py), after a word from each of its other hosts.  A host that does not answer
        is marked down, with why, and the job goes back to the queue; one that refuses
        (no such user there, a path the owner may not write) fails the job as here."""
        x = job.extra
        host, key = job.nodes[0], self._key(job)
        for other in dict.fromkeys(job.nodes[1:]):
            why = self.nodes.ping(other)
            if why is not None:
                return self._unreached(job, other, now, why)
        out, err, _ = rundir.streams(job, owner, self.site.flavor)
        join = x.get("join", "n")
        paths = {"PBS_NODEFILE": "nodes", **({"PBS_GPUFILE": "gpus"} if gpus else {}),
                 **({"COBALT_NODEFILE": rundir.COBALT_NODES} if "cobalt" in x else {})}
        spec = {"env": env, "files": files, "paths": paths, "shell": shell, "arguments": x.get("arguments", []),
                "owner": owner.name if owner else None, "group": job.group, "workdir": workdir,
                "stdout": out if join != "eo" else err, "stderr": err if join == "n" else None,
                "umask": x.get("W", {}).get("umask", "077"), "nice": limits.asked(job).get("nice"),
                "lease": self.nodes.check_rate, "tmpdir": self.site.config.get("tmpdir"),
                "sisters": {**self.nodes.sisters(), "host": host}}
        try:
            got = self.nodes.run(host, key, spec)
        except remote.Refused as e:
            return self._not_started(job, now, f"on {host}: {e}")
        if got is None and self.nodes.unsent:
            return self._unreached(job, host, now, self.nodes.failing[host][1])
        if got is None:
            # the connection was lost after it was made: the run may have started there,
            # so it is launched as far as anyone can tell, and the host's next word (or its
            # silence for node_check_rate, when the run's lease there has run out) decides
            log(f"job {common.short_id(job)}: its start on {host} unconfirmed ({self.nodes.failing[host][1]})")
            got = {}
        self._note(job, now, set={"launched": now, "remote": host, **({"gpus": gpus} if gpus else {}),
                                  **({"pid": got["pid"], "pid_start": got["start"], "session": got["pid"]} if got else {})},
                   records=self._started)
        log(f"job {common.short_id(job)}: started for {job.owner} on {','.join(job.nodes)} "
            f"(pid {got.get('pid', '?')} on {host})")
        mail.send(self.site, job, mail.BEGIN, "Begun execution")
        return 1

    def _unreached(self, job: Job, host: str, now: float, why: str) -> int:
        """A host of a job about to start does not answer: its node down, with why; the job
        back in the queue, to start where the next pass puts it."""
        log(f"node {host}: not reached ({why}): down; job {common.short_id(job)} back in the queue")
        self.batch.do("node", now, name=host, state="down", note=_down_note(now, why))
        self.batch.do("requeue", now, id=job.id)
        return 0

    def _open_files(self, job: Job, owner: privilege.Owner | None, files: contextlib.ExitStack) -> tuple:
        """The job's output and error files opened to append to, with the owner's rights
        (kept open by `files`): (stdout, stderr), stderr STDOUT when -j joins them."""
        out, err, _ = rundir.streams(job, owner, self.site.flavor)
        join = job.extra.get("join", "n")
        with privilege.acting_as(owner) if owner else contextlib.nullcontext():
            stdout = files.enter_context(open(out if join != "eo" else err, "ab"))
            stderr = files.enter_context(open(err, "ab")) if join == "n" else subprocess.STDOUT
        return stdout, stderr

    def _gpus(self, job: Job) -> dict[str, list[int]]:
        """Which GPUs of each of its nodes the job gets: the lowest ones no other running job
        was given (the planner buys GPUs as cores, so a node never has too few); journaled
        with its launch, as its pid is.  {} for a job that asks for none."""
        want = job.request.gpus
        if not want:
            return {}
        sched = self.batch.sched
        taken = common.gpus_held(j for j in sched.jobs.values() if j.id != job.id)
        return {name: [i for i in range(sched.topology.node(name).gpus) if i not in taken.get(name, ())][:want]
                for name in job.nodes}

    def _not_started(self, job: Job, now: float, why: str) -> int:
        """The job could not start: it ends, aborted (A), its reason in its comment."""
        self._note(job, now, set={"launched": now}, comment=f"launch failed: {why}")
        self._finish(job, LOST, now, why=f"Job could not start: {why}")
        return 0

    def _scratch(self, job: Job, owner: privilege.Owner | None) -> str:
        """Make this run's $TMPDIR under `tmpdir` (the system's temporary directory by
        default), the owner's: a fresh name of the server's making (no user can take it
        first, nor rename it in a sticky /tmp), removed when the run ends (_clean)."""
        path = tempfile.mkdtemp(prefix=f"pbs.{job.id}.", dir=self.tmpdir)
        if owner:
            os.chown(path, owner.uid, owner.gid)
        return path

    def _scan(self, job: Job, now: float) -> bool:
        """PSC's pre-job scan: check each node; a failing node goes on the bad list and
        the job returns to the queue to get other nodes.  On the `ssh` launcher's hosts
        the check runs on the node, over its connection: a host it does not reach is down
        (with why), not bad."""
        for node in dict.fromkeys(job.nodes):
            cmd = [part.replace("{node}", node) for part in self.check]
            if self.over_ssh:
                ok = self.nodes.check(node, cmd)
                if ok is None:
                    return bool(self._unreached(job, node, now, self.nodes.failing[node][1]))
                if not ok:
                    self.batch.do("node", now, name=node, state="bad")
                    self.batch.do("requeue", now, id=job.id)
                    return False
                continue
            try:
                ok = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    env=siteprog.environment(self.site), timeout=60).returncode == 0
            except (OSError, subprocess.TimeoutExpired):
                ok = False
            if not ok:
                self.batch.do("node", now, name=node, state="bad")
                self.batch.do("requeue", now, id=job.id)
                return False
        return True

    def _environment(self, job: Job, nodefile: Path, tmpdir: Path, workdir: str, home: str,
                     shell: str) -> dict[str, str]:
        x = job.extra
        v = dict(x.get("variables", {}))
        env = {"PATH": v.get("PBS_O_PATH", "/usr/local/bin:/usr/bin:/bin"), "HOME": home,
               "USER": job.owner, "LOGNAME": job.owner, "SHELL": shell, "LANG": v.get("PBS_O_LANG", "C")}
        env.update(v)
        if self.as_owners:  # the owner's own, whatever qsub -V copied
            env.update(HOME=home, USER=job.owner, LOGNAME=job.owner)
        env[tracking.MARK] = self.tracker.mark(job.id, job.run_count)
        env["HPCSCHED_HOME"] = str(self.home)  # the commands a job runs reach its own site
        r = job.request
        jid = common.display_id(job, self.site.server)
        env.update(PBS_JOBID=jid, PBS_JOBNAME=job.name, PBS_QUEUE=job.queue, PBS_NODEFILE=str(nodefile),
                   PBS_O_WORKDIR=v.get("PBS_O_WORKDIR", workdir), PBS_O_HOST=v.get("PBS_O_HOST", socket.gethostname()),
                   PBS_ENVIRONMENT="PBS_BATCH", PBS_NODENUM="0", PBS_TASKNUM="1", TMPDIR=str(tmpdir),
                   PBS_NP=str(r.processors), PBS_NUM_NODES=str(len(job.nodes)),
                   PBS_NUM_PPN=str(r.ppn if not r.cores else max(len(c) for c in job.cores)),
                   PBS_WALLTIME=str(int(job.walltime)))
        if job.array_id:
            env.update(PBS_ARRAYID=str(job.array_index), PBS_ARRAY_INDEX=str(job.array_index),
                       PBS_ARRAY_ID=f"{job.array_id}[].{self.site.server}")
        if "cobalt" in x:
            env.update(cobalt.environment(job, self.batch.sched.topology, str(nodefile.parent / rundir.COBALT_NODES)))
        return env

    # --- the loop --------------------------------------------------------------------------
    def claim(self) -> int:
        """Hold the server lock for this process's life: one server per site, or two
        could launch the same job.  Raises StoreError if another server holds it."""
        import fcntl
        self.home.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.home / "server.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StoreError(f"{self.home}: another hpcsched server is running for this site") from None
        # each step marks the lock: its last mark is when the server before this one stopped
        self.last_alive = os.fstat(fd).st_mtime
        return fd

    def shutdown(self) -> None:
        """The server stops (its loop ends): its prologues killed (a restarted server runs
        them again), every empty cgroup but running jobs' removed, its waiters on other
        hosts stopped (the jobs go on), the store and the lock let go."""
        log("stopping: running jobs go on, found again at the next start")
        for proc, _ in self.prologues.values():
            self._kill_script(proc)
        try:
            live = {(j.id, j.run_count) for j in self.batch.sched.jobs.values() if j.state in ACTIVE}
        except Exception:  # (a store that never loaded: keep every cgroup)
            live = None
        if live is not None:
            self.tracker.close(live)
        if self.nodes is not None:
            self.nodes.close()
        self.batch.release()
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None

    def next_step(self, now: float) -> float:
        """When the next step is due: the interval from now, or sooner a running job's
        walltime or the end of a SIGTERM's grace (so enforcement keeps to the second)."""
        due = now + self.interval
        for job in self.batch.sched.jobs.values():
            if job.state in ACTIVE and job.start_time is not None and "epilogue_at" not in job.extra:
                sent, at = job.extra.get("signal"), job.extra.get("signalled_at", now)
                if not sent and job.id in self.sent:
                    sent, at = self.sent[job.id]
                if not sent and job.suspended_at is None:  # (a suspended job's walltime stands still)
                    due = min(due, job.planned_end(now))
                    if job.cput > 0 or self._limits(job).keys() & {"mem", "vmem"}:
                        due = min(due, now + POLL)
                elif sent == signal.SIGTERM:
                    due = min(due, at + self.grace)
                # (after SIGKILL its end pokes the server: SIGCHLD)
            elif job.state in ACTIVE and self._orphan(job):  # (its end pokes no one)
                due = min(due, now + POLL)
        for _, began in [*self.prologues.values(), *self.epilogues.values()]:
            due = min(due, began + self.script_timeout)  # (their ends poke it too)
        if self.nodes is not None:  # (the next look at the hosts of jobs, and of nodes it marked down)
            hosts = {j.extra["remote"] for j in self.batch.sched.jobs.values()
                     if j.state in ACTIVE and j.extra.get("remote")}
            hosts |= {n for n, note in self.batch.sched.node_notes.items() if note.startswith(remote.DOWN_NOTE)}
            due = min(due, self.nodes.next_due(hosts) or due)
        return max(due, now + 0.05)  # (never a busy loop)

class Phase(str, Enum):
    """Where a run of a job is as the server drives it, read from what its records noted
    (phase()).  Its transitions, each with the event that causes it:

        STARTING -> RUNNING           its launch (a `process` record: launched, its pid)
        STARTING -> (ended)           deleted before its launch; its prologue aborted it
                                      (or failed: requeued held); its launch failed
        RUNNING -> KILLING            past its walltime, cput or memory; qdel; qrerun (the
                                      first signal noted: signal, signalled_at)
        RUNNING, KILLING -> EPILOGUE  its process ended on a site with an epilogue (an
                                      `exiting` record: epilogue_at)
        RUNNING, KILLING -> (ended)   its process ended (an `ended` record), or was lost,
                                      rerun or its node went down (a `requeue` record)
        EPILOGUE -> (ended)           its epilogue ended or timed out
        launched -> PURGED -> (ended) qdel -p or -W force (purge): ended at once

    A requeued run's records are cleared with it: its next run starts again at STARTING.
    """
    STARTING = "starting"
    RUNNING = "running"
    KILLING = "killing"
    EPILOGUE = "epilogue"
    PURGED = "purged"


def phase(job: Job) -> Phase:
    """The run's phase (Phase), from its job's records."""
    x = job.extra
    if "launched" not in x:
        return Phase.STARTING
    if x.get("purge"):
        return Phase.PURGED
    if "epilogue_at" in x:
        return Phase.EPILOGUE
    return Phase.KILLING if x.get("signal") else Phase.RUNNING


def _down_note(now: float, why: str) -> str:
    """A node's note when the server marks it down for not answering (pbsnodes -l shows it)."""
    return f"{remote.DOWN_NOTE} since {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(now))}: {why}"


def _killed(job: Job) -> bool:
    """Was the job killed past a limit (its walltime, CPU time, memory)?  A deleted job is
    EXITING when signalled; one whose epilogue has run was marked as its process ended."""
    return job.extra.get("killed", job.state == RUNNING and "signal" in job.extra)


def _remove(path: str | Path) -> None:
    """Remove a directory tree a job's owner may have filled (never following a link in it:
    shutil.rmtree's descriptor-based walk); a failure is logged, never the server's."""
    try:
        shutil.rmtree(path)
    except FileNotFoundError:
        pass
    except OSError as e:
        log(f"could not remove {path}: {e}")


def _wait_start(pid: int) -> str | None:
    """The new process's start time (it exists as soon as Popen returns)."""
    return process_start(pid)
