"""qstat: show jobs, queues and the server, in Torque's or OpenPBS's formats.

Every column of the default listing is one whitespace-free token (tools take `split()[0]`
as the id and `[4]` as the state).  Unknown ids: `Unknown Job Id`, exit 153, and the
other ids still print.
"""
from __future__ import annotations

import json
import re
import shlex
import sys
from xml.sax.saxutils import escape

from ..core import nodelist
from ..core.jobs import COMPLETED, DELETED, EXITING, FINISHED, QUEUED, RUNNING, Job
from ..core.timefmt import hms
from ..store.journaled import Batch
from ..store.site import Site, load_site, whoami
from . import common
from .attributes import depend_text
from .common import Command
from .errors import UsageError

USAGE = ("usage: qstat [-f [-1]] [-F json|dsv] [-x] [-a] [-i] [-r] [-s] [-T] [-n [-1]] [-u user] [-Q] [-q] [-B] "
         "[job_id ...]")


def ctime(t: float | None) -> str:
    return common.local_time("%a %b %d %H:%M:%S %Y", t) if t is not None else ""


def exec_host(job: Job) -> str:
    """`node01/0-3+node02/0-3`, as PBS writes the cores each node gives the job."""
    return nodelist.exec_host(job.nodes, job.cores)


def mem_text(mb: int) -> str:
    return f"{mb}mb" if mb % 1024 else f"{mb // 1024}gb"


def resource_list(job: Job) -> dict:
    """Resource_List as typed values (numbers stay numbers for JSON)."""
    r = job.request
    out: dict = {}
    asked = job.extra.get("resources", {})
    if r.cores:
        out["ncpus"] = r.cores
        out["procs"] = r.cores
    else:
        out["nodect"] = r.nodes
        out["ncpus"] = r.nodes * r.ppn
        if "select" in asked:
            out["select"] = asked["select"]
        else:
            out["nodes"] = asked.get("nodes", f"{r.nodes}:ppn={r.ppn}")
    if r.mem:
        out["mem"] = mem_text(r.mem * (1 if r.cores else r.nodes))
    if r.gpus:
        out["ngpus"] = r.gpus * r.nodes
    out["walltime"] = hms(job.walltime)
    for k, v in asked.items():
        out.setdefault(k, v)
    return out


def attributes(job: Job, site: Site, now: float, jobs: dict | None = None, flavor: str = "",
               topology=None, priority=None, viewer: str | None = None, comment: str | None = None,
               planned=None) -> dict:
    """The job's attributes in qstat -f order, values typed, in the flavor's vocabulary
    (`flavor` overrides the site's: JSON is always OpenPBS's).  On a Cray `topology`, a
    placed job's `nid_list` too (PSC's attribute: the node ids it runs on); on a Blue
    Gene its block size.  `priority(job)`: a waiting job's priority under the site's
    policy, shown as `sched_priority` (None: the policy has no number to show).  A
    `viewer` who is neither the owner nor an operator sees no environment (Variable_List)
    and no command line, as PBS hides them.  `comment`: the comment to show (by default
    the job's own; the scheduler's `comment` adds the quota holds it works out when asked).
    `planned`: (start, allocation) the last pass reserved for it, OpenPBS's `estimated`."""
    flavor = flavor or site.flavor
    private = viewer is not None and viewer != job.owner and not site.is_operator(viewer)
    torque = flavor == "torque"
    x = job.extra
    a: dict = {"Job_Name": job.name, "Job_Owner": f"{job.owner}@{x.get('submit_host', site.server)}"}
    if job.start_time is not None:
        a["resources_used"] = common.resources_used(job, now)
    a["job_state"] = letter(job, flavor)
    a["queue"] = job.queue
    a["server"] = site.server
    a["ctime"] = ctime(job.submit_time)
    where = f"{x.get('submit_host', site.server)}:{x.get('submit_dir', x.get('workdir', ''))}"
    seq = common.output_seq(job, site.flavor)
    out_default, err_default = f"{where}/{job.name}.o{seq}", f"{where}/{job.name}.e{seq}"
    a["Error_Path"] = _path(x.get("error"), err_default, job, "e", site)
    if job.nodes and job.state not in (DELETED,):
        a.update(_placed(job, topology))
    a["Hold_Types"] = common.hold_letters(job)
    a["Join_Path"] = x.get("join", "n")
    a["Keep_Files"] = x.get("keep", "n")
    a["Mail_Points"] = x.get("mail_points", "a")
    if x.get("mail_users"):
        a["Mail_Users"] = x["mail_users"]
    a["Output_Path"] = _path(x.get("output"), out_default, job, "o", site)
    a["Priority"] = job.priority
    if priority is not None and job.state == QUEUED:
        value = priority(job)
        if value is not None:
            a["sched_priority"] = round(value, 6)
    a["qtime"] = ctime(job.submit_time)
    a["Rerunable"] = "True" if x.get("rerunnable", True) else "False"
    a["Resource_List"] = resource_list(job)
    if topology.places_blocks:  # the block size it gets (or got)
        a["block_size"] = topology.size(job.request)
    a.update(_run_as_asked(x))
    if job.account:
        a["Account_Name"] = job.account
    if job.dependencies:
        a["depend"] = depend_text(job.dependencies, site.server, jobs or {})
    if job.start_after is not None:
        a["Execution_Time"] = ctime(job.start_after)
    if job.deadline is not None:  # (Grid Engine's qstat -j shows it as "deadline")
        a["deadline"] = ctime(job.deadline)
    a["euser"] = job.owner
    if job.group:
        a["egroup"] = job.group
    if not private:
        a["Variable_List"] = dict(x.get("variables", {}))
    if job.start_time is not None:
        a["start_time" if torque else "stime"] = ctime(job.start_time)
    a["run_count"] = job.run_count
    if job.state in FINISHED:
        status = job.exit_status if job.exit_status is not None else 271 if job.start_time is None else -1
        a["exit_status" if torque else "Exit_status"] = status
        if not torque:
            a["obittime"] = ctime(job.end_time)
    comment = job.comment if comment is None else comment
    if comment or not torque:
        a["comment"] = comment or _comment(job)
    if planned is not None and not torque and job.state == QUEUED:  # (as the last pass planned it)
        a["estimated"] = _estimated(*planned)
    if not private:
        a.update(_command_line(x, torque))
    if job.array_id:
        a.update(array_attributes(job, jobs or {}, site.server, torque))
    return a


