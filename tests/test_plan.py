"""Planning: EASY worked by hand, conservative, depth 0, reservations, overruns, estimates."""
import pytest
from helpers import job, scheduler

from hpcsched import ALL, Queue, Rejected, Request, Reservation


def started(plan):
    return [s.job_id for s in plan.started]


def easy_example(depth=1, backfill=True):
    """10 nodes.  A (6 nodes) runs until t=100.  Then, in queue order:
    J1 8 nodes 50 s  -> cannot start (4 free); shadow = 100, extra = 10 - 8 = 2
    J2 4 nodes 200 s -> fits now, but ends after the shadow and 4 > extra: waits
    J3 2 nodes 300 s -> 2 <= extra: backfills (extra -> 0, free -> 2)
    J4 2 nodes  90 s -> ends at 90 <= shadow: backfills (free -> 0)
    J5 1 node   10 s -> nothing free: waits"""
    s = scheduler(10, depth=depth, backfill=backfill)
    s.submit(job(6, 100), 0)
    assert started(s.iterate(0)) == [1]
    for n, w in [(8, 50), (4, 200), (2, 300), (2, 90), (1, 10)]:
        s.submit(job(n, w), 0)
    return s


def test_easy_by_hand():
    s = easy_example()
    plan = s.iterate(0)
    assert started(plan) == [4, 5]  # J3, J4 (job ids are one more than the J numbers)
    assert all(st.backfill for st in plan.started)
    start, alloc = plan.reserved[2]
    assert start == 100
    # J1's reservation takes A's six nodes and the two free-now nodes J4 borrows until 90
    assert set(alloc.nodes) == set(s.job(1).nodes) | set(s.job(5).nodes)
    assert not set(alloc.nodes) & set(s.job(4).nodes)
    assert plan.reason(3) == "waiting for resources"
    assert plan.reason(6) == "waiting for resources"
    assert plan.estimate(2) == 100
    assert plan.estimate(3) == 150  # after J1's reserved window
    # J1 then starts at its shadow time when A and J4 are gone
    s.job_ended(5, 90, 0)
    assert started(s.iterate(90)) == [6]  # J5 fits in [90, 100)
    s.job_ended(6, 100, 0)
    s.job_ended(1, 100, 0)
    assert started(s.iterate(100)) == [2]


def test_no_backfill_keeps_strict_order():
    s = easy_example(backfill=False)
    plan = s.iterate(0)
    assert started(plan) == [] and plan.reserved[2][0] == 100
    assert plan.reason(6) == "waiting behind job 2 (no backfill)"
    s.submit(job(1, 1), 0)  # carried on incrementally: still blocked
    assert started(s.iterate(0)) == []


def test_new_jobs_carried_on_are_walked_in_their_rank_order():
    # Two jobs come at once after the last pass, both behind every job it walked, for one
    # free node: the one ranked higher by -p (FIFO ranks by it) starts, as a walk afresh
    # would start it, not the one submitted first.
    s = scheduler(3)
    s.submit(job(2, 100), 0)
    s.iterate(0)
    s.submit(job(3, 100, priority=200), 0)  # the head: reserved at 100
    s.iterate(0)
    walk = s.planner.walk
    low, high = s.submit(job(1, 50, priority=0), 1), s.submit(job(1, 50, priority=100), 1)
    assert started(s.iterate(1)) == [high.id]
    assert s.planner.walk is walk  # (carried on)
    assert s.job(low.id).state.value == "queued"


def test_depth_zero_is_first_fit():
    s = easy_example(depth=0)
    plan = s.iterate(0)
    assert started(plan) == [3]  # J2 takes the four free nodes; nothing is reserved
    assert plan.reserved == {}


def test_conservative_reserves_every_job():
    s = easy_example(depth=ALL)
    plan = s.iterate(0)
    assert set(plan.reserved) == {2, 3, 4, 6} or set(plan.reserved) == {2, 3, 6}
    assert started(plan) == [5] or started(plan) == [4, 5]
    for jid, (t, _) in plan.reserved.items():
        assert plan.estimate(jid) == t


def test_conservative_backfill_never_delays_a_later_reservation():
    # 4 nodes, 2 busy until 100.  J1 (4 nodes) reserved at 100; J2 (2 nodes, 150 s) would
    # fit now under EASY (it is not the head, and 2 <= free) only if it ends before 100.
    s = scheduler(4, depth=ALL)
    s.submit(job(2, 100), 0)
    s.iterate(0)
    s.submit(job(4, 100), 0)
    s.submit(job(2, 150), 0)
    s.submit(job(2, 100), 0)
    plan = s.iterate(0)
    assert started(plan) == [4]  # ends at 100: delays nobody
    assert plan.reserved[2][0] == 100 and plan.reserved[3][0] == 200


