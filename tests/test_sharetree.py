"""The share tree (policies/sharetree.py) against a plain reference, on hand-worked and random
trees; Grid Engine's and the multifactor priority through a configured scheduler."""
import random

import pytest
from helpers import job

from hpcsched import config
from hpcsched.core.errors import ConfigError
from hpcsched.core.jobs import Job
from hpcsched.core.backlog import Sieved
from hpcsched.core.usage import Usage
from hpcsched.policies.sharetree import ShareTree


# --- the reference: every figure by the formulas, every job ranked with a full sort ---------
def reference(nodes, cf, usage, running, finished, pending):
    """nodes: id -> {shares, children}; usage/running/finished: leaf id -> number;
    pending: leaf id -> [job ids].  Returns ({id: (oltt, stt, ostt)}, [(job id, value)])."""
    def under(n, table):
        return table.get(n, 0) + sum(under(c, table) for c in nodes[n].get("children", []))

    def npending(n):
        return len(pending.get(n, [])) + sum(npending(c) for c in nodes[n].get("children", []))

    fig = {"Root": (1.0, 1.0, 1.0)}

    def targets(n):
        kids = [c for c in nodes[n].get("children", []) if under(c, running) or npending(c)]
        if not kids:
            return
        oltt_p, _, ostt_p = fig[n]
        total = sum(nodes[c]["shares"] for c in kids)  # (Grid Engine's guards: 0, not a division by 0)
        oltt = {c: oltt_p * nodes[c]["shares"] / total if total else 0.0 for c in kids}
        shr = {c: nodes[c]["shares"] ** 2 / max(under(c, usage), oltt[c]) if oltt[c] else 0.0 for c in kids}
        stt = {c: shr[c] / sum(shr.values()) if sum(shr.values()) else 0.0 for c in kids}
        if cf and any(ostt_p * stt[c] > cf * oltt[c] for c in kids):
            for c in kids:
                if ostt_p * stt[c] > cf * oltt[c]:
                    shr[c] = nodes[c]["shares"] ** 2 / (max(under(c, usage), oltt[c]) * (ostt_p * stt[c] / (cf * oltt[c])))
            stt = {c: shr[c] / sum(shr.values()) if sum(shr.values()) else 0.0 for c in kids}
        for c in kids:
            fig[c] = (oltt[c], stt[c], ostt_p * stt[c])
            targets(c)

    targets("Root")

    def ranked(n):
        rows = []
        for c in nodes[n].get("children", []):
            if npending(c):
                rows += ranked(c)
        rows += [(0.0, j) for j in pending.get(n, [])]
        rows.sort(key=lambda r: (-r[0], r[1]))
        base = under(n, running) + under(n, finished)
        return [(fig[n][1] / (base + k), j) for k, (_, j) in enumerate(rows, 1)]

    top = "Root"  # below the root while every pending job is under one child (sgeee.c)
    while not pending.get(top):
        busy = [c for c in nodes[top].get("children", []) if npending(c)]
        if len(busy) != 1:
            break
        top = busy[0]
    if pending.get(top):  # jobs ranked at the top itself: it values every job
        rows = ranked(top)
    else:  # the top keeps the values its children gave
        rows = sorted((r for c in nodes[top].get("children", []) if npending(c) for r in ranked(c)),
                      key=lambda r: (-r[0], r[1]))
    return fig, [(j, v) for v, j in rows]


def build(nodes, cf, usage, running, finished, pending, make=lambda jid: (Job(id=jid), 1)):
    """The same situation in a ShareTree (leaves are users u-<id>, under groups and projects);
    `make(job id)` gives each pending job and its need."""
    tree = ShareTree({k: {"shares": v["shares"], "children": v.get("children", [])} for k, v in nodes.items()}, cf)
    keys = {}
    for leaf in nodes:
        path, n = [], leaf
        while n != "Root":
            path.append(n)
            n = next(p for p, v in nodes.items() if n in v.get("children", []))
        names = dict(zip(("group", "project", "user"), reversed(path)))
        keys[leaf] = (names.get("user", ""), names.get("group", ""), names.get("project", ""))
    for leaf, ids in pending.items():
        for jid in ids:
            tree.add(*make(jid)[:1], keys[leaf], make(jid)[1])
    ledger = Usage("nodes")  # each leaf's usage and finished jobs, as charged at 0; its running jobs
    for n in nodes:
        if n != "Root" and (usage.get(n) or finished.get(n) or running.get(n)):
            rec = ledger.record(keys[n])
            rec.buckets[0] = [usage.get(n, 0.0), finished.get(n, 0.0)]
            rec.running = running.get(n, 0)
            if rec.running:
                ledger.running[keys[n]] = rec
    tree.compute(ledger, 0.0)
    return tree


