"""A multi-user site, tried as its users would try it: two real Unix users, a root server.

Every attack on a multi-user site is one test: bob cannot see, alter, hold, signal or delete
alice's jobs by any route (the environment, the socket, the store, links, a job of his
own); jobs and their files are their owners'; no process of a finished job is left; the
server survives each attack and restarts cleanly.  Skipped unless run as root (CI is)."""
from __future__ import annotations

import grp
import os
import re
import pwd
import select
import shutil
import signal
import socket
import stat
import subprocess
import time
from pathlib import Path

import pytest

from multiuser import ROOT, USERS, MultiSite, drop_users, make_users, needs_root, new_base, run_as

pytestmark = needs_root
ALICE, BOB = USERS


@pytest.fixture(scope="module")
def users():
    base = new_base()
    made = make_users(base)
    yield {name: pwd.getpwnam(name) for name in USERS}
    drop_users(made)
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def site(users):
    for pw in users.values():  # (job ids start at 1 on every site: no output of an earlier test)
        for path in Path(pw.pw_dir).glob("*.sh*"):
            path.unlink()
    base = new_base()
    s = MultiSite(base)
    yield s
    s.stop()
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def live(site):
    site.start()
    return site


def script(user: str, name: str, text: str) -> str:
    """A job script in the user's home, the user's own file; its path."""
    pw = pwd.getpwnam(user)
    path = os.path.join(pw.pw_dir, name)
    with open(path, "w") as f:
        f.write("#!/bin/sh\n" + text)
    os.chown(path, pw.pw_uid, pw.pw_gid)
    return path


def submit(site, user: str, text: str, *options: str, name: str = "job.sh") -> int:
    script(user, name, text)
    status, out, err = site.run(user, "qsub", *options, name)
    assert status == 0, err
    return int(out.split(".")[0])


