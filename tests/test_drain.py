"""Drain-time accounting: hand-worked logs, the sampler's two views, the three sources."""
import gzip
import re
import json
import os
import random
import subprocess
import sys

import pytest
from helpers import scheduler

from hpcsched import ALL, Job, Request
from hpcsched.config import build
from hpcsched.core.reservations import Reservation
from hpcsched.core.topology import NodeState
from hpcsched.drain import moablog, records
from hpcsched.drain.accounts import DRAIN, GROUPS, Accounts, JobRecord, combo, groups_from
from hpcsched.drain.samples import Recorder, Sampler
from hpcsched.sim.engine import Engine
from hpcsched.sim.simulate import record, simulate, swf_job_records

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KTH = os.path.join(ROOT, "..", "shared", "traces", "KTH-SP2-1996-2.1-cln.swf.gz")
IDLE, BUSY, RUNNING, DOWN, DRAINED, DRAINING = 1, 2, 3, 0, 4, 5


def status(stamp, node, state, rsv="none", jobs="none", it=21166):
    """A line exactly as the paper prints it (written out here, not by moablog.line)."""
    return f"{stamp}.000-0600 {it} INFO Node '{node}' status: state='{state}' rsvlist='{rsv}' joblist='{jobs}'\n"


DAY1 = "2014-12-31T"
DAY2 = "2015-01-01T"


def day_one():
    """Two nodes over one day; every state and reservation/job combination on n1."""
    n1 = [("00:00:00", "Idle", "7,8", "none"),     # 600 s drain, charged to 7 (first in the list)
          ("00:10:00", "Busy", "none", "5"),       # 600 s Busy with a job
          ("00:20:00", "Idle", "none", "none"),    # 1,200 s unallocated idle (no sample at 00:30: a gap)
          ("00:40:00", "Down", "9", "none"),       # 300 s Down with a reservation
          ("00:45:00", "Running", "9", "5,6"),     # 300 s Running, reservation and jobs
          ("00:50:00", "Drained", "none", "none"),  # 60 s
          ("00:51:00", "Draining", "none", "6"),   # 60 s
          ("00:52:00", "Idle", "7", "none")]       # drain to 7 until the last sample, 23:59:00
    lines = ["Moab starting up: unrelated line\n"]
    for hh in range(24):
        for mm in range(0, 60, 10):
            t = f"{hh:02d}:{mm:02d}:00"
            lines.append(status(DAY1 + t, "n2", "Busy", "7", "5"))  # one run, the same all day
    for t, s, r, j in n1:
        lines.append(status(DAY1 + t, "n1", s, r, j))
    lines.append(status(DAY1 + "23:59:00", "n1", "Idle", "7", "none"))
    lines.append(status(DAY1 + "23:59:00", "n2", "Busy", "7", "5"))
    lines.append("2014-12-31T12:00:00.000-0600 21166 INFO Node 'n1' status: state='Sleeping' rsvlist='none' "
                 "joblist='none'\n")  # malformed: no such state
    lines.sort(key=lambda x: x[11:19] if x[:4] == "2014" else "")
    return "".join(lines)


def day_two():
    return "".join([status(DAY2 + "00:01:00", "n1", "Idle", "7"),
                    status(DAY2 + "00:01:00", "n2", "Busy", "none", "5"),
                    status(DAY2 + "00:11:00", "n1", "Busy", "none", "7"),
                    status(DAY2 + "00:11:00", "n2", "Idle"),
                    status(DAY2 + "00:21:00", "n1", "Busy", "none", "7"),
                    status(DAY2 + "00:21:00", "n2", "Idle")])


@pytest.fixture
def logs(tmp_path):
    one, two = tmp_path / "20141231", tmp_path / "20150101.gz"
    one.write_text(day_one())
    with gzip.open(two, "wt") as f:
        f.write(day_two())
    return [str(one), str(two)]


def test_hand_worked_day(logs):
    acc, q = moablog.read(logs[:1])
    (day,) = acc.days.values()
    assert day[combo(IDLE, True, False)] == 600 + (23 * 3600 + 59 * 60 - 52 * 60)
    assert day[combo(BUSY, False, True)] == 600
    assert day[combo(IDLE, False, False)] == 1200  # the gap accrues to the earlier sample
    assert day[combo(DOWN, True, False)] == 300
    assert day[combo(RUNNING, True, True)] == 300
    assert day[combo(DRAINED, False, False)] == 60
    assert day[combo(DRAINING, False, True)] == 60
    assert day[combo(BUSY, True, True)] == 86340  # n2: 145 equal samples, one run
    assert sum(day) == 2 * 86340
    assert acc.drain == {"7": 600 + 83220}
    assert acc.seen_running == {"5": 600 + 300 + 86340, "6": 300 + 60}
    assert q.samples == 145 + 9 and q.unrelated == 1 and q.malformed == 1
    assert q.errors[0].startswith(logs[0] + ":") and "known state" in q.errors[0]


