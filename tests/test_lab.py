"""The simulator as a policy lab: site configs, trace mapping, estimate models, metrics,
sweeps (in a pool and as job arrays) and the HTML report."""
import json
import os
import random
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from hpcsched.config import build
from hpcsched.core.jobs import Job, Request
from hpcsched.sim import report, sweep
from hpcsched.sim.engine import Engine, SimulationError
from hpcsched.sim.estimates import Tsafrir, model
from hpcsched.sim.metrics import _spread, classes
from hpcsched.sim.run import check, replay
from hpcsched.sim.simulate import TraceMap, simulate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KTH = os.path.join(ROOT, "..", "shared", "traces", "KTH-SP2-1996-2.1-cln.swf.gz")


def trace(tmp_path, rows, start=1000000, name="t.swf"):
    """An SWF file: rows of (job, submit, run, procs, req_time, user, queue, status)."""
    lines = [f"; MaxProcs: 2\n; UnixStartTime: {start}\n"]
    for job, submit, run, procs, req, user, queue, status in rows:
        lines.append(f"{job} {submit} -1 {run} {procs} -1 -1 {procs} {req} -1 {status} {user} {user} -1 {queue} -1 -1 -1\n")
    path = tmp_path / name
    path.write_text("".join(lines))
    return str(path)


# --- estimate models ------------------------------------------------------------------------
def test_exact_estimates_can_forbid_a_backfill_the_requests_allowed(tmp_path):
    # 2 units.  t=0 A (1 unit, asks 100, runs 10); t=1 B (2 units) waits for A.  t=2 C (1
    # unit, asks 50, runs 50): with requests B's shadow is A's 100 and C (ends by 52)
    # backfills at 2 (and, running its full 50 s, holds B back to 52: requests are wrong);
    # with exact run times the shadow is 10 and C would delay B: it waits for B (10..20).
    path = trace(tmp_path, [(1, 0, 10, 1, 100, 1, 1, 1), (2, 1, 10, 2, 100, 1, 1, 1), (3, 2, 50, 1, 50, 1, 1, 1)])
    assert simulate(path, drain=False).start_times() == {1: 0, 2: 52, 3: 2}
    assert simulate(path, drain=False, estimate="perfect").start_times() == {1: 0, 2: 10, 3: 20}


def test_easy_plus_plus_predicts_from_the_users_last_two_runs_and_corrects_an_overrun(tmp_path):
    # u1 runs 10 s twice (asking 1000).  t=40 A (u2, 1 unit, asks 100, runs 100); t=41 B
    # (u2, 2 units) waits: shadow 140.  t=42 C (u1, 1 unit, asks 1000, runs 50): predicted
    # mean(10, 10) = 10, ends by 52 <= 140: backfills at 42 (with the request it would wait
    # for B: 150).  C outlives its prediction at 52 and is given its request.
    rows = [(1, 0, 10, 1, 1000, 1, 1, 1), (2, 20, 10, 1, 1000, 1, 1, 1), (3, 40, 100, 1, 100, 2, 1, 1),
            (4, 41, 10, 2, 100, 2, 1, 1), (5, 42, 50, 1, 1000, 1, 1, 1)]
    path = trace(tmp_path, rows)
    assert simulate(path, drain=False).start_times()[5] == 150
    assert simulate(path, drain=False, estimate="easy++").start_times() == {1: 0, 2: 20, 3: 40, 4: 140, 5: 42}
    # the correction, seen in the core: C's walltime is back to its request
    sched = build({"nodes": [{"names": "n[0-1]"}]})
    jobs = [(r[1], Job(id=r[0], owner=f"u{r[5]}", request=Request(nodes=r[3]), walltime=r[4]), r[2], r) for r in rows]
    Engine(sched, estimates=model("easy++")).run(jobs, keep=True)
    assert sched.jobs[5].walltime == 1000 and sched.jobs[5].start_time == 42


