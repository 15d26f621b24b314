"""Resource quota sets and consumables (core/quotas.py): Grid Engine's semantics, through a
configured scheduler and through qsub, qstat and checkjob."""
import random

import pytest
from helpers import job

from hpcsched import config
from hpcsched.core.errors import ConfigError, Rejected
from hpcsched.core.jobs import Request
from hpcsched.pbs.errors import UsageError

SITE = """
default_queue = "long"
[[nodes]]
names = "n[01-04]"
cores = 4
shared = true
[queues.long]
[queues.short]
[consumables]
matlab = 3
[[quotas]]
name = "groups"
[[quotas.rules]]
name = "atlas"
groups = "atlas"
limit = { slots = 6 }
[[quotas.rules]]
name = "per-group"
groups = "{*}"
limit = { slots = 4 }
[[quotas]]
name = "users"
[[quotas.rules]]
name = "not-bob"
users = ["*", "!bob"]
limit = { jobs = 100 }
[[quotas.rules]]
name = "bob"
users = "bob"
queues = "short"
limit = { jobs = 1 }
"""


def site(text=SITE):
    return config.build(config.loads(text))


def core(n, **kw):
    return job(request=Request(nodes=0, ppn=0, cores=n), **kw)



def test_first_matching_rule_wins_and_per_each_counts_each_group_alone():
    s = site()
    for k in range(4):  # atlas: 6 slots together
        s.submit(core(2, owner="a", group="atlas"), 0)
    for g in ("cms", "lhcb"):  # every other group: 4 each
        for k in range(3):
            s.submit(core(2, owner="c", group=g), 0)
    plan = s.iterate(0)
    groups = sorted(j.group for j in s.running())
    assert groups == ["atlas"] * 3 + ["cms"] * 2 + ["lhcb"] * 2
    assert plan.reason(4) == 'exceeds limit "groups/atlas" (slots: 6 in use + 2 > 6)'
    assert plan.reason(7).endswith('"groups/per-group" (slots: 4 in use + 2 > 4)')
    assert s.jobs[4].comment == 'Not Running: exceeds limit "groups/atlas" (slots: 6 in use + 2 > 6)'
    s.job_ended(1, 10, 0)
    s.iterate(10)
    assert s.jobs[4].state.value == "running" and s.jobs[4].comment == ""


def test_exclusions_queue_filters_and_a_global_consumable():
    s = site()
    s.submit(core(1, owner="bob", group="g1", queue="short"), 0)
    s.submit(core(1, owner="bob", group="g2", queue="short"), 0)  # bob: one job in short
    s.submit(core(1, owner="bob", group="g3", queue="long"), 0)  # no rule of the set matches: free
    for k in range(4):
        s.submit(core(1, owner=f"u{k}", group=f"m{k}", consumes={"matlab": 1}), 0)
    plan = s.iterate(0)
    assert plan.reason(2).startswith('exceeds limit "users/bob" (jobs: 1 in use')
    assert 3 in {j.id for j in s.running()}
    assert plan.reason(7) == 'exceeds limit "consumables/total" (matlab: 3 in use + 1 > 3)'


FAIR = """
default_queue = "long"
[[nodes]]
names = "n[01-02]"
cores = 4
shared = true
[queues.long]
[priority]
policy = "gridengine"
[sharetree]
levels = ["group", "user"]
[sharetree.nodes.Root]
children = ["g0", "g1", "g2"]
[sharetree.nodes.g0]
shares = 3
children = ["g0/default"]
[sharetree.nodes.g1]
shares = 2
children = ["g1/default"]
[sharetree.nodes.g2]
children = ["g2/default"]
[sharetree.nodes."g0/default"]
[sharetree.nodes."g1/default"]
[sharetree.nodes."g2/default"]
[[quotas]]
name = "groups"
[[quotas.rules]]
name = "g0"
groups = "g0"
limit = { slots = 3 }
[[quotas.rules]]
name = "each"
groups = "{*}"
limit = { slots = 5 }
[[quotas]]
name = "users"
[[quotas.rules]]
name = "vip"
users = "u0"
limit = { jobs = 100 }
[[quotas.rules]]
name = "each"
users = "{*}"
limit = { jobs = 2 }
[[quotas]]
name = "g2"
[[quotas.rules]]
name = "g2"
groups = "g2"
limit = { jobs = 3 }
[[quotas.rules]]
name = "each"
users = "{*}"
limit = { jobs = 2 }
"""


