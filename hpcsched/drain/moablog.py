"""Moab's node-status log lines, read streaming into Accounts and written per day.

    2014-12-31T00:03:19.696-0600 21166 INFO Node '27453' status: state='Idle' rsvlist='1292428,1292433' joblist='none'

Reading: files in the order given (gzip by name), each its own period as the paper has it
(a node's last sample in a file accrues nothing).  Lines without a node status are
skipped and counted; a status line that does not parse is counted and its file and line
number kept (the first few), never fatal.

The hot path (`_read_one`) looks at a line only as far as it must: a node whose status
text is the same as in its last sample only moves its last-seen time, and time accrues
when the status changes or the file ends, for the whole run of equal samples at once;
blocks of such lines are checked and looked up a block at a time.
"""
from __future__ import annotations

import gzip
import os
import time
from datetime import datetime
from collections import deque
from functools import partial
from itertools import repeat
from operator import itemgetter, setitem
from pathlib import Path

from .accounts import STATES, Accounts, combo

_STATE = {s: i for i, s in enumerate(STATES)}
_IDLE = _STATE["Idle"]
_MARK = "' status: state='"
KEEP_ERRORS = 20


class Quality:
    """What reading the logs met besides good samples."""

    def __init__(self):
        self.files = 0
        self.lines = 0
        self.samples = 0
        self.unrelated = 0
        self.malformed = 0
        self.errors: list[str] = []  # "file:line: why" for the first KEEP_ERRORS

    def bad(self, path: str, lineno: int, why: str) -> None:
        self.malformed += 1
        if len(self.errors) < KEEP_ERRORS:
            self.errors.append(f"{path}:{lineno}: {why}")

    def to_json(self) -> dict:
        return dict(vars(self))


