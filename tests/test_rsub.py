"""OpenPBS advance reservations: pbs_rsub, pbs_rstat, pbs_rdel, and the queue each one makes."""
import io
import math
import random
import time
from datetime import datetime, timedelta, timezone
from datetime import time as dtime

import pytest
from helpers import job, scheduler
from test_commands import full, submit

from hpcsched.core.jobs import DELETED, EXITING, QUEUED
from hpcsched.core.reservations import Reservation
from hpcsched.core.timefmt import WEEKDAYS
from hpcsched.pbs import maui, qmgr, rsub
from hpcsched.pbs.errors import CommandError
from hpcsched.store.journaled import Batch
from hpcsched.store.site import load_site


def run(prog, *argv, now=None):
    out = io.StringIO()
    status = getattr(rsub, prog.upper())(list(argv), out=out, now=time.time() if now is None else now)
    return status, out.getvalue()


def stored():
    batch = Batch(load_site())
    with batch.open(write=False):
        return batch.sched


def server_pass(now):
    batch = Batch(load_site())
    with batch.open(write=True):
        plan = batch.do("pass", now)
        from hpcsched.pbs import accounting
        accounting.core_deletions(batch, now)
        return plan


def test_a_reservation_takes_the_next_job_number_and_makes_its_queue(rig, capsys):
    submit("-l", "nodes=1,walltime=10:00")  # job 1
    at = datetime.now().replace(second=0, microsecond=0) + timedelta(hours=2)
    status, out = run("pbs_rsub", "-R", at.strftime("%Y%m%d%H%M"), "-D", "1:00:00", "-l", "select=2:ncpus=4",
                      "-N", "demo")
    assert (status, out) == (0, "R2.headnode CONFIRMED\n")
    res = stored().reservations["R2"]
    assert (res.start, res.duration, res.queue, res.owner, res.users) == (at.timestamp(), 3600.0, "R2", "alice",
                                                                          frozenset({"alice"}))
    assert len(res.nodes) == 2 and res.own_queue and res.title == "demo"
    assert submit("-q", "R2", "-l", "walltime=30:00") == "3.headnode"  # (the job ids go on after it)
    assert full("3")["queue"] == "R2"
    # its jobs run inside it alone: not before it starts, though nodes are free now
    sched = stored()
    plan = sched.iterate(time.time())
    assert 3 not in {s.job_id for s in plan.started} and plan.reserved[3][0] == at.timestamp()
    # a job longer than the reservation can never run in it: refused at once
    with pytest.raises(CommandError, match="exceeds queue R2 max_walltime"):
        submit("-q", "R2", "-l", "walltime=2:00:00")
    # a user it does not authorize may not submit to it
    import os
    os.environ["HPCSCHED_USER"] = "bob"
    try:
        with pytest.raises(CommandError, match="not allowed in queue R2"):
            submit("-q", "R2", "-l", "walltime=10:00")
    finally:
        os.environ["HPCSCHED_USER"] = "alice"


def test_a_job_runs_inside_its_reservation_and_goes_when_it_ends(rig):
    now = time.time()
    assert run("pbs_rsub", "-D", "600", "-l", "select=1:ncpus=4", now=now)[0] == 0
    submit("-q", "R1", "-l", "walltime=5:00")  # job 2: runs in it
    submit("-q", "R1", "-l", "nodes=2,walltime=5:00")  # job 3: needs more than it holds
    submit("-l", "nodes=4,walltime=5:00")  # job 4: the whole machine, less the reserved node
    plan = server_pass(now + 1)
    assert [s.job_id for s in plan.started] == [2]
    node = stored().reservations["R1"].nodes[0]
    assert stored().jobs[2].nodes == (node,)
    assert stored().jobs[4].state == QUEUED
    # the reservation ends: its queue goes, a running job is asked to stop, a waiting one is deleted
    server_pass(now + 601)
    sched = stored()
    assert "R1" not in sched.reservations and "R1" not in sched.router.queues
    assert sched.jobs[2].state == EXITING and sched.jobs[3].state == DELETED
    assert sched.jobs[3].comment == "Job deleted: reservation R1 ended"
    records = "".join(p.read_text() for p in (rig / "home" / "accounting").iterdir())
    assert ";D;3.headnode;" in records
    with pytest.raises(CommandError, match="Unknown queue"):
        submit("-q", "R1", "-l", "walltime=5:00")


