"""Site calendars (drains, Big Run Monday, Kraken's bimodal week) and Python submit filters."""
import io
import textwrap
import time
from datetime import datetime

import pytest

from hpcsched import config, sitefilter
from hpcsched.core.errors import ConfigError, Rejected
from hpcsched.core.jobs import Job, Request
from hpcsched.sim.simulate import record, simulate

H, DAY, WEEK = 3600.0, 86400.0, 604800.0

KRAKEN = {"nodes": [{"names": "n[01-10]"}], "backfill": "easy",
          "calendar": [{"name": "wed", "kind": "bimodal", "start": 3 * DAY, "duration": 3600, "every": "weekly"}]}


def starts(records, cfg=KRAKEN):
    result = simulate(records, config=cfg, drain=False)
    return {f.record.job: f.start / H for f in result.jobs}


def test_kraken_week_drains_then_runs_the_queued_capability_jobs_back_to_back():
    got = starts([record(1, 0, 3, 2 * DAY, 2 * DAY),
                  record(2, 100, 10, 2 * H, 2 * H),  # capability (>= 85 % of 10): waits for the window
                  record(3, 200, 9, 2 * H, 2 * H),  # capability too: right after job 2
                  record(4, 300, 2, 5 * DAY, 5 * DAY),  # would cross the drain: waits for the series' end
                  record(5, 72.5 * H, 1, 2 * H, 2 * H),  # fits beside job 3, ends before job 4 could start
                  record(6, 3 * DAY + H + 10, 10, H, H)])  # submitted during the series: next week
    assert got[1] == 0 and got[2] == 73 and got[3] == 75  # drain 72-73 h, then back to back
    assert got[5] == 75  # beside job 3 on the tenth node
    assert got[4] == 77  # the series is done: normal work at once
    assert got[6] == 241  # next week's drain ends at 241 h


def test_without_capability_jobs_queued_the_machine_works_on_after_the_drain():
    got = starts([record(1, 0, 2, 80 * H, 80 * H), record(2, 10, 10, H, H)])
    # job 1 (80 h) cannot end before the drain at 72 h: it starts after it; the 10-node job
    # arrived before the drain, so it is in the series and goes first
    assert got == {2: 73, 1: 74}
    assert starts([record(1, 0, 2, 80 * H, 80 * H)]) == {1: 73}


def test_a_capability_job_outside_the_series_says_why_it_waits():
    s = config.build(dict(KRAKEN, calendar=[dict(KRAKEN["calendar"][0])]))
    job = s.submit(Job(request=Request(nodes=9), walltime=H), 0)
    plan = s.iterate(0)
    assert plan.started == [] and plan.reason(job.id) == "capability jobs run after the wed drain, in its series"


def test_the_series_survives_a_restore():
    s = config.build(dict(KRAKEN))
    s.iterate(0)
    blocker = s.submit(Job(request=Request(nodes=1), walltime=DAY), 0)
    s.iterate(0)
    a = s.submit(Job(request=Request(nodes=10), walltime=H), 10)
    b = s.submit(Job(request=Request(nodes=10), walltime=H), 20)
    s.iterate(73 * H)  # the drain is over: a and b make the series, waiting for the blocker
    assert (a.tier, b.tier) == (-2, -1)
    state = s.to_dict()
    assert [r["name"] for r in state["reservations"]] == []  # the calendar's drain comes from the config
    again = config.build(dict(KRAKEN)).restore(state)
    again.job_ended(blocker.id, 73 * H + 10, 0)
    assert [st.job_id for st in again.iterate(73 * H + 10).started] == [a.id]


BIG_RUN = """
default_queue = "default"
[priority]
policy = "cobalt"
[[nodes]]
names = "n[01-08]"
[queues.default]
route_to = ["prod-capability", "prod-short"]
[queues.prod-capability]
min_fraction = 0.5
[queues.prod-short]
[[calendar]]
name = "maintenance"
start = 3600
duration = 7200
every = "biweekly"
big_run = true
"""


def test_big_run_monday_from_the_calendar_puts_capability_jobs_first_largest_first_after_maintenance():
    s = config.build(config.loads(BIG_RUN))
    s.iterate(0)
    small = s.submit(Job(request=Request(nodes=1), walltime=H), 10)
    four = s.submit(Job(request=Request(nodes=4), walltime=H), 20)
    eight = s.submit(Job(request=Request(nodes=8), walltime=H), 30)
    small.score = 1000.0  # far ahead, until the big run
    s.iterate(3000)
    assert small.score > eight.score
    plan = s.iterate(3 * H)  # the maintenance drain (1-3 h) is over
    assert eight.score > four.score > small.score > 1000.0
    assert [st.job_id for st in plan.started] == [eight.id]


@pytest.mark.parametrize("entry, message", [
    ({"name": "x", "start": 0, "duration": "8:00:00", "every": "4:00:00"}, "overlaps itself"),
    ({"name": "x", "start": 0, "duration": 60, "kind": "party"}, "kind must be drain or bimodal"),
    ({"name": "x", "start": "soon", "duration": 60}, "neither epoch seconds nor an ISO date"),
    # (a NaN start was taken; a date past year 9999 in UTC was a ValueError traceback)
    ({"name": "x", "start": float("nan"), "duration": 60}, "nan is neither epoch seconds"),
    ({"name": "x", "start": datetime(9999, 12, 31, 23, 59), "duration": 60}, "is a time this zone cannot place"),
    ({"name": "x", "start": 0}, r"calendar\[0\].duration: missing"),
    ({"name": "x", "start": 0, "duration": 60, "big_run": True}, "policy fifo does not order by"),
    ({"name": "x", "start": 0, "duration": 60, "capability": 2}, "capability: must be a number from 0 to 1"),
    ({"name": "x", "start": 0, "duration": 60, "colour": "red"}, r"calendar\[0\].colour: unknown key"),
])
def test_bad_calendar_entries_are_one_line(entry, message, monkeypatch):
    monkeypatch.setenv("TZ", "Pacific/Kiritimati")  # (UTC+14: 9999-12-31T23:59 is year 10000 in UTC)
    time.tzset()
    try:
        with pytest.raises(ConfigError, match=message):
            config.build({"nodes": [{"names": "n1"}], "calendar": [entry]})
    finally:
        monkeypatch.undo()
        time.tzset()


