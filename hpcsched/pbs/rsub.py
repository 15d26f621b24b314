"""OpenPBS advance reservations: pbs_rsub, pbs_rstat, pbs_ralter, pbs_rdel.

    pbs_rsub -R 1400 -D 1:00:00 -l select=2:ncpus=8     R12.server CONFIRMED
    qsub -q R12 job.sh                                   runs inside R12 alone
    pbs_rstat [-f|-B|-S] [R12]                           the reservations
    pbs_ralter -E 1600 R12                               a new end (its nodes free till then)
    pbs_rdel R12                                         it, its queue and its jobs go

A reservation holds whole nodes, chosen free over its (first) window when it is asked for,
so it is confirmed or refused at once: no UNCONFIRMED state.  Its id takes the next job
number (R12 after job 11; S12 for a standing one, `-r`), and it makes a queue of that name
open to its Authorized_Users (the owner by default) and Authorized_Groups.  When it ends or
is deleted, the queue goes, its waiting jobs are deleted and its running ones killed.  The
same reservations are Maui's to see (showres, checknode) and its setres reservations are
pbs_rstat's.  Exit statuses are PBS error codes mod 256.

Who may reserve (OpenPBS's server attributes, in config.toml): managers and operators
anything; other users only with `resv_enable`, only if named in `acl_resv_users` when it
is set, and within `resv_max_duration`, `resv_max_nodes` and `resv_max_per_user` (their
reservations not yet ended).  A multi-user site's defaults keep one user from taking the
machine: 24 hours, half the nodes, 4 reservations; a single-user rig's are unlimited.
"""
from __future__ import annotations

import math
import re
import sys
import time
from datetime import datetime

from ..core.errors import InvalidRequest, SchedulerError
from ..core.jobs import Request
from ..core.reservations import FREQUENCIES, Reservation, overlapping
from ..core import timefmt
from ..core.timefmt import WEEKDAYS, hms, parse_duration
from ..store.site import load_site, whoami
from . import common
from .attributes import build_request, merge, parse_start_after
from .common import Command
from .errors import UsageError
from .maui import load, name_cores, node_count, release

UNKNOWN_RESV = 236  # PBSE_UNKRESVID 15084 mod 256
BAD_TIME = 238  # PBSE_BADTSPEC 15086 mod 256
UNAVAILABLE = 196  # PBSE_RESCUNAV 15044 mod 256: no nodes free for its window

class _Rsub(Command):
    """pbs_rsub's table, and `--hosts h1 h2 ...` ending the command line."""

    def parse(self, argv: list[str]) -> tuple[list[tuple[str, str]], list[str]]:
        if "--hosts" not in argv:
            return super().parse(argv)
        k = argv.index("--hosts")
        opts, operands = super().parse(argv[:k])
        hosts = argv[k + 1:]
        if not hosts or any(not h or h.startswith("-") for h in hosts):
            raise UsageError("missing host(s) after --hosts")
        return opts + [("hosts", h) for h in hosts], operands


def _names(text: str) -> frozenset[str]:
    """Authorized_Users/Groups, `name[@host],...` (the host is not checked)."""
    return frozenset(w.strip().split("@")[0] for w in text.split(",") if w.strip())


def _rrule(text: str, start: float) -> tuple[float, float, tuple[float, ...], float]:
    """(first start, period, offsets, last start; 0 none) of -r's iCalendar recurrence
    (timefmt.recurrence)."""
    try:
        return timefmt.recurrence(text, start)
    except InvalidRequest as e:
        raise UsageError(f"illegal -r value {text!r}" + (f" ({e})" if str(e) else "")) from None


