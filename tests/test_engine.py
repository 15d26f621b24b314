"""The simulated-clock engine: the order of one instant, and what it reports."""
import pytest
from helpers import job, scheduler

from hpcsched.sim.engine import Engine, SimulationError


def test_one_instant_is_ends_then_arrivals_then_events_then_one_pass():
    s = scheduler(2)
    seen = []

    def note(sched, now):
        seen.append(("event", now, sorted(j.id for j in sched.running()), sched.runnable))

    def watch(plan):
        seen.append(("pass", plan.now, [st.job_id for st in plan.started]))

    arrivals = [(0.0, job(2, 100), 10.0, "a"), (10.0, job(2, 100), 5.0, "b")]
    finished, acc = Engine(s).run(arrivals, events=[(10.0, note)], watch=watch, keep=True)
    # at 10: a ends, b arrives, the event sees a gone and b waiting, then the pass starts b
    assert seen == [("pass", 0.0, [1]), ("event", 10.0, [], 1), ("pass", 10.0, [2]), ("pass", 15.0, [])]
    assert [(f.record, f.submit, f.start, f.end) for f in finished] == [("a", 0.0, 0.0, 10.0), ("b", 10.0, 10.0, 15.0)]
    assert acc["passes"] == 3 and acc["busy"] == 2 * 10 + 2 * 5 and s.job(1).end_time == 10.0  # kept


def test_finished_jobs_are_forgotten_unless_kept():
    s = scheduler(1)
    Engine(s).run([(0.0, job(1, 10), 10.0, None)])
    assert s.jobs == {}


def test_arrivals_out_of_order_are_refused():
    with pytest.raises(SimulationError, match="not sorted"):
        Engine(scheduler(1)).run([(5.0, job(1, 10), 1.0, None), (1.0, job(1, 10), 1.0, None)])


def test_a_period_adds_passes_while_jobs_wait():
    s = scheduler(1)
    arrivals = [(0.0, job(1, 100), 100.0, None), (0.0, job(1, 100), 100.0, None)]
    _, acc = Engine(s, period=15.0).run(arrivals)
    # passes at 0, every 15 s while the second waits (15 ... 90), at 100 (end), then at 200
    assert acc["passes"] == 1 + 6 + 1 + 1


def test_the_engine_is_exported_and_a_finished_job_prints_what_happened_to_it():
    import hpcsched
    from hpcsched.sim.engine import Engine as Home, Finished as HomeFinished
    assert hpcsched.Engine is Home and hpcsched.Finished is HomeFinished
    assert "Engine" in hpcsched.__all__ and "Finished" in dir(hpcsched)
    text = repr(hpcsched.Finished("job-7", 0, 10, 70.5, 4, 4, True, "batch"))
    assert text == "Finished('job-7', submit=0, start=10, end=70.5, size=4, units=4, backfill=True, queue='batch')"
