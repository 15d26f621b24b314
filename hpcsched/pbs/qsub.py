"""qsub: submit a batch job, Torque/OpenPBS style.

Options are taken from the command line first, then from `#PBS` directives in the script
(the command line wins; `-l` merges resource by resource, the command line winning each).
On success stdout is exactly one line, the job id.
"""
from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
import time

from .. import sitefilter
from ..core.errors import BadDependency, ConfigError, Rejected
from ..core.jobs import Hold, Job
from ..core.timefmt import parse_duration
from ..store import site as sitemod
from ..store.journaled import Batch
from ..store.layout import INTERACTIVE, WRAPPER
from ..store.request import current
from ..store.site import load_site, notify, whoami
from . import accounting, common, siteprog
from . import client as commands
from .attributes import (ALL_INDICES, DependSpec, advance_reservation, build_request, consumption, cput_of,
                         directives, merge, parse_array, parse_depend, parse_job_name, parse_join, parse_keep,
                         parse_mail_points, parse_memory, parse_names, parse_path, parse_priority, parse_staging,
                         parse_start_after, parse_umask, resolve_depend, resolve_path, variable_list, with_nidmask,
                         x_resources, W_ITEMS)
from .common import Command
from .errors import UsageError
from .options import QSUB as QSUB_TABLE
from .options import parse as parse_argv

USAGE = ("usage: qsub [-a date_time] [-A account_string] [-C directive_prefix] [-d path] [-e path] "
         "[-h] [-j oe|eo|n] [-l resource_list] [-m mail_options] [-M user_list] [-N name] [-o path] "
         "[-p priority] [-q destination] [-r y|n] [-S path] [-v variable_list] [-V] [-W attributes] "
         "[-z] [-n] [-F \"args\"] [script | -- program [args]]")


def make_job(options: dict[str, str], resources: dict[str, str], script: str, script_name: str,
             cwd: str, env: dict[str, str], user: str, server: str, now: float, flavor: str = "torque",
             consumables=()) -> tuple[Job, list[DependSpec], list[DependSpec]]:
    """The job, what it waits on (`-W depend=after...`), and the jobs `before...` makes
    wait on it: parents are named, not yet looked up in the store.  `consumables`: the
    site's, which -l may ask for."""
    if "u" in options:  # -u user[@host],...: the user the job runs as, who must be its submitter here
        names = {part.split("@")[0].strip() for part in options["u"].split(",")} - {""}
        if names and names != {user}:
            raise common.CommandError(f"Bad UID for job execution MSG={user} may not run a job as "
                                      f"{', '.join(sorted(names - {user}))}", common.BAD_USER)
    if "n" in options:  # Torque's -n: the job's nodes are its own (kept as Moab's resource says it)
        resources = {**resources, "naccesspolicy": "singlejob"}
    request, walltime = build_request(resources, consumables)
    name = parse_job_name(options.get("N", os.path.basename(script_name) if script_name else "STDIN"))
    dest = options.get("q", "")
    queue, _, dest_server = dest.partition("@")
    if dest_server and dest_server.split(".")[0] != server:
        raise common.CommandError(f"Unknown server {dest_server}", common.SYSTEM)
    priority = parse_priority(options["p"]) if "p" in options else 0
    extra_w, deps, befores, group, deadline = _w_items(options.get("W"), flavor, now)
    if "x" in extra_w:  # Maui's -W x=ADVRES:NAME;NACCESSPOLICY:SINGLEJOB, as -l would ask them
        given, resources = resources, x_resources(extra_w["x"], resources)
        if resources != given:
            request, walltime = build_request(resources, consumables)
    join = parse_join(options.get("j", "n"))
    rerun = options.get("r", "y")
    if rerun not in ("y", "n"):
        raise UsageError(f"illegal -r value {rerun!r}")
    mail_points = parse_mail_points(options.get("m", "a"))
    keep = parse_keep(options.get("k", "n"))
    for letter in "deoSw":
        if letter in options:
            parse_path(options[letter], f"-{letter}")
    for letter in "AM":
        if letter in options:
            options[letter] = parse_names(options[letter], f"-{letter}")
    workdir = options.get("d") or options.get("w") or ""  # none: the owner's home, found at launch
    if workdir and not os.path.isabs(workdir):
        workdir = os.path.normpath(os.path.join(cwd, workdir))
    variables = _variables(options, env, cwd, queue, workdir)
    job = Job(name=name, owner=user, group=group, account=options.get("A", ""), queue=queue,
              request=request, walltime=walltime or 0.0, priority=priority,
              start_after=parse_start_after(options["a"], now) if "a" in options else None, deadline=deadline,
              holds={Hold.USER} if "h" in options else set(), consumes=consumption(resources, consumables),
              cput=cput_of(resources), disk=parse_memory(resources["file"]) if "file" in resources else 0,
              reservation=advance_reservation(resources))
    job.extra = {"script": script, "workdir": workdir, "submit_dir": cwd, "join": join, "rerunnable": rerun == "y",
                 "variables": variables, "submit_host": socket.gethostname(),
                 "resources": dict(resources), "output": options.get("o", ""), "error": options.get("e", ""),
                 "mail_points": mail_points, "mail_users": options.get("M", ""), "keep": keep,
                 "shell": options.get("S", ""), **({"W": extra_w} if extra_w else {})}
    return job, deps, befores


