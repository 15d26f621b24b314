"""Jobs on other hosts over ssh (`launcher = "ssh"`): the server's side (server/remote.py)
and the node's (server/node.py), played by a real server and the real commands.

Each scenario runs twice where it can: over `fakessh.py` (ssh's stand-in: the "host" is
this one, a host in a file does not answer; needs nothing), and over real OpenSSH to real
network namespaces, an sshd in each (needs root, `ip` and sshd: skipped, saying which is
missing, where they are not).
"""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cluster import Fake, Namespaces, alive, missing, runs, site, start_server
from hpcsched.pbs import accounting

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "bin")


@pytest.fixture(params=["fake", "netns"])
def cluster(request, tmp_path, monkeypatch):
    """A site whose nodes are hosts reached over ssh, its server started by `start()`:
    (env, home, work, start, hosts)."""
    if request.param == "netns":
        why = missing()
        if why:
            pytest.skip(f"network namespaces with sshd: {why}")
        hosts = Namespaces(tmp_path)
    else:
        hosts = Fake(tmp_path)
    servers, spool = [], tmp_path / "spool"
    try:
        home, env, work, spool = site(tmp_path, hosts)
        for key in ("HPCSCHED_HOME", "HPCSCHED_USER"):
            monkeypatch.setenv(key, env[key])
        monkeypatch.delenv("HPCSCHED_FLAVOR", raising=False)

        def start():
            servers.append(start_server(home, env, tmp_path / "server.log"))
            return servers[-1]

        yield env, home, work, start, hosts
    finally:
        for p in servers:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.wait(10)
        left = runs(spool)
        for pid in left:
            with_kill(pid)
        hosts.close()
        assert not left, f"processes of jobs left on the nodes: {left}"


