"""Priority policies: FIFO, Cobalt's utility function, Simon's two bins."""
import pytest
from helpers import job, scheduler

from hpcsched import Cobalt, Dependency, DepType, Job, Request, Simon, build, default_config


def test_fifo_orders_by_submit_time_then_id():
    s = scheduler(1)
    for t in (5, 0, 0):
        s.submit(job(1, 10), t)
    s.submit(job(1, 10, id=9), 0)
    order = s.policy.order(list(s.queued()), s.context(5))
    assert [j.id for j in order] == [2, 3, 9, 1]


def test_cobalt_increment_by_hand():
    # machine of 100 nodes; job of 25 nodes, 2 h walltime, eligible 60 min, weight 2
    pol = Cobalt(project_weights={"p": 2.0})
    s = scheduler(100, policy=pol)
    j = s.submit(Job(request=Request(nodes=25), walltime=7200, account="p"), 0)
    ctx = s.context(3600)
    expected = (60.0 ** 2 / 120.0 ** 3) * (25 / 100) * 2.0
    assert pol.increment(j, ctx) == pytest.approx(expected)
    # clamped walltime: 10 min counts as the 1 h floor, 20 h as the 12 h ceiling
    j.walltime = 600
    assert pol.increment(j, ctx) == pytest.approx(60.0 ** 2 / 60.0 ** 3 * 0.25 * 2)
    j.walltime = 20 * 3600
    assert pol.increment(j, ctx) == pytest.approx(60.0 ** 2 / 720.0 ** 3 * 0.25 * 2)


def test_cobalt_scores_accumulate_per_interval_and_skip_held_time():
    pol = Cobalt()
    s = scheduler(10, policy=pol)
    s.submit(job(10, 100), 0)
    s.iterate(0)  # the machine is full: the others wait
    a = s.submit(job(5, 3600), 0)
    b = s.submit(job(5, 3600), 0)
    s.hold(b.id, 0)
    s.iterate(15)
    rate = 0.5 / 60.0 ** 3  # half the machine, a 1 h walltime
    # the rate e^2 per 15 s, integrated over e from 0 to 0.25 min: e^3 / 3 * (60 / 15)
    assert a.score == pytest.approx(rate * 0.25 ** 3 / 3 * 4)
    assert b.score == 0.0
    s.iterate(45)  # two intervals at once: the integral from 0.25 to 0.75 min
    assert a.score == pytest.approx(rate * 0.75 ** 3 / 3 * 4)
    s.release(b.id, 45)
    s.iterate(105)  # b eligible only since 45: from 0 to 1 min
    assert b.score == pytest.approx(rate * 1.0 ** 3 / 3 * 4)


def test_cobalt_accrual_does_not_depend_on_how_often_passes_run():
    """One pass after an hour gives what 240 fifteen-second passes give (Cobalt's own sum
    tends to the integral as passes grow frequent)."""
    scores = []
    for passes in (1, 4, 240):
        s = scheduler(10, policy=Cobalt())
        s.submit(job(10, 7200), 0)
        s.iterate(0)
        waiting = s.submit(job(5, 3600), 0)
        for k in range(1, passes + 1):
            s.iterate(3600 * k / passes)
        scores.append(waiting.score)
    assert scores[0] == pytest.approx(scores[1]) == pytest.approx(scores[2])
    discrete = sum((k * 0.25) ** 2 for k in range(1, 241)) * 0.5 / 60.0 ** 3  # Cobalt, 15 s passes
    assert scores[2] == pytest.approx(discrete, rel=0.01)


def test_cobalt_higher_score_goes_first_and_backfill_queue_last():
    cfg = default_config()
    cfg["priority"] = {"policy": "cobalt", "backfill_queues": ["backfill"],
                       "initial_scores": {"backfill": 1e9, "prod-short": 5.0}}
    cfg["queues"]["backfill"] = {}
    s = build(cfg)
    low = s.submit(Job(request=Request(nodes=1), walltime=60, queue="backfill"), 0)
    high = s.submit(Job(request=Request(nodes=1), walltime=60), 0)
    assert high.score == 5.0 and low.score == 1e9
    order = s.policy.order([low, high], s.context(0))
    assert order == [high, low]


