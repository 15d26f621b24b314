"""Allocations: charging rules, what an exhausted or overburning project does, the bank in
the store and its commands (gbalance, gdeposit, gcharge, grefund, ...)."""
import io
import math
import time

import pytest

from hpcsched import config
from hpcsched.core.bank import Account, Bank, Window
from hpcsched.core.errors import ConfigError, InvalidRequest, Rejected
from hpcsched.core.jobs import Job, Request
from hpcsched.core.reservations import Reservation

H = 3600.0

ALCF = """
default_queue = "default"
[priority]
policy = "cobalt"
backfill_queues = ["backfill"]
initial_scores = {prod-short = 10.0, prod-capability = 20.0, backfill = 8.0}
[[nodes]]
names = "n[01-10]"
cores = 4
[queues.default]
route_to = ["prod-capability", "prod-short"]
[queues.prod-capability]
min_fraction = 0.5
[queues.prod-short]
[queues.backfill]
[allocations]
charge_factors = {backfill = 0.0}
[allocations.projects.incite]
amount = 10
[allocations.projects.dd]
amount = 4
on_exhausted = "refuse"
"""


def build(text=ALCF, extra=""):
    return config.build(config.loads(text + extra))


def run(s, job, start, end):
    """Submit `job` at `start`, start it there and end it at `end`."""
    job = s.submit(job, start)
    assert any(st.job_id == job.id for st in s.iterate(start).started)
    s.job_ended(job.id, end, 0)
    return job


def test_a_job_is_charged_nodes_times_hours_times_its_queue_factor_at_its_end():
    s = build()
    j = run(s, Job(account="incite", request=Request(nodes=2), walltime=4 * H), 0, 3 * H)
    assert j.queue == "prod-short"
    assert s.bank.accounts["incite"].balance(3 * H) == 10 - 6
    assert s.bank.ledger == [{"time": 3 * H, "kind": "job", "project": "incite", "amount": 6.0, "job": j.id}]
    b = run(s, Job(account="incite", queue="backfill", request=Request(nodes=1)), 3 * H, 4 * H)
    assert b.queue == "backfill" and s.bank.accounts["incite"].balance(4 * H) == 4  # factor 0: free


def test_a_suspended_job_is_charged_for_the_walltime_it_used():
    # (as resources_used.walltime, which Gold's charge reads, leaves out the time suspended)
    s = build()
    j = s.submit(Job(account="incite", request=Request(nodes=2), walltime=4 * H), 0)
    s.iterate(0)
    s.suspend(j.id, H)
    s.resume(j.id, 2 * H)
    s.suspend(j.id, 2.5 * H)
    s.job_ended(j.id, 3 * H, 0)  # (deleted while suspended: 1.5 h run of 3)
    assert s.bank.accounts["incite"].balance(3 * H) == 10 - 3


def test_kraken_charges_whole_machine_jobs_for_the_machine_at_half_price():
    s = config.build(config.loads(ALCF.replace("charge_factors", "whole_machine = 0.85\nwhole_machine_rate = 0.5\n"
                                                                 "unit = \"core-hours\"\ncharge_factors")))
    s.bank.accounts["incite"].amount = 1000
    run(s, Job(account="incite", request=Request(nodes=9, ppn=4), walltime=2 * H), 0, 2 * H)
    # 9 of 10 nodes >= 85 %: the whole machine's 40 cores for 2 h at 50 %
    assert s.bank.used["incite"] == 40 * 2 * 0.5
    run(s, Job(account="incite", request=Request(nodes=8, ppn=2), walltime=2 * H), 2 * H, 3 * H)
    assert s.bank.used["incite"] == 40 + 16 * 1  # 8 nodes < 85 %: its own 16 cores, full price


