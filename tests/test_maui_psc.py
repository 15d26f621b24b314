"""Maui-style and PSC commands over the store, showing the core's own decisions."""
import io
import os
import subprocess
import time

import pytest
from test_commands import submit

from hpcsched.core.jobs import QUEUED
from hpcsched.pbs import maui, psc
from hpcsched.store.journaled import Batch
from hpcsched.store.site import load_site

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(prog, *argv, later=10.0):
    out = io.StringIO()
    status = getattr(maui, prog.upper())(list(argv), out=out, now=time.time() + later)
    return status, out.getvalue()


def server_pass(now=None):
    """What the server does each pass (the journal's `pass` operation)."""
    batch = Batch(load_site())
    with batch.open(write=True):
        return batch.do("pass", now)


@pytest.fixture
def busy(rig):
    submit("-N", "big", "-l", "nodes=4:ppn=4,walltime=01:00:00")
    submit("-N", "small", "-l", "nodes=1,walltime=00:30:00")
    submit("-N", "held", "-h", "-l", "walltime=00:10:00")
    plan = server_pass()
    assert [s.job_id for s in plan.started] == [1]
    return rig


def test_showq_sections(busy):
    status, out = run("showq")
    assert status == 0
    lines = out.splitlines()
    assert lines[0].startswith("ACTIVE JOBS") and any(l.split()[:3] == ["1", "alice", "Running"] for l in lines)
    assert "1 Active Job   16 of 16 Processors Active (100.00%)" in out
    assert any(l.split()[:3] == ["2", "alice", "Idle"] for l in lines)
    assert any(l.split()[:3] == ["3", "alice", "Hold"] for l in lines)
    assert lines[-1] == "Total Jobs: 3   Active Jobs: 1   Idle Jobs: 1   Blocked Jobs: 1"


def test_checkjob_says_why_and_when(busy):
    status, out = run("checkjob", "2")
    assert status == 0 and out.startswith("checking job 2\n\nState: Idle\n")
    assert "Creds:  user:alice" in out and "WallTime: 00:00:00 of 00:30:00" in out
    assert "job cannot run: reserved: starts at" in out and "Estimated start:" in out
    assert "unknown while the limit" not in out  # (it waits for nodes alone: the estimate is its start)
    assert "job cannot run: job is held" in run("checkjob", "3")[1]
    assert run("checkjob", "99")[0] == 153
    # -v: its request, and the reservation the pass gives it (on the first node job 1 frees)
    status, out = run("checkjob", "-v", "2")
    assert status == 0 and "\nResources: nodect=1,ncpus=1,nodes=1,walltime=00:30:00\nFeatures: [NONE]\n" in out
    assert "\nReservation '2' (00:5" in out and "Duration: 00:30:00) on node01\n" in out


def test_showres_lists_job_and_admin_reservations(busy, monkeypatch, capsys):
    monkeypatch.setenv("HPCSCHED_USER", "olga")  # operator
    status, out = run("setres", "-n", "maint", "-s", "+02:00:00", "-d", "1:00:00", "count=2")
    assert status == 0 and out == "reservation 'maint' created on 2 nodes (8 tasks)\n"
    status, out = run("showres")
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["ReservationID", "Type", "S"]
    assert any(l.split()[:2] == ["maint", "User"] for l in lines)
    assert any(l.split()[:2] == ["2", "Job"] for l in lines)
    assert lines[-1] == "2 reservations located"
    # named reservations only (a job by its id or full id); an unknown name is one line, status 1
    status, out = run("showres", "2.headnode")
    assert status == 0 and [l.split()[:2] for l in out.splitlines()[2:-2]] == [["2", "Job"]]
    assert out.splitlines()[-1] == "1 reservation located"
    status, out = run("showres", "nosuch", "maint")
    assert status == 1 and out.splitlines()[-1] == "1 reservation located" and "\nmaint " in out
    assert "showres: cannot locate reservation 'nosuch'" in capsys.readouterr().err
    # -n: each reserved node, with the processors the reservation takes on it
    status, out = run("showres", "-n", "maint")
    rows = [l.split()[:4] for l in out.splitlines()[4:-2]]
    assert status == 0 and out.startswith("reservations on ") and len(rows) == 2
    assert all(r[1:] == ["User", "maint", "4"] for r in rows) and out.splitlines()[-1] == "2 nodes reserved"
    status, out = run("showres", "-n", "2")
    assert [l.split()[:4] for l in out.splitlines()[4:-2]] == [["node01", "Job", "2", "1"]]
    assert out.splitlines()[-1] == "1 node reserved"
    status, out = run("releaseres", "maint")
    assert status == 0 and out == "released User reservation 'maint'\n"
    monkeypatch.setenv("HPCSCHED_USER", "alice")
    assert run("setres", "-d", "60", "node01")[0] == 159