def processes(word: str) -> list[str]:
    """Command lines of live processes that contain `word` (a marker argument)."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    line = f.read().replace(b"\0", b" ").decode(errors="replace")
                with open(f"/proc/{pid}/stat") as f:
                    zombie = f.read().rsplit(")", 1)[1].split()[0] == "Z"
            except OSError:
                continue
            if word in line and not zombie:
                found.append(line)
    return found


def gone(word: str, timeout: float = 10.0) -> bool:
    deadline = time.time() + timeout
    while processes(word):
        if time.time() > deadline:
            return False
        time.sleep(0.1)
    return True


# --- identity: the kernel's word, never the environment --------------------------------

def test_bob_cannot_act_on_alices_job_by_naming_her(live):
    jid = submit(live, ALICE, "sleep 60\n", "-h")
    for prog, argv in (("qdel", [str(jid)]), ("qsig", ["-s", "KILL", str(jid)]), ("qrls", [str(jid)]),
                       ("qalter", ["-N", "stolen", str(jid)]), ("qhold", [str(jid)])):
        status, _, err = live.run(BOB, prog, *argv, env={"HPCSCHED_USER": ALICE})
        assert status == 159 and "Unauthorized" in err, (prog, err)
        assert f"HPCSCHED_USER is ignored: the server knows you as {BOB}" in err
    job = live.sched().jobs[jid]
    assert job.name == "job.sh" and job.owner == ALICE and job.holds  # untouched
    status, _, err = live.run(ALICE, "qdel", str(jid))  # the owner may
    assert status == 0, err


def test_bob_gets_no_manager_powers_by_calling_himself_root(live):
    status, _, err = live.run(BOB, "pbsnodes", "-o", "node01", env={"HPCSCHED_USER": "root"})
    assert status == 159 and "may not change nodes" in err
    status, _, err = live.run(BOB, "qmgr", "-c", "set server scheduling = False", env={"HPCSCHED_USER": "root"})
    assert status != 0
    pid = os.fork()
    if pid == 0:  # `HPCSCHED_USER=root hpcsched nodes --set offline node01` as bob
        status = 3
        try:
            os.setgid(pwd.getpwnam(BOB).pw_gid)
            os.setuid(pwd.getpwnam(BOB).pw_uid)
            os.environ.update(HPCSCHED_USER="root", HPCSCHED_HOME=str(live.home))
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 2)
            from hpcsched import cli
            status = cli.main(["nodes", "--set", "offline", "node01"])
        finally:
            os._exit(status if isinstance(status, int) else 3)
    _, ws = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(ws) == 1  # it cannot even read the site
    assert live.sched().topology.node("node01").state.value == "up"
    assert "scheduling" not in (live.home / "config.toml").read_text()


def test_managers_and_operators_come_from_the_config_by_user_or_group(live):
    import grp
    group = grp.getgrgid(pwd.getpwnam(BOB).pw_gid).gr_name
    live.configure(f'operators = ["@{group}"]\n')
    time.sleep(0.3)  # (the server reloads its configuration at its next step)
    jid = submit(live, ALICE, "sleep 60\n", "-h")
    status, _, err = live.run(BOB, "qrls", "-h", "o", str(jid))  # an operator's right
    assert status == 0, err
    status, _, err = live.run(BOB, "pbsnodes", "-o", "node02")
    assert status == 0, err
    live.run(ALICE, "qdel", str(jid))


def test_a_job_of_bobs_connecting_to_the_socket_is_bob(live):
    python = shutil.which("python3", path="/usr/bin:/bin")
    probe = subprocess.run(["runuser", "-u", BOB, "--", python or "/nonexistent", "-c",
                            f"import sys; sys.path.insert(0, {str(ROOT)!r}); import hpcsched"],
                           capture_output=True)
    if python is None or probe.returncode != 0:
        pytest.skip("no interpreter and checkout that bob may run")
    victim = submit(live, ALICE, "sleep 60\n", "-h")
    jid = submit(live, BOB, f"""export HPCSCHED_USER={ALICE}
{python} -c "import sys; sys.path.insert(0, '{ROOT}'); sys.argv = ['qdel', '{victim}']
from hpcsched.pbs import front; sys.exit(front.main('qdel'))"
echo "qdel said $?"
""")
    job = live.wait(jid)
    out = Path(pwd.getpwnam(BOB).pw_dir, f"job.sh.o{jid}").read_text() + \
        Path(pwd.getpwnam(BOB).pw_dir, f"job.sh.e{jid}").read_text()
    assert "qdel said 159" in out and "Unauthorized" in out, out
    assert job.exit_status == 0
    assert live.sched().jobs[victim].state == "held"


# --- jobs run as their owners ------------------------------------------------------------

def test_jobs_run_as_their_owners_and_their_files_are_theirs(live, users):
    jid = submit(live, ALICE, f"id -un\nid -gn\necho $HOME\ntouch {live.home}/planted || echo refused\n")
    job = live.wait(jid)
    assert job.exit_status == 0
    home = users[ALICE].pw_dir
    out = Path(home, f"job.sh.o{jid}")
    assert out.read_text().split() == [ALICE, ALICE, home, "refused"]
    for path in (out, Path(home, f"job.sh.e{jid}")):
        st = path.stat()
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (users[ALICE].pw_uid, users[ALICE].pw_gid, 0o600)
    assert not (live.home / "planted").exists()


def test_files_are_staged_with_the_owners_rights_alone(live, users):
    """Staging runs as the job's owner: alice's own file comes in (and its copy goes after);
    a file only root may read does not, and her job waits held, never run."""
    home = users[ALICE].pw_dir
    mine = Path(home, "mine.txt")
    mine.write_text("hers\n")
    os.chown(mine, users[ALICE].pw_uid, users[ALICE].pw_gid)
    secret = live.base / "secret.txt"
    secret.write_text("root's\n")
    os.chmod(secret, 0o600)
    jid = submit(live, ALICE, "cat in.txt\n", "-W", f"stagein=in.txt@localhost:{mine}")
    assert live.wait(jid).exit_status == 0
    assert Path(home, f"job.sh.o{jid}").read_text() == "hers\n" and not Path(home, "in.txt").exists()
    jid = submit(live, ALICE, "cat stolen.txt\n", "-W", f"stagein=stolen.txt@localhost:{secret}")
    job = live.wait(jid, ("H",))
    assert "Permission denied" in job.comment and not Path(home, "stolen.txt").exists()
    mine.unlink()


def test_root_may_not_submit_unless_acl_roots_says_so(site):
    site.start()
    work = site.base / "root.sh"
    work.write_text("true\n")
    status, _, err = run_as("root", site.home, "qsub", [str(work)], cwd=str(site.base))
    assert status == 175 and "Bad UID for job execution" in err
    site.stop()
    site.configure('acl_roots = ["root"]\n')
    site.start()
    status, out, err = run_as("root", site.home, "qsub", [str(work)], cwd=str(site.base))
    assert status == 0, err
    site.stop()  # with no server the site's owner works on the store, still as itself
    status, out, err = run_as("root", site.home, "qsub", [str(work)], cwd=str(site.base),
                              env={"HPCSCHED_USER": ALICE})
    assert status == 0 and "HPCSCHED_USER is ignored on a multi-user site (you are root)" in err, err
    assert site.sched().jobs[int(out.split(".")[0])].owner == "root"


def test_an_output_path_the_owner_may_not_write_is_the_jobs_failure(live):
    secret = live.base / "root-only"
    secret.write_text("root's\n")
    os.chmod(secret, 0o600)
    jid = submit(live, ALICE, "echo leaked\n", "-o", str(secret))
    job = live.wait(jid)
    assert secret.read_text() == "root's\n"
    assert job.exit_status == -1 and "launch failed: Permission denied" in job.comment
    assert live.server.poll() is None  # the server goes on
    jid = submit(live, BOB, "true\n")
    assert live.wait(jid).exit_status == 0


def test_the_server_reads_no_script_for_a_user(live):
    secret = live.base / "root-script"
    secret.write_text("cat /etc/shadow\n")
    os.chmod(secret, 0o600)
    status, _, err = live.run(ALICE, "qsub", str(secret))
    assert status == 1 and "script file cannot be loaded" in err
    assert live.sched().jobs == {}


# --- a store only the server reads ----------------------------------------------------------

def test_the_store_is_private_and_users_cannot_forge_records(live):
    ran = submit(live, BOB, "true\n", name="ran.sh")
    live.wait(ran)  # (so that jobs/ and jobs/1 exist)
    jid = submit(live, ALICE, "sleep 60\n", "-h", "-V")
    for path in live.home.iterdir():
        st = path.lstat()
        assert st.st_uid == 0, path
        if stat.S_ISREG(st.st_mode):
            assert stat.S_IMODE(st.st_mode) == 0o600, path
    assert stat.S_IMODE(live.home.stat().st_mode) == 0o711
    pid = os.fork()
    if pid == 0:  # as bob: try to read and append to the store's files
        try:
            os.setgid(pwd.getpwnam(BOB).pw_gid)
            os.setuid(pwd.getpwnam(BOB).pw_uid)
            results = []
            for name in ("journal.jsonl", "config.toml", "accounting", "forged"):
                try:
                    with open(live.home / name, "a") as f:
                        f.write('{"op": "submit"}\n')
                    results.append(f"wrote {name}")
                except OSError:
                    results.append(f"refused {name}")
            try:
                os.listdir(live.home)
                results.append("listed")
            except OSError:
                results.append("no list")
            assert (live.home / "jobs" / "1").is_dir()
            for name in ("jobs/9", "jobs/1/run2"):  # a directory or link for the server to use
                try:
                    os.symlink("/etc", live.home / name)
                    results.append(f"wrote {name}")
                except OSError:
                    results.append(f"refused {name}")
            os._exit(0 if all(r.startswith(("refused", "no list")) for r in results) else 1)
        finally:
            os._exit(2)
    _, ws = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(ws) == 0
    assert live.sched().jobs[jid].owner == ALICE and len(live.sched().jobs) == 2


def test_qstat_hides_an_environment_from_other_users(live):
    jid = submit(live, ALICE, "sleep 60\n", "-h", "-v", "TOKEN=s3cret")
    status, out, _ = live.run(BOB, "qstat", "-f", str(jid))
    assert status == 0 and "Job_Owner" in out and "s3cret" not in out and "Variable_List" not in out
    status, out, _ = live.run(ALICE, "qstat", "-f", str(jid))
    assert "TOKEN=s3cret" in out
    status, out, _ = live.run(BOB, "qstat", "-f", "-F", "json", str(jid))
    assert "s3cret" not in out


def test_query_other_jobs_false_keeps_bob_to_his_own_jobs_through_the_server(live):
    """qmgr's query_other_jobs = False, answered by the root server as each caller: bob
    lists only his own jobs and may not name alice's; root still sees both."""
    hers, his = submit(live, ALICE, "sleep 60\n", "-h"), submit(live, BOB, "sleep 60\n", "-h", name="his.sh")
    assert live.run("root", "qmgr", "-c", "set server query_other_jobs = False")[0] == 0
    status, out, _ = live.run(BOB, "qstat")
    assert status == 0 and [l.split()[0].split(".")[0] for l in out.splitlines()[2:]] == [str(his)]
    status, _, err = live.run(BOB, "qstat", "-f", str(hers))
    assert status == 159 and "Unauthorized Request" in err
    assert live.run(BOB, "checkjob", str(hers))[0] == 159
    status, out, _ = live.run("root", "qstat")
    assert [l.split()[0].split(".")[0] for l in out.splitlines()[2:]] == [str(hers), str(his)]


