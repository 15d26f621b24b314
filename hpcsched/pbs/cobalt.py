"""Cobalt's commands: qsub, qstat, qdel, qhold, qrls, qalter and qmove as ALCF's users type them.

A site whose `flavor` is `cobalt` answers these seven names with the options and output of
Cobalt 1.0's POSIX clients (as Mira ran them); every other command keeps Torque's form.
Each is a translation, never a second path: a Cobalt qsub becomes the PBS submission of the
same job (`qsub.submit_parsed`), a qalter the same alteration, a qdel the same deletion, so
the one core sees one kind of job and every PBS command shows a Cobalt job too.

    qsub -n NODES -t MINUTES|HH:MM:SS [-A project] [-q queue] [--mode M] [--env A=1:B=2]
         [--cwd dir] [-O prefix] [-o file] [-e file] [-i file] [--jobname name] [-h] [-M addr]
         [--dependencies ID:ID] [--proccount N] [-u umask] [--attrs location=LOC:k=v] [--geometry AxBxCxDxE]
         [--run_users a:b] [-I] command [args]
    qstat [-f] [-l] [-u user] [--header A:B] [--sort A:B] [--reverse] [-Q] [jobid|queue ...]
    qdel ID...    qhold ID...    qrls [--dependencies] ID...    qmove QUEUE ID...
    qalter [-t [+|-]TIME] [-n N] [-A p] [--mode M] [--proccount N] [-e f] [-o f] [-M a]
           [--dependencies ID:ID] [-h] [--jobname n] ID...

What a Cobalt job is here.  Its command is run, at its start, as its script: the job runs
`command args` (with `< file` for -i) on its first node, in --cwd (default: where qsub ran),
as Cobalt runs every job on Cray and cluster systems and `--mode script` jobs on a Blue
Gene.  hpcsched has no runjob: a Blue Gene's c1..c64 modes are taken and shown (Mode,
Procs) but start nothing more.  Its files are `<cwd>/<jobid>.output` and `.error` unless
-O, -o or -e say otherwise; `$jobid` and `$COBALT_JOBID` in those paths, in --env values
and in --jobname become its id.  It gets COBALT_JOBID, COBALT_PARTNAME (its block or its
nodes), COBALT_PARTSIZE, COBALT_JOBSIZE, COBALT_NODEFILE (a node a line), COBALT_QUEUE,
COBALT_PROJECT, COBALT_STARTTIME and COBALT_ENDTIME, beside PBS's variables.

Directives: in a script whose first line is `#!`, the `#COBALT` lines right after it (up to
the first line that is not one) are options, as if given before the command line's, and
make the job a script job.  Errors are one line on stderr and exit status 1; a malformed
option prints Cobalt's usage and exits 2.
"""
from __future__ import annotations

import math
import os
import re
import sys
import time
from dataclasses import replace

from ..core import timefmt
from ..core.errors import InvalidRequest, InvalidState, SchedulerError
from ..core.jobs import (ACTIVE, DEP_FAIL, DEP_HOLD, EXITING, FINISHED, HELD, PENDING, QUEUED, RUNNING, WAITING,
                         Hold, Job, Request)
from ..core.timefmt import hms
from ..store import site as sitemod
from ..store.journaled import Batch
from ..store.request import current
from ..store.site import load_site, whoami
from . import client, common, qctl, qsub, siteprog
from .errors import SYSTEM, USAGE, CommandError, UsageError
from .options import COBALT_QSUB, parse_long

# --- the job, as Cobalt shows it ----------------------------------------------------------

#: core state -> Cobalt's (a finished job has left Cobalt's qstat)
STATES = {QUEUED: "queued", WAITING: "queued", DEP_HOLD: "dep_hold", DEP_FAIL: "dep_fail",
          RUNNING: "running", EXITING: "exiting"}


def state(job: Job) -> str:
    """queued, user_hold, admin_hold, dep_hold, dep_fail, running, exiting (killing once
    deleted while it ran) or done."""
    if job.state == HELD:
        return "user_hold" if Hold.USER in job.holds else "admin_hold"
    if job.state == EXITING and job.exit_status is None:  # (qdel'd: its process has not ended)
        return "killing"
    return STATES.get(job.state, "done")


def streams(job: Job) -> tuple[str, str]:
    """A Cobalt job's output and error files: <cwd>/<jobid>.output and .error unless given."""
    x = job.extra
    where = x.get("workdir") or x.get("submit_dir") or "."
    return (common.expand(x.get("output") or f"{where}/{job.id}.output", job),
            common.expand(x.get("error") or f"{where}/{job.id}.error", job))


def location(job: Job, topology) -> str:
    """Where a job runs, as Cobalt's qstat shows it: its block on a Blue Gene, its nid
    ranges on a Cray, else its nodes (`None` while it waits)."""
    return topology.place(job.nodes) if job.nodes else "None"


def environment(job: Job, topology, nodefile: str) -> dict[str, str]:
    """The COBALT_* variables of a Cobalt job's run (its --env values expanded)."""
    c = job.extra["cobalt"]
    start = int(job.start_time or 0)
    env = {k: common.expand(v, job) for k, v in c.get("env", {}).items()}
    env.update(COBALT_JOBID=str(job.id), COBALT_PARTNAME=location(job, topology),
               COBALT_PARTSIZE=str(topology.place_size(job.nodes)),
               COBALT_JOBSIZE=str(c["nodes"]), COBALT_NODEFILE=nodefile, COBALT_QUEUE=job.queue,
               COBALT_PROJECT=job.account or "", COBALT_STARTTIME=str(start),
               COBALT_ENDTIME=str(start + int(job.walltime)))
    return env


# --- the command line ---------------------------------------------------------------------

