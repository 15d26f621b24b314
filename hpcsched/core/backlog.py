"""The runnable jobs in priority order, kept between passes (static policies).

A pass that has made its reservations only backfills, and most of a long queue cannot
start: a job needs more units than are free now, or runs past the first reservation and
needs more than stay free through it (the walk's bound test, see plan.Walk).  Reading such
a queue job by job made every pass as long as the queue.  So the backlog keeps its jobs in
blocks of about BLOCK, each of which knows, for any walltime, the least need among its
jobs no longer than that: a walk passes over a block none of whose jobs can pass the bound
test with one bisection.

Invariants (tests/test_backlog.py checks them against a sorted list read job by job):

    the blocks' keys, concatenated, are sorted and unique; no block is empty and none
    holds more than 2 * BLOCK entries; _maxes[i] is block i's last key
    a block's summary, once built (walls is not None), equals summarise() of its jobs now
    a reading (`read`, a Cursor) yields exactly the jobs, in order, that pass its sieve when
    they are read, each with its position
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from itertools import accumulate, chain, islice
from operator import attrgetter, itemgetter
from typing import Callable, Iterable, Iterator

from .jobs import Job

BLOCK = 64
STAND = 32  # jobs a walk's `stand` is asked about at once (see Sieved)
_WALLTIME, _FIRST, _SECOND = attrgetter("walltime"), itemgetter(0), itemgetter(1)


def shortest_first(walls: Iterable[float], needs: Iterable[int]) -> tuple[list[float], list[int], list[int]]:
    """Walltimes sorted (ties by need), the needs in that order, and least[i]: the least
    need among the i + 1 shortest: for any walltime, the least need of a job no longer."""
    pairs = sorted(zip(walls, needs))
    by_wall = list(map(_SECOND, pairs))
    return list(map(_FIRST, pairs)), by_wall, list(accumulate(by_wall, min))


class _Block:
    """Consecutive entries of the order: keys, jobs and their needs, in order."""

    __slots__ = ("keys", "jobs", "needs", "walls", "by_wall", "least", "stood")

    def __init__(self, keys: list, jobs: list[Job], needs: list[int]):
        self.keys, self.jobs, self.needs = keys, jobs, needs
        self.walls: list[float] | None = None  # the summary, built on first use
        self.stood: dict | None = None  # what walks worked out of its jobs' reservations (plan.Walk._stands)

    def summarise(self) -> list[float]:
        """The summary of its jobs (see `shortest_first`)."""
        self.walls, self.by_wall, self.least = shortest_first(map(_WALLTIME, self.jobs), self.needs)
        return self.walls

    # A job joins or leaves a block every time one is queued or starts: the summary is
    # kept up to date (an insertion or deletion, and the minima it changes), not redone.
    def insert(self, k: int, key, job: Job, need: int) -> None:
        self.keys.insert(k, key)
        self.jobs.insert(k, job)
        self.needs.insert(k, need)
        walls = self.walls
        if walls is not None:
            lo = bisect_left(walls, job.walltime)  # sorted by (walltime, need), as summarise
            p = bisect_right(self.by_wall, need, lo, bisect_right(walls, job.walltime, lo))
            walls.insert(p, job.walltime)
            self.by_wall.insert(p, need)
            least = self.least
            least.insert(p, min(least[p - 1], need) if p else need)
            j, n = p + 1, len(least)
            while j < n and least[j] > need:  # (least never rises)
                least[j] = need
                j += 1

    def delete(self, k: int) -> None:
        job, need = self.jobs[k], self.needs[k]
        del self.keys[k], self.jobs[k], self.needs[k]
        walls = self.walls
        if walls is not None:
            lo = bisect_left(walls, job.walltime)
            try:
                p = self.by_wall.index(need, lo, bisect_right(walls, job.walltime, lo))
            except ValueError:  # its walltime changed behind the backlog's back: redo it
                self.walls = None
                return
            del walls[p], self.by_wall[p]
            least = self.least
            if (p and least[p - 1] <= need) or (p + 1 < len(least) and least[p + 1] < need):
                del least[p]  # `need` was no job's least: the other minima stand
            elif p:
                least[p - 1:] = accumulate(self.by_wall[p:], min, initial=least[p - 1])
            else:
                least[:] = accumulate(self.by_wall, min)


class Sieved:
    """An order a walk narrows as it reads (plan.Walk): while `sieve` is (upper, horizon,
    lasting), the order may pass over the jobs that need more than `upper` units, or more
    than `lasting` when they run longer than `horizon` (the jobs the walk's bound test
    would pass over), counting them in `passed`; it yields the others in order."""

    sieve: tuple[int, float, int] | None = None
    passed = 0
    #: While set (never beside a sieve), asked `stand(block, lo, hi)` of each run of STAND
    #: jobs of a block, block.jobs[lo:hi], before they are read: it says how many of them,
    #: from the first, the walk took (as their reservations stand), and those are passed
    #: over, one None yielded in their place.  Only for a reading whose blocks come in the
    #: walk's order (`in_order`).
    stand: Callable[[_Block, int, int], int] | None = None
    in_order = False
    #: Can it pass over, from now on, every job sharing an attribute value with one the
    #: walk's gate held back (`close`)?  Those jobs are not counted in `passed`: they are
    #: held back, not waiting for resources.
    closable = False
    _ahead: Iterator[Job] | None = None  # a reading begun by `lead`, which the next one resumes

    def lead(self, m: int) -> list[Job]:
        """The first `m` jobs, read now (no sieve yet); the next reading yields them again
        and carries on with the same reading, so a pass that looks at its head first
        still reads the order once.  A reading begun holds its order (a cycle, which
        only the cycle collector frees): take it back with `resume` if none follows."""
        it = iter(self)
        head = list(islice(it, m))
        self._ahead = chain(head, it)
        return head

    def resume(self) -> Iterator[Job] | None:
        """The reading `lead` began, taken back (None if none is)."""
        ahead, self._ahead = self._ahead, None
        return ahead

    def close(self, job: Job, attrs: frozenset[str]) -> bool:
        """Pass over, from now on, the jobs whose value of one of `attrs` is `job`'s (as
        many of them as the order can tell apart; jobs it cannot are yielded as before).
        False if it can tell none apart."""
        raise NotImplementedError

    def covers(self, job: Job) -> bool:
        """Is `job` among the jobs `close` passes over?"""
        return False


def read(blocks: list[_Block], holder: Sieved) -> Iterator[tuple[int, Job, int]]:
    """(position from 1, job, need) of the blocks' jobs in order, passing over what
    `holder`'s sieve rules out when they are read (whole blocks at a time), and the jobs
    its `stand` takes (one (position, None, 0) for each run of them)."""
    k = 0
    for block in blocks:
        stand = holder.stand
        if stand is not None:  # (never beside a sieve, see Sieved)
            jobs, needs = block.jobs, block.needs
            for lo in range(0, len(jobs), STAND):
                hi = min(lo + STAND, len(jobs))
                took = stand(block, lo, hi)
                if took:
                    yield k + lo + took, None, 0
                for i in range(lo + took, hi):
                    yield k + i + 1, jobs[i], needs[i]
            k += len(jobs)
            continue
        sieve = holder.sieve
        if sieve is not None:
            # might one of its jobs pass?  (exact, from the block's summary)
            upper, horizon, lasting = sieve
            walls = block.walls or block.summarise()
            least = block.least
            if least[-1] > lasting:
                i = bisect_right(walls, horizon)
                if not i or least[i - 1] > upper:
                    holder.passed += len(block.jobs)
                    k += len(block.jobs)
                    continue
        needs = block.needs
        for i, job in enumerate(block.jobs):
            sieve = holder.sieve
            if sieve is not None and needs[i] > (sieve[2] if job.walltime > sieve[1] else sieve[0]):
                holder.passed += 1
                continue
            yield k + i + 1, job, needs[i]
        k += len(block.jobs)


class Cursor(Sieved):
    """One reading of a backlog in order, narrowed by its sieve (see Sieved)."""

    in_order = True

    def __init__(self, blocks: list[_Block]):
        self._blocks = blocks
        self.sieve = None
        self.passed = 0

    def __iter__(self) -> Iterator[Job]:
        return self.resume() or map(_SECOND, read(self._blocks, self))


class Backlog:
    """Jobs sorted by a unique key (the policy's key, then the job id)."""

    def __init__(self, entries: list[tuple] = ()):
        """`entries`: (key, job, need) already sorted by key."""
        self._blocks: list[_Block] = []
        self._maxes: list = []  # each block's last key
        for i in range(0, len(entries), BLOCK):
            part = entries[i:i + BLOCK]
            self._blocks.append(_Block([e[0] for e in part], [e[1] for e in part], [e[2] for e in part]))
            self._maxes.append(part[-1][0])
        self._len = len(entries)

    def __len__(self) -> int:
        return self._len

    def last(self) -> Job:
        return self._blocks[-1].jobs[-1]

    def cursor(self) -> Cursor:
        return Cursor(self._blocks)

    def read(self, holder: Sieved) -> Iterator[tuple[int, Job, int]]:
        """(position from 1, job, need) in order, narrowed by `holder`'s sieve."""
        return read(self._blocks, holder)

    def __iter__(self) -> Iterator[Job]:
        for block in self._blocks:
            yield from block.jobs

    def at(self, k: int) -> Job:
        """The job at position `k` (from 1)."""
        for block in self._blocks:
            if k <= len(block.jobs):
                return block.jobs[k - 1]
            k -= len(block.jobs)
        raise IndexError(k)

    def add(self, key, job: Job, need: int) -> None:
        if not self._blocks:
            self._blocks.append(_Block([key], [job], [need]))
            self._maxes.append(key)
            self._len = 1
            return
        i = min(bisect_left(self._maxes, key), len(self._blocks) - 1)
        b = self._blocks[i]
        b.insert(bisect_left(b.keys, key), key, job, need)
        self._maxes[i] = b.keys[-1]
        self._len += 1
        if len(b.keys) > 2 * BLOCK:  # split in two
            half = len(b.keys) // 2
            tail = _Block(b.keys[half:], b.jobs[half:], b.needs[half:])
            del b.keys[half:], b.jobs[half:], b.needs[half:]
            b.walls = None
            self._blocks.insert(i + 1, tail)
            self._maxes[i] = b.keys[-1]
            self._maxes.insert(i + 1, tail.keys[-1])

    def remove(self, key) -> None:
        i = bisect_left(self._maxes, key)
        b = self._blocks[i]
        k = bisect_left(b.keys, key)
        if b.keys[k] != key:
            raise KeyError(key)
        b.delete(k)
        self._len -= 1
        if b.keys:
            self._maxes[i] = b.keys[-1]
        else:
            del self._blocks[i], self._maxes[i]
