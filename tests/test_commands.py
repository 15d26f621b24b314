"""PBS commands over the store: qsub, qstat, qdel, qhold, qrls, in both flavors.

Golden layouts come from ../shared/reference/pbs-cli.md; the tool checks reproduce how
real workflow tools parse the output."""
import io
import json
import multiprocessing
import os
import re
import subprocess
import sys
import time

import pytest

from hpcsched.pbs import qctl, qstat, qsub
from hpcsched.pbs.common import CommandError
from hpcsched.pbs.errors import UsageError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def submit(*argv, script="#!/bin/sh\ntrue\n", cwd=None):
    jid, quiet = qsub.submit(list(argv), stdin=io.StringIO(script), cwd=cwd or "/tmp", env={"HOME": "/h"})
    return jid


def stat(*argv, later=100.0):
    out = io.StringIO()
    status = qstat.QSTAT(list(argv), out=out, now=time.time() + later)
    return status, out.getvalue()


def full(jid):
    """qstat -f -1's attributes of one job, as a dict of strings."""
    return dict(line.strip().split(" = ", 1) for line in stat("-f", "-1", jid)[1].splitlines()[1:] if " = " in line)


def run(prog, *args, env=None):
    """A command as a user runs it, through its bin/ link."""
    e = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, os.path.join(ROOT, "bin", prog), *args], cwd=ROOT, capture_output=True,
                          text=True, env=e, timeout=60)


def test_qsub_configures_the_site_scheduler_once(rig, monkeypatch):
    """Checking the configuration, reading queue limits and the submission share one build."""
    from hpcsched.config import build
    from hpcsched.store import site
    built = []
    monkeypatch.setattr(site, "build", lambda *a, **k: built.append(1) or build(*a, **k))
    assert submit("-N", "once") == "1.headnode" and len(built) == 1


def test_qsub_prints_exactly_one_id_line(rig):
    assert submit("-N", "first") == "1.headnode"
    assert submit("-lwalltime=1:00:00,nodes=1:ppn=4") == "2.headnode"
    p = run("qsub", "-z", "-l", "walltime=60", env={})  # script on stdin (empty)
    assert p.returncode == 0 and p.stdout == ""
    p = subprocess.run([sys.executable, os.path.join(ROOT, "bin", "qsub"), "-N", "x"], input="true\n", cwd=ROOT,
                       capture_output=True, text=True, env=os.environ)
    assert p.returncode == 0 and re.fullmatch(r"4\.headnode\n", p.stdout)


def test_directives_and_command_line_precedence(rig):
    script = """#!/bin/bash
#PBS -N from_script
#PBS -l walltime=02:00:00,nodes=2:ppn=2
#PBS -q batch
#PBS -W depend=afterok:1
echo hi
#PBS -N ignored_after_first_command
"""
    submit("-N", "parent")
    jid = submit("-N", "cmdline", "-l", "walltime=00:30:00", script=script)
    _, out = stat("-f", "-1", jid)
    assert "Job_Name = cmdline" in out
    assert "Resource_List.walltime = 00:30:00" in out and "Resource_List.nodes = 2:ppn=2" in out
    assert "depend = afterok:1.headnode" in out and "job_state = H" in out
    # -C changes the prefix; "" turns scanning off
    jid = submit("-C", "#MY", script="#MY -N custom\n#PBS -N not_this\ntrue\n")
    assert "Job_Name = custom" in stat("-f", jid)[1]
    jid = submit("-C", "", script="#PBS -N off\ntrue\n")
    assert "Job_Name = STDIN" in stat("-f", jid)[1]


def test_w_value_with_a_space_as_one_argument(rig):
    submit()
    submit()
    jid = submit("-W depend=afterok:1:2")
    assert "depend = afterok:1.headnode,afterok:2.headnode" in stat("-f", "-1", jid)[1]


@pytest.mark.parametrize("flavor,args_key", [("torque", "submit_args"), ("openpbs", "Submit_arguments")])
def test_qstat_f_shows_every_attribute_the_job_was_given(rig, monkeypatch, flavor, args_key):
    monkeypatch.setenv("HPCSCHED_FLAVOR", flavor)
    jid = submit("-N", "given", "-S", "/bin/bash", "-k", "oe", "-W", "umask=022", "-m", "be", "-M", "bob@example.org",
                 "-j", "oe", "-p", "7", "-r", "n", "-v", "FOO=bar", "-l", "walltime=60", script="#PBS -A proj\ntrue\n")
    attrs = full(jid)
    assert {k: attrs[k] for k in ("Shell_Path_List", "Keep_Files", "umask", "Mail_Points", "Mail_Users", "Join_Path",
                                  "Priority", "Rerunable", "Account_Name", args_key)} == {
        "Shell_Path_List": "/bin/bash", "Keep_Files": "oe", "umask": "022", "Mail_Points": "be",
        "Mail_Users": "bob@example.org", "Join_Path": "oe", "Priority": "7", "Rerunable": "False",
        "Account_Name": "proj",
        args_key: "-N given -S /bin/bash -k oe -W umask=022 -m be -M bob@example.org -j oe -p 7 -r n -v FOO=bar "
                  "-l walltime=60"}
    assert "FOO=bar" in attrs["Variable_List"] and "PBS_O_WORKDIR=/tmp" in attrs["Variable_List"]
    plain = full(submit())
    assert plain["Keep_Files"] == "n" and plain["Mail_Points"] == "a"
    assert not {"Shell_Path_List", "umask", "Mail_Users", args_key} & set(plain)
    # qalter changes them, with qsub's checks
    assert qctl.QALTER(["-k", "n", "-m", "n", "-S", "/bin/sh", "-W", "umask=7", jid], out=io.StringIO()) == 0
    attrs = full(jid)
    assert (attrs["Keep_Files"], attrs["Mail_Points"], attrs["Shell_Path_List"], attrs["umask"]) == ("n", "n", "/bin/sh", "7")
    assert qctl.QALTER(["-m", "q", jid], out=io.StringIO()) == 2


@pytest.mark.parametrize("argv,status,msg", [
    (["-l", "select=1:ncpus=2,nodes=1"], 2, '"-lresource=" cannot be used with "select" or "place", resource is: nodes'),
    (["-l", "walltime=soon"], 2, "illegal -l value"),
    (["-l", "select=1:ncpus=1,place=bogus"], 2, "illegal -l value: place=bogus (give [free|pack|scatter|"),
    (["-l", "select=1:ncpus=1,place=scatter:group="], 2, "illegal -l value: place=scatter:group="),
    (["-l", "frobs=3"], 2, "Unknown resource type frobs"),
    (["-l", "select=1:ncpus=1:foo=3"], 2, "Unknown resource: foo (select chunk '1:ncpus=1:foo=3')"),
    (["-l", "select=1:ngpus=x"], 2, "illegal -l value: ngpus must be a non-negative integer, not 'x'"),
    (["-l", "nodes=1:gpus=-1"], 2, "illegal -l value: gpus must be a non-negative integer"),
    (["-l", "ngpus=1,nodes=1"], 2, "ngpus cannot be used with nodes (ask in each chunk: nodes=N:gpus=G)"),
    (["-l", "ngpus=1,procs=2"], 2, "ngpus cannot be used with procs"),
    (["-l", "select=2:ncpus=1:host=node01"], 2, "a chunk that names a host is one chunk on it"),
    (["-l", "select=1:ncpus=1:host=node01+1:ncpus=1"], 2, "name a different host in every chunk, or in none"),
    (["-l", "select=1:host=node01+1:host=node01"], 2, "name a different host in every chunk, or in none"),
    (["-l", "select=1:host=nosuch"], 2, "illegal -l value: host: unknown node 'nosuch'"),
    (["-l", "nodes=1:gpus=1"], 188, "requests more than the machine has (1 nodes with 1 GPUs each of 4)"),
    (["-l", "nodes=2:ppn=1+1:ppn=2"], 2, "node specs of different shapes are not supported"),
    (["-l", "nodes=node01+2"], 2, "nodes=node01+2 (name a different host in every spec, or in none)"),
    (["-l", "nodes=node01+node01"], 2, "(name a different host in every spec, or in none)"),
    (["-l", "nodes=nosuch:ppn=2"], 2, "illegal -l value: host: unknown node 'nosuch'"),
    (["-l", "nodes=+1"], 2, "nodes=+1 (give a node count or a host name first)"),
    (["-l", "nodes=ppn=2"], 2, "nodes=ppn=2 (give a node count or a host name first)"),
    (["-l", "nodes=node01,nidmask=0..1"], 2, "illegal -l value: nidmask cannot be used with named hosts"),
    (["-p", "5000"], 2, "illegal -p value"),
    (["-j", "xy"], 2, "illegal -j value"),
    (["-l", "walltime=²"], 2, "illegal -l value: walltime '²'"),
    (["-l", "nodes=1:ppn=²"], 2, "ppn must be a positive integer, not '²'"),
    (["-l", "nodes=" + "9" * 5000], 2, "nodes must be a positive integer"),
    (["-l", "mem=" + "9" * 400 + "tb"], 2, "illegal -l value: bad size"),  # (an OverflowError traceback)
    (["-l", "mem=١gb"], 2, "illegal -l value: bad size"),
    # the limits the server keeps a job to are checked here (they were taken unread)
    (["-l", "vmem=abc"], 2, "illegal -l value: bad size 'abc'"),
    (["-l", "pvmem=1x"], 2, "illegal -l value: bad size '1x'"),
    (["-l", "file=lots"], 2, "illegal -l value: bad size 'lots'"),
    (["-l", "nice=20"], 2, "illegal -l value: nice must be an integer from -20 to 19, not '20'"),
    (["-l", "nice=high"], 2, "illegal -l value: nice must be an integer from -20 to 19, not 'high'"),
    (["-l", "pcput=soon"], 2, "illegal -l value: pcput 'soon'"),
    (["-t", "1-99999999999999999999"], 2, "illegal array request"),
    (["-t", "1-100000000"], 2, "array request too large (at most 100000 subjobs)"),
    (["-J", "1-9%99999999999"], 2, "illegal array request"),
    (["-N", "a\x07b"], 2, "illegal -N value"),
    (["-o", "out\x1bput"], 2, "illegal -o value"),
    (["-e", "x" * 5000], 2, "illegal -e value"),
    (["-M", "bob smith"], 2, "illegal -M value"),
    (["-A", "proj;rm -rf"], 2, "illegal -A value"),
    (["-A", "a,,b"], 2, "illegal -A value"),
    (["-W", "group_list=a b"], 2, "illegal -W group_list value"),
    (["-m", "abx"], 2, "illegal -m value 'abx'"),
    (["-m", ""], 2, "illegal -m value ''"),
    (["-k", "oo"], 2, "illegal -k value 'oo'"),
    (["-k", "x"], 2, "illegal -k value 'x'"),
    (["-W", "umask=099"], 2, "illegal -W value umask=099"),
    (["-W", "umask=1777"], 2, "illegal -W value umask=1777"),
    (["-W", "depend=on:1"], 2, "dependency type on is not supported"),
    (["-Y"], 2, "invalid option -- 'Y'"),
    (["-q", "nosuch"], 172, "submit error (Unknown queue MSG=requested queue not found)"),
    (["-l", "walltime=48:00:00"], 188, "Job exceeds queue resource limits MSG=walltime 48:00:00 exceeds"),
    (["-l", "nodes=9"], 188, "requests more than the machine has"),
    (["-l", "nodes=1:ppn=16"], 188, "requests more than the machine has (ppn=16: its widest node has 4 cores)"),
    (["-I"], 1, "interactive jobs (-I) need a running server (hpcsched server)"),
])
def test_qsub_refusals(rig, argv, status, msg):
    with pytest.raises(CommandError) as e:
        submit(*argv)
    assert e.value.status == status and msg in str(e.value)
    assert not (rig / "home" / "journal.jsonl").exists()  # nothing stored


def test_v_values_in_quotes_may_hold_commas(rig, monkeypatch):
    # (-v "A='1,2'" was cut at the comma: A='1 and a variable named 2')
    monkeypatch.setenv("HPCSCHED_FLAVOR", "openpbs")
    jid = submit("-v", "A='1,2',B=3,C=\"x, y\",D=a'b,c'd,E")
    out = io.StringIO()
    assert qstat.QSTAT(["-f", "-F", "json", jid], out=out) == 0
    env = json.loads(out.getvalue())["Jobs"][jid]["Variable_List"]
    assert {k: env[k] for k in "ABCDE"} == {"A": "1,2", "B": "3", "C": "x, y", "D": "ab,cd", "E": ""}
    assert full(jid)["Variable_List"].endswith("A=1\\,2,B=3,C=x\\, y,D=ab\\,cd,E=")  # (OpenPBS escapes them)
    assert qctl.QALTER(["-v", "A='3,4'", jid], out=io.StringIO()) == 0
    out = io.StringIO()
    qstat.QSTAT(["-f", "-F", "json", jid], out=out)
    assert json.loads(out.getvalue())["Jobs"][jid]["Variable_List"]["A"] == "3,4"
    with pytest.raises(CommandError, match="illegal -v value .* \\(a quote is not closed\\)"):
        submit("-v", "A='1,2")