def _w_items(given: str | None, flavor: str, now: float) -> tuple[dict, list, list, str, float | None]:
    """-W's items: (those kept as given, the dependencies, the `before` ones, the group,
    the deadline); UsageError for one qsub does not know or a bad value."""
    extra_w, deps, befores, group, deadline = {}, [], [], "", None
    for item in W_ITEMS.split(given) if given is not None else ():
        key, eq, val = item.strip().partition("=")
        if not eq:
            raise UsageError(f"illegal -W value {given!r}")
        if key == "depend":
            deps, befores = parse_depend(val, flavor)
        elif key == "group_list":
            group = parse_names(val, "-W group_list").split("@")[0]
        elif key == "deadline":  # Grid Engine's qsub -dl: the deadline initiation time
            deadline = parse_start_after(val.strip(), now, "-W deadline")
        elif key == "umask":
            parse_umask(val)
            extra_w[key] = val
        elif key == "block":
            if val.strip().lower() not in ("true", "false"):
                raise UsageError(f"illegal -W value block={val} (true or false)")
            extra_w[key] = val
        elif key in ("stagein", "stageout"):
            parse_staging(val, key)
            extra_w[key] = val
        elif key in ("x", "sandbox", "run_count"):
            extra_w[key] = val
        else:
            raise UsageError(f"illegal -W value {key}")
    return extra_w, deps, befores, group, deadline


def _variables(options: dict[str, str], env: dict[str, str], cwd: str, queue: str, workdir: str) -> dict[str, str]:
    """The job's environment as PBS gives it: PBS_O_* of the submitter's, then -V's and -v's."""
    variables = {f"PBS_O_{k}": env[k] for k in ("HOME", "LANG", "LOGNAME", "PATH", "MAIL", "SHELL", "TZ")
                 if k in env}
    variables.update(PBS_O_HOST=socket.gethostname(), PBS_O_WORKDIR=cwd, PBS_O_QUEUE=queue or "")
    if workdir:
        variables["PBS_O_INITDIR"] = workdir
    if "V" in options:
        variables.update({k: v for k, v in env.items() if k not in variables})
    for k, v in variable_list(options.get("v", "")):
        variables[k] = v if v is not None else env.get(k, "")
    return variables


MAX_SCRIPT = 16 << 20  # bytes of a job script (config `max_request`, as the server's door)


def submit(argv: list[str], stdin=None, cwd: str | None = None, env: dict | None = None,
           now: float | None = None) -> tuple[str, bool]:
    """Everything qsub does; returns (job id, -z given).  CommandError on any refusal."""
    return submit_parsed(*parse_argv(argv, QSUB_TABLE, permute=False, dashes=True), stdin, cwd, env, now)


