"""`hpcsched sweep`: many replays from one grid, on every core here or as a job array.

A grid file (TOML):

    traces = ["../traces/KTH-SP2-1996-2.1-cln.swf.gz"]   # relative to this file
    [base]                    # settings every cell shares (run.py: options or config keys)
    config = "site.toml"
    [grid]                    # keys that vary: one cell per combination, in key order
    backfill = ["easy", "conservative"]
    "priority.policy" = ["fifo", "simon"]
    [[cells]]                 # or (and) cells listed one by one, each with an optional label
    label = "FCFS, no backfill"
    backfill = "none"

The cells are traces x listed cells x grid combinations.  Every cell is checked before any
runs (one line naming the cell and the bad key); a cell that fails while running is
reported with its error and the others go on.  Results: one row per cell (text, CSV or
JSON), in cell order whatever order they finished in.

For more than one machine, `write_array` writes the cells and a job-array script for PBS
(`-J`), Torque (`-t`) and Slurm (`--array`); each task runs `sweep --cell N DIR`, and
`collect(DIR)` merges what the tasks wrote.
"""
from __future__ import annotations

import csv
import io
import itertools
import json
import multiprocessing
import os
import shlex
import sys
import time
import tomllib

from .engine import SimulationError
from .report import run_of
from .run import check, replay

PATH_KEYS = ("trace", "config")


def load(path: str) -> list[dict]:
    """The checked cells of a grid file: each {"label", "settings", "varying"}."""
    try:
        with open(path, "rb") as f:
            grid = tomllib.load(f)
    except FileNotFoundError:
        raise SimulationError(f"{path}: no such file") from None
    except UnicodeDecodeError as e:
        raise SimulationError(f"{path}: not UTF-8 (byte {e.start})") from None
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise SimulationError(f"{path}: {e}") from None
    unknown = set(grid) - {"traces", "base", "grid", "cells"}
    if unknown:
        raise SimulationError(f"{path}: {sorted(unknown)[0]}: unknown table (traces, base, grid, cells)")
    here = os.path.dirname(os.path.abspath(path))
    traces = grid.get("traces", [])
    base = grid.get("base", {})
    axes = grid.get("grid", {})
    listed = grid.get("cells", [{}]) or [{}]
    if not isinstance(traces, list) or not all(isinstance(t, str) for t in traces):
        raise SimulationError(f"{path}: traces: must be a list of file names")
    if not isinstance(base, dict) or not isinstance(axes, dict) or not isinstance(listed, list) \
            or not all(isinstance(c, dict) for c in listed):
        raise SimulationError(f"{path}: base and grid must be tables, cells a list of tables")
    for key, values in axes.items():
        if not isinstance(values, list) or not values:
            raise SimulationError(f"{path}: grid.{key}: must be a non-empty list of values")
    cells = []
    for trace in traces or [base.get("trace")]:
        for one in listed:
            for combo in itertools.product(*axes.values()):
                varying = dict(zip(axes, combo))
                settings = {**base, **{k: v for k, v in one.items() if k != "label"}, **varying}
                if trace is not None:
                    settings["trace"] = trace
                for key in PATH_KEYS:
                    if isinstance(settings.get(key), str):
                        settings[key] = os.path.normpath(os.path.join(here, settings[key]))
                label = one.get("label") or ", ".join(f"{k}={v}" for k, v in varying.items()) or "run"
                if len(traces) > 1:
                    label = f"{os.path.basename(settings['trace'])}: {label}"
                cells.append({"label": str(label), "settings": settings, "varying": varying})
    for i, cell in enumerate(cells):
        try:
            cell["settings"] = _plain(check(cell["settings"]))
        except SimulationError as e:
            raise SimulationError(f"{path}: cell {i} ({cell['label']}): {e}") from None
    return cells


def _plain(settings: dict) -> dict:
    """Settings as JSON keeps them (the queue map's keys become strings; run.py reads both)."""
    return {k: ({str(n): q for n, q in v.items()} if k == "queue_map" else v) for k, v in settings.items()}


