"""Billing: the scheduler's side of a site's allocations (bank.py keeps the books).

What an ending job costs its project, what a billed reservation's unused part costs its
owner (PSC), and each project's standing as the passes follow it.  Invariant: `standing`
holds each project's standing as of the last pass that looked (`restand`); a job is
charged once, when it ends (Scheduler.job_ended).
"""
from __future__ import annotations

from typing import Iterable

from .bank import Bank
from .jobs import Job
from .reservations import Access, Reservation
from .topology import Topology


class Billing:
    """Charges jobs and reservations to a `bank` in the machine's units."""

    def __init__(self, bank: Bank, topology: Topology):
        self.bank, self.topology = bank, topology
        self.cores = sum(n.cores for n in topology.all_nodes())  # the machine's, for core-hour charges
        self.standing: dict[str, str] = {}  # each account's standing at the last pass

    def so_far(self, job: Job, now: float) -> float:
        """What a running (or ending) job has cost its project up to `now`: the walltime it
        used (time suspended is not charged, as resources_used.walltime does not count it)."""
        if self.bank.unit == "core-hours":
            units, machine = job.request.processors, self.cores
        else:
            units, machine = self.topology.size(job.request), self.topology.node_count
        return self.bank.job_charge(job.queue, units, machine, now - job.start_time - job.suspended(now))

    def charge(self, job: Job, now: float, reservations: Iterable[Reservation]) -> None:
        """Charge an ending job to its project, and its use of billed reservations."""
        bank = self.bank
        bank.post("job", job.account, self.so_far(job, now), now, job=job.id)
        if bank.bill_reservations:
            for res in reservations:
                if self.billed(res) and res.access(job) is not Access.BLOCKED:
                    bank.reservation_use[res.name] = bank.reservation_use.get(res.name, 0.0) + \
                        _inside(job, res, now)

    def billed(self, res: Reservation) -> bool:
        """Is `res` billed to a project (one-off, with an account, where the site bills)?"""
        return bool(self.bank.bill_reservations and res.account and not res.period)

    def bill(self, res: Reservation, now: float, running: Iterable[Job]) -> None:
        """PSC: the owner pays for the node-hours of the reservation that no job used."""
        used = self.bank.reservation_use.pop(res.name, 0.0)
        used += sum(_inside(j, res, now) for j in running if res.access(j) is not Access.BLOCKED)
        held = max(0.0, min(now, res.start + res.duration) - res.start) * len(res.nodes)
        unused = max(0.0, held - used)
        if unused > 0:
            factor = self.bank.charge_factors.get(res.queue, 1.0) if res.queue else 1.0
            if self.bank.unit == "core-hours":
                unused *= self.cores / self.topology.node_count
            self.bank.post("reservation", res.account, unused / 3600.0 * factor, now,
                           note=f"unused part of reservation {res.name}")

    def restand(self, now: float) -> list[str]:
        """Each account's standing at `now`; the projects whose standing changed since the
        last look (a first look names only those not "ok")."""
        bank, changed = self.bank, []
        for project in bank.accounts:
            standing = bank.standing(project, now)
            if self.standing.get(project) != standing:
                if project in self.standing or standing != "ok":
                    changed.append(project)
                self.standing[project] = standing
        return changed

    def refused(self, job: Job) -> str | None:
        """Why `job` may not start: its project is out of allocation and refused at zero."""
        if self.standing.get(job.account) == "exhausted" and self.bank.action(job.account) == "refuse":
            return f"project {job.account} has no allocation left"
        return None


def _inside(job: Job, res: Reservation, until: float) -> float:
    """Node-seconds `job` ran on `res`'s nodes inside its window, up to `until`."""
    t0, t1 = max(job.start_time, res.start), min(until, res.start + res.duration)
    return max(0.0, t1 - t0) * len(set(job.nodes) & set(res.nodes))