def test_a_full_count_closes_the_names_it_counts():
    s = site(FAIR)
    for k in range(6):
        s.submit(core(1, owner="u1", group=f"g{k % 3}"), 0)
    s.submit(core(1, owner="u0", group="g0"), 0)
    s.iterate(0)
    gate = s.planner.walk.gate
    u1 = next(j for j in s.jobs.values() if j.owner == "u1" and j.state.value == "queued")
    assert gate.closes(u1) == {"owner"}  # users/each: u1 runs 2 jobs, first rule for every u1 job
    s2 = site(FAIR)
    for k in range(5):
        s2.submit(core(1, owner=f"v{k}", group="g0"), 0)
    s2.submit(core(1, owner="u0", group="g1"), 0)
    s2.iterate(0)
    g0 = next(j for j in s2.jobs.values() if j.group == "g0" and j.state.value == "queued")
    assert s2.planner.walk.gate.closes(g0) == {"group"}  # groups/g0 (3 slots) is full
    # g2/each holds u1 (2 jobs) but is not the first rule of g2 for u1's jobs in g2: no close
    s3 = site(FAIR)
    held = s3.submit(core(1, owner="u1", group="g0"), 0)
    assert s3.quotas.closes(held, {(2, 1, ("u1",)): {"jobs": 2}}) == frozenset()
    assert s3.quotas.closes(held, {(1, 1, ("u1",)): {"jobs": 2}}) == {"owner"}  # (users/each is)
    # users/bob counts bob's jobs in short only: full, it closes neither bob nor short
    s4 = site()
    bob = s4.submit(core(1, owner="bob", group="g1", queue="short"), 0)
    assert s4.quotas.closes(bob, {(1, 1, ()): {"jobs": 1}}) == frozenset()
    # u0's first rule of "users" is vip: "users/each" could never close u0's jobs
    assert s2.quotas.closes(s2.jobs[6], {(1, 1, ("u0",)): {"jobs": 2}}) == frozenset()
    # groups/each is full for g1 at 5, and g1's first rule: "g0" names another group
    assert s2.quotas.closes(s2.jobs[6], {(0, 1, ("g1",)): {"slots": 5}}) == {"group"}
    # ...not full for a job of one slot at 4
    assert s2.quotas.closes(s2.jobs[6], {(0, 1, ("g1",)): {"slots": 4}}) == frozenset()


