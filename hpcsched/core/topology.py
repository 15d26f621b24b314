"""Where a request can run: the machine interface every machine in `machines/` implements.

The planner never counts nodes itself.  It works on *units*, bits of a Python int: a
topology numbers its allocatable units, tells which units a request may use
(`eligible`), and picks a concrete allocation out of the units that are free over a
window (`choose`).  A node pool makes one unit per exclusive node and one per core of a
shared node; a Blue Gene partition machine makes units of midplanes and cables, so that
partitions sharing any of them block each other without the planner knowing.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from enum import Enum

from .errors import InvalidRequest
from .jobs import Allocation, Request

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
    """The int with exactly `bits` set; linear in the highest bit, not in len(bits)**2
    (a few bits, as a small job takes on a large machine, are simply or-ed in)."""
    if len(bits) <= 16:
        m = 0
        for b in bits:
            m |= 1 << b
        return m
    digits = bytearray(b"0" * (max(bits) + 1))
    for b in bits:
        digits[b] = 49  # ord("1")
    digits.reverse()
    return int(digits, 2)


class Tiers:
    """Free units split into disjoint preference tiers, best first: what `Topology.choose`
    picks from.  `units`, their union, is known up front; the tiers may be worked out as
    they are read (see fitting.tiers), so they are read once, before the profile changes,
    first to last or, where `last_first` offers it, last to first."""

    __slots__ = ("units", "_tiers", "_last_first")

    def __init__(self, units: int, tiers: Iterable[int] | None = None,
                 last_first: Callable[[], Iterator[int]] | None = None):
        self.units, self._tiers = units, (units,) if tiers is None else tiers
        self._last_first = last_first

    def __iter__(self) -> Iterator[int]:
        return iter(self._tiers)

    def last_first(self) -> Iterator[int] | None:
        """The same tiers, last first, where they are as cheap to read that way; else None."""
        return self._last_first() if self._last_first is not None else None


class Topology(ABC):
    """What the planner needs to know about a machine."""

    #: does a job get a whole block (a Blue Gene's), named for it, rather than nodes with
    #: node ids?  (Cobalt's c1..c64 modes and geometries, partlist, block sizes.)
    places_blocks = False
    numbered = False  # its tools name nodes by number (a Cray's nids: `node_ids`, `places`)

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
        return (request.ppn, request.mem, request.features, bool(request.cores), request.within, request.gpus,
                request.exclusive)

    @abstractmethod
    def need(self, request: Request) -> int:
        """A lower bound on the units `request` takes: a cheap first test of fit."""

    @abstractmethod
    def size(self, request: Request) -> int:
        """Nodes `request` occupies: what routing thresholds and size classes see."""

    def occupies(self, request: Request) -> int:
        """Processors `request` holds once placed: every core of the whole nodes it gets
        (Simon's bins count these), or only its own cores on shared nodes."""
        return request.processors

    @abstractmethod
    def choose(self, request: Request, tiers: Tiers) -> Allocation | None:
        """Pick units for `request` from the free units `tiers`, best tier first, or None."""

    @abstractmethod
    def units_of(self, nodes: tuple[str, ...], cores: tuple[tuple[int, ...], ...]) -> int:
        """The units of an allocation recorded by node and core (for restoring state)."""

    #: are the network links units a reservation can hold (a Blue Gene's cables)?
    links_are_units = False

    @abstractmethod
    def units_of_nodes(self, names, links: bool = False) -> int:
        """Every unit of the named nodes (what a reservation on them holds); with `links`,
        the network links they carry as well, on machines whose links are units."""

    def interchangeable(self, request: Request) -> bool:
        """Would any `need(request)` available units make an allocation for it?  (Then a
        future reservation can be held as a count: see Profile.hold.)"""
        return False

    def fits_anywhere(self, request: Request) -> bool:
        """Could the request ever run here, with every node up?"""
        return self.choose(request, Tiers(self.eligible(request))) is not None

    # --- nodes as people and commands name them ----------------------------------------
    @abstractmethod
    def all_nodes(self) -> list["Node"]:
        """Every node, in configuration order, with its state."""

    @abstractmethod
    def node(self, name: str) -> "Node":
        """The node called `name`; InvalidRequest if there is none."""

    @abstractmethod
    def set_state(self, name: str, state: "NodeState") -> None:
        """Mark a node up, down, offline or bad (InvalidRequest for an unknown name)."""

    def covered(self, name: str) -> tuple[str, ...]:
        """The listed nodes (`all_nodes`' names) an allocation's node `name` covers: itself,
        on machines whose allocations name listed nodes."""
        return (name,)

    # --- places as commands name them (Cobalt's location) --------------------------------
    def place(self, nodes: tuple[str, ...]) -> str:
        """Where a job on `nodes` runs, as the machine's own tools name it: a host list here
        (a Blue Gene names its block, a Cray its node-id ranges)."""
        from .nodelist import compress
        return compress(list(nodes))

    def places(self, text: str) -> tuple[str, ...]:
        """The nodes a place names (`place` read back, or several joined by commas);
        InvalidRequest if it names a node this machine does not have, or none."""
        from .nodelist import expand
        names = tuple(expand(text))
        if not names:
            raise InvalidRequest("it names nothing")
        self.units_of_nodes(names)
        return names

    def node_ids(self, nodes: tuple[str, ...]) -> str | None:
        """The machine's own numbers of `nodes` as its tools list them (a Cray's `nid_list`,
        of those it still has); None: it numbers its nodes by name alone."""
        return None

    def place_size(self, nodes: tuple[str, ...]) -> int:
        """The machine nodes the place `nodes` is (a Blue Gene's block: its size)."""
        return len(nodes)

    def node_states(self) -> dict[str, str]:
        """Nodes not up, by name (what the scheduler's state saves)."""
        return {n.name: n.state.value for n in self.all_nodes() if n.state != NodeState.UP}

    def measure(self, units: int) -> int:
        """How much of the machine `units` are, in the units utilization is counted in
        (nodes, or cores of shared nodes); a machine whose links are units leaves them out."""
        return units.bit_count()

    @abstractmethod
    def processors(self, units: int) -> int:
        """How many processors (cores) `units` stand for."""


class NodeState(str, Enum):
    """A node's state as operators and pre-job scans set it."""

    UP = "up"
    DOWN = "down"
    OFFLINE = "offline"  # set by an operator: finish what runs, start nothing new
    BAD = "bad"  # failed a pre-job scan: on the bad list until cleared


#: the most a node may have of each, and a machine of units (a config past them is refused,
#: not built): cores as Slurm's per-node CPU count, memory (MB) within a float's exact
#: integers, ids as a node-id list can name them, units as masks stay quick to copy
NODE_LIMITS = {"cores": 1 << 16, "gpus": 1 << 16, "memory": 1 << 53, "first_nid": 10 ** 12 - 1}
MAX_UNITS = 1 << 24


@dataclass
class Node:
    """A node as commands show it, whatever the machine."""

    name: str
    cores: int = 1
    memory: int = 0  # MB; 0 means not tracked
    features: frozenset[str] = field(default_factory=frozenset)
    shared: bool = False  # True: jobs share it core by core; False: one job at a time
    nid: int = 0  # numeric id (PSC's nid), by default the node's position
    state: NodeState = NodeState.UP
    gpus: int = 0  # GPUs on the node