def submit_parsed(cmd: list[tuple[str, str]], rest: list[str], stdin=None, cwd: str | None = None,
                  env: dict | None = None, now: float | None = None, extra: dict | None = None,
                  stdin_file: str = "", check=None) -> tuple[str, bool]:
    """`submit` with the command line already parsed: (options in order, operands).
    `extra`: more of the job's record (a Cobalt job's own); `stdin_file`: the standard
    input of a program given after `--` (Cobalt's -i); `check(sched, job, queue)`: what the
    job must also meet on this machine, asked before its walltime defaults (Cobalt's).
    The steps: its script read, the job made from the options and directives, the job
    stored (routed, checked, journaled)."""
    stdin = stdin if stdin is not None else sys.stdin
    env = dict(os.environ if env is None else env)
    cwd = cwd or os.getcwd()
    now = time.time() if now is None else now
    script, script_name, rest, program, interactive = _script_of(cmd, rest, stdin, stdin_file)
    site = load_site()
    made = _job_of(site, cmd, rest, program, script, script_name, cwd, env, now, extra, interactive)
    return _store(site, *made, interactive, check, now)


def _script_of(cmd: list[tuple[str, str]], rest: list[str], stdin, stdin_file: str):
    """The job's script and its name, as the operands say: a program after `--`, a file
    (read by the client, with its rights), standard input, or none (qsub -I); and the
    operands left, the program, whether it is interactive."""
    program = rest[1:] if rest[:1] == ["--"] else None  # OpenPBS's `qsub [options] -- program [args]`
    if program is not None:
        if not program or not program[0]:
            raise UsageError("-- must be followed by a program to run (and its arguments)")
        rest = []
    if len(rest) > 1:
        raise UsageError(f"too many arguments: {' '.join(rest[1:])}")
    interactive = any(letter == "I" for letter, _ in cmd)
    if program is not None and interactive:
        raise UsageError("an interactive job (-I) runs no program given after --")
    if interactive and current().caller is None and not commands.server_answers():
        raise common.CommandError("interactive jobs (-I) need a running server (hpcsched server)", common.SYSTEM)
    if program is not None:  # its script runs the program in the job's shell (no directives to read)
        script, script_name = f"exec {shlex.join(program)}{stdin_file and ' < ' + shlex.quote(stdin_file)}\n", \
            program[0]
    elif interactive and not rest:
        script, script_name = "", ""  # the terminal is the session's, not a script
    elif rest and current().script is not None:  # read by the client, with its rights
        script, script_name = current().script.decode("utf-8", errors="replace"), rest[0]
    elif rest and current().caller is not None:  # the server opens no path for a user
        raise common.CommandError(f"script file cannot be loaded - not readable by {current().caller}: {rest[0]}",
                                  common.SYSTEM)
    elif rest:
        try:
            with open(rest[0], encoding="utf-8", errors="replace", newline="") as f:  # (line ends as written)
                script = f.read()
        except (OSError, ValueError) as e:  # (ValueError: a NUL in the name)
            why = getattr(e, "strerror", None) or "illegal file name"
            shown = rest[0].replace("\0", "\\0")
            raise common.CommandError(f"script file cannot be loaded - {why}: {shown}", common.SYSTEM) from None
        script_name = rest[0]
    else:
        raw = getattr(stdin, "buffer", None)  # (a text stream would turn CR LF into LF unseen)
        script, script_name = raw.read().decode("utf-8", errors="replace") if raw else stdin.read(), ""
    if "\r\n" in script:  # the job's shell would read each CR as part of a word: Torque and OpenPBS refuse it
        raise common.CommandError("script is written in DOS/Windows text format", common.SYSTEM)
    return script, script_name, rest, program, interactive


