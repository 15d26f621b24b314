"""The processes of a job, found by their mark where no cgroup holds them (any user)."""
from __future__ import annotations

import os
import subprocess
import sys
import time

from hpcsched.server.tracking import MARK, Tracker


def test_the_mark_finds_what_left_the_session_and_clean_kills_it(tmp_path):
    tracker = Tracker(tmp_path, cgroups=False)
    assert tracker.cgroup(7, 1, create=True) is None
    env = dict(os.environ, **{MARK: tracker.mark(7, 1)})
    other = dict(os.environ, **{MARK: tracker.mark(7, 2)})  # another run of the job: not this one
    escaped = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env,
                               start_new_session=True)
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=other)
    try:
        deadline = time.time() + 10
        while escaped.pid not in tracker.pids(7, 1) and time.time() < deadline:
            time.sleep(0.05)  # (the environment is readable once the child has exec'd)
        assert tracker.pids(7, 1) == {escaped.pid}
        left = tracker.clean(7, 1)
        assert len(left) == 1 and left[0].startswith(f"{escaped.pid} (")
        assert escaped.wait(10) == -9
        assert bystander.poll() is None
    finally:
        for p in (escaped, bystander):
            p.kill()
            p.wait()
