"""Advance reservations: a set of nodes held for a time window, once or every period.

A standing one's occurrences start at `start + k * period + offset` for k = 0, 1, ... and
each of its `offsets` (0 alone, or more: OpenPBS's BYDAY and BYHOUR), up to `last`.

A reservation blocks its nodes for every job that may not use it.  Who may use it: the
users, groups and projects (accounts) in its ACL; a reservation with no ACL at all is a
drain (Maui's standing maintenance reservations, PSC's target drains, Kraken's weekly
drain) that no job may use.  A reservation with a `queue` is where that queue's jobs run:
those jobs may run only inside it, and no other job on its nodes while it is active
(Cobalt's reservation queues).  An OpenPBS reservation
(pbs_rsub) makes that queue itself: it exists while the reservation does, and its jobs
are deleted when the reservation ends.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum

from .errors import InvalidRequest
from .jobs import Job


class Access(Enum):
    BLOCKED = 0  # the job may not use these nodes while the reservation is active
    ALLOWED = 1  # the job may use them (or any other free nodes)
    BOUND = 2  # the job must run inside this reservation and nowhere else


#: an iCalendar recurrence's frequencies, in seconds
FREQUENCIES = {"MINUTELY": 60.0, "HOURLY": 3600.0, "DAILY": 86400.0, "WEEKLY": 604800.0}


def pattern(freq: str, interval: int, days: list[int], hours: list[int], start: float):
    """(first start, period, offsets) of a recurrence every `interval` FREQ, on `days`
    (weekday numbers) at `hours`, the minutes `start`'s (pbs_rsub's BYDAY and BYHOUR, a
    configured reservation's days): its occurrences over two periods in local wall-clock
    time, the first at or after `start`; later periods repeat in fixed seconds."""
    t0 = datetime.fromtimestamp(start).replace(microsecond=0)
    base = timedelta(seconds=FREQUENCIES[freq] * interval)
    if freq == "WEEKLY":  # each period's first week, from its Monday
        monday, period = t0 - timedelta(days=t0.weekday()), base
        starts = [monday + k * base + timedelta(days=d) for k in (0, 1) for d in days or [t0.weekday()]]
    else:  # every `interval` of the frequency, on the days picked (a whole number of weeks then)
        period = base * (7 // math.gcd(7, interval)) if days and freq == "DAILY" else base
        starts = [t0 + k * base for k in range(2 * (period // base))]
        starts = [t for t in starts if not days or t.weekday() in days]
    if hours:
        starts = [t.replace(hour=h) for t in starts for h in hours]
    first = min(t for t in starts if t >= t0)
    offsets = tuple(sorted((t - first).total_seconds() for t in starts if first <= t < first + period))
    return first.timestamp(), period.total_seconds(), offsets


def overlapping(duration: float, period: float, offsets: tuple[float, ...]) -> bool:
    """Would occurrences of `duration` at these `offsets` in each `period` overlap?"""
    return any(o + duration > nxt for o, nxt in zip(offsets, [*offsets[1:], offsets[0] + period]))


@dataclass
class Reservation:
    name: str
    start: float
    duration: float
    nodes: tuple[str, ...] = ()  # explicit nodes, or resolved from `count` when added
    count: int = 0  # a node count to choose from, when `nodes` is empty
    users: frozenset[str] = field(default_factory=frozenset)
    groups: frozenset[str] = field(default_factory=frozenset)
    projects: frozenset[str] = field(default_factory=frozenset)
    queue: str = ""
    period: float = 0.0  # > 0: repeats every `period` seconds
    owner: str = ""
    account: str = ""  # the project billed for its unused node-hours (PSC), if any
    links: bool = False  # holds the network links its nodes carry too (Blue Gene/Q's block_passthrough)
    own_queue: bool = False  # made its `queue` (pbs_rsub): the queue goes, and its jobs, when it ends
    last: float = 0.0  # a repeating one's last occurrence starts at or before this (0: it never ends)
    title: str = ""  # the name its owner gave it (pbs_rsub -N); `name` is its id
    offsets: tuple[float, ...] = (0.0,)  # where each period's occurrences start, from its own start
    rule: str = ""  # the recurrence as its owner gave it (pbs_rsub -r), shown again as given

    def __post_init__(self):
        if not self.name:
            raise InvalidRequest("reservation needs a name")
        if not all(isinstance(x, (int, float)) and math.isfinite(x) for x in (self.start, self.duration, self.period)):
            raise InvalidRequest(f"reservation {self.name}: start, duration and period must be finite numbers")
        if self.duration <= 0:
            raise InvalidRequest(f"reservation {self.name}: duration must be positive")
        if not (isinstance(self.last, (int, float)) and math.isfinite(self.last)):
            raise InvalidRequest(f"reservation {self.name}: its last occurrence must be a finite time")
        if self.last and self.last < self.start:
            raise InvalidRequest(f"reservation {self.name}: its last occurrence comes before its first")
        if self.own_queue and not self.queue:
            raise InvalidRequest(f"reservation {self.name}: it makes its queue, but names none")
        self.offsets = tuple(self.offsets)
        if not (self.offsets and all(isinstance(x, (int, float)) and math.isfinite(x) for x in self.offsets)
                and self.offsets[0] == 0 and (self.period or len(self.offsets) == 1)):
            raise InvalidRequest(f"reservation {self.name}: its occurrences' offsets must start at 0, "
                                 f"and more than one needs a period")
        if self.period and overlapping(self.duration, self.period, self.offsets):
            raise InvalidRequest(f"reservation {self.name}: its occurrences overlap (period or offsets "
                                 f"shorter than its duration)")
        if not self.nodes and self.count <= 0:
            raise InvalidRequest(f"reservation {self.name}: give nodes or a node count")
        self.nodes = tuple(self.nodes)
        self.users, self.groups, self.projects = (frozenset(self.users), frozenset(self.groups),
                                                  frozenset(self.projects))

    def access(self, job: Job) -> Access:
        """BOUND: the job runs in it alone (its queue is the reservation's, or the job
        names it, Moab's advres, and may use it); ALLOWED: it may use it or any other free
        nodes; BLOCKED: not its nodes while it is active (nor any for a job naming another).
        A reservation with a queue is that queue's alone: its ACL says who may submit there
        (OpenPBS's reservation queue, Cobalt's), not whose jobs elsewhere may use it."""
        if self.queue and job.queue == self.queue:
            return Access.BOUND
        if job.reservation:
            return Access.BOUND if job.reservation == self.name and self.admits(job) else Access.BLOCKED
        return Access.ALLOWED if self.admits(job) and not self.queue else Access.BLOCKED

    def admits(self, job: Job) -> bool:
        """Is the job's user, group or project on the reservation's lists?"""
        return job.owner in self.users or bool(job.group and job.group in self.groups) \
            or bool(job.account and job.account in self.projects)

    def occurrences(self, since: float, until: float):
        """(start, end) of every occurrence that overlaps [since, until), in time order."""
        if not self.period:
            if self.start < until and self.start + self.duration > since:
                yield self.start, self.start + self.duration
            return
        # the first period with an occurrence that may end after `since`
        k = max(0, math.floor((since - self.start - self.duration - self.offsets[-1]) / self.period) + 1)
        while True:
            for o in self.offsets:
                s = self.start + k * self.period + o
                if s >= until or (self.last and s > self.last):
                    return
                if s + self.duration > since:
                    yield s, s + self.duration
            k += 1

    def _final(self) -> tuple[int, int]:
        """(periods before its last occurrence, that occurrence's offset's index)."""
        k = math.floor((self.last - self.start) / self.period)
        left = self.last - self.start - k * self.period
        return k, max(i for i, o in enumerate(self.offsets) if o <= left)

    def total(self) -> int:
        """How many occurrences it has in all (0: a standing one with no end)."""
        if not self.period:
            return 1
        if not self.last:
            return 0
        k, i = self._final()
        return k * len(self.offsets) + i + 1

    def expired(self, now: float) -> bool:
        """Has its last occurrence ended by `now`?"""
        if self.period and not self.last:
            return False
        final = self.start
        if self.period:
            k, i = self._final()
            final += k * self.period + self.offsets[i]
        return final + self.duration <= now

    def to_dict(self) -> dict:
        return {"name": self.name, "start": self.start, "duration": self.duration,
                "nodes": list(self.nodes), "count": self.count, "users": sorted(self.users),
                "groups": sorted(self.groups), "projects": sorted(self.projects),
                "queue": self.queue, "period": self.period, "owner": self.owner,
                **({"account": self.account} if self.account else {}),
                **({"links": True} if self.links else {}),
                **({"own_queue": True} if self.own_queue else {}),
                **({"last": self.last} if self.last else {}),
                **({"title": self.title} if self.title else {}),
                **({"offsets": list(self.offsets)} if self.offsets != (0.0,) else {}),
                **({"rule": self.rule} if self.rule else {})}

    @classmethod
    def from_dict(cls, d: dict) -> "Reservation":
        return cls(**d)
