"""The pass API: submit, iterate, job_ended, hold/release/alter/delete, dependencies, state."""
import json
from datetime import datetime

import pytest
from helpers import job, scheduler

from hpcsched import (ALL, ConfigError, Dependency, DepType, Hold, InvalidRequest, InvalidState, Job, Rejected, Request,
                      Reservation, State, UnknownJob, build, default_config)


def test_dependencies_release_or_fail_children():
    s = scheduler(4)
    a = s.submit(job(1, 100), 0)
    ok = s.submit(job(1, 10, dependencies=[Dependency(DepType.AFTEROK, a.id)]), 0)
    notok = s.submit(job(1, 10, dependencies=[Dependency(DepType.AFTERNOTOK, a.id)]), 0)
    anyd = s.submit(job(1, 10, dependencies=[Dependency(DepType.AFTERANY, a.id)]), 0)
    assert ok.state == notok.state == anyd.state == State.DEP_HOLD
    assert [st.job_id for st in s.iterate(0).started] == [a.id]
    s.job_ended(a.id, 50, exit_status=1)
    assert ok.state == State.DEP_FAIL
    assert notok.state == State.QUEUED and anyd.state == State.QUEUED
    assert sorted(st.job_id for st in s.iterate(50).started) == [notok.id, anyd.id]
    # the user fixes a dep_fail job by dropping the dependency
    s.alter(ok.id, 60, dependencies=[])
    assert ok.state == State.QUEUED


def test_deleting_a_parent_fails_afterok_children():
    s = scheduler(1)
    a = s.submit(job(1, 100, holds={Hold.USER}), 0)
    child = s.submit(job(1, 10, dependencies=[Dependency(DepType.AFTEROK, a.id)]), 0)
    s.delete(a.id, 5)
    assert a.state == State.DELETED and child.state == State.DEP_FAIL


def test_dependency_on_finished_or_unknown_job():
    s = scheduler(1)
    a = s.submit(job(1, 10), 0)
    s.iterate(0)
    s.job_ended(a.id, 10, 0)
    b = s.submit(job(1, 10, dependencies=[Dependency(DepType.AFTEROK, a.id)]), 20)
    assert b.state == State.QUEUED
    with pytest.raises(Rejected, match="dependency on unknown job 99"):
        s.submit(job(1, 10, dependencies=[Dependency(DepType.AFTEROK, 99)]), 20)


def test_holds_keep_jobs_out_and_exclude_eligible_time():
    s = scheduler(1)
    j = s.submit(job(1, 10), 0)
    s.hold(j.id, 10, Hold.OPERATOR)
    s.hold(j.id, 10, Hold.USER)
    assert s.iterate(20).started == []
    s.release(j.id, 30, Hold.USER)
    assert j.state == State.HELD  # the operator hold remains
    s.release(j.id, 40, "o")
    assert j.state == State.QUEUED and j.eligible(50) == 20.0
    assert [st.job_id for st in s.iterate(50).started] == [j.id]
    with pytest.raises(InvalidState, match="only a waiting job can be held"):
        s.hold(j.id, 60)


def test_start_after_waits_then_runs():
    s = scheduler(1)
    j = s.submit(job(1, 10, start_after=100.0), 0)
    assert j.state == State.WAITING
    assert s.iterate(50).started == []
    assert [st.job_id for st in s.iterate(100).started] == [j.id]


def test_delete_and_end_running_job():
    s = scheduler(1)
    j = s.submit(job(1, 100), 0)
    s.iterate(0)
    s.delete(j.id, 10)
    assert j.state == State.EXITING
    with pytest.raises(InvalidState):
        s.delete(j.id, 11)
    s.submit(job(1, 10), 10)
    assert s.iterate(10).started == []  # exiting job keeps its node
    s.job_ended(j.id, 12, 271)
    assert j.state == State.COMPLETED and j.exit_status == 271
    assert [st.job_id for st in s.iterate(12).started] == [2]
    with pytest.raises(InvalidState, match="nothing to delete"):
        s.delete(j.id, 13)
    with pytest.raises(UnknownJob, match="Unknown Job Id 77"):
        s.delete(77, 13)


