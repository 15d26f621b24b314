"""hpcsched: an embeddable batch-scheduling core, pure standard library.

    from hpcsched import Job, Request, build, default_config
    sched = build(default_config())
    sched.submit(Job(owner="alice", request=Request(nodes=2), walltime=600), now=0)
    plan = sched.iterate(now=0)
"""
from .config import build, default_config, loads, parse_backfill
from .errors import (ConfigError, InvalidRequest, InvalidState, Rejected, SchedulerError,
                     UnknownJob)
from .jobs import Dependency, DepType, Hold, Job, Request, State, TRANSITIONS
from .plan import ALL, Plan, Start
from .prioritise import Cobalt, Context, Fifo, Policy, Simon, make_policy
from .reservations import Access, Reservation
from .route import Queue, Router
from .scheduler import Scheduler, Settings
from .topology import Allocation, Node, NodePool, NodeState, Topology

__version__ = "0.1.0"

__all__ = [
    "ALL", "Access", "Allocation", "Cobalt", "ConfigError", "Context", "Dependency", "DepType", "Fifo",
    "Hold", "InvalidRequest", "InvalidState", "Job", "Node", "NodePool", "NodeState", "Plan", "Policy",
    "Queue", "Rejected", "Request", "Reservation", "Router", "Scheduler", "SchedulerError", "Settings",
    "Simon", "Start", "State", "TRANSITIONS", "Topology", "UnknownJob", "build", "default_config", "loads",
    "make_policy", "parse_backfill",
]