def test_reservation_blocks_nodes_for_others_and_admits_its_acl():
    s = scheduler(4)
    s.add_reservation(Reservation("maint", start=50, duration=100, nodes=("n00", "n01"), users={"ops"}), 0)
    s.submit(job(2, 100, owner="u"), 0)  # would overlap the reservation on n00-n01
    s.submit(job(2, 100, owner="u"), 0)
    s.submit(job(2, 40, owner="u"), 0)  # ends before it starts: may use them
    s.submit(job(1, 500, owner="ops"), 0)
    plan = s.iterate(0)
    assert started(plan) == [1, 3]
    assert s.job(1).nodes == ("n02", "n03")
    assert s.job(3).nodes == ("n00", "n01")
    assert plan.reserved[2][0] == 100  # after job 1 ends on n02-n03
    plan = s.iterate(40)
    s.job_ended(3, 40, 0)
    plan = s.iterate(40)
    assert 4 in started(plan) and s.job(4).nodes[0] in ("n00", "n01")


def test_drain_reservation_with_no_acl_blocks_everyone():
    s = scheduler(2)
    s.add_reservation(Reservation("drain", start=0, duration=1000, count=2), 0)
    s.submit(job(1, 10, owner="root"), 0)
    plan = s.iterate(0)
    assert started(plan) == []
    assert plan.reserved[1][0] == 1000


def test_queue_bound_reservation_runs_its_queue_inside_only():
    s = scheduler(4, queues={"batch": Queue("batch"), "R.demo": Queue("R.demo")})
    s.add_reservation(Reservation("demo", start=100, duration=200, nodes=("n03",), queue="R.demo"), 0)
    s.submit(job(1, 50, queue="R.demo"), 0)
    s.submit(job(1, 500, queue="R.demo"), 0)  # longer than the reservation: never fits
    plan = s.iterate(0)
    assert started(plan) == []
    assert plan.reserved[1] [0] == 100 and plan.reserved[1][1].nodes == ("n03",)
    plan = s.iterate(100)
    assert started(plan) == [1] and s.job(1).nodes == ("n03",)
    assert "planning horizon" in plan.reason(2)


def test_cyclic_reservation_blocks_every_occurrence():
    day = 86400.0
    s = scheduler(1)
    s.add_reservation(Reservation("weekly", start=2 * day, duration=3600, count=1, period=7 * day), 0)
    s.submit(job(1, 3 * day), 0)  # would run into the first occurrence
    s.submit(job(1, 7 * day), 0)  # longer than the gap between occurrences: never fits
    plan = s.iterate(0)
    assert started(plan) == []
    assert plan.reserved[1][0] == 2 * day + 3600
    assert plan.estimate(1) == 2 * day + 3600
    assert plan.estimate(2) is None
    # a later job lands after the second occurrence, and blocks within the first week
    s.submit(job(1, 6 * day), 0)
    plan = s.iterate(0)
    assert plan.estimate(3) == 9 * day + 3600


def test_reservation_slop_keeps_jobs_clear():
    s = scheduler(1, reservation_slop=180)
    s.add_reservation(Reservation("r", start=1000, duration=10, count=1), 0)
    s.submit(job(1, 900), 0)  # ends at 900 > 1000 - 180
    plan = s.iterate(0)
    assert started(plan) == [] and plan.reserved[1][0] == 1010
    s.submit(job(1, 820), 0)  # ends at 820 <= 820: fits
    assert started(s.iterate(0)) == [2]


def test_count_reservation_needs_free_nodes():
    s = scheduler(2)
    s.submit(job(2, 1000), 0)
    s.iterate(0)
    with pytest.raises(Rejected, match="not free"):
        s.add_reservation(Reservation("r", start=500, duration=10, count=1), 0)
    r = s.add_reservation(Reservation("r", start=1000, duration=10, count=1), 0)
    assert r.nodes == ("n00",)


def test_overrunning_job_still_casts_a_shadow():
    s = scheduler(2, overrun_grace=300)
    s.submit(job(2, 100), 0)
    s.iterate(0)
    s.submit(job(2, 10), 150)
    plan = s.iterate(150)  # the first job is 50 s past its walltime, still running
    assert started(plan) == []
    assert plan.reserved[2][0] == 450