@pytest.mark.parametrize("seed", range(25))
def test_passing_over_a_closed_subtree_decides_as_reading_it(seed, monkeypatch):
    # Two schedulers on the same stream, one whose share-tree order passes over a group or a
    # user a quota holds back whole, one reading every job: the same starts and reservations
    # every pass; every job walked has the same reason, every job passed over a quota's.
    from hpcsched.policies.sharetree import Order
    rng = random.Random(seed)
    a, b = site(FAIR), site(FAIR)
    t, passed_over = 0.0, 0
    for step in range(30):
        for _ in range(rng.randint(0, 12)):
            owner, group = f"u{rng.randint(0, 5)}", f"g{rng.randint(0, 2)}"
            wall = rng.choice([100.0, 300.0, 900.0])  # (one slot each: the tree's own order)
            for s in (a, b):
                s.submit(core(1, owner=owner, group=group, wall=wall), t)
        plans = []
        for s, closable in ((a, True), (b, False)):
            monkeypatch.setattr(Order, "closable", closable)
            plans.append(s.iterate(t))
        pa, pb = plans
        assert [(x.job_id, x.allocation.units) for x in pa.started] == [(x.job_id, x.allocation.units)
                                                                         for x in pb.started]
        assert pa.reserved.keys() == pb.reserved.keys()
        assert pb.passed_reason is None
        for jid, qjob in a.jobs.items():
            if qjob.state.value != "queued":
                continue
            if jid in pa.reasons:  # walked by both (the walks stop at the same job)
                assert pa.reasons[jid] == pb.reasons[jid]
            elif pa.held_reason(jid):  # passed over: a quota holds it back (the other walk may not have got to it)
                passed_over += 1
                assert pa.reason(jid).startswith("exceeds limit")
                assert pb.reason(jid).startswith("exceeds limit") or jid not in pb.reasons
                assert a.comment(qjob) == "Not Running: " + pa.reason(jid)
            else:
                assert pa.reason(jid) == pb.reason(jid)
        t += rng.choice([50.0, 100.0, 200.0])
        for s in (a, b):
            for j in [j for j in s.running() if j.start_time + j.walltime <= t]:
                s.job_ended(j.id, t, 0)
    assert passed_over > 0
    # a job submitted since the pass is not one it passed over, whoever's it is
    over = [j for j in a.jobs.values() if a.planner.plan.held_reason(j.id)]
    if over:
        late = a.submit(core(1, owner=over[0].owner, group=over[0].group), t)
        assert a.planner.plan.held_reason(late.id) is None and a.comment(late) == ""
    # comments passed over are saved as shown
    again = site(FAIR).restore(a.to_dict())
    assert {j.id: again.jobs[j.id].comment for j in a.jobs.values()} == {j.id: a.comment(j) for j in a.jobs.values()}


MACHINE = """
default_queue = "long"
[[nodes]]
names = "n[01-02]"
cores = 4
shared = true
features = ["gpu"]
[[nodes]]
names = "n[03-04]"
cores = 4
shared = true
[queues.long]
"""
HOSTS = MACHINE + """
[[quotas]]
name = "perhost"
[[quotas.rules]]
name = "slots"
hosts = "{*}"
limit = { slots = 3 }
[[quotas]]
name = "gpu"
[[quotas.rules]]
name = "alice-off-n01"
users = "alice"
hosts = "n01"
limit = { slots = 0 }
[[quotas.rules]]
name = "gpu-users"
users = "{*}"
hosts = "@gpu"
limit = { slots = 2 }
"""


def per_host(s):
    """Each node's cores in use, per owner, from the running jobs' allocations."""
    out = {}
    for j in s.running():
        for node, cores in zip(j.allocation.nodes, j.allocation.cores):
            out.setdefault(node, {}).setdefault(j.owner, 0)
            out[node][j.owner] += len(cores)
    return out


