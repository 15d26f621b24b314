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

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")
MAX_RECTS = 20000
W, H, PAD = 720, 220, 44


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
    parts.append("<h2>Mean wait by size class (units)</h2>" + _bars(runs, _mean_wait_hours("by_size"), "mean wait (h)"))
    parts.append("<h2>Mean wait by queue</h2>" + _bars(runs, _mean_wait_hours("by_queue"), "mean wait (h)"))
    if any(r.get("drain") for r in runs):
        parts.append("<h2>Drain time (idle nodes held for waiting jobs)</h2>" + _drain(runs))
    parts.append("<h2>Node occupancy</h2>")
    for i, run in enumerate(runs):
        parts.append(_gantt(run, COLOURS[i % len(COLOURS)]))
    parts.append("<p>Conventions: wait = start - submit; bsld = max(1, response / max(run, 10 s)); "
                 "utilization over [first submit, last end]; sizes in allocation units (nodes, or cores on "
                 "shared nodes); queues as the router chose them.</p></body></html>\n")
    return "\n".join(parts)


def _e(text) -> str:
    return _html.escape(str(text), quote=True)


def _legend(runs) -> str:
    items = "".join(f"<span style='color:{COLOURS[i % len(COLOURS)]}'>&#9632;</span> {_e(r['label'])} &nbsp; "
                    for i, r in enumerate(runs))
    return f"<p>{items}</p>"


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


def _axes(ylabel: str, ymax: float, xlabels: tuple[str, str]) -> list[str]:
    out = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{W}' height='{H}' viewBox='0 0 {W} {H}'>",
           f"<line x1='{PAD}' y1='{H - PAD}' x2='{W - 8}' y2='{H - PAD}' stroke='#000'/>",
           f"<line x1='{PAD}' y1='8' x2='{PAD}' y2='{H - PAD}' stroke='#000'/>",
           f"<text x='4' y='14' font-size='11'>{_e(_num(ymax))}</text>",
           f"<text x='{PAD + 4}' y='20' font-size='11'>{_e(ylabel)}</text>",
           f"<text x='{PAD}' y='{H - PAD + 16}' font-size='11'>{_e(xlabels[0])}</text>",
           f"<text x='{W - 8}' y='{H - PAD + 16}' font-size='11' text-anchor='end'>{_e(xlabels[1])}</text>"]
    return out


def _num(v: float) -> str:
    return f"{v:.3g}"


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
    days = (t1 - t0) / 86400.0
    out = _axes(ylabel, top, ("day 0", f"day {days:.0f}"))
    sx, sy = (W - PAD - 8) / max(t1 - t0, 1.0), (H - PAD - 8) / top
    for i, (starts, values, _) in data:
        pts = " ".join(f"{PAD + (t + step / 2 - t0) * sx:.1f},{H - PAD - v * sy:.1f}"
                       for t, v in zip(starts, values))
        out.append(f"<polyline fill='none' stroke='{COLOURS[i % len(COLOURS)]}' stroke-width='1.2' "
                   f"points='{pts}'><title>{_e(runs[i]['label'])}</title></polyline>")
    out.append("</svg>")
    return "".join(out)


def _mean_wait_hours(key: str):
    """A run's mean wait per category of metric `key` (by_size, by_queue), in hours."""
    return lambda run: {c: v["wait"]["mean"] / 3600.0 for c, v in run["metrics"].get(key, {}).items()}


def _bars(runs, values, ylabel: str, unit: str = "h") -> str:
    per_run = [values(r) for r in runs]
    cats: list[str] = []
    for v in per_run:
        cats.extend(c for c in v if c not in cats)
    if not cats:
        return "<p>(no jobs)</p>"
    top = max(x for v in per_run for x in v.values()) or 1.0
    out = _axes(ylabel, top, ("", ""))
    group = (W - PAD - 8) / len(cats)
    bar = group * 0.8 / len(runs)
    sy = (H - PAD - 8) / top
    for k, c in enumerate(cats):
        x0 = PAD + k * group + group * 0.1
        out.append(f"<text x='{x0 + group * 0.4:.1f}' y='{H - PAD + 14}' font-size='10' "
                   f"text-anchor='middle'>{_e(c)}</text>")
        for i, v in enumerate(per_run):
            if c not in v:
                continue
            out.append(f"<rect x='{x0 + i * bar:.1f}' y='{H - PAD - v[c] * sy:.1f}' width='{max(bar - 1, 1):.1f}' "
                       f"height='{v[c] * sy:.1f}' fill='{COLOURS[i % len(COLOURS)]}'><title>{_e(runs[i]['label'])} "
                       f"{_e(c)}: {v[c]:.2f} {unit}</title></rect>")
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
                       "drain node-hours by job size", "node-hours"))
    return "".join(parts)


def _gantt(run: dict, colour: str) -> str:
    g = run.get("gantt")
    if not g or not g["jobs"]:
        return f"<p>{_e(run['label'])}: no job in the window</p>"
    t0, t1 = g["window"]
    units = max(g["units"], 1)
    height = 160
    sx, sy = (W - PAD - 8) / (t1 - t0), height / units
    out = [f"<p>{_e(run['label'])}: day {(t0 - _first(run)) / 86400:.1f} to {(t1 - _first(run)) / 86400:.1f}, "
           f"{units} units (one rectangle per job and run of consecutive units)</p>",
           f"<svg xmlns='http://www.w3.org/2000/svg' width='{W}' height='{height + 20}' "
           f"viewBox='0 0 {W} {height + 20}'><rect x='{PAD}' y='0' width='{W - PAD - 8}' height='{height}' "
           f"fill='#f4f4f4'/>"]
    drawn = 0
    for job, start, end, runs_ in g["jobs"]:
        a, b = max(start, t0), min(end, t1)
        for lo, n in runs_:
            if drawn >= MAX_RECTS:
                break
            out.append(f"<rect x='{PAD + (a - t0) * sx:.1f}' y='{lo * sy:.1f}' width='{max((b - a) * sx, 0.5):.1f}' "
                       f"height='{max(n * sy, 0.5):.1f}' fill='{colour}' fill-opacity='0.6' stroke='#fff' "
                       f"stroke-width='0.3'><title>job {job}</title></rect>")
            drawn += 1
    out.append("</svg>")
    return "".join(out)


def _first(run: dict) -> float:
    series = run["metrics"].get("series", {})
    return series["start"][0] if series.get("start") else run["gantt"]["window"][0]

