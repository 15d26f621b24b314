"""What the server's parts share: its log, a run's phase (Phase: the run-phase state
machine, read from the job's records), exit statuses and timings, file helpers."""
from __future__ import annotations

import os
import shutil
import sys
import time
from enum import Enum
from pathlib import Path

from ..core.jobs import RUNNING, Job
from . import remote
from .tracking import process_start


LOST = -1  # exit status of a job whose process vanished without one
INTERACTIVE_WAIT = 60.0  # seconds a started interactive job waits for its qsub -I
STARTING = 30.0  # seconds a wrapper found past `started` has to write its pid before its run is lost
FAULT_RETRY = 60.0  # seconds before the server tries again what failed in its own code


#: where the log goes: the server's stderr, or the file `hpcsched server --log` names
LOG = None
def open_log(path: str) -> None:
    """Append the log to `path` (made the server's user's alone to read), from now on."""
    global LOG
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    LOG = open(fd, "a", buffering=1, encoding="utf-8", errors="replace")


def log(message: str) -> None:
    """One line (or a traceback's lines) of the server's log, stamped with the local time as
    pbs_server stamps its own: on its stderr (under systemd, journald keeps it) or in the
    file --log names."""
    out = LOG or sys.stderr
    out.write(f"{time.strftime('%m/%d/%Y %H:%M:%S')} hpcsched server: {message}\n")
    out.flush()


POLL = 1.0  # seconds between looks at what a job uses, when it has a cput, mem or vmem limit
PEAK_EVERY = 45.0  # seconds between notes of a running job's peak memory (pbs_mom's status interval)


class Phase(str, Enum):
    """Where a run of a job is as the server drives it, read from what its records noted
    (phase()).  Its transitions, each with the event that causes it:

        STARTING -> RUNNING           its launch (a `process` record: launched, its pid)
        STARTING -> (ended)           deleted before its launch; its prologue aborted it
                                      (or failed: requeued held); its launch failed
        RUNNING -> KILLING            past its walltime, cput or memory; qdel; qrerun (the
                                      first signal noted: signal, signalled_at)
        RUNNING, KILLING -> EPILOGUE  its process ended on a site with an epilogue (an
                                      `exiting` record: epilogue_at)
        RUNNING, KILLING -> (ended)   its process ended (an `ended` record), or was lost,
                                      rerun or its node went down (a `requeue` record)
        EPILOGUE -> (ended)           its epilogue ended or timed out
        launched -> PURGED -> (ended) qdel -p or -W force (purge): ended at once

    A requeued run's records are cleared with it: its next run starts again at STARTING.
    """
    STARTING = "starting"
    RUNNING = "running"
    KILLING = "killing"
    EPILOGUE = "epilogue"
    PURGED = "purged"


def phase(job: Job) -> Phase:
    """The run's phase (Phase), from its job's records."""
    x = job.extra
    if "launched" not in x:
        return Phase.STARTING
    if x.get("purge"):
        return Phase.PURGED
    if "epilogue_at" in x:
        return Phase.EPILOGUE
    return Phase.KILLING if x.get("signal") else Phase.RUNNING


def down_note(now: float, why: str) -> str:
    """A node's note when the server marks it down for not answering (pbsnodes -l shows it)."""
    return f"{remote.DOWN_NOTE} since {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(now))}: {why}"


def killed(job: Job) -> bool:
    """Was the job killed past a limit (its walltime, CPU time, memory)?  A deleted job is
    EXITING when signalled; one whose epilogue has run was marked as its process ended."""
    return job.extra.get("killed", job.state == RUNNING and "signal" in job.extra)


def remove(path: str | Path) -> None:
    """Remove a directory tree a job's owner may have filled (never following a link in it:
    shutil.rmtree's descriptor-based walk); a failure is logged, never the server's."""
    try:
        shutil.rmtree(path)
    except FileNotFoundError:
        pass
    except OSError as e:
        log(f"could not remove {path}: {e}")


def wait_start(pid: int) -> str | None:
    """The new process's start time (it exists as soon as Popen returns)."""
    return process_start(pid)