def test_host_filters_limit_each_node_and_narrow_where_a_job_goes():
    """hosts {*}: a limit per node; hosts n01 / @gpu: the first rule matching job and node
    counts there (alice may not use n01; on the gpu nodes together each user has 2
    cores: `hosts = "@gpu"` is one count over them, `"{@gpu}"` would be one per node)."""
    s = site(HOSTS)
    for k in range(14):
        s.submit(core(1, owner="alice" if k % 2 else "bob"), 0)
    plan = s.iterate(0)
    used = per_host(s)
    assert sorted(used) == ["n01", "n02", "n03", "n04"]
    assert all(sum(u.values()) <= 3 for u in used.values())  # perhost/slots
    assert "alice" not in used["n01"]  # gpu/alice-off-n01
    assert used["n01"] == {"bob": 2} and used["n02"] == {"alice": 2}
    assert sum(sum(u.values()) for u in used.values()) == 10  # 2 + 2 + 3 + 3
    held = [j for j in s.jobs.values() if j.state.value == "queued"]
    assert len(held) == 4
    assert all(plan.reason(j.id).startswith('exceeds limit "') and "on every node it may use" in plan.reason(j.id)
               for j in held)
    assert all(j.comment.startswith("Not Running: exceeds limit") for j in held)
    # a job ending frees its node's count: the next job goes there
    bob_n03 = next(j for j in s.running() if j.owner == "bob" and j.allocation.nodes == ("n03",))
    s.job_ended(bob_n03.id, 10, 0)
    s.iterate(10)
    assert sum(per_host(s)["n03"].values()) == 3 and sum(j.state.value == "queued" for j in s.jobs.values()) == 3
    # a restored scheduler counts the running jobs host by host as this one does
    again = site(HOSTS).restore(s.to_dict())
    for sched in (s, again):
        for _ in range(4):
            sched.submit(core(1, owner="carol"), 20)
    started = [st.job_id for st in s.iterate(20).started]
    assert len(started) == 2 and started == [st.job_id for st in again.iterate(20).started]
    assert per_host(s) == per_host(again)
    # one count per gpu node instead: bob gets 2 on each
    s = site(HOSTS.replace('hosts = "@gpu"', 'hosts = "{@gpu}"'))
    for k in range(14):
        s.submit(core(1, owner="alice" if k % 2 else "bob"), 0)
    s.iterate(0)
    used = per_host(s)
    assert used["n01"] == {"bob": 2} and used["n02"] == {"alice": 2, "bob": 1}


def test_a_job_on_several_nodes_of_one_count_counts_once():
    """An aggregate count (`hosts = "@gpu"`) holds a job spanning two of its nodes once in
    `jobs` and all its cores in `slots`."""
    text = MACHINE + """
[[quotas]]
name = "gpu"
[[quotas.rules]]
name = "gpu-users"
users = "{*}"
hosts = "@gpu"
limit = { jobs = 2, slots = 7 }
"""
    s = site(text)
    s.submit(core(6, owner="bob"), 0)  # n01 and n02: one job, 6 slots
    s.submit(core(4, owner="carol"), 0)  # n03
    s.submit(core(4, owner="carol"), 0)  # n04
    s.submit(core(1, owner="bob"), 0)  # only n02 has room: bob's second gpu job, his 7th slot
    s.submit(core(1, owner="bob"), 0)  # a third job and an 8th slot: no
    plan = s.iterate(0)
    assert per_host(s) == {"n01": {"bob": 4}, "n02": {"bob": 3}, "n03": {"carol": 4}, "n04": {"carol": 4}}
    # n02's last core is left out of its placement: it waits for n03 or n04
    assert plan.reason(5).startswith("reserved") and plan.reason(5)[-3:] in ("n03", "n04")


@pytest.mark.parametrize("seed", range(40))
def test_random_host_quotas_are_never_passed(seed):
    """Whatever the jobs, their sizes and ends: after every pass, every host-read rule's
    count, worked out afresh from the running jobs' allocations, is within its limit, and
    a job waits only when some node's limit (or the machine) leaves it out."""
    import random
    rng = random.Random(seed)
    limit = rng.choice([1, 2, 3])
    text = HOSTS.replace('"{*}"\nlimit = { slots = 3 }', f'"{{*}}"\nlimit = {{ slots = {limit + 1} }}')
    text = text.replace('"@gpu"\nlimit = { slots = 2 }', f'"@gpu"\nlimit = {{ slots = {limit} }}')
    assert text.count("limit = {") == 3 and f"slots = {limit + 1} }}" in text
    s = site(text)
    now = 0.0
    for _ in range(12):
        for _ in range(rng.randint(0, 4)):
            s.submit(core(rng.randint(1, 3), owner=rng.choice(["alice", "bob", "carol"]), wall=1000), now)
        plan = s.iterate(now)
        used = per_host(s)
        for node, owners in used.items():
            assert sum(owners.values()) <= limit + 1
            if node in ("n01", "n02"):
                assert all(v <= limit for v in owners.values())
        assert "alice" not in used.get("n01", {})
        gpu_use = {}
        for node in ("n01", "n02"):
            for owner, n in used.get(node, {}).items():
                gpu_use[owner] = gpu_use.get(owner, 0) + n

        def admits(node, j):  # the rules read by hand (counts only grow in a pass)
            n = j.request.cores
            if sum(used.get(node, {}).values()) + n > limit + 1:
                return False
            if node == "n01" and j.owner == "alice":
                return False
            return node not in ("n01", "n02") or gpu_use.get(j.owner, 0) + n <= limit
        for j in (j for j in s.jobs.values() if j.state.value == "queued"):
            if plan.reason(j.id).startswith("exceeds limit"):
                assert not any(admits(node, j) for node in ("n01", "n02", "n03", "n04"))
        running = list(s.running())
        for j in rng.sample(running, k=min(len(running), rng.randint(0, 3))):
            s.job_ended(j.id, now + 1, 0)
        now += 10