def test_requeue_puts_a_running_job_back():
    s = scheduler(2)
    j = s.submit(job(1, 100), 0)
    s.iterate(0)
    first = j.nodes
    s.set_node_state(first[0], "bad")
    s.requeue(j.id, 1)
    assert j.state == State.QUEUED and j.nodes == ()
    s.iterate(1)
    assert j.state == State.RUNNING and j.nodes != first and j.run_count == 2


def test_alter_reroutes_and_refuses_atomically():
    s = build(default_config())
    j = s.submit(job(1, 3600), 0)
    assert j.queue == "prod-short"
    s.alter(j.id, 5, walltime=8 * 3600)
    assert j.queue == "prod-long"
    with pytest.raises(Rejected):
        s.alter(j.id, 5, walltime=99 * 3600, name="new")
    assert j.walltime == 8 * 3600 and j.name == "STDIN" and j.queue == "prod-long"
    with pytest.raises(InvalidRequest, match="cannot alter 'owner'"):
        s.alter(j.id, 5, owner="mallory")
    s.iterate(5)
    assert j.state == State.RUNNING
    with pytest.raises(InvalidState, match="cannot alter request"):
        s.alter(j.id, 6, request=Request(nodes=2))
    s.alter(j.id, 6, walltime=9 * 3600)
    assert j.walltime == 9 * 3600


def test_time_may_not_go_backwards_and_ids_increase():
    s = scheduler(1)
    s.iterate(10)
    with pytest.raises(InvalidRequest, match="time went backwards"):
        s.iterate(5)
    a = s.submit(job(), 10)
    b = s.submit(job(id=40), 10)
    c = s.submit(job(), 10)
    assert (a.id, b.id, c.id) == (1, 40, 41)
    with pytest.raises(Rejected, match="already in use"):
        s.submit(job(id=40), 10)


def decisions(plan):
    return ([(st.job_id, st.allocation.nodes, st.backfill) for st in plan.started],
            sorted((k, v[0], v[1].nodes) for k, v in plan.reserved.items()))


def test_state_round_trips_through_json_with_identical_decisions():
    cfg = default_config()
    cfg["priority"] = {"policy": "cobalt"}
    s = build(cfg)
    s.add_reservation(Reservation("r", start=5000, duration=600, count=2, users={"bob"}, period=86400), 0)
    s.submit(job(4, 3600, owner="a"), 0)
    s.submit(job(12, 7200, owner="b", account="p1"), 0)
    s.submit(job(8, 600, owner="c", holds={Hold.USER}), 0)
    s.submit(job(2, 60, owner="d", dependencies=[Dependency(DepType.AFTEROK, 1)]), 0)
    s.iterate(0)
    s.submit(job(16, 1800, owner="e"), 30)
    s.iterate(30)
    text = json.dumps(s.to_dict())
    t = build(cfg).restore(json.loads(text))
    assert json.dumps(t.to_dict()) == text
    for now in (45, 3600, 3700):
        for sched in (s, t):
            if now == 3600:
                sched.job_ended(1, now, 0)
        assert decisions(s.iterate(now)) == decisions(t.iterate(now))
    assert json.dumps(s.to_dict()) == json.dumps(t.to_dict())


@pytest.mark.parametrize("state,msg", [({"version": 99}, "state version 99 is not supported"),
                                       ([], "state version None"),
                                       ({"version": 1, "jobs": [{"id": "x", "state": "nope"}]}, "malformed")])
def test_bad_state_is_refused(state, msg):
    with pytest.raises(InvalidRequest, match=msg):
        scheduler(1).restore(state)