def test_tsafrir_predictor_by_hand():
    t = Tsafrir()
    first = Job(id=1, owner="a", request=Request(nodes=1), walltime=500)
    t.predict(first, None, 30, 0)
    assert first.walltime == 500  # no history: the request
    for run in (10, 20, 40):
        t.ended(Job(id=9, owner="a", request=Request(nodes=1), walltime=1), run)
    nxt = Job(id=2, owner="a", request=Request(nodes=1), walltime=500)
    t.predict(nxt, None, 100, 0)
    assert nxt.walltime == 30  # the last two: (20 + 40) / 2
    assert t.corrected(nxt, None, 30) == 500
    small = Job(id=3, owner="a", request=Request(nodes=1), walltime=25)
    t.predict(small, None, 5, 0)
    assert small.walltime == 25  # never above the request
    with pytest.raises(ValueError, match="estimate model 'oracle'"):
        model("oracle")


# --- site configs and trace mapping ----------------------------------------------------------
SITE = {"nodes": [{"names": "n[0-1]"}], "default_queue": "default",
        "queues": {"default": {"route_to": ["short", "long"]}, "short": {"max_walltime": "0:10:00"},
                   "long": {"max_walltime": "1:00:00"}, "q2": {}}}


def test_a_site_config_routes_the_replay_and_statistics_follow_the_routed_queue(tmp_path):
    path = trace(tmp_path, [(1, 0, 10, 1, 300, 1, 7, 1), (2, 0, 10, 1, 3000, 1, 7, 1), (3, 0, 10, 1, 7200, 1, 7, 1)])
    r = simulate(path, config=SITE, drain=False)
    assert set(r.metrics.by_queue) == {"short", "long"} and r.machine.nodes == 2
    assert r.mapping.rejected == 1 and r.mapping.simulated == 2  # 2 h fits no queue
    assert "1 refused by every queue" in r.summary() and "refused 1x:" in r.summary()


def test_trace_queues_cancelled_records_and_accounts(tmp_path):
    path = trace(tmp_path, [(1, 0, 10, 1, 300, 1, 1, 1), (2, 0, 10, 1, 300, 2, 2, 1), (3, 0, 5, 1, 300, 3, 2, 5)])
    r = simulate(path, config=SITE, drain=False, trace_map=TraceMap("trace", ((1, "short"),), "drop"))
    assert set(r.metrics.by_queue) == {"short", "q2"} and r.mapping.skipped_cancelled == 1
    assert set(r.metrics.by_user) == {"u1", "u2"} and set(r.metrics.by_group) == {"g1", "g2"}
    kept = simulate(path, config=SITE, drain=False, trace_map=TraceMap("trace", ((1, "short"),)))
    assert kept.metrics.jobs == 3
    with pytest.raises(SimulationError, match="queue mapping 'nope'"):
        TraceMap("nope")


def test_a_dated_reservation_lands_on_the_traces_clock(tmp_path):
    # UnixStartTime 1000000; the machine is reserved from trace time 50 for 100 s: a
    # 100-s job submitted at 40 cannot finish before 50, so it starts at 150
    path = trace(tmp_path, [(1, 40, 10, 1, 100, 1, 1, 1)])
    from datetime import datetime, timezone
    when = datetime.fromtimestamp(1000050, timezone.utc).isoformat()
    cfg = {"nodes": [{"names": "n[0-1]"}],
           "reservations": [{"name": "pm", "start": when, "duration": 100, "nodes": "n[0-1]"}]}
    assert simulate(path, config=cfg, drain=False).start_times() == {1: 150}


# --- metrics ----------------------------------------------------------------------------------
def test_spread_matches_a_second_by_second_reference():
    rnd = random.Random(7)
    for _ in range(30):
        step, n = rnd.choice([1.0, 3.0, 10.0]), 12
        intervals = [(a, a + rnd.randint(0, 40), rnd.randint(1, 4)) for a in (rnd.randint(0, 80) for _ in range(8))]
        intervals = [(a, min(b, n * step), w) for a, b, w in intervals if a < n * step]
        fast = _spread(intervals, 0.0, step, n)
        slow = [sum(w for a, b, w in intervals for s in range(int(k * step), int((k + 1) * step)) if a <= s < b)
                for k in range(n)]
        assert fast == pytest.approx(slow)