def hand_tree():
    return {"Root": {"shares": 1, "children": ["A", "B"]},
            "A": {"shares": 50, "children": ["a1"]}, "B": {"shares": 50, "children": ["b1"]},
            "a1": {"shares": 1, "children": ["x"]}, "b1": {"shares": 1, "children": ["y"]},
            "x": {"shares": 1}, "y": {"shares": 1}}


def test_hand_worked_targets_and_tickets():
    # A has used 300, B 100: shr A = 50^2/300, B = 50^2/100, so stt A = 0.25, B = 0.75.
    # A runs one job; B finished one.  A's jobs 1, 2 get 0.25/2, 0.25/3; B's 3, 4 get
    # 0.75/2, 0.75/3: merged 3, 4, 1, 2, and the root keeps those values, as Grid
    # Engine's sge_sort_pending_job_nodes does (it revalued them 1/3, 1/4, 1/5, 1/6 before:
    # the same order, but tickets summing to 1 instead of the groups' entitlements).
    nodes = hand_tree()
    args = (nodes, 2.0, {"x": 300.0, "y": 100.0}, {"x": 1}, {"y": 1.0}, {"x": [1, 2], "y": [3, 4]})
    tree = build(*args)
    a, b = tree.root.children[("group", "A")], tree.root.children[("group", "B")]
    assert (a.oltt, a.stt, b.stt) == (0.5, 0.25, 0.75)
    ranked = [(jid, -v) for v, jid, _ in tree.ranked()]
    assert ranked == [(3, 0.75 / 2), (4, 0.75 / 3), (1, 0.25 / 2), (2, 0.25 / 3)]
    assert reference(*args)[1] == ranked


def test_compensation_holds_back_a_node_that_has_used_nothing():
    # A has used nothing: shr A = 2500 / 0.5 = 5000 against B's 2500 / 1000 = 2.5, so
    # ostt A = 0.9995 > CF * oltt = 1.5 * 0.5: shr A = 5000 / (0.9995 / 0.75) = 3751.9
    nodes = hand_tree()
    args = (nodes, 1.5, {"y": 1000.0}, {"y": 1}, {}, {"x": [1]})
    tree = build(*args)
    a = tree.root.children[("group", "A")]
    assert a.stt == pytest.approx(3751.876 / (3751.876 + 2.5), rel=1e-6)
    assert build(nodes, 0, {"y": 1000.0}, {"y": 1}, {}, {"x": [1]}).root.children[("group", "A")].stt \
        == pytest.approx(5000 / 5002.5)
    fig, _ = reference(*args)
    assert fig["A"][1] == pytest.approx(a.stt, rel=1e-12)


def random_tree(rng):
    nodes, leaves = {"Root": {"shares": 1, "children": []}}, []
    for g in range(rng.randint(1, 4)):
        gid = f"g{g}"
        nodes["Root"]["children"].append(gid)
        nodes[gid] = {"shares": rng.choice([0, 1, 5, 40]), "children": []}
        for p in range(rng.randint(0, 3)):
            pid = f"{gid}p{p}"
            nodes[gid]["children"].append(pid)
            nodes[pid] = {"shares": rng.choice([1, 2, 10]), "children": []}
            for u in range(rng.randint(0, 3)):
                uid = f"{pid}u{u}"
                nodes[pid]["children"].append(uid)
                nodes[uid] = {"shares": rng.choice([1, 3])}
                leaves.append(uid)
            if not nodes[pid]["children"]:
                leaves.append(pid)
        if not nodes[gid]["children"]:
            leaves.append(gid)
    return nodes, leaves


@pytest.mark.parametrize("seed", range(300))
def test_random_trees_equal_the_reference(seed):
    rng = random.Random(seed)
    nodes, leaves = random_tree(rng)
    usage = {n: rng.choice([0.0, 0.3, 5.0, 1000.0, 86400.0 * rng.random()]) for n in leaves}
    running = {n: rng.choice([0, 0, 1, 3]) for n in leaves}
    finished = {n: rng.choice([0.0, 0.5, 2.0]) for n in leaves}
    pending, jid = {}, 1
    for n in leaves:
        for _ in range(rng.choice([0, 0, 1, 2, 5])):
            pending.setdefault(n, []).append(jid)
            jid += rng.randint(1, 3)
    cf = rng.choice([0, 0, 1.0, 2.0, 5.0])
    args = (nodes, cf, usage, running, finished, pending)
    tree = build(*args)
    fig, ranked = reference(*args)
    got = [(jid, -v) for v, jid, _ in tree.ranked()]
    assert [j for j, _ in got] == [j for j, _ in ranked]
    assert [v for _, v in got] == pytest.approx([v for _, v in ranked], rel=1e-9)
    for node in tree.root.walk():
        if node.parent is not None and (node.running or node.pending):
            oltt, stt, ostt = fig[node.name]
            assert (node.oltt, node.stt, node.ostt) == pytest.approx((oltt, stt, ostt), rel=1e-9)


def hopeless(sieve, job, need):
    """plan.Walk's bound test, which a sieve stands for."""
    upper, horizon, lasting = sieve
    return need > (lasting if job.walltime > horizon else upper)


