"""Maui/Moab-style commands: showq, checkjob, checknode, showstart, showres, showbf, setres,
releaseres, mdiag -p/-f.

They show the core's own decisions: a read-only command runs the scheduling pass on the
loaded state in memory (nothing is saved), so reasons and estimated starts are exactly
what the next pass would decide.  Times print as `[DD:]HH:MM:SS`.
"""
from __future__ import annotations

import re
import sys

from ..core import fitting, nodelist, timefmt
from ..core.depends import describe
from ..core.errors import InvalidRequest
from ..core.jobs import (ACTIVE, COMPLETED, DELETED, DEP_FAIL, DEP_HOLD, EXITING, FINISHED, HELD, PENDING, QUEUED,
                         RUNNING, WAITING, Job)
from ..core.reservations import Reservation
from ..core.timefmt import parse_duration
from ..store.journaled import Batch
from ..store.request import current
from ..store.site import load_site, whoami
from . import common, qstat
from .attributes import build_request
from .common import Command
from .errors import UsageError


def dhms(seconds: float | None) -> str:
    """Maui's `[-][DD:]HH:MM:SS`."""
    if seconds is None:
        return "--"
    s = int(round(seconds))
    sign, s = ("-", -s) if s < 0 else ("", s)
    d, rem = divmod(s, 86400)
    hms_ = f"{rem // 3600:02d}:{rem // 60 % 60:02d}:{rem % 60:02d}"
    return f"{sign}{d}:{hms_}" if d else f"{sign}{hms_}"


def when(t: float | None) -> str:
    return common.local_time("%a %b %d %H:%M:%S", t) if t is not None else "--"


def procs(job: Job) -> int:
    return job.request.processors


def load(write: bool = False):
    """The site and its batch; readers get it loaded (and unlocked again)."""
    site = load_site()
    batch = Batch.of(site)
    if not write:
        with batch.open(write=False):
            pass
    return site, batch


def preview(batch: Batch, now: float):
    """(scheduler, plan): the decisions the next pass would make, on a scheduler that is
    thrown away after the command (Batch.scratch)."""
    sched = batch.scratch()
    return sched, sched.iterate(now)


#: showq -w's constraints: what each compares with
_CONSTRAINTS = {"user": lambda j: j.owner, "group": lambda j: j.group, "acct": lambda j: j.account,
                "class": lambda j: j.queue}


def showq(opts: list[tuple[str, str]], operands: list[str], out, now: float) -> int:
    """Maui's showq: active jobs (soonest to end first), idle jobs in the order the next
    pass takes them, blocked jobs; `-r`, `-i`, `-b`, `-c` one section in more detail
    (running, eligible, blocked, completed), `-u USER` or `-w user=|group=|acct=|class=`
    only those jobs."""
    if operands:
        raise UsageError(f"unexpected argument {operands[0]!r}")
    keep = []
    for letter, value in ((k, v) for k, v in opts if k in "uw"):
        name, _, wanted = value.partition("=") if letter == "w" else ("user", "", value)
        if name not in _CONSTRAINTS or not wanted:
            raise UsageError(f"bad constraint {value!r} (give -w user=|group=|acct=|class=NAME)")
        keep.append((_CONSTRAINTS[name], wanted))
    views = [letter for letter, _ in opts if letter in "ribc"]
    if len(views) > 1:
        raise UsageError("give one of -r, -i, -b, -c")
    site, batch = load()
    view = views[0] if views else ""
    sched = batch.scratch() if view in ("", "i") else batch.sched  # (the order and -i's pass are worked out on it)
    viewer = whoami()
    mine = lambda j: all(f(j) == wanted for f, wanted in keep) and common.may_see(site, viewer, j)  # noqa: E731
    jobs = [j for j in sched.jobs.values() if mine(j)]
    w = out.write
    if view == "c":
        return _completed(sorted((j for j in jobs if j.state in FINISHED and j.start_time is not None),
                                 key=lambda j: (j.end_time or 0.0, j.id)), w)
    active = sorted((j for j in jobs if j.state in ACTIVE),
                    key=lambda j: (j.planned_end(now), j.id))  # (Maui: soonest to end first)
    if view == "r":
        return _running(active, sched, now, w)
    blocked = sorted((j for j in jobs if j.state in PENDING and j.state != QUEUED), key=lambda j: j.id)
    rank = {j.id: k for k, j in enumerate(sched.order(now))} if view != "b" else {}
    idle = sorted((j for j in jobs if j.id in rank), key=lambda j: rank[j.id])
    if view == "i":
        return _eligible(idle, sched.iterate(now), now, w)
    total_procs = sum(n.cores for n in sched.topology.all_nodes())
    if not view:
        used = sum(procs(j) for j in active)
        w("ACTIVE JOBS--------------------\n")
        w(f"{'JOBNAME':<18} {'USERNAME':<12} {'STATE':>8} {'PROC':>5} {'REMAINING':>11}  {'STARTTIME':>19}\n\n")
        for j in active:
            state = "Suspended" if common.is_suspended(j) else "Running" if j.state == RUNNING else "Exiting"
            w(f"{common.short_id(j):<18} {j.owner:<12} {state:>8} {procs(j):>5} {dhms(j.planned_end(now) - now):>11}  "
              f"{when(j.start_time):>19}\n")
        pct = 100.0 * used / total_procs if total_procs else 0.0
        w(f"\n{len(active):>6} Active Job{'s' if len(active) != 1 else ''}   {used} of {total_procs} Processors "
          f"Active ({pct:.2f}%)\n\n")
    for title, group, state in (("IDLE JOBS----------------------", idle, None),
                                ("BLOCKED JOBS----------------", blocked, "blocked")):
        if view and state is None:
            continue
        w(title + "\n")
        w(f"{'JOBNAME':<18} {'USERNAME':<12} {'STATE':>8} {'PROC':>5} {'WCLIMIT':>11}  {'QUEUETIME':>19}\n\n")
        for j in group:
            label = "Idle" if state is None else {HELD: "Hold", WAITING: "Deferred",
                                                  DEP_HOLD: "Hold", DEP_FAIL: "Hold"}.get(j.state, "Blocked")
            w(f"{common.short_id(j):<18} {j.owner:<12} {label:>8} {procs(j):>5} {dhms(j.walltime):>11}  {when(j.submit_time):>19}\n")
        w(f"\n{len(group)} {'Idle' if state is None else 'Blocked'} Job{'s' if len(group) != 1 else ''}\n\n")
    if view:
        w(f"Total Jobs: {len(blocked)}\n")
    else:
        w(f"Total Jobs: {len(active) + len(idle) + len(blocked)}   Active Jobs: {len(active)}   "
          f"Idle Jobs: {len(idle)}   Blocked Jobs: {len(blocked)}\n")
    return 0