# --- Python submit filters -----------------------------------------------------------------

FILTERS = '''
import time

def program(job, sched, now):
    """INCITE jobs start ahead; a project at zero is told so."""
    if job.account.startswith("incite"):
        job.score = 500.0
    if job.name == "forbidden":
        return "jobs may not be called forbidden\\nsecond line"
    if job.name == "boom":
        raise ValueError("no such program")
    if job.name == "slow":
        time.sleep(30)
'''


@pytest.fixture
def filtered(rig):
    home = rig / "home"
    (home / "site_filters.py").write_text(FILTERS)
    config_file = home / "config.toml"
    text = config_file.read_text().replace('[priority]\npolicy = "fifo"\n', '[priority]\npolicy = "cobalt"\n')
    config_file.write_text('submit_filter = "site_filters:program"\n' + text)
    return rig


def _qsub(*argv):
    from hpcsched.pbs import qsub
    return qsub.submit(list(argv), stdin=io.StringIO("true\n"), cwd="/tmp", env={"HOME": "/h"})[0]


def test_a_python_filter_sets_the_starting_score_and_refuses_with_its_message(filtered, monkeypatch):
    from hpcsched.pbs import common
    from hpcsched.store.journaled import Batch
    from hpcsched.store.site import load_site
    jid = _qsub("-A", "incite-climate")
    plain = _qsub("-A", "other")
    with Batch.of(load_site()).open(write=False) as batch:
        jobs = batch.sched.jobs
        assert jobs[int(jid.split(".")[0])].score == 500.0 and jobs[int(plain.split(".")[0])].score == 0.0
    with pytest.raises(common.CommandError, match="rejected by the queueing system: jobs may not be called forbidden$"):
        _qsub("-N", "forbidden")
    with pytest.raises(common.CommandError, match="the submit filter failed: ValueError: no such program"):
        _qsub("-N", "boom")
    monkeypatch.setattr(sitefilter, "TIMEOUT", 0.2)
    with pytest.raises(common.CommandError, match="did not answer within 0.2 s"):
        _qsub("-N", "slow")
    with Batch.of(load_site()).open(write=False) as batch:
        assert len(batch.sched.jobs) == 2  # nothing refused was saved


def test_a_filter_that_cannot_be_imported_is_a_config_error(rig):
    from hpcsched.store.site import load_site
    config_file = rig / "home" / "config.toml"
    config_file.write_text('submit_filter = "no_such_module:f"\n' + config_file.read_text())
    with pytest.raises(ConfigError, match="submit_filter: cannot import no_such_module"):
        load_site()


def test_the_simulator_runs_a_python_filter_and_reports_the_bank(tmp_path, monkeypatch):
    (tmp_path / "sim_filter.py").write_text(textwrap.dedent('''
        def only_short(job, sched, now):
            if job.walltime > 7200:
                return "too long for this site"
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = {"nodes": [{"names": "n[01-04]"}], "submit_filter": "sim_filter:only_short",
           "allocations": {"projects": {"g1": {"amount": 3}}, "on_exhausted": "run"}}
    result = simulate([record(1, 0, 2, H, H), record(2, 0, 1, H, 3 * H), record(3, 10, 1, H, H, group=2)],
                      config=cfg, drain=False)
    assert sorted(f.record.job for f in result.jobs) == [1, 3] and result.mapping.rejected == 1
    assert result.bank["projects"]["g1"] == {"allocated": 3.0, "charged": 2.0, "balance": 1.0, "standing": "ok"}
    assert result.bank["charged"] == {"g1": 2.0, "g2": 1.0}
    assert result.to_json()["bank"] == result.bank


def test_apply_turns_a_changed_score_into_the_starting_score_and_a_refusal_into_rejected():
    job = Job()
    sitefilter.apply(lambda j, s, n: setattr(j, "score", 7), job, None, 0)
    assert job.initial_score == 7.0
    with pytest.raises(Rejected, match="^no$"):
        sitefilter.apply(lambda j, s, n: "no", Job(), None, 0)


def test_a_dated_allocation_in_a_replay_needs_the_traces_clock():
    from hpcsched.sim.engine import SimulationError
    cfg = {"nodes": [{"names": "n1"}], "allocations": {"on_exhausted": "run", "projects": {
        "g1": {"amount": 1, "overburn": {"start": "2026-07-01", "end": 10}}}}}
    with pytest.raises(SimulationError, match="allocations.projects.g1.overburn: a date needs the trace's UnixStartTime"):
        simulate([record(1, 0, 1, 60, 60)], config=cfg, drain=False)
    cfg["allocations"]["projects"]["g1"]["overburn"]["start"] = 0  # seconds on the trace's clock
    assert simulate([record(1, 0, 1, 60, 60)], config=cfg, drain=False).bank["charged"] == {"g1": pytest.approx(60 / 3600, abs=1e-6)}
