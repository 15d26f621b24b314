"""Launching a run: its owner, its prologue (hooks.py), the pre-job scan, its run directory
and environment, then its wrapper started on this host (in a session and cgroup of its
own, as its owner) or on its first node over ssh (remote.py, node.py).  A user's error
(an unknown owner, a path the owner may not write) is that job's failure, never the
server's: it ends aborted, with why.  A run is launched once: its wrapper's `started`
directory tells a launch whose note was never journaled.
"""
from __future__ import annotations

import contextlib
import errno
import os
import shlex
import socket
import subprocess
import tempfile
from pathlib import Path

from ..core.jobs import Job
from ..pbs import cobalt, common, mail, siteprog
from ..store.layout import WRAPPER
from . import limits, privilege, remote, rundir, tracking
from .shared import LOST, down_note, log, remove, wait_start


class Launching:
    """Starts `server`'s runs."""

    def __init__(self, server):
        self.server = server

    def launch(self, job: Job, now: float) -> int:
        """Start the job's wrapper (as its owner on a multi-user site run by root).  A user's
        error (an unknown owner, a path the owner may not write, a planted file) is this
        job's failure: it ends, aborted, with the reason in its comment and mail.  Where the
        site has a prologue, the job starts once it has passed (_prologue)."""
        srv = self.server
        if os.path.isdir(srv.jobdir(job) / "started"):
            # launched by a server whose note of it was never journaled (it stopped, or a
            # full disk refused the note): its wrapper ran, so it is not run again; the
            # watch finds its pid, or its status, in the run directory (waiting for a
            # wrapper still starting: Runs._starting)
            srv.note(job, now, set={"launched": now}, records=srv.started_record)
            return 0
        try:
            owner = privilege.Owner.of(job.owner, job.group) if srv.as_owners else None
        except KeyError:
            return self.not_started(job, now, f"no such user on this host: {job.owner}")
        if srv.prologue:  # (an interactive job's too: its session starts once it has passed)
            if (job.id, job.run_count) not in srv.hooks.prologued:
                return srv.hooks.prologue(job, owner, now)
            srv.hooks.prologued.discard((job.id, job.run_count))  # (passed: this launch takes it)
        if srv.check and not self._scan(job, now):
            return 0
        x = job.extra
        here = not srv.over_ssh or x.get("interactive")  # (on this host: else on its first node's)
        try:
            d = rundir.make(srv.jobdir(job), owner, srv.multi)
            scratch = self._scratch(job, owner) if here else ""
        except OSError as e:
            return self.not_started(job, now, f"its run directory: {e.strerror or e}")
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
                remove(scratch)
            return self.not_started(job, now, f"its run directory: {e.strerror or e}")
        if not here:
            return self._remote(job, now, owner, env, files, shell, workdir, gpus)
        noted = {"tmpdir": scratch, **({"gpus": gpus} if gpus else {})}
        if x.get("interactive"):
            srv.note(job, now, set={"launched": now, **noted}, records=srv.started_record)
            mail.send(srv.site, job, mail.BEGIN, "Begun execution")
            return 1
        return self._here(job, now, d, owner, env, shell, workdir, scratch, noted)

    def _here(self, job: Job, now: float, d: Path, owner: privilege.Owner | None, env: dict[str, str],
                     shell: str, workdir: str, scratch: str, noted: dict) -> int:
        """Start the job's wrapper from this host, in a session of its own, in the run's
        cgroup, with the job's umask and nice value, its files opened as its owner (through
        a `command` launcher's template where the site has one)."""
        srv = self.server
        x = job.extra
        argv = ["/bin/sh", "-c", WRAPPER, "hpcsched-job", str(d), shell, str(d / "script"), *x.get("arguments", ())]
        if srv.launcher:
            line = shlex.join(argv)
            argv = [part.replace("{host}", job.nodes[0]).replace("{command}", line).replace("{user}", job.owner)
                    for part in srv.launcher]
        cgroup = srv.tracker.cgroup(job.id, job.run_count, create=True)
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
                stdout, stderr = self.open_files(job, owner, files)
                nice = limits.asked(job).get("nice")
                proc = subprocess.Popen(argv, cwd=None if owner else workdir, env=env, stdin=subprocess.DEVNULL,
                                        stdout=stdout, stderr=stderr, start_new_session=True,
                                        preexec_fn=privilege.becoming(owner, workdir, cgroup, nice)
                                        if owner or nice else None)
        except (OSError, ValueError, subprocess.SubprocessError) as e:
            # a bad path is this job's failure, not the server's
            remove(scratch)
            return self.not_started(job, now, getattr(e, "strerror", None) or str(e))
        finally:
            os.umask(old_umask)
        # (as the owner, the wrapper joined the cgroup while still root: privilege.becoming)
        joined = cgroup is not None and owner is not None
        srv.note(job, now, set={"launched": now, "pid": proc.pid, "pid_start": wait_start(proc.pid),
                                  "session": proc.pid, **({"cgroup": cgroup} if joined else {}), **noted},
                   records=srv.started_record)
        log(f"job {common.short_id(job)}: started for {job.owner} on {','.join(job.nodes)} (pid {proc.pid})")
        mail.send(srv.site, job, mail.BEGIN, "Begun execution")
        return 1

    def _remote(self, job: Job, now: float, owner: privilege.Owner | None, env: dict[str, str],
                       files: dict[str, tuple[str, int]], shell: str, workdir: str, gpus: dict) -> int:
        """Start the job's wrapper on its first node through that host's node command
        (node.py), after a word from each of its other hosts.  A host that does not answer
        is marked down, with why, and the job goes back to the queue; one that refuses
        (no such user there, a path the owner may not write) fails the job as here."""
        srv = self.server
        x = job.extra
        host, key = job.nodes[0], srv.key(job)
        for other in dict.fromkeys(job.nodes[1:]):
            why = srv.nodes.ping(other)
            if why is not None:
                return self.unreached(job, other, now, why)
        out, err, _ = rundir.streams(job, owner, srv.site.flavor)
        join = x.get("join", "n")
        paths = {"PBS_NODEFILE": "nodes", **({"PBS_GPUFILE": "gpus"} if gpus else {}),
                 **({"COBALT_NODEFILE": rundir.COBALT_NODES} if "cobalt" in x else {})}
        spec = {"env": env, "files": files, "paths": paths, "shell": shell, "arguments": x.get("arguments", []),
                "owner": owner.name if owner else None, "group": job.group, "workdir": workdir,
                "stdout": out if join != "eo" else err, "stderr": err if join == "n" else None,
                "umask": x.get("W", {}).get("umask", "077"), "nice": limits.asked(job).get("nice"),
                "lease": srv.nodes.check_rate, "tmpdir": srv.site.config.get("tmpdir"),
                "sisters": {**srv.nodes.sisters(), "host": host}}
        try:
            got = srv.nodes.run(host, key, spec)
        except remote.Refused as e:
            return self.not_started(job, now, f"on {host}: {e}")
        if got is None and srv.nodes.unsent:
            return self.unreached(job, host, now, srv.nodes.failing[host][1])
        if got is None:
            # the connection was lost after it was made: the run may have started there,
            # so it is launched as far as anyone can tell, and the host's next word (or its
            # silence for node_check_rate, when the run's lease there has run out) decides
            log(f"job {common.short_id(job)}: its start on {host} unconfirmed ({srv.nodes.failing[host][1]})")
            got = {}
        srv.note(job, now, set={"launched": now, "remote": host, **({"gpus": gpus} if gpus else {}),
                                  **({"pid": got["pid"], "pid_start": got["start"], "session": got["pid"]} if got else {})},
                   records=srv.started_record)
        log(f"job {common.short_id(job)}: started for {job.owner} on {','.join(job.nodes)} "
            f"(pid {got.get('pid', '?')} on {host})")
        mail.send(srv.site, job, mail.BEGIN, "Begun execution")
        return 1

    def unreached(self, job: Job, host: str, now: float, why: str) -> int:
        """A host of a job about to start does not answer: its node down, with why; the job
        back in the queue, to start where the next pass puts it."""
        srv = self.server
        log(f"node {host}: not reached ({why}): down; job {common.short_id(job)} back in the queue")
        srv.batch.do("node", now, name=host, state="down", note=down_note(now, why))
        srv.batch.do("requeue", now, id=job.id)
        return 0

    def open_files(self, job: Job, owner: privilege.Owner | None, files: contextlib.ExitStack) -> tuple:
        """The job's output and error files opened to append to, with the owner's rights
        (kept open by `files`): (stdout, stderr), stderr STDOUT when -j joins them."""
        srv = self.server
        out, err, _ = rundir.streams(job, owner, srv.site.flavor)
        join = job.extra.get("join", "n")
        with privilege.acting_as(owner) if owner else contextlib.nullcontext():
            stdout = files.enter_context(open(out if join != "eo" else err, "ab"))
            stderr = files.enter_context(open(err, "ab")) if join == "n" else subprocess.STDOUT
        return stdout, stderr

    def _gpus(self, job: Job) -> dict[str, list[int]]:
        """Which GPUs of each of its nodes the job gets: the lowest ones no other running job
        was given (the planner buys GPUs as cores, so a node never has too few); journaled
        with its launch, as its pid is.  {} for a job that asks for none."""
        srv = self.server
        want = job.request.gpus
        if not want:
            return {}
        sched = srv.batch.sched
        taken = common.gpus_held(j for j in sched.jobs.values() if j.id != job.id)
        return {name: [i for i in range(sched.topology.node(name).gpus) if i not in taken.get(name, ())][:want]
                for name in job.nodes}

    def not_started(self, job: Job, now: float, why: str) -> int:
        """The job could not start: it ends, aborted (A), its reason in its comment."""
        srv = self.server
        srv.note(job, now, set={"launched": now}, comment=f"launch failed: {why}")
        srv.finish(job, LOST, now, why=f"Job could not start: {why}")
        return 0

    def _scratch(self, job: Job, owner: privilege.Owner | None) -> str:
        """Make this run's $TMPDIR under `tmpdir` (the system's temporary directory by
        default), the owner's: a fresh name of the server's making (no user can take it
        first, nor rename it in a sticky /tmp), removed when the run ends (_clean)."""
        srv = self.server
        path = tempfile.mkdtemp(prefix=f"pbs.{job.id}.", dir=srv.tmpdir)
        if owner:
            os.chown(path, owner.uid, owner.gid)
        return path

    def _scan(self, job: Job, now: float) -> bool:
        """PSC's pre-job scan: check each node; a failing node goes on the bad list and
        the job returns to the queue to get other nodes.  On the `ssh` launcher's hosts
        the check runs on the node, over its connection: a host it does not reach is down
        (with why), not bad."""
        srv = self.server
        for node in dict.fromkeys(job.nodes):
            cmd = [part.replace("{node}", node) for part in srv.check]
            if srv.over_ssh:
                ok = srv.nodes.check(node, cmd)
                if ok is None:
                    return bool(self.unreached(job, node, now, srv.nodes.failing[node][1]))
                if not ok:
                    srv.batch.do("node", now, name=node, state="bad")
                    srv.batch.do("requeue", now, id=job.id)
                    return False
                continue
            try:
                ok = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    env=siteprog.environment(srv.site), timeout=60).returncode == 0
            except (OSError, subprocess.TimeoutExpired):
                ok = False
            if not ok:
                srv.batch.do("node", now, name=node, state="bad")
                srv.batch.do("requeue", now, id=job.id)
                return False
        return True

    def _environment(self, job: Job, nodefile: Path, tmpdir: Path, workdir: str, home: str,
                     shell: str) -> dict[str, str]:
        srv = self.server
        x = job.extra
        v = dict(x.get("variables", {}))
        env = {"PATH": v.get("PBS_O_PATH", "/usr/local/bin:/usr/bin:/bin"), "HOME": home,
               "USER": job.owner, "LOGNAME": job.owner, "SHELL": shell, "LANG": v.get("PBS_O_LANG", "C")}
        env.update(v)
        if srv.as_owners:  # the owner's own, whatever qsub -V copied
            env.update(HOME=home, USER=job.owner, LOGNAME=job.owner)
        env[tracking.MARK] = srv.tracker.mark(job.id, job.run_count)
        env["HPCSCHED_HOME"] = str(srv.home)  # the commands a job runs reach its own site
        r = job.request
        jid = common.display_id(job, srv.site.server)
        env.update(PBS_JOBID=jid, PBS_JOBNAME=job.name, PBS_QUEUE=job.queue, PBS_NODEFILE=str(nodefile),
                   PBS_O_WORKDIR=v.get("PBS_O_WORKDIR", workdir), PBS_O_HOST=v.get("PBS_O_HOST", socket.gethostname()),
                   PBS_ENVIRONMENT="PBS_BATCH", PBS_NODENUM="0", PBS_TASKNUM="1", TMPDIR=str(tmpdir),
                   PBS_NP=str(r.processors), PBS_NUM_NODES=str(len(job.nodes)),
                   PBS_NUM_PPN=str(r.ppn if not r.cores else max(len(c) for c in job.cores)),
                   PBS_WALLTIME=str(int(job.walltime)))
        if job.array_id:
            env.update(PBS_ARRAYID=str(job.array_index), PBS_ARRAY_INDEX=str(job.array_index),
                       PBS_ARRAY_ID=f"{job.array_id}[].{srv.site.server}")
        if "cobalt" in x:
            env.update(cobalt.environment(job, srv.batch.sched.topology, str(nodefile.parent / rundir.COBALT_NODES)))
        return env
