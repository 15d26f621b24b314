"""The `hpcsched` command: a thin layer over the library.

    hpcsched demo                      schedule a small workload on the embedded test rig
    hpcsched simulate TRACE [options]  replay an SWF trace, print metrics, write results
    hpcsched drain LOGS... [options]   drain-time report from Moab-format node-status logs

Exit status: 0 success, 1 a bad trace, log, job record or configuration (one line on
stderr), 2 bad usage.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

from .config import parse_backfill
from .core.errors import ConfigError, SchedulerError


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2, as PBS-style commands do
        self.exit(2, f"{self.prog}: {message}\n")


def _progress(stream):
    """A progress line on stderr, redrawn at most 5 times a second (terminals only)."""
    last = [0.0]
    start = time.monotonic()

    def show(read: int, done: int) -> None:
        t = time.monotonic()
        if t - last[0] >= 0.2:
            last[0] = t
            stream.write(f"\r{read} records read, {done} jobs finished, {t - start:.1f} s")
            stream.flush()
    return show


def _groups(prog: str, given: str | None):
    """--groups as size groups (None: the default), or None after a usage message."""
    from .drain.accounts import GROUPS, groups_from
    try:
        return groups_from([int(x) for x in given.split(",")]) if given else GROUPS
    except ValueError:
        print(f"hpcsched {prog}: --groups: give increasing lowest sizes, e.g. 1,129,1000", file=sys.stderr)
        return None


def cmd_simulate(args) -> int:
    from .sim.simulate import simulate
    try:
        parse_backfill(args.backfill)
    except ConfigError as e:
        print(f"hpcsched simulate: {e}", file=sys.stderr)
        return 2
    groups = _groups("simulate", args.groups)
    if groups is None:
        return 2
    if not os.path.exists(args.trace):
        print(f"hpcsched simulate: {args.trace}: no such file", file=sys.stderr)
        return 1
    progress = _progress(sys.stderr) if sys.stderr.isatty() and not args.quiet else None
    try:
        result = simulate(args.trace, policy=args.policy, backfill=args.backfill, nodes=args.nodes,
                          ppn=args.ppn, shared=args.shared, period=args.period, skip_bad=args.skip_bad,
                          warmup=args.warmup, progress=progress, drain=not args.no_drain,
                          placement=args.placement, groups=groups)
    except (SchedulerError, OSError, EOFError) as e:
        if progress:
            sys.stderr.write("\n")
        print(f"hpcsched simulate: {args.trace}: {e}", file=sys.stderr)
        return 1
    if progress:
        sys.stderr.write("\n")
    print(result.summary())
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        _write_atomic(os.path.join(args.out, "results.json"),
                      result.write_json)
        _write_atomic(os.path.join(args.out, "schedule.swf"), result.write_swf)
        print(f"wrote {os.path.join(args.out, 'results.json')} and {os.path.join(args.out, 'schedule.swf')}")
    return 0


def cmd_drain(args) -> int:
    import functools
    import json

    from .drain import moablog, records
    from .drain.accounts import Accounts, text
    from .sim.simulate import swf_job_records
    groups = _groups("drain", args.groups)
    if groups is None:
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
    try:
        jobs = records.merge(args.jobs or [], functools.partial(swf_job_records, ppn=args.ppn))
        accounts, quality = moablog.read(logs, Accounts(node_count=args.nodes or 0))
    except (OSError, EOFError, ValueError, SchedulerError) as e:
        print(f"hpcsched drain: {e}", file=sys.stderr)
        return 1
    report = accounts.report(jobs, basis=args.basis, groups=groups, gap=args.gap, top=args.top)
    report["quality"] = quality.to_json()
    if args.json:
        json.dump(report, sys.stdout, indent=1)
        print()
    else:
        print(text(report))
        print(f"read {quality.files} files, {quality.lines} lines: {quality.samples} samples, "
              f"{quality.unrelated} other lines, {quality.malformed} malformed status lines")
    for e in quality.errors:
        print(f"hpcsched drain: malformed: {e}", file=sys.stderr)
    return 0


def _write_atomic(path: str, write) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def cmd_init(args) -> int:
    from .store.site import init_site
    try:
        path = init_site(args.home, nodes=args.nodes, cores=args.cores, force=args.force)
    except (ConfigError, OSError) as e:
        print(f"hpcsched init: {e}", file=sys.stderr)
        return 1
    print(f"wrote {path}")
    return 0


def cmd_server(args) -> int:
    from .server.loop import Server
    from .store.site import load_site
    try:
        server = Server(load_site(), interval=args.interval, grace=args.grace)
        if args.once:
            lock = server.claim()
            try:
                server.step()
            finally:
                os.close(lock)
        else:
            server.serve()
    except (SchedulerError, OSError) as e:
        print(f"hpcsched server: {e}", file=sys.stderr)
        return 1
    return 0


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
            if args.clear_bad:
                for n in topo.all_nodes():
                    if n.state.value == "bad":
                        batch.do("node", name=n.name, state="up")
            for name in args.names if state else []:
                topo.node(name)  # an unknown name is one line, status 1
                batch.do("node", name=name, state=state)
            for n in topo.all_nodes():
                print(f"{n.name:<16} {n.nid:>6} {n.state.value}")
    except (SchedulerError, OSError) as e:
        print(f"hpcsched nodes: {e}", file=sys.stderr)
        return 1
    return 0


def cmd_demo(args) -> int:
    if args.library:
        from .demo import run
    else:
        from .livedemo import run
    return run(sys.stdout)


def main(argv=None) -> int:
    ap = _Parser(prog="hpcsched", description="hpcsched: batch scheduling core, simulator and commands")
    sub = ap.add_subparsers(dest="command", required=True, parser_class=_Parser)
    d = sub.add_parser("demo", help="run real jobs on the embedded default test rig, in a temporary directory")
    d.add_argument("--library", action="store_true",
                   help="instead, drive the scheduling core alone with a simulated clock")
    d.set_defaults(func=cmd_demo)
    i = sub.add_parser("init", help="write a test-rig site configuration ($HPCSCHED_HOME/config.toml)")
    i.add_argument("--home", help="store directory (default: $HPCSCHED_HOME or ~/.local/share/hpcsched)")
    i.add_argument("--nodes", type=int, default=4, help="nodes in the rig (default 4)")
    i.add_argument("--cores", type=int, help="cores per node (default: this host's)")
    i.add_argument("--force", action="store_true", help="replace an existing configuration")
    i.set_defaults(func=cmd_init)
    v = sub.add_parser("server", help="run jobs: the scheduling pass every --interval and on every change")
    v.add_argument("--once", action="store_true", help="one step (reap, enforce, schedule, launch) and exit")
    v.add_argument("--interval", type=float, help="seconds between passes (config server_interval, 15)")
    v.add_argument("--grace", type=float, help="seconds from SIGTERM to SIGKILL (config kill_grace, 30)")
    v.set_defaults(func=cmd_server)
    n = sub.add_parser("nodes", help="list nodes, or mark them up/offline/down (operators)")
    n.add_argument("names", nargs="*")
    n.add_argument("--set", choices=["up", "offline", "down"], help="the state to give the named nodes")
    n.add_argument("--clear-bad", action="store_true", help="clear the bad-node list")
    n.set_defaults(func=cmd_nodes)
    s = sub.add_parser("simulate", help="replay an SWF trace on the scheduling core")
    s.add_argument("trace", help="SWF file, plain or gzipped")
    s.add_argument("--policy", choices=["fifo", "cobalt", "simon"], default="fifo")
    s.add_argument("--backfill", default="easy", help="none, easy, conservative or depth=N")
    s.add_argument("--nodes", type=int, help="nodes in the machine (default: the header's MaxProcs)")
    s.add_argument("--ppn", type=int, help="cores per node (default 1)")
    s.add_argument("--shared", action="store_true", help="jobs share nodes core by core")
    s.add_argument("--period", type=float, help="also pass every PERIOD seconds while jobs wait")
    s.add_argument("--skip-bad", action="store_true", help="skip and count malformed lines")
    s.add_argument("--warmup", type=float, default=0.0, help="fraction of first jobs left out of statistics")
    s.add_argument("--out", help="directory for results.json and schedule.swf")
    s.add_argument("--quiet", action="store_true", help="no progress line")
    s.add_argument("--placement", choices=["first-fit", "contiguous"], default="first-fit",
                   help="which free nodes a job gets: the lowest (first-fit), or one run of consecutive nodes")
    s.add_argument("--no-drain", action="store_true", help="leave drain-time accounting out (a little faster)")
    s.add_argument("--groups", help="drain by job size: groups' lowest sizes in nodes "
                   "(default 1,129,1000,2000,4000,8000,16000)")
    s.set_defaults(func=cmd_simulate)
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
    r.set_defaults(func=cmd_drain)
    args = ap.parse_args(argv)
    if getattr(args, "nodes", None) is not None and args.nodes < 1 or getattr(args, "ppn", None) is not None \
            and args.ppn < 1 or (getattr(args, "cores", None) or 1) < 1:
        ap.error("--nodes, --ppn and --cores must be at least 1")
    if getattr(args, "warmup", 0.0) and not 0 <= args.warmup < 1:
        ap.error("--warmup must be a fraction in [0, 1)")
    try:
        return args.func(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `hpcsched demo | head`: the reader left; not an error
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
