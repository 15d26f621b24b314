"""The `hpcsched` command: a thin layer over the library.

    hpcsched demo                      schedule a small workload on the embedded test rig
    hpcsched simulate TRACE [options]  replay an SWF trace, print metrics, write results
    hpcsched sweep GRID [options]      replay a grid of configurations x traces in parallel
    hpcsched report RESULTS... -o F    an HTML report of simulation or sweep results
    hpcsched store check|repair        a damaged store found (file, line) and mended
    hpcsched drain LOGS... [options]   drain-time report from Moab-format node-status logs

Exit status: 0 success, 1 a bad trace, log, job record or configuration (one line on
stderr), 2 bad usage.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time

from . import __version__
from .core.errors import ConfigError, SchedulerError
from .machines import BUILTIN as BUILTIN_MACHINES


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2, as PBS-style commands do
        self.exit(2, f"{self.prog}: {message}\n")


def _progress(stream):
    """A progress line on stderr, redrawn at most 5 times a second (terminals only): jobs
    done (of the header's MaxRecords when it has one), the simulated date, the rate and,
    with a total, the time left."""
    last = [0.0]
    start = time.monotonic()

    def show(read: int, done: int, clock: float | None = None, total: int | None = None) -> None:
        t = time.monotonic()
        if t - last[0] < 0.2:
            return
        last[0] = t
        rate = done / max(t - start, 1e-9)
        line = f"\r{done}" + (f"/{total}" if total else "") + f" jobs done, {read} records read"
        if clock is not None:
            line += ", simulated " + time.strftime("%Y-%m-%d %H:%M", time.gmtime(clock))
        line += f", {rate:.0f} jobs/s"
        if total and rate > 0:
            line += f", about {max(0.0, (total - done) / rate):.0f} s left"
        stream.write(line + "  ")
        stream.flush()
    return show


def _sweep_progress(stream, cells: int, jobs: int | None):
    """A sweep's progress line on stderr (terminals only), from its start: the cells ended,
    and each running cell's share of its jobs replayed."""
    start = time.monotonic()
    stream.write(f"{cells} cells on {max(1, min(jobs or os.cpu_count() or 1, cells))} processes\n")
    stream.flush()

    def show(running: dict, finished: int) -> None:
        spent = time.monotonic() - start
        parts = [f"cell {i + 1}: {done / total:.0%}" if total else f"cell {i + 1}: {done} jobs"
                 for i, (done, total) in sorted(running.items())]
        left = f", about {spent / finished * (cells - finished):.0f} s left" if finished else ""
        stream.write(f"\r{finished}/{cells} cells done, {spent:.0f} s{left}" + (f"; {', '.join(parts)}" if parts
                                                                                 else "") + "   ")
        stream.flush()
    return show


def _groups(prog: str, given: str | None, default=None):
    """--groups as size groups (`default` when not given), or False after a usage message."""
    from .drain.accounts import groups_from
    try:
        return groups_from([int(x) for x in given.split(",")]) if given else default
    except ValueError:
        print(f"hpcsched {prog}: --groups: give increasing lowest sizes, e.g. 1,129,1000", file=sys.stderr)
        return False


def cmd_simulate(args) -> int:
    from .config import parse_backfill
    from .sim.run import replay
    try:
        if args.backfill:
            parse_backfill(args.backfill)
    except ConfigError as e:
        print(f"hpcsched simulate: {e}", file=sys.stderr)
        return 2
    if _groups("simulate", args.groups) is False:
        return 2
    given = {"trace": args.trace, "config": args.config, "policy": args.policy, "backfill": args.backfill,
             "placement": args.placement, "estimate": args.estimate, "queue_from": args.queue_from,
             "queue_map": args.queue_map, "cancelled": args.cancelled, "load": args.load, "nodes": args.nodes,
             "ppn": args.ppn,
             "shared": args.shared or None, "period": args.period, "skip_bad": args.skip_bad or None,
             "warmup": args.warmup, "cooldown": args.cooldown or None, "size_classes": args.size_classes,
             "capability": args.capability, "series": args.series, "gantt": args.gantt,
             "drain": True if args.drain else False if args.no_drain else None, "machine": args.machine,
             "size_map": args.size_map,
             "capability_split": args.capability_split, "groups": args.groups}
    settings = {k: v for k, v in given.items() if v is not None}
    if not _outputs_ready("simulate", args.out, [args.report]):
        return 1
    progress = _progress(sys.stderr) if sys.stderr.isatty() and not args.quiet else None
    try:
        result = replay(settings, progress=progress)
    except (SchedulerError, OSError, EOFError) as e:
        if progress:
            sys.stderr.write("\n")
        where = f"{args.trace}: " if str(e).startswith("line ") or isinstance(e, (OSError, EOFError)) else ""
        print(f"hpcsched simulate: {where}{e}", file=sys.stderr)
        return 1
    if progress:
        sys.stderr.write("\n")
    wrote = []  # (the files first: a reader of stdout that goes away loses none of them)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        _write_atomic(os.path.join(args.out, "results.json"),
                      result.write_json)
        _write_atomic(os.path.join(args.out, "schedule.swf"), result.write_swf)
        wrote.append(f"wrote {os.path.join(args.out, 'results.json')} and {os.path.join(args.out, 'schedule.swf')}")
    if args.report:
        from .sim import report
        _write_atomic(args.report, lambda f: f.write(report.html([report.run_of(result.to_json(), args.trace)])))
        wrote.append(f"wrote {args.report}")
    print(result.summary())
    for line in wrote:
        print(line)
    return 0


