"""The commands' front door: a running server answers them, else they run in-process."""
import os
import socket
import subprocess
import sys
import time

import pytest

from hpcsched.pbs import front as commands
from hpcsched.pbs.forwarded import decode_request, run_for
from hpcsched.pbs.front import encode_request
from hpcsched.store.journal import Store
from hpcsched.store.request import Request, current

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_request_round_trip_keeps_every_byte():
    env = {"A": "x=y", "EMPTY": "", "PATH": "/bin:/usr/bin"}
    script = b"#!/bin/sh\n#PBS -N a\x00b\necho \xff\n"
    data = encode_request("qsub", ["-l", "walltime=1:00", "", "-W depend=afterok:1"], "/tmp/w d", env, script)
    assert decode_request(data) == ("qsub", ["-l", "walltime=1:00", "", "-W depend=afterok:1"], "/tmp/w d",
                                    env, script, b"1")
    assert decode_request(encode_request("qstat", [], "/", {}, None)) == ("qstat", [], "/", {}, None, b"0")
    sent = encode_request("qsub", ["job.sh"], "/", {}, b"echo x\n", flag=b"2")
    assert decode_request(sent)[4:] == (b"echo x\n", b"2")
    with pytest.raises(ValueError):
        decode_request(sent.replace(b"\x002\x00echo", b"\x009\x00echo"))
    with pytest.raises(ValueError):
        decode_request(b"other\0qsub\0/\0" + b"0\0" * 3)


def serve(data: bytes) -> bytes:
    """The server's answer to `data`, on the rig's site, from its own user."""
    return run_for(data, Request(), os.environ["HPCSCHED_HOME"])


def reply(data):
    status, size, body = data.split(b"\0", 2)
    size = int(size)
    return int(status), body[:size].decode(), body[size:].decode()


