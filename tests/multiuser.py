"""A two-user site for the multi-user tests: real Unix users, a root server, and clients
that run as those users (a forked child that sets its ids and calls the front door, so no
interpreter the users can execute is needed).  Only as root; the users are made once per
run and removed at its end when this module made them."""
from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
USERS = ("hpcst_alice", "hpcst_bob")

needs_root = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None,
                                reason="multi-user tests need root and useradd (CI runs them as root)")


def make_users(base: Path) -> list[str]:
    """The test users (made here if missing); the ones this call made, or adopted: a user
    an interrupted run left (its home in one of our temporary bases) goes at this run's end."""
    made = []
    for name in USERS:
        try:
            pw = pwd.getpwnam(name)
            if os.path.basename(os.path.dirname(pw.pw_dir)).startswith("hpcsched-mu-"):
                made.append(name)  # (a leftover of ours, not a user the machine had)
            if not os.path.isdir(pw.pw_dir):  # (left by a run that could not remove it: a home again)
                os.makedirs(pw.pw_dir, mode=0o755)
                os.chown(pw.pw_dir, pw.pw_uid, pw.pw_gid)
        except KeyError:
            home = base / name
            subprocess.run(["useradd", "-m", "-d", str(home), "-s", "/bin/sh", name], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            made.append(name)
    return made


def drop_users(names: list[str]) -> None:
    for name in names:
        subprocess.run(["userdel", "-r", name], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def run_as(user: str, home: Path, prog: str, argv: list[str], cwd: str | None = None,
           env: dict | None = None, stdin: bytes = b"", timeout: int = 30) -> tuple[int, str, str]:
    """Run a command as `user` the way a shell would (the front door: forwarded to the server,
    or run in-process when none answers): (exit status, stdout, stderr)."""
    pw = pwd.getpwnam(user)
    cwd = cwd or pw.pw_dir
    # the child, as the user, may not read this interpreter's own library (a root-only
    # install): what the command runs is imported here first, as it would be on an install
    from importlib import import_module

    from hpcsched.pbs import front
    if prog in front.COMMANDS:
        import_module(f"hpcsched.pbs.{front.COMMANDS[prog].split(':')[0]}")
    pipes = [os.pipe() for _ in range(3)]
    pid = os.fork()
    if pid == 0:  # the child: become the user, then be the command
        status = 127
        signal.alarm(timeout)  # (a command that hangs ends here, not the test run)
        try:
            os.dup2(pipes[0][0], 0)
            os.dup2(pipes[1][1], 1)
            os.dup2(pipes[2][1], 2)
            for fd in {fd for pair in pipes for fd in pair}:  # (a write end kept open: no EOF)
                os.close(fd)
            os.setgroups(os.getgrouplist(user, pw.pw_gid))
            os.setgid(pw.pw_gid)
            os.setuid(pw.pw_uid)
            os.chdir(cwd)
            os.environ.clear()
            os.environ.update({"HPCSCHED_HOME": str(home), "HOME": pw.pw_dir, "USER": user, "LOGNAME": user,
                               "PATH": "/usr/bin:/bin", **(env or {})})
            sys.stdin = open(0, "r", closefd=False)
            sys.stdout = open(1, "w", closefd=False)
            sys.stderr = open(2, "w", closefd=False)
            from hpcsched.pbs import front
            sys.argv = [prog, *argv]
            status = front.main(prog)
            sys.stdout.flush()
            sys.stderr.flush()
        except SystemExit as e:
            status = e.code if isinstance(e.code, int) else 1
        except BaseException as e:  # noqa: BLE001 (the child reports, never returns to pytest)
            os.write(2, f"child: {e!r}\n".encode())
        finally:
            os._exit(status if isinstance(status, int) else 1)
    os.close(pipes[0][0])
    os.close(pipes[1][1])
    os.close(pipes[2][1])
    try:
        os.write(pipes[0][1], stdin)
    except BrokenPipeError:
        pass  # (a command that ended before it read its input)
    os.close(pipes[0][1])
    with os.fdopen(pipes[1][0], "rb") as out, os.fdopen(pipes[2][0], "rb") as err:
        o, e = out.read(), err.read()
    _, ws = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(ws), o.decode(), e.decode()


class MultiSite:
    """A multi-user site in a fresh directory users can reach, and its root server."""

    def __init__(self, base: Path):
        from hpcsched.store.site import init_site
        self.base = base
        self.home = base / "site"
        init_site(self.home, nodes=2, cores=2, managers=["root"], multi_user=True)
        self.server: subprocess.Popen | None = None

    def configure(self, extra: str) -> None:
        """Add top-level keys (before the first table) to the site's configuration."""
        path = self.home / "config.toml"
        text = path.read_text()
        for line in extra.splitlines(keepends=True):
            key = line.split("=")[0].strip()
            lines = text.splitlines(keepends=True)
            old = next((i for i, old in enumerate(lines) if old.split("=")[0].strip() == key), None)
            if old is not None:
                lines[old] = line
                text = "".join(lines)
            else:
                at = text.index("\n[") + 1
                text = text[:at] + line + text[at:]
        path.write_text(text)

    def start(self, user: str | None = None, python: str = sys.executable) -> None:
        """Start the server (as root, or as `user`, a service account, with `python`)."""
        env = dict(os.environ, HPCSCHED_HOME=str(self.home), PYTHONPATH=str(ROOT))
        env.pop("HPCSCHED_USER", None)
        self.log = open(self.base / "server.log", "wb")
        argv = [python, "-m", "hpcsched", "server", "--interval", "0.2", "--grace", "1"]
        if user:
            argv = ["setpriv", f"--reuid={user}", f"--regid={pwd.getpwnam(user).pw_gid}", "--init-groups", *argv]
        self.server = subprocess.Popen(argv, env=env, cwd=self.base, stdout=self.log, stderr=self.log)
        deadline = time.time() + 20
        while not (self.home / "commands.sock").exists():
            assert self.server.poll() is None, self.server_log()
            assert time.time() < deadline, "the server did not start"
            time.sleep(0.05)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.server is not None and self.server.poll() is None:
            self.server.send_signal(sig)
            self.server.wait(20)
        self.server = None

    def server_log(self) -> str:
        return (self.base / "server.log").read_text(errors="replace")

    def run(self, user: str, prog: str, *argv: str, **kw) -> tuple[int, str, str]:
        return run_as(user, self.home, prog, list(argv), **kw)

    def sched(self):
        """The stored state, as root reads it (after the server wrote it)."""
        from hpcsched.store.journaled import Batch
        from hpcsched.store.site import load_site
        batch = Batch(load_site(self.home))
        with batch.open(write=False):
            return batch.sched

    def wait(self, job_id: int, states: tuple[str, ...] = ("C",), timeout: float = 20.0):
        """The job once its state letter is one of `states` (by qstat -f as root)."""
        from hpcsched.pbs import common
        deadline = time.time() + timeout
        while True:
            job = self.sched().jobs.get(job_id)
            if job is not None and common.state_letter(job, "torque") in states:
                return job
            assert time.time() < deadline, f"job {job_id}: {job and job.state}\n{self.server_log()}"
            time.sleep(0.1)


BASES: list[Path] = []  # every base this session made (conftest tidies their sites' cgroups)


def new_base() -> Path:
    """A directory every user may pass through (pytest's own tmp is root's alone)."""
    base = Path(tempfile.mkdtemp(prefix="hpcsched-mu-"))
    BASES.append(base)
    os.chmod(base, 0o755)
    return base
