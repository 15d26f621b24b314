"""Cobalt's cqadm: queue and job administration, each a translation onto qmgr's overlay
and the PBS commands' store operations."""
import io

import pytest

from hpcsched.core.jobs import EXITING, HELD, QUEUED, RUNNING, Hold
from hpcsched.pbs import cqadm, qsub
from hpcsched.store.journaled import Batch
from hpcsched.store.site import load_site

NOW = 1_700_000_000.0


@pytest.fixture
def site(rig, monkeypatch):
    """The rig (alice's jobs), cqadm run as root (a manager) unless a test says otherwise."""
    monkeypatch.setenv("HPCSCHED_USER", "root")
    return rig


def run(*argv):
    out = io.StringIO()
    status = cqadm.CQADM(list(argv), out=out, now=NOW)
    return status, out.getvalue()


def submit(monkeypatch, *args):
    monkeypatch.setenv("HPCSCHED_USER", "alice")
    jid = qsub.submit_parsed([("l", "nodes=1"), ("l", "walltime=600"), *args], ["--", "/bin/true"], cwd="/tmp",
                             now=NOW)[0]
    monkeypatch.setenv("HPCSCHED_USER", "root")
    return int(jid.split(".")[0])


def test_getq_lists_the_queues_named_and_refuses_an_unknown_one_and_counts_stay_in_range(site, capsys):
    assert run("--getq", "batch")[0] == 0
    assert run("--getq", "nosuchq") == (1, "")
    assert "queue nosuchq not found" in capsys.readouterr().err
    assert run("--setq", "maxrunning=" + "9" * 23, "batch")[0] == 1
    assert "is more than 2147483647" in capsys.readouterr().err


def sched():
    batch = Batch(load_site())
    with batch.open(write=False):
        return batch.sched


def test_queues_are_added_stopped_set_started_and_listed(site, capsys):
    assert run("--addq", "short", "long") == (0, "Added Queues  \n==============\nshort         \nlong          \n")
    q = sched().router.queues
    assert not q["short"].started and q["short"].enabled  # (Cobalt's new queue is stopped)
    assert run("--setq", "maxtime=30 mintime=00:05:00 maxrunning=2 maxtotaljobs=4 maxqueued=9 users=alice:bob "
                         "priority=3", "short")[0] == 0
    assert run("--startq", "short")[0] == 0 and run("--drainq", "long")[0] == 0
    q = sched().router.queues["short"]
    assert (q.max_walltime, q.min_walltime, q.max_running_per_user, q.max_running, q.max_queued_per_user,
            q.acl_users, q.priority, q.started) == (1800, 300, 2, 4, 9, frozenset({"alice", "bob"}), 3, True)
    status, out = run("--getq")
    rows = [line.split() for line in out.splitlines()]
    assert rows[0][:3] == ["Queue", "Users", "Groups"] and [r[0] for r in rows[2:]] == ["batch", "long", "short"]
    assert rows[4][:8] == ["short", "alice:bob", "*", "00:05:00", "00:30:00", "2", "4", "9"]
    assert [r[12] for r in rows[2:]] == ["running", "draining", "running"] and rows[4][15] == "3"
    assert run("--unsetq", "users maxtime", "short")[0] == 0
    q = sched().router.queues["short"]
    assert q.acl_users is None and q.max_walltime is None and q.max_running_per_user == 2
    assert run("--stopq", "short")[0] == 0 and run("--killq", "long")[0] == 0
    q = sched().router.queues
    assert (q["short"].enabled, q["short"].started) == (True, False)
    assert (q["long"].enabled, q["long"].started, q["long"].draining) == (False, False, False)
    assert run("--setq", "state=running", "long")[0] == 0 and cqadm.queue_state(sched().router.queues["long"]) == "running"
    assert run("--setq", "totalnodes=3 maxusernodes=2", "short")[0] == 0
    q = sched().router.queues["short"]
    assert (q.max_running_nodes, q.max_running_nodes_per_user) == (3, 2)
    row = next(line.split() for line in run("--getq")[1].splitlines() if line.startswith("short "))
    assert (row[8], row[10]) == ("2", "3")  # MaxUserNodes, TotalNodes