def _xfactor(waited: float, walltime: float) -> str:
    """Maui's expansion factor: (time waited + walltime) / walltime."""
    return f"{(waited + walltime) / walltime:.1f}" if walltime > 0 else "--"


def _group(j: Job) -> str:
    return j.group or "-"


def _running(active: list[Job], sched, now: float, w) -> int:
    """showq -r: running jobs with their expansion factor, group and first node."""
    w("ACTIVE JOBS--------------------\n")
    w(f"{'JOBNAME':<18} {'S':>1} {'XFACTOR':>8} {'USERNAME':>12} {'GROUP':>10} {'MHOST':>12} {'PROCS':>5} "
      f"{'REMAINING':>11}  {'STARTTIME':>19}\n\n")
    for j in active:
        w(f"{common.short_id(j):<18} {common.state_letter(j, 'torque'):>1} {_xfactor(j.start_time - j.submit_time, j.walltime):>8} {j.owner:>12} "
          f"{_group(j):>10} {(j.nodes or ('-',))[0]:>12} {procs(j):>5} {dhms(j.planned_end(now) - now):>11}  "
          f"{when(j.start_time):>19}\n")
    nodes = {n for j in active for n in j.nodes}
    all_nodes = sum(1 for _ in sched.topology.all_nodes())
    used, total = sum(procs(j) for j in active), sum(n.cores for n in sched.topology.all_nodes())
    w(f"\n{len(active):>6} active job{'s' if len(active) != 1 else ''}   {used} of {total} processors in use "
      f"({100.0 * used / total if total else 0.0:.2f}%)\n")
    w(f"{'':>6} {len(nodes)} of {all_nodes} nodes active ({100.0 * len(nodes) / all_nodes if all_nodes else 0.0:.2f}%)"
      f"\n\nTotal jobs: {len(active)}\n")
    return 0


def _eligible(idle: list[Job], plan, now: float, w) -> int:
    """showq -i: eligible jobs in the order the next pass takes them, with their priority;
    `*` marks a job the pass (`plan`) gives a reservation."""
    w("eligible jobs----------------------\n")
    w(f"{'JOBNAME':<18} {'PRIORITY':>10} {'XFACTOR':>8} {'USERNAME':>12} {'GROUP':>10} {'PROCS':>5} "
      f"{'WCLIMIT':>11} {'CLASS':>10}  {'SYSTEMQUEUETIME':>19}\n\n")
    for j in idle:
        name = f"{common.short_id(j)}{'*' if j.id in plan.reserved else ''}"
        w(f"{name:<18} {j.score:>10.6g} {_xfactor(now - j.submit_time, j.walltime):>8} {j.owner:>12} "
          f"{_group(j):>10} {procs(j):>5} {dhms(j.walltime):>11} {j.queue:>10}  {when(j.submit_time):>19}\n")
    w(f"\n{len(idle)} eligible job{'s' if len(idle) != 1 else ''}\n\nTotal jobs: {len(idle)}\n")
    return 0