def cmd_sweep(args) -> int:
    from .sim import report, sweep
    try:
        if args.cell is not None or (args.grid and os.path.isdir(args.grid) and not args.collect):
            if not args.grid:
                print("hpcsched sweep: --cell needs the array's directory", file=sys.stderr)
                return 2
            outcome = sweep.run_one(args.grid, sweep.cell_index(args.cell))
            if "error" in outcome:
                print(f"hpcsched sweep: cell {args.cell}: {outcome['error']}", file=sys.stderr)
                return 1
            return 0
        if args.collect:
            outcomes = sweep.collect(args.collect)
        else:
            if not args.grid:
                print("hpcsched sweep: give a grid file (or --collect DIR)", file=sys.stderr)
                return 2
            cells = sweep.load(args.grid)
            if not _outputs_ready("sweep", args.out, [args.report]):
                return 1
            if args.array:
                names = sweep.write_array(cells, args.array)
                print(f"wrote {', '.join(os.path.join(args.array, n) for n in names)}: submit one of the "
                      f"scripts ({len(cells)} tasks), then: hpcsched sweep --collect {args.array}")
                return 0
            show = None
            if sys.stderr.isatty() and not args.quiet:
                show = _sweep_progress(sys.stderr, len(cells), args.jobs)
            outcomes = sweep.run(cells, args.jobs, show)
            if show:
                sys.stderr.write("\n")
    except (SchedulerError, OSError) as e:
        print(f"hpcsched sweep: {e}", file=sys.stderr)
        return 1
    wrote = []  # (the files first: a reader of stdout that goes away loses none of them)
    if args.out:
        import json
        os.makedirs(args.out, exist_ok=True)
        _write_atomic(os.path.join(args.out, "results.json"), lambda f: json.dump(sweep.results(outcomes), f))
        _write_atomic(os.path.join(args.out, "results.csv"), lambda f: f.write(sweep.table(outcomes, "csv")))
        wrote.append(f"wrote {os.path.join(args.out, 'results.json')} and {os.path.join(args.out, 'results.csv')}")
    if args.report:
        runs = [o["run"] for o in outcomes if o.get("run")]
        _write_atomic(args.report, lambda f: f.write(report.html(runs, f"hpcsched sweep: {args.grid or args.collect}")))
        wrote.append(f"wrote {args.report}")
    sys.stdout.write(sweep.table(outcomes, args.format, args.wide))
    for line in wrote:
        print(line)
    failed = [o for o in outcomes if "error" in o]
    for o in failed:
        print(f"hpcsched sweep: {o['label']}: {o['error']}", file=sys.stderr)
    return 1 if failed else 0


def cmd_report(args) -> int:
    from .sim import report
    runs = []
    for path in args.results:
        try:
            mine = report.load(path)
            report.html(mine)  # (a run the page cannot show is named with its file here, not a traceback later)
        except FileNotFoundError:
            print(f"hpcsched report: {path}: no such file", file=sys.stderr)
            return 1
        except OSError as e:
            print(f"hpcsched report: {path}: {e.strerror or e}", file=sys.stderr)
            return 1
        except (ValueError, KeyError, TypeError, AttributeError, IndexError) as e:
            why = e if type(e) is ValueError else f"{type(e).__name__}: {e}"
            print(f"hpcsched report: {path}: not results this version reads ({why})", file=sys.stderr)
            return 1
        runs.extend(mine)
    _write_atomic(args.output, lambda f: f.write(report.html(runs)))
    print(f"wrote {args.output} ({len(runs)} runs)")
    return 0


