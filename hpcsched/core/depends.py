"""Job dependencies: who waits on whom, and when each wait is decided.

A dependency names a parent job (`afterok:7`) or a job array (`afterok:7[]`, Torque's
`afterokarray:7[][N]`).  The registry maps each parent to the jobs waiting on it.  On a
parent's events (it started, it ended, it was deleted before it ran) it decides what it
can (`met` True or False, never changed after) and returns the waiting jobs to look at
again; the scheduler settles them.  An array is judged by a tally of its subjobs, kept up
to date as they start and end, never by reading them all again.

An array dependency counts subjobs: `of` N > 0 needs N of them (afterok: N ended with
status 0; afternotok: N ended otherwise or were deleted; afterany: N ended; afterstart: N
started), and is failed as soon as too few are left to get there.  `of` ALL is the whole
array taken as one job (OpenPBS): afterok and afterany need every subjob, afterstart the
first, and afternotok is met when the last ends if any subjob failed.
"""
from __future__ import annotations

from .errors import BadDependency
from .jobs import COMPLETED, FINISHED, Dependency, DepType, Job

AFTEROK, AFTERNOTOK, AFTERANY, AFTERSTART = DepType.AFTEROK, DepType.AFTERNOTOK, DepType.AFTERANY, DepType.AFTERSTART
ALL = -1  # Dependency.of: the whole array, as one job


class Tally:
    """An array's subjobs counted by how far they got."""

    __slots__ = ("total", "started", "ok", "failed", "never")

    def __init__(self, members: list[Job]):
        self.total = len(members)
        self.started = sum(j.run_count > 0 for j in members)  # started at least once
        self.ok = sum(j.state == COMPLETED and j.exit_status == 0 for j in members)
        self.failed = sum(j.state in FINISHED for j in members) - self.ok  # ended non-zero, or deleted
        self.never = sum(j.state in FINISHED and j.run_count == 0 for j in members)  # deleted before a start

    def verdict(self, kind: DepType, of: int) -> bool | None:
        """Is a dependency of `kind` on `of` of these subjobs met (True), failed (False) or open (None)?"""
        left = self.total - self.ok - self.failed  # not ended yet
        if of == ALL:
            if kind == AFTERNOTOK:
                return None if left else self.failed > 0
            of = 1 if kind == AFTERSTART else self.total
        have, could = {AFTEROK: (self.ok, self.ok + left),
                       AFTERNOTOK: (self.failed, self.failed + left),
                       AFTERANY: (self.ok + self.failed, self.total),
                       AFTERSTART: (self.started, self.total - self.never)}[kind]
        return True if have >= of else False if could < of else None


class Registry:
    """The jobs waiting on each parent job and on each array, and the arrays' tallies."""

    def __init__(self):
        self.children: dict[int, list[int]] = {}  # parent job id -> waiting job ids
        self.array_children: dict[int, list[int]] = {}  # array id -> waiting job ids
        self.tallies: dict[int, Tally] = {}  # array id -> its tally (only arrays waited on)

    def __bool__(self) -> bool:
        return bool(self.children or self.array_children)

    def link(self, job: Job, jobs: dict[int, Job]) -> None:
        """Check `job`'s parents exist and decide what is decided already (Rejected if not)."""
        for dep in job.dependencies:
            if dep.of:
                members = _members(jobs, dep.job_id)
                if not members:
                    raise BadDependency(f"dependency on unknown job array {dep.job_id}[]")
                if dep.met is None:
                    dep.met = Tally(members).verdict(dep.kind, dep.of)
                continue
            parent = jobs.get(dep.job_id)
            if parent is None or dep.job_id == job.id:
                raise BadDependency(f"dependency on unknown job {dep.job_id}")
            if dep.met is None and parent.state in FINISHED:
                dep.resolve(parent.exit_status if parent.state == COMPLETED else None, parent.run_count > 0)
            elif dep.met is None and dep.kind == AFTERSTART and parent.run_count > 0:
                dep.met = True

    def register(self, job: Job, jobs: dict[int, Job]) -> None:
        """Note `job` as waiting on the parents it still waits for."""
        for dep in job.dependencies:
            if dep.met is not None:
                continue
            if dep.of and dep.job_id not in self.tallies:
                self.tallies[dep.job_id] = Tally(_members(jobs, dep.job_id))
            kids = (self.array_children if dep.of else self.children).setdefault(dep.job_id, [])
            if job.id not in kids:
                kids.append(job.id)

    def started(self, job: Job) -> list[int]:
        """`job` started: afterstart dependencies on it (and on its array) may be met."""
        kids = list(self.children.get(job.id, ()))
        if job.array_id in self.tallies and job.run_count == 1:
            self.tallies[job.array_id].started += 1
            kids += self.array_children.get(job.array_id, ())
        return kids

    def ended(self, job: Job) -> list[int]:
        """`job` ended (or was deleted before it ran, `exit_status` None): every
        dependency on it is decided; those on its array may be."""
        kids = self.children.pop(job.id, [])
        tally = self.tallies.get(job.array_id) if job.array_id else None
        if tally is not None:
            if job.exit_status == 0 and job.state == COMPLETED:
                tally.ok += 1
            else:
                tally.failed += 1
                tally.never += job.run_count == 0
            kids += self.array_children.get(job.array_id, ())
        return kids

    def decide(self, child: Job, parent: Job, ended: bool) -> None:
        """Decide `child`'s open dependencies on `parent` (and on its array) after its event."""
        for dep in child.dependencies:
            if dep.met is not None:
                continue
            if dep.of:
                if dep.job_id == parent.array_id:
                    dep.met = self.tallies[dep.job_id].verdict(dep.kind, dep.of)
            elif dep.job_id == parent.id:
                if ended:
                    dep.resolve(parent.exit_status if parent.state == COMPLETED else None, parent.run_count > 0)
                elif dep.kind == AFTERSTART:
                    dep.met = True
        if all(d.met is not None for d in child.dependencies if d.of):  # nothing left on arrays
            for dep in child.dependencies:
                if dep.of and dep.job_id in self.array_children:
                    kids = self.array_children[dep.job_id]
                    if child.id in kids:
                        kids.remove(child.id)
                    if not kids:
                        del self.array_children[dep.job_id], self.tallies[dep.job_id]

    def forget(self, job_id: int) -> None:
        self.children.pop(job_id, None)


def _members(jobs: dict[int, Job], array_id: int) -> list[Job]:
    return [j for j in jobs.values() if j.array_id == array_id]


def describe(dep: Dependency) -> str:
    """`afterok:7`, `afterok:7[]` or `afterok:7[][3]` (ids without a server)."""
    target = str(dep.job_id) if not dep.of else f"{dep.job_id}[]" if dep.of == ALL else f"{dep.job_id}[][{dep.of}]"
    return f"{dep.kind.value}:{target}"