def _completed(done: list[Job], w) -> int:
    """showq -c: jobs that ran and are finished (the store keeps them), last to end last,
    with exit status and CPU efficiency (CPU time over processors x walltime used)."""
    w("completed jobs------------------------\n")
    w(f"{'JOBNAME':<18} {'S':>1} {'CCODE':>6} {'EFFIC':>7} {'XFACTOR':>8} {'USERNAME':>12} {'GROUP':>10} "
      f"{'MHOST':>12} {'PROCS':>5} {'WALLTIME':>11}  {'STARTTIME':>19}\n\n")
    for j in done:
        used = common.run_time(j, j.end_time)
        effic = f"{100.0 * j.cpu_time / (procs(j) * used):.2f}" if j.cpu_time and used > 0 and procs(j) else "--"
        ccode = "--" if j.exit_status is None else j.exit_status
        w(f"{common.short_id(j):<18} {'C' if j.state == COMPLETED else 'R':>1} {ccode:>6} {effic:>7} "
          f"{_xfactor(j.start_time - j.submit_time, j.walltime):>8} {j.owner:>12} {_group(j):>10} "
          f"{(j.nodes or ('-',))[0]:>12} {procs(j):>5} {dhms(used):>11}  {when(j.start_time):>19}\n")
    w(f"\n{len(done)} completed job{'s' if len(done) != 1 else ''}\n\nTotal jobs: {len(done)}\n")
    return 0


def node_count(topology, names) -> int:
    """The machine nodes `names` stand for (a Blue Gene names blocks, midplanes and boards)."""
    if topology.places_blocks:
        return topology.measure(topology.units_of_nodes(names))
    return len(names)


def name_cores(topology, name: str) -> int:
    """The processors a reservation's node name holds (a Blue Gene's block, many nodes)."""
    if topology.places_blocks:
        return node_count(topology, [name]) * topology.cores
    return topology.node(name).cores


def block_states(sched, server: str) -> list:
    """A Blue Gene's blocks and their states (partlist's), running jobs by their full ids."""
    busy = {common.full_id(j.id, server): j.nodes[0] for j in sched.jobs.values() if j.state in ACTIVE and j.nodes}
    return sched.topology.block_states(busy)


