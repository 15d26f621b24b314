"""A site: its configuration file and its store, as the commands see them.

    $HPCSCHED_HOME/config.toml   the site configuration (`hpcsched init` writes one)
    $HPCSCHED_HOME/qmgr.json     qmgr's changes, applied over config.toml (see `overlay`)
    $HPCSCHED_HOME/state.json    the store (see journal.py)

The configuration holds the core's keys (config.py) and the commands' own: `flavor`
(`torque`, the default, `openpbs`, or `cobalt`: qsub, qstat, qdel, qhold, qrls, qalter
and qmove as Cobalt's, the rest as Torque's; $HPCSCHED_FLAVOR overrides it per call),
`operators`, `managers` (user names, or `@group` for every member of a Unix group),
`keep_completed` (seconds a finished job stays in plain qstat under Torque; 300),
`multi_user` (the server is the only door: see server/privilege.py) and `acl_roots`.

Who calls: on a multi-user site, the kernel's word (the server reads the peer's uid from
its socket and names the request's `caller`, request.py); on a single-user test rig, $HPCSCHED_USER if set, else the
real user.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import os
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path

from .. import sitefilter
from ..config import DRIVER_KEYS, build, loads
from ..core.errors import ConfigError, InvalidRequest
from ..core.timefmt import parse_duration
from ..core.scheduler import Scheduler
from .journal import default_home, write_atomic
from .request import current

SOCKET = "server.sock"  # a running server listens here for "something changed"

SITE_KEYS = DRIVER_KEYS  # (config.py lists them: one place names every key a site file may hold)
FLAVORS = ("torque", "openpbs", "cobalt")
CONFIG = "config.toml"
OVERLAY = "qmgr.json"
_USER_NAME = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_.-]*\$?")  # what useradd takes, and numeric ids


def read_overlay(home: Path) -> dict:
    """qmgr's changes: {"server": {key: value}, "queues": {name: {key: value} or None}}
    (None: the queue was deleted; a value None: the key was unset)."""
    path = home / OVERLAY
    try:
        overlay = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {"server": {}, "queues": {}}
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path}: cannot read: {e}") from None
    if not isinstance(overlay, dict) or not isinstance(overlay.get("server"), dict) \
            or not isinstance(overlay.get("queues"), dict):
        raise ConfigError(f"{path}: not a qmgr overlay")
    return overlay


def overlay(config: dict, changes: dict) -> dict:
    """`config` with qmgr's changes applied (a new dict; `config` is left alone)."""
    config = dict(config)
    for key, value in changes["server"].items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    queues = {name: dict(q) for name, q in config.get("queues", {}).items()} if isinstance(
        config.get("queues"), dict) else {}
    for name, q in changes["queues"].items():
        if q is None:
            queues.pop(name, None)
            continue
        merged = queues.setdefault(name, {})
        for key, value in q.items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = value
    if changes["queues"]:
        config["queues"] = queues
    return config


@dataclass
class Site:
    home: Path
    config: dict
    server: str
    flavor: str  # the PBS commands' vocabulary: torque or openpbs (a cobalt site's are Torque's)
    operators: frozenset[str]
    managers: frozenset[str]
    keep_completed: float
    multi_user: bool = False
    acl_roots: frozenset[str] = frozenset()  # users who may submit as root (Torque's acl_roots)
    deadline_users: frozenset[str] = frozenset()  # who may give a job a deadline (Grid Engine's deadlineusers)
    #: where `config` came from: config.toml's text and qmgr's changes (the store journals
    #: them when they change, so that a replay decides under the configuration of its day)
    source: tuple[str, dict] = field(default=("", {"server": {}, "queues": {}}), repr=False, compare=False)
    _built: Scheduler | None = field(default=None, repr=False, compare=False)
    cobalt: bool = False  # `flavor = "cobalt"`: qsub, qstat, ... are Cobalt's (pbs/cobalt.py)

    def scheduler(self) -> Scheduler:
        """A scheduler configured as the site says (no jobs yet): the one `load_site` built
        to check the configuration the first time, a new one after."""
        sched, self._built = self._built, None
        return sched or scheduler_of(self.config)

    @functools.cached_property
    def config_id(self) -> str:
        return config_id(*self.source)

    def is_operator(self, user: str) -> bool:
        return user == "root" or _member(user, self.operators) or _member(user, self.managers)

    def is_manager(self, user: str) -> bool:
        return user == "root" or _member(user, self.managers)

    def may_set_deadline(self, user: str) -> bool:
        """Grid Engine's rule: only deadline users (and here managers) give jobs a deadline."""
        return self.is_manager(user) or _member(user, self.deadline_users)


def scheduler_of(config: dict) -> Scheduler:
    # a PBS site deletes a job whose dependency failed, as Torque and OpenPBS do; a Cobalt
    # site holds it (dep_fail) until `qrls --dependencies` or an alter, as Cobalt does
    failure = "hold" if config.get("flavor") == "cobalt" else "delete"
    return build({"dependency_failure": failure, **config}, extra_keys=SITE_KEYS)


