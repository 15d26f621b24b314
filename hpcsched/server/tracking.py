"""Every process of a job is the job's, wherever it went.

A job is found by two marks, so a walltime kill, a `qdel` and the job's end reach all of it:

- a cgroup (v2) per run, `<the server's cgroup>/hpcsched-<site>/<id>.<run>`, where the
  system lets the server make one (root, or a delegated subtree): the kernel keeps every
  descendant in it, whatever it does (setsid, double fork, a cleared environment);
- always, the job's mark in its environment, HPCSCHED_JOB=<site>/<id>.<run>, found by a
  scan of /proc: it catches what left the job's session with setsid on a system without
  cgroups (a process that also clears its environment escapes this one).

When a job's top process ends, what is left of it is killed and reported (pbs_mom's
cleanup of a job's leftovers).  A run's cgroup is killed until it is empty: the kernel's
`cgroup.kill` takes every member at once, forks in flight included; where it is missing
(before Linux 5.14) the cgroup is frozen, killed and thawed until no process is left.

A job that runs as another user than the server (a multi-user site) cannot leave its
cgroup: moving a process needs write access to the common ancestor's cgroup.procs, which
is root's.  A job that runs as the server's own user can (a single-user rig): there the
environment mark is what finds it, and a process that clears it too is out of reach.
"""
from __future__ import annotations

import hashlib
import os
import signal
import time
from pathlib import Path

MARK = "HPCSCHED_JOB"


def _cgroup2_root(own: bool = True) -> str | None:
    """Where this process's own cgroup v2 lives in the file system (not `own`: the
    hierarchy's root), or None."""
    try:
        with open("/proc/self/mounts") as f:
            mount = next((line.split()[1] for line in f if line.split()[2:3] == ["cgroup2"]), None)
        with open("/proc/self/cgroup") as f:
            mine = next((line.strip()[3:] for line in f if line.startswith("0::")), None)
    except OSError:
        return None
    if mount is None or mine is None:
        return None
    return os.path.join(mount, mine.lstrip("/")) if own else mount