def test_a_script_with_dos_line_ends_is_refused_at_both_doors(rig, capsys):
    # (read from a file or stdin here its CR LF became LF unseen and the job ran; sent to a
    # running server it kept each CR, so `#PBS -N x` named the job "x\r": Torque and
    # OpenPBS refuse such a script)
    from hpcsched.pbs import front
    from hpcsched.pbs.forwarded import run_for
    dos = b"#!/bin/sh\r\n#PBS -N dos\r\ncd /tmp\r\n"
    (rig / "dos.sh").write_bytes(dos)
    for argv, stdin in ((["qsub", str(rig / "dos.sh")], None), (["qsub"], dos)):
        done = subprocess.run([sys.executable, os.path.join(ROOT, "bin", "qsub"), *argv[1:]], input=stdin or b"",
                              capture_output=True, env=os.environ)
        assert (done.returncode, done.stderr) == (1, b"qsub: script is written in DOS/Windows text format\n")
    from hpcsched.store.request import Request
    reply = run_for(front.encode_request("qsub", [], "/", dict(os.environ), dos), Request(),
                    os.environ["HPCSCHED_HOME"])
    assert reply.startswith(b"1\0") and reply.endswith(b"qsub: script is written in DOS/Windows text format\n")
    assert not (rig / "home" / "journal.jsonl").exists()  # nothing stored
    assert submit(script="#!/bin/sh\nprintf 'a\\rb'\n") == "1.headnode"  # (a CR inside a line is the script's own)


def test_a_start_time_this_zone_cannot_place_is_one_line(rig):
    # (31 December 9999 at 23:59 east of UTC is past year 9999 in UTC: a ValueError traceback)
    saved = os.environ.get("TZ")
    os.environ["TZ"] = "Pacific/Kiritimati"
    time.tzset()
    try:
        for argv in (["-a", "999912312359"], ["-W", "deadline=999912312359"]):
            with pytest.raises(CommandError, match="illegal"):
                submit(*argv)
        assert submit("-a", "999812312359").endswith(".headnode")
    finally:
        os.environ.pop("TZ") if saved is None else os.environ.update(TZ=saved)
        time.tzset()


def test_a_place_statement_is_checked_and_left_to_the_planner(rig):
    for place in ("scatter", "pack:excl", "free:shared:group=switch", "vscatter:exclhost"):
        assert submit("-l", f"select=2:ncpus=1,place={place}").endswith(".headnode")


def test_torque_node_specs_join_and_name_hosts(rig, monkeypatch):
    """nodes=N:ppn=M+N:ppn=M adds the counts; a spec that names a host is one node on it."""
    monkeypatch.setenv("HPCSCHED_USER", "olga")  # (an operator: qrun)
    jid = submit("-l", "nodes=node03:ppn=2+node01:ppn=2")
    assert qctl.QRUN([jid], out=io.StringIO()) == 0
    assert full(jid)["exec_host"] == "node01/0-1+node03/0-1" and full(jid)["Resource_List.nodect"] == "2"
    jid = submit("-l", "nodes=1:ppn=1+1:ppn=1")  # (the two nodes left)
    assert qctl.QRUN([jid], out=io.StringIO()) == 0 and full(jid)["exec_host"] == "node02/0+node04/0"


def test_gpus_in_either_style_go_to_nodes_that_have_them(rig, monkeypatch):
    from hpcsched.pbs import pbsnodes
    config = rig / "home" / "config.toml"
    config.write_text(config.read_text() + '\n[[nodes]]\nnames = "gpu[1-2]"\ncores = 8\ngpus = 4\nshared = true\n')
    for resources, total in [("nodes=2:ppn=2:gpus=1", 2), ("nodes=1:ppn=1:gpus=2:exclusive_process", 2),
                             ("select=2:ncpus=4:ngpus=2", 4), ("ngpus=3,ncpus=2", 3), ("select=1:ncpus=1", 0)]:
        attrs = full(submit("-l", resources))
        assert attrs.get("Resource_List.ngpus") == (str(total) if total else None), resources
    assert "Resource_List.select = 1:ncpus=2:ngpus=1" in stat("-f", submit("-l", "select=1:ncpus=2:ngpus=1"))[1]
    jid = submit("-l", "select=1:ncpus=1:host=gpu2+1:ncpus=1:host=node01")
    monkeypatch.setenv("HPCSCHED_USER", "olga")  # (an operator runs it now)
    assert qctl.QRUN([jid], out=io.StringIO()) == 0 and full(jid)["exec_host"] == "node01/0+gpu2/0"
    with pytest.raises(CommandError, match=r"\(1 nodes with 5 GPUs each of 6\)"):
        submit("-l", "nodes=1:gpus=5")
    # qalter: a new count drops the job-wide ngpus with the old count; ngpus alone adds it
    jid = submit("-l", "ngpus=3,ncpus=2")
    assert qctl.QALTER(["-l", "select=1:ncpus=1", jid], out=io.StringIO()) == 0
    assert "Resource_List.ngpus" not in full(jid)
    assert qctl.QALTER(["-l", "ngpus=2", jid], out=io.StringIO()) == 2  # (with select: per chunk)
    assert qctl.QALTER(["-l", "select=1:ncpus=1:ngpus=2", jid], out=io.StringIO()) == 0
    assert full(jid)["Resource_List.ngpus"] == "2"
    out = io.StringIO()
    assert pbsnodes.PBSNODES(["gpu1", "node01"], out=out) == 0
    assert "     gpus = 4" in out.getvalue() and out.getvalue().count("gpus") == 1
    monkeypatch.setenv("HPCSCHED_FLAVOR", "openpbs")
    out = io.StringIO()
    assert pbsnodes.PBSNODES(["gpu1"], out=out) == 0 and "resources_available.ngpus = 4" in out.getvalue()


def test_qsub_openpbs_messages(rig, monkeypatch):
    monkeypatch.setenv("HPCSCHED_FLAVOR", "openpbs")
    with pytest.raises(CommandError) as e:
        submit("-q", "nosuch")
    assert e.value.status == 170 and str(e.value) == "Unknown queue"
    with pytest.raises(CommandError) as e:
        submit("-l", "select=2:ncpus=2:mem=1gb,walltime=48:00:00")
    assert e.value.status == 188 and "Job violates queue and/or server resource limits" in str(e.value)


def test_bad_directive_is_one_error_naming_the_line(rig):
    with pytest.raises(CommandError, match="script line 2"):
        submit(script="#!/bin/sh\n#PBS -l\ntrue\n")


def test_torque_default_listing_golden(rig):
    submit("-N", "myjob")
    submit("-N", "a_very_long_job_name_here")
    _, out = stat()
    lines = out.splitlines()
    assert lines[0] == "Job ID                    Name             User            Time Use S Queue"
    assert lines[1] == "------------------------- ---------------- --------------- -------- - -----"
    assert lines[2] == "1.headnode                 myjob            alice                  0 Q batch"
    assert lines[3].split()[1] == "...ame_here"[-16:] or lines[3].split()[1].startswith("...")
    assert len(lines[3].split()[1]) == 16
    # Parsl / Toil: token 0 is the id, token 4 the state; header lines start JOB or ---
    rows = [l for l in lines if l.strip() and not l.startswith(("Job", "---"))]
    assert [(r.split()[0], r.split()[4]) for r in rows] == [("1.headnode", "Q"), ("2.headnode", "Q")]


def test_openpbs_default_listing_golden(rig, monkeypatch):
    monkeypatch.setenv("HPCSCHED_FLAVOR", "openpbs")
    submit("-N", "myjob")
    submit("-N", "a_very_long_job_name_here")
    lines = stat()[1].splitlines()
    assert lines[0] == "Job id            Name             User              Time Use S Queue"
    assert lines[1] == "----------------  ---------------- ----------------  -------- - -----"
    assert lines[2] == "1.headnode        myjob            alice                    0 Q batch"
    assert lines[3].split()[1] == "a_very_long_job*"


def test_alternate_listing_and_user_filter(rig, monkeypatch):
    submit("-N", "mine", "-l", "nodes=1:ppn=4,mem=2gb,walltime=01:00:00")
    monkeypatch.setenv("HPCSCHED_USER", "bob")
    submit("-N", "his")
    _, out = stat("-u", "alice")
    lines = out.splitlines()
    assert lines[1] == "headnode:"
    assert lines[3].startswith("Job ID                  Username    Queue    Jobname")
    row = lines[5].split()
    assert row[0] == "1.headnode" and row[1] == "alice" and row[7] == "2gb" and row[8] == "01:00:00" and row[9] == "Q"
    assert len(lines) == 6  # bob's job is not listed
    assert "--" in row  # FireWorks: empty cells print --


def test_full_listing_folds_and_minus_one_does_not(rig):
    submit("-v", ",".join(f"VAR{i}=value{i}" for i in range(12)))
    _, folded = stat("-f", "1")
    assert any(l.startswith("\t") for l in folded.splitlines())
    assert all(len(l) <= 78 or "," not in l[:77] for l in folded.splitlines())
    _, flat = stat("-f", "-1", "1")
    assert not any(l.startswith("\t") for l in flat.splitlines())
    # Nextflow: qstat -f -1 | grep -E '(Job Id:|job_state =)'
    picked = [l.strip() for l in flat.splitlines() if re.search(r"(Job Id:|job_state =)", l)]
    assert picked == ["Job Id: 1.headnode", "job_state = Q"]


def test_json_has_typed_values_and_no_jobs_key_when_empty(rig, monkeypatch):
    monkeypatch.setenv("HPCSCHED_FLAVOR", "openpbs")
    jid = submit("-l", "select=2:ncpus=2:mem=1gb,walltime=00:10:00")
    doc = json.loads(stat("-f", "-F", "json", jid)[1])
    job = doc["Jobs"]["1.headnode"]
    assert doc["pbs_server"] == "headnode" and isinstance(doc["timestamp"], int)
    assert job["Resource_List"]["ncpus"] == 4 and job["Resource_List"]["nodect"] == 2
    assert job["Resource_List"]["select"] == "2:ncpus=2:mem=1gb"
    assert job["job_state"] == "Q" and "comment" in job and job["Priority"] == 0
    assert isinstance(job["Variable_List"], dict)
    assert "Jobs" not in json.loads(stat("-f", "-F", "json", "-u", "nobody")[1])


def test_unknown_ids_exit_153_and_others_still_print(rig, capsys):
    submit()
    status, out = stat("1", "99.headnode", "bogus!")
    assert status == 153 and "1.headnode" in out
    err = capsys.readouterr().err
    assert "qstat: Unknown Job Id 99.headnode" in err


def test_finished_jobs_per_flavor(rig, monkeypatch, capsys):
    submit()
    assert qctl.QDEL(["1"]) == 0
    status, out = stat("1", later=100)  # Torque keeps it 300 s as C
    assert status == 0 and out.splitlines()[2].split()[4] == "C"
    status, out = stat("1", later=1000)
    assert status == 153  # gone from plain qstat after keep_completed
    xml = stat("-x", "1", later=1000)[1]
    assert xml.startswith('<?xml version="1.0"?><Data><Job><Job_Id>1.headnode</Job_Id>')
    assert "<job_state>C</job_state>" in xml and "<exit_status>271</exit_status>" in xml
    doc = json.loads(stat("-f", "-F", "json", "-x", "1", later=100)[1])  # JSON: OpenPBS's words in Torque too
    assert doc["Jobs"]["1.headnode"]["job_state"] == "F" and doc["Jobs"]["1.headnode"]["Exit_status"] == 271
    assert "exit_status" not in doc["Jobs"]["1.headnode"] and "stime" not in doc["Jobs"]["1.headnode"]
    monkeypatch.setenv("HPCSCHED_FLAVOR", "openpbs")
    status, out = stat("1")
    assert status == 35
    assert "qstat: 1.headnode Job has finished, use -x or -H to obtain historical job information" in capsys.readouterr().err
    doc = json.loads(stat("-f", "-F", "json", "-x", "1")[1])
    assert doc["Jobs"]["1.headnode"]["Exit_status"] == 271 and doc["Jobs"]["1.headnode"]["job_state"] == "F"


