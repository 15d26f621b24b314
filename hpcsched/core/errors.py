"""Errors the core raises: each carries a one-line message meant for a person."""


class SchedulerError(Exception):
    """Base of every error hpcsched raises on purpose."""


class ConfigError(SchedulerError):
    """A site configuration value is missing or wrong; the message names the key."""


class Rejected(SchedulerError):
    """A submission or change that no queue or limit accepts; the message says why."""


class Unplaceable(Rejected):
    """A request the machine has the nodes for, that no shape its placement allows holds
    (a cuboid of routers, a contiguous run): never runs there."""


class BadDependency(Rejected):
    """A dependency on a job that does not exist, or one that can never be met."""


class UnknownJob(SchedulerError):
    """A job id the scheduler does not know."""

    def __init__(self, job_id):
        super().__init__(f"Unknown Job Id {job_id}")
        self.job_id = job_id


class InvalidState(SchedulerError):
    """An operation or state change that the job's current state does not allow."""


class InvalidRequest(SchedulerError):
    """A malformed resource request, node list or time value."""