class CobaltCommand:
    """A Cobalt command: its option table (options.parse_long's), its usage line and its
    action, `action(opts, operands, out, now) -> exit status`.  Errors are one line and
    status 1; a malformed command line, optparse's usage and status 2."""

    def __init__(self, name: str, table, usage: str, action, changes: bool = False, permute: bool = True):
        self.name, self.table, self.usage, self.action = name, table, usage, action
        self.changes, self.permute = changes, permute

    def __call__(self, argv: list[str] | None = None, out=None, now: float | None = None) -> int:
        if argv is None:
            common.command_line()
            argv = sys.argv[1:]
        if argv[:1] == ["--version"]:
            (out or sys.stdout).write(f"version: \"{self.name} \" + hpcsched {common.VERSION}\n")
            return 0
        try:
            opts, operands = parse_long(argv, self.table, self.permute)
            status = self.action(opts, operands, out or sys.stdout, time.time() if now is None else now)
        except UsageError as e:
            sys.stderr.write(f"Usage: {self.name} {self.usage}\n\n{self.name}: error: {e}\n")
            return USAGE
        except (CommandError, SchedulerError, OSError) as e:
            sys.stderr.write(f"{e}\n")
            return SYSTEM
        if self.changes:
            from ..store.journal import default_home
            from ..store.site import notify
            notify(default_home())
        return status


def number(text: str) -> bool:
    """Digits 0-9 alone (str.isdigit takes `²` and other scripts' digits too)."""
    return bool(re.fullmatch(r"[0-9]+", text))


def job_ids(operands: list[str]) -> list[int]:
    """Cobalt's job ids: plain integers (`123.server` is taken too)."""
    if not operands:
        raise UsageError("No Jobid(s) given")
    ids = []
    for text in operands:
        head = text.split(".")[0]
        if not number(head):
            raise CommandError(f"jobid must be an integer: {text}")
        ids.append(int(head))
    return ids


def minutes(text: str, what: str = "time") -> float:
    """Cobalt's -t: whole minutes, or HH:MM:SS (MM:SS too), as seconds (timefmt.minutes)."""
    try:
        return timefmt.minutes(text)
    except InvalidRequest:
        raise CommandError(f"invalid {what} specification: {text!r} (minutes, or HH:MM:SS)") from None


def positive(text: str, what: str) -> int:
    if not number(text.strip()) or int(text) <= 0:
        raise CommandError(f"{what} must be a positive integer: {text!r}")
    return int(text)


def env_pairs(text: str) -> dict[str, str]:
    """--env `A=B:C=x\\=1\\:y`: pairs split at each unescaped ':' and at the first unescaped
    '=' (a backslash keeps the next character)."""
    pairs, cur, parts = {}, [], []
    i = 0
    while i <= len(text):
        ch = text[i] if i < len(text) else ":"
        if ch == "\\" and i + 1 < len(text):
            cur.append(("", text[i + 1]))
            i += 2
            continue
        if ch == ":":
            parts.append(cur)
            cur = []
        else:
            cur.append((ch, ch))
        i += 1
    for part in parts:
        if not part:
            continue
        raw = [marker for marker, _ in part]
        if "=" not in raw:
            raise CommandError(f"Improperly formatted argument to env: {text!r}")
        cut = raw.index("=")
        name = "".join(ch for _, ch in part[:cut])
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise CommandError(f"Improperly formatted argument to env: {name!r} is not a variable name")
        pairs[name] = "".join(ch for _, ch in part[cut + 1:])
    return pairs


def _quoted(value: str) -> str:
    """A -v value kept whole by attributes.variable_list (quotes hold its commas)."""
    return "'" + value.replace("'", "'\"'\"'") + "'"


# --- qsub -----------------------------------------------------------------------------------

QSUB_USAGE = "[options] <executable> [<executable options>]"
#: the modes a machine takes (a Blue Gene/Q's ranks per node; `interactive` is -I)
BG_MODES = ("c1", "c2", "c4", "c8", "c16", "c32", "c64", "script", "interactive")
OTHER_MODES = ("script", "interactive")
def attributes(text: str) -> dict[str, str]:
    """`--attrs location=X:foo:no_bar` -> {"location": "X", "foo": "true", "bar": "false"}."""
    out = {}
    for attr in text.split(":"):
        key, eq, value = attr.partition("=")
        if "=" in value or not key:
            raise CommandError(f"Improperly formatted argument to attrs : {attr}")
        if eq:
            out[key] = value
        else:
            out[key[3:] if key.startswith("no_") else key] = "false" if key.startswith("no_") else "true"
    return out


def places(text: str, topology) -> tuple[str, ...]:
    """The nodes a `location` attribute names, as `location` shows them: blocks on a Blue
    Gene, nid ranges on a Cray (`10..12,30` or Cobalt's `10-12,30`), else a host list."""
    try:
        return topology.places(text)
    except SchedulerError as e:
        raise CommandError(f"location {text!r}: {e}") from None


def shaped(text: str, nodes: int, topology) -> tuple[str, ...]:
    """The blocks of a `--geometry AxBxCxDxE` (nodes along each dimension) for a job of
    `nodes`, which must be the geometry's: a Blue Gene's alone."""
    m = re.fullmatch(r"([0-9]{1,6})x([0-9]{1,6})x([0-9]{1,6})x([0-9]{1,6})x([0-9]{1,6})", text)
    if not m:
        raise CommandError(f"Invalid geometry entered: {text}")
    if not topology.places_blocks:
        raise CommandError("Alternate location geometries are a Blue Gene's: this machine has no blocks")
    shape = tuple(int(g) for g in m.groups())
    if math.prod(shape) > nodes:  # (Cobalt's rule: -n covers the geometry)
        raise CommandError("Geometry requires more nodes than specified for job.")
    if math.prod(shape) < nodes:
        raise CommandError(f"Geometry {text} holds {math.prod(shape)} nodes, fewer than the job's {nodes}")
    names = tuple(b.name for b in topology.blocks if topology.geometry(b) == shape)
    if not names:
        raise CommandError(f"Block Geometry {text} is not an available geometry.")
    return names


