"""Taking each run on from its phase (shared.Phase): its process found (here by its pid
and start time, on another host as its node last said), qsig's signals delivered, its
limits enforced (enforce.py), its end recorded once its process is gone (after the site's
epilogue), or the job requeued where its end is unknown and it may run again.
"""
from __future__ import annotations

import contextlib
import os
import pwd
import signal

from ..core.jobs import EXITING, RUNNING, Job
from ..pbs import accounting, common, mail
from ..store.layout import TAKEN
from .shared import INTERACTIVE_WAIT, LOST, STARTING, Phase, log, phase, remove
from .tracking import process_start


class Runs:
    """The running jobs of `server`, each taken on from its phase."""

    def __init__(self, server):
        self.server = server

    def watch(self, job: Job, now: float) -> None:
        """Take a run of the job on from its phase (Phase): end it once its process is gone,
        signal it past a limit or deleted."""
        srv = self.server
        at = phase(job)
        if at is Phase.STARTING:
            if job.state == EXITING:  # deleted between its pass and its launch (in its prologue, say)
                srv.finish(job, 256 + signal.SIGTERM, now, recorded=False)
        elif at is Phase.PURGED:  # qdel -p or -W force: it ends now, whatever it runs
            srv.hooks.kill_epilogue(job)
            srv.finish(job, job.exit_status if "epilogue_at" in job.extra else 256 + signal.SIGKILL, now)
        elif at is Phase.EPILOGUE:  # its process has ended: its epilogue holds its nodes
            srv.hooks.after_epilogue(job, now)
        else:
            if job.extra.get("messages"):  # qmsg: its lines in the job's files
                for streams, text in job.extra["messages"]:
                    srv.enforcer.tell(job, text, streams)
                srv.note(job, now, clear=["messages"])
            seen = srv.seen(job)  # (a job on another host: its node's last word on it)
            found = self._process(job, now, seen)
            if found is None:
                return  # (not known yet: its host not heard from, its qsub -I not come)
            pid, alive = found
            if alive:
                srv.enforcer.deliver(job, pid, now, seen)
                srv.enforcer.escalate(job, pid, now)
            elif job.extra.get("rerun") and job.state == RUNNING:
                self.requeue(job, now)  # (qrerun: back to the queue however it ended)
            else:
                self._process_ended(job, pid, now, seen)

    def _process(self, job: Job, now: float, seen: dict | None) -> tuple[int | None, bool] | None:
        """(the pid of the run's wrapper, is it running?), here or as its node last said; None
        while that is not known yet."""
        srv = self.server
        if seen is not None:
            if seen.get("state") is None:
                return None  # (not heard from its host yet, since the server started or since it failed)
            pid = job.extra.get("pid")
            if seen["state"] == "none" and pid is None and not srv.nodes.fenced(job.extra["remote"], now):
                return None  # (a start not confirmed that its node does not know of, yet: a late one is fenced)
            if pid is None and seen.get("pid"):  # (a start its launch could not confirm)
                pid = seen["pid"]
                srv.note(job, now, set={"pid": pid, "pid_start": seen["start"], "session": pid})
            return pid, seen["state"] == "running"
        pid, alive = self._alive(job, now)
        if pid is None and job.extra.get("interactive") and job.state == RUNNING \
                and now < job.extra["launched"] + INTERACTIVE_WAIT:
            return None  # its qsub -I has not started the session yet
        if pid is None and self._starting(job, now):
            return None  # its wrapper took the run and has not written its pid yet
        return pid, alive

    def _starting(self, job: Job, now: float) -> bool:
        """Is the run's wrapper between taking the run (`started`) and writing its pid, as
        far as a server can tell (no status either, taken less than STARTING ago)?  A server
        that finds a launch it never noted must wait for it, not call it lost and run the
        job again."""
        try:
            taken = os.stat(self.server.jobdir(job) / "started").st_mtime
        except OSError:
            return False
        return now < taken + STARTING and self._status(job) is None

    def _process_ended(self, job: Job, pid: int | None, now: float, seen: dict | None) -> None:
        """The run's process is gone: its end recorded (after the site's epilogue, if any),
        or, where it never said how it ended, the job requeued (rerunnable) or aborted."""
        srv = self.server
        # (the wrapper's word, in a directory the job can write too: believed only of a
        # job that asked for files staged in)
        failed = None
        if job.extra.get("W", {}).get("stagein"):
            failed = seen.get("stagein_failed") if seen is not None else \
                (srv.read(srv.jobdir(job) / "stagein_failed", 2000) or b"").decode("utf-8", "replace") or None
        if failed is not None and job.state == RUNNING:
            self._stagein_failed(job, failed, now)
            srv.children.pop(pid, None), srv.cpu.pop(pid, None)
            return
        status = self._status(job) if seen is None else seen.get("status")
        ran_until = self._ran_until(job, now, seen) if status is not None else None
        sent = job.extra.get("signal") or srv.sent.get(job.id, (None,))[0]
        if sent and (status is None or status >= 128):
            status = 256 + sent  # as PBS records a job it killed
        if status is None and pid is not None and pid in srv.children:
            ws = srv.children[pid]  # (forgotten only once the end is in the store)
            if os.WIFEXITED(ws) and os.WEXITSTATUS(ws) == TAKEN:
                # this launch's wrapper found the run taken by an earlier launch's (one
                # an earlier server made and never noted): that one is the run, found
                # from now on by the run directory's pid (or waited for: _starting)
                srv.children.pop(pid, None), srv.cpu.pop(pid, None)
                srv.note(job, now, clear=["pid", "pid_start", "session"])
                return
            status = 256 + os.WTERMSIG(ws) if os.WIFSIGNALED(ws) else os.WEXITSTATUS(ws)
        if status is None and pid is None and job.extra.get("interactive"):
            # its qsub -I never came for the session (it is gone): aborted, as PBS's mom
            # gives up on a qsub it cannot reach, not requeued to wait again
            srv.note(job, now, comment="its qsub -I never came for the session: aborted")
            status = LOST
        if status is None:
            if job.extra.get("rerunnable", True) and job.state == RUNNING:
                self.requeue(job, now)
                return
            status = LOST
        cpu = srv.cpu.get(pid) if seen is None else seen.get("cpu")  # (None: not this server's child)
        if ran_until is not None:
            srv.note(job, now, set={"ran_until": ran_until})
        if srv.epilogue:
            srv.hooks.epilogue(job, status, cpu, now)
        else:
            srv.finish(job, status, now, cpu_time=cpu)
        srv.children.pop(pid, None), srv.cpu.pop(pid, None)  # (forgotten once its end is in the store)

    def requeue(self, job: Job, now: float, why: str = "") -> None:
        """Back to the queue, to run again (its process lost, or qrerun): an R record."""
        srv = self.server
        log(f"job {common.short_id(job)}: requeued"
            + (f" ({why})" if why else " (qrerun)" if job.extra.get("rerun") else " (its process was lost)"))
        if job.extra.get("remote"):  # (what is left of this run on its hosts: killed, forgotten)
            srv.clean(job)
            srv.nodes.forget(job.nodes, srv.key(job))
        rerun = accounting.lines("R", [job], srv.site.server, now)  # (as it ran: its start, its hosts)
        srv.batch.do("requeue", now, id=job.id, records=lambda _: rerun)
        srv.enforcer.peaks.pop(job.id, None)
        srv.hooks.forget_prologue(job)
        if job.extra.get("tmpdir"):
            remove(job.extra["tmpdir"])
        srv.note(job, now, clear=["launched", "pid", "pid_start", "signal", "signalled_at", "over",
                                   "rerun", "used_mem", "used_vmem", "used_at", "tmpdir", "remote"])

    def _status(self, job: Job) -> int | None:
        """The exit status the job's wrapper wrote: in `status`, or in its place `status.tmp`
        where a full disk refused the rename (layout.WRAPPER)."""
        srv = self.server
        d = srv.jobdir(job)
        status = srv.read_int(d / "status")
        return status if status is not None else srv.read_int(d / "status.tmp")

    def _ran_until(self, job: Job, now: float, seen: dict | None = None) -> float | None:
        """When a job that ended while no server ran really ended: its status file's time
        (the wrapper writes it at the end; on another host, as its node says), but never
        before the last step of the server that last saw it (the owner may touch the file)
        nor after now; None for a job this server launched or one whose end it surely saw
        within a step."""
        srv = self.server
        if job.extra.get("launched", now) >= srv.boot or job.start_time is None:
            return None
        written = seen.get("ended_at") if seen is not None else None
        for name in ("status", "status.tmp") if seen is None else ():
            with contextlib.suppress(OSError):
                written = os.stat(srv.jobdir(job) / name).st_mtime
                break
        if written is None:
            return None
        floor = max(job.start_time, srv.last_alive or job.start_time)
        return min(now, max(floor, written)) if written < now - 1 else None

    def pid(self, job: Job) -> int | None:
        """The pid of the job's wrapper: from its pid file, or as noted at launch."""
        srv = self.server
        if srv.multi:  # a pid the owner wrote counts only for a process of the owner's
            pid = job.extra.get("pid") or srv.read_int(srv.jobdir(job) / "pid")
            if pid and "pid" not in job.extra and srv.as_owners:
                try:
                    if os.stat(f"/proc/{pid}").st_uid != pwd.getpwnam(job.owner).pw_uid:
                        return None  # someone else's: never signalled for this job
                except KeyError:
                    return None
                except OSError:
                    pass  # gone: the job's end
            return pid
        return srv.read_int(srv.jobdir(job) / "pid") or job.extra.get("pid")

    def _alive(self, job: Job, now: float) -> tuple[int | None, bool]:
        """(the pid of the job's wrapper on this host, is it running?).  The pid file names
        the wrapper; the start time recorded at launch (None: it had already ended) tells a
        reused pid from ours.  On a multi-user site the file is the owner's to write: the
        pid the server saw at launch comes first."""
        srv = self.server
        pid = self.pid(job)
        start = process_start(pid) if pid else None
        if pid == job.extra.get("pid") and "pid_start" in job.extra:
            return pid, start is not None and start == job.extra["pid_start"]
        if start is not None and srv.multi and "pid" not in job.extra:
            # a session's wrapper wrote its pid: kept from now on (the file is the
            # owner's to rewrite; a later pid in it is not believed)
            srv.note(job, now, set={"pid": pid, "pid_start": start})
        return pid, start is not None

    def _stagein_failed(self, job: Job, text: str, now: float) -> None:
        """Its files could not be staged in, so it never ran: back to the queue with a
        system hold (an R record), the copy's complaint in its comment and mail, as PBS
        holds a job whose stagein failed."""
        srv = self.server
        why = " ".join(text.split())[:300] or "no reason given"
        self.requeue(job, now)
        srv.batch.do("hold", now, id=job.id, kind="s")
        srv.note(job, now, comment=f"stagein failed ({why}): requeued and held (qrls -h s releases it)")
        mail.send(srv.site, job, mail.ABORT, f"Job held: its files could not be staged in\n{text[:2000]}")