def test_days_and_jobs_across_files(logs):
    acc, q = moablog.read(logs)
    assert q.files == 2
    assert acc.drain["7"] == 83820 + 600  # one job's drain, summed over both files
    assert acc.offset == -6 * 3600
    rep = acc.report({"7": JobRecord("7", 2, 1420092660.0 + 600, None)}, gap=60)
    d1, d2 = rep["days"]
    assert (d1["day"], d2["day"]) == ("2014-12-31", "2015-01-01")
    assert d1["accounted_s"] == 86340 and d2["accounted_s"] == 1200
    assert d1["drain_pct"] == pytest.approx(100 * 83820 / (2 * 86340))
    assert d2["drain_pct"] == pytest.approx(100 * 600 / (2 * 1200))
    assert rep["sliding"][0]["job"] == "7" and rep["sliding"][0]["drain_per_node_s"] == (83820 + 600) / 2
    assert rep["drain_unattributed_node_hours"] == 0


def test_one_file_across_midnight_is_split_at_local_midnight(tmp_path):
    p = tmp_path / "log"
    p.write_text(status(DAY1 + "23:50:00", "n1", "Idle", "3") + status(DAY2 + "00:10:00", "n1", "Busy", "none", "3")
                 + status(DAY2 + "00:20:00", "n1", "Busy", "none", "3"))
    acc, _ = moablog.read([str(p)])
    days = [acc.days[d] for d in sorted(acc.days)]
    assert days[0][DRAIN] == 600 and days[1][DRAIN] == 600 and days[1][combo(BUSY, False, True)] == 600


def test_nodes_short_of_a_day_are_reported(tmp_path):
    p = tmp_path / "log"
    p.write_text(status(DAY1 + "00:00:00", "a", "Idle") + status(DAY1 + "00:00:00", "b", "Idle")
                 + status(DAY1 + "12:00:00", "b", "Idle") + status(DAY1 + "23:00:00", "a", "Idle"))
    rep = moablog.read([str(p)])[0].report(gap=900)
    assert rep["days"][0]["accounted_s"] == 23 * 3600 and rep["days"][0]["nodes_short"] == 1
    rep = moablog.read([str(p)], Accounts(node_count=3))[0].report()
    assert rep["days"][0]["nodes_short"] == 2  # and one node never sampled at all


def test_dynamic_basis_leaves_down_time_out(logs):
    acc, _ = moablog.read(logs[:1])
    static, dynamic = acc.report(basis="static"), acc.report(basis="dynamic")
    assert static["node_hours"] == pytest.approx(2 * 86340 / 3600)
    assert dynamic["node_hours"] == pytest.approx((2 * 86340 - 300) / 3600)
    assert dynamic["drain_pct"] > static["drain_pct"]


def test_malformed_lines_are_counted_never_fatal(tmp_path):
    p = tmp_path / "log"
    good = status(DAY1 + "00:00:00", "n1", "Idle", "4")
    p.write_text(good + "garbage Node 'n1' status: nonsense\n"
                 + "not-a-time 1 INFO Node 'n1' status: state='Idle' rsvlist='4' joblist='none'\n"
                 + status(DAY1 + "00:05:00", "n1", "Idle", "4").replace("joblist", "jobs")
                 + status(DAY1 + "00:00:00", "n1", "Busy", "none", "4").replace("00:00:00", "00:01:00")
                 + status(DAY1 + "00:00:30", "n1", "Idle")  # time going back for n1
                 + status(DAY1 + "00:10:00", "n1", "Busy", "none", "4"))
    acc, q = moablog.read([str(p)])
    assert q.malformed == 4 and [e.split(":")[1] for e in q.errors] == ["2", "3", "4", "6"]
    assert acc.drain == {"4": 60} and acc.days[min(acc.days)][combo(BUSY, False, True)] == 540