def _placed(job: Job, topology) -> dict:
    """Where a placed job runs: its hosts, the GPUs the server gave it (Torque's
    exec_gpus), and on a Cray its node ids (PSC's nid_list)."""
    a = {"exec_host": exec_host(job)}
    if job.extra.get("gpus"):
        a["exec_gpus"] = "+".join(f"{n}-gpu/{i}" for n, held in job.extra["gpus"].items() for i in held)
    nids = topology.node_ids(job.nodes) if topology is not None else None
    if nids is not None:
        a["nid_list"] = nids
    return a


def _run_as_asked(x: dict) -> dict:
    """How qsub asked the job to run: its shell (-S), umask and staged files (-W)."""
    a = {"Shell_Path_List": x["shell"]} if x.get("shell") else {}
    w = x.get("W", {})
    if "umask" in w:
        a["umask"] = w["umask"]
    a.update((key, w[key]) for key in ("stagein", "stageout") if w.get(key))
    return a


def _estimated(start: float, alloc) -> dict:
    """OpenPBS's `estimated`: the start and the nodes the last pass reserved."""
    out = {"exec_vnode": "+".join(f"({n}:ncpus={len(c)})" if c else f"({n})" for n, c in zip(alloc.nodes, alloc.cores)),
           "start_time": ctime(start)}
    if not alloc.nodes:
        del out["exec_vnode"]
    return out


def _command_line(x: dict, torque: bool) -> dict:
    """The job's command line as qstat -f shows it to its owner: qsub's arguments, Torque's
    -F, OpenPBS's `qsub -- program args` as it shows them."""
    a = {}
    if "submit_args" in x:
        a["submit_args" if torque else "Submit_arguments"] = x["submit_args"]
    if x.get("arguments"):  # Torque's -F
        a["job_arguments"] = shlex.join(x["arguments"])
    if x.get("program") and not torque:
        a["executable"] = f"<jsdl-hpcpa:Executable>{x['program'][0]}</jsdl-hpcpa:Executable>"
        if x["program"][1:]:
            a["argument_list"] = "".join(f"<jsdl-hpcpa:Argument>{arg}</jsdl-hpcpa:Argument>"
                                         for arg in x["program"][1:])
    return a


