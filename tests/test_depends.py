"""Dependencies on jobs and on job arrays (core/depends.py), checked against a reference
that reads every subjob each time; failed dependencies held (Cobalt) or deleted (PBS)."""
import random

import pytest

from hpcsched import Dependency, DepType, Hold
from hpcsched.core.depends import ALL
from hpcsched.core.errors import BadDependency
from hpcsched.core.jobs import COMPLETED, DELETED, DEP_FAIL, DEP_HOLD, FINISHED, QUEUED, RUNNING

from helpers import job, scheduler

KINDS = (DepType.AFTEROK, DepType.AFTERNOTOK, DepType.AFTERANY, DepType.AFTERSTART)


def reference(kind, of, members):
    """The definition, read off every subjob: met, failed, or still open."""
    ended = [j for j in members if j.state in FINISHED]
    ok = [j for j in ended if j.state == COMPLETED and j.exit_status == 0]
    bad = [j for j in ended if j not in ok]
    running_or_waiting = [j for j in members if j.state not in FINISHED]
    if of == ALL and kind == DepType.AFTERNOTOK:  # the array as one job: it failed if any subjob did
        return None if running_or_waiting else bool(bad)
    need = len(members) if of == ALL and kind != DepType.AFTERSTART else 1 if of == ALL else of
    if kind == DepType.AFTERSTART:
        have = [j for j in members if j.run_count > 0]
        could = have + [j for j in running_or_waiting if j.run_count == 0]
    else:
        have = {DepType.AFTEROK: ok, DepType.AFTERNOTOK: bad, DepType.AFTERANY: ended}[kind]
        could = have + running_or_waiting  # every unfinished subjob ending the right way
    return True if len(have) >= need else False if len(could) < need else None


def array(s, n, now=0.0, **kw):
    first = s.next_id
    return [s.submit(job(1, 100, array_id=first, array_index=i, **kw), now) for i in range(1, n + 1)]


@pytest.mark.parametrize("seed", range(30))
def test_array_dependencies_match_the_reference(seed):
    rng = random.Random(seed)
    s = scheduler(n=3)
    members = array(s, rng.randint(1, 6))
    size = len(members)
    waiters, seen = [], {}
    for kind in KINDS:
        for of in (ALL, *range(1, size + 2)):
            w = s.submit(job(1, 10, dependencies=[Dependency(kind, members[0].array_id, None, of)]), 0)
            waiters.append((w, kind, of))
    now = 0.0
    for _ in range(40):
        now += 1
        event = rng.choice(["pass", "end", "delete", "requeue", "restore"])
        running = [j for j in members if j.state == RUNNING]
        waiting = [j for j in members if j.state == QUEUED]
        if event == "pass":
            s.iterate(now)
        elif event == "end" and running:
            s.job_ended(rng.choice(running).id, now, rng.choice([0, 0, 1]))
        elif event == "delete" and waiting:
            s.delete(rng.choice(waiting).id, now)
        elif event == "requeue" and running:
            s.requeue(rng.choice(running).id, now)
        elif event == "restore":  # the tallies are rebuilt from the jobs
            state = s.to_dict()
            s = scheduler(n=3)
            s.restore(state)
            members = [s.jobs[j.id] for j in members]
            waiters = [(s.jobs[w.id], k, o) for w, k, o in waiters]
        for w, kind, of in waiters:
            want = reference(kind, of, members)
            if want is not None:
                seen.setdefault(w.id, want)  # once decided, a dependency stays decided
            assert w.dependencies[0].met == seen.get(w.id), (kind, of, [j.state for j in members])
            if w.state not in FINISHED and w.state != RUNNING:
                assert w.state == {True: QUEUED, False: DEP_FAIL, None: DEP_HOLD}[seen.get(w.id)]


