"""pbsnodes, qmgr and tracejob in both flavors: golden listings, changes, permissions."""
import io
import json
import re
import time

import pytest

from hpcsched.pbs import pbsnodes, qctl, qmgr, qsub, tracejob


def submit(*argv):
    return qsub.submit(list(argv), stdin=io.StringIO("true\n"), cwd="/tmp", env={"HOME": "/h"})[0]


def run(command, *argv, stdin=None, monkeypatch=None):
    out = io.StringIO()
    if stdin is not None:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    status = command(list(argv), out=out, now=time.time())
    return status, out.getvalue()


def _running(rig):
    from hpcsched.store.journaled import Batch
    from hpcsched.store.site import load_site
    jid = submit("-l", "nodes=1:ppn=4")
    with Batch.of(load_site()).open() as batch:
        batch.do("pass")
    return jid


def test_pbsnodes_torque_golden(rig, monkeypatch):
    jid = _running(rig)
    monkeypatch.setenv("HPCSCHED_USER", "olga")
    assert run(pbsnodes.PBSNODES, "-o", "-N", "disk check", "node02")[0] == 0
    status, out = run(pbsnodes.PBSNODES, "node01", "node02")
    assert status == 0 and out == (
        "node01\n     state = job-exclusive\n     power_state = Running\n     np = 4\n     properties = \n"
        f"     ntype = cluster\n     jobs = 0/{jid},1/{jid},2/{jid},3/{jid}\n\n"
        "node02\n     state = offline\n     power_state = Running\n     np = 4\n     properties = \n"
        "     ntype = cluster\n     note = disk check\n\n")
    assert run(pbsnodes.PBSNODES, "-l")[1] == "node02               offline          disk check\n"
    xml = run(pbsnodes.PBSNODES, "-x", "node02")[1]
    assert xml == ("<Data><Node><name>node02</name><state>offline</state><power_state>Running</power_state>"
                   "<np>4</np><properties></properties><ntype>cluster</ntype><note>disk check</note></Node></Data>\n")
    assert run(pbsnodes.PBSNODES, "-c", "node02")[0] == 0
    assert run(pbsnodes.PBSNODES, "-l")[1] == ""


def test_pbsnodes_openpbs_json_and_text(rig, monkeypatch):
    monkeypatch.setenv("HPCSCHED_FLAVOR", "openpbs")
    jid = _running(rig)
    doc = json.loads(run(pbsnodes.PBSNODES, "-F", "json")[1])
    node = doc["nodes"]["node01"]
    assert node["state"] == "job-busy" and node["pcpus"] == 4 and node["jobs"][0] == f"{jid}/0"
    assert node["resources_available"]["ncpus"] == 4 and node["resources_assigned"]["ncpus"] == 4
    assert doc["nodes"]["node02"]["state"] == "free"
    text = run(pbsnodes.PBSNODES, "-av", "node02")[1]
    assert text.startswith("node02\n     Mom = node02\n     ntype = PBS\n     state = free\n     pcpus = 4\n")
    assert "     resources_available.ncpus = 4\n" in text


def test_pbsnodes_refusals(rig, capsys):
    assert run(pbsnodes.PBSNODES, "-o", "node02")[0] == 159  # alice is no operator
    assert run(pbsnodes.PBSNODES, "nosuch")[0] == 1
    assert "pbsnodes: Unknown node  MSG=cannot locate specified node" in capsys.readouterr().err
    assert run(pbsnodes.PBSNODES, "-o")[0] == 2  # no node named
    capsys.readouterr()
    assert run(pbsnodes.PBSNODES, "-q", "nosuch")[0] == 1 and capsys.readouterr().err == ""


