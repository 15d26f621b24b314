"""qmgr: see and change the server, its queues and nodes, PBS style.

    qmgr -c 'set queue batch max_running = 10'      one or more commands (`;`-separated)
    qmgr < commands                                 a script, one command per line

Commands (abbreviations as PBS takes them): `list|print server`, `list|print queue [Q]`,
`create queue Q [attr = value, ...]`, `delete queue Q`, `set|unset server|queue ...`,
`set node N state = offline|free`, `list node [N]`.  PBS attribute names map to the site
configuration's keys (QUEUE_ATTRS, SERVER_ATTRS); a change is written to
$HPCSCHED_HOME/qmgr.json, applied over config.toml when a site is loaded (the server takes
it from its next pass), and only after the whole resulting configuration has been checked:
a command that fails writes nothing.  `print server` prints commands that re-create the
queues and server settings through `qmgr < file`.  Changes need a manager.
"""
from __future__ import annotations

import json
import re
import sys

from ..core.errors import ConfigError, SchedulerError
from ..core.jobs import FINISHED
from ..core.timefmt import hms, parse_duration
from ..store.journal import write_atomic
from ..store.journaled import Batch
from ..store.site import OVERLAY, load_site, overlay, read_overlay, whoami
from . import common
from .common import Command
from .errors import UsageError
from .pbsnodes import attributes as node_attributes
from .pbsnodes import jobs_on

UNKNOWN_ATTR = 154  # PBSE_NOATTR 15002 mod 256
UNKNOWN_QUEUE = 170
BAD_VALUE = 2

QUEUE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]*")  # what qmgr creates (PBS's rule)
_VERBS = {"c": "create", "create": "create", "d": "delete", "delete": "delete", "s": "set", "set": "set",
          "u": "unset", "unset": "unset", "l": "list", "list": "list", "p": "print", "print": "print"}
_OBJECTS = {"s": "server", "server": "server", "q": "queue", "queue": "queue", "n": "node", "node": "node"}


def _bool(text: str) -> bool:
    low = text.lower()
    if low in ("true", "t", "1", "y", "yes"):
        return True
    if low in ("false", "f", "0", "n", "no"):
        return False
    raise ValueError(f"{text!r} is not True or False")


def _int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError(f"{text!r} is negative")
    return value


def _users(text: str) -> list[str]:
    return [u.strip().split("@")[0] for u in text.split(",") if u.strip()]


def _names(text: str) -> list[str]:
    return [u.strip() for u in text.split(",") if u.strip()]


def _duration(text: str) -> str:
    return hms(parse_duration(text))


#: PBS queue attribute -> (config key, parse the text, show the Queue's value)
QUEUE_ATTRS = {
    "enabled": ("enabled", _bool, str),
    "started": ("started", _bool, str),
    "max_running": ("max_running", _int, str),
    "max_user_run": ("max_running_per_user", _int, str),
    "max_queuable": ("max_queued", _int, str),
    "max_user_queuable": ("max_queued_per_user", _int, str),
    "resources_max.walltime": ("max_walltime", _duration, hms),
    "resources_min.walltime": ("min_walltime", _duration, hms),
    "resources_default.walltime": ("default_walltime", _duration, hms),
    "resources_max.nodect": ("max_nodes", _int, str),
    "resources_min.nodect": ("min_nodes", _int, str),
    "resources_max.ncpus": ("max_cores", _int, str),
    "resources_min.ncpus": ("min_cores", _int, str),
    "resources_max.cput": ("max_cput", _duration, hms),
    "resources_max.file": ("max_disk", _int, str),
    "max_slots": ("max_slots", _int, str),
    "route_destinations": ("route_to", _names, ",".join),
    "acl_users": ("acl_users", _users, lambda v: ",".join(sorted(v))),
    "acl_groups": ("acl_groups", _names, lambda v: ",".join(sorted(v))),
    "Priority": ("priority", lambda t: int(t), str),
}
#: OpenPBS's limit attributes, `[o:PBS_ALL=N],[u:PBS_GENERIC=M]`: -> (the queue's total
#: key, its per-user key); on an OpenPBS site they stand for Torque's names when listed
LIMITS = {"max_run": ("max_running", "max_running_per_user"),
          "max_queued": ("max_queued", "max_queued_per_user"),
          "max_run_res.nodect": ("max_running_nodes", "max_running_nodes_per_user")}