@pytest.mark.parametrize("prog", ["showq", "showbf"])
def test_listings_refuse_operands(busy, prog, capsys):
    assert run(prog, "1") == (2, "")
    assert f"{prog}: unexpected argument '1'" in capsys.readouterr().err


def test_setres_refuses_bad_input(busy, monkeypatch, capsys):
    monkeypatch.setenv("HPCSCHED_USER", "olga")
    assert run("setres", "-d", "soon", "count=1")[0] == 2
    assert run("setres", "-d", "60", "count=99")[0] == 1
    assert "99 nodes are not free" in capsys.readouterr().err
    assert run("setres", "-d", "60", "-s", "tomorrowish", "count=1")[0] == 2
    # (each was taken, NaN and all, and showres then died on it)
    for start in ("nan", "inf", "1e308", "-5", "253402300800", "25:00", "12:00_02/30", "12:00_"):
        assert run("setres", "-d", "60", "-s", start, "count=1")[0] == 2
        assert f"setres: bad time {start!r}" in capsys.readouterr().err
    assert run("setres", "-d", "60", "-e", "+1:00", "count=1")[0] == 2  # (-d or -e, not both)
    assert run("setres", "-s", "+1:00:00", "-e", "+0:30:00", "count=1")[0] == 2  # (an end before its start)
    assert "duration must be positive" in capsys.readouterr().err
    assert run("setres", "-d", "99999999:00:00", "count=1")[0] == 2  # (stored, 11,000 years)
    assert "a reservation lasts at most 2147483647 s" in capsys.readouterr().err
    assert run("setres", "-d", "60", "-L", "count=1")[0] == 2  # (links are a Blue Gene's)
    assert "this machine's links are not reservable" in capsys.readouterr().err


def test_setres_takes_mauis_times_and_an_end(busy, monkeypatch):
    from datetime import datetime, timedelta
    monkeypatch.setenv("HPCSCHED_USER", "olga")
    now = time.time() + 10  # (run's clock)

    def made(name):
        batch = Batch(load_site())
        with batch.open(write=False):
            r = batch.sched.reservations[name]
        return r.start, r.duration
    day = datetime.fromtimestamp(now) + timedelta(days=40)
    at = day.replace(hour=13, minute=30, second=0, microsecond=0)
    assert run("setres", "-n", "a", "-s", f"13:30_{at.month}/{at.day}/{at.year % 100:02d}", "-d", "1:00:00",
               "count=1")[0] == 0
    assert made("a") == (at.timestamp(), 3600.0)
    # a time of day alone is the next one to come; -e sets the end instead of -d
    soon = datetime.fromtimestamp(now).replace(microsecond=0) - timedelta(hours=1)
    assert run("setres", "-n", "b", "-s", f"{soon.hour}:{soon.minute}:{soon.second}", "-e",
               f"+{24 * 3600 + 600}", "count=1")[0] == 0
    start, duration = made("b")
    # (the command reads its own clock a moment after `now`: seconds apart on a loaded machine)
    assert start == (soon + timedelta(days=1)).timestamp()
    assert duration == pytest.approx(now + 24 * 3600 + 600 - start, abs=5)


