"""pbsnodes: list nodes, or mark them offline and back (operators), Torque/OpenPBS style.

    pbsnodes [-a] [node ...]        every attribute of each node (the default)
    pbsnodes -l [node ...]          nodes that are down or offline: `name  state  note`
    pbsnodes -o|-c|-r node ...      offline / clear offline / reset (as -c); with -N, a note
    pbsnodes -N note node ...       set a node's note (`-N n` or `-N ""` clears it)
    pbsnodes -x / -F json           Torque's XML / OpenPBS's JSON
    pbsnodes -aS [-j] [-L]          OpenPBS's one line a node: its resources (-S), or its
                                    jobs and free/total resources (-Sj); -L: names untruncated

A node's state is the scheduler's: up, offline (an operator's), down, bad (failed a
pre-job scan: shown down, with the note naming it).  Busy is `job-exclusive` (Torque) or
`job-busy` (OpenPBS) when every core runs a job.
"""
from __future__ import annotations

import json
import sys
from xml.sax.saxutils import escape

from ..core.jobs import ACTIVE
from ..core.topology import NodeState
from ..store.journaled import Batch
from ..store.site import load_site, whoami
from . import common
from .common import Command
from .errors import UsageError

USAGE = ("usage: pbsnodes [-a|-l|-o|-c|-r] [-x|-F json|-S [-j] [-L]] [-N note] [-q] [-s server] [node ...]")
UNKNOWN_NODE = 1


def jobs_on(sched, server: str, see=None) -> dict[str, list[tuple[int, str]]]:
    """node -> [(core, job id)] for running jobs (a Blue Gene block: every core of its boards).
    `see(job)`: may the caller see it (query_other_jobs)?  A job they may not has "" for its
    id: its cores count, its id is not shown."""
    on: dict[str, list[tuple[int, str]]] = {}
    topo = sched.topology
    for job in sched.jobs.values():
        if job.state in ACTIVE:
            jid = common.display_id(job, server) if see is None or see(job) else ""
            for node, cores in zip(job.nodes, job.cores):
                listed = topo.covered(node)
                if listed == (node,):
                    on.setdefault(node, []).extend((c, jid) for c in (cores or (0,)))
                    continue
                for name in listed:
                    on.setdefault(name, []).extend((c, jid) for c in range(topo.node(name).cores))
    return on


def state_word(node, used: int, flavor: str) -> str:
    """Torque's and OpenPBS's words for a node's state."""
    if node.state in (NodeState.DOWN, NodeState.BAD):
        return "down"
    if node.state == NodeState.OFFLINE:
        return "offline"
    if used and used >= node.cores:
        return "job-exclusive" if flavor == "torque" else "job-busy"
    return "free"


def attributes(node, jobs: list[tuple[int, str]], note: str, flavor: str, gpus_used: int = 0,
               resv: list[str] = ()) -> dict:
    """One node's attributes, typed, in the flavor's order and names (`resv`: the ids of
    the reservations on it, OpenPBS's `resv`)."""
    state = state_word(node, len(jobs), flavor)
    props = ",".join(sorted(node.features))
    if flavor == "torque":
        a = {"state": state, "power_state": "Running", "np": node.cores, "properties": props,
             "ntype": "cluster"}
        if any(j for _, j in jobs):
            a["jobs"] = ",".join(f"{c}/{j}" for c, j in sorted(jobs) if j)
        if node.gpus:
            a["gpus"] = node.gpus
        if note:
            a["note"] = note
        return a
    available = {"arch": "linux", "host": node.name, "ncpus": node.cores, "vnode": node.name}
    if node.memory:
        available["mem"] = f"{node.memory}mb"
    if node.gpus:
        available["ngpus"] = node.gpus
    for f in sorted(node.features):
        available[f] = "True"
    a = {"Mom": node.name, "ntype": "PBS", "state": state, "pcpus": node.cores}
    if any(j for _, j in jobs):
        a["jobs"] = [f"{j}/{c}" for c, j in sorted(jobs) if j]
    if resv:
        a["resv"] = list(resv)
    a["resources_available"] = available
    a["resources_assigned"] = {"ncpus": len(jobs), **({"ngpus": gpus_used} if node.gpus else {})}
    if note:
        a["comment"] = note
    a["resv_enable"] = "True"
    a["sharing"] = "default_shared" if node.shared else "default_excl"
    return a