def array_attributes(job: Job, jobs: dict, server: str, torque: bool) -> dict:
    """An array's attributes: on its row (qstat without -t, index "") the indices asked
    for with the slot limit (Torque's job_array_request) or OpenPBS's array, array_state_count
    and indices; on a subjob, its index (and, OpenPBS, its array's id)."""
    if job.array_index != "":
        return {"job_array_id": job.array_index} if torque else \
            {"array_id": f"{job.array_id}[].{server}", "array_index": job.array_index}
    subs = [j for j in jobs.values() if j.array_id == job.array_id]
    indices = _ranges(j.array_index for j in subs)
    if torque:
        return {"job_array_request": indices + (f"%{job.array_limit}" if job.array_limit else "")}
    count = {"Queued": 0, "Running": 0, "Exiting": 0, "Expired": 0}
    for j in subs:
        count["Expired" if j.state in FINISHED else "Exiting" if j.state == EXITING
              else "Running" if j.start_time is not None else "Queued"] += 1
    waiting = [j.array_index for j in subs if j.start_time is None and j.state not in FINISHED]
    return {"array": "True", "array_state_count": " ".join(f"{k}:{n}" for k, n in count.items()),
            "array_indices_submitted": indices, "array_indices_remaining": _ranges(waiting) or "-"}


def _ranges(indices) -> str:
    """Sorted indices as ranges: 0-4,7,9-10."""
    out: list[list[int]] = []
    for i in sorted(indices):
        if out and i == out[-1][1] + 1:
            out[-1][1] = i
        else:
            out.append([i, i])
    return ",".join(f"{lo}-{hi}" if hi > lo else f"{lo}" for lo, hi in out)


def _path(given: str | None, default: str, job: Job, letter: str, site: Site) -> str:
    if not given:
        return default
    if "cobalt" in job.extra:  # (Cobalt's `$jobid` in a path)
        given = common.expand(given, job)
    host = job.extra.get("submit_host", site.server)
    if given.endswith("/"):
        seq = common.output_seq(job, site.flavor)
        return f"{host}:{given}{job.name}.{letter}{seq}"
    return f"{host}:{given}"


def _comment(job: Job) -> str:
    return {RUNNING: "Job run", COMPLETED: "Job run and finished",
            DELETED: "Job deleted"}.get(job.state, "Not Running")


def _plain(value) -> str:
    if isinstance(value, dict):  # (Variable_List: a comma inside a value is escaped, as OpenPBS shows it)
        return ",".join(f"{k}={str(v).replace(',', chr(92) + ',')}" for k, v in value.items())
    return str(value)


def full_lines(fid: str, attrs: dict, fold: bool, width: int) -> list[str]:
    """qstat -f: `name[.resource] = value`, 4-space indent, folded at commas past `width`."""
    out = [f"Job Id: {fid}"]
    for name, value in attrs.items():
        if isinstance(value, dict) and name != "Variable_List":
            for k, v in value.items():
                out.extend(_fold(f"    {name}.{k} = {v}", fold, width))
        else:
            out.extend(_fold(f"    {name} = {_plain(value)}", fold, width))
    out.append("")
    return out


def _fold(line: str, fold: bool, width: int) -> list[str]:
    if not fold or len(line) <= width:
        return [line]
    lines, cur = [], ""
    for piece in re.split(r"(?<!\\),", line):  # (not at an escaped comma)
        cand = f"{cur},{piece}" if cur else piece
        if cur and len(cand) + 1 > width:
            lines.append(cur + ",")
            cur = "\t" + piece
        else:
            cur = cand
    lines.append(cur)
    return lines


def _cut_torque_name(name: str, width: int = 16) -> str:
    return name if len(name) <= width else "..." + name[-(width - 3):]