def test_an_exhausted_project_is_routed_to_backfill_with_a_score_shrunk_by_its_overuse():
    s = build()
    run(s, Job(account="incite", request=Request(nodes=5), walltime=3 * H), 0, 3 * H)  # 15 of 10: 50 % over
    fresh = s.submit(Job(account="incite", request=Request(nodes=1)), 3 * H)
    assert (fresh.queue, fresh.standing) == ("backfill", "exhausted")
    assert fresh.score == pytest.approx(8.0 * 0.5)  # backfill's initial score x (1 - 0.5)
    other = s.submit(Job(account="other", request=Request(nodes=1)), 3 * H)  # no account: runs as before
    assert other.queue == "prod-short" and other.standing == ""
    s.post("deposit", "incite", 20, 3 * H)  # refilled: routed as before
    assert s.submit(Job(account="incite", request=Request(nodes=1)), 3 * H).queue == "prod-short"


def test_a_directors_discretionary_project_at_zero_is_refused_and_its_waiting_jobs_held_back():
    s = build()
    first = s.submit(Job(account="dd", request=Request(nodes=4), walltime=H), 0)
    s.iterate(0)
    waiting = s.submit(Job(account="dd", request=Request(nodes=10), walltime=H), 10)
    s.iterate(10)
    s.job_ended(first.id, H, 0)  # 4 of 4 used
    with pytest.raises(Rejected, match="project dd has no allocation left"):
        s.submit(Job(account="dd", request=Request(nodes=1)), H)
    plan = s.iterate(H)
    assert plan.started == [] and plan.reason(waiting.id) == "project dd has no allocation left"
    s.post("deposit", "dd", 100, H)
    assert [st.job_id for st in s.iterate(H).started] == [waiting.id]


def test_overburn_lets_capability_jobs_run_to_twice_the_allocation_and_sends_the_rest_to_backfill():
    s = build(extra="[allocations.overburn]\nstart = 0\nend = 100000\nlimit = 2.0\n")
    run(s, Job(account="incite", request=Request(nodes=6), walltime=2 * H), 0, 2 * H)  # 12 of 10
    cap = s.submit(Job(account="incite", request=Request(nodes=6), walltime=H), 2 * H)
    short = s.submit(Job(account="incite", request=Request(nodes=1), walltime=H), 2 * H)
    assert (cap.queue, cap.standing) == ("prod-capability", "overburn") and cap.score == 20.0
    assert (short.queue, short.standing) == ("backfill", "overburn")
    s.iterate(2 * H)
    s.job_ended(cap.id, 3 * H + 1800, 0)  # +9: 21 of 10, past 200 %
    late = s.submit(Job(account="incite", request=Request(nodes=6), walltime=H), 4 * H)
    assert (late.queue, late.standing) == ("backfill", "exhausted")
    # outside the window an exhausted project's capability job goes to backfill too
    assert s.submit(Job(account="incite", request=Request(nodes=6), walltime=H), 200000).queue == "backfill"


def test_big_run_leaves_out_overburning_and_backfill_jobs():
    s = build(extra="[allocations.overburn]\nstart = 0\nend = 100000\n")
    run(s, Job(account="incite", request=Request(nodes=6), walltime=2 * H), 0, 2 * H)
    s.submit(Job(id=0, account="busy", request=Request(nodes=10), walltime=H), 2 * H)
    s.iterate(2 * H)
    over = s.submit(Job(account="incite", request=Request(nodes=6), walltime=H), 2 * H)
    honest = s.submit(Job(account="other", request=Request(nodes=5), walltime=H), 2 * H)
    chosen = s.big_run(2 * H)
    assert over.standing == "overburn" and [j.id for j in chosen] == [honest.id]