@pytest.mark.parametrize("seed", range(400))
def test_the_sieved_order_yields_the_plain_order_less_only_what_its_sieve_rules_out(seed):
    # Random trees (own jobs on inner nodes, many siblings alike so that values tie), random
    # needs and walltimes, and a sieve that tightens as the order is read, as a walk's does.
    rng = random.Random(seed)
    nodes, leaves = random_tree(rng)
    for n in nodes:
        if n != "Root" and rng.random() < 0.5:
            nodes[n]["shares"] = max(nodes[n]["shares"], 1)  # (0 shares: the plain merge, below)
    alike = rng.random() < 0.5  # no usage, nothing run: siblings' values tie
    usage = {} if alike else {n: rng.choice([0.0, 5.0, 1000.0]) for n in leaves}
    running = {} if alike else {n: rng.choice([0, 0, 1, 3]) for n in leaves}
    finished = {} if alike else {n: rng.choice([0.0, 0.5, 2.0]) for n in leaves}
    pending, jid = {}, 1
    owners = leaves + [n for n in nodes if n != "Root" and n not in leaves and rng.random() < 0.3]
    for n in owners:
        for _ in range(rng.choice([0, 1, 3, 40, 150])):
            pending.setdefault(n, []).append(jid)
            jid += rng.randint(1, 3)
    spec = {j: (Job(id=j, walltime=rng.choice([60.0, 600.0, 3600.0])), rng.choice([1, 1, 2, 4, 8, 16]))
            for ids in pending.values() for j in ids}
    tree = build(nodes, rng.choice([0, 2.0]), usage, running, finished, pending, make=spec.__getitem__)
    plain = [job for _, _, job in tree.ranked()]
    order = tree.order()
    if not isinstance(order, Sieved):  # a node with 0 shares: values could repeat
        assert list(order) == plain
        return
    # its head, worked out from the figures alone (EASY's carried passes ask for it)
    assert order.lead(1) == plain[:1] and order.resume() is None
    sieve, got, asked = None, [], []
    it = iter(order)
    while True:
        if rng.random() < 0.3:  # tighten (or set) the sieve
            upper = rng.randint(0, 16) if sieve is None else rng.randint(0, sieve[0])
            lasting = rng.randint(0, upper) if sieve is None else rng.randint(0, min(upper, sieve[2]))
            horizon = rng.choice([60.0, 600.0, 3600.0]) if sieve is None else sieve[1]
            sieve = order.sieve = (upper, horizon, lasting)
        job = next(it, None)
        if job is None:
            break
        got.append(job)
        asked.append(sieve)
    yielded = {j.id for j in got}
    assert [j for j in plain if j.id in yielded] == got  # the plain order, less some jobs
    passed = [j for j in plain if j.id not in yielded]
    assert order.passed == len(passed)
    # each job passed over fails the bound test under the sieve of the next read after it
    nxt = {}
    k = len(got)
    for j in reversed(plain):
        if j.id in yielded:
            k -= 1
        else:
            nxt[j.id] = asked[k] if k < len(got) else sieve
    for j in passed:
        assert nxt[j.id] is not None and hopeless(nxt[j.id], j, spec[j.id][1])


def shared_tree(rng):
    """A random tree whose every node has shares (its order is an Order), usage and running
    counts on its leaves (none in half the draws: siblings' values then tie), and the nodes
    that own pending jobs (every leaf, some inner nodes)."""
    nodes, leaves = random_tree(rng)
    for n in nodes:
        if n != "Root":
            nodes[n]["shares"] = max(nodes[n]["shares"], 1)
    alike = rng.random() < 0.5
    usage = {} if alike else {n: rng.choice([0.0, 5.0, 1000.0]) for n in leaves}
    running = {} if alike else {n: rng.choice([0, 0, 1, 3]) for n in leaves}
    owners = leaves + [n for n in nodes if n != "Root" and n not in leaves and rng.random() < 0.3]
    return nodes, usage, running, owners


@pytest.mark.parametrize("seed", range(300))
def test_the_head_worked_out_from_the_figures_is_the_plain_orders_first_job(seed):
    # Order.lead(1): each node's first job compared by value, ties by job id (ids given
    # in random order, so that a tie is not settled by which sibling came first)
    rng = random.Random(seed)
    nodes, usage, running, owners = shared_tree(rng)
    sizes = [rng.choice([0, 1, 1, 2, 5]) for _ in owners]
    ids = rng.sample(range(1, 10 * sum(sizes) + 2), sum(sizes))
    pending = {}
    for n, k in zip(owners, sizes):
        pending[n], ids = ids[:k], ids[k:]
    tree = build(nodes, rng.choice([0, 2.0]), usage, running, {}, pending)
    plain = [job.id for _, _, job in tree.ranked()]
    order = tree.order()
    assert isinstance(order, Sieved)
    assert [j.id for j in order.lead(1)] == plain[:1] and order.resume() is None
    assert [j.id for j in order] == plain  # (a reading after it begins afresh)