def test_cobalt_qalter_changing_queue_resets_score():
    cfg = default_config()
    cfg["priority"] = {"policy": "cobalt", "initial_scores": {"prod-short": 1.0, "prod-long": 2.0}}
    s = build(cfg)
    j = s.submit(Job(request=Request(nodes=16), walltime=600), 0)
    assert j.queue == "prod-capability" and j.score == 0.0
    j.score = 500.0
    s.alter(j.id, 10, name="renamed")
    assert j.score == 500.0  # same queue: kept
    s.alter(j.id, 10, request=Request(nodes=1))
    assert j.queue == "prod-short" and j.score == 1.0
    assert j.eligible(10) == 0.0 and j.eligible(70) == 60.0  # it waits afresh, as if new


def test_cobalt_a_job_moved_to_another_queue_starts_no_earlier_than_a_fresh_one():
    """The anti-gaming rule (ALCF paper, section 4): a job that waited three hours in
    prod-long and is then altered into prod-short ranks with a job submitted into
    prod-short at that moment, not above it (its hours of waiting are not carried over)."""
    cfg = default_config()
    cfg["priority"] = {"policy": "cobalt"}
    s = build(cfg)
    s.submit(Job(request=Request(nodes=16), walltime=24 * 3600), 0)  # the machine is busy all day
    s.iterate(0)
    gamer = s.submit(Job(request=Request(nodes=2), walltime=12 * 3600), 0)
    assert gamer.queue == "prod-long"
    for t in range(15, 3 * 3600 + 1, 15):
        s.iterate(t)
    assert gamer.score > 0
    s.alter(gamer.id, 3 * 3600, walltime=3600)
    fresh = s.submit(Job(request=Request(nodes=2), walltime=3600), 3 * 3600)
    assert gamer.queue == fresh.queue == "prod-short"
    for t in range(3 * 3600 + 15, 5 * 3600, 15):
        s.iterate(t)
    assert gamer.score == pytest.approx(fresh.score)


def test_cobalt_dependent_job_inherits_half_the_parent_score():
    pol = Cobalt()
    s = scheduler(2, policy=pol)
    parent = s.submit(job(1, 100), 0)
    parent.score = 200.0
    child = s.submit(job(1, 100, dependencies=[Dependency(DepType.AFTEROK, parent.id)]), 0)
    rich = s.submit(job(1, 100, dependencies=[Dependency(DepType.AFTEROK, parent.id)]), 0)
    s.iterate(0)
    assert parent.score_at_start == 200.0
    rich.score = 150.0
    s.job_ended(parent.id, 100, 0)
    assert child.score == 100.0 and rich.score == 150.0


def test_simon_two_bins_round_robin_and_large_limit():
    pol = Simon(large=8, max_large_running=2)
    s = scheduler(64, policy=pol)
    for owner, n, t in [("a", 8, 0), ("a", 16, 1), ("a", 8, 2), ("b", 8, 3), ("c", 2, 4), ("c", 4, 5)]:
        s.submit(job(n, 100, owner=owner), t)
    order = pol.order(list(s.queued()), s.context(5))
    # upper bin FIFO, one job per user per round: a1, b1, a2, a3; lower bin by size: 4, 2
    assert [j.id for j in order] == [1, 4, 2, 3, 6, 5]
    plan = s.iterate(5)
    assert sorted(st.job_id for st in plan.started) == [1, 4, 5, 6]
    assert "2 large jobs" in plan.reason(2)
    assert 2 not in plan.reserved


def test_simon_puts_an_altered_job_in_the_bin_of_its_new_size():
    # (Simon works a queued job's bin out once: qalter takes the job out of the order)
    pol = Simon(large=8, max_large_running=2)
    s = scheduler(64, policy=pol)
    wide = s.submit(job(16, 100, owner="a"), 0)
    s.submit(job(4, 100, owner="b"), 1)
    s.submit(job(2, 100, owner="c"), 2)

    def order(now):
        return [j.id for j in pol.order(list(s.queued()), s.context(now))]
    assert order(3) == [1, 2, 3]  # the upper bin first
    s.alter(wide.id, 4, request=Request(nodes=1))
    assert order(4) == [2, 3, 1]  # now small: the lower bin, by size
    s.alter(wide.id, 5, request=Request(nodes=8))
    assert order(5) == [1, 2, 3]


def test_policy_describe_lists_factors():
    s = scheduler(4, policy=Cobalt())
    j = s.submit(job(2, 600), 0)
    f = s.policy.describe(j, s.context(120))
    assert f["eligible_minutes"] == 2.0 and f["size_fraction"] == 0.5 and f["score_walltime_minutes"] == 60.0
