"""The trace simulator: SWF in, schedule and metrics out, on the scheduling core."""
import collections
import gc
import gzip
import io
import json
import os
import random
import re
import subprocess
import sys
import tomllib

import pytest
from oracle import naive_conservative, naive_easy

from hpcsched.sim import swf
from hpcsched.sim.engine import SimulationError
from hpcsched.sim.simulate import Machine, MapStats, TraceMap, map_record, record, simulate
from hpcsched.sim.testing import assert_schedule

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRACES = os.path.join(ROOT, "..", "shared", "traces")
KTH = os.path.join(TRACES, "KTH-SP2-1996-2.1-cln.swf.gz")

HEADER = """; Version: 2.2
; Computer: Test rig
;       MaxNodes: 8
; MaxProcs: 8
; UnixStartTime: 1000000
; TimeZoneString: Europe/Paris
; Note: first note
; Note: second note
"""
LINES = [
    "1 0 -1 100 4 -1 -1 4 120 -1 1 1 1 -1 1 -1 -1 -1",
    "2 10 -1 50 8 -1 -1 8 60 -1 1 2 1 -1 1 -1 -1 -1",
    "3 20 -1 30 2 -1 -1 2 -1 -1 1 1 1 -1 2 -1 -1 -1",   # no request: run time is the estimate
    "4 20 -1 500 2 -1 -1 2 100 -1 0 3 1 -1 2 -1 -1 -1",  # ran past its request: cut at 100
    "5 25 -1 -1 2 -1 -1 2 100 -1 5 3 1 -1 2 -1 -1 -1",   # never ran
    "6 30 -1 10 16 -1 -1 16 100 -1 1 3 1 -1 2 -1 -1 -1",  # larger than the machine
    "7 31 -1 10.5 -1 -1 -1 1 100 -1 1 3 1 -1 2 -1 -1 -1",  # allocated unknown: requested used
]


def write_trace(tmp_path, lines=LINES, gz=False, name="t.swf"):
    path = tmp_path / (name + (".gz" if gz else ""))
    text = HEADER + "\n".join(lines) + "\n"
    if gz:
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)
    return str(path)


@pytest.mark.parametrize("gz", [False, True])
def test_reader_streams_records_and_header(tmp_path, gz):
    path = write_trace(tmp_path, gz=gz)
    h = swf.header(path)
    assert h.max_nodes == 8 and h.max_procs == 8 and h.unix_start_time == 1000000
    assert h.time_zone == "Europe/Paris" and h.fields["note"] == ["first note", "second note"]
    recs = list(swf.read(path))
    assert len(recs) == 7 and recs[0].job == 1 and recs[6].run == 10.5 and recs[6].procs == -1
    assert isinstance(recs[0].procs, int) and isinstance(recs[0].submit, float)


def test_malformed_line_is_reported_or_skipped(tmp_path):
    short = "3 20 -1 30 2 -1"
    word = "4 x -1 1 1 -1 -1 1 1 -1 1 1 1 -1 1 -1 -1 -1"
    path = write_trace(tmp_path, LINES[:2] + [short] + LINES[3:4] + [word])
    with pytest.raises(swf.SwfError, match="line 11: expected 18 fields, found 6"):
        list(swf.read(path))
    stats = swf.ReadStats()
    assert [r.job for r in swf.read(path, skip_bad=True, stats=stats)] == [1, 2, 4]
    assert stats.skipped == 2 and "line 11" in stats.first_bad
    path = write_trace(tmp_path, LINES[:1] + [word], name="w.swf")
    with pytest.raises(swf.SwfError, match="line 10: field submit is not a number: 'x'"):
        list(swf.read(path))


