"""File staging, as Torque's and OpenPBS's `-W stagein=` and `-W stageout=` ask it.

Each item is `local_file@hostname:remote_file`: the local file is on the node the job runs
on, the remote one on `hostname`, both relative to the owner's home.  Before the job runs,
each remote file is copied to its local name (stagein); after it ends, however it ended,
each local file is copied back out (stageout).  Then, as Torque and OpenPBS do, the staged
copies are removed from the node: every staged-in file, and every staged-out file whose
copy succeeded.  A file that is its own source or destination (a shared file system, the
same host) is neither copied onto itself nor removed.

The copies are shell scripts the server writes into the run's directory and the job's
wrapper runs as the job's owner (store.layout.WRAPPER): `cp -p` where `hostname` is the
node itself (localhost or any of its names), else `scp -Bpq`.  A stagein that fails stops
the job before it runs, and the wrapper says so in `stagein_failed` (the server holds the
job: runs.Runs.watch); a stageout that fails leaves a line in the job's error file.
"""
from __future__ import annotations

import shlex

from ..pbs.attributes import parse_staging

#: a copy from (or to) `$2:$3`, `$1` the local name: cp on this node, scp elsewhere
_COPY = '''here() { case $1 in localhost|"$(hostname)"|"$(hostname -s)") return 0;; esac; return 1; }
fetch() { if here "$2"; then [ "$3" -ef "$1" ] || cp -p -- "$3" "$1"; else scp -Bpq -- "$2:$3" "$1"; fi; }
put() { if here "$2"; then [ "$1" -ef "$3" ] || cp -p -- "$1" "$3"; else scp -Bpq -- "$1" "$2:$3"; fi; }
'''


def scripts(stagein: str, stageout: str) -> tuple[str, str]:
    """(stagein script, stageout script) for the job's -W values ("" where none is asked)."""
    ins = parse_staging(stagein, "stagein") if stagein else []
    outs = parse_staging(stageout, "stageout") if stageout else []
    q = shlex.quote
    fetches = "".join(f"fetch {q(here)} {q(host)} {q(there)} || "
                      f"{{ echo {q(f'stagein of {host}:{there} to {here} failed')} >&2; exit 1; }}\n"
                      for here, host, there in ins)
    puts = "".join(f"if put {q(here)} {q(host)} {q(there)}; then [ {q(here)} -ef {q(there)} ] || rm -f -- {q(here)}; "
                   f"else echo {q(f'=>> PBS: stageout of {here} to {host}:{there} failed')} >&2; fi\n"
                   for here, host, there in outs)
    removals = "".join(f"[ {q(here)} -ef {q(there)} ] || rm -f -- {q(here)}\n" for here, _, there in ins)
    stagein = f"cd || exit 1\n{_COPY}{fetches}" if ins else ""
    stageout = f"cd || exit 0\n{_COPY}{puts}{removals}" if ins or outs else ""
    return stagein, stageout