def _job_of(site, cmd, rest, program, script, script_name, cwd, env, now, extra, interactive):
    """The job the options and the script's directives make (after the site's submit
    filter), its owner checked: (job, its owner, options, resources, dependencies,
    befores, a Python filter)."""
    words = [part for letter, value in cmd for part in (f"-{letter}", value) if part] + rest + (
        ["--", *program] if program is not None else [])
    python_filter = site.config.get("submit_filter") if isinstance(site.config.get("submit_filter"), str) else None
    if site.config.get("submit_filter") and not interactive and not python_filter:
        script = submit_filter(site, words, script, cwd, env)
    largest = site.config.get("max_request", MAX_SCRIPT)  # (the journal keeps the script whole)
    if len(script.encode("utf-8", errors="surrogateescape")) > largest:
        raise common.CommandError(f"script is larger than {largest} bytes (max_request): refused", common.SYSTEM)
    prefix = next((v for letter, v in cmd if letter == "C"), env.get("PBS_DPREFIX", "#PBS"))
    found = directives(script, prefix) if program is None else []
    if commands.blocks(found):  # (qsub reads its own command line to know it must wait)
        raise UsageError("-W block=true is an option of the qsub command line, not a directive")
    options, resources = merge(cmd, found)
    user = whoami()
    if site.multi_user:
        _may_run_as(site, user)
    job, deps, befores = make_job(options, resources, script, script_name, cwd, env, user, site.server, now,
                                  site.flavor, frozenset(site.config.get("consumables", {})))
    job.group = job_group(user, job.group)
    if job.deadline is not None:
        common.check_deadline(site, user)
    common.check_priority(site, user, job.priority)
    if program is not None:
        job.extra["program"] = program  # (qstat -f's executable and argument_list)
    job.extra.update(extra or {})
    if "F" in options:  # Torque's -F: the arguments the job's script is run with
        job.extra["arguments"] = script_arguments(options["F"])
    args = shlex.join(words)
    if args:
        job.extra["submit_args"] = args  # (qstat -f's submit_args, normalised: -l and its value apart)
    if commands.blocks(cmd) and (interactive or "t" in options or "J" in options):
        raise UsageError("-W block=true cannot be used with an array or an interactive job (-I)")
    if interactive:
        if "t" in options or "J" in options:
            raise UsageError("an interactive job (-I) cannot be an array")
        job.extra.update(interactive=True, rerunnable=False)  # PBS never reruns a session
    for key in ("output", "error"):
        if job.extra[key]:
            job.extra[key] = resolve_path(job.extra[key], cwd, siteprog.isdir_for(site, job.owner))
    return job, user, options, resources, deps, befores, python_filter


def _store(site, job, user, options, resources, deps, befores, python_filter, interactive, check,
           now) -> tuple[str, bool]:
    """Route, check and journal `job` (and its array's subjobs): (its id, -z)."""
    batch = Batch.of(site)
    # Only dependencies, a named reservation (or its queue: pbs_rsub's), queued-job limits
    # and allocations (a project's standing routes the job) need the state already stored;
    # without them the job is checked against the configuration alone, so qsub's cost does
    # not grow with the store.
    needs_state = bool(deps or befores or job.reservation) or "allocations" in site.config or bool(
        job.queue and job.queue not in site.config.get("queues", {})) or bool(
        python_filter) or any("max_queued" in q or "max_queued_per_user" in q
                              for q in site.config.get("queues", {}).values())
    with batch.open(write=True, load=needs_state):
        sched = batch.sched
        queue = job.queue or sched.router.default
        if queue and queue not in sched.router.queues:
            if site.flavor == "torque":
                raise common.CommandError("submit error (Unknown queue MSG=requested queue not found)", 172)
            raise common.CommandError("Unknown queue", 170)
        job.extra["variables"]["PBS_O_QUEUE"] = queue
        job.request = with_nidmask(job.request, resources, sched.topology)
        if check is not None:
            check(sched, job, queue)
        if job.walltime <= 0:  # (none asked: the queue's resources_default, the server's, the queue's most, 1 h)
            q = sched.router.queues[queue] if queue else None
            job.walltime = (q and q.default_walltime) or site_default_walltime(site) or (q and q.max_walltime) \
                or 3600.0
        array = options.get("t") or options.get("J")
        if befores and array:
            raise UsageError("an array cannot carry before dependencies")
        job.dependencies = resolve_depend(deps, common.visible(site, user, sched.jobs), site.server)
        if job.reservation:
            common.check_reservation(sched, job)
        if python_filter and not interactive:
            try:
                sitefilter.apply(sitefilter.load(python_filter, site.home), job, sched, now)
            except (Rejected, ConfigError) as e:
                raise common.CommandError("Your job has been administratively rejected by the queueing "
                                          f"system: {e}", common.SYSTEM) from None
        waiters = [(w, b) for b in befores for w in _waiters(batch, site, user, b)]
        try:
            if array:
                indices, limit = parse_array(array)
                subs = batch.submit_array(job, indices, limit, now,
                                          records=lambda subs: accounting.lines("Q", subs, site.server, now))
                accounting.core_deletions(batch, now)
                return f"{subs[0].array_id}[].{site.server}", "z" in options
            done = batch.submit(job, now, records=lambda done: accounting.lines("Q", [done], site.server, now))
            accounting.core_deletions(batch, now)
            for waiter, before in waiters:
                kept = [[d.kind.value, d.job_id, d.of] for d in waiter.dependencies]
                batch.do("alter", now, id=waiter.id, changes={"dependencies": kept + [[before.kind, done.id]]})
        except BadDependency as e:
            if site.flavor == "torque":
                raise common.CommandError(f"submit error (Invalid Job Dependency MSG={e})", common.BAD_DEPEND)
            raise common.CommandError(f"Invalid Job Dependency: {e}", common.BAD_DEPEND)
        except Rejected as e:
            if site.flavor == "torque":
                raise common.CommandError(f"submit error (Job exceeds queue resource limits MSG={e})", common.LIMITS)
            raise common.CommandError(f"Job violates queue and/or server resource limits: {e}", common.LIMITS)
    return common.full_id(done.id, site.server), "z" in options