def test_bob_may_neither_delete_nor_use_alices_reservation(live):
    """pbs_rsub through the root server: the reservation is the caller's, its queue open
    to her alone; bob can neither delete it nor submit to it, whatever he calls himself."""
    status, out, err = live.run(ALICE, "pbs_rsub", "-R", "2359", "-D", "60", "-l", "nodes=1")
    assert status == 0 and out.endswith(" CONFIRMED\n"), err
    name = out.split(".")[0]
    assert live.sched().reservations[name].owner == ALICE
    status, _, err = live.run(BOB, "pbs_rdel", name, env={"HPCSCHED_USER": ALICE})
    assert status == 159 and "Unauthorized Request" in err
    script(BOB, "in.sh", "true\n")
    status, _, err = live.run(BOB, "qsub", "-q", name, "-l", "walltime=30", "in.sh")
    assert status != 0 and f"not allowed in queue {name}" in err
    assert name in live.sched().reservations
    assert live.run(ALICE, "pbs_rdel", name)[0] == 0 and not live.sched().reservations


def test_users_keep_submitting_after_a_compaction_and_accounting_is_the_servers(live, monkeypatch):
    for i in range(3):  # alice, then bob, writes the day's accounting file: both succeed
        for user in (ALICE, BOB):
            submit(live, user, "true\n", name=f"j{i}.sh")
    # a compaction (every 1,000 changes) rewrites the state: force one, then submit again
    from hpcsched.store import journaled
    from hpcsched.store.site import load_site
    live.stop()
    monkeypatch.setattr(journaled, "COMPACT_AFTER", 1)
    batch = journaled.Batch(load_site(live.home))
    with batch.open(write=True):
        batch.do("forget", time.time(), ids=[])
    assert (live.home / "state.json").exists()
    live.start()
    for user in (ALICE, BOB):
        submit(live, user, "true\n")
    for path in [live.home / "state.json", *(live.home / "accounting").iterdir()]:
        st = path.stat()
        assert st.st_uid == 0 and stat.S_IMODE(st.st_mode) == 0o600, path