def cmd_drain(args) -> int:
    import functools
    import json

    from .drain import moablog, records
    from .drain.accounts import GROUPS, Accounts, text
    from .sim.simulate import swf_job_records
    groups = _groups("drain", args.groups, GROUPS)  # (Moab logs: Blue Waters' groups unless given)
    if groups is False:
        return 2
    logs = []
    for p in args.logs:
        if os.path.isdir(p):
            logs.extend(os.path.join(p, q) for q in sorted(os.listdir(p)))
        elif os.path.exists(p):
            logs.append(p)
        else:
            print(f"hpcsched drain: {p}: no such file", file=sys.stderr)
            return 1
    skipped = [] if args.skip_bad else None
    try:
        jobs = records.merge(args.jobs or [], functools.partial(swf_job_records, ppn=args.ppn), skipped)
        accounts, quality = moablog.read(logs, Accounts(node_count=args.nodes or 0))
    except (OSError, EOFError, ValueError, SchedulerError) as e:
        print(f"hpcsched drain: {e}", file=sys.stderr)
        return 1
    report = accounts.report(jobs, basis=args.basis, groups=groups, gap=args.gap, top=args.top)
    report["quality"] = quality.to_json()
    if skipped is not None:
        report["quality"]["job_lines_skipped"] = skipped
    if args.json:
        json.dump(report, sys.stdout, indent=1)
        print()
    else:
        print(text(report))
        print(f"read {quality.files} files, {quality.lines} lines: {quality.samples} samples, "
              f"{quality.unrelated} other lines, {quality.malformed} malformed status lines"
              + (f"; skipped {len(skipped)} malformed job records" if skipped else ""))
    for e in quality.errors:
        print(f"hpcsched drain: malformed: {e}", file=sys.stderr)
    for e in skipped or ():
        print(f"hpcsched drain: skipped: {e}", file=sys.stderr)
    return 0


def _outputs_ready(prog: str, directory: str | None, files=()) -> bool:
    """Make --out's directory and check --report's, before a long replay rather than after;
    False (one line said) when they cannot be written."""
    try:
        if directory:
            os.makedirs(directory, exist_ok=True)
        for f in files:
            if f and not os.path.isdir(os.path.dirname(os.path.abspath(f))):
                raise NotADirectoryError(20, "no such directory", os.path.dirname(f) or ".")
    except OSError as e:
        print(f"hpcsched {prog}: {e.filename}: {e.strerror}", file=sys.stderr)
        return False
    return True


def _write_atomic(path: str, write) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def cmd_init(args) -> int:
    from .store.site import init_site
    if args.multi_user and os.geteuid() != 0:
        print("hpcsched init: --multi-user needs root: the server runs each job as its owner", file=sys.stderr)
        return 1
    try:
        path = init_site(args.home, nodes=args.nodes, cores=args.cores, force=args.force,
                         managers=args.manager, multi_user=args.multi_user)
        if args.multi_user:
            from .server.privilege import systemd_unit
            unit = path.parent / "hpcsched-server.service"
            _write_atomic(str(unit), lambda f: f.write(systemd_unit(path.parent)))
    except (ConfigError, OSError) as e:
        print(f"hpcsched init: {e}", file=sys.stderr)
        return 1
    print(f"wrote {path}")
    if args.multi_user:
        home = path.parent
        print(f"wrote {unit}\n"
              f"a multi-user site: {home} is mode 0711, the server (root) its only reader.  Next:\n"
              f"  cp {unit} /etc/systemd/system/ && systemctl daemon-reload && systemctl enable --now hpcsched-server\n"
              f"  (or: HPCSCHED_HOME={home} python3 -m hpcsched server &)\n"
              f"  every user: export HPCSCHED_HOME={home}")
    else:  # (jobs wait in the queue until a server runs them)
        print(f"next: start the server, which runs the jobs (SIGTERM or qterm stops it):\n"
              f"  HPCSCHED_HOME={path.parent} python3 -m hpcsched server --log {path.parent}/server.log &")
    return 0