def test_a_stamp_leaping_far_ahead_is_a_bad_line_not_years_of_accrual(tmp_path):
    # (a damaged year, 9999 for 2014, accrued n1's idling over every day between: 160 s and
    # 4 GB for these five lines)
    p = tmp_path / "log"
    p.write_text(status(DAY1 + "00:00:00", "n1", "Idle", "4")
                 + status(DAY1 + "00:05:00", "n1", "Busy", "none", "4").replace(DAY1[:4], "9999", 1)
                 + status(DAY1 + "00:10:00", "n1", "Busy", "none", "4")
                 + status(DAY1 + "00:20:00", "n1", "Idle", "4")
                 + status(DAY1 + "00:30:00", "n1", "Idle", "4").replace(DAY1[:4], "9999", 1))
    acc, q = moablog.read([str(p)])
    assert q.malformed == 2 and all("time leaps" in e and "days ahead of the lines before" in e for e in q.errors)
    assert [e.split(":")[1] for e in q.errors] == ["2", "5"]
    assert len(acc.days) == 1 and sum(acc.days[min(acc.days)]) == 1200  # (n1's 20 minutes, nothing more)
    # a file's stamps may still go a month ahead (logs of many days in one file)
    p.write_text(status(DAY1 + "00:00:00", "n1", "Idle", "4")
                 + status(DAY1 + "00:00:00", "n1", "Busy", "none", "4").replace(DAY1[:10], "2015-01-30", 1))
    assert moablog.read([str(p)])[1].malformed == 0


def test_written_lines_read_back():
    line = moablog.line(1420005799.696, "27453", "Idle", ["1292428", "1292433"], [], offset=-21600, iteration=21166)
    assert line == ("2014-12-31T00:03:19.696-0600 21166 INFO Node '27453' status: state='Idle' "
                    "rsvlist='1292428,1292433' joblist='none'\n")


def test_size_groups():
    assert GROUPS[1] == ("Sub1k", 129)
    assert groups_from([1, 2, 10]) == (("1", 1), ("2-9", 2), ("10+", 10))
    with pytest.raises(ValueError):
        groups_from([0, 5])


def test_report_joins_job_records():
    acc = Accounts(node_count=10)
    acc.add(DRAIN, 0, 100, "a", "1")
    acc.add(DRAIN, 0, 50, "b", "2")
    acc.add(DRAIN, 0, 20, "c", "r1")  # a site reservation: no job record
    jobs = {"1": JobRecord("1", 200, 100, 110, False), "2": JobRecord("2", 4, 50, 1050, True),
            "3": JobRecord("3", 1, 0, 40, True)}
    rep = acc.report(jobs)
    tiny, sub1k = rep["by_size"][0], rep["by_size"][1]
    assert (tiny["jobs"], tiny["drained_jobs"], sub1k["drained_jobs"]) == (2, 1, 1)
    assert sub1k["mean_drain_per_node"] == 100 / 200
    f = rep["failure_to_launch"]
    assert f["jobs"] == 1 and f["worst"][0]["job"] == "1" and f["worst"][0]["drain_per_run"] == 100 / (200 * 10)
    assert rep["drain_unattributed_node_hours"] == pytest.approx(20 / 3600)
    bf = 4 * 1000 + 1 * 40
    assert rep["backfill_efficiency"] == pytest.approx(bf / (bf + 170))


# --- the log reader's block path against a plain reference reader -------------------------

def reference_read(paths):
    """The reader's specification, line by line and nothing else: a node's samples with the
    same status text extend its run; a changed status closes the run at its time; a line
    that does not parse, or whose changed status goes back in time, is malformed."""
    from datetime import datetime
    from hpcsched.drain.moablog import _MARK, _status
    acc, counts = Accounts(), {"lines": 0, "unrelated": 0, "malformed": 0}
    mark = _MARK.encode()

    def close(node, run, t):
        start, _, (c, charge, jobs), _ = run
        if t > start:
            acc.add(c, start, t, node.decode(), charge)
            for j in jobs:
                acc.seen_running[j] = acc.seen_running.get(j, 0.0) + (t - start)
    for path in paths:
        runs = {}
        with open(path, "rb") as f:
            for text in f:
                counts["lines"] += 1
                i = text.find(mark)
                if i < 0:
                    counts["malformed" if b"status:" in text and b"Node '" in text else "unrelated"] += 1
                    continue
                try:
                    d = datetime.fromisoformat(text[:text.find(b" ")].decode())
                    if d.tzinfo is None:
                        raise ValueError
                    if acc.offset is None:
                        acc.offset = d.utcoffset().total_seconds()
                    t = d.timestamp()
                except ValueError:
                    counts["malformed"] += 1
                    continue
                parsed = _status(text[i:])
                if parsed is None or text.rfind(b"Node '", 0, i) < 0:
                    counts["malformed"] += 1
                    continue
                q = text.rfind(b"'", 0, i)
                node, tail = text[q + 1:i], text[q + 1:]
                run = runs.get(node)
                if run is None:
                    runs[node] = [t, t, parsed, tail]
                    acc.nodes.add(node.decode())
                elif tail == run[3]:
                    run[1] = t
                elif t < run[1]:
                    counts["malformed"] += 1
                else:
                    close(node, run, t)
                    runs[node] = [t, t, parsed, tail]
        for node, run in runs.items():
            close(node, run, run[1])
    return acc, counts


