"""The parsing real workflow tools do (pbs-cli.md, last table), against real command output."""
import json
import os
import re
import subprocess
import sys

import pytest

from hpcsched.store.site import init_site

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "bin")


@pytest.fixture
def env(tmp_path):
    home = tmp_path / "home"
    init_site(home, nodes=2, cores=2)
    e = dict(os.environ, HPCSCHED_HOME=str(home), HPCSCHED_USER="alice")
    e.pop("HPCSCHED_FLAVOR", None)
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#PBS -N tooljob\n#PBS -l walltime=00:10:00\ntrue\n")
    return e, str(script), tmp_path


def sh(env, *cmd, stdin=None):
    """The command as a tool runs it from PATH (bin/'s wrapper, started by this interpreter
    the way its shebang starts python3)."""
    return subprocess.run([sys.executable, "-S", os.path.join(BIN, cmd[0]), *cmd[1:]], input=stdin, capture_output=True,
                          text=True, env=env, timeout=60, cwd=env.get("CWD", "/tmp"))


def test_dask_first_integer_and_bare_qdel(env):
    e, script, _ = env
    p = sh(e, "qsub", "-N", "dask-worker", "-l", "select=1:ncpus=2:mem=1GB", "-l", "walltime=00:30:00",
           "-e", "logs/", "-o", "logs/", script)
    assert p.returncode == 0
    jid = re.search(r"\d+", p.stdout).group(0)
    assert sh(e, "qdel", jid).returncode == 0


def test_nextflow_one_line_and_grep(env):
    e, script, _ = env
    p = sh(e, "qsub", "-N", "nf-task", "-j", "oe", "-l", "nodes=1:ppn=2,mem=1gb,walltime=00:10:00", script)
    out = p.stdout
    assert out.count("\n") == 1  # the whole stdout is the id
    jid = out.strip()
    f = sh(e, "qstat", "-f", "-1", jid).stdout
    picked = [l for l in f.splitlines() if re.search(r"(Job Id:|job_state =)", l)]
    assert picked[0] == f"Job Id: {jid}" and picked[1].strip() == "job_state = Q"
    b = sh(e, "qstat", "-B").stdout.splitlines()
    assert b[0].startswith("Server") and b[1].startswith("---")


def test_parsl_tokens_and_json(env):
    e, script, _ = env
    ids = [sh(e, "qsub", script).stdout.strip().splitlines()[-1] for _ in range(2)]
    out = sh(e, "qstat", *ids).stdout
    rows = [l.split() for l in out.splitlines() if l.strip() and not l.startswith(("Job", "JOB", "---"))]
    assert [(r[0], r[4]) for r in rows] == [(i, "Q") for i in ids]
    doc = json.loads(sh(e, "qstat", "-f", "-F", "json", *ids).stdout)
    assert set(doc["Jobs"]) == set(ids)


def test_snakemake_torque_xml_exit_status(env):
    e, script, _ = env
    jid = sh(e, "qsub", script).stdout.strip().splitlines()[0]
    sh(e, "qdel", jid)
    xml = sh(e, "qstat", "-f", "-x", jid).stdout
    assert re.search(r"<exit_status>(\d+)</exit_status>", xml).group(1) == "271"


def test_batchspawner_state_from_xml(env):
    e, script, _ = env
    jid = sh(e, "qsub", stdin="#!/bin/sh\n#PBS -h\nsleep 1\n").stdout.strip()
    xml = sh(e, "qstat", "-x", jid).stdout
    assert re.search(r"<job_state>[QH]</job_state>", xml)


def test_toil_columns_and_exit_status(env):
    e, script, _ = env
    jid = sh(e, "qsub", "-S", "/bin/sh", "-V", "-N", "toil_job", "-l", "mem=100mb,nodes=1:ppn=1", script).stdout.strip()
    row = [l.split() for l in sh(e, "qstat", jid).stdout.splitlines()][2]
    assert row[3] == "0" and row[4] == "Q"
    num = jid.split(".")[0]
    sh(e, "qdel", num)
    assert re.search(r"exit_status = (\d+)", sh(e, "qstat", "-f", num).stdout).group(1) == "271"


