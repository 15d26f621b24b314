"""`hpcsched node`: a job's side on another host, which the server runs there over ssh.

The server's decisions and its journal stay on the server's host.  A node keeps only what
answers "is this run of job N still running here, and how did it end": a directory a run,
`<spool>/<key>` (the server's key, `<site>.<job id>.<run>`), the node command's own, with
the keeper's `meta.json`, `started.json`, `lease` and `cpu`, and in it `run/`, the job
owner's, with what the job's wrapper (layout.WRAPPER, the same as on the server's host)
reads and writes there (script, node file, pid, status).

    node run KEY             start the run (its spec, JSON, on stdin) under a keeper and
                             print {"pid", "start"}; asked again, the same: never two starts
    node status [--lease S] KEY ...
                             print key -> each run's state, pid, exit status, end time,
                             CPU time, what its processes use now; its lease: S from now
    node wait KEY            return once the run has ended (the server's prompt word of it)
    node signal KEY SIG ...  the signals to the run's session and every process of it
    node cleanup KEY ...     kill what is left of each run and remove its $TMPDIR
    node forget KEY ...      remove the runs' directories (their ends are on record)
    node task KEY -- PROG    run PROG as part of the run (pbsdsh's tasks on the job's hosts)
    node list                {"keys": [...]}: the runs this host keeps
    node ping                {"ok": true}: the node answers

The keeper, a small process a run and in no session of ssh's, starts the wrapper in a
session of its own, waits for it and writes its CPU time beside its status: a dropped
connection does not touch the run.  The run's lease (the `lease` file's time, a deadline)
is the spec's `lease` seconds from its start, and each `status --lease S` sets it S seconds
from then: the server says how long it will still wait for the host before it gives the
job up.  A run past its lease is killed by its keeper, so that once the server has marked
the node down and requeued the job, it never runs twice at once.  Errors are one line on
stderr, exit status 2 (a bad request) or 1.
"""
from __future__ import annotations

import json
import os
import re
import signal
import stat
import sys
import tempfile
import time
from pathlib import Path

from ..store.layout import WRAPPER
from . import privilege, tracking

SPOOL = "/var/spool/hpcsched-node"  # the node's spool as root (a user's: ~/.hpcsched-node)
KEY = re.compile(r"[0-9a-f]{1,16}\.[0-9]{1,12}\.[0-9]{1,6}")
WAIT_POLL = 0.2  # seconds between a waiter's looks at its run
KEEP_POLL = 1.0  # seconds between a keeper's looks at its run's lease
HEARTBEAT = 5.0  # seconds between a waiter's newlines to the server (a dropped connection ends it)
TASK_ENV = "HPCSCHED_NODE"  # a run's way to its sister hosts (pbsdsh): JSON {ssh, command, spool, key}


class NodeError(Exception):
    """A request the node side refuses: one line, and the exit status."""

    def __init__(self, message: str, status: int = 2):
        super().__init__(message)
        self.status = status


def default_spool() -> str:
    return SPOOL if os.geteuid() == 0 else os.path.join(os.path.expanduser("~"), ".hpcsched-node")


def main(argv: list[str]) -> int:
    """`hpcsched node [--spool DIR] VERB ARGS`: what the server asks of this host."""
    spool = None
    if argv[:1] == ["--spool"] and len(argv) > 1:
        spool, argv = argv[1], argv[2:]
    try:
        if not argv:
            raise NodeError("usage: hpcsched node [--spool DIR] run|status|wait|signal|cleanup|forget|task|list|ping ...")
        node = Node(Path(spool or default_spool()))
        verb, args = argv[0], argv[1:]
        if verb == "ping":
            out = {"ok": True}
        elif verb == "list":
            out = {"keys": node.keys()}
        elif verb == "run":
            out = node.run(_key(args, 1), _spec(sys.stdin.read()))
        elif verb == "status":
            lease = None
            if args[:1] == ["--lease"] and len(args) > 1:
                lease, args = _seconds(args[1]), args[2:]
            out = node.status([_key([k], 1) for k in args], lease)
        elif verb == "wait":
            out = node.wait(_key(args, 1))
        elif verb == "signal":
            key = _key(args[:1], 1)
            out = node.signal(key, [_signal(s) for s in args[1:]])
        elif verb in ("cleanup", "forget"):
            keys = [_key([k], 1) for k in args]
            out = {k: (node.cleanup(k) if verb == "cleanup" else node.forget(k)) for k in keys}
        elif verb == "task":
            if len(args) < 3 or args[1] != "--":
                raise NodeError("usage: hpcsched node task KEY -- PROGRAM [ARGS]")
            return node.task(_key(args[:1], 1), args[2:])
        else:
            raise NodeError(f"unknown request {verb!r}")
    except NodeError as e:
        print(f"hpcsched node: {e}", file=sys.stderr)
        return e.status
    except OSError as e:
        print(f"hpcsched node: {e.filename or ''}{': ' if e.filename else ''}{e.strerror or e}", file=sys.stderr)
        return 1
    print(json.dumps(out, sort_keys=True))
    return 0


