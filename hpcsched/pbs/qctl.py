"""qdel, qhold, qrls: act on jobs by id, with PBS's permissions and messages.

Silent on success.  Each id is handled on its own: an unknown one prints `Unknown Job Id`
and sets exit status 153, the others still go through.
"""
from __future__ import annotations

import os
import re
import sys
import time as _time
from typing import Callable

from ..core.errors import BadDependency, InvalidState, Rejected, SchedulerError
from ..core.jobs import EXITING, FINISHED, PENDING, RUNNING, Hold, Job
from ..store.journaled import Batch
from ..store.request import current
from ..store.site import load_site, whoami
from . import accounting, common, siteprog
from .attributes import parse_array, parse_start_after
from .common import Command
from .errors import UsageError


def act(prog: str, ids: list[str], action: Callable[[Batch, Job, dict], None], opts: dict | None = None,
        every: bool = False, only: Callable[[Job], bool] | None = None) -> int:
    """Apply `action` to each job an id names (`all`: every job the caller may touch, if
    `every`), each on its own: one failing prints its line and the others go on.  Of an
    array's subjobs, those ending or finished are left alone, and with `only` those it
    refuses (one line for the array if that leaves none: the caller may not touch it, or
    it is in no state for the request).  Torque's `-t RANGE` (in
    `opts`) names the subjobs of each array id (`123[]` or `123`) in RANGE."""
    opts = opts or {}
    if not ids:
        raise UsageError("no job id given")
    wanted = None
    if "t" in opts:  # Torque's -t: those subjobs of each array named
        if "%" in opts["t"]:
            raise UsageError(f"illegal array range {opts['t']!r} (-t takes indices: 1-10,15)")
        wanted = frozenset(parse_array(opts["t"])[0])
        ids = [_array_of(text) for text in ids]
    site = load_site()
    user = whoami()
    batch = Batch.of(site)
    status = 0

    def idle(job: Job) -> bool:  # (a subjob an array's id leaves alone)
        return job.state in FINISHED or job.state == EXITING or only is not None and not only(job)
    # a server's slices: (the id of the command line, the last job) acted on before, and
    # how many jobs this run may act on (the request's `slice`)
    request = current()
    start, request.resume = request.resume or (0, -1), None
    budget, last = request.slice, start[1]
    with batch.open(write=True), batch.store.one_sync():
        named, position = _named(batch.sched, ids, every and ids == ["all"], site, user)
        for i, text in enumerate(named):
            if position(i) < start[0]:
                continue  # (acted on in an earlier slice)
            try:
                jobs = _resolved(batch.sched, text, wanted, opts, site)
            except common.CommandError as e:
                sys.stderr.write(f"{prog}: {e}\n")
                status = status or e.status
                continue
            if len(jobs) > 1 and all(map(idle, jobs)):  # (no subjob to act on: the array answers as one job)
                refused = _refuse_array(prog, jobs[0], site, user)
                status = status or refused
                continue
            for job in jobs:
                if position(i) == start[0] and job.id <= start[1]:
                    continue  # (acted on in an earlier slice)
                if len(jobs) > 1 and idle(job):
                    continue  # an array's ending or finished subjobs are left as they are
                if budget is not None:
                    if budget == 0:
                        request.resume = (position(i), last)
                        return status
                    budget -= 1
                last = job.id
                failed = _act_on(prog, batch, job, action, opts, site)
                status = status or failed
    return status


def _named(sched, ids: list[str], every: bool, site, user: str) -> tuple[list, Callable[[int], int]]:
    """What `act` walks: the ids given, or for `all` each job the caller may touch (as a
    one-job list, by id), and the position a slice resumes from for the i-th of them."""
    if every:  # (each job as itself: resolving each id again read every job)
        named = [[j] for j in sorted(sched.jobs.values(), key=lambda j: j.id)
                 if j.state not in FINISHED and (j.owner == user or site.is_operator(user))]
        return named, lambda i: 0  # (`all`: one list, resumed by job id)
    return ids, lambda i: i