def checkjob(opts: list[tuple[str, str]], operands: list[str], out, now: float) -> int:
    if len(operands) != 1:
        raise UsageError("give one job id")
    common.parse_ref(operands[0])  # malformed: said before the store is read
    site, batch = load()
    sched = batch.sched
    try:
        job, = common.resolve(sched.jobs, operands[0], site.server)
    except (common.CommandError, ValueError):  # unknown, or an array's many subjobs
        raise common.CommandError(f"cannot locate job '{operands[0]}'", common.UNKNOWN_JOB) from None
    if not common.may_see(site, whoami(), job):  # (qmgr's query_other_jobs = false)
        raise common.deny("checkjob", job, site)
    state = "Suspended" if common.is_suspended(job) else {
        QUEUED: "Idle", RUNNING: "Running", EXITING: "Running", HELD: "Hold", WAITING: "Deferred",
        DEP_HOLD: "Hold", DEP_FAIL: "Hold", COMPLETED: "Completed", DELETED: "Removed"}[job.state]
    w = out.write
    w(f"checking job {common.short_id(job)}\n\n")
    w(f"State: {state}\n")
    w(f"Creds:  user:{job.owner}  group:{common.group_of(job)}  account:{job.account or '-'}  class:{job.queue}\n")
    used = common.run_time(job, now) if job.start_time is not None else 0.0
    w(f"WallTime: {dhms(used)} of {dhms(job.walltime)}\n")
    w(f"SubmitTime: {when(job.submit_time)}\n")
    w(f"  (Time Queued  Total: {dhms(now - job.submit_time if job.start_time is None else job.start_time - job.submit_time)}"
      f"  Eligible: {dhms(job.eligible(now))})\n\n")
    w(f"Total Tasks: {procs(job)}\n")
    if sched.topology.places_blocks:  # the block it gets
        w(f"Block size: {sched.size(job)} nodes\n")
    if job.dependencies:
        deps = ", ".join(f"{describe(d)}({'met' if d.met else 'failed' if d.met is False else 'pending'})"
                         for d in job.dependencies)
        w(f"Dependencies: {deps}\n")
    if job.holds:
        w(f"Holds:    {' '.join({'u': 'User', 'o': 'Operator', 's': 'System'}[h.value] for h in sorted(job.holds))}\n")
    if job.nodes:
        w(f"Allocated Nodes: {nodelist.compress(list(job.nodes))}\n")
    verbose = bool(opts)  # -v: the job's request, comment and reservation as well
    if verbose:
        w(f"Resources: {','.join(f'{k}={v}' for k, v in qstat.resource_list(job).items())}\n")
        w(f"Features: {''.join(f'[{f}]' for f in job.request.features) or '[NONE]'}\n")
        if job.comment:
            w(f"Comment: {job.comment}\n")
    w("\n")
    if job.state in PENDING:
        _, plan = preview(batch, now)
        if verbose and job.id in plan.reserved:
            t, alloc = plan.reserved[job.id]
            w(f"Reservation '{common.short_id(job)}' ({dhms(t - now)} -> {dhms(t + job.walltime - now)}  Duration: "
              f"{dhms(job.walltime)}) on {nodelist.compress(list(alloc.nodes)) or '-'}\n")
        if any(s.job_id == job.id for s in plan.started):
            w("job can start now, but scheduling is stopped (schedctl --start starts it again)\n"
              if not site.config.get("scheduling", True) else
              f"job can start now, but {common.NO_SERVER}\n" if current().serverless else
              "job can start now: it starts at the next scheduling pass\n")
        elif job.state == QUEUED:
            reason = plan.reason(job.id)
            if job.id in plan.reserved:  # (the core's clock is seconds: here, the site's time)
                t, alloc = plan.reserved[job.id]
                reason = reason.replace(f"starts at {t:.0f}", f"starts at {when(t)}", 1)
            w(f"job cannot run: {reason}\n")
            if job.id in plan.reserved and sched.topology.places_blocks:
                block = plan.reserved[job.id][1].nodes[0]
                w(f"Block {block}: {dict((b.name, s) for b, s in block_states(sched, site.server))[block]}\n")
            est = plan.estimate(job.id)
            if est is None:
                w("Estimated start: none within the planning horizon\n")
            elif plan.limited(job.id):  # (the estimate counts nodes only: not a start to expect)
                w(f"Estimated start: unknown while the limit holds it back (nodes free for it at "
                  f"{when(est)}, in {dhms(est - now)})\n")
            else:
                w(f"Estimated start: {when(est)} (in {dhms(est - now)})\n")
        else:
            reason = {HELD: "job is held", WAITING: f"job may not start before {when(job.start_after)}",
                      DEP_HOLD: "job waits for its dependencies",
                      DEP_FAIL: "a dependency can never be satisfied"}[job.state]
            w(f"job cannot run: {reason}\n")
    return 0


def showres(opts: list[tuple[str, str]], operands: list[str], out, now: float) -> int:
    """Maui's reservation list, or with -n each reserved node's; operands name the
    reservations to show (advance reservation names or job ids)."""
    site, batch = load()
    sched, topo = batch.sched, batch.sched.topology
    rows = []  # (id, type, start, duration, [(node, its processors)], processors)
    for r in sched.reservations.values():
        start = next(iter(r.occurrences(now, float("inf"))), (r.start, r.start + r.duration))[0]
        nodes = [(n, name_cores(topo, n)) for n in r.nodes]
        rows.append((r.name, "Sys" if r.owner == "calendar" else "User", start, r.duration, nodes,
                     sum(p for _, p in nodes)))
    _, plan = preview(batch, now)
    for jid, (t, alloc) in sorted(plan.reserved.items()):
        job = sched.jobs[jid]
        nodes = [(n, len(c)) for n, c in zip(alloc.nodes, alloc.cores)]
        if len(nodes) == 1:  # (all of it: a Blue Gene's block stands for many nodes)
            nodes = [(alloc.nodes[0], procs(job))]
        rows.append((common.short_id(job), "Job", t, job.walltime, nodes, procs(job)))
    status = 0
    if operands:
        named = {row[0]: row for row in rows}
        wanted = []
        for op in operands:
            row = named.get(op) or (named.get(op.split(".")[0]) if op[:1].isdigit() else None)  # (1.server: job 1)
            if row is None:
                sys.stderr.write(f"showres: cannot locate reservation '{op}'\n")
                status = common.SYSTEM
            elif row not in wanted:
                wanted.append(row)
        rows = wanted
    w = out.write
    if "n" in dict(opts):
        w(f"reservations on {when(now)}\n\n")
        w(f"{'NodeName':<20} {'Type':<4} {'ReservationID':>15} {'Task':>5} {'Start':>11} {'Duration':>11}"
          "    StartTime\n\n")
        shown = set()
        for name, kind, start, dur, nodes, _ in rows:
            for node, p in nodes:
                shown.add(node)
                w(f"{node:<20} {kind:<4} {name:>15} {p:>5} {dhms(start - now):>11} {dhms(dur):>11}    {when(start)}\n")
        w(f"\n{len(shown)} node{'s' if len(shown) != 1 else ''} reserved\n")
        return status
    w(f"{'ReservationID':<19} {'Type':<4} S {'Start':>11} {'End':>11} {'Duration':>11} {'N/P':>9}    StartTime\n\n")
    for name, kind, start, dur, nodes, p in rows:
        state = "A" if start <= now else "-"
        n = node_count(topo, [node for node, _ in nodes])
        w(f"{name:<19} {kind:<4} {state} {dhms(start - now):>11} {dhms(start + dur - now):>11} {dhms(dur):>11} "
          f"{f'{n}/{p}':>9}    {when(start)}\n")
    w(f"\n{len(rows)} reservation{'s' if len(rows) != 1 else ''} located\n")
    return status


