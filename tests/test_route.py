import pytest

from hpcsched import ConfigError, Job, Queue, Rejected, Request, Router, build, default_config


def alcf(machine=100):
    cfg = default_config()
    cfg["nodes"] = [{"names": f"n[000-{machine - 1:03d}]"}]
    return build(cfg)


@pytest.mark.parametrize("nodes,wall,queue", [
    (20, 3600, "prod-capability"), (100, 86400, "prod-capability"),
    (19, 6 * 3600, "prod-short"), (1, 60, "prod-short"),
    (19, 6 * 3600 + 1, "prod-long"), (5, 86400, "prod-long")])
def test_alcf_router(nodes, wall, queue):
    s = alcf()
    j = s.submit(Job(request=Request(nodes=nodes), walltime=wall), now=0)
    assert j.queue == queue


def test_rejection_gives_every_reason_in_words():
    s = alcf()
    with pytest.raises(Rejected) as e:
        s.submit(Job(request=Request(nodes=50), walltime=30 * 3600), now=0)
    msg = str(e.value)
    assert "no destination of queue default accepts the job" in msg
    assert "walltime 30:00:00 exceeds queue prod-capability max_walltime 24:00:00" in msg
    assert "walltime 30:00:00 exceeds queue prod-long max_walltime 24:00:00" in msg
    with pytest.raises(Rejected, match="Unknown queue nosuch"):
        s.submit(Job(queue="nosuch"), now=0)
    with pytest.raises(Rejected, match="requests more than the machine has"):
        s.submit(Job(request=Request(nodes=101), walltime=60, queue="prod-capability"), now=0)
    assert s.jobs == {}


def test_queue_limits_and_acl():
    q = Queue("q", min_walltime=60, max_nodes=4, acl_users=frozenset({"alice"}), max_queued_per_user=2)
    r = Router({"q": q}, "q")
    ok = Job(owner="alice", request=Request(nodes=2), walltime=120)
    assert r.route(ok, 2, 10, {}, {}) is q
    cases = [(Job(owner="bob", walltime=120), 1, "user bob is not allowed in queue q"),
             (Job(owner="alice", walltime=10), 1, "walltime 00:00:10 below queue q min_walltime 00:01:00"),
             (Job(owner="alice", walltime=120), 5, "5 nodes exceed queue q max_nodes 4")]
    for j, size, msg in cases:
        with pytest.raises(Rejected, match=msg):
            r.route(j, size, 10, {}, {})
    with pytest.raises(Rejected, match="max_queued_per_user 2"):
        r.route(ok, 2, 10, {"q": 2}, {("q", "alice"): 2})
    q.enabled = False
    with pytest.raises(Rejected, match="queue q is not enabled"):
        r.route(ok, 2, 10, {}, {})
    q.enabled, q.draining = True, True
    with pytest.raises(Rejected, match="queue q is draining"):
        r.route(ok, 2, 10, {}, {})


