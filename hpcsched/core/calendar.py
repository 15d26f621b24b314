"""Site calendars: drains and maintenance windows that recur, and what follows them.

Every entry is a drain: a reservation of its nodes (all, by default) that no job may use,
once or every `every` seconds, shown by showres like any reservation.  Running jobs that
would cross it are never started (backfill runs up to it), so the machine is empty when it
begins.  Two kinds also act when an occurrence ends:

    big_run   Cobalt's Big Run Monday: the waiting capability jobs go to the front,
              largest first (Scheduler.big_run)
    bimodal   Kraken's week: the capability jobs (>= `capability` of the machine) queued
              when the drain ends form the week's series; they run back to back, each
              reserved in turn ahead of every other job.  When the series has started (or
              none was queued) the machine is back to normal work; a capability job not in
              a series waits for the next week's.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .errors import InvalidRequest
from .reservations import Reservation

KINDS = ("drain", "bimodal")


@dataclass
class Entry:
    name: str
    start: float
    duration: float
    every: float = 0.0  # 0: once
    kind: str = "drain"
    nodes: tuple[str, ...] = ()  # (): the whole machine
    big_run: bool = False
    capability: float = 0.85  # bimodal: a capability job's share of the machine

    def __post_init__(self):
        if self.kind not in KINDS:
            raise InvalidRequest(f"calendar {self.name}: kind must be {' or '.join(KINDS)}")
        if not (self.duration > 0 and math.isfinite(self.duration)):
            raise InvalidRequest(f"calendar {self.name}: duration must be positive")
        if self.every and self.every < self.duration:
            raise InvalidRequest(f"calendar {self.name}: it overlaps itself (every {self.every:g} s, "
                                 f"lasting {self.duration:g} s)")
        if not 0 < self.capability <= 1:
            raise InvalidRequest(f"calendar {self.name}: capability must be a share of the machine, above 0")

    def reservation(self, all_nodes: tuple[str, ...]) -> Reservation:
        """The drain itself: no ACL, so no job may use it."""
        return Reservation(name=self.name, start=self.start, duration=self.duration,
                           nodes=self.nodes or all_nodes, period=self.every, owner="calendar")

    def last_end(self, now: float) -> float | None:
        """The end of the latest occurrence that has ended by `now` (None: none has)."""
        first_end = self.start + self.duration
        if now < first_end:
            return None
        if not self.every:
            return first_end
        return first_end + math.floor((now - first_end) / self.every) * self.every