def test_run_for_runs_as_the_client_and_restores_the_server(rig, tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    before_env, before_cwd, before_out = dict(os.environ), os.getcwd(), sys.stdout
    env = dict(os.environ, HPCSCHED_USER="bob", HPCSCHED_FLAVOR="openpbs", LANG="C")
    status, out, err = reply(serve(encode_request("qsub", ["-N", "fwd"], str(work), env, b"true\n")))
    assert (status, err) == (0, "") and out == "1.headnode\n"
    assert dict(os.environ) == before_env and os.getcwd() == before_cwd and sys.stdout is before_out
    status, out, _ = reply(serve(encode_request("qstat", ["-f", "1"], "/", env, None)))
    assert status == 0
    assert "Job_Owner = bob@" in out and f"PBS_O_WORKDIR={work}" in out.replace("\n\t", "")
    # the client's flavor: OpenPBS qstat without -x refuses a job id it does not know with 153
    status, out, err = reply(serve(encode_request("qstat", ["7"], "/", env, None)))
    assert status == 153 and err.startswith("qstat: Unknown Job Id 7.headnode")
    assert reply(serve(encode_request("qsub", ["-Z"], "/", env, b"")))[0] == 2


def test_a_forwarded_command_reads_and_shows_dates_in_its_callers_zone(rig):
    # (the server read `qsub -a 1200` in its own zone, so a caller's noon depended on
    # whether a server was running)
    import time
    env = dict(os.environ, TZ="Asia/Tokyo")
    before = time.strftime("%z")
    status, out, _ = reply(serve(encode_request("qsub", ["-a", "203001011200"], "/", env, b"true\n")))
    assert status == 0 and time.strftime("%z") == before  # (the server's own zone again)
    status, out, _ = reply(serve(encode_request("qstat", ["-f", "1"], "/", env, None)))
    assert "Execution_Time = Tue Jan 01 12:00:00 2030" in out
    from hpcsched.store.journaled import Batch
    from hpcsched.store.site import load_site
    batch = Batch(load_site())
    with batch.open(write=False):
        assert batch.sched.jobs[1].start_after == 1893466800.0  # (2030-01-01 03:00 UTC)


@pytest.mark.parametrize("name", ["a b", "bob@elsewhere", "x,y", "u=v", "-n", ""])
def test_a_named_user_that_is_no_user_name_is_refused_at_both_doors(rig, monkeypatch, capsys, name):
    # (it went into Job_Owner, accounting's key=value records and qstat's columns as it was)
    env = dict(os.environ, HPCSCHED_USER=name)
    status, out, err = reply(serve(encode_request("qsub", [], "/", env, b"true\n")))
    monkeypatch.setenv("HPCSCHED_USER", name)
    (rig / "job.sh").write_text("true\n")
    here = commands.run_here("qsub", ["-N", "here", str(rig / "job.sh")])
    local = capsys.readouterr()
    if not name:  # (empty: not set, the real user)
        assert (status, here) == (0, 0) and out == "1.headnode\n" and local.out == "2.headnode\n"
        return
    message = f"qsub: HPCSCHED_USER: {name!r} is not a user name"
    assert status == 1 and out == "" and err.startswith(message) and err.count("\n") == 1
    assert here == 1 and local.err.startswith(message) and local.out == ""
    status, out, _ = reply(serve(encode_request("qstat", [], "/", dict(env, HPCSCHED_USER="alice"), None)))
    assert (status, out) == (0, "")  # (nothing submitted)


def test_a_forwarded_command_runs_for_its_request_and_leaves_none_behind(rig, monkeypatch):
    """The caller, the script its client read and qterm's stop travel in one Request, set
    around the command alone: after it (also after a command's internal error) a command
    run here runs for nobody else."""
    stopped = []
    request = Request(caller="root", stop=lambda: stopped.append(True))
    assert reply(run_for(encode_request("qterm", [], "/", {}, None), request, os.environ["HPCSCHED_HOME"]))[0] == 0
    assert stopped == [True] and current() == Request()
    status, out, _ = reply(run_for(encode_request("qsub", ["job.sh"], "/", {}, b"echo sent\n", flag=b"2"),
                                   Request(caller="bob"), os.environ["HPCSCHED_HOME"]))
    assert status == 0 and current() == Request()
    status, out, _ = reply(serve(encode_request("qstat", ["-f", out.split(".")[0]], "/", {}, None)))
    assert "Job_Owner = bob@" in out and "echo sent" not in out
    assert reply(serve(encode_request("qterm", [], "/", dict(os.environ, HPCSCHED_USER="root"), None)))[2] == \
        "qterm: cannot connect to the hpcsched server (it is not running)\n"  # (nobody's stop now)
    from hpcsched.pbs import qstat
    monkeypatch.setattr(qstat, "QSTAT", lambda argv: 1 / 0)
    assert reply(run_for(encode_request("qstat", [], "/", {}, None), Request(caller="bob"),
                         os.environ["HPCSCHED_HOME"]))[2].startswith("qstat: internal error")
    assert current() == Request()


def test_run_for_refuses_what_it_must_not_run(rig):
    for prog in ("pbsyod", "rm"):
        status, _, err = reply(serve(encode_request(prog, [], "/", {}, None)))
        assert status == 1 and "not a command the server runs" in err
    assert reply(serve(b"garbage"))[0] == 1
    status, _, err = reply(serve(encode_request("qstat", [], "/no/such/dir", dict(os.environ), None)))
    assert status == 1 and "/no/such/dir" in err


def test_no_server_or_a_stale_socket_runs_the_command_here(rig):
    assert commands.forward("qstat", []) is None  # no socket at all
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(rig / "home" / commands.SOCKET))
    stale.close()  # the file stays, nobody listens: a server that died
    assert commands.forward("qstat", []) is None


PROBE = ("import sys; sys.argv = ['qstat']; from hpcsched.pbs import front as commands; "
         "status = commands.main('qstat'); "
         "print('in-process' if 'hpcsched.core.scheduler' in sys.modules else 'forwarded', status)")


def test_a_running_server_answers_without_the_client_loading_the_store(rig):
    env = dict(os.environ, PYTHONPATH=ROOT)
    probe = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=30)
    assert probe.stdout.split()[-2:] == ["in-process", "0"]
    server = subprocess.Popen([sys.executable, "-m", "hpcsched", "server"], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        sock = rig / "home" / commands.SOCKET
        for _ in range(200):
            if sock.exists():
                break
            assert server.poll() is None, server.stderr.read()
            time.sleep(0.05)
        sub = subprocess.run([os.path.join(ROOT, "bin", "qsub"), "-h"], input="true\n", capture_output=True,
                             text=True, env=env, cwd=rig, timeout=30)
        assert sub.returncode == 0 and sub.stdout == "1.headnode\n"
        probe = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=30)
        lines = probe.stdout.splitlines()
        assert lines[-1] == "forwarded 0" and any(line.startswith("1.headnode") and " H " in line for line in lines)
        bad = subprocess.run([os.path.join(ROOT, "bin", "qdel"), "99"], capture_output=True, text=True, env=env,
                             timeout=30)
        assert bad.returncode == 153 and bad.stderr == "qdel: Unknown Job Id 99.headnode\n"
    finally:
        server.terminate()
        server.wait(10)
    assert not sock.exists()


