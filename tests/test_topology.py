import random

import pytest

from hpcsched import ConfigError, InvalidRequest, Node, NodePool, NodeState, Request
from hpcsched.core.topology import Tiers, lowest, mask_of, set_bits


def tiers_of(masks: list[int]) -> Tiers:
    """Disjoint free masks, best first, as `Topology.choose` takes them."""
    return Tiers(mask_of([u for m in masks for u in set_bits(m)]), masks)


def test_bits_helpers():
    assert set_bits(0b101100) == [2, 3, 5]
    assert set_bits(0b101100, 2) == [2, 3]
    assert mask_of([2, 3, 5]) == 0b101100
    assert mask_of([]) == 0
    big = mask_of(list(range(0, 50000, 7)))
    assert set_bits(big) == list(range(0, 50000, 7))


def test_whole_node_choice_is_lowest_first_and_respects_tiers():
    p = NodePool([Node(f"n{i}") for i in range(6)])
    a = p.choose(Request(nodes=2), tiers_of([p.available()]))
    assert a.nodes == ("n0", "n1")
    a = p.choose(Request(nodes=3), tiers_of([0b110000, 0b001111]))  # best tier first
    assert a.nodes == ("n0", "n4", "n5")
    assert p.choose(Request(nodes=7), tiers_of([p.available()])) is None


def test_eligibility_by_features_cores_memory_and_state():
    p = NodePool([Node("a", cores=4, memory=1000, features=frozenset({"ib"})),
                  Node("b", cores=8, memory=4000), Node("c", cores=8, memory=4000, features=frozenset({"ib"}))])
    assert p.choose(Request(nodes=2, features=("ib",)), tiers_of([p.available()])).nodes == ("a", "c")
    assert p.choose(Request(nodes=1, ppn=8), tiers_of([p.available()])).nodes == ("b",)
    assert p.choose(Request(nodes=2, mem=2000), tiers_of([p.available()])).nodes == ("b", "c")
    assert not p.fits_anywhere(Request(nodes=3, ppn=8))
    p.set_state("b", NodeState.DOWN)
    assert p.choose(Request(nodes=1, ppn=8), tiers_of([p.available()])).nodes == ("c",)
    p.set_state("b", NodeState.UP)
    assert p.node_states() == {}


def test_shared_nodes_allocate_cores():
    p = NodePool([Node("s0", cores=4, memory=4000, shared=True), Node("s1", cores=4, memory=4000, shared=True)])
    a = p.choose(Request(nodes=2, ppn=3), tiers_of([p.available()]))
    assert a.nodes == ("s0", "s1") and a.cores == ((0, 1, 2), (0, 1, 2))
    free = p.available() & ~a.units
    # a core count is packed: the one free core of each node
    b = p.choose(Request(cores=2), tiers_of([free]))
    assert b.nodes == ("s0", "s1") and b.cores == ((3,), (3,))
    # memory is bought as cores at the node's MB-per-core rate: 2500 MB -> 3 cores
    c = p.choose(Request(nodes=1, ppn=1, mem=2500), tiers_of([p.available()]))
    assert c.cores == ((0, 1, 2),)
    assert p.units_of(a.nodes, a.cores) == a.units
    assert p.choose(Request(nodes=1, ppn=2), tiers_of([free])) is None


def test_an_exclusive_request_takes_whole_shared_nodes_and_only_idle_ones():
    """OpenPBS's place=excl (Torque's -n): on shared nodes each chunk gets a node no other
    job uses, and all of its cores; on whole-node pools nothing changes."""
    p = NodePool([Node(f"s{i}", cores=4, shared=True) for i in range(3)])
    one = p.choose(Request(nodes=1, ppn=1), tiers_of([p.available()]))
    assert one.nodes == ("s0",) and one.cores == ((0,),)
    free = p.available() ^ one.units
    excl = Request(nodes=2, ppn=1, exclusive=True)
    got = p.choose(excl, tiers_of([free]))
    assert got.nodes == ("s1", "s2") and got.cores == ((0, 1, 2, 3),) * 2  # (s0 has a job: passed over)
    assert p.choose(Request(nodes=3, ppn=1, exclusive=True), tiers_of([free])) is None
    assert p.choose(Request(nodes=3, ppn=1), tiers_of([free])) is not None  # (shared, it fits)
    assert p.occupies(excl) == 8 and p.occupies(Request(nodes=2, ppn=1)) == 2
    assert p.processors(got.units) == 8
    whole = NodePool([Node(f"n{i}", cores=4) for i in range(2)])
    assert whole.choose(Request(nodes=1, exclusive=True), tiers_of([whole.available()])).nodes == ("n0",)
    assert Request.from_dict(excl.to_dict()) == excl and "exclusive" not in Request(nodes=2).to_dict()
    with pytest.raises(InvalidRequest, match="exclusive"):
        Request(cores=4, exclusive=True)
    with pytest.raises(InvalidRequest, match="exclusive"):
        Request(nodes=1, exclusive=1)


