"""A Blue Gene/Q: blocks of midplanes and node boards, wired by torus cables (ALCF's Mira).

A midplane is 512 nodes with 16 node boards of 32 nodes; midplanes sit in a 4-D grid
(A, B, C, D), each dimension a ring cabled midplane to midplane.  A job runs on a *block*:

    a box of midplanes (a corner and a span per dimension).  Spanning a whole ring makes it
    a torus in that dimension, using every cable of the ring; spanning part of one makes it
    a mesh using the cables between its midplanes.  In a span, a block may skip midplanes
    (`skip`): it *passes through* them, taking their cables but not their nodes.
    or 128 or 256 nodes of one midplane (4 or 8 node boards), using no cable.

Units (see core/topology.py): one per node board, then one per cable (the link from a
midplane to the next one along a dimension's ring).  A block's units are its boards and
its cables, so two blocks conflict exactly when they share a board or a cable: relatives are
derived from the wiring, never declared, and the planner needs to know nothing of them.

A job gets the smallest block size >= its node count.  Among the free blocks of that size
it takes the one that blocks the fewest free larger blocks (Cobalt's choice); ties go to
the planner's best tier (tightest in time), then to the block listed first (blocks are
listed by size, then corner in A, B, C, D order, then skips; sub-midplane blocks by board).

Down hardware: a node board (or a whole midplane) marked down takes out the blocks that use
its nodes; its cables still carry pass-through traffic, as on the real machine.  A
reservation with links (`block_passthrough`) holds the cables of its midplanes too.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import product

from ..core.errors import ConfigError, InvalidRequest
from ..core.jobs import Allocation, Request
from ..core.topology import NODE_LIMITS, Node, NodeState, Tiers, Topology, set_bits

MIDPLANE = 512  # nodes
BOARDS = 16  # node boards per midplane
BOARD = MIDPLANE // BOARDS  # 32 nodes
MAX_MIDPLANES = 256  # a grid's most (Sequoia, the largest Blue Gene/Q, had 192)
SMALL = (128, 256)  # sub-midplane block sizes (4 and 8 boards)
SIZES = (512, 1024, 2048, 4096, 8192, 12288, 16384, 24576, 32768, 49152)  # what Mira offered

#: Built-in machines: midplane grid, name prefix, sub-midplane sizes offered, cores per node.
BUILTIN = {
    "mira": dict(dims=(2, 3, 4, 4), prefix="MIR", small=(), cores=16),  # 48 racks; 512 by policy
    "bgq-4rack": dict(dims=(1, 1, 4, 2), prefix="BGQ", small=SMALL, cores=16),  # Cetus' size
    "bgq-1rack": dict(dims=(1, 1, 1, 2), prefix="BGQ", small=SMALL, cores=16),
}


@dataclass(frozen=True)
class Block:
    """A block: its name, size in nodes, used midplanes and boards, cables, pass-throughs."""

    name: str
    size: int
    midplanes: tuple[int, ...]  # midplanes whose nodes it uses (whole or in part)
    boards: int  # units: its node boards
    cables: int  # units: the cables it takes
    passthrough: tuple[int, ...] = ()  # midplanes it passes through
    units: int = -1  # boards | cables (worked out once)

    def __post_init__(self):
        object.__setattr__(self, "units", self.boards | self.cables)


class BlueGene(Topology):
    places_blocks = True
    """Blocks on a grid of midplanes; see the module docstring for the rules."""

    links_are_units = True  # (a reservation may hold a midplane's cables: setres -L)

    def __init__(self, dims: tuple[int, ...], prefix: str = "BGQ", cores: int = 16,
                 sizes: tuple[int, ...] = SIZES, small: tuple[int, ...] = SMALL,
                 passthrough: bool = False, blocks: list[dict] | None = None):
        if len(dims) != 4 or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in dims):
            raise ConfigError(f"machine.dims: four midplane counts >= 1 (A, B, C, D), not {list(dims)!r}")
        if math.prod(dims) > MAX_MIDPLANES:  # (the conflicts between blocks grow as its square)
            raise ConfigError(f"machine.dims: {math.prod(dims)} midplanes, more than {MAX_MIDPLANES}")
        if not isinstance(cores, int) or isinstance(cores, bool) or not 1 <= cores <= NODE_LIMITS["cores"]:
            raise ConfigError(f"machine.cores: must be an integer from 1 to {NODE_LIMITS['cores']}")
        self.dims, self.prefix, self.cores = tuple(dims), prefix, cores
        self.midplane_count = math.prod(dims)
        self.node_count = self.midplane_count * MIDPLANE
        m = self.midplane_count
        self._cable_base = m * BOARDS
        # midplane and board names: rack R<hex>, midplane M0/M1, board N00-N15
        self.midplane_names = [f"R{i // 2:02X}-M{i % 2}" for i in range(m)]
        self.nodes = [Node(f"{mp}-N{j:02d}", cores=BOARD * cores, nid=i * BOARDS + j)
                      for i, mp in enumerate(self.midplane_names) for j in range(BOARDS)]
        self.by_name = {n.name: n.nid for n in self.nodes}
        self.by_midplane = {name: i for i, name in enumerate(self.midplane_names)}
        self._midplane_nodes = {name: Node(name, cores=MIDPLANE * cores, nid=i)
                                for i, name in enumerate(self.midplane_names)}
        if blocks is None:
            self.blocks = self._generate(sizes, small, passthrough)
        else:
            self.blocks = self._listed(blocks)
        if not self.blocks:
            raise ConfigError("machine: no block fits the machine")
        self.by_block = {b.name: k for k, b in enumerate(self.blocks)}
        self.sizes = sorted({b.size for b in self.blocks})
        # for each block, the larger blocks it conflicts with (bits over block indices):
        # built once per machine, so that a choice costs a few operations per candidate
        self._larger = []
        for b in self.blocks:
            bits = 0
            for k, o in enumerate(self.blocks):
                if o.size > b.size and o.units & b.units:
                    bits |= 1 << k
            self._larger.append(bits)
        self._eligible: dict[tuple, int] = {}
        self._candidates_of: dict[tuple, list[int]] = {}
        self._size: dict[tuple[int, int], int] = {}  # (nodes, cores) -> block size
        self._need: dict[tuple, int] = {}
        self._available: int | None = None

    # --- the wiring ------------------------------------------------------------------
    def midplane(self, coords) -> int:
        """The index of the midplane at grid position `coords` (A, B, C, D)."""
        i = 0
        for c, d in zip(coords, self.dims):
            i = i * d + c
        return i

    def coords(self, i: int) -> tuple[int, ...]:
        out = []
        for d in reversed(self.dims):
            out.append(i % d)
            i //= d
        return tuple(reversed(out))

    def cable(self, dim: int, coords) -> int:
        """The unit of the cable from the midplane at `coords` to the next one along `dim`."""
        return self._cable_base + dim * self.midplane_count + self.midplane(coords)

    def board_units(self, i: int) -> int:
        return ((1 << BOARDS) - 1) << (i * BOARDS)

    def cables_of(self, i: int) -> int:
        """Every cable into or out of midplane `i` (what its boards' optics carry)."""
        c, units = self.coords(i), 0
        for dim, ring in enumerate(self.dims):
            if ring > 1:
                back = c[:dim] + ((c[dim] - 1) % ring,) + c[dim + 1:]
                units |= 1 << self.cable(dim, c) | 1 << self.cable(dim, back)
        return units

    def box(self, corner, span, skip=((),) * 4, name: str | None = None) -> Block:
        """The block at `corner` spanning `span` midplanes per dimension (a whole ring: a
        torus), passing through the offsets `skip[d]` of its span in dimension d."""
        dims = self.dims
        used_pos, span_pos = [], []
        for d in range(4):
            if not 1 <= span[d] <= dims[d] or not 0 <= corner[d] < dims[d] or \
                    (span[d] < dims[d] and corner[d] + span[d] > dims[d]):
                raise ConfigError(f"machine.blocks: span {list(span)} at {list(corner)} does not fit "
                                  f"the midplane grid {list(dims)}")
            if any(not 0 <= o < span[d] for o in skip[d]) or len(set(skip[d])) >= span[d]:
                raise ConfigError(f"machine.blocks: skip {list(skip[d])} does not fit span {span[d]}")
            pos = [(corner[d] + o) % dims[d] for o in range(span[d])]
            span_pos.append(pos)
            used_pos.append([p for o, p in enumerate(pos) if o not in skip[d]])
        used = [self.midplane(c) for c in product(*used_pos)]
        boards = 0
        for i in used:
            boards |= self.board_units(i)
        cables = 0
        for d in range(4):
            if dims[d] == 1:
                continue
            links = span_pos[d] if span[d] == dims[d] else span_pos[d][:-1]  # torus: the whole ring
            lines = [used_pos[k] if k != d else [0] for k in range(4)]
            for line in product(*lines):
                for p in links:
                    cables |= 1 << self.cable(d, line[:d] + (p,) + line[d + 1:])
        passing = [self.midplane(c) for c in product(*span_pos) if self.midplane(c) not in used]
        size = len(used) * MIDPLANE
        if name is None:
            name = (f"{self.prefix}-{''.join(map(str, corner))}-{''.join(map(str, span))}-{size}" +
                    "".join(f"-S{'ABCD'[d]}{''.join(map(str, skip[d]))}" for d in range(4) if skip[d]))
        return Block(name, size, tuple(sorted(used)), boards, cables, tuple(sorted(passing)))

    def small_block(self, i: int, first: int, size: int, name: str | None = None) -> Block:
        """A block of `size` nodes on boards first.. of midplane `i`."""
        count = size // BOARD
        if size % BOARD or not 0 < count < BOARDS or first % count or first + count > BOARDS:
            raise ConfigError(f"machine.blocks: {size} nodes from board {first} is not a sub-midplane block")
        boards = ((1 << count) - 1) << (i * BOARDS + first)
        if name is None:
            name = f"{self.prefix}-{''.join(map(str, self.coords(i)))}-N{first:02d}-{size}"
        return Block(name, size, (i,), boards, 0)

    def _generate(self, sizes, small, passthrough: bool) -> list[Block]:
        """Every aligned box whose size is offered (a part of a ring: spans of 1, 2, 4, ...
        at multiples of the span, or at any start when the ring is not a multiple of it;
        the whole ring), with `passthrough` also the whole rings using every other midplane
        (on an odd ring, from each corner: on a ring of 3, the first and the last), and the
        sub-midplane blocks of each midplane."""
        for s in sizes:
            if not isinstance(s, int) or isinstance(s, bool) or s < MIDPLANE or s % MIDPLANE:
                raise ConfigError(f"machine.sizes: {s!r} is not a multiple of {MIDPLANE} nodes")
        for s in small:
            if s not in SMALL:
                raise ConfigError(f"machine.small: {s!r} is not one of {', '.join(map(str, SMALL))}")
        choices = []
        for ring in self.dims:
            opts = []
            span = 1
            while span < ring:
                step = span if ring % span == 0 else 1
                opts += [(c, span, ()) for c in range(0, ring - span + 1, step)]
                span *= 2
            opts.append((0, ring, ()))
            if passthrough and ring >= 4 and ring % 2 == 0:  # every other midplane, a torus through the rest
                opts += [(0, ring, tuple(range(1, ring, 2))), (1, ring, tuple(range(1, ring, 2)))]
            elif passthrough and ring >= 3:  # an odd ring: from each corner every other but the last,
                # a torus through the rest (Mira's B ring of 3: "2K, skip 2K, 2K" is a 4K block)
                opts += [(c, ring, tuple(range(1, ring - 1, 2))) for c in range(ring)]
            choices.append(opts)
        wanted = set(sizes)
        out = []
        for combo in product(*choices):
            corner = tuple(c for c, _, _ in combo)
            span = tuple(s for _, s, _ in combo)
            skip = tuple(k for _, _, k in combo)
            used = math.prod(s - len(k) for _, s, k in combo)
            if used * MIDPLANE in wanted:
                out.append(self.box(corner, span, skip))
        for i in range(self.midplane_count):
            for size in sorted(small):
                step = size // BOARD
                out += [self.small_block(i, first, size) for first in range(0, BOARDS, step)]
        out.sort(key=lambda b: b.size)  # (stable: corner order within a size)
        return out

    def _listed(self, tables: list[dict]) -> list[Block]:
        """Blocks listed in the config: `{name, corner, span, skip}` or `{name, midplane,
        board, size}` for a sub-midplane block."""
        out, names = [], set()
        for k, t in enumerate(tables):
            where = f"machine.blocks[{k}]"
            if not isinstance(t, dict) or not isinstance(t.get("name"), str) or not t["name"]:
                raise ConfigError(f"{where}.name: missing")
            try:
                if "midplane" in t:
                    extra = set(t) - {"name", "midplane", "board", "size"}
                    if extra:
                        raise ConfigError(f"{where}.{sorted(extra)[0]}: unknown key")
                    i = self.by_midplane.get(t["midplane"])
                    if i is None:
                        raise ConfigError(f"{where}.midplane: unknown midplane {t['midplane']!r}")
                    b = self.small_block(i, int(t.get("board", 0)), int(t.get("size", 0)), t["name"])
                else:
                    extra = set(t) - {"name", "corner", "span", "skip"}
                    if extra:
                        raise ConfigError(f"{where}.{sorted(extra)[0]}: unknown key")
                    corner, span = t.get("corner"), t.get("span")
                    skip = t.get("skip", [[]] * 4)
                    for key, v in (("corner", corner), ("span", span), ("skip", skip)):
                        if not isinstance(v, list) or len(v) != 4:
                            raise ConfigError(f"{where}.{key}: must be a list of four (A, B, C, D)")
                    b = self.box(tuple(corner), tuple(span), tuple(tuple(s) for s in skip), t["name"])
            except (TypeError, ValueError) as e:
                raise ConfigError(f"{where}: {e}") from None
            except ConfigError as e:
                raise ConfigError(f"{where}: {str(e).split(': ', 1)[-1]}") from None
            if b.name in names:
                raise ConfigError(f"{where}.name: block {b.name!r} is listed twice")
            names.add(b.name)
            out.append(b)
        out.sort(key=lambda b: b.size)
        return out

    @classmethod
    def from_config(cls, table: dict) -> "BlueGene":
        """`{kind = "bluegene", name = "mira"}` or `{kind = "bluegene", dims = [..], ...}`."""
        known = {"kind", "name", "dims", "prefix", "cores", "sizes", "small", "passthrough", "blocks"}
        extra = set(table) - known
        if extra:
            raise ConfigError(f"machine.{sorted(extra)[0]}: unknown key")
        args = {}
        if "name" in table:
            if table["name"] not in BUILTIN:
                raise ConfigError(f"machine.name: {table['name']!r} is not a built-in Blue Gene "
                                  f"({', '.join(BUILTIN)})")
            args.update(BUILTIN[table["name"]])
        elif "dims" not in table:
            raise ConfigError("machine.dims: give a built-in name or the midplane grid")
        for key in ("dims", "prefix", "cores", "sizes", "small", "passthrough", "blocks"):
            if key in table:
                args[key] = table[key]
        for key in ("dims", "sizes", "small"):
            if key in args:
                if not isinstance(args[key], (list, tuple)):
                    raise ConfigError(f"machine.{key}: must be a list")
                args[key] = tuple(args[key])
        if "blocks" in args and not isinstance(args["blocks"], list):
            raise ConfigError("machine.blocks: must be a list of tables")
        if not isinstance(args.get("prefix", "BGQ"), str) or not isinstance(args.get("passthrough", False), bool):
            raise ConfigError("machine.prefix must be a string and machine.passthrough true or false")
        return cls(**args)

    # --- blocks for people -----------------------------------------------------------
    def place(self, nodes: tuple[str, ...]) -> str:
        return nodes[0]  # (a job's allocation names its block)

    def place_size(self, nodes: tuple[str, ...]) -> int:
        return self.block(nodes[0]).size

    def block(self, name: str) -> Block:
        k = self.by_block.get(name)
        if k is None:
            raise InvalidRequest(f"unknown block {name!r}")
        return self.blocks[k]

    def geometry(self, block: Block) -> tuple[int, ...]:
        """Its shape in nodes, A x B x C x D x E, as Cobalt's --geometry names it: 4 nodes
        a midplane used along each of A-D, 2 along E; a sub-midplane block's by its size."""
        if block.size < MIDPLANE:  # (Cobalt's: 2 each way, doubled along C, D, A, B in turn)
            shape = [2] * 5
            for d in (2, 3, 0, 1)[:(block.size // BOARD).bit_length() - 1]:
                shape[d] *= 2
            return tuple(shape)
        coords = [self.coords(i) for i in block.midplanes]
        return tuple(4 * len({c[d] for c in coords}) for d in range(4)) + (2,)

    def block_size(self, nodes: int) -> int | None:
        """The smallest block size holding `nodes` nodes (None: larger than every block)."""
        return next((s for s in self.sizes if s >= nodes), None)

    def block_states(self, busy: dict[str, str]) -> list[tuple[Block, str]]:
        """Each block's state given the running jobs' blocks (`busy`: job id -> block name):
        `busy (<job>)`, `down` (a board of its own is down), `blocked (<block>)` naming a busy
        relative, or `idle` (a relative that is down for a board this block does not hold
        leaves it free: a job can start there)."""
        avail = self.available()
        taken = {self.by_block[name]: jid for jid, name in busy.items()}
        out = []
        for k, b in enumerate(self.blocks):
            if k in taken:
                out.append((b, f"busy ({taken[k]})"))
            elif b.boards & avail != b.boards:
                out.append((b, "down"))
            else:
                who = next((self.blocks[j].name for j in taken if self.blocks[j].units & b.units), None)
                out.append((b, f"blocked ({who})" if who else "idle"))
        return out

    def midplanes(self) -> list[tuple[str, list[Node]]]:
        """Each midplane's name and its node boards, in rack order (what operators list)."""
        return [(mp, self.nodes[i * BOARDS:(i + 1) * BOARDS]) for i, mp in enumerate(self.midplane_names)]

    # --- Topology --------------------------------------------------------------------
    def all_nodes(self) -> list[Node]:
        return self.nodes

    def covered(self, name: str) -> tuple[str, ...]:
        """A block's or a midplane's node boards."""
        if name in self.by_block:
            return tuple(self.nodes[i].name for i in set_bits(self.blocks[self.by_block[name]].boards))
        if name in self.by_midplane:
            i = self.by_midplane[name]
            return tuple(n.name for n in self.nodes[i * BOARDS:(i + 1) * BOARDS])
        return (name,)

    def node(self, name: str) -> Node:
        if name in self.by_name:
            return self.nodes[self.by_name[name]]
        if name in self._midplane_nodes:
            return self._midplane_nodes[name]
        raise InvalidRequest(f"unknown node board or midplane {name!r}")

    def set_state(self, name: str, state: NodeState) -> None:
        node = self.node(name)
        if name in self._midplane_nodes:  # a midplane: all its boards
            node.state = state
            for j in range(BOARDS):
                self.nodes[node.nid * BOARDS + j].state = state
        else:
            node.state = state
        self._available = None

    def available(self) -> int:
        if self._available is None:
            mask = (1 << (self._cable_base + 4 * self.midplane_count)) - 1
            for n in self.nodes:
                if n.state != NodeState.UP:
                    mask ^= 1 << n.nid
            self._available = mask
        return self._available

    def shape(self, request: Request) -> tuple:
        return (self.size(request), request.within, bool(request.gpus))

    def _candidates(self, request: Request) -> list[int]:
        """Indices of the blocks `request` may get: its block size, within its area."""
        key = self.shape(request)
        out = self._candidates_of.get(key)
        if out is None:
            out = self._candidates_of[key] = self._find_candidates(request)
        return out

    def _find_candidates(self, request: Request) -> list[int]:
        if request.gpus:  # (a Blue Gene has none)
            return []
        size = self.size(request)
        out = [k for k, b in enumerate(self.blocks) if b.size == size]
        named = {self.by_block.get(n) for n in request.within}
        if request.within and None not in named and all(self.blocks[k].size == size for k in named):
            return [k for k in out if k in named]  # blocks of its size, named: those alone (a --geometry)
        if request.within:  # blocks whose used and passed-through midplanes lie in the area
            area = self.units_of_nodes(request.within)
            inside = []
            for k in out:
                b = self.blocks[k]
                mine = b.boards
                for i in b.passthrough:
                    mine |= self.board_units(i)
                if mine & area == mine:
                    inside.append(k)
            out = inside
        return out

    def eligible(self, request: Request) -> int:
        key = self.shape(request)
        mask = self._eligible.get(key)
        if mask is None:
            mask = 0
            for k in self._candidates(request):
                mask |= self.blocks[k].units
            self._eligible[key] = mask
        return mask

    def need(self, request: Request) -> int:
        """Its boards and the fewest cables a block of its size takes."""
        key = self.shape(request)
        need = self._need.get(key)
        if need is None:
            cands = self._candidates(request)
            need = self._need[key] = min((self.blocks[k].units.bit_count() for k in cands),
                                         default=self.size(request) // BOARD)
        return need

    def size(self, request: Request) -> int:
        key = (request.nodes, request.cores)
        size = self._size.get(key)
        if size is None:
            nodes = math.ceil(request.cores / self.cores) if request.cores else request.nodes
            size = self.block_size(nodes)
            size = self._size[key] = size if size is not None else nodes  # (too large: fits nowhere)
        return size

    def occupies(self, request: Request) -> int:
        return self.size(request) * self.cores

    def choose(self, request: Request, tiers: Tiers) -> Allocation | None:
        free, tiers = tiers.units, list(tiers)  # (read more than once)
        blocks, free_bits = self.blocks, 0
        cands = [k for k in self._candidates(request) if blocks[k].units & free == blocks[k].units]
        if not cands:
            return None
        wanted = 0
        for k in cands:
            wanted |= self._larger[k]
        for k in set_bits(wanted):  # which larger relatives are free now
            if blocks[k].units & free == blocks[k].units:
                free_bits |= 1 << k

        def tier(k: int) -> int:
            units, seen = blocks[k].units, 0
            for r, t in enumerate(tiers):
                seen |= t
                if units & seen == units:
                    return r
            return len(tiers)
        best = min(cands, key=lambda k: ((self._larger[k] & free_bits).bit_count(), tier(k), k))
        b = blocks[best]
        return Allocation(b.units, (b.name,), (tuple(range(self.cores)),))

    def units_of(self, nodes, cores) -> int:
        """A job's units: its block's boards and cables."""
        mask = 0
        for name in nodes:
            mask |= self.block(name).units
        return mask

    def units_of_nodes(self, names, links: bool = False) -> int:
        """Units of named blocks, midplanes or boards (their boards; with `links`, the
        cables of their midplanes too: a compute-and-links reservation)."""
        mask = 0
        for name in names:
            if name in self.by_block:
                b = self.blocks[self.by_block[name]]
                mask |= b.boards
                mids = b.midplanes + b.passthrough
            elif name in self.by_midplane:
                i = self.by_midplane[name]
                mask |= self.board_units(i)
                mids = (i,)
            elif name in self.by_name:
                mask |= 1 << self.by_name[name]
                mids = (self.by_name[name] // BOARDS,)
            else:
                raise InvalidRequest(f"unknown block, midplane or node board {name!r}")
            if links:
                for i in mids:
                    mask |= self.cables_of(i)
        return mask

    def measure(self, units: int) -> int:
        """Nodes: 32 per board (cables are not capacity)."""
        return (units & ((1 << self._cable_base) - 1)).bit_count() * BOARD

    def processors(self, units: int) -> int:
        boards = units & ((1 << self._cable_base) - 1)
        return boards.bit_count() * BOARD * self.cores
