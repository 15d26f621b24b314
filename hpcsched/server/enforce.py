"""Keeping runs to their limits: what each uses (a look at /proc every POLL at most, or its
node's word), its walltime, CPU time and memory (limits.py), SIGTERM then SIGKILL after the
grace; its peak memory noted as pbs_mom reports it; qsig's signals and pbs_mom's words
(a line in the job's error file).

Invariants: `peaks` holds each running job's peak (mem, vmem) seen so far; `_uses` is the
last look's sum per (job, pid), taken at `_looked`, with `launches` jobs launched since.
"""
from __future__ import annotations

import contextlib
import os
import signal
import time

from ..core.jobs import EXITING, RUNNING, Job
from ..pbs import common
from . import limits, privilege, rundir
from .shared import PEAK_EVERY, POLL, log


class Enforcer:
    """What `server`'s runs use, and the limits they are kept to."""

    def __init__(self, server):
        self.server = server
        self.peaks: dict[int, tuple[int, int]] = {}  # job id -> its peak (mem, vmem) so far, in bytes
        self._usage: limits.Usage | None = None  # the last look at /proc, and when (one a POLL at most)
        self._looked = 0.0
        self.launches = 0  # jobs launched since that look
        self._uses: dict[tuple[int, int], limits.Use] = {}  # (job id, pid) -> its sum in that look

    def escalate(self, job: Job, pid: int, now: float, journal: bool = True) -> None:
        """A job past a limit (its walltime, which stands still while it is suspended, its
        CPU time or its memory: _past), deleted or to be rerun, gets SIGTERM, then SIGKILL
        after the grace."""
        srv = self.server
        past = self._past(job, pid, now, journal)
        if job.state == EXITING or job.extra.get("rerun") or past:
            sent, at = job.extra.get("signal"), job.extra.get("signalled_at", now)
            if not sent and job.id in srv.sent:  # sent while the store could not say so
                sent, at = srv.sent[job.id]
            if not sent:
                if past and past[1]:
                    self.tell(job, f"=>> PBS: job killed: {past[1]}")
                self.send(job, pid, signal.SIGTERM, now, journal)
            elif sent == signal.SIGTERM and now >= at + srv.grace:
                self.send(job, pid, signal.SIGKILL, now, journal)

    def _past(self, job: Job, pid: int, now: float, journal: bool) -> tuple[str, str] | None:
        """The limit a running job is past, with pbs_mom's words for it ('' once said), or
        None; what it uses is noted on the way (_peaks).  A job past its CPU time or memory
        is marked (`over`): its end is that limit's abort."""
        srv = self.server
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
        found = limits.over(job, self.kept_to(job), use)
        if found and journal:
            srv.note(job, now, set={"over": found[0]})
        return found

    def look(self, now: float | None) -> None:
        """Look at /proc for what running jobs use, before a step takes the store's lock: a
        POLL after the last look, or after a launch (so a short job is seen at least once).
        A look costs about a millisecond a hundred processes, and steps come faster."""
        srv = self.server
        now = time.time() if now is None else now
        if (self.launches or abs(now - self._looked) >= POLL) and \
                srv.batch.sched is not None and \
                any(j.state == RUNNING and "launched" in j.extra for j in srv.batch.sched.jobs.values()):
            self._usage, self._looked, self._uses, self.launches = limits.Usage(), now, {}, 0

    def _use(self, job: Job, pid: int, now: float) -> limits.Use:
        """What the job's processes use, as the last look saw them."""
        srv = self.server
        seen = srv.seen(job)
        if seen is not None:  # (on another host: as its node last said)
            return limits.Use(*seen.get("use", (0.0, 0, 0)))
        if self._usage is None:
            self._usage, self._looked, self._uses = limits.Usage(), now, {}
        if (job.id, pid) not in self._uses:
            members = srv.tracker.pids(job.id, job.run_count, scan=False) if srv.in_cgroup(job) else ()
            self._uses[job.id, pid] = self._usage.of(pid, members)
        return self._uses[job.id, pid]

    def kept_to(self, job: Job) -> dict[str, int]:
        """The job's limits the server keeps it to (none on a `command` launcher's host:
        its processes are elsewhere; on the `ssh` launcher's, its node says what they use)."""
        srv = self.server
        return {} if srv.launcher else limits.asked(job)

    def _peaks(self, job: Job, use: limits.Use, now: float) -> None:
        """Keep the job's peak memory (resources_used.mem and .vmem): noted with its end, and
        while it runs when one has grown by an eighth, at most every PEAK_EVERY seconds (as
        pbs_mom reports to pbs_server: one journal write a job, not one a step)."""
        srv = self.server
        x = job.extra
        old = self.peaks.get(job.id) or (x.get("used_mem", 0), x.get("used_vmem", 0))
        peak = self.peaks[job.id] = (max(old[0], use.mem), max(old[1], use.vmem))
        noted = (x.get("used_mem", 0), x.get("used_vmem", 0))
        if any(p > n + n // 8 for p, n in zip(peak, noted)) and \
                now >= x.get("used_at", x.get("launched", now)) + PEAK_EVERY:
            srv.note(job, now, set={"used_mem": peak[0], "used_vmem": peak[1], "used_at": now})

    def last_peaks(self, job: Job) -> dict:
        """The peaks the server saw of a job whose process has ended, to note with its end
        (and forget here)."""
        peak = self.peaks.pop(job.id, None)
        return {"used_mem": peak[0], "used_vmem": peak[1]} if peak else {}

    def send(self, job: Job, pid: int, sig: int, now: float, journal: bool = True) -> None:
        """`sig` to the job's process group and to every process of the job that left it (a
        suspended job is continued too, so that it can act on the signal)."""
        srv = self.server
        # (a deleted job is EXITING, not S: its mark says it is stopped)
        sigs = (sig, signal.SIGCONT) if job.suspended_at is not None and sig != signal.SIGKILL else (sig,)
        if job.extra.get("remote"):
            srv.nodes.signal(job.extra["remote"], srv.key(job), [int(s) for s in sigs])
            sigs = ()
        for s in sigs:
            try:
                os.killpg(pid, s)
            except ProcessLookupError:
                pass
            except PermissionError:  # a pid that is no longer the job's wrapper
                pass
            srv.tracker.signal(job.id, job.run_count, s, scan=not srv.in_cgroup(job), besides=pid)
        srv.sent[job.id] = (int(sig), now)
        if journal:
            srv.note(job, now, set={"signal": int(sig), "signalled_at": now})

    def tell(self, job: Job, line: str, streams: str = "E") -> None:
        """Write a line at the end of the job's error file (E: its output file when they are
        joined) or output file (O), with the owner's rights: pbs_mom's word on a job it
        kills, a qmsg."""
        srv = self.server
        if job.extra.get("interactive") or "launched" not in job.extra:
            return
        try:
            owner = privilege.Owner.of(job.owner, job.group) if srv.as_owners else None
            out, err, into = rundir.streams(job, owner, srv.site.flavor)
            paths = {into if s == "E" else err if job.extra.get("join") == "eo" else out for s in streams}
            with privilege.acting_as(owner) if owner else contextlib.nullcontext():
                for path in sorted(paths):  # (joined: one file, the line once)
                    with open(path, "ab") as f:  # (a qmsg's bytes as its caller gave them)
                        f.write(os.fsencode(line + "\n"))
        except (KeyError, OSError):
            pass  # (an owner gone, a file the owner removed: the server goes on)

    def deliver(self, job: Job, pid: int | None, now: float, seen: dict | None) -> None:
        """qsig's signals to a running job, then forgotten (one the kernel refuses is dropped)."""
        srv = self.server
        pending = job.extra.get("pending_signals")
        if not pending:
            return
        if seen is not None:
            srv.nodes.signal(job.extra["remote"], srv.key(job), [s for s in pending if isinstance(s, int)])
        else:
            for sig in pending:
                try:
                    os.killpg(pid, sig)
                except ProcessLookupError:
                    pass
                except (OSError, ValueError, TypeError, OverflowError) as e:
                    log(f"job {common.short_id(job)}: signal {sig!r} not sent: {e}")
        srv.note(job, now, clear=["pending_signals"])