CLOSES = [frozenset({"owner"}), frozenset({"group"}), frozenset({"account"}), frozenset({"owner", "group"}),
          frozenset({"owner", "group", "account", "queue"})]


def closed_node(tree, job, attrs, top):
    """The node `close` must pass over: `job`'s highest (up to the top) of a kind in `attrs`."""
    kinds = {"owner": "user", "group": "group", "account": "project"}
    found, node = None, tree._of[job.id]
    while node is not None:
        if node.kind in {kinds.get(a) for a in attrs}:
            found = node
        if node is top:
            break
        node = node.parent
    return found


@pytest.mark.parametrize("seed", range(300))
def test_a_closed_order_yields_the_plain_order_less_the_closed_subtrees_from_then_on(seed):
    # As a walk closes a subtree a quota holds back whole (plan.Walk): random trees, own jobs
    # on inner nodes, siblings alike (ties) in half the seeds, closes at random moments.
    rng = random.Random(seed)
    nodes, usage, running, owners = shared_tree(rng)
    pending, jid = {}, 1
    for n in owners:
        for _ in range(rng.choice([0, 1, 3, 40])):
            pending.setdefault(n, []).append(jid)
            jid += rng.randint(1, 3)
    tree = build(nodes, rng.choice([0, 2.0]), usage, running, {}, pending)
    plain = [job for _, _, job in tree.ranked()]
    order = tree.order()
    assert isinstance(order, Sieved) and order.closable
    got, closes = [], {}  # index in got -> attrs closed after it
    for qjob in order:
        got.append(qjob)
        if rng.random() < 0.08:
            attrs = closes[len(got) - 1] = rng.choice(CLOSES)
            assert order.close(qjob, attrs) == (closed_node(tree, qjob, attrs, order.top) is not None)
    # the model: the plain order, each job dropped once a node above it is closed
    def above(qjob):
        node, path = tree._of[qjob.id], set()
        while node is not None:
            path.add(node)
            node = node.parent
        return path
    closed, want = set(), []
    for qjob in plain:
        if above(qjob) & closed:
            continue
        want.append(qjob)
        if len(want) - 1 in closes:
            found = closed_node(tree, qjob, closes[len(want) - 1], order.top)
            if found is not None:
                closed.add(found)
    assert got == want and order.passed == 0
    assert [order.covers(j) for j in plain] == [bool(above(j) & closed) for j in plain]


# --- configuration -------------------------------------------------------------------------
SITE = """
default_queue = "batch"
[[nodes]]
names = "n[01-04]"
cores = 1
[queues.batch]
[priority]
policy = "gridengine"
[usage]
metric = "slots"
half_life = "10:00:00"
[sharetree]
compensation_factor = 2
[sharetree.nodes.Root]
children = ["big", "small"]
[sharetree.nodes.big]
shares = 90
children = ["big/default"]
[sharetree.nodes."big/default"]
kind = "user"
shares = 1
[sharetree.nodes.small]
shares = 10
children = ["small/default"]
[sharetree.nodes."small/default"]
kind = "user"
shares = 1
"""


def site(extra=""):
    return config.build(config.loads(SITE + extra))


@pytest.mark.parametrize("change,message", [
    ('[sharetree.nodes.loop]\nchildren = ["loop2"]\n[sharetree.nodes.loop2]\nchildren = ["loop"]\n', "cycle"),
    ('[sharetree.nodes.neg]\nshares = -1\n', "shares: must be a non-negative number"),
    ('[sharetree.nodes.orphan]\nshares = 1\n', "not under Root"),
    ('[sharetree.nodes.odd]\nkind = "queue"\n', "is not group, project or user"),
])
def test_bad_share_trees_are_one_line(change, message):
    with pytest.raises(ConfigError, match=message):
        site(change)


def test_a_second_parent_and_a_missing_root_are_refused():
    text = SITE.replace('children = ["small/default"]', 'children = ["small/default", "big/default"]')
    with pytest.raises(ConfigError, match="already a child of big"):
        config.build(config.loads(text))
    with pytest.raises(ConfigError, match="needs a Root"):
        config.build(config.loads(SITE.replace("sharetree.nodes.Root", "sharetree.nodes.Top")))
    with pytest.raises(ConfigError, match="usage.metric"):
        site().__class__  # (the site itself builds)
        config.build(config.loads(SITE.replace('metric = "slots"', 'metric = "wall"')))
    with pytest.raises(ConfigError, match="does not use a share tree"):
        config.build(config.loads(SITE.replace('policy = "gridengine"', 'policy = "fifo"')))


