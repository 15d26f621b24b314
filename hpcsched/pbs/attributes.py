"""Job attributes from PBS options, shared by qsub and qalter: the option table's values
(-l resources of Torque's and OpenPBS's styles, -a, -p, -t/-J, -W depend=, paths, #PBS
directives) turned into the core's Request, times and Dependency objects.  Every malformed
value is one line with exit status 2 (a UsageError, after which the command prints its
usage line, or a CommandError)."""
from __future__ import annotations

import math
import os
import re
import shlex
from dataclasses import dataclass, replace

from ..core.depends import ALL as ALL_ARRAY
from ..core import timefmt
from ..core.errors import InvalidRequest
from ..core.jobs import Dependency, DepType, Request
from ..core.timefmt import parse_duration
from ..core import nodelist
from . import common, options
from .errors import UsageError


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
                raise common.CommandError(f"directive error on script line {n}: {e}", common.USAGE) from None
            found, rest = options.parse(words, options.QSUB, permute=False, where=f" (script line {n})")
            if rest:
                raise common.CommandError(f"directive error on script line {n}: unexpected {rest[0]!r}", common.USAGE)
            opts.extend(found)
    return opts


def variable_list(text: str, what: str = "-v") -> list[tuple[str, str | None]]:
    """-v's `NAME[=VALUE],...` as (name, value or None); a value may be quoted, in single or
    double quotes, to hold commas (`-v "A='x,y',B=2"`), and the quotes go, as OpenPBS reads it."""
    out, i, n = [], 0, len(text)
    while i < n:
        j = i
        while j < n and text[j] not in "=,":
            j += 1
        name, value = text[i:j].strip(), None
        if j < n and text[j] == "=":
            parts, j = [], j + 1
            while j < n and text[j] != ",":
                if text[j] in "'\"":
                    end = text.find(text[j], j + 1)
                    if end < 0:
                        raise UsageError(f"illegal {what} value {text!r} (a quote is not closed)")
                    parts.append(text[j + 1:end])
                    j = end + 1
                else:
                    parts.append(text[j])
                    j += 1
            value = "".join(parts)
        if name:
            out.append((name, value))
        i = j + 1
    return out


#: resources whose value is itself a comma-separated list (`nidmask=10..20,30..60`)
LIST_RES = {"nidmask"}


def split_resources(value: str) -> list[tuple[str, str]]:
    out = []
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        name, eq, val = item.partition("=")
        if not eq and out and out[-1][0] in LIST_RES:  # the list goes on
            out[-1] = (out[-1][0], f"{out[-1][1]},{item}")
            continue
        if not eq or not name or not val:
            raise UsageError("illegal -l value")
        out.append((name.strip().lower(), val.strip()))
    return out


#: where one -W value's attributes part: at a comma before the next `name=`
W_ITEMS = re.compile(r",(?=\s*[a-z_]+=)")


def merge(cmdline: list[tuple[str, str]], script: list[tuple[str, str]]) -> tuple[dict[str, str], dict[str, str]]:
    """(first value of each option, resources merged per name), command line first.  Each
    -W names attributes (`-W depend=... -W umask=022`): all are kept, one value per name,
    a later one replacing an earlier and the command line's the script's, as qsub sets them."""
    options: dict[str, str] = {}
    resources: dict[str, str] = {}
    w: dict[str, str] = {}
    for letter, value in script + cmdline:
        if letter == "W":
            for item in W_ITEMS.split(value):
                w[item.partition("=")[0].strip()] = item.strip()
    if w:
        options["W"] = ",".join(w.values())
    for letter, value in cmdline + script:
        if letter == "l":
            for name, val in split_resources(value):
                resources.setdefault(name, val)
        elif letter == "v":
            options["v"] = options["v"] + "," + value if "v" in options else value
        elif letter != "W":
            options.setdefault(letter, value)
    return options, resources



_MEM = re.compile(r"^([0-9]{1,18})\s*([kmgtp]?)(b|w)?$", re.I)


