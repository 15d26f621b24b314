"""Grid Engine's share tree: long-term targets, short-term entitlements, pending tickets.

The tree (groups -> projects -> users by default) gives each node `shares` among its
siblings.  Each pass, over the *active* nodes only (with a running or pending job under
them), top down from the root (all four are 1 there):

    ltt  = shares / sum(active siblings' shares)        oltt = parent.oltt * ltt
    shr  = shares ** 2 / max(U, oltt)                    U: the node's decayed usage
    stt  = shr / sum(active siblings' shr)               ostt = parent.ostt * stt

and with a compensation factor CF > 0, a node with ostt > CF * oltt gets
shr = shares ** 2 / (max(U, oltt) * ostt / (CF * oltt)), its siblings' stt renormalised
(reference/algorithms.md section 5; Grid Engine's sgeee.c, sge_calc_node_targets).
The active nodes, their active children and running counts are kept as jobs come, go,
start and end, and ltt and oltt, which depend on those alone, are worked out again only
when a node joins or leaves them.

A node's usage U is its keys' and its children's, decayed alike: every node keeps the
undecayed sum (Usage.undecayed) of everything under it, and U = sum * decay(t).  A pass
adds up again only the nodes above the keys charged since the last (Usage.take_changed),
and only when it reads them; each node adds its keys and children up in (kind, name)
order, so its figures depend on the records alone, not on the order nodes were made in or
on what was charged when (tests/test_sharetree.py checks them, bit for bit, against a tree
adding everything up afresh).

Pending jobs are ranked bottom-up as Grid Engine's sge_sort_pending_job_nodes ranks them:
a leaf's jobs in job-id order; at every node the jobs of its children are merged by the
value their child gave them (ties: lower job id), and the k-th gets stt / (R + F + k),
R being the jobs running under the node and F its decayed count of finished jobs.  The
top (the root, or below it while all pending jobs are under one child) keeps the values
its children gave, unless jobs are ranked at the top itself; a job's value times the
tickets to hand out is its tickets (so a group's first job gets its stt of them).  The merge is lazy (each
node a generator over its children's), so a pass that walks a few jobs of a million
pending pays for those few and for the tree, not for the million; tests/test_sharetree.py
checks it against a plain reference that ranks every job.  A walk that only backfills
reads the order through `Order`, which passes over whole blocks of jobs that cannot start
now, as the static policies' backlog does (core/backlog.py), keeping every rank exact; and
a walk whose quotas hold back a whole group or user (Quotas.closes) has it pass over that
node's subtree from then on.

A child named `default` stands for every user (project, group) its siblings do not name:
each gets its own copy, with the default's shares (Grid Engine's `default` leaf).  A job
matching no child of a node is ranked at that node.
"""
from __future__ import annotations

import heapq
import math
from bisect import insort
from itertools import chain, count as _count
from operator import attrgetter, itemgetter
from typing import Iterable, Iterator

from ..core.backlog import Backlog, Sieved
from ..core.errors import ConfigError
from ..core.jobs import Job
from ..core.usage import Key, Usage

_SECOND = itemgetter(1)
_BY_NAME = attrgetter("by_name")
LEVELS = ("group", "project", "user")
_ATTR = {"user": 0, "group": 1, "project": 2}  # kind -> index in a usage key (user, group, project)
_KIND_ATTR = {"user": "owner", "group": "group", "project": "account"}  # kind -> the job's attribute


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < math.inf


