"""The PBS-style commands' front door: a running server answers them, else they run here.

Like Torque's qsub talking to pbs_server, a command first offers itself to the site's
server on `$HPCSCHED_HOME/commands.sock`: the server has the state loaded and the library
imported, so it answers in a few milliseconds.  With no server (or a stale socket) the
command runs in this process against the store, exactly as the server would run it.

This module is the latency floor of every command, so it imports nothing beyond the
interpreter's start-up set: the request is NUL-separated bytes (argv and environment
strings cannot hold NUL on Unix) rather than JSON, and the socket is the C `_socket`
(the `socket` module's enums alone cost more than a whole forwarded qsub).

    request:  b"hpcsched1" NUL prog NUL cwd NUL n NUL argv... NUL m NUL env... NUL has-stdin NUL stdin
    reply:    status NUL len(stdout) NUL stdout stderr
"""
from __future__ import annotations

import os
import sys

from ..store.layout import home
from .errors import UsageError
from .options import QSUB, parse

#: command name -> "module:NAME" of its Command (common.py), run in this process
COMMANDS = {name: f"{module}:{name.upper()}" for module, names in (
    ("qsub", ["qsub"]), ("qstat", ["qstat"]),
    ("qctl", ["qalter", "qdel", "qhold", "qmove", "qrls", "qrun", "qselect", "qsig"]),
    ("maui", ["checkjob", "mdiag", "releaseres", "setres", "showbf", "showq", "showres"]),
    ("psc", ["pbsyod", "shownids"]), ("partlist", ["partlist"]), ("pbsnodes", ["pbsnodes"]), ("qmgr", ["qmgr"]),
    ("tracejob", ["tracejob"]), ("schedctl", ["schedctl"]),
    ("gold", ["mybalance", "gbalance", "gstatement", "gdeposit", "gchalloc", "gcharge", "grefund"]))
    for name in names}
#: pbsyod runs the site's launcher as the caller's child, inside the job: never forwarded
LOCAL_ONLY = frozenset({"pbsyod"})
SOCKET = "commands.sock"
CLIENT_TIMEOUT = 60.0  # seconds a command waits for the server (connect, send, answer)
MAGIC = b"hpcsched1"

def _qsub_options(argv: list[str]) -> tuple[list[tuple[str, str]], list[str]]:
    try:
        return parse(argv, QSUB, permute=False)
    except UsageError:
        return [], ["-"]  # the server reports the usage error


def _reads_stdin(prog: str, argv: list[str]) -> bool:
    """Only qsub without a script operand reads its standard input (the script)."""
    if prog != "qsub":
        return False
    opts, operands = _qsub_options(argv)
    return not operands and ("I", "") not in opts


def _runs_here(prog: str, argv: list[str]) -> bool:
    """pbsyod and `qsub -I` need the caller's own process (its job, its terminal)."""
    return prog in LOCAL_ONLY or prog == "qsub" and ("I", "") in _qsub_options(argv)[0]


def _connect():
    """A stream connected to the site's server, or None when no server listens."""
    import _socket
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    sock.settimeout(CLIENT_TIMEOUT)
    try:
        sock.connect(os.path.join(home(), SOCKET))
    except OSError:
        sock.close()
        return None
    return sock


def server_answers() -> bool:
    """Is a server listening on the command socket?  (It drops the empty request.)"""
    sock = _connect()
    if sock is None:
        return False
    sock.close()
    return True


def encode_request(prog: str, argv: list[str], cwd: str, env: dict[str, str], stdin: bytes | None) -> bytes:
    def b(s: str) -> bytes:
        return os.fsencode(s)
    fields = [MAGIC, b(prog), b(cwd), str(len(argv)).encode(), *map(b, argv),
              str(len(env)).encode(), *(b(f"{k}={v}") for k, v in env.items()),
              b"1" if stdin is not None else b"0"]
    return b"\0".join(fields) + b"\0" + (stdin or b"")


def decode_request(data: bytes) -> tuple[str, list[str], str, dict[str, str], bytes | None]:
    """(prog, argv, cwd, env, stdin) from a request; ValueError if it is not one."""
    magic, prog, cwd, rest = data.split(b"\0", 3)
    if magic != MAGIC:
        raise ValueError("not an hpcsched request")
    n, rest = rest.split(b"\0", 1)
    *argv, rest = rest.split(b"\0", int(n))
    m, rest = rest.split(b"\0", 1)
    *pairs, rest = rest.split(b"\0", int(m))
    flag, stdin = rest.split(b"\0", 1)
    env = dict(os.fsdecode(p).partition("=")[::2] for p in pairs)
    return (os.fsdecode(prog), [os.fsdecode(a) for a in argv], os.fsdecode(cwd), env,
            stdin if flag == b"1" else None)