def test_mapping_counts_every_adjustment():
    stats = MapStats()
    m = Machine(8)
    out = [map_record(swf.parse_line(line, i), m, stats) for i, line in enumerate(LINES, 1)]
    assert out[2][1] == 30.0 and out[3][1:] == (100.0, 100.0)
    assert out[4] is None and out[5] is None and out[6][0].nodes == 1
    assert (stats.estimate_from_run, stats.cut_at_request, stats.skipped_never_ran,
            stats.skipped_too_large, stats.simulated) == (1, 1, 1, 1, 5)
    whole = map_record(swf.parse_line(LINES[0], 1), Machine(4, ppn=4), MapStats())
    assert whole[0].nodes == 1 and whole[0].ppn == 4
    shared = map_record(swf.parse_line(LINES[0], 1), Machine(2, ppn=4, shared=True), MapStats())
    assert shared[0].cores == 4


def test_simulation_by_hand(tmp_path):
    # 8 processors; estimates are what EASY plans with, run times what happens.
    # t=0  job 1 (4 procs, est 120, runs 100) starts.
    # t=10 job 2 (8 procs) cannot: reserved at job 1's expected end, 120; extra = 0.
    # t=20 job 3 (2, est 30) ends by 50 <= 120: backfills.  Job 4 (2, est 100, killed at
    #      its request 100) ends by 120 <= 120: backfills too.  The machine is full.
    # t=31 job 7 (1 proc, est 100): nothing free.  At 50 and 100 it would end after the
    #      shadow (120) and there is no extra: it waits.
    # t=120 job 4 ends: job 2 starts, runs 50; t=170 job 7 starts, runs 10.5.
    r = simulate(write_trace(tmp_path))
    assert r.start_times() == {1: 0, 2: 120, 3: 20, 4: 20, 7: 170}
    assert r.metrics.jobs == 5 and r.metrics.makespan == 180.5
    busy = 4 * 100 + 8 * 50 + 2 * 30 + 2 * 100 + 1 * 10.5
    assert r.metrics.utilization == pytest.approx(busy / (8 * 180.5))
    assert r.metrics.overall["wait"]["max"] == 139 and r.metrics.backfill_share == pytest.approx(2 / 5)
    assert r.metrics.overall["wait"]["median"] == 0
    assert set(r.metrics.by_queue) == {"batch"}  # the routed queue, not the trace's number
    text = r.summary()
    assert "1 cut at their requested time" in text and "bsld = max(1, response / max(run, 10 s))" in text


def test_schedule_writer_round_trips(tmp_path):
    r = simulate(write_trace(tmp_path))
    buf = io.StringIO()
    assert r.write_swf(buf) == 5
    out = tmp_path / "sched.swf"
    out.write_text(buf.getvalue())
    back = {rec.job: rec for rec in swf.read(str(out))}
    assert back[7].wait == 139 and back[4].run == 100 and back[2].wait == 110
    assert swf.header(str(out)).unix_start_time == 1000000


@pytest.mark.parametrize("jobs", [0, 1, 5])
def test_results_json_holds_exactly_the_result(tmp_path, jobs):
    r = simulate(write_trace(tmp_path))
    del r.jobs[jobs:]
    buf = io.StringIO()
    r.write_json(buf)
    assert json.loads(buf.getvalue()) == r.to_json()
    assert len(r.to_json()["jobs"]) == jobs


def test_same_trace_same_schedule(tmp_path):
    path = write_trace(tmp_path)
    a, b = simulate(path, policy="cobalt", period=15), simulate(path, policy="cobalt", period=15)
    assert a.to_json() == b.to_json()


@pytest.mark.parametrize("enabled", [True, False])
def test_cycle_collector_paused_for_the_replay_and_restored(enabled):
    seen = []
    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        simulate([record(1, 0, 1, 10), record(2, 5, 1, 10)], nodes=1,
                 progress=lambda *_: seen.append(gc.isenabled()))
        assert gc.isenabled() is enabled
    finally:
        gc.enable() if was else gc.disable()
    assert seen and not any(seen)


@pytest.mark.parametrize("policy, backfill", [("fifo", "easy"), ("fifo", "conservative"), ("fifo", "depth=2"),
                                             ("cobalt", "easy"), ("simon", "easy"), ("ccin2p3", "easy")])