def _resolved(sched, text, wanted: frozenset | None, opts: dict, site) -> list[Job]:
    """The jobs an id (or `all`'s one-job list) names, only the subjobs -t wants (CommandError if none)."""
    jobs = text if isinstance(text, list) else common.resolve(sched.jobs, text, site.server)
    if wanted is not None:
        jobs = [j for j in jobs if j.array_index in wanted]
        if not jobs:
            raise common.CommandError(f"Unknown Job Id {text[:-1]}{opts['t']}].{site.server}", common.UNKNOWN_JOB)
    return jobs


def _refuse_array(prog: str, first: Job, site, user: str) -> int:
    """Say why an array none of whose subjobs may be acted on is refused; its status."""
    if not common.may_touch(site, user, first):
        sys.stderr.write(f"{prog}: Unauthorized Request  {first.array_id}[].{site.server}\n")
        return common.UNAUTHORIZED
    sys.stderr.write(f"{prog}: Request invalid for state of job {first.array_id}[].{site.server}\n")
    return common.BAD_STATE


def _act_on(prog: str, batch: Batch, job: Job, action: Callable[[Batch, Job, dict], None], opts: dict,
            site) -> int:
    """`action` on one job: 0, or the status of the line it printed for a refusal."""
    try:
        action(batch, job, opts)
    except common.CommandError as e:
        sys.stderr.write(f"{prog}: {e}\n")
        return e.status
    except InvalidState:
        sys.stderr.write(f"{prog}: Request invalid for state of job {common.display_id(job, site.server)}\n")
        return common.BAD_STATE
    except BadDependency as e:
        sys.stderr.write(f"{prog}: Invalid Job Dependency MSG={e}\n")
        return common.BAD_DEPEND
    except Rejected as e:
        sys.stderr.write(f"{prog}: Job exceeds queue resource limits MSG={e}\n")
        return common.LIMITS
    return 0


def _array_of(text: str) -> str:
    """`123[]` or `123[.server]` as -t reads it: the array's id, `123[]`."""
    jid, index = common.parse_ref(text)
    if index not in (None, common.ALL):
        raise UsageError(f"-t takes an array's id (123[] or 123), not {text!r}")
    return f"{jid}[]"


def qdel(batch: Batch, job: Job, opts: dict) -> None:
    """Delete a job; a running one is told to stop.  Torque's -p (operators) and OpenPBS's
    -W force purge a running or exiting job: the server ends it at once, killing its
    processes and any epilogue still running, for a job that will not end by itself."""
    purge = "p" in opts or opts.get("W") == "force"
    user = whoami()
    if not common.may_touch(batch.site, user, job) or "p" in opts and not batch.site.is_operator(user):
        raise common.deny("qdel", job, batch.site)
    now = _time.time()
    if purge and job.state == EXITING:  # deleted already, or its epilogue runs: it goes now
        batch.do("process", now, id=job.id, set={"purge": True})
        return
    batch.do("delete", now, id=job.id, records=lambda job: accounting.lines("D", [job], batch.site.server, now))
    if purge and job.state == EXITING:  # (it was running: it goes now, not after the grace)
        batch.do("process", now, id=job.id, set={"purge": True})
    accounting.core_deletions(batch, now)


def _hold_kind(opts: dict) -> str:
    kinds = opts.get("h", "u")
    if not kinds or any(k not in "uos" for k in kinds):
        raise common.CommandError(f"illegal -h value {kinds!r}", common.USAGE)
    return kinds


def _holds(op: str):
    """qhold (op "hold") or qrls (op "release"): every kind in -h, each checked first."""
    def act_on(batch: Batch, job: Job, opts: dict) -> None:
        kinds = _hold_kind(opts)
        for k in kinds:
            if not common.may_touch(batch.site, whoami(), job, k):
                raise common.deny(f"q{op}", job, batch.site)
        for k in kinds:
            batch.do(op, id=job.id, kind=Hold(k).value)
    return act_on


