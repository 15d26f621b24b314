"""The README's examples run as written."""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def python_blocks():
    text = open(os.path.join(ROOT, "README.md")).read()
    return re.findall(r"```python\n(.*?)```", text, re.S)


def test_readme_python_examples_run(capsys):
    blocks = python_blocks()
    assert len(blocks) >= 2
    for code in blocks:
        exec(compile(code, "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "reserved: starts at 3600" in out


def test_the_readme_test_command_makes_a_venv_where_the_python_has_no_pytest(tmp_path):
    """`sh tests/run.sh` (the README's and .ci/run's test command) on a Python without
    pytest, as a stock Debian one is: it makes .venv, installs pytest there, runs the suite
    with it; with pytest present it runs it directly.  (Played with a stand-in python3 that
    logs what it is asked.)"""
    import shutil
    import subprocess
    readme = open(os.path.join(ROOT, "README.md")).read()
    ci = open(os.path.join(ROOT, ".ci", "run")).read()
    assert "sh tests/run.sh" in readme and "sh tests/run.sh" in ci
    checkout = tmp_path / "clone"
    (checkout / "tests").mkdir(parents=True)
    shutil.copy(os.path.join(ROOT, "tests", "run.sh"), checkout / "tests" / "run.sh")
    log = tmp_path / "log"
    fake = tmp_path / "bin"
    fake.mkdir()
    # the system python3: no pytest; `-m venv DIR` makes DIR/bin/python, a logging stand-in
    # that has pytest once `pip install pytest` ran
    (fake / "python3").write_text(f"""#!/bin/sh
echo "python3 $*" >> {log}
if [ "$1 $2" = "-m venv" ]; then
  mkdir -p "$3/bin"
  cat > "$3/bin/python" <<'INNER'
#!/bin/sh
echo "venv $*" >> {log}
case "$*" in
  "-m pip install --quiet pytest") touch "$(dirname "$0")/has_pytest";;
  "-m pytest --version") [ -f "$(dirname "$0")/has_pytest" ] || exit 1;;
esac
exit 0
INNER
  chmod +x "$3/bin/python"
  exit 0
fi
exit 1
""")
    (fake / "python3").chmod(0o755)
    env = dict(os.environ, PATH=f"{fake}:/usr/bin:/bin")
    done = subprocess.run(["sh", "tests/run.sh", "-x"], cwd=checkout, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert log.read_text().splitlines() == [
        "python3 -m pytest --version", "python3 -m venv .venv", "venv -m pytest --version",
        "venv -m pip install --quiet pytest", "venv -m pytest -q -x"]
    log.write_text("")  # again: the venv is there, with pytest
    assert subprocess.run(["sh", "tests/run.sh"], cwd=checkout, env=env).returncode == 0
    assert log.read_text().splitlines() == ["python3 -m pytest --version", "venv -m pytest --version",
                                            "venv -m pytest -q"]