def _text(name: str, a: dict) -> list[str]:
    lines = [name]
    for key, value in a.items():
        if isinstance(value, dict):
            lines.extend(f"     {key}.{k} = {v}" for k, v in value.items())
        else:
            lines.append(f"     {key} = {', '.join(value) if isinstance(value, list) else value}")
    lines.append("")
    return lines


def _xml(items: list[tuple[str, dict]]) -> str:
    parts = ["<Data>"]
    for name, a in items:
        parts.append(f"<Node><name>{escape(name)}</name>")
        parts.extend(f"<{k}>{escape(str(v))}</{k}>" for k, v in a.items())
        parts.append("</Node>")
    return "".join(parts + ["</Data>"])


def _mb(mb: int) -> str:
    """OpenPBS's size: kb, mb, gb as the value reads (0: 0kb)."""
    for unit, size in (("gb", 1024), ("mb", 1)):
        if mb and mb % size == 0:
            return f"{mb // size}{unit}"
    return "0kb"


def summary(nodes, jobs_of, note, gpus_used, flavor: str, with_jobs: bool, long: bool) -> list[str]:
    """OpenPBS's `pbsnodes -aS` (resources a node) or `-aSj` (its jobs, free/total), one
    line a node; each value cut to its column's width unless `long` (-L)."""
    if with_jobs:  # (title, over it, width; a width < 0 aligns right)
        columns = [("vnode", "", 15), ("state", "", 15), ("njobs", "", -6), ("run", "", -5), ("susp", "", -6),
                   ("f/t", "mem", -12), ("f/t", "ncpus", -7), ("f/t", "nmics", -7), ("f/t", "ngpus", -7),
                   ("jobs", "", 7)]
    else:
        columns = [("vnode", "", 15), ("state", "", 15), ("OS", "", 8), ("hardware", "", 8), ("host", "", 15),
                   ("queue", "", 10), ("mem", "", -8), ("ncpus", "", -7), ("nmics", "", -7), ("ngpus", "", -7),
                   ("comment", "", 9)]

    def row(values) -> str:
        cells = []
        for value, (_, _, width) in zip(values, columns):
            value = str(value) if long or len(str(value)) <= abs(width) else str(value)[:abs(width)]
            cells.append(value.rjust(-width) if width < 0 else value.ljust(width))
        return " ".join(cells).rstrip()

    lines = [row(c[1] for c in columns)] if with_jobs else []
    lines += [row(c[0] for c in columns), " ".join("-" * abs(c[2]) for c in columns)]
    for n in nodes:
        on = jobs_of(n.name)
        state = state_word(n, len(on), flavor)
        mem = _mb(n.memory) if n.memory else "0kb"
        if with_jobs:
            ids = sorted({j for _, j in on if j})
            gpus = f"{n.gpus - gpus_used(n.name)}/{n.gpus}"
            lines.append(row([n.name, state, len(ids), len(ids), 0, f"{mem}/{mem}", f"{n.cores - len(on)}/{n.cores}",
                              "0/0", gpus, ",".join(ids) or "--"]))  # (memory is not booked per job: all free)
        else:
            lines.append(row([n.name, state, "--", "--", n.name, "--", mem, n.cores, 0, n.gpus, note(n) or "--"]))
    return lines


def _change_asked(o: dict, operands: list[str]) -> str:
    """The change the options ask for: o (offline), c or r (clear), N (a note), "" (none,
    a listing); UsageError for options that do not go together."""
    modes = [m for m in "olcr" if m in o]
    if len(modes) > 1 or (modes and modes[0] in "ocr" and not operands) or o.get("F", "json") not in ("json", "dsv"):
        raise UsageError("give one of -a, -l, -o, -c, -r (the last three with node names)")
    if ("j" in o or "L" in o) and "S" not in o:
        raise UsageError("-j and -L go with -S")
    if "S" in o and (modes or "x" in o or "F" in o or "N" in o or "C" in o):
        raise UsageError("-S lists nodes: give it with -a (and -j, -L) only")
    change = modes[0] if modes and modes[0] in "ocr" else ("N" if "N" in o or "C" in o else "")
    if change == "N" and not operands:
        raise UsageError("-N needs node names")
    return change