def run_cell(cell: dict, progress=None) -> dict:
    """One cell's outcome: its row of figures and its run for a report, or its error
    (`progress(done, total)`: its jobs replayed so far, as a replay reports them)."""
    t = time.monotonic()
    try:
        result = replay(cell["settings"], progress=progress and (lambda read, done, clock=None, total=None:
                                                                 progress(done, total)))
    except Exception as e:  # reported in its row; the other cells go on
        return {"label": cell["label"], "error": f"{type(e).__name__}: {e}", "seconds": time.monotonic() - t}
    data = result.to_json()
    data.pop("jobs")
    m = result.metrics
    row = {"label": cell["label"], "trace": os.path.basename(cell["settings"]["trace"]), **cell["varying"],
           "jobs": m.counted, "utilization": round(m.utilization, 4), "loss_of_capacity": round(m.loss_of_capacity, 4),
           "mean_wait": round(m.overall["wait"]["mean"], 1), "p95_wait": round(m.overall["wait"]["p95"], 1),
           "mean_bsld": round(m.overall["bsld"]["mean"], 2), "capability_share": round(m.capability_share, 4),
           "seconds": round(time.monotonic() - t, 2)}
    inner = m.series.get("utilization", [])[1:-1]  # whole steps (the first and last are partial)
    if len(inner) >= 2:
        mean = sum(inner) / len(inner)
        row["step_util_min"] = round(min(inner), 4)
        row["step_util_sd"] = round((sum((u - mean) ** 2 for u in inner) / len(inner)) ** 0.5, 4)
    for cls, s in m.by_size.items():
        row[f"wait[{cls}]"] = round(s["wait"]["mean"], 1)
    if len(m.by_queue) > 1:
        for q, s in m.by_queue.items():
            row[f"wait[{q}]"] = round(s["wait"]["mean"], 1)
    for size, share in m.capability_split.items():
        row[f"capability[{size}+]"] = round(share, 4)
    for size, share in m.free_blocks.items():
        row[f"free[{size}]"] = round(share, 4)
    if result.drain:
        row["drain_pct"] = round(result.drain["drain_pct"], 2)
        row["drain_node_hours"] = round(result.drain["drain_node_hours"], 1)
    return {"label": cell["label"], "row": row, "run": run_of(data, cell["label"])}


def run(cells: list[dict], workers: int | None = None, progress=None) -> list[dict]:
    """Every cell, on `workers` processes (default: every core); outcomes in cell order.
    `progress(running, finished)`: called as cells go, `running` {cell index: (jobs done,
    of how many or None)} for the cells under way, `finished` how many have ended."""
    workers = max(1, min(workers or os.cpu_count() or 1, len(cells)))
    outcomes: dict[int, dict] = {}
    running: dict[int, tuple[int, int | None]] = {}

    def told(i: int, done: int, total: int | None) -> None:
        if i in outcomes:
            return  # (a word that came after its cell's end)
        running[i] = (done, total)
        progress(running, len(outcomes))
    if workers == 1:
        for i, cell in enumerate(cells):
            if progress:
                told(i, 0, None)
            outcomes[i] = run_cell(cell, progress and (lambda done, total, i=i: told(i, done, total)))
            running.pop(i, None)
            progress and progress(running, len(outcomes))
        return [outcomes[i] for i in range(len(cells))]
    context = multiprocessing.get_context("fork")
    news = context.SimpleQueue() if progress else None  # (a worker's word: cell, jobs done, of)
    with context.Pool(workers, maxtasksperchild=1, initializer=_listen, initargs=(news,)) as pool:
        pending = pool.imap_unordered(_indexed, list(enumerate(cells)))
        while len(outcomes) < len(cells):
            if news is None:
                i, outcome = next(pending)
            else:
                try:
                    i, outcome = pending.next(timeout=0.2)
                except multiprocessing.TimeoutError:
                    i = None
                while not news.empty():  # (what the workers said before, first)
                    told(*news.get())
                if i is None:
                    continue
            outcomes[i] = outcome
            running.pop(i, None)
            progress and progress(running, len(outcomes))
    return [outcomes[i] for i in range(len(cells))]


