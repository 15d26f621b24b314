"""Cobalt's commands (flavor = "cobalt"): qsub, qstat, qdel, qhold, qrls, qalter and qmove
as Mira's users typed them, each a translation onto the one core."""
import io
import os

import pytest
import test_server
from test_server import cmd, wait_for

from hpcsched.core.jobs import DEP_HOLD, HELD, QUEUED
from hpcsched.pbs import cobalt, front
from hpcsched.pbs.errors import UsageError
from hpcsched.pbs.options import COBALT_QSUB, parse_long
from hpcsched.store.journaled import Batch
from hpcsched.store.site import load_site

NOW = 1_700_000_000.0
live = test_server.live  # (a running server's fixture)


@pytest.fixture
def site(rig, monkeypatch):
    """The test rig as a Cobalt site, qsub run from its work directory beside an executable
    script `job.sh`."""
    home = rig / "home"
    config = home / "config.toml"
    config.write_text(config.read_text().replace('flavor = "torque"', 'flavor = "cobalt"'))
    work = rig / "work"
    work.mkdir()
    script = work / "job.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o755)
    monkeypatch.chdir(work)
    return work


def run(prog, *argv, now=NOW):
    out = io.StringIO()
    status = getattr(cobalt, prog.upper())(list(argv), out=out, now=now)
    return status, out.getvalue()


def stored():
    batch = Batch(load_site())
    with batch.open(write=False):
        return batch.sched


# --- the command line -------------------------------------------------------------------

def test_the_options_read_as_optparse_reads_them():
    assert parse_long(["-n10", "--time=30", "--en", "A=1", "-q", "q", "-hI", "prog", "-n", "2"], COBALT_QSUB,
                      permute=False) == ([("nodecount", "10"), ("time", "30"), ("env", "A=1"), ("queue", "q"),
                                          ("held", ""), ("interactive", "")], ["prog", "-n", "2"])
    for argv, said in ((["-k"], "no such option: -k"), (["--nodes", "2"], "no such option: --nodes"),
                       (["--e", "x"], "ambiguous option: --e (--env, --error?)"),
                       (["-n"], "-n option requires an argument"),
                       (["--held=yes"], "--held option does not take a value")):
        with pytest.raises(UsageError, match=said.replace("?", r"\?").replace("(", r"\(").replace(")", r"\)")):
            parse_long(argv, COBALT_QSUB)


def test_the_front_door_reads_the_flavor_as_the_site_does(tmp_path, monkeypatch):
    """front.flavor (no TOML parser: the client's cost) against load_site, the reference."""
    monkeypatch.setenv("HPCSCHED_HOME", str(tmp_path))
    monkeypatch.delenv("HPCSCHED_FLAVOR", raising=False)
    from hpcsched.store.site import init_site
    init_site(tmp_path, nodes=1, cores=1)
    base = (tmp_path / "config.toml").read_text().replace('flavor = "torque"\n', "")
    for head, tail in (("", ""), ('flavor = "cobalt"\n', ""), ("flavor='openpbs' # ours\n", ""),
                       ('  flavor   =   "cobalt"\n', ""), ('# flavor = "openpbs"\n', '\n[queues.x]\nmax_nodes = 1\n'),
                       ('"flavor" = "cobalt"\n', "")):
        (tmp_path / "config.toml").write_text(head + base + tail)
        site = load_site(tmp_path)
        assert front.flavor() == ("cobalt" if site.cobalt else site.flavor), head + tail
    monkeypatch.setenv("HPCSCHED_FLAVOR", "openpbs")
    assert front.flavor() == load_site(tmp_path).flavor == "openpbs"


def test_a_cobalt_site_answers_the_seven_names_in_cobalts_form(site):
    assert front.flavor() == "cobalt"
    assert load_site().flavor == "torque" and load_site().cobalt  # (the other commands speak Torque)
    status, out = run("qsub", "-n", "1", "-t", "10", "job.sh")
    assert (status, out) == (0, "1\n")
    for prog in sorted(front.COBALT):
        assert front.COMMANDS[prog].split(":")[0] != "cobalt"  # (the PBS form on other sites)


# --- qsub -------------------------------------------------------------------------------

