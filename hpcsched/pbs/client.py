"""The client side of the front door (front.py): talk to the site's server over its
command socket, and read what a command line needs to know before it is sent.

Imported by every command before anything else, so it imports nothing beyond the
interpreter's start-up set (see front.py); the commands that talk to the server from
inside (qsub -I and -W block=true, pbsyod, cqwait) import this, never front.py, which
dispatches to them.
"""
import posix
import sys

from ..store.layout import environ, getenv, home

COBALT_HEAD = 1 << 16  # bytes of a Cobalt job's command a client sends: its #COBALT lines
SOCKET = "commands.sock"
CLIENT_TIMEOUT = 60.0  # seconds a command waits for the server (connect, send, answer)
MAGIC = b"hpcsched1"


def flavor() -> str:
    """The site's flavor as load_site reads it ($HPCSCHED_FLAVOR, else config.toml's
    top-level `flavor`; torque), read here without a TOML parser: the client side decides
    from it alone how qsub's command line reads, and a parser would double its cost.
    "" when the configuration is not the caller's to read (a multi-user site's)."""
    given = getenv("HPCSCHED_FLAVOR")
    if given:
        return given
    try:
        with open(f"{home()}/config.toml", "rb") as f:
            text = f.read().decode("utf-8")
    except PermissionError:
        return ""
    except (OSError, UnicodeDecodeError):
        return "torque"  # (running here says what is wrong with it)
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("["):  # (the top-level keys end at the first table)
            break
        key, eq, value = line.partition("=")
        if eq and key.strip().strip("\"'") == "flavor":
            return value.partition("#")[0].strip().strip("\"'")
    return "torque"


def _qsub_options(argv: list[str]) -> tuple[list[tuple[str, str]], list[str]]:
    """qsub's (options, operands) as the front door needs them (see `_qsub_reading`)."""
    return _qsub_reading(argv)[:2]


def _qsub_reading(argv: list[str]) -> tuple[list[tuple[str, str]], list[str], bool]:
    """(options, operands, read as Cobalt's): a Cobalt qsub's options in PBS's letters
    (`-I` for an interactive job) and its command, made absolute by --cwd.  Where the
    flavor cannot be read here (a multi-user site), Torque's reading unless it fails or
    names more than one script, else Cobalt's: the server, which knows, reads what it is
    sent by its own flavor."""
    from .errors import UsageError
    from .options import COBALT_QSUB, QSUB, parse, parse_long
    kind = flavor()
    if kind != "cobalt":
        try:
            opts, operands = parse(argv, QSUB, permute=False, dashes=True)
            if kind or len(operands) <= 1 or ("I", "") in opts:
                return opts, operands, False
        except UsageError:
            if kind:
                return [], ["-"], False  # the server reports the usage error
    try:
        opts, operands = parse_long(argv, COBALT_QSUB, permute=False)
    except UsageError:
        return [], ["-"], True
    given = dict(opts)
    interactive = "interactive" in given or given.get("mode") == "interactive"
    if operands and not operands[0].startswith("/") and "cwd" in given:
        operands = [f"{given['cwd']}/{operands[0]}", *operands[1:]]
    return [("I", "")] if interactive else [], operands[:1] or ["-"], True  # (never standard input)


def _reads_stdin(prog: str, argv: list[str]) -> bool:
    """qsub without a script operand reads its standard input (the script), and qmgr
    without -c its directives."""
    if prog == "qmgr":
        return not any(arg.startswith("-c") for arg in argv)
    if prog != "qsub":
        return False
    opts, operands = _qsub_options(argv)
    return not operands and ("I", "") not in opts


def blocks(opts: list[tuple[str, str]]) -> bool:
    """OpenPBS's `qsub -W block=true` on the command line: qsub waits for the job's end."""
    return any(letter == "W" and any(part.strip().lower() == "block=true" for part in value.split(","))
               for letter, value in opts)


class Impostor(Exception):
    """The command socket is served by someone other than the site's owner."""


def _connect():
    """A stream connected to the site's server, or None when no server listens; Impostor
    when the process listening is not the site directory's owner (or root)."""
    import _socket
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    sock.settimeout(CLIENT_TIMEOUT)
    site = home()
    try:
        sock.connect(f"{site}/{SOCKET}")
        # struct ucred {pid, uid, gid}: the uid of the process that listens
        uid = int.from_bytes(sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)[4:8], sys.byteorder)
        owner = posix.stat(site).st_uid
    except OSError:
        sock.close()
        return None
    if uid not in (owner, 0):
        sock.close()
        raise Impostor(f"{site}/{SOCKET} is served by uid {uid}, not the site's owner "
                       f"(uid {owner}): refused")
    return sock