def random_log(path, seed):
    """Few nodes, statuses that change and change back, stamps whose second often spans
    iterations, the number after the stamp either the iteration (widening: 999 -> 1000) or
    constant (so a block may hold a node several times), new nodes late, unrelated and
    malformed lines, and changed statuses stamped too early."""
    rng = random.Random(seed)
    nodes = [str(n) for n in range(rng.randint(2, 30))]
    statuses = [("Idle", ["7"], []), ("Idle", [], []), ("Busy", [], ["5"]), ("Busy", ["8", "7"], ["6"]),
                ("Running", ["7"], ["5", "6"]), ("Down", [], []), ("Drained", [], [])]
    now = {n: rng.choice(statuses) for n in nodes}
    constant = seed % 2 == 0
    out, t = [], 1420005600.0 + rng.random() * 50
    for it in range(995, 995 + rng.randint(20, 60)):
        if rng.random() < 0.1:
            nodes.append(f"new{it}")
            now[nodes[-1]] = rng.choice(statuses)
        for n in nodes:
            if rng.random() < 0.15:
                now[n] = rng.choice(statuses)
            stamp_t = t - (30 if rng.random() < 0.02 else 0)  # (now and then, a stamp too early)
            out.append(moablog.line(stamp_t, n, *now[n], offset=-21600, iteration=21166 if constant else it))
            r = rng.random()
            if r < 0.02:
                out.append("Moab: an unrelated line\n")
            elif r < 0.03:
                out.append(out[-1].replace("INFO Node", "INFO Nod"))
            elif r < 0.04:
                out.append("garbage" + out[-1][7:])
            t += 0.0001 if rng.random() < 0.95 else 0.3
        t += rng.choice([0.001, 0.5, 45])
    path.write_text("".join(out))


@pytest.mark.parametrize("block, chunk", [(256, 1 << 20), (16, 300), (1, 1 << 20)])
@pytest.mark.parametrize("seed", range(12))
def test_block_reader_matches_the_reference_reader(tmp_path, monkeypatch, seed, block, chunk):
    monkeypatch.setattr(moablog, "_BLOCK", block)
    monkeypatch.setattr(moablog, "_CHUNK", chunk)
    path = tmp_path / "log"
    random_log(path, seed)
    acc, q = moablog.read([str(path)])
    ref, counts = reference_read([str(path)])
    assert (q.lines, q.unrelated, q.malformed) == (counts["lines"], counts["unrelated"], counts["malformed"])
    assert q.samples == q.lines - q.unrelated - q.malformed and acc.nodes == ref.nodes
    assert acc.days.keys() == ref.days.keys()
    for d in acc.days:
        assert acc.days[d] == pytest.approx(ref.days[d]) and acc.covered[d] == pytest.approx(ref.covered[d])
    assert acc.drain == pytest.approx(ref.drain) and acc.seen_running == pytest.approx(ref.seen_running)


def test_a_status_changed_and_changed_back_within_one_block(tmp_path):
    """Node a goes Idle -> Busy -> Idle inside one block (one second, a constant number after
    the stamp): its third line was looked up before its second moved the run, and must not
    extend the Busy run."""
    t0, path = 1420005600.0, tmp_path / "log"
    states = [("Idle", ["7"], []), ("Busy", [], ["5"]), ("Idle", ["7"], []), ("Idle", ["7"], [])]
    lines = []
    for i, st in enumerate(states):
        lines.append(moablog.line(t0 + i * 0.01, "a", *st, offset=-21600, iteration=21166))
        lines.append(moablog.line(t0 + i * 0.01, "b", "Busy", [], ["5"], offset=-21600, iteration=21166))
    lines.append(moablog.line(t0 + 600, "a", "Idle", ["7"], [], offset=-21600, iteration=21166))
    path.write_text("".join(lines))
    acc, _ = moablog.read([str(path)])
    ref, _ = reference_read([str(path)])
    assert acc.drain == pytest.approx(ref.drain) and acc.drain["7"] == pytest.approx(600 - 0.01)


