"""A Cray: compute nodes numbered by nid on a 3-D torus of routers (PSC's XT3, NICS' Kraken,
NCSA's Blue Waters).

Routers sit in an X x Y x Z grid; each carries `per_router` nodes (SeaStar on the XT: one;
Gemini on the XE/XK: two).  Slot s = ((x * Y + y) * Z + z) * per_router + p is the nid;
compute nodes take the first slots and the rest are service nodes, which are not
scheduled.  A node pool underneath (nodepool.py) does everything but placement; units are
nids, so a box of routers is a box of bits.

Placement, the machine's choice (the planner does not change):
    first-fit   the lowest free nids (ALPS' default)
    contiguous  one run of consecutive nids (Simon)
    cuboid      a box of routers wholly free, the most compact shape that holds the job
                (Blue Waters' topology-aware scheduling): shapes by volume, then by the
                spread of their sides, then (dx, dy, dz); corners lowest nid first, in the
                planner's best tiers first.  Boxes do not wrap around the torus.  The job
                gets every node of its box, as a prism was a job's own on Blue Waters: the
                nodes beyond its request idle with it (and a restored state or a kept
                reservation holds the same box).
"""
from __future__ import annotations

import math
import re

from ..core.errors import ConfigError, InvalidRequest
from ..core.nodelist import compress_nids, expand_nids
from ..core.jobs import Allocation, Request
from ..core.topology import MAX_UNITS, NODE_LIMITS, Node, Tiers, set_bits
from .nodepool import NodePool

#: Built-in machines: (count, cores, features[, gpus]) groups in nid order, torus, nodes per router.
BUILTIN = {
    "xt3": dict(groups=[(2068, 2, ())], torus=(11, 12, 16), per_router=1),  # PSC's BigBen (SeaStar)
    "kraken": dict(groups=[(9408, 12, ())], torus=(25, 16, 24), per_router=1),  # NICS' XT5
    # NCSA's Blue Waters: 22,640 XE6 nodes (32 cores) and 4,228 XK7 nodes (16 cores, one GPU)
    # on a 24 x 24 x 24 Gemini torus, two nodes a router ("System Summary", NCSA, the drain
    # paper's reference [2]); the paper's drain basis counts 26,846 of these 26,868 nodes as
    # schedulable, without naming the 22 left out (drain --nodes 26846 gives its basis)
    "bluewaters": dict(groups=[(22640, 32, ("xe",)), (4228, 16, ("xk",), 1)], torus=(24, 24, 24), per_router=2),
}
MAX_SHAPES = 24  # box shapes tried per request, the most compact first


def _repunit(n: int, stride: int) -> int:
    """n set bits, `stride` apart, from bit 0: ((1 << n*stride) - 1) // ((1 << stride) - 1),
    made by doubling (a few shifts; the division is quadratic in the bits, 20x slower at
    Blue Waters' plane strides)."""
    r, have = (1, 1) if n > 0 else (0, 0)
    while have < n:
        step = min(have, n - have)
        r |= r << (step * stride)
        have += step
    return r


