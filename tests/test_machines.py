"""The Blue Gene/Q and Cray machines: wiring against a brute-force model, Cobalt's choice,
cuboid placement, bound queues, down hardware, and the planner's properties on each."""
import random
from itertools import product

import pytest
from test_properties import workload

from hpcsched import Job, Request
from hpcsched.config import build
from hpcsched.core.errors import ConfigError, InvalidRequest, Rejected
from hpcsched.core.reservations import Reservation
from hpcsched.machines.bluegene import BlueGene
from hpcsched.machines.cray import Cray
from hpcsched.machines.nodepool import NodePool
from hpcsched.sim.engine import Engine


# --- the brute-force model of Blue Gene wiring ---------------------------------------
def model(dims, corner, span, skip):
    """(midplanes whose nodes a block uses, cables it takes) as coordinates: a cable is the
    pair of neighbouring midplanes it joins, walked along each line of the block."""
    pos = [[(corner[d] + o) % dims[d] for o in range(span[d])] for d in range(4)]
    used = [[p for o, p in enumerate(pos[d]) if o not in skip[d]] for d in range(4)]
    mids = set(product(*used))
    cables = set()
    for d in range(4):
        if dims[d] == 1:
            continue
        walk = pos[d] + ([pos[d][0]] if span[d] == dims[d] else [])  # a whole ring closes
        for line in product(*[used[k] if k != d else [None] for k in range(4)]):
            for a, b in zip(walk, walk[1:]):
                here = line[:d] + (a,) + line[d + 1:]
                there = line[:d] + (b,) + line[d + 1:]
                cables.add((d, here, there))
    return mids, cables


def spec_of(bg, block):
    """Recover (corner, span, skip) from a generated block's name."""
    parts = block.name.split("-")
    corner, span = tuple(map(int, parts[1])), tuple(map(int, parts[2]))
    skip = [(), (), (), ()]
    for p in parts[4:]:
        skip["ABCD".index(p[1])] = tuple(map(int, p[2:]))
    return corner, span, tuple(skip)


@pytest.mark.parametrize("dims", [(1, 1, 4, 2), (2, 1, 4, 1), (1, 3, 2, 2), (2, 2, 2, 2)])
def test_block_conflicts_match_the_brute_force_model(dims):
    bg = BlueGene(dims, sizes=tuple(512 * k for k in range(1, 17)), small=(), passthrough=True)
    whole = [b for b in bg.blocks if b.size >= 512]
    assert any(b.passthrough for b in whole) == (4 in dims or 3 in dims)
    specs = {b.name: model(dims, *spec_of(bg, b)) for b in whole}
    for a in whole:
        ma, ca = specs[a.name]
        assert len(ma) * 512 == a.size
        for b in whole:
            mb, cb = specs[b.name]
            assert bool(a.units & b.units) == bool(ma & mb or ca & cb), (a.name, b.name)


def test_mira_with_passthrough_builds_the_papers_2k_skip_2k_2k_4k_block():
    """ALCF's paper: "4K partitions can be built as 2K nodes, skip 2K nodes, and then the
    other 2K nodes": along Mira's B ring of 3, two 2K slabs with the middle one passed
    through (its cables taken, its nodes not)."""
    bg = BlueGene((2, 3, 4, 4), prefix="MIR", small=(), passthrough=True)
    along_b = [b for b in bg.blocks if b.size == 4096 and "-SB1" in b.name]
    assert along_b and all(b.size == 4096 for b in along_b)
    one = bg.block("MIR-0000-1322-4096-SB1")  # B = 0 and 2 (2K each: C 0-1 x D 0-1 x A 0), through B = 1
    b_of = lambda i: bg.coords(i)[1]
    assert {b_of(i) for i in one.midplanes} == {0, 2} and {b_of(i) for i in one.passthrough} == {1}
    middle = bg.block("MIR-0100-1122-2048")  # the 2K slab it passes through: nodes and C, D cables its own
    assert not one.units & middle.units
    across = bg.block("MIR-0100-1221-2048")  # B = 1 to 2 as a mesh: the B cable 1 -> 2 the torus takes
    assert one.units & across.units
    assert not BlueGene((2, 3, 4, 4), prefix="MIR", small=()).blocks[-1].passthrough  # (off by default)


def test_a_passthrough_block_takes_cables_not_nodes():
    bg = BlueGene((1, 1, 4, 1), sizes=(512, 1024, 2048), small=(), passthrough=True)
    skipping = bg.block("BGQ-0000-1141-1024-SC13")  # midplanes 0 and 2, passing through 1 and 3
    assert skipping.passthrough == (1, 3) and skipping.midplanes == (0, 2)
    single = bg.block("BGQ-0010-1111-512")  # midplane 1: no cables, so no conflict
    assert not skipping.units & single.units
    pair = bg.block("BGQ-0020-1121-1024")  # midplanes 2-3 as a mesh: shares the 2->3 cable
    assert skipping.units & pair.units


