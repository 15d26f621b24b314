#!/usr/bin/env python3
"""ssh's stand-in for tests that need no root: `fakessh.py [-o OPT ...] HOST COMMAND...`
runs COMMAND under sh on this host, as ssh runs it on HOST.  A host named in the file
$FAKESSH_DOWN (a name a line) does not answer: exit status 255, as ssh's own failure; one
named in $FAKESSH_LOSE runs the command, but its answer is lost (255, no word: a
connection that broke after it was made); with `then-down` in that file, once, and the
host does not answer from then on."""
import os
import sys

args = sys.argv[1:]
while args and args[0].startswith("-"):
    args = args[2:] if args[0] in ("-o", "-i", "-F", "-p", "-l") else args[1:]
if len(args) < 2:
    print("fakessh: usage: fakessh.py HOST COMMAND", file=sys.stderr)
    sys.exit(255)
host, line = args[0], " ".join(args[1:])
down = os.environ.get("FAKESSH_DOWN")
if down and os.path.exists(down) and host in open(down).read().split():
    print(f"ssh: connect to host {host} port 22: Connection refused", file=sys.stderr)
    sys.exit(255)
os.environ["FAKESSH_HOST"] = host
lose = os.environ.get("FAKESSH_LOSE")
if lose and os.path.exists(lose) and host in open(lose).read().split():
    import subprocess
    subprocess.run(["sh", "-c", line], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if "then-down" in open(lose).read().split():  # (and the host is gone from then on)
        open(lose, "w").close()
        with open(down, "a") as f:
            f.write(host + "\n")
    sys.exit(255)
os.execv("/bin/sh", ["sh", "-c", line])