def config_id(text: str, changes: dict) -> str:
    """A short name for one configuration: config.toml's text and qmgr's changes."""
    return hashlib.sha256((text + "\0" + json.dumps(changes, sort_keys=True)).encode("utf-8")).hexdigest()[:16]


def config_from(text: str, changes: dict) -> dict:
    """The configuration a journaled source gives (config.toml's text, qmgr's changes)."""
    return overlay(loads(text), changes)


def _names(config: dict, key: str) -> frozenset[str]:
    value = config.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip("@") for v in value):
        raise ConfigError(f"{key}: must be a list of user names (or @group)")
    return frozenset(value)


def _member(user: str, names: frozenset[str]) -> bool:
    """Is `user` named, or a member of a named `@group`?"""
    if user in names:
        return True
    groups = {n[1:] for n in names if n.startswith("@")}
    return bool(groups) and not groups.isdisjoint(user_groups(user))


def user_groups(user: str) -> set[str]:
    """The names of `user`'s Unix groups, primary and supplementary (none if unknown)."""
    import grp
    import pwd
    try:
        gids = os.getgrouplist(user, pwd.getpwnam(user).pw_gid)
    except (KeyError, OSError):
        return set()
    names = set()
    for gid in gids:
        try:
            names.add(grp.getgrgid(gid).gr_name)
        except KeyError:
            pass
    return names


#: (home, $HPCSCHED_FLAVOR) -> (the files' stamp, the site loaded from them): the server
#: runs every forwarded command in one process, and parsing and checking an unchanged
#: configuration was a third of a qsub's cost there
_loaded: dict[tuple[Path, str | None], tuple[tuple, Site]] = {}


def config_stamp(home: Path) -> tuple:
    """What tells a changed configuration (config.toml and qmgr.json; a rewrite makes a
    new inode)."""
    stamp = []
    for name in (CONFIG, OVERLAY):
        try:
            st = os.stat(home / name)
            stamp.append((st.st_mtime_ns, st.st_size, st.st_ino))
        except OSError:
            stamp.append(None)
    return tuple(stamp)


def load_site(home: str | os.PathLike | None = None) -> Site:
    """The site at `home` (default: the store directory); ConfigError if it is not set up."""
    # absolute: the server runs forwarded commands in their callers' directories
    home = (Path(home) if home is not None else default_home()).absolute()
    key, stamp = (home, os.environ.get("HPCSCHED_FLAVOR")), config_stamp(home)
    if stamp[0] is not None and _loaded.get(key, (None,))[0] == stamp:
        return dataclasses.replace(_loaded[key][1], _built=None)
    site = _load_site(home)
    _loaded[key] = (stamp, dataclasses.replace(site, _built=None))
    return site


def _load_site(home: Path) -> Site:
    path = home / CONFIG
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no configuration; run 'hpcsched init' first") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 (byte {e.start})") from None
    changes = read_overlay(home)
    config = overlay(loads(text), changes)
    flavor = os.environ.get("HPCSCHED_FLAVOR") or config.get("flavor", "torque")
    if flavor not in FLAVORS:
        where = "HPCSCHED_FLAVOR" if os.environ.get("HPCSCHED_FLAVOR") else "flavor"
        raise ConfigError(f"{where}: {flavor!r} is not torque, openpbs or cobalt")
    check_named_user(os.environ)
    for key in ("scheduling", "query_other_jobs", "resv_enable"):
        if not isinstance(config.get(key, True), bool):
            raise ConfigError(f"{key}: must be true or false")
    for key, example in (("mail_command", '["sendmail", "-t"]'),
                         ("launcher", '"ssh" (our node side on each host) or ["ssh", "{host}", "{command}"]'),
                         ("ssh", '["ssh", "-o", "BatchMode=yes"]'), ("node_command", '["hpcsched", "node"]'),
                         ("prejob_check", '["ping", "-c1", "{node}"]'), ("pbsyod_launcher", '["aprun", "-n", "{np}"]'),
                         ("prologue", '["/etc/hpcsched/prologue"]'), ("epilogue", '["/etc/hpcsched/epilogue"]'),
                         ("submit_filter", '["/etc/hpcsched/submit_filter"] or "module:function"')):
        words = config.get(key, [])
        if key == "launcher" and words == "ssh":
            continue
        if key == "submit_filter" and isinstance(words, str):
            sitefilter.load(words, home)  # a Python filter, "module:function": it must import
            continue
        if not isinstance(words, list) or not all(isinstance(p, str) and p for p in words):
            raise ConfigError(f"{key}: must be a command as a list of words, e.g. {example}")
    for key in ("server_interval", "kill_grace", "job_history_duration", "prologue_timeout", "node_check_rate",
                "job_stat_rate"):
        value = config.get(key, 1)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value <= 0:
            raise ConfigError(f"{key}: must be a positive number of seconds")
    for key in ("site_path", "filter_user", "mail_user", "tmpdir", "node_spool"):
        if key in config and not (isinstance(config[key], str) and config[key] and "\0" not in config[key]):
            raise ConfigError(f"{key}: must be a non-empty string")
    if "tmpdir" in config and not config["tmpdir"].startswith("/"):
        raise ConfigError("tmpdir: must be an absolute path")
    for key in ("max_request", "resv_max_nodes", "resv_max_per_user"):
        value = config.get(key, 1)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0 or value > 1 << 40:
            raise ConfigError(f"{key}: must be a positive whole number")
    if "acl_resv_users" in config and not (isinstance(config["acl_resv_users"], list)
                                            and all(isinstance(u, str) and u for u in config["acl_resv_users"])):
        raise ConfigError('acl_resv_users: must be a list of user names, e.g. ["alice", "bob"]')
    if "resv_max_duration" in config:
        try:
            if isinstance(config["resv_max_duration"], bool) or not parse_duration(str(config["resv_max_duration"])) > 0:
                raise InvalidRequest("it is not positive")
        except InvalidRequest as e:
            raise ConfigError(f"resv_max_duration: {e}") from None
    if "default_walltime" in config:  # (PBS's server resources_default.walltime)
        try:
            if not parse_duration(config["default_walltime"]) > 0:
                raise InvalidRequest("it is not positive")
        except InvalidRequest as e:
            raise ConfigError(f"default_walltime: {e}") from None
    if not isinstance(config.get("node_log", False), (bool, str)) or config.get("node_log") == "":
        raise ConfigError("node_log: must be true, false or a directory")
    keep = config.get("keep_completed", 300)
    if not isinstance(keep, (int, float)) or isinstance(keep, bool) or keep < 0 or not math.isfinite(keep):
        raise ConfigError("keep_completed: must be a non-negative number of seconds")
    server = config.get("server_name", socket.gethostname().split(".")[0])
    if not isinstance(server, str) or not server or any(c.isspace() for c in server):
        raise ConfigError("server_name: must be a name without spaces")
    if not isinstance(config.get("multi_user", False), bool):
        raise ConfigError("multi_user: must be true or false")
    site = Site(home, config, server, "torque" if flavor == "cobalt" else flavor, _names(config, "operators"),
                _names(config, "managers"), float(keep), config.get("multi_user", False), _names(config, "acl_roots"),
                _names(config, "deadline_users"), (text, changes), cobalt=flavor == "cobalt")
    site._built = site.scheduler()  # check the rest now (one line naming the key), and keep it
    return site