@pytest.mark.parametrize("rule,message", [
    ('hosts = "n09"', "hosts names 'n09', which no node is"),
    ('hosts = "{@fpga}"', "hosts names '@fpga', which no node has"),
    ('hosts = 3', "hosts: must be a name list"),
])
def test_bad_host_filters_are_one_line(rule, message):
    with pytest.raises(ConfigError, match=message):
        site(HOSTS.replace('hosts = "n01"', rule))


def test_jobs_that_can_never_run_are_refused():
    s = site()
    with pytest.raises(Rejected, match="unknown consumable 'idl'"):
        s.submit(core(1, consumes={"idl": 1}), 0)
    with pytest.raises(Rejected, match="more than limit groups/atlas allows"):
        s.submit(core(8, group="atlas"), 0)
    with pytest.raises(Rejected, match="4 matlab, more than limit consumables/total"):
        s.submit(core(1, consumes={"matlab": 4}), 0)


@pytest.mark.parametrize("change,message", [
    ("limit = { slots = 6 }", "names no resource"),
    ("limit = { licences = 6 }", "not slots, jobs, mem or a declared consumable"),
    ('groups = "atlas"', "an empty name"),
    ("matlab = 3", "must be a non-negative number"),
])
def test_bad_quota_config_is_one_line(change, message):
    replacement = {"limit = { slots = 6 }": "limit = {}", "limit = { licences = 6 }": "limit = { licences = 6 }",
                   'groups = "atlas"': 'groups = "atlas,"', "matlab = 3": 'matlab = "three"'}[change]
    text = SITE.replace(change, replacement, 1)
    if change == "limit = { licences = 6 }":
        text = SITE.replace("limit = { slots = 6 }", replacement, 1)
    with pytest.raises(ConfigError, match=message):
        site(text)


def test_qsub_counts_software_against_a_consumable_and_shows_the_quota(rig, capsys):
    from test_commands import stat, submit
    from test_maui_psc import run, server_pass
    home = rig / "home"
    (home / "config.toml").write_text((home / "config.toml").read_text()
                                      + "\n[consumables]\nmatlab = 1\n")
    submit("-l", "software=matlab,walltime=01:00:00")
    submit("-l", "matlab=1,walltime=01:00:00")
    server_pass()
    out = stat("-f", "2")[1]
    assert 'comment = Not Running: exceeds limit "consumables/total" (matlab: 1 in use + 1 > 1)' in out
    status, out = run("checkjob", "2")
    assert status == 0 and 'exceeds limit "consumables/total"' in out
    # nodes are free for it now, but it does not start now: the estimate says so
    assert "Estimated start: unknown while the limit holds it back (nodes free for it at " in out
    status, out = run("showstart", "2")
    assert status == 0 and out.endswith("\n(a limit holds the job back: the estimate counts free nodes only)\n")
    from hpcsched.pbs import qsub as qsub_mod
    from hpcsched.pbs.common import CommandError
    with pytest.raises(CommandError, match="Unknown consumable idl"):
        qsub_mod.submit(["-l", "software=idl"], stdin=__import__("io").StringIO("true\n"))
    with pytest.raises(CommandError, match="Unknown resource type licence"):
        qsub_mod.submit(["-l", "licence=2"], stdin=__import__("io").StringIO("true\n"))
    with pytest.raises(CommandError, match=r"Unknown resource: matlab \(a job-wide consumable: -l matlab=N\)"):
        qsub_mod.submit(["-l", "select=1:ncpus=1:matlab=1"], stdin=__import__("io").StringIO("true\n"))


