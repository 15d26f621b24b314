"""Seeded generators of bad input, and the checks every case must pass.

Each kind of input (command options and operands, #PBS directives, site configs, SWF
trace lines, store damage) has a generator: `cases(kind, seed, n)` yields n cases, the
same ones for the same seed.  `run_case` runs one in this process and returns what went
wrong with it, or None:

    traceback    an exception escaped the command (or the reader, or the loader)
    hang         it ran past its deadline
    status       an exit status outside the flavor's documented table
    changed      it failed, yet the store changed
    unnoticed    a damaged store loaded as if nothing happened

tests/test_fuzz.py runs a bounded number per CI run; benchmarks/fuzz.py runs many.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import random
import re
import signal
import string
import time

from hpcsched.pbs import cobalt, cqadm, options

#: every exit status a command may use, per flavor (the table in man 1 hpcsched)
STATUSES = {"torque": {0, 1, 2, 153, 154, 159, 161, 170, 172, 175, 188, 192, 196, 236, 238},
            "openpbs": {0, 1, 2, 35, 153, 154, 159, 161, 170, 175, 188, 192, 196, 236, 238},
            "cobalt": {0, 1, 2}}  # (Cobalt's seven commands: man 1 cobalt; the rest are Torque's)
DEADLINE = 10  # seconds one case may take

NASTY = ["", "-", "--", "0", "-1", "1", "2", "99", "1e999", "nan", "inf", "²", "٣", "\x00", "\x07", "a b", " ",
         "9" * 30, "x" * 3000, "1-", "-5", "1-0", "1-100000000", "1-3%0", "%", "[", "]", "[]", "1[", "1[]", "1[2]",
         "1.headnode", "1[].headnode", "99999999999999999999", "::", "1:2:3:4:5", "00:00:00", "1:00:00",
         "afterok", "afterok:", "afterok:1", "afterok:1[]", "afterokarray:1[][2]", "before:99", "on:2",
         "nodes=1", "nodes=0", "nodes=-1", "nodes=1:ppn=0", "select=1:ncpus=2", "select=", "walltime=",
         "nodes=1:gpus=1", "nodes=1:gpus=x:shared", "select=1:ngpus=2", "select=1:host=node01+1:host=",
         "select=2:vnode=nosuch", "select=1:foo=1", "ngpus=1", "ngpus=-1", "nodes=node01+node02:ppn=2",
         "nodes=node01:ppn=1+node02:ppn=1", "nodes=2+1", "nodes=x+",
         "walltime=-1", "mem=1gb", "mem=xgb", "ncpus=1e3", "software=matlab", "umask=999", "depend=",
         "depend=afterok:abc", "group_list=", "batch", "nosuch", "batch@other", "@", "oe", "eo", "n", "abe",
         "abx", "/tmp", "rel/path", "host:/tmp/x", "/dev/null/x", "é", "\udcff", "SIGKILL", "KILL", "USR1",
         "suspend", "12:00", "202612312359", "1200.61", "u", "o", "s", "uos", "q", "node01", "node[01-02]",
         "node[1-99999999]", "count=2", "count=-2", "all", "y", "x", "\n", "a\nb", "{}", "[[", "null",
         "999912312359", "23:59:59_12/31/99", "25:00_01/01", "+1:00:00", "253402300800", "1e308",
         "mem=99999999999999999999999tb", "select=1:mem=9999999999999999999pb", "USR1",
         "FREQ=DAILY;COUNT=2", "FREQ=WEEKLY;UNTIL=20261231", "FREQ=HOURLY;INTERVAL=0", "FREQ=DAILY;UNTIL=99999999",
         "FREQ=WEEKLY;BYDAY=MO,WE;COUNT=3", "FREQ=DAILY;BYHOUR=9,17", "FREQ=WEEKLY;BYDAY=XX", "FREQ=DAILY;BYHOUR=-1",
         "FREQ=WEEKLY;INTERVAL=99999999;BYDAY=SU", "FREQ=DAILY;UNTIL=99991231T235959Z", "FREQ=DAILY;BYDAY=",
         "R1", "S1.headnode", "--hosts"]

LETTERS = {"qsub": "aAcCdeFhIjJklmMnNopqrStuvVwWz", "qalter": "aAehjklmMNoprSvWt", "qdel": "Wpxt", "qhold": "ht",
           "qrls": "ht", "qsig": "s", "qmsg": "EO", "qrun": "H", "qrerun": "f", "qterm": "t", "qmove": "", "qselect": "uqsNAlhxpra", "qstat": "afinu1xQqrsBtTFJ",
           "checkjob": "v", "showq": "ribcuw", "showres": "n", "setres": "nsdepugaq", "releaseres": "",
           "showbf": "", "showstart": "", "checknode": "", "mdiag": "pf", "pbsnodes": "aloicrNxqvF", "qmgr": "c", "tracejob": "n",
           "shownids": "", "pbsyod": "", "schedctl": "QTSsB", "qstart": "", "qstop": "", "qenable": "", "qdisable": "",
           "pbs_rsub": "DEIlmMNqrRuUgGHW", "pbs_rstat": "fFBS", "pbs_rdel": "", "pbs_ralter": "EIDNRUGlW"}
FLAGS = set("hIVzfix1QBtTJaroblcvpqwdn")  # letters tried bare as well as with a value
#: qsub and qalter take the most input: they get more of the cases
WEIGHTED = sorted(set(LETTERS) - {"pbsyod"}) + ["qsub"] * 12 + ["qalter"] * 4
#: Cobalt's spellings of each of its commands' options (pbs/cobalt.py)
COBALT_SPELLINGS = {"qsub": [s for spellings, _, _ in options.COBALT_QSUB for s in spellings],
                    "qstat": [s for spellings, _, _ in cobalt.QSTAT_TABLE for s in spellings],
                    "qalter": [s for spellings, _, _ in cobalt.QALTER_TABLE for s in spellings],
                    "qdel": ["-d", "--debug"], "qhold": ["-d"], "qrls": ["-d", "--dependencies"], "qmove": ["-d"],
                    "cqadm": [s for spellings, _, _ in cqadm.TABLE for s in spellings]}
COBALT_VALUES = ["1", "0", "-1", "30", "1:00:00", "+5", "-5", "c16", "c3", "script", "interactive", "A=1:B=x\\:y",
                 "A", "1A=2", "1:2", "x:y", "job.sh", "missing.sh", "/tmp", "$jobid.out", "JobID:State", "Nosuch",
                 "batch", "nosuch", "location=x", "027", "999", "maxtime=30 users=alice:bob", "state=dead",
                 "state=x", "maxrunning", "totalnodes=2", "node01", "node01:node02", "location=node01",
                 "location=node[01-04]:ssds:no_x", "location=", "a=b=c", ":", "location=node[1-99999999]",
                 "4x4x4x4x2", "1x1x1x1x1", "4x4x4x4", "99999999x1x1x1x1", "0x0x0x0x0"]


def _value(rnd: random.Random) -> str:
    if rnd.random() < 0.15:
        return "".join(rnd.choice(string.printable) for _ in range(rnd.randint(0, 12)))
    return rnd.choice(NASTY)


def command_case(rnd: random.Random) -> dict:
    if rnd.random() < 0.15:
        return cobalt_case(rnd)
    prog = rnd.choice(WEIGHTED)
    argv = []
    for _ in range(rnd.randint(0, 4)):
        letter = rnd.choice(LETTERS[prog] or "x")
        argv.append(f"-{letter}")
        if letter not in FLAGS or rnd.random() < 0.6:
            argv.append(_value(rnd))
    for _ in range(rnd.randint(0, 2)):
        argv.append(rnd.choice(["1", "2", "1[]", "1[1]", "99", "abc", "1.headnode", "all", "node01", _value(rnd)]))
    script = "#!/bin/sh\ntrue\n"
    if prog == "qsub" and rnd.random() < 0.5:
        script = directives_script(rnd)
    flavor = rnd.choice(["torque", "openpbs"])
    user = rnd.choice(["alice"] * 9 + ["a b", "x@y", "u=v", "-n", "é"])  # ($HPCSCHED_USER)
    zone = rnd.choice(["UTC", "Pacific/Kiritimati", "Etc/GMT+12"])  # ($TZ: dates near year 9999 differ by zone)
    return {"kind": "command", "prog": prog, "argv": argv, "stdin": script, "flavor": flavor, "user": user,
            "tz": zone}


def cobalt_case(rnd: random.Random) -> dict:
    """One of Cobalt's commands on a cobalt site; qsub's command, job.sh, is the case's script."""
    prog = rnd.choice(sorted(COBALT_SPELLINGS) + ["qsub"] * 6 + ["qstat"] * 2 + ["qalter"] * 2 + ["cqadm"] * 3)
    argv = []
    for _ in range(rnd.randint(0, 5)):
        argv.append(rnd.choice(COBALT_SPELLINGS[prog]))
        if rnd.random() < 0.8:
            value = rnd.choice(COBALT_VALUES) if rnd.random() < 0.7 else _value(rnd)
            argv[-1:] = [f"{argv[-1]}={value}"] if argv[-1].startswith("--") and rnd.random() < 0.3 \
                else [argv[-1], value]
    if prog == "qsub" and rnd.random() < 0.6:  # (most name what a job needs: they get further)
        argv = ["-n", "1", "-t", "5", *argv, "job.sh"]
    for _ in range(rnd.randint(0, 2)):
        argv.append(rnd.choice(["1", "2", "99", "abc", "batch", "job.sh", "missing.sh", _value(rnd)]))
    lines = ["#!/bin/sh"] + [f"#COBALT {rnd.choice(COBALT_SPELLINGS['qsub'])} {rnd.choice(COBALT_VALUES)}"
                             for _ in range(rnd.randint(0, 3))]
    return {"kind": "command", "prog": prog, "argv": argv, "stdin": "\n".join(lines + ["true"]) + "\n",
            "flavor": "cobalt", "user": rnd.choice(["alice"] * 9 + ["bob"] + ["root"] * 5 * (prog == "cqadm")),
            "tz": "UTC"}