def test_a_multi_user_site_works_as_init_leaves_it(users):
    base = new_base()
    home = base / "fresh"
    env = dict(os.environ, PYTHONPATH=str(ROOT), HPCSCHED_HOME=str(home))
    done = subprocess.run([shutil.which("python3") or "python3", "-m", "hpcsched", "init", "--multi-user",
                           "--nodes", "2", "--cores", "2"], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "hpcsched-server.service" in done.stdout
    unit = (home / "hpcsched-server.service").read_text()
    assert f"HPCSCHED_HOME={home}" in unit and "KillMode=process" in unit and "-m hpcsched server" in unit
    assert stat.S_IMODE(home.stat().st_mode) == 0o711
    site = MultiSite.__new__(MultiSite)
    site.base, site.home, site.server = base, home, None
    site.start()
    try:
        for user in (ALICE, BOB):
            jid = submit(site, user, "id -un\n")
            assert site.wait(jid).exit_status == 0
    finally:
        site.stop()
        shutil.rmtree(base, ignore_errors=True)


# --- the door: no server, a planted socket ----------------------------------------------------

def test_with_no_server_users_get_one_line_and_cannot_take_the_socket(site):
    status, _, err = site.run(BOB, "qstat")
    assert status == 1 and "cannot connect to the hpcsched server" in err and "\n" == err[-1] and err.count("\n") == 1
    pid = os.fork()
    if pid == 0:
        try:
            os.setgid(pwd.getpwnam(BOB).pw_gid)
            os.setuid(pwd.getpwnam(BOB).pw_uid)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.bind(str(site.home / "commands.sock"))
                os._exit(1)
            except PermissionError:
                os._exit(0)
        finally:
            os._exit(2)
    _, ws = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(ws) == 0


def test_a_client_refuses_a_socket_another_user_serves(users):
    """On a site whose directory others may write (misconfigured), bob's listener gets
    nothing of alice's qsub: the client checks who serves the socket."""
    base = new_base()
    home = base / "shared"
    home.mkdir()
    os.chown(home, users[ALICE].pw_uid, users[ALICE].pw_gid)
    os.chmod(home, 0o777)
    got = []
    r, w = os.pipe()
    done_r, done_w = os.pipe()  # (closed once alice's qsub has returned: bob's listener may stop)
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r), os.close(done_w)
            os.setgid(users[BOB].pw_gid)
            os.setuid(users[BOB].pw_uid)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind(str(home / "commands.sock"))
            os.chmod(home / "commands.sock", 0o777)  # open to all, as the real one is
            s.listen(1)
            os.write(w, b"ready")
            # listen until the qsub is over, however long a loaded machine makes it (a
            # fixed 5 s let the socket go stale first: qsub then ran without a server)
            if s in select.select([s, done_r], [], [], 120)[0]:
                conn, _ = s.accept()
                conn.settimeout(2)
                try:
                    data = conn.recv(65536)
                except OSError:
                    data = b""
                os._exit(3 if data else 0)
            os._exit(0)
        finally:
            os._exit(2)
    os.close(w), os.close(done_r)
    os.read(r, 5)
    status, _, err = run_as(ALICE, home, "qsub", [], cwd="/", stdin=b"echo my secret\n")
    os.close(done_w)
    _, ws = os.waitpid(pid, 0)
    got.append(os.waitstatus_to_exitcode(ws))
    shutil.rmtree(base, ignore_errors=True)
    assert status == 1 and "not the site's owner" in err
    assert got == [0]  # bob's listener received nothing