def with_kill(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


def cmd(env, work, *argv, stdin=None):
    return subprocess.run([os.path.join(BIN, argv[0]), *argv[1:]], input=stdin, capture_output=True,
                          text=True, env=env, cwd=work, timeout=60)


def state(env, work, jid) -> dict:
    out = cmd(env, work, "qstat", "-f", "-1", jid).stdout
    found = {}
    for line in out.splitlines():
        k, _, v = line.strip().partition(" = ")
        found[k] = v
    return found


def wait_for(env, work, jid, states="C", timeout=30.0) -> dict:
    end = time.time() + timeout
    while time.time() < end:
        s = state(env, work, jid)
        if s.get("job_state") in states:
            return s
        time.sleep(0.2)
    raise AssertionError(f"job {jid} never reached {states}: {state(env, work, jid)}")


def until(check, timeout=30.0, what=""):
    end = time.time() + timeout
    while not check():
        assert time.time() < end, f"never: {what}"
        time.sleep(0.1)


def test_a_two_host_job_reads_its_node_file_and_reaches_both_hosts_with_pbsdsh(cluster):
    env, home, work, start, hosts = cluster
    start()
    a, b = hosts.hosts
    show = "sh -c 'echo $PBS_NODENUM $PBS_TASKNUM $FAKESSH_HOST'"
    jid = cmd(env, work, "qsub", "-N", "two", "-l", "nodes=2:ppn=2,walltime=60",
              stdin=f"cat $PBS_NODEFILE; echo ---; pbsdsh -u {show} | sort; echo err >&2\n").stdout.strip()
    s = wait_for(env, work, jid)
    assert s["exit_status"] == "0"
    out = (work / f"two.o{jid.split('.')[0]}").read_text().split("---\n")
    assert out[0].split() == [a, a, b, b]
    if hosts.name == "fake":  # (the stand-in names the host it was asked for)
        assert out[1].splitlines() == ["0 2", f"1 3 {b}"]
    else:
        assert [line.split()[:2] for line in out[1].splitlines()] == [["0", "2"], ["1", "3"]]
    assert (work / f"two.e{jid.split('.')[0]}").read_text() == "err\n"
    kinds = [e.kind for e in accounting.read(home) if e.job_id == jid]
    assert kinds == ["Q", "S", "E"]
    ended = [e for e in accounting.read(home) if e.job_id == jid and e.kind == "E"][0]
    assert ended.fields["exec_host"].startswith(f"{a}/")


def test_walltime_and_qdel_kill_a_job_that_ignores_TERM_on_its_host_and_all_it_started(cluster):
    env, home, work, start, hosts = cluster
    start()
    stubborn = "trap '' TERM; sleep 300 & echo $$ $! > {}; wait\n"
    over = cmd(env, work, "qsub", "-l", "walltime=2", stdin=stubborn.format(work / "over")).stdout.strip()
    gone = cmd(env, work, "qsub", "-l", "walltime=60", stdin=stubborn.format(work / "gone")).stdout.strip()
    until(lambda: (work / "gone").exists() and (work / "over").exists(), what="both jobs started")
    pids = [int(p) for p in (work / "gone").read_text().split()]
    assert all(map(alive, pids))
    assert cmd(env, work, "qdel", gone).returncode == 0
    assert wait_for(env, work, gone)["exit_status"] == "265"  # (TERM ignored: KILL after the grace)
    until(lambda: not any(map(alive, pids)), 5, "every process of the deleted job gone")
    assert wait_for(env, work, over)["exit_status"] == "265"
    assert not any(map(alive, (int(p) for p in (work / "over").read_text().split())))
    said = (work / f"STDIN.e{over.split('.')[0]}").read_text()
    assert said.startswith("=>> PBS: job killed: walltime ") and "exceeded limit 2" in said
    ended = {e.job_id: e.fields["Exit_status"] for e in accounting.read(home) if e.kind == "E"}
    assert ended == {over: "265", gone: "265"}


def test_a_memory_limit_and_the_cleanup_of_what_a_job_leaves_hold_on_its_host(cluster):
    env, home, work, start, hosts = cluster
    start()
    big = cmd(env, work, "qsub", "-l", "mem=50mb,walltime=60",
              stdin=f"{sys.executable} -c 'import time; x = bytearray(200 << 20); time.sleep(60)'\n").stdout.strip()
    left = cmd(env, work, "qsub", "-l", "walltime=60",
               stdin=f"setsid sleep 300 < /dev/null > /dev/null 2>&1 & echo $! > {work / 'left'}\n").stdout.strip()
    s = wait_for(env, work, big)
    assert s["exit_status"] in ("271", "265")
    assert "mem" in (work / f"STDIN.e{big.split('.')[0]}").read_text()
    assert wait_for(env, work, left)["exit_status"] == "0"
    until(lambda: not alive(int((work / "left").read_text())), 5, "the job's leftover killed")


def test_a_dropped_connection_leaves_the_job_running_and_the_server_reattaches(cluster):
    env, home, work, start, hosts = cluster
    start()
    jid = cmd(env, work, "qsub", "-l", "walltime=60",
              stdin=f"trap 'touch {work / 'usr1'}' USR1; echo $$ > {work / 'pid'}; "
                    f"while [ ! -e {work / 'go'} ]; do sleep 0.1; done; exit 7\n").stdout.strip()
    until(lambda: (work / "pid").exists(), what="the job started")
    time.sleep(1.5)  # (its waiter connected)
    assert hosts.drop(hosts.spool) >= 1
    time.sleep(1.5)
    assert alive(int((work / "pid").read_text()))
    # qsig reaches it on its host, over a connection of its own
    assert cmd(env, work, "qsig", "-s", "USR1", jid).returncode == 0
    until(lambda: (work / "usr1").exists(), 10, "the job got SIGUSR1")
    (work / "go").write_text("")
    s = wait_for(env, work, jid)
    assert s["exit_status"] == "7"
    assert [e.kind for e in accounting.read(home) if e.job_id == jid] == ["Q", "S", "E"]


def test_a_server_restart_finds_the_job_running_on_its_host_and_does_not_start_it_again(cluster):
    env, home, work, start, hosts = cluster
    first = start()
    jid = cmd(env, work, "qsub", "-l", "walltime=60",
              stdin=f"echo $$ >> {work / 'starts'}; while [ ! -e {work / 'go'} ]; do sleep 0.1; done; exit 3\n").stdout.strip()
    until(lambda: (work / "starts").exists(), what="the job started")
    time.sleep(1.0)
    first.send_signal(signal.SIGKILL)
    first.wait()
    start()
    time.sleep(2.0)
    (work / "go").write_text("")
    assert wait_for(env, work, jid)["exit_status"] == "3"
    assert len((work / "starts").read_text().split()) == 1
    assert [e.kind for e in accounting.read(home) if e.job_id == jid] == ["Q", "S", "E"]


def test_a_host_that_stops_answering_is_down_and_its_job_requeued_never_running_twice(cluster):
    env, home, work, start, hosts = cluster
    start()
    a, b = hosts.hosts
    script = f"echo $$ >> {work / 'starts'}; echo $(cat $PBS_NODEFILE) >> {work / 'where'}; sleep 8\n"
    jid = cmd(env, work, "qsub", "-l", f"nodes={a},walltime=60", stdin=script).stdout.strip()
    until(lambda: (work / "starts").exists(), what="the job started")
    first = int((work / "starts").read_text())
    hosts.down(a)
    # node_check_rate (3 s) without a word: down, with why; the job requeued once its
    # lease there has run out (its keeper killed it)
    until(lambda: a in cmd(env, work, "pbsnodes", "-l").stdout, 20, "the host down")
    listed = cmd(env, work, "pbsnodes", "-l").stdout
    assert "down" in listed and "unreachable over ssh" in listed, listed
    until(lambda: state(env, work, jid).get("job_state") == "Q", 20, "the job requeued")
    assert not alive(first)  # (killed on its host by the end of its lease: never two at once)
    assert [e.kind for e in accounting.read(home) if e.job_id == jid] == ["Q", "S", "R"]
    hosts.up(a)
    until(lambda: a not in cmd(env, work, "pbsnodes", "-l").stdout, 20, "the host up again")
    assert wait_for(env, work, jid, timeout=40)["exit_status"] == "0"
    assert len((work / "starts").read_text().split()) == 2
    assert [e.kind for e in accounting.read(home) if e.job_id == jid] == ["Q", "S", "R", "S", "E"]


def test_a_job_sent_to_a_host_that_does_not_answer_waits_for_it_and_the_node_says_why(cluster):
    env, home, work, start, hosts = cluster
    a, b = hosts.hosts
    hosts.down(b)
    start()
    jid = cmd(env, work, "qsub", "-l", f"nodes={b},walltime=60", stdin="echo ran\n").stdout.strip()
    until(lambda: b in cmd(env, work, "pbsnodes", "-l").stdout, 20, "the host down")
    assert "unreachable over ssh" in cmd(env, work, "pbsnodes", "-l").stdout
    assert state(env, work, jid)["job_state"] == "Q"
    hosts.up(b)
    assert wait_for(env, work, jid, timeout=40)["exit_status"] == "0"
    assert (work / f"STDIN.o{jid.split('.')[0]}").read_text() == "ran\n"


@pytest.mark.parametrize("then_down", [False, True])
def test_a_start_whose_answer_was_lost_is_never_run_twice(tmp_path, monkeypatch, then_down):
    """The connection breaks after the node started the run (its answer lost): the server
    cannot tell whether it started, so it is launched as far as anyone can tell; the host
    silent for node_check_rate is down, and the job is requeued only once the run's lease
    there has run out (its keeper killed it), however often the server's words still arrive,
    or when the host refuses the server from then on (the second try's refusal does not
    make the first try unsent)."""
    hosts = Fake(tmp_path)
    home, env, work, spool = site(tmp_path, hosts)
    monkeypatch.setenv("HPCSCHED_HOME", env["HPCSCHED_HOME"])
    a, b = hosts.hosts
    hosts.lose(a, then_down)
    server = start_server(home, env, tmp_path / "server.log")
    try:
        jid = cmd(env, work, "qsub", "-l", f"nodes={a},walltime=60",
                  stdin=f"echo $$ >> {work / 'starts'}; sleep 30\n").stdout.strip()
        until(lambda: (work / "starts").exists(), what="the run started on its host")
        first = int((work / "starts").read_text())
        until(lambda: state(env, work, jid).get("job_state") == "Q", 30, "the job requeued")
        assert not alive(first)
        assert "unreachable over ssh" in cmd(env, work, "pbsnodes", "-l").stdout
        hosts.heal()
        hosts.up(a)
        until(lambda: len((work / "starts").read_text().split()) == 2, 30, "the job started again")
        assert cmd(env, work, "qdel", jid).returncode == 0
        wait_for(env, work, jid)
        assert [e.kind for e in accounting.read(home) if e.job_id == jid][:4] == ["Q", "S", "R", "S"]
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(10)
        left = runs(spool)
        for pid in left:
            with_kill(pid)
        assert not left


def test_the_prejob_check_runs_on_each_node_over_its_connection(cluster):
    """prejob_check (PSC's node scan) on the `ssh` launcher's hosts runs on the node: a
    failing one puts it on the bad list, and the job waits for a good node."""
    env, home, work, start, hosts = cluster
    a, b = hosts.hosts
    config = home / "config.toml"
    check = f"echo {{node}} ${{SSH_CONNECTION:+ssh}}${{FAKESSH_HOST:+fake}} >> {work}/checked; test ! -e {work}/bad-{{node}}"
    config.write_text(f"prejob_check = {json.dumps(['sh', '-c', check])}\n" + config.read_text())
    (work / f"bad-{b}").write_text("")
    start()
    ok = cmd(env, work, "qsub", "-l", f"nodes={a},walltime=60", stdin="true\n").stdout.strip()
    assert wait_for(env, work, ok)["exit_status"] == "0"
    waits = cmd(env, work, "qsub", "-l", f"nodes={b},walltime=60", stdin="true\n").stdout.strip()
    until(lambda: "bad" in cmd(env, work, "pbsnodes", "-l").stdout, 20, "the bad node listed")
    assert state(env, work, waits)["job_state"] == "Q"
    assert (work / "checked").read_text().split() == [a, hosts.name.replace("netns", "ssh"), b,
                                                      hosts.name.replace("netns", "ssh")]


def test_a_two_host_jobs_output_accounting_and_cleanup_match_a_one_host_sites(cluster, tmp_path):
    """The same job on the cluster and on a site whose nodes (named alike) are all this
    host: the same output, the same accounting record (but what it used), and what it
    left behind killed in both."""
    env, home, work, start, hosts = cluster
    start()
    script = ("echo $PBS_NUM_NODES $PBS_NP $PBS_NUM_PPN $PBS_TASKNUM $PBS_NODENUM $PBS_QUEUE; cat $PBS_NODEFILE; "
              "pwd; test -d $TMPDIR && echo tmpdir; setsid sleep 300 < /dev/null > /dev/null 2>&1 & "
              "echo $! > {}/left; exit 3\n")
    local = tmp_path / "local"
    local.mkdir()
    lhome, lenv, lwork, _ = site(local, hosts, "server_interval = 0.5\nkill_grace = 1\n")
    config = lhome / "config.toml"
    config.write_text(config.read_text().replace('launcher = "ssh"\n', ""))
    here = start_server(lhome, lenv, local / "server.log")
    try:
        seen = []
        for e, h, w in ((env, home, work), (lenv, lhome, lwork)):
            jid = cmd(e, w, "qsub", "-N", "same", "-l", "nodes=2:ppn=2,walltime=60",
                      stdin=script.format(w)).stdout.strip()
            assert wait_for(e, w, jid)["exit_status"] == "3"
            out = (w / f"same.o{jid.split('.')[0]}").read_text().replace(e["HOME"], "HOME")
            record = [r for r in accounting.read(h) if r.job_id == jid and r.kind == "E"][0]
            until(lambda: not alive(int((w / "left").read_text())), 10, "what the job left killed")
            seen.append((out, {k: v for k, v in record.fields.items()
                               if not k.startswith("resources_used") and k not in ("ctime", "qtime", "etime",
                                                                                   "start", "end", "session")}))
        assert seen[0] == seen[1]
        assert seen[0][0].split()[:5] == ["2", "4", "2", "1", "0"] and "tmpdir" in seen[0][0]
    finally:
        here.send_signal(signal.SIGTERM)
        here.wait(10)


def test_an_mpi_launchers_remote_shell_reaches_the_jobs_other_host_and_what_it_starts_ends_with_the_job(cluster):
    """pbs_tmrsh, as mpirun's rsh agent: the command line on the other host, its output
    the caller's; a daemon it leaves there is killed at the job's end."""
    env, home, work, start, hosts = cluster
    start()
    a, b = hosts.hosts
    script = (f"pbs_tmrsh {b} echo on '${{FAKESSH_HOST:-$(hostname)}}' '$PBS_JOBID'; "
              f"pbs_tmrsh -n {b} 'setsid sleep 300 < /dev/null > /dev/null 2>&1 & echo $! > {work}/daemon'; "
              f"pbs_tmrsh nowhere true; echo $?; pbs_tmrsh {b} exit 5; echo $?\n")
    jid = cmd(env, work, "qsub", "-N", "mpi", "-l", "nodes=2:ppn=1,walltime=60", stdin=script).stdout.strip()
    assert wait_for(env, work, jid)["exit_status"] == "0"
    out = (work / f"mpi.o{jid.split('.')[0]}").read_text().splitlines()
    assert out[0].split()[0] == "on" and out[0].split()[-1] == jid
    if hosts.name == "fake":
        assert out[0].split()[1] == b
    assert out[1:] == ["1", "5"]
    assert "nowhere is not a host of this job" in (work / f"mpi.e{jid.split('.')[0]}").read_text()
    daemon = int((work / "daemon").read_text())
    until(lambda: not alive(daemon), 10, "the daemon left on the other host killed with the job")


def test_a_node_an_operator_took_offline_while_it_was_unreachable_stays_offline(tmp_path, monkeypatch):
    hosts = Fake(tmp_path)
    home, env, work, spool = site(tmp_path, hosts)
    monkeypatch.setenv("HPCSCHED_HOME", env["HPCSCHED_HOME"])
    a, b = hosts.hosts
    hosts.down(a)
    server = start_server(home, env, tmp_path / "server.log")
    try:
        jid = cmd(env, work, "qsub", "-l", f"nodes={a},walltime=60", stdin="true\n").stdout.strip()
        until(lambda: "unreachable over ssh" in cmd(env, work, "pbsnodes", "-l").stdout, 20, "the node down")
        operator = dict(env, HPCSCHED_USER="root")
        assert cmd(operator, work, "hpcsched", "nodes", "--set", "offline", a).returncode == 0
        assert cmd(env, work, "pbsnodes", "-l").stdout.split()[:2] == [a, "offline"]
        hosts.up(a)
        until(lambda: "unreachable" not in cmd(env, work, "pbsnodes", "-l").stdout, 20, "its note gone")
        listed = cmd(env, work, "pbsnodes", "-l").stdout.split()
        assert listed[:2] == [a, "offline"], listed
        assert state(env, work, jid)["job_state"] == "Q"  # (waiting for the node the operator holds)
        assert cmd(operator, work, "pbsnodes", "-c", a).returncode == 0
        assert wait_for(env, work, jid)["exit_status"] == "0"
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(10)


def test_a_job_just_started_is_not_taken_for_lost_when_its_host_misses_a_look(tmp_path, monkeypatch):
    """The host answered for its other runs before, then misses the first look after a
    start: the new run is unknown there as far as the server heard, not gone (it was
    requeued, and ran twice)."""
    from hpcsched.server.loop import Server
    from hpcsched.store.site import load_site
    hosts = Fake(tmp_path)
    home, env, work, spool = site(tmp_path, hosts)
    for key in ("HPCSCHED_HOME", "HPCSCHED_USER", "FAKESSH_DOWN", "FAKESSH_LOSE"):
        monkeypatch.setenv(key, env[key])
    a, b = hosts.hosts
    first = cmd(env, work, "qsub", "-l", f"nodes={a},walltime=60", stdin="true\n").stdout.strip()
    server = Server(load_site())
    try:
        until(lambda: server.step() is not None and state(env, work, first).get("job_state") == "C", 20,
              "a first job on the host ended")
        jid = cmd(env, work, "qsub", "-l", f"nodes={a},walltime=60",
                  stdin=f"echo $$ >> {work / 'starts'}; sleep 2\n").stdout.strip()
        assert server.step() == 1  # (started on its host)
        hosts.down(a)
        for _ in range(3):
            server.step()
            time.sleep(0.2)
        assert state(env, work, jid)["job_state"] == "R"
        hosts.up(a)
        until(lambda: server.step() is not None and state(env, work, jid).get("job_state") == "C", 30,
              "the job ended")
        assert len((work / "starts").read_text().split()) == 1
        assert [e.kind for e in accounting.read(home) if e.job_id == jid] == ["Q", "S", "E"]
    finally:
        server.nodes.close()
        for pid in runs(spool):
            with_kill(pid)