def directives_script(rnd: random.Random) -> str:
    lines = ["#!/bin/sh"]
    for _ in range(rnd.randint(1, 4)):
        letter = rnd.choice(LETTERS["qsub"])
        quote = rnd.choice(["", "'", '"'])
        lines.append(f"#PBS -{letter} {quote}{_value(rnd)}{quote}")
    lines.append(rnd.choice(["true", "", "\x00", "echo é"]))
    return "\n".join(lines) + "\n"


CONFIG_KEYS = {"backfill": ["easy", "none", "conservative", "depth=3", "depth=0", "depth=x", 3, None],
               "flavor": ["torque", "openpbs", "cobalt", "slurm", 1], "keep_completed": [300, -1, "x", 1e999, True],
               "server_interval": [15, 0, -3, "x", []], "kill_grace": [30, 0, "30"], "launcher": [["sh"], "ssh", [1]],
               "placement": ["first-fit", "contiguous", "random"], "dependency_failure": ["hold", "delete", "x"],
               "default_queue": ["batch", "nosuch", 3], "scheduling": [True, "false", 0],
               "mail_command": [["sendmail", "-t"], "sendmail", [""]], "node_log": [True, "", 3],
               "frob": [1], "interval": [15, 0, -1, "x"], "managers": [["root"], "root", [1]],
               "priority": [5, "fifo", [1]], "reservations": [5, [5], "x"], "quotas": [5, [5]]}