def encode_reply(status: int, out: bytes, err: bytes) -> bytes:
    return b"%d\0%d\0" % (status, len(out)) + out + err


def forward(prog: str, argv: list[str]) -> int | None:
    """Have the site's server run the command; its exit status, or None if no server answers."""
    import _socket
    try:
        cwd = os.getcwd()
    except OSError:
        return None  # a directory gone under us: running here reports it
    sock = _connect()
    if sock is None:
        return None  # no server (or a stale socket): run here
    chunks = []
    try:
        stdin = sys.stdin.buffer.read() if _reads_stdin(prog, argv) and sys.stdin is not None else None
        sock.sendall(encode_request(prog, argv, cwd, dict(os.environ), stdin))
        sock.shutdown(_socket.SHUT_WR)
        while chunk := sock.recv(1 << 16):
            chunks.append(chunk)
    except TimeoutError:
        sys.stderr.write(f"{prog}: the hpcsched server did not answer within {CLIENT_TIMEOUT:g} s (busy or "
                         f"stopped); what the command did, if anything, shows in qstat\n")
        return 1
    except OSError:
        pass  # the server went away mid-request: said below
    finally:
        sock.close()
    try:
        status, size, body = b"".join(chunks).split(b"\0", 2)
        status, size = int(status), int(size)
    except ValueError:
        sys.stderr.write(f"{prog}: the hpcsched server dropped the request (see qstat for its effect)\n")
        return 1
    try:
        sys.stdout.buffer.write(body[:size])
        sys.stdout.flush()
        sys.stderr.buffer.write(body[size:])
        sys.stderr.flush()
    except BrokenPipeError:  # `qstat | head`: end quietly, as for any Unix tool
        os._exit(status)
    return status


def run_here(prog: str, argv: list[str] | None = None) -> int:
    """Run the command in this process (argv None: the real command line)."""
    from importlib import import_module
    module, name = COMMANDS[prog].split(":")
    return getattr(import_module(f"hpcsched.pbs.{module}"), name)(argv)


def run_for(request: bytes) -> bytes:
    """Run a forwarded command in this process (the server) as the client would have run
    it: its arguments, directory, environment and standard input; the reply to send back.
    The server is single-threaded, so swapping the process's context is safe; it is
    restored whatever the command does."""
    import io
    try:
        prog, argv, cwd, env, stdin = decode_request(request)
    except ValueError:
        return encode_reply(1, b"", b"hpcsched: malformed request to the server\n")
    if prog not in COMMANDS or _runs_here(prog, argv):
        return encode_reply(1, b"", f"hpcsched: {prog!r} is not a command the server runs\n".encode())
    saved_env, saved_io = dict(os.environ), (sys.stdin, sys.stdout, sys.stderr)
    here = os.open(".", os.O_RDONLY)
    out, err = io.StringIO(), io.StringIO()
    try:
        os.environ.clear()
        os.environ.update(env)
        sys.stdin = io.TextIOWrapper(io.BytesIO(stdin or b""), encoding="utf-8", errors="replace")
        sys.stdout, sys.stderr = out, err
        try:
            os.chdir(cwd)
            status = run_here(prog, argv)
        except OSError as e:
            err.write(f"{prog}: {cwd}: {e.strerror}\n")
            status = 1
        except Exception as e:  # a bug in one command must not take the server down
            err.write(f"{prog}: internal error: {e!r}\n")
            status = 1
    finally:
        os.fchdir(here)
        os.close(here)
        sys.stdin, sys.stdout, sys.stderr = saved_io
        os.environ.clear()
        os.environ.update(saved_env)
    return encode_reply(status, out.getvalue().encode(errors="surrogateescape"),
                        err.getvalue().encode(errors="surrogateescape"))


def main(prog: str) -> int:
    """A command as the user runs it: answered by the server if one runs, else here."""
    if not _runs_here(prog, sys.argv[1:]):
        status = forward(prog, sys.argv[1:])
        if status is not None:
            return status
    return run_here(prog)


# console-script entry points, one per command: hpcsched.pbs.front:qsub, ...
for _prog in COMMANDS:
    globals()[_prog] = lambda _p=_prog: main(_p)
