"""pbsdsh: Torque's distributed shell, run inside a job: a program on each of its vnodes;
and pbs_tmrsh, OpenPBS's stand-in for ssh that MPI launchers call (a command on one host).

Each line of $PBS_NODEFILE is a vnode (one processor of a node).  Without options the
program runs once on every vnode, all at once; -u once on every node; -c N on the first N
(vnodes, or nodes with -u); -n N on the N-th alone (from 0); -h HOST[/K] on HOST's first
(K-th) vnode.  -s runs them one after another; -v tells each task's start and end; -o is
taken (a task's output is the job's output either way).  Each task gets PBS_TASKNUM,
PBS_NODENUM (its node's place among the job's nodes) and PBS_VNODENUM, and starts where
pbsdsh runs.  On a site with a `command` launcher a task runs on its node through it; on
the `ssh` launcher's, a task on another host of the job runs there over ssh as one of the
job's processes (`hpcsched node task`: killed with the job); otherwise (every node is this
host) here.  As Torque's, pbsdsh exits 0 once every task has
ended, and names each task that did not end well.
"""
from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys

from ..store.site import whoami
from . import common
from .common import Command
from .errors import UsageError

FIRST_TASK = 2  # the job's own script is task 1 (its PBS_TASKNUM)


def pbsdsh(opts: list[tuple[str, str]], argv: list[str], out, now: float) -> int:
    o = dict(opts)
    if not argv:
        raise UsageError("give a program to run")
    copies, node = _count(o, "c", 1), _count(o, "n", 0)
    if copies is not None and node is not None:
        raise UsageError("-c and -n cannot be given together")
    if not os.environ.get("PBS_ENVIRONMENT"):
        raise common.CommandError("not executing under PBS", 1)
    hosts = _vnodes()
    order = list(dict.fromkeys(hosts))  # the job's nodes, as they come first
    where = [(i, hosts[i]) for i in range(len(hosts))]
    if "u" in o:
        where = [(hosts.index(h), h) for h in order]
    if "h" in o:
        name, _, k = o["h"].partition("/")
        found = [v for v in where if v[1] == name]
        if not (k.isascii() and k.isdigit() or not k) or len(found) <= int(k or 0):
            raise common.CommandError(f"{o['h']} not found", 1)
        where = [found[int(k or 0)]]
    elif node is not None or copies is not None:
        if (node if node is not None else copies - 1) >= len(where):
            raise common.CommandError(f"only {len(where)} nodes available", 1)
        where = [where[node]] if node is not None else where[:copies]
    sisters = _sisters()
    launcher = None if sisters else _launcher()
    tasks: dict[subprocess.Popen, int] = {}  # running: process -> its vnode

    def forward(sig, frame):  # (Torque's pbsdsh kills its tasks with what it got, and stops)
        for p, vnode in tasks.items():
            if p.poll() is None:
                print(f"pbsdsh: killing task {vnode} signal {sig}", file=sys.stderr)
                p.send_signal(sig)
        sys.exit(1)
    before = {sig: signal.signal(sig, forward) for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM)}
    try:
        for n, (vnode, host) in enumerate(where):
            ids = {"PBS_TASKNUM": str(FIRST_TASK + n), "PBS_NODENUM": str(order.index(host)),
                   "PBS_VNODENUM": str(vnode)}
            command = argv
            if sisters and host != sisters.get("host"):
                command = _over_ssh(sisters, host, ids, argv)
            elif launcher:
                line = shlex.join(["env", *(f"{k}={v}" for k, v in ids.items()), *argv])
                command = [part.replace("{host}", host).replace("{command}", line).replace("{user}", whoami())
                           for part in launcher]
            try:
                task = subprocess.Popen(command, env={**os.environ, **ids}, stdin=subprocess.DEVNULL)
            except OSError as e:
                print(f"pbsdsh: spawn failed on node {vnode}: {command[0]}: {e.strerror}", file=sys.stderr)
                continue
            tasks[task] = vnode
            if "v" in o:
                print(f"pbsdsh: spawned task {vnode}", file=sys.stderr)
            if "s" in o:  # (one after another)
                _ended(task, tasks.pop(task), "v" in o)
        for task, vnode in list(tasks.items()):
            _ended(task, vnode, "v" in o)
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    return 0


def _ended(p: subprocess.Popen, vnode: int, verbose: bool) -> None:
    status = p.wait()
    if verbose or status:
        print(f"pbsdsh: task {vnode} exit status {status if status >= 0 else 128 - status}", file=sys.stderr)