def test_relatives_follow_the_wiring_not_declarations():
    bg = BlueGene((1, 1, 1, 2))
    names = {b.name: b for b in bg.blocks}
    m0, m1, rack = names["BGQ-0000-1111-512"], names["BGQ-0001-1111-512"], names["BGQ-0000-1112-1024"]
    assert not m0.units & m1.units and m0.units & rack.units and m1.units & rack.units
    small = names["BGQ-0000-N04-128"]
    assert small.units & m0.units and small.units & rack.units and not small.units & m1.units
    assert not small.units & names["BGQ-0000-N08-256"].units and small.units & names["BGQ-0000-N00-256"].units


def mira_sched(**extra):
    return build({"machine": "bgq-4rack", "queues": {"batch": {}}, **extra})


def test_a_job_gets_the_smallest_block_that_holds_it():
    s = mira_sched()
    for nodes, size in [(1, 128), (129, 256), (300, 512), (513, 1024), (2049, 4096)]:
        assert s.topology.size(Request(nodes=nodes)) == size
    with pytest.raises(Rejected, match="more than the machine"):
        s.submit(Job(owner="a", request=Request(nodes=4097), walltime=60), now=0)
    with pytest.raises(Rejected, match=r"more than the machine has \(128 nodes with 1 GPUs each"):
        s.submit(Job(owner="a", request=Request(nodes=128, gpus=1), walltime=60), now=0)  # a Blue Gene has none


def test_cobalt_choice_blocks_the_fewest_free_larger_blocks():
    # 4 racks along C: rack k is midplanes (0,0,k,0) and (0,0,k,1).  With one midplane of
    # rack 0 busy, a 512 job takes its sibling (which blocks no free larger block).
    s = mira_sched()
    bg = s.topology
    first = s.submit(Job(owner="a", request=Request(nodes=512), walltime=100), now=0)
    s.iterate(0)
    assert first.nodes == ("BGQ-0000-1111-512",)  # an empty machine: the first listed wins the tie
    second = s.submit(Job(owner="a", request=Request(nodes=512), walltime=100), now=1)
    s.iterate(1)
    assert second.nodes == ("BGQ-0001-1111-512",)
    third = s.submit(Job(owner="a", request=Request(nodes=1024), walltime=100), now=2)
    s.iterate(2)
    # racks 2 and 3 form the only free 2K: a 1K on either would block it, rack 1 blocks none
    assert third.nodes == ("BGQ-0010-1112-1024",)
    states = dict((b.name, st) for b, st in bg.block_states({j.id: j.nodes[0] for j in s.running()}))
    assert states["BGQ-0000-1112-1024"] == "blocked (BGQ-0000-1111-512)"
    assert states["BGQ-0020-1112-1024"] == "idle" and states["BGQ-0020-1122-2048"] == "idle"


def test_routing_sees_the_block_size():
    s = build({"machine": "mira", "default_queue": "default", "queues": {
        "default": {"route_to": ["prod-capability", "prod-short"]},
        "prod-capability": {"min_nodes": 8192}, "prod-short": {}}})
    job = s.submit(Job(owner="a", request=Request(nodes=4097), walltime=60), now=0)
    assert job.queue == "prod-capability" and s.size(job) == 8192
    assert s.submit(Job(owner="a", request=Request(nodes=4096), walltime=60), now=0).queue == "prod-short"


def test_a_queue_bound_to_blocks_stays_inside_them():
    s = build({"machine": "bgq-4rack", "queues": {
        "long": {"nodes": ["BGQ-0030-1112-1024"]}, "short": {}}, "default_queue": "short"})
    jobs = [s.submit(Job(owner="a", queue="long", request=Request(nodes=512), walltime=100), now=0)
            for _ in range(3)]
    s.iterate(0)
    assert sorted(j.nodes for j in jobs[:2]) == [("BGQ-0030-1111-512",), ("BGQ-0031-1111-512",)]
    assert jobs[2].state.value == "queued"  # the rest of the machine is free, but not its own
    with pytest.raises(Rejected, match="does not fit the nodes of queue long"):
        s.submit(Job(owner="a", queue="long", request=Request(nodes=2048), walltime=100), now=0)


def test_a_blocks_geometry_is_its_nodes_along_each_dimension():
    bg = BlueGene((1, 1, 4, 2), small=(128, 256), passthrough=True)
    shape = {b.name: bg.geometry(b) for b in bg.blocks}
    assert shape["BGQ-0000-1111-512"] == (4, 4, 4, 4, 2) and shape["BGQ-0000-1112-1024"] == (4, 4, 4, 8, 2)
    assert shape["BGQ-0000-1141-1024-SC13"] == (4, 4, 8, 4, 2)  # (two midplanes used along C, two passed)
    assert shape["BGQ-0000-N00-128"] == (2, 2, 4, 4, 2) and shape["BGQ-0000-N00-256"] == (4, 2, 4, 4, 2)