def test_qsub_translates_cobalts_options_onto_the_job(site):
    assert run("qsub", "-n", "2", "-t", "01:30:00", "-A", "proj", "-q", "batch", "--env", "A=1:B=x\\:y\\=z",
               "--env", "C=3", "-M", "me@example.org", "--jobname", "demo", "-u", "027", "job.sh", "a", "b c") \
        == (0, "1\n")
    job = stored().jobs[1]
    assert (job.request.nodes, job.walltime, job.account, job.queue, job.name) == (2, 5400.0, "proj", "batch", "demo")
    assert job.request.exclusive  # (Cobalt gives a job whole nodes)
    x = job.extra
    assert x["program"] == [str(site / "job.sh"), "a", "b c"]
    assert x["script"] == f"exec {site / 'job.sh'} a 'b c'\n"  # (the command runs as its script, read then)
    assert x["workdir"] == str(site)
    assert x["cobalt"] == {"nodes": 2, "procs": 2, "mode": "script", "env": {"A": "1", "B": "x:y=z", "C": "3"}}
    assert {k: x["variables"][k] for k in "ABC"} == {"A": "1", "B": "x:y=z", "C": "3"}
    assert (x["mail_users"], x["mail_points"], x["W"]["umask"]) == ("me@example.org", "be", "027")
    assert cobalt.streams(job) == (f"{site}/1.output", f"{site}/1.error")


def test_qsub_reads_cobalt_directives_and_the_command_line_wins(site):
    (site / "d.sh").write_text("#!/bin/sh\n#COBALT -t 50 -n 3\n#COBALT --jobname=dir -A p1\n\n#COBALT -n 9\ntrue\n")
    (site / "d.sh").chmod(0o755)
    assert run("qsub", "-A", "p2", "d.sh") == (0, "1\n")
    job = stored().jobs[1]
    assert (job.walltime, job.request.nodes, job.name, job.account) == (3000.0, 3, "dir", "p2")
    assert job.extra["cobalt"]["mode"] == "script"
    # no `#!` first: no directives
    (site / "n.sh").write_text("#COBALT -t 50 -n 3\ntrue\n")
    (site / "n.sh").chmod(0o755)
    assert run("qsub", "n.sh")[0] == 2  # (No required options provided)


def test_qsub_paths_prefix_input_and_jobid_expansion(site):
    (site / "in.txt").write_text("data\n")
    assert run("qsub", "-n", "1", "-t", "5", "-O", "run_$jobid", "-i", "in.txt", "--jobname", "j$jobid",
               "job.sh") == (0, "1\n")
    job = stored().jobs[1]
    assert job.name == "j1"
    assert cobalt.streams(job) == (f"{site}/run_1.output", f"{site}/run_1.error")
    assert job.extra["script"] == f"exec {site / 'job.sh'} < {site / 'in.txt'}\n"
    assert run("qsub", "-n", "1", "-t", "5", "-o", "/tmp/o.txt", "-O", "p", "job.sh") == (0, "2\n")
    assert cobalt.streams(stored().jobs[2]) == ("/tmp/o.txt", f"{site}/p.error")


def test_qsub_times_dependencies_and_holds(site):
    assert run("qsub", "-n", "1", "-t", "90", "job.sh")[1] == "1\n"
    assert run("qsub", "-n", "1", "-t", "1:00", "--dependencies", "1", "job.sh")[1] == "2\n"
    assert run("qsub", "-n", "1", "-t", "5", "-h", "job.sh")[1] == "3\n"
    sched = stored()
    assert sched.jobs[1].walltime == 5400.0 and sched.jobs[2].walltime == 60.0
    assert [(d.kind.value, d.job_id) for d in sched.jobs[2].dependencies] == [("afterok", 1)]
    assert [cobalt.state(sched.jobs[i]) for i in (1, 2, 3)] == ["queued", "dep_hold", "user_hold"]
    assert (sched.jobs[2].state, sched.jobs[3].state) == (DEP_HOLD, HELD)


def test_qsub_t0_is_the_queues_most(site, capsys):
    config = load_site().home / "config.toml"
    config.write_text(config.read_text() + '\n[queues.short]\nmax_walltime = "2:00:00"\n[queues.open]\n')
    assert run("qsub", "-n", "1", "-t", "0", "-q", "short", "job.sh")[0] == 0
    assert stored().jobs[1].walltime == 7200.0
    assert run("qsub", "-n", "1", "-t", "0", "-q", "open", "job.sh") == (1, "")
    assert "the queue sets none" in capsys.readouterr().err