def _count(o: dict[str, str], letter: str, least: int) -> int | None:
    if letter not in o:
        return None
    text = o[letter]
    if not text.isdigit() or not text.isascii() or int(text) < least:
        raise UsageError(f"illegal -{letter} value {text!r}")
    return int(text)


def _vnodes() -> list[str]:
    """The job's vnodes: $PBS_NODEFILE's lines."""
    path = os.environ.get("PBS_NODEFILE", "")
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            hosts = [line.strip() for line in f if line.strip()]
    except OSError as e:
        raise common.CommandError(f"cannot read PBS_NODEFILE {path!r}: {e.strerror}", 1) from None
    if not hosts:
        raise common.CommandError(f"PBS_NODEFILE {path!r} names no node", 1)
    return hosts


def _launcher() -> list[str] | None:
    """The site's `command` launcher, where the job may read the site's configuration."""
    from ..core.errors import SchedulerError
    from ..store.site import load_site
    if not os.environ.get("HPCSCHED_HOME"):
        return None
    try:
        launcher = load_site().config.get("launcher")
    except (SchedulerError, OSError):
        return None
    return launcher if isinstance(launcher, list) else None


def _sisters() -> dict | None:
    """A job on the `ssh` launcher's hosts: how its node side reaches the job's other
    hosts (server/node.py sets it), or None."""
    import json
    try:
        got = json.loads(os.environ.get("HPCSCHED_NODE") or "null")
    except ValueError:
        return None
    return got if isinstance(got, dict) and {"ssh", "command", "key"} <= got.keys() else None


def node_request(ssh: list[str], command: list[str], spool: str | None, host: str, *words: str) -> list[str]:
    """The ssh line that asks `hpcsched node` on `host` for `words` (its spool, "{host}"
    filled in): the server's requests (server/remote.py) and a task on a job's other host."""
    where = ["--spool", spool.replace("{host}", host)] if spool else []
    return [*ssh, host, shlex.join([*command, *where, *words])]


def _over_ssh(sisters: dict, host: str, ids: dict[str, str], argv: list[str]) -> list[str]:
    """A task on another host of the job: its node command makes it one of the job's
    processes there (killed with the job), with the job's PBS variables, where pbsdsh runs."""
    pbs = {k: v for k, v in os.environ.items() if k.startswith("PBS_")}
    return node_request(sisters["ssh"], sisters["command"], sisters.get("spool"), host, "task", sisters["key"], "--",
                        "env", *(f"{k}={v}" for k, v in {**pbs, **ids}.items()),
                        "sh", "-c", 'cd "$0" 2>/dev/null; exec "$@"', os.getcwd(), *argv)


def pbs_tmrsh(opts: list[tuple[str, str]], argv: list[str], out, now: float) -> int:
    """OpenPBS's rsh/ssh stand-in for MPI launchers, run inside a job: `pbs_tmrsh [-n]
    [-l user] host [-n] [-l user] command...` runs the command (a shell line, its words
    joined as ssh joins them) on one of the job's hosts, as one of the job's processes, and
    exits with its status."""
    o = dict(opts)
    rest = list(argv)
    if not rest:
        raise UsageError("give a host and a command")
    host, rest = rest[0], rest[1:]
    while rest[:1] == ["-n"] or rest[:1] == ["-l"] and len(rest) > 1:  # (options may follow the host)
        if rest[0] == "-l":
            o["l"], rest = rest[1], rest[2:]
        else:
            o["n"], rest = "", rest[1:]
    if not rest:
        raise UsageError("give a command")
    if not os.environ.get("PBS_ENVIRONMENT"):
        raise common.CommandError("not executing under PBS", 1)
    if o.get("l") not in (None, whoami()):
        raise common.CommandError(f"{o['l']}: only the job's owner", 1)
    if host not in _vnodes():
        raise common.CommandError(f"{host} is not a host of this job", 1)
    line = ["sh", "-c", " ".join(rest)]
    sisters = _sisters()
    command = _over_ssh(sisters, host, {}, line) if sisters and host != sisters.get("host") else line
    try:
        return subprocess.call(command, stdin=subprocess.DEVNULL if "n" in o else None)
    except OSError as e:
        raise common.CommandError(f"{command[0]}: {e.strerror}", 127) from None


PBS_TMRSH = Command("pbs_tmrsh", "nl:", "usage: pbs_tmrsh [-n] [-l username] host [-n] [-l username] command [args ...]",
                    pbs_tmrsh, permute=False)
PBSDSH = Command("pbsdsh", "c:n:h:osuv", "usage: pbsdsh [-c copies | -n node | -h host] [-o] [-s] [-u] [-v] "
                 "program [args ...]", pbsdsh, permute=False)
