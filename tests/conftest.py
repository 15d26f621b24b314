import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def rig(tmp_path, monkeypatch):
    """A test-rig site in a temporary $HPCSCHED_HOME: server headnode, 4 nodes x 4 cores,
    caller alice, operator olga, manager root."""
    home = tmp_path / "home"
    monkeypatch.setenv("HPCSCHED_HOME", str(home))
    monkeypatch.setenv("HPCSCHED_USER", "alice")
    monkeypatch.delenv("HPCSCHED_FLAVOR", raising=False)
    from hpcsched.store.site import init_site

    init_site(home, nodes=4, cores=4)
    text = (home / "config.toml").read_text().replace('server_name = "', 'server_name = "headnode" #"')
    text = text.replace('managers = ["alice"]', 'managers = ["root"]').replace("operators = []", 'operators = ["olga"]')
    (home / "config.toml").write_text(text)
    return tmp_path




def pytest_sessionstart(session):
    """Byte-compile hpcsched once, as an install would: the many commands the tests run as
    fresh processes then load it instead of compiling it from source every time (even
    where PYTHONDONTWRITEBYTECODE keeps the interpreter from caching it)."""
    import compileall
    compileall.compile_dir(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "hpcsched"),
                           quiet=1)


def _job_cgroups() -> set[str]:
    from hpcsched.server.tracking import _cgroup2_root
    root = _cgroup2_root()
    if root is None or not os.path.isdir(root):
        return set()
    return {os.path.join(root, n) for n in os.listdir(root) if n.startswith("hpcsched-")}


def _sites_of_this_session(basetemp) -> set[str]:
    """The cgroup names (`hpcsched-<key>`) of every site this session's tests made: those
    under its tmp_paths and the multi-user tests' bases (so a session tidies its own jobs
    alone, never another session's running beside it)."""
    from pathlib import Path

    from hpcsched.server.tracking import Tracker
    homes = [config.parent for config in Path(basetemp).rglob("config.toml")]
    multiuser = sys.modules.get("multiuser")
    homes += [base / "site" for base in getattr(multiuser, "BASES", ())]
    return {f"hpcsched-{Tracker(home, cgroups=False).key}" for home in homes}


@pytest.fixture(scope="session", autouse=True)
def _tidy_cgroups(tmp_path_factory):
    """The servers the tests start make their jobs' cgroups (as root); those a test left
    (a server killed on purpose, a job still running at a test's end) go at the end."""
    before = _job_cgroups()
    yield
    ours = _sites_of_this_session(tmp_path_factory.getbasetemp())
    for base in _job_cgroups() - before:
        if os.path.basename(base) not in ours:
            continue
        for name in os.listdir(base):
            path = os.path.join(base, name)
            if os.path.isdir(path):
                try:
                    with open(os.path.join(path, "cgroup.kill"), "w") as f:
                        f.write("1")
                except OSError:
                    pass
        for _ in range(50):
            leftovers = [os.path.join(base, n) for n in os.listdir(base) if os.path.isdir(os.path.join(base, n))]
            for path in leftovers:
                try:
                    os.rmdir(path)
                except OSError:
                    pass
            try:
                os.rmdir(base)
                break
            except OSError:
                import time
                time.sleep(0.05)


@pytest.fixture(autouse=True)
def _sigpipe_as_it_was():
    """A command run in-process makes a closed pipe end it (common.command_line sets
    SIGPIPE's default): the test process gets its own disposition back after each test, so
    a later test's children (a server, a client over a socket) start as they would from a
    shell, not killed by the first write to a peer that hung up."""
    import signal
    before = signal.getsignal(signal.SIGPIPE)
    yield
    signal.signal(signal.SIGPIPE, before)
