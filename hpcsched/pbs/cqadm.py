"""Cobalt's cqadm: the queue manager's administration tool, as ALCF's operators type it.

    cqadm [-d] --getq                              cqadm -j N | --setjobid=N
    cqadm --addq | --delq | --startq | --stopq | --drainq | --killq  QUEUE...
    cqadm --setq 'prop=value ...' | --unsetq 'prop ...'  QUEUE...
    cqadm --kill [-f] JOBID...                     cqadm --run=LOCATION JOBID...
    cqadm --preempt [-f] JOBID...
    cqadm [--admin-hold | --admin-release | --user-hold | --user-release]
          [--queue=QUEUE] [--time=MINUTES|HH:MM:SS]  JOBID...

Every action is a translation, never a second path: a queue's change is qmgr's (the same
overlay, the whole configuration checked before it is written), a job's is qhold/qrls,
qdel, qrun -H, qrerun (--preempt), qmove or qalter's walltime, each through the same store
operations.  Queue actions are a manager's, job actions an operator's (or a manager's).
Cobalt's queue states map onto PBS's switches: running (enabled, started), stopped
(enabled, not started), draining (takes no job, runs those it has), dead (neither).  An
admin hold is PBS's operator hold; an admin release lifts the operator and system holds.
Errors are one line each and status 1; a malformed command line prints the usage and exits 2.
"""
from __future__ import annotations

import re
import sys

from ..core.errors import SchedulerError
from ..core.jobs import ACTIVE, FINISHED, PENDING, RUNNING, Hold, Job
from ..core.timefmt import hms
from ..store.journaled import Batch
from ..store.site import load_site, whoami
from . import common, qctl
from .cobalt import CobaltCommand, job_ids, minutes, number, places, queue_state, tabular
from .errors import CommandError, UsageError
from .qmgr import Qmgr

TABLE = ((("-d", "--debug"), "debug", False), (("-f", "--force"), "force", False), (("--getq",), "getq", False),
         (("-j", "--setjobid"), "setjobid", True), (("--savestate",), "savestate", True),
         (("--addq",), "addq", False), (("--delq",), "delq", False), (("--drainq",), "drainq", False),
         (("--killq",), "killq", False), (("--startq",), "startq", False), (("--stopq",), "stopq", False),
         (("--policy",), "policy", True), (("--setq",), "setq", True), (("--unsetq",), "unsetq", True),
         (("--kill",), "kill", False), (("--preempt",), "preempt", False),
         (("--hold",), "admin-hold", False), (("--release",), "admin-release", False),
         (("--admin-hold",), "admin-hold", False), (("--admin-release",), "admin-release", False),
         (("--user-hold",), "user-hold", False), (("--user-release",), "user-release", False),
         (("--queue",), "queue", True), (("--run",), "run", True), (("--time",), "time", True))
USAGE = "[options] <jobid> <jobid> OR <queue> <queue>"

#: the options that act alone (Cobalt refuses them with any other)
ALONE = ("setjobid", "savestate", "run", "addq", "getq", "delq", "drainq", "killq", "startq", "stopq", "policy",
         "setq", "unsetq", "preempt", "kill")
#: Cobalt's queue states -> the queue's configuration (enabled, started, draining)
STATES = {"running": (True, True, False), "stopped": (True, False, False), "draining": (True, True, True),
          "dead": (False, False, False)}
SWITCHES = {"startq": "running", "stopq": "stopped", "drainq": "draining", "killq": "dead"}


def _count(text: str) -> int:
    if not number(text):
        raise CommandError(f"{text!r} is not a whole number")
    if int(text) > common.LARGEST:
        raise CommandError(f"{text} is more than {common.LARGEST}")
    return int(text)


def _users(text: str) -> list[str] | None:
    return None if text == "*" else [u for u in text.split(":") if u]


#: Cobalt's queue property -> (the queue's configuration key, the value read from text)
PROPERTIES = {
    "maxtime": ("max_walltime", lambda t: hms(minutes(t, "maxtime"))),
    "mintime": ("min_walltime", lambda t: hms(minutes(t, "mintime"))),
    "maxrunning": ("max_running_per_user", _count),
    "maxtotaljobs": ("max_running", _count),
    "maxqueued": ("max_queued_per_user", _count),
    "maxusernodes": ("max_running_nodes_per_user", _count),
    "totalnodes": ("max_running_nodes", _count),
    "users": ("acl_users", _users),
    "groups": ("acl_groups", _users),
    "priority": ("priority", lambda t: -_count(t[1:]) if t.startswith("-") else _count(t)),
}
#: Cobalt's properties with no counterpart here: why
UNSUPPORTED = {"maxnodehours": "a node-hours limit",
               "adminemail": "mail to an administrator", "cron": "a queue's cron schedule",
               "maxuserjobs": "maxrunning is the per-user limit", "policy": "a queue's own policy"}


