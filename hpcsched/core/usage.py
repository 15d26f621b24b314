"""Decayed usage: what each (user, group, project) has used, the past forgotten by a half-life.

Usage is charged while jobs run, not only when they end: every record keeps the rate its
running jobs accrue (slots, or nodes, per second), and the rate times the time since its
last charge is charged whenever the rate changes (a job starts or ends) and at every pass
whose policy reads usage (Policy.reads_usage; reading adds what is accrued since, `value`).
A charge made at time c counts at time t as

    amount * 2 ** (-(t - c) / half_life)       (no decay when half_life is 0)

and stops counting once it is older than the history window (0: it never stops).  The
window is kept in `BUCKETS` buckets: a charge leaves with its bucket, when the bucket's end
is a window old, so the window is exact to one bucket's width.  Each bucket holds its
charges scaled to a common epoch (amount * 2 ** ((c - epoch) / half_life)), so reading a
record is one sum and one power; the epoch moves forward before the scale could overflow.
Usage notes the keys whose sums change (`take_changed`) and those whose running jobs come
or go (`take_moved`), so that a reader keeping sums and counts of its own (the share
tree's, per node) adds up again only what changed.

Records also count finished jobs, decayed alike (Grid Engine's `finished_jobs`, which the
share tree divides a node's entitlement by).  The metric is the site's choice:

    slots   run time x processors held (every core of whole nodes): CC-IN2P3's choice
    nodes   run time x nodes
    cpu     the CPU time a job reports when it ends (nothing while it runs)
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from .errors import InvalidRequest

METRICS = ("slots", "nodes", "cpu")
BUCKETS = 64
_REBASE = 512.0  # half-lives past the epoch before it moves (2 ** 512 is far from overflow)

Key = tuple[str, str, str]  # (user, group, project)
KINDS = ("user", "group", "project")  # the parts of a key, in order


def key_of(job) -> Key:
    """Whose usage a job is: (user, group, project)."""
    return job.owner, job.group, job.account


@dataclass
class Record:
    """One (user, group, project)'s charges: bucket index -> [scaled usage, scaled finished jobs]."""

    buckets: dict[int, list[float]] = field(default_factory=dict)
    rate: float = 0.0  # per second, summed over its running jobs
    running: int = 0  # jobs running
    since: float = 0.0  # the rate is charged up to here
    # the sums of every bucket but the newest, and the newest's key: kept until a bucket
    # comes or goes (charges go to the newest, so most change nothing here)
    sums: tuple[float, float, int] | None = None
    key: Key = ("", "", "")