def test_gridengine_gives_a_starved_group_its_share():
    s = site()
    for k in range(8):  # the big group fills the machine twice over first
        s.submit(job(1, 1000, owner=f"b{k % 2}", group="big"), 0)
    s.iterate(0)
    assert {j.owner for j in s.running()} == {"b0", "b1"}
    for k in range(3):
        s.submit(job(1, 1000, owner="s0", group="small"), 10)
    s.iterate(500)
    done = [j for j in s.running()]
    for j in done:
        s.job_ended(j.id, 1000, 0)
    s.iterate(1000)
    # small has used nothing: its jobs come first although submitted after big's
    assert sorted(j.owner for j in s.running()) == ["b0", "s0", "s0", "s0"]


def test_posix_priority_outweighs_tickets_and_the_full_path_agrees_with_the_lazy_one():
    s = site()
    for k in range(6):
        s.submit(job(1, 1000, owner="s0", group="small"), 0)
    s.submit(job(1, 1000, owner="b0", group="big"), 0)
    ctx = s.context(10)
    lazy = [j.id for j in s.policy.ordered(ctx)]
    full = sorted(s.policy.explain(ctx).items(), key=lambda kv: -kv[1]["priority"])
    assert lazy == [jid for jid, _ in full]
    s.alter(3, 10, priority=100)  # -p 100: first, whatever its tickets
    order = [j.id for j in s.policy.ordered(s.context(10))]
    assert order[0] == 3 and sorted(order) == list(range(1, 8))


def test_posix_priority_is_normalised_over_its_fixed_range_as_grid_engine_does():
    """-p 1 adds 1/2047 of weight_priority (Grid Engine's range, -1023 to 1024), not all of it:
    it does not beat fair share's tickets as min-max over the waiting jobs made it."""
    s = site()
    for k in range(6):
        s.submit(job(1, 1000, owner="s0", group="small"), 0)
    s.submit(job(1, 1000, owner="b0", group="big"), 0)
    before = [j.id for j in s.policy.ordered(s.context(10))]
    last = before[-1]
    s.alter(last, 10, priority=1)
    factors = s.policy.explain(s.context(10))
    assert factors[last]["priority"] - factors[before[-2]]["priority"] < 1.0 / 2047 + 0.01
    assert [j.id for j in s.policy.ordered(s.context(10))][0] == before[0]


def test_a_deadline_raises_urgency_as_grid_engine_computes_it():
    """Urgency gains weight_deadline / max(seconds to the deadline, 1) (sge_urgency): with
    the installed weights (urgency 0.1, tickets 0.01) a near deadline outranks tickets."""
    s = site()
    for k in range(3):
        s.submit(job(1, 1000, owner="s0", group="small", deadline=100.0 if k == 2 else None), 0)
    s.submit(job(1, 1000, owner="s0", group="small"), 0)  # (the 4th: the tree orders it last)
    factors = s.policy.explain(s.context(0))
    assert factors[3]["deadline"] == pytest.approx(3600000 / 100) and factors[1]["deadline"] == 0.0
    assert factors[3]["urgency"] == pytest.approx(1000 + 36000) and factors[1]["urgency"] == 1000
    # tickets: the k-th pending job of s0 gets stt / k, normalised over the four
    tix = [factors[j]["tickets"] for j in (1, 2, 3, 4)]
    assert tix[0] / tix[1] == pytest.approx(2) and tix[0] / tix[2] == pytest.approx(3)
    for j in (1, 2, 3, 4):
        nt = (tix[j - 1] - min(tix)) / (max(tix) - min(tix))
        nu = 1.0 if j == 3 else 0.0
        assert factors[j]["priority"] == pytest.approx(0.1 * nu + 0.01 * nt + 1.0 * 1023 / 2047)  # (-p 0 over -1023..1024)
    assert [j.id for j in s.policy.ordered(s.context(0))] == [3, 1, 2, 4]
    # past its deadline a job keeps the largest contribution, weight_deadline / 1
    assert s.policy.explain(s.context(500))[3]["deadline"] == pytest.approx(3600000)
    # once it runs, the rest are in the tree's own order again, and a deadline given by
    # qalter counts at once
    s.iterate(0)
    assert sorted(j.id for j in s.running()) == [1, 2, 3, 4]
    for k in range(3):
        s.submit(job(1, 1000, owner="s0", group="small"), 1)
    assert [j.id for j in s.policy.ordered(s.context(1))] == [5, 6, 7]
    s.alter(7, 1, deadline=3601.0)
    assert [j.id for j in s.policy.ordered(s.context(1))] == [7, 5, 6]
    assert s.policy.explain(s.context(1))[7]["deadline"] == pytest.approx(1000)
    # a site that gives deadlines no weight ([priority] weight_deadline = 0)
    off = config.build(config.loads(SITE.replace('policy = "gridengine"', 'policy = "gridengine"\nweight_deadline = 0')))
    for k in range(3):
        off.submit(job(1, 1000, owner="s0", group="small", deadline=100.0 if k == 2 else None), 0)
    assert [j.id for j in off.policy.ordered(off.context(0))] == [1, 2, 3]