def run_users(text: str, owner: str, site) -> list[str]:
    """`--run_users a:b`: the users who may act on the job as its owner does, its owner
    first (each checked against the password file on a multi-user site, as Cobalt does)."""
    users = [u for u in text.split(":") if u]
    if not users:
        raise CommandError("--run_users needs a user")
    if site.multi_user:
        import pwd
        for user in users:
            try:
                pwd.getpwnam(user)
            except KeyError:
                raise CommandError(f"user {user} does not exist.") from None
    return list(dict.fromkeys([owner, *users]))


def kept_to(c: dict, topology) -> tuple[str, ...]:
    """Where a Cobalt job may run: its location attribute's places, or the blocks of its
    geometry (none: anywhere)."""
    location, geometry = c.get("attrs", {}).get("location"), c.get("geometry")
    if location is not None and geometry:
        raise CommandError("give a location or a geometry, not both")
    if location is not None:
        return places(location, topology)
    return shaped(geometry, c["nodes"], topology) if geometry else ()


def directives(head: str) -> list[str]:
    """The words of the `#COBALT ` lines right after a script's `#!` line."""
    lines = head.split("\n")
    if not lines[0].startswith("#!"):
        return []
    words = []
    for line in lines[1:]:
        if not line.startswith("#COBALT "):
            break
        words.extend(line[len("#COBALT "):].split())
    return words


def _command_head(command: str) -> str:
    """The first bytes of the job's command, read as qsub's caller may read them."""
    script = current().script
    if script is not None:  # read by the client, with its rights
        return script.decode("utf-8", errors="replace")
    if current().caller is not None:  # the server opens no path for a user
        raise CommandError(f"command {command} not found, or is not a file")
    if not os.path.isfile(command):
        raise CommandError(f"command {command} not found, or is not a file")
    if not os.access(command, os.X_OK | os.R_OK):
        raise CommandError(f"command {command} is not executable")
    try:
        with open(command, "rb") as f:
            return f.read(1 << 16).decode("utf-8", errors="replace")
    except OSError as e:
        raise CommandError(f"command {command}: {e.strerror}") from None


def qsub_action(opts: list[tuple[str, str]], operands: list[str], out, now: float) -> int:
    given_cwd = dict(opts).get("cwd")
    cwd = os.path.normpath(os.path.join(os.getcwd(), given_cwd)) if given_cwd else os.getcwd()
    interactive = any(k == "interactive" or (k, v) == ("mode", "interactive") for k, v in opts)
    o, envs, opts, command, args = _options(opts, operands, cwd, interactive)
    if not os.path.isdir(cwd) and current().caller is None:
        raise CommandError(f"directory {cwd} does not exist")
    nodes = positive(o["nodecount"], "node count")
    walltime = minutes(o["time"])
    cobalt = _record(o, envs, nodes, "interactive" if interactive else o.get("mode"))
    if interactive and current().caller is None and not client.owns_site():
        # (a multi-user site: the server submits it, the session runs here)
        return qsub.remote_session([f"--{k}={v}" if v else f"--{k}" for k, v in opts])
    cmd = _pbs_options(o, envs, cwd, nodes, walltime, interactive)
    stdin_file = ""
    if "inputfile" in o:
        stdin_file = o["inputfile"] if o["inputfile"].startswith("/") else os.path.join(cwd, o["inputfile"])
        if current().caller is None and not os.path.isfile(stdin_file):
            raise CommandError(f"file {stdin_file} not found, or is not a file")
    rest = [] if interactive else ["--", command, *args]
    try:
        jid, _ = qsub.submit_parsed(cmd, rest, cwd=cwd, now=now, extra={"cobalt": cobalt}, stdin_file=stdin_file,
                                    check=_on_this_machine(o, cobalt, nodes, walltime))
    except CommandError as e:
        raise CommandError(str(e)) from None  # (Cobalt's status: 1)
    number = int(jid.split(".")[0].split("[")[0])
    if "$" in o.get("jobname", ""):
        _rename(number, o["jobname"], now)
    out.write(f"{number}\n")
    if interactive and current().caller is None:  # (the server answers remote_session with the id)
        out.flush()
        sitemod.notify(load_site().home)  # the server starts it as soon as it can
        return qsub.session(str(number))
    return 0




def _options(opts: list[tuple[str, str]], operands: list[str], cwd: str, interactive: bool):
    """The options (a script's `#COBALT` lines first, the command line's after: they win),
    each --env's pairs together, the command and its arguments: (o, envs, opts, command, args)."""
    command, args = "", []
    if interactive and operands:
        raise CommandError("An executable may not be specified if using the interactive option.")
    if not interactive:
        if not operands:
            raise UsageError("No executable or script specified")
        command = operands[0] if operands[0].startswith("/") else os.path.join(cwd, operands[0])
        args = operands[1:]
        found = directives(_command_head(command))
        if found:  # (the command line's own come after: they win)
            opts = [*parse_long(found, COBALT_QSUB)[0], ("mode", "script"), *opts]
    if not opts:
        raise UsageError("No required options provided")
    o: dict[str, str] = {}
    envs: dict[str, str] = {}
    for name, value in opts:
        if name == "env":  # (each --env adds to the others)
            envs.update(env_pairs(value))
        o[name] = value
    if "time" not in o:
        raise CommandError("'time' not provided")
    if "nodecount" not in o:
        raise CommandError("'nodecount' not provided")
    return o, envs, opts, command, args