QUEUE_KEYS = {"max_walltime": ["1:00:00", "soon", -1, 3600], "max_running": [1, -1, "x", 0],
              "route_to": [["batch"], ["nosuch"], "batch"], "min_fraction": [0.2, -1, 2, "x"], "frob": [1]}
NODE_KEYS = {"names": ["node[01-04]", "node[1-99999999]", "", 3, "node[04-01]"], "cores": [4, 0, -1, "x", 1e9],
             "memory": [8000, -1, "x"], "shared": [True, "yes"], "features": [["big"], "big"],
             "gpus": [4, 0, -1, "x", True]}


def config_case(rnd: random.Random) -> dict:
    cfg = {"server_name": "headnode", "default_queue": "batch", "nodes": [{"names": "node[01-04]", "cores": 4}],
           "queues": {"batch": {"max_walltime": "24:00:00"}}}
    for _ in range(rnd.randint(1, 3)):
        where = rnd.random()
        if where < 0.5:
            key = rnd.choice(sorted(CONFIG_KEYS))
            cfg[key] = rnd.choice(CONFIG_KEYS[key])
        elif where < 0.75:
            key = rnd.choice(sorted(QUEUE_KEYS))
            cfg["queues"]["batch"][key] = rnd.choice(QUEUE_KEYS[key])
        else:
            key = rnd.choice(sorted(NODE_KEYS))
            cfg["nodes"][0][key] = rnd.choice(NODE_KEYS[key])
    if rnd.random() < 0.1:  # a file in another encoding (an editor's Latin-1, with an accent in a comment)
        return {"kind": "config", "config": cfg, "encoding": "latin-1"}
    return {"kind": "config", "config": cfg}