def _cut_star(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "*"


def time_use(job: Job) -> str:
    return hms(job.cpu_time) if job.cpu_time else "0"


def default_listing(jobs: list[Job], site: Site) -> list[str]:
    if site.flavor == "torque":
        lines = [f"{'Job ID':<25} {'Name':<16} {'User':<15} {'Time Use':>8} S Queue",
                 f"{'-' * 25} {'-' * 16} {'-' * 15} {'-' * 8} - -----"]
        for j in jobs:
            lines.append(f"{common.display_id(j, site.server):<26} {_cut_torque_name(j.name):<16} "
                         f"{j.owner[:15]:<15} {time_use(j):>8} {letter(j, 'torque')} {j.queue}")
        return lines
    lines = [f"{'Job id':<17} {'Name':<16} {'User':<16}  {'Time Use':>8} S Queue",
             f"{'-' * 16}  {'-' * 16} {'-' * 16}  {'-' * 8} - -----"]
    for j in jobs:
        jid = _cut_star(common.display_id(j, site.server.split('.')[0]), 17)
        lines.append(f"{jid:<17} {_cut_star(j.name, 16):<16} {_cut_star(j.owner, 16):<16}  "
                     f"{time_use(j):>8} {letter(j, 'openpbs')} {_cut_star(j.queue, 16)}")
    return lines


def alternate_listing(jobs: list[Job], site: Site, nodes: bool, one_line: bool, now: float,
                      comments: dict[int, str] | None = None, starts: dict[int, str] | None = None) -> list[str]:
    """qstat -a / -u / -n / -i / -r: the wide listing with requested resources and elapsed
    time; -s (`comments`: job id -> comment) adds each job's comment on a line below it;
    -T (`starts`: job id -> its estimated start, shown) puts that in the last column."""
    lines = ["", f"{site.server}:"]
    if starts is not None:
        lines.append(f"{'':<106}Est")
    lines += [f"{'':<82}Req'd       Req'd       {'Start' if starts is not None else 'Elap'}",
             "Job ID                  Username    Queue    Jobname          SessID  NDS   TSK   Memory      "
             "Time    S   Time",
             "----------------------- ----------- -------- ---------------- ------ ----- ------ --------- "
             "--------- - ---------"]
    for j in jobs:
        r = j.request
        tsk = r.cores or r.nodes * r.ppn
        mem = mem_text(r.mem * (1 if r.cores else r.nodes)) if r.mem else "--"
        sess = str(j.extra.get("session", "--")) if j.state in (RUNNING, EXITING) else "--"
        elapsed = hms(common.run_time(j, now)) if j.start_time is not None else "--"
        if starts is not None:
            elapsed = starts.get(j.id, "--")
        row = (f"{common.display_id(j, site.server)[:23]:<23} {j.owner[:11]:<11} {j.queue[:8]:<8} "
               f"{j.name[:16]:<16} {sess:>6} {r.nodes if not r.cores else '--':>5} {tsk:>6} {mem:>9} "
               f"{hms(j.walltime):>9} {letter(j, site.flavor)} {elapsed:>9}")
        if nodes:
            host = exec_host(j) if j.nodes else "--"
            if one_line:
                row += f" {host}"
            else:
                lines.append(row)
                row = f"   {host}"
        lines.append(row)
        if comments is not None and comments.get(j.id):
            lines.append(f"   {comments[j.id]}")
    return lines


def xml_listing(items: list[tuple[str, dict]]) -> str:
    parts = ['<?xml version="1.0"?>', "<Data>"]
    for fid, attrs in items:
        parts.append(f"<Job><Job_Id>{escape(fid)}</Job_Id>")
        for name, value in attrs.items():
            if isinstance(value, dict) and name != "Variable_List":
                parts.append(f"<{name}>" + "".join(f"<{k}>{escape(str(v))}</{k}>" for k, v in value.items())
                             + f"</{name}>")
            else:
                parts.append(f"<{name}>{escape(_plain(value))}</{name}>")
        parts.append("</Job>")
    parts.append("</Data>")
    return "".join(parts)


def queue_listing(site: Site, sched, named=()) -> list[str]:
    """qstat -Q: Torque's columns (`%-16.16s %5s %6s ...`, Cpt last) or OpenPBS's (5 wide,
    the queue type in four letters, Exec or Rout, as PBS Professional prints it)."""
    torque = site.flavor == "torque"
    if torque:
        row = "%-16.16s %5s %6s %5s %5s %5s %5s %5s %5s %5s %5s %1s %5s"
        lines = [row % ("Queue", "Max", "Tot", "Ena", "Str", "Que", "Run", "Hld", "Wat", "Trn", "Ext", "T", "Cpt"),
                 "----------------   ---   ----    --    --   ---   ---   ---   ---   ---   --- -   ---"]
    else:
        row = "%-16s %5s %5s %3s %3s %5s %5s %5s %5s %5s %5s %-4s"
        lines = ["Queue              Max   Tot Ena Str   Que   Run   Hld   Wat   Trn   Ext Type",
                 "---------------- ----- ----- --- --- ----- ----- ----- ----- ----- ----- ----"]
    for name, q in _listed(sched, named):
        jobs = [j for j in sched.jobs.values() if j.queue == name]
        count = _letters(site, jobs)
        total = sum(common.counted(j, site.flavor) for j in jobs)
        cells = [q.max_running or 0, total, "yes" if q.enabled else "no", "yes" if q.started else "no",
                 count["Q"], count["R"], count["H"], count["W"], 0, count["E"]]
        if torque:
            lines.append(row % (name, *cells, "R" if q.routing else "E", count["C"]))
        else:
            shown = name if len(name) <= 16 else name[:15] + "*"
            lines.append(row % (shown, *cells, "Rout" if q.routing else "Exec"))
    return lines


def _letters(site: Site, jobs) -> dict[str, int]:
    """How many of `jobs` show each state letter (Q R H W E C) in the site's flavor."""
    count = dict.fromkeys("QRHWEC", 0)
    for j in jobs:
        letter = common.state_letter(j, site.flavor)
        if letter in count:
            count[letter] += 1
    return count


def _listed(sched, named) -> list:
    """(name, queue) of the queues named, in that order, else of every queue."""
    return [(n, sched.router.queues[n]) for n in named] if named else list(sched.router.queues.items())


def _state_count(site: Site, sched, name: str, flavor: str) -> str:
    """`Transit:0 Queued:2 Held:0 Waiting:0 Running:1 Exiting:0 Begun:0` (OpenPBS) or with
    `Complete:N` last (Torque)."""
    count = _letters(site, [j for j in sched.jobs.values() if j.queue == name])
    words = [("Transit", 0), ("Queued", count["Q"]), ("Held", count["H"]), ("Waiting", count["W"]),
             ("Running", count["R"]), ("Exiting", count["E"])]
    words.append(("Complete", count["C"]) if flavor == "torque" else ("Begun", 0))
    return " ".join(f"{k}:{v}" for k, v in words)


def limits_listing(site: Site, sched, named=()) -> list[str]:
    """qstat -q: each queue's limits (walltime, CPU time, nodes, running jobs), its job
    counts and its state (E or D: enabled or not; R or S: started or stopped), then totals."""
    lines = ["", f"server: {site.server}", "",
             "Queue            Memory CPU Time Walltime Node  Run Que Lm  State",
             "---------------- ------ -------- -------- ----  --- --- --  -----"]
    runs = ques = 0
    for name, q in _listed(sched, named):
        jobs = [j for j in sched.jobs.values() if j.queue == name]
        run = sum(1 for j in jobs if j.state in (RUNNING, EXITING))
        que = sum(1 for j in jobs if j.state not in FINISHED and j.state not in (RUNNING, EXITING))
        runs, ques = runs + run, ques + que
        cput = hms(q.max_cput) if q.max_cput else "--"
        wall = hms(q.max_walltime) if q.max_walltime else "--"
        lines.append(f"{name[:16]:<16} {'--':>6} {cput:>8} {wall:>8} {q.max_nodes or '--':>4}  {run:>3} {que:>3} "
                     f"{q.max_running or '--':>2}   {'E' if q.enabled else 'D'} {'R' if q.started else 'S'}")
    lines += [f"{'':<47}----- -----", f"{'':<47}{runs:>5} {ques:>5}"]
    return lines


def server_listing(site: Site, sched) -> list[str]:
    """qstat -B: Torque's columns (with Com, its completed jobs) or OpenPBS's; the state
    is Active, or Idle while scheduling is off (qmgr's server_state)."""
    jobs = list(sched.jobs.values())
    count = _letters(site, jobs)
    state = "Active" if site.config.get("scheduling", True) else "Idle"
    total = sum(common.counted(j, site.flavor) for j in jobs)
    cells = [0, total, count["Q"], count["R"], count["H"], count["W"], 0, count["E"]]
    if site.flavor == "torque":
        row = "%-16.16s %5s %5s %5s %5s %5s %5s %5s %5s %5s %s"
        return [row % ("Server", "Max", "Tot", "Que", "Run", "Hld", "Wat", "Trn", "Ext", "Com", "Status"),
                "----------------   ---   ---   ---   ---   ---   ---   ---   ---   --- ----------",
                row % (site.server, *cells, count["C"], state)]
    name = site.server if len(site.server) <= 16 else site.server[:15] + "*"
    return ["Server             Max   Tot   Que   Run   Hld   Wat   Trn   Ext Status",
            "---------------- ----- ----- ----- ----- ----- ----- ----- ----- -----------",
            "%-16s %5s %5s %5s %5s %5s %5s %5s %5s %s" % (name, *cells, state)]


def _write_full(out, kind: str, listed: list[tuple[str, list[tuple[str, object]]]], o: dict,
                site: Site, now: float) -> None:
    """qstat -Qf / -Bf: each queue's (or the server's) attributes as text, as OpenPBS's
    JSON (`{"Queue": {name: {...}}}`, `a.b` keys nested, counts as numbers) or as DSV
    (-D's delimiter, as a job's)."""
    form = o["F"]
    if form == "json":
        doc = {"timestamp": int(now), "pbs_version": common.VERSION, "pbs_server": site.server, kind: {}}
        for name, rows in listed:
            attrs: dict = {}
            for key, value in rows:
                value = int(value) if isinstance(value, str) and value.isdigit() else value
                head, _, tail = str(key).partition(".")
                if tail:
                    attrs.setdefault(head, {})[tail] = value
                else:
                    attrs[head] = value
            doc[kind][name] = attrs
        out.write(json.dumps(doc, indent=4) + "\n")
    elif form == "dsv":
        for name, rows in listed:
            out.write(o["D"].join([f"{kind}: {name}", *(f"{k}={v}" for k, v in rows)]) + "\n")
    else:
        for name, rows in listed:
            out.write(f"{kind}: {name}\n" + "".join(f"    {k} = {v}\n" for k, v in rows) + "\n")


def settings(opts: list[tuple[str, str]], ids: list[str]) -> dict:
    """What the options ask for: a flag's letter -> True, -F/-D/-u -> their values."""
    o = {"f": False, "one": False, "F": None, "D": "|", "x": False, "a": False, "n": False, "u": None,
         "Q": False, "q": False, "B": False, "H": False, "w": False, "t": False, "i": False, "r": False,
         "s": False, "T": False, "ids": ids}
    for letter, value in opts:
        o["one" if letter == "1" else letter] = value if letter in "FDu" else True
    if o["F"] not in (None, "json", "dsv"):
        raise UsageError(f"invalid -F value {o['F']!r}")
    return o


#: a destination operand: a queue's name (a letter first), queue@server or @server
_DESTINATION = re.compile(r"[A-Za-z][\w.-]*(@[\w.-]+)?|@[\w.-]+")


def qstat(opts: list[tuple[str, str]], ids: list[str], out, now: float) -> int:
    o = settings(opts, ids)
    site = load_site()
    batch = Batch.of(site)
    with batch.open(write=False):
        sched = batch.sched
    if _queues_or_server(o, ids, site, sched, out, now):
        return 0
    viewer = whoami()
    jobs, status = _selected(o, site, sched, now, viewer)
    if o["f"] or o["F"] or (o["x"] and site.flavor == "torque"):
        _write_jobs_full(o, jobs, site, sched, out, now, viewer)
    else:
        _write_listing(o, jobs, site, sched, batch, out, now)
    return status


def _queues_or_server(o: dict, ids: list[str], site, sched, out, now: float) -> bool:
    """qstat -Q, -q and -B (queues, limits, the server): written to `out`; False if none was asked."""
    torque = site.flavor == "torque"
    if o["Q"] or o["q"]:
        named = [q.split("@")[0] for q in ids]  # (qstat -Q [queue[@server] ...]: those queues alone)
        for q in named:
            if q not in sched.router.queues:
                raise common.CommandError(f"Unknown queue destination {q}", 172 if torque else 170)
        if o["Q"] and o["f"]:  # qstat -Qf: each queue's attributes, as qmgr lists them
            from .qmgr import queue_attributes
            listed = []
            flavor = "openpbs" if o["F"] == "json" else site.flavor  # (JSON is OpenPBS's in both flavors)
            for name, _ in _listed(sched, named):
                rows = queue_attributes(sched, name, flavor)
                rows.insert(2, ("state_count", _state_count(site, sched, name, flavor)))
                listed.append((name, rows))
            _write_full(out, "Queue", listed, o, site, now)
            return True
        lines = (queue_listing if o["Q"] else limits_listing)(site, sched, named)
        out.write("\n".join(lines) + "\n")
        return True
    if o["B"]:
        if o["f"]:  # qstat -Bf: the server's attributes, as qmgr lists them
            from .qmgr import server_attributes
            rows = server_attributes(site, sched, "openpbs" if o["F"] == "json" else site.flavor)
            rows.insert(1, ("server_host", site.server))
            _write_full(out, "Server", [(site.server, rows)], o, site, now)
            return True
        out.write("\n".join(server_listing(site, sched)) + "\n")
        return True
    return False


def _selected(o: dict, site, sched, now: float, viewer: str) -> tuple[list[Job], int]:
    """The jobs to list: those of the queues and ids named (each refused one said on stderr,
    with its status), or every one the viewer may see, by -u, -r and -i; in id order."""
    torque = site.flavor == "torque"
    history = (o["x"] and not torque) or o["H"]
    status = 0
    # destinations (queue, queue@server, @server) list their jobs; the rest are job ids
    ids = [t for t in o["ids"] if not _DESTINATION.fullmatch(t)]
    queues = [t.split("@")[0] for t in o["ids"] if _DESTINATION.fullmatch(t)]
    for q in [q for q in queues if q and q not in sched.router.queues]:
        sys.stderr.write(f"qstat: Unknown queue destination {q}\n")
        status = 172 if torque else 170
        queues.remove(q)

    def listed(j: Job) -> bool:  # (a job listed unasked: not finished, or kept, and the viewer's to see)
        return (j.state not in FINISHED or (history if not torque else (_kept(j, site, now) or o["x"]))) \
            and common.may_see(site, viewer, j)
    jobs = []
    if queues:
        jobs = [j for j in sched.jobs.values() if ("" in queues or j.queue in queues) and listed(j)]
        jobs = _collapse(jobs, site.flavor, o["t"])
    if ids:
        subjobs = []  # (a subjob named by its index shows as itself, never its array's row)
        for text in ids:
            try:
                named = common.resolve(sched.jobs, text, site.server)
            except common.CommandError as e:
                sys.stderr.write(f"qstat: {e}\n")
                status = e.status
                continue
            if not all(common.may_see(site, viewer, j) for j in named):  # (qmgr's query_other_jobs = false)
                sys.stderr.write(f"qstat: {common.deny('qstat', named[0], site)}\n")
                status = common.UNAUTHORIZED
                continue
            if all(j.state in FINISHED for j in named):
                if torque and not o["x"] and not any(_kept(j, site, now) for j in named):
                    sys.stderr.write(f"qstat: Unknown Job Id {common.display_id(named[0], site.server)}\n")
                    status = common.UNKNOWN_JOB
                    continue
                if not torque and not history:
                    sys.stderr.write(f"qstat: {common.display_id(named[0], site.server)} Job has finished, use -x "
                                     f"or -H to obtain historical job information\n")
                    status = status or common.FINISHED
                    continue
            (subjobs if common.parse_ref(text)[1] not in (None, common.ALL) else jobs).extend(named)
        jobs = _collapse(jobs, site.flavor, o["t"])
        jobs = list({id(j): j for j in jobs + subjobs}.values())  # (a job both named and in a queue named: once)
    elif not o["ids"]:
        jobs = [j for j in sched.jobs.values() if listed(j)]
        jobs = _collapse(jobs, site.flavor, o["t"])
    if o["u"]:
        users = set(o["u"].split(","))
        jobs = [j for j in jobs if j.owner in users]
    if o["r"] != o["i"]:  # running (and exiting) jobs, or the others not finished ("idle")
        jobs = [j for j in jobs if (j.state in (RUNNING, EXITING)) == o["r"] and j.state not in FINISHED]
    jobs.sort(key=lambda j: (j.array_id or j.id, -1 if j.array_index == "" else j.array_index))
    return jobs, status


def _write_jobs_full(o: dict, jobs: list[Job], site, sched, out, now: float, viewer: str) -> None:
    """qstat -f, -F json|dsv, and Torque's -x (XML): every attribute of each job."""
    torque = site.flavor == "torque"
    # -F json is OpenPBS's format in either flavor: its keys and state letters (F, Exit_status)
    vocabulary = "openpbs" if o["F"] == "json" else site.flavor
    policy, ctx = sched.policy, sched.context(now)

    def priority(j: Job) -> float | None:  # (a policy whose factors hold no such number: none)
        factors = policy.describe(j, ctx)
        return factors.get("priority", factors.get("score"))
    items = [(common.display_id(j, site.server), attributes(j, site, now, sched.jobs, vocabulary,
                                                           sched.topology, priority, viewer,
                                                           sched.comment(j), sched.planned(j.id)))
             for j in jobs]
    if o["F"] == "json":
        doc = {"timestamp": int(now), "pbs_version": common.VERSION, "pbs_server": site.server}
        if items:
            doc["Jobs"] = dict(items)  # attributes are typed already: numbers stay numbers
        out.write(json.dumps(doc, indent=4) + "\n")
    elif o["F"] == "dsv":
        for fid, a in items:
            fields = [f"Job Id: {fid}"]
            for name, value in a.items():
                if isinstance(value, dict) and name != "Variable_List":
                    fields.extend(f"{name}.{k}={v}" for k, v in value.items())
                else:
                    fields.append(f"{name}={_plain(value)}")
            out.write(o["D"].join(fields) + "\n")
    elif o["x"] and torque:
        out.write(xml_listing(items) + "\n")
    else:
        fold = not (o["one"] or o["w"])
        for fid, a in items:
            out.write("\n".join(full_lines(fid, a, fold, 77 if torque else 78)) + "\n")


def _write_listing(o: dict, jobs: list[Job], site, sched, batch, out, now: float) -> None:
    """The one-line-a-job listing: the alternate format (-a, -n, -s, -T, ...) or the default."""
    if o["a"] or o["n"] or o["u"] or o["i"] or o["r"] or o["s"] or o["T"]:
        starts = None
        if o["T"]:  # (OpenPBS's: the next pass's estimates, running jobs first, then soonest)
            plan = batch.scratch().iterate(now)  # (maui.preview's: a pass whose decisions are thrown away)
            when = {j.id: plan.estimate(j.id) for j in jobs if j.state == QUEUED}
            starts = {jid: est_start(t, now) for jid, t in when.items()}
            jobs.sort(key=lambda j: (j.start_time is None, j.start_time or 0.0,
                                     when.get(j.id) is None, when.get(j.id) or 0.0))
        if jobs:
            comments = {j.id: sched.comment(j) for j in jobs} if o["s"] else None
            out.write("\n".join(alternate_listing(jobs, site, o["n"], o["one"], now, comments, starts)) + "\n")
        return
    if jobs:
        out.write("\n".join(default_listing(jobs, site)) + "\n")




def est_start(t: float | None, now: float) -> str:
    """OpenPBS's short estimated start: HH:MM today, `Tu 15` within a week, the month within
    the year, else the year; `?` when no start is found within the planning horizon."""
    if t is None:
        return "?"
    t = max(t, now)  # (a start the pass makes now)
    day, today = common.local_time("%Y %j", t), common.local_time("%Y %j", now)
    if day == today:
        return common.local_time("%H:%M", t)
    if t - now < 7 * 86400:
        return common.local_time("%a", t)[:2] + common.local_time(" %H", t)
    if day[:4] == today[:4]:
        return common.local_time("%b", t)
    return day[:4]


def letter(job: Job, flavor: str) -> str:
    """The state letter qstat shows: an OpenPBS array row whose subjobs began shows B."""
    return "B" if job.extra.get("array_begun") else common.state_letter(job, flavor)


def _collapse(jobs: list[Job], flavor: str, expand: bool = False) -> list[Job]:
    """Each array's subjobs show as one row `N[]`, as Torque and OpenPBS do; with -t
    (`expand`) the subjobs themselves, after that row under OpenPBS, alone under Torque."""
    out, arrays = [], {}
    for j in jobs:
        if j.array_id and not expand:
            arrays.setdefault(j.array_id, []).append(j)
        else:
            out.append(j)
            if j.array_id and flavor == "openpbs":
                arrays.setdefault(j.array_id, []).append(j)
    for aid, subs in arrays.items():
        first = min(subs, key=lambda j: j.array_index)
        row = first.copy()  # shown as `123[].server`, its state summing up the subjobs'
        letters = {common.state_letter(j, flavor) for j in subs}
        started = any(j.start_time is not None for j in subs)
        if letters <= {"C", "F"}:
            row.state = first.state
            row.exit_status = array_exit_status(subs)
        elif flavor == "openpbs" and started:
            row.state = RUNNING
            row.extra = dict(row.extra, array_begun=True)
        else:
            row.state = next(j.state for j in sorted(subs, key=lambda j: "REQWHCF".index(common.state_letter(j, flavor))))
        row.array_index = ""
        out.append(row)
    return out


def array_exit_status(subjobs: list[Job]) -> int:
    """A finished array's exit status, as PBS Professional gives it: 0 when every subjob
    that ran exited 0 (deleted ones not counted), 1 when one exited non-zero, 2 when one
    failed in the batch system itself (a negative status: it could not be run)."""
    statuses = [j.exit_status for j in subjobs if j.state == COMPLETED and j.exit_status is not None]
    return 2 if any(x < 0 for x in statuses) else 1 if any(statuses) else 0


def _kept(job: Job, site: Site, now: float) -> bool:
    """Torque keeps a finished job in plain qstat for keep_completed seconds."""
    return job.end_time is not None and now - job.end_time <= site.keep_completed


QSTAT = Command("qstat", "fxanQqBHwtirsT1F:D:u:", USAGE, qstat)