def test_capability_share_size_classes_series_and_cooldown(tmp_path):
    # 2 units: job 1 (2 units, 0..100), job 2 (1 unit, 100..400, submitted at 50: waits 50),
    # job 3 (1 unit, 100..130, submitted at 60)
    path = trace(tmp_path, [(1, 0, 100, 2, 100, 1, 1, 1), (2, 50, 300, 1, 300, 2, 1, 1), (3, 60, 30, 1, 30, 2, 1, 1)])
    m = simulate(path, drain=False, capability=2, size_classes=[1, 2], series_step=100.0).metrics
    assert list(m.by_size) == ["1", "2+"] and m.by_size["1"]["wait"]["mean"] == pytest.approx((50 + 40) / 2)
    assert m.capability_size == 2 and m.capability_share == pytest.approx(200 / (200 + 300 + 30))
    assert m.series["utilization"] == pytest.approx([1.0, 0.65, 0.5, 0.5])
    assert m.series["queue"] == pytest.approx([(50 + 40) / 100, 0, 0, 0])
    cooled = simulate(path, drain=False, cooldown=True).metrics
    assert cooled.cooldown_excluded == 3 and cooled.counted == 0  # all end after the last submission (60)
    assert classes([1, 4]) == [(1, 3), (4, float("inf"))]
    with pytest.raises(ValueError):
        classes([4, 2])


# --- one replay as settings --------------------------------------------------------------------
def test_settings_are_checked_before_anything_runs(tmp_path):
    path = trace(tmp_path, [(1, 0, 10, 1, 100, 1, 1, 1)])
    assert check({"trace": path})["estimate"] == "request"
    for bad, message in [({"frob": 1}, "frob: unknown key"), ({"estimate": "magic"}, "estimate: 'magic': must be"),
                         ({"warmup": 2}, "warmup: 2: must be a fraction"), ({"nodes": 0}, "nodes: 0"),
                         ({"priority.policy": "nope"}, "unknown policy 'nope'"),
                         ({"config": str(tmp_path / "none.toml")}, "none.toml: no such file"),
                         ({"trace": str(tmp_path / "gone.swf")}, "gone.swf: no such file"),
                         ({"backfill": "sideways"}, "backfill")]:
        with pytest.raises(SimulationError, match=re.escape(message)):
            check({"trace": path, **bad})
    (tmp_path / "broken.toml").write_text("queues = [\n")
    with pytest.raises(SimulationError, match="config:"):
        check({"trace": path, "config": str(tmp_path / "broken.toml")})


def test_config_file_and_dotted_keys(tmp_path):
    path = trace(tmp_path, [(1, 0, 10, 1, 300, 1, 1, 1), (2, 0, 10, 1, 3000, 1, 1, 1)])
    site = tmp_path / "site.toml"
    site.write_text('default_queue = "default"\n[[nodes]]\nnames = "n[0-1]"\n[queues.default]\n'
                    'route_to = ["short", "long"]\n[queues.short]\nmax_walltime = "0:10:00"\n'
                    '[queues.long]\nmax_walltime = "1:00:00"\n')
    r = replay({"trace": path, "config": str(site), "drain": False})
    assert set(r.metrics.by_queue) == {"short", "long"}
    r = replay({"trace": path, "config": str(site), "queues.short.max_walltime": "1:00:00", "drain": False})
    assert set(r.metrics.by_queue) == {"short"}


# --- sweeps -------------------------------------------------------------------------------------
def write_grid(tmp_path, body):
    path = trace(tmp_path, [(1, 0, 10, 1, 100, 1, 1, 1), (2, 1, 10, 2, 100, 1, 1, 1), (3, 2, 50, 1, 50, 2, 1, 1)])
    grid = tmp_path / "grid.toml"
    grid.write_text(f'traces = ["{os.path.basename(path)}"]\n' + body)
    return str(grid)