def test_multifactor_by_hand():
    text = SITE.replace('policy = "gridengine"', 'policy = "multifactor"\nweight_age = 0\nweight_queue = 0')
    s = config.build(config.loads(text))
    a = s.submit(job(1, 100, owner="b0", group="big"), 0)
    s.usage.charge(("b0", "big", ""), 300.0, 0)
    s.usage.charge(("s0", "small", ""), 100.0, 0)
    d = s.policy.describe(a, s.context(0))
    # b0 has used 3/4 of all; its share is 90/100 of the machine (its copy of big's default)
    assert d["fairshare"] == pytest.approx(2 ** (-0.75 / 0.9))
    assert d["user"] == pytest.approx(1024 / 2047) and d["priority"] == pytest.approx(10000 * d["fairshare"])


def test_fifo_ranks_by_queue_priority_then_p_unless_the_site_says_not():
    text = """
default_queue = "low"
[[nodes]]
names = "n01"
[queues.low]
[queues.high]
priority = 10
"""
    for ranked in (True, False):
        s = config.build(config.loads(text + ("" if ranked else "[priority]\nqueue_priority = false\n"
                                                               "job_priority = false\n")))
        s.submit(job(1, 100), 0)
        s.submit(job(1, 100, priority=5), 0)
        s.submit(job(1, 100, queue="high"), 0)
        s.iterate(0)
        first = s.running()[0].id
        assert first == (3 if ranked else 1)
        s.job_ended(first, 100, 0)
        s.iterate(100)
        assert s.running()[0].id == (2 if ranked else 2)


@pytest.mark.parametrize("seed", range(6))
def test_a_replay_reading_the_sieved_order_decides_as_one_reading_the_plain_order(seed, monkeypatch):
    # Deep queues of many users and groups on a small machine, so that most passes only
    # backfill and the sieve passes over most of the queue (ties too: users start alike).
    import tomllib
    from pathlib import Path

    from hpcsched.sim.simulate import record, simulate
    rng = random.Random(seed)
    t, work = 0.0, []
    for k in range(1, 400):
        t += rng.expovariate(1 / 30)
        req = rng.choice([60, 600, 3600, 7200])
        work.append(record(k, t, rng.choice([1, 1, 2, 4, 8, 16, 32]), rng.uniform(1, req), req,
                           user=rng.randint(1, 12), group=rng.randint(1, 4)))
    with open(Path(__file__).parent.parent / "examples" / "ccin2p3.toml", "rb") as f:
        cfg = tomllib.load(f)
    del cfg["priority"]["queue_urgency"]  # (one urgency for all: the tree's own order, read lazily)

    def starts():
        r = simulate(work, config=cfg, nodes=32)
        return [(f.record.job, f.start, f.backfill) for f in r.jobs]
    orders, original = [], ShareTree.order

    def kept(tree):
        orders.append(original(tree))
        return orders[-1]
    monkeypatch.setattr(ShareTree, "order", kept)
    sieved = starts()
    assert sum(o.passed for o in orders if isinstance(o, Sieved)) > 1000  # (it passed over jobs)
    monkeypatch.setattr(ShareTree, "order", lambda tree: (job for _, _, job in tree._ranked(tree._top())))
    assert starts() == sieved