class Node:
    """One node of the tree (a default's copy is a node of its own), with this pass's figures."""

    __slots__ = ("name", "kind", "shares", "square", "by_name", "children", "ordered", "templates", "parent",
                 "depth", "jobs", "keys", "pending", "busy", "held", "held_finished", "stale",
                 "usage", "finished", "running", "ltt", "oltt", "stt", "ostt")

    def __init__(self, name: str, kind: str, shares: float, parent: "Node | None" = None):
        self.name, self.kind, self.shares, self.parent = name, kind, shares, parent
        self.depth = 0 if parent is None else parent.depth + 1
        self.square = shares * shares  # (shr's numerator; shr itself is read only where worked out)
        self.by_name = (kind, name)  # (the order siblings' figures are added up in)
        self.children: dict[tuple[str, str], Node] = {}  # (kind, name) -> child
        self.ordered: list[Node] = []  # its children by (kind, name): the order sums are added up in
        self.templates: dict[str, dict] = {}  # kind -> the `default` child's config, copied per name
        self.jobs = Backlog()  # pending jobs ranked at this node, by job id (with their needs)
        self.keys: list[Key] = []  # the usage keys whose jobs are ranked here, sorted
        self.pending = 0  # pending jobs under it (kept as they come and go)
        self.busy: dict[Node, None] = {}  # its children with pending jobs (kept alike)
        # the undecayed usage and finished jobs of every key under it (Usage.undecayed),
        # added up again when read after a charge under it (`stale`: ShareTree._fresh)
        self.held = self.held_finished = 0.0
        self.stale = False  # (then so are its ancestors)
        self.clear()

    def clear(self) -> None:
        """Forget the last pass's figures."""
        self.usage = self.finished = 0.0
        self.running = 0
        self.ltt = self.oltt = self.stt = self.ostt = 0.0

    def adopt(self, child: "Node") -> "Node":
        self.children[child.by_name] = child
        insort(self.ordered, child, key=_BY_NAME)
        return child

    @property
    def path(self) -> str:
        names, node = [], self
        while node.parent is not None:
            names.append(node.name)
            node = node.parent
        return "/" + "/".join(reversed(names))

    def walk(self) -> Iterator["Node"]:
        yield self
        for child in self.children.values():
            yield from child.walk()


