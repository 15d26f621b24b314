"""The limits the server keeps a running job to, and what it measures (server/limits.py)."""
import subprocess
import sys

from hpcsched.core.jobs import Job, Request
from hpcsched.server import limits

MB = 2 ** 20


def job(resources: dict, request: Request = Request(), cput: float = 0.0) -> Job:
    return Job(id=1, owner="alice", walltime=60, request=request, cput=cput, extra={"resources": resources})


def test_kernel_limits_are_pbs_moms_in_the_shells_units():
    asked = limits.asked(job({"pcput": "90", "file": "2kb", "pmem": "300mb", "vmem": "900mb", "pvmem": "600mb",
                              "nice": "5", "walltime": "60"}))
    assert asked == {"pcput": 90, "file": 2048, "pmem": 300 * MB, "vmem": 900 * MB, "pvmem": 600 * MB, "nice": 5}
    assert limits.ulimits(asked) == f"-t 90 -f 4 -d {300 * 1024} -v {600 * 1024}"
    # the address space is never below pmem; sizes round up; a limit past any machine's is none
    assert limits.ulimits({"pmem": 300 * MB, "vmem": 100 * MB}) == f"-d {300 * 1024} -v {300 * 1024}"
    assert limits.ulimits({"file": 1000, "vmem": 1}) == "-f 2 -v 1"
    assert limits.ulimits({"file": 2 ** 70, "pcput": 0}) == "-t 1"
    assert limits.ulimits({"mem": 10 * MB, "nice": 3}) == ""  # (mem is watched, nice taken at the start)


def test_the_wrapper_sets_the_limits_for_the_job_alone(tmp_path):
    """The job's wrapper writes its pid and status whatever the job's file limit, and a job
    that cannot even start under its limits ends with the shell's status."""
    from hpcsched.store.layout import WRAPPER
    script = tmp_path / "job"
    script.write_text("ulimit -t; ulimit -f; ulimit -v; echo ${HPCSCHED_LIMITS-unset}\n")

    def run(given):
        env = {"PATH": "/usr/bin:/bin", "HPCSCHED_LIMITS": given}
        done = subprocess.run(["/bin/sh", "-c", WRAPPER, "w", str(tmp_path), "/bin/sh", str(script)], env=env,
                              capture_output=True, text=True)
        (tmp_path / "started").rmdir()
        return done.returncode, done.stdout.split(), (tmp_path / "status").read_text().strip()
    assert run("-t 90 -f 0 -v 614400") == (0, ["90", "0", "614400", "unset"], "0")
    assert run("") == (0, ["unlimited", "unlimited", "unlimited", "unset"], "0")
    status, _, recorded = run("-v 1")  # (no room to start the job's shell)
    assert status != 0 and recorded == str(status)
    assert run("-t") == (0, ["unlimited", "unlimited", "unlimited", "unset"], "0")  # (malformed: it still ends)
    # the script's own arguments (qsub -F) follow it, a `--` among them included
    script.write_text('ulimit -t; printf "[%s]" "$@"\n')
    env = {"PATH": "/usr/bin:/bin", "HPCSCHED_LIMITS": "-t 90"}
    done = subprocess.run(["/bin/sh", "-c", WRAPPER, "w", str(tmp_path), "/bin/sh", str(script), "a b", "--", "-t"],
                          env=env, capture_output=True, text=True)
    assert done.stdout.split("\n")[:2] == ["90", "[a b][--][-t]"]


def test_a_select_jobs_memory_is_its_chunks_and_an_old_bad_value_is_no_limit():
    assert limits.asked(job({"select": "2:ncpus=1:mem=100mb"}, Request(nodes=2, mem=100)))["mem"] == 200 * MB
    assert limits.asked(job({"mem": "1gb", "select": "2:ncpus=1:mem=100mb"}, Request(nodes=2, mem=100)))["mem"] == 2 ** 30
    assert limits.asked(job({"vmem": "lots"})) == {}  # (journaled before qsub checked it)


def test_usage_sums_a_jobs_process_group_and_its_cgroups_members():
    hold = "import time; x = bytearray(30 * 2 ** 20); x[::4096] = b'1' * len(x[::4096]); time.sleep(30)"
    lead = subprocess.Popen([sys.executable, "-c", hold], start_new_session=True)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
    try:
        for _ in range(100):  # until the leader has its memory
            use = limits.Usage().of(lead.pid)
            if use.mem > 30 * MB:
                break
            subprocess.run(["sleep", "0.05"])
        assert use.mem > 30 * MB and use.vmem >= use.mem
        both = limits.Usage()
        alone, with_other = both.of(lead.pid), both.of(lead.pid, [other.pid])
        assert with_other.mem > alone.mem and with_other.vmem > alone.vmem
        assert both.of(999_999_999) == limits.Use(0.0, 0, 0)
    finally:
        lead.kill(), other.kill(), lead.wait(), other.wait()


def test_over_names_the_limit_in_pbs_moms_words():
    j = job({"mem": "1mb", "vmem": "10mb"}, cput=5)
    asked = limits.asked(j)
    assert limits.over(j, asked, limits.Use(1.0, MB, 2 * MB)) is None  # (at a limit is within it)
    assert limits.over(j, asked, limits.Use(1.0, MB + 1, 2 * MB)) == ("mem", "mem 1025kb exceeded limit 1024kb")
    assert limits.over(j, asked, limits.Use(1.0, 0, 11 * MB)) == ("vmem", "vmem 11264kb exceeded limit 10240kb")
    assert limits.over(j, asked, limits.Use(5.5, 2 * MB, 0)) == ("cput", "cput 6 exceeded limit 5")
    assert limits.over(j, asked, limits.Use(5.0, MB, 0)) is None  # (at its limit, not past it)
    assert limits.seconds_over("walltime", 3.0001, 3) == "walltime 4 exceeded limit 3"