qhold, qrls = _holds("hold"), _holds("release")


QDEL = Command("qdel", "W:pxt:", "usage: qdel [-p] [-x] [-W delay|force] [-t array_range] job_id ... | all",
               lambda opts, ids, out, now: act("qdel", ids, qdel, dict(opts), every=True), changes=True)
QHOLD = Command("qhold", "h:t:", "usage: qhold [-h u|o|s] [-t array_range] job_id ...",
                lambda opts, ids, out, now: act("qhold", ids, qhold, dict(opts)), changes=True)
QRLS = Command("qrls", "h:t:", "usage: qrls [-h u|o|s] [-t array_range] job_id ...",
               lambda opts, ids, out, now: act("qrls", ids, qrls, dict(opts)), changes=True)


ALTER_USAGE = ("usage: qalter [-a date_time] [-A account] [-e path] [-h hold_list] [-j join] [-k keep] "
               "[-l resources] [-m mail] [-M users] [-N name] [-o path] [-p priority] [-r y|n] [-S shell] "
               "[-v vars] [-W attrs] [-t array_range] job_id ...")


def alter_changes(job: Job, options: dict[str, str], resources: dict[str, str], now: float,
                  jobs: dict | None = None, server: str = "", flavor: str = "openpbs",
                  topology=None, consumables=(), isdir=os.path.isdir) -> tuple[dict, str]:
    """(core alter changes, hold letters to add) for qalter's options on `job`; `topology`
    places a nidmask; `consumables` are the site's, which -l may ask for; `isdir` tells a
    directory -o/-e names as the caller sees it (siteprog.isdir_for)."""
    from .attributes import (parse_job_name, parse_join, parse_keep, parse_mail_points, parse_names, parse_path,
                             parse_priority, resolve_path, variable_list)
    changes: dict = {}
    extra = dict(job.extra)
    if resources:
        _resource_changes(job, resources, changes, extra, consumables, topology)
    if "N" in options:
        changes["name"] = parse_job_name(options["N"])
    if "A" in options:
        changes["account"] = parse_names(options["A"], "-A")
    if "p" in options:
        changes["priority"] = parse_priority(options["p"])
    if "a" in options:
        changes["start_after"] = parse_start_after(options["a"], now)
    if "W" in options:
        _w_changes(options["W"], changes, extra, now, jobs, server, flavor)
    for letter, key, parse in (("j", "join", parse_join), ("m", "mail_points", parse_mail_points),
                               ("M", "mail_users", lambda v: parse_names(v, "-M")), ("k", "keep", parse_keep),
                               ("S", "shell", lambda v: parse_path(v, "-S"))):
        if letter in options:
            extra[key] = parse(options[letter])
    for letter, key in (("o", "output"), ("e", "error")):
        if letter in options:
            extra[key] = resolve_path(parse_path(options[letter], f"-{letter}"),
                                      extra.get("submit_dir") or extra.get("workdir") or "/", isdir)
    if "r" in options:
        if options["r"] not in ("y", "n"):
            raise UsageError("illegal -r value")
        extra["rerunnable"] = options["r"] == "y"
    if "v" in options:
        variables = dict(extra.get("variables", {}))
        for k, v in variable_list(options["v"]):
            variables[k] = v or ""
        extra["variables"] = variables
    if extra != job.extra:
        changes["extra"] = extra
    holds = options.get("h", "")
    if holds and any(h not in "uosn" for h in holds):
        raise UsageError("illegal -h value")
    return changes, holds