# --- every process of a job ------------------------------------------------------------------

def test_walltime_kills_every_process_of_the_job(live):
    jid = submit(live, ALICE, """trap '' TERM
(trap '' TERM; exec sleep 30871) &
setsid sleep 30872 &
sleep 30873 &
echo started
sleep 30874
""", "-l", "walltime=2")
    live.wait(jid, ("R",))  # (sleeps of odd lengths: a stray `sleep 300` elsewhere is not one of them)
    deadline = time.time() + 1.5  # (a subshell between its fork and its exec shows the script's line too)
    while len(processes("sleep 3087")) != 4 and time.time() < deadline:
        time.sleep(0.05)
    assert len(processes("sleep 3087")) == 4
    job = live.wait(jid, timeout=30)
    assert job.exit_status >= 256
    assert gone("sleep 3087"), processes("sleep 3087")
    # pbs_mom's word on it, written into her error file as her
    err = Path(pwd.getpwnam(ALICE).pw_dir, f"job.sh.e{jid}")
    used = re.match(r"=>> PBS: job killed: walltime (\d+) exceeded limit 2\n", err.read_text())
    assert used and int(used.group(1)) > 2
    assert err.stat().st_uid == pwd.getpwnam(ALICE).pw_uid


def test_qsub_block_waits_through_the_server_on_a_site_the_user_does_not_own(live, users):
    # (the server submits the job; alice's qsub waits, asking the server, and exits with
    # the job's status)
    script(ALICE, "blocked.sh", "exit 6\n")
    status, out, err = live.run(ALICE, "qsub", "-W", "block=true", "blocked.sh")
    assert status == 6 and out.count("\n") == 1, err
    assert live.wait(int(out.split(".")[0])).exit_status == 6


