"""Site configuration: a plain dict (as `tomllib` reads a site's TOML file) -> a Scheduler.

Every problem is reported as one ConfigError line naming the key, e.g.
`queues.prod-short.max_walltime: bad duration 'six hours'`.
"""
from __future__ import annotations

import math
import tomllib

from .core.bank import MAX_AMOUNT, Account, Bank, Window
from .core.calendar import Entry
from .core.errors import ConfigError, InvalidRequest
from .core.plan import ALL
from .core.policy import Fifo, Policy
from .core.reservations import Reservation, pattern
from .core.route import Queue, Router
from .core.scheduler import Scheduler, Settings
from .core import timefmt
from .core.timefmt import WEEKDAYS, parse_duration
from . import machines
from .core.quotas import Quotas
from .core.usage import METRICS, Usage
from .policies.cobalt import Cobalt
from .policies.gridengine import GridEngine
from .policies.multifactor import Multifactor
from .policies.sharetree import ShareTree
from .policies.simon import Simon

#: Top-level keys the core reads; drivers (commands, server) add their own via `extra_keys`.
CORE_KEYS = frozenset({"server_name", "backfill", "interval", "overrun_grace", "reservation_slop",
                       "default_queue", "priority", "queues", "nodes", "machine", "reservations", "placement",
                       "dependency_failure", "allocations", "calendar", "usage", "sharetree",
                       "consumables", "quotas"})
#: The keys of a site file the commands and the server read (store/site.py); the simulator
#: takes a site's file whole and leaves these alone.
DRIVER_KEYS = frozenset({"flavor", "operators", "managers", "keep_completed", "pbsyod_launcher",
                         "server_interval", "kill_grace", "prejob_check", "prologue", "epilogue",
                         "prologue_timeout", "launcher", "job_history_duration", "ssh", "node_command",
                         "node_spool", "node_check_rate", "job_stat_rate",
                         "node_log", "scheduling", "mail_command", "submit_filter",
                         "multi_user", "acl_roots", "deadline_users", "query_other_jobs", "resv_enable",
                         "default_walltime", "site_path", "filter_user", "mail_user", "max_request", "tmpdir",
                         "acl_resv_users", "resv_max_duration", "resv_max_nodes", "resv_max_per_user"})

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



POLICIES = {"fifo": Fifo, "cobalt": Cobalt, "simon": Simon, "gridengine": GridEngine, "multifactor": Multifactor}
_GIVEN = {"tree", "queue_priorities"}  # policy fields the configuration fills in, not the site


def make_policy(name: str, options: dict | None = None, **given) -> Policy:
    """A policy by name with its options (from the site config's [priority] table), and
    what the rest of the configuration gives it (`tree`, `queue_priorities`)."""
    if name not in POLICIES:
        raise ConfigError(f"priority.policy: unknown policy {name!r} (choose from {', '.join(POLICIES)})")
    options = dict(options or {})
    cls = POLICIES[name]
    allowed = set(getattr(cls, "__dataclass_fields__", {})) - _GIVEN
    for key in options:
        if key not in allowed:
            raise ConfigError(f"priority.{key}: unknown option for policy {name}")
    if "backfill_queues" in options:
        queues = options["backfill_queues"]
        if not isinstance(queues, list) or not all(isinstance(q, str) for q in queues):
            raise ConfigError('priority.backfill_queues: must be a list of queue names, e.g. ["backfill"]')
        options["backfill_queues"] = frozenset(queues)
    for key, value in options.items():
        expected = cls.__dataclass_fields__[key].default
        if isinstance(expected, (int, float)) and not isinstance(expected, bool):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"priority.{key}: must be a non-negative number")
        if isinstance(expected, bool) and not isinstance(value, bool):
            raise ConfigError(f"priority.{key}: must be true or false")
        if key in ("project_weights", "initial_scores"):
            if not isinstance(value, dict) or not all(isinstance(v, (int, float)) for v in value.values()):
                raise ConfigError(f"priority.{key}: must be a table of numbers")
        if key in ("urgency", "queue_urgency"):
            if not isinstance(value, dict) or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                      and 0 <= v < float("inf") for v in value.values()):
                raise ConfigError(f"priority.{key}: must be a table of non-negative numbers, "
                                  + ('e.g. { slots = 1000, mem = 10, matlab = 500 }' if key == "urgency"
                                     else 'e.g. { mc_long = 1000 }'))
    if name == "cobalt" and options.get("interval", 15.0) <= 0:
        raise ConfigError("priority.interval: must be positive")
    fields = getattr(cls, "__dataclass_fields__", {})
    return cls(**options, **{k: v for k, v in given.items() if k in fields})