def showstart(opts: list[tuple[str, str]], operands: list[str], out, now: float) -> int:
    """Moab's showstart: when a job (or a job of PROCS@DURATION, not submitted) would start
    and end in the plan the next pass makes, after every start and reservation it makes."""
    if len(operands) != 1:
        raise UsageError("give one job id or PROCS@DURATION")
    what = operands[0]
    if "@" in what:
        shape = re.fullmatch(r"([1-9]\d*)@(.+)", what)
        try:
            walltime = parse_duration(shape[2]) if shape else 0.0
        except InvalidRequest:
            walltime = 0.0
        if not 0 < walltime < float("inf"):
            raise UsageError(f"bad job shape {what!r} (give PROCS@DURATION, the duration [[DD:]HH:]MM:SS)")
    else:
        common.parse_ref(what)  # malformed: said before the store is read
    site, batch = load()
    sched = batch.sched
    if "@" in what:  # a job as `qsub -l procs=PROCS,walltime=DURATION` would give it
        job = Job(owner=whoami(), queue=sched.router.default, request=build_request({"procs": shape[1]})[0],
                  walltime=walltime, submit_time=now)
        _, plan = preview(batch, now)
        start, name = plan.earliest(job), what
    else:
        try:
            job, = common.resolve(sched.jobs, what, site.server)
        except (common.CommandError, ValueError):  # unknown, or an array's many subjobs
            raise common.CommandError(f"cannot locate job '{what}'", common.UNKNOWN_JOB) from None
        if not common.may_see(site, whoami(), job):  # (qmgr's query_other_jobs = false)
            raise common.deny("showstart", job, site)
        name = common.short_id(job)
        if job.state in FINISHED:
            raise common.CommandError(f"job {name} has {'completed' if job.state == COMPLETED else 'been removed'}",
                                      1)
        if job.state in PENDING and job.state not in (QUEUED, WAITING):
            raise common.CommandError(f"cannot estimate job {name}'s start: " + (
                "it is held" if job.state == HELD else "it waits for its dependencies" if job.state == DEP_HOLD
                else "a dependency can never be satisfied"), 1)
        if job.state in ACTIVE:
            start, plan = job.start_time, None
        else:
            _, plan = preview(batch, now)
            start = plan.estimate(job.id)
    w = out.write
    w(f"job {name} requires {procs(job)} proc{'s' if procs(job) != 1 else ''} for {dhms(job.walltime)}\n\n")
    if start is None:
        w("Estimated Rsv based start: none within the planning horizon\n")
        return 0
    end = job.planned_end(now) if job.state in ACTIVE else start + job.walltime
    w(f"Estimated Rsv based start in      {dhms(start - now):>14} on {when(start)}\n")
    w(f"Estimated Rsv based completion in {dhms(end - now):>14} on {when(end)}\n")
    if plan is not None and "@" not in what and plan.limited(job.id):  # (a job not submitted has no limits' word)
        w("\n(a limit holds the job back: the estimate counts free nodes only)\n")
    return 0