def test_one_core_fast_path_chooses_as_the_general_walk():
    """`_choose_core` (one core, no memory) against `_choose_general`, its reference, on
    mixed pools of shared and exclusive nodes and random tiers of free units."""
    rnd = random.Random(7)
    for _ in range(300):
        p = NodePool([Node(f"n{i}", cores=rnd.choice([1, 2, 4, 8]), shared=rnd.random() < 0.7)
                      for i in range(rnd.randrange(1, 12))])
        every = p.available()
        tiers = [mask_of([u for u in set_bits(every) if rnd.random() < 0.3]) for _ in range(rnd.randrange(1, 4))]
        one = Request(nodes=0, ppn=0, cores=1)
        want = p._choose_general(one, tiers)
        got = p.choose(one, tiers_of(tiers))
        assert (got is None) == (want is None)
        if want is not None:
            assert (got.units, got.nodes, got.cores) == (want.units, want.nodes, want.cores)


def test_from_config_and_errors():
    p = NodePool.from_config([{"names": "n[01-04]", "cores": 8, "features": ["ib"]},
                              {"names": "big1", "cores": 64, "memory": 512000, "first_nid": 100}])
    assert [n.name for n in p.nodes] == ["n01", "n02", "n03", "n04", "big1"]
    assert [n.nid for n in p.nodes] == [0, 1, 2, 3, 100]
    for bad, msg in [([{"cores": 2}], r"nodes\[0\].names: missing"),
                     ([{"names": "a", "cores": 0}], r"nodes\[0\].cores"),
                     ([{"names": "a", "colour": 1}], r"nodes\[0\].colour: unknown key"),
                     ([{"names": "a"}, {"names": "a"}], "defined twice"),
                     ([{"names": "n[1-"}], r"nodes\[0\].names"),
                     ([{"names": "a", "gpus": -1}], r"nodes\[0\].gpus: must be an integer from 0 to 65536"),
                     ([{"names": "a", "gpus": "4"}], r"nodes\[0\].gpus"),
                     # (each was a traceback, or a machine too large to build, or two nodes one id)
                     ([{"names": "a", "first_nid": "x"}], r"nodes\[0\].first_nid: must be an integer from 0 to"),
                     ([{"names": "a", "first_nid": 1.5}], r"nodes\[0\].first_nid"),
                     ([{"names": "a", "shared": "false"}], r"nodes\[0\].shared: must be true or false"),
                     ([{"names": "a", "cores": 10 ** 30, "shared": True}], r"cores: must be an integer from 1 to 65536"),
                     ([{"names": "a", "memory": 10 ** 400}], r"nodes\[0\].memory: must be an integer from 0 to"),
                     ([{"names": "n[1-300]", "cores": 65536, "shared": True}], r"more than 16777216 units"),
                     ([{"names": "a[1-2]"}, {"names": "b[1-2]", "first_nid": 1}], r"node id 1 is given to 'a2' and 'b1'")]:
        with pytest.raises(ConfigError, match=msg):
            NodePool.from_config(bad)


def test_gpus_keep_a_job_to_nodes_that_have_them_and_are_bought_as_cores():
    p = NodePool.from_config([{"names": "cpu1", "cores": 8, "shared": True},
                              {"names": "gpu[1-2]", "cores": 8, "gpus": 4, "shared": True}])
    assert p.node("gpu1").gpus == 4 and p.node("cpu1").gpus == 0
    one = Request(nodes=1, ppn=1, gpus=1)
    a = p.choose(one, tiers_of([p.available()]))
    assert a.nodes == ("gpu1",) and a.cores == ((0, 1),)  # 1 of 4 GPUs: 2 of the 8 cores
    assert p.choose(Request(nodes=1, ppn=1, gpus=3), tiers_of([p.available()])).cores == ((0, 1, 2, 3, 4, 5),)
    assert p.choose(Request(nodes=1, ppn=6, gpus=1), tiers_of([p.available()])).cores == ((0, 1, 2, 3, 4, 5),)
    assert p.choose(Request(nodes=2, gpus=2), tiers_of([p.available()])).nodes == ("gpu1", "gpu2")
    assert not p.fits_anywhere(Request(nodes=1, gpus=5)) and not p.fits_anywhere(Request(nodes=3, gpus=1))
    assert p.fits_anywhere(Request(nodes=3))
    # whole nodes: eligibility alone
    q = NodePool.from_config([{"names": "c[1-2]", "cores": 4}, {"names": "g1", "cores": 4, "gpus": 2}])
    assert q.choose(Request(nodes=1, gpus=2), tiers_of([q.available()])).nodes == ("g1",)
    assert not q.interchangeable(Request(nodes=1, gpus=1)) and q.interchangeable(Request(nodes=1))
    with pytest.raises(InvalidRequest, match="gpus are per chunk"):
        Request(cores=2, gpus=1)
    with pytest.raises(InvalidRequest, match="gpus must be a non-negative integer"):
        Request(gpus=-1)
    assert Request.from_dict(Request(nodes=2, gpus=3).to_dict()) == Request(nodes=2, gpus=3)