def cmd_server(args) -> int:
    from .server.loop import Server
    from .server.shared import open_log
    from .store.site import load_site
    try:
        if args.log:
            open_log(args.log)
        server = Server(load_site(), interval=args.interval, grace=args.grace)
        if args.once:
            lock = server.claim()
            try:
                server.step()
            finally:
                os.close(lock)
        else:
            from .server.serve import Loop
            Loop(server).run()
    except (SchedulerError, OSError) as e:
        print(f"hpcsched server: {e}", file=sys.stderr)
        return 1
    return 0


def cmd_store(args) -> int:
    from .store import repair
    from .store.site import load_site
    try:
        site = load_site(args.home)
    except (SchedulerError, OSError) as e:
        print(f"hpcsched store: {e}", file=sys.stderr)
        return 1
    sound, lines = (repair.check if args.action == "check" else repair.repair)(site)
    print("\n".join(lines))
    return 0 if sound else 1


def cmd_nodes(args) -> int:
    from .pbs.common import command_line
    from .store.journaled import Batch
    from .store.site import load_site, whoami
    command_line()
    try:
        site = load_site()
        batch = Batch.of(site)
        state = args.set
        if (state or args.clear_bad) and not site.is_operator(whoami()):
            print(f"hpcsched nodes: user {whoami()} may not change nodes", file=sys.stderr)
            return 159
        with batch.open(write=bool(state or args.clear_bad)):
            topo = batch.sched.topology
            named = [topo.node(name) for name in args.names]  # (an unknown name: one line, status 1, no change)
            if args.clear_bad:
                for n in topo.all_nodes():
                    if n.state.value == "bad":
                        batch.do("node", name=n.name, state="up")
            for name in args.names if state else []:
                batch.do("node", name=name, state=state)
            if topo.places_blocks:  # midplanes, and which of their boards are not up
                for i, (mp, boards) in enumerate(topo.midplanes()):
                    states = {b.state.value for b in boards}
                    off = [f"{b.name}={b.state.value}" for b in boards if b.state.value != "up"]
                    whole = states.pop() if len(states) == 1 else "mixed"
                    print(f"{mp:<16} {i:>6} {whole}" + (f" (boards: {', '.join(off)})" if whole == "mixed" else ""))
            else:  # (the named nodes, else every one)
                for n in named or topo.all_nodes():
                    print(f"{n.name:<16} {n.nid:>6} {n.state.value}")
    except (SchedulerError, OSError) as e:
        print(f"hpcsched nodes: {e}", file=sys.stderr)
        return 1
    return 0


def cmd_usage(args) -> int:
    """Decayed usage per user, group and project (hours of the site's metric), as mdiag -f
    shows it; operators reset it (--reset) or set it (--set HOURS) for a name or for all."""
    from .pbs.common import command_line
    from .store.journaled import Batch
    from .store.site import load_site, whoami
    command_line()
    change = args.reset or args.set is not None
    try:
        site = load_site()
        if change and not site.is_operator(whoami()):
            print(f"hpcsched usage: user {whoami()} may not change usage", file=sys.stderr)
            return 159
        if args.set is not None and (not args.name or not 0 <= args.set < float("inf")):
            print("hpcsched usage: --set needs a name and a non-negative number of hours", file=sys.stderr)
            return 2
        batch = Batch.of(site)
        with batch.open(write=change):
            now = time.time()
            if change:
                amount = None if args.set is None else args.set * 3600.0
                n = batch.do("usage", now, kind=args.kind, name=args.name, amount=amount)
                print(f"{'set' if amount is not None else 'reset'} {args.kind} {args.name or '(all)'} "
                      f"({n} usage records)")
            table = batch.sched.usage.by(args.kind, now)
            for name, v in sorted(table.items(), key=lambda kv: (-kv[1], kv[0])):
                if args.name in (None, name):
                    print(f"{name or '-':<20} {v / 3600.0:>14.2f}")
    except (SchedulerError, OSError) as e:
        print(f"hpcsched usage: {e}", file=sys.stderr)
        return 1
    return 0


def cmd_man(args) -> int:
    from . import manpages
    return manpages.show(args.topic, args.section)


