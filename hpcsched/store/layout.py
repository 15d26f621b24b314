"""A site's directory and the names inside it that the store, the commands and the server
share (the job directory protocol).  The commands' front door imports this before anything
else, so it imports nothing but `sys` and `posix` (built in).

    $HPCSCHED_HOME/jobs/ID/runN/   one directory per run of a job: the server's wrapper
        started/                   made by the wrapper (mkdir is atomic: one launch runs)
        pid, status                the job's pid first, its exit status last, each atomic;
        status.tmp                 the status's place, taken before the job starts and written
                                   in place at its end, so a disk that filled meanwhile still
                                   takes it (status.tmp holds it if the rename failed)
        cgroup                     the wrapper joined the run's cgroup (server/tracking.py)
        interactive.json           an interactive job's environment, for its `qsub -I`
"""
import posix
import sys

INTERACTIVE = "interactive.json"


def environ():
    """The process's environment without importing `os` (the interpreter starts without it
    under -S, and importing it is a tenth of a forwarded command's cost): `os.environ`
    once something imported it (it may have been changed since), else the start-up copy,
    bytes to bytes."""
    os = sys.modules.get("os")
    return os.environ if os is not None else posix.environ


def getenv(name: str) -> str | None:
    """An environment variable (see `environ`)."""
    env = environ()
    if env is not posix.environ:
        return env.get(name)
    value = env.get(name.encode())
    return None if value is None else value.decode(sys.getfilesystemencoding(), "surrogateescape")


def home() -> str:
    """The site directory: $HPCSCHED_HOME, else a per-user directory that needs no root."""
    if getenv("HPCSCHED_HOME"):
        return getenv("HPCSCHED_HOME")
    data = getenv("XDG_DATA_HOME")
    if not data:
        user = getenv("HOME")
        if not user:
            import pwd
            user = pwd.getpwuid(posix.getuid()).pw_dir
        data = f"{user.rstrip('/')}/.local/share"
    return f"{data.rstrip('/') or ''}/hpcsched"


#: a wrapper's exit status when another wrapper took its run first (see WRAPPER): not the job's
TAKEN = 120

WRAPPER = (  # $1 job dir, $2 shell, $3 script, then the script's arguments: pid first, status last, both atomically
    # mkdir is atomic: if a restarted server launches a job whose first launch it could
    # not see, only one of the two wrappers runs it; the other says so (TAKEN)
    f'mkdir "$1/started" 2>/dev/null || exit {TAKEN}\n'
    # the run's cgroup, when the server made one: joined before anything of the job runs
    # (the `cgroup` file says it was), its name not passed on to the job
    '[ -z "$HPCSCHED_CGROUP" ] || { echo $$ > "$HPCSCHED_CGROUP/cgroup.procs" && : > "$1/cgroup"; } 2>/dev/null\n'
    'unset HPCSCHED_CGROUP\n'
    # the status's place, taken while there is room: a job that ran always leaves its status
    """printf '%-11s\\n' running > "$1/status.tmp" || exit 127\n"""
    'echo $$ > "$1/pid.tmp" && mv "$1/pid.tmp" "$1/pid" || exit 127\n'
    # signals sent to the job's group are for the job: the wrapper outlives them to record
    # its status (caught, not ignored, so the job still gets the default handling)
    "trap : HUP INT QUIT TERM USR1 USR2\n"
    # files staged in first (server/staging.py): one that fails stops the job here, and
    # says why in stagein_failed; files staged out after the job, however it ended
    'if [ -f "$1/stagein" ] && ! sh "$1/stagein" > "$1/stagein.tmp" 2>&1; then\n'
    '  mv "$1/stagein.tmp" "$1/stagein_failed"; s=1\n'
    'else\n'
    '  rm -f "$1/stagein.tmp"\n'
    # the job's limits (server/limits.py), set for the job alone, in a subshell
    '  ( shell=$2 script=$3; shift 3; limits=$HPCSCHED_LIMITS; unset HPCSCHED_LIMITS\n'
    '    set -- $limits -- "$@"\n'
    '    while [ "$1" != -- ] && [ "$2" != -- ]; do ulimit "$1" "$2" >/dev/null 2>&1; shift 2; done\n'
    '    while [ "$1" != -- ]; do shift; done; shift; exec "$shell" "$script" "$@" )\n'
    '  s=$?\n'
    '  [ ! -f "$1/stageout" ] || sh "$1/stageout" >&2\n'
    'fi\n'
    # written in place (1<> does not truncate: no block to find on a full disk), then renamed
    """printf '%-11d\\n' "$s" 1<> "$1/status.tmp" && mv -f "$1/status.tmp" "$1/status"\n"""
    'exit $s\n')
