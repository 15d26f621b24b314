"""A multi-user site against a hostile local user: no root code, no cross-site requests,
no identity or group the user does not have, nothing hidden shown, no one user stalling or
filling the site.  Each test plays one attack with real Unix users and a root server;
skipped unless run as root (CI is)."""
from __future__ import annotations

import grp
import os
import pwd
import shutil
import socket
import tempfile
import time
from pathlib import Path

import pytest

from multiuser import USERS, MultiSite, drop_users, make_users, needs_root, new_base, run_as
from test_multiuser import processes, script, submit

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
    for pw in users.values():
        for path in Path(pw.pw_dir).glob("*"):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink()
    base = new_base()
    s = MultiSite(base)
    s.drop = base / "drop"  # a directory anyone may write: what a site program or attack leaves
    s.drop.mkdir()
    os.chmod(s.drop, 0o1777)
    yield s
    s.stop()
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def live(site):
    site.start()
    return site


def owned_by(user: str, path: Path) -> None:
    pw = pwd.getpwnam(user)
    for p in [path, *path.rglob("*")]:
        os.lchown(p, pw.pw_uid, pw.pw_gid)


def root_owned(path: Path) -> list[Path]:
    return [p for p in [path, *path.rglob("*")] if p.lstat().st_uid == 0]


# --- no root code ------------------------------------------------------------------------

def test_a_site_the_user_makes_and_links_the_socket_into_is_not_served(live, users):
    """alice's own site, with a submit filter of hers, and the real socket linked into it:
    the root server answers for its own site alone (the job goes there), runs nothing of
    hers, and creates nothing in her directory."""
    from hpcsched.store.site import init_site
    home = Path(users[ALICE].pw_dir)
    fake = home / "f"
    init_site(fake, nodes=1, cores=1, managers=[ALICE])
    evil = script(ALICE, "x.sh", f"id -u > {live.drop}/pwned\ncat\n")
    os.chmod(evil, 0o755)
    config = fake / "config.toml"
    config.write_text(f'submit_filter = ["{evil}"]\n' + config.read_text())
    for name in ("lock", "journal.jsonl", "accounting"):
        os.symlink(live.drop / f"made-{name}", fake / name)
    os.symlink(live.home / "commands.sock", fake / "commands.sock")
    owned_by(ALICE, fake)
    script(ALICE, "job.sh", "true\n")
    status, out, err = run_as(ALICE, fake, "qsub", ["-h", "job.sh"])
    assert status == 0, err
    jid = int(out.split(".")[0])
    assert live.sched().jobs[jid].owner == ALICE  # (the real site's job)
    assert not (live.drop / "pwned").exists()
    assert not list(live.drop.iterdir()) and root_owned(fake) == []


def test_site_programs_get_no_callers_environment_and_the_filter_runs_as_nobody(site, users):
    """BASH_ENV, LD_PRELOAD and PATH of the caller reach no site program: the filter runs
    as nobody with the site's PATH; mail_command's `sendmail` is the site's, not the one
    alice puts first in her PATH."""
    drop = site.drop
    site.configure(f'submit_filter = ["/bin/bash", "-c", "{{ id -un; env; }} > {drop}/filter.out; cat", "f"]\n'
                   'mail_command = ["sendmail", "-t"]\n')
    site.start()
    home = Path(users[ALICE].pw_dir)
    evil = script(ALICE, "evil.sh", f"touch {drop}/bash_env_ran\n")
    os.makedirs(home / "bin")
    fake = script(ALICE, "bin/sendmail", f"id -un > {drop}/sendmail_ran\n")
    os.chmod(fake, 0o755)
    owned_by(ALICE, home / "bin")
    env = {"BASH_ENV": evil, "LD_PRELOAD": str(home / "evil.so"), "PATH": f"{home}/bin:/usr/bin:/bin"}
    script(ALICE, "job.sh", "sleep 30\n")
    status, out, err = site.run(ALICE, "qsub", "-m", "abe", "job.sh", env=env)
    assert status == 0, err
    jid = int(out.split(".")[0])
    lines = (drop / "filter.out").read_text().splitlines()
    assert lines[0] == "nobody"
    seen = dict(line.partition("=")[::2] for line in lines[1:] if "=" in line)
    assert "BASH_ENV" not in seen and "LD_PRELOAD" not in seen
    assert seen["PATH"] == "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    assert not (drop / "bash_env_ran").exists()
    site.wait(jid, ("R",))
    assert site.run(ALICE, "qdel", str(jid), env=env)[0] == 0
    site.wait(jid)
    time.sleep(0.5)
    assert not (drop / "sendmail_ran").exists()