def cmd_demo(args) -> int:
    if args.library or args.machine:
        from .demo import run
        return run(sys.stdout, args.machine)
    else:
        from .livedemo import run
    return run(sys.stdout)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["node"]:  # the node side, run over ssh for every request: no more than it needs
        from .server import node
        return node.main(argv[1:])
    ap = _parser()
    args = ap.parse_args(argv)
    _check(ap, args)
    return _run(args)


def _parser() -> argparse.ArgumentParser:
    """`hpcsched`'s commands and their options."""
    ap = _Parser(prog="hpcsched", description="hpcsched: batch scheduling core, simulator and commands")
    ap.add_argument("--version", action="version", version=f"hpcsched {__version__}")
    sub = ap.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _site_commands(sub)
    _simulate_command(sub)
    _sweep_and_report_commands(sub)
    _drain_command(sub)
    return ap


def _site_commands(sub) -> None:
    """demo, man, init, server, node, store, nodes, usage: a site and its server."""
    d = sub.add_parser("demo", help="run real jobs on the embedded default test rig, in a temporary directory")
    d.add_argument("--library", action="store_true",
                   help="instead, drive the scheduling core alone with a simulated clock")
    d.add_argument("--machine", choices=sorted(BUILTIN_MACHINES),
                   help="the core alone on a built-in machine instead of the rig's 16 nodes (bgq-4rack: Blue "
                   "Gene/Q blocks; see --machine of simulate)")
    d.set_defaults(func=cmd_demo)
    m = sub.add_parser("man", help="a command's manual page, or the configuration file's (hpcsched.toml)")
    m.add_argument("section", nargs="?", choices=["1", "5"], help="1: commands, 5: the configuration file")
    m.add_argument("topic", help="qsub, qstat, hpcsched, hpcsched.toml, ...")
    m.set_defaults(func=cmd_man)
    i = sub.add_parser("init", help="write a test-rig site configuration ($HPCSCHED_HOME/config.toml)")
    i.add_argument("--home", help="store directory (default: $HPCSCHED_HOME or ~/.local/share/hpcsched)")
    i.add_argument("--nodes", type=int, default=4, help="nodes in the rig (default 4)")
    i.add_argument("--cores", type=int, help="cores per node (default: this host's)")
    i.add_argument("--force", action="store_true", help="replace an existing configuration")
    i.add_argument("--multi-user", action="store_true",
                   help="a site for several Unix users: the server (root) is the only door, jobs run as their "
                   "owners; also writes a systemd unit")
    i.add_argument("--manager", action="append", metavar="USER",
                   help="a manager (repeatable; @group for a Unix group; default: you)")
    i.set_defaults(func=cmd_init)
    v = sub.add_parser("server", help="run jobs: the scheduling pass every --interval and on every change")
    v.add_argument("--once", action="store_true", help="one step (reap, enforce, schedule, launch) and exit")
    v.add_argument("--interval", type=float, help="seconds between passes (config server_interval, 15)")
    v.add_argument("--grace", type=float, help="seconds from SIGTERM to SIGKILL (config kill_grace, 30)")
    v.add_argument("--log", help="append the server's log (start, stop, each job's start and end, refusals) "
                                 "to this file, not stderr")
    v.set_defaults(func=cmd_server)
    sub.add_parser("node", help="a job's side on another host, which the server runs there over ssh "
                   "(run|status|wait|signal|cleanup|forget|task|list|ping: hpcsched(1))")
    t = sub.add_parser("store", help="check the site's store, or repair it (a backup first)")
    t.add_argument("action", choices=["check", "repair"])
    t.add_argument("--home", help="store directory (default: $HPCSCHED_HOME or ~/.local/share/hpcsched)")
    t.set_defaults(func=cmd_store)
    n = sub.add_parser("nodes", help="list nodes, or mark them up/offline/down (operators)")
    n.add_argument("names", nargs="*")
    n.add_argument("--set", choices=["up", "offline", "down"], help="the state to give the named nodes")
    n.add_argument("--clear-bad", action="store_true", help="clear the bad-node list")
    n.set_defaults(func=cmd_nodes)
    u = sub.add_parser("usage", help="decayed usage per user, group or project; reset or set it (operators)")
    u.add_argument("kind", nargs="?", default="user", choices=["user", "group", "project"])
    u.add_argument("name", nargs="?", help="one user, group or project (default: all)")
    u.add_argument("--reset", action="store_true", help="forget the usage (of the name, or of all)")
    u.add_argument("--set", type=float, metavar="HOURS", help="set the name's usage to HOURS of the metric")
    u.set_defaults(func=cmd_usage)