def _resource_changes(job: Job, resources: dict[str, str], changes: dict, extra: dict, consumables, topology) -> None:
    """qalter -l: the request, walltime, consumables, cput, disk and reservation it changes
    (of a running job only the walltime, as Torque), into `changes`; the resources kept in
    `extra`."""
    from .attributes import (COUNT_RES, advance_reservation, build_request, consumption, cput_of, parse_memory,
                             with_nidmask)
    merged = dict(extra.get("resources", {}))
    if job.state not in PENDING and any(merged.get(k) != v for k, v in resources.items() if k != "walltime"):
        # (as Torque: of a running job's resources only the walltime may change; its
        # limits were set as it started)
        raise InvalidState("running")
    if any(k in resources for k in COUNT_RES):
        for key in COUNT_RES + ("ppn", "place") + (() if "ngpus" in consumables else ("ngpus",)):
            merged.pop(key, None)
    merged.update(resources)
    request, walltime = build_request(merged, consumables)
    request = with_nidmask(request, merged, topology)
    consumes = consumption(merged, consumables)
    if consumes != job.consumes:
        changes["consumes"] = consumes
    if cput_of(merged) != job.cput:
        changes["cput"] = cput_of(merged)
    disk = parse_memory(merged["file"]) if "file" in merged else 0
    if disk != job.disk:
        changes["disk"] = disk
    if request != job.request and any(k != "walltime" for k in resources):
        changes["request"] = request.to_dict()
    if walltime is not None and walltime != job.walltime:
        changes["walltime"] = walltime
    if "advres" in resources and advance_reservation(merged) != job.reservation:
        changes["reservation"] = merged["advres"].strip()
    extra["resources"] = merged


def _w_changes(text: str, changes: dict, extra: dict, now: float, jobs: dict | None, server: str,
               flavor: str) -> None:
    """qalter -W: umask, stagein, stageout (kept in `extra`), deadline and depend (into `changes`)."""
    from .attributes import W_ITEMS, parse_depend, parse_staging, parse_umask, resolve_depend
    for item in W_ITEMS.split(text):  # (each -W attribute given)
        key, _, val = (part.strip() for part in item.partition("="))
        if key in ("umask", "stagein", "stageout"):
            if key == "umask":
                parse_umask(val)
            else:
                parse_staging(val, key)
            extra["W"] = {**extra.get("W", {}), key: val}
        elif key == "deadline":
            changes["deadline"] = parse_start_after(val, now, "-W deadline")
        elif key == "depend":
            deps, befores = parse_depend(val, flavor)
            if befores:
                raise common.CommandError("before dependencies are given at qsub time", common.USAGE)
            changes["dependencies"] = [[d.kind.value, d.job_id, d.of]
                                       for d in resolve_depend(deps, jobs or {}, server)]
        else:
            raise UsageError(f"illegal -W value {item!r}")


def qalter(opts: list[tuple[str, str]], ids: list[str], out, now: float) -> int:
    from .attributes import merge
    subjobs = {letter: value for letter, value in opts if letter == "t"}  # (Torque's -t: which subjobs)
    options, resources = merge([(k, v) for k, v in opts if k != "t"], [])
    limit = re.fullmatch(r"%(\d{1,9})", subjobs.get("t", ""))
    if limit:  # Torque's -t %N: the slot limit of each array named, on all its subjobs (0: none)
        del subjobs["t"]
        ids = [_array_of(text) for text in ids]

    def alter(batch: Batch, job: Job, _opts: dict) -> None:
        import time as _time
        user = whoami()
        if not common.may_touch(batch.site, user, job):
            raise common.deny("qalter", job, batch.site)
        changes, holds = alter_changes(job, options, resources, _time.time(),
                                       common.visible(batch.site, user, batch.sched.jobs), batch.site.server,
                                       batch.site.flavor, batch.sched.topology,
                                       frozenset(batch.site.config.get("consumables", {})),
                                       siteprog.isdir_for(batch.site, user))
        if job.state in FINISHED:
            raise InvalidState("finished")
        if limit:
            changes["array_limit"] = int(limit[1])
        if changes.get("reservation"):  # (as qsub refuses it)
            named = job.copy()
            named.reservation = changes["reservation"]
            common.check_reservation(batch.sched, named)
        if "deadline" in changes:
            common.check_deadline(batch.site, user)
        if "priority" in changes:
            common.check_priority(batch.site, user, changes["priority"])
        if job.state not in PENDING:
            if set(changes) - {"walltime", "name", "extra", "array_limit"}:
                raise InvalidState("running")
            if "walltime" in changes and not batch.site.is_operator(user):
                raise common.deny("qalter", job, batch.site)
        if changes:
            batch.do("alter", id=job.id, changes=changes)
        for h in holds.replace("n", ""):
            if not common.may_touch(batch.site, user, job, h):
                raise common.deny("qalter", job, batch.site)
            batch.do("hold", id=job.id, kind=h)

    return act("qalter", ids, alter, subjobs)


