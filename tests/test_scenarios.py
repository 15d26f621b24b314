"""Live-server scenarios (tests/scenarios.py): commands, server kills and qterms at random
moments, then the invariants; and the judge itself, shown each kind of break."""
import shutil
import time

import pytest
from multiuser import USERS, drop_users, make_users, needs_root, new_base

from hpcsched.core.jobs import COMPLETED, QUEUED, Job
from scenarios import Rig, ask, judge, run


@pytest.mark.parametrize("seed", [3, 4, 11])  # (a Torque, a Cobalt and an OpenPBS site)
def test_a_scenario_keeps_every_invariant(tmp_path, seed):
    assert run(tmp_path, seed, steps=40) == []


@needs_root
def test_a_multi_user_scenario_keeps_every_invariant():
    """Two real users, an OpenPBS-flavored site (seed 2)."""
    base = new_base()
    made = make_users(base)
    try:
        (base / "run").mkdir()
        assert run(base / "run", 2, steps=40, users=USERS) == []
    finally:
        drop_users(made)
        shutil.rmtree(base, ignore_errors=True)


def _record(rig, kind, jid, when, **fields):
    stamp = time.strftime("%m/%d/%Y %H:%M:%S", time.localtime(when))
    body = " ".join(f"{k}={v}" for k, v in fields.items())
    directory = rig.home / "accounting"
    directory.mkdir(exist_ok=True)
    with open(directory / time.strftime("%Y%m%d", time.localtime(when)), "a") as f:
        f.write(f"{stamp};{kind};{jid}.host;{body}\n")


def test_the_judge_sees_each_kind_of_break(tmp_path):
    rig = Rig(tmp_path)
    t = 1_800_000_000
    rig.jobs = {str(i): ask(1, 0) for i in range(1, 7)}
    rig.jobs["4"]["after"] = "3"
    jobs = {i: Job(id=i, state=COMPLETED) for i in range(1, 6)}  # job 6 is lost from the store
    jobs[5].state = QUEUED  # and job 5 never finished
    _record(rig, "Q", 1, t)
    _record(rig, "S", 1, t + 1, start=t + 1, exec_host="node01/0")
    _record(rig, "Q", 2, t)
    _record(rig, "S", 2, t + 5, start=t + 5, exec_host="node01/0+node02/1")  # job 1 still holds node01/0
    _record(rig, "E", 1, t + 10, end=t + 10, Exit_status=0)
    _record(rig, "E", 2, t + 12, end=t + 12, Exit_status=7)  # its script said 0
    _record(rig, "Q", 3, t)
    _record(rig, "S", 3, t + 20, start=t + 20, exec_host="node02/0")
    _record(rig, "E", 3, t + 30, end=t + 30, Exit_status=1)
    _record(rig, "Q", 4, t)
    _record(rig, "Q", 4, t)  # twice
    _record(rig, "E", 4, t + 40, end=t + 40, Exit_status=0)  # with no start
    (rig.work / "events").write_text(
        f"S 1 {t + 1}.5\nS 1 {t + 2}.5\nE 1 {t + 9}.1 0\n"  # started twice, the log has one start
        f"S 2 {t + 5}.5\nE 2 {t + 11}.0 0\n"
        f"S 3 {t + 20}.5\nE 3 {t + 29}.0 1\n"
        f"S 4 {t + 25}.0\nE 4 {t + 39}.0 0\n")  # ran though its afterok parent failed
    found = judge(rig, jobs)
    kinds = sorted({line.split(":")[0] for line in found})
    assert kinds == ["lost", "order", "overbooked", "records", "status", "twice"], found
    assert "lost: job 6 is not in the store" in found and "lost: job 5 never finished (queued)" in found
    assert any(line.startswith("overbooked: node01/0 held by job 1") for line in found)
    assert "status: job 2 ended with 0, recorded 7" in found
    assert "order: job 4 ran, its afterok parent 3 ended with 1" in found
    assert "twice: job 1's script started 2 times, the log has 1 starts" in found
    assert "records: job 4: QQE" in found and "records: job 4 ended with no start: QQE" in found


def test_the_judge_sees_the_site_scripts_break(tmp_path):
    """With a prologue and an epilogue: a script started with no prologue run since its
    last start, a run with no epilogue, a run recorded ended before its epilogue was done."""
    rig = Rig(tmp_path, scripts=True)
    t = 1_800_000_000
    rig.jobs = {str(i): ask(1, 0) for i in range(1, 5)}
    jobs = {i: Job(id=i, state=COMPLETED) for i in range(1, 5)}
    for i in range(1, 5):
        _record(rig, "Q", i, t)
        _record(rig, "S", i, t + 10 * i, start=t + 10 * i, exec_host=f"node01/{i}")
        _record(rig, "E", i, t + 10 * i + 5, end=t + 10 * i + 5, Exit_status=0)
    (rig.work / "events").write_text(
        f"P 1 {t + 10}.0\nS 1 {t + 10}.2\nE 1 {t + 11}.0 0\nX 1 {t + 11}.1\nY 1 {t + 11}.5 0\n"  # as it should
        f"P 2 {t + 20}.0\nS 2 {t + 20}.2\nS 2 {t + 20}.7\nE 2 {t + 21}.0 0\nY 2 {t + 22}.0 0\n"  # no 2nd prologue
        f"P 3 {t + 30}.0\nS 3 {t + 30}.2\nE 3 {t + 31}.0 0\n"  # no epilogue
        f"P 4 {t + 40}.0\nS 4 {t + 40}.2\nE 4 {t + 41}.0 0\nX 4 {t + 41}.1\nY 4 {t + 46}.5 0\n")  # ended after E
    found = [line for line in judge(rig, jobs) if line.startswith("scripts")]
    assert found == ["scripts: job 2's script started with no prologue run before it",
                     "scripts: job 3 ran and ended with no epilogue run",
                     f"scripts: job 4 was recorded ended at {t + 45}, its epilogue ended at {t + 46}.5"], found


