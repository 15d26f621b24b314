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