def _simulate_command(sub) -> None:
    s = sub.add_parser("simulate", help="replay an SWF trace on the scheduling core")
    s.add_argument("trace", help="SWF file, plain or gzipped")
    s.add_argument("--config", help="a site configuration (hpcsched.toml(5)): queues and router, reservations, "
                   "priority policy and options, nodes, backfill")
    s.add_argument("--policy", choices=["fifo", "cobalt", "simon"], help="the priority policy (default: the "
                   "config's, else fifo)")
    s.add_argument("--backfill", help="none, easy, conservative or depth=N (default: the config's, else easy)")
    s.add_argument("--estimate", choices=["request", "perfect", "easy++"],
                   help="what the planner believes a job runs: the user's request (default), the exact run "
                   "time, or Tsafrir's mean of the user's last two runs (EASY++)")
    s.add_argument("--queue-from", choices=["router", "trace"],
                   help="the job's queue: the router's choice (default) or the trace's queue field")
    s.add_argument("--queue-map", help="trace queue numbers to queue names, e.g. 1=short,2=long (default qN)")
    s.add_argument("--cancelled", choices=["keep", "drop"], help="cancelled records (status 5): keep (default) "
                   "or drop")
    s.add_argument("--load", type=float, help="replay at another offered load: arrivals compressed by this factor "
                   "(2: every gap since the first submission halved), the jobs unchanged (default 1)")
    s.add_argument("--nodes", type=int, help="nodes in the machine (default: the config's, else the header's "
                   "MaxProcs)")
    s.add_argument("--ppn", type=int, help="cores per node (default 1)")
    s.add_argument("--shared", action="store_true", help="jobs share nodes core by core")
    s.add_argument("--period", type=float, help="also pass every PERIOD seconds while jobs wait")
    s.add_argument("--skip-bad", action="store_true", help="skip and count malformed lines")
    s.add_argument("--warmup", type=float, help="fraction of first jobs left out of statistics")
    s.add_argument("--cooldown", action="store_true", help="leave out jobs that end after the last submission")
    s.add_argument("--size-classes", help="lowest sizes of the size classes in units (default 1,2,5,17,65,257,1025)")
    s.add_argument("--capability", type=int, help="capability jobs' least size in units (default 20%% of the "
                   "machine)")
    s.add_argument("--series", choices=["hour", "day", "week"], help="time series step (default day)")
    s.add_argument("--gantt", help="the report's node-occupancy window: START_DAY,DAYS after the first "
                   "submission (default 0,2)")
    s.add_argument("--report", help="write a self-contained HTML report here")
    s.add_argument("--out", help="directory for results.json and schedule.swf")
    s.add_argument("--quiet", action="store_true", help="no progress line")
    s.add_argument("--placement", choices=["first-fit", "contiguous", "cuboid"],
                   help="which free nodes a job gets: the lowest (first-fit), one run of consecutive nodes "
                   "(contiguous), a box of torus routers (cuboid, on a Cray)")
    s.add_argument("--machine", help="a built-in machine: mira, bgq-4rack, bgq-1rack (Blue Gene/Q), xt3, kraken, "
                   "bluewaters (Cray), or pool (a pool of nodes: the default)")
    s.add_argument("--capability-split", help="also report the share of unit-hours in jobs of at least each of "
                   "these sizes (Mira's split metric: 8192,16384)")
    s.add_argument("--size-map", choices=["share", "procs"],
                   help="on a built-in machine, a record keeps its share of the trace's machine (share, the "
                   "default) or takes ceil(processors / cores per node) nodes (procs)")
    drain = s.add_mutually_exclusive_group()
    drain.add_argument("--drain", action="store_true", help="account drain time (NCSA's method) after every pass "
                       "and report it (about 10 %% more CPU on a replay)")
    drain.add_argument("--no-drain", action="store_true", help="leave drain-time accounting out (the default)")
    s.add_argument("--groups", help="drain by job size: groups' lowest sizes in nodes "
                   "(default 1,129,1000,2000,4000,8000,16000)")
    s.set_defaults(func=cmd_simulate)