def test_the_sites_scripts_run_as_the_server_and_write_into_the_owners_files_as_the_owner(site, users):
    site.configure('prologue = ["sh", "-c", "echo pro $(id -un) $2 $3", "pro"]\n'
                   'epilogue = ["sh", "-c", "echo epi $(id -un) $2 ${10}", "epi"]\n')
    site.start()
    jid = submit(site, ALICE, "id -un; exit 4\n")
    assert site.wait(jid).exit_status == 4
    out = Path(users[ALICE].pw_dir, f"job.sh.o{jid}")
    group = grp.getgrgid(users[ALICE].pw_gid).gr_name
    assert out.read_text().split("\n") == [f"pro root {ALICE} {group}", ALICE, f"epi root {ALICE} 4", ""]
    assert out.stat().st_uid == users[ALICE].pw_uid


def test_a_job_takes_its_limits_and_no_nice_its_owner_may_not(live, users):
    """The job's wrapper, as the owner, sets its limits; the server (root) gives it its nice
    value after it becomes the owner: a negative nice is root's to give, not the owner's to ask."""
    show = "ulimit -v; ulimit -t; nice\n"
    low = submit(live, ALICE, show, "-l", "pvmem=600mb,pcput=90,nice=-5", name="low.sh")
    high = submit(live, ALICE, show, "-l", "nice=7", name="high.sh")
    home = users[ALICE].pw_dir
    for jid in (low, high):
        assert live.wait(jid).exit_status == 0
    assert Path(home, f"low.sh.o{low}").read_text().split() == [str(600 * 1024), "90", "0"]
    assert Path(home, f"high.sh.o{high}").read_text().split() == ["unlimited", "unlimited", "7"]


def test_qdel_kills_what_left_the_session(live):
    jid = submit(live, BOB, "setsid sleep 3011 &\nsleep 3012\n")
    live.wait(jid, ("R",))
    time.sleep(0.5)
    assert len(processes("sleep 301")) == 2
    status, _, err = live.run(BOB, "qdel", str(jid))
    assert status == 0, err
    live.wait(jid, timeout=30)
    assert gone("sleep 301"), processes("sleep 301")


def test_a_job_leaves_nothing_behind_and_the_log_says_what_was_killed(live):
    jid = submit(live, ALICE, "sleep 3021 &\nsetsid sleep 3022 &\necho done\n")
    job = live.wait(jid)
    assert job.exit_status == 0
    assert gone("sleep 302"), processes("sleep 302")
    deadline = time.time() + 5
    while "leftover" not in live.server_log() and time.time() < deadline:
        time.sleep(0.1)
    assert f"job {jid}: killed 2 leftover processes" in live.server_log()


# --- the server survives and restarts ----------------------------------------------------------