def test_a_suspended_job_holds_its_nodes_for_what_its_walltime_has_left():
    """Suspended (qsig -s suspend), a job keeps its nodes and its walltime stands still: it
    is expected to end later by the time it has been stopped, and the planner counts on
    that (it counted on start + walltime, and past that on an overrun's grace)."""
    s = scheduler(4, overrun_grace=300)
    a = s.submit(job(2, 100), 0)
    s.iterate(0)
    big = s.submit(job(4, 100), 5)
    assert s.iterate(5).reserved[big.id][0] == 100
    s.suspend(a.id, 10)
    assert s.iterate(60).reserved[big.id][0] == 150  # (50 s stopped so far)
    # what fits before that end backfills: 2 nodes for 50 s ending at 110 delay nobody now
    small = s.submit(job(2, 50), 60)
    plan = s.iterate(60)
    assert started(plan) == [small.id] and plan.reserved[big.id][0] == 150
    s.job_ended(small.id, 70, 0)
    # past its walltime while stopped, it is not an overrun about to end
    assert s.iterate(180).reserved[big.id][0] == 270
    s.resume(a.id, 200)  # (190 s stopped: it has 90 s to run)
    assert a.suspended_at is None and a.suspended_for == 190
    assert s.iterate(250).reserved[big.id][0] == 290
    s.job_ended(a.id, 290, 0)
    assert started(s.iterate(290)) == [big.id]


@pytest.mark.parametrize("how", ["ends early", "suspended", "overruns"])
def test_a_node_taken_offline_under_a_job_stays_out_of_every_plan(how):
    """The units a job holds are taken and given back only where they are up: one offline
    under it is never counted free (no job started on it) when the job ends early, is
    suspended or overruns, with a reservation ahead too (the profile then has boundaries
    after now)."""
    s = scheduler(2, overrun_grace=300)
    s.add_reservation(Reservation("later", start=500, duration=100, nodes=("n01",)), 0)
    a = s.submit(job(2, 10 if how != "ends early" else 400), 0)
    s.iterate(0)
    s.set_node_state("n00", "offline")
    both = s.submit(job(2, 10), 1)  # (one node is up)
    assert started(s.iterate(1)) == []
    if how == "suspended":
        s.suspend(a.id, 5)
    if how == "ends early":
        s.job_ended(a.id, 20, 0)
        assert started(s.iterate(20)) == [] and both.state.value == "queued"
        return
    b = s.submit(job(1, 10), 20)  # (past a's walltime: stopped, or overrunning)
    assert started(s.iterate(20)) == []
    s.set_node_state("n00", "up")
    assert started(s.iterate(21)) == [] and b.state.value == "queued"


def test_suspension_is_for_running_jobs_kept_in_the_state_and_gone_with_a_requeue():
    from hpcsched import InvalidState
    s = scheduler(2, depth=ALL)
    a, waiting = s.submit(job(2, 100), 0), s.submit(job(2, 100), 0)
    s.iterate(0)
    with pytest.raises(InvalidState):
        s.suspend(waiting.id, 5)
    with pytest.raises(InvalidState):
        s.resume(a.id, 5)  # (not suspended)
    s.suspend(a.id, 10)
    with pytest.raises(InvalidState):
        s.suspend(a.id, 20)
    copy = scheduler(2, depth=ALL).restore(s.to_dict())
    assert copy.iterate(50).reserved[waiting.id][0] == 140 == s.iterate(50).reserved[waiting.id][0]
    s.requeue(a.id, 60)
    assert (a.suspended_at, a.suspended_for) == (None, 0.0)


def test_shared_nodes_pack_jobs():
    s = scheduler(2, cores=4, shared=True)
    for _ in range(3):
        s.submit(job(request=Request(cores=3)), 0)
    plan = s.iterate(0)
    assert started(plan) == [1, 2]
    assert s.job(1).nodes == ("n00",) and s.job(2).nodes == ("n01",)
    assert s.job(3).state.value == "queued"
    s.submit(job(request=Request(cores=2)), 0)
    plan = s.iterate(0)
    assert started(plan) == [4]  # one core on each node
    assert s.job(4).nodes == ("n00", "n01")