def test_a_replay_leaves_nothing_of_its_passes_to_the_cycle_collector(policy, backfill):
    """The replay pauses the cycle collector, so a pass that left a cycle behind kept it
    to the end: every conservative pass's profile, masks and all, did (gigabytes on
    RICC).  Twice the jobs on the same machine and users: the same garbage."""
    rng = random.Random(3)
    recs, t = [], 0.0
    for i in range(1, 301):
        t += rng.choice([0, 10, 60])
        run = rng.randrange(1, 3000)
        recs.append(record(i, t, rng.choice([1, 2, 4, 8]), run, run + rng.randrange(0, 3000)))
    with open(os.path.join(ROOT, "examples", "ccin2p3.toml"), "rb") as f:
        site = tomllib.load(f)
    found = []
    for n in (150, 300):
        gc.collect()
        gc.set_debug(gc.DEBUG_SAVEALL)  # (what the collector finds is kept, to be counted)
        try:
            if policy == "ccin2p3":  # (the share tree, usage and quotas of examples/ccin2p3.toml)
                simulate(recs[:n], config=site, nodes=16)
            else:
                simulate(recs[:n], policy=policy, backfill=backfill, nodes=16)
            gc.collect()
            # (the scheduler's own state is freed with it; the counts its last pass held are
            # Kept tuples the collector tracks, as many as that pass kept: state, not garbage
            # passes left, so not compared)
            found.append(collections.Counter(type(o).__name__ for o in gc.garbage if type(o).__name__ != "Kept"))
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
    assert found[0] == found[1]
    assert found[1]["Profile"] <= 1  # (the scheduler's own, freed with it)


@pytest.mark.parametrize("policy", ["fifo", "cobalt", "simon"])
@pytest.mark.parametrize("backfill", ["none", "easy", "conservative", "depth=2"])
def test_every_policy_and_backfill_runs_to_completion(policy, backfill):
    rng = random.Random(7)
    recs, t = [], 0.0
    for i in range(1, 150):
        t += rng.choice([0, 10, 60, 300])
        run = rng.randrange(1, 3000)
        recs.append(record(i, t, rng.choice([1, 2, 4, 8, 16, 32]), run, run + rng.randrange(0, 600)))
    r = simulate(recs, policy=policy, backfill=backfill, nodes=32)
    assert_schedule(r, min_utilization=0.3)
    assert r.metrics.jobs == 149


def test_assert_schedule_reports_the_broken_bound():
    r = simulate([record(1, 0, 2, 100, 100), record(2, 0, 2, 100, 100)], nodes=2)
    assert_schedule(r, max_wait=100, min_utilization=0.99)
    with pytest.raises(AssertionError, match="job 2 waited 100 s > max_wait 50 s"):
        assert_schedule(r, max_wait=50)
    with pytest.raises(AssertionError, match="mean wait 50 is not <= 10"):
        assert_schedule(r, max_mean_wait=10)


def oracle_jobs(records, machine):
    """The oracle's own, separately written view of the mapping rules."""
    jobs, ids = [], []
    for r in records:
        procs = r.procs if r.procs > 0 else r.req_procs
        if procs <= 0 or r.run < 0 or procs > machine:
            continue
        est = max(r.req_time if r.req_time > 0 else r.run, 1.0)
        jobs.append((r.submit, procs, est, min(r.run, est)))
        ids.append(r.job)
    return jobs, ids


@pytest.mark.skipif(not os.path.exists(KTH), reason="../shared/traces is not beside the checkout")
@pytest.mark.parametrize("backfill, reference", [("easy", naive_easy), ("conservative", naive_conservative)])
def test_backfill_matches_the_naive_oracle_on_kth(backfill, reference):
    records = []
    for rec in swf.read(KTH):
        records.append(rec)
        if len(records) == 2000:
            break
    r = simulate(records, nodes=100, backfill=backfill)
    jobs, ids = oracle_jobs(records, 100)
    expected = {ids[i]: t for i, t in reference(jobs, 100).items()}
    assert r.start_times() == expected
    assert len(expected) > 1990


