"""Who is who on a multi-user site: the kernel's word for a client, the owner a job runs as,
and a store only the server can read.

A multi-user site (`multi_user = true`) has one door, the server.  It owns the site
directory: the directory itself is 0711 (anyone may reach the command socket by its name,
nobody may list, create, rename or remove anything in it), every file the server writes
is 0600 and every directory 0700, except the job tree's two upper levels (0711), which
a job's wrapper, running as the job's owner, passes through to its own run directory.
Jobs run as their owners when the server runs as root: groups, gid and uid are set in the
child before anything of the job runs, and the files a job writes (`-o`, `-e`) are opened
with the owner's rights, never the server's.
"""
from __future__ import annotations

import contextlib
import os
import pwd
import stat
import struct
from dataclasses import dataclass
from pathlib import Path

SITE_MODE = 0o711  # the site directory and jobs/, jobs/ID on a multi-user site
COMMAND_SOCKET_MODE = 0o666  # the door: connecting is open to all, the kernel names the caller


def peer(conn) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end of a Unix stream, from the kernel."""
    import socket
    return struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))


@dataclass(frozen=True)
class Owner:
    """A job owner's Unix identity, from the password and group databases."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    home: str
    shell: str

    @classmethod
    def of(cls, name: str, group: str = "") -> "Owner":
        """The owner called `name`, under `group` if it is one of theirs (the job's -W
        group_list), else their primary group; KeyError when the system knows no such user."""
        import grp
        pw = pwd.getpwnam(name)
        groups = tuple(os.getgrouplist(name, pw.pw_gid))
        gid = pw.pw_gid
        if group:
            with contextlib.suppress(KeyError):
                gid = grp.getgrnam(group).gr_gid if grp.getgrnam(group).gr_gid in groups else gid
        return cls(name, pw.pw_uid, gid, groups, pw.pw_dir, pw.pw_shell or "/bin/sh")


@contextlib.contextmanager
def acting_as(owner: Owner):
    """Open files and check paths with `owner`'s rights (root's effective ids switched and
    back): what a job names is reached as its owner would reach it."""
    groups = os.getgroups()
    os.setgroups(list(owner.groups))
    os.setegid(owner.gid)
    os.seteuid(owner.uid)
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(0)
        os.setgroups(groups)


def becoming(owner: Owner | None, workdir: str, cgroup: str | None, nice: int | None = None):
    """The launcher's child-side set-up (a preexec function): join the job's cgroup while
    still root, then become the owner (groups, gid, uid: no way back), take the job's nice
    value with the owner's rights and enter the job's working directory as the owner
    (without an owner, the job stays the server's user and Popen's `cwd` enters the
    directory)."""
    def setup() -> None:
        if cgroup:
            try:
                with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
                    f.write("0")
            except OSError:
                pass  # (the server then tracks the job by its id: tracking.py)
        if owner is not None:
            os.setgroups(list(owner.groups))
            os.setgid(owner.gid)
            os.setuid(owner.uid)
        if nice:
            try:
                os.nice(nice)
            except OSError:
                pass  # (a negative nice the owner may not take: the job runs at 0)
        if owner is not None:
            os.chdir(workdir)
    return setup


def lock_down(home: Path) -> list[str]:
    """Make the site directory the server's alone (on a multi-user site, at every start):
    mode 0711, files 0600, directories 0700 (jobs/ 0711); the process's umask 077 so that
    everything written from now on is private.  Returns what was changed, for the log."""
    os.umask(0o077)
    changed = []

    def fix(path: Path, mode: int) -> None:
        st = path.lstat()
        if stat.S_ISLNK(st.st_mode) or stat.S_IMODE(st.st_mode) == mode:
            return
        os.chmod(path, mode)
        changed.append(f"{path.name} {mode:04o}")

    fix(home, SITE_MODE)
    for entry in os.scandir(home):
        path = Path(entry.path)
        if entry.is_symlink() or stat.S_ISSOCK(entry.stat(follow_symlinks=False).st_mode):
            continue
        if entry.is_dir():
            fix(path, SITE_MODE if entry.name == "jobs" else 0o700)
        else:
            fix(path, 0o600)
    return changed



def systemd_unit(home: Path) -> str:
    """A systemd unit that runs the site's server as root.  KillMode=process: a restart
    leaves the jobs running (the server finds them again); Delegate: the server may make
    its jobs' cgroups under its own."""
    import sys
    import hpcsched
    package = Path(hpcsched.__file__).resolve().parent.parent  # (a checkout, or site-packages)
    path = "" if package.name in ("site-packages", "dist-packages") else f"Environment=PYTHONPATH={package}\n"
    return f"""\
[Unit]
Description=hpcsched batch server ({home})
After=network.target

[Service]
Type=simple
Environment=HPCSCHED_HOME={home}
{path}ExecStart={sys.executable} -m hpcsched server
Restart=on-failure
KillMode=process
Delegate=yes

[Install]
WantedBy=multi-user.target
"""
