"""A pool of named nodes: whole-node and shared-node allocation (the default machine).

Units: one per exclusive node, one per core of a shared node, numbered in configuration
order (`offset[i]` is node i's first unit, `width[i]` its count).

Placement, the machine's choice among free nodes:
    first-fit   the lowest free nodes, best tier first (ALPS' default on a Cray)
    contiguous  one run of consecutive nodes in configuration (nid) order, the lowest run
                in the best tiers that hold one (PSC's Simon); whole-node requests only
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from itertools import islice

from ..core import nodelist
from ..core.errors import ConfigError, InvalidRequest
from ..core.jobs import Allocation, Request
from ..core.topology import MAX_UNITS, NODE_LIMITS, Node, NodeState, Tiers, Topology, lowest, mask_of, set_bits


PLACEMENTS = ("first-fit", "contiguous")
STRIDE = 8  # tiers `_lowest_in_tiers` joins before counting units again


def first_run(mask: int, k: int) -> int:
    """The lowest position where `mask` has `k` set bits in a row, or -1.  (`r` keeps the
    bits that start a run of `have` ones; doubling `have` costs O(log k) mask operations.)"""
    r, have = mask, 1
    while have < k and r:
        step = min(have, k - have)
        r &= r >> step
        have += step
    return (r & -r).bit_length() - 1 if r else -1


class NodePool(Topology):
    """Named nodes with cores, memory and features; whole-node and shared-node allocation.

    Choice is deterministic: within the planner's best tier, nodes in configuration order,
    cores lowest first.
    """

    def __init__(self, nodes: list[Node], placement: str = "first-fit"):
        if placement not in PLACEMENTS:
            raise ConfigError(f"placement: {placement!r} is not one of {', '.join(PLACEMENTS)}")
        self.placement = placement
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
            if len(self.unit_node) + w > MAX_UNITS:
                raise ConfigError(f"nodes: more than {MAX_UNITS} units (a node, or a shared node's core)")
            self.width.append(w)
            self.unit_node.extend([i] * w)
        self.node_count = len(nodes)
        self._every = (1 << len(self.unit_node)) - 1
        self._widest = max(n.cores for n in nodes)  # cores of the widest node (a core count's nodes)
        self.exclusive = not any(n.shared for n in nodes)
        self.shared = all(n.shared for n in nodes)  # every unit a core: a core count is that many units
        self.by_nid = {n.nid: i for i, n in enumerate(nodes)}
        self.names = [n.name for n in nodes]
        self._eligible: dict[tuple, int] = {}
        self._interchangeable: dict[tuple, bool] = {}
        self._node_cores: dict[tuple, int] = {}  # shape -> cores of the nodes it may get
        self._cores: dict[tuple[int, int], tuple] = {}  # (ppn, nodes) -> a whole-node allocation's cores
        self._available: int | None = None

    # --- configuration ---------------------------------------------------------------
    @classmethod
    def from_config(cls, groups: list[dict], placement: str = "first-fit") -> "NodePool":
        """Build from `[{names = "n[01-04]", cores = 8, memory = 16000, gpus = 4, features = [..],
        shared = false}, ...]`; node ids count from 0 in order unless `first_nid` is given."""
        nodes: list[Node] = []
        for k, g in enumerate(groups):
            where = f"nodes[{k}]"
            if not isinstance(g, dict) or "names" not in g:
                raise ConfigError(f"{where}.names: missing")
            extra = set(g) - {"names", "cores", "memory", "gpus", "features", "shared", "first_nid"}
            if extra:
                raise ConfigError(f"{where}.{sorted(extra)[0]}: unknown key")
            try:
                names = nodelist.expand(str(g["names"]))
            except InvalidRequest as e:
                raise ConfigError(f"{where}.names: {e}") from None
            cores, memory, gpus = g.get("cores", 1), g.get("memory", 0), g.get("gpus", 0)
            first = g.get("first_nid", len(nodes))
            for key, value in (("cores", cores), ("memory", memory), ("gpus", gpus), ("first_nid", first)):
                low, high = int(key == "cores"), NODE_LIMITS[key]
                if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
                    raise ConfigError(f"{where}.{key}: must be an integer from {low} to {high}")
            features = g.get("features", [])
            if not isinstance(features, list) or not all(isinstance(f, str) for f in features):
                raise ConfigError(f"{where}.features: must be a list of strings")
            if not isinstance(g.get("shared", False), bool):  # ("false" would be a shared node)
                raise ConfigError(f"{where}.shared: must be true or false")
            for j, name in enumerate(names):
                nodes.append(Node(name, cores, memory, frozenset(features), g.get("shared", False),
                                  nid=first + j, gpus=gpus))
        named = {}
        for n in nodes:
            if named.setdefault(n.nid, n.name) != n.name:
                raise ConfigError(f"nodes: node id {n.nid} is given to {named[n.nid]!r} and {n.name!r}")
        return cls(nodes, placement)

    # --- state -----------------------------------------------------------------------
    def all_nodes(self) -> list[Node]:
        return self.nodes

    def node(self, name: str) -> Node:
        if name not in self.by_name:
            raise InvalidRequest(f"unknown node {name!r}")
        return self.nodes[self.by_name[name]]

    def set_state(self, name: str, state: NodeState) -> None:
        self.node(name).state = state
        self._available = None

    def interchangeable(self, request: Request) -> bool:
        # whole nodes, and every node serves the request: any `need` of them will do
        key = self.shape(request)
        ok = self._interchangeable.get(key)
        if ok is None:  # (asked for every held count of every pass: kept per shape, as `eligible`)
            # (or every node shared and a count of cores, anywhere: any `need` cores will do)
            ok = self._interchangeable[key] = (
                (self.exclusive or (self.shared and request.cores and not request.mem))
                and self.placement == "first-fit" and self.eligible(request) == self._every)
        return ok

    def processors(self, units: int) -> int:
        nodes, unit_node = self.nodes, self.unit_node
        return sum(1 if nodes[i].shared else nodes[i].cores for i in map(unit_node.__getitem__, set_bits(units)))

    def node_units(self, i: int) -> int:
        return ((1 << self.width[i]) - 1) << self.offset[i]

    # --- Topology --------------------------------------------------------------------
    def available(self) -> int:
        if self._available is None:
            if all(n.state == NodeState.UP for n in self.nodes):
                self._available = self._every
            else:
                self._available = mask_of([u for u, i in enumerate(self.unit_node)
                                           if self.nodes[i].state == NodeState.UP])
        return self._available

    def _chunk_units(self, node: Node, request: Request) -> int:
        """Cores one chunk of `request` takes on shared `node` (memory and GPUs bought as
        cores: the node's share of each that the chunk asks for; an exclusive one, all)."""
        if request.exclusive:
            return node.cores
        units = request.ppn
        if request.mem and node.memory:
            units = max(units, math.ceil(request.mem * node.cores / node.memory))
        if request.gpus:
            units = max(units, math.ceil(request.gpus * node.cores / node.gpus))
        return units

    def eligible(self, request: Request) -> int:
        key = self.shape(request)
        mask = self._eligible.get(key)
        if mask is None:
            bits = []
            within = set(request.within)
            unknown = within - self.by_name.keys()
            if unknown:
                raise InvalidRequest(f"unknown node {sorted(unknown)[0]!r}")
            for i, n in enumerate(self.nodes):
                if within and n.name not in within:
                    continue
                if not set(request.features) <= n.features or n.gpus < request.gpus:
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
                return math.ceil(request.cores / self._widest)
            return request.nodes
        if request.cores:
            return request.cores if self.shared else 1  # (one core a unit; memory may buy more)
        return min(request.nodes, request.processors)

    def size(self, request: Request) -> int:
        if request.cores:
            return math.ceil(request.cores / self._widest)
        return request.nodes

    def occupies(self, request: Request) -> int:
        if not self.exclusive and not request.exclusive:
            return request.processors
        key = self.shape(request)
        cores = self._node_cores.get(key)
        if cores is None:  # the widest node it may get (a pool of mixed nodes: an upper bound)
            eligible = self.eligible(request)
            cores = self._node_cores[key] = max((n.cores for i, n in enumerate(self.nodes)
                                                 if eligible >> self.offset[i] & 1), default=0)
        return self.size(request) * cores

    def choose(self, request: Request, tiers: Tiers) -> Allocation | None:
        eligible = self.eligible(request)
        if self.exclusive and not request.cores:
            if self.placement == "contiguous":
                return self._choose_run(request, tiers, eligible)
            return self._choose_whole(request, tiers, eligible)
        if request.cores == 1 and not request.mem:  # (a mask of every unit leaves tiers as they are)
            if eligible == self._every:
                return self._choose_core(tiers)
            return self._choose_core(t & eligible for t in tiers)
        if self.shared and request.cores and not request.mem:
            return self._choose_cores(request.cores, tiers, None if eligible == self._every else eligible)
        return self._choose_general(request, [t & eligible for t in tiers])

    def _choose_core(self, tiers: Iterable[int]) -> Allocation | None:
        """Fast path for one core (most high-throughput jobs): what `_choose_general`
        chooses, the best tier's lowest unit, in a few mask operations instead of a walk
        over nodes.  (Checked against `_choose_general` in tests/test_topology.py.)"""
        for best in tiers:
            if best:
                break
        else:
            return None
        u = (best & -best).bit_length() - 1
        i = self.unit_node[u]
        node, off = self.nodes[i], self.offset[i]
        if not node.shared:
            return Allocation(1 << off, (node.name,), ((0,),))
        return Allocation(1 << u, (node.name,), ((u - off,),))

    def _choose_cores(self, want: int, tiers: Iterable[int], eligible: int | None) -> Allocation | None:
        """`want` cores anywhere on shared nodes: every unit of each tier in turn, as a
        count takes them (units of one tier are alike in time, so a reservation leaves the
        cores a count-based backfill would use); of the tier where `want` is reached, those
        on nodes already taken, then on one node that holds the rest, else nodes in order."""
        taken = 0
        for t in tiers:
            if eligible is not None:
                t &= eligible
            n = t.bit_count()
            if n < want:
                taken |= t
                want -= n
                continue
            taken |= t if n == want else self._packed(t, want, taken)
            return self._cores_allocation(taken)
        return None

    def _packed(self, t: int, want: int, taken: int) -> int:
        """`want` units of `t` (which holds more): on the nodes of `taken` first, then on one
        node that holds the rest, else node by node in order, lowest units first."""
        picked = 0
        for i in self._in_tiers([taken]):
            on = t & self.node_units(i)
            if on:
                n = min(want, on.bit_count())
                picked |= lowest(on, n)
                want -= n
                if not want:
                    return picked
        t ^= t & picked
        nodes = list(self._in_tiers([t]))
        whole = next((i for i in nodes if (t & self.node_units(i)).bit_count() >= want), None)
        for i in [whole] if whole is not None else nodes:
            on = t & self.node_units(i)
            n = min(want, on.bit_count())
            picked |= lowest(on, n)
            want -= n
            if not want:
                break
        return picked

    def _cores_allocation(self, units: int) -> Allocation:
        """The allocation of cores `units` on shared nodes: its nodes in order, each's cores."""
        by_node: dict[int, list[int]] = {}
        for u in set_bits(units):
            i = self.unit_node[u]
            by_node.setdefault(i, []).append(u - self.offset[i])
        return Allocation(units, tuple(self.names[i] for i in by_node), tuple(map(tuple, by_node.values())))

    def _choose_whole(self, request: Request, tiers: Tiers, eligible: int) -> Allocation | None:
        """Fast path: one unit per node, so take the lowest free units tier by tier.

        Where the tiers hold just the units it wants, it takes them all unread: the
        earliest start of a deep queue's head is where just enough units come free, and
        its tiers, worked out as they are read, are nearly one per segment before it."""
        want, every = request.nodes, eligible == self._every
        units = tiers.units if every else tiers.units & eligible
        got = units.bit_count()
        if got < want:
            return None
        if got > want:
            back = tiers.last_first()
            if back is None:
                units = _lowest_in_tiers(tiers, None if every else eligible, want, units)
            else:
                units ^= _chosen_last(back, None if every else eligible, got - want)
        names = self.names
        cores = self._cores.get((request.ppn, want))
        if cores is None:  # (immutable, so one per shape serves every allocation)
            cores = self._cores[request.ppn, want] = (tuple(range(request.ppn)),) * want
        return Allocation(units, lambda: tuple([names[u] for u in set_bits(units)]), cores)

    def _choose_run(self, request: Request, tiers: Tiers, eligible: int) -> Allocation | None:
        """Contiguous: the lowest run of `request.nodes` free nodes in the fewest best tiers."""
        free = 0
        for t in tiers:
            free |= t & eligible
            at = first_run(free, request.nodes)
            if at >= 0:
                units = ((1 << request.nodes) - 1) << at
                names = self.names
                return Allocation(units, tuple(names[at:at + request.nodes]),
                                  (tuple(range(request.ppn)),) * request.nodes)
        return None

    def _in_tiers(self, tiers: list[int]):
        """The nodes with free units, best tier first (a node in the first tier holding any
        of its units), then in order: read lazily, jumping from one free unit to the next
        node's, so that a choice that stops early does not pay for every free unit."""
        seen: set[int] = set()
        unit_node, offset, width = self.unit_node, self.offset, self.width
        for t in tiers:
            while t:
                i = unit_node[(t & -t).bit_length() - 1]
                end = offset[i] + width[i]
                t = t >> end << end  # past node i
                if i not in seen:
                    seen.add(i)
                    yield i

    def _free_on(self, i: int, free: int) -> list[int]:
        """The units of `free` on node i, lowest first (read from node i's bits alone)."""
        off = self.offset[i]
        return [off + u for u in set_bits((free >> off) & ((1 << self.width[i]) - 1))]

    def _by_tier(self, i: int, tiers: list[int]) -> list[int]:
        """The free units on node i, best tier first, lowest first within a tier."""
        out, seen = [], set()
        for t in tiers:
            for u in self._free_on(i, t):
                if u not in seen:
                    seen.add(u)
                    out.append(u)
        return out

    def _choose_general(self, request: Request, tiers: list[int]) -> Allocation | None:
        """Shared nodes or core counts: walk nodes best tier first, then in order."""
        free = 0
        for t in tiers:
            free |= t
        order = self._in_tiers(tiers)
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
            order = [whole] if whole is not None else self._in_tiers(tiers)
            for i in order:
                if remaining <= 0:
                    break
                node = self.nodes[i]
                if node.shared:
                    units = self._by_tier(i, tiers)
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
                    units = self._free_on(i, free)
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

    def units_of_nodes(self, names, links: bool = False) -> int:
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


def _chosen_last(back: Iterator[int], eligible: int | None, extra: int) -> int:
    """The `extra` units (of `eligible`) a tier-by-tier choice of the lowest would leave,
    read from the tiers last first (`back`): the last tiers whole, then the highest units
    of the tier where `extra` is reached.  A future start has nearly a tier per segment
    before it and takes all but a few of their units: reading from the back finds those
    few in a few tiers."""
    left = 0
    for t in back:
        if eligible is not None:
            t &= eligible
        n = t.bit_count()
        if n >= extra:
            return left | (t ^ lowest(t, n - extra))
        left |= t
        extra -= n
    raise ValueError("the tiers hold fewer units than their union")


def _lowest_in_tiers(tiers: Iterable[int], eligible: int | None, want: int, union: int | None = None) -> int:
    """The lowest `want` units (of `eligible`) of the first tier, then of the next, ...;
    the tiers hold more than `want` (their `union`, where known: a first tier that is all
    of it, as a start now's often is, is not counted).

    A deep tier list is mostly taken whole, and counting a mask's units costs several
    times what joining two does: after the first tier, tiers are read STRIDE at a time,
    and a stride whose units (the tiers are disjoint) all fit is taken with one count."""
    units = got = 0
    tiers, size = iter(tiers), 1  # (the first tier alone: it settles most short lists, a start now's)
    while stride := list(islice(tiers, size)):
        size = STRIDE
        joined = 0
        for t in stride:
            joined |= t
        if eligible is not None:
            joined &= eligible
        if joined == union:
            return lowest(joined, want)
        n = joined.bit_count()
        if got + n <= want:
            units |= joined
            got += n
            if got == want:
                break
            continue
        if len(stride) == 1:
            return units | lowest(joined, want - got)
        for t in stride:  # (the stride holds the tier where `want` is reached)
            if eligible is not None:
                t &= eligible
            n = t.bit_count()
            if got + n >= want:
                return units | lowest(t, want - got)
            units |= t
            got += n
    return units