def usage_from_config(d) -> Usage:
    """`[usage]`: metric (slots, nodes, cpu), half_life and window (durations; 0: none), or
    Grid Engine's sched_conf spelling of the half-life, `halftime`, in hours."""
    if not isinstance(d, dict):
        raise ConfigError("usage: must be a table")
    for key in d:
        if key not in ("metric", "half_life", "halftime", "window"):
            raise ConfigError(f"usage.{key}: unknown key")
    metric = d.get("metric", "nodes")
    if metric not in METRICS:
        raise ConfigError(f"usage.metric: {metric!r} is not {', '.join(METRICS)}")
    if "halftime" in d:
        if "half_life" in d:
            raise ConfigError("usage: half_life (a duration) or halftime (Grid Engine's, in hours), not both")
        hours = d["halftime"]
        if not (isinstance(hours, (int, float)) and not isinstance(hours, bool) and 0 <= hours < math.inf):
            raise ConfigError(f"usage.halftime: hours, a non-negative number, not {hours!r}")
        half_life = hours * 3600.0
    else:
        half_life = _number(d, "half_life", 0.0, where="usage.")
    return Usage(metric, half_life, _number(d, "window", 0.0, where="usage."))

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


def _number(config: dict, key: str, default: float, positive: bool = False, where: str = "") -> float:
    value = config.get(key, default)
    if isinstance(value, str):
        try:
            value = parse_duration(value)
        except InvalidRequest as e:
            raise ConfigError(f"{where}{key}: {e}") from None
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0 or (positive and value == 0) \
            or not math.isfinite(value):
        raise ConfigError(f"{where}{key}: must be a {'positive' if positive else 'non-negative'} number of seconds")
    return float(value)


def _choice(config: dict, key: str, choices: tuple[str, ...]) -> str:
    value = config.get(key, choices[0])
    if value not in choices:
        raise ConfigError(f"{key}: {value!r} is not {' or '.join(choices)}")
    return value


def _time(value, where: str) -> float:
    """Epoch seconds from seconds, a TOML date or time, or an ISO date (timefmt.epoch);
    ConfigError for anything else, or a time no calendar holds."""
    try:
        return timefmt.epoch(value)
    except InvalidRequest as e:
        raise ConfigError(f"{where}: {value!r} is {e}") from None


def _flag(d: dict, key: str, where: str, default: bool = False) -> bool:
    value = d.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(f"{where}.{key}: must be true or false")
    return value


def _weekdays(days, start: float, where: str) -> tuple[float, tuple[float, ...]]:
    """(first start, offsets in the week) of a reservation held on `days` ("MO", "Tue",
    "friday", ...) at `start`'s time of day, from `start` on: pbs_rsub's weekly BYDAY."""
    if not isinstance(days, list) or not days or not all(isinstance(x, str) and x[:2].upper() in WEEKDAYS
                                                        for x in days):
        raise ConfigError(f"{where}: a list of days (MO, TU, WE, TH, FR, SA, SU)")
    first, _, offsets = pattern("WEEKLY", 1, sorted({WEEKDAYS.index(x[:2].upper()) for x in days}), [], start)
    return first, offsets


def reservation_from_config(d: dict, where: str) -> Reservation:
    allowed = {"name", "start", "duration", "nodes", "count", "users", "groups", "projects", "queue",
               "period", "owner", "account", "links", "days"}
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
        start, offsets = _time(d["start"], f"{where}.start"), (0.0,)
        if "days" in d:  # (Maui's SRCFG DAYS: some days of each week, at the start's time)
            if d.get("period", "weekly") not in ("weekly", 604800, "7:00:00:00"):
                raise ConfigError(f"{where}.days: a reservation on some days repeats weekly (period = \"weekly\")")
            period = 604800.0
            start, offsets = _weekdays(d["days"], start, f"{where}.days")
        return Reservation(name=str(d["name"]), start=start, offsets=offsets,
                           duration=parse_duration(d["duration"]), nodes=tuple(nodes),
                           count=int(d.get("count", 0)), users=frozenset(d.get("users", ())),
                           groups=frozenset(d.get("groups", ())), projects=frozenset(d.get("projects", ())),
                           queue=str(d.get("queue", "")), period=period, owner=str(d.get("owner", "")),
                           account=str(d.get("account", "")), links=_flag(d, "links", where))
    except (InvalidRequest, TypeError, ValueError) as e:
        raise ConfigError(f"{where}: {e}") from None


def _table(value, where: str) -> dict:
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: must be a table")
    return value