def test_a_forwarded_command_ends_at_once_with_all_its_output(rig):
    """bin/ commands answered by the server end with _exit: what the server said, however
    long (more than a pipe holds), is all written first, and the status is the server's."""
    env = dict(os.environ, PYTHONPATH=ROOT, BIG="x" * 100_000, BIGGER="y" * 120_000)
    env.pop("PYTHONUNBUFFERED", None)  # (as a user's shell has it: output buffered until flushed)
    server = subprocess.Popen([sys.executable, "-m", "hpcsched", "server"], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        for _ in range(200):
            if commands.server_answers():
                break
            assert server.poll() is None, server.stderr.read()
            time.sleep(0.05)
        sub = subprocess.run([os.path.join(ROOT, "bin", "qsub"), "-h", "-V"], input="true\n", capture_output=True,
                             text=True, env=env, cwd=rig, timeout=30)
        assert sub.returncode == 0 and sub.stdout == "1.headnode\n"
        full = subprocess.run([os.path.join(ROOT, "bin", "qstat"), "-f", "1"], capture_output=True, text=True,
                              env=env, timeout=30)
        assert full.returncode == 0 and len(full.stdout) > 220_000
        assert "BIG=" + "x" * 100_000 in full.stdout.replace("\n\t", "")
        assert full.stdout.rstrip("\n").splitlines()[-1].strip()  # (the last line is there)
        gone = subprocess.run([os.path.join(ROOT, "bin", "qsig"), "-s", "TERM", "7"], capture_output=True,
                              text=True, env=env, timeout=30)
        assert gone.returncode == 153 and gone.stderr == "qsig: Unknown Job Id 7.headnode\n"
    finally:
        server.terminate()
        server.wait(10)


def test_a_kept_batch_catches_up_with_other_writers(rig, monkeypatch):
    from hpcsched.core.jobs import Job, Request
    from hpcsched.store import journaled as batch_module
    from hpcsched.store.journaled import Batch
    from hpcsched.store.site import load_site

    site = load_site()
    kept, other = Batch(site), Batch(site)
    kept.keep()
    try:
        assert Batch.of(site) is kept and Batch.of(load_site()) is kept
        with kept.open(write=False):
            assert kept.sched.jobs == {}

        def submit(n):
            with other.open():
                for _ in range(n):
                    other.submit(Job(owner="bob", request=Request(nodes=1), walltime=60), 0.0)
                other.do("pass", 0.0)

        def fresh():
            return Batch(site).load().to_dict()

        submit(3)
        full_reads = []
        monkeypatch.setattr(kept.store, "read", lambda: full_reads.append(1) or Store.read(kept.store))
        with kept.open(write=False):
            assert kept.sched.to_dict() == fresh() and len(kept.sched.jobs) == 3
        assert full_reads == []  # read only the new journal records
        monkeypatch.setattr(batch_module, "COMPACT_AFTER", 2)
        submit(4)  # the other writer compacts: the kept batch reads everything again
        with kept.open():
            assert kept.sched.to_dict() == fresh() and len(kept.sched.jobs) == 7
            kept.do("pass", 1.0)
        assert full_reads == [1]
        with pytest.raises(RuntimeError):
            with kept.open():
                kept.sched.jobs.clear()  # a command that fails half-way through ...
                raise RuntimeError
        with kept.open(write=False):  # ... is forgotten: the store is read again
            assert kept.sched.to_dict() == fresh() and len(kept.sched.jobs) == 7
        assert full_reads == [1, 1]
    finally:
        kept.release()
    assert Batch.of(site) is not kept


def test_a_server_that_drops_the_request_is_one_line_and_status_1(rig, capsys):
    import threading
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(rig / "home" / commands.SOCKET))
    listener.listen(1)

    def drop():
        conn, _ = listener.accept()
        conn.recv(1 << 16)
        conn.close()  # dies before replying

    t = threading.Thread(target=drop)
    t.start()
    try:
        assert commands.forward("qstat", []) == 1
    finally:
        t.join(10)
        listener.close()
    assert capsys.readouterr().err == "qstat: the hpcsched server dropped the request (see qstat for its effect)\n"


def test_a_server_that_never_answers_is_one_line_after_the_timeout(rig, monkeypatch, capsys):
    import socket

    from hpcsched.pbs import client, front
    monkeypatch.setattr(client, "CLIENT_TIMEOUT", 0.3)  # (the client side: client.py)
    mute = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    mute.bind(str(rig / "home" / front.SOCKET))
    mute.listen(4)  # accepts connections into its backlog, and never answers
    try:
        assert front.forward("qstat", []) == 1
    finally:
        mute.close()
    err = capsys.readouterr().err
    assert err == ("qstat: the hpcsched server did not answer within 0.3 s (busy or stopped); what the command "
                   "did, if anything, shows in qstat\n")