def test_its_nodes_are_its_queues_alone_even_for_the_users_it_authorizes(rig):
    """Its Authorized_Users may submit to its queue; their jobs elsewhere may not use its
    nodes (OpenPBS: a reservation's resources serve its queue's jobs alone)."""
    now = time.time()
    assert run("pbs_rsub", "-R", time.strftime("%H%M.%S", time.localtime(now + 60)), "-D", "600",
               "-l", "select=1:ncpus=4", now=now)[0] == 0
    assert stored().reservations["R1"].users == frozenset({"alice"})
    submit("-l", "nodes=4,walltime=5:00")  # job 2: alice's, but it would run into R1 on its node
    submit("-l", "nodes=3,walltime=5:00")  # job 3: the other nodes
    plan = server_pass(now + 1)
    assert [s.job_id for s in plan.started] == [3]
    assert stored().reservations["R1"].nodes[0] not in stored().jobs[3].nodes


def test_pbs_rdel_deletes_it_its_queue_and_jobs_for_its_owner_or_an_operator(rig, monkeypatch, capsys):
    assert run("pbs_rsub", "-R", "2359", "-D", "60", "-l", "nodes=1")[0] == 0
    submit("-q", "R1", "-l", "walltime=1:00")
    monkeypatch.setenv("HPCSCHED_USER", "bob")
    assert run("pbs_rdel", "R1.headnode")[0] == 159
    assert "Unauthorized Request" in capsys.readouterr().err
    monkeypatch.setenv("HPCSCHED_USER", "olga")  # an operator
    assert run("pbs_rdel", "R1.headnode", "R9")[0] == 236
    assert "Unknown Reservation Id R9" in capsys.readouterr().err
    sched = stored()
    assert not sched.reservations and "R1" not in sched.router.queues and sched.jobs[2].state == DELETED
    assert run("pbs_rstat")[1] == ""


def test_pbs_rstat_lists_briefly_shortly_and_fully(rig):
    now = time.time()
    assert run("pbs_rsub", "-D", "1:00:00", "-l", "select=1:ncpus=2", "-U", "alice,bob@host", now=now)[0] == 0
    assert run("pbs_rsub", "-R", "2359", "-D", "60", "-r", "FREQ=DAILY;COUNT=3", "-l", "nodes=1", now=now)[0] == 0
    status, out = run("pbs_rstat", now=now + 5)
    lines = out.splitlines()
    assert status == 0 and lines[0].split() == ["Resv", "ID", "Queue", "User", "State", "Start", "/", "Duration",
                                                 "/", "End"]
    assert lines[2].split()[:4] == ["R1.headnod", "R1", "alice@he", "RN"]  # (OpenPBS's widths cut them)
    assert " / 3600 / " in lines[2] and "Today" in lines[2]
    assert lines[3].split()[:4] == ["S2.headnod", "S2", "alice@he", "CO"]
    assert run("pbs_rstat", "-B", now=now)[1] == "Resv ID: R1.headnode\nResv ID: S2.headnode\n"
    status, out = run("pbs_rstat", "-f", "S2", now=now)
    attrs = dict(line.split(" = ", 1) for line in out.splitlines()[1:] if " = " in line)
    assert out.startswith("Resv ID: S2.headnode\n")
    assert attrs["reserve_rrule"] == "FREQ=DAILY;COUNT=3" and attrs["reserve_count"] == "3"
    assert attrs["reserve_state"] == "RESV_CONFIRMED" and attrs["reserve_duration"] == "60"
    assert attrs["Resource_List.nodect"] == "1" and attrs["resv_nodes"].endswith(":ncpus=4)")
    attrs = dict(line.split(" = ", 1) for line in run("pbs_rstat", "-f", "R1")[1].splitlines()[1:] if " = " in line)
    assert attrs["Authorized_Users"] == "alice,bob" and attrs["reserve_state"] == "RESV_RUNNING"
    assert run("pbs_rstat", "R7")[0] == 236