def test_kraken_standby_orders_an_exhausted_projects_jobs_after_all_others_and_back_when_refilled():
    text = ("[[nodes]]\nnames = \"n[01-04]\"\n[queues.batch]\n[allocations]\non_exhausted = \"standby\"\n"
            "[allocations.projects.p]\namount = 1\n")
    s = build(text)
    first = s.submit(Job(account="p", request=Request(nodes=4), walltime=H), 0)
    s.iterate(0)
    a = s.submit(Job(account="p", request=Request(nodes=4), walltime=H), 10)  # queued before p runs out
    b = s.submit(Job(account="q", request=Request(nodes=4), walltime=H), 20)
    s.job_ended(first.id, H, 0)  # 4 node-hours of 1: p is exhausted
    c = s.submit(Job(account="p", request=Request(nodes=4), walltime=H), H)
    assert c.tier == 1 and c.standing == "exhausted"
    assert [st.job_id for st in s.iterate(H).started] == [b.id]  # not a, submitted first
    assert a.tier == 1
    s.job_ended(b.id, 2 * H, 0)
    s.post("deposit", "p", 100, 2 * H)
    assert [st.job_id for st in s.iterate(2 * H).started] == [a.id] and c.tier == 0


def test_quarters_each_have_their_own_balance_and_nothing_carries_over():
    acct = Account("p", amount=400, start=0, end=400 * H, periods=4)
    bank = Bank({"p": acct})
    bank.post("job", "p", 30, 10 * H)
    assert acct.balance(10 * H) == 70 and acct.balance(150 * H) == 100 and acct.balance(500 * H) == 0
    assert bank.standing("p", 500 * H) == "exhausted"  # outside its period: nothing to spend
    assert acct.bounds(2) == (200 * H, 300 * H)
    bank.post("set", "p", 5, 150 * H)
    assert acct.balance(150 * H) == 5 and acct.balance(10 * H) == 70
    for kind in ("deposit", "refund", "set"):  # at most 1e13: a float keeps every cent below it
        with pytest.raises(InvalidRequest, match=f"a {kind} must be at most 1e\\+13"):
            bank.post(kind, "p", 1e14, 150 * H)
    with pytest.raises(InvalidRequest, match="amount must be a number from 0 to 1e\\+13"):
        Account("q", amount=2e13)
    assert acct.balance(150 * H) == 5


def test_reference_model_of_standing_on_hand_worked_cases():
    bank = Bank({"p": Account("p", amount=10)}, overburn=Window(100, 200, 2.0))
    cases = [(0, 50, "ok"), (9.99, 50, "ok"), (10, 50, "exhausted"), (10, 150, "overburn"),
             (19.99, 150, "overburn"), (20, 150, "exhausted"), (15, 250, "exhausted")]
    for used, now, expected in cases:
        bank.accounts["p"].charged = [used]
        assert bank.standing("p", now) == expected, (used, now)
    bank.accounts["p"].charged = [15]
    assert bank.overuse("p", 0) == 0.5 and bank.score_factor("p", 0) == 0.5
    bank.accounts["p"].charged = [40]
    assert bank.score_factor("p", 0) == 0.0


def test_psc_bills_a_reservation_owner_the_node_hours_no_job_used():
    s = config.build(config.loads(ALCF.replace("charge_factors", "bill_reservations = true\ncharge_factors")))
    s.add_reservation(Reservation("r", start=0, duration=4 * H, nodes=("n01", "n02"), users=frozenset({"u"}),
                                  account="incite"), 0)
    j = s.submit(Job(owner="u", account="other", request=Request(nodes=1), walltime=H), 0)
    assert s.iterate(0).started[0].allocation.nodes[0] in ("n01", "n02")
    s.job_ended(j.id, H, 0)
    s.remove_reservation("r", 2 * H)  # released after 2 h: 4 node-hours held, 1 used
    bill = [e for e in s.bank.ledger if e["kind"] == "reservation"]
    assert [(e["project"], e["amount"]) for e in bill] == [("incite", 3.0)]
    assert s.bank.used["other"] == 1.0