def _window(opts: dict, resources: dict, now: float) -> tuple[float, float]:
    """(start, duration) from -R, -E, -D (or -l walltime): any two of them; -R alone is
    not enough, -D alone starts now."""
    try:
        start = parse_start_after(opts["R"], now, "-R") if "R" in opts else None
        end = parse_start_after(opts["E"], now, "-E") if "E" in opts else None
        d = opts.get("D") or resources.get("walltime")
        duration = parse_duration(d) if d else None
    except InvalidRequest:
        raise UsageError(f"illegal -D value {opts.get('D') or resources.get('walltime')!r}") from None
    if duration is None:
        if start is None or end is None:
            raise UsageError("give two of -R (start), -E (end) and -D (duration)")
        duration = end - start
    elif start is None:
        start = end - duration if end is not None else now
    elif end is not None and not math.isclose(end - start, duration):
        raise common.CommandError("Bad time specification(s): -E is not -R plus -D", BAD_TIME)
    if not duration > 0 or start + duration <= now or start < now - 60:
        raise common.CommandError("Bad time specification(s)", BAD_TIME)
    return max(start, now), duration - max(0.0, now - start)


#: a multi-user site's limits on a user's reservations (config keys of the same names)
USER_LIMITS = {"resv_max_duration": 24 * 3600.0, "resv_max_per_user": 4}


