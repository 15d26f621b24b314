"""Queues and the router: where a job goes, and whether its queue lets it run now.

A routing queue sends a job to the first of its destinations whose limits accept it (as
PBS route queues do), which is how ALCF's default queue splits work into prod-capability,
prod-short and prod-long, and how CC-IN2P3 picks a queue from a job's requirements.
Every refusal comes back in words.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields

from .errors import ConfigError, Rejected
from .jobs import Job
from .timefmt import hms, parse_duration


@dataclass
class Queue:
    name: str
    route_to: tuple[str, ...] = ()  # non-empty: a routing queue
    min_walltime: float | None = None
    max_walltime: float | None = None
    default_walltime: float | None = None  # given a job that asks for none (PBS's resources_default)
    min_nodes: int | None = None
    max_nodes: int | None = None
    min_fraction: float | None = None  # job size as a share of the machine's nodes
    max_fraction: float | None = None
    max_running_fraction: float | None = None  # share of nodes this queue's jobs may hold
    min_cores: int | None = None  # processors a job asks for (CC-IN2P3: 2 and up go to mc_*)
    max_cores: int | None = None
    max_mem_per_core: int | None = None  # MB a job asks for per processor (Grid Engine's per slot)
    max_cput: float | None = None  # CPU time a job asks for (-l cput)
    max_disk: int | None = None  # MB of scratch disk a job asks for (-l file)
    max_slots: int | None = None  # processors this queue's running jobs may hold together
    max_running: int | None = None
    max_running_per_user: int | None = None
    max_running_nodes: int | None = None  # nodes this queue's running jobs may hold together (Cobalt's totalnodes)
    max_running_nodes_per_user: int | None = None  # ... and a user's (Cobalt's maxusernodes)
    max_queued: int | None = None
    max_queued_per_user: int | None = None
    acl_users: frozenset[str] | None = None
    acl_groups: frozenset[str] | None = None
    enabled: bool = True  # accepts submissions
    started: bool = True  # its jobs may start
    draining: bool = False  # accepts no new jobs, runs those it has (Cobalt's "draining")
    priority: int = 0
    nodes: tuple[str, ...] = ()  # bound to these nodes (blocks on a Blue Gene) only; () anywhere

    @property
    def routing(self) -> bool:
        return bool(self.route_to)

    @property
    def capability(self) -> bool:
        """A queue for capability jobs: one with a lower bound on a job's size, as a share of
        the machine (min_fraction) or in nodes (min_nodes: Mira's prod-capability, 4,097 up)."""
        return self.min_fraction is not None or self.min_nodes is not None

    @property
    def gates(self) -> bool:
        """Can it hold a job back from starting (stopped, or a limit on its running jobs)?"""
        return not self.started or any(v is not None for v in (
            self.max_running, self.max_running_per_user, self.max_running_fraction, self.max_slots,
            self.max_running_nodes, self.max_running_nodes_per_user))

    def refuse(self, job: Job, size: int, machine: int, queued: int, queued_by_user: int) -> str | None:
        """Why this queue will not take `job` (occupying `size` nodes), or None."""
        n = self.name
        if not self.enabled:
            return f"queue {n} is not enabled"
        if self.draining:
            return f"queue {n} is draining"
        if self.acl_users is not None and job.owner not in self.acl_users:
            return f"user {job.owner} is not allowed in queue {n}"
        if self.acl_groups is not None and job.group not in self.acl_groups:
            return f"group {job.group or '(none)'} is not allowed in queue {n}"
        if self.min_walltime is not None and job.walltime < self.min_walltime:
            return f"walltime {hms(job.walltime)} below queue {n} min_walltime {hms(self.min_walltime)}"
        if self.max_walltime is not None and job.walltime > self.max_walltime:
            return f"walltime {hms(job.walltime)} exceeds queue {n} max_walltime {hms(self.max_walltime)}"
        if self.min_nodes is not None and size < self.min_nodes:
            return f"{size} nodes below queue {n} min_nodes {self.min_nodes}"
        if self.max_nodes is not None and size > self.max_nodes:
            return f"{size} nodes exceed queue {n} max_nodes {self.max_nodes}"
        if self.min_fraction is not None and size < self.min_fraction * machine:
            return f"{size} nodes below queue {n} min_fraction {self.min_fraction:g} of {machine} nodes"
        if self.max_fraction is not None and size > self.max_fraction * machine:
            return f"{size} nodes exceed queue {n} max_fraction {self.max_fraction:g} of {machine} nodes"
        if self.max_running_fraction is not None and size > self.max_running_fraction * machine:
            return (f"{size} nodes exceed queue {n} max_running_fraction "
                    f"{self.max_running_fraction:g} of {machine} nodes")
        procs = job.request.processors
        if self.min_cores is not None and procs < self.min_cores:
            return f"{procs} processors below queue {n} min_cores {self.min_cores}"
        if self.max_cores is not None and procs > self.max_cores:
            return f"{procs} processors exceed queue {n} max_cores {self.max_cores}"
        if self.max_slots is not None and procs > self.max_slots:
            return f"{procs} processors exceed queue {n} max_slots {self.max_slots}"
        if self.max_mem_per_core is not None:
            req = job.request
            per = (req.mem if req.cores else req.mem * req.nodes) / procs
            if per > self.max_mem_per_core:
                return f"{per:g} MB per processor exceeds queue {n} max_mem_per_core {self.max_mem_per_core}"
        if self.max_cput is not None and job.cput > self.max_cput:
            return f"cput {hms(job.cput)} exceeds queue {n} max_cput {hms(self.max_cput)}"
        if self.max_disk is not None and job.disk > self.max_disk:
            return f"{job.disk} MB of disk exceeds queue {n} max_disk {self.max_disk}"
        for most, what in ((self.max_running_nodes, "max_running_nodes"),
                           (self.max_running_nodes_per_user, "max_running_nodes_per_user")):
            if most is not None and size > most:
                return f"{size} nodes exceed queue {n} {what} {most}"
        if self.max_queued is not None and queued >= self.max_queued:
            return f"queue {n} already holds its max_queued {self.max_queued} jobs"
        if self.max_queued_per_user is not None and queued_by_user >= self.max_queued_per_user:
            return f"user {job.owner} already has max_queued_per_user {self.max_queued_per_user} jobs in queue {n}"
        return None

    def hold_back(self, job: Job, size: int, machine: int, running: int, running_by_user: int,
                  running_nodes: int, running_slots: int = 0, running_nodes_by_user: int = 0) -> str | None:
        """Why this queue's limits keep `job` from starting now, or None."""
        n = self.name
        if not self.started:
            return f"queue {n} is stopped"
        if self.max_running is not None and running >= self.max_running:
            return f"queue {n} runs its max_running {self.max_running} jobs"
        if self.max_running_per_user is not None and running_by_user >= self.max_running_per_user:
            return f"user {job.owner} runs max_running_per_user {self.max_running_per_user} jobs in queue {n}"
        if self.max_running_fraction is not None and \
                running_nodes + size > self.max_running_fraction * machine:
            return (f"queue {n} would exceed max_running_fraction {self.max_running_fraction:g} "
                    f"({running_nodes} of {int(self.max_running_fraction * machine)} nodes in use)")
        if self.max_running_nodes is not None and running_nodes + size > self.max_running_nodes:
            return f"queue {n} would exceed max_running_nodes {self.max_running_nodes} ({running_nodes} in use)"
        if self.max_running_nodes_per_user is not None and \
                running_nodes_by_user + size > self.max_running_nodes_per_user:
            return (f"user {job.owner} would exceed max_running_nodes_per_user {self.max_running_nodes_per_user} "
                    f"in queue {n} ({running_nodes_by_user} in use)")
        if self.max_slots is not None and running_slots + job.request.processors > self.max_slots:
            return f"queue {n} would exceed max_slots {self.max_slots} ({running_slots} processors in use)"
        return None

    @classmethod
    def from_config(cls, name: str, d: dict) -> "Queue":
        known = {f.name for f in fields(cls)} - {"name"}
        for key in d:
            if key not in known:
                raise ConfigError(f"queues.{name}.{key}: unknown key")
        kw = {}
        for f in fields(cls):
            if f.name == "name" or f.name not in d:
                continue
            v, where = d[f.name], f"queues.{name}.{f.name}"
            if f.name == "route_to":
                if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                    raise ConfigError(f"{where}: must be a list of queue names")
                v = tuple(v)
            elif f.name == "nodes":
                if not isinstance(v, list) or not v or not all(isinstance(x, str) and x for x in v):
                    raise ConfigError(f"{where}: must be a list of node (or block) names")
                v = tuple(v)
            elif f.name in ("acl_users", "acl_groups"):
                if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                    raise ConfigError(f"{where}: must be a list of names")
                v = frozenset(v)
            elif f.name in ("enabled", "started", "draining"):
                if not isinstance(v, bool):
                    raise ConfigError(f"{where}: must be true or false")
            elif f.name.endswith("walltime") or f.name == "max_cput":
                try:
                    v = parse_duration(v)
                except Exception as e:
                    raise ConfigError(f"{where}: {e}") from None
            elif f.name.endswith("fraction"):
                if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 <= v <= 1:
                    raise ConfigError(f"{where}: must be a number from 0 to 1")
                v = float(v)
            else:
                if not isinstance(v, int) or isinstance(v, bool) or (v < 0 and f.name != "priority"):
                    raise ConfigError(f"{where}: must be a non-negative integer")
            kw[f.name] = v
        return cls(name=name, **kw)



@dataclass
class Router:
    """The site's queues and the default queue; routes and validates submissions."""

    queues: dict[str, Queue] = field(default_factory=dict)
    default: str = ""

    def __post_init__(self):
        for q in self.queues.values():
            for dest in q.route_to:
                if dest not in self.queues:
                    raise ConfigError(f"queues.{q.name}.route_to: unknown queue {dest!r}")
                if self.queues[dest].routing:
                    raise ConfigError(f"queues.{q.name}.route_to: {dest!r} is itself a routing queue")
        if self.default and self.default not in self.queues:
            raise ConfigError(f"default_queue: unknown queue {self.default!r}")

    def route(self, job: Job, size: int, machine: int, queued: dict[str, int],
              queued_by_user: dict[tuple[str, str], int]) -> Queue:
        """The execution queue `job` goes to; raises Rejected with every reason if none."""
        name = job.queue or self.default
        if not name:
            raise Rejected("no queue given and no default queue")
        q = self.queues.get(name)
        if q is None:
            raise Rejected(f"Unknown queue {name}")
        if not q.routing:
            why = q.refuse(job, size, machine, queued.get(q.name, 0), queued_by_user.get((q.name, job.owner), 0))
            if why:
                raise Rejected(why)
            return q
        if not q.enabled:
            raise Rejected(f"queue {q.name} is not enabled")
        reasons = []
        for dest in q.route_to:
            d = self.queues[dest]
            why = d.refuse(job, size, machine, queued.get(dest, 0), queued_by_user.get((dest, job.owner), 0))
            if why is None:
                return d
            reasons.append(why)
        raise Rejected(f"no destination of queue {q.name} accepts the job: " + "; ".join(reasons))