# --- identity and access -------------------------------------------------------------------

@pytest.fixture
def team(users):
    """A group alice belongs to as a supplementary member (bob does not)."""
    import subprocess
    subprocess.run(["groupadd", "-f", "hpcst_team"], check=True)
    subprocess.run(["usermod", "-a", "-G", "hpcst_team", ALICE], check=True)
    yield "hpcst_team"
    subprocess.run(["groupdel", "hpcst_team"], check=False)


def test_a_group_is_the_owners_own_or_refused_and_the_job_runs_under_it(live, users, team):
    script(ALICE, "job.sh", "id -gn\n")
    status, _, err = live.run(ALICE, "qsub", "-W", "group_list=root", "job.sh")
    assert status == 176 and "alice is not a member of group root" in err.replace("hpcst_", "")
    script(BOB, "job.sh", "true\n")
    assert live.run(BOB, "qsub", "-W", f"group_list={team}", "job.sh")[0] == 176
    assert live.run(ALICE, "qsub", "-W", "group_list=nosuchgroup", "job.sh")[0] == 176
    assert not live.sched().jobs
    status, out, err = live.run(ALICE, "qsub", "-W", f"group_list={team}", "job.sh")
    assert status == 0, err
    jid = int(out.split(".")[0])
    job = live.wait(jid)
    assert job.group == team and job.exit_status == 0
    assert Path(users[ALICE].pw_dir, f"job.sh.o{jid}").read_text() == f"{team}\n"
    status, out, err = live.run(ALICE, "qsub", "job.sh")  # by default: her primary group
    primary = grp.getgrgid(users[ALICE].pw_gid).gr_name
    assert live.sched().jobs[int(out.split(".")[0])].group == primary


def test_a_queues_acl_groups_admits_its_members_without_a_group_list(site, users):
    primary = grp.getgrgid(users[ALICE].pw_gid).gr_name
    path = site.home / "config.toml"
    path.write_text(path.read_text() + f'acl_groups = ["{primary}"]\n')
    site.start()
    script(ALICE, "job.sh", "true\n")
    status, out, err = site.run(ALICE, "qsub", "-h", "job.sh")
    assert status == 0, err
    script(BOB, "job.sh", "true\n")
    status, _, err = site.run(BOB, "qsub", "-h", "job.sh")
    assert status != 0 and "not allowed" in err


@pytest.mark.parametrize("name", ["../x", "a/b", "..", "."])
def test_a_job_name_that_would_lead_out_of_its_directory_is_refused(live, name):
    script(ALICE, "job.sh", "true\n")
    status, _, err = live.run(ALICE, "qsub", "-N", name, "job.sh")
    assert status == 2 and err.startswith(f"qsub: illegal -N value {name!r}\n")
    assert not live.sched().jobs


