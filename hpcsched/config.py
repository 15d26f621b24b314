"""Site configuration: a plain dict (as `tomllib` reads a site's TOML file) -> a Scheduler.

Every problem is reported as one ConfigError line naming the key, e.g.
`queues.prod-short.max_walltime: bad duration 'six hours'`.
"""
from __future__ import annotations

import tomllib
from datetime import datetime

from .core.errors import ConfigError, InvalidRequest
from .core.plan import ALL
from .core.policy import Fifo, Policy
from .core.reservations import Reservation
from .core.route import Queue, Router
from .core.scheduler import Scheduler, Settings
from .core.timefmt import parse_duration
from .machines.nodepool import NodePool
from .policies.cobalt import Cobalt
from .policies.simon import Simon

#: Top-level keys the core reads; drivers (commands, server) add their own via `extra_keys`.
CORE_KEYS = frozenset({"server_name", "backfill", "interval", "overrun_grace", "reservation_slop",
                       "default_queue", "priority", "queues", "nodes", "reservations", "placement",
                       "dependency_failure"})
#: The keys of a site file the commands and the server read (store/site.py); the simulator
#: takes a site's file whole and leaves these alone.
DRIVER_KEYS = frozenset({"flavor", "operators", "managers", "keep_completed", "pbsyod_launcher",
                         "server_interval", "kill_grace", "prejob_check", "launcher", "job_history_duration",
                         "node_log", "scheduling", "mail_command", "submit_filter"})

#: The embedded default: a small test rig with ALCF-style routing and EASY backfill.
DEFAULT_TOML = """\
server_name = "localhost"
backfill = "easy"
default_queue = "default"

[priority]
policy = "fifo"

[[nodes]]
names = "node[01-16]"
cores = 4
memory = 8000

[queues.default]
route_to = ["prod-capability", "prod-short", "prod-long"]

[queues.prod-capability]
min_fraction = 0.2
max_walltime = "24:00:00"

[queues.prod-short]
max_walltime = "6:00:00"

[queues.prod-long]
max_walltime = "24:00:00"
max_running_fraction = 0.3334
"""



POLICIES = {"fifo": Fifo, "cobalt": Cobalt, "simon": Simon}


def make_policy(name: str, options: dict | None = None) -> Policy:
    """A policy by name with its options (from the site config's [priority] table)."""
    if name not in POLICIES:
        raise ConfigError(f"priority.policy: unknown policy {name!r} (choose from {', '.join(POLICIES)})")
    options = dict(options or {})
    cls = POLICIES[name]
    allowed = set(getattr(cls, "__dataclass_fields__", {}))
    for key in options:
        if key not in allowed:
            raise ConfigError(f"priority.{key}: unknown option for policy {name}")
    if "backfill_queues" in options:
        options["backfill_queues"] = frozenset(options["backfill_queues"])
    for key, value in options.items():
        expected = cls.__dataclass_fields__[key].default
        if isinstance(expected, (int, float)) and not isinstance(expected, bool):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"priority.{key}: must be a non-negative number")
        if key in ("project_weights", "initial_scores"):
            if not isinstance(value, dict) or not all(isinstance(v, (int, float)) for v in value.values()):
                raise ConfigError(f"priority.{key}: must be a table of numbers")
    if name == "cobalt" and options.get("interval", 15.0) <= 0:
        raise ConfigError("priority.interval: must be positive")
    return cls(**options)