_LIMIT = re.compile(r"\[\s*([ou])\s*:\s*(PBS_ALL|PBS_GENERIC)\s*=\s*([0-9]{1,12})\s*\]")


def _limit(text: str) -> tuple[int | None, int | None]:
    """`[o:PBS_ALL=10],[u:PBS_GENERIC=2]` -> (10, 2): the queue's limit and each user's."""
    entries, at = {}, 0
    for m in _LIMIT.finditer(text):
        if text[at:m.start()].strip(" ,") or (m.group(1), m.group(2)) not in (("o", "PBS_ALL"), ("u", "PBS_GENERIC")):
            break
        entries[m.group(1)] = int(m.group(3))
        at = m.end()
    if not entries or text[at:].strip(" ,"):
        raise ValueError(f"{text!r}: give [o:PBS_ALL=N] and/or [u:PBS_GENERIC=N] (limits on named users, "
                         "groups or projects are not taken)")
    return entries.get("o"), entries.get("u")


def _limit_text(total: int | None, per_user: int | None) -> str:
    return ",".join(f"[{e}={v}]" for e, v in (("o:PBS_ALL", total), ("u:PBS_GENERIC", per_user)) if v is not None)


#: PBS server attribute -> (config key, parse, show the config's value)
NEXT_JOB_NUMBER = "next_job_number"  # (the store's, not the configuration's: _next_job_number)
SERVER_ATTRS = {
    "scheduling": ("scheduling", _bool, str),
    "default_queue": ("default_queue", str, str),
    "managers": ("managers", _users, lambda v: ",".join(f"{u}@*" for u in v)),
    "operators": ("operators", _users, lambda v: ",".join(f"{u}@*" for u in v)),
    "keep_completed": ("keep_completed", _int, lambda v: str(int(v))),
    "scheduler_iteration": ("server_interval", lambda t: float(_int(t)), lambda v: str(int(v))),
    "query_other_jobs": ("query_other_jobs", _bool, str),
    "resv_enable": ("resv_enable", _bool, str),
    "resources_default.walltime": ("default_walltime", _duration, lambda v: hms(parse_duration(v))),
    "job_history_duration": ("job_history_duration", lambda t: float(parse_duration(t)), lambda v: hms(float(v))),
}
#: the attributes one flavor has and the other has not (Torque keeps finished jobs for
#: keep_completed; OpenPBS keeps their history for job_history_duration)
_FLAVOR_ONLY = {"torque": {"job_history_duration"}, "openpbs": {"keep_completed"}}
_SERVER_DEFAULTS = {"scheduling": True, "keep_completed": 300, "server_interval": 15, "query_other_jobs": True,
                    "resv_enable": True, "job_history_duration": 14 * 86400}


def queue_attributes(sched, name: str, flavor: str = "torque") -> list[tuple[str, str]]:
    """A queue's PBS attributes as qmgr lists them (and qstat -Qf): its type, job count,
    every limit set (an OpenPBS site's in its own limit form), then enabled and started."""
    q = sched.router.queues[name]
    jobs = [j for j in sched.jobs.values() if j.queue == name and common.counted(j, flavor)]
    rows = [("queue_type", "Route" if q.routing else "Execution"), ("total_jobs", str(len(jobs)))]
    limits = {k: attr for attr, keys in LIMITS.items() for k in keys
              if flavor == "openpbs" or attr == "max_run_res.nodect"}
    for attr, (key, _, show) in QUEUE_ATTRS.items():
        value = getattr(q, key)
        if value is not None and value != () and not (key == "priority" and value == 0) \
                and key not in ("enabled", "started") and key not in limits:
            rows.append((attr, show(value)))
    for attr in dict.fromkeys(limits.values()):
        total, per_user = (getattr(q, k) for k in LIMITS[attr])
        if total is not None or per_user is not None:
            rows.append((attr, _limit_text(total, per_user)))
    rows += [("enabled", str(q.enabled)), ("started", str(q.started))]
    return rows