def test_qstat_and_checkjob_show_the_quota_of_a_job_passed_over_with_its_user(rig, capsys):
    # alice's node of the share tree is closed once a quota holds back one of her jobs: the
    # jobs after it are passed over unread, and still say which quota holds them
    from test_commands import full, submit
    from test_maui_psc import run, server_pass
    home = rig / "home"
    text = (home / "config.toml").read_text().replace('policy = "fifo"', 'policy = "gridengine"')
    (home / "config.toml").write_text(text + """
[sharetree]
levels = ["user"]
[sharetree.nodes.Root]
children = ["default"]
[sharetree.nodes.default]
[[quotas]]
name = "users"
[[quotas.rules]]
name = "each"
users = "{*}"
limit = { jobs = 1 }
""")
    for _ in range(4):
        submit("-l", "nodes=1,walltime=01:00:00")
    server_pass()
    why = 'exceeds limit "users/each" (jobs: 1 in use + 1 > 1)'
    assert [full(str(j))["comment"] for j in (2, 3, 4)] == ["Not Running: " + why] * 3
    status, out = run("checkjob", "4")
    assert status == 0 and why in out
    assert "Estimated start: unknown while the limit holds it back" in out  # (passed over unread, as well)


def test_deadline_jobs_for_deadline_users_only(rig, capsys):
    """qsub/qalter -W deadline= (Grid Engine's -dl): refused (159, nothing stored) unless
    the user is in deadline_users; shown by qstat -f, weighed by mdiag -p."""
    import io

    from test_commands import full, submit
    from test_maui_psc import run

    from hpcsched.pbs import qctl
    from hpcsched.pbs import qsub as qsub_mod
    from hpcsched.pbs.common import CommandError
    from hpcsched.store.journal import Store
    home = rig / "home"
    text = (home / "config.toml").read_text()
    (home / "config.toml").write_text(text.replace('policy = "', 'policy = "gridengine" #"', 1))
    before = Store(home).last_seq()
    with pytest.raises(CommandError, match="alice is not a deadline user") as refused:
        qsub_mod.submit(["-W", "deadline=203001011200"], stdin=io.StringIO("true\n"))
    assert refused.value.status == 159 and Store(home).last_seq() == before
    jid = submit("-l", "walltime=00:10:00")
    assert qctl.QALTER(["-W", "deadline=203001011200", jid], out=io.StringIO()) == 159
    assert "deadline" not in full(jid)
    (home / "config.toml").write_text('deadline_users = ["@nogroup", "alice"]\n'
                                      + text.replace('policy = "', 'policy = "gridengine" #"', 1))
    for bad in ("deadline=tomorrow", "deadline=20301301"):
        with pytest.raises(UsageError, match="illegal -W deadline value"):
            qsub_mod.submit(["-W", bad], stdin=io.StringIO("true\n"))
    late = submit("-W", "deadline=203001011200", "-l", "walltime=00:10:00")
    assert full(late)["deadline"] == "Tue Jan 01 12:00:00 2030"
    assert qctl.QALTER(["-W", "deadline=202912311200", jid], out=io.StringIO()) == 0
    assert full(jid)["deadline"] == "Mon Dec 31 12:00:00 2029"
    status, out = run("mdiag", "-p")
    assert status == 0 and "deadline" in out.splitlines()[2]
    # the earlier deadline is the more urgent (both far off: a small difference, but one)
    rows = {line.split()[0]: line.split() for line in out.splitlines()[4:] if line[:1].isdigit()}
    column = out.splitlines()[2].split().index("deadline")
    assert rows[jid.split(".")[0]][column].startswith("100.0(")