def line(t: float, node: str, state: str, rsv: list[str] | tuple, jobs: list[str] | tuple,
         offset: float = 0.0, iteration: int = 0) -> str:
    """One status line; `offset` is the UTC offset (seconds) the stamp is written in."""
    local = t + offset
    whole = int(local // 1)
    ms = int(round((local - whole) * 1000))
    if ms == 1000:
        whole, ms = whole + 1, 0
    sign = "-" if offset < 0 else "+"
    hh, mm = divmod(int(abs(offset)) // 60, 60)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{ms:03d}{sign}{hh:02d}{mm:02d}"
    return (f"{stamp} {iteration} INFO Node '{node}' status: state='{state}' "
            f"rsvlist='{','.join(rsv) or 'none'}' joblist='{','.join(jobs) or 'none'}'\n")


def _open(path: str):
    return gzip.open(path, "rb") if str(path).endswith(".gz") else open(path, "rb")


def read(paths, accounts: Accounts | None = None, quality: Quality | None = None) -> tuple[Accounts, Quality]:
    """Accumulate every file of `paths` (in order) into `accounts`."""
    accounts = accounts if accounts is not None else Accounts()
    quality = quality if quality is not None else Quality()
    for path in paths:
        try:
            with _open(path) as f:
                quality.files += 1
                _read_one(f, str(path), accounts, quality)
        except (OSError, EOFError) as e:  # unreadable, or a damaged gzip stream
            raise OSError(f"{path}: {getattr(e, 'strerror', None) or e}") from None
    return accounts, quality


#: the furthest a file's stamps may leap ahead of every stamp before them (a month): a
#: damaged year (9999 for 2014) accrued its node's state over every day between, hours
#: and gigabytes for a three-line file
MAX_LEAP = 31 * 86400.0


class Leap(ValueError):
    """A stamp further ahead of the file's stamps before it than MAX_LEAP."""


class _Clock:
    """Time stamps to epoch seconds.  Lines of one iteration share the stamp's whole
    second, so `valid` checks most stamps with one comparison; `__call__` parses."""

    def __init__(self, accounts: Accounts):
        self.second = b"?"  # the last whole second parsed: b"YYYY-MM-DDTHH:MM:SS"
        self.zone = b""  # and its offset: b"-0600"
        self.base = 0.0
        self.latest: float | None = None  # the latest stamp taken so far
        self.accounts = accounts  # given the first stamp's UTC offset (days start at local midnight)

    def valid(self, text: bytes) -> bool:
        """Does `text` start with a time stamp?  (Parses it if the cache cannot say.)"""
        try:
            self(text[:text.find(b" ")])
        except ValueError:
            return False
        return True

    def __call__(self, stamp: bytes) -> float:
        if len(stamp) == 28 and stamp[19:20] == b"." and stamp[20:23].isdigit():
            if stamp[:19] != self.second or stamp[23:] != self.zone:
                self.base = self._taken(self._parse(stamp[:19] + stamp[23:]))
                self.second, self.zone = stamp[:19], stamp[23:]
            return self.base + int(stamp[20:23]) / 1000
        return self._taken(self._parse(stamp))

    def _taken(self, t: float) -> float:
        if self.latest is not None and t > self.latest + MAX_LEAP:
            raise Leap(f"time leaps {(t - self.latest) / 86400:.0f} days ahead of the lines before")
        if self.latest is None or t > self.latest:
            self.latest = t
        return t

    def _parse(self, stamp: bytes) -> float:
        d = datetime.fromisoformat(stamp.decode("ascii", "replace"))  # ValueError if not a time
        if d.tzinfo is None:
            raise ValueError("no UTC offset")
        if self.accounts.offset is None:
            self.accounts.offset = d.utcoffset().total_seconds()
        return d.timestamp()


_BMARK = _MARK.encode()
_NODE = b"Node '"
_CHUNK = 1 << 20
_BLOCK = 256  # lines checked at once on the block path
consume = partial(deque, maxlen=0)  # runs an iterator to its end in C


def _read_one(f, path: str, acc: Accounts, q: Quality) -> None:
    # A node's run of equal samples: [key, run start, last line seen, combination, charge,
    # job ids], where the key is the line from the node's id on ("27453' status: ...").
    # `current` maps each node's key to its run, so an unchanged sample is one lookup.
    #
    # Lines go a block at a time: when every line of a block carries the stamp second last
    # checked and its node id at one offset, their keys are cut and looked up by map() in
    # C, and a line whose key is a run's only moves that run's last line.  The rest go
    # through `one`, the line-by-line reader (the specification: tests check the two
    # against a plain reference reader).
    current: dict[bytes, list] = {}
    by_node: dict[bytes, list] = {}
    get = current.get
    clock = _Clock(acc)
    valid = clock.valid
    add, seen_running, seen_on = acc.add, acc.seen_running, acc.seen_on
    stamp = [b"?", b"?"]  # the stamp second (b"YYYY-MM-DDTHH:MM:SS") and zone (b"-0600 ") last checked
    rekeyed: set[int] = set()  # ids of runs `one` moved to a new status since the block began
    mark = _BMARK

    def one(lineno: int, text: bytes) -> int:
        """Read one line; 1 if it is not a good sample."""
        key = text[text.find(_NODE, 28) + 6:]
        run = get(key)
        if run is not None:  # the same status as the node's last sample: the run goes on
            if text.startswith(stamp[0]) and text[23:29] == stamp[1]:
                run[2] = text
                return 0
            if valid(text):
                stamp[:] = clock.second, clock.zone + b" "
                run[2] = text
                return 0
        i = text.find(mark)
        if i < 0:
            if b"status:" in text and _NODE in text:
                q.bad(path, lineno, "a node status line without state='...'")
            else:
                q.unrelated += 1
            return 1
        # a new node, its status changed, or the stamp did not look right: parse the line
        parsed = _status(text[i:])
        try:
            t = clock(text[:text.find(b" ")])
        except Leap as e:
            q.bad(path, lineno, str(e))
            return 1
        except ValueError:
            parsed = None
        if parsed is None or text.rfind(_NODE, 0, i) < 0:
            q.bad(path, lineno, "not <time stamp> ... Node '<id>' status: state='<state>' "
                  "rsvlist='..' joblist='..' with a known state")
            return 1
        c, charge, jobs = parsed
        node = text[text.rfind(b"'", 0, i) + 1:i]
        key = text[text.rfind(b"'", 0, i) + 1:]
        run = by_node.get(node)
        if run is None:
            run = by_node[node] = [key, t, text, c, charge, jobs]
            current[key] = run
            acc.nodes.add(node.decode("utf-8", "replace"))
            return 0
        last = run[2]  # (ISO stamps of one zone sort as times: parse only when they may not)
        if not (last[23:29] == text[23:29] and last[19:20] == b"." and last[:23] <= text[:23]) \
                and t < _time(clock, run):
            q.bad(path, lineno, f"time goes back for node {node.decode('utf-8', 'replace')}")
            return 1
        _close(run, t, node, add, seen_running, seen_on)
        del current[run[0]]
        run[:] = [key, t, text, c, charge, jobs]
        current[key] = run
        rekeyed.add(id(run))
        return 0

    lineno, skipped = _read_blocks(f, one, get, stamp, rekeyed)
    q.lines += lineno
    q.samples += lineno - skipped
    for node, run in by_node.items():  # a node's last sample accrues nothing
        _close(run, _time(clock, run), node, add, seen_running, seen_on)



def _read_blocks(f, one, get, stamp: list, rekeyed: set) -> tuple[int, int]:
    """`_read_one`'s loop over the file a block at a time (see there): (lines read, lines
    `one` found no good sample)."""
    lineno = skipped = 0
    while True:
        lines = f.readlines(_CHUNK)
        if not lines:
            break
        pos, end = 0, len(lines)
        while pos < end:
            block = lines[pos:pos + _BLOCK]
            first = lineno + pos + 1  # block[0]'s line number
            head = block[0]
            k = head.find(_NODE, 28) + 6
            second, zone = stamp
            if k <= 6 or head[23:29] != zone or not head.startswith(second):
                skipped += one(first, head)  # (which checks a new second's stamp)
                pos += 1
                continue
            # the block: the lines up to the first without the stamp second last checked or,
            # from its zone to the node id, what the first line has (the zone, the number
            # after the stamp, "INFO Node '"); the next block begins at that line
            for same in (list(map(bytes.startswith, block, repeat(second))),
                         list(map(bytes.startswith, block, repeat(head[23:k]), repeat(23)))):
                if False in same:
                    block = block[:same.index(False)]
            runs = list(map(get, map(itemgetter(slice(k, None)), block)))
            rekeyed.clear()
            at, n = 0, len(block)
            while at < n:
                try:
                    stop = runs.index(None, at)
                except ValueError:
                    stop = n
                if stop > at:
                    seg = runs[at:stop]
                    if rekeyed and not rekeyed.isdisjoint(map(id, seg)):  # looked up before it moved
                        for i in range(at, stop):
                            skipped += one(first + i, block[i])
                    else:  # run[2] = text, for each
                        consume(map(setitem, seg, repeat(2), block[at:stop]))
                if stop < n:
                    skipped += one(first + stop, block[stop])
                at = stop + 1
            pos += n
        lineno += len(lines)
    return lineno, skipped


def _time(clock: _Clock, run: list) -> float:
    """When the run's last sample was taken (its stamp was checked when read)."""
    text = run[2]
    try:
        return clock(text[:text.find(b" ")])
    except ValueError:  # (the fast path checked all but its milliseconds)
        return run[1]


def _close(run: list, t: float, node: bytes, add, seen_running, seen_on) -> None:
    """The run of equal samples ends at `t`: accrue it."""
    dt = t - run[1]
    if dt <= 0:
        return
    name = node.decode("utf-8", "replace")
    add(run[3], run[1], t, name, run[4])
    for jid in run[5]:
        seen_running[jid] = seen_running.get(jid, 0.0) + dt
        seen_on.setdefault(jid, set()).add(name)


def _status(status: bytes):
    """(combination, drain charge, job ids) of b"' status: state='Idle' rsvlist='..' joblist='..'"."""
    parts = status.decode("utf-8", "replace").split("'")
    # ["", " status: state=", state, " rsvlist=", rsv, " joblist=", jobs, "\n"]
    if len(parts) != 8 or parts[3] != " rsvlist=" or parts[5] != " joblist=" or parts[7].strip():
        return None
    s = _STATE.get(parts[2])
    if s is None:
        return None
    rsv, jobs = parts[4], parts[6]
    if not rsv or not jobs:
        return None
    has_rsv, has_job = rsv != "none", jobs != "none"
    charge = rsv.split(",", 1)[0] if has_rsv and s == _IDLE and not has_job else None
    return combo(s, has_rsv, has_job), charge, (jobs.split(",") if has_job else ())


class DailyWriter:
    """Appends status lines to DIR/YYYYMMDD (one file per local day, made as needed)."""

    def __init__(self, directory: str | os.PathLike, offset: float = 0.0, suffix: str = ""):
        self.directory = Path(directory)
        self.offset, self.suffix = offset, suffix
        self.day: str | None = None
        self.f = None

    def write(self, t: float, samples, iteration: int = 0) -> None:
        """`samples`: (node, state, rsvlist, joblist) of every node at time `t`."""
        day = time.strftime("%Y%m%d", time.gmtime(t + self.offset))
        if day != self.day:
            self.close()
            self.directory.mkdir(parents=True, exist_ok=True)
            path = self.directory / (day + self.suffix)
            self.f = gzip.open(path, "at", encoding="utf-8") if self.suffix == ".gz" else open(path, "a")
            self.day = day
        self.f.write("".join(line(t, n, s, r, j, self.offset, iteration) for n, s, r, j in samples))

    def close(self) -> None:
        if self.f is not None:
            self.f.close()
            self.f = None