# --- the sampler: per node (the spec) against counted (the simulator's) ---------------------

def _counted(samples):
    counts, charges = {}, {}
    from hpcsched.drain.accounts import STATES
    for _, state, rsv, jobs in samples:
        c = combo(STATES.index(state), bool(rsv), bool(jobs))
        counts[c] = counts.get(c, 0) + 1
        if state == "Idle" and rsv and not jobs:
            charges[rsv[0]] = charges.get(rsv[0], 0) + 1
    return counts, charges


def _read_as_new(sampler, plan):
    """The reservations `sampler` reads for a tally of `plan`, as (start, id, units),
    checked against what a new sampler reads: what it keeps from plan to plan (the
    reservations by start, the nodes shown on busy nodes) changes nothing."""
    sched = sampler.sched
    avail = sched.topology.available()
    idle = avail ^ (avail & sched.runs.busy)
    read = list(sampler._reservations(plan, idle, new_only=True))
    assert read == list(Sampler(sched)._reservations(plan, idle, new_only=True)), f"pass at {plan.now}"
    return read


def _random_run(seed, depth, shared=False, events=()):
    rng = random.Random(seed)
    sched = scheduler(12, depth=depth, cores=4 if shared else 1, shared=shared)
    sampler = Sampler(sched)
    arrivals, t = [], 0.0
    for i in range(40):
        t += rng.choice([0, 0, 5, 30])
        size = rng.choice([1, 2, 3, 6, 12])
        req = Request(cores=size * 2) if shared and rng.random() < 0.5 else Request(nodes=size)
        arrivals.append((t, Job(owner="u", request=req, walltime=float(rng.choice([50, 100, 400]))),
                         float(rng.choice([10, 50, 100])), i))
    seen = []

    def check(plan):
        samples = sampler.samples(plan)
        tally = sampler.tally(plan)
        assert tally == _counted(samples), f"pass at {plan.now}"
        # what it reads of the reservations, and the units it shows them on, kept from plan
        # to plan, are what a new sampler reads and shows
        assert Sampler(sched).tally(plan) == tally, f"pass at {plan.now}"
        _read_as_new(sampler, plan)
        seen.append(samples)
    Engine(sched).run(arrivals, events=list(events), watch=check)
    return seen


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("depth", [0, 1, 3, ALL])
@pytest.mark.parametrize("seed", range(6))
def test_tally_counts_what_the_samples_say(seed, depth, shared):
    """(On shared nodes, counts of cores held beside reservations of whole chunks, some of
    which come to their start unable to begin: shown from now.)"""
    seen = _random_run(seed, depth, shared=shared)
    drained = any(s == "Idle" and r for pic in seen for _, s, r, _ in pic)
    # (no reservations, no drain; a shared node waiting for a reservation often runs a job)
    assert drained == (depth > 0) if not shared else depth > 0 or not drained


def test_tally_on_shared_nodes_down_offline_and_site_reservations():
    def down(sched, now):
        sched.set_node_state("n03", NodeState.DOWN)
        sched.set_node_state("n04", NodeState.OFFLINE)

    def maintenance(sched, now):
        sched.add_reservation(Reservation("pm", start=now + 100, duration=200, nodes=("n05", "n06")), now)
    for seed in range(4):
        seen = _random_run(seed, 1, shared=seed % 2 == 1, events=[(20.0, down), (25.0, maintenance)])
        states = {s for pic in seen for _, s, _, _ in pic}
        assert {"Down", "Idle"} <= states and states & {"Drained", "Draining"}
        assert any("pm" in r for pic in seen for _, _, r, _ in pic)


