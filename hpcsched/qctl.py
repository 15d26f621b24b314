"""qdel, qhold, qrls: act on jobs by id, with PBS's permissions and messages.

Silent on success.  Each id is handled on its own: an unknown one prints `Unknown Job Id`
and sets exit status 153, the others still go through.
"""
from __future__ import annotations

import sys
from typing import Callable

from . import pbs
from .batch import Batch
from .errors import ConfigError, InvalidState, SchedulerError
from .jobs import FINISHED, Hold, Job
from .qsub import version
from .site import Site, load_site, whoami


def may_touch(site: Site, user: str, job: Job, hold: str = "u") -> bool:
    """PBS: owners act on their own jobs (user holds); operators also on others' and on
    operator holds; system holds are for managers."""
    if hold == "s":
        return site.is_manager(user)
    if hold == "o":
        return site.is_operator(user)
    return user == job.owner or site.is_operator(user)


def act(prog: str, argv: list[str], usage: str, options: str,
        action: Callable[[Batch, Job, dict], None], every: bool = False, flags: str = "") -> int:
    """Parse `-X value` options in `options` (and bare `flags`), then apply `action` to
    each job id."""
    opts, ids, i = {}, [], 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("-") and len(arg) > 1:
            letter = arg[1]
            if letter in flags and len(arg) == 2:
                opts[letter] = True
                i += 1
                continue
            if letter not in options:
                raise pbs.CommandError(f"invalid option -- '{letter}'\n{usage}", pbs.USAGE)
            value = arg[2:]
            if not value:
                i += 1
                if i >= len(argv):
                    raise pbs.CommandError(f"option requires an argument -- '{letter}'\n{usage}", pbs.USAGE)
                value = argv[i]
            opts[letter] = value
        else:
            ids.append(arg)
        i += 1
    if not ids:
        raise pbs.CommandError(f"no job id given\n{usage}", pbs.USAGE)
    site = load_site()
    user = whoami()
    batch = Batch(site)
    status = 0
    with batch.open(write=True):
        sched = batch.sched
        if every and ids == ["all"]:
            ids = [str(j.id) for j in sched.jobs.values()
                   if j.state not in FINISHED and (j.owner == user or site.is_operator(user))]
        for text in ids:
            try:
                jid = pbs.parse_id(text)
                job = sched.jobs.get(jid)
                if job is None:
                    raise pbs.CommandError(f"Unknown Job Id {pbs.full_id(jid, site.server)}", pbs.UNKNOWN_JOB)
                action(batch, job, opts)
            except pbs.CommandError as e:
                sys.stderr.write(f"{prog}: {e}\n")
                status = status or e.status
            except InvalidState:
                sys.stderr.write(f"{prog}: Request invalid for state of job {pbs.full_id(jid, site.server)}\n")
                status = status or pbs.BAD_STATE
    return status


def _deny(prog: str, job: Job, site: Site) -> pbs.CommandError:
    return pbs.CommandError(f"Unauthorized Request  {pbs.full_id(job.id, site.server)}", pbs.UNAUTHORIZED)


def qdel(batch: Batch, job: Job, opts: dict) -> None:
    if not may_touch(batch.site, whoami(), job):
        raise _deny("qdel", job, batch.site)
    batch.do("delete", id=job.id)


def _hold_kind(opts: dict) -> str:
    kinds = opts.get("h", "u")
    if not kinds or any(k not in "uos" for k in kinds):
        raise pbs.CommandError(f"illegal -h value {kinds!r}", pbs.USAGE)
    return kinds


def _holds(op: str):
    """qhold (op "hold") or qrls (op "release"): every kind in -h, each checked first."""
    def act_on(batch: Batch, job: Job, opts: dict) -> None:
        kinds = _hold_kind(opts)
        for k in kinds:
            if not may_touch(batch.site, whoami(), job, k):
                raise _deny(f"q{op}", job, batch.site)
        for k in kinds:
            batch.do(op, id=job.id, kind=Hold(k).value)
    return act_on


qhold, qrls = _holds("hold"), _holds("release")


def _main(prog: str, usage: str, options: str, action, every: bool = False, flags: str = "") -> int:
    argv = sys.argv[1:]
    if argv[:1] == ["--version"]:
        return version(prog)
    try:
        return act(prog, argv, usage, options, action, every, flags)
    except (pbs.CommandError, ConfigError, SchedulerError, OSError) as e:
        return pbs.fail(prog, e)


def main_qdel() -> int:
    return _main("qdel", "usage: qdel [-p] [-x] [-W delay|force] job_id ... | all", "W", qdel, every=True,
                 flags="px")


def main_qhold() -> int:
    return _main("qhold", "usage: qhold [-h u|o|s] job_id ...", "h", qhold)


def main_qrls() -> int:
    return _main("qrls", "usage: qrls [-h u|o|s] job_id ...", "h", qrls)
