"""The site's own programs (submit filter, mail command, prologue, epilogue, node checks):
how they run, whoever's request set them off.

A site program never inherits a caller's environment: on a multi-user site the server
runs it while answering some user's command, and `BASH_ENV`, `LD_PRELOAD` or a `PATH`
of that user's would run the user's code with the server's rights.  It gets a fixed
environment (`PATH` from the site's `site_path`, `HPCSCHED_HOME`, what the program is
told about its job), and on a multi-user site served by root the submit filter runs as
`filter_user` (default `nobody`: it reads a script and writes one), the mail command as
`mail_user` (default the server's own user, as pbs_server sends its mail).
"""
from __future__ import annotations

import os
import pwd
import stat

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DEFAULT_USERS = {"filter_user": "nobody", "mail_user": None}  # None: the server's own user


def environment(site, **told: str) -> dict[str, str]:
    """A site program's whole environment: the site's PATH and home, and `told`."""
    return {"PATH": site.config.get("site_path", DEFAULT_PATH), "HPCSCHED_HOME": str(site.home),
            "LANG": "C.UTF-8", **told}


def identity(site, key: str) -> dict:
    """Popen's `user`, `group` and `extra_groups` for the site program run as `key` says
    ({} where it runs as this process: not root, or not a multi-user site).  KeyError
    naming the user when the system has no such user."""
    name = site.config.get(key, DEFAULT_USERS[key])
    if name is None or not site.multi_user or os.geteuid() != 0:
        return {}
    try:
        pw = pwd.getpwnam(name)
    except KeyError:
        raise KeyError(f"{key}: no user {name} on this host") from None
    return {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}


def workdir(site, key: str, cwd: str) -> str:
    """Where the program starts: `cwd` when it runs as this process, else / (another user
    may not reach the caller's directory)."""
    return cwd if not identity(site, key) else "/"


def isdir_for(site, user: str):
    """os.path.isdir as `user` sees it: on a multi-user site served by root, a directory
    behind one the user may not search is no directory (qsub -o would otherwise tell a
    user what lies in /root).  Mode bits only (not ACLs)."""
    if not site.multi_user or os.geteuid() != 0 or user == "root":
        return os.path.isdir
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        return lambda path: False
    groups = set(os.getgrouplist(user, pw.pw_gid))

    def searchable(st: os.stat_result) -> bool:
        bit = (stat.S_IXUSR if st.st_uid == pw.pw_uid else stat.S_IXGRP if st.st_gid in groups
               else stat.S_IXOTH)
        return stat.S_ISDIR(st.st_mode) and bool(st.st_mode & bit)

    def isdir(path: str) -> bool:
        parts = os.path.normpath(path).split("/")
        try:
            return all(searchable(os.stat("/".join(parts[:k]) or "/")) for k in range(1, len(parts))) \
                and os.path.isdir(path)
        except OSError:
            return False
    return isdir