def _record(o: dict[str, str], envs: dict[str, str], nodes: int, mode: str | None) -> dict:
    """The job's Cobalt record (qstat's and the job's own: mode, procs, attrs, kernel, ...)."""
    attrs = attributes(o["attrs"]) if "attrs" in o else {}
    cobalt = {"nodes": nodes, "mode": mode, "env": envs, **({"attrs": attrs} if attrs else {}),
              **({"geometry": o["geometry"]} if "geometry" in o else {}),
              **({"preemptable": True} if "preemptable" in o else {}),
              **{k: o[k] for k in ("kernel", "kerneloptions", "ion_kernel", "ion_kerneloptions") if k in o}}
    if "proccount" in o:
        cobalt["procs"] = positive(o["proccount"], "proccount")
    if "run_users" in o:
        cobalt["run_users"] = run_users(o["run_users"], whoami(), load_site())
    if "run_project" in o and not o.get("project"):
        raise CommandError("--run_project needs a project (-A)")
    return cobalt


def _on_this_machine(o: dict[str, str], cobalt: dict, nodes: int, walltime: float):
    """What the job must meet on this machine (qsub's `check`)."""
    def on_this_machine(sched, job: Job, queue: str) -> None:
        """What the job must meet here: its nodes, its mode, and -t 0 as the queue's most."""
        bluegene = sched.topology.places_blocks
        most = sched.topology.node_count
        if nodes > most:
            raise CommandError(f"node count out of realistic range (the machine has {most})")
        modes = BG_MODES if bluegene else OTHER_MODES
        cobalt["mode"] = cobalt["mode"] or ("c1" if bluegene else "script")
        if cobalt["mode"] not in modes:
            raise CommandError(f"Specified mode '{cobalt['mode']}' not valid, valid modes are {', '.join(modes)}")
        cobalt.setdefault("procs", nodes * int(cobalt["mode"][1:]) if cobalt["mode"][0] == "c" else nodes)
        if walltime <= 0:  # (0: the most the queue allows)
            most = sched.router.queues[queue].max_walltime if queue else None
            if not most:
                raise CommandError("-t 0 asks for the queue's most walltime, and the queue sets none")
            job.walltime = most
        if "run_project" in o:  # (its project's users, as its allocation lists them)
            account = sched.bank.accounts.get(job.account) if sched.bank is not None else None
            if account is None or not account.users:
                raise CommandError(f"--run_project: project {job.account} lists no users (its allocation's users)")
            cobalt["run_users"] = list(dict.fromkeys([*cobalt.get("run_users", [job.owner]), *sorted(account.users)]))
        within = kept_to(cobalt, sched.topology)
        if within:  # (it runs there alone: inside that block, on those nodes, on a block of that shape)
            job.request = replace(job.request, within=within)
    return on_this_machine


def _pbs_options(o: dict[str, str], envs: dict[str, str], cwd: str, nodes: int, walltime: float,
                 interactive: bool) -> list[tuple[str, str]]:
    """Cobalt's options as qsub's (-d, -l nodes and walltime, -A, -q, -M, -N, -h, -I, -W, -o, -e, -v)."""
    cmd: list[tuple[str, str]] = [("d", cwd), ("l", f"nodes={nodes}"), ("n", "")]
    if walltime > 0:
        cmd.append(("l", f"walltime={int(walltime)}"))
    for name, letter in (("project", "A"), ("queue", "q"), ("notify", "M"), ("jobname", "N")):
        if name in o:
            cmd.append((letter, o[name]))
    if "notify" in o:
        cmd.append(("m", "be"))  # (Cobalt mails at the start and the end)
    if "held" in o:
        cmd.append(("h", ""))
    if interactive:
        cmd.append(("I", ""))
    if "umask" in o:
        cmd.append(("W", f"umask={o['umask']}"))
    if o.get("dependencies"):
        deps = [d for d in o["dependencies"].split(":") if d]
        job_ids(deps)
        cmd.append(("W", "depend=afterok:" + ":".join(deps)))
    prefix = o.get("outputprefix")
    for name, suffix, letter in (("output", ".output", "o"), ("error", ".error", "e")):
        path = o.get(name) or (prefix + suffix if prefix else f"$jobid{suffix}")
        cmd.append((letter, path if path.startswith("/") else os.path.join(cwd, path)))
    if envs:
        cmd.append(("v", ",".join(f"{k}={_quoted(v)}" for k, v in envs.items())))
    return cmd


def _rename(jid: int, name: str, now: float) -> None:
    """--jobname with `$jobid`: named once the job has its id."""
    from .attributes import parse_job_name
    site = load_site()
    batch = Batch.of(site)
    with batch.open(write=True):
        job = batch.sched.jobs[jid]
        batch.do("alter", now, id=jid, changes={"name": parse_job_name(common.expand(name, job))})


QSUB = CobaltCommand("qsub", COBALT_QSUB, QSUB_USAGE, qsub_action, changes=True, permute=False)


# --- qstat ----------------------------------------------------------------------------------

DEFAULT_HEADER = ["JobID", "User", "WallTime", "Nodes", "State", "Location"]
FULL_HEADER = ["JobID", "JobName", "User", "WallTime", "QueuedTime", "RunTime", "TimeRemaining", "Nodes",
               "State", "Location", "Mode", "Procs", "Preemptable", "Queue", "StartTime", "Index"]
LONG_HEADER = ["JobID", "JobName", "User", "WallTime", "QueuedTime", "RunTime", "TimeRemaining", "Nodes",
               "State", "Location", "Mode", "Procs", "Preemptable", "User_Hold", "Admin_Hold", "Queue",
               "StartTime", "Index", "SubmitTime", "Path", "OutputDir", "ErrorPath", "OutputPath", "Envs",
               "Command", "Args", "Kernel", "KernelOptions", "ION_Kernel", "ION_KernelOptions", "Project",
               "Dependencies", "short_state", "Notify", "Score", "Maxtasktime", "attrs", "dep_frac",
               "user_list", "Geometry", "Est_Start_Time"]