@pytest.mark.parametrize("patch,msg", [
    ({"backfill": "sometimes"}, "backfill: 'sometimes' is not none"),
    ({"nodes": []}, "nodes: need at least one"),
    ({"colour": 1}, "colour: unknown key"),
    ({"priority": {"policy": "lottery"}}, "priority.policy: unknown policy 'lottery'"),
    ({"priority": {"policy": "cobalt", "wall_floor": -1}}, "priority.wall_floor: must be a non-negative"),
    ({"priority": {"policy": "fifo", "dep_frac": 1}}, "priority.dep_frac: unknown option"),
    ({"priority": {"policy": "cobalt", "backfill_queues": 1}}, "priority.backfill_queues: must be a list"),
    ({"priority": {"policy": "cobalt", "backfill_queues": [1]}}, "priority.backfill_queues: must be a list"),
    ({"interval": 0}, "interval: must be a positive"),
    ({"default_queue": "nope"}, "default_queue: unknown queue 'nope'"),
    ({"reservations": [{"name": "r", "start": "tomorrow", "duration": 60, "count": 1}]},
     r"reservations\[0\].start: 'tomorrow'"),
    ({"reservations": [{"name": "r", "start": 0, "duration": 60, "count": 99}]},
     r"reservations\[0\]: reservation r: 99 nodes are not free")])
def test_bad_config_gives_one_line_naming_the_key(patch, msg):
    cfg = default_config()
    cfg.update(patch)
    with pytest.raises(ConfigError, match=msg) as e:
        build(cfg)
    assert "\n" not in str(e.value)


def test_config_reservations_and_depths():
    cfg = default_config()
    cfg["backfill"] = "depth=3"
    cfg["reservations"] = [{"name": "pm", "start": "2026-01-05T08:00:00", "duration": "8:00:00",
                            "nodes": "node[01-16]", "period": "weekly"}]
    s = build(cfg)
    assert s.settings.depth == 3 and s.reservations["pm"].period == 604800
    assert s.settings.backfill
    cfg["backfill"] = "none"
    assert not build(cfg).settings.backfill
    assert len(s.reservations["pm"].nodes) == 16


def test_a_config_reservation_on_some_days_of_the_week():
    """Maui's SRCFG DAYS: `days` holds the nodes on those days, at the start's time of day,
    from the first such day on."""
    cfg = default_config()
    cfg["reservations"] = [{"name": "debug", "start": "2030-01-05T08:00:00", "duration": "10:00:00",
                            "nodes": "node[01-02]", "days": ["MON", "tue", "Friday"]}]  # (Jan 5 2030: a Saturday)
    res = build(cfg).reservations["debug"]
    starts = [datetime.fromtimestamp(a) for a, _ in res.occurrences(res.start, res.start + 14 * 86400)]
    assert [(t.strftime("%a"), t.day, t.hour) for t in starts] == [
        ("Mon", 7, 8), ("Tue", 8, 8), ("Fri", 11, 8), ("Mon", 14, 8), ("Tue", 15, 8), ("Fri", 18, 8)]
    for days, said in ((["XX"], "a list of days"), (["MO", "TU"], "occurrences overlap")):
        cfg["reservations"][0].update(days=days, duration="10:00:00" if days == ["XX"] else "30:00:00")
        with pytest.raises(ConfigError, match=said):
            build(cfg)
    cfg["reservations"][0].update(days=["MO"], period="daily", duration="1:00:00")
    with pytest.raises(ConfigError, match="repeats weekly"):
        build(cfg)


def test_usage_accumulates_per_user_group_and_project():
    s = scheduler(4)
    a = s.submit(job(2, 100, owner="ann", group="g1", account="p1"), 0)
    s.submit(job(1, 100, owner="bob", group="g1", account="p2"), 0)
    s.iterate(0)
    usage = s.context(50).usage
    assert usage.by("user", 50)["ann"] == 100.0  # 2 nodes x 50 s, still running
    assert usage.by("group", 50)["g1"] == 150.0
    s.job_ended(a.id, 80, 0)
    assert usage.by("user", 90)["ann"] == 160.0 and usage.by("project", 90)["p2"] == 90.0
    restored = scheduler(4).restore(json.loads(json.dumps(s.to_dict())))
    assert restored.usage.by("user", 90) == usage.by("user", 90) == {"ann": 160.0, "bob": 90.0}