def _key(args: list[str], n: int) -> str:
    if len(args) != n or not KEY.fullmatch(args[0]):
        raise NodeError(f"not a run's key: {' '.join(args) or '(none)'}")
    return args[0]


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < 1e9:
        raise NodeError(f"not a lease: {text}")
    return value


def _signal(text: str) -> int:
    try:
        number = int(text)
        signal.Signals(number)
        return number
    except ValueError:
        raise NodeError(f"not a signal: {text}") from None


def _spec(text: str) -> dict:
    try:
        spec = json.loads(text)
    except ValueError as e:
        raise NodeError(f"the run's spec is not JSON: {e}") from None
    if not isinstance(spec, dict) or not isinstance(spec.get("env"), dict) or not isinstance(spec.get("files"), dict):
        raise NodeError("the run's spec lacks env or files")
    return spec


class Node:
    """This host's runs, under `spool`."""

    def __init__(self, spool: Path):
        self.spool = spool
        self.root = os.geteuid() == 0
        self.tracker = tracking.Tracker(spool, at_root=True) if self.root else tracking.Tracker(spool, cgroups=False)

    def keys(self) -> list[str]:
        try:
            return sorted(name for name in os.listdir(self.spool) if KEY.fullmatch(name))
        except FileNotFoundError:
            return []

    def dir(self, key: str) -> Path:
        return self.spool / key

    def _ids(self, key: str) -> tuple[int, int]:
        _, job, run = key.split(".")
        return int(job), int(run)

    def mark(self, key: str) -> str:
        return self.tracker.mark(*self._ids(key))

    # --- run ---------------------------------------------------------------------------
    def run(self, key: str, spec: dict) -> dict:
        """Start the run under its keeper; a run already started is only reported."""
        d = self.dir(key)
        known = self._started(d)
        if known:
            return known
        owner = self._owner(spec)
        self.spool.mkdir(mode=0o711, parents=True, exist_ok=True)
        d.mkdir(mode=0o711, exist_ok=True)
        rundir = d / "run"
        _remove(rundir)  # (a run whose keeper never started: begun afresh)
        rundir.mkdir(mode=0o700)
        for name, (text, mode) in spec["files"].items():
            if "/" in name or name in ("", ".", ".."):
                raise NodeError(f"not a file of a run: {name!r}")
            _write(rundir / name, text, int(mode))
        tmp = tempfile.mkdtemp(prefix=f"pbs.{self._ids(key)[0]}.", dir=spec.get("tmpdir") or None)
        cgroup = self.tracker.cgroup(*self._ids(key), create=True)
        env = {k: str(v) for k, v in spec["env"].items()}
        env.update(TMPDIR=tmp, **{tracking.MARK: self.mark(key)})
        for name, file in spec.get("paths", {}).items():  # (variables naming a file of the run: here)
            env[name] = str(rundir / file)
        if spec.get("sisters"):  # (pbsdsh's way to the job's other hosts: pbs/pbsdsh.py)
            env[TASK_ENV] = json.dumps({**spec["sisters"], "key": key})
        if cgroup:
            env["HPCSCHED_CGROUP"] = cgroup
        if owner:
            for path in [rundir, tmp, *(rundir / name for name in spec["files"])]:
                os.chown(path, owner.uid, owner.gid, follow_symlinks=False)
        _write(d / "meta.json", json.dumps({"tmpdir": tmp, "cgroup": cgroup}), 0o600)  # (what cleanup removes)
        argv = ["/bin/sh", "-c", WRAPPER, "hpcsched-job", str(rundir), spec.get("shell") or "/bin/sh",
                str(rundir / "script"), *map(str, spec.get("arguments", ()))]
        return self._spawn(d, key, argv, env, spec, owner, cgroup)

    def _started(self, d: Path) -> dict | None:
        """What an earlier `run` of this key said (its keeper wrote it), or None."""
        try:
            return json.loads((d / "started.json").read_text())
        except (OSError, ValueError):
            return None

    def _owner(self, spec: dict) -> privilege.Owner | None:
        name = spec.get("owner")
        if not name:
            return None
        if not self.root:
            raise NodeError(f"cannot run a job as {name}: the node command does not run as root", 1)
        try:
            return privilege.Owner.of(name, spec.get("group") or "")
        except KeyError:
            raise NodeError(f"no such user on this host: {name}", 1) from None

    def _spawn(self, d: Path, key: str, argv: list[str], env: dict, spec: dict,
               owner: privilege.Owner | None, cgroup: str | None) -> dict:
        """Fork the keeper out of this (ssh's) session; it starts the wrapper and says its pid."""
        r, w = os.pipe()
        child = os.fork()
        if child == 0:  # (the keeper's parent: a new session, then the keeper itself)
            os.close(r)
            try:
                os.setsid()
                if os.fork() == 0:
                    self._keeper(d, argv, env, spec, owner, cgroup, w)
            finally:
                os._exit(0)
        os.close(w)
        os.waitpid(child, 0)
        with os.fdopen(r, "rb") as f:
            said = f.read()
        try:
            out = json.loads(said)
        except ValueError:
            raise NodeError("the run's keeper died before it started the job", 1) from None
        if "error" in out:
            raise NodeError(out["error"], 1)
        return out

    def _keeper(self, d: Path, argv, env, spec, owner, cgroup, w: int) -> None:
        """The run's keeper (never returns): start the wrapper, say its pid, wait for it,
        keep its lease."""
        import subprocess
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.closerange(3, w)
        os.closerange(w + 1, 1 << 16)
        signal.pthread_sigmask(signal.SIG_SETMASK, ())  # (the job gets no signal blocked: none inherited)
        out = {}
        try:
            old = os.umask(int(spec.get("umask") or "077", 8))
            try:
                with privilege.acting_as(owner) if owner else _nothing():
                    stdout = open(spec["stdout"], "ab")
                    stderr = open(spec["stderr"], "ab") if spec.get("stderr") else subprocess.STDOUT
                workdir = spec.get("workdir") or "/"
                proc = subprocess.Popen(argv, cwd=None if owner else workdir, env=env, stdin=subprocess.DEVNULL,
                                        stdout=stdout, stderr=stderr, start_new_session=True,
                                        preexec_fn=privilege.becoming(owner, workdir, cgroup, spec.get("nice"))
                                        if owner or spec.get("nice") else None)
            finally:
                os.umask(old)
            out = {"pid": proc.pid, "start": _wait_start(proc.pid), "keeper": os.getpid(),
                   "keeper_start": tracking.process_start(os.getpid())}
            lease = float(spec.get("lease") or 0)
            _write(d / "lease", "", 0o600)
            if lease:
                _renew(d, lease)
            _write(d / "started.json", json.dumps(out), 0o600)
        except (OSError, ValueError, subprocess.SubprocessError) as e:
            out = {"error": f"the job could not start: {getattr(e, 'strerror', None) or e}"}
        os.write(w, json.dumps(out).encode())
        os.close(w)
        if "error" in out:
            os._exit(1)
        # (blocked only now, and only here: a child started while it was blocked got every
        # signal blocked; an end before this is found by the first wait4)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
        while True:
            pid, ws, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if lease and _age(d / "lease") > 0 and not (d / "fenced").exists():
                # the server has not been heard from for the lease: the node may be down
                # in its eyes and the job requeued, so this run ends here
                _write(d / "fenced", f"{time.time()}\n", 0o600)
                with _quiet():
                    os.killpg(proc.pid, signal.SIGKILL)
                self.tracker.signal(*self._ids(d.name), signal.SIGKILL)
            signal.sigtimedwait({signal.SIGCHLD}, KEEP_POLL)
        _write(d / "cpu", f"{usage.ru_utime + usage.ru_stime}\n", 0o600)
        os._exit(0)

    # --- status --------------------------------------------------------------------------
    def status(self, keys: list[str], lease: float | None = None) -> dict:
        """Each run's state: `running`, `ended` (its exit status, if the wrapper wrote one,
        when, its CPU time), `none` (no such run here); with `lease`, each run's lease is
        that many seconds from now."""
        out, usage = {}, None
        for key in keys:
            d = self.dir(key)
            started = self._started(d)
            if started is None:
                out[key] = {"state": "none"}
                continue
            if lease is not None:
                with _quiet():
                    _renew(d, lease)
            pid = started["pid"]
            cpu = _number(d / "cpu")
            alive = tracking.process_start(pid) == started["start"] or (
                cpu is None and tracking.process_start(started["keeper"]) == started["keeper_start"])
            seen = {"state": "running" if alive else "ended", "pid": pid, "start": started["start"]}
            if alive:
                if usage is None:
                    from .limits import Usage
                    usage = Usage()
                members = self.tracker.pids(*self._ids(key), scan=False)
                seen["use"] = list(usage.of(pid, members))
            else:
                status, at = _status(d / "run")
                failed = _read(d / "run" / "stagein_failed", 2000)
                seen.update(status=status, ended_at=at, cpu=cpu, fenced=(d / "fenced").exists(),
                            **({"stagein_failed": failed} if failed is not None else {}))
            out[key] = seen
        return out

    def wait(self, key: str) -> dict:
        """Return once the run has ended here (or is not here); end at once, the run left
        alone, when the connection that asked is gone (this process's parent changed, or
        the heartbeat it writes finds no reader)."""
        parent, beat = os.getppid(), time.monotonic()
        while True:
            seen = self.status([key])[key]
            if seen["state"] != "running":
                return seen
            if time.monotonic() >= beat + HEARTBEAT:
                beat = time.monotonic()
                try:
                    os.write(1, b"\n")
                except OSError:
                    os._exit(1)  # (no reader: the connection is gone, nobody to tell)
            if os.getppid() != parent:
                os._exit(1)
            time.sleep(WAIT_POLL)

    # --- signal, cleanup -------------------------------------------------------------------
    def signal(self, key: str, sigs: list[int]) -> dict:
        """Each signal to the run's session and to every process of the run."""
        started = self._started(self.dir(key)) or {}
        reached = set()
        for sig in sigs:
            group = None
            if started and tracking.process_start(started["pid"]) == started["start"]:
                with _quiet():
                    os.killpg(started["pid"], sig)
                    reached.add(started["pid"])
                    group = started["pid"]
            reached.update(self.tracker.signal(*self._ids(key), sig, besides=group))
        return {"reached": sorted(reached)}

    def cleanup(self, key: str) -> dict:
        """Kill what is left of the run (its cgroup, its mark) and remove its $TMPDIR."""
        left = self.tracker.clean(*self._ids(key))
        meta = _json(self.dir(key) / "meta.json")
        if meta.get("tmpdir"):
            _remove(meta["tmpdir"])
        return {"killed": left}

    def forget(self, key: str) -> dict:
        _remove(self.dir(key))
        return {"forgotten": True}

    def task(self, key: str, argv: list[str]) -> int:
        """Become a task of the run (its mark, its cgroup where this user may join it) and
        run `argv` in its place; what it prints goes back over ssh."""
        os.environ[tracking.MARK] = self.mark(key)
        cgroup = self.tracker.cgroup(*self._ids(key), create=self.root)
        if cgroup:
            with _quiet():
                with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
                    f.write("0")
        try:
            os.execvp(argv[0], argv)
        except OSError as e:
            raise NodeError(f"{argv[0]}: {e.strerror}", 127) from None