def test_naming_blocks_of_a_jobs_size_keeps_it_to_those_blocks_alone():
    """(A --geometry's blocks: their boards together may cover others of the same size.)"""
    s = mira_sched()
    named = ("BGQ-0000-1121-1024", "BGQ-0001-1121-1024")  # (together they cover BGQ-0000-1112-1024 too)
    covered = s.topology.block("BGQ-0000-1112-1024").boards
    assert s.topology.units_of_nodes(named) & covered == covered
    jobs = [s.submit(Job(owner="a", request=Request(nodes=1024, within=named), walltime=100), now=0) for _ in range(3)]
    s.iterate(0)
    assert sorted(j.nodes for j in jobs[:2]) == [(named[0],), (named[1],)] and jobs[2].state.value == "queued"
    area = s.submit(Job(owner="a", request=Request(nodes=512, within=("BGQ-0020-1112-1024",)), walltime=100), now=0)
    s.iterate(0)
    assert area.nodes[0] in ("BGQ-0020-1111-512", "BGQ-0021-1111-512")  # (a larger block: an area to fit in)


def test_a_down_board_takes_out_its_blocks_but_not_its_cables():
    s = mira_sched()
    s.set_node_state("R00-M0-N03", "down")
    bg = s.topology
    free = bg.available()
    names = {b.name for b in bg.blocks if b.units & free == b.units}
    assert "BGQ-0000-1111-512" not in names and "BGQ-0000-N00-128" not in names
    assert "BGQ-0000-N04-128" in names and "BGQ-0001-1111-512" in names
    assert "BGQ-0010-1141-2048" not in names  # (contains the board)
    s.set_node_state("R01-M1", "down")  # a whole midplane
    assert all(bg.node(f"R01-M1-N{j:02d}").state.value == "down" for j in range(16))


def test_a_compute_and_links_reservation_keeps_passthrough_jobs_off_its_cables():
    bg = BlueGene((1, 1, 4, 1), sizes=(512, 1024, 2048), small=(), passthrough=True)
    only = bg.units_of_nodes(["R00-M1"])
    links = bg.units_of_nodes(["R00-M1"], links=True)
    skipping = bg.block("BGQ-0000-1141-1024-SC13")  # passes through midplane 1
    assert not skipping.units & only and skipping.units & links
    s = build({"machine": {"kind": "bluegene", "dims": [1, 1, 4, 1], "sizes": [512, 1024], "small": [],
                           "passthrough": True}, "queues": {"batch": {}}})
    s.add_reservation(Reservation("fix", start=0, duration=3600, nodes=("R00-M1",), links=True), now=0)
    s.add_reservation(Reservation("fix2", start=0, duration=3600, nodes=("R01-M1",)), now=0)
    job = s.submit(Job(owner="a", request=Request(nodes=1024), walltime=100), now=0)
    s.iterate(0)
    # midplanes 0 and 2 are free, but the only 1K joining them passes through a board under
    # repair: the job waits (without links in the reservation it would have started)
    assert job.state.value == "queued"


@pytest.mark.parametrize("bad, match", [
    ({"kind": "bluegene", "dims": [2, 2]}, "machine.dims"),
    # (a grid of a million midplanes was built, block conflicts and all, for ever)
    ({"kind": "bluegene", "dims": [10 ** 6, 1, 1, 1]}, "machine.dims: 1000000 midplanes, more than 256"),
    ({"kind": "bluegene", "dims": [1, 1, 1, 2], "cores": 10 ** 30}, "machine.cores: must be an integer from 1 to"),
    ({"kind": "bluegene", "dims": [1, 1, 1, 2], "blocks": [{"name": "x", "corner": [0, 0, 0, 0], "span": [1, 1, 1, 3]}]},
     "machine.blocks"),
    ({"kind": "bluegene", "dims": [1, 1, 1, 2], "sizes": [700]}, "machine.sizes"),
    ({"kind": "bluegene", "name": "nope"}, "machine.name"),
    ({"kind": "cray", "torus": [2, 2, 2], "nodes": [{"count": 9}]}, "do not fit"),
    ({"kind": "cray", "name": "kraken", "colour": 1}, "machine.colour"),
    ({"kind": "other"}, "machine.kind"),
])
def test_bad_machine_descriptions_are_one_line_naming_the_key(bad, match):
    with pytest.raises(ConfigError, match=match) as e:
        build({"machine": bad})
    assert "\n" not in str(e.value)


def test_listed_blocks_replace_the_generated_ones():
    s = build({"machine": {"kind": "bluegene", "dims": [1, 1, 1, 2], "blocks": [
        {"name": "A", "corner": [0, 0, 0, 0], "span": [1, 1, 1, 1]},
        {"name": "RACK", "corner": [0, 0, 0, 0], "span": [1, 1, 1, 2]},
        {"name": "S", "midplane": "R00-M1", "board": 8, "size": 256}]}})
    assert [b.name for b in s.topology.blocks] == ["S", "A", "RACK"]
    assert s.topology.size(Request(nodes=600)) == 1024