@pytest.mark.parametrize("fractional", [False, True])
@pytest.mark.parametrize("seed", range(8))
def test_easy_matches_the_naive_oracle_on_random_workloads(seed, fractional):
    """Whole seconds, and tenths of a second (SWF allows them: ends that meet a shadow
    exactly, though `shadow - now` is a hair short, are EASY's to backfill); a few
    requests past a year, whose reservations are held however far ahead they end."""
    rng = random.Random(seed)
    records, t = [], 0.0
    tenth = (lambda x: round(x + rng.choice([0.1, 0.3, 0.7, 0.9, 1.6, 2.9]), 1)) if fractional else (lambda x: x)
    for i in range(1, 400):
        t = tenth(t + rng.choice([0, 0, 1, 30, 200, 900]))
        run = tenth(rng.choice([0, 5, 60, 600, 3600, 7200]))
        req = rng.choice([-1, run, tenth(run * 2 + 1), tenth(max(1, run // 2))])
        req = 32_400_000 if rng.random() < 0.02 else req  # (requests past a year: held all the same)
        records.append(record(i, t, rng.randint(1, 64), run, req))
    r = simulate(records, nodes=64)
    jobs, ids = oracle_jobs(records, 64)
    assert r.start_times() == {ids[i]: t for i, t in naive_easy(jobs, 64).items()}


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "hpcsched", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def test_cli_writes_summary_json_and_swf(tmp_path):
    path = write_trace(tmp_path)
    out = tmp_path / "out"
    p = run_cli("simulate", path, "--backfill", "conservative", "--out", str(out))
    assert p.returncode == 0, p.stderr
    assert "utilization" in p.stdout and p.stderr == ""  # no progress line off a terminal
    data = json.loads((out / "results.json").read_text())
    assert data["backfill"] == "conservative" and len(data["jobs"]) == 5
    assert isinstance(data["metrics"]["utilization"], float)
    assert len(list(swf.read(str(out / "schedule.swf")))) == 5


def test_cli_whose_reader_left_writes_its_files_and_ends_quietly(tmp_path):
    # `hpcsched simulate ... | head` where head has gone: the files are still written, and a
    # closed stdout is no error (it was "hpcsched simulate: : Broken pipe", exit 1, no files)
    path = write_trace(tmp_path)
    out = tmp_path / "out"
    p = subprocess.Popen([sys.executable, "-m", "hpcsched", "simulate", path, "--out", str(out)], cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    p.stdout.close()  # (the reader goes before anything is written)
    err = p.stderr.read()
    assert p.wait(timeout=120) == 0 and err == ""
    assert len(json.loads((out / "results.json").read_text())["jobs"]) == 5
    assert len(list(swf.read(str(out / "schedule.swf")))) == 5


@pytest.mark.parametrize("args,code,msg", [
    (["simulate", "nope.swf"], 1, "nope.swf: no such file"),
    (["simulate", "X", "--backfill", "maybe"], 2, "backfill: 'maybe' is not none"),
    (["simulate", "X", "--policy", "lottery"], 2, "invalid choice"),
    (["simulate", "X", "--nodes", "0"], 2, "--nodes, --ppn and --cores must be at least 1"),
    (["simulate", "X", "--groups", "5,1"], 2, "--groups: give increasing lowest sizes"),  # (not sorted silently)
    # (the config's rule for server_interval and kill_grace; a server at interval nan never stepped)
    (["server", "--interval", "-1"], 2, "--interval must be a positive number of seconds"),
    (["server", "--once", "--interval", "nan"], 2, "--interval must be a positive number of seconds"),
    (["server", "--grace", "0"], 2, "--grace must be a positive number of seconds"),
    (["server", "--grace", "inf"], 2, "--grace must be a positive number of seconds"),
    (["drain", "X", "--gap", "-1"], 2, "--gap must be a non-negative number of seconds"),
    (["drain", "X", "--gap", "nan"], 2, "--gap must be a non-negative number of seconds"),
    (["drain", "X", "--top", "-1"], 2, "--top a count of at least 0"),
    (["frobnicate"], 2, "invalid choice")])
def test_cli_usage_errors(args, code, msg):
    p = run_cli(*args)
    assert p.returncode == code and msg in p.stderr and p.stderr.count("\n") == 1
    assert "Traceback" not in p.stderr


def test_cli_bad_trace_line_is_one_line_error(tmp_path):
    path = write_trace(tmp_path, LINES + ["8 40 -1 10 1 -1"])
    p = run_cli("simulate", path)
    assert p.returncode == 1 and "line 16: expected 18 fields, found 6" in p.stderr
    assert p.stderr.count("\n") == 1
    p = run_cli("simulate", path, "--skip-bad")
    assert p.returncode == 0 and "1 malformed lines" in p.stdout


@pytest.mark.parametrize("line,what", [
    ("8 1e30 -1 10 1 -1 -1 1 100 -1 1 1 1 -1 1 -1 -1 -1", "job 8: submit time 1e+30 s is out of range"),
    ("8 40 -1 1e30 1 -1 -1 1 1e30 -1 1 1 1 -1 1 -1 -1 -1", "job 8: run time 1e+30 s is out of range"),
    ("8 40 -1 3e9 1 -1 -1 1 -1 -1 1 1 1 -1 1 -1 -1 -1", "job 8: run time 3e+09 s is out of range")])
def test_a_record_past_68_years_is_one_line_error_not_a_replay_that_never_ends(tmp_path, line, what):
    # (the drain accounts walk day by day: a submit time of 1e30 s hung the replay)
    p = run_cli("simulate", write_trace(tmp_path, LINES + [line]))
    assert p.returncode == 1 and what in p.stderr and p.stderr.count("\n") == 1, p.stderr
    first = [record(1, -3e9, 1, 10.0)] + [record(2, 0.0, 1, 10.0)]  # (the library refuses it too)
    with pytest.raises(SimulationError, match="job 1: submit time -3e[+]09 s is out of range"):
        simulate(first, nodes=4)


@pytest.mark.parametrize("config,message", [
    ("priority = 5", "priority: must be a table"),  # (these two were tracebacks)
    ("reservations = 5", "reservations: must be a list of [[reservations]] tables")])
def test_a_config_of_the_wrong_shape_is_one_line_error(tmp_path, config, message):
    (tmp_path / "site.toml").write_text(config + "\n")
    for policy in ((), ("--policy", "fifo")):
        p = run_cli("simulate", write_trace(tmp_path), "--config", str(tmp_path / "site.toml"), *policy)
        assert p.returncode == 1 and message in p.stderr and p.stderr.count("\n") == 1, p.stderr


def test_a_record_at_the_bound_replays():
    res = simulate([record(1, 0.0, 1, 10.0, req_time=2.0 ** 40), record(2, 2.0 ** 31 - 1, 1, 2.0 ** 31 - 1)],
                   nodes=4, series_step=86400.0 * 365)
    assert [(j.start, j.end) for j in res.jobs] == [(0.0, 10.0), (2.0 ** 31 - 1, 2.0 ** 32 - 2)]


def test_cli_library_demo_runs():
    p = run_cli("demo", "--library")
    assert p.returncode == 0 and "prod-long" in p.stdout and "(backfill)" in p.stdout


def test_cli_demo_runs_on_the_four_rack_blue_gene():
    p = run_cli("demo", "--machine", "bgq-4rack")
    assert p.returncode == 0, p.stderr
    assert "start 1 big-sim     on BGQ-0000-1142-4096" in p.stdout  # 3,072 nodes get the 4K block
    assert "5 short-b       768 nodes 02:00:00 -> prod-capability" in p.stdout  # its 1K block is 25 %
    assert run_cli("demo", "--machine", "nope").returncode == 2


def test_cli_live_demo_runs_real_jobs_and_cleans_up():
    p = run_cli("demo")
    assert p.returncode == 0, p.stderr
    assert "sweep.o2-4: task 4 of 2[4]" in p.stdout and "released and run" in p.stdout
    final = p.stdout.split("(finished:")[1].split("job output files")[0]
    rows = [l.split() for l in final.splitlines() if l[:1].isdigit()]
    assert len(rows) == 7 and all(r[4] == "C" for r in rows)
    assert re.search(r" E 3\.\S+ +exit=0", p.stdout)  # the dependent job (3: the array took one number) ran


def test_simulate_groups_the_drain_by_size_as_asked(tmp_path):
    """--groups sets the drain table's job-size groups (it was parsed and ignored)."""
    path = write_trace(tmp_path)
    p = run_cli("simulate", path, "--groups", "1,3", "--drain", "--quiet")
    assert p.returncode == 0, p.stderr
    rows = [line.split()[0] for line in p.stdout.split("drain by job size")[1].splitlines()[2:4]]
    assert rows == ["1-2", "3+"]


def test_drain_accounting_is_opt_in_and_the_summary_says_so(tmp_path):
    """A replay accounts drain time only when asked (--drain, drain = true, drain=True):
    it costs about a tenth of a replay (benchmarks/versus.py); without it the summary says
    how to ask, and --no-drain (the default) is still accepted."""
    path = write_trace(tmp_path)
    for extra in ([], ["--no-drain"]):
        p = run_cli("simulate", path, "--quiet", *extra)
        assert p.returncode == 0 and "drain by job size" not in p.stdout
        assert p.stdout.rstrip().endswith("drain time: not accounted (opt-in: hpcsched simulate --drain, "
                                          "drain = true in a replay file)")
    p = run_cli("simulate", path, "--quiet", "--drain")
    assert p.returncode == 0 and "drain by job size" in p.stdout and "not accounted" not in p.stdout
    p = run_cli("simulate", path, "--quiet", "--drain", "--no-drain")
    assert p.returncode == 2 and "not allowed with argument" in p.stderr
    assert simulate(path, drain=False).drain is None and simulate(path).drain is None
    assert simulate(path, drain=True).drain is not None


def test_load_compresses_the_arrivals_and_keeps_the_jobs():
    """--load F divides every gap since the first submission by F (Feitelson's load
    scaling): the same jobs, arriving F times as densely; the schedule's SWF gives the
    moved submit times."""
    from hpcsched.sim.run import replay
    jobs = [record(1, 100, 4, 50, 60), record(2, 300, 4, 50, 60), record(3, 700, 2, 10, 20)]
    normal = simulate(jobs, nodes=4, drain=False)
    dense = simulate(jobs, nodes=4, drain=False, trace_map=TraceMap(load=2.0))
    assert [f.submit for f in normal.jobs] == [100, 300, 700]
    assert sorted(f.submit for f in dense.jobs) == [100, 200, 400]
    assert sorted(f.run for f in dense.jobs) == sorted(f.run for f in normal.jobs)
    assert sorted(f.as_record().submit for f in dense.jobs) == [100, 200, 400]
    assert dense.to_json()["trace_map"]["load"] == 2.0
    with pytest.raises(SimulationError, match="load 0: a factor from 0.01 to 100"):
        TraceMap(load=0)
    with pytest.raises(SimulationError, match="load: -1: must be a factor"):
        replay({"trace": "x.swf", "load": -1})
    assert min(f.wait for f in dense.jobs) >= 0 and dense.metrics.overall["wait"]["mean"] >= 0  # (from the moved submit)
    assert dense.metrics.overall["wait"]["mean"] == sum(f.start - f.submit for f in dense.jobs) / 3


def test_a_replay_keeps_usage_only_for_a_policy_that_reads_it(tmp_path, monkeypatch):
    """Nothing in a replay's results reads usage: a policy that reads none charges none as
    jobs start and end (what is switched off costs nothing), one that does charges it."""
    import hpcsched.sim.simulate as sim
    built = []

    def build(*args, **kwargs):
        built.append(sim_build(*args, **kwargs))
        return built[-1]
    sim_build = sim.build
    monkeypatch.setattr(sim, "build", build)
    path = write_trace(tmp_path)
    fifo, fair = simulate(path), simulate(path, policy="multifactor")
    assert not built[0].usage.kept and not built[0].usage.records
    assert built[1].usage.kept and built[1].usage.records
    assert len(fifo.jobs) == len(fair.jobs) > 0  # (both replays ran every job)
