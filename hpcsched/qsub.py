"""qsub: submit a batch job, Torque/OpenPBS style.

Options are taken from the command line first, then from `#PBS` directives in the script
(the command line wins; `-l` merges resource by resource, the command line winning each).
On success stdout is exactly one line, the job id.
"""
from __future__ import annotations

import math
import os
import re
import shlex
import socket
import subprocess
import sys
import time
from datetime import datetime, timedelta

from . import accounting, commands, pbs
from .batch import Batch
from .commands import OPTIONS
from .errors import InvalidRequest, Rejected
from .jobs import Dependency, DepType, Hold, Job, Request
from .site import load_site, notify, whoami
from .timefmt import parse_duration

USAGE = ("usage: qsub [-a date_time] [-A account_string] [-C directive_prefix] [-d path] [-e path] "
         "[-h] [-j oe|eo|n] [-l resource_list] [-m mail_options] [-M user_list] [-N name] [-o path] "
         "[-p priority] [-q destination] [-r y|n] [-S path] [-v variable_list] [-V] [-W attributes] "
         "[-z] [script]")


def usage_error(message: str) -> pbs.CommandError:
    return pbs.CommandError(f"{message}\n{USAGE}", pbs.USAGE)


def parse_options(argv: list[str], where: str = "", table: dict[str, bool] = OPTIONS
                  ) -> tuple[list[tuple[str, str]], list[str]]:
    """PBS getopt (commands.parse_options) with qsub's usage line on a malformed option."""
    try:
        return commands.parse_options(argv, where, table)
    except commands.UsageError as e:
        raise usage_error(str(e)) from None


def directives(script: str, prefix: str) -> list[tuple[str, str]]:
    """Options from the script's directive lines, in order."""
    opts: list[tuple[str, str]] = []
    if not prefix:
        return opts
    for n, line in enumerate(script.splitlines(), 1):
        stripped = line.strip()
        if n == 1 and (stripped.startswith("#!") or stripped.startswith(":")):
            continue
        if not stripped:
            continue
        if not stripped.startswith("#"):
            break
        if stripped.startswith(prefix):
            body = stripped[len(prefix):]
            if body and not body[0].isspace():
                continue  # "#PBSfoo" is a comment, not a directive
            try:
                words = shlex.split(body, comments=True)
            except ValueError as e:
                raise pbs.CommandError(f"directive error on script line {n}: {e}", pbs.USAGE) from None
            found, rest = parse_options(words, where=f" (script line {n})")
            if rest:
                raise pbs.CommandError(f"directive error on script line {n}: unexpected {rest[0]!r}", pbs.USAGE)
            opts.extend(found)
    return opts


def split_resources(value: str) -> list[tuple[str, str]]:
    out = []
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        name, eq, val = item.partition("=")
        if not eq or not name or not val:
            raise pbs.CommandError(f"illegal -l value\n{USAGE}", pbs.USAGE)
        out.append((name.strip().lower(), val.strip()))
    return out


def merge(cmdline: list[tuple[str, str]], script: list[tuple[str, str]]) -> tuple[dict[str, str], dict[str, str]]:
    """(first value of each option, resources merged per name), command line first."""
    options: dict[str, str] = {}
    resources: dict[str, str] = {}
    for letter, value in cmdline + script:
        if letter == "l":
            for name, val in split_resources(value):
                resources.setdefault(name, val)
        elif letter == "v":
            options["v"] = options["v"] + "," + value if "v" in options else value
        else:
            options.setdefault(letter, value)
    return options, resources


_MEM = re.compile(r"^(\d+)\s*([kmgtp]?)(b|w)?$", re.I)


def parse_memory(text: str) -> int:
    """`8gb` -> 8192 (MB, rounded up); plain numbers are bytes, as PBS reads them."""
    m = _MEM.match(text.strip())
    if not m:
        raise pbs.CommandError(f"illegal -l value: bad size {text!r}\n{USAGE}", pbs.USAGE)
    n = int(m.group(1)) * (8 if (m.group(3) or "b").lower() == "w" else 1)
    scale = {"": 1, "k": 2 ** 10, "m": 2 ** 20, "g": 2 ** 30, "t": 2 ** 40, "p": 2 ** 50}[m.group(2).lower()]
    return math.ceil(n * scale / 2 ** 20)


