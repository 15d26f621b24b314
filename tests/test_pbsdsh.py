"""pbsdsh: a program on each of a job's vnodes, as Torque's distributed shell runs it."""
import os
import signal
import subprocess
import sys
import time

import pytest

from hpcsched.pbs.pbsdsh import PBSDSH

SHOW = ["sh", "-c", 'echo "$PBS_VNODENUM $PBS_NODENUM $PBS_TASKNUM"']


@pytest.fixture
def job(tmp_path, monkeypatch):
    """Inside a job of 2 nodes x 2 processors (its node file as the server writes it)."""
    nodes = tmp_path / "nodes"
    nodes.write_text("node01\nnode01\nnode02\nnode02\n")
    monkeypatch.setenv("PBS_ENVIRONMENT", "PBS_BATCH")
    monkeypatch.setenv("PBS_NODEFILE", str(nodes))
    monkeypatch.delenv("HPCSCHED_HOME", raising=False)  # (no site to read a launcher from: this host)
    return nodes


def lines(capfd) -> list[str]:
    return sorted(capfd.readouterr().out.splitlines())


@pytest.mark.parametrize("options,shown", [
    ([], ["0 0 2", "1 0 3", "2 1 4", "3 1 5"]),  # every vnode
    (["-u"], ["0 0 2", "2 1 3"]),  # every node, its first vnode
    (["-c", "3"], ["0 0 2", "1 0 3", "2 1 4"]),
    (["-u", "-c", "1"], ["0 0 2"]),
    (["-n", "2"], ["2 1 2"]),
    (["-u", "-n", "1"], ["2 1 2"]),
    (["-h", "node02"], ["2 1 2"]),
    (["-h", "node02/1"], ["3 1 2"]),
    (["-s", "-o"], ["0 0 2", "1 0 3", "2 1 4", "3 1 5"])])
def test_the_program_runs_on_the_vnodes_asked_for(job, capfd, options, shown):
    assert PBSDSH([*options, *SHOW]) == 0
    assert lines(capfd) == shown


def test_tasks_run_at_once_or_one_after_another(job, capfd):
    began = time.time()
    assert PBSDSH(["sleep", "0.5"]) == 0
    assert time.time() - began < 1.5  # (four at once)
    began = time.time()
    assert PBSDSH(["-s", "-c", "2", "sleep", "0.5"]) == 0
    assert time.time() - began >= 1.0


def test_a_task_that_fails_is_named_and_pbsdsh_still_ends_well(job, capfd):
    # (as Torque's pbsdsh, whose status says only that every task was spawned and ended)
    handlers = [signal.getsignal(s) for s in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM)]
    assert PBSDSH(["sh", "-c", 'exit $((PBS_VNODENUM == 1 ? 3 : 0))']) == 0
    assert capfd.readouterr().err == "pbsdsh: task 1 exit status 3\n"
    assert PBSDSH(["-v", "-n", "0", "true"]) == 0
    assert capfd.readouterr().err == "pbsdsh: spawned task 0\npbsdsh: task 0 exit status 0\n"
    assert PBSDSH(["-s", "-v", "-c", "2", "false"]) == 0  # (each told once, in turn)
    assert capfd.readouterr().err == ("pbsdsh: spawned task 0\npbsdsh: task 0 exit status 1\n"
                                      "pbsdsh: spawned task 1\npbsdsh: task 1 exit status 1\n")
    assert PBSDSH(["-n", "0", "/nonexistent/program"]) == 0
    assert "pbsdsh: spawn failed on node 0: /nonexistent/program: No such file or directory" in capfd.readouterr().err
    assert [signal.getsignal(s) for s in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM)] == handlers  # (its caller's again)