def test_sweep_cells_are_every_combination_checked_first(tmp_path):
    grid = write_grid(tmp_path, '[base]\ndrain = false\n[grid]\nestimate = ["request", "perfect"]\n'
                                'backfill = ["none", "easy"]\n[[cells]]\nlabel = "A"\n[[cells]]\nlabel = "B"\n'
                                'nodes = 2\n')
    cells = sweep.load(grid)
    assert [c["label"] for c in cells] == ["A"] * 4 + ["B"] * 4
    assert [c["varying"] for c in cells[:4]] == [{"estimate": e, "backfill": b} for e in ("request", "perfect")
                                                 for b in ("none", "easy")]
    assert os.path.isabs(cells[0]["settings"]["trace"])
    bad = write_grid(tmp_path, '[grid]\nestimate = ["request", "psychic"]\n')
    with pytest.raises(SimulationError, match=r"cell 1 \(estimate=psychic\): estimate: 'psychic'"):
        sweep.load(bad)
    with pytest.raises(SimulationError, match="frob: unknown table"):
        sweep.load(write_grid(tmp_path, '[frob]\nx = 1\n'))


def test_sweep_runs_in_a_pool_keeps_cell_order_and_reports_a_failing_cell(tmp_path):
    grid = write_grid(tmp_path, '[base]\ndrain = false\n[grid]\nestimate = ["request", "perfect"]\n')
    cells = sweep.load(grid)
    broken = tmp_path / "broken.swf"
    broken.write_text("; MaxProcs: 2\n1 0 -1 10 1 -1 -1 1 100 -1 1 1 1 -1 1 -1 -1 -1\nnot a line\n")
    cells.append({"label": "broken", "settings": dict(cells[0]["settings"], trace=str(broken)), "varying": {}})
    outcomes = sweep.run(cells, workers=2)
    assert [o["label"] for o in outcomes] == ["estimate=request", "estimate=perfect", "broken"]
    assert outcomes[0]["row"]["mean_wait"] != outcomes[1]["row"]["mean_wait"]  # job 3: 0 vs 18 s
    assert "SwfError" in outcomes[2]["error"] and "line 3" in outcomes[2]["error"]
    text = sweep.table(outcomes)
    assert text.splitlines()[0].split()[:3] == ["label", "estimate", "jobs"] and "error" in text.splitlines()[0]
    assert sweep.table(outcomes, wide=True).splitlines()[0].split()[:3] == ["label", "trace", "estimate"]
    rows = list(__import__("csv").DictReader(sweep.table(outcomes, "csv").splitlines()))
    assert [r["estimate"] for r in rows] == ["request", "perfect", ""] and rows[2]["error"].startswith("SwfError")
    assert json.loads(sweep.table(outcomes, "json"))[1]["estimate"] == "perfect"


def test_sweep_table_is_narrow_with_one_form_a_column_and_progress_shows_from_the_start(tmp_path):
    """The text table: the main figures (--wide: all), each column's numbers in one form
    (fractions to four places: 0.1090 beside 0.0974, never 0.109); progress is told from
    the first moment, with each running cell's share of its jobs."""
    rows = [{"label": "a", "trace": "t.swf", "jobs": 28475, "utilization": 0.109, "loss_of_capacity": 0.0974,
             "mean_wait": 6890.3, "p95_wait": 37865.0, "mean_bsld": 92.9712, "capability_share": 0.1,
             "seconds": 3.2, "wait[1]": 2460.0, "wait[2-4]": 5000.0, "drain_pct": 4.5},
            {"label": "b", "trace": "t.swf", "jobs": 100, "utilization": 0.7, "loss_of_capacity": 0.25,
             "mean_wait": 12.0, "p95_wait": 40.0, "mean_bsld": 1.0, "capability_share": 0.0, "seconds": 1.0,
             "wait[1]": 1.0, "wait[2-4]": 2.0, "drain_pct": 0.0}]
    text = sweep.table([{"label": r["label"], "row": r} for r in rows])
    head, first, second = (line.split() for line in text.splitlines())
    assert head == ["label", "jobs", "util", "loss", "wait_s", "bsld", "cap", "drain%"]
    assert first == ["a", "28,475", "0.1090", "0.0974", "6,890", "92.97", "0.1000", "4.50"]
    assert second[2:4] == ["0.7000", "0.2500"]
    assert max(len(line) for line in text.splitlines()) <= 80
    wide = sweep.table([{"label": r["label"], "row": r} for r in rows], wide=True).splitlines()[0].split()
    assert {"trace", "p95_s", "wait[1]", "wait[2-4]", "secs"} <= set(wide)
    grid = write_grid(tmp_path, '[base]\ndrain = false\n[grid]\nestimate = ["request", "perfect"]\n')
    seen = []
    sweep.run(sweep.load(grid), workers=2, progress=lambda running, done: seen.append((dict(running), done)))
    assert seen[0][1] == 0 and seen[0][0]  # (told before any cell ended: a cell under way)
    assert seen[-1] == ({}, 2)
    seen.clear()
    sweep.run(sweep.load(grid), workers=1, progress=lambda running, done: seen.append((dict(running), done)))
    assert seen[0] == ({0: (0, None)}, 0) and seen[-1] == ({}, 2)