def test_query_other_jobs_false_hides_ids_in_pbsnodes_dependencies_and_cqwait(live):
    hers = submit(live, ALICE, "sleep 60\n", "-l", "nodes=1:ppn=2")
    live.wait(hers, ("R",))
    assert live.run("root", "qmgr", "-c", "set server query_other_jobs = False")[0] == 0
    status, out, _ = live.run(BOB, "pbsnodes", "-a")
    assert status == 0 and f"/{hers}." not in out and "jobs =" not in out and "job-exclusive" in out
    status, out, _ = live.run(ALICE, "pbsnodes", "-a")
    assert f"/{hers}." in out
    script(BOB, "dep.sh", "true\n")
    mine = live.run(BOB, "qsub", "-W", f"depend=afterok:{hers}", "dep.sh")
    unknown = live.run(BOB, "qsub", "-W", "depend=afterok:999", "dep.sh")
    assert mine[0] == unknown[0] == 153 and mine[2].replace(str(hers), "N") == unknown[2].replace("999", "N")
    held = submit(live, BOB, "true\n", "-h", name="held.sh")
    altered = live.run(BOB, "qalter", "-W", f"depend=afterok:{hers}", str(held))
    assert altered[0] == 153
    t0 = time.time()
    assert live.run(BOB, "cqwait", str(hers))[0] == 0 and time.time() - t0 < 20  # (not waited for)
    live.run("root", "qdel", str(hers))


def test_qmgr_reading_its_directives_from_a_file_goes_through_the_server(live):
    """`qmgr < file` on a running site is the server's change, as `qmgr -c` is (it ran in
    the caller's process before, and the server's own state overwrote it)."""
    status, _, err = live.run("root", "qmgr", stdin=b"set server query_other_jobs = False\n")
    assert status == 0, err
    hers = submit(live, ALICE, "true\n", "-h")
    status, out, _ = live.run(BOB, "qstat")
    assert status == 0 and f"{hers}." not in out
    status, out, _ = live.run("root", "qmgr", "-c", "print server")
    assert "query_other_jobs = False" in out


# --- one user must not stall the site ------------------------------------------------------

def as_user(user: str, act) -> int:
    """Fork a child that becomes `user` and runs act(); its pid (ends by itself)."""
    pw = pwd.getpwnam(user)
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid(pw.pw_gid)
            os.setuid(pw.pw_uid)
            act()
        finally:
            os._exit(0)
    return pid


def test_slow_and_idle_clients_hold_up_neither_walltime_nor_other_users(live):
    """bob opens six connections that say nothing and one that sends a byte a second; alice's
    qstat still answers at once and her 3 s walltime job is killed on time; bob's
    connections are refused in one line at the read deadline."""
    sock_path = str(live.home / "commands.sock")
    said: list[bytes] = []
    r, w = os.pipe()

    def stall():
        os.close(r)
        socks = [socket.socket(socket.AF_UNIX) for _ in range(7)]
        for s in socks:
            s.connect(sock_path)
        for _ in range(12):
            try:
                socks[-1].send(b"h")
            except OSError:
                break
            time.sleep(1)
        answer = b""
        socks[-1].settimeout(1)
        try:
            while chunk := socks[-1].recv(4096):
                answer += chunk
        except OSError:
            pass
        os.write(w, answer)

    jid = submit(live, ALICE, "sleep 60\n", "-l", "walltime=3")
    live.wait(jid, ("R",))
    started = time.time()
    pid = as_user(BOB, stall)
    os.close(w)
    time.sleep(0.5)
    t0 = time.time()
    status, out, _ = live.run(ALICE, "qstat")
    assert status == 0 and f"{jid}." in out and time.time() - t0 < 1.5
    job = live.wait(jid, timeout=15)
    assert time.time() - started < 8 and job.exit_status != 0
    os.waitpid(pid, 0)
    with os.fdopen(r, "rb") as f:
        said.append(f.read())
    assert b"did not arrive whole within 2 s: refused\n" in said[0]


def test_a_request_past_max_request_is_refused_in_one_line(site):
    site.configure("max_request = 100000\n")
    site.start()
    script(BOB, "big.sh", "#" * 300_000 + "\ntrue\n")
    status, out, err = site.run(BOB, "qsub", "big.sh")
    assert status == 1 and err == "hpcsched: the request is larger than 100000 bytes (max_request): refused\n"
    assert not site.sched().jobs
    script(BOB, "small.sh", "true\n")
    assert site.run(BOB, "qsub", "small.sh")[0] == 0