def parse_backfill(value) -> tuple[float, bool]:
    """(reservation depth, backfill on?) for a `backfill` setting.

    `"none"`: strict order, no job starts past one that cannot (the first waiting job
    still gets a reservation, for its estimate); `"easy"`: depth 1; `"conservative"`:
    every job; `"depth=N"` (or an integer N): N reservations, `depth=0` being first fit."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value, True
    text = str(value).strip().lower()
    named = {"none": (1, False), "easy": (1, True), "conservative": (ALL, True), "all": (ALL, True)}
    if text in named:
        return named[text]
    if text.startswith("depth="):
        n = text[6:]
        if n in ("all", "inf"):
            return ALL, True
        if n.isdigit():
            return int(n), True
    raise ConfigError(f"backfill: {value!r} is not none, easy, conservative or depth=N")


def _number(config: dict, key: str, default: float, positive: bool = False) -> float:
    value = config.get(key, default)
    if isinstance(value, str):
        try:
            value = parse_duration(value)
        except InvalidRequest as e:
            raise ConfigError(f"{key}: {e}") from None
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0 or (positive and value == 0):
        raise ConfigError(f"{key}: must be a {'positive' if positive else 'non-negative'} number of seconds")
    return float(value)


def _choice(config: dict, key: str, choices: tuple[str, ...]) -> str:
    value = config.get(key, choices[0])
    if value not in choices:
        raise ConfigError(f"{key}: {value!r} is not {' or '.join(choices)}")
    return value


def _time(value, where: str) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, datetime):
        return value.timestamp()
    try:
        return datetime.fromisoformat(str(value)).timestamp()
    except ValueError:
        raise ConfigError(f"{where}: {value!r} is neither epoch seconds nor an ISO date") from None


def reservation_from_config(d: dict, where: str) -> Reservation:
    allowed = {"name", "start", "duration", "nodes", "count", "users", "groups", "projects", "queue",
               "period", "owner"}
    for key in d:
        if key not in allowed:
            raise ConfigError(f"{where}.{key}: unknown key")
    for key in ("name", "start", "duration"):
        if key not in d:
            raise ConfigError(f"{where}.{key}: missing")
    from .core import nodelist
    try:
        period = {"daily": 86400.0, "weekly": 604800.0}.get(d.get("period"), None)
        if period is None:
            period = parse_duration(d.get("period", 0))
        nodes = d.get("nodes", [])
        nodes = nodelist.expand(nodes) if isinstance(nodes, str) else list(nodes)
        return Reservation(name=str(d["name"]), start=_time(d["start"], f"{where}.start"),
                           duration=parse_duration(d["duration"]), nodes=tuple(nodes),
                           count=int(d.get("count", 0)), users=frozenset(d.get("users", ())),
                           groups=frozenset(d.get("groups", ())), projects=frozenset(d.get("projects", ())),
                           queue=str(d.get("queue", "")), period=period, owner=str(d.get("owner", "")))
    except (InvalidRequest, TypeError, ValueError) as e:
        raise ConfigError(f"{where}: {e}") from None


def build(config: dict, extra_keys=(), now: float = 0.0) -> Scheduler:
    """A Scheduler configured by `config`; reservations in it are added at `now`."""
    if not isinstance(config, dict):
        raise ConfigError("config: must be a table")
    for key in config:
        if key not in CORE_KEYS and key not in extra_keys:
            raise ConfigError(f"{key}: unknown key")
    nodes = config.get("nodes")
    if not isinstance(nodes, list) or not nodes:
        raise ConfigError("nodes: need at least one [[nodes]] table")
    topology = NodePool.from_config(nodes, config.get("placement", "first-fit"))
    queues_cfg = config.get("queues", {"batch": {}})
    if not isinstance(queues_cfg, dict) or not queues_cfg:
        raise ConfigError("queues: need at least one [queues.NAME] table")
    queues = {}
    for name, q in queues_cfg.items():
        if not isinstance(q, dict):
            raise ConfigError(f"queues.{name}: must be a table")
        queues[name] = Queue.from_config(name, q)
    default = config.get("default_queue", next(iter(queues)) if len(queues) == 1 else "")
    if not isinstance(default, str):
        raise ConfigError("default_queue: must be a queue name")
    router = Router(queues, default)
    prio = config.get("priority", {})
    if not isinstance(prio, dict):
        raise ConfigError("priority: must be a table")
    prio = dict(prio)
    policy = make_policy(str(prio.pop("policy", "fifo")), prio)
    depth, backfill = parse_backfill(config.get("backfill", "easy"))
    settings = Settings(depth=depth, backfill=backfill,
                        interval=_number(config, "interval", 15.0, positive=True),
                        overrun_grace=_number(config, "overrun_grace", 300.0),
                        reservation_slop=_number(config, "reservation_slop", 0.0),
                        dependency_failure=_choice(config, "dependency_failure", ("hold", "delete")))
    sched = Scheduler(topology, router, policy, settings)
    for k, d in enumerate(config.get("reservations", [])):
        where = f"reservations[{k}]"
        if not isinstance(d, dict):
            raise ConfigError(f"{where}: must be a table")
        try:
            sched.add_reservation(reservation_from_config(d, where), now)
        except ConfigError:
            raise
        except Exception as e:  # Rejected, InvalidRequest: one line naming the table
            raise ConfigError(f"{where}: {e}") from None
    return sched


def loads(text: str) -> dict:
    """Parse TOML text, turning syntax errors into one ConfigError line."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"config: {e}") from None


def default_config() -> dict:
    return loads(DEFAULT_TOML)