def properties(text: str, unset: bool) -> dict[str, object]:
    """--setq 'prop=value ...' (--unsetq 'prop ...') as configuration keys and values (None:
    unset); state=S as its three switches."""
    values: dict[str, object] = {}
    for word in text.split():
        name, eq, value = word.partition("=")
        if unset == bool(eq) or not unset and not value:
            raise CommandError(f"{word!r}: --setq takes prop=value, --unsetq prop")
        if name == "state":
            if unset or value not in STATES:
                raise CommandError(f"state is one of {', '.join(STATES)}" if not unset else "state cannot be unset")
            values.update(zip(("enabled", "started", "draining"), STATES[value]))
        elif name in PROPERTIES:
            key, read = PROPERTIES[name]
            values[key] = None if unset else read(value)
        elif name in UNSUPPORTED:
            raise CommandError(f"{name} is not supported here ({UNSUPPORTED[name]})")
        else:
            raise CommandError(f"{name} is not a queue property")
    if not values:
        raise CommandError("no property given")
    return values


def getq(out, names: list[str]) -> int:
    """Every queue (or those named), as Cobalt's cqadm --getq lists them (sorted by name)."""
    site = load_site()
    batch = Batch.of(site)
    with batch.open(write=False):
        known = batch.sched.router.queues
        missing = [n for n in names if n not in known]
        if missing:
            raise CommandError(f"queue {missing[0]} not found")
        queues = sorted((q for q in known.values() if not names or q.name in names), key=lambda q: q.name)
    header = ["Queue", "Users", "Groups", "MinTime", "MaxTime", "MaxRunning", "MaxTotalJobs", "MaxQueued",
              "MaxUserNodes", "MaxNodeHours", "TotalNodes", "AdminEmail", "State", "Cron", "Policy", "Priority"]

    def shown(value) -> str:
        return "None" if value is None else hms(value) if isinstance(value, float) else str(value)
    rows = [[q.name, ":".join(sorted(q.acl_users)) if q.acl_users is not None else "*",
             ":".join(sorted(q.acl_groups)) if q.acl_groups is not None else "*", shown(q.min_walltime),
             shown(q.max_walltime), shown(q.max_running_per_user), shown(q.max_running), shown(q.max_queued_per_user),
             shown(q.max_running_nodes_per_user), "None", shown(q.max_running_nodes), "None", queue_state(q), "None",
             "default", str(q.priority)] for q in queues]
    out.write(tabular([header, *rows]))
    return 0


def queues(o: dict, names: list[str], out) -> int:
    """--addq, --delq, the state switches, --setq and --unsetq on each queue named; a queue
    that fails says so and the others go on."""
    session = Qmgr(out)
    if not session.site.is_manager(whoami()):
        raise CommandError(f"Permission denied: {whoami()} is not a manager")
    if "addq" in o:  # (Cobalt's new queue is stopped: it runs nothing until started)
        known = [q for q in names if q in session.sched().router.queues]
        if known:
            raise CommandError(f"queue already exists: {known[0]}")
    done, status = [], 0
    for name in names:
        try:
            if "addq" in o:
                session.run(f"create queue {name} started = False")
            elif "delq" in o:  # (one holding unfinished jobs is refused, with -f too)
                session.run(f"delete queue {name}")
            elif "setq" in o or "unsetq" in o:
                session.set_queue(name, properties(o.get("setq") or o["unsetq"], "unsetq" in o))
            else:
                switch = next(SWITCHES[k] for k in SWITCHES if k in o)
                session.set_queue(name, dict(zip(("enabled", "started", "draining"), STATES[switch])))
            done.append(name)
        except CommandError as e:
            sys.stderr.write(f"{plain(e)}\n")
            status = 1
    if done and ("addq" in o or "delq" in o):
        out.write(tabular([["Added Queues" if "addq" in o else "Deleted Queues"], *[[q] for q in done]]))
    return status


def plain(e: CommandError) -> str:
    """qmgr's error as cqadm says it: `qmgr obj=NAME svr=default: WHY` is `NAME: WHY`."""
    m = re.fullmatch(r"qmgr(?: obj=(\S*) svr=\S*)?: (.*)", str(e), re.S)
    return str(e) if m is None else f"{m.group(1)}: {m.group(2)}" if m.group(1) else m.group(2)