QUEUE_HEADER = ["Name", "Users", "Groups", "MinTime", "MaxTime", "MaxRunning", "MaxQueued", "MaxUserNodes",
                "MaxNodeHours", "TotalNodes", "State"]
QSTAT_TABLE = ((("-d", "--debug"), "debug", False), (("-f", "--full"), "full", False),
               (("-l", "--long"), "long", False), (("-Q",), "Q", False), (("--reverse",), "reverse", False),
               (("--header",), "header", True), (("--sort",), "sort", True), (("-u", "--user"), "user", True))


def ctime(t: float) -> str:
    """Cobalt's dates: `Fri Nov 27 23:01:32 2026 +0000 (UTC)`."""
    return common.local_time("%a %b %d %H:%M:%S %Y %z (%Z)", t)


def _elapsed(seconds: float) -> str:
    return hms(max(0.0, seconds))


def job_fields(job: Job, sched, now: float, score) -> dict[str, object]:
    """Every field of LONG_HEADER for `job`, by lower-case name."""
    x = job.extra
    c = x.get("cobalt", {})
    started = job.start_time is not None and job.state in ACTIVE
    out, err = streams(job) if c else (x.get("output", ""), x.get("error", ""))
    program = x.get("program") or []
    s = state(job)
    return {
        "jobid": job.id, "jobname": job.name, "user": job.owner, "walltime": hms(job.walltime),
        "queuedtime": _elapsed((job.start_time if started else now) - job.submit_time),
        "runtime": _elapsed(now - job.start_time) if started else "N/A",
        "timeremaining": _elapsed(job.walltime - (now - job.start_time)) if started else "N/A",
        "nodes": c.get("nodes", job.request.nodes), "state": s, "location": location(job, sched.topology),
        "mode": c.get("mode", "script"), "procs": c.get("procs", job.request.processors),
        "preemptable": bool(c.get("preemptable")), "user_hold": Hold.USER in job.holds,
        "admin_hold": bool(job.holds - {Hold.USER}), "queue": job.queue,
        "starttime": ctime(job.start_time) if started else "N/A",
        "index": job.array_index if job.array_id else None, "submittime": ctime(job.submit_time),
        "path": x.get("variables", {}).get("PBS_O_PATH", ""), "outputdir": x.get("workdir") or x.get("submit_dir"),
        "errorpath": err, "outputpath": out,
        "envs": " ".join(f"{k}={v}" for k, v in c.get("env", {}).items()),
        "command": program[0] if program else "", "args": " ".join(program[1:]),
        "kernel": c.get("kernel", "default"), "kerneloptions": c.get("kerneloptions"),
        "ion_kernel": c.get("ion_kernel", "default"), "ion_kerneloptions": c.get("ion_kerneloptions"),
        "project": job.account or None,
        "dependencies": ":".join(str(d.job_id) for d in job.dependencies) or None,
        "short_state": {"queued": "Q", "running": "R", "exiting": "E", "killing": "K"}.get(s, "H"),
        "notify": x.get("mail_users") or None, "score": score(job), "maxtasktime": None, "attrs": c.get("attrs", {}),
        "dep_frac": None, "user_list": ":".join(c.get("run_users", [job.owner])), "geometry": c.get("geometry", "Any"),
        "est_start_time": (sched.planned(job.id) or (None,))[0] if job.state in PENDING else None}


def human(x: float) -> str:
    """Cobalt's Score: ` 30.0  `, ` 12.3 K`, ..."""
    for unit in ("  ", " K", " M", " G", " T"):
        if x < 1000.0:
            return f"{max(x, 0.1):5.1f}{unit}"
        x /= 1000.0
    return f"{max(x * 1000.0, 0.1):5.1f} P"