def test_a_standing_reservation_repeats_then_ends(rig):
    now = time.time()
    assert run("pbs_rsub", "-D", "60", "-r", "FREQ=HOURLY;INTERVAL=2;COUNT=2", "-l", "nodes=1", now=now)[0] == 0
    res = stored().reservations["S1"]
    assert res.period == 7200 and [s for s, _ in res.occurrences(now - 1, now + 10 ** 6)] == \
        [res.start, res.start + 7200]
    assert not res.expired(res.start + 7200 + 59) and res.expired(res.start + 7200 + 60)


@pytest.mark.parametrize("argv,status,says", [
    (["-l", "nodes=1"], 2, "give two of -R"),
    (["-D", "60"], 2, "give the resources to reserve"),
    (["-D", "soon", "-l", "nodes=1"], 2, "illegal -D value"),
    (["-R", "25:00", "-D", "60", "-l", "nodes=1"], 2, "illegal -R value"),
    (["-R", "202001010000", "-D", "60", "-l", "nodes=1"], 238, "Bad time specification"),
    (["-D", "60", "-l", "nodes=9"], 196, "not confirmed"),
    (["-D", "60", "-l", "select=1:ncpus=5"], 196, "not confirmed"),
    (["-D", "60", "-l", "ncpus=5"], 196, "not confirmed"),  # (one chunk: no node has 5)
    (["-D", "60", "-l", "nodes=1", "-r", "FREQ=DAILY;BYMONTHDAY=1"], 2, "BYMONTHDAY is not taken"),
    (["-D", "60", "-l", "nodes=1", "-r", "FREQ=HOURLY;BYDAY=MO"], 2, "BYDAY and BYHOUR with DAILY or WEEKLY"),
    (["-D", "60", "-l", "nodes=1", "-r", "FREQ=WEEKLY;BYDAY=1MO"], 2, "illegal -r value"),
    (["-D", "60", "-l", "nodes=1", "-r", "FREQ=DAILY;BYHOUR=24"], 2, "illegal -r value"),
    (["-D", "2:00:00", "-l", "nodes=1", "-r", "FREQ=DAILY;BYHOUR=9,10"], 238, "occurrences overlap"),
    (["-D", "2:00:00", "-l", "nodes=1", "-r", "FREQ=HOURLY"], 238, "occurrences overlap"),
    (["-D", "60", "-l", "nodes=1", "-W", "qmove=5"], 2, "illegal -W value"),
    (["-D", "60", "--hosts"], 2, "missing host"),
    (["-D", "60", "--hosts", "node09"], 196, "Host with resources not found: node09"),
    (["-D", "60", "-l", "nodes=1", "--hosts", "node01"], 2, "can't use -l with --hosts"),
])
def test_pbs_rsub_refuses_bad_requests_in_one_line(rig, capsys, argv, status, says):
    assert run("pbs_rsub", *argv)[0] == status
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err
    assert not stored().reservations


def test_hosts_named_are_the_nodes_reserved(rig):
    assert run("pbs_rsub", "-D", "60", "--hosts", "node03", "node04")[0] == 0
    assert stored().reservations["R1"].nodes == ("node03", "node04")
    assert run("pbs_rsub", "-D", "60", "-l", "ncpus=4")[0] == 0  # (a job-wide count: one chunk, one node)
    assert len(stored().reservations["R2"].nodes) == 1


def test_resv_enable_false_leaves_reservations_to_operators(rig, monkeypatch, capsys):
    monkeypatch.setenv("HPCSCHED_USER", "root")
    out = io.StringIO()
    assert qmgr.QMGR(["-c", "set server resv_enable = False"], out=out) == 0
    monkeypatch.setenv("HPCSCHED_USER", "alice")
    assert run("pbs_rsub", "-D", "60", "-l", "nodes=1")[0] == 159
    assert "reservations are not enabled" in capsys.readouterr().err
    monkeypatch.setenv("HPCSCHED_USER", "olga")
    assert run("pbs_rsub", "-D", "60", "-l", "nodes=1")[0] == 0


