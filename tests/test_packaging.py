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