def tabular(rows: list[list[str]]) -> str:
    """Cobalt's table: each column as wide as its widest cell, left-aligned, two spaces
    after each (the last too), and a rule of `=` under the header."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["".join(f"{cell:<{w}}  " for cell, w in zip(row, widths)) for row in rows]
    return "\n".join([lines[0], "=" * (sum(widths) + 2 * len(widths)), *lines[1:]]) + "\n"


def vertical(rows: list[list[str]]) -> str:
    """qstat -l: `Head: value` for the first field, `    Head    : value` for the rest."""
    header, width = rows[0], max(len(h) for h in rows[0]) + 1
    out = []
    for row in rows[1:]:
        out.append(f"{header[0]}: {row[0]}")
        out.extend(f"    {h:<{width}}: {v}" for h, v in zip(header[1:], row[1:]))
        out.append("")
    return "\n".join(out) + "\n"


def _sort_key(value: str):
    try:
        return (0, float(value), "")
    except ValueError:
        return (1, 0.0, value)


def qstat_action(opts: list[tuple[str, str]], operands: list[str], out, now: float) -> int:
    o = dict(opts)
    site = load_site()
    batch = Batch.of(site)
    with batch.open(write=False):
        sched = batch.sched
        if "Q" in o:
            header = QUEUE_HEADER
            rows = [_queue_row(q) for q in sched.router.queues.values() if not operands or q.name in operands]
            if operands and not rows:
                return 1
        else:
            header = _header(o)
            viewer = whoami()
            jobs = [j for j in sched.jobs.values() if j.state not in FINISHED and common.may_see(site, viewer, j)]
            if "user" in o:
                jobs = [j for j in jobs if j.owner == o["user"]]
            if operands:
                queues = set(sched.router.queues) & set(operands)
                wanted = {int(t.split(".")[0]) for t in operands if t not in queues and number(t.split(".")[0])}
                bad = [t for t in operands if t not in queues and not number(t.split(".")[0])]
                if bad:
                    raise CommandError(f"{bad[0]} is not a valid jobid or queue name")
                jobs = [j for j in jobs if j.id in wanted or j.queue in queues]
                if not jobs:
                    return 1  # (none of them: nothing printed, as Cobalt's qstat)
            keys = [h.lower() for h in header]
            sort_by = [k for k in (o["sort"].lower().split(":") if "sort" in o else ["score"]) if k in keys] \
                or keys[:1]
            policy, ctx = sched.policy, sched.context(now)

            def score(j: Job) -> float:  # (asked of the policy only when shown)
                if "score" not in keys:
                    return 0.0
                factors = policy.describe(j, ctx)
                return float(factors.get("score", factors.get("priority", 0.0)) or 0.0)
            width = max((len(str(j.id)) for j in jobs), default=0)
            entries = []
            for j in jobs:
                f = job_fields(j, sched, now, score)
                f["jobid"] = f"{j.id:>{width}}"
                order = [_sort_key(f[k] if k == "score" else str(f.get(k, "-"))) for k in sort_by]  # (Score raw)
                f["score"] = human(f["score"])
                if f["est_start_time"] is not None:
                    f["est_start_time"] = common.local_time("%Y-%m-%d %H:%M:%S", f["est_start_time"])
                entries.append((order, [str(f.get(k, "-")) for k in keys]))
            entries.sort(key=lambda e: e[0])
            rows = [row for _, row in entries]
        if "reverse" in o:
            rows.reverse()
    shown = ["S" if h == "short_state" else h for h in header]
    out.write(vertical([shown, *rows]) if "long" in o else tabular([shown, *rows]))
    return 0


def _header(o: dict) -> list[str]:
    """The columns: -f -l every field; -f the full set (or $QSTAT_HEADER_FULL); --header, or
    $QSTAT_HEADER; else Cobalt's six."""
    custom = o.get("header") or os.environ.get("CQSTAT_HEADER") or os.environ.get("QSTAT_HEADER")
    custom_full = os.environ.get("CQSTAT_HEADER_FULL") or os.environ.get("QSTAT_HEADER_FULL")
    if "full" in o and "long" in o:
        return LONG_HEADER
    if "full" in o:
        return custom_full.split(":") if custom_full else FULL_HEADER
    if custom:
        known = {h.lower(): h for h in LONG_HEADER}
        fields = [known.get(h.lower(), h) for h in custom.split(":") if h]
        for h in fields:
            if h.lower() not in known:
                raise CommandError(f"{h} is not a field qstat knows (see qstat -fl)")
        return fields
    return DEFAULT_HEADER


def _queue_row(q) -> list[str]:
    """A queue as qstat -Q shows it; its state by whether it takes jobs and runs them."""
    def shown(t):
        return "None" if t is None else hms(t)
    users = ":".join(sorted(q.acl_users)) if q.acl_users is not None else "*"
    groups = ":".join(sorted(q.acl_groups)) if q.acl_groups is not None else "*"
    return [q.name, users, groups, shown(q.min_walltime), shown(q.max_walltime), str(q.max_running_per_user),
            str(q.max_queued_per_user), "None", "None", str(q.max_nodes), queue_state(q)]


def queue_state(q) -> str:
    """A queue's Cobalt state, by whether it takes jobs and runs them: running, stopped,
    draining or dead."""
    return {(True, True): "running", (True, False): "stopped", (False, True): "draining",
            (False, False): "dead"}[(q.enabled and not q.draining, q.started)]


QSTAT = CobaltCommand("qstat", QSTAT_TABLE, "[options] <jobids1> ... <jobidsN>", qstat_action)


# --- qdel, qhold, qrls, qmove, qalter ------------------------------------------------------

DEBUG = ((("-d", "--debug"), "debug", False),)


def _each(ids: list[int], act) -> dict[int, Job | None]:
    """`act(batch, job)` on each unfinished job named, in one locked write: {id: the job,
    or None if there is none}."""
    site = load_site()
    batch = Batch.of(site)
    found: dict[int, Job | None] = {}
    with batch.open(write=True), batch.store.one_sync():
        for jid in ids:
            job = batch.sched.jobs.get(jid)
            found[jid] = job
            if job is not None and job.state not in FINISHED:
                act(batch, job)
    return found


def qdel_action(opts, operands, out, now: float) -> int:
    ids = job_ids(operands)
    deleted, failed = [], []

    def delete(batch: Batch, job: Job) -> None:
        try:
            qctl.qdel(batch, job, {})
            deleted.append(job)
        except CommandError as e:
            failed.append(f"      job {job.id}: {e}")
    found = _each(ids, delete)
    failed += [f"      job {jid} not found" for jid, job in found.items() if job is None or
               job.state in FINISHED and job not in deleted]
    if deleted:
        out.write("      Deleted Jobs\n" + tabular([["JobID", "User"], *[[str(j.id), j.owner] for j in deleted]]))
    if failed:
        sys.stderr.write("   Failed to delete jobs: \n" + "\n".join(failed) + "\n")
    return 1 if failed else 0


