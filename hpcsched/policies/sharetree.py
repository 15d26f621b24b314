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

Pending jobs are ranked bottom-up as Grid Engine's sge_sort_pending_job_nodes ranks them:
a leaf's jobs in job-id order; at every node the jobs of its children are merged by the
value their child gave them (ties: lower job id), and the k-th gets stt / (R + F + k),
R being the jobs running under the node and F its decayed count of finished jobs.  The
root's value times the tickets to hand out is a job's tickets.  The merge is lazy (each
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
from itertools import count as _count
from operator import itemgetter
from typing import Iterable, Iterator

from ..core.backlog import Backlog, Sieved
from ..core.errors import ConfigError
from ..core.jobs import Job
from ..core.usage import Key, Usage

_SECOND = itemgetter(1)
LEVELS = ("group", "project", "user")
_ATTR = {"user": 0, "group": 1, "project": 2}  # kind -> index in a usage key (user, group, project)
_KIND_ATTR = {"user": "owner", "group": "group", "project": "account"}  # kind -> the job's attribute


def _by_name(node: "Node") -> tuple[str, str]:
    return node.kind, node.name


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < math.inf


class Node:
    """One node of the tree (a default's copy is a node of its own), with this pass's figures."""

    __slots__ = ("name", "kind", "shares", "children", "templates", "parent", "jobs", "keys", "pending",
                 "usage", "finished", "running", "ltt", "oltt", "shr", "stt", "ostt")

    def __init__(self, name: str, kind: str, shares: float, parent: "Node | None" = None):
        self.name, self.kind, self.shares, self.parent = name, kind, shares, parent
        self.children: dict[tuple[str, str], Node] = {}  # (kind, name) -> child
        self.templates: dict[str, dict] = {}  # kind -> the `default` child's config, copied per name
        self.jobs = Backlog()  # pending jobs ranked at this node, by job id (with their needs)
        self.keys: list[Key] = []  # the usage keys whose jobs are ranked here
        self.pending = 0  # pending jobs under it (kept as they come and go)
        self.clear()

    def clear(self) -> None:
        """Forget the last pass's figures."""
        self.usage = self.finished = 0.0
        self.running = 0
        self.ltt = self.oltt = self.shr = self.stt = self.ostt = 0.0

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
        self._holding: set[Node] = set()  # nodes with pending jobs of their own
        self._kids: dict[Node, list[Node]] = {}  # this pass's active nodes' active children
        self._touched: set[Node] = set()  # nodes the last pass gave figures (cleared by the next)
        self._resolved = 0  # usage records whose keys have been given a node
        self._usage: Usage | None = None
        self._t = 0.0

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
            child = node.children[(kind, name)] = Node(name, kind, float(cc.get("shares", 1)), node)
            self._build(child, cc, depth + 1)

    def _depth(self, node: Node) -> int:
        d = 0
        while node.parent is not None:
            node, d = node.parent, d + 1
        return d

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
                    nxt = node.children[(kind, name)] = Node(name, kind, float(cc.get("shares", 1)), node)
                    self._build(nxt, cc, self._depth(nxt))
                if nxt is not None:
                    break
            if nxt is None:
                break
            node = nxt
        self._where[key] = node
        node.keys.append(key)
        return node

    def add(self, job: Job, key: Key, need: int) -> None:
        """A job becomes pending-and-runnable: rank it at its node (`need`: the units it
        takes, which a walk's sieve reads; see Order)."""
        node = self.node_of(key)
        node.jobs.add(job.id, job, need)
        self._of[job.id] = node
        self._holding.add(node)
        while node is not None:
            node.pending += 1
            node = node.parent

    def remove(self, job: Job) -> None:
        node = self._of.pop(job.id, None)
        if node is not None:
            node.jobs.remove(job.id)
            if not node.jobs:
                self._holding.discard(node)
            while node is not None:
                node.pending -= 1
                node = node.parent

    # --- each pass -----------------------------------------------------------------------
    def compute(self, usage: Usage, t: float) -> None:
        """This pass's usage, counts and targets on the active nodes (and the usage of
        everything under them), from the usage records at `t`.  A pass costs the active
        part of the tree, not the whole."""
        for node in self._touched:
            node.clear()
        if len(usage.records) != self._resolved:  # new records: their usage counts on their nodes
            for key in usage.records:
                if key not in self._where:
                    self.node_of(key)
            self._resolved = len(usage.records)
        root = self.root
        active = {root}
        where = self._where
        for key, rec in usage.running.items():
            node = where[key]
            while node is not None:
                node.running += rec.running
                active.add(node)
                node = node.parent
        for node in self._holding:
            while node is not None and node not in active:
                active.add(node)
                node = node.parent
        self._touched = active
        kids: dict[Node, list[Node]] = {}  # each active node's active children
        for node in active:
            if node.parent is not None:
                kids.setdefault(node.parent, []).append(node)
        self._kids = kids
        root.ltt = root.oltt = root.stt = root.ostt = 1.0
        self._usage, self._t = usage, t
        self._targets(root, usage, t)

    def _subtree_usage(self, node: Node, usage: Usage, t: float) -> None:
        """A node's usage and finished jobs: its own keys' and its children's, all of them."""
        u = f = 0.0
        for key in node.keys:
            rec = usage.records.get(key)
            if rec is not None:
                ru, rf = usage.value(rec, t)
                u, f = u + ru, f + rf
        for child in node.children.values():
            self._subtree_usage(child, usage, t)
            u, f = u + child.usage, f + child.finished
        node.usage, node.finished = u, f
        self._touched.add(node)

    def _targets(self, node: Node, usage: Usage, t: float) -> None:
        """Grid Engine's sge_calc_node_targets on `node`'s active children, then theirs."""
        active = sorted(self._kids.get(node, ()), key=_by_name)  # (one order, however the copies were made)
        if not active:
            return
        if node.parent is None:  # the root's children's usage, and everything under them
            for c in active:
                self._subtree_usage(c, usage, t)
        total = sum(c.shares for c in active)
        for c in active:
            c.ltt = c.shares / total if total > 0 else 0.0
            c.oltt = node.oltt * c.ltt
            c.shr = c.shares * c.shares / max(c.usage, c.oltt) if c.oltt > 0 else 0.0
        self._normalise(node, active)
        cf = self.compensation_factor
        if cf:
            compensated = False
            for c in active:
                if c.ostt > cf * c.oltt:
                    c.shr = c.shares * c.shares / (max(c.usage, c.oltt) * (c.ostt / (cf * c.oltt)))
                    compensated = True
            if compensated:
                self._normalise(node, active)
        for c in active:
            self._targets(c, usage, t)

    @staticmethod
    def _normalise(node: Node, active: list[Node]) -> None:
        total = sum(c.shr for c in active)
        for c in active:
            c.stt = c.shr / total if total > 0 else 0.0
            c.ostt = node.ostt * c.stt

    # --- the pending order ---------------------------------------------------------------
    def ranked(self, values: bool = True) -> Iterator[tuple[float, int, Job]]:
        """Every pending job, best first, as (-value, job id, job): value * tickets is its
        share-tree tickets.  Lazy: call `compute` first, and read only as far as needed.
        With `values` False only the order is right: the root's figures, which every job
        shares and which take a sum over every record, are left out."""
        root = self._top()
        if root is self.root and values:  # the root's usage: everyone's
            usage, t = self._usage, self._t
            root.usage = root.finished = 0.0
            for rec in usage.records.values():
                u, f = usage.value(rec, t)
                root.usage, root.finished = root.usage + u, root.finished + f
        return self._ranked(root)

    def order(self) -> Iterable[Job]:
        """Every pending job in `ranked`'s order, read lazily (call `compute` first): an
        Order, which a walk's sieve narrows, unless some node's values could repeat."""
        top = self._top()
        for node in self._touched:
            if node.pending and node is not top and not (
                    node.stt >= _TINY and node.running + node.finished + node.pending < _EXACT):
                return (job for _, _, job in self._ranked(top))
        return Order(self, top)

    def _top(self) -> Node:
        """The node the order starts from: Grid Engine starts below a root whose pending
        jobs are all under one child."""
        root = self.root
        if not root.jobs:
            under = [c for c in root.children.values() if c.pending]
            if len(under) == 1:
                root = under[0]
        return root

    def _ranked(self, node: Node) -> Iterator[tuple[float, int, Job]]:
        streams = [self._ranked(c) for c in node.children.values() if c.pending]
        if node.jobs:  # its own jobs carry no value from below: after its children's, by id
            streams.append((0.0, job.id, job) for job in node.jobs)
        merged = streams[0] if len(streams) == 1 else heapq.merge(*streams)
        stt, base = node.stt, node.running + node.finished
        for k, (_, jid, job) in zip(_count(1), merged):
            yield -stt / (base + k), jid, job


# Values stt / (base + k) of one node are distinct for k = 1, 2, ... while stt is a normal
# float and base + k is exact: `order` then needs no job to tell two of a node's apart.
_TINY, _EXACT = 1e-290, 2.0 ** 50


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
        if any(c.pending for c in self.top.children.values()):
            return map(_SECOND, self._stream(self.top, False))
        return self._leaf()

    def _leaf(self) -> Iterator[Job]:
        for _, job in self._stream(self.top, False):
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

    def _stream(self, node: Node, ranks: bool) -> Iterator[tuple[int, Job]]:
        """(rank at `node`, job) of its pending jobs in order, narrowed by the sieve; the
        ranks count the jobs passed over (worked out only if `ranks`)."""
        kids = [c for c in node.children.values() if c.pending]
        if not kids:  # a leaf: its jobs by id, ranked by position
            return node.jobs.read(self)
        return self._merge(node, kids, ranks)

    def _merge(self, node: Node, kids: list[Node], ranks: bool) -> Iterator[tuple[int, Job]]:
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
                r, job = first
                limit[i] = r - 1
                heap.append((-stts[i] / (bases[i] + r), job.id, i, r, job))
        heapq.heapify(heap)
        pop, replace = heapq.heappop, heapq.heapreplace
        closed, nk = self.closed, len(kids)  # (a closed child's stream is never read again)
        if not ranks:  # the top: only the order counts
            while heap:
                if closed and node in closed:
                    return
                i, job = heap[0][2], heap[0][4]
                yield 0, job
                nxt = None if closed and i < nk and kids[i] in closed else next(streams[i], None)
                if nxt is None:
                    pop(heap)
                else:
                    r, job = nxt
                    replace(heap, (-stts[i] / (bases[i] + r), job.id, i, r, job))
            return
        counted = [0] * len(streams)  # each source's jobs counted into the rank so far
        # children with jobs passed over, not yet counted (the node's own jobs passed over
        # sort after every child's: they count only towards its own jobs, below)
        lagging = {i for i in range(len(kids)) if limit[i] > 0}
        rank = 0
        while heap:
            x, jid, i, r, job = heap[0]
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
            yield rank, job
            nxt = None if closed and i < nk and kids[i] in closed else next(streams[i], None)
            if nxt is None:
                pop(heap)
                limit[i] = totals[i]
            else:
                r, job = nxt
                limit[i] = r - 1
                replace(heap, (-stts[i] / (bases[i] + r), job.id, i, r, job))
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
        if not any(c.pending for c in node.children.values()):
            return node.jobs.at(k).id
        ids = self._ids.get(node)
        if ids is None:
            ids = self._ids[node] = [jid for _, jid, _ in self.tree._ranked(node)]
        return ids[k - 1]