@pytest.mark.parametrize("argv, status, said", [
    ((), 2, "No executable or script specified"),
    (("job.sh",), 2, "No required options provided"),
    (("-n", "1", "job.sh"), 1, "'time' not provided"),
    (("-t", "5", "job.sh"), 1, "'nodecount' not provided"),
    (("-n", "x", "-t", "5", "job.sh"), 1, "node count must be a positive integer"),
    (("-n", "99", "-t", "5", "job.sh"), 1, "node count out of realistic range (the machine has 4)"),
    (("-n", "1", "-t", "5m", "job.sh"), 1, "invalid time specification"),
    (("-n", "1", "-t", "5", "--mode", "c16", "job.sh"), 1, "Specified mode 'c16' not valid"),
    (("-n", "1", "-t", "5", "--env", "1A=2", "job.sh"), 1, "Improperly formatted argument to env"),
    (("-n", "1", "-t", "5", "--env", "A", "job.sh"), 1, "Improperly formatted argument to env"),
    (("-n", "1", "-t", "5", "--dependencies", "x", "job.sh"), 1, "jobid must be an integer: x"),
    (("-n", "1", "-t", "5", "--attrs", "location=node09", "job.sh"), 1, "location 'node09': "),
    (("-n", "1", "-t", "5", "--attrs", "location=", "job.sh"), 1, "location '': "),
    (("-n", "2", "-t", "5", "--attrs", "location=node01", "job.sh"), 1,
     "requests more than the nodes it may use have (2 nodes within node01)"),
    (("-n", "1", "-t", "5", "--attrs", "a=b=c", "job.sh"), 1, "Improperly formatted argument to attrs : a=b=c"),
    (("-n", "1", "-t", "5", "--geometry", "4x4x4x4x2", "job.sh"), 1, "Alternate location geometries are a Blue Gene's"),
    (("-n", "1", "-t", "5", "--run_users", ":", "job.sh"), 1, "--run_users needs a user"),
    (("-n", "1", "-t", "5", "--geometry", "1x1x1x1x1", "--attrs", "location=node01", "job.sh"), 1,
     "give a location or a geometry, not both"),
    (("-n", "1", "-t", "5", "missing.sh"), 1, "not found, or is not a file"),
    (("-n", "1", "-t", "5", "-i", "nothere", "job.sh"), 1, "file"),
    (("-n", "1", "-t", "5", "-q", "nosuch", "job.sh"), 1, "Unknown queue"),
    (("-k",), 2, "no such option: -k")])
def test_qsub_refuses_with_one_line(site, capsys, argv, status, said):
    assert run("qsub", *argv) == (status, "")
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err
    if status == 2:
        assert err.startswith("Usage: qsub [options] <executable> [<executable options>]\n\nqsub: error: ")
    else:
        assert err.count("\n") == 1
    assert not stored().jobs


def test_a_command_that_is_not_executable_is_refused(site, capsys):
    (site / "plain.sh").write_text("#!/bin/sh\n")
    assert run("qsub", "-n", "1", "-t", "5", "plain.sh") == (1, "")
    assert capsys.readouterr().err == f"command {site / 'plain.sh'} is not executable\n"


# --- qstat ------------------------------------------------------------------------------

def test_qstat_default_columns_exactly(site):
    run("qsub", "-n", "1", "-t", "5", "job.sh")
    run("qsub", "-n", "2", "-t", "90", "-h", "job.sh")
    assert run("qstat", now=NOW + 10) == (0, (
        "JobID  User   WallTime  Nodes  State      Location  \n"
        "====================================================\n"
        "1      alice  00:05:00  1      queued     None      \n"
        "2      alice  01:30:00  2      user_hold  None      \n"))
    # one that runs: its nodes and its times
    batch = Batch(load_site())
    with batch.open(write=True):
        batch.do("pass", NOW + 20)
    status, out = run("qstat", "-f", "--header", "ignored", now=NOW + 80)
    lines = out.splitlines()
    assert lines[0].split() == cobalt.FULL_HEADER
    first = lines[2].split()
    assert first[:7] == ["1", "job.sh", "alice", "00:05:00", "00:00:20", "00:01:00", "00:04:00"]
    assert first[7:12] == ["1", "running", "node01", "script", "1"]


def test_qstat_long_custom_headers_users_and_ids(site, monkeypatch):
    for _ in range(3):
        run("qsub", "-n", "1", "-t", "5", "job.sh")
    status, out = run("qstat", "-l", "--header=Jobid:State", "2", "3")
    assert (status, out) == (0, "JobID: 2\n    State : queued\n\nJobID: 3\n    State : queued\n\n")
    monkeypatch.setenv("QSTAT_HEADER", "JobID:Queue")
    assert run("qstat", "1")[1] == "JobID  Queue  \n==============\n1      batch  \n"
    assert run("qstat", "--sort", "JobID", "--reverse")[1].splitlines()[2:] == ["3      batch  ", "2      batch  ",
                                                                                "1      batch  "]
    assert run("qstat", "batch")[1].count("batch") == 3  # a queue's name: its jobs
    assert run("qstat", "-u", "bob") == (0, "JobID  Queue  \n==============\n")
    assert run("qstat", "7") == (1, "")  # none of those asked: nothing, and 1 (PSI/J reads it so)
    assert run("qstat", "--header", "Nosuch")[0] == 1
    status, out = run("qstat", "-fl", "1")
    assert out.splitlines()[0] == "JobID: 1" and "    Est_Start_Time    : " in out
    assert len(out.splitlines()) == len(cobalt.LONG_HEADER) + 1