def test_qmgr_changes_go_to_the_overlay_and_take_effect(rig, monkeypatch):
    from hpcsched.store.site import load_site
    monkeypatch.setenv("HPCSCHED_USER", "root")
    assert run(qmgr.QMGR, "-c", "create queue short resources_max.walltime = 1:00:00, max_user_run = 2")[0] == 0
    assert run(qmgr.QMGR, "-c", "s q batch max_running=10; set server scheduling = False")[0] == 0
    assert run(qmgr.QMGR, "-c", "set server managers += bob@*")[0] == 0
    site = load_site()
    sched = site.scheduler()
    assert sched.router.queues["short"].max_walltime == 3600 and sched.router.queues["short"].max_running_per_user == 2
    assert sched.router.queues["batch"].max_running == 10 and site.config["scheduling"] is False
    assert site.is_manager("bob")
    assert "Job exceeds queue resource limits" in _refusal("-q", "short", "-l", "walltime=2:00:00")
    assert run(qmgr.QMGR, "-c", "unset queue batch max_running")[0] == 0
    assert load_site().scheduler().router.queues["batch"].max_running is None
    assert run(qmgr.QMGR, "-c", "delete queue short")[0] == 0
    assert "short" not in load_site().scheduler().router.queues


def test_qmgr_takes_openpbs_limits_for_the_queue_and_each_user(rig, monkeypatch, capsys):
    """OpenPBS's `max_run`, `max_queued` and `max_run_res.nodect` as `[o:PBS_ALL=N]` (the
    queue's) and `[u:PBS_GENERIC=N]` (each user's); an OpenPBS site lists them so."""
    from hpcsched.store.site import load_site
    config = rig / "home" / "config.toml"
    monkeypatch.setenv("HPCSCHED_USER", "root")
    assert run(qmgr.QMGR, "-c", 'set queue batch max_run = "[o:PBS_ALL=4],[u:PBS_GENERIC=2]"')[0] == 0
    assert run(qmgr.QMGR, "-c", "set queue batch max_run_res.nodect = [u:PBS_GENERIC=3]")[0] == 0
    assert run(qmgr.QMGR, "-c", "set queue batch max_queued += [o:PBS_ALL=9]")[0] == 0
    q = load_site().scheduler().router.queues["batch"]
    assert (q.max_running, q.max_running_per_user, q.max_running_nodes, q.max_running_nodes_per_user,
            q.max_queued, q.max_queued_per_user) == (4, 2, None, 3, 9, None)
    listed = run(qmgr.QMGR, "-c", "list queue batch")[1]  # (Torque's names on a Torque site)
    assert "\tmax_running = 4\n\tmax_user_run = 2\n" in listed and "max_run_res.nodect = [u:PBS_GENERIC=3]" in listed
    config.write_text(config.read_text().replace('flavor = "torque"', 'flavor = "openpbs"'))
    listed = run(qmgr.QMGR, "-c", "list queue batch")[1]
    assert "\tmax_run = [o:PBS_ALL=4],[u:PBS_GENERIC=2]\n" in listed and "max_user_run" not in listed
    assert "\tmax_queued = [o:PBS_ALL=9]\n" in listed
    assert run(qmgr.QMGR, "-c", "set queue batch max_run = [u:PBS_GENERIC=1]")[0] == 0  # (= replaces it all)
    q = load_site().scheduler().router.queues["batch"]
    assert (q.max_running, q.max_running_per_user) == (None, 1)
    assert run(qmgr.QMGR, "-c", "unset queue batch max_run_res.nodect")[0] == 0
    assert load_site().scheduler().router.queues["batch"].max_running_nodes_per_user is None
    capsys.readouterr()
    for bad in ("[u:alice=2]", "[o:PBS_ALL=x]", "[o:PBS_ALL=2] junk", "4"):
        assert run(qmgr.QMGR, "-c", f"set queue batch max_run = {bad}")[0] == 2
        assert "Illegal attribute or resource value max_run" in capsys.readouterr().err


def _refusal(*argv):
    from hpcsched.pbs.common import CommandError
    with pytest.raises(CommandError) as e:
        submit(*argv)
    return str(e.value)