def server_attributes(site, sched, flavor: str | None = None) -> list[tuple[str, str]]:
    """The server's PBS attributes as qmgr lists them (and qstat -Bf) in the flavor's
    names (the site's unless given): its state, every attribute qmgr sets, its job count
    and version."""
    cfg, flavor = site.config, flavor or site.flavor
    rows = [("server_state", "Active" if cfg.get("scheduling", True) else "Idle")]
    for attr, (key, _, show) in SERVER_ATTRS.items():
        value = cfg.get(key, _SERVER_DEFAULTS.get(key))
        if value is not None and value != [] and attr not in _FLAVOR_ONLY[flavor]:
            if attr == "job_history_duration":
                rows.append(("job_history_enable", "True"))
            rows.append((attr, show(value)))
    rows.append(("total_jobs", str(sum(common.counted(j, flavor) for j in sched.jobs.values()))))
    rows.append(("next_job_number", str(sched.next_id)))
    rows.append(("pbs_version", common.VERSION))
    return rows


def split_command(line: str) -> tuple[str, str, str, list[tuple[str, str, str]]]:
    """(verb, object, name, [(attribute, operator, value)]) of one qmgr command."""
    words = line.strip().split(None, 2)
    if not words:
        raise common.CommandError("qmgr: Syntax error", BAD_VALUE)
    verb = _VERBS.get(words[0].lower())
    if verb is None:
        raise common.CommandError(f"qmgr: Illegal operation: {words[0]}\nTry 'help' if you are having trouble.", BAD_VALUE)
    if len(words) < 2 or words[1].lower() not in _OBJECTS:
        raise common.CommandError(f"qmgr: Illegal object type: {words[1] if len(words) > 1 else ''}", BAD_VALUE)
    obj, rest = _OBJECTS[words[1].lower()], words[2] if len(words) > 2 else ""
    name, tokens = "", rest.split(None, 1)
    # the object's name comes first, unless that word is already an attribute (`set server
    # scheduling = False`: a server's name is optional)
    if tokens and "=" not in tokens[0] and not re.match(r"[+-]?=", tokens[1].lstrip() if len(tokens) > 1 else "") \
            and not (obj == "server" and (tokens[0] in SERVER_ATTRS or tokens[0] == NEXT_JOB_NUMBER)):
        name, rest = tokens[0], tokens[1] if len(tokens) > 1 else ""
    attrs = []
    if rest.strip():
        for item in re.split(r",(?=\s*[A-Za-z_][\w.]*\s*[+-]?=)", rest):
            am = re.fullmatch(r"\s*([A-Za-z_][\w.]*)\s*(\+=|-=|=)?\s*(.*?)\s*", item)
            if not am or (verb in ("set", "create") and not am.group(2)):
                raise common.CommandError(f"qmgr: Syntax error: {item.strip()}", BAD_VALUE)
            value = am.group(3)
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
                value = value[1:-1]
            attrs.append((am.group(1), am.group(2) or "", value))
    return verb, obj, name, attrs