def test_a_reservation_no_calendar_can_show_is_listed_by_its_seconds(busy):
    # (one an older hpcsched took, or the library was given; showres died in strftime)
    from hpcsched.core.reservations import Reservation
    batch = Batch(load_site())
    with batch.open(write=True):
        batch.do("reservation", reservation=Reservation("far", 1e300, 60.0, count=1).to_dict())
    status, out = run("showres", "far")
    assert status == 0 and out.splitlines()[2].split()[-1] == "%.0f" % 1e300
    with pytest.raises(Exception, match="must be finite"):
        Reservation("never", float("nan"), 60.0, count=1)
    # one with a NaN start, which an older hpcsched journaled, is passed over on load
    with batch.open(write=True):
        last = batch.store.last_record()
        batch.store.append({"op": "reservation", "now": time.time(), "next_id": last["next_id"], "cfg": last["cfg"],
                            "reservation": {**Reservation("old", 0.0, 60.0, count=1).to_dict(), "start": float("nan")}})
    batch = Batch(load_site())
    with batch.open(write=False):
        assert "old" not in batch.sched.reservations and "far" in batch.sched.reservations
    assert any("(reservation) no longer applies" in w for w in batch.store.warnings)


def test_showbf_and_mdiag(busy):
    status, out = run("showbf")
    assert status == 0 and out.startswith("backfill window (user: 'alice'")
    assert "no procs available" in out  # the machine is full
    status, out = run("mdiag", "-p")
    assert status == 0 and "queue_time" in out and out.splitlines()[-1].startswith("Total jobs: 1")


def test_shownids_and_bad_list(busy):
    batch = Batch(load_site())
    with batch.open(write=True):
        batch.do("node", name="node03", state="bad")
    out = io.StringIO()
    assert psc.SHOWNIDS([], out=out) == 0
    lines = out.getvalue().splitlines()
    assert lines[0].split() == ["NID", "NODE", "STATE", "JOB"]
    assert lines[1].split() == ["0", "node01", "busy", "1.headnode"]
    assert lines[3].split()[:3] == ["2", "node03", "bad"]
    assert lines[-1] == "bad nodes: 2"


def test_pbsyod_runs_over_the_jobs_node_ids(busy):
    env = dict(os.environ, PBS_JOBID="1.headnode")
    p = subprocess.run([os.path.join(ROOT, "bin", "pbsyod"), "sh", "-c", "echo $YOD_NIDLIST $YOD_NP"],
                       capture_output=True, text=True, env=env)
    assert p.returncode == 0 and p.stdout == "0..3 16\n"
    env["PBS_JOBID"] = "2"
    p = subprocess.run([os.path.join(ROOT, "bin", "pbsyod"), "true"], capture_output=True, text=True, env=env)
    assert p.returncode == 153 and "is not running" in p.stderr


def test_mdiag_f_shows_usage_and_the_share_tree(rig):
    home = rig / "home"
    text = (home / "config.toml").read_text().replace('policy = "fifo"', 'policy = "gridengine"')
    text += ('\n[usage]\nmetric = "slots"\n[sharetree]\ncompensation_factor = 2\nlevels = ["user"]\n'
             '[sharetree.nodes.Root]\nchildren = ["all"]\n[sharetree.nodes.all]\nname = "default"\nshares = 10\n')
    (home / "config.toml").write_text(text)
    submit("-N", "big", "-l", "nodes=4:ppn=4,walltime=01:00:00")
    submit("-N", "small", "-l", "nodes=1,walltime=00:30:00")
    server_pass(time.time())
    status, out = run("mdiag", "-f", later=3600.0)
    assert status == 0 and out.startswith("fair share (usage: core-hours")
    users = out.split("User")[1].splitlines()
    assert users[1].split()[0] == "alice" and 15.9 < float(users[1].split()[1]) <= 16.1  # 16 cores for an hour
    row = next(l for l in out.splitlines() if l.startswith("/alice"))
    assert row.split()[1:3] == ["10", users[1].split()[1]] and row.split()[-2:] == ["1", "1"]
    status, out = run("mdiag", "-p")
    assert status == 0 and "tickets" in out and "posix_priority" in out
    assert run("mdiag", "-p", "-f")[0] == 2
    from test_commands import stat
    assert "sched_priority = " in stat("-f", "2")[1] and "sched_priority" not in stat("-f", "1")[1]