class Cray(NodePool):
    """Nid-numbered nodes on a torus of routers; see the module docstring."""

    numbered = True

    def __init__(self, groups, torus=(1, 1, 1), per_router: int = 1, placement: str = "first-fit"):
        if len(torus) != 3 or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in torus):
            raise ConfigError(f"machine.torus: three router counts >= 1 (X, Y, Z), not {list(torus)!r}")
        if not isinstance(per_router, int) or isinstance(per_router, bool) or per_router not in (1, 2, 4):
            raise ConfigError("machine.per_router: must be 1, 2 or 4")
        slots = math.prod(torus) * per_router
        if slots > MAX_UNITS:
            raise ConfigError(f"machine.torus: {slots} node slots, more than {MAX_UNITS}")
        if sum(g[0] for g in groups) > slots:
            raise ConfigError(f"machine: {sum(g[0] for g in groups)} nodes do not fit a {'x'.join(map(str, torus))} "
                              f"torus of {per_router} node(s) per router ({slots} slots)")
        nodes = []
        for count, cores, features, *gpus in groups:
            for _ in range(count):
                nodes.append(Node(f"nid{len(nodes):05d}", cores, 0, frozenset(features), nid=len(nodes),
                                  gpus=gpus[0] if gpus else 0))
        super().__init__(nodes, "first-fit" if placement == "cuboid" else placement)
        self.placement = placement
        self.torus, self.per_router = tuple(torus), per_router
        X, Y, Z = torus
        P = per_router
        self._strides = (Y * Z * P, Z * P, P)
        self._shapes: dict[int, list[tuple[int, int, int]]] = {}
        self._valid: dict[tuple[int, int, int], int] = {}
        self._box: dict[tuple[int, int, int], int] = {}
        # the first node of every router (p = 0), and of every router whose all nodes exist
        self._router_bits = _repunit(X * Y * Z, P)

    @classmethod
    def from_config(cls, table: dict, placement: str = "first-fit") -> "Cray":
        """`{kind = "cray", name = "bluewaters"}`, or `{kind = "cray", torus = [x, y, z],
        per_router = 2, nodes = [{count = .., cores = .., features = [..]}, ..]}`."""
        extra = set(table) - {"kind", "name", "torus", "per_router", "nodes"}
        if extra:
            raise ConfigError(f"machine.{sorted(extra)[0]}: unknown key")
        args: dict = {}
        if "name" in table:
            if table["name"] not in BUILTIN:
                raise ConfigError(f"machine.name: {table['name']!r} is not a built-in Cray ({', '.join(BUILTIN)})")
            args.update(BUILTIN[table["name"]])
        elif "nodes" not in table or "torus" not in table:
            raise ConfigError("machine.nodes: give a built-in name, or the torus and the node groups")
        if "torus" in table:
            if not isinstance(table["torus"], list):
                raise ConfigError("machine.torus: must be a list of three router counts")
            args["torus"] = tuple(table["torus"])
        if "per_router" in table:
            args["per_router"] = table["per_router"]
        if "nodes" in table:
            groups = []
            if not isinstance(table["nodes"], list) or not table["nodes"]:
                raise ConfigError("machine.nodes: must be a list of {count, cores, features, gpus} tables")
            for k, g in enumerate(table["nodes"]):
                where = f"machine.nodes[{k}]"
                if not isinstance(g, dict) or set(g) - {"count", "cores", "features", "gpus"}:
                    raise ConfigError(f"{where}: a table of count, cores, features and gpus")
                count, cores, feats, gpus = g.get("count"), g.get("cores", 1), g.get("features", []), g.get("gpus", 0)
                for key, v, low, high in (("count", count, 1, MAX_UNITS), ("cores", cores, 1, NODE_LIMITS["cores"]),
                                          ("gpus", gpus, 0, NODE_LIMITS["gpus"])):
                    if not isinstance(v, int) or isinstance(v, bool) or not low <= v <= high:
                        raise ConfigError(f"{where}.{key}: must be an integer from {low} to {high}")
                if not isinstance(feats, list) or not all(isinstance(f, str) for f in feats):
                    raise ConfigError(f"{where}.features: must be a list of strings")
                groups.append((count, cores, tuple(feats), gpus))
            args["groups"] = groups
        return cls(placement=placement, **args)

    def place(self, nodes: tuple[str, ...]) -> str:
        return compress_nids([self.node(n).nid for n in nodes])

    def node_ids(self, nodes: tuple[str, ...]) -> str:
        known = self.by_name  # (a finished job's node may since have left the configuration)
        return compress_nids([self.nodes[known[n]].nid for n in nodes if n in known])

    def places(self, text: str) -> tuple[str, ...]:
        """Node-id ranges, `10..12,30` or Cobalt's `10-12,30`."""
        nids = set(expand_nids(re.sub(r"(?<=[0-9])-(?=[0-9])", "..", text)))
        names = tuple(n.name for n in self.nodes if n.nid in nids)
        if len(names) != len(nids):
            raise InvalidRequest(f"no compute node has nid {min(nids - {self.node(n).nid for n in names})}")
        if not names:
            raise InvalidRequest("it names nothing")
        return names

    def position(self, nid: int) -> tuple[int, int, int]:
        """The (x, y, z) of the router carrying `nid`."""
        r = nid // self.per_router
        X, Y, Z = self.torus
        return (r // (Y * Z), r // Z % Y, r % Z)

    # --- cuboid placement ------------------------------------------------------------
    def shapes(self, nodes: int) -> list[tuple[int, int, int]]:
        """Box shapes (routers per side) holding `nodes` nodes, the most compact first."""
        out = self._shapes.get(nodes)
        if out is None:
            X, Y, Z = self.torus
            routers = math.ceil(nodes / self.per_router)
            cands = set()
            for dx in range(1, X + 1):
                for dy in range(1, Y + 1):
                    dz = math.ceil(routers / (dx * dy))
                    if dz <= Z:
                        cands.add((dx, dy, dz))
                    if dx * dy >= routers:
                        break
            out = sorted(cands, key=lambda s: (s[0] * s[1] * s[2], max(s) - min(s), s))[:MAX_SHAPES]
            self._shapes[nodes] = out
        return out

    def _corners_valid(self, shape) -> int:
        """First-node bits of routers where a box of `shape` stays inside the grid (and,
        made alongside, the box's nodes at the origin).  Both are a small pattern repeated
        at a stride, so a multiplication by a repunit lays each out without carries."""
        mask = self._valid.get(shape)
        if mask is None:
            X, Y, Z = self.torus
            P, (sx, sy, _) = self.per_router, self._strides
            dx, dy, dz = shape
            column = _repunit(Z - dz + 1, P)  # the corners' z, p = 0
            mask = self._valid[shape] = column * _repunit(Y - dy + 1, sy) * _repunit(X - dx + 1, sx)
            self._box[shape] = ((1 << (dz * P)) - 1) * _repunit(dy, sy) * _repunit(dx, sx)
        return mask

    def _corners(self, free: int, shape) -> int:
        """First-node bits of routers where a box of `shape` has every node free."""
        P = self.per_router
        g = free
        for p in range(1, P):  # a router is free when all its nodes are
            g &= free >> p
        g &= self._router_bits
        for d, length in enumerate(shape):
            stride, have = self._strides[d], 1
            while have < length and g:
                step = min(have, length - have)
                g &= g >> (step * stride)
                have += step
        return g & self._corners_valid(shape)

    def choose(self, request: Request, tiers: Tiers) -> Allocation | None:
        if self.placement != "cuboid" or request.cores or not self.exclusive:
            return super().choose(request, tiers)
        eligible, want = self.eligible(request), request.nodes
        shapes = self.shapes(want)
        free = 0
        for t in tiers:
            free |= t & eligible
            if free.bit_count() < want:
                continue
            for shape in shapes:
                corners = self._corners(free, shape)
                if corners:
                    at = (corners & -corners).bit_length() - 1
                    units = self._box[shape] << at  # (every node of the box is free)
                    names = self.names
                    return Allocation(units, lambda: tuple([names[u] for u in set_bits(units)]),
                                      (tuple(range(request.ppn)),) * units.bit_count())
        return None

    def interchangeable(self, request: Request) -> bool:
        return self.placement != "cuboid" and super().interchangeable(request)