class Usage:
    """Every record's decayed usage (see the module docstring for the invariant)."""

    def __init__(self, metric: str = "nodes", half_life: float = 0.0, window: float = 0.0):
        if metric not in METRICS:
            raise InvalidRequest(f"usage metric must be one of {', '.join(METRICS)}, not {metric!r}")
        if not (half_life >= 0 and math.isfinite(half_life)):
            raise InvalidRequest(f"half-life must be a non-negative number of seconds, not {half_life!r}")
        if not (window >= 0 and math.isfinite(window)):
            raise InvalidRequest(f"history window must be a non-negative number of seconds, not {window!r}")
        self.metric, self.half_life, self.window = metric, half_life, window
        self.width = window / BUCKETS if window else 0.0
        self.epoch = 0.0
        self.records: dict[Key, Record] = {}
        self.running: dict[Key, Record] = {}  # the records with jobs running (what accrues)
        self.version = 0  # bumped by every charge: readers cache what they derive from it
        self.changed: set[Key] = set()  # keys whose sums changed since take_changed last took them
        self.moved: set[Key] = set()  # keys whose running jobs came or went since take_moved last took them
        self.generation = 0  # bumped when any record may have changed without being noted
        self._first: int | None = None  # the window's first bucket when every record was last trimmed
        # False where nothing will read usage (a replay whose policy reads none): the
        # scheduler then charges nothing as jobs start and end
        self.kept = True

    # --- charging ------------------------------------------------------------------------
    def _scale(self, t: float) -> float:
        return 2.0 ** ((t - self.epoch) / self.half_life) if self.half_life else 1.0

    def _bucket(self, t: float) -> int:
        return int(t // self.width) if self.width else 0

    def _add(self, rec: Record, t: float, amount: float, finished: float) -> None:
        if self.half_life and (t - self.epoch) / self.half_life > _REBASE:
            self._rebase(t)
        s = self._scale(t)
        k = self._bucket(t)
        b = rec.buckets.get(k)
        if b is None or (rec.sums is not None and rec.sums[2] != k):
            rec.sums = None  # (a bucket comes, or a charge lands in one the cached sums hold)
        if b is None:
            rec.buckets[k] = [amount * s, finished * s]
        else:
            b[0] += amount * s
            b[1] += finished * s
        self.changed.add(rec.key)
        self.version += 1

    def _rebase(self, t: float) -> None:
        """Move the epoch to `t`: every bucket scaled down alike (reading gives the same)."""
        f = self.decay(t)
        for rec in self.records.values():
            rec.sums = None
            for b in rec.buckets.values():
                b[0] *= f
                b[1] *= f
        self.epoch = t
        self.generation += 1

    def record(self, key: Key) -> Record:
        rec = self.records.get(key)
        if rec is None:
            rec = self.records[key] = Record(key=key)
        return rec

    def _accrue(self, rec: Record, t: float) -> None:
        if rec.rate and t > rec.since:
            self._add(rec, t, rec.rate * (t - rec.since), 0.0)
        rec.since = float(t)

    def started(self, key: Key, rate: float, t: float) -> None:
        """A job of `key` starts at `t`, accruing `rate` a second (0 for the cpu metric)."""
        rec = self.record(key)
        self._accrue(rec, t)
        rec.rate += rate
        rec.running += 1
        self.running[key] = rec
        self.moved.add(key)

    def ended(self, key: Key, rate: float, t: float, cpu: float = 0.0) -> None:
        """A job of `key` that accrued `rate` ends at `t` (having used `cpu` CPU-seconds)."""
        rec = self.record(key)
        self._accrue(rec, t)
        rec.rate = max(rec.rate - rate, 0.0) if rec.running > 1 else 0.0  # (no drift when none runs)
        rec.running -= 1
        if rec.running <= 0:
            self.running.pop(key, None)
        self.moved.add(key)
        self._add(rec, t, cpu if self.metric == "cpu" else 0.0, 1.0)

    def rerate(self, key: Key, delta: float, t: float) -> None:
        """A running job of `key` accrues `delta` more a second from `t` (a suspended job
        gives its rate up until it resumes)."""
        rec = self.record(key)
        self._accrue(rec, t)
        rec.rate = max(rec.rate + delta, 0.0)
        self.moved.add(key)

    def accrue(self, t: float) -> None:
        """Charge every running record up to `t` (each pass)."""
        for rec in self.running.values():
            self._accrue(rec, t)

    def charge(self, key: Key, amount: float, t: float) -> None:
        """An operator's adjustment (or a driver's charge): `amount` at `t`, decayed from then."""
        self._add(self.record(key), t, amount, 0.0)

    def reset(self, t: float, match=lambda key: True, finished: bool = True) -> int:
        """Forget the usage of the records `match` picks (running jobs accrue afresh from `t`),
        and their decayed finished-job counts unless not `finished` (an operator's setting
        of the usage alone)."""
        n = 0
        for key, rec in self.records.items():
            if match(key):
                if finished:
                    rec.buckets.clear()
                else:
                    for b in rec.buckets.values():
                        b[0] = 0.0
                rec.sums = None
                rec.since = max(rec.since, float(t))
                n += 1
        self.version += 1
        self.generation += 1
        return n

    def set_by_name(self, kind: str, name: str | None, t: float, amount: float | None = None, tree=None) -> int:
        """An operator's reset (`amount` None) or setting of the decayed usage of a user,
        group or project (`name` None: everyone's) at `t`; returns how many records it
        touched.  A setting goes on the first of the name's records (by key), else where
        the share `tree` (if any) has the name's node, else on a new record."""
        if kind not in KINDS:
            raise InvalidRequest(f"usage kind must be user, group or project, not {kind!r}")
        if amount is not None and not (amount >= 0 and math.isfinite(amount)):
            raise InvalidRequest(f"usage must be a non-negative number, not {amount!r}")
        i = KINDS.index(kind)
        self.accrue(t)
        # (a setting leaves the decayed finished-job counts, which the share tree divides by)
        n = self.reset(t, lambda key: name is None or key[i] == name, finished=amount is None)
        if amount is not None and name is not None:
            mine = sorted(k for k in self.records if k[i] == name)
            key = mine[0] if mine else (tree is not None and tree.key_for(kind, name)) or \
                tuple(name if k == i else "" for k in range(3))
            self.charge(key, amount, t)
        return n

    # --- reading -------------------------------------------------------------------------
    def _trim(self, rec: Record, first: int) -> None:
        """Drop `rec`'s buckets before bucket `first` (a bucket counts until its end is a
        window old)."""
        if rec.buckets and next(iter(rec.buckets)) < first:  # (buckets are made in time order)
            for k in [k for k in rec.buckets if k < first]:
                del rec.buckets[k]
            rec.sums = None
            self.changed.add(rec.key)

    def take_changed(self, t: float) -> dict[Key, tuple[float, float]]:
        """The keys whose sums changed since the last call, buckets that left the window by
        `t` included (every record is trimmed once per bucket width), each with its sums
        as `undecayed` reads them at `t`; forgets them."""
        if self.width:
            first = self._bucket(t - self.window)
            if self._first is None or first > self._first:
                for rec in self.records.values():
                    self._trim(rec, first)
                self._first = first
        changed, self.changed = self.changed, set()
        records, sums = self.records, self._sums  # (every record trimmed for `t`: see _trim)
        return {key: sums(records[key]) if key in records else (0.0, 0.0) for key in changed}

    def take_moved(self) -> set[Key]:
        """The keys whose running jobs came or went since the last call; forgets them."""
        moved, self.moved = self.moved, set()
        return moved

    def decay(self, t: float) -> float:
        """What an undecayed sum is multiplied by to read it at `t`."""
        return 2.0 ** (-(t - self.epoch) / self.half_life) if self.half_life else 1.0

    def accrued(self, rec: Record, t: float) -> float:
        """What `rec`'s running jobs have used since its last charge, up to `t`."""
        return rec.rate * (t - rec.since) if rec.running and t > rec.since else 0.0

    def undecayed(self, rec: Record, t: float) -> tuple[float, float]:
        """`rec`'s (usage, finished jobs) still inside the window at `t`, undecayed: at
        `t`, usage is undecayed * decay(t) + accrued."""
        if self.width:
            self._trim(rec, self._bucket(t - self.window))
        return self._sums(rec)

    def _sums(self, rec: Record) -> tuple[float, float]:
        """`rec`'s (usage, finished jobs), undecayed, as its buckets hold them now."""
        if not rec.buckets:
            return 0.0, 0.0
        if rec.sums is None:
            *older, newest = rec.buckets  # (made in time order: the last is the newest)
            rec.sums = (sum(rec.buckets[k][0] for k in older), sum(rec.buckets[k][1] for k in older), newest)
        u, f, newest = rec.sums
        b = rec.buckets[newest]
        return u + b[0], f + b[1]

    def value(self, rec: Record, t: float) -> tuple[float, float]:
        """(usage, finished jobs) of `rec` at `t`, decayed, its running jobs charged up to `t`."""
        u, f = self.undecayed(rec, t)
        d = self.decay(t)
        return u * d + self.accrued(rec, t), f * d

    def totals(self, t: float) -> dict[Key, tuple[float, float]]:
        """Every record's (usage, finished jobs) at `t`."""
        return {key: self.value(rec, t) for key, rec in self.records.items()}

    def by(self, kind: str, t: float) -> dict[str, float]:
        """Usage summed per user, group or project at `t`."""
        i = ("user", "group", "project").index(kind)
        out: dict[str, float] = {}
        for key, (u, _) in self.totals(t).items():
            out[key[i]] = out.get(key[i], 0.0) + u
        return out

    # --- state ---------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {"epoch": self.epoch, "half_life": self.half_life, "window": self.window,
                "records": [[*key, rec.since, [[k, b[0], b[1]] for k, b in sorted(rec.buckets.items())]]
                            for key, rec in self.records.items() if rec.buckets or rec.running]}

    def restore(self, d: dict, running: list[tuple[Key, float]], at: float | None = None) -> None:
        """Load `to_dict`'s output; `running` gives each running job's (key, rate).  Usage
        saved under another half-life or window (a site that changed them) is carried over
        as of `at` (the state's last pass): each bucket keeps its value then and decays by the
        new half-life from then on, and leaves the window when its own time does (its
        number under the old width is a time, not a number to reuse)."""
        self.epoch = float(d.get("epoch", 0.0))
        half_life, window = float(d.get("half_life", self.half_life)), float(d.get("window", self.window))
        carried = (half_life, window) != (self.half_life, self.window)
        if carried:
            old_epoch, old_width = self.epoch, window / BUCKETS if window else 0.0
            self.epoch = at = self.epoch if at is None else float(at)
            factor = 2.0 ** (-(at - old_epoch) / half_life) if half_life else 1.0  # (its value at `at`)
        self.records, self.running = {}, {}
        for user, group, project, since, buckets in d.get("records", []):
            rec = self.record((str(user), str(group), str(project)))
            rec.since = float(since)
            if not carried:
                rec.buckets = {int(k): [float(u), float(f)] for k, u, f in buckets}
                continue
            for k, u, f in buckets:  # (in time order: so are the buckets they land in)
                b = rec.buckets.setdefault(self._bucket(int(k) * old_width if old_width else at), [0.0, 0.0])
                b[0] += float(u) * factor
                b[1] += float(f) * factor
        for key, rate in running:
            rec = self.record(key)
            rec.rate += rate
            rec.running += 1
            self.running[key] = rec
        self.version += 1
        self.generation += 1
