"""`hpcsched node`, the node side of a cluster (server/node.py), asked directly as the server
asks it over ssh: one request a process, answers one JSON line, errors one line."""
import json
import os
import pwd
import subprocess
import sys
import time
from pathlib import Path

import pytest

from multiuser import make_users, drop_users, needs_root, new_base

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NODE = [sys.executable, os.path.join(ROOT, "bin", "hpcsched"), "node"]


def node(spool: Path, *words: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([*NODE, "--spool", str(spool), *words], input=stdin, capture_output=True, text=True,
                          timeout=30)


def spec(tmp: Path, script: str, **more) -> str:
    return json.dumps({"env": {"PATH": "/usr/bin:/bin"}, "files": {"script": [script, 0o700], "nodes": ["n1\n", 0o600]},
                       "paths": {"PBS_NODEFILE": "nodes"}, "stdout": str(tmp / "out"), "stderr": str(tmp / "err"),
                       "workdir": str(tmp), **more})


def ended(spool: Path, key: str, timeout: float = 20) -> dict:
    done = node(spool, "wait", key)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_run_starts_once_reports_its_end_and_is_forgotten(tmp_path):
    spool = tmp_path / "spool"
    first = node(spool, "run", "abc.5.0", stdin=spec(tmp_path, "echo out $PBS_NODEFILE; echo err >&2; exit 4"))
    assert first.returncode == 0, first.stderr
    started = json.loads(first.stdout)
    again = node(spool, "run", "abc.5.0", stdin=spec(tmp_path, "echo a second start"))
    assert json.loads(again.stdout) == started  # (never a second start)
    seen = ended(spool, "abc.5.0")
    assert seen["state"] == "ended" and seen["status"] == 4 and seen["pid"] == started["pid"]
    assert (tmp_path / "out").read_text() == f"out {spool}/abc.5.0/run/nodes\n"
    assert (tmp_path / "err").read_text() == "err\n"
    assert json.loads(node(spool, "list").stdout) == {"keys": ["abc.5.0"]}
    assert node(spool, "forget", "abc.5.0").returncode == 0
    assert json.loads(node(spool, "status", "abc.5.0").stdout) == {"abc.5.0": {"state": "none"}}


def test_a_run_gets_no_signal_blocked(tmp_path):
    """The keeper waits for SIGCHLD with it blocked: its job must not inherit that (dash,
    the wrapper's shell, clears what it inherits; another /bin/sh need not)."""
    spool = tmp_path / "spool"
    node(spool, "run", "abc.4.0", stdin=spec(tmp_path, f"sleep 60 & echo $! > {tmp_path}/sleep; wait"))
    for _ in range(200):
        if (tmp_path / "sleep").exists() and (tmp_path / "sleep").read_text().strip():
            break
        time.sleep(0.05)
    pid = int((tmp_path / "sleep").read_text())
    blocked = [line.split()[1] for line in open(f"/proc/{pid}/status") if line.startswith("SigBlk:")]
    assert blocked == ["0000000000000000"]
    node(spool, "signal", "abc.4.0", "9")
    assert ended(spool, "abc.4.0")["state"] == "ended"


def test_a_run_past_its_lease_is_killed_by_its_keeper(tmp_path):
    spool = tmp_path / "spool"
    started = json.loads(node(spool, "run", "abc.6.0", stdin=spec(tmp_path, "sleep 60", lease=1.0)).stdout)
    renewed = node(spool, "status", "--lease", "2", "abc.6.0")
    assert json.loads(renewed.stdout)["abc.6.0"]["state"] == "running"
    time.sleep(1.2)  # (past the first lease, within the renewed one)
    assert json.loads(node(spool, "status", "abc.6.0").stdout)["abc.6.0"]["state"] == "running"
    seen = ended(spool, "abc.6.0")
    assert seen["fenced"] and seen["status"] is None and seen["pid"] == started["pid"]


def test_signal_and_cleanup_reach_every_process_of_a_run(tmp_path):
    spool = tmp_path / "spool"
    script = f"trap 'echo usr1 >> {tmp_path}/got' USR1; touch {tmp_path}/ready; " \
             f"while [ ! -e {tmp_path}/go ]; do sleep 0.1; done; setsid sleep 300 & echo $! > {tmp_path}/left"
    node(spool, "run", "abc.7.0", stdin=spec(tmp_path, script))
    for _ in range(100):
        if (tmp_path / "ready").exists():
            break
        time.sleep(0.05)
    assert node(spool, "signal", "abc.7.0", "10").returncode == 0
    for _ in range(100):
        if (tmp_path / "got").exists():
            break
        time.sleep(0.05)
    assert (tmp_path / "got").read_text() == "usr1\n"
    (tmp_path / "go").write_text("")
    assert ended(spool, "abc.7.0")["status"] == 0
    left = int((tmp_path / "left").read_text())
    killed = json.loads(node(spool, "cleanup", "abc.7.0").stdout)["abc.7.0"]["killed"]
    assert killed and killed[0].startswith(f"{left} ")
    time.sleep(0.1)
    assert not os.path.exists(f"/proc/{left}") or open(f"/proc/{left}/stat").read().split(")")[1].split()[0] == "Z"


@pytest.mark.parametrize("words, stdin, said", [
    (["run", "../../etc"], "{}", "not a run's key"),
    (["run", "abc.1.0"], "not json", "the run's spec is not JSON"),
    (["run", "abc.1.0"], '{"env": {}}', "the run's spec lacks env or files"),
    (["run", "abc.1.0"], '{"env": {}, "files": {"../x": ["", 384]}, "stdout": "/dev/null"}', "not a file of a run"),
    (["status", "--lease", "-1", "abc.1.0"], "", "not a lease"),
    (["signal", "abc.1.0", "TERM"], "", "not a signal"),
    (["task", "abc.1.0", "true"], "", "usage: hpcsched node task"),
    (["reboot"], "", "unknown request"),
    ([], "", "usage: hpcsched node"),
])
def test_a_bad_request_is_one_line_and_status_2(tmp_path, words, stdin, said):
    done = node(tmp_path / "spool", *words, stdin=stdin)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith(f"hpcsched node: {said}") and done.stderr.count("\n") == 1


@needs_root
def test_as_root_a_run_is_its_owners(tmp_path):
    """The server's ssh reaches nodes as root on a multi-user site: each run is its owner's
    (the process, its run directory, its output), and a path the owner may not write is
    the run's failure, said in one line."""
    base = new_base()
    made = make_users(base)
    try:
        alice = pwd.getpwnam("hpcst_alice")
        spool, out = base / "spool", Path(alice.pw_dir)
        os.chmod(tmp_path, 0o755)
        text = json.dumps({"env": {"PATH": "/usr/bin:/bin"}, "files": {"script": ["id -un; touch $TMPDIR/x", 0o700]},
                           "owner": "hpcst_alice", "stdout": str(out / "o"), "stderr": str(out / "e"),
                           "workdir": alice.pw_dir})
        assert node(spool, "run", "abc.8.0", stdin=text).returncode == 0
        seen = ended(spool, "abc.8.0")
        assert seen["status"] == 0, (out / "e").read_text()
        assert (out / "o").read_text() == "hpcst_alice\n" and (out / "o").stat().st_uid == alice.pw_uid
        assert (spool / "abc.8.0" / "run").stat().st_uid == alice.pw_uid
        assert (spool / "abc.8.0" / "started.json").stat().st_uid == 0  # (the keeper's own: root's)
        root_only = json.loads(text)
        root_only["stdout"] = str(tmp_path / "root-only" / "o")
        (tmp_path / "root-only").mkdir(mode=0o700)
        refused = node(spool, "run", "abc.9.0", stdin=json.dumps(root_only))
        assert refused.returncode == 1 and refused.stderr.startswith("hpcsched node: the job could not start: ")
        assert not (tmp_path / "root-only" / "o").exists()
        nobody = node(spool, "run", "abc.10.0", stdin=text.replace("hpcst_alice", "hpcst_nobody_here"))
        assert nobody.returncode == 1 and nobody.stderr == "hpcsched node: no such user on this host: hpcst_nobody_here\n"
        node(spool, "cleanup", "abc.8.0", "abc.9.0")
    finally:
        drop_users(made)
