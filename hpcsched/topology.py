"""Where a request can run: the topology interface and its first machine, a node pool.

The planner never counts nodes itself.  It works on *units*, bits of a Python int: a
topology numbers its allocatable units, tells which units a request may use
(`eligible`), and picks a concrete allocation out of the units that are free over a
window (`choose`).  A node pool makes one unit per exclusive node and one per core of a
shared node; a Blue Gene partition machine makes units of midplanes and cables, so that
partitions sharing any of them block each other without the planner knowing.
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from enum import Enum
from typing import Callable

from . import nodelist
from .errors import ConfigError, InvalidRequest
from .jobs import Request


_CHUNK = 1024


def set_bits(mask: int, limit: int | None = None) -> list[int]:
    """Positions of the set bits of `mask`, lowest first (at most `limit` of them).

    Works a chunk of bits at a time and takes whole runs of ones at once, so a large,
    mostly contiguous allocation costs a few operations per run, not per bit.
    """
    out: list[int] = []
    want = mask.bit_count() if limit is None else min(limit, mask.bit_count())
    full = (1 << _CHUNK) - 1
    base = 0
    while len(out) < want:
        chunk = mask & full
        mask >>= _CHUNK
        pos = base
        while chunk and len(out) < want:
            low = (chunk & -chunk).bit_length() - 1
            chunk >>= low
            pos += low
            run = (~chunk & (chunk + 1)).bit_length() - 1
            out.extend(range(pos, pos + min(run, want - len(out))))
            chunk >>= run
            pos += run
        base += _CHUNK
    return out


def lowest(mask: int, k: int) -> int:
    """The `k` lowest set bits of `mask` (all of it if it has no more than `k`)."""
    if k <= 0:
        return 0
    if mask.bit_count() <= k:
        return mask
    full = (1 << _CHUNK) - 1
    base, rest = 0, mask
    while True:
        chunk = rest & full
        c = chunk.bit_count()
        if c < k:
            k -= c
            rest >>= _CHUNK
            base += _CHUNK
            continue
        # the narrowest low part of chunk holding k set bits
        if k <= 8:
            for _ in range(k - 1):
                chunk &= chunk - 1  # drop the lowest set bit
            width = (chunk & -chunk).bit_length()
        else:
            width, hi = k, chunk.bit_length()
            while width < hi:
                mid = (width + hi) // 2
                if (chunk & ((1 << mid) - 1)).bit_count() >= k:
                    hi = mid
                else:
                    width = mid + 1
        return mask & ((1 << (base + width)) - 1)


def mask_of(bits: list[int]) -> int:
    """The int with exactly `bits` set; linear in the highest bit, not in len(bits)**2."""
    if not bits:
        return 0
    digits = bytearray(b"0" * (max(bits) + 1))
    for b in bits:
        digits[b] = 49  # ord("1")
    digits.reverse()
    return int(digits, 2)


class Allocation:
    """A concrete placement: the units taken, and per node the cores the job uses.

    `nodes` may be given as a function, called when the names are first read: a pass
    remakes its reservations every time, and only the allocations of jobs that start, or
    that someone looks at, need their (possibly thousands of) node names."""

    __slots__ = ("units", "_nodes", "cores")

    def __init__(self, units: int, nodes: tuple[str, ...] | Callable[[], tuple[str, ...]],
                 cores: tuple[tuple[int, ...], ...]):
        self.units, self._nodes, self.cores = units, nodes, cores

    @property
    def nodes(self) -> tuple[str, ...]:
        if callable(self._nodes):
            self._nodes = self._nodes()
        return self._nodes

    def __eq__(self, other) -> bool:
        return (isinstance(other, Allocation) and self.units == other.units and self.nodes == other.nodes
                and self.cores == other.cores)

    def __hash__(self) -> int:
        return hash(self.units)

    def __repr__(self) -> str:
        return f"Allocation(units={self.units:#x}, nodes={self.nodes!r}, cores={self.cores!r})"


class Topology(ABC):
    """What the planner needs to know about a machine."""

    #: nodes in the machine (the router's and Cobalt's MAX_SIZE)
    node_count: int

    @abstractmethod
    def available(self) -> int:
        """Units that can be scheduled now (nodes up, not bad or offline)."""

    @abstractmethod
    def eligible(self, request: Request) -> int:
        """Units `request` may ever use (capacity and features), whatever their state."""

    def shape(self, request: Request) -> tuple:
        """A small hashable key: requests of one shape have the same eligible units, and a
        larger amount (nodes or cores) of one shape never fits where a smaller one fails."""
        return (request.ppn, request.mem, request.features, bool(request.cores))

    @abstractmethod
    def need(self, request: Request) -> int:
        """A lower bound on the units `request` takes: a cheap first test of fit."""

    @abstractmethod
    def size(self, request: Request) -> int:
        """Nodes `request` occupies: what routing thresholds and size classes see."""

    @abstractmethod
    def choose(self, request: Request, tiers: list[int]) -> Allocation | None:
        """Pick units for `request` from the free masks `tiers`, best tier first, or None."""

    @abstractmethod
    def units_of(self, nodes: tuple[str, ...], cores: tuple[tuple[int, ...], ...]) -> int:
        """The units of an allocation recorded by node and core (for restoring state)."""

    @abstractmethod
    def units_of_nodes(self, names) -> int:
        """Every unit of the named nodes (what a reservation on them holds)."""

    def fits_anywhere(self, request: Request) -> bool:
        """Could the request ever run here, with every node up?"""
        return self.choose(request, [self.eligible(request)]) is not None


class NodeState(str, Enum):
    UP = "up"
    DOWN = "down"
    OFFLINE = "offline"  # set by an operator: finish what runs, start nothing new
    BAD = "bad"  # failed a pre-job scan: on the bad list until cleared


@dataclass
class Node:
    name: str
    cores: int = 1
    memory: int = 0  # MB; 0 means not tracked
    features: frozenset[str] = field(default_factory=frozenset)
    shared: bool = False  # True: jobs share it core by core; False: one job at a time
    nid: int = 0  # numeric id (PSC's nid), by default the node's position
    state: NodeState = NodeState.UP


class NodePool(Topology):
    """Named nodes with cores, memory and features; whole-node and shared-node allocation.

    Choice is deterministic: within the planner's best tier, nodes in configuration order,
    cores lowest first.
    """

    def __init__(self, nodes: list[Node]):
        if not nodes:
            raise ConfigError("nodes: at least one node is needed")
        self.nodes = nodes
        self.by_name: dict[str, int] = {}
        self.offset: list[int] = []
        self.width: list[int] = []
        self.unit_node: list[int] = []
        for i, n in enumerate(nodes):
            if n.name in self.by_name:
                raise ConfigError(f"nodes: node {n.name!r} is defined twice")
            if n.cores < 1:
                raise ConfigError(f"nodes: node {n.name!r} needs cores >= 1")
            self.by_name[n.name] = i
            self.offset.append(len(self.unit_node))
            w = n.cores if n.shared else 1
            self.width.append(w)
            self.unit_node.extend([i] * w)
        self.node_count = len(nodes)
        self.exclusive = not any(n.shared for n in nodes)
        self.by_nid = {n.nid: i for i, n in enumerate(nodes)}
        self.names = [n.name for n in nodes]
        self._eligible: dict[tuple, int] = {}
        self._cores: dict[tuple[int, int], tuple] = {}  # (ppn, nodes) -> a whole-node allocation's cores
        self._available: int | None = None

    # --- configuration ---------------------------------------------------------------
    @classmethod
    def from_config(cls, groups: list[dict]) -> "NodePool":
        """Build from `[{names = "n[01-04]", cores = 8, memory = 16000, features = [..],
        shared = false}, ...]`; node ids count from 0 in order unless `first_nid` is given."""
        nodes: list[Node] = []
        for k, g in enumerate(groups):
            where = f"nodes[{k}]"
            if not isinstance(g, dict) or "names" not in g:
                raise ConfigError(f"{where}.names: missing")
            extra = set(g) - {"names", "cores", "memory", "features", "shared", "first_nid"}
            if extra:
                raise ConfigError(f"{where}.{sorted(extra)[0]}: unknown key")
            try:
                names = nodelist.expand(str(g["names"]))
            except InvalidRequest as e:
                raise ConfigError(f"{where}.names: {e}") from None
            cores, memory = g.get("cores", 1), g.get("memory", 0)
            for key, value in (("cores", cores), ("memory", memory)):
                if not isinstance(value, int) or isinstance(value, bool) or value < (key == "cores"):
                    raise ConfigError(f"{where}.{key}: must be an integer >= {int(key == 'cores')}")
            features = g.get("features", [])
            if not isinstance(features, list) or not all(isinstance(f, str) for f in features):
                raise ConfigError(f"{where}.features: must be a list of strings")
            first = g.get("first_nid", len(nodes))
            for j, name in enumerate(names):
                nodes.append(Node(name, cores, memory, frozenset(features), bool(g.get("shared", False)),
                                  nid=first + j))
        return cls(nodes)

    # --- state -----------------------------------------------------------------------
    def set_state(self, name: str, state: NodeState) -> None:
        if name not in self.by_name:
            raise InvalidRequest(f"unknown node {name!r}")
        self.nodes[self.by_name[name]].state = state
        self._available = None

    def node_states(self) -> dict[str, str]:
        """Nodes not up, by name (what the scheduler's state saves)."""
        return {n.name: n.state.value for n in self.nodes if n.state != NodeState.UP}

    def node_units(self, i: int) -> int:
        return ((1 << self.width[i]) - 1) << self.offset[i]

    # --- Topology --------------------------------------------------------------------
    def available(self) -> int:
        if self._available is None:
            if all(n.state == NodeState.UP for n in self.nodes):
                self._available = (1 << len(self.unit_node)) - 1
            else:
                self._available = mask_of([u for u, i in enumerate(self.unit_node)
                                           if self.nodes[i].state == NodeState.UP])
        return self._available

    def _chunk_units(self, node: Node, request: Request) -> int:
        """Cores one chunk of `request` takes on shared `node` (memory bought as cores)."""
        if request.mem and node.memory:
            return max(request.ppn, math.ceil(request.mem * node.cores / node.memory))
        return request.ppn

    def eligible(self, request: Request) -> int:
        key = self.shape(request)
        mask = self._eligible.get(key)
        if mask is None:
            bits = []
            for i, n in enumerate(self.nodes):
                if not set(request.features) <= n.features:
                    continue
                if not request.cores:
                    if n.cores < request.ppn or (request.mem and n.memory and n.memory < request.mem):
                        continue
                    if n.shared and self._chunk_units(n, request) > n.cores:
                        continue
                bits.extend(range(self.offset[i], self.offset[i] + self.width[i]))
            mask = self._eligible[key] = mask_of(bits)
        return mask

    def need(self, request: Request) -> int:
        if self.exclusive:
            if request.cores:
                return math.ceil(request.cores / max(n.cores for n in self.nodes))
            return request.nodes
        return min(request.nodes, request.processors) if not request.cores else 1

    def size(self, request: Request) -> int:
        if request.cores:
            return math.ceil(request.cores / max(n.cores for n in self.nodes))
        return request.nodes

    def choose(self, request: Request, tiers: list[int]) -> Allocation | None:
        eligible = self.eligible(request)
        if self.exclusive and not request.cores:
            return self._choose_whole(request, tiers, eligible)
        return self._choose_general(request, [t & eligible for t in tiers])

    def _choose_whole(self, request: Request, tiers: list[int], eligible: int) -> Allocation | None:
        """Fast path: one unit per node, so take the lowest free units tier by tier."""
        want = request.nodes
        units, got = 0, 0
        for t in tiers:
            take = lowest(t & eligible, want - got)
            units |= take
            got += take.bit_count()
            if got == want:
                break
        else:
            return None  # not enough units in all the tiers
        names = self.names
        cores = self._cores.get((request.ppn, want))
        if cores is None:  # (immutable, so one per shape serves every allocation)
            cores = self._cores[request.ppn, want] = (tuple(range(request.ppn)),) * want
        return Allocation(units, lambda: tuple([names[u] for u in set_bits(units)]), cores)

    def _choose_general(self, request: Request, tiers: list[int]) -> Allocation | None:
        """Shared nodes or core counts: walk nodes best tier first, then in order."""
        free = 0
        rank: dict[int, int] = {}  # node -> best tier holding any of its free units
        for r, t in enumerate(tiers):
            free |= t
            for u in set_bits(t):
                rank.setdefault(self.unit_node[u], r)
        order = sorted(rank, key=lambda i: (rank[i], i))
        picked_nodes: list[int] = []
        picked_units: list[int] = []
        picked_cores: list[tuple[int, ...]] = []
        if request.cores:
            remaining = request.cores
            if request.mem:
                per = min((n.memory / n.cores for n in self.nodes if n.memory), default=0)
                remaining = max(remaining, math.ceil(request.mem / per)) if per else remaining
            # packed: one node that holds it all if there is one, else fill nodes in order
            whole = next((i for i in order if (free & self.node_units(i)).bit_count() * (
                1 if self.nodes[i].shared else self.nodes[i].cores) >= remaining), None)
            if whole is not None:
                order = [whole]
            for i in order:
                if remaining <= 0:
                    break
                node = self.nodes[i]
                if node.shared:
                    units = [u for u in range(self.offset[i], self.offset[i] + self.width[i]) if free >> u & 1]
                    take = units[:remaining]
                    picked_units.extend(take)
                    picked_cores.append(tuple(u - self.offset[i] for u in take))
                    remaining -= len(take)
                else:
                    picked_units.append(self.offset[i])
                    picked_cores.append(tuple(range(min(node.cores, remaining))))
                    remaining -= node.cores
                picked_nodes.append(i)
            if remaining > 0:
                return None
        else:
            for i in order:
                if len(picked_nodes) == request.nodes:
                    break
                node = self.nodes[i]
                if node.shared:
                    k = self._chunk_units(node, request)
                    units = [u for u in range(self.offset[i], self.offset[i] + self.width[i]) if free >> u & 1]
                    if len(units) < k:
                        continue
                    picked_units.extend(units[:k])
                    picked_cores.append(tuple(u - self.offset[i] for u in units[:k]))
                else:
                    picked_units.append(self.offset[i])
                    picked_cores.append(tuple(range(request.ppn)))
                picked_nodes.append(i)
            if len(picked_nodes) < request.nodes:
                return None
        return Allocation(mask_of(picked_units), tuple(self.nodes[i].name for i in picked_nodes),
                          tuple(picked_cores))

    def units_of_nodes(self, names) -> int:
        mask = 0
        for name in names:
            if name not in self.by_name:
                raise InvalidRequest(f"unknown node {name!r}")
            mask |= self.node_units(self.by_name[name])
        return mask

    def units_of(self, nodes, cores) -> int:
        bits = []
        for name, cs in zip(nodes, cores):
            if name not in self.by_name:
                raise InvalidRequest(f"unknown node {name!r}")
            i = self.by_name[name]
            if self.nodes[i].shared:
                bits.extend(self.offset[i] + c for c in cs)
            else:
                bits.append(self.offset[i])
        return mask_of(bits)