def user_limits(site, sched, user: str, nodes: int, duration: float, now: float, name: str = "") -> None:
    """Refuse a reservation (`name`: the one being altered) past what `user` may hold."""
    if site.is_operator(user):
        return
    if not site.config.get("resv_enable", True):
        raise common.CommandError("Unauthorized Request: reservations are not enabled (qmgr's resv_enable)",
                                  common.UNAUTHORIZED)
    allowed = site.config.get("acl_resv_users")
    if allowed is not None and user not in allowed:
        raise common.CommandError(f"Unauthorized Request: {user} is not in acl_resv_users", common.UNAUTHORIZED)
    multi = site.multi_user
    longest = site.config.get("resv_max_duration", USER_LIMITS["resv_max_duration"] if multi else None)
    if longest is not None and duration > parse_duration(str(longest)) + 1e-9:
        raise common.CommandError(f"Resource limit exceeded: a duration of {hms(duration)} is past "
                                  f"resv_max_duration ({hms(parse_duration(str(longest)))})", common.LIMITS)
    widest = site.config.get("resv_max_nodes", max(1, len(sched.topology.all_nodes()) // 2) if multi else None)
    if widest is not None and nodes > widest:
        raise common.CommandError(f"Resource limit exceeded: {nodes} nodes is past resv_max_nodes ({widest})",
                                  common.LIMITS)
    most = site.config.get("resv_max_per_user", USER_LIMITS["resv_max_per_user"] if multi else None)
    held = [r for r in sched.reservations.values() if r.owner == user and r.name != name]
    if most is not None and len(held) >= most:
        raise common.CommandError(f"Resource limit exceeded: {user} holds {len(held)} reservations "
                                  f"(resv_max_per_user {most})", common.LIMITS)


def pbs_rsub(options: list[tuple[str, str]], operands: list[str], out, now: float) -> int:
    if operands:
        raise UsageError(f"unexpected operand {operands[0]!r}")
    hosts = [v for k, v in options if k == "hosts"]
    opts, resources = merge([(k, v) for k, v in options if k != "hosts"], [])
    if "W" in opts:
        raise UsageError(f"illegal -W value {opts['W']!r} (-W qmove and the like are not taken)")
    if "q" in opts and not opts["q"].startswith("@"):
        raise UsageError(f'illegal -q value {opts["q"]!r}: format "@server"')
    if "I" in opts and not re.fullmatch(r"-?[0-9]+", opts["I"]):
        raise UsageError(f"illegal -I value {opts['I']!r}")
    if hosts and resources.keys() - {"walltime"}:
        raise UsageError("can't use -l with --hosts")
    if not hosts and not resources.keys() - {"walltime"}:
        raise UsageError("give the resources to reserve: -l select=... (or nodes=..., ncpus=...), or --hosts")
    start, duration = _window(opts, resources, now)
    period, offsets, last = 0.0, (0.0,), 0.0
    if "r" in opts:
        start, period, offsets, last = _rrule(opts["r"], start)
        if overlapping(duration, period, offsets):
            raise common.CommandError("Bad time specification(s): a standing reservation's occurrences overlap",
                                      BAD_TIME)
    site, batch = load(write=True)
    user = whoami()
    if hosts:
        request = Request(nodes=len(hosts), within=tuple(dict.fromkeys(hosts)))
        if len(request.within) != len(hosts):
            raise UsageError("Duplicate host in --hosts")
    else:
        request = build_request({k: v for k, v in resources.items() if k != "walltime"})[0]
        if request.cores and "ncpus" in resources:  # (a job-wide ncpus=N is one chunk, as OpenPBS takes it)
            request = Request(nodes=1, ppn=request.cores, mem=request.mem, features=request.features)
    users = _names(opts.get("U", "")) or frozenset({user})
    with batch.open(write=True):
        sched = batch.sched
        n = sched.next_id
        while {f"R{n}", f"S{n}"} & (sched.router.queues.keys() | sched.reservations.keys()):
            n += 1  # (a queue of the configuration's own may have the name)
        name = f"{'S' if period else 'R'}{n}"
        machine = sched.topology.all_nodes()
        if hosts:
            unknown = [h for h in hosts if h not in {node.name for node in machine}]
            if unknown:
                raise common.CommandError(f"Host with resources not found: {unknown[0]}", UNAVAILABLE)
        if request.cores:  # (procs=N or a Cray's size=N: whole nodes enough for N)
            widest = max(node.cores for node in machine)
            request = Request(nodes=-(-request.cores // widest), ppn=min(request.cores, widest),
                              features=request.features)
        user_limits(site, sched, user, request.nodes, duration, now)  # (before the search: a limit, not "busy")
        nodes = sched.free_nodes(request, start, start + duration, now)
        if nodes is None:
            raise common.CommandError(f"reservation {name} not confirmed: no nodes are free for its whole window",
                                      UNAVAILABLE)
        try:
            res = Reservation(name=name, start=start, duration=duration, nodes=nodes, users=users,
                              groups=_names(opts.get("G", "")), queue=name, period=period, last=last,
                              offsets=offsets, rule=opts.get("r", "").upper().replace(" ", ""),
                              owner=user, own_queue=True, title=opts.get("N", ""))
            batch.do("reservation", now, reservation=res.to_dict())
        except (InvalidRequest, SchedulerError) as e:
            raise common.CommandError(str(e), UNAVAILABLE) from None
    out.write(f"{name}.{site.server} CONFIRMED\n")
    return 0


def _convert_time(t: float, now: float) -> str:
    """pbs_rstat's short times: `Today 15:30`, `Tue 15:30` this week, `Tue Mar 24 15:30`
    this year, `Tue Mar 24 2027 15:30` in another."""
    then, today = time.localtime(t), time.localtime(now)
    if then.tm_year != today.tm_year:
        return time.strftime("%a %b %d %Y %H:%M", then)
    if then.tm_yday == today.tm_yday:
        return time.strftime("Today %H:%M", then)
    week0 = today.tm_yday - (today.tm_wday + 1) % 7  # (Sunday first, as strftime's %w)
    if week0 <= then.tm_yday <= week0 + 6:
        return time.strftime("%a %H:%M", then)
    return time.strftime("%a %b %d %H:%M", then)


def _state(res: Reservation, now: float) -> tuple[str, str, float]:
    """(short state, long state, start of the occurrence shown)."""
    t0, t1 = next(iter(res.occurrences(now, math.inf)), (res.start, res.start + res.duration))
    if res.expired(now):
        return "FN", "RESV_FINISHED", t0
    if t0 <= now < t1:
        return "RN", "RESV_RUNNING", t0
    return "CO", "RESV_CONFIRMED", t0


def _id(res: Reservation, server: str) -> str:
    return f"{res.name}.{server}" if res.own_queue else res.name


def _find(sched, text: str, server: str) -> Reservation | None:
    name = text.split(".")[0] if text.split(".")[0] in sched.reservations else text
    return sched.reservations.get(name)


def pbs_rstat(opts: list[tuple[str, str]], operands: list[str], out, now: float) -> int:
    how = "S"
    for letter, _ in opts:
        how = "f" if letter in "fF" else letter
    site, batch = load()
    sched, topo, server = batch.sched, batch.sched.topology, site.server
    status, shown = 0, []
    for op in operands:
        res = _find(sched, op, server)
        if res is None:
            sys.stderr.write(f"pbs_rstat: Unknown Reservation Id {op}\n")
            status = UNKNOWN_RESV
        else:
            shown.append(res)
    if not operands:
        shown = sorted(sched.reservations.values(), key=lambda r: (r.start, r.name))
    w = out.write
    if how == "S" and shown:
        w(f"{'Resv ID':<10.10} {'Queue':<8.8} {'User':<8.8} {'State':<5.5} {'Start':>17.17} / Duration / "
          f"{'End':<17.17}\n" + "-" * 69 + "\n")
    for res in shown:
        short, long, t0 = _state(res, now)
        if how == "B":
            w(f"Resv ID: {_id(res, server)}\n")
        elif how == "S":
            start, end = _convert_time(t0, now), _convert_time(t0 + res.duration, now)
            w(f"{_id(res, server):<10.10} {res.queue:<8.8} {res.owner + '@' + server:<8.8} {short:<5.5} "
              f"{start:>17.17} / {int(res.duration)} / {end:<17.17}\n")
        else:
            cores = [name_cores(topo, n) for n in res.nodes]
            fmt = lambda t: time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(t))  # noqa: E731
            rows = [("Reserve_Name", res.title or "NULL"), ("Reserve_Owner", f"{res.owner}@{server}"),
                    ("reserve_type", "3" if res.period else "2"), ("reserve_state", long),
                    ("reserve_start", fmt(t0)), ("reserve_end", fmt(t0 + res.duration)),
                    ("reserve_duration", str(int(res.duration)))]
            if res.queue:
                rows.append(("queue", res.queue))
            rows += [("Resource_List.ncpus", str(sum(cores))),
                     ("Resource_List.nodect", str(node_count(topo, res.nodes))),
                     ("Resource_List.walltime", hms(res.duration)),
                     ("resv_nodes", "+".join(f"({n}:ncpus={c})" for n, c in zip(res.nodes, cores)))]
            if res.users:
                rows.append(("Authorized_Users", ",".join(sorted(res.users))))
            if res.groups:
                rows.append(("Authorized_Groups", ",".join(sorted(res.groups))))
            if res.period:
                rows.append(("reserve_rrule", res.rule or _rrule_text(res)))
                if res.last:
                    rows.append(("reserve_count", str(res.total())))
            rows.append(("server", server))
            w(f"Resv ID: {_id(res, server)}\n" + "".join(f"{k} = {v}\n" for k, v in rows) + "\n")
    return status


def _rrule_text(res: Reservation) -> str:
    freq = next((f for f, s in sorted(FREQUENCIES.items(), key=lambda kv: -kv[1]) if res.period % s == 0), "MINUTELY")
    n = int(res.period // FREQUENCIES[freq])
    days = sorted({datetime.fromtimestamp(res.start + o).weekday() for o in res.offsets})
    return f"FREQ={freq}" + (f";INTERVAL={n}" if n != 1 else "") + \
        (";BYDAY=" + ",".join(WEEKDAYS[d] for d in days) if freq == "WEEKLY" and len(res.offsets) > 1 else "") + \
        (f";COUNT={res.total()}" if res.last else "")


def pbs_rdel(opts: list[tuple[str, str]], operands: list[str], out, now: float) -> int:
    if not operands:
        raise UsageError("give a reservation id")
    server = load_site().server
    return release(operands, now, lambda sched, op: _find(sched, op, server),
                   unknown=("pbs_rdel: Unknown Reservation Id {op}", UNKNOWN_RESV),
                   denied="pbs_rdel: Unauthorized Request {op}")


def _edited(old: frozenset[str], text: str) -> frozenset[str]:
    """pbs_ralter's -U/-G: `+name` adds, `-name` removes, a plain list replaces."""
    words = [w.strip() for w in text.split(",") if w.strip()]
    if words and all(w[0] in "+-" for w in words):
        names = set(old)
        for w in words:
            (names.add if w[0] == "+" else names.discard)(w[1:].split("@")[0])
        return frozenset(names)
    if any(w[0] in "+-" for w in words):
        raise UsageError(f"illegal value {text!r}: give every name with + or -, or none")
    return _names(text)


def pbs_ralter(options: list[tuple[str, str]], operands: list[str], out, now: float) -> int:
    opts = dict(options)
    if len(operands) != 1:
        raise UsageError("give one reservation id")
    if "W" in opts or "l" in opts:
        raise UsageError(f"illegal -{'W' if 'W' in opts else 'l'} value (not taken)")
    try:
        start = parse_start_after(opts["R"], now, "-R") if "R" in opts else None
        end = parse_start_after(opts["E"], now, "-E") if "E" in opts else None
        duration = parse_duration(opts["D"]) if "D" in opts else None
    except InvalidRequest:
        raise UsageError(f"illegal -D value {opts['D']!r}") from None
    site, batch = load(write=True)
    user = whoami()
    with batch.open(write=True):
        res = _find(batch.sched, operands[0], site.server)
        if res is None:
            raise common.CommandError(f"Unknown Reservation Id {operands[0]}", UNKNOWN_RESV)
        if not (site.is_operator(user) or user == res.owner):
            raise common.CommandError("Unauthorized Request", common.UNAUTHORIZED)
        changes: dict = {}
        if start is not None or end is not None or duration is not None:
            s = res.start if start is None else start
            d = duration if duration is not None else (end - s if end is not None else res.duration)
            if end is not None and duration is not None and start is None:
                s = end - d
            if end is not None and not math.isclose(s + d, end):
                raise common.CommandError("Bad time specification(s): -E is not -R plus -D", BAD_TIME)
            if not d > 0:
                raise common.CommandError("Bad time specification(s)", BAD_TIME)
            user_limits(site, batch.sched, user, len(res.nodes), d, now, res.name)
            changes.update(start=s, duration=d)
        if "U" in opts:
            changes["users"] = sorted(_edited(res.users, opts["U"]))
        if "G" in opts:
            changes["groups"] = sorted(_edited(res.groups, opts["G"]))
        if "N" in opts:
            changes["title"] = opts["N"]
        if changes:
            try:
                batch.do("alter_reservation", now, name=res.name, changes=changes)
            except (InvalidRequest, SchedulerError) as e:  # (its nodes taken, or a time it cannot have)
                raise common.CommandError(str(e), UNAVAILABLE if "not free" in str(e) else BAD_TIME) from None
    out.write(f"pbs_ralter: {_id(res, site.server)} CONFIRMED\n")
    return 0


PBS_RSUB = _Rsub("pbs_rsub", "D:E:I:l:m:M:N:q:r:R:u:U:g:G:H:W:",
                 "usage: pbs_rsub [-R start] [-E end] [-D duration] [-N name] [-U users] [-G groups] "
                 "[-r rrule] [-I seconds] -l resources | --hosts host ...", pbs_rsub, changes=True)
PBS_RSTAT = Command("pbs_rstat", "fFBS", "usage: pbs_rstat [-fFBS] [reservation-id ...]", pbs_rstat)
PBS_RALTER = Command("pbs_ralter", "E:I:m:M:N:R:q:U:G:D:l:W:",
                     "usage: pbs_ralter [-R start] [-E end] [-D duration] [-N name] [-U [+|-]users] "
                     "[-G [+|-]groups] reservation-id", pbs_ralter, changes=True)
PBS_RDEL = Command("pbs_rdel", "", "usage: pbs_rdel reservation-id ...", pbs_rdel, changes=True)
