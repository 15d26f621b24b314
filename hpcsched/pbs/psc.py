"""PSC's node-id commands: shownids and pbsyod (psc-simon paper; hpcsched defines them).

    shownids          every node id with its state and the job on it, then the bad list
    pbsyod APP ARGS   inside a job: run the site launcher over the job's nodes, given as
                      node-id ranges (`YOD_NIDLIST=10..20,30..60`)

pbsyod's launcher is the site config's `pbsyod_launcher`, a list whose `{nids}`, `{np}`
and `{args}` items are filled in; by default the application runs directly with
YOD_NIDLIST, YOD_NP and the nodes' names (YOD_NODES) in its environment (a test rig).
"""
from __future__ import annotations

import json
import os
import subprocess

from ..core import nodelist
from ..core.errors import ConfigError
from ..core.jobs import ACTIVE
from ..core.topology import NodeState
from ..store.request import current
from . import client, common
from .common import Command
from .errors import UsageError
from .maui import load


def shownids(opts: list[tuple[str, str]], operands: list[str], out, now: float) -> int:
    if operands:
        raise UsageError(f"unexpected {operands[0]!r}")
    site, batch = load()
    sched = batch.sched
    on_node: dict[str, list[str]] = {}
    for job in sched.jobs.values():
        if job.state in ACTIVE:
            for name in job.nodes:
                for listed in sched.topology.covered(name):
                    on_node.setdefault(listed, []).append(common.full_id(job.id, site.server))
    out.write(f"{'NID':>6} {'NODE':<16} {'STATE':<8} JOB\n")
    bad = []
    for node in sched.topology.all_nodes():
        jobs = ",".join(sorted(set(on_node.get(node.name, [])))) or "--"
        state = node.state.value
        if node.state == NodeState.UP and jobs != "--":
            state = "busy" if not node.shared else "up"
        out.write(f"{node.nid:>6} {node.name:<16} {state:<8} {jobs}\n")
        if node.state == NodeState.BAD:
            bad.append(node.nid)
    out.write(f"\nbad nodes: {nodelist.compress_nids(bad) if bad else 'none'}\n")
    return 0


def pbsyod(opts: list[tuple[str, str]], argv: list[str], out, now: float) -> int:
    """Run the program on the job's nodes through the site's launcher, as this process's
    child.  On a multi-user site the server, which alone reads the store, says what to run
    (`planned`) and the job runs it."""
    if not argv:
        raise UsageError("give a program to run")
    if current().caller is None and not client.owns_site():
        answer = client.ask("pbsyod", argv)
        if answer is None:
            raise common.CommandError("the hpcsched server is not running", common.SYSTEM)
        status, text, err = answer
        if status:
            raise common.CommandError(err.decode(errors="replace").strip().removeprefix("pbsyod: "), status)
        plan = json.loads(text)
        command, env = plan["command"], dict(os.environ, **plan["env"])
    else:
        command, env = _plan(argv)
        if current().caller is not None:  # (the server, for a multi-user site's pbsyod)
            out.write(json.dumps({"command": command, "env": {k: env[k] for k in YOD_KEYS}}))
            return 0
    try:
        return subprocess.call(command, env=env)
    except OSError as e:
        raise common.CommandError(f"{command[0]}: {e.strerror}", 127) from None


YOD_KEYS = ("YOD_NIDLIST", "YOD_NP", "YOD_NODES")


def _plan(argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """What pbsyod runs for the job in $PBS_JOBID: the command and its environment."""
    jid_text = os.environ.get("PBS_JOBID")
    if not jid_text:
        raise common.CommandError("not inside a batch job (PBS_JOBID is not set)", common.USAGE)
    site, batch = load()
    found = common.resolve(batch.sched.jobs, jid_text, site.server)  # a subjob's id too: 12[3].srv
    job = found[0] if len(found) == 1 else None
    if job is None or job.state not in ACTIVE:
        raise common.CommandError(f"job {jid_text} is not running", common.UNKNOWN_JOB)
    if current().caller is not None and not common.may_touch(site, current().caller, job):
        raise common.deny("pbsyod", job, site)
    topo = batch.sched.topology
    if topo.places_blocks:
        raise common.CommandError(f"job {jid_text} runs on block {job.nodes[0]}: a Blue Gene's nodes have no "
                                  "node ids", common.USAGE)
    nids = [topo.node(n).nid for n in job.nodes]
    nidlist = nodelist.compress_nids(nids)
    np = job.request.processors
    template = site.config.get("pbsyod_launcher")
    if template is None:
        command = list(argv)
    elif isinstance(template, list) and all(isinstance(x, str) for x in template):
        command = []
        for item in template:
            if item == "{args}":
                command.extend(argv)
            else:
                command.append(item.replace("{nids}", nidlist).replace("{np}", str(np)))
    else:
        raise ConfigError("pbsyod_launcher: must be a list of strings")
    return command, dict(os.environ, YOD_NIDLIST=nidlist, YOD_NP=str(np), YOD_NODES=",".join(job.nodes))


SHOWNIDS = Command("shownids", "", "usage: shownids", shownids)
PBSYOD = Command("pbsyod", "", "usage: pbsyod APP [ARGS ...]", pbsyod, permute=False)
