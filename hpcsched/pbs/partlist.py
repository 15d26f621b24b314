"""partlist: a Blue Gene's blocks and their states, Cobalt style.

    partlist          every block: name, size in nodes, the queues bound to it, its state:
                      idle, busy (<job>), blocked (<block>) by a busy relative, down (a board of its own)

On a machine without blocks it says so and exits 2.
"""
from __future__ import annotations

from . import common
from .common import Command
from .errors import UsageError
from .maui import block_states, load


def partlist(opts: list[tuple[str, str]], operands: list[str], out, now: float) -> int:
    if operands:
        raise UsageError(f"unexpected {operands[0]!r}")
    site, batch = load()
    sched = batch.sched
    bg = sched.topology
    if not bg.places_blocks:
        raise common.CommandError("partlist: this machine has no blocks (not a Blue Gene)", common.USAGE)
    queues = {}
    for q in sched.router.queues.values():
        for name in q.nodes:
            queues.setdefault(name, []).append(q.name)
    out.write(f"{'Name':<32} {'Size':>6}  {'Queue':<20} State\n")
    for block, state in block_states(sched, site.server):
        out.write(f"{block.name:<32} {block.size:>6}  {':'.join(queues.get(block.name, [])) or '-':<20} {state}\n")
    return 0


PARTLIST = Command("partlist", "", "usage: partlist", partlist)