def test_the_judge_sees_a_reservation_broken(tmp_path):
    """A job of a reservation run outside its window or nodes; a job of another queue
    started on its nodes with a walltime reaching into its window, once it was made."""
    rig = Rig(tmp_path)
    t = 1_800_000_000
    rig.resvs = {"R9": {"start": t + 100, "end": t + 200, "made": t + 50, "nodes": {"node01"}}}
    rig.jobs = {str(i): dict(ask(1, 0), walltime=30) for i in range(1, 6)}
    rig.jobs["1"]["resv"] = rig.jobs["2"]["resv"] = "R9"
    jobs = {i: Job(id=i, state=COMPLETED) for i in range(1, 6)}
    for i, start, host in ((1, t + 120, "node01/0"), (2, t + 90, "node02/0"),  # (2: before it, elsewhere)
                           (3, t + 80, "node01/1"),  # (ran into it)
                           (4, t + 10, "node01/2"),  # (ended before it was made: no break)
                           (5, t + 75, "node02/1")):  # (not its nodes)
        _record(rig, "Q", i, t)
        _record(rig, "S", i, start, start=start, exec_host=host)
        _record(rig, "E", i, start + 5, end=start + 5, Exit_status=0)
    found = [line for line in judge(rig, jobs) if line.startswith("reservation")]
    assert found == [f"reservation: job 2 of R9 ran on node02 from {t + 90}, outside R9 (node01, {t + 100}-{t + 200})",
                     f"reservation: job 3 ran on node01 from {t + 80} (walltime 30) into R9's window "
                     f"({t + 100}-{t + 200})"], found


def test_the_judge_sees_a_start_on_an_offline_node(tmp_path):
    rig = Rig(tmp_path)
    t = 1_800_000_000
    rig.offline = {"node01": [[t + 10, t + 20], [t + 50, None]], "node02": [[t, t + 100]]}
    rig.jobs = {str(i): ask(1, 0) for i in range(1, 4)}
    jobs = {i: Job(id=i, state=COMPLETED) for i in range(1, 4)}
    for i, start, host in ((1, t + 15, "node01/0"), (2, t + 30, "node01/0"), (3, t + 60, "node01/1")):
        _record(rig, "Q", i, t)
        _record(rig, "S", i, start, start=start, exec_host=host)
        _record(rig, "E", i, start + 2, end=start + 2, Exit_status=0)
    found = [line for line in judge(rig, jobs) if line.startswith("offline")]
    assert found == [f"offline: job 1 started on node01 at {t + 15}, offline from {t + 10}",
                     f"offline: job 3 started on node01 at {t + 60}, offline from {t + 50}"], found


def test_the_judge_sees_a_queue_limit_broken(tmp_path):
    """Two of a user's jobs at once in queue short (its max_running_per_user is 1), unless
    a qrun forced one; a job started from short while qstop had it stopped."""
    rig = Rig(tmp_path)
    t = 1_800_000_000
    rig.stopped_short = [[t + 100, t + 120]]
    rig.jobs = {str(i): ask(1, 0) for i in range(1, 7)}
    rig.jobs["5"]["forced"] = True
    jobs = {i: Job(id=i, state=COMPLETED) for i in range(1, 7)}
    for i, start, end, queue, user in ((1, t, t + 50, "short", "alice"), (2, t + 10, t + 20, "short", "bob"),
                                       (3, t + 30, t + 40, "short", "alice"),  # (inside 1's run)
                                       (4, t + 45, t + 60, "batch", "alice"),  # (another queue)
                                       (5, t + 48, t + 55, "short", "alice"),  # (forced)
                                       (6, t + 110, t + 115, "short", "bob")):  # (while short was stopped)
        _record(rig, "Q", i, t)
        _record(rig, "S", i, start, start=start, exec_host=f"node0{i % 2 + 1}/{i}", queue=queue, user=user)
        _record(rig, "E", i, end, end=end, Exit_status=0)
    found = [line for line in judge(rig, jobs) if line.startswith("limits")]
    assert found == [f"limits: job 6 started from short at {t + 110}, stopped from {t + 100}",
                     f"limits: alice's jobs 1 ({t}-{t + 50}) and 3 ({t + 30}-{t + 40}) ran at once in short"], found
