"""A site's submit filter as a Python callable (Cobalt's filters), for qsub and the simulator.

`submit_filter = "module:function"` in the site config names it; the module is looked up
on the site directory first, then on the normal path.  It is called on every submission,
before the job is routed, as

    function(job, scheduler, now) -> None | str

and may change the job (its queue, account, walltime, request, or its starting `score`:
Cobalt's initial score per project program and allocation status; the scheduler is there
to read, e.g. `scheduler.bank.standing(job.account, now)`).  Returning a string refuses the
job with that message.  A filter that raises, or takes longer than TIMEOUT seconds,
refuses the job with one line; it never takes qsub or the server down.
"""
from __future__ import annotations

import importlib
import signal
import sys
import threading
from pathlib import Path

from .core.errors import ConfigError, Rejected
from .core.jobs import Job

TIMEOUT = 10.0  # seconds a Python filter may take (as an executable's FILTER_TIMEOUT)


def load(spec: str, home: str | Path | None = None):
    """The callable `spec` names ("module:function"); ConfigError if it cannot be had."""
    module_name, _, name = spec.partition(":")
    if not module_name or not name:
        raise ConfigError(f"submit_filter: {spec!r} is not module:function")
    added = home is not None and str(home) not in sys.path
    if added:
        sys.path.insert(0, str(home))
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # an import error, or the module's own code failing
        raise ConfigError(f"submit_filter: cannot import {module_name}: {e}") from None
    finally:
        if added:
            sys.path.remove(str(home))
    fn = getattr(module, name, None)
    if not callable(fn):
        raise ConfigError(f"submit_filter: {module_name} has no function {name}")
    return fn


class _Late(Exception):
    pass


def apply(fn, job: Job, sched, now: float, timeout: float | None = None) -> None:
    """Run the filter on `job`; Rejected with its message if it refuses or fails.  A score
    it sets becomes the job's starting score."""
    timeout = TIMEOUT if timeout is None else timeout
    before = job.score
    timed = threading.current_thread() is threading.main_thread() and timeout > 0

    def late(*_):
        raise _Late()

    if timed:
        previous = signal.signal(signal.SIGALRM, late)
        signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        answer = fn(job, sched, now)
    except _Late:
        raise Rejected(f"the submit filter did not answer within {timeout:g} s") from None
    except Exception as e:
        raise Rejected(f"the submit filter failed: {type(e).__name__}: {e}") from None
    finally:
        if timed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
    if answer is not None:
        raise Rejected(str(answer).strip().splitlines()[0] if str(answer).strip() else "refused by the submit filter")
    if job.score != before:
        job.initial_score = float(job.score)