def test_qstat_queues(site):
    status, out = run("qstat", "-Q")
    assert out.splitlines()[0].split() == cobalt.QUEUE_HEADER
    assert out.splitlines()[2].split() == ["batch", "*", "*", "None", "24:00:00", "None", "None", "None", "None",
                                           "None", "running"]
    assert run("qstat", "-Q", "nosuch") == (1, "")


# --- qdel, qhold, qrls, qmove, qalter ----------------------------------------------------

def test_qdel_lists_what_it_deleted(site, capsys):
    run("qsub", "-n", "1", "-t", "5", "job.sh")
    run("qsub", "-n", "1", "-t", "5", "job.sh")
    assert run("qdel", "1", "2", "9") == (1, "      Deleted Jobs\nJobID  User   \n==============\n1      alice  \n"
                                              "2      alice  \n")
    assert capsys.readouterr().err == "   Failed to delete jobs: \n      job 9 not found\n"
    assert run("qdel", "x") == (1, "")
    assert "jobid must be an integer: x" in capsys.readouterr().err
    assert run("qdel")[0] == 2


def test_qhold_and_qrls_say_how_each_job_went(site):
    run("qsub", "-n", "1", "-t", "5", "job.sh")
    run("qsub", "-n", "1", "-t", "5", "-h", "job.sh")
    assert run("qhold", "1", "2", "7") == (0, "   Failed to place user hold on jobs: \n"
                                              "      job 2 already in state 'user hold'\n      job 7 not found\n"
                                              "Placed user hold on jobs: \n      1\n")
    assert stored().jobs[1].state == HELD
    assert run("qrls", "1", "2") == (0, "   Removed user hold on jobs: \n      1\n      2\n")
    assert run("qrls", "1") == (1, "   Failed to remove user hold on jobs: \n      job 1 does not have a 'user hold'\n")
    run("qsub", "-n", "1", "-t", "5", "--dependencies", "1", "job.sh")
    assert run("qrls", "--dependencies", "3") == (0, "   Removed dependencies from jobs: \n      3\n")
    assert stored().jobs[3].state == QUEUED and not stored().jobs[3].dependencies


def test_qalter_and_qmove(site, capsys):
    config = load_site().home / "config.toml"
    config.write_text(config.read_text() + '\n[queues.other]\n')
    run("qsub", "-n", "1", "-t", "30", "job.sh")
    status, out = run("qalter", "-t", "+15", "-A", "newproj", "-n", "2", "1")
    assert status == 0
    assert out == "walltime set to: 00:45:00 for job 1\nproject set to: newproj for job 1\n" \
                  "nodecount changed for job 1\n"
    job = stored().jobs[1]
    assert (job.walltime, job.account, job.request.nodes, job.extra["cobalt"]["nodes"]) == (2700.0, "newproj", 2, 2)
    assert run("qalter", "-t", "-50", "1")[0] == 1
    assert "must stay positive" in capsys.readouterr().err
    assert run("qalter", "1")[0] == 2  # nothing to change
    assert run("qmove", "other", "1") == (0, "moved job 1 to queue 'other'\n")
    assert stored().jobs[1].queue == "other"
    assert run("qmove", "nosuch", "1")[0] == 1
    assert "queue 'nosuch' not found" in capsys.readouterr().err
    import os as _os
    _os.environ["HPCSCHED_USER"] = "bob"
    try:
        assert run("qalter", "-t", "10", "1")[0] == 1
        assert run("qdel", "1")[0] == 1
    finally:
        _os.environ["HPCSCHED_USER"] = "alice"
    assert stored().jobs[1].walltime == 2700.0


@pytest.fixture
def mira(rig, monkeypatch):
    """The test rig as Mira (examples/mira.toml), qsub run beside an executable `a.out`."""
    home = rig / "home"
    examples = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")
    text = open(os.path.join(examples, "mira.toml")).read()
    (home / "config.toml").write_text('flavor = "cobalt"\nserver_name = "headnode"\nmanagers = ["root"]\n' + text)
    work = rig / "work"
    work.mkdir()
    (work / "a.out").write_text("#!/bin/sh\n")
    (work / "a.out").chmod(0o755)
    monkeypatch.chdir(work)
    return work


