"""A replay's (or several replays') report: one self-contained HTML file, inline SVG.

    html([run_of(result.to_json(), "EASY"), run_of(other, "conservative")])

Each run shows as one colour everywhere: a summary table, utilization and queue length
over time (the metrics' series, already aggregated per step), mean wait by size class and
by queue side by side, and a Gantt-style strip of node occupancy over the run's window
(runs of consecutive units as rectangles, at most MAX_RECTS per run).  No script, no
external file, no network: any browser shows it as written.
"""
from __future__ import annotations

import html as _html
import json
import math

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")
DASHES = ("", "7 3", "2 2", "10 3 2 3", "4 4", "12 2 2 2 2 2", "1 3", "6 2 6 6")
MAX_RECTS = 20000
W, H = 720, 240
TOP, RIGHT, BOTTOM, LEFT = 24, 12, 36, 56  # margins: every label is drawn in them, off the data


def run_of(result: dict, label: str) -> dict:
    """What a report needs from a result's JSON (Result.to_json()): no per-job list."""
    m = result["metrics"]
    keep = ("overall", "by_size", "by_queue", "utilization", "loss_of_capacity", "makespan", "backfill_share",
            "jobs", "counted", "capability_share", "capability_size", "series", "series_step", "units")
    out = {"label": label, "policy": result.get("policy"), "backfill": result.get("backfill"),
           "estimate": result.get("estimate", "request"), "epoch": result.get("epoch", 0),
           "metrics": {k: m[k] for k in keep if k in m}, "gantt": result.get("gantt")}
    d = result.get("drain")
    if d:  # drain-time accounting's figures (NCSA's): overall, per day, by job size
        out["drain"] = {"pct": d["drain_pct"], "idle_pct": d["unallocated_idle_pct"],
                        "backfill_efficiency": d.get("backfill_efficiency"),
                        "daily": [day["drain_pct"] for day in d["days"]],
                        "by_size": {g["group"]: g["drain_node_hours"] for g in d["by_size"]}}
    return out


def load(path: str) -> list[dict]:
    """The runs in a results file: a replay's results.json, or a sweep's (its cells)."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if isinstance(data, dict) and "cells" in data:
        return [c["run"] for c in data["cells"] if c.get("run")]
    if isinstance(data, dict) and "metrics" in data:
        return [run_of(data, path)]
    raise ValueError("neither a replay's results.json nor a sweep's results")


def html(runs: list[dict], title: str = "hpcsched simulation report") -> str:
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{_e(title)}</title>",
             "<style>body{font:14px sans-serif;margin:2em;max-width:70em}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}th{background:#eee}"
             "td:first-child{text-align:left}svg{display:block;margin:0.5em 0 1.5em}</style></head><body>",
             f"<h1>{_e(title)}</h1>", _legend(runs), _summary(runs)]
    parts.append("<h2>Utilization over time</h2>" + _lines(runs, _series("utilization"), "fraction of units busy", 1.0))
    parts.append("<h2>Queue length over time</h2>" + _lines(runs, _series("queue"), "waiting jobs (mean per step)"))
    parts.append("<h2>Mean wait by size class (units)</h2>" + _bars(runs, _mean_wait_hours("by_size"), "mean wait (h)",
                                                                     xlabel="job size (units)"))
    parts.append("<h2>Mean wait by queue</h2>" + _bars(runs, _mean_wait_hours("by_queue"), "mean wait (h)",
                                                        xlabel="queue"))
    if any(r.get("drain") for r in runs):
        parts.append("<h2>Drain time (idle nodes held for waiting jobs)</h2>" + _drain(runs))
    parts.append("<h2>Node occupancy</h2>")
    for i, run in enumerate(runs):
        parts.append(_gantt(run, _style(i)[0]))
    parts.append("<p>Conventions: wait = start - submit; bsld = max(1, response / max(run, 10 s)); "
                 "utilization over [first submit, last end]; sizes in allocation units (nodes, or cores on "
                 "shared nodes); queues as the router chose them.</p></body></html>\n")
    return "\n".join(parts)


def _e(text) -> str:
    return _html.escape(str(text), quote=True)


def _legend(runs) -> str:
    """Each run's colour and dash, as its lines are drawn: one row a run."""
    rows = []
    for i, r in enumerate(runs):
        colour, dash = _style(i)
        y = 10 + 18 * i
        rows.append(f"<line x1='0' y1='{y}' x2='40' y2='{y}' stroke='{colour}' stroke-width='2.5'{dash}/>"
                    f"<text x='48' y='{y + 4}'>{_e(r['label'])}</text>")
    height = 18 * len(runs) + 4
    return (f"<svg class='legend' xmlns='http://www.w3.org/2000/svg' width='{W}' height='{height}' "
            f"viewBox='0 0 {W} {height}' font-size='12'>{''.join(rows)}</svg>")


