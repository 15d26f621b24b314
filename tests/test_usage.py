"""Decayed, windowed usage (core/usage.py) against a plain model that keeps every charge."""
import json
import random

import pytest

from hpcsched.core.errors import InvalidRequest
from hpcsched.core.usage import BUCKETS, Usage


class Reference:
    """Every charge kept as (time, amount, finished); read by the module's own definition."""

    def __init__(self, half_life, window):
        self.half_life, self.window, self.charges = half_life, window, []
        self.width = window / BUCKETS if window else 0

    def value(self, t):
        u = f = 0.0
        for c, amount, fin in self.charges:
            if self.width and c // self.width < (t - self.window) // self.width:
                continue  # its bucket's end is a window old
            d = 2.0 ** (-(t - c) / self.half_life) if self.half_life else 1.0
            u += amount * d
            f += fin * d
        return u, f


def replay(half_life, window, rng, restore_at=None):
    """Random starts, ends and passes on one record; returns (usage, reference, times)."""
    usage, ref = Usage("slots", half_life, window), Reference(half_life, window)
    key, t, running, last = ("u", "g", "p"), 0.0, [], 0.0
    checks = []
    for step in range(300):
        t += rng.choice([0.5, 7.0, 60.0, 900.0, 3600.0, 86400.0 / 3])
        # the reference: the running jobs' rate charged over [last, t] at t
        rate = sum(running)
        if rate and t > last:
            ref.charges.append((t, rate * (t - last), 0.0))
        last = t
        what = rng.random()
        if what < 0.35 or not running:
            r = rng.choice([1, 2, 8, 48])
            usage.started(key, r, t)
            running.append(r)
        elif what < 0.7:
            r = running.pop(rng.randrange(len(running)))
            usage.ended(key, r, t)
            ref.charges.append((t, 0.0, 1.0))
        else:
            usage.accrue(t)
        if restore_at == step:
            state = json.loads(json.dumps(usage.to_dict()))
            usage = Usage("slots", half_life, window)
            usage.restore(state, [(key, r) for r in running])
        checks.append((t, usage.value(usage.record(key), t), ref.value(t)))
    return checks


@pytest.mark.parametrize("half_life,window", [(0, 0), (3600.0, 0), (0, 86400.0), (7200.0, 15 * 86400.0),
                                              (2160 * 3600.0, 90 * 86400.0), (60.0, 0)])
def test_usage_equals_the_reference_that_keeps_every_charge(half_life, window):
    rng = random.Random(f"{half_life}/{window}")
    for t, (u, f), (ru, rf) in replay(half_life, window, rng):
        assert u == pytest.approx(ru, rel=1e-9, abs=1e-6) and f == pytest.approx(rf, rel=1e-9, abs=1e-9), t


def test_a_restored_usage_reads_exactly_as_the_one_that_went_on():
    for seed in range(5):
        a = replay(3600.0, 86400.0, random.Random(seed))
        b = replay(3600.0, 86400.0, random.Random(seed), restore_at=150)
        assert a == b  # bit for bit


def test_half_life_halves_and_the_window_forgets():
    u = Usage("nodes", half_life=10.0)
    u.charge(("a", "", ""), 100.0, 0.0)
    assert u.by("user", 10.0) == {"a": 50.0} and u.by("user", 20.0) == {"a": 25.0}
    w = Usage("nodes", window=640.0)  # buckets of 10 s
    w.charge(("a", "", ""), 100.0, 5.0)
    assert w.by("user", 644.0) == {"a": 100.0}  # its bucket [0, 10) ends 640 before 650
    assert w.by("user", 650.0) == {"a": 0.0}


def test_a_long_decay_moves_the_epoch_without_changing_values():
    u = Usage("nodes", half_life=1.0)
    u.charge(("a", "", ""), 1.0, 0.0)
    u.charge(("a", "", ""), 1.0, 600.0)  # past 512 half-lives: the epoch moves
    assert u.epoch == 600.0 and u.by("user", 601.0)["a"] == pytest.approx(0.5)


