"""The server's side of the front door (front.py): a forwarded command, run in the server's
process as its client would have run it, for the caller the kernel named."""
import io
import os
import sys
import time

from ..core.errors import ConfigError
from ..store import site
from ..store.request import Request, serving
from .front import COMMANDS, MAGIC, NOTHING, SCRIPT, STDIN, _runs_here, run_here


def decode_request(data: bytes) -> tuple[str, list[str], str, dict[str, str], bytes | None, bytes]:
    """(prog, argv, cwd, env, data, flag) from a request; ValueError if it is not one."""
    magic, prog, cwd, rest = data.split(b"\0", 3)
    if magic != MAGIC:
        raise ValueError("not an hpcsched request")
    n, rest = rest.split(b"\0", 1)
    *argv, rest = rest.split(b"\0", int(n))
    m, rest = rest.split(b"\0", 1)
    *pairs, rest = rest.split(b"\0", int(m))
    flag, stdin = rest.split(b"\0", 1)
    if flag not in (NOTHING, STDIN, SCRIPT):
        raise ValueError("not an hpcsched request")
    env = dict(os.fsdecode(p).partition("=")[::2] for p in pairs)
    return (os.fsdecode(prog), [os.fsdecode(a) for a in argv], os.fsdecode(cwd), env,
            stdin if flag != NOTHING else None, flag)


def encode_reply(status: int, out: bytes, err: bytes) -> bytes:
    return b"%d\0%d\0" % (status, len(out)) + out + err


def merged(first: bytes, then: bytes) -> bytes:
    """One reply of two slices of a command (its request's `slice`): the first failure's status,
    both outputs in order."""
    (s1, n1, b1), (s2, n2, b2) = (r.split(b"\0", 2) for r in (first, then))
    out1, err1, out2, err2 = b1[:int(n1)], b1[int(n1):], b2[:int(n2)], b2[int(n2):]
    return encode_reply(int(s1) or int(s2), out1 + out2, err1 + err2)


def run_for(data: bytes, request: Request, home: str) -> bytes:
    """Run a forwarded command in this process (the server) as the client would have run
    it: its arguments, directory, environment and standard input; the reply to send back.
    `request`: what the server knows of it (request.py): its `caller`, the user the kernel
    says sent it (None: the server's own user, who may name another with $HPCSCHED_USER on
    a test rig), and the server's bounds; the script the client read is added to it.
    `home`: the server's own site, fixed when it started: a request names no site (its
    $HPCSCHED_HOME is replaced), so a user who links the socket into a site of her own
    still talks to this one.  The state change is serial (one command at a time), so
    swapping the process's directory, environment and standard streams is safe; they are
    restored whatever the command does."""
    caller = request.caller
    try:
        prog, argv, cwd, env, stdin, flag = decode_request(data)
    except ValueError:
        return encode_reply(1, b"", b"hpcsched: malformed request to the server\n")
    env["HPCSCHED_HOME"] = home
    # (qsub -I and pbsyod from a caller the kernel named: a multi-user site's client runs
    # the session or the program itself; the server submits, or says what to run)
    if prog not in COMMANDS or _runs_here(prog, argv) and caller is None:
        return encode_reply(1, b"", f"hpcsched: {prog!r} is not a command the server runs\n".encode())
    saved_env, saved_io = dict(os.environ), (sys.stdin, sys.stdout, sys.stderr)
    here = os.open(".", os.O_RDONLY)
    out, err = io.StringIO(), io.StringIO()
    if caller is not None and env.get("HPCSCHED_USER", caller) not in ("", caller):
        err.write(f"{prog}: HPCSCHED_USER is ignored: the server knows you as {caller}\n")
    elif caller is None:  # (as load_site checks it for a command run here)
        try:
            site.check_named_user(env)
        except ConfigError as e:
            return encode_reply(1, b"", f"{prog}: {e}\n".encode(errors="surrogateescape"))
    try:
        _become_environment(env)
        request.script = stdin if flag == SCRIPT else None
        sys.stdin = io.TextIOWrapper(io.BytesIO(stdin if flag == STDIN else b""), encoding="utf-8",
                                     errors="replace")
        sys.stdout, sys.stderr = out, err
        try:
            os.chdir(cwd)
            with serving(request):
                status = run_here(prog, argv)
        except OSError as e:
            err.write(f"{prog}: {cwd}: {e.strerror}\n")
            status = 1
        except Exception as e:  # a bug in one command must not take the server down
            err.write(f"{prog}: internal error: {e!r}\n")
            status = 1
    finally:
        request.script = None
        os.fchdir(here)
        os.close(here)
        sys.stdin, sys.stdout, sys.stderr = saved_io
        _become_environment(saved_env)
    return encode_reply(status, out.getvalue().encode(errors="surrogateescape"),
                        err.getvalue().encode(errors="surrogateescape"))


def _become_environment(env: dict[str, str]) -> None:
    """Make os.environ `env`, touching only what differs (each change is a putenv); the
    caller's $TZ is the local time its dates are read and shown in, as when it runs alone."""
    zone = os.environ.get("TZ")
    for key in [k for k in os.environ if k not in env]:
        del os.environ[key]
    for key, value in env.items():
        if os.environ.get(key) != value:
            os.environ[key] = value
    if os.environ.get("TZ") != zone:
        time.tzset()