def _hold_or_release(prog: str):
    """Cobalt's qhold and qrls: the user hold, placed or removed; each job said how it went."""
    hold = prog == "qhold"

    def action(opts, operands, out, now: float) -> int:
        ids = job_ids(operands)
        o = dict(opts)
        done, failed = [], []

        def change(batch: Batch, job: Job) -> None:
            user = whoami()
            if not common.may_touch(batch.site, user, job):
                failed.append(f"      job {job.id}: not yours ({job.owner}'s)")
            elif not hold and "dependencies" in o:
                batch.do("alter", now, id=job.id, changes={"dependencies": []})
                done.append(job.id)
            elif job.state in ACTIVE:
                failed.append(f"      job {job.id} is already active")
            elif hold and Hold.USER in job.holds:
                failed.append(f"      job {job.id} already in state 'user hold'")
            elif not hold and Hold.USER not in job.holds:
                failed.append(f"      job {job.id} does not have a 'user hold'")
            else:
                batch.do("hold" if hold else "release", id=job.id, kind=Hold.USER.value)
                done.append(job.id)
        found = _each(ids, change)
        failed += [f"      job {jid} not found" for jid, job in found.items() if job is None]
        failed += [f"      job {jid} has already completed" for jid, job in found.items()
                   if job is not None and job.state in FINISHED]
        if failed:
            what = "place user hold on" if hold else "remove user hold on"
            out.write(f"   Failed to {what} jobs: \n" + "\n".join(failed) + "\n")
        if done:
            if not hold and "dependencies" in o:
                out.write("   Removed dependencies from jobs: \n")
            else:
                out.write("Placed user hold on jobs: \n" if hold else "   Removed user hold on jobs: \n")
            out.write("".join(f"      {jid}\n" for jid in done))
        return 1 if failed and not done else 0
    return action


def qmove_action(opts, operands, out, now: float) -> int:
    if len(operands) < 2:
        raise UsageError("give a queue name and a job id")
    queue, ids = operands[0], job_ids(operands[1:])
    moved, failed = [], []

    def move(batch: Batch, job: Job) -> None:
        try:
            if not common.may_touch(batch.site, whoami(), job):
                raise CommandError(f"not yours ({job.owner}'s)")
            if queue not in batch.sched.router.queues:
                raise CommandError(f"queue '{queue}' not found")
            if job.state not in PENDING:
                raise CommandError("it is not waiting")
            batch.do("alter", now, id=job.id, changes={"queue": queue})
            moved.append(job.id)
        except (CommandError, SchedulerError) as e:
            failed.append(f"Failed to move job {job.id} to queue '{queue}': {e}")
    found = _each(ids, move)
    failed += [f"Failed to move job {jid}: job not found" for jid, job in found.items()
               if job is None or job.state in FINISHED]
    out.write("".join(f"moved job {jid} to queue '{queue}'\n" for jid in moved))
    if failed:
        sys.stderr.write("\n".join(failed) + "\n")
    return 1 if failed else 0


QALTER_TABLE = ((("-d", "--debug"), "debug", False), (("-v", "--verbose"), "verbose", False),
                (("-A", "--project"), "project", True), (("-t", "--time"), "time", True),
                (("-n", "--nodecount"), "nodecount", True), (("--mode",), "mode", True),
                (("--proccount",), "proccount", True), (("-e", "--error"), "error", True),
                (("-o", "--output"), "output", True), (("-M", "--notify"), "notify", True),
                (("--dependencies",), "dependencies", True), (("-h", "--held"), "held", False),
                (("--jobname",), "jobname", True), (("--defer",), "defer", False), (("--attrs",), "attrs", True),
                (("--geometry",), "geometry", True), (("--run_users", "--user_list"), "run_users", True))


def qalter_action(opts, operands, out, now: float) -> int:
    o = dict(opts)
    ids = job_ids(operands)
    if not set(o) - {"debug", "verbose"}:
        raise UsageError("no option given to change")
    if "defer" in o:
        raise CommandError("--defer is not supported here (its score would have to be lowered by hand)")
    failed = []

    def alter(batch: Batch, job: Job) -> None:
        user = whoami()
        if not common.may_touch(batch.site, user, job):
            failed.append(f"job {job.id}: not yours ({job.owner}'s)")
            return
        if job.state not in PENDING:  # (Cobalt: nothing of a running job changes)
            failed.append(f"job {job.id} is running: nothing may change while it runs")
            return
        try:
            changes, c = _alterations(job, o, batch, now)
        except CommandError as e:
            failed.append(f"job {job.id}: {e}")
            return
        old = {k: getattr(job, k) for k in ("walltime", "account", "name")}
        try:
            if changes:
                batch.do("alter", now, id=job.id, changes=changes)
            if "held" in o and Hold.USER not in job.holds:
                batch.do("hold", id=job.id, kind=Hold.USER.value)
        except (SchedulerError, InvalidState) as e:
            failed.append(f"job {job.id}: {e}")
            return
        for key, label in (("walltime", "walltime"), ("account", "project"), ("name", "jobname")):
            if key in changes and changes[key] != old[key]:
                shown = hms(changes[key]) if key == "walltime" else changes[key]
                out.write(f"{label} set to: {shown} for job {job.id}\n")
        if c:
            out.write(f"{', '.join(c)} changed for job {job.id}\n")
    found = _each(ids, alter)
    failed += [f"job {jid} not found" for jid, job in found.items() if job is None or job.state in FINISHED]
    if failed:
        sys.stderr.write("\n".join(failed) + "\n")
    return 1 if failed else 0