def test_the_bank_survives_a_state_round_trip_exactly():
    s = build()
    run(s, Job(account="incite", request=Request(nodes=2), walltime=H), 0, H)
    s.post("deposit", "newproj", 7, H, note="startup")
    s.post("refund", "incite", 1, H, job=1)
    again = build().restore(s.to_dict())
    assert again.bank.to_dict() == s.bank.to_dict()
    assert again.bank.accounts["newproj"].balance(H) == 7 and again.bank.accounts["incite"].balance(H) == 9


@pytest.mark.parametrize("kind, project, amount, message", [
    ("deposit", "incite", -1, "must not be negative"),
    ("charge", "nobody", 1, "unknown project 'nobody'"),
    ("refund", "incite", math.inf, "finite"),
    ("grant", "incite", 1, "unknown bank operation"),
])
def test_bad_bank_operations_are_refused_and_change_nothing(kind, project, amount, message):
    s = build()
    before = s.bank.to_dict()
    with pytest.raises(InvalidRequest, match=message):
        s.post(kind, project, amount, 0)
    assert s.bank.to_dict() == before


@pytest.mark.parametrize("extra, message", [
    ("unit = \"furlongs\"\n", "allocations.unit must be"),
    ("on_exhausted = \"panic\"\n", "on_exhausted must be one of"),
    ("[allocations.projects.x]\namount = -5\n", "allocations.projects.x.amount: must be a number from 0 to 1e\\+13"),
    ("[allocations.projects.x]\namount = 1e14\n", "allocations.projects.x.amount: must be a number from 0 to 1e\\+13"),
    ("[allocations.projects.x]\nperiods = 4\n", "sub-periods need a start"),
    ("[allocations.overburn]\nstart = 10\nend = 5\n", "allocations.overburn: start must come before end"),
    ("charge_factors = {prod-short = \"x\"}\n", "charge_factors.prod-short: must be a non-negative number"),
    ("colour = 1\n", "allocations.colour: unknown key"),
])
def test_bad_allocation_settings_are_one_line_naming_the_key(extra, message):
    text = ALCF.replace("charge_factors = {backfill = 0.0}\n", extra)
    with pytest.raises(ConfigError, match=message):
        config.build(config.loads(text))


# --- the store and the commands -----------------------------------------------------------

GOLD = """
[allocations]
on_exhausted = "run"
[allocations.projects.chem]
amount = 100
users = ["alice"]
[allocations.projects.phys]
amount = 5
"""


def _qsub(*argv):
    from hpcsched.pbs import qsub
    return qsub.submit(list(argv), stdin=io.StringIO("true\n"), cwd="/tmp", env={"HOME": "/h"})[0]


def _run(command, *argv):
    out = io.StringIO()
    return command(list(argv), out=out, now=time.time()), out.getvalue()


@pytest.fixture
def gold(rig):
    config_file = rig / "home" / "config.toml"
    config_file.write_text(config_file.read_text() + GOLD)
    return rig


def test_a_charge_and_its_jobs_end_are_one_journal_record_and_replay_the_same(gold):
    from hpcsched.store.journaled import Batch
    from hpcsched.store.site import load_site
    jid = _qsub("-A", "chem", "-l", "nodes=2")
    now = time.time()
    with Batch.of(load_site()).open() as batch:
        batch.do("pass", now)
        batch.do("ended", now + 1800, id=int(jid.split(".")[0]), exit_status=0)
        records = batch.store.read()[1]
    assert [r["op"] for r in records][-1] == "ended"  # no separate charge record to lose
    with Batch(load_site()).open(write=False) as batch:
        assert batch.sched.bank.used == {"chem": pytest.approx(1.0)}  # replayed from the journal