@pytest.mark.parametrize("seed", range(20))
def test_sums_kept_from_pass_to_pass_equal_a_tree_adding_up_afresh(seed):
    # The tree adds up again only the nodes above keys charged since the last pass
    # (Usage.take_changed).  A new tree, adding up everything, must read the same figures
    # bit for bit at every pass; and each node's usage is its keys' Usage.value summed.
    rng = random.Random(seed)
    nodes = {"Root": {"children": ["g1", "g2"]}, "g1": {"shares": 3, "children": ["users"]},
             "g2": {"shares": 1, "children": ["users"]}, "users": {"name": "default", "shares": 1}}
    usage = Usage("slots", half_life=rng.choice([0.0, 600.0, 86400.0]), window=rng.choice([0.0, 640.0, 6400.0]))
    tree = ShareTree(nodes, rng.choice([0.0, 2.0]), ("group", "user"))
    keys = [(f"u{i}", f"g{1 + i % 2}", "") for i in range(6)]
    running, pending, t, jid = [], {}, 0.0, 1
    for step in range(120):
        t += rng.choice([1.0, 7.0, 60.0, 300.0])
        event = rng.random()
        if event < 0.3:
            key = rng.choice(keys)
            usage.started(key, rng.choice([1.0, 4.0]), t)
            running.append((key, usage.records[key].rate))
        elif event < 0.5 and running:
            key, _ = running.pop(rng.randrange(len(running)))
            usage.ended(key, 1.0, t)
        elif event < 0.75:
            job = Job(id=jid)
            pending[jid] = rng.choice(keys)
            tree.add(job, pending[jid], 1)
            jid += 1
        elif pending:
            gone = rng.choice(sorted(pending))
            tree.remove(Job(id=gone))
            del pending[gone]
        if rng.random() < 0.1:
            usage.charge(rng.choice(keys), 50.0, t)  # an operator's adjustment
        if rng.random() < 0.7:
            usage.accrue(t)  # (a pass charges its running jobs first; sometimes not)
        every = rng.random() < 0.05  # (mdiag -f: figures on every node, cleared by the next pass)
        tree.compute(usage, t, every)
        fresh = ShareTree(nodes, tree.compensation_factor, ("group", "user"))
        for j, key in pending.items():
            fresh.add(Job(id=j), key, 1)
        fresh.compute(usage, t)
        assert [(v, j) for v, j, _ in tree.ranked()] == [(v, j) for v, j, _ in fresh.ranked()]
        # every node's figures, the active nodes' running counts and targets kept from pass
        # to pass included (a node no longer active has none; nor has one made for a key
        # the fresh tree never saw)
        def figures(tree):
            out = {n.path: (n.running, n.usage, n.finished, n.ltt, n.oltt, n.stt, n.ostt) for n in tree.root.walk()
                   if n.running or n.pending or not every}
            return {path: f for path, f in out.items() if any(f)}
        got, want = figures(tree), figures(fresh)
        assert got == want, (seed, step)  # (the root's figures too: ranked works them out)
        for node in tree.root.walk():  # the children with pending jobs, kept as jobs come and go
            assert set(node.busy) == {c for c in node.children.values() if c.pending}
    tree.compute(usage, t, every=True)
    for node in tree.root.walk():
        under = [k for k in usage.records if tree.node_of(k).path.startswith(node.path.rstrip("/") + "/")
                 or tree.node_of(k) is node]
        assert node.usage == pytest.approx(sum(usage.value(usage.records[k], t)[0] for k in under), rel=1e-9)


def test_a_pass_that_carries_its_walk_on_leaves_no_order_in_a_cycle():
    # A replay pauses the cycle collector (sim/simulate.py), so an order left in a
    # reference cycle (a reading begun by `lead` and never taken back) would pile up.
    import gc

    from hpcsched.core.planner import Planner
    from hpcsched.policies.sharetree import Order
    from hpcsched.sim.simulate import record, simulate
    rng = random.Random(7)
    work, t = [], 0.0
    for k in range(1, 300):
        t += rng.expovariate(1 / 60)
        work.append(record(k, t, rng.choice([1, 2, 4, 8]), rng.uniform(60, 3600), 3600, user=rng.randint(1, 6),
                           group=rng.randint(1, 3)))
    tree = {"Root": {"children": ["g"]}, "g": {"name": "default", "children": ["u"]}, "u": {"name": "default"}}
    cfg = {"priority": {"policy": "gridengine", "slots_urgency": 0},  # (the tree's own order: an Order)
           "sharetree": {"levels": ["group", "user"], "nodes": tree}}
    leads, original = [], Planner._still_lead

    def counted(self, order, walk):
        order, lead = original(self, order, walk)
        leads.append(lead)
        return order, lead
    gc.collect()
    gc.disable()
    try:
        Planner._still_lead = counted
        simulate(work, config=cfg, nodes=16)
        left = sum(isinstance(x, Order) for x in gc.get_objects())  # (before any collection)
    finally:
        Planner._still_lead = original
        gc.enable()
    assert sum(leads) > 20  # (passes carried on after reading the order's head)
    assert left == 0


def test_on_a_grid_engine_site_a_user_may_only_lower_a_jobs_priority(rig, capsys, monkeypatch):
    """qsub -p and qalter -p above 0 are an operator's (Grid Engine's rule); lowering is anyone's."""
    import io

    from hpcsched.pbs import qctl, qsub
    from hpcsched.pbs.errors import CommandError
    home = rig / "home"
    text = (home / "config.toml").read_text().replace('policy = "fifo"', 'policy = "gridengine"')
    (home / "config.toml").write_text(text + '[sharetree]\nlevels = ["user"]\n[sharetree.nodes.Root]\n')

    def sub(*args):
        return qsub.submit(list(args), stdin=io.StringIO("true\n"), cwd=str(rig), env={})[0]
    with pytest.raises(CommandError, match=r"only operators and managers may raise a job's priority above 0 \(-p 5\)"):
        sub("-p", "5")
    jid = sub("-p", "-5")
    assert qctl.QALTER(["-p", "100", jid]) == 159
    assert "may raise a job's priority above 0 (-p 100)" in capsys.readouterr().err
    assert qctl.QALTER(["-p", "-10", jid]) == 0
    monkeypatch.setenv("HPCSCHED_USER", "olga")  # (an operator)
    assert qctl.QALTER(["-p", "100", jid]) == 0