def test_a_blue_gene_is_counted_in_nodes_of_its_boards_not_its_cables():
    """Boards stand for 32 nodes each; cables held by jobs and reservations count nothing."""
    sched = build({"machine": "bgq-1rack", "queues": {"batch": {}}, "backfill": "conservative"})
    rec = Recorder(sched, Accounts())
    assert rec.sampler.weight == 32 and rec.accounts.node_count == 1024
    rng = random.Random(3)
    arrivals = [(10.0 * i, Job(owner="u", request=Request(nodes=rng.choice([100, 300, 512, 1024])),
                               walltime=float(rng.choice([100, 400]))), float(rng.choice([50, 100])), i)
                for i in range(30)]
    drained = []

    def check(plan):
        assert rec.sampler.tally(plan) == _counted(rec.sampler.samples(plan))  # 32 boards
        rec.watch(plan)
        counts, charges = rec.picture
        assert sum(counts.values()) == 1024  # every node of the rack, once
        assert sum(charges.values()) == counts.get(DRAIN, 0)
        drained.append(counts.get(DRAIN, 0))
    Engine(sched).run(arrivals, watch=check)
    assert any(drained)  # (a 1,024-node job waits for the whole rack: boards sit drained)


def test_held_reservations_are_shown_on_busy_nodes_first():
    """Conservative holds counts: a 4-node reservation on 4 nodes freed later, not on idle ones."""
    sched = scheduler(6, depth=ALL)
    sampler = Sampler(sched)
    sched.submit(Job(owner="u", request=Request(nodes=4), walltime=100.0), 0.0)
    sched.submit(Job(owner="u", request=Request(nodes=6), walltime=100.0), 0.0)
    plan = sched.iterate(0.0)
    assert plan.held == {2: 6}
    (c, ch) = sampler.tally(plan)
    assert ch == {"2": 2} and c[DRAIN] == 2  # the two idle nodes wait for job 2


def test_a_count_shown_on_busy_nodes_moves_with_them_at_the_same_start():
    """Counts keep their start while the nodes busy now and free by then change (a job
    backfilled onto nodes an early end left idle), or while the count shown there changes
    (the larger one deleted): the tally shows each on the lowest of those nodes as they
    are now, not as they were last pass."""
    def shown(arrivals, events=()):
        sched = scheduler(8, depth=ALL)
        sampler, out = Sampler(sched), {}

        def check(plan):
            out[plan.now] = _read_as_new(sampler, plan)
        Engine(sched).run([(t, Job(owner="u", request=Request(nodes=n), walltime=wall), run, i)
                           for i, (t, n, wall, run) in enumerate(arrivals)], events=list(events), watch=check)
        return out
    nodes = scheduler(8).topology.units_of_nodes

    backfilled = shown([(0.0, 2, 1000.0, 10.0),  # n00-n01, ends early
                        (0.0, 4, 100.0, 100.0),  # n02-n05 until 100
                        (0.0, 2, 1000.0, 1000.0),  # n06-n07
                        (0.0, 3, 500.0, 500.0),  # job 4: waits for 100
                        (10.0, 2, 50.0, 50.0)])  # backfills onto n00-n01 until 60
    assert backfilled[0.0] == [(100.0, "4", nodes(["n02", "n03", "n04"]))]
    assert backfilled[10.0] == [(100.0, "4", nodes(["n00", "n01", "n02"]))]
    deleted = shown([(0.0, 4, 100.0, 100.0),  # n00-n03 until 100
                     (0.0, 4, 1000.0, 1000.0),  # n04-n07
                     (0.0, 3, 500.0, 500.0),  # job 3: waits for 100
                     (0.0, 1, 500.0, 500.0)],  # job 4: so does it (shown under job 3's)
                    events=[(20.0, lambda sched, now: sched.delete(3, now))])
    assert deleted[0.0] == [(100.0, "3", nodes(["n00", "n01", "n02"]))]
    assert deleted[20.0] == [(100.0, "4", nodes(["n00"]))]


# --- the three sources -------------------------------------------------------------------

def test_logs_written_by_a_run_give_the_runs_own_accounts(tmp_path):
    """The simulator's direct accumulators and the analysis of the logs it writes agree."""
    for depth in (1, ALL):
        sched = scheduler(16, depth=depth)
        direct = Accounts()
        writer = moablog.DailyWriter(tmp_path / f"d{depth}", offset=0.0)
        rec = Recorder(sched, direct, epoch=1420070400.0, log=writer)  # 2015-01-01T00:00Z
        rng = random.Random(depth)
        arrivals = [(float(i * 7), Job(owner="u", request=Request(nodes=rng.choice([1, 3, 8, 16])),
                                       walltime=300.0), float(rng.choice([30, 300])), i) for i in range(60)]
        Engine(sched).run(arrivals, watch=rec.watch)
        assert rec.accounts is direct  # (read through the recorder: the last picture accrued)
        writer.close()
        files = sorted(str(p) for p in (tmp_path / f"d{depth}").iterdir())
        assert len(files) == 1
        logged, q = moablog.read(files)
        assert q.malformed == 0 and q.samples == 16 * rec.passes
        assert logged.days.keys() == direct.days.keys()
        for d in direct.days:
            assert logged.days[d] == pytest.approx(direct.days[d])
        assert logged.drain == pytest.approx(direct.drain)
        assert direct.drain  # (there was drain to compare)