def test_a_user_cannot_reserve_the_machine_for_a_year_but_a_manager_can(live):
    """A multi-user site's defaults: 24 hours, half the nodes, 4 reservations a user."""
    status, _, err = live.run(BOB, "pbs_rsub", "-D", "8760:00:00", "-l", "nodes=2")
    assert status == 188 and "resv_max_duration (24:00:00)" in err
    status, _, err = live.run(BOB, "pbs_rsub", "-D", "1:00:00", "-l", "nodes=2")
    assert status == 188 and "resv_max_nodes (1)" in err
    assert not live.sched().reservations
    from datetime import datetime, timedelta
    soon = datetime.now().replace(second=0, microsecond=0) + timedelta(hours=2)
    for hour in (0, 0, 1, 1):  # (two nodes: two at a time)
        at = (soon + timedelta(hours=hour)).strftime("%Y%m%d%H%M")
        assert live.run(BOB, "pbs_rsub", "-R", at, "-D", "1:00", "-l", "nodes=1")[0] == 0
    at = (soon + timedelta(hours=5)).strftime("%Y%m%d%H%M")
    assert live.run(BOB, "pbs_rsub", "-R", at, "-D", "1:00", "-l", "nodes=1")[0] == 188
    status, out, err = live.run("root", "pbs_rsub", "-R", at, "-D", "8760:00:00", "-l", "nodes=2")
    assert status == 0 and "CONFIRMED" in out, err  # (limits are not a manager's)


def test_qsub_o_tells_no_user_whether_a_path_they_cannot_search_is_a_directory(live, users):
    """-o naming a directory takes the job's default file name inside it; a directory behind
    one bob may not search is no directory to him (else Output_Path would tell him what
    lies in /root)."""
    hidden = Path(tempfile.mkdtemp(dir=live.base))
    os.chmod(hidden, 0o700)
    (hidden / "dir").mkdir()
    script(BOB, "job.sh", "true\n")
    paths = {}
    for target in (hidden / "dir", hidden / "nothing", Path(users[BOB].pw_dir)):
        status, out, err = live.run(BOB, "qsub", "-h", "-o", str(target), "job.sh")
        assert status == 0, err
        paths[target.name] = live.sched().jobs[int(out.split(".")[0])].extra["output"]
    assert paths == {"dir": str(hidden / "dir"), "nothing": str(hidden / "nothing"),
                     BOB: users[BOB].pw_dir + "/"}
    held = max(live.sched().jobs)
    assert live.run(BOB, "qalter", "-o", str(hidden / "dir"), str(held))[0] == 0
    assert live.sched().jobs[held].extra["output"] == str(hidden / "dir")
    os.chown(hidden, users[BOB].pw_uid, -1)  # (his to search now)
    assert live.run(BOB, "qalter", "-o", str(hidden / "dir"), str(held))[0] == 0
    assert live.sched().jobs[held].extra["output"] == f"{hidden}/dir/"


def test_tmpdir_is_the_owners_under_the_sites_tmpdir_and_goes_with_the_job(site, users):
    """$TMPDIR is made under `tmpdir` (not in the site directory, where one job could fill
    the disk the store lives on), the owner's alone, removed at the job's end; a finished
    job's run directory goes when the job leaves the server (keep_completed)."""
    scratch = site.base / "scratch"
    scratch.mkdir(mode=0o1777)
    os.chmod(scratch, 0o1777)
    site.configure(f'tmpdir = "{scratch}"\nkeep_completed = 1\n')
    site.start()
    jid = submit(site, ALICE, 'echo "$TMPDIR" > ~/where; stat -c "%U %a" "$TMPDIR" >> ~/where\n'
                             'head -c 100000 /dev/zero > "$TMPDIR/big"; mkdir "$TMPDIR/d"; touch "$TMPDIR/d/f"\n')
    job = site.wait(jid)
    assert job.exit_status == 0
    where, who = (Path(users[ALICE].pw_dir) / "where").read_text().splitlines()
    assert Path(where).parent == scratch and who == f"{ALICE} 700"
    assert not Path(where).exists() and not list(scratch.iterdir())
    assert not str(site.home) in where
    deadline = time.time() + 15
    while (site.home / "jobs" / str(jid)).exists():
        assert time.time() < deadline, "the run directory outlived the job"
        time.sleep(0.2)