def _change(batch: Batch, nodes: list, change: str, note: str | None, now: float) -> None:
    """Mark `nodes` offline (o) or clear them (c, r), and set or clear (`n`) their note."""
    for node in nodes:
        if change == "o" and node.state == NodeState.UP:
            batch.do("node", now, name=node.name, state="offline")
        elif change in "cr" and node.state == NodeState.OFFLINE:
            batch.do("node", now, name=node.name, state="up")
        if note is not None:
            batch.do("node", now, name=node.name, note="" if note == "n" else note)


def pbsnodes(opts: list[tuple[str, str]], operands: list[str], out, now: float) -> int:
    o = dict(opts)
    site = load_site()
    flavor = site.flavor
    change = _change_asked(o, operands)
    quiet = "q" in o
    batch = Batch.of(site)
    status = 0
    if change and not site.is_operator(whoami()):
        raise common.CommandError(f"Unauthorized Request  MSG=user {whoami()} may not change nodes",
                                  common.UNAUTHORIZED)
    if "C" in o:  # OpenPBS's -C comment is Torque's -N note
        o.setdefault("N", o["C"])
    with batch.open(write=bool(change)):
        sched = batch.sched
        known = {n.name: n for n in sched.topology.all_nodes()}
        names = []
        for name in operands:
            if name in known:
                names.append(name)
                continue
            if not quiet:
                sys.stderr.write("pbsnodes: Unknown node  MSG=cannot locate specified node\n" if flavor == "torque"
                                 else f"pbsnodes: Unknown node {name}\n")
            status = UNKNOWN_NODE
        if change:
            _change(batch, [known[name] for name in names], change, o.get("N"), now)
            return status
        def note(n) -> str:  # an operator's note, or why the node is on the bad list
            return sched.node_notes.get(n.name) or ("bad: failed a pre-job node scan" if n.state == NodeState.BAD else "")

        shown = [known[n] for n in names] if operands else list(known.values())
        if "l" in o:
            if not operands:
                shown = [n for n in shown if n.state != NodeState.UP]
            for n in shown:
                text = note(n)
                out.write(f"{n.name:<20} {state_word(n, 0, flavor):<16}{' ' + text if text else ''}".rstrip() + "\n")
            return status
        user = whoami()
        on, gpus = jobs_on(sched, site.server, lambda j: common.may_see(site, user, j)), \
            common.gpus_held(sched.jobs.values())
        if "S" in o:
            for line in summary(shown, lambda name: on.get(name, []), note, lambda name: len(gpus.get(name, ())),
                                "openpbs", "j" in o, "L" in o):
                out.write(line.rstrip() + "\n")
            return status
        vocabulary = "openpbs" if o.get("F") == "json" else flavor  # JSON is OpenPBS's in both flavors
        resv: dict[str, list[str]] = {}
        for r in sorted(sched.reservations.values(), key=lambda r: (r.start, r.name)):
            for name in r.nodes:
                resv.setdefault(name, []).append(f"{r.name}.{site.server}" if r.own_queue else r.name)
        items = [(n.name, attributes(n, on.get(n.name, []), note(n), vocabulary, len(gpus.get(n.name, ())),
                                     resv.get(n.name, ())))
                 for n in shown]
    if "x" in o:
        out.write(_xml(items) + "\n")
    elif o.get("F") == "json":
        doc = {"timestamp": int(now), "pbs_version": common.VERSION, "pbs_server": site.server,
               "nodes": dict(items)}
        out.write(json.dumps(doc, indent=4) + "\n")
    else:
        for name, a in items:
            out.write("\n".join(_text(name, a)) + "\n")
    return status


PBSNODES = Command("pbsnodes", "acjlLorSqvxC:N:F:s:", USAGE, pbsnodes, changes=True)
