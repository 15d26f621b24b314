import pytest

from hpcsched import InvalidRequest
from hpcsched.core import acctline
from hpcsched.core.nodelist import compress, compress_nids, exec_host, exec_hosts, expand, expand_nids


def test_expand_hostlists():
    assert expand("n[001-003]") == ["n001", "n002", "n003"]
    assert expand("a,b,c[1-2,7]") == ["a", "b", "c1", "c2", "c7"]
    assert expand("r[1-2]n[01-02]") == ["r1n01", "r1n02", "r2n01", "r2n02"]
    assert expand("") == []
    assert len(expand("n[001-128]")) == 128


def test_compress_is_the_inverse():
    names = expand("n[001-128],login,x[7-9]")
    assert compress(names) == "n[001-128],login,x[7-9]"
    assert expand(compress(names)) == names
    assert compress(["n1", "n2", "n4"]) == "n[1-2,4]"
    assert compress(["n5"]) == "n5"


@pytest.mark.parametrize("bad", ["n[1-", "n]", "n[a-b]", "n[5-2]", "a,,b"])
def test_bad_hostlists(bad):
    with pytest.raises(InvalidRequest):
        expand(bad)


def test_psc_nid_ranges_both_ways():
    assert expand_nids("10..12,30,40..41") == [10, 11, 12, 30, 40, 41]
    assert compress_nids([41, 10, 11, 12, 30, 40, 12]) == "10..12,30,40..41"
    assert compress_nids(expand_nids("10..20,30..60")) == "10..20,30..60"


@pytest.mark.parametrize("bad", ["10..", "a..b", "5..2", "1,,2", "-1"])
def test_bad_nid_ranges(bad):
    with pytest.raises(InvalidRequest):
        expand_nids(bad)


@pytest.mark.parametrize("text", ["node[1-99999999]", "r[1-2000]n[1-2000]", "n[1-" + "9" * 30 + "]"])
def test_huge_lists_are_refused_by_their_size_before_anything_is_built(text):
    with pytest.raises(InvalidRequest):
        expand(text)


def test_the_cap_counts_every_part_of_a_list(monkeypatch):
    from hpcsched.core import nodelist
    monkeypatch.setattr(nodelist, "MAX_NAMES", 10)
    assert len(expand("a[1-5],b[1-5]")) == 10
    for text in ("a[1-8],b[1-8]", "a[1-4]b[1-3]", "a[1-6,7-11]"):
        with pytest.raises(InvalidRequest, match="more than 10"):
            expand(text)


def test_huge_nid_ranges_are_refused_by_their_size():
    with pytest.raises(InvalidRequest, match="more than"):
        expand_nids("1..99999999")
    with pytest.raises(InvalidRequest):
        expand_nids("1..²")


def test_exec_host_both_ways():
    """PBS's exec_host: consecutive cores as a range, others listed; read back to the same."""
    nodes, cores = ("n01", "n02", "n03", "n04"), ((0, 1, 2, 3), (1,), (0, 2, 3), ())
    text = exec_host(nodes, cores)
    assert text == "n01/0-3+n02/1+n03/0,2,3+n04/0"
    assert exec_hosts(text) == [("n01", (0, 1, 2, 3)), ("n02", (1,)), ("n03", (0, 2, 3)), ("n04", (0,))]
    assert exec_hosts("") == [] and exec_hosts("login") == [("login", ())]
    with pytest.raises(InvalidRequest, match="no core number"):
        exec_hosts("n01/0-x")


def test_an_accounting_line_both_ways():
    line = acctline.line(86400.0 * 400, "S", "7.head", {"user": "alice", "exec_host": "n01/0-3", "start": 34560000})
    when, kind, job_id, fields = acctline.parse(line)
    assert line.endswith("\n") and acctline.stamp_ok(when)
    assert (kind, job_id, fields) == ("S", "7.head", {"user": "alice", "exec_host": "n01/0-3", "start": "34560000"})
    assert acctline.parse("no record here") is None and not acctline.stamp_ok("13/45/2026 99:00:00")
    assert acctline.parse("01/02/2026 10:00:00;E;8;user=bob stray end=5")[3] == {"user": "bob", "end": "5"}