def test_hpcsched_usage_lists_and_operators_reset_or_set_it(rig, monkeypatch, capsys):
    from hpcsched import cli
    submit("-N", "big", "-l", "nodes=4:ppn=4,walltime=01:00:00")
    server_pass(time.time() - 7200)  # it has run two hours by now (nodes: 4 nodes x 2 h)
    assert cli.main(["usage"]) == 0
    line = capsys.readouterr().out.splitlines()[0].split()
    assert line[0] == "alice" and 7.99 < float(line[1]) < 8.01
    assert cli.main(["usage", "user", "alice", "--reset"]) == 159  # alice is no operator
    monkeypatch.setenv("HPCSCHED_USER", "olga")
    capsys.readouterr()
    assert cli.main(["usage", "user", "alice", "--set", "100"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "set user alice (1 usage records)" and 100.0 <= float(out[1].split()[1]) < 100.01
    assert cli.main(["usage", "group", "--reset"]) == 0
    assert cli.main(["usage", "user", "alice", "--set", "-3"]) == 2
    capsys.readouterr()
    assert cli.main(["usage"]) == 0
    assert float(capsys.readouterr().out.split()[1]) < 0.01  # (reset: only what ran since)


def _estimates(out):
    """showstart's (start, completion) offsets in seconds."""
    rows = [l.split(" in ", 1)[1].split(" on ")[0].strip() for l in out.splitlines() if l.startswith("Estimated")]
    return [(-1 if r.startswith("-") else 1) * sum(int(p) * u for p, u in zip(reversed(r.lstrip("-").split(":")),
                                                                           (1, 60, 3600, 86400))) for r in rows]


def test_showstart_gives_the_plans_start_and_completion(busy):
    started = maui.load()[1].sched.jobs[1].start_time
    now = time.time() + 10
    # job 2 waits for job 1's nodes: its reservation, an hour after job 1 started
    status, out = run("showstart", "2")
    assert status == 0 and out.startswith("job 2 requires 1 proc for 00:30:00\n\nEstimated Rsv based start in ")
    start, end = _estimates(out)
    assert abs(start - (started + 3600 - now)) <= 1 and end - start == 1800
    # a running job: when it started (in the past) and when its walltime runs out
    status, out = run("showstart", "1.headnode")
    start, end = _estimates(out)
    assert status == 0 and "requires 16 procs for 01:00:00" in out
    assert abs(start - (started - now)) <= 1 and end - start == 3600
    # a job not submitted: the whole machine once job 2's reservation has passed; 4 procs
    # for an hour beside job 2
    status, out = run("showstart", "16@1:00:00")
    assert status == 0 and out.startswith("job 16@1:00:00 requires 16 procs for 01:00:00\n")
    assert abs(_estimates(out)[0] - (started + 3600 + 1800 - now)) <= 1
    assert abs(_estimates(run("showstart", "4@3600")[1])[0] - (started + 3600 - now)) <= 1


def test_checknode_shows_a_nodes_state_and_what_holds_it_in_time_order(busy, capsys, monkeypatch):
    # job 1 runs on all four nodes for an hour; job 2 is reserved where it ends; an
    # advance reservation comes two hours on; an operator offlines node02 with a note
    from hpcsched.core.reservations import Reservation
    from hpcsched.pbs import pbsnodes
    batch = Batch(load_site())
    now = time.time()
    with batch.open(write=True):
        batch.do("reservation", now, reservation=Reservation("maint", now + 7200, 3600, nodes=("node01",)).to_dict())
    status, out = run("checknode", "node01", later=0.0)
    lines = out.splitlines()
    assert status == 0 and lines[:6] == ["checking node node01", "", "State:      Busy",
                                         "Configured Resources: PROCS: 4", "Dedicated  Resources: PROCS: 4",
                                         "Features:   [NONE]"]
    held = lines[lines.index("Reservations:") + 1:-1]
    assert [h.split()[:2] for h in held] == [["Job", "'1'(x4)"], ["Job", "'2'(x1)"], ["User", "'maint'(x4)"]]
    assert [h.rsplit(" ", 1)[1] for h in held] == ["(01:00:00)", "(00:30:00)", "(01:00:00)"]
    assert held[2].split()[2:5] == ["02:00:00", "->", "03:00:00"]
    assert lines[-1] == "JobList:  1"
    monkeypatch.setenv("HPCSCHED_USER", "olga")  # (an operator)
    assert pbsnodes.PBSNODES(["-o", "-N", "fan broken", "node02"], out=io.StringIO(), now=now) == 0
    out = run("checknode", "node02")[1]
    assert "State:      Draining\n" in out and "Note:       fan broken\n" in out
    every = run("checknode", "ALL")[1]
    assert [l for l in every.splitlines() if l.startswith("checking node")] == [
        f"checking node node0{i}" for i in range(1, 5)]
    assert run("checknode", "node09") == (1, "") and "checknode: cannot locate node 'node09'" in capsys.readouterr().err
    submit("-t", "0-1", "-l", "nodes=1,walltime=00:10:00")  # (job 4: subjobs 4[0] and 4[1], as showq's)
    monkeypatch.setenv("HPCSCHED_USER", "alice")
    from hpcsched.core.jobs import subjob_id
    assert qdel_all_but_the_array() and [s.job_id for s in server_pass().started] == [subjob_id(4, 0), subjob_id(4, 1)]
    lists = [l for l in run("checknode", "ALL")[1].splitlines() if l.startswith("JobList:")]
    assert sorted(lists) == ["JobList:  4[0]", "JobList:  4[1]", "JobList:  [NONE]", "JobList:  [NONE]"]
    assert run("checknode")[0] == 2 and run("checknode", "node01", "node02")[0] == 2


def qdel_all_but_the_array() -> bool:
    """Delete jobs 1 to 3 (the busy rig's), ended at once as the server would end them."""
    from hpcsched.pbs import qctl
    assert qctl.QDEL(["1", "2", "3"], out=io.StringIO()) == 0
    batch = Batch(load_site())
    with batch.open(write=True):
        batch.do("ended", id=1, exit_status=271)
    return True


def test_showstart_refuses_what_it_cannot_estimate(busy, capsys):
    assert run("showstart", "3") == (1, "")
    assert "showstart: cannot estimate job 3's start: it is held" in capsys.readouterr().err
    assert run("showstart", "99")[0] == 153 and run("showstart", "x.y.z")[0] == 153
    for bad in ("0@60", "4@", "4@soon", "@60", "4@-5", "4@inf", "4@0"):
        assert run("showstart", bad) == (2, "")
        assert f"bad job shape {bad!r}" in capsys.readouterr().err
    assert run("showstart")[0] == 2 and run("showstart", "1", "2")[0] == 2


def _rows(out, first):
    """The job rows of showq's section headed `first`: each row's columns."""
    lines = out.splitlines()
    k = next(i for i, l in enumerate(lines) if l.startswith(first)) + 3
    rows = []
    while lines[k]:
        rows.append(lines[k].split())
        k += 1
    return rows


def test_showq_lists_jobs_in_the_passs_order_and_filters_them(busy, monkeypatch, capsys):
    monkeypatch.setenv("HPCSCHED_USER", "bob")
    submit("-p", "100", "-l", "walltime=00:20:00")  # 4: bob's, first in the FIFO's priority order
    monkeypatch.setenv("HPCSCHED_USER", "alice")
    submit("-l", "walltime=00:20:00")  # 5
    status, out = run("showq")
    assert status == 0 and [r[0] for r in _rows(out, "IDLE JOBS")] == ["4", "2", "5"]
    assert [r[:3] for r in _rows(out, "BLOCKED JOBS")] == [["3", "alice", "Hold"]]
    status, out = run("showq", "-u", "bob")
    assert status == 0 and out.endswith("Total Jobs: 1   Active Jobs: 0   Idle Jobs: 1   Blocked Jobs: 0\n")
    assert [r[0] for r in _rows(run("showq", "-w", "user=alice")[1], "IDLE JOBS")] == ["2", "5"]
    assert "Total Jobs: 0 " in run("showq", "-w", "class=nosuch")[1]
    # -i: the priority order, the head job (EASY's reservation) starred
    status, out = run("showq", "-i")
    rows = _rows(out, "eligible jobs")
    assert status == 0 and [r[0] for r in rows] == ["4*", "2", "5"]
    assert out.endswith("3 eligible jobs\n\nTotal jobs: 3\n")
    # -r: running jobs, with their first node; -b: blocked jobs only
    rows = _rows(run("showq", "-r")[1], "ACTIVE JOBS")
    assert [r[:2] + r[4:7] for r in rows] == [["1", "R", "-", "node01", "16"]]
    status, out = run("showq", "-b")
    assert "IDLE" not in out and "ACTIVE" not in out and [r[0] for r in _rows(out, "BLOCKED JOBS")] == ["3"]
    # -c: finished jobs that ran, with exit status and CPU efficiency
    started = maui.load()[1].sched.jobs[1].start_time
    with Batch.of(load_site()).open() as batch:
        batch.do("ended", started + 600, id=1, exit_status=3, cpu_time=4800.0)
    rows = _rows(run("showq", "-c")[1], "completed jobs")
    assert [r[:4] + r[7:10] for r in rows] == [["1", "C", "3", "50.00", "node01", "16", "00:10:00"]]
    for bad in (["-w", "qos=x"], ["-w", "user="], ["-u", ""], ["-r", "-c"]):
        assert run("showq", *bad) == (2, "")
    assert "give one of -r, -i, -b, -c" in capsys.readouterr().err


def test_a_command_the_server_answers_leaves_its_scheduler_as_its_store_has_it(rig):
    # (checkjob, showbf and showres ran their pass on the server's own scheduler: a job
    # that pass started was RUNNING there, never launched, and the server's pass passed it by)
    submit("-l", "nodes=1,walltime=00:10:00")
    batch = Batch(load_site())
    batch.keep()  # as the server keeps it: the commands it answers share it
    try:
        with batch.open(write=False):
            pass
        for argv in (["checkjob", "1"], ["showq"], ["showq", "-i"], ["showbf"], ["showres"], ["showstart", "1"],
                     ["showstart", "4@60"]):
            assert run(*argv)[0] == 0
        assert "job can start now: it starts at the next scheduling pass" in run("checkjob", "1")[1]
        site = load_site()
        (site.home / "config.toml").write_text("scheduling = false\n" + (site.home / "config.toml").read_text())
        assert "job can start now, but scheduling is stopped" in run("checkjob", "1")[1]
        assert batch.sched.jobs[1].state == QUEUED and batch.sched.last_pass is None
        with batch.open():
            assert [s.job_id for s in batch.do("pass", time.time()).started] == [1]
    finally:
        batch.release()