def init_site(home: str | os.PathLike | None = None, nodes: int = 4, cores: int | None = None,
              force: bool = False, managers: list[str] | None = None, multi_user: bool = False) -> Path:
    """Write a working test-rig configuration: `nodes` nodes on this host.  `multi_user`:
    a site whose server (root) is the only door, in a directory only it may read."""
    home = Path(home) if home is not None else default_home()
    path = home / CONFIG
    if path.exists() and not force:
        raise ConfigError(f"{path}: already exists (use --force to replace it)")
    cores = cores or os.cpu_count() or 1
    names = ", ".join(f'"{m}"' for m in (managers or [_whoami()]))
    text = f"""\
# hpcsched site configuration (written by 'hpcsched init'); see man 5 hpcsched.toml
server_name = "{socket.gethostname().split('.')[0] or 'localhost'}"
flavor = "torque"
backfill = "easy"
default_queue = "batch"
managers = [{names}]
operators = []
keep_completed = 300
{"multi_user = true" if multi_user else ""}

[priority]
policy = "fifo"

# a test rig: every node is this host
[[nodes]]
names = "node[01-{nodes:02d}]"
cores = {cores}

[queues.batch]
max_walltime = "24:00:00"
"""
    build(loads(text), extra_keys=SITE_KEYS)  # what we write must load
    home.mkdir(parents=True, exist_ok=True)
    if multi_user:
        os.chmod(home, 0o711)  # (the server's lock_down keeps it so: server/privilege.py)
        old = os.umask(0o077)
    try:
        write_atomic(path, text)
    finally:
        if multi_user:
            os.umask(old)
    return path


def check_named_user(environ) -> None:
    """$HPCSCHED_USER, if set, must be a user name: it goes into owner@host, accounting's
    key=value records and qstat's columns (ConfigError if not)."""
    user = environ.get("HPCSCHED_USER")
    if user and not _USER_NAME.fullmatch(user):
        raise ConfigError(f"HPCSCHED_USER: {user!r} is not a user name (letters, digits, '.', '_', '-')")


def _whoami() -> str:
    """The calling user: the caller the server's door named (request.py), else
    $HPCSCHED_USER on a test rig, else the real user."""
    caller = current().caller
    if caller is not None:
        return caller
    if os.environ.get("HPCSCHED_USER"):
        return os.environ["HPCSCHED_USER"]
    return user_name(os.getuid())


whoami = _whoami


def user_name(uid: int) -> str:
    """The login name of `uid` (its number when the password database has none)."""
    import pwd
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def notify(home: str | os.PathLike) -> None:
    """Wake the server (if one runs): best effort, never an error for the caller."""
    path = str(Path(home) / SOCKET)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            s.setblocking(False)
            s.sendto(b"!", path)
    except OSError:
        pass
