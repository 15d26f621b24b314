"""The Standard Workload Format (Parallel Workloads Archive), read and written.

`read(path)` streams records one at a time (plain or gzipped), so a 450,000-job trace is
never held twice; `header(path)` parses the `; Label: Value` comments.  -1 means unknown
in every field.  A malformed line raises SwfError naming its line number, unless the
reader is told to skip such lines (it then counts them).
"""
from __future__ import annotations

import gzip
import io
import math
import re
from dataclasses import dataclass, field
from typing import IO, Iterator, NamedTuple

from ..core.errors import SchedulerError

FIELDS = ("job", "submit", "wait", "run", "procs", "cpu", "mem", "req_procs", "req_time", "req_mem",
          "status", "user", "group", "app", "queue", "partition", "prev_job", "think")


class SwfError(SchedulerError):
    """A malformed SWF line or file."""


class Record(NamedTuple):
    """One SWF line, the 18 fields in order (times may be fractional)."""

    job: int
    submit: float
    wait: float
    run: float
    procs: int
    cpu: float
    mem: float
    req_procs: int
    req_time: float
    req_mem: float
    status: int
    user: int
    group: int
    app: int
    queue: int
    partition: int
    prev_job: int
    think: float


_INT = frozenset({0, 4, 7, 10, 11, 12, 13, 14, 15, 16})


@dataclass
class Header:
    """The header comments: `fields` by label (repeated labels such as Note and Queue
    keep every value in order), with typed shortcuts for the common ones."""

    fields: dict[str, list[str]] = field(default_factory=dict)

    def get(self, label: str, default: str | None = None) -> str | None:
        values = self.fields.get(label.lower())
        return values[0] if values else default

    def number(self, label: str) -> int | None:
        value = self.get(label)
        if value is None or not value.split():
            return None
        digits = value.split()[0].split("(")[0]
        try:
            return int(float(digits))
        except (ValueError, OverflowError):  # (nan, inf)
            return None

    @property
    def max_nodes(self) -> int | None:
        return self.number("MaxNodes")

    @property
    def max_procs(self) -> int | None:
        return self.number("MaxProcs")

    @property
    def unix_start_time(self) -> int | None:
        return self.number("UnixStartTime")

    @property
    def time_zone(self) -> str | None:
        return self.get("TimeZoneString")


def _open(path) -> IO[str]:
    if hasattr(path, "read"):
        return path
    raw = open(path, "rb")
    magic = raw.peek(2)[:2] if hasattr(raw, "peek") else b""
    if magic == b"\x1f\x8b":
        return io.TextIOWrapper(gzip.GzipFile(fileobj=raw), encoding="utf-8", errors="replace")
    return io.TextIOWrapper(raw, encoding="utf-8", errors="replace")


def parse_header_line(line: str, header: Header) -> None:
    text = line.lstrip(";").strip()
    label, colon, value = text.partition(":")
    if colon and label.strip() and " " not in label.strip():
        header.fields.setdefault(label.strip().lower(), []).append(value.strip())


def header(path) -> Header:
    """The header of the trace at `path` (read up to the first record only)."""
    h = Header()
    with _open(path) as f:
        for line in f:
            if line.startswith(";"):
                parse_header_line(line, h)
            elif line.strip():
                break
    return h


_new = tuple.__new__
#: what SWF writes: a decimal number (an exponent allowed); not nan, inf or 1_0
_DECIMAL = re.compile(r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")


def parse_line(line: str, lineno: int) -> Record:
    v = line.split()
    if len(v) != 18:
        raise SwfError(f"line {lineno}: expected 18 fields, found {len(v)}")
    if "n" in line or "N" in line or "_" in line or "e" in line or "E" in line:
        # nan, inf, 1_0, 1e999 (= inf): Python's float() takes them; the slow path checks
        return _parse_slow(v, lineno)
    try:  # spelled out: this is the reader's inner loop
        # (tuple.__new__ directly: a NamedTuple's own __new__ is a Python function)
        return _new(Record, (int(v[0]), float(v[1]), float(v[2]), float(v[3]), int(v[4]), float(v[5]),
                             float(v[6]), int(v[7]), float(v[8]), float(v[9]), int(v[10]), int(v[11]),
                             int(v[12]), int(v[13]), int(v[14]), int(v[15]), int(v[16]), float(v[17])))
    except ValueError:
        return _parse_slow(v, lineno)


def _parse_slow(parts: list[str], lineno: int) -> Record:
    """Integer fields written as whole floats ("4.0") are accepted; anything else is an error."""
    values = []
    for i, p in enumerate(parts):
        if not _DECIMAL.fullmatch(p):
            raise SwfError(f"line {lineno}: field {FIELDS[i]} is not a number: {p!r}")
        x = float(p)
        if not math.isfinite(x):
            raise SwfError(f"line {lineno}: field {FIELDS[i]} is out of range: {p!r}")
        if i in _INT:
            if not x.is_integer():
                raise SwfError(f"line {lineno}: field {FIELDS[i]} is not a whole number: {p!r}")
            x = int(x)
        values.append(x)
    return Record(*values)


@dataclass
class ReadStats:
    records: int = 0
    skipped: int = 0  # malformed lines passed over (skip_bad=True)
    first_bad: str = ""  # the first such line's error


def read(path, skip_bad: bool = False, stats: ReadStats | None = None,
         header_out: Header | None = None) -> Iterator[Record]:
    """Yield the records of a trace one by one."""
    stats = stats if stats is not None else ReadStats()
    with _open(path) as f:
        for lineno, line in enumerate(f, 1):
            if line.startswith(";"):
                if header_out is not None:
                    parse_header_line(line, header_out)
                continue
            if not line.strip():
                continue
            try:
                rec = parse_line(line, lineno)
            except SwfError as e:
                if not skip_bad:
                    raise
                stats.skipped += 1
                stats.first_bad = stats.first_bad or str(e)
                continue
            stats.records += 1
            yield rec


def format_record(rec) -> str:
    """One SWF line: integers where the value is whole, as the archive writes them."""
    out = []
    for v in rec:
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        out.append(str(v) if not isinstance(v, float) else f"{v:.2f}")
    return " ".join(f"{s:>6}" for s in out)


def write(out: IO[str], records, comments: list[str] = ()) -> int:
    """Write header comment lines (without the `; `) and records; returns the count."""
    for c in comments:
        out.write(f"; {c}\n")
    n = 0
    for rec in records:
        out.write(format_record(rec) + "\n")
        n += 1
    return n
