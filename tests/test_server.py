"""End to end: a real `hpcsched server` in a temporary directory, driven by the real commands."""
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpcsched.pbs import accounting
from hpcsched.store.layout import TAKEN, WRAPPER
from hpcsched.store.site import init_site
from scenarios import group_alive

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "bin")


@pytest.fixture
def live(tmp_path, request, monkeypatch):
    home = tmp_path / "home"
    init_site(home, nodes=2, cores=2)
    config = home / "config.toml"
    extra = getattr(request, "param", "")
    defaults = "".join(line for line in ("server_interval = 0.25\n", "kill_grace = 1\n")
                       if line.split()[0] not in extra)  # (a param may set them itself)
    config.write_text(defaults + extra + config.read_text())
    (tmp_path / "alice").mkdir()  # her home: where her jobs start unless -d says otherwise
    env = dict(os.environ, HPCSCHED_HOME=str(home), HPCSCHED_USER="alice", HOME=str(tmp_path / "alice"))
    env.pop("HPCSCHED_FLAVOR", None)
    for key in ("HPCSCHED_HOME", "HPCSCHED_USER"):  # for the in-process qstat in state()
        monkeypatch.setenv(key, env[key])
    monkeypatch.delenv("HPCSCHED_FLAVOR", raising=False)
    work = tmp_path / "work"
    work.mkdir()
    servers = []

    def start():
        p = subprocess.Popen([sys.executable, "-m", "hpcsched", "server"], cwd=ROOT, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        servers.append(p)
        for _ in range(200):  # until it answers commands
            if (home / "commands.sock").exists() or p.poll() is not None:
                break
            time.sleep(0.05)
        return p

    yield env, home, work, start
    for p in servers:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            p.wait(10)
    # nothing left running: no process of any job's group (zombies awaiting a reaper aside)
    for d in (home / "jobs").glob("*/run*") if (home / "jobs").exists() else []:
        pid = int((d / "pid").read_text()) if (d / "pid").exists() else None
        if pid and group_alive(pid):
            os.killpg(pid, signal.SIGKILL)
            raise AssertionError(f"job {d.name} was still running")


def cmd(env, work, *argv, stdin=None):
    return subprocess.run([os.path.join(BIN, argv[0]), *argv[1:]], input=stdin, capture_output=True,
                          text=True, env=env, cwd=work, timeout=30)


def state(env, work, jid):
    """qstat -f -1 JID, run in this process (the command's code without a new interpreter)."""
    import io

    from hpcsched.pbs import qstat
    buf = io.StringIO()
    qstat.QSTAT(["-f", "-1", jid], out=buf)
    out = buf.getvalue()
    found = {}
    for line in out.splitlines():
        k, _, v = line.strip().partition(" = ")
        found[k] = v
    return found


def job_pid(home, jid, run=1):
    """The pid the job's wrapper writes first thing (a moment after the job shows R)."""
    path = home / "jobs" / jid.split(".")[0] / f"run{run}" / "pid"
    for _ in range(200):
        if path.exists():
            return int(path.read_text())
        time.sleep(0.05)
    raise AssertionError(f"job {jid} never wrote its pid")


def ready(*paths, timeout=15.0):
    """Until the job has written each of `paths` (it has set its traps), however loaded the machine."""
    deadline = time.time() + timeout
    while not all(p.exists() for p in paths):
        assert time.time() < deadline, f"never written: {[str(p) for p in paths if not p.exists()]}"
        time.sleep(0.05)


def stepped_until_completed(srv, jid: int, timeout: float = 15.0):
    """Step an in-process server until job `jid` has completed (or `timeout`); the job as stored."""
    from hpcsched.store.journaled import Batch
    from hpcsched.store.site import load_site
    batch = Batch(load_site())
    deadline = time.time() + timeout
    while True:
        srv.step()
        with batch.open(write=False):
            job = batch.sched.jobs[jid]
        if job.state.name == "COMPLETED" or time.time() > deadline:
            return job
        time.sleep(0.1)


def wait_for(env, work, jid, states="C", timeout=20.0):
    end = time.time() + timeout
    while time.time() < end:
        s = state(env, work, jid)
        if s.get("job_state") in states:
            return s
        time.sleep(0.1)
    raise AssertionError(f"job {jid} never reached {states}: {state(env, work, jid)}")


def test_jobs_run_write_output_and_are_accounted(live):
    env, home, work, start = live
    start()
    jid = cmd(env, work, "qsub", "-N", "hello", "-l", "nodes=1:ppn=2,walltime=60",
              stdin="#!/bin/sh\necho $PBS_JOBID $PBS_NP $(wc -l < $PBS_NODEFILE) $PBS_O_WORKDIR\necho err >&2\n").stdout.strip()
    s = wait_for(env, work, jid)
    assert s["exit_status"] == "0"
    assert (work / f"hello.o{jid.split('.')[0]}").read_text().split() == [jid, "2", "2", str(work)]
    assert (work / f"hello.e{jid.split('.')[0]}").read_text() == "err\n"
    kinds = [e.kind for e in accounting.read(home) if e.job_id == jid]
    assert kinds == ["Q", "S", "E"]


def test_a_program_after_dashes_and_a_scripts_F_arguments_reach_the_job(live):
    """Through the server: `qsub -- program args` runs the program with its arguments (the
    client reads no file for it), and -F's words are the script's $1, $2, ...; -o naming
    a directory puts the output there under its default name."""
    env, home, work, start = live
    start()
    (work / "show.sh").write_text('printf "[%s]" "$@"; echo " $#"\n')
    # -o naming a directory (one made after qsub, no slash): the default name in it, as PBS does
    script = cmd(env, work, "qsub", "-h", "-F", "one 'two words' -x", "-o", str(work / "outs"), "show.sh").stdout.strip()
    (work / "outs").mkdir()
    assert cmd(env, work, "qrls", script).returncode == 0
    program = cmd(env, work, "qsub", "-l", "walltime=60", "--", "/bin/sh", "-c", 'echo "$0 got $1"', "me",
                  "it all").stdout.strip()
    assert wait_for(env, work, script)["exit_status"] == "0" and wait_for(env, work, program)["exit_status"] == "0"
    assert (work / "outs" / f"show.sh.o{script.split('.')[0]}").read_text() == "[one][two words][-x] 3\n"
    assert (work / f"sh.o{program.split('.')[0]}").read_text() == "me got it all\n"


def test_pbsdsh_runs_a_program_on_each_of_the_jobs_vnodes(live):
    env, home, work, start = live
    start()
    show = "sh -c 'echo $PBS_VNODENUM $PBS_NODENUM $PBS_JOBID'"
    jid = cmd(env, work, "qsub", "-N", "dsh", "-l", "nodes=2:ppn=2,walltime=60",
              stdin=f"{BIN}/pbsdsh {show} | sort; echo ---; {BIN}/pbsdsh -u {show} | sort\n").stdout.strip()
    assert wait_for(env, work, jid)["exit_status"] == "0"
    assert (work / f"dsh.o{jid.split('.')[0]}").read_text().splitlines() == [
        f"0 0 {jid}", f"1 0 {jid}", f"2 1 {jid}", f"3 1 {jid}", "---", f"0 0 {jid}", f"2 1 {jid}"]


def test_walltime_kill_and_qdel_of_running_job(live):
    env, home, work, start = live
    start()
    over = cmd(env, work, "qsub", "-l", "walltime=1", stdin="sleep 60\n").stdout.strip()
    gone = cmd(env, work, "qsub", "-l", "walltime=60", stdin="sleep 60\n").stdout.strip()
    wait_for(env, work, gone, "R")
    pgid = job_pid(home, gone)
    assert group_alive(pgid)
    assert cmd(env, work, "qdel", gone).returncode == 0
    assert wait_for(env, work, gone)["exit_status"] == "271"
    time.sleep(0.3)
    assert not group_alive(pgid)  # qdel stopped every process of the job
    assert wait_for(env, work, over)["exit_status"] in ("271", "265")
    ended = {e.job_id: e.fields["Exit_status"] for e in accounting.read(home) if e.kind == "E"}
    assert ended[over] in ("271", "265")
    # pbs_mom's word on it, in the job's error file (qdel'd jobs get none)
    said = (work / f"STDIN.e{over.split('.')[0]}").read_text()
    used = re.match(r"=>> PBS: job killed: walltime (\d+) exceeded limit 1\n", said)
    assert used and int(used.group(1)) > 1  # (past its limit: never 'walltime 1 exceeded limit 1')
    assert "job killed" not in (work / f"STDIN.e{gone.split('.')[0]}").read_text()


def _alive(word: str) -> bool:
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if word.encode() in f.read():
                    with open(f"/proc/{pid}/stat") as g:
                        if g.read().rsplit(")", 1)[1].split()[0] != "Z":
                            return True
        except OSError:
            continue
    return False


def test_nothing_of_a_job_outlives_it_on_a_single_user_rig(live):
    """What left the job's session (setsid) or was left running (&) ends with the job,
    whether the server tracks it by a cgroup (root) or by its mark (any user)."""
    env, home, work, start = live
    start()
    jid = cmd(env, work, "qsub", stdin="setsid sleep 3061 &\nsleep 3062 &\ntrue\n").stdout.strip()
    assert wait_for(env, work, jid)["exit_status"] == "0"
    deadline = time.time() + 10
    while (_alive("sleep 3061") or _alive("sleep 3062")) and time.time() < deadline:
        time.sleep(0.1)
    assert not _alive("sleep 3061") and not _alive("sleep 3062")


def test_a_job_past_its_cpu_time_is_killed_and_says_so(live):
    env, home, work, start = live
    start()
    spin = cmd(env, work, "qsub", "-l", "cput=1,walltime=60", stdin="while :; do :; done\n").stdout.strip()
    idle = cmd(env, work, "qsub", "-l", "cput=1,walltime=4", stdin="sleep 3\n").stdout.strip()
    began = time.time()
    assert wait_for(env, work, spin)["exit_status"] in ("271", "265")
    assert time.time() - began < 20
    assert wait_for(env, work, idle)["exit_status"] == "0"  # sleeping uses no CPU time
    job = spin.split(".")[0]
    from hpcsched.store.journaled import Batch
    from hpcsched.store.site import load_site
    batch = Batch(load_site(home))
    with batch.open(write=False):
        assert batch.sched.jobs[int(job)].extra.get("over") == "cput"


def test_a_job_past_its_memory_is_killed_and_says_so(live):
    """-l mem is the job's resident memory, summed over its processes and watched by the
    server (it was taken and never looked at); the peak is resources_used.mem."""
    env, home, work, start = live
    start()
    hog = f"{sys.executable} -c 'import time; x = bytearray(120 * 2 ** 20); x[::4096] = b\"1\" * len(x[::4096]); time.sleep(30)'\n"
    jid = cmd(env, work, "qsub", "-N", "hog", "-l", "mem=40mb,walltime=60", stdin=hog).stdout.strip()
    small = cmd(env, work, "qsub", "-N", "small", "-l", "mem=400mb,walltime=60", stdin="sleep 2\n").stdout.strip()
    began = time.time()
    done = wait_for(env, work, jid)
    assert done["exit_status"] in ("271", "265") and time.time() - began < 20
    said = (work / f"hog.e{jid.split('.')[0]}").read_text()
    assert said.startswith("=>> PBS: job killed: mem ") and said.split("\n")[0].endswith(" exceeded limit 40960kb")
    assert int(done["resources_used.mem"].removesuffix("kb")) > 40960
    ended = {e.job_id: e.fields for e in accounting.read(home) if e.kind == "E"}
    assert ended[jid]["resources_used.mem"] == done["resources_used.mem"]
    from hpcsched.store.journaled import Batch
    from hpcsched.store.site import load_site
    batch = Batch(load_site(home))
    with batch.open(write=False):
        assert batch.sched.jobs[int(jid.split(".")[0])].extra["over"] == "mem"
    assert "Job exceeded its mem limit: killed" in cmd(env, work, "tracejob", jid).stdout
    # a job within its memory runs to its end, its peak (a shell and a sleep) reported
    fine = wait_for(env, work, small)
    assert fine["exit_status"] == "0" and 0 < int(fine["resources_used.mem"].removesuffix("kb")) < 409600
    ended = {e.job_id: e.fields for e in accounting.read(home) if e.kind == "E"}
    assert ended[small]["resources_used.vmem"] == fine["resources_used.vmem"]


def test_a_job_runs_under_its_kernel_limits(live):
    """pcput, file, pmem, vmem/pvmem and nice, as pbs_mom sets them on the job's processes."""
    env, home, work, start = live
    start()
    show = ("import os, resource as r\n"
            "print(*[r.getrlimit(getattr(r, n))[0] for n in ('RLIMIT_CPU', 'RLIMIT_FSIZE', 'RLIMIT_DATA', 'RLIMIT_AS')], os.nice(0))\n")
    (work / "show.py").write_text(show)
    jid = cmd(env, work, "qsub", "-N", "lim", "-l", "pcput=00:01:30,file=2kb,pmem=300mb,vmem=900mb,pvmem=600mb,nice=5",
              stdin=f"cd \"$PBS_O_WORKDIR\"; {sys.executable} show.py; head -c 5000 /dev/zero > big; wc -c < big\n"
              ).stdout.strip()
    assert wait_for(env, work, jid)["exit_status"] == "0"  # (head died of SIGXFSZ, with 2 KB written)
    shown = (work / f"lim.o{jid.split('.')[0]}").read_text().split()
    assert shown == ["90", "2048", str(300 * 2 ** 20), str(600 * 2 ** 20), "5", "2048"]
    plain = cmd(env, work, "qsub", "-N", "plain", "-v", "HPCSCHED_LIMITS=-t 5",  # (the wrapper's are the server's)
                stdin=f"cd \"$PBS_O_WORKDIR\"; {sys.executable} show.py\n").stdout.strip()
    assert wait_for(env, work, plain)["exit_status"] == "0"
    inf = str(__import__("resource").RLIM_INFINITY)
    assert (work / f"plain.o{plain.split('.')[0]}").read_text().split()[:2] == [inf, inf]


def test_dependency_chain_runs_in_order_and_failed_parent_stops_child(live):
    env, home, work, start = live
    start()
    a = cmd(env, work, "qsub", "-l", "walltime=60", stdin="cd \"$PBS_O_WORKDIR\"; sleep 1; date +%s.%N > a.t\n").stdout.strip()
    b = cmd(env, work, "qsub", "-W", f"depend=afterok:{a}", "-l", "walltime=60", stdin="cd \"$PBS_O_WORKDIR\"; date +%s.%N > b.t\n").stdout.strip()
    bad = cmd(env, work, "qsub", "-h", "-l", "walltime=60", stdin="exit 3\n").stdout.strip()
    child = cmd(env, work, "qsub", "-W", f"depend=afterok:{bad}", "-l", "walltime=60", stdin="touch ran\n").stdout.strip()
    assert cmd(env, work, "qrls", bad).returncode == 0  # (held: it must not fail before the child names it)
    wait_for(env, work, b)
    assert float((work / "b.t").read_text()) >= float((work / "a.t").read_text())
    assert wait_for(env, work, bad)["exit_status"] == "3"
    gone = wait_for(env, work, child)  # Torque deletes a job whose dependency can never be met
    assert gone["exit_status"] == "271" and not (work / "ran").exists()
    assert gone["comment"] == f"Job deleted as result of dependency on job {bad}"
    assert [e.kind for e in accounting.read(home) if e.job_id == child] == ["Q", "D"]


def test_server_killed_and_restarted_loses_nothing_and_starts_nothing_twice(live):
    env, home, work, start = live
    server = start()
    ids = [cmd(env, work, "qsub", "-l", "walltime=60", stdin=f"cd \"$PBS_O_WORKDIR\"; echo {i} >> runs.log; sleep 1.5\n").stdout.strip()
           for i in range(4)]
    wait_for(env, work, ids[0], "RC")
    os.killpg(server.pid, signal.SIGKILL)  # the server dies mid-run
    server.wait(10)
    more = cmd(env, work, "qsub", "-l", "walltime=60", stdin="cd \"$PBS_O_WORKDIR\"; echo late >> runs.log\n").stdout.strip()
    start()
    for jid in ids + [more]:
        assert wait_for(env, work, jid, timeout=30)["exit_status"] == "0"
    runs = (work / "runs.log").read_text().split()
    assert sorted(runs) == sorted([str(i) for i in range(4)] + ["late"])  # each exactly once


def test_a_job_that_ended_while_no_server_ran_is_charged_its_own_walltime(live):
    """resources_used.walltime of a job that ended while the server was down is the
    job's run (its status file's time), not the run plus the downtime."""
    env, home, work, start = live
    server = start()
    jid = cmd(env, work, "qsub", "-l", "walltime=60", stdin='cd "$PBS_O_WORKDIR"; touch began; sleep 1\n').stdout.strip()
    ready(work / "began")
    os.killpg(server.pid, signal.SIGTERM)  # the server stops; the job goes on and ends
    server.wait(10)
    time.sleep(4)
    start()
    used = wait_for(env, work, jid, timeout=30)["resources_used.walltime"]
    h, m, sec = map(int, used.split(":"))
    assert 1 <= h * 3600 + m * 60 + sec <= 3, used  # (it ran about a second; the server was gone 4)


def test_held_then_released_and_array(live):
    env, home, work, start = live
    start()
    held = cmd(env, work, "qsub", "-h", "-l", "walltime=60", stdin="true\n").stdout.strip()
    arr = cmd(env, work, "qsub", "-t", "1-3%1", "-l", "walltime=60", stdin="cd \"$PBS_O_WORKDIR\"; echo $PBS_ARRAYID >> arr.log\n").stdout.strip()
    time.sleep(1.0)
    assert state(env, work, held)["job_state"] == "H"
    assert cmd(env, work, "qrls", held).returncode == 0
    wait_for(env, work, held)
    for i in (1, 2, 3):
        wait_for(env, work, arr.replace("[]", f"[{i}]"))
    assert sorted((work / "arr.log").read_text().split()) == ["1", "2", "3"]
    seq = arr.split("[")[0]
    assert all((work / f"STDIN.o{seq}-{i}").exists() for i in (1, 2, 3))  # Torque: NAME.oSEQ-INDEX


def test_a_signal_to_one_subjob_reaches_it_alone(live):
    # (every subjob of an array shared one `extra`: a signal asked for one was delivered to
    # every running subjob, and so were a walltime kill's and a CPU limit's marks, and GPUs)
    env, home, work, start = live
    start()
    arr = cmd(env, work, "qsub", "-t", "1-2", "-l", "walltime=60", stdin=(
        "cd \"$PBS_O_WORKDIR\"; trap 'echo got $PBS_ARRAYID >> sig.log; exit 7' USR1; touch ready$PBS_ARRAYID\n"
        "for i in 1 2 3 4 5 6 7 8 9 10 11 12; do sleep 0.25; done\n")).stdout.strip()
    one, two = arr.replace("[]", "[1]"), arr.replace("[]", "[2]")
    ready(work / "ready1", work / "ready2")
    assert cmd(env, work, "qsig", "-s", "USR1", two).returncode == 0
    assert wait_for(env, work, two)["exit_status"] == "7" and wait_for(env, work, one)["exit_status"] == "0"
    assert (work / "sig.log").read_text() == "got 2\n"


def test_qsig_reaches_the_jobs_processes(live):
    env, home, work, start = live
    start()
    jid = cmd(env, work, "qsub", "-l", "walltime=60",
              stdin="cd \"$PBS_O_WORKDIR\"; trap 'echo got USR1 >> sig.log; exit 7' USR1; touch ready\n"
                    "while :; do sleep 0.1; done\n").stdout.strip()
    ready(work / "ready")
    assert cmd(env, work, "qsig", "-s", "USR1", jid).returncode == 0
    assert wait_for(env, work, jid)["exit_status"] == "7"
    assert (work / "sig.log").read_text() == "got USR1\n"
    assert cmd(env, work, "qsig", "-s", "NOPE", jid).returncode == 2


def test_qmsg_writes_into_a_running_jobs_files(live):
    """qmsg: a line at the end of the job's error file (-E, the default), its output file
    (-O), or both; once into a joined file; refused for a job that does not run."""
    env, home, work, start = live
    start()
    apart = cmd(env, work, "qsub", "-N", "apart", "-l", "walltime=60", stdin=(
        "cd \"$PBS_O_WORKDIR\"; echo first; touch ready1; while [ ! -e go1 ]; do sleep 0.05; done; echo last\n")).stdout.strip()
    joined = cmd(env, work, "qsub", "-N", "joined", "-j", "oe", "-l", "walltime=60", stdin=(
        "cd \"$PBS_O_WORKDIR\"; touch ready2; while [ ! -e go2 ]; do sleep 0.05; done\n")).stdout.strip()
    ready(work / "ready1", work / "ready2")
    assert cmd(env, work, "qmsg", "to the errors", apart).returncode == 0
    assert cmd(env, work, "qmsg", "-O", "to the output", apart).returncode == 0
    assert cmd(env, work, "qmsg", "-O", "raw \udcff byte", apart).returncode == 0  # (a byte no UTF-8: it took the server down)
    assert cmd(env, work, "qmsg", "-E", "-O", "to both", apart, joined).returncode == 0
    deadline = time.time() + 10  # (the server writes them at its next step)
    while "to both" not in (work / f"joined.o{joined.split('.')[0]}").read_text():
        assert time.time() < deadline
        time.sleep(0.05)
    (work / "go1").touch(), (work / "go2").touch()
    wait_for(env, work, apart), wait_for(env, work, joined)
    seq = apart.split(".")[0]
    assert (work / f"apart.e{seq}").read_text() == "to the errors\nto both\n"
    assert (work / f"apart.o{seq}").read_bytes() == b"first\nto the output\nraw \xff byte\nto both\nlast\n"
    assert (work / f"joined.o{joined.split('.')[0]}").read_text() == "to both\n"
    done = cmd(env, work, "qmsg", "late", apart)
    assert done.returncode == 170 and "Request invalid for state of job" in done.stderr
    assert cmd(env, work, "qmsg", "no job").returncode == 2 and cmd(env, work, "qmsg").returncode == 2


def test_qsub_block_waits_for_the_jobs_end_and_exits_with_its_status(live):
    """OpenPBS's qsub -W block=true: the id at once, then the job's exit status once it
    has ended (271, and a line, for one deleted before it ran); refused in a directive, with
    an array, or with a value other than true or false."""
    import re
    env, home, work, start = live
    start()
    done = cmd(env, work, "qsub", "-W", "block=true", "-l", "walltime=60", stdin="sleep 0.5; exit 3\n")
    assert done.returncode == 3 and re.fullmatch(r"1\.\S+\n", done.stdout)  # (the id, then the wait)
    assert state(env, work, done.stdout.strip())["exit_status"] == "3"
    quiet = cmd(env, work, "qsub", "-z", "-W", "umask=022,block=True", stdin="true\n")
    assert (quiet.returncode, quiet.stdout) == (0, "")
    waiting = subprocess.Popen([os.path.join(BIN, "qsub"), "-h", "-W", "block=true"], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=work)
    waiting.stdin.write("true\n")
    waiting.stdin.close()
    jid = waiting.stdout.readline().strip()
    assert cmd(env, work, "qdel", jid).returncode == 0
    assert waiting.wait(20) == 271 % 256 and f"qsub: job {jid} was deleted before it ran" in waiting.stderr.read()
    waiting.stdout.close(), waiting.stderr.close()
    for argv, script in ((["-W", "block=maybe"], "true\n"), (["-t", "1-2", "-W", "block=true"], "true\n"),
                         ([], "#PBS -W block=true\ntrue\n")):
        refused = cmd(env, work, "qsub", *argv, stdin=script)
        assert refused.returncode == 2 and refused.stdout == "", refused.stderr


def test_a_suspended_job_stops_and_its_walltime_stands_still(live):
    env, home, work, start = live
    start()
    jid = cmd(env, work, "qsub", "-l", "walltime=3", stdin=(
        "cd \"$PBS_O_WORKDIR\"; for i in 1 2 3 4 5 6 7 8; do echo $i >> ticks.log; sleep 0.25; done\n")).stdout.strip()
    wait_for(env, work, jid, "R")
    time.sleep(0.6)
    import tomllib
    manager = tomllib.loads((home / "config.toml").read_text())["managers"][0]
    root = dict(env, HPCSCHED_USER=manager)  # (suspend and resume are for operators and managers)
    assert cmd(root, work, "qsig", "-s", "suspend", jid).returncode == 0
    time.sleep(0.6)  # (the server delivers it at its next pass)
    ticks = (work / "ticks.log").read_text()
    time.sleep(3.5)  # past its walltime, had the clock run
    assert (work / "ticks.log").read_text() == ticks and state(env, work, jid)["job_state"] == "S"
    assert cmd(root, work, "qsig", "-s", "resume", jid).returncode == 0
    assert wait_for(env, work, jid)["exit_status"] == "0"
    assert (work / "ticks.log").read_text().split() == [str(i) for i in range(1, 9)]
    ended, = [e.fields for e in accounting.read(home) if e.job_id == jid and e.kind == "E"]
    used = sum(int(x) * m for x, m in zip(ended["resources_used.walltime"].split(":"), (3600, 60, 1)))
    assert 1 <= used <= 3 and ended["owner"].startswith("alice@")  # (the ~4 s it was stopped are not charged)
    story = cmd(root, work, "tracejob", jid).stdout
    assert story.index("Job suspended at request of an operator") < story.index("Job resumed at request")
    # deleted while suspended, it is continued with its SIGTERM, so it need not wait for the
    # SIGKILL after the grace
    jid = cmd(env, work, "qsub", "-l", "walltime=60", stdin=(
        "cd \"$PBS_O_WORKDIR\"; trap 'echo term >> term.log; exit 3' TERM; touch ready\n"
        "while :; do sleep 0.1; done\n")).stdout.strip()
    ready(work / "ready")
    assert cmd(root, work, "qsig", "-s", "suspend", jid).returncode == 0
    time.sleep(0.6)
    assert cmd(root, work, "qdel", jid).returncode == 0
    wait_for(env, work, jid)
    assert (work / "term.log").read_text() == "term\n"


def test_qrerun_kills_a_running_job_and_runs_it_again(live):
    import tomllib
    env, home, work, start = live
    start()
    manager = tomllib.loads((home / "config.toml").read_text())["managers"][0]
    jid = cmd(env, work, "qsub", "-l", "walltime=60", stdin=(
        "cd \"$PBS_O_WORKDIR\"; trap 'echo term >> runs.log; exit 5' TERM\n"
        "echo run >> runs.log; [ -e again ] && exit 0; touch again; while :; do sleep 0.1; done\n")).stdout.strip()
    wait_for(env, work, jid, "R")
    ready(work / "again")
    assert cmd(env, work, "qrerun", jid).returncode == 159  # (operators and managers only)
    assert cmd(dict(env, HPCSCHED_USER=manager), work, "qrerun", jid).returncode == 0
    done = wait_for(env, work, jid)
    assert done["exit_status"] == "0" and done["run_count"] == "2"
    assert (work / "runs.log").read_text().split() == ["run", "term", "run"]
    assert [e.kind for e in accounting.read(home) if e.job_id == jid] == ["Q", "S", "R", "S", "E"]


def test_a_jobs_cpu_time_is_recorded_when_it_ends(live):
    # (resources_used.cput was always 00:00:00: the server never read it; now the wait for
    # the job's wrapper says what it and every process it waited for used)
    env, home, work, start = live
    start()
    burn = "import time; t = time.process_time()\nwhile time.process_time() - t < 1.3: pass"
    jid = cmd(env, work, "qsub", "-l", "walltime=60", stdin=f"{sys.executable} -c '{burn}'\n").stdout.strip()
    done = wait_for(env, work, jid)
    assert done["exit_status"] == "0" and done["resources_used.cput"] in ("00:00:01", "00:00:02")
    ended, = [e.fields for e in accounting.read(home) if e.job_id == jid and e.kind == "E"]
    assert ended["resources_used.cput"] == done["resources_used.cput"]
    # (reported with the end, as the core's cpu_time that fair share's cpu metric charges)
    from hpcsched.store.journal import Store
    with Store(home).locked(exclusive=False) as store:
        records = store.read()[1]
    end, = [r for r in records if r["op"] == "ended" and r["id"] == int(jid.split(".")[0])]
    assert 1.2 <= end["cpu_time"] <= 3.0


def test_qterm_stops_the_server_and_its_running_jobs_go_on(live):
    import tomllib
    env, home, work, start = live
    server = start()
    manager = tomllib.loads((home / "config.toml").read_text())["managers"][0]
    jid = cmd(env, work, "qsub", "-l", "walltime=60",
              stdin="cd \"$PBS_O_WORKDIR\"; sleep 1.5; echo done > done.log\n").stdout.strip()
    wait_for(env, work, jid, "R")
    assert cmd(env, work, "qterm").returncode == 159  # (managers only)
    assert cmd(dict(env, HPCSCHED_USER=manager), work, "qterm").returncode == 0
    server.wait(10)  # (it stops after answering)
    assert not (home / "commands.sock").exists()
    time.sleep(1.8)
    assert (work / "done.log").read_text() == "done\n"  # (the job ran on without it)
    start()
    assert wait_for(env, work, jid)["exit_status"] == "0"


def test_a_signal_the_kernel_refuses_never_stops_the_server(live):
    env, home, work, start = live
    server = start()
    jid = cmd(env, work, "qsub", "-l", "walltime=60", stdin="sleep 30\n").stdout.strip()
    wait_for(env, work, jid, "R")
    for bad in ("99", "0", "12345678901234567890", "SIGNOPE"):
        done = cmd(env, work, "qsig", "-s", bad, jid)
        assert done.returncode == 2 and "illegal signal" in done.stderr
    # one that slipped into the store anyway (an older client): dropped, reported, no death
    from hpcsched.store.journaled import Batch
    from hpcsched.store.site import load_site
    batch = Batch.of(load_site(home))
    with batch.open(write=True):
        batch.do("process", id=int(jid.split(".")[0]), set={"pending_signals": [99]})
    cmd(env, work, "qrls", jid)  # pokes the server
    time.sleep(1.0)
    assert server.poll() is None and state(env, work, jid)["job_state"] == "R"
    assert cmd(env, work, "qdel", jid).returncode == 0


def test_start_after_time_is_kept(live):
    env, home, work, start = live
    start()
    after = int(time.time() + 2)  # -a takes whole seconds: the job may not start before this
    when = time.strftime("%H%M.%S", time.localtime(after))
    jid = cmd(env, work, "qsub", "-a", when, "-d", ".", "-l", "walltime=60", stdin="date +%s > started\n").stdout.strip()
    assert state(env, work, jid)["job_state"] == "W"
    wait_for(env, work, jid, timeout=20)
    assert int((work / "started").read_text()) >= after


@pytest.mark.parametrize("live", ['prejob_check = ["sh", "-c", "test {node} != node01"]\n'], indirect=True)
def test_prejob_scan_puts_failing_nodes_on_the_bad_list(live):
    env, home, work, start = live
    start()
    jid = cmd(env, work, "qsub", "-l", "walltime=60", stdin="cd \"$PBS_O_WORKDIR\"; cat $PBS_NODEFILE > where\n").stdout.strip()
    wait_for(env, work, jid)
    assert (work / "where").read_text() == "node02\n"  # node01 failed its scan; the job moved
    shown = cmd(env, work, "shownids").stdout
    assert "bad nodes: 0" in shown
    nodes = subprocess.run([sys.executable, "-m", "hpcsched", "nodes", "--clear-bad"], cwd=ROOT,
                           env=dict(env, HPCSCHED_USER="root"), capture_output=True, text=True)
    assert nodes.returncode == 0 and "node01" in nodes.stdout and " bad" not in nodes.stdout
    off = subprocess.run([sys.executable, "-m", "hpcsched", "nodes", "--set", "offline", "node02"], cwd=ROOT,
                         env=dict(env, HPCSCHED_USER="nobody"), capture_output=True, text=True)
    assert off.returncode == 159


@pytest.mark.parametrize("live", ['launcher = ["env", "LAUNCHED_ON={host}", "sh", "-c", "{command}"]\n'],
                         indirect=True)
def test_command_launcher_template(live):
    env, home, work, start = live
    start()
    jid = cmd(env, work, "qsub", "-l", "walltime=60", stdin="cd \"$PBS_O_WORKDIR\"; echo $LAUNCHED_ON > host\n").stdout.strip()
    wait_for(env, work, jid)
    assert (work / "host").read_text() == "node01\n"


def test_a_job_that_ended_before_its_start_time_was_read_still_ends(rig, monkeypatch):
    """A `true` job can exit before the server reads its start time: it must not be
    taken for alive forever (found by benchmarks/throughput.py)."""
    import io

    from hpcsched.pbs import qsub
    from hpcsched.server import launch, loop as server
    from hpcsched.store.site import load_site
    monkeypatch.setattr(launch, "wait_start", lambda pid: None)
    qsub.submit(["-l", "walltime=60"], stdin=io.StringIO("true\n"), cwd=str(rig), env={})
    srv = server.Server(load_site(), grace=1)
    assert srv.step() == 1
    end = time.time() + 10
    while time.time() < end:
        time.sleep(0.1)
        srv.step()
        job = srv.batch.sched.job(1)
        if job.state.value == "completed":
            break
    assert job.state.value == "completed" and job.exit_status == 0


def test_one_server_per_site(live):
    env, home, work, start = live
    first = start()
    time.sleep(1.0)
    second = subprocess.run([sys.executable, "-m", "hpcsched", "server", "--once"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=30)
    assert second.returncode == 1 and "another hpcsched server is running" in second.stderr
    assert first.poll() is None


def test_finished_jobs_leave_after_the_retention(rig):
    import io

    from hpcsched.pbs import qsub
    from hpcsched.server import loop as server
    from hpcsched.store.site import load_site
    text = (rig / "home" / "config.toml").read_text().replace("keep_completed = 300", "keep_completed = 1")
    (rig / "home" / "config.toml").write_text(text)
    qsub.submit(["-l", "walltime=60"], stdin=io.StringIO("true\n"), cwd=str(rig), env={})
    srv = server.Server(load_site(), grace=1)
    srv.step()
    end = time.time() + 10
    while time.time() < end and 1 in srv.batch.sched.jobs:
        time.sleep(0.2)
        srv.step()
    assert 1 not in srv.batch.sched.jobs  # completed, kept a second, then forgotten
    assert any(e.kind == "E" for e in accounting.read(rig / "home"))  # the record stays


def test_a_vanished_rerunnable_job_is_requeued_and_runs_again(rig):
    """A job whose process is gone with no exit status (its node rebooted, say) is
    requeued and runs again in a fresh run directory."""
    import io

    from hpcsched.pbs import qsub
    from hpcsched.server import loop as server
    from hpcsched.store.site import load_site
    qsub.submit(["-l", "walltime=60"], stdin=io.StringIO("cd \"$PBS_O_WORKDIR\"; echo run >> runs.log\nsleep 30\n"), cwd=str(rig), env={})
    srv = server.Server(load_site(), grace=1)
    assert srv.step() == 1
    first = srv.jobdir(srv.batch.sched.job(1))
    ready(first / "pid", rig / "runs.log")
    pid = int((first / "pid").read_text())
    os.killpg(pid, signal.SIGKILL)  # gone, and the wrapper never wrote a status
    time.sleep(0.3)
    srv._reap_children()
    srv.children.clear()  # as if the server had restarted and could not wait for it
    srv.step()  # noticed: requeued; started again at once on a fresh run directory
    job = srv.batch.sched.job(1)
    assert job.run_count == 2 and srv.jobdir(job) != first
    kinds = [e.kind for e in accounting.read(rig / "home")]
    assert "R" in kinds
    deadline = time.time() + 15
    while (rig / "runs.log").read_text() != "run\nrun\n" and time.time() < deadline:
        time.sleep(0.05)
    assert (rig / "runs.log").read_text() == "run\nrun\n"
    os.killpg(int((srv.jobdir(job) / "pid").read_text()), signal.SIGKILL)


def test_a_job_deleted_before_its_launch_ends(rig):
    import io

    from hpcsched.pbs import qsub
    from hpcsched.server import loop as server
    from hpcsched.store.journaled import Batch
    from hpcsched.store.site import load_site
    qsub.submit(["-l", "walltime=60"], stdin=io.StringIO("true\n"), cwd=str(rig), env={})
    batch = Batch(load_site())
    with batch.open(write=True):
        batch.do("pass")  # a pass made it RUNNING; the server died before launching it
        batch.do("delete", id=1)
    srv = server.Server(load_site(), grace=1)
    assert srv.step() == 0
    job = srv.batch.sched.job(1)
    assert job.state.value == "completed" and job.exit_status == 271


def interactive(env, work, *argv):
    # (^C is the user's: a suite run in the background, where the shell ignores SIGINT,
    # would hand that on to qsub, and Python would never turn it into KeyboardInterrupt)
    return subprocess.Popen([os.path.join(BIN, "qsub"), "-I", *argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=work,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def test_interactive_session_runs_here_and_its_status_is_recorded(live):
    env, home, work, start = live
    start()
    p = interactive(env, work, "-l", "walltime=60")
    out, err = p.communicate('echo "$PBS_JOBID $PBS_ENVIRONMENT $(wc -l < $PBS_NODEFILE)"; pwd; exit 3\n', timeout=30)
    jid = out.split()[4]
    assert out.splitlines() == [f"qsub: waiting for job {jid} to start", f"qsub: job {jid} ready", "",
                                f"{jid} PBS_INTERACTIVE 1", env["HOME"], f"qsub: job {jid} completed"]
    assert p.returncode == 3 and err == ""
    assert wait_for(env, work, jid)["exit_status"] == "3"
    assert [e.kind for e in accounting.read(home) if e.job_id == jid] == ["Q", "S", "E"]
    # the session's shell runs under the job's limits too
    p = interactive(env, work, "-l", "walltime=60,pcput=77,file=4kb")
    show = f"{sys.executable} -c 'import resource as r; print(r.getrlimit(r.RLIMIT_FSIZE)[0])'"
    out, err = p.communicate(f'ulimit -t; {show}; echo "${{HPCSCHED_LIMITS-unset}}"\n', timeout=30)
    assert out.splitlines()[3:6] == ["77", "4096", "unset"] and p.returncode == 0


def test_interactive_session_on_a_terminal(live):
    pty = pytest.importorskip("pty")
    env, home, work, start = live
    start()
    pid, fd = pty.fork()
    if pid == 0:
        os.chdir(work)
        os.execve(os.path.join(BIN, "qsub"), ["qsub", "-I"], env)
    seen = b""

    def until(token):
        nonlocal seen
        end = time.time() + 20
        while token not in seen and time.time() < end:
            try:
                seen += os.read(fd, 4096)
            except OSError:
                break
        return token in seen

    assert until(b"ready")
    os.write(fd, b"tty; exit 5\n")
    assert until(b"completed")
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 5
    assert b"/dev/pts/" in seen  # the session had the terminal


def test_qdel_ends_an_interactive_session_and_one_still_waiting(live):
    env, home, work, start = live
    start()
    p = interactive(env, work)
    p.stdin.write("sleep 60\n")
    p.stdin.flush()
    jid = p.stdout.readline().split()[4]
    assert p.stdout.readline() == f"qsub: job {jid} ready\n"
    pgid = job_pid(home, jid)
    assert cmd(env, work, "qdel", jid).returncode == 0
    assert p.wait(20) != 0 and wait_for(env, work, jid)["exit_status"] == "271"
    assert not group_alive(pgid)
    held = interactive(env, work, "-h")
    jid = held.stdout.readline().split()[4]  # waiting for a start that never comes ...
    assert cmd(env, work, "qdel", jid).returncode == 0  # ... until qdel
    out, _ = held.communicate(timeout=20)
    assert held.returncode == 1 and out == f"qsub: job {jid} apparently deleted\n"


def test_interrupting_a_waiting_interactive_qsub_deletes_its_job(live):
    env, home, work, start = live
    start()
    waiting = interactive(env, work, "-h")
    jid = waiting.stdout.readline().split()[4]
    waiting.send_signal(signal.SIGINT)  # ^C
    out, err = waiting.communicate(timeout=20)
    assert waiting.returncode == 130 and out == f"\nqsub: job {jid} deleted\n" and err == ""
    assert state(env, work, jid)["job_state"] == "C"


def test_an_interactive_job_whose_qsub_never_comes_is_aborted_not_run_again(rig, monkeypatch):
    """A session's qsub -I that is gone (killed while it waited) never runs the session:
    after INTERACTIVE_WAIT the job ends aborted (A), its nodes freed, instead of going
    back to the queue to wait for it again and again."""
    import io

    from hpcsched.pbs import accounting, qsub
    from hpcsched.server import loop as server, shared
    from hpcsched.store.journaled import Batch
    from hpcsched.store.site import load_site
    monkeypatch.setattr(qsub.commands, "server_answers", lambda: True)  # (the server below is in-process)
    jid = qsub.submit(["-I", "-l", "walltime=60"], stdin=io.StringIO(""), cwd=str(rig), env={})[0]  # (no session)
    srv = server.Server(load_site(), grace=1)
    t = time.time()
    assert srv.step(t) == 1
    srv.step(t + shared.INTERACTIVE_WAIT - 1)  # (still waiting for its qsub)
    with Batch(load_site()).open(write=False) as batch:
        assert batch.sched.jobs[int(jid.split(".")[0])].state.value == "running"
    srv.step(t + shared.INTERACTIVE_WAIT + 1)
    with Batch(load_site()).open(write=False) as batch:
        job = batch.sched.jobs[int(jid.split(".")[0])]
    assert job.state.value == "completed" and job.exit_status == -1 and job.run_count == 1
    assert job.comment == "its qsub -I never came for the session: aborted"
    assert [e.kind for e in accounting.read(rig / "home") if e.job_id == jid] == ["Q", "S", "A"]


def test_a_launch_is_journaled_as_a_process_record_without_the_script(rig):
    """The server's bookkeeping of a job's process is its own small journal record: not
    an alter carrying the job's whole `extra` (script included) into the journal."""
    import io
    import json

    from hpcsched.pbs import qsub
    from hpcsched.server import loop as server
    from hpcsched.store.journaled import Batch
    from hpcsched.store.site import load_site
    qsub.submit(["-l", "walltime=60"], stdin=io.StringIO("echo SCRIPT-TEXT\n"), cwd=str(rig), env={})
    srv = server.Server(load_site(), grace=1)
    assert srv.step() == 1
    records = [json.loads(line) for line in (rig / "home" / "journal.jsonl").read_text().splitlines()]
    launch = records[-1]
    assert launch["op"] == "process" and launch["id"] == 1 and set(launch["set"]) >= {"launched", "pid"}
    assert "SCRIPT-TEXT" not in json.dumps(launch) and "alter" not in {r["op"] for r in records}
    fresh = Batch(load_site())  # a replay restores what the server noted
    with fresh.open(write=False):
        assert fresh.sched.job(1).extra["pid"] == launch["set"]["pid"]
    with contextlib.suppress(ProcessLookupError):  # (echo may have ended already)
        os.killpg(launch["set"]["pid"], signal.SIGKILL)


def test_peak_memory_is_noted_with_the_end_and_at_most_every_status_interval(rig):
    """resources_used.mem costs no journal write a step: a running job's peak is noted
    when it has grown by an eighth and PEAK_EVERY seconds have passed, and with its end
    (the ended record carries it: one record, as before)."""
    import io
    import json

    from hpcsched.pbs import qctl, qsub
    from hpcsched.server import loop as server, shared
    from hpcsched.store.journaled import Batch
    from hpcsched.store.site import load_site
    qsub.submit(["-l", "walltime=600"], stdin=io.StringIO("sleep 600\n"), cwd=str(rig), env={})
    srv = server.Server(load_site(), grace=1)

    def records():
        return [json.loads(line) for line in (rig / "home" / "journal.jsonl").read_text().splitlines()]
    t0 = time.time()
    srv.step(t0)
    job_pid(rig / "home", "1")
    time.sleep(0.2)
    srv.step(t0 + 1)
    srv.step(t0 + 2)
    assert not [r for r in records() if "used_mem" in r.get("set", {})]  # (steps within the interval)
    srv.step(t0 + shared.PEAK_EVERY + 1)
    noted = [r for r in records() if "used_mem" in r.get("set", {})]
    assert len(noted) == 1 and noted[0]["op"] == "process" and noted[0]["set"]["used_mem"] > 0
    srv.step(t0 + shared.PEAK_EVERY + 2)  # (no growth: no note)
    assert len([r for r in records() if "used_mem" in r.get("set", {})]) == 1
    assert qctl.QDEL(["1"], out=io.StringIO()) == 0
    for _ in range(100):
        srv.step(t0 + shared.PEAK_EVERY + 3)
        ended = [r for r in records() if r["op"] == "ended"]
        if ended:
            break
        time.sleep(0.05)
    end, = ended
    assert end["set"]["used_mem"] >= noted[0]["set"]["used_mem"]
    assert len([r for r in records() if "used_mem" in r.get("set", {})]) == 2
    batch = Batch(load_site())  # a replay restores it
    with batch.open(write=False):
        assert batch.sched.job(1).extra["used_mem"] == end["set"]["used_mem"]


def test_a_job_suspended_past_its_walltime_does_not_make_the_server_spin(rig, monkeypatch):
    """The server's next step is due at a running job's walltime, which stands still while
    it is suspended: it was start + walltime, so a job suspended past it made the server
    step every 50 ms until it resumed."""
    import io

    from hpcsched.pbs import qctl, qsub
    from hpcsched.server import loop as server
    from hpcsched.store.site import load_site
    qsub.submit(["-l", "walltime=5"], stdin=io.StringIO("sleep 60\n"), cwd=str(rig), env={})
    srv = server.Server(load_site(), interval=15, grace=1)
    t0 = time.time()
    srv.step(t0)
    monkeypatch.setenv("HPCSCHED_USER", "olga")
    assert qctl.QSIG(["-s", "suspend", "1"], out=io.StringIO(), now=t0 + 2) == 0
    srv.step(t0 + 2)
    assert srv.next_step(t0 + 100) == t0 + 115  # (not t0 + 100.05)
    assert qctl.QSIG(["-s", "resume", "1"], out=io.StringIO(), now=t0 + 100) == 0
    srv.step(t0 + 100)
    assert srv.next_step(t0 + 100) == pytest.approx(t0 + 103)  # (3 s of its walltime left)
    os.killpg(job_pid(rig / "home", "1"), signal.SIGKILL)


def test_node_log_writes_moab_samples_that_hpcsched_drain_reads(rig):
    """node_log = true: after every pass, one Moab status line per node, one file per day."""
    import io

    from hpcsched.drain import moablog
    from hpcsched.pbs import qsub
    from hpcsched.server import loop as server
    from hpcsched.store.site import load_site
    config = rig / "home" / "config.toml"
    config.write_text("node_log = true\n" + config.read_text())
    qsub.submit(["-l", "walltime=60,nodes=1"], stdin=io.StringIO("sleep 1\n"), cwd=str(rig), env={})
    srv = server.Server(load_site(), grace=1)
    for _ in range(3):
        srv.step()
        time.sleep(0.1)
    (log,) = (rig / "home" / "nodelog").iterdir()
    lines = log.read_text().splitlines()
    nodes = len(srv.batch.sched.topology.all_nodes())
    assert len(lines) == 3 * nodes and "state='Busy'" in lines[0] and "joblist='1'" in lines[0]
    acc, quality = moablog.read([str(log)])
    assert quality.malformed == 0 and quality.samples == 3 * nodes and len(acc.nodes) == nodes
    config.write_text("node_log = 3\n" + config.read_text().replace("node_log = true\n", ""))
    from hpcsched.core.errors import ConfigError
    with pytest.raises(ConfigError, match="node_log"):
        load_site()


MAILER = 'mail_command = ["sh", "-c", "cat >> \\"$HPCSCHED_HOME/mail.out\\"; echo . >> \\"$HPCSCHED_HOME/mail.out\\""]\n'


@pytest.mark.parametrize("live", [MAILER], indirect=True)
def test_jobs_start_at_home_with_their_umask_kept_files_and_mail(live):
    """PBS starts a job in its owner's home (PBS_O_WORKDIR names where qsub ran); output
    files get the job's umask (077 unless -W umask=); -k keeps a stream in the home; -m/-M
    mail the owner through mail_command."""
    env, home, work, start = live
    alice = Path(env["HOME"])
    start()
    told = cmd(env, work, "qsub", "-N", "told", "-m", "be", "-M", "bob@example.org", "-W", "umask=022",
               "-l", "walltime=60", stdin="pwd; echo $PBS_O_WORKDIR; umask\n").stdout.strip()
    kept = cmd(env, work, "qsub", "-N", "kept", "-k", "oe", "-l", "walltime=60", stdin="echo out; echo err >&2\n").stdout.strip()
    over = cmd(env, work, "qsub", "-N", "over", "-l", "walltime=1", stdin="sleep 60\n").stdout.strip()
    for jid in (told, kept, over):
        wait_for(env, work, jid)
    seq = told.split(".")[0]
    out = work / f"told.o{seq}"
    assert out.read_text().split() == [str(alice), str(work), "0022"]
    assert out.stat().st_mode & 0o777 == 0o644
    n = kept.split(".")[0]
    assert (alice / f"kept.o{n}").read_text() == "out\n" and (alice / f"kept.e{n}").read_text() == "err\n"
    assert not (work / f"kept.o{n}").exists() and not (work / f"kept.e{n}").exists()
    assert (alice / f"kept.o{n}").stat().st_mode & 0o777 == 0o600  # PBS's default umask, 077
    mails = [m for m in (home / "mail.out").read_text().split("\n.\n") if m.strip()]
    about = {jid: [m for m in mails if f"Subject: PBS JOB {jid}\n" in m] for jid in (told, kept, over)}
    assert [m.splitlines()[0] for m in about[told]] == ["To: bob@example.org"] * 2
    assert "Begun execution" in about[told][0] and "Execution terminated\nExit_status=0" in about[told][1]
    import re  # (what the job used, in Torque's order)
    assert re.search(r"Exit_status=0\nresources_used.cput=00:00:0\d\n(resources_used.mem=\d+kb\n"
                     r"resources_used.vmem=\d+kb\n)?resources_used.walltime=00:00:0\d$", about[told][1])
    assert about[kept] == []  # -m a (the default) and it ended well
    assert len(about[over]) == 1 and "To: alice\n" in about[over][0]
    assert "Aborted by PBS Server\nJob exceeded its walltime limit" in about[over][0]


SCRIPTS = ("prologue = [\"sh\", \"-c\", 'echo \"prologue $*\"; case $4 in abort) exit 1;; held) exit 2;; esac', \"pro\"]\n"
           "epilogue = [\"sh\", \"-c\", 'echo \"epilogue $*\"', \"epi\"]\n")


@pytest.mark.parametrize("live", [SCRIPTS], indirect=True)
def test_the_sites_prologue_and_epilogue_run_around_each_job(live):
    """Torque's site scripts: the prologue (job id, user, group, name, resource list, queue,
    account) runs before the job, the epilogue (those, the session, what it used and its
    exit status) after it, their output in the job's files; a prologue that exits 1
    aborts the job, any other failure requeues it held."""
    env, home, work, start = live
    start()
    ok = cmd(env, work, "qsub", "-N", "ok", "-A", "proj", "-l", "walltime=60", stdin="echo job; exit 5\n").stdout.strip()
    abort = cmd(env, work, "qsub", "-N", "abort", stdin="echo never\n").stdout.strip()
    held = cmd(env, work, "qsub", "-N", "held", stdin="echo never\n").stdout.strip()
    assert wait_for(env, work, ok)["exit_status"] == "5"
    out = (work / f"ok.o{ok.split('.')[0]}").read_text().splitlines()
    assert out[0] == f"prologue {ok} alice alice ok nodect=1,ncpus=1,nodes=1:ppn=1,walltime=00:01:00 batch proj"
    assert out[1] == "job"
    epi = out[2].split()
    assert epi[:5] == ["epilogue", ok, "alice", "alice", "ok"] and int(epi[5]) > 0
    assert epi[7].startswith("cput=00:00:0") and epi[7].endswith(",walltime=00:00:00") and epi[8:] == ["batch", "proj", "5"]
    gone = wait_for(env, work, abort)
    assert gone["exit_status"] == "-1" and gone["comment"] == "launch failed: its prologue exited 1: job aborted"
    assert "never" not in (work / f"abort.o{abort.split('.')[0]}").read_text()
    assert [e.kind for e in accounting.read(home) if e.job_id == abort] == ["Q", "A"]
    kept = wait_for(env, work, held, "H")
    assert kept["Hold_Types"] == "s" and kept["comment"].startswith("its prologue exited 2: requeued and held")


MARKS = ("prologue = [\"sh\", \"-c\", 'echo \"P $1 $4\" >> \"$0\"; case $4 in abort) exit 1;; esac', \"{marks}\"]\n"
         "epilogue = [\"sh\", \"-c\", 'echo \"E $1 ${10}\" >> \"$0\"', \"{marks}\"]\n")


def test_an_interactive_session_has_the_sites_prologue_and_epilogue_around_it(live):
    """As Torque's and OpenPBS's: the session starts once the prologue has passed, the
    epilogue runs after it (with its exit status); a prologue that exits 1 aborts it."""
    env, home, work, start = live
    marks = work / "marks"
    config = home / "config.toml"
    config.write_text(MARKS.replace("{marks}", str(marks)) + config.read_text())
    start()
    p = interactive(env, work, "-N", "talk", "-l", "walltime=60")
    out, err = p.communicate('test -s "$PBS_O_WORKDIR/marks" && echo "after the prologue"; exit 4\n', timeout=30)
    jid = out.split()[4]
    assert p.returncode == 4 and "after the prologue" in out, out + err
    assert wait_for(env, work, jid)["exit_status"] == "4"
    assert marks.read_text().splitlines() == [f"P {jid} talk", f"E {jid} 4"]
    p = interactive(env, work, "-N", "abort")
    out, _ = p.communicate("echo never\n", timeout=30)
    jid = out.split()[4]
    assert p.returncode == 1 and "never" not in out and "apparently deleted" in out
    assert wait_for(env, work, jid)["comment"] == "launch failed: its prologue exited 1: job aborted"
    assert not list(work.glob("abort.*"))  # (the scripts' output is dropped: no files of its own)


CLEANUP = ("epilogue = [\"sh\", \"-c\", 'echo \"cleanup $1 $(date +%s.%N)\"; case $4 in slow) sleep 1;; stuck) sleep 3174;; esac', \"epi\"]\n"
           "prologue_timeout = 3\n")


@pytest.mark.parametrize("live", [CLEANUP + MAILER], indirect=True)
def test_a_job_keeps_its_nodes_while_its_epilogue_runs(live):
    """As in Torque, a job is E while the site's epilogue runs and no job starts on its
    nodes before the epilogue has ended; its end (and E record) come when the epilogue
    ends, or is killed past prologue_timeout with all it started.  A job killed past its
    walltime is still mailed about as aborted."""
    env, home, work, start = live
    start()
    slow = cmd(env, work, "qsub", "-N", "slow", "-l", "nodes=2:ppn=2,walltime=60", stdin="exit 3\n").stdout.strip()
    wait_for(env, work, slow, "E")
    after = cmd(env, work, "qsub", "-N", "after", "-l", "nodes=2:ppn=2,walltime=60", stdin="true\n").stdout.strip()
    seen = state(env, work, slow)
    assert seen["job_state"] == "E" and state(env, work, after)["job_state"] == "Q"
    done, later = wait_for(env, work, slow), wait_for(env, work, after)
    cleaned = float((work / f"slow.o{slow.split('.')[0]}").read_text().split()[-1])
    ends = {e.job_id: e for e in accounting.read(home) if e.kind == "E"}
    assert done["exit_status"] == "3" and later["exit_status"] == "0"
    # (records hold whole seconds: the epilogue slept one past `cleaned`)
    assert int(ends[slow].fields["end"]) >= int(cleaned + 1) and int(ends[after].fields["start"]) >= int(cleaned + 1)
    stuck = cmd(env, work, "qsub", "-N", "stuck", "-l", "walltime=60", stdin="true\n").stdout.strip()
    wait_for(env, work, stuck, "E")
    began = time.time()
    assert wait_for(env, work, stuck)["exit_status"] == "0" and 1 < time.time() - began < 10
    assert not _alive("sleep 3174")
    # a job stuck in E (or one that will not end) goes at once with qdel -W force (its
    # owner) or -p (operators), its epilogue killed; a plain qdel cannot delete it twice
    purged = cmd(env, work, "qsub", "-N", "stuck", "-l", "walltime=60", stdin="true\n").stdout.strip()
    wait_for(env, work, purged, "E")
    assert cmd(env, work, "qdel", purged).returncode == 170
    assert cmd(env, work, "qdel", "-p", purged).returncode == 159  # (alice is no operator)
    began = time.time()
    assert cmd(env, work, "qdel", "-W", "force", purged).returncode == 0
    assert wait_for(env, work, purged)["exit_status"] == "0" and time.time() - began < 2.5
    assert not _alive("sleep 3174")
    running = cmd(env, work, "qsub", "-l", "walltime=60", stdin="trap '' TERM; sleep 3175\n").stdout.strip()
    wait_for(env, work, running, "R")
    assert cmd(env, work, "qdel", "-W", "force", running).returncode == 0
    assert wait_for(env, work, running)["exit_status"] == str(256 + signal.SIGKILL) and not _alive("sleep 3175")
    over = cmd(env, work, "qsub", "-N", "over", "-l", "walltime=1", stdin="sleep 60\n").stdout.strip()
    assert wait_for(env, work, over)["exit_status"] == str(256 + signal.SIGTERM)
    mails = (home / "mail.out").read_text().split("\n.\n")
    assert [m for m in mails if f"PBS JOB {over}\n" in m and "Job exceeded its walltime limit" in m]


RESTART = ("epilogue = [\"sh\", \"-c\", 'sleep 1.5; case $4 in stuck) sleep 3176;; esac; echo \"cleaned $(date +%s.%N)\"', \"epi\"]\n"
           "prologue_timeout = 4\n")


@pytest.mark.parametrize("live", [RESTART], indirect=True)
def test_a_restarted_server_waits_for_the_epilogue_its_predecessor_started(live):
    """An epilogue that outlives its server still holds the job's nodes: the next server
    keeps the job E until the epilogue has ended, or kills it past prologue_timeout."""
    env, home, work, start = live
    server = start()
    slow = cmd(env, work, "qsub", "-N", "slow", "-l", "nodes=2:ppn=2,walltime=60", stdin="true\n").stdout.strip()
    wait_for(env, work, slow, "E")
    server.send_signal(signal.SIGTERM), server.wait(10)
    server = start()
    after = cmd(env, work, "qsub", "-N", "after", "-l", "nodes=2:ppn=2,walltime=60", stdin="true\n").stdout.strip()
    assert state(env, work, slow)["job_state"] == "E" and state(env, work, after)["job_state"] == "Q"
    assert wait_for(env, work, slow)["exit_status"] == "0" and wait_for(env, work, after)["exit_status"] == "0"
    cleaned = float((work / f"slow.o{slow.split('.')[0]}").read_text().split()[-1])
    starts = {e.job_id: e for e in accounting.read(home) if e.kind == "S"}
    assert int(starts[after].fields["start"]) >= int(cleaned)  # (records hold whole seconds)
    stuck = cmd(env, work, "qsub", "-N", "stuck", "-l", "walltime=60", stdin="true\n").stdout.strip()
    wait_for(env, work, stuck, "E")
    server.send_signal(signal.SIGTERM), server.wait(10)
    start()
    assert _alive("sleep 3176") and state(env, work, stuck)["job_state"] == "E"
    assert wait_for(env, work, stuck)["exit_status"] == "0" and not _alive("sleep 3176")


SLOW = ("prologue = [\"sh\", \"-c\", 'case $4 in slow) sleep 3173;; esac', \"pro\"]\n"
        "prologue_timeout = 1.5\n")


@pytest.mark.parametrize("live", [SLOW], indirect=True)
def test_a_prologue_runs_beside_the_server_and_one_that_overruns_is_killed_whole(live):
    """The server goes on while a prologue runs (other jobs start, commands answer); one
    past prologue_timeout is killed with all it started, and its job requeued held; a job
    deleted meanwhile takes its prologue with it, and its D ends its accounting (it has no S:
    it was never launched)."""
    from hpcsched.pbs import accounting
    env, home, work, start = live
    start()
    slow = cmd(env, work, "qsub", "-N", "slow", stdin="echo never\n").stdout.strip()
    wait_for(env, work, slow, "R")
    began = time.time()  # (the rig's other node)
    quick = cmd(env, work, "qsub", "-N", "quick", stdin="true\n").stdout.strip()
    assert wait_for(env, work, quick)["exit_status"] == "0" and time.time() - began < 1.2
    gone = cmd(env, work, "qsub", "-N", "slow", stdin="echo never\n").stdout.strip()
    wait_for(env, work, gone, "R")
    assert cmd(env, work, "qdel", gone).returncode == 0
    assert wait_for(env, work, gone)["job_state"] == "C"
    assert [e.kind for e in accounting.read(home) if e.job_id == gone] == ["Q", "D"]
    kept = wait_for(env, work, slow, "H")
    assert kept["comment"] == "its prologue timed out after 1.5 s: requeued and held (qrls -h s releases it)"
    deadline = time.time() + 5
    while _alive("sleep 3173") and time.time() < deadline:
        time.sleep(0.1)
    assert not _alive("sleep 3173")  # (neither prologue left anything behind)
    assert "never" not in (work / f"slow.o{slow.split('.')[0]}").read_text()


def test_qmgr_changes_reach_a_running_server(live):
    """`set server scheduling = False` stops new starts at the next pass; a queue qmgr
    creates takes jobs the server then runs."""
    env, home, work, start = live
    root = dict(env, HPCSCHED_USER="root")  # qmgr's changes need a manager
    start()
    assert cmd(root, work, "qmgr", "-c", "set server scheduling = False").returncode == 0
    held = cmd(env, work, "qsub", "-l", "walltime=60", stdin="true\n").stdout.strip()
    time.sleep(1.5)  # six passes' worth
    assert state(env, work, held)["job_state"] == "Q"
    made = cmd(root, work, "qmgr", "-c", "create queue fast resources_max.walltime = 0:10:00")
    assert made.returncode == 0, made.stderr
    assert cmd(root, work, "qmgr", "-c", "set server scheduling = True").returncode == 0
    fast = cmd(env, work, "qsub", "-q", "fast", "-l", "walltime=60", stdin="true\n")
    assert fast.returncode == 0, fast.stderr
    for jid in (held, fast.stdout.strip()):
        assert wait_for(env, work, jid)["exit_status"] == "0"
    assert state(env, work, fast.stdout.strip())["queue"] == "fast"


@pytest.mark.parametrize("live", ["server_interval = 30\n"], indirect=True)
def test_polling_commands_do_not_delay_walltime_enforcement(live):
    """Deadlines, not the interval since the last command, drive steps: a 2 s job is killed
    on time (and escalated to SIGKILL after the grace) while qstat polls twice a second,
    with a 30 s interval."""
    env, home, work, start = live
    start()
    stubborn = cmd(env, work, "qsub", "-l", "walltime=2", stdin="trap '' TERM; sleep 60\n").stdout.strip()
    began = time.time()
    while time.time() - began < 12:
        listing = cmd(env, work, "qstat", stubborn)
        if f"{stubborn.split('.')[0]}" in listing.stdout and " C " in listing.stdout:
            break
        time.sleep(0.5)
    took = time.time() - began
    assert state(env, work, stubborn)["exit_status"] == "265", listing.stdout  # SIGKILL after the grace
    assert took < 8, took


def test_a_nul_byte_is_refused_at_the_door_and_a_bad_path_fails_its_job_alone(live):
    env, home, work, start = live
    server = start()
    for script in ("#PBS -N a\0b\ntrue\n", "#PBS -o out\0put\ntrue\n", "#PBS -v X=a\0b\ntrue\n"):
        done = cmd(env, work, "qsub", "-l", "walltime=60", stdin=script)
        assert done.returncode == 2 and "illegal character (NUL)" in done.stderr, done.stderr
    # a path no file can have, already in the store (an older client): the job fails alone
    jid = cmd(env, work, "qsub", "-h", "-l", "walltime=60", stdin="true\n").stdout.strip()
    from hpcsched.store.journaled import Batch
    from hpcsched.store.site import load_site
    batch = Batch.of(load_site(home))
    with batch.open(write=True):
        job = batch.sched.job(int(jid.split(".")[0]))
        batch.do("process", id=job.id, set={"output": str(work / "bad\0name")})
    assert cmd(env, work, "qrls", jid).returncode == 0
    s = wait_for(env, work, jid)
    assert s["exit_status"] == "-1" and "launch failed" in s["comment"] and server.poll() is None
    ok = cmd(env, work, "qsub", "-l", "walltime=60", stdin="true\n").stdout.strip()
    assert wait_for(env, work, ok)["exit_status"] == "0"


def test_generated_bad_commands_never_stop_the_server(live):
    """Forty generated bad commands (tests/fuzz.py) through a running server: each answered
    with a documented status and no traceback, and the server still schedules after."""
    from fuzz import STATUSES, cases
    env, home, work, start = live
    server = start()
    for case in cases("command", 7, 40):
        e = dict(env, HPCSCHED_FLAVOR=case["flavor"])
        argv = [a.replace("\0", "") for a in case["argv"]]  # (exec refuses NUL in arguments)
        p = subprocess.run([os.path.join(BIN, case["prog"]), *argv], input=case["stdin"].replace("\0", ""),
                           capture_output=True, text=True, env=e, cwd=work, timeout=30, errors="replace")
        assert p.returncode in STATUSES[case["flavor"]] and "Traceback" not in p.stderr, (case, p.stderr)
        assert server.poll() is None, (case, p.stderr)
    ok = cmd(env, work, "qsub", "-l", "walltime=60", stdin="true\n").stdout.strip()
    assert wait_for(env, work, ok)["exit_status"] == "0"


def test_an_epilogue_its_server_died_before_starting_is_started_by_the_next(rig, monkeypatch):
    """The job's end journaled (E), its server dies before the epilogue starts: the next
    server starts it, keeps the job E while it runs, and records the end once it has."""
    import io

    from hpcsched.pbs import qsub
    from hpcsched.server import hooks, loop as server
    from hpcsched.store.journaled import Batch
    from hpcsched.store.site import load_site
    config = rig / "home" / "config.toml"
    config.write_text(f'epilogue = ["sh", "-c", "sleep 0.3; echo $1 >> {rig / "cleaned"}", "epi"]\n'
                      + config.read_text())
    qsub.submit(["-l", "walltime=60"], stdin=io.StringIO("true\n"), cwd=str(rig), env={})

    class Died(BaseException):
        pass

    def die(*_):
        raise Died
    real = hooks.Hooks.script
    monkeypatch.setattr(hooks.Hooks, "script", die)  # (the site has no prologue: the epilogue's start)
    srv, deadline = server.Server(load_site(), grace=0.5), time.time() + 10
    with pytest.raises(Died):
        while time.time() < deadline:
            srv.step()
            time.sleep(0.05)
    monkeypatch.setattr(hooks.Hooks, "script", real)

    def job():
        with Batch(load_site()).open(write=False) as batch:
            return batch.sched.jobs[1]
    assert job().state.value == "exiting" and "epilogue_pid" not in job().extra
    srv = server.Server(load_site(), grace=0.5)
    srv.step()
    assert job().state.value == "exiting" and not (rig / "cleaned").exists()  # (it runs: the job stays E)
    while job().state.value != "completed" and time.time() < deadline + 10:
        time.sleep(0.05)
        srv.step()
    assert (rig / "cleaned").read_text() == "1.headnode\n" and job().exit_status == 0


def test_a_full_disk_stops_changes_not_jobs_and_no_end_is_lost(rig, monkeypatch, capsys):
    """While the journal cannot be written: commands fail cleanly and save nothing, running
    jobs go on and walltimes are enforced, no job starts; when space returns, every end is
    recorded with its real status and no job runs twice."""
    import errno
    import io

    from hpcsched.pbs import qsub
    from hpcsched.server import loop as server
    from hpcsched.store import journal
    from hpcsched.store.journaled import Batch
    from hpcsched.store.site import load_site
    for script, wall in (("sleep 0.3\n", "60"), ("trap '' TERM; sleep 30\n", "1")):
        qsub.submit(["-l", f"walltime={wall}"], stdin=io.StringIO(script), cwd=str(rig), env={})
    srv = server.Server(load_site(), grace=0.5)
    assert srv.step() == 2
    real = journal.Store.append

    def full(self, record, before=None):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(journal.Store, "append", full)
    before = (rig / "home" / "journal.jsonl").read_bytes()
    with pytest.raises(Exception, match="No space left on device"):
        qsub.submit(["-l", "walltime=60"], stdin=io.StringIO("true\n"), cwd=str(rig), env={})
    deadline = time.time() + 10
    while time.time() < deadline:  # job 1 ends; job 2 outlives its walltime, ignores SIGTERM
        assert srv.step() == 0
        if srv.sent.get(2, (0,))[0] == signal.SIGKILL:
            break
        time.sleep(0.1)
    assert srv.sent[2][0] == signal.SIGKILL  # escalated with nothing written
    assert (rig / "home" / "journal.jsonl").read_bytes() == before
    assert "cannot write (No space left on device): nothing was saved; running jobs go on" in capsys.readouterr().err
    monkeypatch.setattr(journal.Store, "append", real)
    time.sleep(0.2)
    srv.step()
    batch = Batch(load_site())
    with batch.open(write=False):
        jobs = batch.sched.jobs
        assert (jobs[1].exit_status, jobs[1].run_count) == (0, 1)  # its real status, kept in memory
        assert (jobs[2].exit_status, jobs[2].run_count) == (256 + signal.SIGKILL, 1)
        assert 3 not in jobs
    assert "writable again" in capsys.readouterr().err


def test_a_fault_in_the_servers_own_code_sets_that_job_aside_and_the_server_goes_on(rig, monkeypatch, capsys):
    """A bug met while handling one job (its launch, its watch) or the pass ends that step
    only: the error is logged once with its traceback, the job is set aside (a launch that
    failed goes back to the queue held, its comment says why) and every other job runs."""
    import io

    from hpcsched.core.scheduler import Scheduler
    from hpcsched.pbs import qsub
    from hpcsched.server import loop as server
    from hpcsched.server.launch import Launching
    from hpcsched.server.runs import Runs
    from hpcsched.store.journaled import Batch
    from hpcsched.store.site import load_site
    for _ in range(3):
        qsub.submit(["-l", "nodes=1:ppn=4,walltime=60"], stdin=io.StringIO("sleep 0.2\n"), cwd=str(rig), env={})
    srv = server.Server(load_site(), grace=0.5)
    launch, watch = Launching.launch, Runs.watch

    def broken_launch(self, job, now):
        if job.id == 1:
            raise RuntimeError("launch bug")
        return launch(self, job, now)
    monkeypatch.setattr(Launching, "launch", broken_launch)
    assert srv.step() == 0  # (job 1 came first: the step ended there)
    assert srv.step() == 2  # job 1 back in the queue, held; jobs 2 and 3 launched
    batch = Batch(load_site())
    with batch.open(write=False):
        one = batch.sched.jobs[1]
        assert one.state.name == "HELD" and "launched" not in one.extra
        assert one.comment == ("the server could not launch it (RuntimeError: launch bug): "
                                        "requeued and held (qrls -h s releases it)")

    def broken_watch(self, job, now):
        if job.id == 2:
            raise ValueError("watch bug")
        return watch(self, job, now)
    monkeypatch.setattr(Runs, "watch", broken_watch)
    deadline = time.time() + 10
    while srv.step() == 0 and time.time() < deadline:
        with batch.open(write=False):
            if batch.sched.jobs[3].state.name == "COMPLETED":
                break
        time.sleep(0.1)
    with batch.open(write=False):
        assert batch.sched.jobs[3].state.name == "COMPLETED"  # its neighbour's fault never stopped it
        assert batch.sched.jobs[2].state.name == "RUNNING"  # set aside: not watched again within a minute
    err = capsys.readouterr().err
    assert err.count("internal error handling job 1: RuntimeError: launch bug; set aside") == 1
    assert err.count("internal error handling job 2: ValueError: watch bug; set aside") == 1
    assert "Traceback (most recent call last)" in err and "in broken_watch" in err
    monkeypatch.setattr(Runs, "watch", watch)
    srv.fault_retry = 0.0  # (its next try is due)
    real = Scheduler.iterate
    monkeypatch.setattr(Scheduler, "iterate", lambda self, now: 1 / 0)
    assert srv.step() == 0
    assert "internal error in its step: ZeroDivisionError" in capsys.readouterr().err
    monkeypatch.setattr(Scheduler, "iterate", real)
    deadline = time.time() + 10
    while time.time() < deadline:
        srv.step()
        with batch.open(write=False):
            if batch.sched.jobs[2].state.name == "COMPLETED":
                break
        time.sleep(0.1)
    with batch.open(write=False):
        assert (batch.sched.jobs[2].state.name, batch.sched.jobs[2].exit_status) == ("COMPLETED", 0)
        assert batch.sched.jobs[2].run_count == 1  # seen to end, not lost and run again


def test_an_exclusive_job_has_its_shared_nodes_alone_and_its_nodefile_as_asked(rig):
    """On shared nodes a place=excl job waits for a node no job uses, holds all its cores
    (so no other job starts there while it runs), and its PBS_NODEFILE lists the
    processors it asked for, not the cores it holds."""
    import io

    from hpcsched.pbs import qsub
    from hpcsched.server import loop as server
    from hpcsched.store.journaled import Batch
    from hpcsched.store.site import load_site
    config = rig / "home" / "config.toml"
    config.write_text(config.read_text().replace('names = "node[01-04]"', 'names = "node[01-04]"\nshared = true'))
    for script, argv in (("sleep 2\n", ["-l", "nodes=3:ppn=1,walltime=60"]),
                         ('cat "$PBS_NODEFILE"\n', ["-l", "select=2:ncpus=2,place=excl,walltime=60", "-N", "ex"]),
                         ("sleep 2\n", ["-l", "nodes=1:ppn=1,walltime=60"])):
        qsub.submit(argv, stdin=io.StringIO(script), cwd=str(rig), env={})
    srv = server.Server(load_site(), grace=0.5)
    assert srv.step() == 2  # jobs 1 and 3 start; job 2 waits: only node04 has no job
    batch = Batch(load_site())
    with batch.open(write=False):
        jobs = batch.sched.jobs
        assert [jobs[i].state.name for i in (1, 2, 3)] == ["RUNNING", "QUEUED", "RUNNING"]
        assert len(set(jobs[1].nodes) | set(jobs[3].nodes)) == 3
    ex = stepped_until_completed(srv, 2)
    assert ex.state.name == "COMPLETED" and ex.exit_status == 0
    assert all(len(cores) == 4 for cores in ex.cores)  # (every core of its two nodes)
    assert sorted((rig / "ex.o2").read_text().split()) == sorted(n for n in ex.nodes for _ in range(2))


def test_gpu_jobs_get_their_own_devices(live):
    """Jobs sharing a GPU node get GPUs no other running job has: CUDA_VISIBLE_DEVICES and
    Torque's PBS_GPUFILE name them, and qstat -f shows them as exec_gpus."""
    env, home, work, start = live
    config = home / "config.toml"
    config.write_text(config.read_text() + '\n[[nodes]]\nnames = "gpu1"\ncores = 8\ngpus = 4\nshared = true\n')
    script = 'cd "$PBS_O_WORKDIR"; echo "$CUDA_VISIBLE_DEVICES $(tr "\\n" " " < $PBS_GPUFILE)" > gpus.$PBS_JOBID; sleep 3\n'
    jids = [cmd(env, work, "qsub", "-l", f"nodes=1:ppn=1:gpus={g},walltime=60", stdin=script).stdout.strip()
            for g in (1, 2, 1)]
    start()
    running = wait_for(env, work, jids[1], states="R")
    assert running["exec_host"].startswith("gpu1/") and running["exec_gpus"].startswith("gpu1-gpu/")
    shown = cmd(dict(env, HPCSCHED_FLAVOR="openpbs"), work, "pbsnodes", "gpu1").stdout
    assert "resources_available.ngpus = 4" in shown and "resources_assigned.ngpus = " in shown
    assert int(shown.split("resources_assigned.ngpus = ")[1].split()[0]) >= 2  # (job 2's two, at least)
    seen = []
    for jid, g in zip(jids, (1, 2, 1)):
        wait_for(env, work, jid)
        devices, *lines = (work / f"gpus.{jid}").read_text().split()
        assert len(devices.split(",")) == g and lines == [f"gpu1-gpu{i}" for i in devices.split(",")]
        seen += devices.split(",")
    assert sorted(seen) == ["0", "1", "2", "3"]  # (they ran at once: each its own)


def test_pbs_rdel_stops_the_jobs_running_in_its_reservation(live):
    env, home, work, start = live
    start()
    made = cmd(env, work, "pbs_rsub", "-D", "600", "-l", "select=1:ncpus=2")
    assert made.returncode == 0 and made.stdout.startswith("R1.")
    jid = cmd(env, work, "qsub", "-q", "R1", "-l", "walltime=5:00", stdin="sleep 300\n").stdout.strip()
    wait_for(env, work, jid, "R")
    job_pid(home, jid)
    assert cmd(env, work, "pbs_rdel", "R1").returncode == 0
    wait_for(env, work, jid, "C")
    assert state(env, work, jid)["comment"] == "Job deleted: reservation R1 ended"
    assert cmd(env, work, "pbs_rstat").stdout == ""


def test_files_are_staged_in_before_a_job_and_out_after_it(live, tmp_path):
    env, home, work, start = live
    start()
    src, dest = tmp_path / "data" / "src.txt", tmp_path / "data" / "result.txt"
    src.parent.mkdir()
    src.write_text("input\n")
    jid = cmd(env, work, "qsub", "-W", f"stagein=in.txt@localhost:{src}", "-W", f"stageout=out.txt@localhost:{dest}",
              "-l", "walltime=60", stdin="cat in.txt > out.txt; echo done >> out.txt\n").stdout.strip()
    assert wait_for(env, work, jid)["exit_status"] == "0"
    assert dest.read_text() == "input\ndone\n"
    # the staged copies are gone from the node (the owner's home); the original stays
    assert not (tmp_path / "alice" / "in.txt").exists() and not (tmp_path / "alice" / "out.txt").exists()
    assert src.read_text() == "input\n"
    # a stageout that cannot copy leaves a line in the error file; the job's status stands
    jid = cmd(env, work, "qsub", "-W", f"stageout=none.txt@localhost:{dest}", "-l", "walltime=60",
              stdin="exit 3\n").stdout.strip()
    assert wait_for(env, work, jid)["exit_status"] == "3"
    seq = jid.split(".")[0]
    assert "=>> PBS: stageout of none.txt to localhost:" in (work / f"STDIN.e{seq}").read_text()
    # a stagein that fails: the job never runs, and waits held with the copy's complaint
    jid = cmd(env, work, "qsub", "-W", f"stagein=x.txt@localhost:{tmp_path}/missing", "-l", "walltime=60",
              stdin=f"touch {tmp_path}/ran\n").stdout.strip()
    s = wait_for(env, work, jid, "H")
    assert s["Hold_Types"] == "s" and s["comment"].startswith("stagein failed (cp: cannot stat")
    assert not (tmp_path / "ran").exists()
    assert cmd(env, work, "qsub", "-W", "stagein=nohost.txt", stdin="true\n").returncode == 2


def test_what_a_wrapper_wrote_is_read_safely(tmp_path):
    """A file of the run directory (the owner's): missing, not a number, a link or a fifo
    is None, never an exception (a missing pid file once stopped a session's handling)."""
    from hpcsched.server.loop import Server
    (tmp_path / "n").write_text("12\n")
    (tmp_path / "x").write_text("x\n")
    (tmp_path / "link").symlink_to(tmp_path / "n")
    os.mkfifo(tmp_path / "fifo")
    assert Server.read_int(tmp_path / "n") == 12
    assert [Server.read_int(tmp_path / name) for name in ("missing", "x", "link", "fifo")] == [None] * 4
    assert Server.read(tmp_path / "n", 1) == b"1"


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MiB filesystem of its own (tmpfs; root only), unmounted after the test."""
    fs = tmp_path / "fs"
    fs.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(fs)],
                                           capture_output=True).returncode != 0:
        pytest.skip("needs root to mount a small filesystem")
    yield fs
    subprocess.run(["umount", "-l", str(fs)], check=True)


def _fill(fs: Path) -> Path:
    """Fill the filesystem to its last byte; returns the file that does it."""
    filler = fs / "filler"
    with open(filler, "wb", buffering=0) as f:
        for size in (65536, 1):
            with contextlib.suppress(OSError):
                while f.write(b"\0" * size):
                    pass
    return filler


def _quick_site(home: Path, tmp_path: Path) -> tuple[dict, Path]:
    """A 2-node rig at `home` stepping every 0.25 s, alice's: (its commands' environment, a work directory)."""
    init_site(home, nodes=2, cores=2)
    (home / "config.toml").write_text("server_interval = 0.25\n" + (home / "config.toml").read_text())
    work = tmp_path / "work"
    work.mkdir()
    env = dict(os.environ, HPCSCHED_HOME=str(home), HPCSCHED_USER="alice", HOME=str(work))
    env.pop("HPCSCHED_FLAVOR", None)
    return env, work


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM])
def test_a_job_that_ended_while_the_disk_was_full_never_runs_again(small_disk, tmp_path, stop):
    """The disk fills while a job runs; it ends; the server cannot journal the end and is
    stopped (kill -9 or SIGTERM) while the disk is still full, then restarted: the end is
    kept, recorded with the job's real status once there is room, and the job never runs
    again; new work meanwhile is refused in one line."""
    home = small_disk / "home"
    env, work = _quick_site(home, tmp_path)
    servers = []

    def start():
        p = subprocess.Popen([sys.executable, "-m", "hpcsched", "server"], cwd=ROOT, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        servers.append(p)
        return p
    try:
        server = start()
        jid = cmd(env, work, "qsub", "-l", "walltime=60",
                  stdin=f'echo ran >> "{work}/runs.log"; sleep 1; exit 3\n').stdout.strip()
        pid = job_pid(home, jid)
        filler = _fill(small_disk)
        while group_alive(pid):  # the job ends with the disk full
            time.sleep(0.05)
        time.sleep(1)  # (the server has tried to record the end, and could not)
        refused = cmd(env, work, "qsub", stdin="true\n")
        assert refused.returncode != 0 and refused.stdout == ""
        assert len(refused.stderr.splitlines()) == 1 and "No space left on device" in refused.stderr, refused.stderr
        server.send_signal(stop)
        server.wait(10)
        start()  # the disk still full
        time.sleep(1.5)
        filler.unlink()
        deadline, found = time.time() + 20, None
        while found is None and time.time() < deadline:
            out = cmd(env, work, "qstat", "-f", "-1", jid).stdout
            found = out if "job_state = C" in out else time.sleep(0.2)
        assert found is not None, "the job's end was never recorded"
        assert "exit_status = 3" in found and "run_count = 1" in found
        assert (work / "runs.log").read_text() == "ran\n"  # it ran once
    finally:
        for p in servers:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.wait(10)


@pytest.mark.parametrize("multi", [False, True])
def test_a_launch_whose_note_was_never_journaled_is_not_run_again(rig, monkeypatch, multi):
    """The server launches a job and cannot journal that it did (a full disk), then stops:
    the next server finds the wrapper's run directory and takes the job as launched: it
    runs once and ends with its own status (also where the pid noted at launch is believed
    before the file's, as on a multi-user site)."""
    job, runs = _launched_unnoted(rig, monkeypatch, WRAPPER, WRAPPER, multi)
    assert (job.state.name, job.exit_status, job.run_count) == ("COMPLETED", 4, 1)
    assert runs.read_text() == "ran\n"


def _launched_unnoted(rig, monkeypatch, wrapper, then=WRAPPER, multi=False, runs_for=0.5):
    """A job launched by a server that could not journal its launch (a full disk) and
    stopped, its wrapper `wrapper`: the job as stepped by the next server (its wrapper
    `then`, on a multi-user site if `multi`), and its runs."""
    import errno
    import io

    from hpcsched.pbs import qsub
    from hpcsched.server import launch
    from hpcsched.server import loop as server
    from hpcsched.store import journal
    from hpcsched.store.site import load_site
    runs = rig / "runs.log"
    qsub.submit(["-l", "walltime=60"], stdin=io.StringIO(f'echo ran >> "{runs}"; sleep {runs_for}; exit 4\n'),
                cwd=str(rig), env={})
    real = journal.Store.append

    def refuse_the_launch_note(self, record, before=None):
        if record.get("op") == "process" and "launched" in record.get("set", {}):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, record, before)
    monkeypatch.setattr(journal.Store, "append", refuse_the_launch_note)
    monkeypatch.setattr(launch, "WRAPPER", wrapper)
    server.Server(load_site(), grace=0.5).step()
    monkeypatch.setattr(journal.Store, "append", real)
    monkeypatch.setattr(launch, "WRAPPER", then)
    srv = server.Server(load_site(), grace=0.5)
    srv.multi = multi
    return stepped_until_completed(srv, 1), runs


def test_a_wrapper_found_starting_is_waited_for_not_run_again(rig, monkeypatch):
    """The next server finds the wrapper between its `started` and its pid (a loaded
    machine): it waits for the pid rather than call the run lost and run the job again."""
    slow = WRAPPER.replace(f"|| exit {TAKEN}\n", f"|| exit {TAKEN}\nsleep 1\n", 1)
    assert slow != WRAPPER
    job, runs = _launched_unnoted(rig, monkeypatch, slow)
    assert (job.state.name, job.exit_status, job.run_count) == ("COMPLETED", 4, 1)
    assert runs.read_text() == "ran\n"


@pytest.mark.parametrize("multi", [False, True])
def test_a_launch_that_finds_the_run_taken_waits_for_the_run(rig, monkeypatch, multi):
    """The next server finds no `started` yet and launches again; the first wrapper takes
    the run, the second finds it taken and exits at once: that is not the job's end (it
    was taken as exit status 0 and the running job killed as leftovers), the first's is."""
    job, runs = _launched_unnoted(rig, monkeypatch, "sleep 0.5\n" + WRAPPER, "sleep 1\n" + WRAPPER, multi, 1.5)
    assert (job.state.name, job.exit_status, job.run_count) == ("COMPLETED", 4, 1)
    assert runs.read_text() == "ran\n"


def test_a_wrapper_that_never_got_past_started_is_lost_after_a_while(rig, monkeypatch):
    """`started` and nothing more, long ago (its wrapper killed at once): the run is lost,
    and the job requeued runs again (once)."""
    never = 'mkdir "$1/started"; touch -d @1 "$1/started"; exit 0\n'
    job, runs = _launched_unnoted(rig, monkeypatch, never)
    assert (job.state.name, job.exit_status, job.run_count) == ("COMPLETED", 4, 2)
    assert runs.read_text() == "ran\n"


def test_the_server_logs_its_start_and_stop_each_job_and_every_refusal(tmp_path):
    """`hpcsched server --log FILE`: a line for its start, each job's start and end, a
    refused qsub (who, and what it said), its stop."""
    home = tmp_path / "home"
    env, work = _quick_site(home, tmp_path)
    logfile = tmp_path / "server.log"
    p = subprocess.Popen([sys.executable, "-m", "hpcsched", "server", "--log", str(logfile)], cwd=ROOT, env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        ready(home / "commands.sock")
        sub = cmd(env, work, "qsub", "-l", "walltime=60", stdin="true\n")
        jid = sub.stdout.strip()
        assert sub.stderr == ""  # (a server runs: no word of waiting for one)
        assert cmd(env, work, "qsub", "-l", "walltime=-5", stdin="true\n").returncode == 2
        deadline = time.time() + 20
        while "ended" not in (logfile.read_text() if logfile.exists() else "") and time.time() < deadline:
            time.sleep(0.1)
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(10)
    text = logfile.read_text()
    n = jid.split(".")[0]
    assert f"hpcsched server: started (pid {p.pid}): site {home}, 2 nodes" in text
    assert f"job {n}: started for alice on " in text and f"job {n}: ended, exit status 0" in text
    assert "refused qsub from alice (status 2): " in text and "walltime" in text.split("refused qsub")[1]
    assert text.rstrip().endswith("stopping: running jobs go on, found again at the next start")
    assert oct(logfile.stat().st_mode & 0o777) == "0o600" and p.stderr.read() == b""