class Qmgr:
    """One qmgr session: the site, its overlay, and the output stream."""

    def __init__(self, out):
        self.out = out
        self.site = load_site()
        self.changes = read_overlay(self.site.home)

    def run(self, line: str) -> None:
        verb, obj, name, attrs = split_command(line)
        getattr(self, f"_{verb}")(obj, name, attrs)

    # --- reading ---------------------------------------------------------------------
    def sched(self):
        """The store's scheduler as it stands (read, never written)."""
        batch = Batch.of(self.site)
        with batch.open(write=False):
            return batch.sched

    def _queue_lines(self, sched, name: str) -> list[tuple[str, str]]:
        return queue_attributes(sched, name, self.site.flavor)

    def _server_lines(self, sched) -> list[tuple[str, str]]:
        return server_attributes(self.site, sched)

    def _list(self, obj: str, name: str, attrs) -> None:
        sched = self.sched()
        if obj == "server":
            self._block(f"Server {self.site.server}", self._server_lines(sched), attrs)
        elif obj == "queue":
            for q in [self._queue(sched, name)] if name else list(sched.router.queues):
                self._block(f"Queue {q}", self._queue_lines(sched, q), attrs)
        else:
            on = jobs_on(sched, self.site.server)
            nodes = {n.name: n for n in sched.topology.all_nodes()}
            if name and name not in nodes:
                raise common.CommandError(f"qmgr obj={name} svr=default: Unknown node", UNKNOWN_QUEUE)
            for n in [nodes[name]] if name else nodes.values():
                a = node_attributes(n, on.get(n.name, []), sched.node_notes.get(n.name, ""), self.site.flavor)
                self._block(f"Node {n.name}", [(k, str(v)) for k, v in a.items() if not isinstance(v, dict)], attrs)

    def _block(self, title: str, rows: list[tuple[str, str]], only) -> None:
        wanted = {a for a, _, _ in only}
        self.out.write(title + "\n" + "".join(f"\t{k} = {v}\n" for k, v in rows if not wanted or k in wanted) + "\n")

    def _print(self, obj: str, name: str, attrs) -> None:
        sched = self.sched()
        w = self.out.write
        if obj == "node":
            for n in sched.topology.all_nodes():
                if n.state.value == "offline":
                    w(f"set node {n.name} state = offline\n")
            return
        made = {r.queue for r in sched.reservations.values() if r.own_queue}  # (pbs_rsub makes them again)
        queues = [self._queue(sched, name)] if name else [q for q in sched.router.queues if q not in made]
        w("#\n# Create queues and set their attributes.\n#\n")
        for q in queues:
            w(f"#\n# Create and define queue {q}\n#\ncreate queue {q}\n")
            for attr, value in self._queue_lines(sched, q):
                if attr != "total_jobs":
                    w(f"set queue {q} {attr} = {value}\n")
        if obj == "server":
            w("#\n# Set server attributes.\n#\n")
            for attr, value in self._server_lines(sched):
                if attr in SERVER_ATTRS:
                    w(f"set server {attr} = {value}\n")

    def _queue(self, sched, name: str) -> str:
        if name not in sched.router.queues:
            raise common.CommandError(f"qmgr obj={name} svr=default: Unknown queue", UNKNOWN_QUEUE)
        return name

    def _site_queue(self, sched, name: str) -> str:
        """A queue qmgr may change: not one a pbs_rsub reservation made (pbs_rdel removes it)."""
        self._queue(sched, name)
        if any(r.own_queue and r.queue == name for r in sched.reservations.values()):
            raise common.CommandError(f"qmgr obj={name} svr=default: queue {name} belongs to reservation "
                                      f"{name}: pbs_rdel removes it", BAD_VALUE)
        return name

    # --- changing ----------------------------------------------------------------------
    def _manager(self, name: str) -> None:
        if not self.site.is_manager(whoami()):
            raise common.CommandError(f"qmgr obj={name} svr=default: Unauthorized Request", common.UNAUTHORIZED)

    def _create(self, obj: str, name: str, attrs) -> None:
        if obj != "queue" or not name:
            raise common.CommandError(f"qmgr: Illegal object type: {obj}" if obj != "queue" else "qmgr: Syntax error", BAD_VALUE)
        self._manager(name)
        if not QUEUE_NAME.fullmatch(name):  # (`@` names a server, `[` an array, in every command)
            raise common.CommandError(f"qmgr obj={name} svr=default: Illegal queue name: a letter, then letters, "
                                      f"digits, '_', '-' or '.'", BAD_VALUE)
        if name in self.site.config.get("queues", {}) or name in self.sched().router.queues:
            raise common.CommandError(f"qmgr obj={name} svr=default: Queue already exists", 161)  # PBSE_QUEEXIST
        changes = _copy(self.changes)
        changes["queues"][name] = {}
        self._apply(changes, "queue", name, attrs, "set")

    def _delete(self, obj: str, name: str, attrs) -> None:
        if obj != "queue" or not name:
            raise common.CommandError(f"qmgr: Illegal object type: {obj}" if obj != "queue" else "qmgr: Syntax error", BAD_VALUE)
        self._manager(name)
        sched = self.sched()
        self._site_queue(sched, name)
        if any(j.queue == name and j.state not in FINISHED for j in sched.jobs.values()):
            raise common.CommandError(f"qmgr obj={name} svr=default: Queue is not empty", 175)
        changes = _copy(self.changes)
        changes["queues"][name] = None
        self._write(changes)

    def _set(self, obj: str, name: str, attrs, op: str = "set") -> None:
        if not attrs:
            raise common.CommandError("qmgr: Syntax error: no attribute given", BAD_VALUE)
        self._manager(name)
        if obj == "node":
            return self._set_node(name, attrs, op)
        if obj == "queue":
            if not name:
                raise common.CommandError("qmgr: Syntax error: give the queue's name", BAD_VALUE)
            self._site_queue(self.sched(), name)
        if obj == "server" and any(attr == NEXT_JOB_NUMBER for attr, _, _ in attrs):
            return self._next_job_number(attrs, op)
        self._apply(_copy(self.changes), obj, name, attrs, op)

    def set_queue(self, name: str, values: dict) -> None:
        """Set a queue's configuration keys (a value None: unset), as `set queue` sets PBS's
        attributes (cqadm's --setq, --stopq, ...)."""
        self._manager(name)
        self._site_queue(self.sched(), name)
        changes = _copy(self.changes)
        changes["queues"][name] = {**(changes["queues"].get(name) or {}), **values}
        self._write(changes)

    def _next_job_number(self, attrs, op: str) -> None:
        """Torque's and OpenPBS's `set server next_job_number = N`: the next job's id (and
        those after it) from N on; store state, not configuration, and never lowered, so no
        id is given twice."""
        if op != "set" or len(attrs) > 1 or attrs[0][1] != "=":
            raise common.CommandError("qmgr: next_job_number is set alone, with =", BAD_VALUE)
        text = attrs[0][2].strip()
        if not re.fullmatch(r"[0-9]{1,15}", text) or not 1 <= int(text) <= common.LARGEST:  # (a job number: 32 bits)
            raise common.CommandError(f"qmgr obj={self.site.server} svr=default: Illegal attribute or resource "
                                      f"value next_job_number = {text}", BAD_VALUE)
        batch = Batch.of(self.site)
        with batch.open(write=True):
            if int(text) < batch.next_id:
                raise common.CommandError(f"qmgr obj={self.site.server} svr=default: next_job_number {text} is "
                                          f"below the next id, {batch.next_id}: ids are never given twice", BAD_VALUE)
            batch.do("next_id", value=int(text))

    def _unset(self, obj: str, name: str, attrs) -> None:
        self._set(obj, name, attrs, "unset")

    def _apply(self, changes: dict, obj: str, name: str, attrs, op: str) -> None:
        table = QUEUE_ATTRS if obj == "queue" else SERVER_ATTRS
        target = changes["queues"].setdefault(name, {}) if obj == "queue" else changes["server"]
        if obj == "queue" and target is None:
            target = changes["queues"][name] = {}
        current = overlay(self.site.config, changes)
        current = current.get("queues", {}).get(name, {}) if obj == "queue" else current
        for attr, how, text in attrs:
            if attr == "queue_type" and obj == "queue":
                continue  # a queue routes when it has route_destinations
            if attr in LIMITS and obj == "queue":  # (OpenPBS's: the queue's limit and each user's at once)
                keys = LIMITS[attr]
                try:
                    values = (None, None) if op == "unset" else _limit(text)
                except ValueError as e:
                    raise common.CommandError(f"qmgr obj={name} svr=default: Illegal attribute or resource "
                                              f"value {attr}: {e}", BAD_VALUE) from None
                for key, value in zip(keys, values):
                    if how != "+=" or value is not None:  # (+= adds to what is set; = replaces it all)
                        target[key] = value
                continue
            if attr not in table:
                raise common.CommandError(f"qmgr obj={name or self.site.server} svr=default: Unknown Attribute", UNKNOWN_ATTR)
            key, parse, _ = table[attr]
            if op == "unset":
                target[key] = None
                continue
            try:
                value = parse(text)
            except (ValueError, SchedulerError) as e:
                raise common.CommandError(f"qmgr obj={name or self.site.server} svr=default: Illegal attribute or resource "
                                f"value {attr}: {e}", BAD_VALUE) from None
            if how in ("+=", "-=") and isinstance(value, list):
                have = list(current.get(key) or [])
                value = have + [v for v in value if v not in have] if how == "+=" else [v for v in have if v not in value]
            target[key] = value
        self._write(changes)

    def _set_node(self, name: str, attrs, op: str) -> None:
        batch = Batch.of(self.site)
        with batch.open(write=True):
            nodes = {n.name for n in batch.sched.topology.all_nodes()}
            if name not in nodes:
                raise common.CommandError(f"qmgr obj={name} svr=default: Unknown node", UNKNOWN_QUEUE)
            for attr, _, text in attrs:
                if attr == "state" and op == "set" and text.lower() in ("offline", "free", "down"):
                    batch.do("node", name=name, state={"free": "up"}.get(text.lower(), text.lower()))
                elif attr in ("note", "comment"):
                    batch.do("node", name=name, note="" if op == "unset" else text)
                else:
                    raise common.CommandError(f"qmgr obj={name} svr=default: Unknown Attribute", UNKNOWN_ATTR)

    def _write(self, changes: dict) -> None:
        """Check the whole configuration the changes make, then write them (or nothing)."""
        from ..config import build
        from ..store.site import SITE_KEYS
        try:
            build(overlay(_base(self.site), changes), extra_keys=SITE_KEYS)
        except ConfigError as e:
            raise common.CommandError(f"qmgr: {e}", BAD_VALUE) from None
        write_atomic(self.site.home / OVERLAY, json.dumps(changes, indent=1, sort_keys=True) + "\n")
        self.changes = changes
        self.site = load_site(self.site.home)