def test_qhold_qrls_qdel_permissions(rig, monkeypatch, capsys):
    submit()
    monkeypatch.setenv("HPCSCHED_USER", "bob")
    assert qctl.QDEL(["1"]) == 159
    assert "Unauthorized Request  1.headnode" in capsys.readouterr().err
    monkeypatch.setenv("HPCSCHED_USER", "alice")
    assert qctl.QHOLD(["-h", "o", "1"]) == 159
    assert qctl.QHOLD(["1"]) == 0
    assert stat("1")[1].splitlines()[2].split()[4] == "H"
    monkeypatch.setenv("HPCSCHED_USER", "olga")  # an operator
    assert qctl.QHOLD(["-h", "o", "1.headnode"]) == 0
    assert qctl.QRLS(["-h", "uo", "1"]) == 0
    assert stat("1")[1].splitlines()[2].split()[4] == "Q"
    assert qctl.QRLS(["-h", "s", "1"]) == 159
    assert qctl.QDEL(["1", "42"]) == 153  # 1 deleted, 42 unknown


def test_version_per_flavor(rig):
    p = run("qstat", "--version")
    assert p.returncode == 0 and p.stderr.startswith("Version: ") and p.stdout == ""
    assert "Commit: hpcsched" not in p.stderr  # (Torque's Commit line names a git hash: none to give)
    p = subprocess.run([sys.executable, "-m", "hpcsched", "--version"], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.startswith("hpcsched ")
    p = run("qstat", "--version", env={"HPCSCHED_FLAVOR": "openpbs"})
    assert p.stdout.startswith("pbs_version = ")  # BLAHP: qstat --version | grep PBSPro-style


def test_queue_and_server_listings(rig, monkeypatch):
    submit()
    submit("-h")
    # Torque's and OpenPBS's columns, character for character (Torque's qstat -Q as scripts
    # quote it; OpenPBS's from its qstat.c: 5 wide, the type cut to 4 with `*`)
    assert stat("-Q")[1] == (
        "Queue              Max    Tot   Ena   Str   Que   Run   Hld   Wat   Trn   Ext T   Cpt\n"
        "----------------   ---   ----    --    --   ---   ---   ---   ---   ---   --- -   ---\n"
        "batch                0      2   yes   yes     1     0     1     0     0     0 E     0\n")
    monkeypatch.setenv("HPCSCHED_FLAVOR", "openpbs")
    assert stat("-Q")[1] == (
        "Queue              Max   Tot Ena Str   Que   Run   Hld   Wat   Trn   Ext Type\n"
        "---------------- ----- ----- --- --- ----- ----- ----- ----- ----- ----- ----\n"
        "batch                0     2 yes yes     1     0     1     0     0     0 Exec\n")
    assert stat("-B")[1] == (
        "Server             Max   Tot   Que   Run   Hld   Wat   Trn   Ext Status\n"
        "---------------- ----- ----- ----- ----- ----- ----- ----- ----- -----------\n"
        "headnode             0     2     1     0     1     0     0     0 Active\n")
    monkeypatch.delenv("HPCSCHED_FLAVOR")
    assert stat("-B")[1] == (
        "Server             Max   Tot   Que   Run   Hld   Wat   Trn   Ext   Com Status\n"
        "----------------   ---   ---   ---   ---   ---   ---   ---   ---   --- ----------\n"
        "headnode             0     2     1     0     1     0     0     0     0 Active\n")
    status, out = stat("-B", "-f")
    assert status == 0 and out.startswith("Server: headnode\n    server_state = Active\n    server_host = headnode\n")
    assert "    default_queue = batch\n" in out and "    pbs_version = " in out and "    total_jobs = 2\n" in out
    b = stat("-B")[1].splitlines()
    assert b[0].startswith("Server") and b[2].split()[0] == "headnode"


def test_qstat_q_limits_and_the_running_idle_and_comment_listings(rig, monkeypatch):
    from hpcsched.pbs import qmgr
    running, waiting, held = submit("-l", "nodes=4"), submit("-l", "nodes=1"), submit("-h")
    monkeypatch.setenv("HPCSCHED_USER", "olga")
    assert qctl.QRUN([running], out=io.StringIO()) == 0
    monkeypatch.setenv("HPCSCHED_USER", "root")
    assert qmgr.QMGR(["-c", "set queue batch max_running = 5"], out=io.StringIO()) == 0
    lines = stat("-q")[1].splitlines()
    assert lines[1] == "server: headnode" and lines[3].split() == ["Queue", "Memory", "CPU", "Time", "Walltime",
                                                                   "Node", "Run", "Que", "Lm", "State"]
    assert lines[5].split() == ["batch", "--", "--", "24:00:00", "--", "1", "2", "5", "E", "R"]
    assert lines[7].split() == ["1", "2"]
    rows = lambda *argv: [l.split()[0] for l in stat(*argv)[1].splitlines()[5:] if l[:1].isdigit()]
    assert rows("-r") == [running] and rows("-i") == [waiting, held] and rows("-r", "-i") == rows("-a")
    from hpcsched.store.journaled import Batch
    from hpcsched.store.site import load_site
    with Batch(load_site()).open() as batch:  # (as the server notes a launch that failed)
        batch.do("process", id=int(waiting.split(".")[0]), comment="Not Running: launch failed")
    comment = full(waiting)["comment"]
    assert comment == "Not Running: launch failed"
    with_comments = stat("-s")[1].splitlines()[5:]
    assert [l.split()[0] for l in with_comments[:2]] == [running, waiting]  # (no comment: no line)
    assert with_comments[2] == "   " + comment and with_comments[3].startswith(held)


def test_qstat_T_lists_the_next_passs_estimated_starts_soonest_first(rig, monkeypatch):
    """OpenPBS's -T: running jobs first, then the waiting ones by the start the next pass
    estimates (HH:MM today, `Tu 15` within the week, ...), `--` for jobs that do not wait
    for nodes (held), `?` past the planning horizon."""
    import re
    big, small, held = submit("-l", "nodes=4:ppn=4,walltime=02:00:00"), submit("-l", "nodes=4,walltime=00:30:00"), \
        submit("-h", "-l", "walltime=00:10:00")
    running = submit("-l", "nodes=4:ppn=4,walltime=01:00:00")
    monkeypatch.setenv("HPCSCHED_USER", "olga")
    assert qctl.QRUN([running], out=io.StringIO()) == 0
    now = time.time() + 100
    lines = stat("-T")[1].splitlines()
    assert lines[2].strip() == "Est" and lines[3].split()[-1] == "Start"
    rows = [(l.split()[0], l[-9:].strip()) for l in lines[6:]]  # (the last column may hold a space: `Sa 00`)
    assert [jid for jid, _ in rows] == [running, big, small, held]  # (small waits for big's end)
    assert [est for _, est in rows[::3]] == ["--", "--"]
    for (_, est), offset in zip(rows[1:3], (3600, 3600 + 7200)):
        assert est == qstat.est_start(qctl_start(running) + offset, now)
        assert re.fullmatch(r"\d\d:\d\d|[A-Z][a-z] \d\d", est)
    assert qstat.est_start(None, now) == "?"
    t = time.mktime((2030, 3, 5, 12, 0, 0, 0, 0, -1))
    assert qstat.est_start(t, t - 60) == "12:00"
    assert qstat.est_start(t, t - 3 * 86400) == time.strftime("%a", time.localtime(t))[:2] + " 12"
    assert qstat.est_start(t, t - 30 * 86400) == "Mar" and qstat.est_start(t, t - 200 * 86400) == "2030"


def qctl_start(jid):
    """A running job's start time, as its qstat -f says (stime is whole seconds)."""
    from hpcsched.store.journaled import Batch
    from hpcsched.store.site import load_site
    with Batch(load_site()).open(write=False) as batch:
        return batch.sched.jobs[int(jid.split(".")[0])].start_time


def test_qsub_runs_a_program_given_after_dashes_and_a_script_with_F_arguments(rig, monkeypatch, capsys):
    """OpenPBS's `qsub [options] -- program args`: no script read (stdin untouched), the job
    named after the program, its script `exec program args`; Torque's -F: the script's
    arguments, split as a shell splits them."""
    from hpcsched.store.journaled import Batch
    from hpcsched.store.site import load_site
    monkeypatch.setenv("HPCSCHED_FLAVOR", "openpbs")
    jid, _ = qsub.submit(["-l", "walltime=60", "--", "/bin/echo", "hello world", "-x"],
                         stdin=io.StringIO("#PBS -N never\n"), cwd="/tmp", env={})
    argv = ["-F", "a 'b c'", "-N", "withargs"]
    with_args = submit(*argv)
    with Batch(load_site()).open(write=False) as batch:
        program, script = batch.sched.jobs[1], batch.sched.jobs[2]
    assert program.name == "echo" and program.extra["script"] == "exec /bin/echo 'hello world' -x\n"
    assert script.extra["arguments"] == ["a", "b c"]
    attrs = full(jid)
    assert attrs["Submit_arguments"] == "-l walltime=60 -- /bin/echo 'hello world' -x"
    assert attrs["executable"] == "<jsdl-hpcpa:Executable>/bin/echo</jsdl-hpcpa:Executable>"
    assert attrs["argument_list"] == ("<jsdl-hpcpa:Argument>hello world</jsdl-hpcpa:Argument>"
                                      "<jsdl-hpcpa:Argument>-x</jsdl-hpcpa:Argument>")
    assert full(with_args)["job_arguments"] == "a 'b c'"
    for bad, message in ((["--"], "-- must be followed by a program"), (["-I", "--", "/bin/true"], "runs no program"),
                         (["-F", "a 'b"], "illegal -F value")):
        with pytest.raises(UsageError, match=message):
            qsub.submit(bad, stdin=io.StringIO(""), cwd="/tmp", env={})


def test_exclusive_placement_is_asked_for_in_each_flavors_words(rig, capsys):
    """OpenPBS's place=excl (or exclhost), Moab's naccesspolicy=singlejob (or Maui's -W
    x=NACCESSPOLICY:SINGLEJOB) and Torque's -n all make a request exclusive (a job-wide ncpus becomes its one chunk); a processor count
    cannot be, and naccesspolicy takes only singlejob or shared."""
    from hpcsched.store.journaled import Batch
    from hpcsched.store.site import load_site
    jids = [submit("-l", "select=2:ncpus=2", "-l", "place=scatter:excl"), submit("-l", "ncpus=3,place=exclhost"),
            submit("-l", "nodes=1:ppn=2,naccesspolicy=singlejob"), submit("-n", "-l", "nodes=2"),
            submit("-l", "nodes=1,naccesspolicy=shared"), submit("-l", "select=1:ncpus=1,place=pack:shared"),
            submit("-W", "x=NACCESSPOLICY:SINGLEJOB", "-l", "nodes=1"),
            submit("-l", "select=2:ncpus=2:mem=100mb,place=pack")]
    with Batch(load_site()).open(write=False) as batch:
        got = [batch.sched.jobs[int(j.split(".")[0])].request for j in jids]
    assert [(r.nodes, r.ppn, r.cores, r.exclusive) for r in got] == [
        (2, 2, 0, True), (1, 3, 0, True), (1, 2, 0, True), (2, 1, 0, True), (1, 1, 0, False), (1, 1, 0, False),
        (1, 1, 0, True), (1, 4, 0, False)]  # (place=pack: its chunks as one on one host)
    assert got[-1].mem == 200
    assert full(jids[3])["Resource_List.naccesspolicy"] == "singlejob"  # (-n, as Moab's resource says it)
    for argv, message in ((["-l", "procs=4,naccesspolicy=singlejob"], "asks for chunks"),
                          (["-n", "-l", "procs=4"], "asks for chunks"),
                          (["-l", "nodes=1,naccesspolicy=singleuser"], "give singlejob or shared"),
                          (["-l", "select=1:host=node01+1:host=node02,place=pack"], "one host, not on the hosts")):
        with pytest.raises(UsageError, match=message):
            submit(*argv)


def test_query_other_jobs_false_keeps_each_user_to_their_own_jobs(rig, monkeypatch, capsys):
    """qmgr's `set server query_other_jobs = False`: qstat, qselect, showq, checkjob,
    showstart, tracejob and mdiag -p show a user their own jobs alone (another's named is an
    Unauthorized Request, 159); operators still see every job; true again, all are shown."""
    from hpcsched.pbs import maui, qmgr, tracejob
    mine, theirs = submit("-N", "mine"), None
    monkeypatch.setenv("HPCSCHED_USER", "bob")
    theirs = submit("-N", "theirs")

    def seen(user):
        monkeypatch.setenv("HPCSCHED_USER", user)
        listed = [l.split()[0] for l in stat()[1].splitlines()[2:]]
        out = io.StringIO()
        qctl.QSELECT([], out=out)
        shown = io.StringIO()
        maui.SHOWQ([], out=shown)
        queued = [l.split()[0] for l in shown.getvalue().splitlines() if l.split()[1:2] in (["alice"], ["bob"])]
        return listed, out.getvalue().split(), queued
    assert seen("alice") == ([mine, theirs], [mine, theirs], ["1", "2"])  # (true by default)
    monkeypatch.setenv("HPCSCHED_USER", "root")
    assert qmgr.QMGR(["-c", "set server query_other_jobs = False"], out=io.StringIO()) == 0
    assert seen("alice") == ([mine], [mine], ["1"]) and seen("bob") == ([theirs], [theirs], ["2"])
    assert seen("olga") == ([mine, theirs], [mine, theirs], ["1", "2"])  # (an operator)
    capsys.readouterr()
    monkeypatch.setenv("HPCSCHED_USER", "alice")
    assert stat(theirs)[0] == 159 and stat(mine, theirs)[1].count("headnode") == 1
    for command, argv in ((maui.CHECKJOB, ["2"]), (maui.SHOWSTART, ["2"]), (tracejob.TRACEJOB, ["2"])):
        assert command(argv, out=io.StringIO()) == 159
    assert capsys.readouterr().err.count("Unauthorized Request  2.headnode") == 5
    assert maui.CHECKJOB(["1"], out=io.StringIO()) == 0 and tracejob.TRACEJOB(["1"], out=io.StringIO()) == 0
    breakdown = io.StringIO()
    assert maui.MDIAG(["-p"], out=breakdown) == 0
    assert [l.split()[0] for l in breakdown.getvalue().splitlines()[4:] if l[:1].isdigit()] == ["1"]
    monkeypatch.setenv("HPCSCHED_USER", "root")
    assert qmgr.QMGR(["-c", "set server query_other_jobs = True"], out=io.StringIO()) == 0
    assert seen("alice")[0] == [mine, theirs]


def test_a_job_asks_for_an_advance_reservation_by_name(rig, monkeypatch, capsys):
    """Moab's -l advres=NAME and Maui's -W x=ADVRES:NAME bind a job to a reservation that
    admits its owner; qsub and qalter refuse one that does not exist or does not admit
    them (188); a job whose reservation is released waits, saying why."""
    from hpcsched.pbs import maui
    from hpcsched.store.journaled import Batch
    from hpcsched.store.site import load_site
    monkeypatch.setenv("HPCSCHED_USER", "olga")  # (an operator)
    assert maui.SETRES(["-n", "train", "-u", "alice", "-s", "+1:00:00", "-d", "2:00:00", "node01"],
                       out=io.StringIO()) == 0
    monkeypatch.setenv("HPCSCHED_USER", "alice")
    by_resource = submit("-l", "advres=train,walltime=600")
    by_x = submit("-W", "x=ADVRES:train", "-l", "walltime=600")
    plain = submit("-l", "walltime=600")
    with Batch(load_site()).open(write=False) as batch:
        assert [batch.sched.jobs[i].reservation for i in (1, 2, 3)] == ["train", "train", ""]
    assert full(by_resource)["Resource_List.advres"] == "train"
    for argv, message in ((["-l", "advres=nope"], "cannot locate reservation nope"),
                          (["-l", "advres=a", "-W", "x=ADVRES:b"], "advres=a is asked for by -l")):
        with pytest.raises((CommandError, UsageError), match=message):
            submit(*argv)
    assert qctl.QALTER(["-l", "advres=nope", plain], out=io.StringIO()) == 188
    assert qctl.QALTER(["-l", "advres=train", plain], out=io.StringIO()) == 0
    monkeypatch.setenv("HPCSCHED_USER", "bob")
    with pytest.raises(CommandError, match="reservation train does not admit bob") as refused:
        submit("-l", "advres=train")
    assert refused.value.status == 188
    monkeypatch.setenv("HPCSCHED_USER", "olga")
    assert maui.RELEASERES(["train"], out=io.StringIO()) == 0
    monkeypatch.setenv("HPCSCHED_USER", "alice")
    out = io.StringIO()
    assert maui.CHECKJOB([by_x.split(".")[0]], out=out) == 0
    assert "job cannot run: its reservation train does not exist" in out.getvalue()
    assert capsys.readouterr().err.count("qalter: cannot locate reservation nope") == 1


def test_qsub_u_names_the_submitter_or_is_refused(rig):
    """-u user[@host]: the user the job runs as; here that is its submitter, so another
    user's name is refused (Bad UID, 175), never silently run as the submitter."""
    assert submit("-u", "alice@headnode")
    with pytest.raises(CommandError, match="Bad UID for job execution MSG=alice may not run a job as bob") as e:
        submit("-u", "alice,bob@elsewhere")
    assert e.value.status == 175


def test_bad_config_is_one_line(rig):
    (rig / "home" / "config.toml").write_text('flavor = "slurm"\n[[nodes]]\nnames = "n1"\n')
    p = run("qstat")
    assert p.returncode == 1 and p.stderr == "qstat: flavor: 'slurm' is not torque, openpbs or cobalt\n"
    (rig / "home" / "config.toml").write_bytes(b'server_name = "caf\xe9"\n')  # (Latin-1: a traceback before)
    p = run("qstat")
    assert p.returncode == 1 and p.stderr.endswith("config.toml: not UTF-8 (byte 18)\n") and p.stderr.count("\n") == 1


def _burst(home, n):
    os.environ["HPCSCHED_HOME"] = str(home)
    os.environ["HPCSCHED_USER"] = "alice"
    for _ in range(n):
        qsub.submit(["-l", "walltime=60"], stdin=io.StringIO("true\n"), cwd="/tmp", env={})


def test_concurrent_qsub_loses_and_duplicates_nothing(rig):
    home = rig / "home"
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_burst, args=(home, 100)) for _ in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    lines = stat()[1].splitlines()[2:]
    ids = [l.split()[0] for l in lines]
    assert len(ids) == 800 and len(set(ids)) == 800
    assert ids == [f"{i}.headnode" for i in range(1, 801)]