def checknode(opts: list[tuple[str, str]], operands: list[str], out, now: float) -> int:
    """Maui's checknode: a node's state, its processors configured and dedicated, its
    features and note, and what holds it now and later (running jobs, the reservations the
    next pass makes, advance reservations), in time order; `ALL` for every node."""
    from .pbsnodes import jobs_on  # (here, not at the top: psc's pbsyod imports this module)
    if len(operands) != 1:
        raise UsageError("give one node name (or ALL)")
    site, batch = load()
    sched = batch.sched
    topo = sched.topology
    known = {n.name: n for n in topo.all_nodes()}
    if operands[0] != "ALL" and operands[0] not in known:
        raise common.CommandError(f"cannot locate node '{operands[0]}'", 1)
    names = list(known) if operands[0] == "ALL" else operands
    on = jobs_on(sched, site.server)
    holds: dict[str, list[tuple[float, str]]] = {}  # node -> (start, its line), in time order
    running: dict[str, list[int]] = {}  # node -> the jobs running there (Maui's ids: the core's)

    def hold(nodes, cores, kind: str, name: str, start: float, end: float) -> None:
        for node, n in zip(nodes, cores):
            for listed in topo.covered(node):
                count = n if listed == node else topo.node(listed).cores
                span = f"{dhms(start - now)} -> {dhms(end - now)} ({dhms(end - start)})"
                holds.setdefault(listed, []).append((start, f"{kind} '{name}'(x{count})  {span}"))
    for job in sched.jobs.values():
        if job.state in ACTIVE:
            hold(job.nodes, [max(1, len(c)) for c in job.cores], "Job", common.short_id(job), job.start_time,
                 job.planned_end(now))
            for listed in {n for node in job.nodes for n in topo.covered(node)}:
                running.setdefault(listed, []).append(job)
    _, plan = preview(batch, now)
    for jid, (t, alloc) in plan.reserved.items():
        hold(alloc.nodes, [max(1, len(c)) for c in alloc.cores], "Job", common.short_id(sched.jobs[jid]), t,
             t + sched.jobs[jid].walltime)
    for r in sched.reservations.values():
        for start, end in r.occurrences(now, float("inf")):
            hold(r.nodes, [topo.node(n).cores if n in known else 1 for n in r.nodes],
                 "Sys" if r.owner == "calendar" else "User", r.name, start, end)
            break  # (the next occurrence of a standing one)
    w = out.write
    for k, name in enumerate(names):
        node = known[name]
        used = len(on.get(name, ()))
        w(("\n" if k else "") + f"checking node {name}\n\n")
        w(f"State:      {_node_state(node, used)}\n")
        memory = f"  MEM: {node.memory}M" if node.memory else ""
        gpus = f"  GPUS: {node.gpus}" if node.gpus else ""
        w(f"Configured Resources: PROCS: {node.cores}{memory}{gpus}\n")
        w(f"Dedicated  Resources: PROCS: {used}\n")
        w(f"Features:   {''.join(f'[{f}]' for f in sorted(node.features)) or '[NONE]'}\n")
        note = sched.node_notes.get(name) or (
            "failed a pre-job node scan (bad list)" if node.state.value == "bad" else "")
        if note:
            w(f"Note:       {note}\n")
        lines = [line for _, line in sorted(holds.get(name, []), key=lambda h: h[0])]
        if lines:
            w("\nReservations:\n" + "".join(f"  {line}\n" for line in lines))
        jobs = sorted(running.get(name, ()), key=lambda j: j.id)
        w(f"JobList:  {','.join(common.short_id(j) for j in jobs) or '[NONE]'}\n")
    return 0


def _node_state(node, used: int) -> str:
    """Maui's word for a node: Down, Drained/Draining (offline, idle or not), Busy (no job
    may start there: every processor dedicated, or an exclusive node's job), Running, Idle."""
    state = node.state.value
    if state in ("down", "bad"):
        return "Down"
    if state == "offline":
        return "Draining" if used else "Drained"
    if used and (used >= node.cores or not node.shared):
        return "Busy"
    return "Running" if used else "Idle"


def showbf(opts: list[tuple[str, str]], operands: list[str], out, now: float) -> int:
    if operands:
        raise UsageError(f"unexpected argument {operands[0]!r}")
    site, batch = load()
    user = whoami()
    sched, plan = preview(batch, now)
    profile = plan.profile or sched.profile(now)
    windows = fitting.windows(profile)
    w = out.write
    w(f"backfill window (user: '{user}' group: 'ALL' partition: ALL) {when(now)}\n\n")
    if not windows:
        w("no procs available\n")
        return 0
    # each line: how many processors are free for at least that long
    for k, (until, _) in enumerate(windows):
        count = sum(sched.topology.processors(units) for _, units in windows[k:])
        if until == float("inf"):
            w(f"{count:>3} procs available with no timelimit\n")
        else:
            w(f"{count:>3} procs available for {dhms(until - now):>11}\n")
    return 0