def test_a_blue_gene_takes_its_modes_and_shows_its_block(mira):
    assert run("qsub", "-n", "512", "-t", "30", "--mode", "c16", "a.out") == (0, "1\n")
    assert run("qsub", "-n", "8192", "-t", "30", "a.out") == (0, "2\n")
    sched = stored()
    assert sched.jobs[1].extra["cobalt"] == {"nodes": 512, "procs": 8192, "mode": "c16", "env": {}}
    assert sched.jobs[2].extra["cobalt"]["mode"] == "c1" and sched.jobs[2].queue == "prod-capability"
    batch = Batch(load_site())
    with batch.open(write=True):
        batch.do("pass", NOW)
    job = stored().jobs[1]
    env = cobalt.environment(job, stored().topology, "/x")
    assert env["COBALT_PARTNAME"] == job.nodes[0] and env["COBALT_PARTSIZE"] == "512"
    assert run("qstat", "1")[1].splitlines()[2].split()[-1] == job.nodes[0]


def test_attrs_location_keeps_a_job_to_the_nodes_it_names(site):
    """Cobalt's `--attrs location=...`: the job runs there alone; the other attributes are
    kept and shown (qstat -f's attrs), and choose nothing."""
    assert run("qsub", "-n", "1", "-t", "5", "--attrs", "location=node03:ssds:no_debug", "job.sh") == (0, "1\n")
    assert run("qsub", "-n", "2", "-t", "5", "--attrs", "location=node[02-04]", "job.sh") == (0, "2\n")
    job = stored().jobs[1]
    assert job.request.within == ("node03",) and stored().jobs[2].request.within == ("node02", "node03", "node04")
    assert job.extra["cobalt"]["attrs"] == {"location": "node03", "ssds": "true", "debug": "false"}
    batch = Batch(load_site())
    with batch.open(write=True):
        batch.do("pass", NOW)
    assert stored().jobs[1].nodes == ("node03",) and stored().jobs[2].nodes == ("node02", "node04")
    long = dict(line.split(": ", 1) for line in run("qstat", "-lf", "1")[1].splitlines() if ": " in line)
    assert {k.strip(): v for k, v in long.items()}["attrs"] == "{'location': 'node03', 'ssds': 'true', 'debug': 'false'}"


def test_geometry_keeps_a_job_to_the_blocks_of_that_shape(mira, capsys):
    """Cobalt's --geometry AxBxCxDxE, nodes along each dimension: Mira's 1024-node blocks
    are 8x4x4x4x2, 4x8x4x4x2, 4x4x8x4x2 or 4x4x4x8x2; the job runs on one of its shape."""
    assert run("qsub", "-n", "1024", "-t", "30", "--geometry", "4x4x4x8x2", "a.out") == (0, "1\n")
    assert run("qsub", "-n", "1024", "-t", "30", "--geometry", "4x4x8x4x2", "a.out") == (0, "2\n")
    assert run("qalter", "--geometry", "8x4x4x4x2", "2") == (0, "geometry changed for job 2\n")
    batch = Batch(load_site())
    with batch.open(write=True):
        batch.do("pass", NOW)
    sched = stored()
    shapes = {j: sched.topology.geometry(sched.topology.block(sched.jobs[j].nodes[0])) for j in (1, 2)}
    assert shapes == {1: (4, 4, 4, 8, 2), 2: (8, 4, 4, 4, 2)}
    long = dict(line.split(": ", 1) for line in run("qstat", "-lf", "1")[1].splitlines() if ": " in line)
    assert {k.strip(): v for k, v in long.items()}["Geometry"] == "4x4x4x8x2"
    for argv, said in ((("-n", "1024", "--geometry", "4x4x4x8"), "Invalid geometry entered: 4x4x4x8"),
                       (("-n", "512", "--geometry", "4x4x4x8x2"), "Geometry requires more nodes than specified"),
                       (("-n", "1024", "--geometry", "4x4x4x4x2"), "holds 512 nodes, fewer than the job's 1024"),
                       (("-n", "1536", "--geometry", "4x4x4x12x2"), "Block Geometry 4x4x4x12x2 is not an available")):
        capsys.readouterr()
        assert run("qsub", *argv, "-t", "30", "a.out") == (1, "")
        assert said in capsys.readouterr().err


def test_run_users_may_act_on_the_job_as_its_owner(site, monkeypatch, capsys):
    """Cobalt's --run_users: they hold, release, alter and delete it as its owner may; it
    still runs as its owner; qstat shows them as User_List."""
    assert run("qsub", "-n", "1", "-t", "5", "--run_users", "bob:carol", "job.sh") == (0, "1\n")
    assert run("qsub", "-n", "1", "-t", "5", "job.sh") == (0, "2\n")
    assert stored().jobs[1].extra["cobalt"]["run_users"] == ["alice", "bob", "carol"]
    monkeypatch.setenv("HPCSCHED_USER", "bob")
    assert run("qhold", "1")[0] == 0 and run("qalter", "-t", "10", "1")[0] == 0
    assert run("qhold", "2")[0] == 1  # (not his)
    assert stored().jobs[1].walltime == 600 and stored().jobs[1].owner == "alice"
    long = dict(line.split(": ", 1) for line in run("qstat", "-lf", "1")[1].splitlines() if ": " in line)
    assert {k.strip(): v for k, v in long.items()}["user_list"] == "alice:bob:carol"
    monkeypatch.setenv("HPCSCHED_USER", "dave")
    assert run("qdel", "1")[0] == 1
    monkeypatch.setenv("HPCSCHED_USER", "bob")
    assert run("qalter", "--run_users", "bob", "1") == (0, "run_users changed for job 1\n")  # (carol's gone)
    monkeypatch.setenv("HPCSCHED_USER", "carol")
    assert run("qrls", "1")[0] == 1
    monkeypatch.setenv("HPCSCHED_USER", "bob")
    assert run("qrls", "1")[0] == 0 and run("qdel", "1")[0] == 0
    assert stored().jobs[1].state.value == "deleted"