def test_simulate_reports_drain(tmp_path):
    jobs = [record(1, 0, 2, 100, 100), record(2, 0, 4, 100, 100), record(3, 10, 1, 20, 20)]
    r = simulate(jobs, nodes=4, drain=True)
    # two nodes wait 100 s for job 2; job 3 backfills on one of them for 20 s
    assert r.drain["drain_node_hours"] == pytest.approx((2 * 100 - 20) / 3600)
    # by size in the classes of the waits that fit a machine of 4 (not Blue Waters' 1-128, 129-999, ...)
    assert [g["group"] for g in r.drain["by_size"]] == ["1", "2+"]
    assert r.drain["by_size"][1]["drained_jobs"] == 1  # (job 2, 4 nodes)
    assert [g["group"] for g in simulate(jobs, nodes=4, size_classes=[1, 3], drain=True).drain["by_size"]] == ["1-2", "3+"]
    assert "drain time" in r.summary()
    data = r.to_json()
    assert data["drain"]["drain_pct"] == r.drain["drain_pct"]
    assert simulate(jobs, nodes=4, drain=False).drain is None


def test_drain_command(tmp_path, logs):
    acct = tmp_path / "acct"
    acct.write_text("12/31/2014 00:10:00;S;7.bw;user=a Resource_List.nodect=2 start=1420006200\n"
                    "01/01/2015 00:11:00;S;7.bw;user=a Resource_List.nodect=2 start=1420092660\n")
    env = dict(os.environ, PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-m", "hpcsched.cli", "drain", *logs, "--jobs", str(acct), "--json"],
                         capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    rep = json.loads(out.stdout)
    assert rep["quality"]["malformed"] == 1 and "malformed" in out.stderr
    assert rep["drain_unattributed_node_hours"] == 0 and rep["by_size"][0]["drained_jobs"] == 1
    text = subprocess.run([sys.executable, "-m", "hpcsched.cli", "drain", *logs], capture_output=True, text=True,
                          env=env)
    assert text.returncode == 0 and "drain time:" in text.stdout and "2014-12-31" in text.stdout
    broken = tmp_path / "broken.gz"
    broken.write_bytes(b"not gzip")
    said = re.search(r"drain by job size, sizes from the logs' job lists: ([\d.,]+) nh of drain charged to job ids, "
                     r"(all|of which) ([\d.,]+) nh to ids no job record names", text.stdout)
    assert said and said.group(2) == ("all" if said.group(1) == said.group(3) else "of which"), text.stdout
    truncated = tmp_path / "cut.log.gz"  # (a gzip stream cut short: EOFError, which has no strerror)
    truncated.write_bytes(gzip.compress(b"x" * 1000)[:20])
    for args, code in (([str(tmp_path / "nope")], 1), ([logs[0], "--groups", "x"], 2), ([str(broken)], 1),
                       ([str(truncated)], 1), ([logs[0], "--jobs", str(truncated)], 1),
                       ([logs[0], "--jobs", logs[0]], 1), ([logs[0], "--jobs", str(tmp_path / "none")], 1),
                       ([logs[0], "--jobs", str(broken)], 1)):
        bad = subprocess.run([sys.executable, "-m", "hpcsched.cli", "drain", *args], capture_output=True,
                             text=True, env=env)
        assert bad.returncode == code and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
        assert "Traceback" not in bad.stderr and (code == 2 or str(tmp_path) in bad.stderr or logs[0] in bad.stderr)
        assert "Traceback" not in bad.stderr and (code == 2 or args[-1].split("/")[-1] in bad.stderr), bad.stderr
        assert "Errno" not in bad.stderr, bad.stderr


def test_drain_skip_bad_passes_over_job_records_that_do_not_parse_and_names_them(tmp_path, logs):
    # (one damaged line of a site's accounting log refused the whole log; as simulate
    # --skip-bad does for a trace, drain --skip-bad passes over it and says so)
    acct = tmp_path / "acct"
    acct.write_text("12/31/2014 00:10:00;S;7.bw;user=a Resource_List.nodect=2 start=1420006200\n"
                    "garbled line\n"
                    "12/31/2014 00:12:00;E;8.bw;user=a start=soon end=1420006400\n")
    swf = tmp_path / "t.swf"
    swf.write_text("; UnixStartTime: 1000\n1 0 5 10 8 -1 -1 8 20 -1 1 1 1 -1 1 -1 -1 -1\n2 x\n")
    env = dict(os.environ, PYTHONPATH=ROOT)
    run = [sys.executable, "-m", "hpcsched.cli", "drain", *logs, "--jobs", str(acct), "--jobs", str(swf)]
    refused = subprocess.run(run, capture_output=True, text=True, env=env)
    assert refused.returncode == 1 and refused.stderr == f"hpcsched drain: {acct}:2: not <date>;<type>;<job id>;<attributes>\n"
    out = subprocess.run([*run, "--skip-bad", "--json"], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    rep = json.loads(out.stdout)
    first, second, third = rep["quality"]["job_lines_skipped"]
    assert (first, second) == (f"{acct}:2: not <date>;<type>;<job id>;<attributes>",
                               f"{acct}:3: a number that does not parse")
    assert third.startswith(f"{swf}: 1 malformed line (the first: line 3") and third.endswith(")")
    assert rep["by_size"][0]["drained_jobs"] == 1  # (job 7, read from the good line)
    assert out.stderr.count("hpcsched drain: skipped: ") == 3
    text = subprocess.run([*run, "--skip-bad"], capture_output=True, text=True, env=env)
    assert text.returncode == 0 and "; skipped 3 malformed job records" in text.stdout


def test_records_readers(tmp_path):
    res = tmp_path / "results.json"
    res.write_text(json.dumps({"epoch": 100, "jobs": [{"job": 4, "size": 3, "start": 10, "end": 20,
                                                       "backfill": True}]}))
    assert records.read(str(res)) == {"4": JobRecord("4", 3, 110.0, 120.0, True)}
    swf = tmp_path / "t.swf"
    swf.write_text("; UnixStartTime: 1000\n1 0 5 10 8 -1 -1 8 20 -1 1 1 1 -1 1 -1 -1 -1\n")
    assert records.read(str(swf), lambda p, skipped: swf_job_records(p, skipped, ppn=4)) == {"1": JobRecord("1", 2, 1005.0, 1015.0)}
    with pytest.raises(ValueError):
        records.read(str(swf))


@pytest.mark.skipif(not os.path.exists(KTH), reason="KTH trace not present")
def test_kth_replay_accounts_every_node_second():
    r = simulate(KTH, nodes=100, drain=True)
    d = r.drain
    assert d["nodes"] == 100
    shares = d["drain_pct"] + d["unallocated_idle_pct"] + d["down_pct"] + d["utilization_pct"]
    assert shares == pytest.approx(100.0)  # every node-second is in exactly one of them
    assert 0 < d["drain_pct"] < 50
    assert d["backfill_efficiency"] is not None and 0 < d["backfill_efficiency"] < 1


def test_without_job_records_a_jobs_size_is_the_nodes_the_logs_ran_it_on(tmp_path):
    """`hpcsched drain LOGS` alone: job 7, drained on two nodes and then run on both, has
    size 2 (not 1) in the by-size table and among the jobs drained most per node."""
    t = 1_700_000_000
    lines = []
    for k in range(10):
        for node in ("n1", "n2"):
            lines.append(moablog.line(t + 60 * k, node, "Idle" if k < 5 else "Busy",
                                      ["7"] if k < 5 else [], [] if k < 5 else ["7"]))
    (tmp_path / "day.log").write_text("".join(lines))
    accounts, _ = moablog.read([str(tmp_path / "day.log")])
    assert accounts.seen_on == {"7": {"n1", "n2"}}
    rep = accounts.report(groups=(("1", 1), ("2+", 2)))
    assert rep["sizes_from"] == "the logs' job lists"
    assert [(g["group"], g["jobs"], g["drained_jobs"]) for g in rep["by_size"]] == [("1", 0, 0), ("2+", 1, 1)]
    assert rep["sliding"][0]["size"] == 2 and rep["sliding"][0]["drain_per_node_s"] == 300