def jobs(o: dict, ids: list[int], now: float) -> int:
    """The job actions, in one locked write: on each job named its holds, queue and time
    (or a kill, or a run); a job that fails says so and the rest go on."""
    site = load_site()
    user = whoami()
    if not site.is_operator(user):
        raise CommandError(f"Permission denied: {user} is not an operator or a manager")
    walltime = minutes(o["time"]) if "time" in o else None
    if walltime is not None and walltime <= 0:
        raise CommandError("--time must be positive")
    hosts = tuple(h for h in o.get("run", "").split(":") if h)
    if "run" in o and not hosts:
        raise CommandError("--run needs a location")
    failed = []
    batch = Batch.of(site)
    with batch.open(write=True), batch.store.one_sync():
        if hosts and batch.sched.topology.numbered:  # (a Cray's location: nid ranges, 10-12:30)
            hosts = places(",".join(hosts), batch.sched.topology)
        for jid in ids:
            job = batch.sched.jobs.get(jid)
            if job is None or job.state in FINISHED:
                failed.append(f"job {jid} not found")
                continue
            try:
                act(batch, job, o, now, walltime, hosts)
            except (CommandError, SchedulerError) as e:
                failed.append(f"job {jid}: {e}")
    if failed:
        sys.stderr.write("\n".join(failed) + "\n")
    return 1 if failed else 0


#: the hold options: (option, the holds it places or lifts, places)
HOLDS = (("admin-hold", (Hold.OPERATOR,), True), ("user-hold", (Hold.USER,), True),
         ("admin-release", (Hold.OPERATOR, Hold.SYSTEM), False), ("user-release", (Hold.USER,), False))


def act(batch: Batch, job: Job, o: dict, now: float, walltime: float | None, hosts: tuple[str, ...]) -> None:
    """Each action cqadm's options ask of one job (see `jobs`)."""
    if "kill" in o:
        return qctl.qdel(batch, job, {"p": ""} if "force" in o else {})
    if "preempt" in o:  # (back to the queue, to run again: qrerun's; -f for one not --preemptable)
        if not job.extra.get("cobalt", {}).get("preemptable") and "force" not in o:
            raise CommandError("it is not preemptable (qsub --preemptable; -f preempts it anyway)")
        if job.state != RUNNING:
            raise CommandError(f"it is {job.state.value}: only a running job is preempted")
        if job.extra.get("rerun"):
            raise CommandError("it is being preempted already")
        return batch.do("process", now, id=job.id, set={"rerun": True})
    if "run" in o:
        return qctl.run_on(batch, job, hosts)
    holds = [(option, kinds, hold) for option, kinds, hold in HOLDS if option in o]
    for option, kinds, hold in holds:  # (checked first: a job refused is left as it was)
        if hold and job.state in ACTIVE:
            raise CommandError(f"it is {job.state.value}: only a waiting job is held")
        if not hold and not any(k in job.holds for k in kinds):
            raise CommandError(f"it has no {option.split('-')[0]} hold")
    changes: dict[str, object] = {}
    if "queue" in o:
        if job.state not in PENDING:
            raise CommandError("it is not waiting: only a waiting job moves")
        if o["queue"] not in batch.sched.router.queues:
            raise CommandError(f"queue {o['queue']} not found")
        changes["queue"] = o["queue"]
    if walltime is not None:
        changes["walltime"] = walltime
    if changes:  # (one alteration: all of it, or nothing)
        batch.do("alter", now, id=job.id, changes=changes)
    for option, kinds, hold in holds:
        for k in kinds:
            if (k in job.holds) != hold:
                batch.do("hold" if hold else "release", id=job.id, kind=k.value)


def cqadm(opts: list[tuple[str, str]], operands: list[str], out, now: float) -> int:
    o = dict(opts)
    asked = [k for k in o if k not in ("debug", "force")]
    if not asked:
        raise CommandError("At least one option must be specified")
    alone = [k for k in asked if k in ALONE]
    if alone and len(asked) > 1:
        raise CommandError(f"Option combinations not allowed with: {', '.join(alone)} option(s)")
    if "savestate" in o:
        raise CommandError("--savestate is not supported here: the store is saved at every change")
    if "policy" in o:
        raise CommandError("--policy is not supported here: queues share the site's [priority] policy")
    if "getq" in o:
        return getq(out, operands)
    if "setjobid" in o:
        session = Qmgr(out)
        if not session.site.is_manager(whoami()):
            raise CommandError(f"Permission denied: {whoami()} is not a manager")
        try:
            session.run(f"set server next_job_number = {_count(o['setjobid'])}")
        except CommandError as e:
            raise CommandError(plain(e)) from None
        return 0
    if not operands:
        raise UsageError("give the jobs or the queues to act on")
    if any(k in o for k in ("addq", "delq", "setq", "unsetq", *SWITCHES)):
        return queues(o, operands, out)
    return jobs(o, job_ids(operands), now)


CQADM = CobaltCommand("cqadm", TABLE, USAGE, cqadm, changes=True)