def test_estimates_for_waiting_and_held_jobs():
    s = scheduler(2)
    s.submit(job(2, 100), 0)
    w = s.submit(job(1, 10, start_after=500.0), 0)
    h = s.submit(job(1, 10, holds={Hold.USER}), 0)
    plan = s.iterate(0)
    assert plan.estimate(w.id) == 500.0
    assert plan.estimate(h.id) is None
    assert plan.reason(1) == "started"


def test_requeue_after_a_pass_frees_the_planned_profile():
    s = scheduler(1)
    j = s.submit(job(1, 100), 0)
    s.iterate(0)  # the running-jobs profile now exists
    s.requeue(j.id, 10)
    assert [st.job_id for st in s.iterate(10).started] == [j.id]


def test_started_jobs_node_names_are_listed_when_read_and_saved():
    s = scheduler(4)
    a = s.submit(job(2, 100), 0)
    start = s.iterate(0).started[0]
    assert a.nodes == start.allocation.nodes and len(a.nodes) == 2
    assert all(isinstance(n, str) for n in a.nodes)
    saved = json.loads(json.dumps(a.to_dict()))
    assert saved["nodes"] == list(a.nodes)
    back = Job.from_dict(saved)
    assert back.nodes == a.nodes and back == a and a.copy().nodes == a.nodes


def test_gpu_jobs_run_on_gpu_nodes_and_never_share_a_gpu():
    """Through the passes (EASY and conservative), on a pool of shared nodes some of which
    have GPUs: a job asking for GPUs runs only on nodes with that many, and at every pass
    the GPUs of the jobs on a node add up to at most the node's."""
    import random
    for backfill in ("easy", "conservative"):
        s = build({"backfill": backfill, "queues": {"batch": {}}, "nodes": [
            {"names": "c[1-2]", "cores": 8, "shared": True},
            {"names": "g[1-2]", "cores": 8, "gpus": 4, "shared": True}]})
        gpus = {n.name: n.gpus for n in s.topology.all_nodes()}
        rnd, ends, started = random.Random(5), {}, 0
        for t in range(0, 400, 4):
            for jid in [j for j, end in ends.items() if end <= t]:
                s.job_ended(jid, t, 0)
                del ends[jid]
            for _ in range(rnd.randrange(3)):
                req = Request(nodes=rnd.choice([1, 1, 2]), ppn=rnd.choice([1, 2, 4]), gpus=rnd.choice([0, 1, 2, 4]))
                s.submit(Job(owner=rnd.choice("ab"), request=req, walltime=rnd.choice([8, 20, 40])), t)
            for st in s.iterate(t).started:
                ends[st.job_id] = t + rnd.choice([4, 8, 20])
                started += 1
            held = {}
            for j in s.running():
                for name in j.nodes:
                    held[name] = held.get(name, 0) + j.request.gpus
            assert all(held[n] <= gpus[n] for n in held), (backfill, t, held)
        assert started > 60


@pytest.mark.parametrize("dynamic", [False, True])
def test_order_is_the_order_a_pass_walks(dynamic):
    """`Scheduler.order` lists the waiting jobs as the pass takes them: on one busy node,
    conservative backfill reserves them one after another in that order."""
    from hpcsched.policies.multifactor import Multifactor
    sched = scheduler(n=1, depth=float("inf"), policy=Multifactor(weight_fairshare=0.0, weight_user=1000.0) if dynamic else None)
    sched.submit(job(wall=100.0), 0.0)
    sched.iterate(0.0)
    assert sched.order(0.0) == []  # (nothing waits)
    for k, (owner, prio, at) in enumerate([("a", 0, 1.0), ("b", 5, 2.0), ("a", 5, 3.0), ("c", -3, 4.0)]):
        sched.submit(job(wall=10.0 * (k + 1), owner=owner, priority=prio), at)
    order = [j.id for j in sched.order(50.0)]
    assert sorted(order) == [2, 3, 4, 5] and order != [2, 3, 4, 5]  # (priority, not arrival)
    plan = sched.iterate(50.0)
    assert sorted(plan.reserved, key=lambda i: plan.reserved[i][0]) == order


