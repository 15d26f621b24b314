"""The PBS-style commands' front door: a running server answers them, else they run here.

Like Torque's qsub talking to pbs_server, a command first offers itself to the site's
server on `$HPCSCHED_HOME/commands.sock`: the server has the state loaded and the library
imported, so it answers in a few milliseconds.  With no server (or a stale socket) the
command runs in this process against the store, exactly as the server would run it.

This module is the latency floor of every command, so its client side imports nothing
beyond the interpreter's start-up set (not even `os`: `posix` is built in): the request
is NUL-separated bytes (argv and environment strings cannot hold NUL on Unix) rather than
JSON, and the socket is the C `_socket` (the `socket` module's enums alone cost more than
a whole forwarded qsub).

    request:  b"hpcsched1" NUL prog NUL cwd NUL n NUL argv... NUL m NUL env... NUL flag NUL data
    reply:    status NUL len(stdout) NUL stdout stderr

(The client's side, talking to the server, is client.py, which the commands that ask the
server from inside import; this module dispatches to them.  The server's side, decoding a
request and running it, is forwarded.py.)

`flag` says what `data` is: 0 nothing, 1 the standard input, 2 the script file qsub names,
read by the client with the caller's own rights (the server never opens a user's path).

Trust runs both ways.  The server learns who calls from the kernel (SO_PEERCRED), never
from the request; the client talks only to a server running as the site directory's
owner (or root), so a socket planted by another user gets nothing.  On a site the caller
does not own (a multi-user site), a command with no server to answer it fails: clients
never touch the store.
"""
import posix
import sys

from ..store.layout import getenv, home
from .client import (CLIENT_TIMEOUT, COBALT_HEAD, MAGIC, NOTHING, SCRIPT, SOCKET, STDIN, Impostor,  # noqa: F401
                     _qsub_options, ask, blocks, encode_request, flavor, forward, owns_site, query, server_answers)

#: command name -> "module:NAME" of its Command (common.py), run in this process
COMMANDS = {name: f"{module}:{name.upper()}" for module, names in (
    ("qsub", ["qsub"]), ("qstat", ["qstat"]),
    ("qctl", ["qalter", "qdel", "qhold", "qmove", "qmsg", "qrerun", "qrls", "qrun", "qselect", "qsig"]),
    ("maui", ["checkjob", "checknode", "mdiag", "releaseres", "setres", "showbf", "showq", "showres", "showstart"]),
    ("rsub", ["pbs_rsub", "pbs_rstat", "pbs_ralter", "pbs_rdel"]),
    ("psc", ["pbsyod", "shownids"]), ("pbsdsh", ["pbsdsh", "pbs_tmrsh"]), ("partlist", ["partlist"]), ("pbsnodes", ["pbsnodes"]), ("qmgr", ["qmgr", "qstart", "qstop", "qenable", "qdisable"]),
    ("tracejob", ["tracejob"]), ("schedctl", ["schedctl", "qterm"]), ("cobalt", ["cqwait"]), ("cqadm", ["cqadm"]),
    ("gold", ["mybalance", "gbalance", "gstatement", "gdeposit", "gchalloc", "gcharge", "grefund"]))
    for name in names}
#: pbsyod, pbsdsh and pbs_tmrsh run programs as the caller's children, inside the job, and cqwait waits
#: in the caller's process: never forwarded
LOCAL_ONLY = frozenset({"pbsyod", "pbsdsh", "pbs_tmrsh", "cqwait"})
#: the commands a `cobalt` site answers in Cobalt's form (cobalt.py); the rest keep PBS's
COBALT = frozenset({"qsub", "qstat", "qdel", "qhold", "qrls", "qalter", "qmove"})

def _runs_here(prog: str, argv: list[str]) -> bool:
    """pbsyod, `qsub -I` and `qsub -W block=true` need the caller's own process (its job,
    its terminal, its wait)."""
    if prog in LOCAL_ONLY:
        return True
    opts = _qsub_options(argv)[0] if prog == "qsub" else ()
    return ("I", "") in opts or blocks(opts)


def run_here(prog: str, argv: list[str] | None = None) -> int:
    """Run the command in this process (argv None: the real command line)."""
    from importlib import import_module
    module, name = COMMANDS[prog].split(":")
    if prog in COBALT and flavor() == "cobalt":  # (not load_site: the command's own call builds the site)
        module = "cobalt"
    return getattr(import_module(f"hpcsched.pbs.{module}"), name)(argv)


def _distrust_environment(prog: str) -> None:
    """On a multi-user site $HPCSCHED_USER names nobody: the command runs for the real user."""
    import os

    from ..core.errors import ConfigError
    from ..store import site
    try:
        multi = site.load_site().multi_user
    except ConfigError:
        return
    if multi:
        del os.environ["HPCSCHED_USER"]
        sys.stderr.write(f"{prog}: HPCSCHED_USER is ignored on a multi-user site (you are {site.whoami()})\n")


def main(prog: str, *, exit_when_answered: bool = False) -> int:
    """A command as the user runs it: answered by the server if one runs, else here.
    `exit_when_answered`: a command the server answered ends this process at once (the
    entry points' choice, see `command`)."""
    argv = sys.argv[1:]
    here = _runs_here(prog, argv)
    if not here:
        status = forward(prog, argv)
        if status is not None:
            if exit_when_answered:
                posix._exit(status)
            return status
    if not owns_site():  # someone else's site: the server is the only door
        if not here:
            sys.stderr.write(f"{prog}: cannot connect to the hpcsched server at {home()}/{SOCKET} "
                             "(it is not running); on a multi-user site only the server reads the store\n")
            return 1
        # (qsub -I and pbsyod ask the server what they need, and run the session or the
        # program here)
    elif getenv("HPCSCHED_USER"):
        _distrust_environment(prog)
    if here:
        return run_here(prog)
    from ..store.request import Request, serving
    from .common import NO_SERVER
    with serving(Request(serverless=True)):  # (no server answered: a job waits until one runs)
        status = run_here(prog)
    if prog == "qsub" and status == 0:
        sys.stderr.write(f"qsub: {NO_SERVER}\n")
    return status


def command(prog: str) -> int:
    """The command as a program (bin/pbs-command and the console scripts).  A forwarded
    command did nothing but talk to the server and has written out its answer (forward
    flushes it), so it ends with `_exit`, skipping the interpreter's finalisation: a tenth
    of the command's cost.  A command run here ends normally."""
    return main(prog, exit_when_answered=True)


# console-script entry points, one per command: hpcsched.pbs.front:qsub, ...
for _prog in COMMANDS:
    globals()[_prog] = lambda _p=_prog: command(_p)
