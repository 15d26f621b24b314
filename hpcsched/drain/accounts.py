"""The drain accumulators (reference/algorithms.md section 8) and the reports built on them.

A sample says what one node looked like at one time: its state, its reservation list
(soonest first) and its job list.  The time from a node's sample to its next sample
accrues to the earlier sample's *combination*: one of 6 states x (has a reservation) x
(has a job) = 24.  Drain is Idle with a reservation, charged to the first reservation in
the list; Idle without one is unallocated idle time (no suitable work), not drain.

Invariant: every node-second added is split at day boundaries (86,400 s periods at the
source's UTC offset), so `days[d]` holds exactly the node-seconds that fell in day d, and
`sum(days[d])` equals the seconds `covered` in day d summed over nodes.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

STATES = ("Down", "Idle", "Busy", "Running", "Drained", "Draining")
IDLE = STATES.index("Idle")
RSV, JOB = 2, 1  # combination = state index * 4 + RSV (has a reservation) + JOB (has a job)
DRAIN = IDLE * 4 + RSV  # Idle, reservation, no job
UNALLOCATED = IDLE * 4  # Idle, nothing
DAY = 86400.0

#: Blue Waters' job-size groups (nodes): name, lowest size; each runs to the next's lowest
GROUPS = (("Tiny", 1), ("Sub1k", 129), ("1k+", 1000), ("2k+", 2000), ("4k+", 4000), ("8k+", 8000),
          ("16k+", 16000))
SHORT_RUN = 30.0  # "failure to launch": jobs that ran less than this many seconds


def combo(state: int, has_rsv: bool, has_job: bool) -> int:
    return state * 4 + RSV * has_rsv + JOB * has_job


def combo_name(c: int) -> str:
    s, r, j = divmod(c, 4)[0], c & RSV, c & JOB
    return f"{STATES[s]}{'+rsv' if r else ''}{'+job' if j else ''}"


def groups_from(bounds: list[int]) -> tuple[tuple[str, int], ...]:
    """Size groups from their lowest sizes (`--groups 1,129,1000`): named lo-hi and lo+."""
    if not bounds or bounds[0] < 1 or any(b <= a for a, b in zip(bounds, bounds[1:])):
        raise ValueError("size groups: give increasing lowest sizes, each at least 1")
    names = []
    for lo, nxt in zip(bounds, bounds[1:] + [None]):
        names.append(f"{lo}+" if nxt is None else f"{lo}" if nxt == lo + 1 else f"{lo}-{nxt - 1}")
    return tuple(zip(names, bounds))


@dataclass
class JobRecord:
    """What a job record says (Torque accounting log, simulator results, SWF)."""

    id: str
    size: int  # nodes
    start: float | None  # None: had not started when the records end
    end: float | None
    backfill: bool | None = None  # None: the records do not say

    @property
    def run(self) -> float | None:
        if self.start is None or self.end is None:
            return None
        return max(0.0, self.end - self.start)


@dataclass
class Accounts:
    """Node-seconds per day and combination, drain per job, and how well days are covered.

    `offset` is the sources' UTC offset in seconds (days start at local midnight).
    """

    offset: float | None = None  # None: not known yet (taken as 0 until it is)
    days: dict[int, list[float]] = field(default_factory=dict)  # day -> 24 node-second sums
    # seconds accounted per day: node -> seconds (logs), or None -> seconds every node has
    # (the simulator's samples cover every node at once)
    covered: dict[int, dict] = field(default_factory=dict)
    drain: dict[str, float] = field(default_factory=dict)  # job / reservation id -> node-seconds
    seen_running: dict[str, float] = field(default_factory=dict)  # job id -> node-seconds in joblists
    seen_on: dict[str, set] = field(default_factory=dict)  # job id -> the nodes whose joblists named it
    nodes: set = field(default_factory=set)
    node_count: int = 0  # the static basis' nodes (0: the nodes seen)
    first: float = math.inf
    last: float = -math.inf

    def add(self, c: int, t0: float, t1: float, node, charge: str | None = None) -> None:
        """Node `node` spent [t0, t1) in combination `c` (a log's samples); its drain, if
        any, is charged to reservation `charge`."""
        if t1 <= t0:
            return
        if charge is not None:
            self.drain[charge] = self.drain.get(charge, 0.0) + (t1 - t0)
        off = self.offset or 0.0
        d = int((t0 + off) // DAY)
        if t0 >= self.first and t1 <= (d + 1) * DAY - off and d in self.days:  # (most: within a day seen)
            if t1 > self.last:
                self.last = t1
            self.days[d][c] += t1 - t0
            cov = self.covered[d]
            cov[node] = cov.get(node, 0.0) + (t1 - t0)
            return
        for acc, cov, seconds in self._split(t0, t1):
            acc[c] += seconds
            cov[node] = cov.get(node, 0.0) + seconds

    def add_all(self, t0: float, t1: float, counts: dict[int, int], charges: dict[str, int]) -> None:
        """Every node spent [t0, t1) as one pass left it (the simulator's samples):
        `counts` nodes per combination, `charges` drained nodes per reservation."""
        if t1 <= t0:
            return
        dt = t1 - t0
        drain = self.drain
        for rid, n in charges.items():
            drain[rid] = drain.get(rid, 0.0) + n * dt
        off = self.offset or 0.0
        d = int((t0 + off) // DAY)
        if t1 <= (d + 1) * DAY - off and d in self.days:  # (most passes: within a day seen)
            acc, cov = self.days[d], self.covered[d]
            if t1 > self.last:
                self.last = t1
            for c, n in counts.items():
                acc[c] += n * dt
            cov[None] += dt
            return
        for acc, cov, seconds in self._split(t0, t1):
            for c, n in counts.items():
                acc[c] += n * seconds
            cov[None] = cov.get(None, 0.0) + seconds

    def _split(self, t0: float, t1: float):
        """(day's accumulator, day's coverage, seconds) for each day [t0, t1) touches."""
        if t0 < self.first:
            self.first = t0
        if t1 > self.last:
            self.last = t1
        off = self.offset or 0.0
        while t0 < t1:
            d = int((t0 + off) // DAY)
            cut = min(t1, (d + 1) * DAY - off)
            acc = self.days.get(d)
            if acc is None:
                acc = self.days[d] = [0.0] * 24
                self.covered[d] = {}
            yield acc, self.covered[d], cut - t0
            t0 = cut

    def day_name(self, d: int) -> str:
        return time.strftime("%Y-%m-%d", time.gmtime(d * DAY))

    # --- the figures -------------------------------------------------------------------
    def report(self, jobs: dict[str, JobRecord] | None = None, *, basis: str = "static",
               groups=GROUPS, gap: float = 900.0, top: int = 10) -> dict:
        """Every figure of the drain report, as plain data (`text` prints it).

        Static basis: nodes x the day's accounted seconds (the most any node has);
        dynamic: the day's node-seconds not Down.  A node is *short* on a day when its
        accounted seconds fall more than `gap` below the day's basis seconds."""
        if basis not in ("static", "dynamic"):
            raise ValueError(f"basis must be static or dynamic, not {basis!r}")
        nodes = self.node_count or len(self.nodes) or 1
        per_day, totals, base_total = [], [0.0] * 24, 0.0
        for d in sorted(self.days):
            acc, cov = self.days[d], self.covered[d]
            every = cov.get(None, 0.0)
            named = [s + every for k, s in cov.items() if k is not None]
            seconds = max(named, default=every)
            short = sum(1 for s in named if s < seconds - gap)
            if named:
                short += max(0, nodes - len(named))  # nodes with no sample at all that day
            base = seconds * nodes if basis == "static" else sum(acc) - sum(acc[0:4])
            for i in range(24):
                totals[i] += acc[i]
            base_total += base
            per_day.append({"day": self.day_name(d), "accounted_s": round(seconds, 3),
                            "coverage": round(seconds / DAY, 4), "nodes_short": short,
                            **_shares(acc, base)})
        report = {"basis": basis, "nodes": nodes, "node_hours": base_total / 3600,
                  **_shares(totals, base_total), "days": per_day,
                  "states": {combo_name(i): totals[i] / 3600 for i in range(24) if totals[i]}}
        jobs = jobs or {}
        drained = {k: v for k, v in self.drain.items() if v > 0}
        report["drain_attributed_node_hours"] = sum(drained.values()) / 3600
        report["drain_unattributed_node_hours"] = sum(v for k, v in drained.items() if k not in jobs) / 3600
        # without job records, a job's size is the nodes whose job lists named it (logs)
        sized = jobs or {jid: JobRecord(jid, len(on), None, None) for jid, on in self.seen_on.items()}
        report["sizes_from"] = "job records" if jobs else "the logs' job lists"
        report["by_size"] = self._by_size(sized, drained, groups)
        report["failure_to_launch"] = self._failures(jobs, drained, top)
        report["sliding"] = self._sliding(jobs, drained, top)
        bf = [j for j in jobs.values() if j.backfill and j.run]
        if any(j.backfill is not None for j in jobs.values()):
            bf_ns = sum(j.size * j.run for j in bf)
            dr = totals[DRAIN]
            report["backfill_efficiency"] = bf_ns / (bf_ns + dr) if bf_ns + dr else None
            report["backfill_node_hours"] = bf_ns / 3600
        else:
            report["backfill_efficiency"] = None  # the records do not say which jobs backfilled
        return report

    def _by_size(self, jobs, drained, groups) -> list[dict]:
        rows = [{"group": name, "lo": lo, "jobs": 0, "drained_jobs": 0, "drain_node_hours": 0.0,
                 "mean_drain_node_seconds": 0.0, "mean_drain_per_node": 0.0} for name, lo in groups]
        los = [lo for _, lo in groups]
        for j in jobs.values():
            k = _group(los, j.size)
            if k is None:
                continue
            row, ns = rows[k], drained.get(j.id, 0.0)
            row["jobs"] += 1
            if ns:
                row["drained_jobs"] += 1
                row["drain_node_hours"] += ns / 3600
                row["mean_drain_per_node"] += ns / j.size
        for row in rows:
            if row["jobs"]:
                row["mean_drain_node_seconds"] = row["drain_node_hours"] * 3600 / row["jobs"]
                row["mean_drain_per_node"] /= row["jobs"]
        return rows

    def _failures(self, jobs, drained, top) -> dict:
        """Jobs that held nodes idle, then ran less than SHORT_RUN seconds."""
        short = [(j, drained[j.id]) for j in jobs.values()
                 if j.id in drained and j.run is not None and j.run < SHORT_RUN]
        rows = sorted(({"job": j.id, "size": j.size, "run_s": j.run, "drain_node_hours": ns / 3600,
                        "drain_per_run": ns / (j.size * j.run) if j.run else math.inf}
                       for j, ns in short), key=lambda r: (-r["drain_per_run"], r["job"]))
        return {"jobs": len(short), "drain_node_hours": sum(ns for _, ns in short) / 3600,
                "worst": [r | {"drain_per_run": None if r["drain_per_run"] == math.inf else r["drain_per_run"]}
                          for r in rows[:top]]}

    def _sliding(self, jobs, drained, top) -> list[dict]:
        """Jobs ranked by drain / size; `queued` marks those not started when the data ends.
        Without records, a job never seen in a job list counts as queued and as size 1."""
        rows = []
        for jid, ns in drained.items():
            rec = jobs.get(jid)
            if rec is not None:
                size, queued = rec.size, rec.start is None or rec.start >= self.last
            elif not jobs:  # (the nodes the logs saw it run on; 1 for one never seen running)
                size, queued = len(self.seen_on.get(jid, ())) or 1, jid not in self.seen_running
            else:
                continue  # a reservation, or a job the records do not have
            rows.append({"job": jid, "size": size, "drain_node_hours": ns / 3600,
                         "drain_per_node_s": ns / size, "queued": queued})
        rows.sort(key=lambda r: (not r["queued"], -r["drain_per_node_s"], r["job"]))
        return rows[:top]


def _group(los: list[int], size: int) -> int | None:
    k = None
    for i, lo in enumerate(los):
        if size >= lo:
            k = i
    return k


def _shares(acc: list[float], base: float) -> dict:
    """Drain, unallocated idle, down and occupied node-hours of one accumulator, and their
    shares of `base` node-seconds."""
    drain, idle = acc[DRAIN], acc[UNALLOCATED]
    down = sum(acc[0:4])
    occupied = sum(acc[c] for c in range(24) if c & JOB)
    pct = (lambda x: 100.0 * x / base) if base else (lambda x: 0.0)
    return {"drain_node_hours": drain / 3600, "drain_pct": pct(drain),
            "unallocated_idle_node_hours": idle / 3600, "unallocated_idle_pct": pct(idle),
            "down_node_hours": down / 3600, "down_pct": pct(down),
            "utilization_pct": pct(occupied)}


def text(report: dict, title: str = "drain time", daily: bool = True) -> str:
    """The report as people read it (`daily`: a row per day, else their spread)."""
    r = report
    out = [f"{title}: {r['drain_pct']:.2f} % of {r['node_hours']:,.0f} node-hours ({r['basis']} basis, "
           f"{r['nodes']} nodes): drain {r['drain_node_hours']:,.1f} nh, unallocated idle "
           f"{r['unallocated_idle_pct']:.2f} %, down {r['down_pct']:.2f} %, utilization {r['utilization_pct']:.2f} %"]
    eff = r.get("backfill_efficiency")
    out.append("backfill efficiency: " + (f"{100 * eff:.1f} % (backfill {r['backfill_node_hours']:,.1f} nh / "
                                          f"backfill + drain)" if eff is not None else
                                          "unknown (no record says which jobs backfilled)"))
    if not daily:
        pct = sorted(d["drain_pct"] for d in r["days"])
        if pct:
            out.append(f"daily drain % over {len(pct)} days: median {pct[len(pct) // 2]:.2f}, "
                       f"p90 {pct[min(len(pct) - 1, int(0.9 * len(pct)))]:.2f}, max {pct[-1]:.2f}, "
                       f"days without drain {sum(1 for p in pct if p == 0)}")
    else:
        out.append("day          accounted  short  drain %  idle %  down %  util %")
    for d in r["days"] if daily else ():
        out.append(f"{d['day']}  {d['accounted_s']:9.0f}  {d['nodes_short']:5d}  {d['drain_pct']:7.2f}"
                   f"  {d['unallocated_idle_pct']:6.2f}  {d['down_pct']:6.2f}  {d['utilization_pct']:6.2f}")
    held, unknown = r["drain_attributed_node_hours"], r["drain_unattributed_node_hours"]
    out.append(f"drain by job size, sizes from {r.get('sizes_from', 'job records')}: {held:,.1f} nh of drain "
               "charged to job ids" + (f", {'all' if unknown >= held else 'of which'} {unknown:,.1f} nh to ids no "
                                       "job record names (--jobs gives records)" if unknown else ""))
    out.append("group        jobs  drained   drain nh   mean drain ns/job  mean drain s/node")
    for g in r["by_size"]:
        out.append(f"{g['group']:<10} {g['jobs']:6d}  {g['drained_jobs']:7d}  {g['drain_node_hours']:9.1f}"
                   f"   {g['mean_drain_node_seconds']:17.0f}  {g['mean_drain_per_node']:16.0f}")
    f = r["failure_to_launch"]
    out.append(f"failure to launch (ran < {SHORT_RUN:g} s after drain): {f['jobs']} jobs, "
               f"{f['drain_node_hours']:,.1f} nh of drain")
    for w in f["worst"]:
        ratio = "inf" if w["drain_per_run"] is None else f"{w['drain_per_run']:.1f}"
        out.append(f"  job {w['job']}: {w['size']} nodes, ran {w['run_s']:g} s, drain {w['drain_node_hours']:.2f} nh,"
                   f" drain/run {ratio}")
    out.append("most drain per node (perpetually sliding when still queued):")
    for s in r["sliding"]:
        out.append(f"  job {s['job']}: {s['size']} nodes, {s['drain_per_node_s']:,.0f} s/node"
                   f"{' (queued)' if s['queued'] else ''}")
    return "\n".join(out)