def test_features_restrict_nodes():
    from hpcsched import Node, NodePool, Router, Scheduler
    p = NodePool([Node("a"), Node("b", features=frozenset({"gpu"}))])
    s = Scheduler(p, Router({"q": Queue("q")}, "q"))
    s.submit(job(request=Request(nodes=1, features=("gpu",))), 0)
    s.submit(job(request=Request(nodes=1, features=("gpu",))), 0)
    plan = s.iterate(0)
    assert started(plan) == [1] and s.job(1).nodes == ("b",)
    assert plan.reserved[2][0] == 100


def test_running_walltime_change_moves_the_shadow():
    s = scheduler(2)
    s.submit(job(2, 100), 0)
    s.iterate(0)
    s.submit(job(2, 10), 10)
    assert s.iterate(10).reserved[2][0] == 100
    s.alter(1, 20, walltime=300)
    assert s.iterate(20).reserved[2][0] == 300


def test_array_slot_limit():
    s = scheduler(8)
    for i in range(1, 6):
        s.submit(job(1, 100, array_id=1, array_index=i, array_limit=2), 0)
    s.submit(job(1, 100), 0)
    plan = s.iterate(0)
    assert started(plan) == [1, 2, 6]
    assert plan.reason(3) == "array 1 already runs its limit of 2 subjobs"
    s.job_ended(1, 50, 0)
    assert started(s.iterate(50)) == [3]


@pytest.mark.parametrize("scale", [1.0, 10.0])
def test_a_job_ending_exactly_at_the_shadow_backfills_whatever_the_clock_s_fractions(scale):
    """EASY's test is the job's end against the shadow: 7.8 + 3.9 ends at 11.7, exactly
    the head's shadow (1.6 + 10.1), so it starts now; `shadow - now` (3.8999999999999995)
    said it ran past.  The same times x10 agree."""
    s = scheduler(2, depth=1)
    a = s.submit(job(1, 10.1 * scale), now=1.6 * scale)
    assert started(s.iterate(1.6 * scale)) == [a.id]
    head = s.submit(job(2, 5.0 * scale), now=7.0 * scale)
    small = s.submit(job(1, 3.9 * scale), now=7.8 * scale)
    plan = s.iterate(7.8 * scale)
    assert started(plan) == [small.id]
    assert plan.reserved[head.id][0] == pytest.approx(11.7 * scale)


@pytest.mark.parametrize("depth", [1, ALL])
def test_a_reservation_is_held_however_far_ahead_its_job_ends(depth):
    """A request past a year (375 days) still gets its reservation, EASY's head as under
    conservative: the later job does not backfill into its way."""
    s = scheduler(4, depth=depth)
    first = s.submit(job(2, 100.0), now=0)
    assert started(s.iterate(0)) == [first.id]
    long = s.submit(job(4, 32_400_000.0), now=1)
    later = s.submit(job(2, 202.0), now=2)
    plan = s.iterate(2)
    assert started(plan) == [] and plan.reserved[long.id][0] == 100
    s.job_ended(first.id, 100, 0)
    assert started(s.iterate(100)) == [long.id]
    assert s.job(later.id).state.name == "QUEUED"


def test_reason_tells_a_held_dependent_running_or_ended_job_from_one_waiting_for_nodes():
    """Plan.reason of a job the pass did not walk says why (held, its dependency, its
    start time, running, ended, deleted), and None for a job the scheduler never had."""
    from hpcsched import Dependency, DepType
    s = scheduler(4)
    s.submit(job(4, 100), 0)  # 1: takes the machine
    s.submit(job(1, 50, dependencies=[Dependency(DepType.AFTEROK, 1)]), 0)  # 2
    s.submit(job(1, 50), 0)  # 3: held below
    s.submit(job(1, 50, start_after=500), 0)  # 4
    s.submit(job(2, 50), 0)  # 5: waits for nodes
    s.submit(job(1, 50), 0)  # 6: deleted below
    s.hold(3, 0)
    s.delete(6, 0)
    plan = s.iterate(0)
    assert plan.reason(1) == "started"
    assert plan.reason(2) == "waiting for a dependency on job 1"
    assert plan.reason(3) == "held: user"
    assert plan.reason(4) == "waiting for its start time 500 (qsub -a)"
    assert plan.reason(5).startswith("reserved: starts at 100")
    assert plan.reason(6) == "deleted"
    assert plan.reason(99) is None
    s.job_ended(1, 60, 0)
    plan = s.iterate(60)
    assert plan.reason(1) == "ended"
    assert plan.reason(2) == "started" and plan.reason(5) == "started"
    assert s.iterate(61).reason(2) == "running"
