"""Every command has a console script, a bin/ link and a man page that renders."""
import os
import shutil
import subprocess
import tomllib

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = tomllib.load(open(os.path.join(ROOT, "pyproject.toml"), "rb"))["project"]["scripts"]


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_command_is_packaged(name):
    assert os.access(os.path.join(ROOT, "bin", name), os.X_OK)
    page = os.path.join(ROOT, "man", "man1", f"{name}.1")
    assert os.path.exists(page)
    if shutil.which("man"):
        p = subprocess.run(["man", "-l", page], capture_output=True, text=True, env=dict(os.environ, MANWIDTH="80"))
        assert p.returncode == 0 and name in p.stdout and "warning" not in p.stderr.lower()
    module, function = SCRIPTS[name].split(":")
    mod = __import__(module, fromlist=[function])
    assert callable(getattr(mod, function))


def test_config_file_page():
    assert os.path.exists(os.path.join(ROOT, "man", "man5", "hpcsched.toml.5"))


def test_every_subpackage_is_installed():
    """`pip install .` installs what pyproject lists: every directory of the package."""
    listed = set(tomllib.load(open(os.path.join(ROOT, "pyproject.toml"), "rb"))["tool"]["setuptools"]["packages"])
    found = {os.path.relpath(d, ROOT).replace(os.sep, ".") for d, _, files in os.walk(os.path.join(ROOT, "hpcsched"))
             if "__init__.py" in files}
    assert listed == found


def test_hpcsched_man_shows_a_page_as_text_without_man(tmp_path):
    """`hpcsched man TOPIC` (and `hpcsched man 5 hpcsched.toml`): the page, filled as plain
    text where output is not a terminal or the host has no man(1); an unknown topic is one
    line naming those there are, status 1."""
    import sys
    run = lambda *a: subprocess.run([sys.executable, "-m", "hpcsched", "man", *a], cwd=ROOT, capture_output=True,
                                    text=True, env=dict(os.environ, PATH=str(tmp_path)))  # (no man on PATH)
    done = run("qsub")
    assert done.returncode == 0 and done.stdout.startswith("NAME\n       qsub - submit a batch job\n")
    assert "\\f" not in done.stdout and ".TH" not in done.stdout and max(map(len, done.stdout.splitlines())) <= 90
    done = run("5", "hpcsched.toml")
    assert done.returncode == 0 and "hpcsched.toml - hpcsched site configuration" in done.stdout
    done = run("nosuch")
    assert done.returncode == 1 and done.stdout == "" and len(done.stderr.splitlines()) == 1
    assert "there are: checkjob, checknode" in done.stderr and "qsub" in done.stderr


def test_pip_install_puts_the_man_pages_where_man_finds_them():
    """pyproject's data files: share/man/man1/*.1 and man5/hpcsched.toml.5 under the prefix."""
    data = tomllib.load(open(os.path.join(ROOT, "pyproject.toml"), "rb"))["tool"]["setuptools"]["data-files"]
    assert data == {"share/man/man1": ["man/man1/*.1"], "share/man/man5": ["man/man5/*.5"]}
    import glob
    assert len(glob.glob(os.path.join(ROOT, "man/man1/*.1"))) == len(SCRIPTS) + 1  # (and cobalt.1)