class Tracker:
    """The processes of a site's jobs: made, marked, signalled and cleaned up per run."""

    def __init__(self, home: Path, cgroups: bool = True, at_root: bool = False):
        self.key = hashlib.sha1(str(home).encode()).hexdigest()[:12]
        # (at_root: the site's cgroup at the hierarchy's root, the same for every process
        # of the site's user: the node side, run by a new ssh session each time)
        self.at_root = at_root
        self._base: str | None = None if cgroups else ""  # "": none here; None: not looked yet
        self.stale: set[str] = set()  # cgroups of ended runs, removed once empty

    @property
    def base(self) -> str | None:
        """This site's cgroup directory, made on first use; None where the server may not
        make one (then the environment mark alone tracks jobs)."""
        if self._base is None:
            self._base = ""
            root = _cgroup2_root(own=not self.at_root)
            if root is not None:
                base = os.path.join(root, f"hpcsched-{self.key}")
                try:
                    os.makedirs(base, exist_ok=True)
                    self._base = base
                except OSError:
                    pass
        return self._base or None

    def mark(self, job_id: int, run: int) -> str:
        return f"{self.key}/{job_id}.{run}"

    def cgroup(self, job_id: int, run: int, create: bool = False) -> str | None:
        """The run's cgroup directory (made when `create`), or None where there are none."""
        if self.base is None:
            return None
        path = os.path.join(self.base, f"{job_id}.{run}")
        if create:
            try:
                os.mkdir(path)
            except FileExistsError:
                pass
            except OSError:
                return None
        return path if os.path.isdir(path) else None

    def pids(self, job_id: int, run: int, scan: bool = True) -> set[int]:
        """Every live process of the run: its cgroup's members and (`scan`: a run whose
        wrapper did not join a cgroup) the carriers of its mark."""
        found = set()
        cgroup = self.cgroup(job_id, run)
        if cgroup is not None:
            try:
                with open(os.path.join(cgroup, "cgroup.procs")) as f:
                    found.update(int(line) for line in f if line.strip())
            except (OSError, ValueError):
                pass
        if scan:
            found |= marked(self.mark(job_id, run))
        found.discard(os.getpid())
        return found

    def signal(self, job_id: int, run: int, sig: int, scan: bool = True, besides: int | None = None) -> list[int]:
        """Send `sig` to every process of the run (SIGKILL: its cgroup until empty) but
        those of process group `besides` (which the caller signalled as a group: once a
        process, a trap runs once); the pids it reached."""
        cgroup = self.cgroup(job_id, run) if sig == signal.SIGKILL else None
        if cgroup is not None:
            kill_all(cgroup)
        reached = []
        for pid in sorted(self.pids(job_id, run, scan)):
            try:
                if besides is not None and os.getpgid(pid) == besides:
                    continue
                os.kill(pid, sig)
                reached.append(pid)
            except (ProcessLookupError, PermissionError):
                pass
        return reached

    def clean(self, job_id: int, run: int, scan: bool = True) -> list[str]:
        """The run has ended: kill what is left of it (SIGKILL) and let its cgroup go.
        Returns the leftovers as 'pid (command)', for the server's log."""
        left = sorted(self.pids(job_id, run, scan))
        names = [f"{pid} ({_command(pid)})" for pid in left]
        cgroup = self.cgroup(job_id, run)
        if cgroup is not None:
            kill_all(cgroup)
            self.stale.add(cgroup)
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self.sweep()
        return names

    def sweep(self) -> None:
        """Remove the cgroups of ended runs that have emptied (a killed process takes a
        moment to go)."""
        for path in list(self.stale):
            try:
                os.rmdir(path)
            except FileNotFoundError:
                pass
            except OSError:
                continue
            self.stale.discard(path)

    def close(self, live: set[tuple[int, int]] = frozenset()) -> None:
        """The server stops: remove every empty cgroup but those of `live` runs."""
        if not self._base:
            return
        try:
            names = os.listdir(self._base)
        except OSError:
            return
        for name in names:
            path = os.path.join(self._base, name)
            if os.path.isdir(path) and name not in {f"{j}.{r}" for j, r in live}:
                self.stale.add(path)
        self.sweep()
        if not self.stale:
            try:
                os.rmdir(self._base)
            except OSError:
                pass


def process_start(pid: int) -> str | None:
    """The kernel's start time of `pid` (field 22 of /proc/PID/stat), or None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rindex(")") + 2:].split()
    if fields[0] == "Z":  # a zombie has ended
        return None
    return fields[19]


KILL_ROUNDS = 100  # of freeze, kill, thaw where the kernel has no cgroup.kill (then give up: logged)


def kill_all(cgroup: str) -> bool:
    """SIGKILL every process in `cgroup` until it has none; did it empty?"""
    try:
        with open(os.path.join(cgroup, "cgroup.kill"), "w") as f:
            f.write("1")
        return True  # (the kernel kills them all, forks in flight included)
    except FileNotFoundError:
        pass
    except OSError:
        return False
    for _ in range(KILL_ROUNDS):
        _write(cgroup, "cgroup.freeze", "1")  # (a frozen process cannot fork)
        try:
            with open(os.path.join(cgroup, "cgroup.procs")) as f:
                pids = [int(line) for line in f if line.strip()]
        except (OSError, ValueError):
            pids = []
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        _write(cgroup, "cgroup.freeze", "0")  # (a killed frozen process dies once thawed)
        if not pids:
            return True
        time.sleep(0.001)
    return False


def _write(cgroup: str, name: str, value: str) -> None:
    try:
        with open(os.path.join(cgroup, name), "w") as f:
            f.write(value)
    except OSError:
        pass


def marked(mark: str) -> set[int]:
    """The processes whose environment carries HPCSCHED_JOB=`mark` (those this process may
    read: all, for root)."""
    needle = f"{MARK}={mark}\0".encode()
    found = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read()
        except OSError:
            continue
        if env.startswith(needle) or b"\0" + needle in env:
            found.add(int(name))
    return found


def _command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"