def test_qmgr_print_server_golden_and_reapplies(rig, monkeypatch, tmp_path):
    monkeypatch.setenv("HPCSCHED_USER", "root")
    run(qmgr.QMGR, "-c", "create queue short resources_max.walltime=1:00:00,max_user_run=2,Priority=5")
    printed = run(qmgr.QMGR, "-c", "print server")[1]
    assert printed == (
        "#\n# Create queues and set their attributes.\n#\n"
        "#\n# Create and define queue batch\n#\ncreate queue batch\n"
        "set queue batch queue_type = Execution\nset queue batch resources_max.walltime = 24:00:00\n"
        "set queue batch enabled = True\nset queue batch started = True\n"
        "#\n# Create and define queue short\n#\ncreate queue short\n"
        "set queue short queue_type = Execution\nset queue short max_user_run = 2\n"
        "set queue short resources_max.walltime = 01:00:00\nset queue short Priority = 5\n"
        "set queue short enabled = True\nset queue short started = True\n"
        "#\n# Set server attributes.\n#\n"
        "set server scheduling = True\nset server default_queue = batch\nset server managers = root@*\n"
        "set server operators = olga@*\nset server keep_completed = 300\nset server scheduler_iteration = 15\n"
        "set server query_other_jobs = True\nset server resv_enable = True\n")
    # a fresh site given the printout becomes the same site (its batch queue exists already:
    # that one line is refused, as by PBS, and the rest applies)
    from hpcsched.store.site import init_site
    other = tmp_path / "other"
    init_site(other, nodes=4, cores=4)
    text = (other / "config.toml").read_text().replace('managers = ["', 'managers = ["root", "')
    (other / "config.toml").write_text(text)
    monkeypatch.setenv("HPCSCHED_HOME", str(other))
    status, _ = run(qmgr.QMGR, stdin=printed, monkeypatch=monkeypatch)
    assert status == 161  # Queue already exists (batch)
    again = run(qmgr.QMGR, "-c", "print server")[1]
    assert again == printed


@pytest.mark.parametrize("line,status,message", [
    ("frob server", 2, "qmgr: Illegal operation: frob"), ("set queue nosuch max_running=1", 170, "Unknown queue"),
    ("set queue batch bogus = 1", 154, "Unknown Attribute"), ("set queue batch max_running = x", 2, "Illegal attribute"),
    ("set server default_queue = nosuch", 2, "default_queue"), ("set queue batch", 2, "Syntax error"),
    ("create queue batch", 161, "Queue already exists")])
def test_qmgr_bad_lines_write_nothing(rig, monkeypatch, capsys, line, status, message):
    monkeypatch.setenv("HPCSCHED_USER", "root")
    assert run(qmgr.QMGR, "-c", line)[0] == status
    assert message in capsys.readouterr().err
    assert not (rig / "home" / "qmgr.json").exists()


def test_qmgr_needs_a_manager_to_change_but_not_to_list(rig, capsys):
    assert run(qmgr.QMGR, "-c", "set queue batch max_running = 1")[0] == 159
    assert "Unauthorized Request" in capsys.readouterr().err
    status, out = run(qmgr.QMGR, "-c", "list queue batch")
    assert status == 0 and out.startswith("Queue batch\n\tqueue_type = Execution\n\ttotal_jobs = 0\n")
    assert not (rig / "home" / "qmgr.json").exists()


def test_qmgr_sets_node_state(rig, monkeypatch):
    monkeypatch.setenv("HPCSCHED_USER", "root")
    assert run(qmgr.QMGR, "-c", "set node node03 state = offline")[0] == 0
    assert "node03               offline" in run(pbsnodes.PBSNODES, "-l")[1]
    assert "Node node03\n\tstate = offline\n" in run(qmgr.QMGR, "-c", "list node node03")[1]


