"""hpcsched: an embeddable batch-scheduling core, pure standard library.

    from hpcsched import Job, Request, build, default_config
    sched = build(default_config())
    sched.submit(Job(owner="alice", request=Request(nodes=2), walltime=600), now=0)
    plan = sched.iterate(now=0)

The names below are imported on first use (PEP 562), so a command such as qsub pays
only for the modules it needs, not for the whole library.
"""
from importlib import import_module

__version__ = "0.1.0"

#: public name -> the module that defines it
_HOME = {
    "build": "config", "default_config": "config", "loads": "config", "parse_backfill": "config",
    "ConfigError": "errors", "InvalidRequest": "errors", "InvalidState": "errors", "Rejected": "errors",
    "SchedulerError": "errors", "UnknownJob": "errors",
    "Dependency": "jobs", "DepType": "jobs", "Hold": "jobs", "Job": "jobs", "Request": "jobs",
    "State": "jobs", "TRANSITIONS": "jobs",
    "ALL": "plan", "Plan": "plan", "Start": "plan",
    "Cobalt": "prioritise", "Context": "prioritise", "Fifo": "prioritise", "Policy": "prioritise",
    "Simon": "prioritise", "make_policy": "prioritise",
    "Access": "reservations", "Reservation": "reservations",
    "Queue": "route", "Router": "route",
    "Scheduler": "scheduler", "Settings": "scheduler",
    "Allocation": "topology", "Node": "topology", "NodePool": "topology", "NodeState": "topology",
    "Topology": "topology",
}

__all__ = sorted(_HOME)


def __getattr__(name: str):
    if name not in _HOME:
        raise AttributeError(f"module 'hpcsched' has no attribute {name!r}")
    value = getattr(import_module(f".{_HOME[name]}", __name__), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOME))
