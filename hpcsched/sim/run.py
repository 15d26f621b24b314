"""One replay described as plain settings, so a command line, a sweep cell and a job-array
task all describe (and check) a replay the same way.

    settings = check({"trace": "kth.swf.gz", "config": "site.toml", "backfill": "easy",
                      "priority.policy": "simon"})
    result = replay(settings)

A key is either a replay option (OPTIONS: the machine, the estimate model, the trace
mapping, the statistics' conventions) or a site configuration key, dotted for nested
tables (`priority.policy`, `queues.prod-short.max_walltime`), applied over the `config`
file.  `check` reports the first bad key or value as one SimulationError line, before
anything runs.
"""
from __future__ import annotations

import math
import os

from ..config import CORE_KEYS, DRIVER_KEYS, build, loads
from ..core.errors import ConfigError, SchedulerError
from .engine import SimulationError
from .estimates import MODELS
from .metrics import SERIES_STEPS, classes


def _fraction(v):
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 <= v < 1:
        raise ValueError("must be a fraction in [0, 1)")
    return float(v)


def _positive_int(v):
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise ValueError("must be a whole number of at least 1")
    return v


def _choice(*allowed):
    def check(v):
        if v not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}")
        return v
    return check


def _seconds(v):
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 1:
        raise ValueError("must be at least 1 second (a pass per simulated millisecond never ends)")
    return float(v)


def _load(v):
    from .simulate import LOADS
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or not LOADS[0] <= v <= LOADS[1]:
        raise ValueError(f"must be a factor from {LOADS[0]:g} to {LOADS[1]:g} (2: arrivals twice as dense)")
    return float(v)


def _flag(v):
    if not isinstance(v, bool):
        raise ValueError("must be true or false")
    return v


def _text(v):
    if not isinstance(v, str) or not v:
        raise ValueError("must be a non-empty string")
    return v


def _comma_list(v, cast, hint: str):
    """A command line's `1,2,5` as a list (a TOML list is already one)."""
    if not isinstance(v, str):
        return v
    try:
        return [cast(x) for x in v.split(",")]
    except ValueError:
        raise ValueError(hint) from None


def _sizes(v):
    v = _comma_list(v, int, "give increasing lowest sizes, e.g. 1,2,5,17")
    if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        raise ValueError("give increasing lowest sizes, e.g. [1, 2, 5, 17]")
    classes(v)
    return v


def _thresholds(v):
    v = _comma_list(v, int, "give sizes in nodes, e.g. 8192,16384")
    if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in v):
        raise ValueError("give positive sizes in nodes, e.g. [8192, 16384]")
    return v


def _groups(v):
    from ..drain.accounts import groups_from
    v = _comma_list(v, int, "give increasing lowest sizes, e.g. 1,129,1000")
    if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        raise ValueError("give increasing lowest sizes, e.g. [1, 129, 1000]")
    groups_from(v)  # (increasing, from 1: else its ValueError)
    return v


def _queue_map(v):
    if isinstance(v, str):
        pairs = [item.split("=", 1) for item in v.split(",") if item]
        if not all(len(p) == 2 for p in pairs):
            raise ValueError("give NUMBER=QUEUE pairs, e.g. 1=short,2=long")
        v = dict(pairs)
    if not isinstance(v, dict):
        raise ValueError("give a table of trace queue numbers to queue names")
    try:
        return {int(k): _text(q) for k, q in v.items()}
    except (TypeError, ValueError):
        raise ValueError("give trace queue numbers (integers) to queue names") from None


def _window(v):
    v = _comma_list(v, float, "give START_DAY,DAYS, e.g. 30,2")
    if not isinstance(v, list) or len(v) != 2 or not all(isinstance(x, (int, float)) and math.isfinite(x)
                                                          for x in v) or v[0] < 0 or v[1] <= 0:
        raise ValueError("give START_DAY,DAYS (days after the first submission, then a length), e.g. 30,2")
    return [float(v[0]), float(v[1])]