def test_queue_changes_refused_say_why_and_change_nothing(site, monkeypatch, capsys):
    run("--addq", "short")
    capsys.readouterr()
    before = (site / "home" / "qmgr.json").read_text()
    for argv, said in ((["--addq", "short"], "queue already exists: short"),
                       (["--setq", "maxnodehours=3", "short"], "maxnodehours is not supported here"),
                       (["--setq", "state=asleep", "short"], "state is one of running, stopped, draining, dead"),
                       (["--setq", "maxtime=x", "short"], "invalid maxtime specification: 'x'"),
                       (["--setq", "maxrunning", "short"], "'maxrunning': --setq takes prop=value"),
                       (["--setq", "colour=red", "short"], "colour is not a queue property"),
                       (["--setq", "maxtime=3", "nosuch"], "nosuch: Unknown queue"),
                       (["--policy", "high_prio", "short"], "--policy is not supported here"),
                       (["--savestate", "/tmp/x"], "--savestate is not supported here"),
                       (["--getq", "--kill"], "Option combinations not allowed with: getq, kill option(s)"),
                       ([], "At least one option must be specified")):
        assert run(*argv)[0] == 1, argv
        assert said in capsys.readouterr().err, argv
    assert (site / "home" / "qmgr.json").read_text() == before
    monkeypatch.setenv("HPCSCHED_USER", "olga")  # (an operator, not a manager)
    assert run("--stopq", "short")[0] == 1 and "Permission denied: olga is not a manager" in capsys.readouterr().err
    assert run("--bogus")[0] == 2 and "no such option: --bogus" in capsys.readouterr().err


def test_a_queue_with_jobs_is_not_deleted(site, monkeypatch, capsys):
    run("--addq", "short", "spare")
    run("--startq", "short")
    submit(monkeypatch, ("q", "short"))
    status, out = run("-f", "--delq", "short", "spare")
    assert status == 1 and out == "Deleted Queues  \n================\nspare           \n"
    assert capsys.readouterr().err == "short: Queue is not empty\n"  # (qmgr's refusal, named as cqadm names it)
    assert set(sched().router.queues) == {"batch", "short"}


def test_holds_moves_and_walltimes_are_an_operators(site, monkeypatch, capsys):
    run("--addq", "long")
    run("--startq", "long")
    a, b = submit(monkeypatch, ("h", "")), submit(monkeypatch)
    assert run("--admin-hold", str(b))[0] == 0
    jobs = sched().jobs
    assert jobs[b].holds == {Hold.OPERATOR} and jobs[b].state == HELD
    assert run("--user-release", "--queue=long", "--time=00:20:00", str(a))[0] == 0
    jobs = sched().jobs
    assert (jobs[a].state, jobs[a].queue, jobs[a].walltime) == (QUEUED, "long", 1200)
    assert run("--user-release", str(b))[0] == 1 and f"job {b}: it has no user hold" in capsys.readouterr().err
    run("--drainq", "long")
    # one change, checked first: refused, the job keeps its hold, queue and walltime
    assert run("--admin-release", "--queue=long", "--time=5", str(b))[0] == 1
    assert "queue long is draining" in capsys.readouterr().err
    jobs = sched().jobs
    assert (jobs[b].holds, jobs[b].queue, jobs[b].walltime) == ({Hold.OPERATOR}, "batch", 600)
    assert run("--admin-release", str(b), "999")[0] == 1 and "job 999 not found" in capsys.readouterr().err
    assert sched().jobs[b].state == QUEUED  # (the other job went on)
    monkeypatch.setenv("HPCSCHED_USER", "bob")
    assert run("--admin-hold", str(b))[0] == 1
    assert "Permission denied: bob is not an operator or a manager" in capsys.readouterr().err
    monkeypatch.setenv("HPCSCHED_USER", "olga")
    assert run("--admin-hold", str(b))[0] == 0 and sched().jobs[b].state == HELD


def test_admin_release_lifts_a_system_hold(site, monkeypatch):
    a = submit(monkeypatch)
    batch = Batch(load_site())
    with batch.open(write=True):
        batch.do("hold", id=a, kind=Hold.SYSTEM.value)  # (as a prologue's exit 2 holds it)
    assert run("--release", str(a))[0] == 0 and sched().jobs[a].state == QUEUED


def test_run_starts_a_job_where_told_and_kill_deletes_it(site, monkeypatch, capsys):
    a, b = submit(monkeypatch, ("h", "")), submit(monkeypatch, ("h", ""))
    assert run("--run=node09", str(a))[0] == 1 and f"job {a}: Unknown node node09" in capsys.readouterr().err
    assert run("--run=node03", str(a))[0] == 1 and "held, not queued" in capsys.readouterr().err
    run("--user-release", str(a), str(b))
    assert run("--run=node03", str(a))[0] == 0
    job = sched().jobs[a]
    assert job.state == RUNNING and job.nodes == ("node03",)
    assert run("--run=node02", "--kill", str(b))[0] == 1
    assert "Option combinations not allowed with: run, kill option(s)" in capsys.readouterr().err
    assert run("--kill", str(a), str(b))[0] == 0
    jobs = sched().jobs
    assert jobs[a].state == EXITING and jobs[b].state.value == "deleted"