def site_default_walltime(site) -> float | None:
    """The server's resources_default.walltime (config `default_walltime`), if set."""
    value = site.config.get("default_walltime")
    return parse_duration(value) if value is not None else None


def script_arguments(text: str) -> list[str]:
    """Torque's -F "a b 'c d'": the words the job's script is run with, split as a shell
    splits them (quotes keep a word whole)."""
    try:
        return shlex.split(text)
    except ValueError as e:
        raise UsageError(f"illegal -F value {text!r} ({e})") from None


def _may_run_as(site, user: str) -> None:
    """A multi-user site runs a job as its owner: refuse what it cannot or must not run
    (Torque's PBSE_BADUSER).  Root's jobs need `acl_roots` (as Torque's); a server that is
    not root runs only its own user's jobs, unless a `launcher` changes user for it."""
    import pwd
    if user == "root" and "root" not in site.acl_roots:
        raise common.CommandError("Bad UID for job execution MSG=root's jobs are refused on this site (acl_roots)",
                                  common.BAD_USER)
    try:
        pwd.getpwnam(user)
    except KeyError:
        raise common.CommandError(f"Bad UID for job execution MSG=no user {user} on this host",
                                  common.BAD_USER) from None
    server = sitemod.user_name(os.geteuid())
    if os.geteuid() != 0 and user != server and not site.config.get("launcher"):
        raise common.CommandError(f"Bad UID for job execution MSG=the server runs as {server} and cannot run "
                                  f"jobs as {user}", common.BAD_USER)


def job_group(user: str, asked: str) -> str:
    """The group a job runs under, as PBS checks it: `-W group_list`'s if the owner is a
    member (primary or supplementary; else PBSE_BADGRP), by default the owner's primary
    group.  A test rig's named user whom the host does not know keeps what was asked."""
    import grp
    import pwd
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        return asked
    if not asked:
        try:
            return grp.getgrgid(pw.pw_gid).gr_name
        except KeyError:
            return str(pw.pw_gid)
    try:
        gid = grp.getgrnam(asked).gr_gid
    except KeyError:
        raise common.CommandError(f"Bad GID for job execution MSG=no group {asked} on this host",
                                  common.BAD_GROUP) from None
    if gid not in os.getgrouplist(user, pw.pw_gid):
        raise common.CommandError(f"Bad GID for job execution MSG={user} is not a member of group {asked}",
                                  common.BAD_GROUP)
    return asked


FILTER_TIMEOUT = 10.0  # seconds a site's submit filter may take


