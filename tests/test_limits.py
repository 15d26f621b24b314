"""The limits the server keeps a running job to, and what it measures (server/limits.py)."""
import resource
import subprocess
import sys

from hpcsched.core.jobs import Job, Request
from hpcsched.server import limits

MB = 2 ** 20


def job(resources: dict, request: Request = Request(), cput: float = 0.0) -> Job:
    return Job(id=1, owner="alice", walltime=60, request=request, cput=cput, extra={"resources": resources})


def test_kernel_limits_are_pbs_moms():
    asked = limits.asked(job({"pcput": "90", "file": "2kb", "pmem": "300mb", "vmem": "900mb", "pvmem": "600mb",
                              "nice": "5", "walltime": "60"}))
    assert asked == {"pcput": 90, "file": 2048, "pmem": 300 * MB, "vmem": 900 * MB, "pvmem": 600 * MB, "nice": 5}
    assert limits.rlimits(asked) == [(resource.RLIMIT_CPU, 90), (resource.RLIMIT_FSIZE, 2048),
                                     (resource.RLIMIT_DATA, 300 * MB), (resource.RLIMIT_AS, 600 * MB)]
    # the address space is never below pmem; a limit past what the kernel takes is none
    assert limits.rlimits({"pmem": 300 * MB, "vmem": 100 * MB}) == [(resource.RLIMIT_DATA, 300 * MB),
                                                                  (resource.RLIMIT_AS, 300 * MB)]
    assert limits.rlimits({"file": 2 ** 70, "pcput": 0}) == [(resource.RLIMIT_CPU, 1)]
    assert limits.rlimits({"mem": 10 * MB}) == []  # (watched, not set: it is the job's whole)


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
    assert limits.over(j, asked, limits.Use(5.5, 2 * MB, 0)) == ("cput", "cput 5 exceeded limit 5")