class ShareTree:
    """A site's share tree (from `[sharetree]`), and the jobs each node ranks."""

    def __init__(self, nodes: dict, compensation_factor: float = 0.0, levels: tuple[str, ...] = LEVELS):
        self.compensation_factor = compensation_factor
        self.levels = tuple(levels)
        self.config = nodes
        self.root = Node("Root", "", 1.0)
        self._build(self.root, nodes.get("Root", {}), 0)
        self._where: dict[Key, Node] = {}  # usage key -> the node its jobs are ranked at
        self._of: dict[int, Node] = {}  # pending job id -> its node
        # The active nodes (the root, and every node with a running or pending job under
        # it) and each one's active children by (kind, name), kept as jobs come, go, start
        # and end: a pass looks again only at the nodes whose counts crossed zero since.
        self._active: set[Node] = {self.root}
        self._kids: dict[Node, list[Node]] = {}  # an active node with active children -> them
        self._crossed: set[Node] = set()  # nodes whose pending or running count crossed zero
        self._runs: dict[Key, int] = {}  # key -> its running jobs, as the node counts hold them
        self._counted: tuple[Usage, int] | None = None  # the usage (and its generation) _runs follows
        self._shaped = False  # are the active nodes' ltt and oltt, and _plan, those of the active nodes now?
        self._plan: list[tuple[Node, list[Node]]] = []  # (node, its active children), parents first
        self._extra: list[Node] = []  # nodes outside the active ones given figures (mdiag -f)
        self._resolved = 0  # usage records whose keys have been given a node
        self._held: dict[Key, tuple[float, float]] = {}  # key -> Usage.undecayed, as last read
        self._ledger: tuple[Usage, int] | None = None  # the usage (and its generation) _held reads
        self._decay, self._t = 1.0, 0.0  # the last pass's decay and time
        self._accruing: list = []  # the last pass's (key, record) still accruing

    @classmethod
    def from_config(cls, d: dict) -> "ShareTree":
        """Check `[sharetree]` (one ConfigError line per problem) and build the tree."""
        if not isinstance(d, dict):
            raise ConfigError("sharetree: must be a table")
        for key in d:
            if key not in ("compensation_factor", "levels", "nodes"):
                raise ConfigError(f"sharetree.{key}: unknown key")
        cf = d.get("compensation_factor", 0)
        if not _number(cf):
            raise ConfigError("sharetree.compensation_factor: must be a non-negative number")
        levels = d.get("levels", list(LEVELS))
        if not isinstance(levels, list) or not levels or any(not isinstance(k, str) or k not in _ATTR for k in levels):
            raise ConfigError("sharetree.levels: must be a list of group, project and user")
        nodes = d.get("nodes", {})
        if not isinstance(nodes, dict) or "Root" not in nodes:
            raise ConfigError("sharetree.nodes: needs a Root node ([sharetree.nodes.Root] children = [...])")
        parent: dict[str, str] = {}
        for name, nd in nodes.items():
            where = f"sharetree.nodes.{name}"
            if not isinstance(nd, dict):
                raise ConfigError(f"{where}: must be a table")
            for key in nd:
                if key not in ("shares", "children", "kind", "name"):
                    raise ConfigError(f"{where}.{key}: unknown key")
            shares = nd.get("shares", 1)
            if not _number(shares):
                raise ConfigError(f"{where}.shares: must be a non-negative number, not {shares!r}")
            kind = nd.get("kind", "user")
            if not isinstance(kind, str) or kind not in _ATTR:
                raise ConfigError(f"{where}.kind: {kind!r} is not group, project or user")
            if not isinstance(nd.get("name", ""), str):
                raise ConfigError(f"{where}.name: must be a string")
            children = nd.get("children", [])
            if not isinstance(children, list) or not all(isinstance(c, str) for c in children):
                raise ConfigError(f"{where}.children: must be a list of node names")
            for c in children:
                if c not in nodes:
                    raise ConfigError(f"{where}.children: no node {c!r}")
                if c in parent:
                    raise ConfigError(f"{where}.children: {c} is already a child of {parent[c]}")
                parent[c] = name
        for name in nodes:  # a node on its own ancestors' path
            seen, n = [name], name
            while n in parent:
                n = parent[n]
                if n == name:
                    raise ConfigError(f"sharetree.nodes.{name}: cycle ({' -> '.join(reversed(seen + [name]))})")
                seen.append(n)
            if n != "Root":
                raise ConfigError(f"sharetree.nodes.{name}: not under Root (no node lists it as a child)")
        return cls(nodes, float(cf), tuple(levels))

    def _build(self, node: Node, config: dict, depth: int) -> None:
        for child_id in config.get("children", []):
            cc = self.config[child_id]
            kind = cc.get("kind") or self.levels[min(depth, len(self.levels) - 1)]
            name = cc.get("name", child_id.rsplit("/", 1)[-1])
            if name == "default":
                node.templates[kind] = cc
                continue
            child = node.adopt(Node(name, kind, float(cc.get("shares", 1)), node))
            self._build(child, cc, depth + 1)

    # --- where a job is ranked ----------------------------------------------------------
    def node_of(self, key: Key) -> Node:
        """The deepest node matching (user, group, project), copying `default`s as needed."""
        node = self._where.get(key)
        if node is not None:
            return node
        node = self.root
        while True:
            kinds = {k for k, _ in node.children} | set(node.templates)
            nxt = None
            for kind in sorted(kinds):
                name = key[_ATTR[kind]]
                nxt = node.children.get((kind, name))
                if nxt is None and kind in node.templates and name:
                    cc = node.templates[kind]
                    nxt = node.adopt(Node(name, kind, float(cc.get("shares", 1)), node))
                    self._build(nxt, cc, nxt.depth)
                if nxt is not None:
                    break
            if nxt is None:
                break
            node = nxt
        self._where[key] = node
        insort(node.keys, key)
        return node

    def key_for(self, kind: str, name: str) -> Key | None:
        """A usage key that lands on the tree's node of that kind and name (its ancestors'
        names filled in), or None if the tree has none (a default's copy is made for a
        job's key as it comes)."""
        todo = [self.root]
        while todo:
            node = todo.pop(0)
            if node.kind == kind and node.name == name:
                key = ["", "", ""]
                while node is not None:
                    if node.kind in _ATTR:
                        key[_ATTR[node.kind]] = node.name
                    node = node.parent
                return tuple(key)
            todo.extend(node.children.values())
        return None

    def node_at(self, job: Job) -> Node | None:
        """The node `job` is ranked at (None: not pending here)."""
        return self._of.get(job.id)

    def add(self, job: Job, key: Key, need: int) -> None:
        """A job becomes pending-and-runnable: rank it at its node (`need`: the units it
        takes, which a walk's sieve reads; see Order)."""
        node = self.node_of(key)
        node.jobs.add(job.id, job, need)
        self._of[job.id] = node
        while node is not None:
            node.pending += 1
            if node.pending == 1:
                self._crossed.add(node)
                if node.parent is not None:
                    node.parent.busy[node] = None
            node = node.parent

    def remove(self, job: Job) -> None:
        node = self._of.pop(job.id, None)
        if node is not None:
            node.jobs.remove(job.id)
            while node is not None:
                node.pending -= 1
                if not node.pending:
                    self._crossed.add(node)
                    if node.parent is not None:
                        del node.parent.busy[node]
                node = node.parent

    # --- each pass -----------------------------------------------------------------------
    def compute(self, usage: Usage, t: float, every: bool = False) -> None:
        """This pass's usage, counts and targets on the active nodes, from the usage records
        at `t` (on every node if `every`: mdiag -f).  A pass costs the active part of the
        tree, each active node above a key charged since the last adding up its keys' and
        children's kept sums, not the whole."""
        for node in self._extra:  # (the last pass's figures outside the active nodes go)
            if node not in self._active:
                node.clear()
        if len(usage.records) != self._resolved:  # new records: their usage counts on their nodes
            for key in usage.records:
                if key not in self._where:
                    self.node_of(key)
            self._resolved = len(usage.records)
        self._charge(usage, t)
        self._count(usage)
        root, where, active = self.root, self._where, self._active
        self._extra = [node for node in root.walk() if node not in active] if every else []
        d = self._decay = usage.decay(t)
        self._t = t
        fresh = self._fresh
        for node in chain(active, self._extra) if every else active:
            if node is not root or every:  # (the root's: only for tickets, see ranked)
                if node.stale:
                    fresh(node)
                node.usage = node.held * d
                node.finished = node.held_finished * d
        # charges still accruing (none after a pass's own accrual), in key order
        self._accruing = sorted((k, r) for k, r in usage.running.items() if r.since < t)
        for key, rec in self._accruing:
            a, node = usage.accrued(rec, t), where[key]
            while node is not None:
                node.usage += a
                node = node.parent
        root.ltt = root.oltt = root.stt = root.ostt = 1.0
        if root in self._kids:
            self._targets(root)

    def _count(self, usage: Usage) -> None:
        """Each node's running jobs, from the keys whose running count changed since the
        last pass, and the active nodes, from the nodes whose counts crossed zero."""
        crossed, last, runs = self._crossed, self._runs, usage.running
        if self._counted != (usage, usage.generation):  # a new ledger: every key's count is read
            self._counted = (usage, usage.generation)
            usage.take_moved()
            keys = last.keys() | runs.keys()
        else:  # only the keys whose running jobs came or went since
            keys = usage.take_moved()
        where = self._where
        for key in keys:  # (sums of ints: any order)
            now = runs[key].running if key in runs else 0
            n = now - last.get(key, 0)
            if not n:
                continue
            if now:
                last[key] = now
            else:
                del last[key]
            node = where[key]
            while node is not None:
                node.running += n
                if node.running == n or not node.running:
                    crossed.add(node)
                node = node.parent
        if not crossed:
            return
        root, active, kids = self.root, self._active, self._kids
        for node in crossed:
            on = node.running > 0 or node.pending > 0 or node is root
            if on == (node in active):
                continue
            self._shaped = False
            parent = node.parent
            if on:
                active.add(node)
                insort(kids.setdefault(parent, []), node, key=_BY_NAME)
            else:  # (no longer active: no figures)
                active.discard(node)
                node.clear()
                siblings = kids[parent]
                siblings.remove(node)
                if not siblings:
                    del kids[parent]
        crossed.clear()

    def _charge(self, usage: Usage, t: float) -> None:
        """Mark stale the nodes above the keys charged since the last pass (every node, for
        a new usage or one whose generation moved), with the keys' sums read again."""
        changed = usage.take_changed(t)
        if self._ledger != (usage, usage.generation):
            self._ledger = (usage, usage.generation)
            self._held = {}
            records = usage.records
            changed = {key: usage.undecayed(records[key], t) if key in records else _NONE
                       for key in set(records) | set(self._where)}
            for node in self.root.walk():
                node.stale = True
        self._held.update(changed)
        where = self._where
        for key in changed:
            node = where.get(key) or self.node_of(key)
            while node is not None and not node.stale:
                node.stale = True
                node = node.parent

    def _fresh(self, node: Node) -> None:
        """Add up `node`'s undecayed sums again if stale: its keys' sums, then its children's,
        in one fixed order, so that they depend on the records alone, not on history."""
        if not node.stale:
            return
        held = self._held
        u = f = 0.0
        for key in node.keys:
            ku, kf = held.get(key, _NONE)
            u += ku
            f += kf
        for child in node.ordered:
            if child.stale:
                self._fresh(child)
            u += child.held
            f += child.held_finished
        node.held, node.held_finished, node.stale = u, f, False

    def _targets(self, root: Node) -> None:
        """Grid Engine's sge_calc_node_targets, top down: each active node's targets shared
        among its active children (their ltt and oltt, then their stt and ostt from shr,
        then again for those past cf times their oltt, if any)."""
        if not self._shaped:  # the nodes to share among, parents first, and their children's ltt, oltt
            kids, plan, todo = self._kids, [], [root]
            while todo:
                node = todo.pop()
                active = kids[node]  # (sorted by (kind, name): one order, however the copies were made)
                plan.append((node, active))
                total = sum([c.shares for c in active])
                for c in active:
                    c.ltt = ltt = c.shares / total if total > 0 else 0.0
                    c.oltt = node.oltt * ltt
                todo += [c for c in active if c in kids]
            self._plan, self._shaped = plan, True
        cf = self.compensation_factor
        for node, active in self._plan:
            if len(active) == 1:  # an only child: stt = shr / shr, compensated or not
                c = active[0]
                oltt = c.oltt
                c.stt = stt = c.ltt if oltt > 0 and c.square / max(c.usage, oltt) > 0 else 0.0
                c.ostt = node.ostt * stt
                continue
            shrs = [c.square / max(c.usage, c.oltt) if c.oltt > 0 else 0.0 for c in active]
            ostt = node.ostt
            _share(active, shrs, ostt)
            if cf:
                over = False
                for i, c in enumerate(active):
                    if c.ostt > cf * c.oltt:
                        shrs[i] = c.square / (max(c.usage, c.oltt) * (c.ostt / (cf * c.oltt)))
                        over = True
                if over:
                    _share(active, shrs, ostt)

    # --- the pending order ---------------------------------------------------------------
    def ranked(self) -> Iterator[tuple[float, int, Job]]:
        """Every pending job, best first, as (-value, job id, job): value * tickets is its
        share-tree tickets.  Lazy: call `compute` first, and read only as far as needed."""
        root = self.root  # its figures, which only the values need (a sum over every key)
        self._fresh(root)
        root.usage, root.finished = root.held * self._decay, root.held_finished * self._decay
        for key, rec in self._accruing:
            root.usage += self._ledger[0].accrued(rec, self._t)
        top = self._top()
        if top.jobs:  # (jobs ranked at the top: it values every job, as any node does)
            return self._ranked(top)
        streams = [self._ranked(c) for c in top.busy]  # the top keeps its children's values
        return iter(streams[0]) if len(streams) == 1 else heapq.merge(*streams)

    def order(self) -> Iterable[Job]:
        """Every pending job in `ranked`'s order, read lazily (call `compute` first): an
        Order, which a walk's sieve narrows, unless some node's values could repeat."""
        top = self._top()
        for node in self._active:
            if node.pending and node is not top and not (
                    node.stt >= _TINY and node.running + node.finished + node.pending < _EXACT):
                return (job for _, _, job in self._ranked(top))
        return Order(self, top)

    def _top(self) -> Node:
        """The node the order starts from: Grid Engine starts below a root whose pending
        jobs are all under one child, and below that child while the same holds."""
        top = self.root
        while not top.jobs and len(top.busy) == 1:
            top = next(iter(top.busy))
        return top

    def _ranked(self, node: Node) -> Iterator[tuple[float, int, Job]]:
        streams = [self._ranked(c) for c in node.busy]
        if node.jobs:  # its own jobs carry no value from below: after its children's, by id
            streams.append((0.0, job.id, job) for job in node.jobs)
        merged = streams[0] if len(streams) == 1 else heapq.merge(*streams)
        stt, base = node.stt, node.running + node.finished
        for k, (_, jid, job) in zip(_count(1), merged):
            yield -stt / (base + k), jid, job