def test_qalter_changes_waiting_jobs_and_only_walltime_of_running_ones(rig, monkeypatch, capsys):
    from hpcsched.store.journaled import Batch
    from hpcsched.store.site import load_site
    submit("-N", "a", "-p", "20", "-l", "nodes=4:ppn=4,walltime=01:00:00")
    submit("-N", "b", "-l", "walltime=00:10:00")
    assert qctl.QALTER(["-N", "renamed", "-l", "walltime=00:20:00", "-p", "10", "2"]) == 0  # (still below 1's 20)
    out = stat("-f", "2")[1]
    assert "Job_Name = renamed" in out and "Resource_List.walltime = 00:20:00" in out and "Priority = 10" in out
    capsys.readouterr()
    batch = Batch(load_site())
    with batch.open(write=True):
        batch.do("pass")
    assert qctl.QALTER(["-l", "nodes=1", "1"]) == 170  # running: only walltime
    for limit in ("vmem=2gb", "pvmem=1gb", "nice=5", "pcput=60"):  # (its limits were set as it started:
        assert qctl.QALTER(["-l", limit, "1"]) == 170  # those that live only in its resources were taken)
    assert "vmem" not in stat("-f", "1")[1]
    assert qctl.QALTER(["-l", "walltime=02:00:00", "1"]) == 159  # and only operators
    monkeypatch.setenv("HPCSCHED_USER", "olga")
    assert qctl.QALTER(["-l", "walltime=02:00:00", "1"]) == 0
    assert "Resource_List.walltime = 02:00:00" in stat("-f", "1")[1]
    assert qctl.QALTER(["-h", "u", "2"]) == 0
    assert stat("2")[1].splitlines()[2].split()[4] == "H"


def test_qalter_refusal_leaves_the_job_alone(rig, capsys):
    submit("-N", "b", "-l", "walltime=00:10:00")
    status = qctl.QALTER(["-l", "walltime=99:00:00", "1"])
    assert status == 188 and "walltime 99:00:00 exceeds" in capsys.readouterr().err
    assert "Resource_List.walltime = 00:10:00" in stat("-f", "1")[1]


def test_qmove_and_qselect(rig):
    text = (rig / "home" / "config.toml").read_text() + '\n[queues.debug]\nmax_walltime = "00:30:00"\n'
    (rig / "home" / "config.toml").write_text(text)
    submit("-N", "x", "-l", "walltime=00:10:00")
    submit("-N", "y", "-l", "walltime=02:00:00", "-A", "proj")
    assert qctl.QMOVE(["debug", "1"]) == 0
    assert qctl.QMOVE(["debug", "2"]) == 188  # over debug's max walltime
    assert qctl.QMOVE(["nosuch", "2"]) == 170
    out = io.StringIO()
    assert qctl.QSELECT(["-q", "debug"], out=out) == 0 and out.getvalue() == "1.headnode\n"
    out = io.StringIO()
    qctl.QSELECT(["-l", "walltime.gt.01:00:00", "-s", "Q"], out=out)
    assert out.getvalue() == "2.headnode\n"
    out = io.StringIO()
    qctl.QSELECT(["-A", "proj", "-u", "alice"], out=out)
    assert out.getvalue() == "2.headnode\n"
    assert qctl.QSELECT(["-l", "walltime.about.1"], out=io.StringIO()) == 2
    # unknown state or hold letters are refused, not matched against nothing
    for argv in (["-s", "ZZ"], ["-s", "Qz"], ["-s", ""], ["-h", "x"], ["-h", "un", "-h", "k"]):
        out = io.StringIO()
        assert qctl.QSELECT(argv, out=out) == 2 and out.getvalue() == "", argv
    out = io.StringIO()
    assert qctl.QSELECT(["-s", "QF", "-h", "n"], out=out) == 0 and out.getvalue() == "1.headnode\n2.headnode\n"


@pytest.mark.parametrize("flag,spec,indices", [("-t", "1-4%2", [1, 2, 3, 4]), ("-J", "0-6:3", [0, 3, 6]),
                                               ("-t", "1,3,5-6", [1, 3, 5, 6])])
def test_job_arrays(rig, flag, spec, indices, capsys):
    from hpcsched.store.journaled import Batch
    from hpcsched.store.site import load_site
    jid = submit(flag, spec, "-l", "walltime=00:10:00")
    assert jid == "1[].headnode"
    lines = stat()[1].splitlines()[2:]
    assert [l.split()[0] for l in lines] == ["1[].headnode"] and lines[0].split()[4] == "Q"
    subs = [l.split()[0] for l in stat("-t")[1].splitlines()[2:]]
    assert subs == [f"1[{i}].headnode" for i in indices]
    assert stat("-t", f"1[{indices[1]}]")[1].splitlines()[2].split()[0] == f"1[{indices[1]}].headnode"
    # a subjob named by its index is itself without -t too (its array's row it was before)
    shown = [l.split()[0] for l in stat(f"1[{indices[1]}]", "1[]")[1].splitlines()[2:]]
    assert shown == ["1[].headnode", f"1[{indices[1]}].headnode"]
    assert full("1[]")["job_array_request"] == {"1-4%2": "1-4%2", "0-6:3": "0,3,6", "1,3,5-6": "1,3,5-6"}[spec]
    assert full(f"1[{indices[1]}]")["job_array_id"] == str(indices[1])
    batch = Batch(load_site())
    with batch.open(write=True):
        plan = batch.do("pass")
    running = 2 if "%" in spec else min(len(indices), 4)
    assert len(plan.started) == running  # a %N limit caps how many subjobs run at once
    assert qctl.QDEL([f"1[{indices[0]}]"]) == 0
    assert qctl.QDEL(["1[]"]) == 0
    assert qctl.QDEL(["1[99]"]) == 153
    assert "Unknown Job Id 1[99].headnode" in capsys.readouterr().err


def test_bad_array_requests(rig):
    for spec in ("5-1", "a-b", "1-3%0"):
        with pytest.raises(CommandError, match="illegal array request"):
            submit("-t", spec)