# --- queues chosen from a job's requirements (CC-IN2P3's table) ----------------------------
def ccin2p3():
    import os
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples",
                        "ccin2p3-queues.toml")
    return config.build(config.loads(open(path).read()))


@pytest.mark.parametrize("cores,cput,wall,mem,disk,group,queue", [
    (1, 40 * 3600, 50 * 3600, 2000, 0, "x", "long"),
    (8, 40 * 3600, 50 * 3600, 8 * 3000, 0, "x", "mc_long"),
    (1, 100 * 3600, 150 * 3600, 2000, 0, "atlas", "longlasting"),
    (1, 60 * 3600, 80 * 3600, 2000, 0, "x", "huge"),  # past long's CPU time, not a longlasting group
    (1, 10 * 3600, 10 * 3600, 8000, 0, "x", "huge"),  # memory
    (1, 10 * 3600, 10 * 3600, 2000, 50000, "x", "huge"),  # scratch disk
    (8, 60 * 3600, 70 * 3600, 8 * 6000, 0, "cms", "mc_huge"),
])
def test_the_router_picks_the_first_queue_whose_limits_fit(cores, cput, wall, mem, disk, group, queue):
    s = ccin2p3()
    j = s.submit(job(request=Request(nodes=0, ppn=0, cores=cores, mem=mem), wall=wall, group=group,
                     cput=cput, disk=disk), 0)
    assert j.queue == queue


def test_a_job_no_queue_fits_is_refused_with_every_reason():
    s = ccin2p3()
    with pytest.raises(Rejected, match="cput 300:00:00 exceeds queue long max_cput 48:00:00;.*mc_long"):
        s.submit(job(request=Request(nodes=0, ppn=0, cores=1), wall=3600, cput=300 * 3600), 0)


def test_queue_slot_caps_count_processors_on_shared_nodes():
    text = SITE.replace("[queues.long]", "[queues.long]\nmax_slots = 5").replace("[consumables]\nmatlab = 3\n", "")
    text = text[:text.index("[[quotas]]")]
    s = config.build(config.loads(text))
    for k in range(3):
        s.submit(core(2), 0)
    plan = s.iterate(0)
    assert len(s.running()) == 2 and plan.reason(3) == "queue long would exceed max_slots 5 (4 processors in use)"


def test_qsub_takes_cput_and_file(rig):
    from test_commands import stat, submit
    home = rig / "home"
    text = (home / "config.toml").read_text()
    assert "[queues.batch]\n" in text
    (home / "config.toml").write_text(text.replace("[queues.batch]\n", '[queues.batch]\nmax_cput = "1:00:00"\n'))
    submit("-l", "cput=00:30:00,file=2gb,walltime=00:40:00")
    from hpcsched.pbs import qsub as qsub_mod
    from hpcsched.pbs.common import CommandError
    with pytest.raises(CommandError, match="cput 02:00:00 exceeds queue batch max_cput 01:00:00"):
        qsub_mod.submit(["-l", "cput=2:00:00"], stdin=__import__("io").StringIO("true\n"))
    from hpcsched.store.journaled import Batch
    from hpcsched.store.site import load_site
    batch = Batch(load_site())
    with batch.open(write=False):
        j = batch.sched.jobs[1]
    assert (j.cput, j.disk, j.queue) == (1800.0, 2048, "batch")
    assert "Resource_List.cput = 00:30:00" in stat("-f", "1")[1]


