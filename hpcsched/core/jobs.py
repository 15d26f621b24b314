"""Jobs, their resource requests and allocations, and the job state machine.

A job's state follows an explicit whitelist (`TRANSITIONS`); every state change goes
through `Job.move_to`, which refuses anything else.  Which *waiting* state a job is in is
not chosen by callers: `Job.settle` derives it from the job's holds, dependencies and
start-after time, in that order of precedence (as PBS shows a held job as held even when it
also waits on a dependency).
"""
from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields, replace
from enum import Enum
from typing import Callable

from .errors import InvalidRequest, InvalidState


class State(str, Enum):
    QUEUED = "queued"  # runnable: the only state that accrues eligible time
    HELD = "held"  # at least one user/operator/system hold
    WAITING = "waiting"  # its start-after time (qsub -a) is still ahead
    DEP_HOLD = "dep_hold"  # a dependency is not yet satisfied
    DEP_FAIL = "dep_fail"  # a dependency can never be satisfied (Cobalt's dep_fail)
    RUNNING = "running"
    EXITING = "exiting"  # told to stop (deleted or killed), or its epilogue runs; its nodes are still in use
    COMPLETED = "completed"
    DELETED = "deleted"  # removed before it ever ran


# The package names states by these constants, never as State.QUEUED: in Python 3.11 any
# attribute read on an Enum class goes through the metaclass's __getattr__ hook, an order
# of magnitude slower than a module constant, several times for every job that starts and ends.
QUEUED, HELD, WAITING, DEP_HOLD, DEP_FAIL, RUNNING, EXITING, COMPLETED, DELETED = (
    State.QUEUED, State.HELD, State.WAITING, State.DEP_HOLD, State.DEP_FAIL, State.RUNNING, State.EXITING,
    State.COMPLETED, State.DELETED)
PENDING = frozenset({QUEUED, HELD, WAITING, DEP_HOLD, DEP_FAIL})
ACTIVE = frozenset({RUNNING, EXITING})
FINISHED = frozenset({COMPLETED, DELETED})

#: Every allowed state change, each with the event that causes it; anything else raises
#: InvalidState.  A waiting job's state is derived (`pending_state`): holds first, then a
#: failed dependency, then one still open, then a start-after time ahead, else QUEUED.
TRANSITIONS: dict[State, frozenset[State]] = {
    QUEUED: frozenset({
        HELD,  # qhold (user, operator or system hold)
        WAITING,  # qalter -a: a start-after time still ahead
        DEP_HOLD,  # qalter -W depend= on a job that has not ended
        DEP_FAIL,  # qalter -W depend= on a job that ended the wrong way
        RUNNING,  # a pass starts it (or an operator's qrun)
        DELETED,  # qdel
    }),
    HELD: frozenset({
        QUEUED,  # qrls of its last hold, nothing else to wait for
        WAITING,  # qrls, and its start-after time is still ahead
        DEP_HOLD,  # qrls, and a dependency is still open
        DEP_FAIL,  # qrls, and a dependency can never be met
        DELETED,  # qdel
    }),
    WAITING: frozenset({
        QUEUED,  # a pass at or after its start-after time
        HELD,  # qhold
        DEP_HOLD,  # qalter -W depend= on a job that has not ended
        DEP_FAIL,  # qalter -W depend= on a job that ended the wrong way
        DELETED,  # qdel
    }),
    DEP_HOLD: frozenset({
        QUEUED,  # its last open dependency is met
        HELD,  # qhold
        WAITING,  # its dependencies are met, its start-after time is still ahead
        DEP_FAIL,  # a parent ended the wrong way (afterok parent failed, say)
        DELETED,  # qdel
    }),
    DEP_FAIL: frozenset({
        QUEUED,  # qalter -W depend= replaces the failed dependency with met ones
        HELD,  # qhold
        WAITING,  # qalter -W depend=, and its start-after time is still ahead
        DEP_HOLD,  # qalter -W depend= on a job that has not ended
        DELETED,  # qdel
    }),
    RUNNING: frozenset({
        EXITING,  # qdel told it to stop, or its process ended and its epilogue runs: nodes still in use
        COMPLETED,  # its process ended (job_ended)
        QUEUED,  # requeue: its launch failed, or it vanished and is rerunnable
    }),
    EXITING: frozenset({
        COMPLETED,  # its process ended after the signal, or its epilogue ended (job_ended)
    }),
    COMPLETED: frozenset(),  # final (a retention policy forgets it)
    DELETED: frozenset(),  # final
}


