"""The README's quick start, played literally: its commands as a newcomer types them, in
a copy of the clone, on a fresh venv's Python (nothing installed), with a fresh home."""
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRACE = os.path.join(ROOT, "..", "shared", "traces", "KTH-SP2-1996-2.1-cln.swf.gz")


def blocks(kind: str, start: str, end: str) -> list[str]:
    text = open(os.path.join(ROOT, "README.md")).read()
    text = text[text.index(start):text.index(end)]
    return re.findall(rf"```{kind}\n(.*?)```", text, re.S)


@pytest.fixture
def newcomer(tmp_path):
    """(clone, env): a copy of the checkout's package, commands and pages beside a copy of
    ../shared's KTH trace (where there is one), a fresh venv first on PATH, HOME empty."""
    clone = tmp_path / "clone"
    clone.mkdir()
    for part in ("hpcsched", "bin", "man"):
        shutil.copytree(os.path.join(ROOT, part), clone / part, ignore=shutil.ignore_patterns("__pycache__"))
    if os.path.exists(TRACE):
        (tmp_path / "shared" / "traces").mkdir(parents=True)
        os.symlink(os.path.abspath(TRACE), tmp_path / "shared" / "traces" / os.path.basename(TRACE))
    venv = tmp_path / "venv"
    made = subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"this Python cannot make a venv (Debian, Ubuntu: python3-venv): {made.stderr.strip()[-200:]}")
    (tmp_path / "home").mkdir()
    env = {"HOME": str(tmp_path / "home"), "PATH": f"{venv / 'bin'}:/usr/bin:/bin", "LANG": "C.UTF-8"}
    return clone, env


def test_the_readme_quick_start_runs_as_written_on_a_fresh_python(newcomer):
    clone, env = newcomer
    setup = blocks("sh", "## Set up and run", "## A five-minute tour")[0].splitlines()
    demo = [line for line in setup if "demo" in line]
    assert demo and "sh tests/run.sh" in setup[1]  # (the tests' command is this suite: not run again here)
    done = subprocess.run(["bash", "-e", "-c", demo[0]], cwd=clone, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "finished" in done.stdout and "Traceback" not in done.stderr

    site, replay = blocks("sh", "## A five-minute tour", "**The library in 20 lines.**")
    done = subprocess.run(["bash", "-e", "-c", site], cwd=clone, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].startswith("wrote ") and "hello from 1." in done.stdout
    assert re.search(r"^1\.\S+ +hello +\S+ +\S+ C batch", done.stdout, re.M)  # (qstat: it ran and ended)
    home = os.path.join(env["HOME"], "site")
    log = open(os.path.join(home, "server.log")).read()
    assert "server: started" in log and "job 1: ended, exit status 0" in log
    for _ in range(100):  # qterm stopped the server
        if "stopping" in open(os.path.join(home, "server.log")).read():
            break
        time.sleep(0.1)
    assert "stopping" in open(os.path.join(home, "server.log")).read()

    if not os.path.exists(TRACE):
        pytest.skip("../shared/traces/KTH-SP2-1996-2.1-cln.swf.gz is absent: the replay is not played")
    done = subprocess.run(["bash", "-e", "-c", replay], cwd=clone, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert "utilization" in done.stdout
    assert (clone / "kth" / "results.json").exists() and (clone / "kth" / "schedule.swf").exists()
    assert (clone / "kth.html").read_text().startswith("<!DOCTYPE html>")


def test_the_readme_library_examples_run_on_a_fresh_python(newcomer):
    clone, env = newcomer
    codes = blocks("python", "**The library in 20 lines.**", "## Where to go next")
    assert len(codes) == 3
    for code in codes:
        done = subprocess.run(["python3", "-c", code], cwd=clone, env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
    assert "reserved: starts at 3600" in subprocess.run(["python3", "-c", codes[0]], cwd=clone, env=env,
                                                        capture_output=True, text=True).stdout