def _configure(rig, text):
    path = rig / "home" / "config.toml"
    path.write_text(text + path.read_text())


def test_a_users_reservations_keep_to_the_sites_limits_and_operators_to_none(rig, monkeypatch, capsys):
    _configure(rig, 'resv_max_duration = "2:00:00"\nresv_max_nodes = 2\nresv_max_per_user = 2\n')
    assert run("pbs_rsub", "-D", "8760:00:00", "-l", "nodes=1")[0] == 188
    assert "past resv_max_duration (02:00:00)" in capsys.readouterr().err
    assert run("pbs_rsub", "-D", "1:00:00", "-l", "nodes=3")[0] == 188
    assert "3 nodes is past resv_max_nodes (2)" in capsys.readouterr().err
    assert run("pbs_rsub", "-D", "1:00:00", "--hosts", "node01", "node02", "node03")[0] == 188
    assert run("pbs_rsub", "-D", "1:00:00", "-l", "nodes=2")[0] == 0
    assert run("pbs_rsub", "-D", "2:00:00", "-l", "nodes=1")[0] == 0
    assert run("pbs_rsub", "-D", "1:00", "-l", "nodes=1")[0] == 188
    assert "alice holds 2 reservations (resv_max_per_user 2)" in capsys.readouterr().err
    assert run("pbs_ralter", "-D", "3:00:00", "R1")[0] == 188  # (nor grown past them)
    assert run("pbs_ralter", "-D", "2:00:00", "R1")[0] == 0
    assert len(stored().reservations) == 2
    monkeypatch.setenv("HPCSCHED_USER", "olga")
    assert run("pbs_rsub", "-D", "8760:00:00", "-l", "nodes=1")[0] == 0


def test_acl_resv_users_names_who_may_reserve(rig, monkeypatch, capsys):
    _configure(rig, 'acl_resv_users = ["bob"]\n')
    assert run("pbs_rsub", "-D", "60", "-l", "nodes=1")[0] == 159
    assert "alice is not in acl_resv_users" in capsys.readouterr().err
    monkeypatch.setenv("HPCSCHED_USER", "bob")
    assert run("pbs_rsub", "-D", "60", "-l", "nodes=1")[0] == 0


@pytest.mark.parametrize("line", ['resv_max_duration = "soon"', "resv_max_duration = 0", "resv_max_nodes = 0",
                                  'acl_resv_users = "bob"', "resv_max_per_user = true"])
def test_a_bad_reservation_limit_is_a_config_error(rig, line):
    from hpcsched.core.errors import ConfigError
    _configure(rig, line + "\n")
    with pytest.raises(ConfigError, match=line.split()[0]):
        load_site()


def test_qmgr_leaves_a_reservations_queue_alone(rig, monkeypatch, capsys):
    assert run("pbs_rsub", "-D", "60", "-l", "nodes=1")[0] == 0
    monkeypatch.setenv("HPCSCHED_USER", "root")
    for command in ("delete queue R1", "set queue R1 max_running = 1", "create queue R1"):
        assert qmgr.QMGR(["-c", command], out=io.StringIO()) != 0
    out = io.StringIO()
    assert qmgr.QMGR(["-c", "print server"], out=out) == 0 and "R1" not in out.getvalue()


def test_maui_sees_them_too(rig):
    assert run("pbs_rsub", "-D", "600", "-l", "nodes=1")[0] == 0
    out = io.StringIO()
    assert maui.SHOWRES([], out=out) == 0 and out.getvalue().splitlines()[2].split()[:3] == ["R1", "User", "A"]