def server_answers() -> bool:
    """Is a server listening on the command socket?  (It drops the empty request.)"""
    try:
        sock = _connect()
    except Impostor:
        return False
    if sock is None:
        return False
    sock.close()
    return True


NOTHING, STDIN, SCRIPT = b"0", b"1", b"2"  # what a request's data is


def _b(s: str) -> bytes:
    return s.encode(sys.getfilesystemencoding(), "surrogateescape")  # (os.fsencode)


def encode_request(prog: str, argv: list[str], cwd: str, env: dict, stdin: bytes | None,
                   flag: bytes | None = None) -> bytes:
    """`env`: str -> str, or bytes -> bytes as the process's start-up environment is."""
    flag = flag or (STDIN if stdin is not None else NOTHING)
    fields = [MAGIC, _b(prog), _b(cwd), str(len(argv)).encode(), *map(_b, argv), str(len(env)).encode(),
              *(k + b"=" + v if isinstance(k, bytes) else _b(f"{k}={v}") for k, v in env.items()), flag]
    return b"\0".join(fields) + b"\0" + (stdin or b"")


def _script_operand(prog: str, argv: list[str], cwd: str) -> bytes | None:
    """The script file qsub names, read with the caller's rights (None: none, or unreadable:
    the server then says so)."""
    if prog != "qsub":
        return None
    _, operands, cobalt = _qsub_reading(argv)
    if len(operands) != 1 or operands[0] in ("-", "--"):  # (`-- program args`: nothing to read)
        return None
    path = operands[0] if operands[0].startswith("/") else f"{cwd}/{operands[0]}"
    try:
        with open(path, "rb") as f:
            return f.read(COBALT_HEAD) if cobalt else f.read()
    except (OSError, ValueError):
        return None


def ask(prog: str, argv: list[str]) -> tuple[int, bytes, bytes] | None:
    """Have the site's server run the command: (exit status, stdout, stderr), or None if no
    server answers (errors talking to it are a status 1 and a line)."""
    import _socket
    try:
        cwd = posix.getcwd()
    except OSError:
        return None  # a directory gone under us: running here reports it
    try:
        sock = _connect()
    except Impostor as e:
        return 1, b"", _b(f"{prog}: {e}\n")
    if sock is None:
        return None  # no server (or a stale socket): run here
    chunks = []
    try:
        flag, data = NOTHING, _script_operand(prog, argv, cwd)
        if data is not None:
            flag = SCRIPT
        elif _reads_stdin(prog, argv) and sys.stdin is not None:
            flag, data = STDIN, sys.stdin.buffer.read()
        try:
            sock.sendall(encode_request(prog, argv, cwd, dict(environ()), data, flag))
            sock.shutdown(_socket.SHUT_WR)
        except BrokenPipeError:
            pass  # the server refused the request before its end: its reply says why
        while chunk := sock.recv(1 << 16):
            chunks.append(chunk)
    except TimeoutError:
        return 1, b"", _b(f"{prog}: the hpcsched server did not answer within {CLIENT_TIMEOUT:g} s (busy or "
                          f"stopped); what the command did, if anything, shows in qstat\n")
    except OSError:
        pass  # the server went away mid-request: said below
    finally:
        sock.close()
    try:
        status, size, body = b"".join(chunks).split(b"\0", 2)
        status, size = int(status), int(size)
    except ValueError:
        return 1, b"", _b(f"{prog}: the hpcsched server dropped the request (see qstat for its effect)\n")
    return status, body[:size], body[size:]


def query(prog: str, argv: list[str], local=None) -> tuple[int, str] | None:
    """What a command says, (exit status, its output), to a client that watches the site
    (qsub -W block=true, cqwait): the server's answer when one runs, else `local(argv, out)`
    (the command's PBS form, run in this process, where the caller owns the site); None if
    neither."""
    answer = ask(prog, argv)
    if answer is not None:
        return answer[0], answer[1].decode(errors="replace")
    if local is None:
        return None
    import io
    out = io.StringIO()
    return local(argv, out=out), out.getvalue()


def forward(prog: str, argv: list[str]) -> int | None:
    """Have the site's server run the command, its output ours; its exit status, or None if
    no server answers."""
    answer = ask(prog, argv)
    if answer is None:
        return None
    status, out, err = answer
    try:
        sys.stdout.buffer.write(out)
        sys.stdout.flush()
        sys.stderr.buffer.write(err)
        sys.stderr.flush()
    except BrokenPipeError:  # `qstat | head`: end quietly, as for any Unix tool
        posix._exit(status)
    return status


def owns_site() -> bool:
    """May this process read the store itself?  Only its owner (or root) may: on anyone
    else's site the server is the only door."""
    try:
        return posix.getuid() in (0, posix.stat(home()).st_uid)
    except OSError:
        return True  # no site yet: running here says how to make one