@pytest.mark.parametrize("flavor", ["torque", "openpbs"])
def test_tracejob_tells_the_story(rig, monkeypatch, flavor):
    monkeypatch.setenv("HPCSCHED_FLAVOR", flavor)
    jid = submit("-N", "story")
    assert qctl.QHOLD([jid]) == 0 and qctl.QRLS([jid]) == 0 and qctl.QDEL([jid]) == 0
    status, out = run(tracejob.TRACEJOB, jid)
    assert status == 0
    lines = out.splitlines()[3:]
    assert all(re.fullmatch(r"\d\d/\d\d/\d{4} \d\d:\d\d:\d\d  [SA]    \S.*", line) for line in lines), lines
    body = [line[21:] for line in lines]
    # (each log's lines in its own order; within one second the server's come first)
    assert [b for b in body if b[0] == "S"] == [
        "S    enqueuing into the default queue, state 1 hop 1", "S    Holds u set", "S    Holds u released",
        "S    Job deleted at request of its owner or an operator"]
    a = [b for b in body if b[0] == "A"]
    assert a[0] == "A    queue=batch" and a[1].startswith("A    user=alice group=alice jobname=story queue=batch")
    assert body.index(a[1]) == len(body) - 1
    assert out.startswith(f"\nJob: {jid}\n\n")
    assert run(tracejob.TRACEJOB, "99")[0] == 153
    assert run(tracejob.TRACEJOB, "-n", "x", jid)[0] == 2
    # a damaged accounting log (a line cut, bytes not UTF-8, a stamp that is none) is passed
    # over line by line, as Torque's tracejob does (these were tracebacks)
    (log,) = (rig / "home" / "accounting").iterdir()
    with open(log, "ab") as f:
        f.write(b"cut sh\n\xff\xfe;E;" + jid.encode() + b";x=1\n99/99/2026 00:00:00;E;" + jid.encode() + b";y=2\n")
    assert run(tracejob.TRACEJOB, jid) == (status, out)


def test_mail_points_decide_who_is_mailed_about_what():
    from hpcsched.core.jobs import Job, Request
    from hpcsched.pbs import mail
    job = Job(name="w", owner="alice", request=Request(nodes=1), walltime=60)
    job.extra = {"mail_points": "be"}
    assert [e for e in "bea" if mail.wanted(job, e, "torque")] == ["b", "e"]
    job.extra["mail_points"] = "n"
    assert not any(mail.wanted(job, e, "openpbs") for e in "bea")
    job.array_id, job.array_index, job.extra["mail_points"] = 4, 2, "e"
    assert mail.wanted(job, "e", "torque") and not mail.wanted(job, "e", "openpbs")  # OpenPBS: subjobs need j
    job.extra["mail_points"] = "ej"
    assert mail.wanted(job, "e", "openpbs")


@pytest.mark.parametrize("line,message", [
    ('mail_command = "sendmail -t"', "mail_command: must be a command as a list of words"),
    ('launcher = "rsh"', "launcher: must be a command as a list of words"),
    ('prejob_check = ["ping", 3]', "prejob_check: must be a command as a list of words"),
    ('prologue = "/etc/prologue"', "prologue: must be a command as a list of words"),
    ('epilogue = [""]', "epilogue: must be a command as a list of words"),
    ("prologue_timeout = -1", "prologue_timeout: must be a positive number of seconds"),
    ("server_interval = 0", "server_interval: must be a positive number of seconds"),
    ('kill_grace = "30"', "kill_grace: must be a positive number of seconds"),
    ("job_history_duration = nan", "job_history_duration: must be a positive number of seconds"),
    ('ssh = "ssh -p 22"', "ssh: must be a command as a list of words"),
    ('node_command = ["hpcsched", ""]', "node_command: must be a command as a list of words"),
    ('node_spool = ""', "node_spool: must be a non-empty string"),
    ("node_check_rate = 0", "node_check_rate: must be a positive number of seconds"),
    ('job_stat_rate = "45"', "job_stat_rate: must be a positive number of seconds")])
def test_site_keys_of_the_wrong_type_are_one_line(rig, line, message):
    from hpcsched.core.errors import ConfigError
    from hpcsched.store.site import load_site
    config = rig / "home" / "config.toml"
    config.write_text(line + "\n" + config.read_text())
    with pytest.raises(ConfigError, match=message):
        load_site()