class Hold(str, Enum):
    USER = "u"
    OPERATOR = "o"
    SYSTEM = "s"


class DepType(str, Enum):
    AFTEROK = "afterok"  # parent ended with exit status 0
    AFTERNOTOK = "afternotok"  # parent ended non-zero, was killed, or was deleted
    AFTERANY = "afterany"  # parent ended in any way
    AFTERSTART = "afterstart"  # parent started (PBS's plain `after`)


@dataclass(frozen=True)
class Request:
    """What a job asks for.

    Either `nodes` chunks of `ppn` cores each, or (when `cores` > 0) a total core count
    packed onto as few shared nodes as possible.  `mem` is MB per chunk (per node); on
    shared nodes it is converted to cores at the node's MB-per-core rate.  `features` are
    node properties every chosen node must have.  `within` names the only nodes (blocks,
    midplanes, nids) it may use: PSC's nidmask, a queue bound to part of the machine.
    `gpus` are GPUs per chunk: only nodes with that many may serve it, and on shared
    nodes they are bought as cores, as memory is (so no node's GPUs are given twice).
    `exclusive`: each chunk's node is the job's alone (OpenPBS's place=excl, Torque's -n):
    on shared nodes it takes every core of each node it gets.
    """

    nodes: int = 1
    ppn: int = 1
    cores: int = 0
    mem: int = 0
    features: tuple[str, ...] = ()
    within: tuple[str, ...] = ()
    gpus: int = 0
    exclusive: bool = False

    def __post_init__(self):
        for name in ("nodes", "ppn", "cores", "mem", "gpus"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise InvalidRequest(f"request {name} must be a non-negative integer, not {value!r}")
        if self.cores == 0 and (self.nodes < 1 or self.ppn < 1):
            raise InvalidRequest("request needs nodes >= 1 and ppn >= 1, or cores >= 1")
        if self.gpus and self.cores:
            raise InvalidRequest("request gpus are per chunk (nodes x ppn), not with a core count")
        if not isinstance(self.exclusive, bool) or (self.exclusive and self.cores):
            raise InvalidRequest("request exclusive is true or false, and for chunks (nodes x ppn), "
                                 "not a core count")
        object.__setattr__(self, "features", tuple(sorted(set(self.features))))
        object.__setattr__(self, "within", tuple(self.within))

    @property
    def processors(self) -> int:
        return self.cores if self.cores else self.nodes * self.ppn

    def to_dict(self) -> dict:
        return {name: (list(v) if isinstance(v := getattr(self, name), tuple) else v)
                for name, default in _REQUEST_DEFAULTS if getattr(self, name) != default}

    @classmethod
    def from_dict(cls, d: dict) -> "Request":
        if not d.keys() <= _REQUEST_FIELDS:
            raise InvalidRequest(f"unknown request field {sorted(d.keys() - _REQUEST_FIELDS)[0]!r}")
        # requests repeat across a store's jobs, and are immutable: share one object each
        key = (d.get("nodes", 1), d.get("ppn", 1), d.get("cores", 0), d.get("mem", 0),
               tuple(d.get("features", ())), tuple(d.get("within", ())), d.get("gpus", 0), d.get("exclusive", False))
        typed = (key, tuple(map(type, key)))  # (True == 1 and 2.0 == 2: the cache must not accept what cls refuses)
        req = _REQUESTS.get(typed)
        if req is None:
            req = _REQUESTS[typed] = cls(*key)
        return req


class Allocation:
    """A concrete placement: the units taken, and per node the cores the job uses.

    `nodes` may be given as a function, called when the names are first read: a pass
    remakes its reservations every time, and only the allocations of jobs that start, or
    that someone looks at, need their (possibly thousands of) node names."""

    __slots__ = ("units", "_nodes", "cores")

    def __init__(self, units: int, nodes: tuple[str, ...] | Callable[[], tuple[str, ...]],
                 cores: tuple[tuple[int, ...], ...]):
        self.units, self._nodes, self.cores = units, nodes, cores

    @property
    def nodes(self) -> tuple[str, ...]:
        if callable(self._nodes):
            self._nodes = self._nodes()
        return self._nodes

    # The same placement is the same nodes and cores: `units` are only a machine's numbering
    # of them (0 in a job read from a dict, until a scheduler places it on its machine).
    def __eq__(self, other) -> bool:
        return isinstance(other, Allocation) and self.nodes == other.nodes and self.cores == other.cores

    def __hash__(self) -> int:
        return hash((self.nodes, self.cores))

    def __repr__(self) -> str:
        return f"Allocation(units={self.units:#x}, nodes={self.nodes!r}, cores={self.cores!r})"


@dataclass
class Dependency:
    """A wait on a parent job, or (`of` not 0) on a job array's subjobs (see depends.py)."""

    kind: DepType
    job_id: int  # the parent job, or the array's id
    met: bool | None = None  # None: not decided yet
    of: int = 0  # 0: the job `job_id`; N > 0: N subjobs of array `job_id`; -1: the whole array

    def resolve(self, exit_status: int | None, started: bool = True) -> None:
        """Record how the parent ended (exit_status None: deleted, `started` whether it ever ran)."""
        ok = exit_status == 0
        self.met = {DepType.AFTEROK: ok, DepType.AFTERNOTOK: not ok, DepType.AFTERANY: True,
                    DepType.AFTERSTART: started}[self.kind]


# A job array takes one job number N, as Torque's `N[]` does; its subjob N[i] has the id
# N * SUBJOB + i, above every number (numbers stay below 2**31), so the next job is N + 1.
SUBJOB = 1 << 32


def subjob_id(array: int, index: int) -> int:
    """The id of subjob `array[index]` (index below SUBJOB)."""
    return array * SUBJOB + index


def number(job_id: int) -> int:
    """The job number an id is shown under: a subjob's is its array's."""
    return job_id // SUBJOB if job_id >= SUBJOB else job_id


@dataclass
class Job:
    """One batch job.  Times are seconds on the caller's clock; the core never reads one."""

    id: int = 0
    name: str = "STDIN"
    owner: str = "nobody"
    group: str = ""
    account: str = ""
    queue: str = ""  # the execution queue the job is in
    submitted_queue: str = ""  # the queue it was submitted to (a routing queue, maybe)
    request: Request = field(default_factory=Request)
    walltime: float = 3600.0
    submit_time: float = 0.0
    start_after: float | None = None
    deadline: float | None = None  # Grid Engine's deadline initiation time (-W deadline): urgency grows as it nears
    holds: set[Hold] = field(default_factory=set)
    dependencies: list[Dependency] = field(default_factory=list)
    priority: int = 0  # the user's own priority (qsub -p)
    score: float = 0.0  # the priority policy's score
    initial_score: float | None = None  # a starting score a submit filter set (else the policy's)
    standing: str = ""  # its project's allocation standing when routed: "", "overburn", "exhausted"
    tier: int = 0  # ordered before the policy's key: < 0 a drain's series (front), 1 standby
    state: State = QUEUED
    exit_status: int | None = None
    start_time: float | None = None
    end_time: float | None = None
    allocation: Allocation | None = None  # where it runs (None while it waits)
    eligible_time: float = 0.0  # seconds spent QUEUED (runnable) so far
    eligible_since: float | None = None
    score_at_start: float | None = None
    run_count: int = 0
    cpu_time: float = 0.0  # CPU-seconds used, as the driver reports it at the end (0: unknown)
    suspended_at: float | None = None  # suspended since (its walltime stands still meanwhile)
    suspended_for: float = 0.0  # seconds of this run it was suspended before that
    consumes: dict = field(default_factory=dict)  # the site's consumables it uses: name -> amount
    cput: float = 0.0  # CPU time it asks for (s; 0: none given), which queues may limit
    disk: int = 0  # scratch disk it asks for (MB; 0: none given)
    array_id: int = 0  # a job array's subjobs share the array's id (0: not in an array)
    array_index: int = 0
    array_limit: int = 0  # at most this many of the array's subjobs run at once (0: no limit)
    reservation: str = ""  # the advance reservation it must run in (Moab's -l advres; "": none)
    comment: str = ""
    extra: dict = field(default_factory=dict)  # opaque to the core: the commands' attributes

    @property
    def nodes(self) -> tuple[str, ...]:
        """Allocated node names, one per chunk or node used (() while it waits)."""
        return self.allocation.nodes if self.allocation is not None else ()

    @property
    def cores(self) -> tuple[tuple[int, ...], ...]:
        """Allocated core indices, parallel to `nodes`."""
        return self.allocation.cores if self.allocation is not None else ()

    def suspended(self, now: float) -> float:
        """Seconds this run has been suspended up to `now`."""
        return self.suspended_for + (now - self.suspended_at if self.suspended_at is not None else 0.0)

    def planned_end(self, now: float) -> float:
        """When a running job is expected to end: its start and walltime, later by the time
        it has been suspended (a suspended job's end moves on with `now`)."""
        return self.start_time + self.walltime + self.suspended(now)

    # --- state machine -------------------------------------------------------------
    def move_to(self, new: State, now: float) -> None:
        """Change state if the whitelist allows it, keeping eligible time exact."""
        if new == self.state:
            return
        if new not in TRANSITIONS[self.state]:
            raise InvalidState(f"job {self.id}: cannot go from {self.state.value} to {new.value}")
        if self.state == QUEUED and self.eligible_since is not None:
            self.eligible_time += now - self.eligible_since
            self.eligible_since = None
        if new == QUEUED:
            self.eligible_since = now
        self.state = new

    def eligible(self, now: float) -> float:
        """Seconds this job has been runnable, up to `now` (held time excluded)."""
        if self.state == QUEUED and self.eligible_since is not None:
            return self.eligible_time + now - self.eligible_since
        return self.eligible_time

    def pending_state(self, now: float) -> State:
        """The waiting state this job's holds, dependencies and start time call for."""
        if self.holds:
            return HELD
        if self.dependencies:
            if any(d.met is False for d in self.dependencies):
                return DEP_FAIL
            if any(d.met is None for d in self.dependencies):
                return DEP_HOLD
        if self.start_after is not None and self.start_after > now:
            return WAITING
        return QUEUED

    def settle(self, now: float) -> None:
        """Move a pending job to the state its attributes call for."""
        if self.state in PENDING:
            self.move_to(self.pending_state(now), now)

    # --- JSON ------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """A plain dict of the fields that differ from their defaults (stores stay small)."""
        d = {}
        for name in _JOB_FIELDS:
            v = getattr(self, name)
            if name in _OMITTED and v == _OMITTED[name]:
                continue
            if name == "request":
                v = v.to_dict()
            elif name == "holds":
                v = sorted(h.value for h in v)
            elif name == "dependencies":
                v = [[dep.kind.value, dep.job_id, dep.met, *([dep.of] if dep.of else [])] for dep in v]
            elif name == "state":
                v = v.value
            elif name == "allocation":  # stored as node names and cores (units are the machine's)
                d["nodes"], d["cores"] = list(v.nodes), [list(c) for c in v.cores]
                continue
            d[name] = v
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Job":
        unknown = d.keys() - _JOB_FIELD_SET
        if unknown:
            raise InvalidRequest(f"unknown job field {sorted(unknown)[0]!r}")
        d = dict(d)
        if "request" in d:
            d["request"] = Request.from_dict(d["request"])
        if "holds" in d:
            d["holds"] = {Hold(h) for h in d["holds"]} if d["holds"] else set()
        if "dependencies" in d:
            d["dependencies"] = [Dependency(DepType(k), int(i), m, int(of[0]) if of else 0)
                                 for k, i, m, *of in d["dependencies"]]
        if "state" in d:
            d["state"] = _STATES[d["state"]]
        if "nodes" in d:  # units 0 until a scheduler places it on its machine (restore)
            d["allocation"] = Allocation(0, tuple(d.pop("nodes")), tuple(map(tuple, d.pop("cores", ()))))
        # The fields are checked and converted above, so they are set directly: the
        # generated __init__ called with **d costs about twice as much, and building jobs
        # is a third of a large store's load time.
        job = object.__new__(cls)
        job.__dict__.update(_JOB_DEFAULTS, holds=set(), dependencies=[], extra={}, consumes={})
        job.__dict__.update(d)
        return job

    def copy(self) -> "Job":
        return replace(self, holds=set(self.holds),
                       dependencies=[replace(x) for x in self.dependencies], extra=dict(self.extra),
                       consumes=dict(self.consumes))


_REQUEST_DEFAULTS = tuple((f.name, f.default) for f in fields(Request))
_REQUEST_FIELDS = frozenset(name for name, _ in _REQUEST_DEFAULTS)
_JOB_FIELDS = tuple(f.name for f in fields(Job))
_JOB_FIELD_SET = frozenset(_JOB_FIELDS) - {"allocation"} | {"nodes", "cores"}  # as stored
_REQUESTS: dict[tuple, Request] = {}
_STATES = {s.value: s for s in State}
_JOB_DEFAULTS = {f.name: f.default for f in fields(Job) if f.default is not MISSING}
_JOB_DEFAULTS["request"] = Request()
# fields to_dict leaves out while they hold their default (from_dict puts it back)
_OMITTED = {name: default for name, default in _JOB_DEFAULTS.items() if name not in ("id", "state", "request")}
_OMITTED.update(holds=set(), dependencies=[], extra={}, consumes={})