def _known(d: dict, allowed: set, where: str) -> None:
    for key in d:
        if key not in allowed:
            raise ConfigError(f"{where}.{key}: unknown key")


def _share(d: dict, key: str, where: str, default: float, top: float = 1.0) -> float:
    value = d.get(key, default)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value <= top:
        raise ConfigError(f"{where}.{key}: must be a number from 0 to {top:g}")
    return float(value)


def _window(d, where: str) -> Window:
    d = _table(d, where)
    _known(d, {"start", "end", "limit"}, where)
    for key in ("start", "end"):
        if key not in d:
            raise ConfigError(f"{where}.{key}: missing")
    window = Window(_time(d["start"], f"{where}.start"), _time(d["end"], f"{where}.end"),
                    _share(d, "limit", where, 2.0, top=1000.0))
    if not window.start < window.end:
        raise ConfigError(f"{where}: start must come before end")
    return window


def _period(d: dict, where: str, inherited: tuple) -> tuple[float, float, int]:
    start = _time(d["start"], f"{where}.start") if "start" in d else inherited[0]
    end = _time(d["end"], f"{where}.end") if "end" in d else inherited[1]
    periods = d.get("periods", inherited[2])
    if not isinstance(periods, int) or isinstance(periods, bool) or not 1 <= periods <= 366:
        raise ConfigError(f"{where}.periods: must be a whole number from 1 to 366")
    return start, end, periods


ALLOCATION_KEYS = {"unit", "start", "end", "periods", "on_exhausted", "backfill_queue", "unallocated",
                   "charge_factors", "whole_machine", "whole_machine_rate", "bill_reservations", "overburn",
                   "projects"}


def bank_from_config(d) -> Bank:
    """The [allocations] table: the charging rules and every project's account."""
    where = "allocations"
    d = _table(d, where)
    _known(d, ALLOCATION_KEYS, where)
    site_period = _period(d, where, (-math.inf, math.inf, 1))
    factors = _table(d.get("charge_factors", {}), f"{where}.charge_factors")
    for queue, f in factors.items():
        if not isinstance(f, (int, float)) or isinstance(f, bool) or not 0 <= f < math.inf:
            raise ConfigError(f"{where}.charge_factors.{queue}: must be a non-negative number")
    accounts = {}
    for project, p in _table(d.get("projects", {}), f"{where}.projects").items():
        w = f"{where}.projects.{project}"
        p = _table(p, w)
        _known(p, {"amount", "start", "end", "periods", "on_exhausted", "overburn", "users"}, w)
        amount = p.get("amount", 0)
        if not isinstance(amount, (int, float)) or isinstance(amount, bool) or not 0 <= amount <= MAX_AMOUNT:
            raise ConfigError(f"{w}.amount: must be a number from 0 to {MAX_AMOUNT:.0e}")
        users = p.get("users", [])
        if not isinstance(users, list) or not all(isinstance(u, str) for u in users):
            raise ConfigError(f"{w}.users: must be a list of user names")
        start, end, periods = _period(p, w, site_period)
        try:
            accounts[project] = Account(project, float(amount), start, end, periods, str(p.get("on_exhausted", "")),
                                        _window(p["overburn"], f"{w}.overburn") if "overburn" in p else None,
                                        frozenset(users))
        except InvalidRequest as e:
            raise ConfigError(f"{w}: {e}") from None
    bill = d.get("bill_reservations", False)
    if not isinstance(bill, bool):
        raise ConfigError(f"{where}.bill_reservations: must be true or false")
    try:
        return Bank(accounts, unit=str(d.get("unit", "node-hours")), on_exhausted=str(d.get("on_exhausted", "backfill")),
                    backfill_queue=str(d.get("backfill_queue", "backfill")), unallocated=str(d.get("unallocated", "run")),
                    charge_factors={str(k): float(v) for k, v in factors.items()},
                    whole_machine=_share(d, "whole_machine", where, 0.0),
                    whole_machine_rate=_share(d, "whole_machine_rate", where, 1.0),
                    bill_reservations=bill,
                    overburn=_window(d["overburn"], f"{where}.overburn") if "overburn" in d else None)
    except InvalidRequest as e:
        raise ConfigError(str(e)) from None


EVERY = {"daily": 86400.0, "weekly": 604800.0, "biweekly": 1209600.0}