CAPABILITY = """
[priority]
policy = "cobalt"
backfill_queues = ["backfill"]
"""


def _cobalt_rig(rig):
    """The rig under Cobalt's policy, with ALCF's router: capability jobs are >= 2 nodes."""
    config = rig / "home" / "config.toml"
    text = config.read_text().replace('default_queue = "batch"', 'default_queue = "default"')
    text = text.replace('[priority]\npolicy = "fifo"\n', "")
    text += CAPABILITY + """
[queues.default]
route_to = ["prod-capability", "prod-short"]
[queues.prod-capability]
min_fraction = 0.5
[queues.prod-short]
[queues.backfill]
"""
    config.write_text(text)


def test_schedctl_stops_starts_and_says_so(rig, monkeypatch):
    from hpcsched.pbs import schedctl
    assert run(schedctl.SCHEDCTL, "--status") == (0, "scheduling is active\n")
    monkeypatch.setenv("HPCSCHED_USER", "olga")  # an operator, not a manager
    assert run(schedctl.SCHEDCTL, "--stop")[0] == 159
    monkeypatch.setenv("HPCSCHED_USER", "root")
    assert run(schedctl.SCHEDCTL, "--stop") == (0, "scheduling stopped\n")
    assert run(schedctl.SCHEDCTL, "-Q") == (0, "scheduling is stopped\n")
    assert run(schedctl.SCHEDCTL, "--start")[0] == 0 and run(schedctl.SCHEDCTL, "--status")[1] == \
        "scheduling is active\n"
    assert run(schedctl.SCHEDCTL, "--status", "--stop")[0] == 2
    assert run(schedctl.SCHEDCTL)[0] == 2
    assert run(schedctl.SCHEDCTL, "--stop", "1")[0] == 2 and run(schedctl.SCHEDCTL, "-Q")[1] == \
        "scheduling is active\n"  # (only --score takes job ids: nothing changed)


def test_schedctl_score_and_big_run_monday(rig, monkeypatch):
    from hpcsched.pbs import schedctl
    from hpcsched.store.journaled import Batch
    from hpcsched.store.site import load_site
    _cobalt_rig(rig)
    small = submit("-l", "nodes=1")
    two = submit("-l", "nodes=2")
    four = submit("-l", "nodes=4")
    parked = submit("-q", "backfill", "-l", "nodes=4")
    assert run(schedctl.SCHEDCTL, "--score", "50", small)[0] == 159  # alice is no operator
    monkeypatch.setenv("HPCSCHED_USER", "olga")
    assert run(schedctl.SCHEDCTL, "--score", "50", small)[0] == 0
    assert run(schedctl.SCHEDCTL, "--score", "nan", small)[0] == 2
    status, out = run(schedctl.SCHEDCTL, "--big-run")
    assert status == 0 and out == "3.headnode 4 nodes: score 52\n2.headnode 2 nodes: score 51\n"
    with Batch.of(load_site()).open(write=False) as batch:
        jobs = batch.sched.jobs
        scores = {jid: jobs[int(jid.split(".")[0])].score for jid in (small, two, four, parked)}
        order = [j.id for j in batch.sched.policy.order([jobs[i] for i in (1, 2, 3, 4)], batch.sched.context(0))]
    assert scores == {small: 50.0, two: 51.0, four: 52.0, parked: 0.0}
    assert order == [3, 2, 1, 4]  # the big run first, largest first; backfill last (read back from the journal)