# --- Cray -------------------------------------------------------------------------------
def test_builtin_crays_have_the_papers_sizes():
    bw = Cray.from_config({"kind": "cray", "name": "bluewaters"})
    assert bw.node_count == 26868 and bw.node("nid22640").features == {"xk"} and bw.node("nid00000").cores == 32
    assert Cray.from_config({"kind": "cray", "name": "xt3"}).node_count == 2068
    assert Cray.from_config({"kind": "cray", "name": "kraken"}).node("nid09407").cores == 12
    assert bw.node("nid22640").gpus == 1 and bw.node("nid22639").gpus == 0  # the XK nodes' one GPU each
    assert bw.eligible(Request(nodes=1, gpus=1)).bit_count() == 4228


def test_a_cray_of_its_own_declares_gpus():
    c = Cray.from_config({"kind": "cray", "torus": [2, 2, 2], "per_router": 1,
                          "nodes": [{"count": 6, "cores": 4}, {"count": 2, "cores": 4, "gpus": 2}]})
    assert [n.name for n in c.nodes if n.gpus == 2] == ["nid00006", "nid00007"]
    with pytest.raises(ConfigError, match=r"machine.nodes\[0\].gpus: must be an integer from 0 to 65536"):
        Cray.from_config({"kind": "cray", "torus": [2, 2, 2], "nodes": [{"count": 6, "gpus": -1}]})


@pytest.mark.parametrize("table, message", [
    ({"torus": [2, 2, 2], "nodes": [{"count": 10 ** 12}]}, r"nodes\[0\].count: must be an integer from 1 to 16777216"),
    ({"torus": [2, 2, 2], "nodes": [{"count": 6}, {"count": 6}]}, r"12 nodes do not fit a 2x2x2 torus"),
    ({"torus": [10 ** 6] * 3, "nodes": [{"count": 4}]}, r"machine.torus: 1000000000000000000 node slots, more than"),
    ({"torus": [2, 2, 2], "nodes": [{"count": 4, "cores": 10 ** 30}]}, r"cores: must be an integer from 1 to 65536"),
])
def test_a_cray_too_large_to_build_is_refused_before_it_is_built(table, message):
    # (a count of 10**12 was built node by node before the torus's slots were counted)
    with pytest.raises(ConfigError, match=message):
        Cray.from_config({"kind": "cray", **table})


def cray(placement, torus=(4, 4, 4), per_router=2):
    return build({"machine": {"kind": "cray", "torus": list(torus), "per_router": per_router,
                              "nodes": [{"count": 2 * 64 if per_router == 2 else 64, "cores": 4}]},
                  "placement": placement, "queues": {"batch": {}}})


def is_box(topo, nids):
    pos = {topo.position(n) for n in nids}
    lo = [min(p[d] for p in pos) for d in range(3)]
    hi = [max(p[d] for p in pos) for d in range(3)]
    volume = (hi[0] - lo[0] + 1) * (hi[1] - lo[1] + 1) * (hi[2] - lo[2] + 1)
    return volume * topo.per_router >= len(nids) and volume == len(pos)


def test_repunits_by_doubling_match_the_division_formula():
    from hpcsched.machines.cray import _repunit
    for n in range(0, 40):
        for stride in (1, 2, 3, 7, 48, 1152):
            assert _repunit(n, stride) == ((1 << (n * stride)) - 1) // ((1 << stride) - 1)


def test_cuboid_placement_gives_compact_boxes():
    s = cray("cuboid")
    jobs = [s.submit(Job(owner="a", request=Request(nodes=n), walltime=100), now=0) for n in (16, 8, 2, 30)]
    s.iterate(0)
    topo = s.topology
    for j in jobs:
        nids = [topo.node(n).nid for n in j.nodes]
        assert j.state.value == "running" and is_box(topo, nids), j.nodes
    assert sorted(topo.position(topo.node(n).nid) for n in jobs[0].nodes)[-1] == (1, 1, 1)  # a 2x2x2 box
    assert topo.shapes(16)[0] == (2, 2, 2) and topo.shapes(16)[1] == (1, 2, 4)


def test_contiguous_placement_is_one_run_of_nids():
    s = cray("contiguous", per_router=1)
    jobs = [s.submit(Job(owner="a", request=Request(nodes=n), walltime=100), now=0) for n in (5, 7)]
    s.iterate(0)
    nids = [[s.topology.node(n).nid for n in j.nodes] for j in jobs]
    assert nids == [list(range(0, 5)), list(range(5, 12))]


