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