def test_the_core_restores_its_queue_and_deletes_only_its_jobs():
    sched = scheduler(4)
    res = sched.add_reservation(Reservation("R1", 100.0, 50.0, count=1, users={"u"}, queue="R1", own_queue=True), 0.0)
    assert sched.next_id == 2 and "R1" in sched.router.queues
    inside = sched.submit(job(queue="R1", wall=10.0), 0.0)
    outside = sched.submit(job(wall=10.0), 0.0)
    again = scheduler(4).restore(sched.to_dict())
    assert again.router.queues["R1"].acl_users == {"u"} and again.reservations["R1"].nodes == res.nodes
    again.remove_reservation("R1", 10.0)
    assert again.jobs[inside.id].state == DELETED and again.jobs[outside.id].state == QUEUED
    assert [j.id for j in again.deleted] == [inside.id]
    with pytest.raises(Exception, match="queue R1 already exists"):
        sched.add_reservation(Reservation("R9", 100.0, 50.0, count=1, queue="R1", own_queue=True), 0.0)


def test_pbs_ralter_moves_its_window_where_its_nodes_are_free(rig, monkeypatch, capsys):
    now = time.time()
    at = datetime.fromtimestamp(now).replace(second=0, microsecond=0) + timedelta(hours=3)
    stamp = lambda t: t.strftime("%Y%m%d%H%M")  # noqa: E731
    assert run("pbs_rsub", "-R", stamp(at), "-D", "1:00:00", "--hosts", "node01", now=now)[0] == 0
    assert run("pbs_rsub", "-R", stamp(at + timedelta(hours=2)), "-D", "1:00:00", "--hosts", "node01",
               now=now)[0] == 0
    assert run("pbs_ralter", "-D", "1:30:00", "R1", now=now) == (0, "pbs_ralter: R1.headnode CONFIRMED\n")
    assert stored().reservations["R1"].duration == 5400
    # R2 holds node01 from at+2h: R1 cannot reach past it, nor be moved onto it
    assert run("pbs_ralter", "-E", stamp(at + timedelta(hours=2, minutes=30)), "R1", now=now)[0] == 196
    assert "not free for the new window" in capsys.readouterr().err
    assert run("pbs_ralter", "-R", stamp(at + timedelta(hours=1, minutes=30)), "R1", now=now)[0] == 196
    # -R alone keeps its duration; its queue follows (its longest job, its users)
    assert run("pbs_ralter", "-R", stamp(at - timedelta(hours=1)), "-U", "+bob", "-N", "moved", "R1", now=now)[0] == 0
    res, sched = stored().reservations["R1"], stored()
    assert (res.start, res.duration, res.users, res.title) == ((at - timedelta(hours=1)).timestamp(), 5400,
                                                               frozenset({"alice", "bob"}), "moved")
    assert sched.router.queues["R1"].max_walltime == 5400 and sched.router.queues["R1"].acl_users == {"alice", "bob"}
    assert run("pbs_ralter", "-U", "-alice", "R1", now=now)[0] == 0 and stored().reservations["R1"].users == {"bob"}
    assert run("pbs_ralter", "-U", "+carol,dave", "R1", now=now)[0] == 2
    monkeypatch.setenv("HPCSCHED_USER", "bob")  # authorized to use it, not to alter it
    assert run("pbs_ralter", "-D", "60", "R1", now=now)[0] == 159
    assert run("pbs_ralter", "-D", "60", "R9", now=now)[0] == 236


def test_a_begun_reservation_may_change_only_its_end(rig):
    now = time.time()
    assert run("pbs_rsub", "-D", "600", "-l", "nodes=1", now=now)[0] == 0
    submit("-q", "R1", "-l", "walltime=5:00")
    server_pass(now + 1)
    assert stored().jobs[2].state == "running"
    assert run("pbs_ralter", "-R", "2359", "R1", now=now + 10)[0] == 238
    # its own job on its node is no obstacle to a longer one; an end already past is refused
    assert run("pbs_ralter", "-D", "1200", "R1", now=now + 10)[0] == 0
    assert stored().reservations["R1"].duration == 1200
    assert run("pbs_ralter", "-D", "5", "R1", now=now + 10)[0] == 238