def test_a_job_cannot_leave_its_cgroup_and_one_forking_at_its_end_leaves_nothing(live):
    """alice's job moves a process to the root cgroup (refused: the kernel's rule for a
    process not root's) with its environment cleared, and forks continuously as it ends:
    the job's end kills its cgroup until empty."""
    from hpcsched.server import tracking
    root = tracking._cgroup2_root()
    if root is None:
        pytest.skip("no cgroup v2 here")
    jid = submit(live, ALICE, f"""(env -i setsid sh -c 'echo $$ > {root}/cgroup.procs 2>/dev/null; exec sleep 3101') &
(i=0; while [ $i -lt 3000 ]; do sleep 3102 & i=$((i+1)); done) &
sleep 0.3
""")
    assert live.wait(jid, timeout=30).exit_status == 0
    deadline = time.time() + 10
    while processes("sleep 310"):
        assert time.time() < deadline, len(processes("sleep 310"))
        time.sleep(0.2)


def test_kill_all_empties_a_cgroup_without_cgroup_kill(tmp_path, monkeypatch):
    """The fallback for kernels before 5.14: freeze, kill, thaw until no process is left."""
    import subprocess

    from hpcsched.server import tracking
    root = tracking._cgroup2_root()
    if root is None:
        pytest.skip("no cgroup v2 here")
    cgroup = os.path.join(root, f"hpcsched-test-{os.getpid()}")
    os.mkdir(cgroup)
    try:
        def join():
            with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
                f.write("0")
        proc = subprocess.Popen(["sh", "-c", "i=0; while [ $i -lt 2000 ]; do sleep 3201 & i=$((i+1)); done; wait"],
                                preexec_fn=join)
        time.sleep(0.3)
        real_open = open

        def no_kill_file(path, *a, **kw):
            if str(path).endswith("cgroup.kill"):
                raise FileNotFoundError(path)
            return real_open(path, *a, **kw)
        monkeypatch.setattr("builtins.open", no_kill_file)
        assert tracking.kill_all(cgroup)
        monkeypatch.undo()
        proc.wait(5)
        deadline = time.time() + 10
        while Path(cgroup, "cgroup.procs").read_text().strip():
            assert time.time() < deadline
            time.sleep(0.1)
    finally:
        tracking.kill_all(cgroup)
        time.sleep(0.2)
        os.rmdir(cgroup)


def test_qdel_of_a_large_array_holds_up_no_walltime(live):
    """qdel of one's own 20,000-subjob array is done in slices between the server's steps:
    another job's 3 s walltime is kept meanwhile, and every subjob is deleted when qdel
    answers."""
    script(ALICE, "many.sh", "true\n")
    status, out, err = live.run(ALICE, "qsub", "-h", "-t", "0-19999", "many.sh")
    assert status == 0, err
    array = out.split(".")[0]
    jid = submit(live, BOB, "sleep 60\n", "-l", "walltime=3")
    live.wait(jid, ("R",))
    started = time.time()
    status, _, err = live.run(ALICE, "qdel", array, timeout=120)
    assert status == 0 and err == ""
    job = live.sched().jobs[jid]
    assert job.end_time is not None and job.end_time - job.start_time < 5.5, job.end_time - job.start_time
    sched = live.sched()
    subjobs = [j for j in sched.jobs.values() if j.array_id == int(array.rstrip("[]"))]
    assert len(subjobs) == 20000 and {j.state for j in subjobs} == {"deleted"}
    assert time.time() - started < 60
