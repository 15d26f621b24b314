"""Resource quota sets (Grid Engine's RQS) and the site's consumable resources.

Every rule set applies; within a set, a job is counted against the *first* rule whose
filters it matches (a set none of whose rules match leaves it alone).  A filter names
users, groups, projects, queues or hosts: `*` any, a list of names, `!name` all but that
one, and for hosts `@feature` the nodes with that feature (Grid Engine's host groups); in
braces (`{*}`, `{alice,bob}`) the limit holds for *each* such name separately, plain for
all of them together.

A set with a `hosts` filter in any of its rules is read host by host, as Grid Engine
reads it: on each node the first rule matching the job and that node counts what the job
places there (its cores on that node as slots, its memory per node, the job itself once
per count), a rule without `hosts` matching every node.  Such a set narrows where a job
may go: a node on which the job would pass a limit is left out of its placement, and a
job no node can take is held back.  (Before placement the job is taken to put all its
cores of one chunk on each node, and all of itself in an aggregate count: an upper
bound, so a narrowed placement never passes a limit.)  A rule limits any of

    slots  processors the jobs ask for        jobs  running jobs
    mem    memory (MB) they ask for            NAME  a consumable the site declares

and a consumable's total (`[consumables] matlab = 10`) is one more limit on everyone.  A
job that would pass a limit it is counted against is held back with the rule's name;
the counts are the running jobs', plus those the pass has started so far.  They only grow
during a pass, so a count of jobs or slots full even for a one-slot job holds back every
job it counts until the pass ends: `closes` names the group, user, project or queue whose
jobs that is, and a walk passes over them whole (a share-tree node's subtree).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .errors import ConfigError
from .jobs import Job

DIMENSIONS = {"users": "owner", "groups": "group", "projects": "account", "queues": "queue"}
BUILTIN = ("slots", "jobs", "mem")


@dataclass(frozen=True)
class Filter:
    """Which names a rule's dimension matches, and whether its limit is per each."""

    include: frozenset[str] = frozenset({"*"})
    exclude: frozenset[str] = frozenset()
    each: bool = False

    @property
    def all(self) -> bool:
        """Every name, in one count (`*`, not `{*}`)."""
        return "*" in self.include and not self.exclude and not self.each

    def matches(self, name: str, features: frozenset[str] = frozenset()) -> bool:
        """Does the filter match `name` (a node also by its `features`, as `@feature`)?"""
        def named(names: frozenset[str]) -> bool:
            return name in names or bool(features) and any(n[:1] == "@" and n[1:] in features for n in names)
        if named(self.exclude):
            return False
        return "*" in self.include or named(self.include) or (not self.include and bool(self.exclude))

    @classmethod
    def parse(cls, value, where: str) -> "Filter":
        if isinstance(value, str):
            text = value.strip()
            each = text.startswith("{") and text.endswith("}")
            names = [n.strip() for n in (text[1:-1] if each else text).split(",")]
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            each, names = False, [v.strip() for v in value]
        else:
            raise ConfigError(f"{where}: must be a name list such as \"*\", \"{{*}}\" or [\"alice\", \"!bob\"]")
        if not names or any(not n or n == "!" for n in names):
            raise ConfigError(f"{where}: an empty name in {value!r}")
        if any(c in n for n in names for c in "{}"):  # ("{*" matched nothing, silently)
            raise ConfigError(f"{where}: {value!r}: braces go around the whole list, as \"{{*}}\" or \"{{alice,bob}}\"")
        return cls(frozenset(n for n in names if not n.startswith("!")),
                   frozenset(n[1:] for n in names if n.startswith("!")), each)


@dataclass(frozen=True)
class Rule:
    name: str
    filters: tuple[tuple[str, Filter], ...]  # (job attribute, filter)
    limits: tuple[tuple[str, float], ...]  # (resource, limit)
    hosts: Filter | None = None  # the nodes it counts on (None: every node, or no host reading)

    def matches(self, job: Job) -> bool:
        return all(f.matches(getattr(job, attr)) for attr, f in self.filters)

    def instance(self, job: Job) -> tuple:
        """Which count of the rule the job goes in: its names in the per-each dimensions."""
        return tuple(getattr(job, attr) for attr, f in self.filters if f.each)