def test_run_takes_a_crays_nid_ranges(site, monkeypatch, capsys):
    from hpcsched.store.site import init_site
    cray = site / "cray"  # (a site of its own: nids name a Cray's nodes)
    init_site(cray, nodes=1, cores=1)
    monkeypatch.setenv("HPCSCHED_HOME", str(cray))
    text = (cray / "config.toml").read_text()
    (cray / "config.toml").write_text(text[:text.index("[[nodes]]")] + '[machine]\nkind = "cray"\n'
                                      'torus = [2, 2, 2]\nper_router = 1\nnodes = [{count = 8, cores = 4}]\n')
    a, b = submit(monkeypatch), submit(monkeypatch)
    assert run("--run=8-9", str(a))[0] == 1 and "no compute node has nid 8" in capsys.readouterr().err
    assert run("--run=5", str(a)) == (0, "") and run("--run=6-7:3", str(b)) == (0, "")
    assert sched().jobs[a].nodes == ("nid00005",) and sched().jobs[b].nodes == ("nid00003",)


def test_preempt_sends_a_preemptable_running_job_back_to_its_queue(site, monkeypatch, capsys):
    from hpcsched.pbs import cobalt
    monkeypatch.setenv("HPCSCHED_USER", "alice")
    (site / "job.sh").write_text("#!/bin/sh\n")
    (site / "job.sh").chmod(0o755)
    monkeypatch.chdir(site)
    for extra in (["--preemptable"], []):
        assert cobalt.QSUB(["-n", "1", "-t", "5", *extra, "job.sh"], out=io.StringIO(), now=NOW) == 0
    monkeypatch.setenv("HPCSCHED_USER", "root")
    batch = Batch(load_site())
    with batch.open(write=True):
        batch.do("pass", NOW)
    assert run("--preempt", "1", "2")[0] == 1 and "job 2: it is not preemptable" in capsys.readouterr().err
    assert sched().jobs[1].extra["rerun"] is True and "rerun" not in sched().jobs[2].extra
    assert run("-f", "--preempt", "2")[0] == 0 and sched().jobs[2].extra["rerun"] is True
    assert run("--preempt", "1")[0] == 1 and "it is being preempted already" in capsys.readouterr().err
    monkeypatch.setenv("HPCSCHED_USER", "alice")
    assert cobalt.QSUB(["-n", "1", "-t", "5", "--preemptable", "job.sh"], out=io.StringIO(), now=NOW) == 0
    monkeypatch.setenv("HPCSCHED_USER", "root")
    assert run("--preempt", "3")[0] == 1 and "it is queued: only a running job is preempted" in capsys.readouterr().err


def test_setjobid_numbers_the_next_job_and_never_goes_back(site, monkeypatch, capsys):
    assert run("-j", "1000")[0] == 0 and submit(monkeypatch) == 1000
    assert run("--setjobid=5")[0] == 1 and "is below the next id, 1001" in capsys.readouterr().err
    assert run("-j", "x")[0] == 1 and "'x' is not a whole number" in capsys.readouterr().err


def test_a_queue_name_or_a_number_it_cannot_take_is_one_line(site, capsys):
    """`@` names a server and `[` an array in every command: qmgr (and so cqadm) creates no
    queue named so; a digit of another script is no number."""
    from hpcsched.pbs import qmgr
    for name in ("#q", "é", "-", "q[1]", "batch@x"):
        assert run("--addq", "--", name)[0] == 1
        assert capsys.readouterr().err == f"{name}: Illegal queue name: a letter, then letters, digits, '_', '-' or '.'\n"
    assert qmgr.QMGR(["-c", "create queue x@y"], out=io.StringIO()) == 2
    assert "Illegal queue name" in capsys.readouterr().err
    assert run("--addq", "prod-short", "a.b_c")[0] == 0 and {"prod-short", "a.b_c"} <= set(sched().router.queues)
    for argv in (["-j", "²"], ["--setq", "maxrunning=٣", "batch"]):
        assert run(*argv)[0] == 1 and "is not a whole number" in capsys.readouterr().err
