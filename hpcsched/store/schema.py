"""What a journal record may hold, checked as the store is read.

A record that still parses after damage (a flipped digit, `null` for a table, a negative
count) must be reported, not applied: `check(rec)` returns what is wrong with it, or None.
Each operation names its fields and their kinds; a job's own fields are checked where the
core reads them (a request's counts by Request itself).
"""
from __future__ import annotations

import math

from ..core.jobs import Hold


def _id(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _text(v) -> bool:
    return isinstance(v, str)


def _table(v) -> bool:
    return isinstance(v, dict)


def _ids(v) -> bool:
    return isinstance(v, list) and all(_id(i) for i in v)


def _words(v) -> bool:
    return isinstance(v, list) and all(isinstance(w, str) for w in v)


def _hold(v) -> bool:
    return v in {h.value for h in Hold}


def _status(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


#: operation -> {field: kind}; a field ending in "?" may be absent
OPS = {
    "submit": {"job": _table},
    "submit_array": {"job": _table, "first": _id, "limit?": _status, "numbered?": lambda v: v is True,
                     "indices": lambda v: isinstance(v, list) and all(
                         isinstance(r, list) and len(r) == 2 and all(_status(i) and i >= 0 for i in r) and r[0] <= r[1]
                         for r in v)},
    "delete": {"id": _id},
    "hold": {"id": _id, "kind": _hold},
    "release": {"id": _id, "kind": _hold},
    "alter": {"id": _id, "changes": _table},
    "pass": {},
    "next_id": {"value": _id},
    "run": {"id": _id, "nodes?": _words},
    "ended": {"id": _id, "exit_status": _status, "cpu_time?": lambda v: _number(v) and v >= 0, "set?": _table},
    "exiting": {"id": _id, "exit_status?": _status, "cpu_time?": lambda v: _number(v) and v >= 0, "set?": _table},
    "requeue": {"id": _id},
    "suspend": {"id": _id, "set?": _table},
    "resume": {"id": _id, "set?": _table},
    "forget": {"ids": _ids},
    "reservation": {"reservation": _table},
    "unreserve": {"name": _text},
    "alter_reservation": {"name": _text, "changes": _table},
    "node": {"name": _text, "state?": _text, "note?": _text},
    "process": {"id": _id, "set?": _table, "clear?": _words, "comment?": _text},
    "usage": {"kind": lambda v: v in ("user", "group", "project"), "name?": lambda v: v is None or isinstance(v, str),
              "amount?": lambda v: v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0)},
    "bank": {"kind": lambda v: v in ("deposit", "set", "refund", "charge"), "project": _text,
             "amount": lambda v: _number(v) and v >= 0, "job?": _id, "note?": _text, "user?": _text},
    "big_run": {},
    # the configuration the records after it were made under (config.toml's text, qmgr's
    # changes), journaled by the first writer that finds it changed
    "config": {"toml": _text, "overlay": lambda v: isinstance(v, dict) and isinstance(v.get("server"), dict)
               and isinstance(v.get("queues"), dict)},
}
#: a submitted job's fields the core computes with, and their kinds
JOB = {"id?": lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, "name?": _text,
       "owner?": _text, "group?": _text, "account?": _text, "queue?": _text, "walltime?": _number,
       "priority?": _status, "request?": _table, "extra?": _table,
       "start_after?": lambda v: v is None or _number(v), "deadline?": lambda v: v is None or _number(v),
       "initial_score?": lambda v: v is None or _number(v)}


def _compiled(kinds: dict) -> tuple:
    return tuple((f.rstrip("?"), f.endswith("?"), ok) for f, ok in kinds.items())


_OPS = {op: _compiled(kinds) for op, kinds in OPS.items()}  # (a store's load checks every record)
_JOB = _compiled(JOB)


def check(rec: dict) -> str | None:
    """What is wrong with journal record `rec` (None: nothing)."""
    fields = _OPS.get(rec.get("op"))
    if fields is None:
        return f"unknown operation {rec.get('op')!r}"
    if not _number(rec.get("now")) or rec["now"] < 0:
        return f"time {rec.get('now')!r} is not a time"
    if "next_id" in rec and not _id(rec["next_id"]):
        return f"next_id {rec['next_id']!r} is not a job id"
    wrong = _fields(rec, fields)
    if wrong is None and rec["op"] in ("submit", "submit_array"):
        wrong = _fields(rec["job"], _JOB, "job.")
    return wrong


def _fields(d: dict, fields: tuple, where: str = "") -> str | None:
    for name, optional, ok in fields:
        if name in d:
            if not ok(d[name]):
                return f"{where}{name} {d[name]!r} is not of its kind"
        elif not optional:
            return f"{where}{name} is missing"
    return None
