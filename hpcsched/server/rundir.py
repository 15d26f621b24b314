"""What a run of a job is given before its wrapper starts: its directory, the files in it,
and the paths of its output and error files.

A run directory is the owner's on a multi-user site, so nothing in it is trusted: the
levels above it are the server's (0711), a file is written afresh under a new name and
renamed into place (never through a link, never into a file that was there), and a
directory is checked to be one itself, not a link to one.
"""
from __future__ import annotations

import errno
import json
import os
import pwd
import stat
from pathlib import Path

from ..core.jobs import Job
from ..pbs import cobalt, common
from ..store.layout import INTERACTIVE
from . import privilege, staging

COBALT_NODES = "cobalt_nodes"  # a Cobalt job's $COBALT_NODEFILE in its run directory


def make(d: Path, owner: privilege.Owner | None, multi: bool) -> Path:
    """Make run directory `d` (jobs/ID/runN), the owner's on a multi-user site: the levels
    above are the server's and passable (0711), nothing in them is followed."""
    for level in (d.parent.parent, d.parent):
        try:
            os.mkdir(level, 0o711 if multi else 0o777)
        except FileExistsError:
            pass
        real_dir(level)
        if multi and stat.S_IMODE(level.lstat().st_mode) != privilege.SITE_MODE:
            os.chmod(level, privilege.SITE_MODE)
    try:
        os.mkdir(d, 0o700 if owner else 0o777)
    except FileExistsError:
        pass  # a launch the server died in: the wrapper's own mkdir keeps it to one run
    real_dir(d)
    if owner:
        os.chown(d, owner.uid, owner.gid, follow_symlinks=False)
    return d


def files(job: Job, env: dict[str, str], workdir: str,
          gpus: dict[str, list[int]] | None) -> dict[str, tuple[str, int]]:
    """The files the job's wrapper reads from its run directory, name -> (text, mode): its
    script, node file (and Cobalt's, and the GPU file), staging scripts, and an interactive
    job's environment (last)."""
    x = job.extra
    out = {"script": (x.get("script", ""), 0o700)}
    # (a line per processor asked for: an exclusive job holds all of its nodes' cores)
    per = job.request.ppn if job.request.exclusive else None
    out["nodes"] = ("".join(f"{n}\n" * (per or max(1, len(c))) for n, c in zip(job.nodes, job.cores)), 0o600)
    if "cobalt" in x:  # (Cobalt's node file: a node a line)
        out[COBALT_NODES] = ("".join(f"{n}\n" for n in job.nodes), 0o600)
    if gpus:
        out["gpus"] = ("".join(f"{n}-gpu{i}\n" for n, held in gpus.items() for i in held), 0o600)
    w = x.get("W", {})
    if w.get("stagein") or w.get("stageout"):  # (the wrapper runs them: server/staging.py)
        for name, text in zip(("stagein", "stageout"), staging.scripts(w.get("stagein", ""), w.get("stageout", ""))):
            if text:
                out[name] = (text, 0o600)
    if x.get("interactive"):
        # the waiting `qsub -I` runs the session under the same wrapper, on the caller's
        # terminal: it needs only the environment, written last
        env["PBS_ENVIRONMENT"] = "PBS_INTERACTIVE"
        env["SHELL"] = x.get("shell") or env.get("PBS_O_SHELL") or "/bin/sh"  # the caller's own
        out[INTERACTIVE] = (json.dumps({"env": env, "workdir": workdir}), 0o600)
    return out


def write(d: Path, given: dict[str, tuple[str, int]], owner: privilege.Owner | None) -> None:
    """Write the run directory's files with the owner's rights (OSError: the job cannot start)."""
    for name, (text, mode) in given.items():
        put(d / name, text, owner, mode)


def streams(job: Job, owner: privilege.Owner | None, flavor: str) -> tuple[str, str, str]:
    """(output file, error file, the file the job's stderr goes to) by -o, -e, -j, -k."""
    x = job.extra
    where = owner.home if owner else home(job)
    submit_dir = x.get("submit_dir") or x.get("workdir") or where  # default files go where qsub ran
    seq = common.output_seq(job, flavor)
    out = _path(x.get("output"), submit_dir, f"{job.name}.o{seq}")
    err = _path(x.get("error"), submit_dir, f"{job.name}.e{seq}")
    if "cobalt" in x:  # (<jobid>.output and .error, $jobid in the paths given)
        out, err = cobalt.streams(job)
    keep = x.get("keep", "n")  # -k o/e: that stream stays in the owner's home instead
    if "o" in keep:
        out = os.path.join(where, f"{job.name}.o{seq}")
    if "e" in keep:
        err = os.path.join(where, f"{job.name}.e{seq}")
    return out, err, out if x.get("join", "n") == "oe" else err


def home(job: Job) -> str:
    """The owner's home directory: $HOME as qsub saw it (jobs run as the server's user, so
    the submitter's own view), else the password database's, else the server's."""
    given = job.extra.get("variables", {}).get("PBS_O_HOME")
    if given:
        return given
    try:
        return pwd.getpwnam(job.owner).pw_dir
    except KeyError:
        return os.path.expanduser("~")


def real_dir(path: Path) -> None:
    """OSError unless `path` is a directory itself (not a link to one)."""
    if not stat.S_ISDIR(path.lstat().st_mode):
        raise NotADirectoryError(errno.ENOTDIR, f"{path.name} is not a directory")


def put(path: Path, text: str, owner: privilege.Owner | None, mode: int = 0o600) -> None:
    """Write a file of the run directory afresh: never through a link or into a file that
    was already there (the directory may be the owner's), then give it to the owner."""
    tmp = path.with_name(f".{path.name}.new")
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        os.write(fd, text.encode("utf-8", errors="surrogateescape"))
        os.fchmod(fd, mode)
        if owner:
            os.fchown(fd, owner.uid, owner.gid)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _path(given: str | None, workdir: str, default: str) -> str:
    """An output or error file: -o/-e's path, or the default name in the directory it names
    (ending in / or an existing directory, as PBS takes both), else in `workdir`."""
    if not given:
        return os.path.join(workdir, default)
    return os.path.join(given, default) if given.endswith("/") or os.path.isdir(given) else given
