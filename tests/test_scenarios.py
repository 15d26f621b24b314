"""Live-server scenarios (tests/scenarios.py): commands, server kills and qterms at random
moments, then the invariants; and the judge itself, shown each kind of break."""
import time

import pytest

from hpcsched.core.jobs import COMPLETED, QUEUED, Job
from scenarios import Rig, ask, judge, run


@pytest.mark.parametrize("seed", [3, 11])
def test_a_scenario_keeps_every_invariant(tmp_path, seed):
    assert run(tmp_path, seed, steps=40) == []


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