def test_sweep_as_a_job_array_then_collected(tmp_path, monkeypatch):
    grid = write_grid(tmp_path, '[base]\ndrain = false\n[grid]\nestimate = ["request", "perfect", "easy++"]\n')
    cells = sweep.load(grid)
    out = tmp_path / "an array"
    (tmp_path / "a sweep").mkdir()
    monkeypatch.chdir(tmp_path / "a sweep")  # (written from a directory with no hpcsched in it)
    names = sweep.write_array(cells, str(out))
    assert names == ["cells.json", "sweep.pbs", "sweep.torque", "sweep.slurm"]
    assert "#PBS -J 0-2" in (out / "sweep.pbs").read_text() and "#PBS -t 0-2" in (out / "sweep.torque").read_text()
    assert "#SBATCH --array=0-2" in (out / "sweep.slurm").read_text()
    for var, index in (("PBS_ARRAYID", "0"), ("SLURM_ARRAY_TASK_ID", "2")):
        monkeypatch.setenv(var, index)
        assert "row" in sweep.run_one(str(out), sweep.cell_index(None))
        monkeypatch.delenv(var)
    collected = sweep.collect(str(out))
    assert [("row" in o, o.get("error")) for o in collected] == [
        (True, None), (False, "not run (no cell result yet)"), (True, None)]
    with pytest.raises(SimulationError, match="--cell: 3 is not a cell"):
        sweep.run_one(str(out), 3)
    with pytest.raises(SimulationError, match="no array index is set"):
        sweep.cell_index(None)
    # the script itself runs a cell, as a batch system would run one task: from a checkout,
    # with no PYTHONPATH (`-m hpcsched` found no hpcsched there), paths with spaces
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PBS_ARRAY_INDEX"] = "1"
    done = subprocess.run(["sh", str(out / "sweep.pbs")], env=env, capture_output=True, text=True, timeout=120,
                          cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert all("row" in o for o in sweep.collect(str(out)))


# --- the report ---------------------------------------------------------------------------------
def svgs(page: str) -> list:
    """The report's charts (its legend apart)."""
    return [ET.fromstring(s) for s in re.findall(r"<svg.*?</svg>", page, re.S) if "class='legend'" not in s[:30]]


def test_report_is_self_contained_and_its_svg_well_formed(tmp_path):
    path = trace(tmp_path, [(i, i * 30, 200 + 37 * (i % 5), 1 + i % 2, 400, i % 3, 1, 1) for i in range(1, 60)])
    runs = [report.run_of(simulate(path, drain=False, backfill=b, series_step=600.0).to_json(), f"<{b}>")
            for b in ("none", "easy")]
    page = report.html(runs)
    assert page.startswith("<!DOCTYPE html>") and "&lt;none&gt;" in page and "<none>" not in page
    assert "http" not in page.replace("http://www.w3.org/2000/svg", "") and "<script" not in page
    drawn = svgs(page)
    assert len(drawn) == 4 + 2  # two lines, two bar charts, a strip per run
    assert len(drawn[0].findall("{http://www.w3.org/2000/svg}polyline")) == 2
    assert len(drawn[4].findall("{http://www.w3.org/2000/svg}rect")) > 10


def test_report_shows_drain_per_day_and_by_size(tmp_path):
    path = trace(tmp_path, [(i, i * 30, 200 + 37 * (i % 5), 1 + i % 4, 400, i % 3, 1, 1) for i in range(1, 60)])
    result = simulate(path, nodes=4, groups=((("1", 1), ("2+", 2))), drain=True).to_json()
    page = report.html([report.run_of(result, "easy")])
    table = re.search(r"<h2>Drain time.*?</table>", page, re.S).group(0)
    assert f"<td>{result['drain']['drain_pct']:.2f}</td>" in table
    drawn = svgs(page)
    assert len(drawn) == 4 + 2 + 1
    bars = drawn[5].findall("{http://www.w3.org/2000/svg}rect")
    titles = [b.find("{http://www.w3.org/2000/svg}title").text for b in bars]
    by_size = {g["group"]: g["drain_node_hours"] for g in result["drain"]["by_size"]}
    assert titles == [f"easy {g}: {v:.2f} node-hours" for g, v in by_size.items()] and any(by_size.values())


def test_simulate_sweep_and_report_commands(tmp_path):
    path = trace(tmp_path, [(1, 0, 10, 1, 100, 1, 1, 1), (2, 1, 10, 2, 100, 1, 1, 1), (3, 2, 50, 1, 50, 2, 1, 1)])

    def hpcsched(*args):
        return subprocess.run([sys.executable, "-m", "hpcsched", *args], cwd=ROOT, capture_output=True, text=True,
                              timeout=120)
    done = hpcsched("simulate", path, "--quiet", "--estimate", "perfect", "--drain", "--out", str(tmp_path / "o"),
                    "--report", str(tmp_path / "one.html"))
    assert done.returncode == 0, done.stderr
    assert "estimate=perfect" in done.stdout and (tmp_path / "one.html").exists()
    grid = write_grid(tmp_path, '[base]\ndrain = false\n[grid]\nbackfill = ["none", "easy"]\n')
    done = hpcsched("sweep", grid, "--jobs", "2", "--format", "csv", "--out", str(tmp_path / "s"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].startswith("label,trace,backfill,jobs,utilization")
    done = hpcsched("report", str(tmp_path / "o" / "results.json"), str(tmp_path / "s" / "results.json"),
                    "-o", str(tmp_path / "all.html"))
    assert done.returncode == 0 and "(3 runs)" in done.stdout
    page = (tmp_path / "all.html").read_text()  # (the simulate run accounted drain, the sweep's did not)
    assert len(svgs(page)) == 4 + 2 + 3 and page.count("<h2>Drain time") == 1
    (tmp_path / "latin1.toml").write_bytes(b'drain = false # caf\xe9\n')  # (not UTF-8: these were tracebacks)
    for args, message in [(("simulate", path, "--estimate", "magic"), "invalid choice"),
                          (("simulate", path, "--config", str(tmp_path / "no.toml")), "no.toml: no such file"),
                          (("simulate", path, "--config", str(tmp_path / "latin1.toml")), "not UTF-8 (byte 19)"),
                          (("sweep", str(tmp_path / "latin1.toml")), "latin1.toml: not UTF-8 (byte 19)"),
                          (("sweep", str(tmp_path / "no.toml")), "no.toml: no such file"),
                          (("report", str(tmp_path / "no.json")), "no.json: no such file")]:
        done = hpcsched(*args)
        assert done.returncode in (1, 2) and len(done.stderr.splitlines()) == 1 and message in done.stderr
    # results the page cannot show: one line naming the file (these were tracebacks), the page left as it was
    before = (tmp_path / "all.html").read_text()
    for i, (text, message) in enumerate([('{"cells": [1]}', "AttributeError"), ('{"cells": 5}', "TypeError"),
                                         ('{"cells": [{"run": {"label": "x"}}]}', "KeyError: 'metrics'"),
                                         ('{"metrics": {}}', "KeyError: 'overall'"), ("{", "JSONDecodeError"),
                                         ('{"jobs": []}', "neither a replay's results.json nor a sweep's")]):
        bad = tmp_path / f"bad{i}.json"
        bad.write_text(text)
        done = hpcsched("report", str(tmp_path / "o" / "results.json"), str(bad), "-o", str(tmp_path / "all.html"))
        assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
        assert f"bad{i}.json: not results this version reads" in done.stderr and message in done.stderr
    assert (tmp_path / "all.html").read_text() == before


@pytest.mark.skipif(not any(shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome", "firefox")),
                    reason="no headless browser installed")
def test_report_renders_in_a_headless_browser(tmp_path):
    path = trace(tmp_path, [(i, i * 30, 200, 1, 400, 1, 1, 1) for i in range(1, 30)])
    page = tmp_path / "r.html"
    page.write_text(report.html([report.run_of(simulate(path, drain=False).to_json(), "run")]))
    browser = next(shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome", "firefox") if shutil.which(b))
    if "firefox" in browser:
        args = [browser, "--headless", "--screenshot", str(tmp_path / "shot.png"), page.as_uri()]
    else:
        args = [browser, "--headless", "--disable-gpu", "--no-sandbox", f"--screenshot={tmp_path / 'shot.png'}",
                page.as_uri()]
    subprocess.run(args, capture_output=True, timeout=120)
    assert (tmp_path / "shot.png").stat().st_size > 1000


@pytest.mark.skipif(not os.path.exists(KTH), reason="needs ../shared/traces")
def test_kth_easy_plus_plus_improves_on_user_requests():
    """The literature's direction (Tsafrir et al. 2007) on a real trace."""
    waits = {e: simulate(KTH, drain=False, estimate=e).metrics.overall for e in ("request", "easy++")}
    assert waits["easy++"]["wait"]["mean"] < waits["request"]["wait"]["mean"]
    assert waits["easy++"]["bsld"]["mean"] < waits["request"]["bsld"]["mean"]


def test_progress_line_shows_jobs_simulated_date_rate_and_time_left():
    import io

    from hpcsched.cli import _progress
    out = io.StringIO()
    show = _progress(out)
    show(120, 100, 1272639895.0, 400)
    line = out.getvalue()
    assert line.startswith("\r100/400 jobs done, 120 records read, simulated 2010-04-30 15:04")
    assert "jobs/s" in line and "s left" in line


@pytest.mark.parametrize("header,line,args,message", [
    ("; MaxProcs: 4", "1 0 -1 nan 1 -1 -1 1 100 -1 1 1 1 -1 1 -1 -1 -1", (), "line 2: field run is not a number: 'nan'"),
    ("; MaxProcs: 4", "1 0 -1 inf 1 -1 -1 1 100 -1 1 1 1 -1 1 -1 -1 -1", (), "field run is not a number: 'inf'"),
    ("; MaxProcs: 4", "1 0 -1 1_0 1 -1 -1 1 100 -1 1 1 1 -1 1 -1 -1 -1", (), "field run is not a number: '1_0'"),
    ("; MaxProcs: 4", "1 0 -1 1e999 1 -1 -1 1 100 -1 1 1 1 -1 1 -1 -1 -1", (), "field run is out of range"),
    ("; MaxProcs:", "1 0 -1 10 1 -1 -1 1 100 -1 1 1 1 -1 1 -1 -1 -1", (), "neither MaxProcs nor MaxNodes"),
    ("; MaxProcs: inf", "1 0 -1 10 1 -1 -1 1 100 -1 1 1 1 -1 1 -1 -1 -1", (), "neither MaxProcs nor MaxNodes"),
    ("; MaxProcs: 1e30", "1 0 -1 10 1 -1 -1 1 100 -1 1 1 1 -1 1 -1 -1 -1", (), "at most 1048576 nodes"),
    ("; MaxProcs: 4", "1 0 -1 10 1 -1 -1 1 100 -1 1 1 1 -1 1 -1 -1 -1", ("--nodes", "99999999"), "at most 1048576 nodes"),
    ("; MaxProcs: 4", "1 0 -1 10 1 -1 -1 1 100 -1 1 1 1 -1 1 -1 -1 -1", ("--period", "0.001"), "at least 1 second"),
    ("; MaxProcs: 4", "1 0 -1 10 1 -1 -1 1 100 -1 1 1 1 -1 1 -1 -1 -1", ("--out", "FILE/x"), "Not a directory"),
    ("; MaxProcs: 4", "1 0 -1 10 1 -1 -1 1 100 -1 1 1 1 -1 1 -1 -1 -1", ("--report", "FILE/r.html"), "no such directory"),
])
def test_bad_traces_and_options_are_one_line_and_never_hang(tmp_path, header, line, args, message):
    path = tmp_path / "t.swf"
    path.write_text(f"{header}\n{line}\n")
    (tmp_path / "FILE").write_text("")
    args = [a.replace("FILE", str(tmp_path / "FILE")) for a in args]
    done = subprocess.run([sys.executable, "-m", "hpcsched", "simulate", str(path), "--quiet", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and message in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr


def test_report_charts_have_ticks_gridlines_labels_off_the_data_and_a_legend(tmp_path):
    """Both axes of every chart have ticks, numbered labels and gridlines; every label sits
    in the margins, never over the plotted area; the occupancy strip has a time axis; the
    legend gives each run its colour and a distinct dash, as its lines are drawn."""
    svg = "{http://www.w3.org/2000/svg}"
    path = trace(tmp_path, [(i, i * 900, 200 + 37 * (i % 5), 1 + i % 2, 400, i % 3, 1, 1) for i in range(1, 300)])
    runs = [report.run_of(simulate(path, drain=False, backfill=b, series_step=3600.0).to_json(), b)
            for b in ("none", "easy", "conservative")]
    page = report.html(runs)
    legend = ET.fromstring(re.search(r"<svg class='legend'.*?</svg>", page, re.S).group(0))
    samples = legend.findall(f"{svg}line")
    assert [t.text for t in legend.findall(f"{svg}text")] == ["none", "easy", "conservative"]
    assert len({(l.get("stroke"), l.get("stroke-dasharray")) for l in samples}) == 3
    assert len({l.get("stroke-dasharray") for l in samples}) == 3  # (told apart without colour too)
    charts = svgs(page)
    for chart in charts:
        width, height = float(chart.get("width")), float(chart.get("height"))
        left, top = report.LEFT, report.TOP
        right, bottom = width - report.RIGHT, height - report.BOTTOM
        grid = [l for l in chart.findall(f"{svg}line") if l.get("stroke") in ("#ddd", "#eee")]
        assert sum(l.get("y1") == l.get("y2") for l in grid) >= 2  # horizontal gridlines (y ticks)
        assert sum(l.get("x1") == l.get("x2") for l in grid) >= 1  # vertical ones (x ticks; a bar chart of one queue: one)
        for text in chart.findall(f"{svg}text"):
            x, y = float(text.get("x")), float(text.get("y"))
            assert not (left < x < right and top < y < bottom), (text.text, x, y)  # (off the data)
        numbers = [t.text for t in chart.findall(f"{svg}text") if re.fullmatch(r"[\d.,]+", t.text or "")]
        assert len(numbers) >= 4
    lines = charts[0]
    assert any("since the first submission" in (t.text or "") for t in lines.findall(f"{svg}text"))
    dashes = {p.get("stroke-dasharray") for p in lines.findall(f"{svg}polyline")}
    assert len(dashes) == 3
    strip = charts[4]  # (the first run's occupancy strip)
    assert any("since the first submission" in (t.text or "") for t in strip.findall(f"{svg}text"))


def test_the_shipped_psc_grid_puts_simons_upper_bin_at_lemieuxs_share():
    """Simon's upper bin was 1,024 of LeMieux's 3,000 processors (at most two such jobs at
    once): on KTH's 100 it starts at 34, and the size classes split there."""
    path = os.path.join(ROOT, "examples", "psc-policies.toml")
    simon = [c for c in sweep.load(path) if c["label"] == "Simon + EASY"][0]["settings"]
    assert simon["priority.large"] == round(100 * 1024 / 3000) == 34
    assert simon["priority.max_large_running"] == 2 and simon["size_classes"][-1] == 34
