"""Machines, one per file, each a `core.topology.Topology`: a pool of named nodes
(nodepool.py), a Cray of nid-numbered nodes on a torus (cray.py), a Blue Gene/Q of blocks
(bluegene.py).  `build` makes the one a site's configuration describes."""
from __future__ import annotations

from ..core.errors import ConfigError
from ..core.topology import Topology
from . import bluegene, cray
from .nodepool import NodePool

#: every built-in machine name, and its kind
BUILTIN = {**{name: "bluegene" for name in bluegene.BUILTIN}, **{name: "cray" for name in cray.BUILTIN}}


def build(machine, nodes, placement: str = "first-fit") -> Topology:
    """The machine of a config's `machine` (a built-in name, or a table with a `kind`) or,
    without one, of its [[nodes]] tables."""
    if machine is None:
        if not isinstance(nodes, list) or not nodes:
            raise ConfigError("nodes: need at least one [[nodes]] table (or a [machine])")
        return NodePool.from_config(nodes, placement)
    if nodes:
        raise ConfigError("nodes: a site describes its machine by [machine] or by [[nodes]], not both")
    if isinstance(machine, str):
        if machine not in BUILTIN:
            raise ConfigError(f"machine: {machine!r} is not a built-in machine ({', '.join(BUILTIN)})")
        machine = {"kind": BUILTIN[machine], "name": machine}
    if not isinstance(machine, dict):
        raise ConfigError("machine: must be a built-in name or a table")
    kind = machine.get("kind")
    if kind == "bluegene":
        if placement != "first-fit":
            raise ConfigError("placement: a Blue Gene places blocks by its own rule")
        return bluegene.BlueGene.from_config(machine)
    if kind == "cray":
        if placement not in ("first-fit", "contiguous", "cuboid"):
            raise ConfigError(f"placement: {placement!r} is not one of first-fit, contiguous, cuboid")
        return cray.Cray.from_config(machine, placement)
    raise ConfigError(f"machine.kind: {kind!r} is not bluegene or cray")