# --- the planner's properties on every machine ---------------------------------------
MACHINES = {
    "pool": lambda: build({"nodes": [{"names": "n[00-31]"}], "queues": {"batch": {}}, "backfill": "conservative"}),
    "bluegene": lambda: build({"machine": "bgq-4rack", "queues": {"batch": {}}, "backfill": "conservative"}),
    "cray-cuboid": lambda: build({"machine": {"kind": "cray", "torus": [2, 4, 4], "per_router": 1,
                                              "nodes": [{"count": 32}]}, "placement": "cuboid",
                                  "queues": {"batch": {}}, "backfill": "conservative"}),
    "cray-contiguous": lambda: build({"machine": {"kind": "cray", "torus": [2, 4, 4], "per_router": 1,
                                                  "nodes": [{"count": 32}]}, "placement": "contiguous",
                                      "queues": {"batch": {}}, "backfill": "conservative"}),
}


def replay(sched, jobs, scale, check):
    arrivals = [(t, Job(owner=f"u{i % 3}", request=Request(nodes=max(1, size * scale)), walltime=wall), run, i)
                for i, (t, size, wall, run) in enumerate(jobs)]
    Engine(sched).run(arrivals, watch=lambda plan: check(sched, plan), keep=True)


@pytest.mark.parametrize("machine", sorted(MACHINES))
@pytest.mark.parametrize("seed", range(3))
def test_no_unit_is_given_twice_and_conservative_never_delays_a_reservation(machine, seed):
    s = MACHINES[machine]()
    scale = 128 if machine == "bluegene" else 1  # 32 "nodes" of 128: the 4-rack's 4,096
    promised = {}

    def check(sched, plan):
        seen = 0
        for j in sched.running():
            units = sched.runs.units[j.id]
            assert not seen & units, f"job {j.id} shares a unit"
            seen |= units
        for jid, (t, _) in plan.reserved.items():
            assert t > plan.now and t <= promised.get(jid, t), f"job {jid} moved later"
            promised[jid] = t
    replay(s, workload(seed, n=80, exact=True), scale, check)
    assert promised
    for jid, t in promised.items():
        assert s.job(jid).start_time <= t


@pytest.mark.parametrize("machine", sorted(MACHINES))
def test_same_inputs_same_decisions_on_every_machine(machine):
    scale = 128 if machine == "bluegene" else 1
    runs = []
    for _ in range(2):
        s = MACHINES[machine]()
        replay(s, workload(5, n=60, exact=False), scale, lambda *_: None)
        runs.append([(j.id, j.start_time, j.nodes) for j in s.jobs.values()])
    assert runs[0] == runs[1]


def test_randomly_sized_blocks_never_share_hardware_with_running_jobs():
    rng = random.Random(7)
    s = build({"machine": {"kind": "bluegene", "dims": [2, 1, 4, 2], "passthrough": True},
               "queues": {"batch": {}}, "backfill": "easy"})
    arrivals = [(float(i * 30), Job(owner="u", request=Request(nodes=rng.choice([100, 256, 512, 1000, 2048, 4000])),
                                    walltime=float(rng.choice([300, 900, 3600]))), float(rng.choice([100, 300, 900])), i)
                for i in range(120)]

    def check(sched, plan):
        seen = 0
        for j in sched.running():
            assert not seen & sched.runs.units[j.id]
            seen |= sched.runs.units[j.id]
    finished, _ = Engine(s).run(arrivals, watch=lambda plan: check(s, plan), keep=True)
    assert len(finished) == 120


# --- commands and the simulator on these machines ---------------------------------------
@pytest.fixture
def bgq_rig(rig):
    """The rig's site on a one-rack Blue Gene/Q instead of its four nodes."""
    import re
    conf = rig / "home" / "config.toml"
    text = conf.read_text()
    text = re.sub(r"\[\[nodes\]\]\n(?:[a-z]+ = .*\n)+", "", text)
    conf.write_text('machine = "bgq-1rack"\n' + text)
    return rig


def test_partlist_and_checkjob_show_blocks(bgq_rig):
    import io
    import time
    from test_commands import submit
    from test_maui_psc import server_pass
    from hpcsched.pbs import maui, partlist
    submit("-l", "nodes=300,walltime=01:00:00")
    submit("-l", "nodes=1024,walltime=01:00:00")
    server_pass()
    out = io.StringIO()
    assert partlist.PARTLIST([], out=out) == 0
    states = {line.split()[0]: line.split(None, 3)[3] for line in out.getvalue().splitlines()[1:]}
    assert states["BGQ-0000-1111-512"] == "busy (1.headnode)"
    assert states["BGQ-0000-1112-1024"] == "blocked (BGQ-0000-1111-512)"
    assert states["BGQ-0001-1111-512"] == "idle" and states["BGQ-0000-N00-128"].startswith("blocked")
    out = io.StringIO()
    assert maui.CHECKJOB(["2"], out=out, now=time.time() + 10) == 0
    assert "Block size: 1024 nodes" in out.getvalue() and "job cannot run" in out.getvalue()
    assert "Block BGQ-0000-1112-1024: blocked (BGQ-0000-1111-512)" in out.getvalue()
    out = io.StringIO()  # the job's reservation is its block
    assert maui.SHOWRES(["2"], out=out, now=time.time() + 10) == 0 and " 1024/1024 " in out.getvalue()
    out = io.StringIO()
    assert maui.SHOWRES(["-n", "2"], out=out, now=time.time() + 10) == 0
    assert out.getvalue().splitlines()[4].split()[:4] == ["BGQ-0000-1112-1024", "Job", "2", "1024"]
    out = io.StringIO()
    assert maui.SHOWRES([], out=out, now=time.time() + 10) == 0
    assert [line.split()[6] for line in out.getvalue().splitlines() if line.startswith("2 ")] == ["1024/1024"]
    from test_commands import full
    assert full("2")["block_size"] == "1024" and full("1")["block_size"] == "512"