def test_afterstart_waits_for_the_start_not_the_end():
    s = scheduler(n=1)
    a = s.submit(job(1, 100), 0)
    b = s.submit(job(1, 100), 0)  # will never start: deleted first
    after_a = s.submit(job(1, 10, dependencies=[Dependency(DepType.AFTERSTART, a.id)]), 0)
    after_b = s.submit(job(1, 10, dependencies=[Dependency(DepType.AFTERSTART, b.id)]), 0)
    assert after_a.state == DEP_HOLD
    s.iterate(1)
    assert a.state == RUNNING and after_a.state == QUEUED
    s.delete(b.id, 2)
    assert after_b.state == DEP_FAIL


def test_failed_dependencies_delete_the_whole_chain_when_the_site_says_so():
    s = scheduler(n=2, dependency_failure="delete")
    a = s.submit(job(1, 100), 0)
    b = s.submit(job(1, 10, dependencies=[Dependency(DepType.AFTEROK, a.id)]), 0)
    c = s.submit(job(1, 10, dependencies=[Dependency(DepType.AFTEROK, b.id)]), 0)
    d = s.submit(job(1, 10, dependencies=[Dependency(DepType.AFTERNOTOK, b.id)]), 0)  # b's failure is its go
    held = s.submit(job(1, 10, holds={Hold.USER}, dependencies=[Dependency(DepType.AFTEROK, a.id)]), 0)
    s.iterate(0)
    s.job_ended(a.id, 50, 3)
    assert [j.id for j in s.deleted] == [b.id, held.id, c.id]
    assert b.state == c.state == held.state == DELETED and b.end_time == 50 and b.start_time is None
    assert b.comment == f"Job deleted as result of dependency on job {a.id}"
    assert d.state == QUEUED
    late = s.submit(job(1, 10, dependencies=[Dependency(DepType.AFTEROK, a.id)]), 60)  # after the failure:
    assert late.state == DELETED and s.deleted[-1] is late  # deleted at once, the same way
    with pytest.raises(BadDependency, match="can never be met"):  # qalter refuses it: it never deletes
        s.alter(d.id, 61, dependencies=[Dependency(DepType.AFTEROK, a.id)])


def test_a_long_chain_is_deleted_without_recursion():
    s = scheduler(n=1, dependency_failure="delete")
    parent = s.submit(job(1, 100), 0)
    last = parent
    for _ in range(3000):
        last = s.submit(job(1, 10, dependencies=[Dependency(DepType.AFTEROK, last.id)]), 0)
    s.delete(parent.id, 1)
    assert len(s.deleted) == 3000 and last.state == DELETED


def test_hold_keeps_cobalts_dep_fail_and_the_user_can_fix_it():
    s = scheduler(n=1)
    a = s.submit(job(1, 100), 0)
    b = s.submit(job(1, 10, dependencies=[Dependency(DepType.AFTEROK, a.id)]), 0)
    s.iterate(0)
    s.job_ended(a.id, 5, 1)
    assert b.state == DEP_FAIL and not s.deleted
    s.alter(b.id, 6, dependencies=[])
    assert b.state == QUEUED


def test_unknown_array_and_settings_checked():
    s = scheduler(n=1)
    with pytest.raises(BadDependency, match=r"unknown job array 7\[\]"):
        s.submit(job(1, 10, dependencies=[Dependency(DepType.AFTEROK, 7, None, ALL)]), 0)
    from hpcsched import InvalidRequest
    with pytest.raises(InvalidRequest):
        scheduler(n=1, dependency_failure="maybe")


def test_array_dependencies_round_trip_through_the_state():
    s = scheduler(n=2)
    members = array(s, 3)
    w = s.submit(job(1, 10, dependencies=[Dependency(DepType.AFTEROK, members[0].array_id, None, 2)]), 0)
    d = w.to_dict()["dependencies"]
    assert d == [["afterok", members[0].array_id, None, 2]]
    from hpcsched import Job
    assert Job.from_dict(w.to_dict()).dependencies == w.dependencies