_NEWS = None  # in a pool's worker: the queue it tells its cells' progress on (None: nobody listens)


def _listen(news) -> None:
    """A pool worker's start: where to tell its cells' progress."""
    global _NEWS
    _NEWS = news


def _indexed(item):
    i, cell = item
    news = _NEWS
    if news is None:
        return i, run_cell(cell)
    last = [0.0]

    def tell(done: int, total: int | None) -> None:
        now = time.monotonic()
        if now - last[0] >= 0.5:  # (twice a second at most)
            last[0] = now
            news.put((i, done, total))
    news.put((i, 0, None))
    return i, run_cell(cell, tell)


#: the text table's short heads (CSV and JSON keep the full names)
SHORT = {"utilization": "util", "loss_of_capacity": "loss", "mean_wait": "wait_s", "p95_wait": "p95_s",
         "mean_bsld": "bsld", "capability_share": "cap", "drain_pct": "drain%", "drain_node_hours": "drain_nh",
         "step_util_min": "util_min", "step_util_sd": "util_sd", "seconds": "secs"}
#: how the text table writes a column's numbers: one form a column (fractions to 4 places, ...)
FORMS = {"utilization": "{:.4f}", "loss_of_capacity": "{:.4f}", "capability_share": "{:.4f}",
         "step_util_min": "{:.4f}", "step_util_sd": "{:.4f}", "mean_bsld": "{:.2f}", "drain_pct": "{:.2f}",
         "drain_node_hours": "{:,.0f}", "seconds": "{:.1f}", "jobs": "{:,}"}
#: columns the text table leaves out unless asked for (--wide): the rest is in CSV and JSON
WIDE_ONLY = ("p95_wait", "step_util_min", "step_util_sd", "drain_node_hours", "seconds", "trace")


def _shown(column: str, value) -> str:
    """A value as the text table writes it: one form a column, so digits line up."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    form = FORMS.get(column)
    if form is None:
        form = "{:.4f}" if column.startswith(("capability[", "free[")) else "{:,.0f}"  # (waits: whole seconds)
    return form.format(value)


def table(outcomes: list[dict], fmt: str = "text", wide: bool = False) -> str:
    """One row per cell: text (aligned columns; the main figures unless `wide`), csv or
    json (every figure)."""
    rows = [o["row"] if "row" in o else {"label": o["label"], "error": o["error"]} for o in outcomes]
    columns: list[str] = []
    for r in rows:
        columns.extend(k for k in r if k not in columns)
    if "error" in columns:
        columns.remove("error")
        columns.append("error")
    if fmt == "json":
        return json.dumps(rows, indent=1) + "\n"
    if fmt == "csv":
        out = io.StringIO()
        w = csv.DictWriter(out, columns, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
        return out.getvalue()
    if not wide:  # (the trace shows where the cells' traces differ)
        several = len({r.get("trace") for r in rows if "trace" in r}) > 1
        columns = [c for c in columns if not (c in WIDE_ONLY or c.startswith("wait[")) or (c == "trace" and several)]
    cells = [[_shown(c, r[c]) if c in r else "" for c in columns] for r in rows]
    heads = [SHORT.get(c, c) for c in columns]
    widths = [max([len(h)] + [len(row[k]) for row in cells]) for k, h in enumerate(heads)]
    lines = ["  ".join(c.ljust(w) if k == 0 else c.rjust(w) for k, (c, w) in enumerate(zip(heads, widths)))]
    lines += ["  ".join(v.ljust(w) if k == 0 else v.rjust(w) for k, (v, w) in enumerate(zip(row, widths)))
              for row in cells]
    return "\n".join(lines) + "\n"


def results(outcomes: list[dict]) -> dict:
    """What `--out` keeps and `hpcsched report` reads: every cell's row and run."""
    return {"cells": outcomes}


# --- a sweep as a job array -----------------------------------------------------------------
INDEX_VARS = ("PBS_ARRAY_INDEX", "PBS_ARRAYID", "SLURM_ARRAY_TASK_ID")