def test_bad_settings_are_refused():
    for args in [("wall",), ("nodes", -1.0), ("nodes", 0.0, float("inf"))]:
        with pytest.raises(InvalidRequest):
            Usage(*args)


def test_take_changed_names_every_record_whose_sums_moved():
    # A reader keeping sums of its own (the share tree) adds up again only the keys named:
    # so every change of a record's undecayed sums must name it, a window's trim included.
    u = Usage("slots", half_life=3600.0, window=640.0)  # buckets of 10 s
    a, b, c = ("a", "", ""), ("b", "", ""), ("c", "", "")
    u.charge(a, 5.0, 1.0)
    u.started(b, 2.0, 1.0)  # a start charges nothing yet
    assert set(u.take_changed(1.0)) == {a} and u.take_changed(1.0) == {}
    u.accrue(11.0)  # b's running job charged
    assert set(u.take_changed(11.0)) == {b}
    u.ended(b, 2.0, 20.0)
    u.charge(c, 1.0, 30.0)
    changed = u.take_changed(30.0)  # each with its sums, as `undecayed` reads them
    assert changed == {k: u.undecayed(u.records[k], 30.0) for k in (b, c)} and changed[c] == (1.0 * 2 ** (30 / 3600), 0.0)
    assert set(u.take_changed(649.0)) == set()  # a's bucket [0, 10) counts until 10 + 640
    read = {k: u.undecayed(r, 655.0) for k, r in u.records.items()}  # (a reading trims too)
    assert read[a] == (0.0, 0.0) and read[c] != (0.0, 0.0)
    assert set(u.take_changed(655.0)) == {a}
    assert u.take_changed(700.0) == {b: (0.0, 0.0), c: (0.0, 0.0)}  # b's buckets [10, 30) left by 670, c's [30, 40) at 680
    generation = u.generation
    u.reset(700.0, lambda key: key == a)
    u.restore(u.to_dict(), [])
    assert u.generation == generation + 2  # (whoever keeps sums adds everything up again)


def test_a_live_drivers_cpu_time_reported_at_the_end_is_charged_under_the_cpu_metric():
    # (the server's jobs ended with no cpu_time: a live site's cpu metric charged nothing)
    from hpcsched.config import build
    from hpcsched.core.jobs import Job, Request
    s = build({"nodes": [{"names": "n[1-2]"}], "usage": {"metric": "cpu", "half_life": 0}})
    job = s.submit(Job(owner="ann", request=Request(nodes=1), walltime=600), now=0)
    s.iterate(0)
    s.job_ended(job.id, 300, 0, cpu_time=250.0)
    assert job.cpu_time == 250.0 and s.usage.by("user", 300)["ann"] == pytest.approx(250.0)


def test_a_suspended_job_accrues_no_usage_until_it_resumes():
    from hpcsched.config import build
    from hpcsched.core.jobs import Job, Request
    s = build({"nodes": [{"names": "n[1-4]"}], "usage": {"metric": "nodes", "half_life": 0}})
    a = s.submit(Job(owner="ann", request=Request(nodes=2), walltime=9000), now=0)
    b = s.submit(Job(owner="ann", request=Request(nodes=1), walltime=9000), now=0)
    s.iterate(0)
    s.suspend(a.id, 1000)
    assert s.usage.by("user", 2000)["ann"] == pytest.approx(2 * 1000 + 2000)
    s.resume(a.id, 3000)
    s.iterate(3500)
    state = s.to_dict()  # (a copy made while it runs again, and one while it is suspended)
    s.suspend(a.id, 4000)
    copy = build({"nodes": [{"names": "n[1-4]"}], "usage": {"metric": "nodes", "half_life": 0}}).restore(s.to_dict())
    s.job_ended(a.id, 5000, 0)  # (ended while suspended)
    s.job_ended(b.id, 6000, 0)
    assert s.usage.by("user", 7000)["ann"] == pytest.approx(2 * 2000 + 6000)
    assert copy.usage.by("user", 4500)["ann"] == pytest.approx(2 * 2000 + 4500)
    again = build({"nodes": [{"names": "n[1-4]"}], "usage": {"metric": "nodes", "half_life": 0}}).restore(state)
    assert again.usage.by("user", 3600)["ann"] == pytest.approx(2 * 1600 + 3600)


