"""schedctl: Cobalt's scheduler control, for operators.

    schedctl --status                 is the scheduler starting jobs?
    schedctl --stop | --start         stop or start it (qmgr's `set server scheduling`)
    schedctl --score N JOBID ...      set waiting jobs' scores (they order jobs under the
                                      cobalt policy; -s N)
    schedctl --big-run                Big Run Monday: the waiting capability jobs (in a queue
                                      with a min_fraction or min_nodes, not a backfill queue) go to the
                                      front, largest first, then by submission (-B)

The short letters -Q, -T, -S, -s and -B are the same options.
"""
from __future__ import annotations

import io
import math

from ..core.errors import InvalidRequest
from ..core.jobs import QUEUED
from ..store.journaled import Batch
from ..store.request import current
from ..store.site import load_site, whoami
from . import common
from .common import Command
from .errors import UsageError
from .qctl import act

LONG = {"--status": "-Q", "--stop": "-T", "--start": "-S", "--score": "-s", "--big-run": "-B"}
USAGE = "usage: schedctl --status | --stop | --start | --score N job_id ... | --big-run"


class _Schedctl(Command):
    def parse(self, argv: list[str]):
        return super().parse([LONG.get(a, a) for a in argv])


def schedctl(opts: list[tuple[str, str]], operands: list[str], out, now: float) -> int:
    o = dict(opts)
    if len(o) != 1:
        raise UsageError("give one of --status, --stop, --start, --score, --big-run")
    if operands and "s" not in o:  # (only --score takes job ids)
        raise UsageError(f"unexpected argument {operands[0]!r}")
    site, user = load_site(), whoami()
    if "Q" in o:
        out.write(f"scheduling is {'active' if site.config.get('scheduling', True) else 'stopped'}\n")
        return 0
    if not site.is_operator(user):
        raise common.CommandError(f"schedctl: user {user} is not an operator", common.UNAUTHORIZED)
    if "S" in o or "T" in o:
        from .qmgr import Qmgr
        if not site.is_manager(user):
            raise common.CommandError(f"schedctl: user {user} is not a manager", common.UNAUTHORIZED)
        Qmgr(io.StringIO()).run(f"set server scheduling = {'True' if 'S' in o else 'False'}")
        out.write(f"scheduling {'started' if 'S' in o else 'stopped'}\n")
        return 0
    if "s" in o:
        try:
            score = float(o["s"])
        except ValueError:
            score = math.nan
        if not math.isfinite(score):
            raise UsageError(f"illegal score {o['s']!r}")

        def set_score(batch: Batch, job, _opts) -> None:
            if job.state != QUEUED:
                raise common.CommandError(f"job {common.display_id(job, batch.site.server)} is not waiting",
                                          common.BAD_STATE)
            batch.do("alter", now, id=job.id, changes={"score": score})
        return act("schedctl", operands, set_score)
    return _big_run(site, out, now)


def _big_run(site, out, now: float) -> int:
    """Capability jobs to the front, largest first: scores above every other waiting job's
    (Scheduler.big_run, one journal record)."""
    batch = Batch.of(site)
    with batch.open(write=True):
        try:
            chosen = batch.do("big_run", now)
        except InvalidRequest as e:
            raise common.CommandError(f"schedctl: {e}", common.BAD_STATE) from None
        sched = batch.sched
    for job in chosen:
        out.write(f"{common.display_id(job, site.server)} {sched.size(job)} nodes: score {job.score:g}\n")
    if not chosen:
        out.write("no capability job is waiting\n")
    return 0


SCHEDCTL = _Schedctl("schedctl", "QTSs:B", USAGE, schedctl, changes=True)


def qterm(opts: list[tuple[str, str]], operands: list[str], out, now: float) -> int:
    """PBS's qterm (managers): the server stops after this answer; running jobs go on
    (`-t quick`, the only kind), and a server started again takes them back."""
    if operands:
        raise UsageError(f"unexpected argument {operands[0]!r}")
    if dict(opts).get("t", "quick") != "quick":
        raise UsageError("only -t quick: running jobs go on (end them with qdel first)")
    site = load_site()
    if not site.is_manager(whoami()):
        raise common.CommandError(f"Unauthorized Request  {site.server}", common.UNAUTHORIZED)
    stop = current().stop
    if stop is None:  # (run here: no server answered)
        raise common.CommandError("cannot connect to the hpcsched server (it is not running)", 1)
    stop()
    return 0


QTERM = Command("qterm", "t:", "usage: qterm [-t quick]", qterm)