def test_qrun_by_operators_on_free_nodes(rig, monkeypatch, capsys):
    submit("-l", "nodes=2:ppn=4,walltime=00:10:00")
    submit("-l", "nodes=2:ppn=4,walltime=00:10:00", "-p", "5")
    assert qctl.QRUN(["2"]) == 159  # alice is no operator
    monkeypatch.setenv("HPCSCHED_USER", "olga")
    assert qctl.QRUN(["-H", "node03+node04", "2"]) == 0
    out = stat("-f", "-1", "2")[1]
    assert "job_state = R" in out and "exec_host = node03/0-3+node04/0-3" in out
    assert qctl.QRUN(["-H", "node03", "1"]) == 196  # node03 is taken
    assert "Insufficient amount of resource" in capsys.readouterr().err
    assert qctl.QRUN(["-H", "(node03:ncpus=4)+(node01:ncpus=4)", "1"]) == 196  # (OpenPBS's form)
    assert "Insufficient amount of resource" in capsys.readouterr().err
    assert qctl.QRUN(["2"]) == 170  # already running
    third = submit("-l", "nodes=2:ppn=4,walltime=00:10:00")
    assert qctl.QRUN(["-H", "(node01:ncpus=4)+(node02:ncpus=4)", third]) == 0
    assert "exec_host = node01/0-3+node02/0-3" in stat("-f", "-1", third)[1]
    # the journal replays to the same placement
    from hpcsched.core import acctline
    from hpcsched.pbs import accounting
    from hpcsched.store.journaled import Batch
    from hpcsched.store.site import load_site
    batch = Batch(load_site())
    with batch.open(write=False):
        assert batch.sched.job(2).nodes == ("node03", "node04")
        # its accounting S record names the cores as qstat does (one codec: nodelist.exec_host)
        line = accounting.lines("S", [batch.sched.job(2)], "headnode", 0)[0]
        assert acctline.parse(line)[3]["exec_host"] == "node03/0-3+node04/0-3"


def test_json_keeps_a_numeric_looking_name_a_string(rig):
    jid = submit("-N", "123")
    job = json.loads(stat("-f", "-F", "json", jid)[1])["Jobs"][jid]
    assert job["Job_Name"] == "123" and job["Priority"] == 0 and job["run_count"] == 0


@pytest.mark.parametrize("flavor,name", [("torque", "work.o1-2"), ("openpbs", "work.o1.2")])
def test_subjob_output_names_per_flavor(rig, monkeypatch, flavor, name):
    monkeypatch.setenv("HPCSCHED_FLAVOR", flavor)
    submit("-t" if flavor == "torque" else "-J", "1-4", "-N", "work")
    assert re.search(rf"Output_Path = \S+:/tmp/{re.escape(name)}\n", stat("-f", "-1", "-t", "1[2]")[1])


def test_openpbs_array_row_shows_begun(rig, monkeypatch):
    from hpcsched.store.journaled import Batch
    from hpcsched.store.site import load_site
    monkeypatch.setenv("HPCSCHED_FLAVOR", "openpbs")
    submit("-J", "1-8", "-l", "walltime=00:10:00")
    batch = Batch(load_site())
    with batch.open(write=True):
        batch.do("pass")  # 4 nodes: four subjobs run, four wait
    row = stat()[1].splitlines()[2].split()
    assert row[0] == "1[].headnode" and row[4] == "B"
    assert [l.split()[4] for l in stat("-t")[1].splitlines()[2:]] == ["B"] + ["R"] * 4 + ["Q"] * 4  # (its row first)
    array = full("1[]")
    assert (array["array"], array["array_state_count"]) == ("True", "Queued:4 Running:4 Exiting:0 Expired:0")
    assert (array["array_indices_submitted"], array["array_indices_remaining"]) == ("1-8", "5-8")
    assert (full("1[6]")["array_id"], full("1[6]")["array_index"]) == ("1[].headnode", "6")


def test_before_dependencies_make_the_named_job_wait(rig, monkeypatch):
    from hpcsched.store.journaled import Batch
    from hpcsched.store.site import load_site
    waiter = submit("-N", "waiter")
    first = submit("-N", "first", "-W", "depend=beforeok:" + waiter.split(".")[0])
    out = stat("-f", "-1", waiter)[1]
    assert f"depend = afterok:{first}" in out and "job_state = H" in out
    assert "    depend = " not in stat("-f", "-1", first)[1]
    site = load_site()
    now = time.time()
    with Batch.of(site).open() as batch:  # first runs and ends well: the waiter may go
        batch.do("pass", now)
        assert batch.sched.job(int(first.split(".")[0])).start_time == now
        batch.do("ended", now + 10, id=int(first.split(".")[0]), exit_status=0)
    assert "job_state = Q" in stat("-f", "-1", waiter)[1]
    with pytest.raises(CommandError) as e:
        submit("-W", "depend=beforeok:77")
    assert e.value.status == 153
    with pytest.raises(CommandError) as e:
        submit("-W", "depend=beforeany:" + first.split(".")[0])  # it has run
    assert e.value.status == 170 and "it has started" in str(e.value)
    monkeypatch.setenv("HPCSCHED_USER", "bob")
    with pytest.raises(CommandError) as e:
        submit("-W", "depend=beforenotok:" + waiter.split(".")[0])
    assert e.value.status == 159


def _ended(jid_text, status, now):
    """The server's part, done here: the job (or every subjob of an array) ran and ended."""
    from hpcsched.pbs import accounting
    from hpcsched.pbs.common import resolve
    from hpcsched.store.journaled import Batch
    from hpcsched.store.site import load_site
    site = load_site()
    with Batch.of(site).open() as batch:
        for job in resolve(batch.sched.jobs, jid_text, site.server):
            if job.state == "queued":
                batch.do("run", now, id=job.id)
            batch.do("ended", now + 1, id=job.id, exit_status=status,
                     records=lambda job: accounting.lines("E", [job], site.server, now + 1))
            accounting.core_deletions(batch, now + 1)


@pytest.mark.parametrize("flavor,spec", [("torque", "afterokarray:{a}"), ("torque", "afterokarray:{a}[]"),
                                         ("openpbs", "afterok:{a}"), ("torque", "afterok:{a}")])
def test_dependencies_on_arrays_and_subjobs(rig, monkeypatch, flavor, spec):
    monkeypatch.setenv("HPCSCHED_FLAVOR", flavor)
    arr = submit("-t" if flavor == "torque" else "-J", "1-2", "-l", "walltime=60")
    assert arr == "1[].headnode"
    merge = submit("-W", "depend=" + spec.format(a=arr), "-N", "merge")
    one = submit("-W", "depend=afterany:1[2].headnode", "-N", "one")  # the id qsub printed, a subjob's
    out = stat("-f", "-1", merge)[1]
    assert "job_state = H" in out
    assert ("depend = afterokarray:1[][2].headnode" if "array" in spec else "depend = afterok:1[].headnode") in out
    assert "depend = afterany:1[2].headnode" in stat("-f", "-1", one)[1]
    now = time.time()
    _ended("1[1]", 0, now)
    assert "job_state = H" in stat("-f", "-1", merge)[1]
    _ended("1[2]", 0, now + 5)
    assert "job_state = Q" in stat("-f", "-1", merge)[1] and "job_state = Q" in stat("-f", "-1", one)[1]


def test_torque_array_count_and_kinds(rig):
    submit("-t", "1-3", "-l", "walltime=60")
    two_ok = submit("-W", "depend=afterokarray:1[][2]")
    started = submit("-W", "depend=afterstartarray:1[][1]")
    all_failed = submit("-W", "depend=afternotokarray:1[]")
    assert "depend = afterstartarray:1[][1].headnode" in stat("-f", "-1", started)[1]
    from hpcsched.store.journaled import Batch
    from hpcsched.store.site import load_site
    from hpcsched.core.jobs import subjob_id
    with Batch.of(load_site()).open() as batch:
        batch.do("run", time.time(), id=subjob_id(1, 1))  # (subjob 1[1])
    assert "job_state = Q" in stat("-f", "-1", started)[1]
    now = time.time()
    _ended("1[1]", 0, now)
    _ended("1[2]", 1, now)
    # afternotokarray needs all three to fail: after one success it never can, and PBS deletes it
    assert "job_state = C" in stat("-f", "-1", all_failed)[1]
    _ended("1[3]", 0, now)
    assert "job_state = Q" in stat("-f", "-1", two_ok)[1]


@pytest.mark.parametrize("flavor,letter,key", [("torque", "C", "exit_status"), ("openpbs", "F", "Exit_status")])
def test_failed_afterok_parent_deletes_the_child(rig, monkeypatch, flavor, letter, key):
    from hpcsched.pbs import accounting
    monkeypatch.setenv("HPCSCHED_FLAVOR", flavor)
    parent = submit("-N", "parent")
    child = submit("-W", f"depend=afterok:{parent}", "-N", "child")
    grandchild = submit("-W", f"depend=afterok:{child}", "-N", "grandchild")
    _ended(parent, 2, time.time())
    for jid in (child, grandchild):
        out = stat("-f", "-1", *(["-x"] if flavor == "openpbs" else []), jid)[1]
        assert f"job_state = {letter}" in out
        assert f"{key} = 271" in out
    history = ["-x"] if flavor == "openpbs" else []
    assert f"comment = Job deleted as result of dependency on job {parent}" in stat("-f", "-1", *history, child)[1]
    assert f"comment = Job deleted as result of dependency on job {child}" in stat("-f", "-1", *history, grandchild)[1]
    records = [(e.kind, e.job_id, e.fields.get("Exit_status")) for e in accounting.read(rig / "home")]
    assert records[-3:] == [("E", parent, "2"), ("D", child, "271"), ("D", grandchild, "271")]
    # a parent that failed already: accepted and deleted at once, as if it had failed later
    late = submit("-W", f"depend=afterok:{parent}")
    assert f"comment = Job deleted as result of dependency on job {parent}" in stat("-f", "-1", *history, late)[1]
    assert [e.kind for e in accounting.read(rig / "home") if e.job_id == late] == ["Q", "D"]
    waiting = submit("-h")
    assert qctl.QALTER(["-W", f"depend=afterok:{parent}", waiting]) == 192  # qalter refuses: it never deletes
    assert "job_state = H" in stat("-f", "-1", waiting)[1]


def test_dependency_failure_hold_is_cobalts_dep_fail(rig):
    home = rig / "home"
    (home / "config.toml").write_text('dependency_failure = "hold"\n' + (home / "config.toml").read_text())
    parent = submit()
    child = submit("-W", f"depend=afterok:{parent}")
    _ended(parent, 1, time.time())
    out = stat("-f", "-1", child)[1]
    assert "job_state = H" in out and "Hold_Types = s" in out


@pytest.mark.parametrize("flavor", ["torque", "openpbs"])
@pytest.mark.parametrize("spec,status,message", [
    ("afterokarray:9[]", 153, "Unknown Job Id 9[].headnode"), ("afterok:9[3]", 153, "Unknown Job Id 9[3].headnode"),
    ("afterok:1[1]x", 153, "illegally formed job identifier"), ("afterok:1[][2]", 153, "illegally formed"),
    ("afterokarray:1[2]", 153, "illegally formed"), ("afterok:abc", 153, "illegally formed"),
    ("afterokaray:1", 2, "illegal -W value")])
def test_bad_depend_lists(rig, monkeypatch, flavor, spec, status, message):
    """A malformed id in a depend list: OpenPBS's 153, Torque's usage status (2)."""
    monkeypatch.setenv("HPCSCHED_FLAVOR", flavor)
    submit("-t", "1-2")
    with pytest.raises(CommandError) as e:
        submit("-W", "depend=" + spec)
    if flavor == "torque" and "illegally formed" in message:
        status, message = 2, f"illegal -W value: depend={spec}"
    assert e.value.status == status and message in str(e.value)
    # qalter reads a depend list by the same rule
    assert qctl.QALTER(["-W", "depend=" + spec, "1[1]"], out=io.StringIO()) == status


def test_subjob_ids_work_wherever_a_job_id_does(rig, monkeypatch, capsys):
    from hpcsched.pbs import maui
    submit("-t", "1-3")
    assert qctl.QHOLD(["1[2].headnode"]) == 0
    assert "job_state = H" in stat("-f", "-1", "-t", "1[2]")[1]
    assert qctl.QRLS(["1[2]"]) == 0
    assert qctl.QALTER(["-N", "renamed", "1[3].headnode"]) == 0
    assert "Job_Name = renamed" in stat("-f", "-1", "-t", "1[3]")[1]
    monkeypatch.setenv("HPCSCHED_USER", "olga")
    assert qctl.QRUN(["1[1]"]) == 0
    assert qctl.QSIG(["-s", "USR1", "1[1].headnode"]) == 0
    out = io.StringIO()
    assert maui.CHECKJOB(["1[1].headnode"], out=out) == 0 and "State: Running" in out.getvalue()
    assert qctl.QMOVE(["batch", "1[2]"]) == 0
    assert qctl.QDEL(["1[]"]) == 0