def test_a_standing_reservation_on_some_days_holds_them_alone(rig):
    """OpenPBS's BYDAY: `-R 1130 -E 1330 -r FREQ=WEEKLY;BYDAY=MO,WE,FR;COUNT=10` asked on a
    Tuesday first holds Wednesday 11:30-13:30, then Friday, Monday, ..., ten in all."""
    tuesday = datetime(2030, 1, 1, 9, 0).timestamp()  # (a Tuesday)
    rule = "FREQ=WEEKLY;BYDAY=MO,WE,FR;COUNT=10"
    assert run("pbs_rsub", "-R", "1130", "-E", "1330", "-r", rule, "-l", "nodes=1", now=tuesday)[0] == 0
    res = stored().reservations["S1"]
    starts = [datetime.fromtimestamp(s) for s, _ in res.occurrences(tuesday, math.inf)]
    assert [(t.strftime("%a %d"), t.hour, t.minute) for t in starts] == [
        (f"{day} {d:02}", 11, 30) for day, d in [("Wed", 2), ("Fri", 4), ("Mon", 7), ("Wed", 9), ("Fri", 11),
                                                 ("Mon", 14), ("Wed", 16), ("Fri", 18), ("Mon", 21), ("Wed", 23)]]
    assert res.total() == 10 and not res.expired(starts[-1].timestamp() + 7199)
    assert res.expired(starts[-1].timestamp() + 7200)
    status, out = run("pbs_rstat", "-f", "S1", now=tuesday)
    attrs = dict(line.split(" = ", 1) for line in out.splitlines()[1:] if " = " in line)
    assert attrs["reserve_rrule"] == rule and attrs["reserve_count"] == "10"
    assert attrs["reserve_start"] == "Wed Jan 02 11:30:00 2030" and attrs["reserve_duration"] == "7200"
    submit("-q", "S1", "-l", "walltime=30:00")  # job 2: runs in its occurrences alone
    sched = stored()
    assert sched.iterate(tuesday).reserved[2][0] == starts[0].timestamp()
    assert sched.iterate(starts[0].timestamp() + 7200).reserved[2][0] == starts[1].timestamp()  # (Wed's ended)
    assert [s.job_id for s in sched.iterate(starts[1].timestamp()).started] == [2]


def test_pbs_rstat_shows_a_configured_reservations_days(rig):
    config = rig / "home" / "config.toml"
    config.write_text(config.read_text() + '[[reservations]]\nname = "debug"\nstart = 2030-01-05T08:00:00\n'
                      'duration = "10:00:00"\nnodes = ["node01"]\ndays = ["MO", "TU", "FR"]\n')
    status, out = run("pbs_rstat", "-f", "debug", now=datetime(2030, 1, 5).timestamp())
    attrs = dict(line.split(" = ", 1) for line in out.splitlines()[1:] if " = " in line)
    assert attrs["reserve_rrule"] == "FREQ=WEEKLY;BYDAY=MO,TU,FR"
    assert attrs["reserve_start"] == "Mon Jan 07 08:00:00 2030"


def test_byhour_takes_the_hours_at_the_minutes_of_r_and_until_with_z_is_utc():
    """BYHOUR with DAILY: the hours given, at -R's minutes; UNTIL with a Z is UTC."""
    t0 = datetime(2030, 1, 1, 10, 15).timestamp()
    first, period, offsets, last = rsub._rrule("FREQ=DAILY;BYHOUR=9,17;COUNT=3", t0)
    assert datetime.fromtimestamp(first).hour == 17 and period == 86400 and offsets == (0.0, 16 * 3600.0)
    assert last == first + 86400  # (17:15, 9:15 the next day, 17:15 then)
    assert rsub._rrule("FREQ=DAILY;UNTIL=20300105T000000Z", t0)[3] == datetime(2030, 1, 5,
                                                                                tzinfo=timezone.utc).timestamp()


