"""A site's directory and the names inside it that the store, the commands and the server
share (the job directory protocol).  The commands' front door imports this before anything
else, so it imports nothing but `os`.

    $HPCSCHED_HOME/jobs/ID/runN/   one directory per run of a job: the server's wrapper
        started/                   made by the wrapper (mkdir is atomic: one launch runs)
        pid, status                the job's pid first, its exit status last, each atomic
        interactive.json           an interactive job's environment, for its `qsub -I`
"""
import os

INTERACTIVE = "interactive.json"


def home() -> str:
    """The site directory: $HPCSCHED_HOME, else a per-user directory that needs no root."""
    if os.environ.get("HPCSCHED_HOME"):
        return os.environ["HPCSCHED_HOME"]
    data = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(data, "hpcsched")


WRAPPER = (  # $1 job dir, $2 shell, $3 script: pid first, status last, both atomically
    # mkdir is atomic: if a restarted server launches a job whose first launch it could
    # not see, only one of the two wrappers runs it
    'mkdir "$1/started" 2>/dev/null || exit 0\n'
    'echo $$ > "$1/pid.tmp" && mv "$1/pid.tmp" "$1/pid" || exit 127\n'
    # signals sent to the job's group are for the job: the wrapper outlives them to record
    # its status (caught, not ignored, so the job still gets the default handling)
    "trap : HUP INT QUIT TERM USR1 USR2\n"
    '"$2" "$3"\n'
    's=$?\n'
    'echo $s > "$1/status.tmp" && mv "$1/status.tmp" "$1/status"\n'
    'exit $s\n')