def test_an_array_with_no_subjob_left_to_act_on_answers_as_one_job(rig, monkeypatch, capsys):
    """Every subjob finished: qdel, qhold, qrls or qalter of the array is refused, not a
    silent success: Unauthorized for someone else, invalid state for its owner."""
    submit("-t", "0-1")
    _ended("1[]", 0, time.time())
    monkeypatch.setenv("HPCSCHED_USER", "bob")
    assert qctl.QDEL(["1[]"]) == 159 and "qdel: Unauthorized Request  1[].headnode" in capsys.readouterr().err
    monkeypatch.setenv("HPCSCHED_USER", "alice")
    for prog, argv in (("qdel", []), ("qhold", []), ("qrls", []), ("qalter", ["-N", "late"])):
        assert getattr(qctl, prog.upper())([*argv, "1[]"]) == 170, prog
        assert f"{prog}: Request invalid for state of job 1[].headnode" in capsys.readouterr().err


def test_a_failed_subjob_is_named_by_its_subjob_id(rig):
    submit("-t", "1-2")
    child = submit("-W", "depend=afterok:1[2].headnode")
    _ended("1[2]", 1, time.time())
    assert "comment = Job deleted as result of dependency on job 1[2].headnode" in stat("-f", "-1", child)[1]


def test_a_failing_accounting_write_never_fails_a_saved_submission(rig, capsys):
    """The job is journaled first; an accounting record that cannot be written (here the
    accounting directory is a file, as a full disk would refuse it) is reported and the
    command succeeds, so no one resubmits a job that exists; the next change writes it
    (store/accounts.py).  A name that is not UTF-8 is written escaped."""
    (rig / "home" / "accounting").write_text("not a directory")
    jid = submit("-N", "kept")
    assert jid == "1.headnode" and "accounting record Q of job 1 not written" in capsys.readouterr().err
    (rig / "home" / "accounting").unlink()
    assert submit("-N", "odd\udcff") == "2.headnode"
    written = next((rig / "home" / "accounting").iterdir()).read_text()
    assert [line.split(";")[1:3] for line in written.splitlines()] == [["Q", "1.headnode"], ["Q", "2.headnode"]]
    assert "jobname=kept" in written and "odd\\udcff" in written


def test_accounting_records_no_change_could_write_wait_for_one_that_can_each_written_once(rig, capsys,
                                                                                         monkeypatch):
    """Lines a full disk refused stay pending through every later change, accounted or not,
    one lock or many (two ends under one lock here), and are written in order once one
    can; a change whose journal append failed leaves none of its own (store/accounts.py)."""
    import errno

    from hpcsched.store import journal
    (rig / "home" / "accounting").write_text("not a directory")
    submit("-N", "first")
    submit("-N", "second")
    assert "record Q of job 1 and 1 more not written" in capsys.readouterr().err
    submit("-t", "1-2", "-N", "pair")
    _ended("3[]", 0, time.time())  # (two ends under one lock)
    assert qctl.QALTER(["-N", "renamed", "1"]) == 0  # (no record of its own)
    assert "record Q of job 1 and 5 more not written" in capsys.readouterr().err
    real = journal.Store.append

    def refused(self, record, before=None):
        if record["op"] != "submit":
            return real(self, record, before)
        before(self.last_seq() + 1)
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(journal.Store, "append", refused)
    with pytest.raises(journal.StoreError, match="nothing was saved"):
        submit("-N", "never")
    monkeypatch.setattr(journal.Store, "append", real)
    (rig / "home" / "accounting").unlink()
    assert qctl.QALTER(["-N", "again", "1"]) == 0  # (a change with no record writes those waiting)
    assert submit("-N", "fifth") == "4.headnode"  # (the array took one number, as Torque's does)
    written = next((rig / "home" / "accounting").iterdir()).read_text()
    assert [line.split(";")[1:3] for line in written.splitlines()] == [
        ["Q", "1.headnode"], ["Q", "2.headnode"], ["Q", "3[1].headnode"], ["Q", "3[2].headnode"],
        ["E", "3[1].headnode"], ["E", "3[2].headnode"], ["Q", "4.headnode"]]
    assert "never" not in written and not (rig / "home" / "accounting.pending").exists()


def test_an_array_is_one_journal_record_saved_whole_or_not_at_all(rig):
    """qsub -t writes the array as one record (a thousand subjobs in one line, not a
    thousand lines); a queue limit that the array would cross refuses all of it."""
    from hpcsched.pbs import tracejob
    jid = submit("-t", "1-3,7,10-1000", "-l", "walltime=60")
    lines = (rig / "home" / "journal.jsonl").read_text().splitlines()[1:]  # (after the configuration's)
    assert jid == "1[].headnode" and len(lines) == 1 and '"op":"submit_array"' in lines[0]
    assert '"indices":[[1,3],[7,7],[10,1000]]' in lines[0]
    listed = stat("-t")[1]
    assert "1[7].headnode" in listed and "1[1000].headnode" in listed and "1[5].headnode" not in listed
    assert submit("-N", "after") == "2.headnode"  # (Torque's numbering: the array is job 1)
    out = io.StringIO()
    assert tracejob.TRACEJOB(["1[1000]"], out=out) == 0 and "enqueuing into the default queue" in out.getvalue()
    config = rig / "home" / "config.toml"
    config.write_text(config.read_text().replace("[queues.batch]", "[queues.batch]\nmax_queued = 1000"))
    with pytest.raises(CommandError, match="max_queued"):
        submit("-t", "1-10", "-l", "walltime=60")
    # nothing of it saved, not even the changed configuration (config, array, "after")
    assert len((rig / "home" / "journal.jsonl").read_text().splitlines()) == 3


def test_qsig_on_an_array_signals_its_running_subjobs_and_says_so_once_if_none_runs(rig, monkeypatch, capsys):
    from hpcsched.pbs import common
    from hpcsched.store.journaled import Batch
    from hpcsched.store.site import load_site
    submit("-t", "1-5", "-l", "walltime=60,nodes=4:ppn=4")  # (one at a time: the whole rig)
    assert qctl.QSIG(["-s", "USR1", "1[]"], out=io.StringIO()) == common.BAD_STATE
    assert capsys.readouterr().err == "qsig: Request invalid for state of job 1[].headnode\n"  # (not one a subjob)
    assert qctl.QSIG(["-s", "NOSUCH", "1[]"], out=io.StringIO()) == 2
    assert capsys.readouterr().err == "qsig: illegal signal 'NOSUCH'\nusage: qsig [-s signal] job_id ...\n"  # (once)
    monkeypatch.setenv("HPCSCHED_USER", "olga")  # (an operator: qrun)
    assert qctl.QRUN(["1[2]"], out=io.StringIO()) == 0
    monkeypatch.setenv("HPCSCHED_USER", "alice")
    assert qctl.QSIG(["-s", "USR1", "1[]"], out=io.StringIO()) == 0 and capsys.readouterr().err == ""
    batch = Batch(load_site())
    with batch.open(write=False):
        signalled = {j.array_index: j.extra.get("pending_signals") for j in batch.sched.jobs.values()}
    assert signalled == {1: None, 2: [10], 3: None, 4: None, 5: None}


def test_qsig_suspend_and_resume_are_for_operators_and_stop_the_walltime(rig, monkeypatch, capsys):
    # (Torque: a suspended job shows S and is not charged walltime; operators and managers
    # only.  They were plain SIGSTOP and SIGCONT: state R, walltime running, any owner)
    from hpcsched.pbs import common
    jid = submit("-l", "walltime=1:00:00")
    monkeypatch.setenv("HPCSCHED_USER", "olga")  # (an operator: qrun)
    assert qctl.QRUN([jid], out=io.StringIO()) == 0
    monkeypatch.setenv("HPCSCHED_USER", "alice")
    assert qctl.QSIG(["-s", "suspend", jid], out=io.StringIO()) == common.UNAUTHORIZED
    assert qctl.QSIG(["-s", "STOP", jid], out=io.StringIO()) == 0  # (a plain signal is hers to send)
    monkeypatch.setenv("HPCSCHED_USER", "olga")
    start = time.time()
    assert qctl.QSIG(["-s", "resume", jid], out=io.StringIO()) == common.BAD_STATE  # (not suspended)
    assert qctl.QSIG(["-s", "suspend", jid], out=io.StringIO(), now=start + 100) == 0
    assert qctl.QSIG(["-s", "suspend", jid], out=io.StringIO(), now=start + 150) == common.BAD_STATE
    assert capsys.readouterr().err.count("qsig: Request invalid for state of job 1.headnode") == 2

    def seen(now):
        out = io.StringIO()
        qstat.QSTAT(["-f", "-F", "json", jid], out=out, now=now)
        j = json.loads(out.getvalue())["Jobs"][jid]
        return j["job_state"], j["resources_used"]["walltime"]
    assert seen(start + 1000) == ("S", "00:01:40")  # (the 100 s before it stopped)
    from hpcsched.pbs import maui
    out = io.StringIO()
    assert maui.CHECKJOB([jid], out=out, now=start + 1000) == 0
    assert "State: Suspended\n" in out.getvalue() and "WallTime: 00:01:40 of 01:00:00" in out.getvalue()
    assert qctl.QSIG(["-s", "resume", jid], out=io.StringIO(), now=start + 3700) == 0
    assert seen(start + 3750)[0] == "R" and seen(start + 3750)[1] in ("00:02:30", "00:02:29", "00:02:31")
    from hpcsched.store.journaled import Batch
    from hpcsched.store.site import load_site
    batch = Batch(load_site())
    with batch.open(write=False):
        job = batch.sched.jobs[int(jid.split(".")[0])]
    assert job.extra["pending_signals"] == [19, 19, 18] and "suspended_at" not in job.extra
    assert common.run_time(job, start + 3750) == pytest.approx(150, abs=2)


def test_qrerun_marks_running_jobs_for_the_server_and_refuses_what_may_not_rerun(rig, monkeypatch, capsys):
    from hpcsched.pbs import common
    from hpcsched.store.journaled import Batch
    from hpcsched.store.site import load_site
    keep, norerun, waiting = submit(), submit("-r", "n"), submit("-l", "nodes=4:ppn=4")
    monkeypatch.setenv("HPCSCHED_USER", "olga")  # (an operator)
    assert qctl.QRUN([keep], out=io.StringIO()) == 0 and qctl.QRUN([norerun], out=io.StringIO()) == 0
    assert qctl.QRERUN([norerun], out=io.StringIO()) == common.BAD_STATE
    assert "qrerun: Job is not rerunnable 2.headnode (qrerun -f forces it)" in capsys.readouterr().err
    assert qctl.QRERUN([waiting], out=io.StringIO()) == common.BAD_STATE  # (not running)
    assert qctl.QRERUN([keep], out=io.StringIO()) == qctl.QRERUN(["-f", norerun], out=io.StringIO()) == 0
    assert qctl.QRERUN([keep], out=io.StringIO()) == common.BAD_STATE  # (asked already)
    batch = Batch(load_site())
    with batch.open(write=False):
        marked = {j.id: j.extra.get("rerun") for j in batch.sched.jobs.values()}
    assert marked == {1: True, 2: True, 3: None}
    monkeypatch.setenv("HPCSCHED_USER", "alice")
    assert qctl.QRERUN([keep], out=io.StringIO()) == common.UNAUTHORIZED


def test_a_command_on_many_jobs_syncs_its_journal_once_and_reads_each_job_once(rig, monkeypatch):
    """qhold, qrls and qdel on an array's subjobs (or `qdel all`) append a record per job
    but fsync the journal once at the end: 100,000 subjobs waited for 100,000 fsyncs (over
    10 minutes for `qdel all`, which also resolved every subjob's id again by reading every
    job).  The records are all there, each job changed once."""
    from hpcsched.pbs import common
    submit("-t", "1-50", "-l", "walltime=60")
    assert submit("-N", "single") == "2.headnode"
    journal = rig / "home" / "journal.jsonl"
    syncs, resolved, real_fsync, real_resolve = [], [], os.fsync, common.resolve
    monkeypatch.setattr(os, "fsync", lambda fd: (syncs.append(fd), real_fsync(fd))[1])
    monkeypatch.setattr(common, "resolve", lambda *a: (resolved.append(a[1]), real_resolve(*a))[1])

    def states():
        return [line.split()[4] for line in stat("-t")[1].splitlines()[2:]]
    before = len(journal.read_text().splitlines())
    assert qctl.QHOLD(["1[]"], out=io.StringIO()) == 0
    assert len(syncs) == 1 and resolved == ["1[]"]
    assert len(journal.read_text().splitlines()) == before + 50
    assert states() == ["H"] * 50 + ["Q"]
    syncs.clear(), resolved.clear()
    assert qctl.QDEL(["all"], out=io.StringIO()) == 0
    assert len(syncs) == 1 and resolved == []
    assert len(journal.read_text().splitlines()) == before + 50 + 51
    assert states() == ["C"] * 51