def test_partlist_refuses_a_pool(rig):
    import io
    from hpcsched.pbs import partlist
    err = io.StringIO()
    import contextlib
    with contextlib.redirect_stderr(err):
        assert partlist.PARTLIST([], out=io.StringIO()) == 2
    assert "no blocks" in err.getvalue()


def test_a_trace_replays_on_a_built_in_machine():
    from hpcsched.sim.simulate import record, simulate
    recs = [record(i + 1, float(i * 60), procs, 600.0, 900.0) for i, procs in enumerate([1, 8, 16, 4, 2, 16, 1])]
    r = simulate(recs, machine="bgq-4rack", capability_split=(2048,))
    assert r.machine.name == "bgq-4rack" and r.machine.share == 4096 / 16
    assert [f.units for f in sorted(r.jobs, key=lambda f: f.record.job)] == [256, 2048, 4096, 1024, 512, 4096, 256]
    assert set(r.metrics.free_blocks) == {"512", "1024", "2048", "4096"}  # (an eighth and up)
    free = r.metrics.free_blocks  # a free block holds free smaller ones: the shares fall with size
    assert 0 < free["512"] <= 1 and free["4096"] <= free["2048"] <= free["1024"] <= free["512"]
    assert r.metrics.capability_split["2048"] > 0
    cuboid = simulate(recs, machine={"kind": "cray", "torus": [4, 4, 4], "per_router": 1, "nodes": [{"count": 64}]},
                      placement="cuboid", size_map="procs")
    assert cuboid.machine.share == 0 and sorted(f.units for f in cuboid.jobs)[-1] == 16
    pool = simulate(recs, machine="pool", config={"machine": "mira", "queues": {"batch": {}}})
    assert pool.machine.name == "" and pool.machine.nodes == 16  # the records' largest: no Mira


@pytest.fixture
def cray_rig(rig):
    """The rig's site on a small Cray: 16 nodes of 2 cores, nids 0-15, two per router."""
    import re
    conf = rig / "home" / "config.toml"
    text = re.sub(r"\[\[nodes\]\]\n(?:[a-z]+ = .*\n)+", "", conf.read_text())
    conf.write_text('machine = {kind = "cray", torus = [2, 2, 2], per_router = 2, nodes = [{count = 16, cores = 2}]}\n'
                    + text)
    return rig


def test_psc_size_and_nidmask_place_jobs_on_whole_nodes_by_nid(cray_rig):
    from test_commands import full, submit
    from test_maui_psc import server_pass
    submit("-l", "size=3,walltime=01:00:00")  # three compute nodes (PSC's size: nodes, not processors)
    submit("-l", "nodes=2,nidmask=10..11,14..15,walltime=01:00:00")  # (the mask's own commas)
    submit("-l", "nodes=1,nidmask=^0..12,walltime=01:00:00")  # every nid but 0-12
    server_pass()
    f = full("1")
    assert f["Resource_List.size"] == "3" and f["nid_list"] == "0..2" and f["exec_host"].count("+") == 2
    assert full("2")["nid_list"] == "10..11" and full("2")["Resource_List.nidmask"] == "10..11,14..15"
    assert full("3")["nid_list"] == "13"


def test_qalter_keeps_a_jobs_nidmask(cray_rig):
    from test_commands import full, submit
    from test_maui_psc import server_pass
    from hpcsched.pbs import qctl
    submit("-h", "-l", "nodes=1,nidmask=14..15,walltime=01:00:00")
    assert qctl.QALTER(["-l", "walltime=00:30:00,nodes=2", "1"]) == 0
    assert qctl.QRLS(["1"]) == 0
    server_pass()
    assert full("1")["nid_list"] == "14..15"


@pytest.mark.parametrize("resources, message", [
    ("nodes=1,nidmask=12..40", "nidmask '12..40' names nid 16, outside this machine's 0..15"),
    ("nodes=1,nidmask=3..1", "descending node-id range"),
    ("nodes=1,nidmask=^0..15", "leaves no node"),
    ("size=4,nodes=2", "size cannot be used with nodes"),
    ("size=0", "size must be a positive integer"),
    ("size=40", "more than the machine has"),
])
def test_bad_psc_resources_are_one_line_and_store_nothing(cray_rig, resources, message):
    from test_commands import run, stat
    p = run("qsub", "-l", resources, "/dev/null")
    assert p.returncode != 0 and p.stderr.count("\n") <= 2 and message in p.stderr, p.stderr
    assert "Traceback" not in p.stderr
    assert stat()[1] == ""  # nothing stored