def mdiag(opts: list[tuple[str, str]], operands: list[str], out, now: float) -> int:
    if len(opts) != 1 or operands:
        raise UsageError("give -p or -f")
    site, batch = load()
    sched = batch.sched
    ctx = sched.context(now)
    if opts[0][0] == "f":
        return _fairshare(sched, ctx, out)
    viewer = whoami()
    jobs = sorted((j for j in sched.jobs.values() if j.state == QUEUED and common.may_see(site, viewer, j)),
                  key=lambda j: j.id)
    factors = {j.id: sched.policy.describe(j, ctx) for j in jobs}
    names = list(next(iter(factors.values()), {}))
    top = {n: max((abs(f[n]) for f in factors.values()), default=0.0) or 1.0 for n in names}
    w = out.write
    w(f"diagnosing job priority information (policy: {sched.policy.name})\n\n")
    w(f"{'Job':<12} " + " ".join(f"{n:>24}" for n in names) + "\n")
    w(f"{'':<12} " + " ".join(f"{'-' * 24:>24}" for _ in names) + "\n")
    for j in jobs:
        cells = [f"{100.0 * factors[j.id][n] / top[n]:.1f}({factors[j.id][n]:.4g})" for n in names]
        w(f"{common.short_id(j):<12} " + " ".join(f"{c:>24}" for c in cells) + "\n")
    w(f"\nTotal jobs: {len(jobs)}   (each cell: percent of the column's largest (raw value))\n")
    return 0


def _fairshare(sched, ctx, out) -> int:
    """mdiag -f: the decayed usage per user, group and project, and the share tree's nodes
    with their shares, usage, targets and jobs (as this moment's pass would see them)."""
    w, u = out.write, sched.usage
    hours = 3600.0
    unit = {"slots": "core-hours", "nodes": "node-hours", "cpu": "CPU-hours"}[u.metric]

    def span(seconds: float) -> str:
        return f"{seconds / hours:g} h" if seconds else "none"
    w(f"fair share (usage: {unit}, half-life {span(u.half_life)}, window {span(u.window)})\n")
    for kind in ("user", "group", "project"):
        table = u.by(kind, ctx.now)
        w(f"\n{kind.capitalize():<16} {'usage':>14}\n")
        for name, v in sorted(table.items(), key=lambda kv: (-kv[1], kv[0])):
            w(f"{name or '-':<16} {v / hours:>14.2f}\n")
    tree = getattr(sched.policy, "tree", None)
    if tree is None or not (tree.root.children or tree.root.templates):
        return 0
    tree.compute(u, ctx.now, every=True)
    w(f"\nshare tree (compensation factor {tree.compensation_factor:g})\n")
    w(f"{'Node':<32} {'shares':>7} {'usage':>12} {'ltt':>7} {'oltt':>7} {'stt':>7} {'ostt':>7} "
      f"{'run':>5} {'pend':>6}\n")
    for node in tree.root.walk():
        if node.parent is None:
            continue
        active = node.running or node.pending
        cells = [f"{x:.4f}" if active else "-" for x in (node.ltt, node.oltt, node.stt, node.ostt)]
        w(f"{node.path:<32} {node.shares:>7g} {node.usage / hours:>12.2f} " + " ".join(f"{c:>7}" for c in cells)
          + f" {node.running:>5} {node.pending:>6}\n")
    return 0


def parse_when(text: str, now: float) -> float:
    """`now`, `+[[DD:]HH:]MM:SS`, Maui's `HH[:MM[:SS]][_MO[/DD[/YY]]]`, epoch seconds or an
    ISO date (timefmt.maui_time)."""
    try:
        return timefmt.maui_time(text, now)
    except InvalidRequest:
        raise common.CommandError(f"bad time {text!r} (now, +[[DD:]HH:]MM:SS, HH[:MM[:SS]][_MO[/DD[/YY]]], "
                                  f"epoch seconds or an ISO date)", common.USAGE) from None