def test_an_exiting_job_keeps_its_nodes_until_it_has_ended():
    """`exiting`: its process ended and its epilogue runs (or qdel told it to stop): the
    job is EXITING, with its exit status and CPU time, and no job starts on its nodes
    until `job_ended`."""
    sched = scheduler(n=2)
    first = sched.submit(job(nodes=2), 0.0)
    sched.iterate(0.0)
    sched.submit(job(nodes=2), 1.0)
    sched.exiting(first.id, 10.0, exit_status=3, cpu_time=12.5)
    assert (first.state, first.exit_status, first.cpu_time) == (State.EXITING, 3, 12.5)
    assert sched.iterate(10.0).started == []
    sched.job_ended(first.id, 12.0, 3)
    assert first.state == State.COMPLETED and first.cpu_time == 12.5
    assert [s.job_id for s in sched.iterate(12.0).started] == [2]
    with pytest.raises(InvalidState):
        sched.exiting(first.id, 13.0)


def test_a_job_naming_a_reservation_runs_in_it_alone_and_waits_while_it_cannot():
    """Moab's advres: a job naming a reservation that admits its owner is bound to it (its
    nodes, its window); one naming a reservation gone, or one that does not admit it, is
    held back with the reason, never let loose on other nodes."""
    s = scheduler(4)
    s.add_reservation(Reservation("train", start=1000, duration=500, nodes=("n00", "n01"), users={"alice"}), 0)
    s.submit(job(1, 100, owner="alice", id=1, reservation="train"), 0)
    s.submit(job(1, 100, owner="bob", id=2, reservation="train"), 0)
    s.submit(job(1, 100, owner="alice", id=3, reservation="gone"), 0)
    s.submit(job(1, 100, owner="alice", id=4), 0)
    plan = s.iterate(0)
    assert [st.job_id for st in plan.started] == [4]  # (the free nodes are not the bound jobs')
    assert plan.reserved[1][0] == 1000 and set(plan.reserved[1][1].nodes) <= {"n00", "n01"}
    assert plan.reason(2) == "its reservation train does not admit bob"
    assert plan.reason(3) == "its reservation gone does not exist"
    s.job_ended(4, 100, 0)
    plan = s.iterate(1000)
    assert [st.job_id for st in plan.started] == [1] and s.job(1).nodes[0] in ("n00", "n01")
    s.alter(3, 1000, reservation="train")  # (named anew: bound to it from this pass)
    assert [st.job_id for st in s.iterate(1000).started] == [3] and s.job(3).nodes[0] in ("n00", "n01")
    s.job_ended(1, 1010, 0), s.job_ended(3, 1010, 0)
    s.submit(job(1, 600, owner="alice", id=5, reservation="train"), 1010)  # (past the window's end at 1500)
    s.submit(job(1, 100, owner="alice", id=6, reservation="train"), 1010)
    plan = s.iterate(1010)
    assert [st.job_id for st in plan.started] == [6] and 5 not in plan.reserved  # (never inside it: it waits)


@pytest.mark.parametrize("depth", [1, 3, ALL])
def test_a_job_suspended_past_its_walltime_keeps_its_nodes(depth):
    """A job running past its walltime (an overrun) and then suspended still holds its
    node: nothing else starts there (it did, on a node the job still held), as for any
    suspended job, at least a grace period from each pass."""
    s = scheduler(1, depth=depth)
    a = s.submit(job(1, wall=100.0), 0.0)
    s.iterate(0.0)
    s.iterate(150.0)  # past its walltime: it runs on
    s.suspend(a.id, 150.0)
    s.submit(job(1, wall=10.0), 160.0)
    assert s.iterate(160.0).started == [] and s.iterate(400.0).started == []
    s.resume(a.id, 500.0)
    s.job_ended(a.id, 510.0, 0)
    assert [x.job_id for x in s.iterate(510.0).started] == [2]