def test_run_project_lets_the_projects_users_act_on_the_job(site, rig, monkeypatch, capsys):
    """Cobalt's --run_project: the users of the job's project (its allocation's users)."""
    config = rig / "home" / "config.toml"
    config.write_text(config.read_text() + '[allocations]\non_exhausted = "run"\n[allocations.projects.chem]\namount = 1000\n'
                      'users = ["alice", "bob"]\n[allocations.projects.solo]\namount = 10\n')
    assert run("qsub", "-n", "1", "-t", "5", "-A", "chem", "--run_project", "-h", "job.sh") == (0, "1\n")
    assert stored().jobs[1].extra["cobalt"]["run_users"] == ["alice", "bob"]
    for argv, said in ((("-A", "solo"), "project solo lists no users"), ((), "--run_project needs a project")):
        assert run("qsub", "-n", "1", "-t", "5", *argv, "--run_project", "job.sh") == (1, "")
        assert said in capsys.readouterr().err
    monkeypatch.setenv("HPCSCHED_USER", "bob")
    assert run("qrls", "1")[0] == 0


def test_qalter_attrs_replaces_them_and_a_new_node_count_keeps_the_location(site, capsys):
    assert run("qsub", "-n", "1", "-t", "5", "--attrs", "location=node01:ssds", "job.sh") == (0, "1\n")
    assert run("qalter", "-n", "2", "1")[0] == 1  # (node01 alone cannot hold two)
    assert "requests more than the nodes it may use have (2 nodes within node01)" in capsys.readouterr().err
    assert run("qalter", "-n", "2", "--attrs", "location=node[02-03]", "1") == (0, "nodecount, attrs changed for job 1\n")
    job = stored().jobs[1]
    assert job.request.nodes == 2 and job.request.within == ("node02", "node03")
    assert job.extra["cobalt"]["attrs"] == {"location": "node[02-03]"}  # (ssds went: the new ones replace them)
    assert run("qalter", "-t", "10", "1")[0] == 0 and stored().jobs[1].request.within == ("node02", "node03")
    assert run("qalter", "--attrs", "", "1")[0] == 0
    job = stored().jobs[1]
    assert job.request.within == () and "attrs" not in job.extra["cobalt"]


def test_attrs_location_names_a_block_on_a_blue_gene_or_nids_on_a_cray(mira, rig, monkeypatch):
    last = [b.name for b in stored().topology.blocks if b.size == 512][-1]
    assert run("qsub", "-n", "512", "-t", "30", "--attrs", f"location={last}", "a.out") == (0, "1\n")
    batch = Batch(load_site())
    with batch.open(write=True):
        batch.do("pass", NOW)
    assert stored().jobs[1].nodes == (last,)  # (not the first free block of 512: the one named)
    assert run("qsub", "-n", "512", "-t", "30", "--attrs", "location=MIR-nosuch", "a.out")[0] == 1
    from hpcsched.store.site import init_site
    home = rig / "cray"  # (a site of its own: the store's jobs name their machine's places)
    init_site(home, nodes=1, cores=1)
    monkeypatch.setenv("HPCSCHED_HOME", str(home))
    (home / "config.toml").write_text('flavor = "cobalt"\nserver_name = "headnode"\n[machine]\nkind = "cray"\n'
                                      'torus = [2, 2, 2]\nper_router = 1\nnodes = [{count = 8, cores = 4}]\n')
    batch = Batch(load_site())
    assert run("qsub", "-n", "2", "-t", "30", "--attrs", "location=5-6", "a.out") == (0, "1\n")
    assert run("qsub", "-n", "1", "-t", "30", "--attrs", "location=7..7", "a.out") == (0, "2\n")
    assert run("qsub", "-n", "1", "-t", "30", "--attrs", "location=6-9", "a.out")[0] == 1  # (no nid 8 or 9)
    with batch.open(write=True):
        batch.do("pass", NOW)
    assert stored().jobs[1].nodes == ("nid00005", "nid00006") and stored().jobs[2].nodes == ("nid00007",)
    assert run("qstat", "1")[1].splitlines()[2].split()[-1] == "5..6"