def _style(i: int) -> tuple[str, str]:
    """Run i's colour and its dash attribute (solid first), distinct for the first 64 runs."""
    dash = DASHES[(i // len(COLOURS) + i) % len(DASHES)]
    return COLOURS[i % len(COLOURS)], f" stroke-dasharray='{dash}'" if dash else ""


def _summary(runs) -> str:
    head = ("<table><tr><th>run</th><th>policy</th><th>backfill</th><th>estimate</th><th>jobs</th>"
            "<th>utilization</th><th>loss of capacity</th><th>mean wait (s)</th><th>mean bsld</th>"
            "<th>capability share</th></tr>")
    rows = []
    for r in runs:
        m = r["metrics"]
        rows.append(f"<tr><td>{_e(r['label'])}</td><td>{_e(r['policy'])}</td><td>{_e(r['backfill'])}</td>"
                    f"<td>{_e(r['estimate'])}</td><td>{m.get('counted', 0)}</td>"
                    f"<td>{m.get('utilization', 0):.4f}</td><td>{m.get('loss_of_capacity', 0):.4f}</td>"
                    f"<td>{m['overall']['wait']['mean']:.0f}</td><td>{m['overall']['bsld']['mean']:.2f}</td>"
                    f"<td>{m.get('capability_share', 0):.4f}</td></tr>")
    return head + "".join(rows) + "</table>"


def _nice(top: float, n: int = 5) -> list[float]:
    """Round tick values from 0 to at least `top`: steps of 1, 2 or 5 times a power of ten."""
    if top <= 0:
        return [0.0, 1.0]
    raw = top / n
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    count = math.ceil(top / step - 1e-9)
    return [k * step for k in range(count + 1)]


def _frame(ylabel: str, ymax: float, xmax: float, xlabel: str, height: int = H,
           xticks: list[tuple[float, str]] | None = None) -> tuple[list[str], float, float]:
    """An SVG's axes: ticks, labels and gridlines on both, every label in the margins, not
    on the data.  Returns the parts and the scales (units per pixel) for x in [0, xmax] and
    y in [0, the top tick]."""
    yticks = _nice(ymax)
    top = yticks[-1]
    right, bottom = W - RIGHT, height - BOTTOM
    sx, sy = (right - LEFT) / (xmax or 1.0), (bottom - TOP) / (top or 1.0)
    out = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{W}' height='{height}' viewBox='0 0 {W} {height}' "
           f"font-size='11'>",
           f"<text x='{LEFT}' y='{TOP - 10}'>{_e(ylabel)}</text>"]
    for v in yticks:
        y = bottom - v * sy
        out.append(f"<line x1='{LEFT}' y1='{y:.1f}' x2='{right}' y2='{y:.1f}' stroke='#ddd'/>"
                   f"<text x='{LEFT - 6}' y='{y + 4:.1f}' text-anchor='end'>{_e(_num(v))}</text>")
    if xticks is None:
        xticks = [(v, _num(v)) for v in _nice(xmax, 8) if v <= xmax * (1 + 1e-9)]
    for v, label in xticks:
        x = LEFT + v * sx
        out.append(f"<line x1='{x:.1f}' y1='{TOP}' x2='{x:.1f}' y2='{bottom}' stroke='#eee'/>"
                   f"<line x1='{x:.1f}' y1='{bottom}' x2='{x:.1f}' y2='{bottom + 4}' stroke='#000'/>"
                   f"<text x='{x:.1f}' y='{bottom + 16}' text-anchor='middle'>{_e(label)}</text>")
    out += [f"<line x1='{LEFT}' y1='{bottom}' x2='{right}' y2='{bottom}' stroke='#000'/>",
            f"<line x1='{LEFT}' y1='{TOP}' x2='{LEFT}' y2='{bottom}' stroke='#000'/>",
            f"<text x='{(LEFT + right) / 2:.1f}' y='{height - 4}' text-anchor='middle'>{_e(xlabel)}</text>"]
    return out, sx, sy


def _num(v: float) -> str:
    return f"{v:.3g}" if abs(v) < 1e4 else f"{v:,.0f}"


def _time_axis(span: float) -> tuple[float, str]:
    """(seconds per axis unit, its name) for a span of time: days, or hours under two days."""
    return (3600.0, "hours") if span < 2 * 86400 else (86400.0, "days")


def _series(key: str):
    """A run's metric series `key`: (step starts, values, step), or None."""
    def get(run):
        s = run["metrics"].get("series", {})
        return (s["start"], s[key], run["metrics"].get("series_step", 86400.0)) if s.get(key) else None
    return get


def _lines(runs, series, ylabel: str, ymax: float | None = None) -> str:
    data = [(i, got) for i, r in enumerate(runs) if (got := series(r))]
    if not data:
        return "<p>(no series)</p>"
    t0 = min(starts[0] for _, (starts, _, _) in data)
    step = data[0][1][2]
    t1 = max(starts[-1] for _, (starts, _, _) in data) + step
    top = ymax or max(max(values) for _, (_, values, _) in data) or 1.0
    unit, name = _time_axis(t1 - t0)
    out, sx, sy = _frame(ylabel, top, (t1 - t0) / unit, f"{name} since the first submission")
    bottom = H - BOTTOM
    for i, (starts, values, _) in data:
        colour, dash = _style(i)
        pts = " ".join(f"{LEFT + (t + step / 2 - t0) / unit * sx:.1f},{bottom - v * sy:.1f}"
                       for t, v in zip(starts, values))
        out.append(f"<polyline fill='none' stroke='{colour}' stroke-width='1.5'{dash} "
                   f"points='{pts}'><title>{_e(runs[i]['label'])}</title></polyline>")
    out.append("</svg>")
    return "".join(out)


def _mean_wait_hours(key: str):
    """A run's mean wait per category of metric `key` (by_size, by_queue), in hours."""
    return lambda run: {c: v["wait"]["mean"] / 3600.0 for c, v in run["metrics"].get(key, {}).items()}


def _bars(runs, values, ylabel: str, unit: str = "h", xlabel: str = "") -> str:
    per_run = [values(r) for r in runs]
    cats: list[str] = []
    for v in per_run:
        cats.extend(c for c in v if c not in cats)
    if not cats:
        return "<p>(no jobs)</p>"
    top = max(x for v in per_run for x in v.values()) or 1.0
    group = (W - RIGHT - LEFT) / len(cats)
    out, _, sy = _frame(ylabel, top, len(cats), xlabel, xticks=[(k + 0.5, c) for k, c in enumerate(cats)])
    bar = group * 0.8 / len(runs)
    bottom = H - BOTTOM
    for k, c in enumerate(cats):
        x0 = LEFT + k * group + group * 0.1
        for i, v in enumerate(per_run):
            if c not in v:
                continue
            colour, dash = _style(i)
            out.append(f"<rect x='{x0 + i * bar:.1f}' y='{bottom - v[c] * sy:.1f}' width='{max(bar - 1, 1):.1f}' "
                       f"height='{v[c] * sy:.1f}' fill='{colour}' fill-opacity='0.75' stroke='{colour}'{dash}>"
                       f"<title>{_e(runs[i]['label'])} {_e(c)}: {v[c]:.2f} {unit}</title></rect>")
    out.append("</svg>")
    return "".join(out)


def _drain(runs) -> str:
    """The drain figures of each run: a table, daily drain %, drain by job-size group."""
    rows = ["<table><tr><th>run</th><th>drain %</th><th>unallocated idle %</th><th>backfill efficiency</th>"
            "<th>daily drain %: median</th><th>max</th></tr>"]
    for r in runs:
        d = r.get("drain")
        if not d:
            continue
        daily = sorted(d["daily"]) or [0.0]
        eff = d["backfill_efficiency"]
        rows.append(f"<tr><td>{_e(r['label'])}</td><td>{d['pct']:.2f}</td><td>{d['idle_pct']:.2f}</td>"
                    f"<td>{'-' if eff is None else f'{100 * eff:.1f} %'}</td>"
                    f"<td>{daily[len(daily) // 2]:.2f}</td><td>{daily[-1]:.2f}</td></tr>")
    parts = ["".join(rows) + "</table>"]

    def daily(run):
        d = run.get("drain")
        return ([i * 86400.0 for i in range(len(d["daily"]))], d["daily"], 86400.0) if d and d["daily"] else None
    parts.append(_lines(runs, daily, "drain % of the day's node-hours"))
    parts.append(_bars(runs, lambda r: r["drain"]["by_size"] if r.get("drain") else {},
                       "drain node-hours by job size", "node-hours", "job size (nodes)"))
    return "".join(parts)


def _gantt(run: dict, colour: str) -> str:
    g = run.get("gantt")
    if not g or not g["jobs"]:
        return f"<p>{_e(run['label'])}: no job in the window</p>"
    t0, t1 = g["window"]
    units = max(g["units"], 1)
    first = _first(run)
    unit, name = _time_axis(t1 - t0)
    lo, hi = (t0 - first) / unit, (t1 - first) / unit  # the window on the axis (from the first submission)
    ticks = [lo + v for v in _nice(hi - lo, 8) if v <= (hi - lo) * (1 + 1e-9)]
    height = 160 + TOP + BOTTOM
    out, sx, sy = _frame("units", units, hi - lo, f"{name} since the first submission", height,
                         [(v - lo, _num(v)) for v in ticks])
    out.insert(1, f"<rect x='{LEFT}' y='{TOP + 160 - units * sy:.1f}' width='{W - RIGHT - LEFT}' "
                  f"height='{units * sy:.1f}' fill='#f4f4f4'/>")  # (the machine's units, under the top tick)
    drawn = 0
    for job, start, end, runs_ in g["jobs"]:
        a, b = max(start, t0), min(end, t1)
        for first_unit, n in runs_:
            if drawn >= MAX_RECTS:
                break
            out.append(f"<rect x='{LEFT + (a - t0) / unit * sx:.1f}' y='{TOP + 160 - (first_unit + n) * sy:.1f}' "
                       f"width='{max((b - a) / unit * sx, 0.5):.1f}' height='{max(n * sy, 0.5):.1f}' fill='{colour}' "
                       f"fill-opacity='0.6' stroke='#fff' stroke-width='0.3'><title>job {job}</title></rect>")
            drawn += 1
    out.append("</svg>")
    return (f"<p>{_e(run['label'])}: {units} units, one rectangle per job and run of consecutive units</p>"
            + "".join(out))


def _first(run: dict) -> float:
    series = run["metrics"].get("series", {})
    return series["start"][0] if series.get("start") else run["gantt"]["window"][0]

