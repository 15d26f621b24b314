"""The site's scripts around each run (Torque's prologue and epilogue; scripts.py runs
them): a prologue before a run starts, an epilogue after its process ends, while the job
holds its nodes; the server goes on meanwhile, and their ends poke it (SIGCHLD).

Invariants: `prologues` holds the prologues under way by run (job id, run count) and
`prologued` the runs whose prologue passed, each until its launch takes it; `epilogues`
holds this server's epilogues under way by job id (one a server before it started is
found from the job's records: `orphan`).
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess

from ..core.jobs import Job
from ..pbs import common, siteprog
from . import privilege, scripts
from .shared import killed, log, wait_start
from .tracking import process_start


class Hooks:
    """The prologue and epilogue of `server`'s runs."""

    def __init__(self, server):
        self.server = server
        self.prologues: dict[tuple[int, int], tuple[subprocess.Popen, float]] = {}  # run -> (its prologue, began)
        self.prologued: set[tuple[int, int]] = set()
        self.epilogues: dict[int, tuple[subprocess.Popen, float]] = {}  # job id -> (its epilogue, began)

    def prologue(self, job: Job, owner: privilege.Owner | None, now: float) -> int:
        """The site's prologue for this run of the job: started (its output in the job's
        files), or, once it has ended, the job launched, aborted (status 1) or requeued
        held (any other end, a timeout); the server goes on meanwhile.  Returns how many
        jobs were launched."""
        srv = self.server
        run = (job.id, job.run_count)
        if run not in self.prologues:
            args = scripts.prologue_args(job, srv.site.server)
            proc, did = self.script(srv.prologue, args, job, owner)
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
        return srv.launching.launch(job, now)

    def forget_prologue(self, job: Job) -> None:
        """The run ends (or goes back to the queue): its prologue, if still running, is killed."""
        run = (job.id, job.run_count)
        self.prologued.discard(run)
        if run in self.prologues:
            self.kill_script(self.prologues.pop(run)[0])

    def _prologue_failed(self, job: Job, status: int | None, did: str, now: float) -> int:
        """A prologue that exited 1 aborts the job; any other failure puts it back in the
        queue with a system hold, so that a broken script does not start it at every pass."""
        srv = self.server
        if status == scripts.ABORT:
            return srv.launching.not_started(job, now, f"its prologue {did}: job aborted")
        return srv.held_back(job, now, f"its prologue {did}")

    def epilogue(self, job: Job, status: int, cpu_time: float | None, now: float) -> None:
        """The job's process ended with `status`: it is E, its nodes held, while the site's
        epilogue runs (as Torque's is), its output after the job's own; the server goes on
        meanwhile, and records the job's end once the epilogue is done (_after_epilogue)."""
        srv = self.server
        srv.clean(job)  # (what the job left is killed before its epilogue, as pbs_mom does)
        noted = {"epilogue_at": now, **srv.enforcer.last_peaks(job),
                 **({"killed": True} if killed(job) else {})}
        srv.batch.do("exiting", now, id=job.id, exit_status=status, set=noted,
                      **({"cpu_time": cpu_time} if cpu_time is not None else {}))
        self.start_epilogue(job, now)

    def start_epilogue(self, job: Job, now: float) -> None:
        """Start the epilogue of a job its `exiting` record made E (a restarted server: one
        its predecessor died before it could say it had started, so at least once)."""
        srv = self.server
        owner = None
        with contextlib.suppress(KeyError):
            owner = privilege.Owner.of(job.owner, job.group) if srv.as_owners else None
        args = scripts.epilogue_args(job, srv.site.server, job.extra.get("session", job.extra.get("pid", 0)),
                                     job.extra["epilogue_at"])
        proc, did = self.script(srv.epilogue, args, job, owner) if srv.epilogue else (None, "is no longer set")
        if proc is None:
            log(f"job {common.short_id(job)}: epilogue {did}")
            srv.finish(job, job.exit_status, now)
        else:
            self.epilogues[job.id] = (proc, now)
            # (its pid and start time: a restarted server waits for it too)
            srv.note(job, now, set={"epilogue_pid": proc.pid, "epilogue_start": wait_start(proc.pid)})

    def after_epilogue(self, job: Job, now: float) -> None:
        """Once the job's epilogue has ended (or timed out), the job's end is recorded and
        its nodes freed; a bad end is reported.  One a server before a restart started is
        waited for as well (its status unseen: not this server's child)."""
        srv = self.server
        if job.id in self.epilogues:
            end = self._script_end(*self.epilogues[job.id], now)
            if end is None:
                return  # (its end pokes the server: SIGCHLD)
            status, did = end
        elif self.orphan(job):
            if now < job.extra["epilogue_at"] + srv.script_timeout:
                return  # (the server looks again every POLL: next_step)
            self.kill_epilogue(job)
            status, did = None, f"timed out after {srv.script_timeout:g} s"
        elif "epilogue_pid" not in job.extra:  # (its server died before it said the epilogue ran)
            return self.start_epilogue(job, now)
        else:
            status, did = None, "ended while the server was restarting"
        self.epilogues.pop(job.id, None)
        if status != 0:
            log(f"job {common.short_id(job)}: epilogue {did}")
        srv.finish(job, job.exit_status, now)

    def kill_epilogue(self, job: Job) -> None:
        """Kill the job's epilogue, if one runs (this server's, or a server's before it)."""
        if job.id in self.epilogues:
            self.kill_script(self.epilogues.pop(job.id)[0])
        elif self.orphan(job):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(job.extra["epilogue_pid"], signal.SIGKILL)

    def orphan(self, job: Job) -> bool:
        """Is the job's epilogue one a server before this one started, still running?"""
        pid, start = job.extra.get("epilogue_pid"), job.extra.get("epilogue_start")
        return job.id not in self.epilogues and None not in (pid, start) and process_start(pid) == start

    def _script_end(self, proc: subprocess.Popen, began: float, now: float) -> tuple[int | None, str] | None:
        """A site script's end: (its status, what it did), a timeout killing it (None, ...),
        or None while it runs within its time."""
        srv = self.server
        status = self._ended(proc)
        if status is not None:
            return status, f"exited {status}" if status >= 0 else f"was killed by signal {-status}"
        if now >= began + srv.script_timeout:
            self.kill_script(proc)
            return None, f"timed out after {srv.script_timeout:g} s"
        return None

    def _ended(self, proc: subprocess.Popen) -> int | None:
        """A site script's exit status (negative: the signal that killed it), or None while
        it runs: as the step's reaping found it (its status then taken, so that a job's
        wrapper that gets the pid next is not given it), else from the process itself."""
        srv = self.server
        if proc.pid in srv.children:
            proc.returncode = os.waitstatus_to_exitcode(srv.children.pop(proc.pid))
            srv.cpu.pop(proc.pid, None)
        return proc.poll()

    def kill_script(self, proc: subprocess.Popen) -> None:
        """SIGKILL to a site script's session, and its leader reaped now."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        if self._ended(proc) is None:
            proc.wait()

    def script(self, command: list[str], args: list[str], job: Job,
                owner: privilege.Owner | None) -> tuple[subprocess.Popen | None, str]:
        """Start a site script for `job`, its output at the end of the job's files (opened
        with the owner's rights; an interactive job has none: its output is dropped):
        (the process, or None, and what went wrong)."""
        srv = self.server
        try:
            with contextlib.ExitStack() as files:
                stdout, stderr = (subprocess.DEVNULL,) * 2 if job.extra.get("interactive") else \
                    srv.launching.open_files(job, owner, files)
                # (a session of its own: a timeout kills all it started)
                return subprocess.Popen([*command, *args], stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
                                        env=self._script_env(job), start_new_session=True), ""
        except (OSError, ValueError, subprocess.SubprocessError) as e:
            return None, f"could not run ({getattr(e, 'strerror', None) or e})"

    def _script_env(self, job: Job) -> dict[str, str]:
        """The environment of the site's prologue and epilogue."""
        srv = self.server
        return siteprog.environment(srv.site, PBS_JOBID=common.display_id(job, srv.site.server),
                                    PBS_NODEFILE=str(srv.jobdir(job) / "nodes"))