def test_planted_files_in_a_run_directory_are_the_jobs_failure_not_the_servers(live):
    jid = submit(live, BOB, "sleep 60\n", "-h")
    d = live.home / "jobs" / str(jid) / "run1"
    d.parent.mkdir(parents=True)
    d.write_text("not a directory\n")  # what a pre-made entry would do (users cannot make one)
    live.run(BOB, "qrls", str(jid))
    job = live.wait(jid)
    assert "launch failed" in job.comment
    assert live.server.poll() is None
    # a job that turns its own status file into a fifo and a link: no hang, nothing followed
    jid = submit(live, BOB, 'd=$(dirname "$PBS_NODEFILE"); rm -f "$d/pid"; mkfifo "$d/pid"; '
                            'ln -sf /etc/shadow "$d/status.tmp"\nsleep 1\n')
    job = live.wait(jid)
    assert live.server.poll() is None
    live.stop()
    live.start()  # restarts cleanly, with its history
    assert live.sched().jobs[jid].state == job.state
    jid = submit(live, ALICE, "true\n")
    assert live.wait(jid).exit_status == 0


def test_a_server_killed_mid_job_finds_its_owners_jobs_again(live, users):
    jid = submit(live, ALICE, "sleep 2\nid -un\n")
    live.wait(jid, ("R",))
    live.stop(signal.SIGKILL)
    live.start()
    job = live.wait(jid, timeout=30)
    assert job.exit_status == 0
    assert Path(users[ALICE].pw_dir, f"job.sh.o{jid}").read_text().strip() == ALICE


def test_an_interactive_job_runs_on_the_callers_terminal_as_the_caller(live):
    status, out, err = live.run(ALICE, "qsub", "-I", "-l", "walltime=60", stdin=b"id -un\necho $PBS_ENVIRONMENT\n")
    assert status == 0, err + live.server_log()
    assert f"{ALICE}\nPBS_INTERACTIVE" in out and "completed" in out
    job = live.wait(1)
    assert job.owner == ALICE and job.exit_status == 0


def test_pbsyod_asks_the_server_and_runs_the_program_as_the_caller(live):
    jid = submit(live, ALICE, "sleep 60\n")
    live.wait(jid, ("R",))
    status, out, err = live.run(ALICE, "pbsyod", "sh", "-c", 'id -un; echo "$YOD_NODES $YOD_NP"',
                                env={"PBS_JOBID": str(jid)})
    assert status == 0, err
    assert out.split() == [ALICE, "node01", "1"]
    status, out, err = live.run(BOB, "pbsyod", "true", env={"PBS_JOBID": str(jid)})
    assert status == 159 and "Unauthorized" in err and out == ""
    live.run(ALICE, "qdel", str(jid))


def test_a_session_that_rewrites_its_pid_file_cannot_aim_the_server_at_another_users_process(live):
    victim = submit(live, ALICE, "sleep 3041\n")
    try:
        wrapper = live.wait(victim, ("R",)).extra["pid"]
        while "pid" not in live.sched().jobs[victim].extra:
            time.sleep(0.1)
        session = (f'd=$(dirname "$PBS_NODEFILE"); sleep 1.5\n'
                   f'echo {wrapper} > "$d/pid.tmp"; mv -f "$d/pid.tmp" "$d/pid" && echo rewritten\nsleep 3042\n')
        status, out, err = live.run(BOB, "qsub", "-I", "-l", "walltime=6", stdin=session.encode())
        job = live.wait(2)
        assert "rewritten" in out, out + err  # (the pid file was rewritten before the walltime came)
        assert job.exit_status >= 256  # bob's session was the one killed at its walltime
        assert live.sched().jobs[victim].state == "running" and processes("sleep 3041")
        assert gone("sleep 3042")
        live.run(ALICE, "qdel", str(victim))
    finally:  # (a failure leaves no process behind to fail the next run)
        subprocess.run(["pkill", "-9", "-f", "sleep 304[12]"], check=False)


