"""The commands' errors: one line for stderr and the exit status that goes with it.
(Imported by the front door's option parser, so it imports nothing.)"""

SYSTEM = 1
USAGE = 2


class CommandError(Exception):
    """One line for stderr and the exit status that goes with it."""

    def __init__(self, message: str, status: int = SYSTEM):
        super().__init__(message)
        self.status = status


class UsageError(CommandError):
    """A malformed option or value: the command prints its usage line after the message."""

    def __init__(self, message: str):
        super().__init__(message, USAGE)