def test_nidmask_is_refused_on_a_blue_gene(bgq_rig):
    from test_commands import run
    p = run("qsub", "-l", "nodes=1,nidmask=1..2", "/dev/null")
    assert p.returncode == 2 and "nidmask: this machine's nodes have no node ids" in p.stderr


def test_simon_bins_count_the_whole_nodes_a_job_holds():
    """On 4-core nodes a 2-node job of 1 processor per node holds 8 processors: large at 8."""
    from hpcsched.policies.simon import Simon
    s = build({"nodes": [{"names": "n[1-8]", "cores": 4}], "queues": {"batch": {}},
               "priority": {"policy": "simon", "large": 8}})
    small = s.submit(Job(owner="u", request=Request(nodes=2, ppn=1), walltime=100.0), 0.0)
    packed = s.submit(Job(owner="u", request=Request(cores=5), walltime=100.0), 0.0)
    ctx = s.context(0.0)
    assert isinstance(s.policy, Simon)
    assert s.policy.is_large(small, ctx) and ctx.processors(small) == 8
    assert s.policy.is_large(packed, ctx) and ctx.processors(packed) == 8  # two whole nodes
    assert s.policy.describe(small, ctx)["requested"] == 2.0


def test_hpcsched_nodes_lists_midplanes_on_a_blue_gene(bgq_rig, capsys, monkeypatch):
    from hpcsched import cli
    monkeypatch.setenv("HPCSCHED_USER", "root")
    assert cli.main(["nodes", "--set", "down", "R00-M1-N04"]) == 0
    assert cli.main(["nodes", "--set", "offline", "R00-M0"]) == 0
    capsys.readouterr()
    assert cli.main(["nodes"]) == 0
    assert capsys.readouterr().out.splitlines() == ["R00-M0                0 offline",
                                                    "R00-M1                1 mixed (boards: R00-M1-N04=down)"]


def test_hpcsched_nodes_lists_the_named_nodes_and_refuses_an_unknown_one(rig, capsys, monkeypatch):
    from hpcsched import cli
    monkeypatch.setenv("HPCSCHED_USER", "olga")  # (an operator)
    assert cli.main(["nodes", "--set", "down", "node01", "nosuch"]) == 1  # (node01 went down first)
    capsys.readouterr()
    assert cli.main(["nodes", "node03", "node01"]) == 0
    assert capsys.readouterr().out.splitlines() == ["node03                2 up", "node01                0 up"]
    assert cli.main(["nodes", "node01", "nosuch"]) == 1  # (it listed every node, status 0)
    seen = capsys.readouterr()
    assert seen.out == "" and seen.err == "hpcsched nodes: unknown node 'nosuch'\n"
    assert cli.main(["nodes"]) == 0 and len(capsys.readouterr().out.splitlines()) == 4


def test_setres_counts_the_nodes_of_midplanes_and_boards(bgq_rig, monkeypatch):
    import io
    from hpcsched.pbs import maui
    monkeypatch.setenv("HPCSCHED_USER", "root")
    out = io.StringIO()
    assert maui.SETRES(["-d", "1:00:00", "R00-M1"], out=out) == 0
    assert maui.SETRES(["-d", "1:00:00", "-L", "R00-M0-N01,R00-M0-N02"], out=out) == 0
    assert out.getvalue().splitlines() == ["reservation 'root.1' created on 512 nodes (8192 tasks)",
                                           "reservation 'root.2' created on 64 nodes (1024 tasks)"]


def test_node_commands_show_a_blocks_boards_busy(bgq_rig):
    import io
    import os
    import subprocess
    from test_commands import ROOT, submit
    from test_maui_psc import server_pass
    from hpcsched.pbs import pbsnodes, psc
    submit("-l", "nodes=100,walltime=01:00:00")  # a 128-node block: boards N00-N03 of R00-M0
    server_pass()
    out = io.StringIO()
    assert psc.SHOWNIDS([], out=out) == 0
    rows = {line.split()[1]: line.split()[2:] for line in out.getvalue().splitlines()[1:] if line.strip()[:1].isdigit()}
    assert rows["R00-M0-N03"] == ["busy", "1.headnode"] and rows["R00-M0-N04"] == ["up", "--"]
    out = io.StringIO()
    assert pbsnodes.PBSNODES(["R00-M0-N00", "R00-M0-N04"], out=out) == 0
    states = [line.split(" = ")[1] for line in out.getvalue().splitlines() if line.strip().startswith("state =")]
    assert states == ["job-exclusive", "free"]
    p = subprocess.run([os.path.join(ROOT, "bin", "pbsyod"), "true"], capture_output=True, text=True,
                       env=dict(os.environ, PBS_JOBID="1.headnode"))
    assert p.returncode == 2 and "runs on block BGQ-0000-N00-128" in p.stderr