# --- a live server ------------------------------------------------------------------------

def test_a_cobalt_job_runs_its_command_with_cobalts_environment(live):
    env, home, work, start = live
    config = home / "config.toml"
    config.write_text(config.read_text().replace('flavor = "torque"', 'flavor = "cobalt"'))
    start()
    script = work / "job.sh"
    script.write_text("#!/bin/sh\n#COBALT -t 5 -n 1\necho \"$1 $COBALT_JOBID $COBALT_PARTNAME $COBALT_JOBSIZE "
                      "$FOO $(cat $COBALT_NODEFILE) $PWD\"\ncat\nsleep 1\n")  # (still there for qstat)
    script.chmod(0o755)
    (work / "in.txt").write_text("from stdin\n")
    done = cmd(env, work, "qsub", "--env", "FOO=bar_$jobid", "-i", "in.txt", "job.sh", "arg")
    assert (done.returncode, done.stderr) == (0, "")
    jid = done.stdout.strip()
    assert jid == "1"
    assert cmd(env, work, "qstat", jid).stdout.splitlines()[0].split() == cobalt.DEFAULT_HEADER
    wait_for(env, work, jid)
    assert (work / "1.output").read_text() == f"arg 1 node01 1 bar_1 node01 {work}\nfrom stdin\n"
    assert (work / "1.error").read_text() == ""
    assert cmd(env, work, "qstat", jid).returncode == 1  # (done: gone from Cobalt's qstat)


def test_psij_and_parsl_drive_a_cobalt_site_as_they_drive_alcfs(live):
    """PSI/J's Cobalt executor writes `#COBALT --long=value` lines and reads ids of four
    digits or more (`qmgr ... next_job_number` gives them) from `qsub` and from `qstat -l
    --header=Jobid:State`; Parsl's CobaltProvider runs `qsub -n -q -t -A script` and reads
    `qstat -u USER`'s fifth column."""
    import re
    env, home, work, start = live
    config = home / "config.toml"
    config.write_text(config.read_text().replace('flavor = "torque"', 'flavor = "cobalt"'))
    root = dict(env, HPCSCHED_USER="root")
    assert cmd(root, work, "qmgr", "-c", "set server next_job_number = 4000").returncode == 0
    start()
    psij = work / "psij.sh"
    psij.write_text(f"#!/bin/bash\n#COBALT --jobname=psij\n#COBALT --cwd={work}\n#COBALT --nodecount=1\n"
                    "#COBALT --proccount=1\n#COBALT --time=00:10:00\n#COBALT --queue=batch\n#COBALT --project=p\n"
                    "#COBALT --env GREETING=hello\n#COBALT -e /dev/null\n#COBALT -o /dev/null\n\n"
                    f"exec &>> \"{work}/$COBALT_JOBID.out\"\necho $GREETING\nsleep 1\n")
    psij.chmod(0o755)
    done = cmd(env, work, "qsub", str(psij))
    jid = re.search(r"\b[0-9]{4,}\b", done.stdout).group(0)
    assert jid == "4000"
    out = cmd(env, work, "qstat", "-l", "--header=Jobid:State", jid).stdout
    assert re.search(r"(Jobid\s*:\s*)([0-9]{4,})", out, re.I).group(2) == jid
    assert re.search(r"(State\s*:\s*)(\w+)", out, re.I).group(2) in ("queued", "starting", "running", "exiting")
    parsl = work / "parsl.submit"
    parsl.write_text("#!/bin/bash\necho parsl\n")
    parsl.chmod(0o755)
    done = cmd(env, work, "qsub", "-n", "1", "-q", "batch", "-t", "10", "-A", "acct", str(parsl))
    assert done.returncode == 0 and done.stdout.strip() == "4001"
    rows = [line.upper().split() for line in cmd(env, work, "qstat", "-u", "alice").stdout.splitlines()
            if not line.startswith("=")]
    assert rows[0][0] == "JOBID" and {r[0] for r in rows[1:]} <= {"4000", "4001"}
    assert all(r[4] in ("QUEUED", "STARTING", "RUNNING", "EXITING", "KILLING") for r in rows[1:])
    assert cmd(env, work, "cqwait", "4000", "4001").returncode == 0  # (as an ALCF script waits)
    assert (work / "4000.out").read_text() == "hello\n"
    assert (work / "4001.output").read_text() == "parsl\n"
    assert cmd(env, work, "qstat", "4000").returncode == 1  # (gone: PSI/J reads 1 as finished)


