"""What a command runs for: who asked, what their client sent, and what the server that
runs it allows, as one object.

A command run in its caller's own process runs for `Request()` (this process's user, its
own files, every job at once).  A serving server runs each forwarded command inside
`serving(Request(...))`, and the front door a command no server answered inside
`serving(Request(serverless=True))`; a command reads `current()`.  The request lives in a
context variable for the command's run alone and is restored whatever the command does
(as decimal's `localcontext`), so no module keeps a caller in a global that a later
command could inherit.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass


@dataclass
class Request:
    #: the user the kernel named at the server's door; None: this process's own user (or
    #: $HPCSCHED_USER on a test rig), see site.whoami
    caller: str | None = None
    #: qsub's script as its client read it, with the caller's rights (the server opens no
    #: path for a user)
    script: bytes | None = None
    #: qterm, inside a serving server: stop it (None: no server runs this command)
    stop: Callable[[], object] | None = None
    #: the most jobs the command acts on before the server takes a step (None: every one)
    slice: int | None = None
    #: where a sliced command runs on from: read when it starts, set when it stops at
    #: `slice` jobs (qctl.act); None: from the start / it finished
    resume: tuple[int, int] | None = None
    #: run here because no server answered: a job waits until one runs
    serverless: bool = False


_CURRENT: ContextVar[Request | None] = ContextVar("hpcsched_request", default=None)


def current() -> Request:
    """The request the running command serves (a fresh `Request()` outside any)."""
    return _CURRENT.get() or Request()


@contextmanager
def serving(request: Request) -> Iterator[Request]:
    """Run the block for `request`; the request before it again afterwards."""
    token = _CURRENT.set(request)
    try:
        yield request
    finally:
        _CURRENT.reset(token)