# Values stt / (base + k) of one node are distinct for k = 1, 2, ... while stt is a normal
# float and base + k is exact: `order` then needs no job to tell two of a node's apart.
_TINY, _EXACT = 1e-290, 2.0 ** 50


def _share(active: list[Node], shrs: list[float], ostt: float) -> None:
    """The active children's short-term targets from their shr (`ostt`: their parent's)."""
    total = sum(shrs)
    for c, shr in zip(active, shrs):
        c.stt = stt = shr / total if total > 0 else 0.0
        c.ostt = ostt * stt

_NONE = (0.0, 0.0)


class Order(Sieved):
    """One pass's pending jobs in the share tree's order (`ShareTree.ranked`'s), passing
    over the jobs the walk's sieve rules out without reading them one by one.

    A node's k-th job has the value stt / (base + k) whichever job it is.  So a leaf passes
    over whole blocks of its id-ordered backlog and still knows the rank of the next job
    it yields, and a node merging its sources counts, for each job it yields, every
    source's jobs that sort before it, those passed over included, from the value formula
    alone.  Only a tie on value, broken by job id, needs a job passed over: a leaf finds it
    by position, a node by reading its plain order (`_ranked`).  Every stream is sorted by
    (-value, job id), so the order of the jobs yielded is the plain merge's.

    `close` shuts a node's stream for the rest of the pass: its parent treats it as ended,
    so its remaining jobs count into the ranks as jobs passed over, and the order of the
    other jobs is unchanged.  tests/test_sharetree.py checks both against `ranked`, under
    random sieves and random closes."""

    closable = True

    def __init__(self, tree: ShareTree, top: Node):
        self.tree, self.top = tree, top
        self.sieve, self.passed = None, 0
        self.closed: set[Node] = set()  # subtrees passed over from now on (see close)
        self._ids: dict[Node, list[int]] = {}  # node -> its jobs' ids in its order (ties)

    def __iter__(self) -> Iterator[Job]:
        ahead = self.resume()
        if ahead is not None:
            return ahead
        if self.top.busy:
            return map(_SECOND, self._stream(self.top, False))
        return self._leaf()

    def lead(self, m: int) -> list[Job]:
        """`Sieved.lead`; the first job alone (EASY's one reservation), before any sieve or
        close, is worked out from each node's first job and figures (`_first`), without
        beginning a reading: a pass that carries its walk on reads no further."""
        if m != 1 or self.sieve is not None or self.closed or self._ahead is not None:
            return super().lead(m)
        job = self._first(self.top)
        return [job] if job is not None else []

    def _first(self, node: Node) -> Job | None:
        """The job `node`'s stream yields first (its merge's head: least (key, job id))."""
        best = key = None
        for c in node.busy:
            job = self._first(c)
            k = (-c.stt / (c.running + c.finished + 1), job.id)  # (its rank at `c`: 1)
            if key is None or k < key:
                best, key = job, k
        if best is None and node.jobs:  # its own jobs come after its children's (see _merge)
            best = node.jobs.at(1)
        return best

    def _leaf(self) -> Iterator[Job]:
        for _, job, _ in self._stream(self.top, False):
            yield job
            if self.closed:
                return

    def close(self, job: Job, attrs: frozenset[str]) -> bool:
        """Pass over, from now on, the subtree of `job`'s highest node (up to the top)
        whose kind is one of `attrs`: every job under it has the node's name as that
        attribute.  Its parent counts its jobs into the ranks as jobs passed over."""
        node, found = self.tree._of.get(job.id), None
        while node is not None:
            if _KIND_ATTR.get(node.kind) in attrs:
                found = node
            if node is self.top:
                break
            node = node.parent
        if found is None:
            return False
        self.closed.add(found)
        return True

    def covers(self, job: Job) -> bool:
        """Is `job` in a subtree passed over?"""
        node, closed = self.tree._of.get(job.id), self.closed
        while node is not None:
            if node in closed:
                return True
            node = node.parent
        return False

    def _stream(self, node: Node, ranks: bool) -> Iterator[tuple[int, Job, int]]:
        """(rank at `node`, job, need) of its pending jobs in order, narrowed by the sieve; the
        ranks count the jobs passed over (worked out only if `ranks`)."""
        kids = list(node.busy)
        if not kids:  # a leaf: its jobs by id, ranked by position
            return node.jobs.read(self)
        if len(kids) == 1 and not node.jobs:  # one source: its order and ranks are the node's
            return self._through(node, kids[0], ranks)
        return self._merge(node, kids, ranks)

    def _through(self, node: Node, child: Node, ranks: bool) -> Iterator[tuple[int, Job, int]]:
        """`_merge` of a node whose one source is `child`: the child's stream as it is,
        ended where the merge would end it (the child closed; the node, if the top)."""
        closed, top = self.closed, not ranks
        for item in self._stream(child, ranks):  # (the top's ranks are not read)
            if top and closed and node in closed:
                return
            yield item
            if closed and child in closed:
                return

    def _merge(self, node: Node, kids: list[Node], ranks: bool) -> Iterator[tuple[int, Job, int]]:
        # sources: each child's stream, keyed -stt / (base + rank) as `_ranked` keys it,
        # and the node's own jobs, keyed -0.0 (== 0.0: after its children's)
        streams = [self._stream(c, True) for c in kids]
        stts = [c.stt for c in kids]
        bases = [c.running + c.finished for c in kids]
        totals = [c.pending for c in kids]
        if node.jobs:
            streams.append(node.jobs.read(self))
            stts.append(0.0)
            bases.append(1.0)
            totals.append(len(node.jobs))
        heap = []
        limit = [0] * len(streams)  # a source's rank before its head (its total once it ends)
        for i, stream in enumerate(streams):
            first = next(stream, None)
            if first is None:
                limit[i] = totals[i]
            else:
                r, job, need = first
                limit[i] = r - 1
                heap.append((-stts[i] / (bases[i] + r), job.id, i, r, job, need))
        heapq.heapify(heap)
        pop, replace = heapq.heappop, heapq.heapreplace
        closed, nk = self.closed, len(kids)  # (a closed child's stream is never read again)
        # A source's head waits in the heap from when it was read, the sieve perhaps
        # tightening meanwhile: one the sieve rules out now is passed over here, as its
        # source would pass it over if read now (the walk would find it hopeless at its
        # turn, later still, with no more units free).  Not while no unit is free: the
        # walk stops at the next job it reads.
        if not ranks:  # the top: only the order counts
            while heap:
                if closed and node in closed:
                    return
                _, _, i, _, job, need = heap[0]
                sieve = self.sieve
                if sieve is not None and sieve[0] >= 0 and need > (sieve[2] if job.walltime > sieve[1] else sieve[0]):
                    self.passed += 1
                else:
                    yield 0, job, need
                nxt = None if closed and i < nk and kids[i] in closed else next(streams[i], None)
                if nxt is None:
                    pop(heap)
                else:
                    r, job, need = nxt
                    replace(heap, (-stts[i] / (bases[i] + r), job.id, i, r, job, need))
            return
        counted = [0] * len(streams)  # each source's jobs counted into the rank so far
        # children with jobs passed over, not yet counted (the node's own jobs passed over
        # sort after every child's: they count only towards its own jobs, below)
        lagging = {i for i in range(len(kids)) if limit[i] > 0}
        rank = 0
        while heap:
            x, jid, i, r, job, need = heap[0]
            sieve = self.sieve
            if sieve is not None and sieve[0] >= 0 and need > (sieve[2] if job.walltime > sieve[1] else sieve[0]):
                self.passed += 1  # (counted into the rank of its source's next job, as one passed over)
            else:
                if lagging:
                    for j in [j for j in lagging if j != i]:  # their jobs passed over that sort before this one
                        n = self._before(kids[j], counted[j], limit[j], x, jid)
                        counted[j] += n
                        rank += n
                        if counted[j] == limit[j]:
                            lagging.discard(j)
                    lagging.discard(i)
                rank += r - counted[i]  # its own source's, up to it
                counted[i] = r
                yield rank, job, need
            nxt = None if closed and i < nk and kids[i] in closed else next(streams[i], None)
            if nxt is None:
                pop(heap)
                limit[i] = totals[i]
            else:
                r, job, need = nxt
                limit[i] = r - 1
                replace(heap, (-stts[i] / (bases[i] + r), job.id, i, r, job, need))
            if limit[i] > counted[i] and i < nk:
                lagging.add(i)

    def _before(self, node: Node, lo: int, hi: int, x: float, jid: int) -> int:
        """How many of `node`'s jobs ranked lo+1..hi sort before key (x, jid)."""
        stt, base = node.stt, node.running + node.finished
        if x >= 0.0:  # (a job of the parent's own)
            return hi - lo
        # -stt / (base + r) < x rises with r: guess the last such r from the formula, then check it
        q = stt / -x - base
        a = hi if q >= hi else lo if q <= lo else int(q)
        while a > lo and not -stt / (base + a) < x:
            a -= 1
        while a < hi and -stt / (base + a + 1) < x:
            a += 1
        if a < hi and -stt / (base + a + 1) == x and self._id_at(node, a + 1) < jid:
            a += 1  # a tie on value: the lower job id first
        return a - lo

    def _id_at(self, node: Node, k: int) -> int:
        """The id of `node`'s k-th job in its order."""
        if not node.busy:
            return node.jobs.at(k).id
        ids = self._ids.get(node)
        if ids is None:
            ids = self._ids[node] = [jid for _, jid, _ in self.tree._ranked(node)]
        return ids[k - 1]