def calendar_from_config(entries) -> list[Entry]:
    """The [[calendar]] entries: drains once, weekly, biweekly, daily or every N seconds."""
    from .core import nodelist
    if not isinstance(entries, list):
        raise ConfigError("calendar: must be a list of [[calendar]] tables")
    out, names = [], set()
    for k, d in enumerate(entries):
        where = f"calendar[{k}]"
        d = _table(d, where)
        _known(d, {"name", "kind", "start", "duration", "every", "nodes", "big_run", "capability"}, where)
        for key in ("name", "start", "duration"):
            if key not in d:
                raise ConfigError(f"{where}.{key}: missing")
        name = d["name"]
        if not isinstance(name, str) or not name or name in names:
            raise ConfigError(f"{where}.name: must be a name of its own")
        names.add(name)
        if not isinstance(d.get("big_run", False), bool):
            raise ConfigError(f"{where}.big_run: must be true or false")
        try:
            every = d.get("every", 0)
            every = EVERY[every] if every in EVERY else parse_duration(every)
            listed = d.get("nodes", ())
            listed = nodelist.expand(listed) if isinstance(listed, str) else tuple(listed)
            entry = Entry(name, _time(d["start"], f"{where}.start"), parse_duration(d["duration"]), every,
                          str(d.get("kind", "drain")), tuple(listed), d.get("big_run", False),
                          _share(d, "capability", where, 0.85))
        except (InvalidRequest, TypeError, ValueError) as e:
            raise ConfigError(f"{where}: {e}") from None
        out.append(entry)
    return out


def build(config: dict, extra_keys=(), now: float = 0.0) -> Scheduler:
    """A Scheduler configured by `config`; reservations in it are added at `now`."""
    if not isinstance(config, dict):
        raise ConfigError("config: must be a table")
    for key in config:
        if key not in CORE_KEYS and key not in extra_keys:
            raise ConfigError(f"{key}: unknown key")
    topology = machines.build(config.get("machine"), config.get("nodes"), config.get("placement", "first-fit"))
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
    ranking = {k: _flag(prio, k, "priority", True) for k in ("queue_priority", "job_priority")}
    prio.pop("queue_priority", None), prio.pop("job_priority", None)
    tree = ShareTree.from_config(config["sharetree"]) if "sharetree" in config else None
    policy = make_policy(str(prio.pop("policy", "fifo")), prio, tree=tree,
                         queue_priorities={n: float(q.priority) for n, q in queues.items() if q.priority})
    if tree is not None and not hasattr(policy, "tree"):
        raise ConfigError(f"sharetree: policy {policy.name} does not use a share tree (use gridengine or multifactor)")
    usage = usage_from_config(config.get("usage", {}))
    quotas = Quotas.from_config(config.get("consumables", {}), config.get("quotas", []))
    for name in getattr(policy, "urgency", {}):  # (a resource a job can ask for)
        if name not in ("slots", "mem", "gpus", "disk") and name not in config.get("consumables", {}):
            raise ConfigError(f"priority.urgency.{name}: not slots, mem, gpus, disk or a declared consumable")
    for name in getattr(policy, "queue_urgency", {}):
        if name not in queues:
            raise ConfigError(f"priority.queue_urgency.{name}: no such queue")
    depth, backfill = parse_backfill(config.get("backfill", "easy"))
    settings = Settings(depth=depth, backfill=backfill, **ranking,
                        interval=_number(config, "interval", 15.0, positive=True),
                        overrun_grace=_number(config, "overrun_grace", 300.0),
                        reservation_slop=_number(config, "reservation_slop", 0.0),
                        dependency_failure=_choice(config, "dependency_failure", ("hold", "delete")))
    bank = bank_from_config(config["allocations"]) if "allocations" in config else None
    if bank is not None and bank.on_exhausted == "backfill" and bank.backfill_queue not in queues and (
            bank.accounts or bank.unallocated == "refuse"):
        raise ConfigError(f"allocations.backfill_queue: no queue {bank.backfill_queue!r}")
    if bank is not None and hasattr(policy, "backfill_queues") and bank.backfill_queue in queues:
        # (the allocations' backfill queue is one: its jobs sort below production jobs too)
        policy.backfill_queues = policy.backfill_queues | {bank.backfill_queue}
    calendar = calendar_from_config(config.get("calendar", []))
    try:
        sched = Scheduler(topology, router, policy, settings, bank, calendar, usage, quotas)
    except InvalidRequest as e:
        raise ConfigError(str(e)) from None
    names = tuple(n.name for n in topology.all_nodes())
    for entry in calendar:
        try:
            sched.add_reservation(entry.reservation(names), now)
        except Exception as e:  # Rejected, InvalidRequest: one line naming the entry
            raise ConfigError(f"calendar {entry.name}: {e}") from None
    reservations = config.get("reservations", [])
    if not isinstance(reservations, list):
        raise ConfigError("reservations: must be a list of [[reservations]] tables")
    for k, d in enumerate(reservations):
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