def test_t_names_the_subjobs_of_an_array_to_hold_release_or_delete(rig, capsys):
    """Torque's `-t RANGE` with qhold, qrls, qalter and qdel: only those subjobs of the array."""
    submit("-t", "1-6", "-l", "walltime=60")

    def states():
        return [line.split()[4] for line in stat("-t")[1].splitlines()[2:]]
    assert qctl.QHOLD(["-t", "2-3,5", "1[]"], out=io.StringIO()) == 0
    assert states() == ["Q", "H", "H", "Q", "H", "Q"]
    assert qctl.QRLS(["-t", "3", "1.headnode"], out=io.StringIO()) == 0
    assert states() == ["Q", "H", "Q", "Q", "H", "Q"]
    assert qctl.QALTER(["-t", "1,3", "-N", "renamed", "1[]"], out=io.StringIO()) == 0
    assert [full(f"1[{i}]")["Job_Name"] for i in (1, 2, 3)] == ["renamed", "STDIN", "renamed"]
    assert qctl.QDEL(["-t", "4-6", "1[]"], out=io.StringIO()) == 0
    assert states() == ["Q", "H", "Q", "C", "C", "C"]
    assert qctl.QDEL(["-t", "9", "1[]"], out=io.StringIO()) == 153
    assert "qdel: Unknown Job Id 1[9].headnode" in capsys.readouterr().err
    for argv in (["-t", "1-3", "1[2]"], ["-t", "1%2", "1[]"], ["-t", "x", "1[]"], ["-t", "3-1", "1[]"]):
        assert qctl.QDEL(argv, out=io.StringIO()) == 2
    assert "-t takes an array's id (123[] or 123), not '1[2]'" in capsys.readouterr().err
    assert states() == ["Q", "H", "Q", "C", "C", "C"]


def test_qalter_t_percent_changes_an_arrays_slot_limit(rig, monkeypatch, capsys):
    """Torque's `qalter -t %N`: the slot limit of the whole array, running subjobs too; the
    next pass starts up to it, and 0 lifts it; a range with a limit is refused."""
    from hpcsched.store.journaled import Batch
    from hpcsched.store.site import load_site
    submit("-t", "1-6%1", "-l", "walltime=60")

    def running_after_a_pass():
        with Batch(load_site()).open() as batch:
            batch.do("pass")
            return sum(j.state.name == "RUNNING" for j in batch.sched.jobs.values()), \
                {j.array_limit for j in batch.sched.jobs.values()}
    assert running_after_a_pass() == (1, {1})
    assert qctl.QALTER(["-t", "%3", "1[]"], out=io.StringIO()) == 0
    assert running_after_a_pass() == (3, {3})
    assert qctl.QALTER(["-t", "%0", "1"], out=io.StringIO()) == 0
    assert running_after_a_pass() == (4, {0})  # (a job a node: the rig has four)
    assert submit("-N", "single") == "2.headnode"
    for argv in (["-t", "1-3%2", "1[]"], ["-t", "%x", "1[]"], ["-t", "%2", "1[3]"]):
        assert qctl.QALTER(argv, out=io.StringIO()) == 2
    assert qctl.QALTER(["-t", "%2", "7"], out=io.StringIO()) == 153  # (no such array)
    assert "qalter: Unknown Job Id 7[].headnode" in capsys.readouterr().err
    from hpcsched.core.errors import Rejected
    with Batch(load_site()).open() as batch:  # (the core refuses a limit on a job of no array)
        with pytest.raises(Rejected, match="a slot limit is a whole number >= 0 for an array's subjob"):
            batch.do("alter", id=2, changes={"array_limit": 2})
    monkeypatch.setenv("HPCSCHED_USER", "bob")
    assert qctl.QALTER(["-t", "%1", "1[]"], out=io.StringIO()) == 159  # (not his array)


@pytest.mark.parametrize("argv,message", [
    (["-l", "nodes=1:ppn=²"], "ppn must be a positive integer, not '²'"), (["-l", "walltime=²"], "illegal -l value"),
    (["-o", "a\x00b"], "illegal character (NUL)"), (["-M", "a b"], "illegal -M value"), (["-k", "q"], "illegal -k value"),
    (["-N", "a\x07b"], "illegal -N value"), (["-W", "depend=afterok:abc"], "illegal -W value: depend=afterok:abc"),
    (["-l", "vmem=lots"], "bad size 'lots'"), (["-l", "nice=-21"], "nice must be an integer from -20 to 19")])
def test_qalter_refuses_bad_values_in_one_line_and_changes_nothing(rig, capsys, argv, message):
    jid = submit("-N", "kept")
    journal = (rig / "home" / "journal.jsonl").read_bytes()
    assert qctl.QALTER([*argv, jid], out=io.StringIO()) == 2
    assert message in capsys.readouterr().err
    assert (rig / "home" / "journal.jsonl").read_bytes() == journal


def _filter(rig, body):
    path = rig / "filter.sh"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    config = rig / "home" / "config.toml"
    config.write_text(f'submit_filter = ["{path}"]\n' + config.read_text())


def test_a_submit_filter_may_change_the_script(rig):
    """Torque's submit filter: qsub's arguments, the script on stdin, the script to submit
    on stdout (here it puts every job of user alice's under her project)."""
    _filter(rig, 'echo "$@" > "$(dirname "$0")/args"\nread first\necho "$first"\necho "#PBS -A physics"\ncat\n')
    jid = submit("-N", "filtered", "-l", "walltime=60", script="#!/bin/sh\n#PBS -m n\necho hi\n")
    attrs = full(jid)
    assert attrs["Account_Name"] == "physics" and attrs["Mail_Points"] == "n"
    assert (rig / "args").read_text() == "-N filtered -l walltime=60\n"


@pytest.mark.parametrize("body,message", [
    ('echo "project physics is over its allocation" >&2\nexit 3\n', "project physics is over its allocation"),
    ("exit 4\n", "(filter exit 4)"),
    ("sleep 30\n", "did not answer within 0.5 s")])
def test_a_refusing_failing_or_hanging_filter_refuses_the_job_and_saves_nothing(rig, monkeypatch, body, message):
    monkeypatch.setattr(qsub, "FILTER_TIMEOUT", 0.5)
    _filter(rig, body)
    with pytest.raises(CommandError) as e:
        submit("-l", "walltime=60")
    assert e.value.status == 1 and "administratively rejected by the queueing system" in str(e.value)
    assert message in str(e.value) and not (rig / "home" / "journal.jsonl").exists()


def test_qsub_block_without_a_server_waits_on_the_store(rig, monkeypatch, tmp_path):
    """-W block=true on a rig with no server running: qsub waits, reading the store, until
    whatever runs the job records its end (here a pass and an end by hand)."""
    import threading

    from hpcsched.store.journaled import Batch
    from hpcsched.store.site import load_site
    (tmp_path / "job.sh").write_text("#!/bin/sh\ntrue\n")
    out, result = io.StringIO(), []
    monkeypatch.setattr(qsub, "blocked", lambda jid, remote, poll=1.0, real=qsub.blocked: real(jid, remote, 0.05))
    waiter = threading.Thread(target=lambda: result.append(qsub.QSUB(["-W", "block=true", str(tmp_path / "job.sh")],
                                                                      out=out)))
    waiter.start()
    deadline = time.time() + 10
    while not out.getvalue():
        assert time.time() < deadline
        time.sleep(0.02)
    jid = int(out.getvalue().split(".")[0])
    time.sleep(0.2)
    assert result == []  # (still waiting)
    with Batch.of(load_site()).open() as batch:
        batch.do("pass", time.time())
        batch.do("ended", time.time(), id=jid, exit_status=4)
    waiter.join(10)
    assert result == [4]


def test_qstat_Q_and_q_list_the_queues_named_and_Qf_their_attributes(rig):
    submit("-l", "walltime=10:00")
    status, out = stat("-Q", "batch")
    assert status == 0 and [l.split()[0] for l in out.splitlines()[2:]] == ["batch"]
    assert stat("-Q", "nosuch")[0] == 172
    assert [l.split()[0] for l in stat("-q", "batch@headnode")[1].splitlines()[5:6]] == ["batch"]
    status, out = stat("-Q", "-f", "batch")
    assert status == 0 and out.startswith("Queue: batch\n    queue_type = Execution\n    total_jobs = 1\n")
    assert "    state_count = Transit:0 Queued:1 Held:0 Waiting:0 Running:0 Exiting:0 Complete:0\n" in out
    assert "    enabled = True\n" in out


def test_openpbs_qstat_f_shows_where_and_when_the_last_pass_plans_a_waiting_job(rig, monkeypatch):
    from hpcsched.store.journaled import Batch
    from hpcsched.store.site import load_site
    submit("-l", "nodes=4:ppn=4,walltime=01:00:00")
    submit("-l", "nodes=1:ppn=2,walltime=00:10:00")
    assert "estimated.start_time" not in full("2")  # (no pass has planned it yet)
    now = time.time()
    batch = Batch(load_site())
    with batch.open(write=True):
        batch.do("pass", now)
    assert "estimated.start_time" not in full("2")  # (Torque has no such attribute)
    monkeypatch.setenv("HPCSCHED_FLAVOR", "openpbs")
    a = full("2")
    assert a["estimated.start_time"] == time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(now + 3600))
    assert re.fullmatch(r"\(node0[1-4]:ncpus=2\)", a["estimated.exec_vnode"])
    assert "estimated.start_time" not in full("1")  # (running)


def test_qstat_lists_the_jobs_of_a_destination(rig, monkeypatch):
    """`qstat QUEUE`, `queue@server` and `@server` (every queue), beside job ids."""
    from hpcsched.pbs import qmgr
    monkeypatch.setenv("HPCSCHED_USER", "root")
    assert qmgr.QMGR(["-c", "create queue short"], out=io.StringIO()) == 0
    monkeypatch.setenv("HPCSCHED_USER", "alice")
    submit("-l", "walltime=10:00")
    submit("-q", "short", "-l", "walltime=10:00")
    rows = lambda out: [l.split()[0] for l in out.splitlines()[2:]]  # noqa: E731
    assert rows(stat("short")[1]) == ["2.headnode"]
    assert rows(stat("batch@headnode")[1]) == ["1.headnode"]
    assert rows(stat("@headnode")[1]) == ["1.headnode", "2.headnode"]
    assert rows(stat("1", "short")[1]) == ["1.headnode", "2.headnode"]
    status, out = stat("nosuch", "1")  # (the others named still print)
    assert status == 172 and rows(out) == ["1.headnode"]
    assert stat("nosuch")[1] == ""
    assert [l for l in stat("-f", "short")[1].splitlines() if l.startswith("Job Id")] == ["Job Id: 2.headnode"]


def test_every_W_option_counts_the_command_lines_over_the_scripts(rig):
    """-W names attributes: several -W options and directives all count, one value per
    name, the command line's over the script's (only the first -W was kept)."""
    script = "#!/bin/sh\n#PBS -W umask=077\n#PBS -W stageout=o@h:/x\ntrue\n"
    jid = submit("-W", "umask=022", "-W", "stagein=a@h:/b,c@h:/d", script=script)
    a = full(jid)
    assert (a["umask"], a["stagein"], a["stageout"]) == ("022", "a@h:/b,c@h:/d", "o@h:/x")
    with pytest.raises(Exception, match="local_file@hostname:remote_file"):
        submit("-W", "stagein=nohost")


def test_qselect_by_priority_rerunnable_and_execution_time(rig):
    from hpcsched.pbs import qctl as q

    def select(*argv):
        out = io.StringIO()
        assert q.QSELECT(list(argv), out=out) == 0
        return [line.split(".")[0] for line in out.getvalue().split()]
    submit("-p", "10")
    submit("-p", "-5", "-r", "n")
    submit("-a", "202912312359")
    assert select("-p", ".gt.0") == ["1"] and select("-p", "-5") == ["2"] and select("-p", ".le.0") == ["2", "3"]
    assert select("-r", "n") == ["2"] and select("-r", "y") == ["1", "3"]
    assert select("-a", ".gt.202801010000") == ["3"] and select("-a", ".lt.202801010000") == []
    assert q.QSELECT(["-p", ".gt.x"], out=io.StringIO()) == 2 and q.QSELECT(["-r", "maybe"], out=io.StringIO()) == 2