def test_gold_commands_balance_deposit_charge_refund_and_statement(gold, monkeypatch):
    from hpcsched.pbs import gold as g
    from hpcsched.store.journaled import Batch
    from hpcsched.store.site import load_site
    jid = _qsub("-A", "chem", "-l", "nodes=4")
    with Batch.of(load_site()).open() as batch:
        batch.do("pass", time.time() - 7200)  # it has run for two hours
    status, out = _run(g.MYBALANCE)
    assert status == 0 and out.splitlines()[2].split() == ["chem", "100.00", "0.00", "8.00", "100.00", "92.00", "ok"]
    assert _run(g.GDEPOSIT, "-p", "chem", "-z", "50")[0] == 159  # alice is no operator
    monkeypatch.setenv("HPCSCHED_USER", "olga")
    assert _run(g.GDEPOSIT, "-p", "chem", "-z", "-5")[0] == 2
    assert _run(g.GDEPOSIT, "-p", "chem", "-z", "lots")[0] == 2
    assert _run(g.GDEPOSIT, "-p", "chem", "-z", "1" + "0" * 23)[0] == 2  # (a float would lose its cents)
    assert _run(g.GDEPOSIT, "-p", "", "-z", "5")[0] == 2  # (a project '' took every job without one)
    from hpcsched.pbs import maui
    assert maui.SETRES(["-d", "60", "-A", "nosuch", "count=1"], out=io.StringIO(), now=time.time()) == 2
    assert _run(g.GCHARGE, "-p", "nobody", "-z", "1")[0] == 1
    assert _run(g.GCHARGE, "-p", "chem", "-z", "1", "-J", "999")[0] == 153
    assert _run(g.GDEPOSIT, "-p", "chem", "-z", "50", "-d", "supplement") == \
        (0, "deposit of 50.00 for project chem: balance 150.00 node-hours\n")
    job = int(jid.split(".")[0])
    assert _run(g.GCHARGE, "-p", "phys", "-z", "2.5", "-J", str(job))[0] == 0
    assert _run(g.GREFUND, "-J", str(job)) == (0, f"refunded 2.50 to project phys for job {job}\n")
    assert _run(g.GCHALLOC, "-p", "phys", "-z", "1")[0] == 0
    status, out = _run(g.GBALANCE, "-p", "phys")
    assert out.splitlines()[2].split() == ["phys", "1.00", "0.00", "0.00", "1.00", "1.00", "ok"]
    status, out = _run(g.GSTATEMENT, "-p", "phys")
    kinds = [line.split()[2] for line in out.splitlines()[2:-1]]
    assert status == 0 and kinds == ["charge", "refund", "set"]
    assert _run(g.GBALANCE, "-p", "nobody")[0] == 1


def test_gold_commands_on_a_site_without_allocations_say_so(rig):
    from hpcsched.pbs import gold as g
    assert _run(g.GBALANCE)[0] == 1


def test_qsub_of_an_exhausted_refused_project_says_why(gold):
    from hpcsched.pbs import common
    config_file = gold / "home" / "config.toml"
    config_file.write_text(config_file.read_text().replace("amount = 5\n", "amount = 0\non_exhausted = \"refuse\"\n"))
    with pytest.raises(common.CommandError, match="project phys has no allocation left"):
        _qsub("-A", "phys")


def test_setres_charge_account_is_billed_for_the_unused_part_when_released(gold, monkeypatch):
    from hpcsched.pbs import maui
    from hpcsched.store.journaled import Batch
    from hpcsched.store.site import load_site
    config_file = gold / "home" / "config.toml"
    config_file.write_text(config_file.read_text().replace('on_exhausted = "run"\n',
                                                           'on_exhausted = "run"\nbill_reservations = true\n'))
    monkeypatch.setenv("HPCSCHED_USER", "olga")
    start = str(int(time.time()) - 3600)  # an hour ago: an hour of two nodes went unused
    assert _run(maui.SETRES, "-n", "demo", "-s", start, "-d", "2:00:00", "-A", "chem", "-u", "alice",
                "node[01-02]")[0] == 0
    assert _run(maui.RELEASERES, "demo")[0] == 0
    with Batch(load_site()).open(write=False) as batch:
        bill = [(e["project"], e["amount"]) for e in batch.sched.bank.ledger if e["kind"] == "reservation"]
    assert len(bill) == 1 and bill[0][0] == "chem" and bill[0][1] == pytest.approx(2.0, abs=0.01)