def test_shared_gpu_nodes_never_give_a_gpu_twice():
    """Random chunks (cores, memory, GPUs) placed on shared GPU nodes until none fits: on
    every node the GPUs of the chunks it holds add up to at most the node's."""
    rnd = random.Random(11)
    for _ in range(200):
        p = NodePool([Node(f"g{i}", cores=rnd.choice([4, 8, 12, 16]), memory=rnd.choice([0, 16000]),
                           gpus=rnd.choice([1, 2, 3, 4, 8]), shared=True) for i in range(rnd.randrange(1, 5))])
        free, held = p.available(), {}
        for _ in range(40):
            r = Request(nodes=rnd.choice([1, 1, 2]), ppn=rnd.choice([1, 2, 3]), mem=rnd.choice([0, 0, 3000]),
                        gpus=rnd.choice([0, 1, 1, 2, 3]))
            a = p.choose(r, tiers_of([free]))
            if a is None:
                continue
            assert not a.units & ~free
            free &= ~a.units
            for name in a.nodes:
                held[name] = held.get(name, 0) + r.gpus
        assert all(held[n] <= p.node(n).gpus for n in held)


def test_set_bits_agrees_with_a_plain_loop():
    import random
    rng = random.Random(3)
    for _ in range(200):
        n = rng.choice([5, 64, 1023, 1024, 1025, 5000])
        mask = rng.getrandbits(n) & rng.getrandbits(n) if rng.random() < .5 else rng.getrandbits(n)
        bits = [i for i in range(n) if mask >> i & 1]
        k = rng.randrange(0, len(bits) + 2)
        assert set_bits(mask) == bits
        assert set_bits(mask, k) == bits[:k]
        assert mask_of(bits[:k]) == sum(1 << b for b in bits[:k]) == lowest(mask, k)


def test_first_run_matches_a_scan():
    import random

    from hpcsched.machines.nodepool import first_run
    rng = random.Random(5)
    for _ in range(3000):
        n = rng.randrange(1, 70)
        mask = rng.getrandbits(n) | (((1 << rng.randrange(0, n)) - 1) << rng.randrange(0, 8) if rng.random() < .5 else 0)
        k = rng.randrange(1, 12)
        bits = f"{mask:b}"[::-1]
        expected = bits.find("1" * k)
        assert first_run(mask, k) == expected, (mask, k)


def test_contiguous_placement_gives_one_run_and_never_a_unit_twice():
    import random

    from hpcsched import Job, Request
    from hpcsched.config import build
    from hpcsched.core.errors import ConfigError
    from hpcsched.sim.engine import Engine
    for depth in ("none", "easy", "conservative"):
        sched = build({"nodes": [{"names": "n[00-15]"}], "placement": "contiguous", "backfill": depth})
        rng = random.Random(depth)
        arrivals = [(float(i * 3), Job(owner="u", request=Request(nodes=rng.choice([1, 2, 3, 5, 8, 16])),
                                       walltime=100.0), float(rng.choice([20, 100])), i) for i in range(80)]
        index = {n: i for i, n in enumerate(sched.topology.names)}

        def check(plan):
            used = 0
            for job in sched.running():
                units = job.allocation.units
                assert not used & units
                used |= units
                nodes = sorted(index[n] for n in job.nodes)
                assert nodes == list(range(nodes[0], nodes[0] + len(nodes)))  # consecutive
        finished, _ = Engine(sched).run(arrivals, watch=check)
        assert len(finished) == 80
    with pytest.raises(ConfigError, match="placement"):
        build({"nodes": [{"names": "n1"}], "placement": "torus"})


def test_a_count_of_cores_on_shared_nodes_takes_the_tightest_tiers_packed_within_the_last():
    """Every unit of the better tiers first (a reservation leaves the cores idle now to
    backfill); within the tier where the count is reached, the nodes already taken, then
    one node holding the rest, else nodes in order."""
    p = NodePool([Node(f"n{i}", cores=4, shared=True) for i in range(3)])
    node = [p.node_units(i) for i in range(3)]
    idle = tiers_of([p.available()])
    assert p.choose(Request(cores=3), idle).nodes == ("n0",)
    assert p.choose(Request(cores=6), idle).cores == ((0, 1, 2, 3), (0, 1))
    # node 1's cores free up at the start; node 0's are free since now: node 1's first
    late_first = tiers_of([node[1], node[0] | node[2]])
    assert p.choose(Request(cores=2), late_first).nodes == ("n1",)
    got = p.choose(Request(cores=6), late_first)  # all of node 1, then 2 more packed on one node
    assert got.units & node[1] == node[1] and got.nodes == ("n0", "n1") and got.cores[0] == (0, 1)
    # within the last tier, the node already taken first
    one = lowest(node[0], 1)
    mixed = tiers_of([one, (node[0] ^ one) | node[2]])
    assert p.choose(Request(cores=3), mixed).nodes == ("n0",)
    assert p.choose(Request(cores=13), idle) is None
