import itertools

import pytest

from hpcsched import TRANSITIONS, Allocation, Dependency, DepType, Hold, InvalidRequest, InvalidState, Job, Request, State


@pytest.mark.parametrize("old,new", [(a, b) for a in State for b in TRANSITIONS[a]])
def test_every_allowed_transition(old, new):
    job = Job(id=7, state=old)
    job.move_to(new, now=10.0)
    assert job.state == new


REFUSED = [(a, b) for a, b in itertools.product(State, State) if a != b and b not in TRANSITIONS[a]]


@pytest.mark.parametrize("old,new", REFUSED)
def test_every_other_transition_is_refused(old, new):
    job = Job(id=7, state=old)
    with pytest.raises(InvalidState, match=f"job 7: cannot go from {old.value} to {new.value}"):
        job.move_to(new, now=10.0)
    assert job.state == old


def test_finished_states_are_terminal_and_table_is_complete():
    assert set(TRANSITIONS) == set(State)
    assert TRANSITIONS[State.COMPLETED] == TRANSITIONS[State.DELETED] == frozenset()
    assert len(REFUSED) > 40


def test_eligible_time_excludes_held_time():
    job = Job(state=State.QUEUED, eligible_since=0.0)
    job.move_to(State.HELD, 100.0)
    assert job.eligible(150.0) == 100.0
    job.move_to(State.QUEUED, 400.0)  # 300 s held: not counted
    assert job.eligible(450.0) == 150.0
    job.move_to(State.DEP_HOLD, 500.0)
    job.move_to(State.QUEUED, 600.0)
    assert job.eligible(600.0) == 200.0


def test_pending_state_precedence():
    job = Job(state=State.QUEUED, start_after=50.0)
    assert job.pending_state(0) == State.WAITING
    assert job.pending_state(50) == State.QUEUED
    job.dependencies = [Dependency(DepType.AFTEROK, 1)]
    assert job.pending_state(0) == State.DEP_HOLD
    job.dependencies.append(Dependency(DepType.AFTEROK, 2, met=False))
    assert job.pending_state(0) == State.DEP_FAIL
    job.holds.add(Hold.USER)
    assert job.pending_state(0) == State.HELD


@pytest.mark.parametrize("kind,status,met", [
    (DepType.AFTEROK, 0, True), (DepType.AFTEROK, 1, False), (DepType.AFTEROK, None, False),
    (DepType.AFTERNOTOK, 0, False), (DepType.AFTERNOTOK, 271, True), (DepType.AFTERNOTOK, None, True),
    (DepType.AFTERANY, 0, True), (DepType.AFTERANY, 3, True), (DepType.AFTERANY, None, True)])
def test_dependency_resolution(kind, status, met):
    d = Dependency(kind, 1)
    d.resolve(status)
    assert d.met is met


@pytest.mark.parametrize("kw,msg", [({"nodes": 0}, "nodes >= 1"), ({"ppn": -1}, "ppn must be"),
                                    ({"nodes": 1.5}, "nodes must be"), ({"mem": True}, "mem must be")])
def test_bad_requests(kw, msg):
    with pytest.raises(InvalidRequest, match=msg):
        Request(**kw)


def test_job_round_trips_through_dict():
    job = Job(id=3, name="x", owner="a", request=Request(nodes=2, ppn=4, features=("ib", "gpu")),
              holds={Hold.USER, Hold.SYSTEM}, dependencies=[Dependency(DepType.AFTERANY, 1, True)],
              state=State.RUNNING, allocation=Allocation(0, ("n1", "n2"), ((0, 1), (0, 1))), extra={"k": [1]})
    again = Job.from_dict(job.to_dict())
    assert again == job
    assert again.request.features == ("gpu", "ib")


def test_job_from_dict_rejects_unknown_fields():
    with pytest.raises(InvalidRequest, match="unknown job field 'bogus'"):
        Job.from_dict({"id": 1, "bogus": 2})


def test_request_from_dict_refuses_unknown_fields_whatever_it_saw_before():
    assert Request.from_dict({"nodes": 1, "ppn": 2}) == Request(nodes=1, ppn=2)
    with pytest.raises(InvalidRequest, match="bogus"):
        Request.from_dict({"ppn": 2, "bogus": 1})  # same size and values as the one cached
    assert Request.from_dict({"ppn": 2}) is Request.from_dict({"nodes": 1, "ppn": 2})  # one shared object


@pytest.mark.parametrize("d", [{"nodes": True}, {"nodes": 2.0}, {"ppn": True}, {"gpus": 1.0}])
def test_request_from_dict_refuses_a_value_equal_to_one_it_cached(d):
    """True == 1 and 2.0 == 2: after the integer was seen, the look-alike is still refused."""
    key, value = next(iter(d.items()))
    Request.from_dict({key: int(value)})
    with pytest.raises(InvalidRequest, match=f"request {key} must be a non-negative integer"):
        Request.from_dict(d)