def test_psij_comment_and_numeric_exit_status(env):
    e, script, tmp = env
    e = dict(e, HPCSCHED_FLAVOR="openpbs")
    jid = sh(e, "qsub", os.path.abspath(script)).stdout.split()[-1]
    doc = json.loads(sh(e, "qstat", "-f", "-F", "json", "-x", jid).stdout)
    assert "comment" in doc["Jobs"][jid] and doc["Jobs"][jid]["job_state"] == "Q"
    sh(e, "qdel", jid)
    doc = json.loads(sh(e, "qstat", "-f", "-F", "json", "-x", jid).stdout)
    assert doc["Jobs"][jid]["Exit_status"] == 271 and doc["Jobs"][jid]["job_state"] == "F"


def test_blahp_version_first_digits_and_exit_codes(env):
    e, script, _ = env
    assert "PBSPro" not in sh(e, "qstat", "--version").stdout  # Torque flavor: not mistaken for PBS Pro
    assert sh(e, "qstat", "--version", ).stderr.startswith("Version:")
    jid = re.match(r"\d+", sh(e, "qsub", script).stdout).group(0)
    f = sh(e, "qstat", "-f", "-1", jid).stdout
    assert re.search(r"job_state = ([QREFCH])", f).group(1) == "Q"
    assert sh(e, "qstat", "-f", "-1", "4242").returncode == 153
    oe = dict(e, HPCSCHED_FLAVOR="openpbs")
    sh(oe, "qdel", jid)
    assert sh(oe, "qstat", "-f", "-1", jid).returncode == 35


def test_cromwell_attached_options(env):
    e, script, tmp = env
    p = sh(e, "qsub", "-N", "cromwell_x", "-lwalltime=00:10:00,nodes=1:ppn=1,mem=512mb", "-d", str(tmp),
           "-o", str(tmp / "out"), "-e", str(tmp / "err"), script)
    assert p.returncode == 0 and re.search(r"(\d+)", p.stdout)
    f = sh(e, "qstat", "-f", "-1", p.stdout.strip()).stdout
    assert "Output_Path = " in f and str(tmp / "out") in f


def test_fireworks_header_by_position(env):
    e, script, _ = env
    sh(e, "qsub", script)
    lines = sh(e, "qstat", "-u", "alice").stdout.splitlines()
    header = next(l for l in lines if l.startswith("Job"))
    row = next(l for l in lines if re.match(r"\d+\.", l))
    assert row[header.index(" S ") + 1] == "Q"  # the state sits under the header's S


def test_gwf_depend_and_job_state(env):
    e, script, _ = env
    a = sh(e, "qsub", script).stdout.strip()
    b = sh(e, "qsub", script).stdout.strip()
    c = sh(e, "qsub", f"-W depend=afterok:{a}:{b}", "-v", "K=V", script).stdout.strip()
    f = sh(e, "qstat", "-f", c).stdout
    assert re.search(r"job_state = (\w)", f).group(1) == "H"


@pytest.mark.parametrize("damage,msg", [
    ("state", "state.json: corrupt or truncated"),
    ("version", "store version 42 is not supported"),
    ("journal", "journal.jsonl: line 1 is corrupt"),
])
def test_damaged_store_is_one_line_and_left_alone(env, damage, msg):
    e, script, tmp = env
    home = tmp / "home"
    for _ in range(3):
        sh(e, "qsub", script)
    sh(e, "qdel", "1")
    from hpcsched.store.journaled import Batch
    from hpcsched.store.site import load_site
    os.environ["HPCSCHED_HOME"] = str(home)
    try:
        batch = Batch(load_site(home))
        with batch.open(write=True):
            batch.store.compact(batch.sched.to_dict(), batch.seq)
    finally:
        del os.environ["HPCSCHED_HOME"]
    if damage == "state":
        (home / "state.json").write_text((home / "state.json").read_text()[:40])
    elif damage == "version":
        text = (home / "state.json").read_text().replace('"store_version":3', '"store_version":42')
        (home / "state.json").write_text(text)
    else:
        (home / "journal.jsonl").write_text("{not json\n" + (home / "journal.jsonl").read_text())
    before = {p.name: p.read_bytes() for p in home.iterdir() if p.is_file() and p.name != "lock"}
    for cmd in (["qstat"], ["qsub", script], ["qdel", "2"]):
        p = sh(e, *cmd)
        assert p.returncode == 1, (cmd, p.stderr)  # (qsub too: it checks every line's checksum, not parsing it)
        assert p.stderr.count("\n") == 1 and msg in p.stderr and "Traceback" not in p.stderr
    after = {p.name: p.read_bytes() for p in home.iterdir() if p.is_file() and p.name != "lock"}
    assert after == before  # nothing replaced, nothing emptied