def test_a_request_no_cuboid_holds_is_refused_as_such_and_counted_in_the_summary():
    """2,048 of the XT3's 2,068 nodes (4,096 of a trace's processors, two a node): the nodes
    are there, no box of routers holds them."""
    from hpcsched.core.errors import Unplaceable
    from hpcsched.sim.simulate import record, simulate
    s = build({"machine": "xt3", "placement": "cuboid", "queues": {"batch": {}}})
    with pytest.raises(Unplaceable, match=r"^no cuboid of routers on this machine holds 2048 nodes \(it has 2068\)$"):
        s.submit(Job(owner="a", request=Request(nodes=2048), walltime=100), now=0)
    r = simulate([record(1, 0.0, 4096, 60.0, 90.0), record(2, 0.0, 1024, 60.0, 90.0), record(3, 0.0, 2, 60.0, 90.0)],
                 machine="xt3", placement="cuboid", size_map="procs")
    assert r.mapping.unplaceable == 1 and len(r.jobs) == 2
    assert "0 refused by every queue, 1 that no placement on the machine holds" in r.summary()


def test_psc_size_is_the_number_of_compute_nodes(cray_rig):
    """The size resource PSC added to Torque on the XT3 is "the number of compute nodes":
    size=3 on 2-core nids gets three nodes, not two."""
    from test_commands import full, submit
    from test_maui_psc import server_pass
    submit("-l", "size=3,walltime=01:00:00")
    server_pass()
    assert full("1")["nid_list"] == "0..2"


def test_one_board_down_leaves_the_blocks_without_it_idle():
    """A board down makes the blocks holding it down; a relative of theirs that does not
    hold it stays idle (partlist said "blocked" of 236 such blocks, and a job started there)."""
    from hpcsched.core.topology import NodeState
    s = mira_sched()
    bg = s.topology
    board = bg.all_nodes()[0].name
    bg.set_state(board, NodeState.DOWN)
    states = dict((b.name, st) for b, st in bg.block_states({}))
    holding = {b.name for b in bg.blocks if b.boards & (1 << 0)}
    assert all(states[name] == "down" for name in holding)
    assert [name for name, st in states.items() if name not in holding and st != "idle"] == []
    job = s.submit(Job(owner="a", request=Request(nodes=512), walltime=100), now=0)
    s.iterate(0)
    assert job.nodes and states[job.nodes[0]] == "idle"


def test_alcfs_torus_queues_are_queues_bound_to_the_torus_blocks():
    """prod-1024-torus: the 1K blocks spanning Mira's A ring (a torus in A); a queue bound
    to them starts its jobs there only, and a job no such block fits waits."""
    from hpcsched import Job, Request
    from hpcsched.config import build
    names = [f"MIR-0{b}{c}{d}-2111-1024" for b in range(3) for c in range(4) for d in range(4)]
    s = build({"machine": {"kind": "bluegene", "name": "mira", "passthrough": True}, "default_queue": "default",
               "queues": {"default": {}, "prod-1024-torus": {"nodes": names}}})
    assert len(names) == 48 and all(s.topology.block(n).size == 1024 for n in names)
    job = s.submit(Job(request=Request(nodes=1024), walltime=3600, queue="prod-1024-torus"), 0)
    plan = s.iterate(0)
    assert [st.job_id for st in plan.started] == [job.id] and s.job(job.id).nodes[0] in names


def test_each_machine_names_a_jobs_place_and_reads_it_back():
    """What commands need of a machine, asked of the machine (Topology.place, places,
    place_size, places_blocks): a host list on a pool, node-id ranges on a Cray, the block
    on a Blue Gene; each read back to the same nodes, and a name it lacks refused."""
    from hpcsched.core.topology import Tiers
    pool = NodePool.from_config([{"names": "n[01-08]"}])
    cray = Cray.from_config({"kind": "cray", "name": "xt3"})
    bg = BlueGene((1, 1, 1, 2))
    for topo, nodes, place, size in ((pool, 3, "n[01-03]", 3), (cray, 3, None, 3), (bg, 512, None, 512)):
        alloc = topo.choose(Request(nodes=nodes), Tiers(topo.available()))
        said = topo.place(alloc.nodes)
        assert place is None or said == place
        assert topo.places(said) == tuple(alloc.nodes) and topo.place_size(alloc.nodes) == size
        assert topo.places_blocks == (topo is bg)
        with pytest.raises(InvalidRequest):
            topo.places("nosuch" if topo is not cray else "99999")
    nids = [cray.node(n).nid for n in cray.choose(Request(nodes=3), Tiers(cray.available())).nodes]
    assert cray.place(tuple(cray.nodes[cray.by_nid[i]].name for i in nids)) == f"{nids[0]}..{nids[-1]}"
    assert cray.places(f"{nids[0]}-{nids[-1]}") == cray.places(f"{nids[0]}..{nids[-1]}")  # (Cobalt's form too)