@dataclass(frozen=True)
class RuleSet:
    name: str
    rules: tuple[Rule, ...]

    @property
    def by_host(self) -> bool:
        return any(r.hosts is not None for r in self.rules)

    def rule_for(self, job: Job) -> int | None:
        return next((i for i, r in enumerate(self.rules) if r.matches(job)), None)


def amounts(job: Job) -> dict[str, float]:
    """What a job counts against limits."""
    req = job.request
    mem = req.mem if req.cores else req.mem * req.nodes
    return {"slots": req.processors, "jobs": 1, "mem": mem, **job.consumes}


@dataclass
class Quotas:
    consumables: dict[str, float] = field(default_factory=dict)  # name -> the site's total
    sets: tuple[RuleSet, ...] = ()

    def __post_init__(self):
        if self.consumables:  # the totals: one more set, one rule for everyone
            self.sets = self.sets + (RuleSet("consumables", (Rule("total", (), tuple(self.consumables.items())),)),)
        self._counted: dict[tuple, tuple] = {}  # a job's names -> the counts it goes in (see counts_for)
        self.host_sets = tuple(si for si, s in enumerate(self.sets) if s.by_host)
        self.hosts: tuple[str, ...] = ()  # the machine's nodes, in order (see `on_nodes`)
        self._host_index: dict[str, int] = {}
        self._covered: dict[tuple[int, int], frozenset[int]] = {}  # (set, rule) -> the hosts it covers
        self._by_host: dict[tuple, tuple] = {}  # a job's names -> per host set, each host's rule (or None)

    def on_nodes(self, nodes) -> None:
        """Learn the machine's nodes (objects with `name` and `features`), which `hosts`
        filters name; a name or feature no node has is a ConfigError."""
        nodes = list(nodes)
        self.hosts = tuple(n.name for n in nodes)
        self._host_index = {name: h for h, name in enumerate(self.hosts)}
        features = set().union(*(n.features for n in nodes)) if nodes else set()
        for si in self.host_sets:
            for ri, rule in enumerate(self.sets[si].rules):
                if rule.hosts is None:
                    continue
                for name in rule.hosts.include | rule.hosts.exclude:
                    if name != "*" and (name[1:] not in features if name[:1] == "@" else name not in self._host_index):
                        raise ConfigError(f"quotas: {self.sets[si].name}/{rule.name}: hosts names {name!r}, "
                                          f"which no node {'has' if name[:1] == '@' else 'is'}")
                self._covered[si, ri] = frozenset(h for h, n in enumerate(nodes) if rule.hosts.matches(n.name, n.features))
        self._by_host.clear()

    def counts_for(self, job: Job) -> tuple:
        """The counts a job goes in, one per set whose rules it matches: (tally key, rule
        limits, set, rule), worked out once per (user, group, project, queue)."""
        names = (job.owner, job.group, job.account, job.queue)
        out = self._counted.get(names)
        if out is None:
            out = []
            for si, s in enumerate(self.sets):
                if s.by_host:
                    continue  # (read host by host: see `narrow` and `count`)
                i = s.rule_for(job)
                if i is not None:
                    rule = s.rules[i]
                    out.append(((si, i, rule.instance(job)), rule.limits, s, rule))
            out = self._counted[names] = tuple(out)
        return out

    @classmethod
    def from_config(cls, consumables, sets) -> "Quotas":
        """`[consumables]` and `[[quotas]]`, checked (one ConfigError line each)."""
        if not isinstance(consumables, dict):
            raise ConfigError("consumables: must be a table of name = total")
        for name, total in consumables.items():
            if name in BUILTIN or name in DIMENSIONS:
                raise ConfigError(f"consumables.{name}: {name} is a built-in name")
            if not isinstance(total, (int, float)) or isinstance(total, bool) or total < 0:
                raise ConfigError(f"consumables.{name}: must be a non-negative number")
        if not isinstance(sets, list):
            raise ConfigError("quotas: must be a list of [[quotas]] tables")
        out = []
        for i, s in enumerate(sets):
            where = f"quotas[{i}]"
            _table(s, where, ("name", "rules"))
            name = str(s.get("name", f"set{i + 1}"))
            rules = s.get("rules", [])
            if not isinstance(rules, list) or not rules:
                raise ConfigError(f"{where}.rules: needs at least one [[quotas.rules]]")
            parsed = []
            for k, r in enumerate(rules):
                rw = f"{where}.rules[{k}]"
                _table(r, rw, ("name", "limit", "hosts", *DIMENSIONS))
                limit = r.get("limit", {})
                if not isinstance(limit, dict) or not limit:
                    raise ConfigError(f"{rw}.limit: names no resource (limit = {{ slots = N }}, say)")
                for res, v in limit.items():
                    if res not in BUILTIN and res not in consumables:
                        raise ConfigError(f"{rw}.limit.{res}: not slots, jobs, mem or a declared consumable")
                    if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0:
                        raise ConfigError(f"{rw}.limit.{res}: must be a non-negative number")
                filters = tuple((DIMENSIONS[d], Filter.parse(r[d], f"{rw}.{d}")) for d in DIMENSIONS if d in r)
                parsed.append(Rule(str(r.get("name", f"rule{k + 1}")), filters,
                                   tuple((res, float(v)) for res, v in limit.items()),
                                   Filter.parse(r["hosts"], f"{rw}.hosts") if "hosts" in r else None))
            out.append(RuleSet(name, tuple(parsed)))
        return cls({k: float(v) for k, v in consumables.items()}, tuple(out))

    def __bool__(self) -> bool:
        return bool(self.sets)

    def check(self, job: Job) -> str | None:
        """Why `job` can never run (asks for an undeclared consumable, or more than a
        limit it is counted against), or None.  A limit of 0 is closed for now, not never:
        its jobs wait, as Grid Engine keeps them pending, until it is raised."""
        for name in job.consumes:
            if name not in self.consumables:
                return f"unknown consumable {name!r}"
        need = amounts(job)
        for _, limits, s, rule in self.counts_for(job):
            for res, limit in limits:
                if limit and need.get(res, 0) > limit:
                    return f"asks for {need[res]:g} {res}, more than limit {s.name}/{rule.name} allows ({limit:g})"
        return None

    def count(self, job: Job, tally: dict, sign: int = 1, allocation=None) -> None:
        """Add (sign 1) or take away (-1) a running job's amounts in `tally` (host by host
        on its `allocation`, by default the job's own)."""
        need = amounts(job)
        for key, limits, _, _ in self.counts_for(job):
            used = tally.get(key)
            if used is None:
                used = tally[key] = {}
            for res, _ in limits:
                used[res] = used.get(res, 0) + sign * need.get(res, 0)
        alloc = allocation if allocation is not None else job.allocation
        if not self.host_sets or alloc is None:
            return
        rows, seen = self._host_rules(job), set()
        for i, node in enumerate(alloc.nodes):
            h = self._host_index.get(node)
            if h is None:
                continue
            here = {"slots": len(alloc.cores[i]) if i < len(alloc.cores) else job.request.ppn,
                    "mem": job.request.mem}
            for si, row in rows:
                ri = row[h]
                if ri is None:
                    continue
                key = self._key(job, si, ri, h)
                used = tally.get(key)
                if used is None:
                    used = tally[key] = {}
                first = key not in seen  # (the job itself, and its consumables, count once)
                seen.add(key)
                for res, _ in self.sets[si].rules[ri].limits:
                    amount = here.get(res, 0) if res in here else (need.get(res, 0) if first else 0)
                    used[res] = used.get(res, 0) + sign * amount

    def _host_rules(self, job: Job) -> tuple:
        """Per host set, each host's first rule matching `job` there (None: no rule)."""
        names = (job.owner, job.group, job.account, job.queue)
        rows = self._by_host.get(names)
        if rows is None:
            rows = []
            for si in self.host_sets:
                row: list[int | None] = [None] * len(self.hosts)
                for ri, rule in enumerate(self.sets[si].rules):
                    if not rule.matches(job):
                        continue
                    covered = self._covered.get((si, ri), range(len(self.hosts)))
                    for h in covered:
                        if row[h] is None:
                            row[h] = ri
                rows.append((si, tuple(row)))
            rows = self._by_host[names] = tuple(rows)
        return rows

    def _key(self, job: Job, si: int, ri: int, h: int) -> tuple:
        rule = self.sets[si].rules[ri]
        each_host = rule.hosts is not None and rule.hosts.each
        return (si, ri, rule.instance(job) + ((self.hosts[h],) if each_host else ()))

    def narrow(self, job: Job, tally: dict) -> tuple[tuple[str, ...], str] | None:
        """Where the host sets let `job` go now: None anywhere, else (the nodes that may
        take it, the reason naming the first limit that left a node out)."""
        rows = self._host_rules(job)
        req, total = job.request, amounts(job)
        here = {**total, "slots": req.cores or req.ppn, "mem": req.mem, "jobs": 1}  # (on one node: at most)
        banned, why = set(), None
        for si, row in rows:
            s = self.sets[si]
            for h, ri in enumerate(row):
                if ri is None or h in banned:
                    continue
                rule = s.rules[ri]
                key = self._key(job, si, ri, h)
                need = here if rule.hosts is not None and rule.hosts.each else total
                used = tally.get(key, _NONE)
                for res, limit in rule.limits:
                    have = used.get(res, 0)
                    if have + need.get(res, 0) > limit:
                        banned.add(h)
                        why = why or (f'exceeds limit "{s.name}/{rule.name}" on every node it may use '
                                      f"({res}: {have:g} in use + {need.get(res, 0):g} > {limit:g})")
                        break
        if not banned:
            return None
        return tuple(name for h, name in enumerate(self.hosts) if h not in banned), why

    def closes(self, job: Job, tally: dict) -> frozenset[str]:
        """The attributes of `job` (of owner, group, account, queue) whose value alone now
        holds back every job that shares it: some set counts every such job in one count of
        jobs or slots that is full even for a job of one slot.  Counts only grow during a
        pass, so they stay closed until it ends (a walk passes over them whole)."""
        for key, limits, s, rule in self.counts_for(job):
            used = tally.get(key)
            if used is None or not any(res in _AT_LEAST_ONE and used.get(res, 0) + 1 > limit for res, limit in limits):
                continue
            bound = [(attr, f) for attr, f in rule.filters if not f.all]  # (a filter of every name, summed)
            if not bound:  # a rule for everyone: the first of its set counts every job here
                if key[1] == 0:
                    return _EVERY
                continue
            if len(bound) > 1:
                continue
            attr = bound[0][0]
            value = getattr(job, attr)
            earlier = s.rules[:key[1]]  # (key: set, rule, names) none of them may match a job with this value first
            if all(any(a == attr and not f.matches(value) for a, f in r.filters) for r in earlier):
                return frozenset((attr,))
        return frozenset()

    def hold_back(self, job: Job, tally: dict) -> str | None:
        need = None
        for key, limits, s, rule in self.counts_for(job):
            used = tally.get(key, _NONE)
            for res, limit in limits:
                if need is None:
                    need = amounts(job)
                have = used.get(res, 0)
                if have + need.get(res, 0) > limit:
                    return (f'exceeds limit "{s.name}/{rule.name}" ({res}: {have:g} in use + '
                            f"{need.get(res, 0):g} > {limit:g})")
        return None


_NONE: dict = {}
_AT_LEAST_ONE = ("jobs", "slots")  # every job counts at least 1 of these (mem and consumables may be 0)
_EVERY = frozenset(DIMENSIONS.values())


def _table(d, where: str, allowed) -> None:
    """`d` is a table of only the `allowed` keys, or one ConfigError line says not."""
    if not isinstance(d, dict):
        raise ConfigError(f"{where}: must be a table")
    for key in d:
        if key not in allowed:
            raise ConfigError(f"{where}.{key}: unknown key")
