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

The server's parts, each in its module with its invariant: `launching` (launch.py: a run
started), `runs` (runs.py: each run taken on from its phase, shared.Phase), `enforcer`
(enforce.py: limits, signals, what runs use), `hooks` (hooks.py: the site's prologue and
epilogue); the Server keeps the step, the store, the hosts of the `ssh` launcher and the
records of a run's end (`finish`) and changes (`note`).

Every process of a job is tracked (tracking.py: a cgroup, else the job's mark in the
environment) and killed at walltime, `qdel` and the job's end.  On a multi-user site
(privilege.py) the server learns its callers from the kernel, runs jobs as their owners
and keeps the store to itself; a user's bad path, pre-made directory or permission error
is that job's failure, never the server's.
"""
from __future__ import annotations

import contextlib
import os
import signal
import tempfile
import time
import traceback
from pathlib import Path

from ..core.jobs import ACTIVE, EXITING, FINISHED, RUNNING, Job
from ..core.topology import NodeState
from ..drain.moablog import DailyWriter
from ..drain.samples import Sampler
from ..pbs import accounting, common, mail
from ..store.journal import StoreError
from ..store.journaled import Batch
from ..core.errors import SchedulerError
from ..store.site import Site, config_stamp, load_site
from . import door, node, remote, scripts, tracking
from .enforce import Enforcer
from .hooks import Hooks
from .launch import Launching
from .runs import Runs
from .shared import FAULT_RETRY, LOST, POLL, down_note, killed, log, remove
from .tracking import process_start


class Server:
    def __init__(self, site: Site, interval: float | None = None, grace: float | None = None):
        self.home = Path(site.home)
        self.batch = Batch(site)
        self._given = (interval, grace)
        self._stamp = config_stamp(self.home)
        # its parts, each in its module: the site's scripts around runs, launching a run,
        # taking a run on from its phase, keeping runs to their limits
        self.hooks, self.launching = Hooks(self), Launching(self)
        self.runs, self.enforcer = Runs(self), Enforcer(self)
        self.door = None  # the command socket's door (serve.py's loop makes it)
        self.tracker = tracking.Tracker(self.home)
        self.nodes: remote.Nodes | None = None  # the `ssh` launcher's hosts (remote.py)
        self._configure(site)
        self.swept = False  # run directories of jobs gone removed (once a start: _step)
        self.children: dict[int, int] = {}  # pid -> wait status, reaped
        self.cpu: dict[int, float] = {}  # pid -> CPU seconds it and what it waited for used (its job's cpu_time)
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
    def read_int(path: Path) -> int | None:
        """A number the job's wrapper wrote (see _read)."""
        data = Server.read(path, 64)
        try:
            return int(data.strip()) if data is not None else None
        except ValueError:
            return None

    read = staticmethod(node.read_file)  # (what the job's wrapper wrote, in the owner's directory)

    # --- one step --------------------------------------------------------------------------
    def step(self, now: float | None = None) -> int:
        """Reap, enforce, plan, launch; returns how many jobs were launched."""
        launched = 0
        self._handling = None
        try:
            self._reap_children()
            self._reload()
            self.enforcer.look(now)
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
                self.held_back(job, now, f"the server could not launch it ({self.faults.pop(job.id)[1]})")
            elif not self._aside(job.id, now):
                self.runs.watch(job, now)
        self._handling = None
        # finished jobs leave the server after the flavor's retention, so the store
        # holds what is live plus a bounded history
        old = [j.id for j in sched.jobs.values()
               if j.state in FINISHED and j.end_time is not None and now - j.end_time > self.retention]
        if old:
            self.batch.do("forget", now, ids=old)
            for jid in old:  # (its run directories go with it)
                remove(self.home / "jobs" / str(jid))
        if not self.swept:  # (once a start: what a server before this one left)
            self.swept = True
            with contextlib.suppress(OSError):
                for entry in os.scandir(self.home / "jobs"):
                    if entry.name.isdigit() and int(entry.name) not in sched.jobs:
                        remove(entry.path)
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
            launched += self.launching.launch(job, now)
        self._handling = None
        self.enforcer.launches += launched
        return launched

    def _enforce_only(self, now: float) -> None:
        """Walltimes and deletions enforced from memory alone, while nothing can be written."""
        for job in self.batch.sched.jobs.values():
            if job.state in ACTIVE and "launched" in job.extra:
                pid = self.runs.pid(job)
                if job.extra.get("remote") and (self.seen(job) or {}).get("state") == "running" \
                        or pid and process_start(pid) is not None:
                    self.enforcer.escalate(job, pid, now, journal=False)

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

    # --- jobs on other hosts (the `ssh` launcher: remote.py) --------------------------------
    def key(self, job: Job) -> str:
        return self.nodes.key(job.id, job.run_count)

    def seen(self, job: Job) -> dict | None:
        """A job on another host: its node's last word on this run ({} until the node has
        answered for it); None for a job on this host."""
        host = job.extra.get("remote")
        if not host or self.nodes is None:
            return None
        return self.nodes.seen.get(host, {}).get(self.key(job), {})

    def _look_nodes(self, now: float) -> None:
        """Ask the hosts of running jobs, and the nodes the server marked down, how things
        are; a host back brings its node up (what ran there of jobs gone is cleaned up
        first); a host silent for node_check_rate is down, and its jobs requeued or ended."""
        sched = self.batch.sched
        runs: dict[str, list[str]] = {}
        live: dict[str, list[str]] = {}  # (and those a launch may have started unsaid: kept too)
        for job in sched.jobs.values():
            if job.state in ACTIVE and job.nodes:
                live.setdefault(job.extra.get("remote") or job.nodes[0], []).append(self.key(job))
                if job.extra.get("remote") and "epilogue_at" not in job.extra:
                    runs.setdefault(job.extra["remote"], []).append(self.key(job))
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
            self.batch.do("node", now, name=host, state="down", note=down_note(now, why))
        if not self.nodes.fenced(host, now):
            return  # (its runs' keepers there kill them once their leases run out: not yet)
        for job in [j for j in sched.jobs.values() if j.state in ACTIVE and j.extra.get("remote") == host]:
            self._handling = job.id
            self.nodes.stop_waiting(self.key(job))
            if "epilogue_at" in job.extra:
                continue  # (its end is known: its epilogue runs here)
            if job.extra.get("rerunnable", True) and job.state == RUNNING:
                self.runs.requeue(job, now, f"its node {host} is down")
            elif job.state == EXITING:  # (deleted: it ended as killed)
                self.finish(job, 256 + (job.extra.get("signal") or signal.SIGKILL), now)
            else:
                self.finish(job, LOST, now, why=f"its node {host} went down")
        self._handling = None

    def finish(self, job: Job, status: int, now: float, why: str = "", cpu_time: float | None = None,
                recorded: bool = True) -> None:
        """The job ended with `status`: record it (E, or A when the server lost or could
        not start it; not `recorded`: one never launched has no S, so its D ends its
        accounting as a queued job's does), mail its owner, and delete what depended on it
        failing."""
        walltime = killed(job)  # (the abort PBS mails about)
        self.clean(job)
        self.hooks.forget_prologue(job)
        peaks = self.enforcer.last_peaks(job)
        noted = {"set": peaks} if peaks else {}
        aborted = status == LOST
        log(f"job {common.short_id(job)}: ended, exit status {status}" + (f" ({why})" if why else ""))
        self.batch.do("ended", now, id=job.id, exit_status=status,
                      records=(lambda job: accounting.lines("A" if aborted else "E", [job], self.site.server, now))
                      if recorded else None,
                      **({"cpu_time": cpu_time} if cpu_time is not None else {}), **noted)
        if job.extra.get("remote"):  # (its end on record: its hosts forget the run)
            self.nodes.forget(job.nodes, self.key(job))
        if aborted or walltime:
            limit = job.extra.get("over", "walltime")
            why = why or (f"Job exceeded its {limit} limit. Job was aborted" if walltime
                          else "Job lost: its process vanished without an exit status")
            mail.send(self.site, job, mail.ABORT, f"Aborted by PBS Server\n{why}")
        else:
            mail.send(self.site, job, mail.END, "Execution terminated")
        accounting.core_deletions(self.batch, now)

    def held_back(self, job: Job, now: float, why: str) -> int:
        """The job could not start for a reason that may pass: back in the queue with a
        system hold, so that it does not fail again at every pass."""
        self.hooks.forget_prologue(job)
        self.batch.do("requeue", now, id=job.id)
        self.batch.do("hold", now, id=job.id, kind="s")
        self.note(job, now, comment=f"{why}: requeued and held (qrls -h s releases it)")
        return 0

    def in_cgroup(self, job: Job) -> bool:
        """Is every process of the job in its run's cgroup (no need to look for its mark)?"""
        return bool(job.extra.get("cgroup")) or os.path.lexists(self.jobdir(job) / "cgroup")

    def clean(self, job: Job) -> None:
        """Kill what is left of an ended job's processes, and say so, and remove its
        $TMPDIR (pbs_mom's cleanup)."""
        if job.extra.get("tmpdir"):
            remove(job.extra["tmpdir"])
        if "launched" not in job.extra or job.extra.get("interactive"):
            return
        if job.extra.get("remote"):
            left = self.nodes.cleanup(job.nodes, self.key(job))
        else:
            left = self.tracker.clean(job.id, job.run_count, scan=not self.in_cgroup(job))
        if left:
            log(f"job {common.short_id(job)}: killed {len(left)} leftover process"
                f"{'es' if len(left) > 1 else ''} after its end: {', '.join(left)}")

    def note(self, job: Job, now: float, records=None, **change) -> None:
        """Journal what changed about a job's process (a `process` record, not an alter)."""
        self.batch.do("process", now, records, id=job.id, **change)

    def started_record(self, job: Job) -> list[str]:
        """A launch's S record (with the launch's `process` record: accounts.py)."""
        return accounting.lines("S", [job], self.site.server, job.extra["launched"])

    # --- launching -------------------------------------------------------------------------
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
        for proc, _ in self.hooks.prologues.values():
            self.hooks.kill_script(proc)
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
                    if job.cput > 0 or self.enforcer.kept_to(job).keys() & {"mem", "vmem"}:
                        due = min(due, now + POLL)
                elif sent == signal.SIGTERM:
                    due = min(due, at + self.grace)
                # (after SIGKILL its end pokes the server: SIGCHLD)
            elif job.state in ACTIVE and self.hooks.orphan(job):  # (its end pokes no one)
                due = min(due, now + POLL)
        for _, began in [*self.hooks.prologues.values(), *self.hooks.epilogues.values()]:
            due = min(due, began + self.script_timeout)  # (their ends poke it too)
        if self.nodes is not None:  # (the next look at the hosts of jobs, and of nodes it marked down)
            hosts = {j.extra["remote"] for j in self.batch.sched.jobs.values()
                     if j.state in ACTIVE and j.extra.get("remote")}
            hosts |= {n for n, note in self.batch.sched.node_notes.items() if note.startswith(remote.DOWN_NOTE)}
            due = min(due, self.nodes.next_due(hosts) or due)
        return max(due, now + 0.05)  # (never a busy loop)