def test_cqwait_waits_for_the_start_and_the_end_through_the_server(live):
    """cqwait is Cobalt's on every site: here a Torque site's server, watched from the
    caller's own process (the server goes on answering meanwhile)."""
    import time
    env, home, work, start = live
    start()
    first = cmd(env, work, "qsub", "-l", "walltime=60", stdin="sleep 2\n").stdout.strip()
    held = cmd(env, work, "qsub", "-h", "-l", "walltime=60", stdin="true\n").stdout.strip()
    n, m = first.split(".")[0], held.split(".")[0]
    t = time.time()
    assert cmd(env, work, "cqwait", "--start", n).returncode == 0
    assert test_server.state(env, work, first)["job_state"] in "RC"
    assert cmd(env, work, "cqwait", first).returncode == 0  # (123.server names job 123 too)
    assert test_server.state(env, work, first)["job_state"] == "C" and time.time() - t >= 2
    assert cmd(env, work, "cqwait", "-r", "999").returncode == 0  # never known: nothing to wait for
    waiting = test_server.subprocess.Popen([os.path.join(test_server.BIN, "cqwait"), "*"], env=env, cwd=work)
    time.sleep(1.5)
    assert waiting.poll() is None  # (the held job is not done)
    assert cmd(env, work, "qrls", m).returncode == 0
    assert waiting.wait(20) == 0 and test_server.state(env, work, held)["job_state"] == "C"


def test_cqwait_reads_the_store_without_a_server_and_refuses_bad_ids(site, capsys):
    assert run("qsub", "-n", "1", "-t", "5", "job.sh")[0] == 0
    batch = Batch(load_site())
    with batch.open() as b:
        b.do("delete", NOW, id=1)
    assert run("cqwait", "1")[0] == 0  # (finished: nothing to wait for, read here)
    assert run("cqwait", "x")[0] == 1 and capsys.readouterr().err == "jobid must be an integer: x\n"
    assert run("cqwait")[0] == 2 and "No Jobid(s) given" in capsys.readouterr().err
    assert run("cqwait", "-v") == (0, f'version: "cqwait " + hpcsched {cobalt.common.VERSION}\n')


def test_a_cobalt_interactive_session_waits_for_its_held_job(live):
    """The waiting qsub -I looks through qselect (PBS's form on every site): a Cobalt
    site's qstat reads no `-x -f -F json`, and the session gave its job up as deleted
    after two seconds, leaving it to start with no one there."""
    import time
    env, home, work, start = live
    config = home / "config.toml"
    config.write_text(config.read_text().replace('flavor = "torque"', 'flavor = "cobalt"'))
    start()
    p = test_server.interactive(env, work, "-n", "1", "-t", "5", "-h")
    jid = p.stdout.readline().strip()
    assert p.stdout.readline() == f"qsub: waiting for job {jid} to start\n"
    time.sleep(3)  # (past the client's two seconds between looks)
    assert p.poll() is None
    assert cmd(env, work, "qrls", jid).returncode == 0
    out, err = p.communicate("echo in-session $COBALT_JOBID\nexit 0\n", timeout=30)
    assert p.returncode == 0 and f"in-session {jid}" in out, out + err


def test_the_score_counts_the_nodes_a_job_asks_for_not_its_block():
    """On Mira a 4,097-node job holds an 8,192-node block (and is charged for it), but its
    utility grows with its own 4,097 nodes, as the paper's formula has it."""
    from hpcsched import Job, Request, build
    s = build({"machine": "mira", "priority": {"policy": "cobalt"}, "queues": {"batch": {}}})
    s.submit(Job(id=0, request=Request(nodes=49152), walltime=3600.0), now=0)
    s.iterate(0)
    odd = s.submit(Job(request=Request(nodes=4097), walltime=3600.0), now=0)
    even = s.submit(Job(request=Request(nodes=8192), walltime=3600.0), now=0)
    s.iterate(3600.0)
    assert s.size(odd) == 8192 and odd.score == pytest.approx(even.score * 4097 / 8192)


def test_a_cobalt_site_holds_a_job_whose_dependency_failed_until_its_dependencies_are_released(site):
    """Cobalt's dep_fail, not Torque's deletion: the job waits for `qrls --dependencies`."""
    from hpcsched.core.jobs import DEP_FAIL
    run("qsub", "-n", "1", "-t", "5", "job.sh")
    run("qsub", "-n", "1", "-t", "5", "--dependencies", "1", "job.sh")
    batch = Batch(load_site())
    with batch.open(write=True):
        batch.do("pass", NOW)
        batch.do("ended", NOW + 60, id=1, exit_status=1)
    assert stored().jobs[2].state == DEP_FAIL
    assert run("qrls", "--dependencies", "2") == (0, "   Removed dependencies from jobs: \n      2\n")
    assert stored().jobs[2].state == QUEUED