def _sweep_and_report_commands(sub) -> None:
    w = sub.add_parser("sweep", help="replay a grid of configurations x traces on every core (or as a job array)")
    w.add_argument("grid", nargs="?", help="the grid file (TOML; see man 1 hpcsched), or with --cell the "
                   "array's directory")
    w.add_argument("--jobs", type=int, help="processes (default: every core)")
    w.add_argument("--format", choices=["text", "csv", "json"], default="text", help="the table's form")
    w.add_argument("--out", help="directory for results.json (every cell, for hpcsched report) and results.csv")
    w.add_argument("--report", help="write a self-contained HTML report of every cell here")
    w.add_argument("--array", metavar="DIR", help="instead of running, write the cells and PBS, Torque and "
                   "Slurm job-array scripts (one task per cell) into DIR")
    w.add_argument("--cell", help="run one cell of an array directory (default: the batch system's array index)")
    w.add_argument("--collect", metavar="DIR", help="merge the cells an array's tasks wrote into one table")
    w.add_argument("--wide", action="store_true", help="every figure in the text table (waits by size class and "
                   "queue, p95, ...), as CSV and JSON have them")
    w.add_argument("--quiet", action="store_true", help="no progress line")
    w.set_defaults(func=cmd_sweep)
    p = sub.add_parser("report", help="an HTML report (inline SVG) of simulation or sweep results")
    p.add_argument("results", nargs="+", help="results.json files from simulate --out or sweep --out")
    p.add_argument("-o", "--output", default="report.html", help="the HTML file (default report.html)")
    p.set_defaults(func=cmd_report)


def _drain_command(sub) -> None:
    r = sub.add_parser("drain", help="drain-time report from Moab-format node-status logs (one file per day)")
    r.add_argument("logs", nargs="+", help="log files or directories (plain or .gz), in time order")
    r.add_argument("--jobs", action="append", help="job records: a Torque accounting log (file or directory), "
                   "a simulation's results.json, or an SWF trace (repeatable)")
    r.add_argument("--ppn", type=int, default=1, help="cores per node, to size SWF records (default 1)")
    r.add_argument("--nodes", type=int, help="nodes of the static basis (default: the nodes in the logs)")
    r.add_argument("--basis", choices=["static", "dynamic"], default="static",
                   help="static: nodes x accounted seconds; dynamic: node-seconds not Down")
    r.add_argument("--groups", help="job-size groups by lowest size (default 1,129,1000,2000,4000,8000,16000)")
    r.add_argument("--gap", type=float, default=900.0, help="a node is short on a day missing more seconds (900)")
    r.add_argument("--top", type=int, default=10, help="jobs listed for failure to launch and sliding (10)")
    r.add_argument("--json", action="store_true", help="the report as JSON")
    r.add_argument("--skip-bad", action="store_true",
                   help="pass over (and name) job record lines that do not parse, instead of stopping")
    r.set_defaults(func=cmd_drain)


def _check(ap: argparse.ArgumentParser, args) -> None:
    """What argparse's types cannot say (one line and status 2, as argparse's own errors)."""
    if args.command == "sweep" and args.jobs is not None and args.jobs < 1:
        ap.error("--jobs must be at least 1")
    if getattr(args, "nodes", None) is not None and args.nodes < 1 or getattr(args, "ppn", None) is not None \
            and args.ppn < 1 or (getattr(args, "cores", None) or 1) < 1:
        ap.error("--nodes, --ppn and --cores must be at least 1")
    if getattr(args, "warmup", None) and not 0 <= args.warmup < 1:
        ap.error("--warmup must be a fraction in [0, 1)")
    if args.command == "server":  # (as the config's server_interval and kill_grace)
        for name in ("interval", "grace"):
            value = getattr(args, name)
            if value is not None and not 0 < value < math.inf:
                ap.error(f"--{name} must be a positive number of seconds")
    if args.command == "drain" and not (0 <= args.gap < math.inf and args.top >= 0):
        ap.error("--gap must be a non-negative number of seconds and --top a count of at least 0")


def _run(args) -> int:
    """Run the command; an interrupt, a reader gone or an output that failed is one line
    (or nothing), never a traceback."""
    try:
        return args.func(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `hpcsched simulate | head`: the reader left; not an error
        try:  # (nor is the flush at exit)
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 0
    except OSError as e:  # (an output that could not be written, say: one line, not a traceback)
        print(f"hpcsched {args.command}: {e.filename or ''}: {e.strerror or e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