def submit_filter(site, words: list[str], script: str, cwd: str, env: dict) -> str:
    """Torque's submit filter: the site's command gets qsub's arguments and the script on
    stdin, and writes the script to submit (changed or not) on stdout; a non-zero exit
    refuses the job with what it wrote on stderr.  A filter that cannot run, fails or takes
    longer than FILTER_TIMEOUT refuses the job; it never takes anything else down.  It runs
    as a site program (siteprog.py): the caller's environment is not its own, only the
    PBS_O_ names qsub gives the job."""
    rejected = "Your job has been administratively rejected by the queueing system"
    told = {k: v for k, v in env.items() if k in ("PBS_O_LOGNAME", "PBS_O_HOME", "PBS_O_WORKDIR", "USER", "LOGNAME")}
    try:
        proc = subprocess.Popen([*site.config["submit_filter"], *words], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, cwd=siteprog.workdir(site, "filter_user", cwd),
                                env=siteprog.environment(site, **told), start_new_session=True,
                                **siteprog.identity(site, "filter_user"))
    except (OSError, ValueError, KeyError, subprocess.SubprocessError) as e:
        raise common.CommandError(f"{rejected}: the submit filter cannot run: "
                                  f"{getattr(e, 'strerror', None) or str(e).strip(chr(39))}", common.SYSTEM) from None
    try:
        out, err = proc.communicate(script.encode("utf-8", "surrogateescape"), timeout=FILTER_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the filter and whatever it started
        proc.communicate()
        raise common.CommandError(f"{rejected}: the submit filter did not answer within "
                                  f"{FILTER_TIMEOUT:g} s", common.SYSTEM) from None
    if proc.returncode:
        why = err.decode("utf-8", "replace").strip().splitlines()
        raise common.CommandError(f"{rejected}" + (f": {why[0]}" if why else f" (filter exit {proc.returncode})"),
                                  common.SYSTEM)
    return out.decode("utf-8", "surrogateescape")


def _waiters(batch: Batch, site, user: str, spec: DependSpec) -> list[Job]:
    """The jobs a `before` dependency names (an array: its subjobs that have not started):
    each must still be waiting, and be the caller's to change (as for qalter)."""
    jobs = common.resolve(batch.sched.jobs, spec.text, site.server)
    if len(jobs) > 1 or spec.index == ALL_INDICES:
        jobs = [j for j in jobs if j.start_time is None and j.end_time is None] or jobs[:1]
    for job in jobs:
        if job.start_time is not None or job.end_time is not None:
            raise common.CommandError(f"cannot add a dependency to job {common.display_id(job, site.server)}: "
                                      f"it has started", common.BAD_STATE)
        if not common.may_touch(site, user, job):
            raise common.deny("qsub", job, site)
    return jobs


def remote_session(argv: list[str]) -> int:
    """`qsub -I` on a multi-user site: the server submits the job (the store is its alone),
    then the session runs here, as for a single-user rig, asking the server what it needs."""
    answer = commands.ask("qsub", argv)
    if answer is None:
        sys.stderr.write("qsub: interactive jobs (-I) need a running server (hpcsched server)\n")
        return common.SYSTEM
    status, out, err = answer
    sys.stderr.write(err.decode(errors="replace"))
    if status:
        return status
    return session(out.decode().strip(), remote=True)


def _qstat():
    from .qstat import QSTAT  # (run here when no server answers: the caller owns the site)
    return QSTAT


def _qselect():
    from .qctl import QSELECT
    return QSELECT


def session(jid: str, poll: float = 0.2, remote: bool = False) -> int:
    """`qsub -I`: wait for the job to start, then run its shell on this terminal under the
    server's job wrapper (so the server sees its pid, enforces its walltime, qdel ends it
    and its exit status is recorded); returns that status.  `remote`: the store is the
    server's alone (a multi-user site): ask it, and find the run directory by its name
    (an interactive job runs once: run1)."""
    import json
    from pathlib import Path

    home = Path(commands.home()) if remote else load_site().home
    job_id = common.parse_ref(jid)[0]
    ready, checked = None, time.monotonic()
    try:  # (from the first line on: a ^C right after it is the user's answer to it)
        print(f"qsub: waiting for job {jid} to start", flush=True)
        while ready is None:
            if remote:
                path = home / "jobs" / str(job_id) / "run1" / INTERACTIVE
                ready = path if path.exists() else None
            else:
                ready = next(home.glob(f"jobs/{job_id}/run*/{INTERACTIVE}"), None)
            if ready is None and time.monotonic() - checked > 2:  # deleted while waiting?
                if not _waiting(jid, remote):
                    print(f"qsub: job {jid} apparently deleted", flush=True)
                    return 1
                checked = time.monotonic()
            if ready is None:
                time.sleep(poll)
    except KeyboardInterrupt:  # ^C while waiting: the session is not wanted any more
        if remote:
            commands.ask("qdel", [jid])
        else:
            with Batch.of(load_site()).open() as batch:
                job = batch.sched.jobs.get(job_id)
                if job is not None and job.start_time is None and job.end_time is None:
                    batch.do("delete", time.time(), id=job_id)
                    accounting.core_deletions(batch, time.time())
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


def _attributes(jid: str, remote: bool) -> dict | None:
    """The job's attributes as `qstat -x -f -F json` gives them: by the server when one
    answers, else read here (a site the caller owns; `remote`: one it does not own has no
    other door); {} for a job no longer known, None while nobody answers."""
    import json
    answer = commands.query("qstat", ["-x", "-f", "-F", "json", jid], None if remote else _qstat())
    if answer is None:
        return None
    if answer[0] == common.UNKNOWN_JOB:
        return {}
    try:
        return next(iter(json.loads(answer[1])["Jobs"].values()))
    except (ValueError, KeyError, StopIteration):
        return None  # (a reply it could not read: asked again)


def _waiting(jid: str, remote: bool) -> bool:
    """Is the job still there and not ended?  Asked of qselect, whose form is PBS's on every
    site (a Cobalt site's qstat takes no -x -f -F json); yes while nobody answers (a server
    starting again), so a session waits on rather than give its job up."""
    answer = commands.query("qselect", [], None if remote else _qselect())
    if answer is None or answer[0]:
        return True
    number = common.parse_ref(jid)[0]
    return any(line.split(".")[0].split("[")[0] == str(number) for line in answer[1].split())


def blocked(jid: str, remote: bool, poll: float = 1.0) -> int:
    """`-W block=true`: wait for the job's end and return its Exit_status as qstat -x shows
    it (OpenPBS's qsub does so; 256 + the signal for one killed, 271 for one deleted before
    it ran: the shell sees it modulo 256).  ^C stops the wait, not the job."""
    try:
        while True:
            attrs = _attributes(jid, remote)
            if attrs == {}:
                sys.stderr.write(f"qsub: job {jid} is gone (its record was not kept)\n")
                return 1
            if attrs is not None and attrs.get("job_state") == "F":
                if "stime" not in attrs:
                    sys.stderr.write(f"qsub: job {jid} was deleted before it ran\n")
                return attrs.get("Exit_status", 1)
            time.sleep(poll)
    except KeyboardInterrupt:
        sys.stderr.write(f"\nqsub: no longer waiting; job {jid} goes on\n")
        return 130


def qsub(opts: list[tuple[str, str]], operands: list[str], out, now: float) -> int:
    """Submit, print the id (not with -z); with -I, wait for the job and run its session;
    with -W block=true, wait for its end and exit with its exit status."""
    argv = [part for letter, value in opts for part in (f"-{letter}", value) if part] + operands
    if ("I", "") in opts and current().caller is None and not commands.owns_site():
        return remote_session(argv)
    if commands.blocks(opts) and current().caller is None and not commands.owns_site():
        quiet = ("z", "") in opts  # (the id is needed here: asked for, not shown)
        # (the server submits it, the wait is here)
        answer = commands.ask("qsub", [a for a in argv if a != "-z"] if quiet else argv)
        if answer is None:
            sys.stderr.write("qsub: cannot connect to the hpcsched server (it is not running)\n")
            return common.SYSTEM
        status, said, err = answer
        sys.stderr.write(err.decode(errors="replace"))
        if not quiet:
            out.write(said.decode(errors="replace"))
            out.flush()
        return status or blocked(said.decode().strip(), remote=True)
    jid, quiet = submit_parsed(opts, operands, now=now)
    if commands.blocks(opts) and current().caller is None:
        if not quiet:
            out.write(jid + "\n")
            out.flush()
        notify(load_site().home)  # the server starts it as soon as it can
        return blocked(jid, remote=False)
    if ("I", "") in opts and current().caller is not None:  # (the server, for remote_session)
        out.write(f"{jid}\n")
        return 0
    if ("I", "") in opts:
        notify(load_site().home)  # the server starts it as soon as it can
        return session(jid)
    if not quiet:
        out.write(jid + "\n")
    return 0


QSUB = Command("qsub", QSUB_TABLE, USAGE, qsub, changes=True, permute=False, dashes=True)