# --- small helpers ----------------------------------------------------------------------------
class _quiet:
    """Ignore a process or file that is gone or not ours."""

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        return kind is not None and issubclass(kind, OSError)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _write(path: Path, text: str, mode: int) -> None:
    """Write a file atomically (a temporary name, then renamed)."""
    tmp = path.with_name(path.name + ".new")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(text.encode("utf-8", errors="surrogateescape"))
    os.replace(tmp, path)


def read_file(path: Path, limit: int) -> bytes | None:
    """Up to `limit` bytes of a file a job's wrapper wrote (its run directory is the owner's:
    a link, a fifo or a device there gives None, never a hang or another file's content)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        return os.read(fd, limit) if stat.S_ISREG(os.fstat(fd).st_mode) else None
    except OSError:
        return None
    finally:
        os.close(fd)


def _read(path: Path, limit: int) -> str | None:
    data = read_file(path, limit)
    return None if data is None else data.decode("utf-8", "replace")


def _number(path: Path) -> float | None:
    try:
        return float((_read(path, 64) or "").strip())
    except ValueError:
        return None


def _status(d: Path) -> tuple[int | None, float | None]:
    """The wrapper's exit status (status, else status.tmp where a full disk refused the
    rename) and when it was written."""
    for name in ("status", "status.tmp"):
        text = _read(d / name, 64)
        if text is not None and text.strip().lstrip("-").isdigit():
            return int(text), os.stat(d / name).st_mtime
    return None, None


def _json(path: Path) -> dict:
    try:
        return json.loads(_read(path, 1 << 16) or "{}")
    except ValueError:
        return {}


def _renew(d: Path, lease: float) -> None:
    """The run's lease: `lease` seconds from now (the lease file's time)."""
    until = time.time() + lease
    os.utime(d / "lease", (until, until))


def _age(path: Path) -> float:
    try:
        return time.time() - os.stat(path).st_mtime
    except OSError:
        return 0.0


def _remove(path) -> None:
    import shutil
    shutil.rmtree(path, ignore_errors=True)


def _wait_start(pid: int) -> str | None:
    """The start time of a process just forked (its /proc entry may lag a moment)."""
    for _ in range(100):
        start = tracking.process_start(pid)
        if start is not None:
            return start
        time.sleep(0.001)
    return None