def test_setting_a_users_usage_lands_on_their_node_and_keeps_the_finished_count():
    """`hpcsched usage user carol --set` for a user with no record charges a key at carol's
    node of the tree (it went to a key outside it: mdiag -f read 0), and a setting leaves
    the decayed finished-job count the tree divides by."""
    s = config.build(config.loads(SITE.replace('children = ["big", "small"]', 'children = ["big", "small", "chem"]')
                                  + '[sharetree.nodes.chem]\nkind = "project"\nchildren = ["carol"]\n'
                                  '[sharetree.nodes.carol]\nkind = "user"\n'))
    s.set_usage("user", "carol", 100.0, 360_000.0)
    (key,) = [k for k in s.usage.records if k[0] == "carol"]
    assert key == ("carol", "", "chem") and s.policy.tree.node_of(key).name == "carol"
    done = s.submit(job(1, 100, owner="s0", group="small"), 0)
    s.iterate(0)
    s.job_ended(done.id, 50, 0)
    before = s.usage.value(s.usage.records[("s0", "small", "")], 60.0)[1]
    s.set_usage("user", "s0", 60.0, 10.0)
    assert s.usage.value(s.usage.records[("s0", "small", "")], 60.0) == (10.0, before) and before > 0


def test_tickets_are_the_groups_entitlements_as_sge_sort_pending_job_nodes_gives_them():
    """Grid Engine hands a group's k-th pending job stt / (R + F + k) of the share-tree
    tickets and does not revalue them at the root: big (stt 0.9) gets 9,000 and 4,500 of
    10,000, small (0.1) 1,000.  (Revalued at the root they were 10,000, 5,000 and 3,333:
    the same order alone, but once -p differs the sums are not Grid Engine's.)"""
    s = site()
    for owner, group in (("b0", "big"), ("b0", "big"), ("s0", "small")):
        s.submit(job(1, 1000, owner=owner, group=group), 0)
    tickets = {jid: f["tickets"] for jid, f in s.policy.explain(s.context(10)).items()}
    assert tickets == pytest.approx({1: 9000.0, 2: 4500.0, 3: 1000.0})
    # -p 7 adds 7/2047 = 0.00342 of priority: less than job 2's tickets give it over job 3's
    # (0.01 x (4,500 - 1,000) / 8,000 = 0.00438), more than root-revalued ones did (0.0025)
    s.alter(3, 10, priority=7)
    assert [j.id for j in s.policy.ordered(s.context(10))] == [1, 2, 3]
    s.alter(3, 10, priority=9)  # 0.00440: now it passes job 2
    assert [j.id for j in s.policy.ordered(s.context(10))] == [1, 3, 2]


def test_urgency_sums_each_requested_resource_and_the_queues_own():
    """Grid Engine's resource urgency: every requested resource's urgency times the
    amount (slots, memory in GB, GPUs, scratch in GB, a consumable), plus a queue's own
    for the jobs routed to it; CC-IN2P3's multi-core queues weigh this way."""
    from hpcsched.core.jobs import Request
    pol = config.make_policy("gridengine", {"slots_urgency": 0, "urgency": {"mem": 10, "matlab": 500, "gpus": 7,
                                                                          "disk": 1},
                                            "queue_urgency": {"mc": 1000}})
    j = Job(request=Request(nodes=2, ppn=1, mem=4096, gpus=1), disk=2048, consumes={"matlab": 1}, queue="batch")
    assert pol.resource_urgency(j) == 10 * 8 + 500 + 7 * 2 + 2
    assert pol.resource_urgency(Job(request=Request(nodes=1), queue="mc")) == 1000
    installed = config.make_policy("gridengine", {})
    assert installed.resource_urgency(Job(request=Request(nodes=3))) == 3000  # (slots_urgency 1000 a slot)

    def with_priority(line: str, more: str = "") -> str:
        return SITE.replace('policy = "gridengine"', 'policy = "gridengine"\n' + line) + more
    for line, message in (("urgency = { licence = 5 }", "priority.urgency.licence: not slots, mem"),
                          ("queue_urgency = { nosuch = 5 }", "priority.queue_urgency.nosuch: no such queue"),
                          ("urgency = { mem = -1 }", "priority.urgency: must be a table of non-negative")):
        with pytest.raises(ConfigError, match=message):
            config.build(config.loads(with_priority(line)))
    # in the order: the multi-core queue's job passes the sequential ones, whatever its tickets
    text = with_priority("slots_urgency = 0\nqueue_urgency = { mc = 1000 }",
                         '\n[queues.default]\nroute_to = ["batch", "mc"]\n[queues.mc]\nmin_cores = 2\n')
    text = text.replace('default_queue = "batch"', 'default_queue = "default"').replace(
        "[queues.batch]", "[queues.batch]\nmax_cores = 1")
    s = config.build(config.loads(text))
    for k in range(3):
        s.submit(job(1, 1000, owner="b0", group="big"), 0)
    wide = s.submit(job(2, 1000, owner="s0", group="small"), 0)
    order = [j.id for j in s.policy.ordered(s.context(10))]
    assert wide.queue == "mc" and order[0] == wide.id