def _brute_occurrences(freq, interval, days, hours, t0, n):
    """Every hour of every day from t0 on, kept if the rule picks it: slow and plain."""
    out, day0 = [], t0.date()
    monday = day0 - timedelta(days=day0.weekday())
    d = 0
    while len(out) < n:
        date = day0 + timedelta(days=d)
        if freq == "WEEKLY":
            picked = ((date - monday).days // 7) % interval == 0 and date.weekday() in (days or [t0.weekday()])
        else:
            picked = (date - day0).days % interval == 0 and (not days or date.weekday() in days)
        for hour in range(24):
            t = datetime.combine(date, dtime(hour, t0.minute, t0.second))
            if picked and t >= t0 and hour in (hours or [t0.hour]):
                out.append(t)
        d += 1
    return out[:n]


@pytest.mark.parametrize("seed", range(40))
def test_byday_and_byhour_occurrences_match_a_plain_day_by_day_reading(seed, monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    try:
        rng = random.Random(seed)
        freq, interval = rng.choice(["DAILY", "WEEKLY"]), rng.choice([1, 1, 2, 3])
        days = sorted(rng.sample(range(7), rng.randint(1, 4))) if rng.random() < 0.7 else []
        hours = sorted(rng.sample(range(24), rng.randint(1, 3))) if rng.random() < 0.5 else []
        rule = f"FREQ={freq};INTERVAL={interval}" + \
            (";BYDAY=" + ",".join(WEEKDAYS[d] for d in days) if days else "") + \
            (";BYHOUR=" + ",".join(map(str, hours)) if hours else "") + ";COUNT=25"
        t0 = datetime(2030, 1, 1) + timedelta(minutes=rng.randrange(0, 14 * 24 * 60))
        first, period, offsets, last = rsub._rrule(rule, t0.timestamp())
        res = Reservation(name="S1", start=first, duration=60, nodes=("node01",), period=period, offsets=offsets,
                          last=last)
        want = _brute_occurrences(freq, interval, days, hours, t0, 25)
        got = [datetime.fromtimestamp(s) for s, _ in res.occurrences(t0.timestamp(), math.inf)]
        assert got == want, rule
        assert res.total() == 25
        since = rng.choice(want).timestamp() + 30  # (read from within an occurrence, later on)
        assert [datetime.fromtimestamp(s) for s, _ in res.occurrences(since, math.inf)] == \
            [t for t in want if t.timestamp() + 60 > since]
    finally:
        monkeypatch.undo()
        time.tzset()


def test_a_standing_reservations_times_stay(rig, capsys):
    assert run("pbs_rsub", "-D", "60", "-r", "FREQ=DAILY;COUNT=2", "-l", "nodes=1")[0] == 0
    assert run("pbs_ralter", "-D", "120", "S1")[0] == 238
    assert "standing reservation's times are not altered" in capsys.readouterr().err
    assert run("pbs_ralter", "-N", "daily", "S1")[0] == 0 and stored().reservations["S1"].title == "daily"


def test_a_configured_queue_of_the_same_name_outlives_the_reservation():
    """A queue the configuration gained since (config.toml edited) wins on restore: the
    reservation's end leaves it and its jobs alone."""
    from hpcsched.core.route import Queue
    sched = scheduler(4)
    sched.add_reservation(Reservation("R1", 100.0, 50.0, count=1, users={"u"}, queue="R1", own_queue=True), 0.0)
    again = scheduler(4, queues={"batch": Queue("batch"), "R1": Queue("R1")}).restore(sched.to_dict())
    waiting = again.submit(job(queue="R1", wall=10.0), 0.0)
    again.remove_reservation("R1", 10.0)
    assert "R1" in again.router.queues and again.jobs[waiting.id].state == QUEUED and not again.deleted


def test_a_configured_queue_named_like_the_next_reservation_is_passed_over(rig, monkeypatch):
    monkeypatch.setenv("HPCSCHED_USER", "root")
    assert qmgr.QMGR(["-c", "create queue R1"], out=io.StringIO()) == 0
    monkeypatch.setenv("HPCSCHED_USER", "alice")
    assert run("pbs_rsub", "-D", "60", "-l", "nodes=1") == (0, "R2.headnode CONFIRMED\n")
    assert submit("-l", "walltime=10") == "3.headnode"


def test_openpbs_pbsnodes_names_the_reservations_on_a_node(rig, monkeypatch):
    from hpcsched.pbs import pbsnodes
    assert run("pbs_rsub", "-D", "600", "--hosts", "node02")[0] == 0
    monkeypatch.setenv("HPCSCHED_FLAVOR", "openpbs")
    out = io.StringIO()
    assert pbsnodes.PBSNODES(["-a"], out=out) == 0
    blocks = {b.split("\n")[0]: b for b in out.getvalue().split("\n\n") if b}
    assert "     resv = R1.headnode\n" in blocks["node02"] and "resv =" not in blocks["node01"]


def test_releaseres_of_a_pbs_rsub_reservation_records_its_jobs_deletions(rig, monkeypatch):
    assert run("pbs_rsub", "-R", "2359", "-D", "60", "-l", "nodes=1")[0] == 0
    submit("-q", "R1", "-l", "walltime=30")
    out = io.StringIO()
    assert maui.RELEASERES(["R1"], out=out) == 0 and out.getvalue() == "released User reservation 'R1'\n"
    assert stored().jobs[2].state == DELETED
    records = "".join(p.read_text() for p in (rig / "home" / "accounting").iterdir())
    assert ";D;2.headnode;" in records


def test_on_a_blue_gene_a_reservation_holds_a_block(tmp_path, monkeypatch):
    """A Blue Gene reserves blocks: pbs_rstat, showres and setres count their nodes and
    processors (showres and setres died on a block's name)."""
    home = tmp_path / "bgq"
    home.mkdir()
    (home / "config.toml").write_text('machine = "bgq-1rack"\nserver_name = "bgq"\n')
    monkeypatch.setenv("HPCSCHED_HOME", str(home))
    monkeypatch.setenv("HPCSCHED_USER", "root")
    assert run("pbs_rsub", "-D", "600", "-l", "nodes=512") == (0, "R1.bgq CONFIRMED\n")
    attrs = dict(line.split(" = ", 1) for line in run("pbs_rstat", "-f")[1].splitlines()[1:] if " = " in line)
    assert (attrs["Resource_List.nodect"], attrs["Resource_List.ncpus"]) == ("512", "8192")
    out = io.StringIO()
    assert maui.SETRES(["-d", "600", "count=512"], out=out) == 0
    assert out.getvalue() == "reservation 'root.1' created on 512 nodes (8192 tasks)\n"
    out = io.StringIO()
    assert maui.SHOWRES([], out=out) == 0
    assert [line.split()[-5] for line in out.getvalue().splitlines()[2:4]] == ["512/8192", "512/8192"]
    # its block must be free for longer: the whole machine is reserved once both end
    assert maui.SETRES(["-s", "+0:10:05", "-d", "600", "count=1024"], out=io.StringIO()) == 0
    assert run("pbs_ralter", "-D", "1200", "R1")[0] == 196
    assert run("pbs_ralter", "-D", "300", "R1")[0] == 0


def test_a_processor_count_reserves_whole_nodes_enough_for_it(tmp_path, monkeypatch):
    """procs=N reserves as many whole nodes as N needs (PSC's size=N is N nodes); OpenPBS's
    ncpus=N is one chunk."""
    home = tmp_path / "xt3"
    home.mkdir()
    (home / "config.toml").write_text('machine = "xt3"\nserver_name = "bigben"\n')  # (2 cores a node)
    monkeypatch.setenv("HPCSCHED_HOME", str(home))
    monkeypatch.setenv("HPCSCHED_USER", "root")
    assert run("pbs_rsub", "-D", "600", "-l", "procs=64")[0] == 0
    assert len(stored().reservations["R1"].nodes) == 32
    assert run("pbs_rsub", "-D", "600", "-l", "size=64")[0] == 0
    assert len(stored().reservations["R2"].nodes) == 64
    assert run("pbs_rsub", "-D", "600", "-l", "ncpus=4")[0] == 196  # (no node has 4)
