"""What every PBS-style command shares: job ids, state letters, errors and exit codes.

Exit statuses follow PBS (error code mod 256): 153 unknown job, 35 finished job (OpenPBS
without -x), 188 limits, 170/172 unknown queue, 159 unauthorized, 2 usage.
"""
from __future__ import annotations

import re
import sys

from .errors import ConfigError, SchedulerError
from .jobs import Hold, Job, State

UNKNOWN_JOB = 153
FINISHED = 35
LIMITS = 188
UNAUTHORIZED = 159
BAD_STATE = 170  # PBSE_BADSTATE 15018 mod 256
USAGE = 2
SYSTEM = 1

VERSION = "0.1.0"


class CommandError(Exception):
    """One line for stderr and the exit status that goes with it."""

    def __init__(self, message: str, status: int = SYSTEM):
        super().__init__(message)
        self.status = status


def full_id(job_id: int, server: str) -> str:
    return f"{job_id}.{server}"


_ID = re.compile(r"^(\d+)(?:\.(\S+))?$")


def parse_id(text: str) -> int:
    """`123`, `123.server` or `123.server.domain` -> 123; CommandError for anything else."""
    m = _ID.match(text.strip())
    if not m:
        raise CommandError(f"illegally formed job identifier: {text}", UNKNOWN_JOB)
    return int(m.group(1))


def state_letter(job: Job, flavor: str) -> str:
    s = job.state
    if s == State.RUNNING:
        return "R"
    if s == State.EXITING:
        return "E"
    if s in (State.COMPLETED, State.DELETED):
        return "C" if flavor == "torque" else "F"
    if s in (State.HELD, State.DEP_HOLD, State.DEP_FAIL):
        return "H"
    if s == State.WAITING:
        return "W"
    return "Q"


def hold_letters(job: Job) -> str:
    """PBS Hold_Types: some of u, o, s (dependency holds count as s), or n."""
    kinds = {h.value for h in job.holds}
    if job.state in (State.DEP_HOLD, State.DEP_FAIL):
        kinds.add(Hold.SYSTEM.value)
    return "".join(k for k in "uos" if k in kinds) or "n"


def fail(prog: str, err: Exception) -> int:
    """Print one line for `err` and return its exit status."""
    if isinstance(err, CommandError):
        status = err.status
    elif isinstance(err, ConfigError):
        status = SYSTEM
    elif isinstance(err, SchedulerError):
        status = SYSTEM
    else:
        status = SYSTEM
    sys.stderr.write(f"{prog}: {err}\n")
    return status