BAD_TABLES = [
    "[usage]\nmetric = [1]\n", "[usage]\nhalf_life = -1\n", "[usage]\nwindow = \"soon\"\n", "[usage]\nextra = 1\n",
    "usage = 3\n", "sharetree = []\n", "[sharetree]\nlevels = [[1]]\n", "[sharetree]\ncompensation_factor = inf\n",
    "[sharetree]\nnodes = 1\n", "[sharetree.nodes.Root]\nchildren = \"a\"\n",
    "[sharetree.nodes.Root]\nchildren = [\"a\"]\n[sharetree.nodes.a]\nkind = [1]\n",
    "[sharetree.nodes.Root]\nchildren = [\"a\"]\n[sharetree.nodes.a]\nname = 3\n",
    "[sharetree.nodes.Root]\nchildren = [\"a\"]\n[sharetree.nodes.a]\nshares = nan\n",
    "consumables = 1\n", "[consumables]\nslots = 3\n", "[consumables]\nx = -1\n", "quotas = 1\n",
    "[[quotas]]\nrules = 1\n", "[[quotas]]\nrules = [1]\n", "[[quotas]]\n[[quotas.rules]]\nusers = 1\nlimit = {jobs = 1}\n",
    "[[quotas]]\n[[quotas.rules]]\nusers = [1]\nlimit = {jobs = 1}\n", "[[quotas]]\n[[quotas.rules]]\nhosts = \"*\"\n",
    "[[quotas]]\n[[quotas.rules]]\nlimit = {jobs = -1}\n", "[[quotas]]\nnope = 1\n[[quotas.rules]]\nlimit = {jobs = 1}\n",
    "[queues.q]\nmax_cput = \"x\"\n", "[queues.q]\nmax_slots = -1\n", "[queues.q]\nmin_cores = 1.5\n",
]


@pytest.mark.parametrize("text", BAD_TABLES)
def test_malformed_fair_share_and_quota_tables_are_one_config_line(text):
    with pytest.raises(ConfigError) as e:
        config.build(config.loads('[[nodes]]\nnames = "n01"\n[priority]\npolicy = "gridengine"\n' + text))
    assert "\n" not in str(e.value)


def test_a_filter_with_a_stray_brace_is_refused_and_a_zero_limit_keeps_jobs_waiting():
    """"{*" matched nothing, silently; a limit (or consumable total) of 0 refused every job
    (188) where Grid Engine keeps them pending until it is raised."""
    from hpcsched import Job, Request
    base = '[[nodes]]\nnames = "n[01-02]"\n[priority]\npolicy = "gridengine"\n'
    with pytest.raises(ConfigError, match="braces go around the whole list"):
        config.build(config.loads(base + '[[quotas]]\nname = "q"\n[[quotas.rules]]\nname = "r"\n'
                                  'users = "{*"\nlimit = { jobs = 1 }\n'))
    s = config.build(config.loads(base + '[consumables]\nmatlab = 0\n[[quotas]]\nname = "q"\n[[quotas.rules]]\n'
                                  'name = "r"\nusers = "{*}"\nlimit = { jobs = 0 }\n'))
    job = s.submit(Job(owner="a", request=Request(nodes=1), walltime=60.0), now=0)
    assert s.iterate(0).started == [] and job.state.name == "QUEUED"


def test_the_shipped_ccin2p3_configs_weigh_the_multi_core_queues_in_urgency():
    """The paper: a greater weight is given to the multi-core queues (more expensive
    resources) than to the sequential ones; neither config weighs each slot."""
    import os
    s = ccin2p3()
    assert s.policy.name == "gridengine" and s.policy.slots_urgency == 0
    assert set(s.policy.queue_urgency) == {"mc_long", "mc_longlasting", "mc_huge"}
    j = s.submit(job(request=Request(nodes=0, ppn=0, cores=8, mem=8 * 3000), wall=3600, cput=3600), 0)
    one = s.submit(job(request=Request(nodes=0, ppn=0, cores=1, mem=2000), wall=3600, cput=3600), 0)
    assert s.policy.resource_urgency(j) == 1000 and s.policy.resource_urgency(one) == 0
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "ccin2p3.toml")
    site = config.build(config.loads(open(path).read() + '\n[[nodes]]\nnames = "n[1-4]"\ncores = 8\n'))
    assert site.policy.queue_urgency == {"multicore": 1000} and site.policy.slots_urgency == 0
    assert site.submit(job(request=Request(nodes=4)), 0).queue == "multicore"