def test_qalter_takes_every_W_attribute_given(rig):
    submit("-l", "walltime=10:00")
    assert qctl.QALTER(["-W", "umask=022", "-W", "stagein=in@h:/x", "1"]) == 0
    a = full("1")
    assert (a["umask"], a["stagein"]) == ("022", "in@h:/x")
    assert qctl.QALTER(["-W", "stageout=nohost", "1"]) == 2
    assert qctl.QALTER(["-W", "frob=1", "1"]) == 2


def test_a_sliced_command_resumes_where_it_stopped_and_acts_on_each_job_once(rig, monkeypatch, capsys):
    """A serving server bounds one command to its request's `slice` of jobs, then runs it
    on from the request's `resume` after a step: qdel of an array, of a list of ids (one
    unknown) and of `all` acts on every job once and says each error once."""
    from hpcsched.store.journaled import Batch
    from hpcsched.store.request import Request, serving
    from hpcsched.store.site import load_site
    array = submit("-h", "-t", "0-24").split(".")[0]
    singles = [submit("-h").split(".")[0] for _ in range(12)]

    def until_done(argv):
        statuses, slices, request = [], 0, Request(slice=10)
        while True:
            with serving(request):
                statuses.append(qctl.QDEL(argv, out=io.StringIO()))
            slices += 1
            if request.resume is None:
                return statuses, slices
            assert slices < 10

    assert until_done([array]) == ([0, 0, 0], 3)
    assert until_done([*singles[:3], "999", *singles[3:]]) == ([153, 0], 2)
    assert capsys.readouterr().err.count("Unknown Job Id 999") == 1
    more = [submit("-h").split(".")[0] for _ in range(12)]
    assert until_done(["all"]) == ([0, 0], 2)
    batch = Batch(load_site())
    with batch.open(write=False):
        assert {j.state for j in batch.sched.jobs.values()} == {"deleted"} and len(more) == 12


def test_a_script_past_max_request_is_refused_without_a_server(rig, capsys):
    """The journal keeps a job's script whole: qsub run in its own process refuses one
    larger than max_request (16 MiB by default) as the server's door does."""
    path = rig / "home" / "config.toml"
    path.write_text("max_request = 1000\n" + path.read_text())
    with pytest.raises(CommandError, match=r"script is larger than 1000 bytes \(max_request\)"):
        submit(script="#!/bin/sh\n" + "#" * 2000 + "\ntrue\n")
    assert submit(script="#!/bin/sh\ntrue\n") == "1.headnode"


def test_init_says_the_next_step_is_the_server(tmp_path, monkeypatch, capsys):
    """A new user's jobs wait until a server runs them: init says how to start it."""
    from hpcsched import cli
    monkeypatch.setenv("HPCSCHED_HOME", str(tmp_path / "site"))
    assert cli.main(["init"]) == 0
    out = capsys.readouterr().out
    assert f"wrote {tmp_path / 'site' / 'config.toml'}" in out
    assert f"python3 -m hpcsched server --log {tmp_path / 'site'}/server.log" in out


def test_with_no_server_qsub_and_checkjob_say_the_job_waits_for_one(tmp_path):
    """qsub said nothing and checkjob "it starts at the next scheduling pass", with no
    server to run it: each now says the job waits until `hpcsched server` starts."""
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    from hpcsched.store.site import init_site
    init_site(tmp_path / "site", nodes=1, cores=1)
    env = dict(os.environ, HPCSCHED_HOME=str(tmp_path / "site"), HPCSCHED_USER="alice")
    env.pop("HPCSCHED_FLAVOR", None)

    def bin_(*argv, stdin=""):
        return subprocess.run([sys.executable, "-S", os.path.join(root, "bin", argv[0]), *argv[1:]], input=stdin,
                              capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=60)
    sub = bin_("qsub", stdin="true\n")
    assert sub.returncode == 0 and sub.stdout.strip().startswith("1.")
    assert sub.stderr == "qsub: no server is running: the job waits until `hpcsched server` starts\n"
    check = bin_("checkjob", "1")
    assert "job can start now, but no server is running" in check.stdout
    assert bin_("qsub", "-l", "walltime=-1", stdin="true\n").stderr.count("no server is running") == 0  # (refused)


def test_a_finished_array_shows_the_worst_exit_and_qstat_t_lists_its_row_under_openpbs(rig, monkeypatch):
    """PBS Professional's array exit status: 0 when every subjob exited 0, 1 when one did
    not (2: one could not run); `qstat -t` lists the `N[]` row and then its subjobs under
    OpenPBS, the subjobs alone under Torque."""
    monkeypatch.setenv("HPCSCHED_FLAVOR", "openpbs")
    arr = submit("-J", "1-3")
    ids = [line.split()[0] for line in stat("-t")[1].splitlines()[2:]]
    assert ids == ["1[].headnode", "1[1].headnode", "1[2].headnode", "1[3].headnode"]
    now = time.time()
    _ended("1[1]", 0, now)
    _ended("1[2]", 3, now + 2)
    _ended("1[3]", 0, now + 4)
    doc = json.loads(stat("-x", "-f", "-F", "json", arr)[1])
    assert doc["Jobs"][arr]["Exit_status"] == 1 and doc["Jobs"][arr]["job_state"] == "F"
    ok = submit("-J", "1-2")
    _ended(ok.replace("[]", "[1]"), 0, now + 6)
    _ended(ok.replace("[]", "[2]"), 0, now + 8)
    assert json.loads(stat("-x", "-f", "-F", "json", ok)[1])["Jobs"][ok]["Exit_status"] == 0
    monkeypatch.setenv("HPCSCHED_FLAVOR", "torque")
    arr = submit("-t", "1-2")
    rows = [line.split()[0] for line in stat("-t")[1].splitlines()[2:]]
    assert arr not in rows and {arr.replace("[]", "[1]"), arr.replace("[]", "[2]")} <= set(rows)


def test_queue_and_server_status_in_openpbs_json_and_the_same_job_counts_everywhere(rig, monkeypatch):
    """qstat -Qf / -Bf with -F json print OpenPBS's JSON (as its jobs' -F json does);
    qstat -Q's Tot, qstat -Qf's and qmgr's total_jobs count the same jobs (OpenPBS's
    finished ones are history, not counted); the queue type reads Exec."""
    from hpcsched.pbs import qmgr
    monkeypatch.setenv("HPCSCHED_FLAVOR", "openpbs")
    for _ in range(3):
        submit()
    _ended("1", 0, time.time())
    doc = json.loads(stat("-Q", "-f", "-F", "json")[1])
    batch = doc["Queue"]["batch"]
    assert doc["pbs_server"] == "headnode" and batch["queue_type"] == "Execution"
    assert batch["total_jobs"] == 2 and batch["state_count"].endswith("Begun:0")
    assert batch["enabled"] == "True" and isinstance(batch["resources_max"], dict)
    server = json.loads(stat("-B", "-f", "-F", "json")[1])["Server"]["headnode"]
    assert server["total_jobs"] == 2 and server["server_state"] == "Active"
    assert "keep_completed" not in server and server["job_history_enable"] == "True"
    assert stat("-B", "-f", "-F", "dsv", "-D", ";")[1].startswith("Server: headnode;server_state=Active;")
    row = stat("-Q")[1].splitlines()[2].split()
    assert row[2] == "2" and row[-1] == "Exec"
    out = io.StringIO()
    assert qmgr.QMGR(["-c", "list queue batch"], out=out) == 0 and "total_jobs = 2" in out.getvalue()
    out = io.StringIO()
    assert qmgr.QMGR(["-c", "p s"], out=out) == 0
    assert "keep_completed" not in out.getvalue() and "set server job_history_duration = 336:00:00" in out.getvalue()
    monkeypatch.setenv("HPCSCHED_FLAVOR", "torque")  # (Torque's completed job is still on the server: counted)
    out = io.StringIO()
    assert qmgr.QMGR(["-c", "p s"], out=out) == 0 and "set server keep_completed = 300" in out.getvalue()
    assert "job_history" not in out.getvalue()
    assert stat("-Q")[1].splitlines()[2].split()[2] == "3"


def test_pbsnodes_summary_forms(rig, monkeypatch):
    """OpenPBS's pbsnodes -aS (a node's resources a line) and -aSj (its jobs, free/total)."""
    from hpcsched.pbs import pbsnodes
    jid = submit("-l", "nodes=1:ppn=2")
    monkeypatch.setenv("HPCSCHED_USER", "olga")
    assert qctl.QRUN([jid], out=io.StringIO()) == 0
    out = io.StringIO()
    assert pbsnodes.PBSNODES(["-aS"], out=out) == 0
    lines = out.getvalue().splitlines()
    assert lines[0].split() == ["vnode", "state", "OS", "hardware", "host", "queue", "mem", "ncpus", "nmics",
                                "ngpus", "comment"]
    assert lines[2].split()[:2] == ["node01", "free"] and lines[2].split()[7] == "4" and len(lines) == 6
    out = io.StringIO()
    assert pbsnodes.PBSNODES(["-a", "-S", "-j", "-L"], out=out) == 0  # (-L: the job id uncut)
    lines = out.getvalue().splitlines()
    assert lines[1].split()[:5] == ["vnode", "state", "njobs", "run", "susp"]
    busy = [line.split() for line in lines[3:] if jid in line]
    assert len(busy) == 1 and busy[0][2:4] == ["1", "1"] and busy[0][6] == "2/4"
    assert pbsnodes.PBSNODES(["-j"], out=io.StringIO()) == 2  # (-j and -L go with -S)


def test_checkjob_and_accounting_give_the_same_group(rig, monkeypatch):
    """checkjob's Creds group is the one accounting records: the owner's primary group
    (root's is root), or the owner's name where the host does not know the owner."""
    from hpcsched.pbs import accounting, maui
    from hpcsched.store.journaled import Batch
    from hpcsched.store.site import load_site
    monkeypatch.setenv("HPCSCHED_USER", "root")
    jid = submit()
    out = io.StringIO()
    assert maui.CHECKJOB([jid], out=out) == 0
    assert "  group:root  " in out.getvalue()
    with Batch.of(load_site()).open(write=False) as batch:
        job = batch.sched.job(int(jid.split(".")[0]))
        assert " group=root " in accounting.lines("Q", [job], "headnode", 0)[0]
    monkeypatch.setenv("HPCSCHED_USER", "alice")  # (no such user on this host)
    jid = submit()
    out = io.StringIO()
    assert maui.CHECKJOB([jid], out=out) == 0 and "  group:alice  " in out.getvalue()


def test_an_array_takes_one_job_number_and_every_command_names_its_subjobs_alike(rig, capsys):
    """Torque's numbering everywhere: array 2[] of six tasks is job 2 (the next job is 3),
    its subjobs 2[1]..2[6] in qstat, showq, checkjob, showstart and tracejob; 3 names no
    subjob anywhere."""
    from hpcsched.pbs import maui, tracejob
    assert submit() == "1.headnode"
    assert submit("-t", "1-6") == "2[].headnode"
    rows = [line.split()[0] for line in stat("-t")[1].splitlines()[2:]]
    assert rows == ["1.headnode"] + [f"2[{i}].headnode" for i in range(1, 7)]
    out = io.StringIO()
    assert maui.SHOWQ([], out=out) == 0
    assert [line.split()[0] for line in out.getvalue().splitlines() if "Idle" in line and "Jobs" not in line] == \
        ["1"] + [f"2[{i}]" for i in range(1, 7)]
    out = io.StringIO()
    assert maui.CHECKJOB(["2[2]"], out=out) == 0 and out.getvalue().startswith("checking job 2[2]\n")
    assert maui.CHECKJOB(["3"], out=io.StringIO()) == 153
    assert "cannot locate job '3'" in capsys.readouterr().err
    assert stat("3")[0] == 153
    assert tracejob.TRACEJOB(["3"], out=io.StringIO()) == 153
    out = io.StringIO()
    assert tracejob.TRACEJOB(["2[3]"], out=out) == 0 and "Job: 2[3].headnode" in out.getvalue()
    out = io.StringIO()
    assert maui.SHOWSTART(["2[2]"], out=out) == 0 and out.getvalue().startswith("job 2[2] requires")
    assert submit() == "3.headnode"
    out = io.StringIO()
    assert tracejob.TRACEJOB(["3"], out=out) == 0 and "Job: 3.headnode" in out.getvalue()
    assert out.getvalue().count("enqueuing") == 1