def test_max_queued_counts_the_jobs_in_the_queue_waiting_or_running():
    """As PBS's max_queued ("queued in or running from this queue"), Torque's max_queuable
    and Cobalt's maxqueued: a job counts until it ends or is deleted, not until it starts."""
    cfg = {"nodes": [{"names": "n[1-4]"}], "queues": {"q": {"max_queued_per_user": 2, "max_queued": 4}}}
    s = build(cfg)
    a1, a2 = s.submit(Job(owner="a", walltime=100), 0), s.submit(Job(owner="a", walltime=100), 0)
    with pytest.raises(Rejected, match="max_queued_per_user"):
        s.submit(Job(owner="a"), 0)
    b1 = s.submit(Job(owner="b", walltime=100), 0)
    s.iterate(0)  # all three start: running, they still count
    assert all(j.state.value == "running" for j in (a1, a2, b1))
    with pytest.raises(Rejected, match="max_queued_per_user"):
        s.submit(Job(owner="a"), 1)
    s.submit(Job(owner="b", walltime=100), 1)
    with pytest.raises(Rejected, match="already holds its max_queued 4 jobs"):
        s.submit(Job(owner="c"), 1)
    s.job_ended(a1.id, 50, 0)  # one ends: room for one more, of a's too
    s.submit(Job(owner="a"), 50)
    s.requeue(a2.id, 60)  # (back to waiting: still in the queue, counted once)
    with pytest.raises(Rejected, match="already holds its max_queued 4 jobs"):
        s.submit(Job(owner="c"), 60)
    s.delete(b1.id, 60)  # (running: it exits, and counts until it has ended)
    with pytest.raises(Rejected, match="already holds its max_queued 4 jobs"):
        s.submit(Job(owner="c"), 60)
    s.job_ended(b1.id, 61, 271)
    s.submit(Job(owner="c"), 61)
    s.iterate(61)
    again = build(cfg).restore(s.to_dict())  # (a restored store counts its running jobs too)
    assert sorted(j.state.value for j in again.jobs.values()) == ["completed"] * 2 + ["running"] * 4
    with pytest.raises(Rejected, match="already holds its max_queued 4 jobs"):
        again.submit(Job(owner="d"), 62)


def test_node_limits_on_running_jobs_hold_jobs_back_and_refuse_what_could_never_run():
    """Cobalt's totalnodes and maxusernodes: the nodes a queue's running jobs hold, and a
    user's there; a job larger than either is refused at once."""
    cfg = {"nodes": [{"names": "n[1-9]"}], "queues": {"q": {"max_running_nodes": 5, "max_running_nodes_per_user": 3}}}
    s = build(cfg)
    with pytest.raises(Rejected, match="4 nodes exceed queue q max_running_nodes_per_user 3"):
        s.submit(Job(owner="a", request=Request(nodes=4)), 0)
    a1, a2 = (s.submit(Job(owner="a", request=Request(nodes=2), walltime=100), 0) for _ in range(2))
    b1, b2 = (s.submit(Job(owner="b", request=Request(nodes=2), walltime=100), 0) for _ in range(2))
    plan = s.iterate(0)
    assert {x.job_id for x in plan.started} == {a1.id, b1.id}  # (4 nodes held: a second of a's would make 6)
    assert "would exceed max_running_nodes_per_user 3 in queue q (2 in use)" in plan.reason(a2.id)
    assert "queue q would exceed max_running_nodes 5 (4 in use)" in plan.reason(b2.id)
    s.job_ended(a1.id, 10, 0)
    assert {x.job_id for x in s.iterate(10).started} == {a2.id}


def test_running_limits_hold_jobs_back():
    cfg = {"nodes": [{"names": "n[1-9]"}],
           "queues": {"long": {"max_running_fraction": 0.34, "max_running_per_user": 5}}}
    s = build(cfg)
    for _ in range(3):
        s.submit(Job(owner="a", request=Request(nodes=2)), 0)
    plan = s.iterate(0)
    assert [st.job_id for st in plan.started] == [1]
    assert "max_running_fraction" in plan.reason(2)
    with pytest.raises(Rejected, match="max_running_fraction"):
        s.submit(Job(owner="a", request=Request(nodes=4)), 0)


@pytest.mark.parametrize("queues,msg", [
    ({"a": {"route_to": ["zz"]}}, "queues.a.route_to: unknown queue 'zz'"),
    ({"a": {"max_walltime": "six hours"}}, "queues.a.max_walltime: bad duration"),
    ({"a": {"max_fraction": 2}}, "queues.a.max_fraction: must be a number from 0 to 1"),
    ({"a": {"speed": 1}}, "queues.a.speed: unknown key"),
    ({"a": {"enabled": "yes"}}, "queues.a.enabled: must be true or false"),
    ({"a": {"max_running": -1}}, "queues.a.max_running: must be a non-negative integer")])
def test_bad_queue_config(queues, msg):
    with pytest.raises(ConfigError, match=msg):
        build({"nodes": [{"names": "n1"}], "queues": queues})