#: replay options: name -> (checker, default)
OPTIONS = {
    "trace": (_text, None),
    "config": (_text, None),
    "policy": (_text, None),
    "backfill": (_text, None),
    "placement": (_choice("first-fit", "contiguous", "cuboid"), None),
    "machine": (_text, None),
    "size_map": (_choice("share", "procs"), "share"),
    "capability_split": (_thresholds, []),
    "groups": (_groups, None),  # drain accounting's job-size groups (None: the default ones)
    "estimate": (_choice(*MODELS), "request"),
    "queue_from": (_choice("router", "trace"), "router"),
    "queue_map": (_queue_map, {}),
    "cancelled": (_choice("keep", "drop"), "keep"),
    "load": (_load, 1.0),
    "nodes": (_positive_int, None),
    "ppn": (_positive_int, None),
    "shared": (_flag, False),
    "period": (_seconds, None),
    "skip_bad": (_flag, False),
    "warmup": (_fraction, 0.0),
    "cooldown": (_flag, False),
    "size_classes": (_sizes, None),
    "capability": (_positive_int, None),
    "series": (_choice(*SERIES_STEPS), "day"),
    "gantt": (_window, [0.0, 2.0]),
    "drain": (_flag, False),  # drain-time accounting: opt-in (it costs about 10 % of a replay)
}


def site_config(settings: dict) -> dict:
    """The site configuration a replay uses: the `config` file, then dotted keys over it."""
    cfg: dict = {}
    if settings.get("config"):
        path = settings["config"]
        try:
            with open(path, encoding="utf-8") as f:
                cfg = loads(f.read())
        except FileNotFoundError:
            raise SimulationError(f"{path}: no such file") from None
        except OSError as e:
            raise SimulationError(f"{path}: {e.strerror}") from None
        except UnicodeDecodeError as e:
            raise SimulationError(f"{path}: not UTF-8 (byte {e.start})") from None
        except ConfigError as e:
            raise SimulationError(f"{path}: {e}") from None
    for key, value in settings.items():
        if key in OPTIONS:
            continue
        *tables, last = key.split(".")
        here = cfg
        for t in tables:
            here = here.setdefault(t, {})
            if not isinstance(here, dict):
                raise SimulationError(f"{key}: {t} is not a table in the configuration")
        here[last] = value
    return cfg


def check(settings: dict) -> dict:
    """`settings` with defaults filled in, or SimulationError naming the first bad key."""
    out = {}
    for key, value in settings.items():
        if key in OPTIONS and value is None:  # (a checked replay's unset option)
            continue
        if key in OPTIONS:
            try:
                out[key] = OPTIONS[key][0](value)
            except ValueError as e:
                raise SimulationError(f"{key}: {value!r}: {e}") from None
        elif key.split(".")[0] in CORE_KEYS or key.split(".")[0] in DRIVER_KEYS:
            out[key] = value
        else:
            raise SimulationError(f"{key}: unknown key (a replay option: {', '.join(OPTIONS)}; "
                                  f"or a site configuration key)")
    for key, (_, default) in OPTIONS.items():
        out.setdefault(key, default)
    if not out["trace"]:
        raise SimulationError("trace: missing")
    if not os.path.exists(out["trace"]):
        raise SimulationError(f"{out['trace']}: no such file")
    cfg = site_config(out)
    # the configuration must build (a machine stands in when it names none)
    probe = dict(cfg, machine=out["machine"]) if out["machine"] else dict(cfg)
    if probe.get("machine") is not None:
        probe.pop("nodes", None)
    else:
        probe["nodes"] = cfg.get("nodes") or [{"names": "n0", "cores": 1}]
    priority = cfg.get("priority", {})
    if out["policy"] and isinstance(priority, dict):  # (not a table: `build` says so)
        priority = dict(priority, policy=out["policy"])
    for key, value in (("priority", priority), ("backfill", out["backfill"])):
        if value:
            probe[key] = value
    try:
        build(probe, extra_keys=DRIVER_KEYS)
    except SchedulerError as e:
        raise SimulationError(str(e)) from None
    return out


def replay(settings: dict, progress=None):
    """Run the replay `settings` describe (checked first); returns its Result."""
    from ..drain.accounts import groups_from
    from .simulate import TraceMap, simulate
    s = check(settings)
    tmap = TraceMap(s["queue_from"], tuple(sorted(s["queue_map"].items())), s["cancelled"], s["load"])
    return simulate(s["trace"], policy=s["policy"], backfill=s["backfill"], nodes=s["nodes"], ppn=s["ppn"],
                    shared=s["shared"], period=s["period"], skip_bad=s["skip_bad"], warmup=s["warmup"],
                    cooldown=s["cooldown"], config=site_config(s), progress=progress, drain=s["drain"],
                    placement=s["placement"], estimate=s["estimate"], trace_map=tmap,
                    size_classes=s["size_classes"], capability=s["capability"],
                    series_step=SERIES_STEPS[s["series"]], gantt=s["gantt"], machine=s["machine"],
                    size_map=s["size_map"], capability_split=s["capability_split"] or (),
                    **({"groups": groups_from(s["groups"])} if s["groups"] else {}))