def trace_case(rnd: random.Random) -> dict:
    sound = "1 0 -1 10 1 -1 -1 1 100 -1 1 1 1 -1 1 -1 -1 -1"  # (a record before: a time far off spans the replay)
    fields = ["2", "0", "-1", "10", "1", "-1", "-1", "1", "100", "-1", "1", "1", "1", "-1", "1", "-1", "-1", "-1"]
    for _ in range(rnd.randint(1, 3)):
        i = rnd.randrange(len(fields) + 1)
        if i == len(fields):
            fields.append(_value(rnd)) if rnd.random() < 0.5 else fields.pop()
        else:
            fields[i] = rnd.choice(["nan", "inf", "-inf", "1e999", "1_0", "²", "", "x", "-0", "4.0", "4.5",
                                    "99999999999999999999", "-99", "0x10", "1e30", "-1e30", "3e9",
                                    "2147483648", _value(rnd)])
    header = rnd.choice(["; MaxProcs: 8", "; MaxProcs: inf", "; MaxProcs:", "; MaxProcs: 1e30", "; MaxNodes: -4",
                         "; MaxProcs: 8"])
    return {"kind": "trace", "text": f"{header}\n{sound}\n" + " ".join(f for f in fields if f.strip()) + "\n"}


def store_case(rnd: random.Random) -> dict:
    return {"kind": "store", "how": rnd.choice(["flip", "truncate", "delete", "duplicate", "swap", "null", "bom",
                                                "snapshot-flip", "snapshot-truncate"]),
            "seed": rnd.randrange(1 << 30)}


KINDS = {"command": command_case, "config": config_case, "trace": trace_case, "store": store_case}


def cases(kind: str, seed: int, n: int):
    rnd = random.Random(f"{kind}:{seed}")
    for _ in range(n):
        yield KINDS[kind](rnd)


# --- running one case ----------------------------------------------------------------------
class _Hang(Exception):
    pass


@contextlib.contextmanager
def _deadline(seconds: int):
    def ring(*_):
        raise _Hang()
    old = signal.signal(signal.SIGALRM, ring)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _store_bytes(home) -> dict:
    return {name: (home / name).read_bytes() for name in ("journal.jsonl", "state.json") if (home / name).exists()}


MAN1 = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "man", "man1")


def page_statuses(prog: str, flavor: str) -> set[int] | None:
    """The exit statuses the command's own man page lists (None: no page of its own; a
    Cobalt-flavored Cobalt command's are man 1 cobalt's)."""
    from hpcsched.pbs import front
    name = "cobalt" if flavor == "cobalt" and prog in front.COBALT else prog
    try:
        with open(os.path.join(MAN1, f"{name}.1"), encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    section = text.partition(".SH EXIT STATUS")[2].partition("\n.SH")[0]
    return {int(n) for n in re.findall(r"(?<![\w.\\-])(\d{1,3})(?![\w.])", section)} if section else None


def run_case(case: dict, home) -> str | None:
    """What went wrong (a word from the module docstring and a detail), or None."""
    try:
        with _deadline(DEADLINE):
            return {"command": _command, "config": _config, "trace": _trace, "store": _store}[case["kind"]](case, home)
    except _Hang:
        return "hang"
    except Exception as e:  # anything that escaped is a traceback a user would have seen
        return f"traceback: {type(e).__name__}: {e}"[:300]


def _command(case: dict, home) -> str | None:
    from hpcsched.pbs import front
    from importlib import import_module
    os.environ["HPCSCHED_FLAVOR"] = case["flavor"]
    os.environ["HPCSCHED_USER"] = case.get("user", "alice")
    zone = os.environ.get("TZ")
    os.environ["TZ"] = case.get("tz", "UTC")
    time.tzset()
    module, name = front.COMMANDS[case["prog"]].split(":")
    if case["flavor"] == "cobalt":  # (its command, an executable job.sh here, is the case's script)
        module = "cobalt" if case["prog"] in front.COBALT else module
        with open("job.sh", "w") as f:
            f.write(case["stdin"])
        os.chmod("job.sh", 0o755)
    command = getattr(import_module(f"hpcsched.pbs.{module}"), name)
    before = _store_bytes(home)
    err, out = io.StringIO(), io.StringIO()
    saved = os.sys.stdin
    os.sys.stdin = io.StringIO(case["stdin"])
    try:
        with contextlib.redirect_stderr(err):
            status = command(list(case["argv"]), out=out)
    finally:
        os.sys.stdin = saved
        os.environ["HPCSCHED_USER"] = "alice"
        os.environ.pop("TZ") if zone is None else os.environ.update(TZ=zone)
        time.tzset()
    if "Traceback" in err.getvalue() or "internal error" in err.getvalue():
        return f"traceback: {err.getvalue()[:300]}"
    flavor = "torque" if case["flavor"] == "cobalt" and case["prog"] not in front.COBALT else case["flavor"]
    if status not in STATUSES[flavor]:
        return f"status {status}: {err.getvalue()[:200]}"
    listed = page_statuses(case["prog"], case["flavor"])
    if listed is not None and status not in listed:
        return f"status {status}: not in man 1 {case['prog']}'s EXIT STATUS: {err.getvalue()[:200]}"
    # (a command given several jobs acts on each it can: one bad id fails it, not the rest)
    several = sum(1 for a in case["argv"] if not a.startswith("-")) > 1
    if status != 0 and _store_bytes(home) != before and not several:
        return f"changed: status {status} yet the store changed"
    return None


def _config(case: dict, home) -> str | None:
    from hpcsched.core.errors import ConfigError
    from hpcsched.store.site import load_site
    import tomllib
    text = _toml(case["config"])
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return None  # (a value TOML cannot even write: not a case)
    (home / "config.toml").write_bytes((text + "# caf\u00e9\n").encode(case.get("encoding", "utf-8")))
    try:
        load_site(home)
    except ConfigError:
        return None
    return None


def _toml(cfg: dict) -> str:
    def val(v):
        if v is None:
            return '"none"'
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, float) and v != v or v in (float("inf"), float("-inf")):
            return "inf" if v > 0 else "-inf"
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, list):
            return "[" + ", ".join(val(x) for x in v) + "]"
        raise TypeError(v)
    lines = [f"{k} = {val(v)}" for k, v in cfg.items() if not isinstance(v, dict) and k != "nodes"]
    for n in cfg["nodes"]:
        lines.append("[[nodes]]")
        lines.extend(f"{k} = {val(v)}" for k, v in n.items())
    for name, q in cfg["queues"].items():
        lines.append(f"[queues.{name}]")
        lines.extend(f"{k} = {val(v)}" for k, v in q.items())
    return "\n".join(lines) + "\n"