def _copy(changes: dict) -> dict:
    return json.loads(json.dumps(changes))


def _base(site) -> dict:
    """config.toml alone, without qmgr's changes."""
    from ..config import loads
    return loads(site.source[0])


def qmgr(opts: list[tuple[str, str]], operands: list[str], out, now: float) -> int:
    o = dict(opts)
    if operands:
        raise UsageError(f"unexpected argument {operands[0]!r}")
    text = o["c"] if "c" in o else sys.stdin.read()
    session = Qmgr(out)
    status = 0
    for line in re.split(r"[;\n]", text):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            session.run(line)
        except common.CommandError as e:
            sys.stderr.write(f"{e}\n")
            status = e.status
    return status


QMGR = Command("qmgr", "c:aenz", "usage: qmgr [-c command] [-a] [-e] [-n] [-z] < script", qmgr, changes=True)


def _queue_switch(prog: str, attr: str, value: str):
    """qstart, qstop, qenable, qdisable: qmgr's `set queue Q attr = value` for each queue
    named (PBS's shorthands; managers only); a queue that fails says so and the rest go on."""
    def switch(opts: list[tuple[str, str]], operands: list[str], out, now: float) -> int:
        if not operands:
            raise UsageError("give a queue name")
        status = 0
        for queue in operands:
            try:
                Qmgr(out).run(f"set queue {queue.split('@')[0]} {attr} = {value}")
            except common.CommandError as e:
                sys.stderr.write(f"{prog}: {str(e).removeprefix('qmgr: ').removeprefix('qmgr ')}\n")
                status = status or e.status
        return status
    return Command(prog, "", f"usage: {prog} queue ...", switch, changes=True)


QSTART, QSTOP = _queue_switch("qstart", "started", "True"), _queue_switch("qstop", "started", "False")
QENABLE, QDISABLE = _queue_switch("qenable", "enabled", "True"), _queue_switch("qdisable", "enabled", "False")