def write_array(cells: list[dict], directory: str) -> list[str]:
    """The cells and one job-array script per batch system in `directory`; their names."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "cells.json"), "w", encoding="utf-8") as f:
        json.dump(cells, f, indent=1)
    last = len(cells) - 1
    here = os.path.abspath(directory)
    # (PYTHONPATH: this hpcsched, installed or a checkout's; `-m hpcsched` found none in a checkout)
    package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    command = (f'cd {shlex.quote(os.getcwd())} && PYTHONPATH={shlex.quote(package)}${{PYTHONPATH:+:$PYTHONPATH}} '
               f'{shlex.quote(sys.executable)} -m hpcsched sweep --cell '
               f'"${{PBS_ARRAY_INDEX:-${{PBS_ARRAYID:-$SLURM_ARRAY_TASK_ID}}}}" {shlex.quote(here)}')
    scripts = {"sweep.pbs": f"#!/bin/sh\n#PBS -N hpcsched-sweep\n#PBS -J 0-{last}\n#PBS -l select=1:ncpus=1\n",
               "sweep.torque": f"#!/bin/sh\n#PBS -N hpcsched-sweep\n#PBS -t 0-{last}\n#PBS -l nodes=1:ppn=1\n",
               "sweep.slurm": f"#!/bin/sh\n#SBATCH --job-name=hpcsched-sweep\n#SBATCH --array=0-{last}\n"
                              f"#SBATCH --ntasks=1\n"}
    if last == 0:  # OpenPBS refuses a one-index range; a plain job with index 0 runs the cell
        scripts["sweep.pbs"] = scripts["sweep.pbs"].replace("#PBS -J 0-0\n", "")
    for name, head in scripts.items():
        path = os.path.join(directory, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(f"{head}# one task per cell of {len(cells)}; then: hpcsched sweep --collect {here}\n"
                    f"{command}\n")
        os.chmod(path, 0o755)
    return ["cells.json", *scripts]


def cell_index(given: str | None) -> int:
    """The task's cell: the argument, else the batch system's array index."""
    value = given if given not in (None, "") else next((os.environ[v] for v in INDEX_VARS if os.environ.get(v)), "")
    try:
        index = int(value)
    except ValueError:
        raise SimulationError(f"--cell: {value!r} is not a cell number (and no array index is set)") from None
    return index


def run_one(directory: str, index: int) -> dict:
    """Run cell `index` of an array's `directory`, writing cell-INDEX.json atomically."""
    cells = _cells(directory)
    if not 0 <= index < len(cells):
        raise SimulationError(f"--cell: {index} is not a cell (0 to {len(cells) - 1})")
    outcome = run_cell(cells[index])
    path = os.path.join(directory, f"cell-{index}.json")
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(outcome, f)
    os.replace(tmp, path)
    return outcome


def collect(directory: str) -> list[dict]:
    """The outcomes the array's tasks wrote, in cell order; a cell with none is an error row."""
    cells = _cells(directory)
    out = []
    for i, cell in enumerate(cells):
        try:
            with open(os.path.join(directory, f"cell-{i}.json"), encoding="utf-8") as f:
                out.append(json.load(f))
        except FileNotFoundError:
            out.append({"label": cell["label"], "error": "not run (no cell result yet)"})
        except (OSError, ValueError) as e:
            out.append({"label": cell["label"], "error": f"unreadable result: {e}"})
    return out


def _cells(directory: str) -> list[dict]:
    try:
        with open(os.path.join(directory, "cells.json"), encoding="utf-8") as f:
            cells = json.load(f)
    except FileNotFoundError:
        raise SimulationError(f"{directory}: no cells.json (write it with sweep --array)") from None
    except (OSError, ValueError) as e:
        raise SimulationError(f"{directory}/cells.json: {e}") from None
    if not isinstance(cells, list) or not all(isinstance(c, dict) and "settings" in c for c in cells):
        raise SimulationError(f"{directory}/cells.json: not a sweep's cells")
    return cells