def positive(text: str, what: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise pbs.CommandError(f"illegal -l value: {what} must be a positive integer, not {text!r}\n{USAGE}",
                               pbs.USAGE)
    return int(text)


TORQUE_RES = {"nodes", "ppn", "procs", "pmem", "vmem", "pvmem"}
KNOWN_RES = TORQUE_RES | {"walltime", "mem", "ncpus", "select", "place", "cput", "file", "host", "nice",
                          "mpiprocs", "naccelerators", "ngpus", "software", "arch"}


def build_request(res: dict[str, str]) -> tuple[Request, float | None]:
    """(request, walltime or None) from -l resources of either style."""
    for name in res:
        if name not in KNOWN_RES:
            raise pbs.CommandError(f"Unknown resource type {name}", pbs.USAGE)
    if "select" in res or "place" in res:
        mixed = sorted(TORQUE_RES & set(res))
        if mixed:
            raise pbs.CommandError(f'"-lresource=" cannot be used with "select" or "place", resource is: '
                                   f'{mixed[0]}', pbs.USAGE)
    walltime = None
    if "walltime" in res:
        try:
            walltime = parse_duration(res["walltime"])
        except InvalidRequest:
            raise pbs.CommandError(f"illegal -l value: walltime {res['walltime']!r}\n{USAGE}", pbs.USAGE) from None
        if walltime <= 0:
            raise pbs.CommandError(f"illegal -l value: walltime must be positive\n{USAGE}", pbs.USAGE)
    nodes, ppn, cores, mem, features = 1, 1, 0, 0, []
    if "select" in res:
        chunks = res["select"].split("+")
        shapes = []
        for chunk in chunks:
            parts = chunk.split(":")
            count = 1
            if parts and parts[0].isdigit():
                count = positive(parts.pop(0), "select count")
            shape = {}
            for p in parts:
                k, eq, v = p.partition("=")
                if not eq:
                    raise pbs.CommandError(f"illegal -l value: select chunk {chunk!r}\n{USAGE}", pbs.USAGE)
                shape[k.strip()] = v.strip()
            shapes.append((count, shape))
        if any(s != shapes[0][1] for _, s in shapes):
            raise pbs.CommandError("illegal -l value: chunks of different shapes are not supported", pbs.USAGE)
        nodes, shape = sum(c for c, _ in shapes), shapes[0][1]
        ppn = positive(shape.get("ncpus", shape.get("mpiprocs", "1")), "ncpus")
        if "mem" in shape:
            mem = parse_memory(shape["mem"])
    elif "nodes" in res:
        parts = res["nodes"].split(":")
        if "+" in res["nodes"] or not parts[0].isdigit():
            raise pbs.CommandError(f"illegal -l value: nodes={res['nodes']} (give a node count)\n{USAGE}",
                                   pbs.USAGE)
        nodes = positive(parts[0], "nodes")
        for p in parts[1:]:
            if p.startswith("ppn="):
                ppn = positive(p[4:], "ppn")
            elif p and "=" not in p:
                features.append(p)
            else:
                raise pbs.CommandError(f"illegal -l value: nodes={res['nodes']}\n{USAGE}", pbs.USAGE)
    elif "procs" in res or "ncpus" in res:
        cores = positive(res.get("procs") or res.get("ncpus"), "procs")
    if "ppn" in res and "nodes" not in res:
        ppn = positive(res["ppn"], "ppn")
    if "mem" in res and "select" not in res:
        total = parse_memory(res["mem"])
        mem = math.ceil(total / nodes) if not cores else total
    if "pmem" in res:
        mem = max(mem, parse_memory(res["pmem"]) * (ppn if not cores else cores))
    return Request(nodes=nodes, ppn=ppn, cores=cores, mem=mem, features=tuple(features)), walltime


def parse_start_after(text: str, now: float) -> float:
    """`-a [[[[CC]YY]MM]DD]hhmm[.SS]` in local time; a bare hhmm already past is tomorrow."""
    m = re.match(r"^(\d{4,12})(?:\.(\d{2}))?$", text)
    if not m or len(m.group(1)) % 2:
        raise pbs.CommandError(f"illegal -a value {text!r}\n{USAGE}", pbs.USAGE)
    digits, secs = m.group(1), int(m.group(2) or 0)
    base = datetime.fromtimestamp(now)
    hh, mm = int(digits[-4:-2]), int(digits[-2:])
    fields = {"hour": hh, "minute": mm, "second": secs}
    rest = digits[:-4]
    try:
        if rest:
            fields["day"] = int(rest[-2:])
        if len(rest) >= 4:
            fields["month"] = int(rest[-4:-2])
        if len(rest) >= 6:
            yy = rest[:-4]
            fields["year"] = int(yy) if len(yy) == 4 else 2000 + int(yy)
        when = base.replace(microsecond=0, **fields)
    except ValueError:
        raise pbs.CommandError(f"illegal -a value {text!r}\n{USAGE}", pbs.USAGE) from None
    if not rest and when.timestamp() < now:
        when += timedelta(days=1)
    return when.timestamp()


def parse_array(text: str) -> tuple[list[int], int]:
    """`-t 1-10%5`, `-t 1,3,5-7` (Torque) or `-J 1-10:2%5` (OpenPBS) -> (indices, slot limit)."""
    body, _, limit = text.partition("%")
    if limit and (not limit.isdigit() or int(limit) < 1):
        raise pbs.CommandError(f"illegal array request {text!r}\n{USAGE}", pbs.USAGE)
    indices: list[int] = []
    for part in body.split(","):
        m = re.fullmatch(r"\s*(\d+)(?:-(\d+)(?::(\d+))?)?\s*", part)
        if not m:
            raise pbs.CommandError(f"illegal array request {text!r}\n{USAGE}", pbs.USAGE)
        lo, hi, step = int(m.group(1)), int(m.group(2) or m.group(1)), int(m.group(3) or 1)
        if hi < lo or step < 1:
            raise pbs.CommandError(f"illegal array request {text!r}\n{USAGE}", pbs.USAGE)
        indices.extend(range(lo, hi + 1, step))
    indices = sorted(set(indices))
    if len(indices) > 100000:
        raise pbs.CommandError("array request too large (at most 100000 subjobs)", pbs.USAGE)
    return indices, int(limit or 0)


def parse_priority(text: str, usage: str) -> int:
    """-p: an integer from -1024 to 1023."""
    try:
        priority = int(text)
    except ValueError:
        priority = 9999
    if not -1024 <= priority <= 1023:
        raise pbs.CommandError(f"illegal -p value {text!r}\n{usage}", pbs.USAGE)
    return priority


#: before-kinds: `-W depend=beforeok:B` gives job B the mirror dependency afterok on this job
BEFORE = {"before": "afterany", "beforeok": "afterok", "beforenotok": "afternotok", "beforeany": "afterany"}


def parse_depend(value: str) -> tuple[list[Dependency], list[Dependency]]:
    """(this job's dependencies, the dependencies on it that the named jobs gain)."""
    deps, befores = [], []
    for part in value.split(","):
        kind, _, ids = part.partition(":")
        kind = kind.strip()
        if kind == "after":
            kind = "afterany"  # started is not tracked apart from ended: the nearest kind
        if kind not in ("afterok", "afternotok", "afterany") and kind not in BEFORE:
            if kind in ("on", "synccount", "syncwith"):
                raise pbs.CommandError(f"dependency type {kind} is not supported", pbs.USAGE)
            raise pbs.CommandError(f"illegal -W value: depend={value}\n{USAGE}", pbs.USAGE)
        if not ids:
            raise pbs.CommandError(f"illegal -W value: depend={value}\n{USAGE}", pbs.USAGE)
        for jid in ids.split(":"):
            if kind in BEFORE:  # the job id here names the job that will wait
                befores.append(Dependency(DepType(BEFORE[kind]), pbs.parse_id(jid)))
            else:
                deps.append(Dependency(DepType(kind), pbs.parse_id(jid)))
    return deps, befores


def resolve_path(path: str, cwd: str) -> str:
    """`[host:]path` made absolute against qsub's cwd.  A directory keeps a trailing `/`:
    the job's default file name goes inside it once the job has its id."""
    if ":" in path and not path.startswith("/"):
        path = path.split(":", 1)[1]
    if not os.path.isabs(path):
        path = os.path.join(cwd, path)
    directory = path.endswith("/") or os.path.isdir(path)
    path = os.path.normpath(path)
    return path + "/" if directory else path


def make_job(options: dict[str, str], resources: dict[str, str], script: str, script_name: str,
             cwd: str, env: dict[str, str], user: str, server: str, now: float
             ) -> tuple[Job, list[Dependency]]:
    """The job, and the dependencies on it that `-W depend=before...` gives other jobs."""
    request, walltime = build_request(resources)
    name = options.get("N", os.path.basename(script_name) if script_name else "STDIN")
    if not name or any(c.isspace() for c in name) or len(name) > 236:
        raise pbs.CommandError(f"illegal -N value {name!r}\n{USAGE}", pbs.USAGE)
    dest = options.get("q", "")
    queue, _, dest_server = dest.partition("@")
    if dest_server and dest_server.split(".")[0] != server:
        raise pbs.CommandError(f"Unknown server {dest_server}", pbs.SYSTEM)
    priority = parse_priority(options["p"], USAGE) if "p" in options else 0
    extra_w, deps, befores, group = {}, [], [], ""
    if "W" in options:
        for item in re.split(r",(?=\s*[a-z_]+=)", options["W"]):
            key, eq, val = item.strip().partition("=")
            if not eq:
                raise pbs.CommandError(f"illegal -W value {options['W']!r}\n{USAGE}", pbs.USAGE)
            if key == "depend":
                deps, befores = parse_depend(val)
            elif key == "group_list":
                group = val.split("@")[0]
            elif key in ("umask", "block", "stagein", "stageout", "x", "sandbox", "run_count"):
                extra_w[key] = val
            else:
                raise pbs.CommandError(f"illegal -W value {key}\n{USAGE}", pbs.USAGE)
    join = options.get("j", "n")
    if join not in ("oe", "eo", "n"):
        raise pbs.CommandError(f"illegal -j value {join!r}\n{USAGE}", pbs.USAGE)
    rerun = options.get("r", "y")
    if rerun not in ("y", "n"):
        raise pbs.CommandError(f"illegal -r value {rerun!r}\n{USAGE}", pbs.USAGE)
    workdir = options.get("d") or options.get("w") or cwd
    if not os.path.isabs(workdir):
        workdir = os.path.normpath(os.path.join(cwd, workdir))
    variables = {f"PBS_O_{k}": env[k] for k in ("HOME", "LANG", "LOGNAME", "PATH", "MAIL", "SHELL", "TZ")
                 if k in env}
    variables.update(PBS_O_HOST=socket.gethostname(), PBS_O_WORKDIR=cwd, PBS_O_QUEUE=queue or "")
    if workdir != cwd:
        variables["PBS_O_INITDIR"] = workdir
    if "V" in options:
        variables.update({k: v for k, v in env.items() if k not in variables})
    for item in filter(None, (x.strip() for x in options.get("v", "").split(","))):
        k, eq, v = item.partition("=")
        variables[k] = v if eq else env.get(k, "")
    job = Job(name=name, owner=user, group=group, account=options.get("A", ""), queue=queue,
              request=request, walltime=walltime or 0.0, priority=priority,
              start_after=parse_start_after(options["a"], now) if "a" in options else None,
              holds={Hold.USER} if "h" in options else set(), dependencies=deps)
    job.extra = {"script": script, "workdir": workdir, "submit_dir": cwd, "join": join, "rerunnable": rerun == "y",
                 "variables": variables, "submit_host": socket.gethostname(),
                 "resources": dict(resources), "output": options.get("o", ""), "error": options.get("e", ""),
                 "mail_points": options.get("m", "a"), "mail_users": options.get("M", ""),
                 "shell": options.get("S", ""), **({"W": extra_w} if extra_w else {})}
    return job, befores


def submit(argv: list[str], stdin=None, cwd: str | None = None, env: dict | None = None,
           now: float | None = None) -> tuple[str, bool]:
    """Everything qsub does; returns (job id, -z given).  CommandError on any refusal."""
    stdin = stdin if stdin is not None else sys.stdin
    env = dict(os.environ if env is None else env)
    cwd = cwd or os.getcwd()
    now = time.time() if now is None else now
    cmd, rest = parse_options(argv)
    if len(rest) > 1:
        raise usage_error(f"too many arguments: {' '.join(rest[1:])}")
    interactive = any(letter == "I" for letter, _ in cmd)
    if interactive and not commands.server_answers():
        raise pbs.CommandError("interactive jobs (-I) need a running server (hpcsched server)", pbs.SYSTEM)
    if interactive and not rest:
        script, script_name = "", ""  # the terminal is the session's, not a script
    elif rest:
        try:
            with open(rest[0], encoding="utf-8", errors="replace") as f:
                script = f.read()
        except OSError as e:
            raise pbs.CommandError(f"script file cannot be loaded - {e.strerror}: {rest[0]}", pbs.SYSTEM) from None
        script_name = rest[0]
    else:
        script, script_name = stdin.read(), ""
    prefix = next((v for letter, v in cmd if letter == "C"), env.get("PBS_DPREFIX", "#PBS"))
    options, resources = merge(cmd, directives(script, prefix))
    site = load_site()
    user = whoami()
    job, befores = make_job(options, resources, script, script_name, cwd, env, user, site.server, now)
    if interactive:
        if "t" in options or "J" in options:
            raise usage_error("an interactive job (-I) cannot be an array")
        job.extra.update(interactive=True, rerunnable=False)  # PBS never reruns a session
    for key in ("output", "error"):
        if job.extra[key]:
            job.extra[key] = resolve_path(job.extra[key], cwd)
    batch = Batch.of(site)
    # Only dependencies and queued-job limits need the jobs already stored; without them
    # the job is checked against the configuration alone, so qsub's cost does not grow
    # with the store.
    queues = batch.site.scheduler().router.queues
    needs_state = bool(job.dependencies or befores) or any(
        q.max_queued is not None or q.max_queued_per_user is not None for q in queues.values())
    with batch.open(write=True, load=needs_state):
        sched = batch.sched
        queue = job.queue or sched.router.default
        if queue and queue not in sched.router.queues:
            if site.flavor == "torque":
                raise pbs.CommandError("submit error (Unknown queue MSG=requested queue not found)", 172)
            raise pbs.CommandError("Unknown queue", 170)
        job.extra["variables"]["PBS_O_QUEUE"] = queue
        if job.walltime <= 0:
            job.walltime = sched.router.queues[queue].max_walltime or 3600.0 if queue else 3600.0
        array = options.get("t") or options.get("J")
        if befores and array:
            raise usage_error("an array cannot carry before dependencies")
        waiters = [_waiter(batch, site, user, b.job_id) for b in befores]
        try:
            if array:
                indices, limit = parse_array(array)
                first = batch.next_id
                for index in indices:
                    sub = job.copy()
                    sub.array_id, sub.array_index, sub.array_limit = first, index, limit
                    accounting.write(site.home, "Q", batch.submit(sub, now), site.server, now)
                return f"{first}[].{site.server}", "z" in options
            done = batch.submit(job, now)
            accounting.write(site.home, "Q", done, site.server, now)
            for waiter, before in zip(waiters, befores):
                deps = [[d.kind.value, d.job_id] for d in waiter.dependencies] + [[before.kind.value, done.id]]
                batch.do("alter", now, id=waiter.id, changes={"dependencies": deps})
        except Rejected as e:
            if site.flavor == "torque":
                raise pbs.CommandError(f"submit error (Job exceeds queue resource limits MSG={e})", pbs.LIMITS)
            raise pbs.CommandError(f"Job violates queue and/or server resource limits: {e}", pbs.LIMITS)
    return pbs.full_id(done.id, site.server), "z" in options


def _waiter(batch: Batch, site, user: str, job_id: int) -> Job:
    """The job a `before` dependency names: it must still be waiting, and be the
    caller's to change (as for qalter)."""
    from .qctl import _deny, may_touch
    job = batch.sched.jobs.get(job_id)
    if job is None:
        raise pbs.CommandError(f"Unknown Job Id {job_id}.{site.server}", pbs.UNKNOWN_JOB)
    if job.start_time is not None or job.end_time is not None:
        raise pbs.CommandError(f"cannot add a dependency to job {pbs.display_id(job, site.server)}: "
                               f"it has started", pbs.BAD_STATE)
    if not may_touch(site, user, job):
        raise _deny("qsub", job, site)
    return job


def session(jid: str, poll: float = 0.2) -> int:
    """`qsub -I`: wait for the job to start, then run its shell on this terminal under the
    server's job wrapper (so the server sees its pid, enforces its walltime, qdel ends it
    and its exit status is recorded); returns that status."""
    import json
    import signal

    from .server import INTERACTIVE, WRAPPER
    site = load_site()
    job_id = pbs.parse_ref(jid)[0]
    ready, checked = None, time.monotonic()
    try:  # (from the first line on: a ^C right after it is the user's answer to it)
        print(f"qsub: waiting for job {jid} to start", flush=True)
        while ready is None:
            ready = next(site.home.glob(f"jobs/{job_id}/run*/{INTERACTIVE}"), None)
            if ready is None and time.monotonic() - checked > 2:  # deleted while waiting?
                with Batch.of(site).open(write=False) as batch:
                    job = batch.sched.jobs.get(job_id)
                if job is None or job.end_time is not None:
                    print(f"qsub: job {jid} apparently deleted", flush=True)
                    return 1
                checked = time.monotonic()
            if ready is None:
                time.sleep(poll)
    except KeyboardInterrupt:  # ^C while waiting: the session is not wanted any more
        with Batch.of(site).open() as batch:
            job = batch.sched.jobs.get(job_id)
            if job is not None and job.start_time is None and job.end_time is None:
                batch.do("delete", id=job_id)
        print(f"\nqsub: job {jid} deleted", flush=True)
        return 130
    info = json.loads(ready.read_text())
    print(f"qsub: job {jid} ready\n", flush=True)
    env = info["env"]
    shell = env.get("SHELL") or "/bin/sh"
    tty = os.isatty(0)

    def foreground():  # the session's own process group owns the terminal (qdel kills the group)
        os.setpgid(0, 0)
        if tty:
            signal.signal(signal.SIGTTOU, signal.SIG_IGN)
            os.tcsetpgrp(0, os.getpgrp())
            signal.signal(signal.SIGTTOU, signal.SIG_DFL)

    argv = ["/bin/sh", "-c", WRAPPER, "hpcsched-job", str(ready.parent), shell, "-i" if tty else "-s"]
    old = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    try:
        status = subprocess.run(argv, cwd=info["workdir"], env=env, preexec_fn=foreground).returncode
    finally:
        if tty:
            os.tcsetpgrp(0, os.getpgrp())
        signal.signal(signal.SIGTTOU, old)
    print(f"qsub: job {jid} completed", flush=True)
    return status if status >= 0 else 128 - status


def main(argv: list[str] | None = None) -> int:
    def run(argv: list[str]) -> int:
        jid, quiet = submit(argv)
        if any(letter == "I" for letter, _ in parse_options(argv)[0]):
            notify(load_site().home)  # the server starts it as soon as it can
            return session(jid)
        if not quiet:
            print(jid)
        return 0
    return pbs.main("qsub", run, argv, wake=True)


if __name__ == "__main__":
    sys.exit(main())