def parse_size(text: str) -> int:
    """A PBS size in bytes: `8gb` -> 8589934592; plain numbers are bytes, a word is 8."""
    m = _MEM.match(text.strip())
    if not m:
        raise UsageError(f"illegal -l value: bad size {text!r}")
    n = int(m.group(1)) * (8 if (m.group(3) or "b").lower() == "w" else 1)
    return n * {"": 1, "k": 2 ** 10, "m": 2 ** 20, "g": 2 ** 30, "t": 2 ** 40, "p": 2 ** 50}[m.group(2).lower()]


def parse_memory(text: str) -> int:
    """`8gb` -> 8192 (MB, rounded up), as the planner counts memory."""
    return -(-parse_size(text) // 2 ** 20)  # (whole numbers: a float overflows past 1e308)


def positive(text: str, what: str) -> int:
    if not re.fullmatch(r"[0-9]{1,18}", text) or int(text) < 1:  # (ASCII digits: '²'.isdigit() too)
        raise UsageError(f"illegal -l value: {what} must be a positive integer, not {text!r}")
    return int(text)


TORQUE_RES = {"nodes", "ppn", "procs", "pmem", "vmem", "pvmem"}
KNOWN_RES = TORQUE_RES | {"walltime", "mem", "ncpus", "select", "place", "cput", "pcput", "file", "host", "nice",
                          "mpiprocs", "naccelerators", "ngpus", "software", "arch", "size", "nidmask",
                          "naccesspolicy", "advres"}
#: Moab's -l naccesspolicy= words hpcsched keeps to: singlejob makes the job's nodes its own
NACCESS = {"singlejob": True, "shared": False}
#: ways of asking for processors; a job uses one of them
COUNT_RES = ("select", "nodes", "procs", "ncpus", "size")
#: OpenPBS's place=[arrangement][:sharing][:group=RESOURCE] words (checked; pack makes the chunks one,
#: excl and exclhost the request exclusive; each chunk gets its own node, as scatter asks)
PLACE = {"free", "pack", "scatter", "vscatter", "excl", "shared", "exclhost"}
#: what a select chunk may ask for (arch is every node's "linux"; ompthreads is the job's business)
CHUNK_RES = {"ncpus", "mpiprocs", "ompthreads", "mem", "ngpus", "host", "vnode", "arch"}
#: Torque's GPU mode words after nodes=N:gpus=G (taken; the node's driver sets the mode)
GPU_MODES = {"exclusive_thread", "exclusive_process", "exclusive", "default", "shared", "reseterr"}


def build_request(res: dict[str, str], declared=()) -> tuple[Request, float | None]:
    """(request, walltime or None) from -l resources of either style (`declared`: the
    site's consumables, which -l may name too)."""
    for name in res:
        if name not in KNOWN_RES and name not in declared:
            raise common.CommandError(f"Unknown resource type {name}", common.USAGE)
    limits(res)  # (checked here: the server sets them when the job starts)
    if "select" in res or "place" in res:
        mixed = sorted(TORQUE_RES & set(res))
        if mixed:
            raise common.CommandError(f'"-lresource=" cannot be used with "select" or "place", resource is: '
                                   f'{mixed[0]}', common.USAGE)
    if "place" in res and not all(w in PLACE or w.startswith("group=") and w[6:] for w in res["place"].split(":")):
        raise UsageError(f"illegal -l value: place={res['place']} (give [free|pack|scatter|vscatter]"
                         "[:excl|shared|exclhost][:group=RESOURCE])")
    if "ngpus" in res and "ngpus" not in declared and ("select" in res or "nodes" in res):
        raise UsageError(f"illegal -l value: ngpus cannot be used with {'select' if 'select' in res else 'nodes'} "
                         f"(ask in each chunk: {'select=N:ngpus=G' if 'select' in res else 'nodes=N:gpus=G'})")
    counts = [k for k in COUNT_RES if k in res]
    if "size" in res and len(counts) > 1:
        raise UsageError(f"illegal -l value: size cannot be used with {[k for k in counts if k != 'size'][0]}")
    walltime = None
    if "walltime" in res:
        try:
            walltime = parse_duration(res["walltime"])
        except InvalidRequest:
            raise UsageError(f"illegal -l value: walltime {res['walltime']!r}") from None
        if walltime <= 0:
            raise UsageError("illegal -l value: walltime must be positive")
    if "naccesspolicy" in res and res["naccesspolicy"].lower() not in NACCESS:
        raise UsageError(f"illegal -l value: naccesspolicy={res['naccesspolicy']} (give singlejob or shared)")
    exclusive = bool({"excl", "exclhost"} & set(res.get("place", "").split(":"))) or \
        NACCESS.get(res.get("naccesspolicy", "").lower(), False)
    nodes, ppn, cores, mem, gpus, features, hosts = 1, 1, 0, 0, 0, [], ()
    if "select" in res:
        nodes, shape, hosts = select_chunks(res["select"], declared)
        ppn = positive(shape.get("ncpus", shape.get("mpiprocs", "1")), "ncpus")
        if "mem" in shape:
            mem = parse_memory(shape["mem"])
        if "ngpus" in shape:
            gpus = count(shape["ngpus"], "ngpus")
        if "pack" in res.get("place", "").split(":") and nodes > 1:  # every chunk on one host: one chunk
            if hosts:
                raise UsageError("illegal -l value: place=pack puts every chunk on one host, not on the hosts named")
            nodes, ppn, mem, gpus = 1, nodes * ppn, nodes * mem, nodes * gpus
    elif "nodes" in res:
        nodes, ppn, gpus, features, hosts = torque_nodes(res["nodes"])
    elif "ngpus" in res and "ngpus" not in declared:  # OpenPBS: job-wide resources are one chunk
        ppn = positive(res.get("ncpus", "1"), "ncpus")
        gpus = count(res["ngpus"], "ngpus")
        if "procs" in res or "size" in res:
            raise UsageError(f"illegal -l value: ngpus cannot be used with {'procs' if 'procs' in res else 'size'}")
    elif "procs" in res or "ncpus" in res:
        cores = positive(res.get("procs") or res.get("ncpus"), "procs")
    elif "size" in res:  # PSC's XT3 (Torque under Dev Harness): the number of compute nodes
        nodes = positive(res["size"], "size")
    if "ppn" in res and "nodes" not in res:
        ppn = positive(res["ppn"], "ppn")
    if "mem" in res and "select" not in res:
        total = parse_memory(res["mem"])
        mem = -(-total // nodes) if not cores else total
    if "pmem" in res:
        mem = max(mem, parse_memory(res["pmem"]) * (ppn if not cores else cores))
    if exclusive and cores:  # (exclusive is per chunk: a job-wide count is one chunk, as OpenPBS takes it)
        if "ncpus" not in res or "procs" in res or "size" in res:
            raise UsageError("illegal -l value: an exclusive job asks for chunks (select=, nodes= or ncpus=), "
                             "not a processor count")
        nodes, ppn, cores = 1, cores, 0
    return Request(nodes=nodes, ppn=ppn, cores=cores, mem=mem, gpus=gpus, features=tuple(features),
                   within=hosts, exclusive=exclusive), walltime


def x_resources(x: str, resources: dict[str, str]) -> dict[str, str]:
    """`resources` with what Maui's -W x=ADVRES:NAME;NACCESSPOLICY:WORD asks, in the words
    -l asks it (advres=, naccesspolicy=); the same asked both ways differently is refused."""
    out = dict(resources)
    for item in x.split(";"):
        key, _, value = item.strip().partition(":")
        name = {"ADVRES": "advres", "NACCESSPOLICY": "naccesspolicy"}.get(key.strip().upper())
        if name is None:
            continue
        value = value.strip() if name == "advres" else value.strip().lower()
        if out.get(name, value) != value:
            raise UsageError(f"illegal -W value x={x} ({name}={out[name]} is asked for by -l)")
        out[name] = value
    return out


def advance_reservation(resources: dict[str, str]) -> str:
    """The advance reservation a job asks to run in, Moab's -l advres=NAME ("" for none)."""
    name = resources.get("advres", "").strip()
    if name and not re.fullmatch(r"[A-Za-z0-9_.@-]{1,64}", name):
        raise UsageError(f"illegal -l value: advres={name}")
    return name


def select_chunks(text: str, declared=()) -> tuple[int, dict[str, str], tuple[str, ...]]:
    """(chunks, their shape, the hosts they name) from OpenPBS's `select=[N:]k=v:..[+...]`.
    Every chunk must have one shape, apart from its host (`host=` or `vnode=`): chunks
    that name hosts each take one, as `1:ncpus=4:host=a+1:ncpus=4:host=b` does.  The
    site's consumables (`declared`) are the job's, asked for outside the chunks."""
    total, shapes, hosts = 0, [], []
    for chunk in text.split("+"):
        parts = chunk.split(":")
        n = positive(parts.pop(0), "select count") if parts and parts[0].isdigit() else 1
        shape = {}
        for p in parts:
            k, eq, v = p.partition("=")
            k, v = k.strip(), v.strip()
            if not eq or not v:
                raise UsageError(f"illegal -l value: select chunk {chunk!r}")
            if k not in CHUNK_RES:
                where = f"a job-wide consumable: -l {k}=N" if k in declared else f"select chunk {chunk!r}"
                raise common.CommandError(f"Unknown resource: {k} ({where})", common.USAGE)
            shape[k] = v
        host = shape.pop("host", None) or shape.pop("vnode", None)
        if ("host" in shape or "vnode" in shape) or (host and n > 1):
            raise UsageError(f"illegal -l value: select chunk {chunk!r} (a chunk that names a host is one "
                             "chunk on it)")
        total += n
        shapes.append(shape)
        hosts.append(host)
    return total, shapes[0], _one_shape(shapes, hosts, "chunk", "select")


def torque_nodes(text: str) -> tuple[int, int, int, list[str], tuple[str, ...]]:
    """(nodes, ppn, gpus, properties, hosts) from Torque's `nodes={N|HOST}[:ppn=M][:gpus=G]
    [:property...][+...]`.  The specs joined by + must have one shape; a spec that names a
    host is one node, and then every spec names a different one (`node01:ppn=4+node02:ppn=4`)."""
    total, shapes, hosts = 0, [], []
    for spec in text.split("+"):
        parts = spec.split(":")
        if not parts[0] or "=" in parts[0]:
            raise UsageError(f"illegal -l value: nodes={text} (give a node count or a host name first)")
        host = None if parts[0][:1].isdigit() else parts[0]
        n = 1 if host else positive(parts[0], "nodes")
        ppn, gpus, props = 1, 0, []
        for p in parts[1:]:
            if p.startswith("ppn="):
                ppn = positive(p[4:], "ppn")
            elif p.startswith("gpus="):
                gpus = count(p[5:], "gpus")
            elif p in GPU_MODES and gpus:
                pass
            elif p and "=" not in p:
                props.append(p)
            else:
                raise UsageError(f"illegal -l value: nodes={text}")
        total += n
        shapes.append((ppn, gpus, sorted(props)))
        hosts.append(host)
    named = _one_shape(shapes, hosts, "node spec", f"nodes={text}")
    ppn, gpus, props = shapes[0]
    return total, ppn, gpus, props, named


def _one_shape(shapes: list, hosts: list, part: str, where: str) -> tuple[str, ...]:
    """The hosts named, if the parts (select chunks, Torque node specs) have one shape and
    each names a different host, or none does (one node of a job's is one part)."""
    if any(s != shapes[0] for s in shapes):
        raise common.CommandError(f"illegal -l value: {part}s of different shapes are not supported", common.USAGE)
    named = tuple(h for h in hosts if h)
    if named and (len(named) < len(hosts) or len(set(named)) < len(named)):
        raise UsageError(f"illegal -l value: {where} (name a different host in every {part.split()[-1]}, or in none)")
    return named


def count(text: str, what: str) -> int:
    """A non-negative integer resource (ngpus=0 asks for none)."""
    if not re.fullmatch(r"[0-9]{1,18}", text):
        raise UsageError(f"illegal -l value: {what} must be a non-negative integer, not {text!r}")
    return int(text)


#: the limits the server keeps a job to (server/limits.py), as pbs_mom does: sizes in bytes
SIZE_LIMITS = ("mem", "vmem", "pvmem", "pmem", "file")
NICE = range(-20, 20)


def limits(res: dict[str, str]) -> dict[str, int]:
    """The job's limits from its -l resources: sizes (mem, vmem, pvmem, pmem, file) in
    bytes, pcput in seconds, nice; a bad value is refused.  (A select job's `mem` is in
    its chunks: Resource_List.mem, see qstat.resource_list.)"""
    out = {name: parse_size(res[name]) for name in SIZE_LIMITS if name in res}
    if "pcput" in res:
        try:
            out["pcput"] = math.ceil(parse_duration(res["pcput"]))
        except (InvalidRequest, OverflowError):
            raise UsageError(f"illegal -l value: pcput {res['pcput']!r}") from None
    if "nice" in res:
        if not re.fullmatch(r"[-+]?[0-9]{1,3}", res["nice"]) or int(res["nice"]) not in NICE:
            raise UsageError(f"illegal -l value: nice must be an integer from -20 to 19, not {res['nice']!r}")
        out["nice"] = int(res["nice"])
    return out


def cput_of(res: dict[str, str]) -> float:
    """The CPU time -l cput asks for (0: none)."""
    if "cput" not in res:
        return 0.0
    try:
        return parse_duration(res["cput"])
    except InvalidRequest:
        raise UsageError(f"illegal -l value: cput {res['cput']!r}") from None


def consumption(res: dict[str, str], declared) -> dict[str, int]:
    """The site's consumables a job's -l asks for: NAME=N for a declared NAME, and
    software=NAME (one of it) where the site declares consumables (CC-IN2P3's licences,
    storage and OS pools)."""
    out = {}
    for name, value in res.items():
        if name in declared:
            out[name] = positive(value, name)
    if declared and "software" in res:
        for name in filter(None, (n.strip() for n in res["software"].split("+"))):
            if name not in declared:
                raise common.CommandError(f"Unknown consumable {name} (software=; this site has "
                                          f"{', '.join(sorted(declared))})", common.USAGE)
            out[name] = out.get(name, 0) + 1
    return out


def with_nidmask(request: Request, res: dict[str, str], topology) -> Request:
    """`request` kept to the nodes of the resources' nidmask, if they give one (and the
    hosts its select chunks name checked)."""
    if request.within:
        try:
            topology.units_of_nodes(request.within)
        except InvalidRequest as e:
            raise UsageError(f"illegal -l value: host: {e}") from None
    if "nidmask" not in res:
        return request
    if request.within:
        raise UsageError("illegal -l value: nidmask cannot be used with named hosts")
    if topology.places_blocks:
        raise UsageError("illegal -l value: nidmask: this machine's nodes have no node ids (a Blue Gene "
                         "places blocks)")
    return replace(request, within=nidmask(res["nidmask"], topology.all_nodes()))


def nidmask(text: str, nodes) -> tuple[str, ...]:
    """The names of the nodes PSC's `-l nidmask=10..20,30..60` allows, out of `nodes` (the
    machine's, with their nids); `^10..20` allows every node but those.  Nids between the
    machine's lowest and highest that no compute node has (service nodes) are skipped."""
    avoid = text.startswith("^")
    try:
        nids = set(nodelist.expand_nids(text[1:] if avoid else text))
    except InvalidRequest as e:
        raise UsageError(f"illegal -l value: nidmask: {e}") from None
    have = {n.nid: n.name for n in nodes}
    low, high = min(have), max(have)
    outside = sorted(n for n in nids if not low <= n <= high)
    if outside:
        raise UsageError(f"illegal -l value: nidmask {text!r} names nid {outside[0]}, outside this machine's "
                         f"{low}..{high}")
    names = tuple(name for nid, name in sorted(have.items()) if (nid in nids) != avoid)
    if not names:
        raise UsageError(f"illegal -l value: nidmask {text!r} leaves no node")
    return names


def parse_start_after(text: str, now: float, what: str = "-a") -> float:
    """`-a [[[[CC]YY]MM]DD]hhmm[.SS]` in local time (timefmt.wall_clock).  (`-W deadline=`
    takes the same form; `what` names the option in errors.)"""
    try:
        return timefmt.wall_clock(text, now)
    except InvalidRequest:
        raise UsageError(f"illegal {what} value {text!r}") from None


MAX_SUBJOBS = 100000


def parse_array(text: str) -> tuple[list[int], int]:
    """`-t 1-10%5`, `-t 1,3,5-7` (Torque) or `-J 1-10:2%5` (OpenPBS) -> (indices, slot limit)."""
    body, _, limit = text.partition("%")
    if limit and (not re.fullmatch(r"[0-9]{1,9}", limit) or int(limit) < 1):
        raise UsageError(f"illegal array request {text!r}")
    ranges = []
    for part in body.split(","):
        m = re.fullmatch(r"\s*([0-9]{1,9})(?:-([0-9]{1,9})(?::([0-9]{1,9}))?)?\s*", part)
        if not m:
            raise UsageError(f"illegal array request {text!r}")
        lo, hi, step = int(m.group(1)), int(m.group(2) or m.group(1)), int(m.group(3) or 1)
        if hi < lo or step < 1:
            raise UsageError(f"illegal array request {text!r}")
        ranges.append((lo, hi, step))
    # counted before anything is built: 1-100000000 is refused by its size, not by memory
    if sum((hi - lo) // step + 1 for lo, hi, step in ranges) > MAX_SUBJOBS:
        raise common.CommandError(f"array request too large (at most {MAX_SUBJOBS} subjobs)", common.USAGE)
    indices = sorted({i for lo, hi, step in ranges for i in range(lo, hi + 1, step)})
    return indices, int(limit or 0)


_STAGE = re.compile(r"([^@,]+)@([^:,@]+):([^,]+)")


def parse_staging(text: str, key: str = "stagein") -> list[tuple[str, str, str]]:
    """-W stagein=/stageout=: `local_file@hostname:remote_file[,...]` as (local, host, remote)."""
    items = [item.strip() for item in text.split(",")]
    found = [_STAGE.fullmatch(item) for item in items]
    if not items or not all(found):
        raise UsageError(f"illegal -W value {key}={text} (give local_file@hostname:remote_file[,...])")
    return [m.groups() for m in found]


def parse_priority(text: str) -> int:
    """-p: an integer from -1024 to 1023."""
    try:
        priority = int(text)
    except ValueError:
        priority = 9999
    if not -1024 <= priority <= 1023:
        raise UsageError(f"illegal -p value {text!r}")
    return priority


def parse_names(text: str, option: str) -> str:
    """A user, group or account list (`-M a,b@host`, `-W group_list=g`, `-A proj`):
    comma-separated names, each 1-255 characters with no space or control character."""
    names = [n.strip() for n in text.split(",")]
    if not all(0 < len(n) < 256 and not any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in n)
               for n in names):
        raise UsageError(f"illegal {option} value {text!r}")
    return ",".join(names)


def parse_path(text: str, option: str) -> str:
    """A path (`-o`, `-e`, `-d`, `-S`): at most 4,096 characters, no control character."""
    if not text or len(text) > 4096 or any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise UsageError(f"illegal {option} value {text[:80]!r}")
    return text


def parse_job_name(text: str) -> str:
    """-N: 1-236 characters, no space, control character or `/` (the name makes the
    output files' names: it may not lead out of their directory), and not . or .."""
    if not text or any(c.isspace() or ord(c) < 32 or ord(c) == 127 or c == "/" for c in text) or len(text) > 236 \
            or text in (".", ".."):
        raise UsageError(f"illegal -N value {text!r}")
    return text


def parse_join(text: str) -> str:
    """-j: oe (errors into the output file), eo (the other way) or n."""
    if text not in ("oe", "eo", "n"):
        raise UsageError(f"illegal -j value {text!r}")
    return text


def parse_mail_points(text: str) -> str:
    """-m: `n`, or any of a (aborted), b (began), e (ended); OpenPBS's j (also for each
    subjob) is accepted in both flavors."""
    if text != "n" and (not text or any(c not in "abej" for c in text)):
        raise UsageError(f"illegal -m value {text!r}")
    return text


def parse_keep(text: str) -> str:
    """-k: `n`, or which of o and e to keep in the owner's home directory instead of
    delivering them; OpenPBS's d (write directly, what hpcsched always does) is accepted."""
    if text != "n" and (not text or any(c not in "oed" for c in text) or len(set(text)) != len(text)):
        raise UsageError(f"illegal -k value {text!r}")
    return text


def parse_umask(text: str) -> int:
    """-W umask=: up to four octal digits, as umask(1) takes them."""
    if not re.fullmatch(r"[0-7]{1,4}", text) or int(text, 8) > 0o777:
        raise UsageError(f"illegal -W value umask={text}")
    return int(text, 8)


#: -W depend kinds: PBS name -> (core kind, names the job that waits (before*), on an array (Torque's *array))
DEPEND_KINDS = {f"{side}{cond}{array}": (core, side == "before", bool(array))
                for side in ("after", "before") for array in ("", "array")
                for cond, core in (("", "afterstart"), ("start", "afterstart"), ("ok", "afterok"),
                                   ("notok", "afternotok"), ("any", "afterany"))
                if not (cond == "start" and not array) and not (cond == "" and array)}
_DEPEND_ID = re.compile(r"^(\d+)(?:\[(\d*)\])?(?:\[(\d+)\])?(?:\.\S+)?$")


@dataclass(frozen=True)
class DependSpec:
    """One parent named in `-W depend=`: the job, subjob or array, before the store is read."""

    kind: str  # the core kind: afterok, afternotok, afterany, afterstart
    job_id: int
    index: int | None  # None: the job itself; ALL_INDICES: the whole array; else one subjob
    count: int | None  # Torque's `7[][N]`; None: every subjob
    array_kind: bool  # named by a Torque *array kind

    @property
    def text(self) -> str:
        return f"{self.job_id}[]" if self.index is not None and self.index < 0 else (
            f"{self.job_id}[{self.index}]" if self.index is not None else str(self.job_id))


ALL_INDICES = -1


def parse_depend(value: str, flavor: str = "openpbs") -> tuple[list[DependSpec], list[DependSpec]]:
    """(what this job waits on, the jobs that will wait on it: `before*`), read from a
    `-W depend=` value such as `afterok:7:8[2].srv,afterokarray:9[][3]`.  Parents are ids
    of jobs, subjobs (`8[2]`) or arrays (`9[]`: every subjob; `9[][3]` three of them).
    A malformed id is OpenPBS's 153; Torque answers it with the usage status."""
    try:
        return _parse_depend(value)
    except common.CommandError as e:
        if flavor == "torque" and e.status == common.UNKNOWN_JOB:
            raise UsageError(f"illegal -W value: depend={value}") from None
        raise


def _parse_depend(value: str) -> tuple[list[DependSpec], list[DependSpec]]:
    deps, befores = [], []
    for part in value.split(","):
        kind, _, ids = part.partition(":")
        kind = kind.strip()
        if kind not in DEPEND_KINDS:
            if kind in ("on", "synccount", "syncwith"):
                raise common.CommandError(f"dependency type {kind} is not supported", common.USAGE)
            raise UsageError(f"illegal -W value: depend={value}")
        if not ids:
            raise UsageError(f"illegal -W value: depend={value}")
        core, before, array_kind = DEPEND_KINDS[kind]
        for jid in ids.split(":"):
            m = _DEPEND_ID.match(jid.strip())
            if not m or (m.group(3) and (m.group(2) != "" or not array_kind)):
                raise common.CommandError(f"illegally formed job identifier: {jid}", common.UNKNOWN_JOB)
            index = None if m.group(2) is None else ALL_INDICES if m.group(2) == "" else int(m.group(2))
            if array_kind:
                if index is not None and index != ALL_INDICES:
                    raise common.CommandError(f"illegally formed job identifier: {jid}", common.UNKNOWN_JOB)
                index = ALL_INDICES
            count = int(m.group(3)) if m.group(3) else None
            if count == 0:
                raise common.CommandError(f"illegally formed job identifier: {jid}", common.UNKNOWN_JOB)
            (befores if before else deps).append(DependSpec(core, int(m.group(1)), index, count, array_kind))
    return deps, befores


def resolve_depend(specs: list[DependSpec], jobs: dict, server: str) -> list[Dependency]:
    """The core's dependencies for `specs`: a subjob becomes its job id, an array its
    subjobs (all of them as one job, or Torque's count).  CommandError 153 for an id that
    names nothing."""
    out = []
    for spec in specs:
        if spec.index is None or spec.index >= 0:
            if spec.index is None:
                job = jobs.get(spec.job_id)
                found = job if job is not None and not job.array_id else None
            else:
                found = next((j for j in jobs.values() if j.array_id == spec.job_id and j.array_index == spec.index), None)
            if found is None:
                raise common.CommandError(f"Unknown Job Id {spec.text}.{server}", common.UNKNOWN_JOB)
            out.append(Dependency(DepType(spec.kind), found.id))
            continue
        size = sum(1 for j in jobs.values() if j.array_id == spec.job_id)
        if not size:
            raise common.CommandError(f"Unknown Job Id {spec.text}.{server}", common.UNKNOWN_JOB)
        of = spec.count or (size if spec.array_kind else ALL_ARRAY)
        out.append(Dependency(DepType(spec.kind), spec.job_id, None, of))
    return out


def depend_text(deps: list[Dependency], server: str, jobs: dict) -> str:
    """The `depend` attribute as qstat shows it: `afterok:7.srv`, `afterok:7[2].srv` (a
    subjob), `afterok:7[].srv`, `afterokarray:7[][3].srv` (a count), `after:7.srv` (started)."""
    parts = []
    for d in deps:
        if d.of > 0:
            kind = ("afterstart" if d.kind == DepType.AFTERSTART else d.kind.value) + "array"
        else:
            kind = "after" if d.kind == DepType.AFTERSTART else d.kind.value
        parts.append(f"{kind}:{parent_id(d, jobs, server)}")
    return ",".join(parts)


def parent_id(dep: Dependency, jobs: dict, server: str) -> str:
    """The parent a dependency names, as PBS writes it: `7.srv`, `7[2].srv`, `7[].srv`,
    `7[][3].srv`."""
    if dep.of:
        return f"{dep.job_id}[]{f'[{dep.of}]' if dep.of > 0 else ''}.{server}"
    parent = jobs.get(dep.job_id)
    return common.display_id(parent, server) if parent is not None else common.full_id(dep.job_id, server)


def resolve_path(path: str, cwd: str, isdir=os.path.isdir) -> str:
    """`[host:]path` made absolute against qsub's cwd.  A directory (as `isdir`, the caller's
    view, sees it) keeps a trailing `/`: the job's default file name goes inside it once the
    job has its id."""
    if ":" in path and not path.startswith("/"):
        path = path.split(":", 1)[1]
    if not os.path.isabs(path):
        path = os.path.join(cwd, path)
    directory = path.endswith("/") or isdir(path)
    path = os.path.normpath(path)
    return path + "/" if directory else path