def test_a_service_account_server_runs_its_own_jobs_and_refuses_others(site, users):
    python = shutil.which("python3", path="/usr/bin:/bin")
    probe = subprocess.run(["setpriv", f"--reuid={ALICE}", f"--regid={users[ALICE].pw_gid}", "--init-groups",
                            python or "/nonexistent", "-c",
                            f"import sys; sys.path.insert(0, {str(ROOT)!r}); import hpcsched.server.loop"],
                           capture_output=True)
    if python is None or probe.returncode != 0:
        pytest.skip("no interpreter and checkout that a service account may run")
    for path in [site.home, *site.home.rglob("*")]:  # alice is the site's service account
        os.chown(path, users[ALICE].pw_uid, users[ALICE].pw_gid)
    site.start(user=ALICE, python=python)
    status, _, err = site.run(BOB, "qsub", script(BOB, "job.sh", "id -un\n"))
    assert status == 175 and "the server runs as hpcst_alice and cannot run jobs as hpcst_bob" in err
    jid = submit(site, ALICE, "id -un\nsleep 60\n")
    site.wait(jid, ("R",))
    status, out, _ = site.run(BOB, "qstat", str(jid))  # bob sees it, as himself
    assert status == 0 and f"{jid}." in out
    status, _, err = site.run(BOB, "qdel", str(jid), env={"HPCSCHED_USER": ALICE})
    assert status == 159
    status, _, err = site.run(ALICE, "qdel", str(jid))
    assert status == 0, err
    assert site.wait(jid).owner == ALICE
    assert Path(users[ALICE].pw_dir, f"job.sh.o{jid}").read_text().split()[0] == ALICE


def test_a_cobalt_site_takes_its_users_jobs_through_the_server(site, users):
    """A client cannot read a multi-user site's configuration: it sends the command Torque's
    or Cobalt's reading names, and the server, which knows the flavor, reads its #COBALT lines.
    The job runs as its owner; another user may not delete it."""
    site.configure('flavor = "cobalt"\n')
    site.start()
    path = script(ALICE, "job.sh", "#COBALT -t 5 -n 1\nid -un; echo $COBALT_JOBID $COBALT_JOBSIZE\nsleep 30\n")
    os.chmod(path, 0o755)
    status, out, err = site.run(ALICE, "qsub", "job.sh")
    assert (status, out, err) == (0, "1\n", "")
    status, out, err = site.run(ALICE, "qsub", "-n", "1", "-t", "1", "-O", "second", "job.sh")
    assert (status, out) == (0, "2\n"), err
    assert site.run(BOB, "qdel", "1")[0] == 1
    status, out, err = site.run(ALICE, "qsub", "-n", "1", "-t", "1", "-h", "--run_users", BOB, "job.sh")
    assert (status, out) == (0, "3\n"), err  # (bob may act on this one as she may: Cobalt's --run_users)
    assert site.run(BOB, "qdel", "3")[0] == 0
    status, _, err = site.run(ALICE, "qsub", "-n", "1", "-t", "1", "--run_users", "hpcst_nosuch", "job.sh")
    assert status == 1 and err == "user hpcst_nosuch does not exist.\n"
    status, _, err = site.run(BOB, "cqadm", "--admin-hold", "1")  # (an operator's tool: the server says who)
    assert status == 1 and err == f"Permission denied: {BOB} is not an operator or a manager\n"
    status, out, err = site.run("root", "cqadm", "--getq")
    assert status == 0 and [line.split()[0] for line in out.splitlines()[2:]] == ["batch"], err
    assert site.run(BOB, "qstat", "1")[1].splitlines()[0].split() == ["JobID", "User", "WallTime", "Nodes", "State",
                                                                   "Location"]
    home = Path(users[ALICE].pw_dir)
    assert site.run(BOB, "cqwait", "--start", "2")[0] == 0  # (from his own process, through the server)
    site.wait(2, ("R",))
    assert site.run(ALICE, "qdel", "1", "2")[0] == 0
    assert site.run(ALICE, "cqwait", "1", "2")[0] == 0
    site.wait(2)
    assert Path(home, "second.output").read_text().split("\n")[:2] == [ALICE, "2 1"]
    assert Path(home, "second.output").stat().st_uid == users[ALICE].pw_uid
    for name in ("second.output", "second.error", "1.output", "1.error"):
        Path(home, name).unlink(missing_ok=True)