QALTER = Command("qalter", "a:A:e:h:j:k:l:m:M:N:o:p:r:S:v:W:t:", ALTER_USAGE, qalter, changes=True, permute=False)


def qmove(opts: list[tuple[str, str]], operands: list[str], out, now: float) -> int:
    if len(operands) < 2:
        raise UsageError("give a destination and a job id")
    dest = operands[0].split("@")[0]

    def move(batch: Batch, job: Job, _opts: dict) -> None:
        if not common.may_touch(batch.site, whoami(), job):
            raise common.deny("qmove", job, batch.site)
        if dest not in batch.sched.router.queues:
            raise common.CommandError(f"Unknown queue {dest}", 170)
        if job.state not in PENDING:
            raise InvalidState("not waiting")
        try:
            batch.do("alter", id=job.id, changes={"queue": dest})
        except Rejected as e:
            raise common.CommandError(f"Job violates queue and/or server resource limits: {e}", common.LIMITS) from None

    return act("qmove", operands[1:], move)


QMOVE = Command("qmove", "", "usage: qmove destination job_id ...", qmove, changes=True)


_OPS = {"eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b,
        "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b}


#: the job states qselect -s takes: Torque's and OpenPBS's letters (either flavor takes both)
QSELECT_STATES = "BCEFHMQRSTUWX"


def qselect(opts: list[tuple[str, str]], operands: list[str], out, now: float) -> int:
    """Job ids matching every criterion, one per line (full ids)."""
    if operands:
        raise UsageError(f"invalid argument {operands[0]!r}")
    crit: dict[str, list[str]] = {}
    for letter, value in opts:
        crit.setdefault(letter, []).append(value)
    for letter, known in (("s", QSELECT_STATES), ("h", "uosnp")):
        for value in crit.get(letter, []):
            if not value or set(value) - set(known):
                raise UsageError(f"illegal -{letter} value {value!r}")
    compares = []  # (what of a job, op, bound): -p [.op.]priority, -a [.op.]time
    for letter, read, what in (("p", int, lambda j: j.priority),
                               ("a", lambda t: parse_start_after(t, now, "-a"), lambda j: j.start_after)):
        for value in crit.get(letter, []):
            m = re.fullmatch(r"(?:\.(eq|ne|lt|le|gt|ge)\.)?(.+)", value)
            try:
                compares.append((what, m.group(1) or "eq", read(m.group(2))))
            except (AttributeError, ValueError):
                raise UsageError(f"illegal -{letter} value {value!r}") from None
    for value in crit.get("r", []):
        if value not in ("y", "n"):
            raise UsageError(f"illegal -r value {value!r} (y or n)")
    tests = []
    for spec in crit.get("l", []):
        parts = spec.split(".")
        if len(parts) != 3 or parts[1] not in _OPS or parts[0] not in ("walltime", "nodect", "ncpus", "mem"):
            raise UsageError(f"illegal -l value {spec!r}")
        tests.append(parts)
    site = load_site()
    batch = Batch.of(site)
    with batch.open(write=False):
        pass
    from ..core.timefmt import parse_duration
    from .attributes import parse_memory
    viewer = whoami()
    for job in sorted(batch.sched.jobs.values(), key=lambda j: j.id):
        if job.state in FINISHED and not crit.get("x") or not common.may_see(site, viewer, job):
            continue
        letter = common.state_letter(job, site.flavor)
        if "u" in crit and job.owner not in ",".join(crit["u"]).split(","):
            continue
        if "q" in crit and job.queue not in [q.split("@")[0] for q in crit["q"]]:
            continue
        if "s" in crit and letter not in "".join(crit["s"]):
            continue
        if "N" in crit and job.name not in crit["N"]:
            continue
        if "A" in crit and job.account not in crit["A"]:
            continue
        if "h" in crit and not set(common.hold_letters(job)) & set("".join(crit["h"])):
            continue
        if "r" in crit and ("y" if job.extra.get("rerunnable", True) else "n") not in crit["r"]:
            continue
        if not all(what(job) is not None and _OPS[op](what(job), bound) for what, op, bound in compares):
            continue
        ok = True
        for name, op, raw in tests:
            value = {"walltime": job.walltime, "nodect": job.request.nodes, "ncpus": job.request.processors,
                     "mem": job.request.mem * (1 if job.request.cores else job.request.nodes)}[name]
            try:
                bound = parse_duration(raw) if name == "walltime" else parse_memory(raw) if name == "mem" else int(raw)
            except Exception:
                raise UsageError(f"illegal -l value {raw!r}") from None
            ok = ok and _OPS[op](value, bound)
        if ok:
            out.write(common.display_id(job, site.server) + "\n")
    return 0


QSELECT = Command("qselect", "u:q:s:N:A:h:l:p:r:a:x", "usage: qselect [-u users] [-q queue] [-s states] [-N name] "
                  "[-A account] [-h holds] [-l res.op.value] [-p [.op.]priority] [-r y|n] [-a [.op.]time] [-x]",
                  qselect)


NO_RESOURCES = 196  # PBSE_RESCUNAV mod 256


def run_on(batch: Batch, job: Job, hosts: tuple[str, ...] = ()) -> None:
    """Start a waiting job now (an operator's: qrun, cqadm --run), on `hosts` if any: node
    names, or anything the machine names a place by (a Blue Gene's blocks)."""
    if not batch.site.is_operator(whoami()):
        raise common.deny("qrun", job, batch.site)
    for host in hosts:
        try:
            batch.sched.topology.units_of_nodes((host,))
        except SchedulerError:
            raise common.CommandError(f"Unknown node {host}", common.USAGE) from None
    try:  # the core is deterministic: replaying this record picks the same nodes
        batch.do("run", id=job.id, nodes=list(hosts))
    except Rejected:
        raise common.CommandError(f"Insufficient amount of resource to run {common.display_id(job, batch.site.server)}",
                                  NO_RESOURCES) from None


def qrun(opts: list[tuple[str, str]], ids: list[str], out, now: float) -> int:
    from ..core import nodelist

    def run(batch: Batch, job: Job, opts: dict) -> None:
        hosts = ()
        if "H" in opts:  # host+host, or OpenPBS's (host:ncpus=2)+(host:ncpus=1): the hosts named
            try:
                hosts = tuple(n.split("/")[0] for part in opts["H"].split("+")
                              for n in nodelist.expand(part.strip().strip("()").split(":")[0]))
            except SchedulerError as e:
                raise common.CommandError(f"illegal -H value: {e}", common.USAGE) from None
        run_on(batch, job, hosts)

    return act("qrun", ids, run, dict(opts))


QRUN = Command("qrun", "H:", "usage: qrun [-H host[+host...]] job_id ...", qrun, changes=True)


def qsig(opts: list[tuple[str, str]], ids: list[str], out, now: float) -> int:
    """Send a signal to running jobs (the server delivers it to each job's processes);
    `suspend` and `resume` (operators) are SIGSTOP and SIGCONT, and the job is S meanwhile."""
    import signal as _signal
    given = dict(opts).get("s", "SIGTERM")
    name = {"suspend": "SIGSTOP", "resume": "SIGCONT"}.get(given, given)
    try:
        sig = int(name) if name.isdigit() else int(_signal.Signals[name if name.startswith("SIG") else "SIG" + name])
    except (KeyError, ValueError):
        sig = 0
    if not 0 < sig < _signal.NSIG:  # a number the kernel refuses never reaches the server
        raise UsageError(f"illegal signal {given!r}")

    def send(batch: Batch, job: Job, opts: dict) -> None:
        if not common.may_touch(batch.site, whoami(), job) \
                or given in ("suspend", "resume") and not batch.site.is_operator(whoami()):
            raise common.deny("qsig", job, batch.site)
        change = {"pending_signals": [*job.extra.get("pending_signals", []), sig]}
        if job.state != RUNNING or given == "suspend" and job.suspended_at is not None \
                or given == "resume" and job.suspended_at is None:
            raise InvalidState("not running" if job.state != RUNNING else f"not a job to {given}")
        # suspend: state S, its walltime stands still and the planner expects it to end that
        # much later; resume: it runs on (with the signal the server sends, in one record)
        op = given if given in ("suspend", "resume") else "process"
        batch.do(op, now, id=job.id, set=change)

    return act("qsig", ids, send, dict(opts), only=lambda job: job.state == RUNNING)  # (an array: its running subjobs)


QSIG = Command("qsig", "s:", "usage: qsig [-s signal] job_id ...", qsig, changes=True)


MESSAGE_MAX = 4096  # characters of one qmsg message


def qmsg(opts: list[tuple[str, str]], operands: list[str], out, now: float) -> int:
    """Torque's and OpenPBS's qmsg: a line for a running job's error file (-E, the
    default), its output file (-O), or both; the server writes it there as the owner."""
    if not operands:
        raise UsageError("no message given")
    message, ids = operands[0], operands[1:]
    if "\0" in message or len(message) > MESSAGE_MAX:
        raise UsageError(f"illegal message (NUL, or over {MESSAGE_MAX} characters)")
    streams = "".join(sorted({letter for letter, _ in opts})) or "E"

    def post(batch: Batch, job: Job, opts: dict) -> None:
        if not common.may_touch(batch.site, whoami(), job):
            raise common.deny("qmsg", job, batch.site)
        if job.state != RUNNING or job.extra.get("interactive"):
            raise InvalidState("not running")
        batch.do("process", now, id=job.id, set={"messages": [*job.extra.get("messages", []), [streams, message]]})

    return act("qmsg", ids, post, only=lambda job: job.state == RUNNING)


QMSG = Command("qmsg", "EO", "usage: qmsg [-E] [-O] message_string job_id ...", qmsg, changes=True, permute=False)


def qrerun(opts: list[tuple[str, str]], ids: list[str], out, now: float) -> int:
    """Torque's and OpenPBS's qrerun (operators): the server kills the running job (SIGTERM,
    then SIGKILL after the grace) and puts it back in the queue, its run count one up.  A
    job submitted with -r n is refused unless -f forces it."""
    force = any(letter == "f" for letter, _ in opts)

    def rerun(batch: Batch, job: Job, opts: dict) -> None:
        if not batch.site.is_operator(whoami()):
            raise common.deny("qrerun", job, batch.site)
        if job.state != RUNNING or job.extra.get("rerun"):
            raise InvalidState("not running")
        if not job.extra.get("rerunnable", True) and not force:
            raise common.CommandError(f"Job is not rerunnable {common.display_id(job, batch.site.server)} "
                                      f"(qrerun -f forces it)", common.BAD_STATE)
        batch.do("process", now, id=job.id, set={"rerun": True})

    return act("qrerun", ids, rerun, dict(opts), only=lambda job: job.state == RUNNING)


QRERUN = Command("qrerun", "f", "usage: qrerun [-f] job_id ...", qrerun, changes=True)