def _trace(case: dict, home) -> str | None:
    from hpcsched.core.errors import SchedulerError
    from hpcsched.sim.simulate import simulate
    path = home.parent / "fuzz.swf"
    path.write_bytes(case["text"].encode("utf-8", "surrogateescape"))
    try:
        simulate(str(path), drain=False, gantt=None)
    except SchedulerError:
        return None
    return None


def _store(case: dict, home) -> str | None:
    from hpcsched.core.errors import SchedulerError
    from hpcsched.store.journaled import Batch
    from hpcsched.store.site import load_site
    rnd = random.Random(case["seed"])
    site = load_site(home)
    name = "state.json" if case["how"].startswith("snapshot") else "journal.jsonl"
    path = home / name
    if not path.exists():
        return None
    original = path.read_bytes()
    how = case["how"]
    data = original
    lines = data.split(b"\n")
    if how in ("flip", "snapshot-flip") and data:
        i = rnd.randrange(len(data))
        data = data[:i] + bytes([data[i] ^ (1 << rnd.randrange(8))]) + data[i + 1:]
    elif how in ("truncate", "snapshot-truncate") and data:
        data = data[:rnd.randrange(len(data))]
    elif how == "delete" and len(lines) > 2:
        gone = lines.pop(rnd.randrange(len(lines) - 1))
        data = b"\n".join(lines)
        snapshot = home / "state.json"
        if snapshot.exists() and json.loads(gone).get("seq", 0) <= json.loads(snapshot.read_text())["journal_seq"]:
            return None  # the record the snapshot covers, kept for its next id: nothing is lost without it
    elif how == "duplicate" and len(lines) > 2:
        k = rnd.randrange(len(lines) - 1)
        lines.insert(k, lines[k])
        data = b"\n".join(lines)
    elif how == "swap" and len(lines) > 3:
        k = rnd.randrange(len(lines) - 2)
        lines[k], lines[k + 1] = lines[k + 1], lines[k]
        data = b"\n".join(lines)
    elif how == "null":
        data = b"null\n"
    elif how == "bom":
        data = b"\xef\xbb\xbf" + data
    if data == original:
        return None
    path.write_bytes(data)
    try:
        batch = Batch(site)
        try:
            with batch.store.locked(exclusive=False):
                batch.load()
        except SchedulerError:
            return None  # noticed
        if name == "journal.jsonl" and original.startswith(data):
            # a torn tail (dropped with a warning: the one damage a crash makes), or a cut
            # at a line's end, which reads as an earlier, whole store
            return None if batch.store.warnings or data.endswith(b"\n") or not data else "unnoticed: torn tail"
        return f"unnoticed: {how} of {name}"
    finally:
        path.write_bytes(original)