def test_qstart_qstop_qenable_qdisable_are_qmgrs_queue_switches(rig, monkeypatch, capsys):
    from hpcsched.pbs import common
    from hpcsched.pbs.common import CommandError
    from hpcsched.store.journaled import Batch
    from hpcsched.store.site import load_site
    monkeypatch.setenv("HPCSCHED_USER", "root")  # (a manager)
    assert run(qmgr.QSTOP, "batch@headnode")[0] == 0
    jid = submit()
    with Batch.of(load_site()).open() as batch:
        assert batch.do("pass").started == []  # (a stopped queue takes jobs and starts none)
    assert run(qmgr.QDISABLE, "batch", "nosuch")[0] == 170  # (each queue on its own)
    assert "qdisable: obj=nosuch svr=default: Unknown queue" in capsys.readouterr().err
    with pytest.raises(CommandError, match="not enabled") as e:
        submit()
    assert e.value.status == common.LIMITS
    assert run(qmgr.QENABLE, "batch")[0] == run(qmgr.QSTART, "batch")[0] == 0
    with Batch.of(load_site()).open() as batch:
        assert [s.job_id for s in batch.do("pass").started] == [int(jid.split(".")[0])]
    assert json.loads((rig / "home" / "qmgr.json").read_text())["queues"]["batch"] == {"enabled": True, "started": True}
    monkeypatch.setenv("HPCSCHED_USER", "alice")
    assert run(qmgr.QSTOP, "batch")[0] == common.UNAUTHORIZED
    assert "qstop: obj=batch svr=default: Unauthorized Request" in capsys.readouterr().err


def test_a_job_that_asks_no_walltime_gets_the_queues_default_then_the_servers(rig, monkeypatch):
    from test_commands import full, submit
    monkeypatch.setenv("HPCSCHED_USER", "root")
    assert submit() and full("1")["Resource_List.walltime"] == "24:00:00"  # (else the queue's most)
    assert run(qmgr.QMGR, "-c", "set server resources_default.walltime = 2:00:00")[0] == 0
    assert submit() and full("2")["Resource_List.walltime"] == "02:00:00"
    assert run(qmgr.QMGR, "-c", "set queue batch resources_default.walltime = 00:20:00")[0] == 0
    assert submit() and full("3")["Resource_List.walltime"] == "00:20:00"
    assert submit("-l", "walltime=5:00") and full("4")["Resource_List.walltime"] == "00:05:00"
    assert "resources_default.walltime = 00:20:00" in run(qmgr.QMGR, "-c", "list queue batch")[1]
    assert run(qmgr.QMGR, "-c", "set server resources_default.walltime = soon")[0] == 2


def test_a_bad_default_walltime_in_the_config_is_one_line(rig):
    from test_commands import submit
    config = rig / "home" / "config.toml"
    config.write_text('default_walltime = "-5"\n' + config.read_text())
    with pytest.raises(Exception, match="default_walltime: bad duration '-5'"):
        submit()


def test_qmgr_sets_the_next_job_number_and_never_lowers_it(rig, monkeypatch, capsys):
    """Torque's and OpenPBS's `next_job_number`: store state (a journal record), so a
    replay and a constant-time qsub both number from it."""
    monkeypatch.setenv("HPCSCHED_USER", "root")
    assert run(qmgr.QMGR, "-c", "set server next_job_number = 1000")[0] == 0
    assert qsub.submit(["-l", "walltime=60"], stdin=io.StringIO("true\n"))[0] == "1000.headnode"
    status, out = run(qmgr.QMGR, "-c", "list server next_job_number")
    assert "next_job_number = 1001" in out
    for value, said in (("5", "below the next id, 1001"), ("x", "Illegal attribute or resource value"),
                        ("2147483648", "Illegal attribute"),  # (a job number is 32 bits: subjobs live above)
                        ("0", "Illegal attribute")):
        status, out = run(qmgr.QMGR, "-c", f"set server next_job_number = {value}")
        assert status == 2 and said in capsys.readouterr().err
    assert run(qmgr.QMGR, "-c", "unset server next_job_number")[0] == 2
    monkeypatch.setenv("HPCSCHED_USER", "alice")  # (a manager's alone)
    assert run(qmgr.QMGR, "-c", "set server next_job_number = 5000")[0] == 159
    from hpcsched.store.journaled import Batch
    from hpcsched.store.site import load_site
    batch = Batch(load_site())
    with batch.open(write=False):
        assert batch.next_id == batch.sched.next_id == 1001