def _mira(extra=""):
    """The shipped examples/mira.toml (prod-capability by min_nodes = 4097), plus `extra`."""
    import os
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "mira.toml")
    with open(path) as f:
        return config.build(config.loads(f.read() + extra))


def test_big_run_monday_works_on_the_shipped_mira_config():
    """Mira's prod-capability is set by min_nodes: its 8,192-node job is a capability job."""
    s = _mira()
    small = s.submit(Job(request=Request(nodes=512), walltime=H), 0)
    big = s.submit(Job(request=Request(nodes=8192), walltime=H), 1)
    assert big.queue == "prod-capability" and small.queue == "prod-short"
    assert [j.id for j in s.big_run(2)] == [big.id] and big.score > small.score


def test_the_shipped_mira_config_has_alcfs_walltime_limits():
    """ALCF's documented limits on Mira: prod-capability at most 24 h, prod-short 6 h,
    prod-long 12 h; a job past them is refused at submission (no queue takes it)."""
    from hpcsched import Rejected
    s = _mira()
    assert s.submit(Job(request=Request(nodes=512), walltime=12 * H), 0).queue == "prod-long"
    assert s.submit(Job(request=Request(nodes=8192), walltime=24 * H), 0).queue == "prod-capability"
    for nodes, hours in ((512, 12.5), (4096, 13), (8192, 25), (49152, 48)):
        with pytest.raises(Rejected):
            s.submit(Job(request=Request(nodes=nodes), walltime=hours * H), 0)


def test_overburn_keeps_the_shipped_configs_capability_jobs_and_refuses_a_dd_project():
    """Overburn lets a capability job of an exhausted project run in its window (Mira's
    prod-capability, by min_nodes); a Director's Discretionary project (refuse) gets none."""
    s = _mira('[queues.backfill]\n[allocations]\nbackfill_queue = "backfill"\n'
              "[allocations.overburn]\nstart = 0\nend = 1000000\nlimit = 2.0\n"
              "[allocations.projects.incite]\namount = 10000\n"
              '[allocations.projects.dd]\namount = 10\non_exhausted = "refuse"\n')
    run(s, Job(account="incite", request=Request(nodes=8192), walltime=2 * H), 0, 2 * H)  # 16,384 of 10,000
    cap = s.submit(Job(account="incite", request=Request(nodes=8192), walltime=H), 2 * H)
    small = s.submit(Job(account="incite", request=Request(nodes=512), walltime=H), 2 * H)
    assert (cap.queue, cap.standing) == ("prod-capability", "overburn")
    assert (small.queue, small.standing) == ("backfill", "overburn")
    run(s, Job(account="dd", request=Request(nodes=512), walltime=H), 3 * H, 4 * H)  # 512 of 10
    with pytest.raises(Rejected, match="project dd has no allocation left"):
        s.submit(Job(account="dd", request=Request(nodes=512), walltime=H), 5 * H)


def test_the_allocations_backfill_queue_sorts_below_production_without_priority_backfill_queues():
    """With only allocations.backfill_queue (no [priority] backfill_queues), a backfill job
    with the higher score (14 against 10) still sorts after a production job."""
    s = config.build(config.loads(ALCF.replace('backfill_queues = ["backfill"]\n', "")
                                  .replace("backfill = 8.0", "backfill = 14.0")))
    s.submit(Job(id=0, account="incite", request=Request(nodes=10), walltime=H), 0)
    s.iterate(0)
    back = s.submit(Job(account="incite", queue="backfill", request=Request(nodes=1), walltime=H), 0)
    prod = s.submit(Job(account="incite", request=Request(nodes=1), walltime=H), 0)
    assert (back.queue, prod.queue) == ("backfill", "prod-short") and back.score > prod.score
    assert [j.id for j in s.order(0)] == [prod.id, back.id]
