"""hpcsched: an embeddable batch-scheduling core, pure standard library.

    from hpcsched import Job, Request, build, default_config
    sched = build(default_config())
    sched.submit(Job(owner="alice", request=Request(nodes=2), walltime=600), now=0)
    plan = sched.iterate(now=0)

The names below are imported on first use (PEP 562), so a command such as qsub pays
only for the modules it needs, not for the whole library.
"""
__version__ = "0.1.0"

#: public name -> the module that defines it
_HOME = {
    "build": "config", "default_config": "config", "loads": "config", "parse_backfill": "config",
    "ConfigError": "core.errors", "InvalidRequest": "core.errors", "InvalidState": "core.errors", "Rejected": "core.errors",
    "SchedulerError": "core.errors", "UnknownJob": "core.errors",
    "Dependency": "core.jobs", "DepType": "core.jobs", "Hold": "core.jobs", "Job": "core.jobs", "Request": "core.jobs",
    "State": "core.jobs", "TRANSITIONS": "core.jobs",
    "ALL": "core.plan", "Plan": "core.plan", "Start": "core.plan",
    "Cobalt": "policies.cobalt", "Context": "core.policy", "Fifo": "core.policy", "Policy": "core.policy",
    "Simon": "policies.simon", "make_policy": "config",
    "Access": "core.reservations", "Reservation": "core.reservations",
    "Queue": "core.route", "Router": "core.route",
    "Scheduler": "core.scheduler", "Settings": "core.scheduler",
    "Allocation": "core.jobs", "Node": "core.topology", "NodePool": "machines.nodepool", "NodeState": "core.topology",
    "Topology": "core.topology",
    "Engine": "sim.engine", "Finished": "sim.engine",
    "simulate": "sim.simulate", "record": "sim.simulate", "assert_schedule": "sim.testing",
}

__all__ = sorted(_HOME)


def __getattr__(name: str):
    if name not in _HOME:
        raise AttributeError(f"module 'hpcsched' has no attribute {name!r}")
    from importlib import import_module
    value = getattr(import_module(f".{_HOME[name]}", __name__), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOME))