def _alterations(job: Job, o: dict, batch: Batch, now: float) -> tuple[dict, list[str]]:
    """(core changes, the other things changed) for a Cobalt qalter of `job`: the PBS qalter
    of the same change (qctl.alter_changes), and its Cobalt record's nodes, mode and procs."""
    options: dict[str, str] = {}
    resources: dict[str, str] = {}
    said = [name for name in ("nodecount", "mode", "proccount", "output", "error", "notify", "dependencies", "attrs",
                              "geometry", "run_users") if name in o]
    if "time" in o:
        text = o["time"].strip()
        seconds = minutes(text.lstrip("+-"))
        walltime = job.walltime + {"+": seconds, "-": -seconds}[text[0]] if text[:1] in "+-" else seconds
        if walltime <= 0:
            raise CommandError(f"walltime would be {hms(walltime)}: it must stay positive")
        resources["walltime"] = str(int(walltime))
    if "nodecount" in o:
        resources["nodes"] = str(positive(o["nodecount"], "node count"))
    for name, letter in (("project", "A"), ("jobname", "N"), ("output", "o"), ("error", "e"), ("notify", "M")):
        if name in o:
            options[letter] = common.expand(o[name], job) if name == "jobname" else o[name]
    if "notify" in o:
        options["m"] = "be"  # (Cobalt mails at the start and the end)
    deps = [d for d in o.get("dependencies", "").split(":") if d and d.lower() != "none"]
    if deps:
        job_ids(deps)
        options["W"] = "depend=afterok:" + ":".join(deps)
    changes, _ = qctl.alter_changes(job, options, resources, now, common.visible(batch.site, whoami(), batch.sched.jobs),
                                    batch.site.server,
                                    batch.site.flavor, batch.sched.topology,
                                    frozenset(batch.site.config.get("consumables", {})),
                                    siteprog.isdir_for(batch.site, whoami()))
    if "dependencies" in o and not deps:  # (`none`: every dependency goes)
        changes["dependencies"] = []
    c = dict(job.extra.get("cobalt", {"nodes": job.request.nodes, "mode": "script",
                                      "procs": job.request.processors}))
    if "nodecount" in o:
        c["nodes"] = int(resources["nodes"])
    if "mode" in o:
        modes = BG_MODES[:-1] if batch.sched.topology.places_blocks else OTHER_MODES[:-1]
        if o["mode"] not in modes:
            raise CommandError(f"Specified mode '{o['mode']}' not valid, valid modes are {', '.join(modes)}")
        c["mode"] = o["mode"]
    if "proccount" in o:
        c["procs"] = positive(o["proccount"], "proccount")
    elif "nodecount" in o or "mode" in o:
        c["procs"] = c["nodes"] * int(c["mode"][1:]) if c["mode"][0] == "c" else c["nodes"]
    if "run_users" in o:  # (they replace the job's; its owner stays first)
        c["run_users"] = run_users(o["run_users"], job.owner, batch.site)
    for name, value in (("attrs", attributes(o["attrs"]) if o.get("attrs") else None),
                        ("geometry", o.get("geometry") or None)):
        if name in o:  # (what is given replaces the job's; an empty value drops it)
            c.pop(name, None)
            c.update({name: value} if value else {})
    if "location" in c.get("attrs", {}) or c.get("geometry") or "attrs" in o or "geometry" in o:
        # (a request built anew keeps its place too)
        request = Request.from_dict(changes["request"]) if "request" in changes else job.request
        within = kept_to(c, batch.sched.topology)
        if request.within != within:
            changes["request"] = replace(request, within=within).to_dict()
    if c != job.extra.get("cobalt"):
        changes["extra"] = {**changes.get("extra", job.extra), "cobalt": c}
    return changes, said


QDEL = CobaltCommand("qdel", DEBUG, "[options] <jobid1> [ ... <jobidN>]", qdel_action, changes=True)
QHOLD = CobaltCommand("qhold", DEBUG, "[options] <jobid1> [ ... <jobidN> ]", _hold_or_release("qhold"),
                      changes=True)
QRLS = CobaltCommand("qrls", DEBUG + ((("--dependencies",), "dependencies", False),),
                     "[options] <jobid1> [ ... <jobidN> ]", _hold_or_release("qrls"), changes=True)
QMOVE = CobaltCommand("qmove", DEBUG, "[options] <queue name> <jobid1> [... <jobidN>]", qmove_action,
                      changes=True)
QALTER = CobaltCommand("qalter", QALTER_TABLE, "[options] <jobid1> ... <jobidN>", qalter_action, changes=True)


# --- cqwait ----------------------------------------------------------------------------------

CQWAIT_POLL = 1.0  # seconds between looks (Cobalt's cqwait looks every 2)


def cqwait_action(opts, operands, out, now: float) -> int:
    """Wait until none of the jobs is left unfinished (--start: left waiting), as Cobalt's
    cqwait does; a job never known is not waited for, and `*` stands for every job.  It
    watches through Torque's qselect, asked of the server (any site, any user) or run
    here, so it waits in the caller's own process and never holds the server."""
    if ("version", "") in opts:
        out.write(f"version: \"cqwait \" + hpcsched {common.VERSION}\n")  # (as --version)
        return 0
    every = "*" in operands
    named = [text for text in operands if text != "*"]
    ids = set(job_ids(named)) if named or not every else set()  # (job_ids refuses none at all)
    argv = ["-s", "HQTW"] if ("start", "") in opts else []  # (waiting; else every job not finished)
    here = client.owns_site()
    try:
        while True:
            answer = client.query("qselect", argv, qctl.QSELECT if here else None)
            if answer is None:
                raise CommandError("cqwait: cannot connect to the hpcsched server (it is not running)")
            status, listed = answer
            if status:
                raise CommandError(f"cqwait: the server's qselect failed (status {status})")
            left = {int(re.match(r"[0-9]+", line).group()) for line in listed.split()}  # (123[4].server: 123)
            if not (left if every else ids & left):
                return 0
            time.sleep(CQWAIT_POLL)
    except KeyboardInterrupt:
        sys.stderr.write("\ncqwait: no longer waiting\n")
        return 130


CQWAIT = CobaltCommand("cqwait", ((("-r",), "quickreturn", False), (("-v",), "version", False),
                                  (("--start",), "start", False)), "[-vr] [--start] <jobid> <jobid>", cqwait_action)