def setres(options: list[tuple[str, str]], operands: list[str], out, now: float) -> int:
    opts = dict(options)
    if len(operands) != 1 or ("d" in opts) == ("e" in opts):
        raise UsageError("give a duration (-d) or an end (-e), and one hostlist or count=N")
    site, batch = load(write=True)
    user = whoami()
    if not site.is_operator(user):
        raise common.CommandError(f"user {user} is not authorized to create reservations", common.UNAUTHORIZED)
    start = parse_when(opts.get("s", "now"), now)
    try:
        duration = parse_duration(opts["d"]) if "d" in opts else parse_when(opts["e"], now) - start
        period = {"day": 86400.0, "daily": 86400.0, "week": 604800.0, "weekly": 604800.0}.get(
            opts.get("p", ""), None)
        if period is None:
            period = parse_duration(opts.get("p", "0"))
    except InvalidRequest as e:
        raise UsageError(str(e)) from None
    if duration > common.LARGEST:  # (a 32-bit time, as Maui keeps it)
        raise UsageError(f"a reservation lasts at most {common.LARGEST} s (about 68 years), not {duration:.0f} s")
    spec = operands[0]
    count, nodes = 0, ()
    if spec.startswith("count=") or spec.startswith("TASKS=="):
        value = spec.split("=")[-1]
        if not value.isdigit() or int(value) < 1:
            raise UsageError(f"bad node count {spec!r}")
        count = int(value)
    else:
        try:
            nodes = tuple(nodelist.expand(spec))
        except InvalidRequest as e:
            raise UsageError(str(e)) from None
    split = lambda key: frozenset(filter(None, opts.get(key, "").split(",")))  # noqa: E731
    with batch.open(write=True):
        sched = batch.sched
        name = opts.get("n") or f"{user}.{sum(1 for r in sched.reservations if r.startswith(user + '.')) + 1}"
        try:
            res = Reservation(name=name, start=start, duration=duration,
                              nodes=nodes, count=count, users=split("u"), groups=split("g"),
                              projects=split("a"), queue=opts.get("q", ""), period=period, owner=user,
                              account=opts.get("A", ""), links="L" in opts)
        except InvalidRequest as e:
            raise common.CommandError(str(e), common.USAGE) from None
        if res.queue and res.queue not in sched.router.queues:
            raise common.CommandError(f"unknown queue {res.queue}", common.USAGE)
        if res.links and not sched.topology.links_are_units:
            raise common.CommandError("-L holds a Blue Gene's network links: this machine's links are not "
                                      "reservable", common.USAGE)
        if res.account and sched.bank is not None and res.account not in sched.bank.accounts:
            raise common.CommandError(f"-A {res.account}: no such project (gbalance lists them)", common.USAGE)
        made = batch.do("reservation", now, reservation=_resolved(sched, res, now).to_dict())
    tasks = sum(name_cores(sched.topology, n) for n in made.nodes)
    out.write(f"reservation '{made.name}' created on {node_count(sched.topology, made.nodes)} nodes ({tasks} tasks)\n")
    return 0


def _resolved(sched, res: Reservation, now: float) -> Reservation:
    """Turn a node count into nodes now, so the journal replays the same nodes."""
    if res.nodes:
        return res
    probe = Reservation(**{**res.to_dict(), "nodes": (), "count": res.count})
    sched.add_reservation(probe, now)
    sched.remove_reservation(probe.name)
    return Reservation(**{**probe.to_dict()})


def releaseres(opts: list[tuple[str, str]], operands: list[str], out, now: float) -> int:
    if not operands:
        raise UsageError("give a reservation name")
    return release(operands, now, lambda sched, name: sched.reservations.get(name),
                   unknown=("releaseres: cannot locate reservation '{op}'", common.SYSTEM),
                   denied="releaseres: user {user} may not release reservation '{op}'",
                   done=lambda name: out.write(f"released User reservation '{name}'\n"))


def release(names: list[str], now: float, find, unknown: tuple[str, int], denied: str, done=None) -> int:
    """Remove each reservation `find(sched, name)` finds, if the caller owns it or is an
    operator (releaseres, pbs_rdel); the jobs of a queue it made are deleted and recorded.
    `unknown` (message, status) and `denied` are the command's words, with {op} and {user}."""
    from . import accounting
    site, batch = load(write=True)
    user = whoami()
    status = 0
    with batch.open(write=True):
        for op in names:
            res = find(batch.sched, op)
            if res is None:
                sys.stderr.write(unknown[0].format(op=op, user=user) + "\n")
                status = unknown[1]
            elif not (site.is_operator(user) or user == res.owner):
                sys.stderr.write(denied.format(op=op, user=user) + "\n")
                status = common.UNAUTHORIZED
            else:
                batch.do("unreserve", now, name=res.name)
                accounting.core_deletions(batch, now)
                if done:
                    done(res.name)
    return status


SHOWQ = Command("showq", "ribcu:w:", "usage: showq [-r|-i|-b|-c] [-u user] [-w user=|group=|acct=|class=NAME]", showq)
CHECKJOB = Command("checkjob", "v", "usage: checkjob [-v] JOBID", checkjob)
SHOWSTART = Command("showstart", "", "usage: showstart JOBID | PROCS[@DURATION]", showstart)
SHOWRES = Command("showres", "n", "usage: showres [-n] [RESID ...]", showres)
SHOWBF = Command("showbf", "", "usage: showbf", showbf)
CHECKNODE = Command("checknode", "", "usage: checknode NODE | ALL", checknode)
SETRES = Command("setres", "n:s:d:e:p:u:g:a:A:q:L", "usage: setres [-n name] [-s start] [-d duration|-e end] [-p period] "
                 "[-u users] [-g groups] [-a accounts] [-A charge_account] [-q queue] [-L] hostlist|count=N", setres,
                 changes=True)
RELEASERES = Command("releaseres", "", "usage: releaseres NAME ...", releaseres, changes=True)
MDIAG = Command("mdiag", "pf", "usage: mdiag -p | -f", mdiag)