@pytest.mark.parametrize("argv,status,message", [
    (["-n", "4", "true"], 1, "pbsdsh: only 4 nodes available"),
    (["-u", "-c", "3", "true"], 1, "pbsdsh: only 2 nodes available"),
    (["-h", "node09", "true"], 1, "pbsdsh: node09 not found"),
    (["-h", "node01/2", "true"], 1, "pbsdsh: node01/2 not found"),
    (["-c", "2", "-n", "1", "true"], 2, "-c and -n cannot be given together"),
    (["-c", "0", "true"], 2, "illegal -c value '0'"),
    (["-n", "x", "true"], 2, "illegal -n value 'x'"),
    (["-q", "true"], 2, "pbsdsh"),
    ([], 2, "give a program to run")])
def test_what_pbsdsh_cannot_do_is_one_line(job, capfd, argv, status, message):
    assert PBSDSH(argv) == status
    assert message in capfd.readouterr().err


def test_outside_a_job_or_without_its_node_file(job, capfd, monkeypatch):
    job.write_text("")
    assert PBSDSH(["true"]) == 1 and "names no node" in capfd.readouterr().err
    monkeypatch.setenv("PBS_NODEFILE", str(job.parent / "gone"))
    assert PBSDSH(["true"]) == 1 and "cannot read PBS_NODEFILE" in capfd.readouterr().err
    monkeypatch.delenv("PBS_ENVIRONMENT")
    assert PBSDSH(["true"]) == 1 and capfd.readouterr().err == "pbsdsh: not executing under PBS\n"


def test_a_signal_to_pbsdsh_reaches_its_tasks(job, tmp_path):
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    code = "from hpcsched.pbs.pbsdsh import PBSDSH; PBSDSH(['-c', '2', 'sleep', '3172'])"
    p = subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 10
    while _sleeps() < 2 and time.time() < deadline:
        time.sleep(0.05)
    p.send_signal(signal.SIGTERM)
    assert p.wait(10) == 1 and "pbsdsh: killing task 0 signal 15" in p.stderr.read()
    deadline = time.time() + 10
    while _sleeps() and time.time() < deadline:
        time.sleep(0.05)
    assert _sleeps() == 0


def _sleeps() -> int:
    n = 0
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if f.read() == b"sleep\x003172\x00":
                    with open(f"/proc/{pid}/stat") as g:
                        n += g.read().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            continue
    return n


def test_on_a_site_with_a_command_launcher_each_task_goes_through_it_to_its_node(job, rig, capfd):
    config = rig / "home" / "config.toml"
    config.write_text('launcher = ["sh", "-c", "echo via {host}; {command}"]\n' + config.read_text())
    assert PBSDSH(["-u", *SHOW]) == 0
    assert lines(capfd) == ["0 0 2", "2 1 3", "via node01", "via node02"]


def test_pbs_tmrsh_runs_a_shell_line_on_a_host_of_the_job(job, capfd, monkeypatch):
    """On a site whose nodes are this host, pbs_tmrsh (an MPI launcher's remote shell) runs
    the line here, with its words joined as ssh joins them, and exits with its status."""
    from hpcsched.pbs.pbsdsh import PBS_TMRSH
    monkeypatch.setenv("HPCSCHED_USER", "alice")
    assert PBS_TMRSH(["node02", "echo", "'a  b'", "$PBS_ENVIRONMENT"]) == 0
    assert capfd.readouterr().out == "a  b PBS_BATCH\n"
    assert PBS_TMRSH(["-n", "node01", "-l", "alice", "exit 3"]) == 3
    for argv, status, message in ((["node09", "true"], 1, "pbs_tmrsh: node09 is not a host of this job\n"),
                                  (["-l", "bob", "node01", "true"], 1, "pbs_tmrsh: bob: only the job's owner\n"),
                                  (["node01"], 2, "pbs_tmrsh: give a command\n"),
                                  ([], 2, "pbs_tmrsh: give a host and a command\n")):
        assert PBS_TMRSH(argv) == status
        assert capfd.readouterr().err.startswith(message)
    monkeypatch.delenv("PBS_ENVIRONMENT")
    assert PBS_TMRSH(["node01", "true"]) == 1 and capfd.readouterr().err == "pbs_tmrsh: not executing under PBS\n"