DAY = 86400.0


@pytest.mark.parametrize("before,after", [(90 * DAY, 30 * DAY), (30 * DAY, 90 * DAY), (90 * DAY, 0.0),
                                          (0.0, 90 * DAY)])
def test_usage_survives_a_change_of_half_life(before, after):
    """A site changes its half-life (CC-IN2P3 did): the usage it had stays what it was at
    the change and decays by the new half-life from then (it read 0.00, or 3.5e71)."""
    old = Usage("nodes", half_life=before)
    old.charge(("a", "", ""), 360_000.0, 0.0)  # 100 node-hours
    at = 200 * DAY
    old.charge(("b", "", ""), 3600.0, at - 3600.0)
    value = old.by("user", at)
    new = Usage("nodes", half_life=after)
    new.restore(json.loads(json.dumps(old.to_dict())), [], at)
    assert new.by("user", at) == pytest.approx(value, rel=1e-9)
    decayed = 0.5 if after else 1.0
    assert new.by("user", at + (after or DAY)) == pytest.approx({k: v * decayed for k, v in value.items()}, rel=1e-9)


@pytest.mark.parametrize("before,after", [(30 * DAY, 1 * DAY), (15 * DAY, 30 * DAY), (0.0, 10 * DAY),
                                          (10 * DAY, 0.0)])
def test_usage_survives_a_change_of_window(before, after):
    """A site changes its history window: each charge leaves the new window when its own
    time does (bucket numbers reused under the new width lost it all, or kept it for ever)."""
    old = Usage("nodes", window=before)
    at = 100 * DAY
    old.charge(("recent", "", ""), 10.0, at - 3600.0)
    old.charge(("older", "", ""), 10.0, at - 5 * DAY)
    new = Usage("nodes", window=after)
    new.restore(json.loads(json.dumps(old.to_dict())), [], at)
    if not before:  # (no window before: when a charge was made is not known; it counts from the change)
        assert new.by("user", at) == {"recent": 10.0, "older": 10.0}
        assert new.by("user", at + after + DAY) == {"recent": 0.0, "older": 0.0}
        return
    assert new.by("user", at)["older"] == (0.0 if after and after < 5 * DAY else 10.0)
    expect = Reference(0.0, after)
    expect.charges = [(at - 3600.0, 10.0, 0.0)]
    for t in (at, at + DAY, at + 20 * DAY, at + 40 * DAY):  # (read forward in time, as a site does)
        recent = new.by("user", t)["recent"]
        assert recent == pytest.approx(expect.value(t)[0] if after else 10.0, abs=1e-9), t
    if after:
        assert new.by("user", at + after + DAY)["older"] == 0.0  # (it leaves the window, in time)


def test_grid_engines_halftime_is_hours_and_half_life_a_duration():
    from hpcsched import config
    from hpcsched.core.errors import ConfigError
    base = '[[nodes]]\nnames = "n01"\n[usage]\n'
    assert config.build(config.loads(base + "halftime = 168\n")).usage.half_life == 168 * 3600
    assert config.build(config.loads(base + 'half_life = "168:00:00"\n')).usage.half_life == 168 * 3600
    assert config.build(config.loads(base + "half_life = 168\n")).usage.half_life == 168  # (seconds)
    with pytest.raises(ConfigError, match="not both"):
        config.build(config.loads(base + "halftime = 1\nhalf_life = 60\n"))
    with pytest.raises(ConfigError, match="usage.halftime: hours"):
        config.build(config.loads(base + 'halftime = "a week"\n'))
