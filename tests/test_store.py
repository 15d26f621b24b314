"""The state store: atomic, locked, versioned, and never silently emptied."""
import json
import multiprocessing
import os

import pytest

from hpcsched.store.journal import JOURNAL, STATE, Store, StoreError, default_home


def test_append_and_read_in_order(tmp_path):
    s = Store(tmp_path)
    with s.locked():
        assert s.read() == (None, [])
        assert [s.append({"op": "submit", "id": i}) for i in range(3)] == [1, 2, 3]
        snap, recs = s.read()
    assert snap is None and [r["id"] for r in recs] == [0, 1, 2] and [r["seq"] for r in recs] == [1, 2, 3]


def test_compact_keeps_what_the_snapshot_does_not_cover(tmp_path):
    s = Store(tmp_path)
    with s.locked():
        for i in range(5):
            s.append({"op": "x", "i": i})
        s.compact({"jobs": [1, 2, 3]}, seq=3)
        snap, recs = s.read()
        assert snap["state"] == {"jobs": [1, 2, 3]} and [r["seq"] for r in recs] == [4, 5]
        assert s.append({"op": "y"}) == 6
        s.compact({"jobs": []}, seq=6)
        assert s.append({"op": "z"}) == 7  # numbering carries on from the snapshot


def test_crash_between_snapshot_and_journal_rewrite(tmp_path):
    s = Store(tmp_path)
    with s.locked():
        for i in range(4):
            s.append({"op": "x", "i": i})
    journal = (tmp_path / JOURNAL).read_bytes()
    with s.locked():
        s.compact({"n": 2}, seq=2)
    (tmp_path / JOURNAL).write_bytes(journal)  # as if the rewrite never happened
    with s.locked():
        snap, recs = s.read()
    assert snap["state"] == {"n": 2} and [r["seq"] for r in recs] == [3, 4]


def test_torn_last_record_is_dropped_with_a_warning(tmp_path):
    s = Store(tmp_path)
    with s.locked():
        s.append({"op": "a"})
    with open(tmp_path / JOURNAL, "ab") as f:
        f.write(b'{"v":1,"seq":2,"op":"b"')  # a crash mid-append
    s = Store(tmp_path)
    with s.locked():
        _, recs = s.read()
        assert [r["op"] for r in recs] == ["a"] and "torn" in s.warnings[0]
        assert s.append({"op": "c"}) == 2
        _, recs = s.read()
    assert [r["op"] for r in recs] == ["a", "c"]


@pytest.mark.parametrize("damage,msg", [
    ("journal_middle", "line 1 is corrupt"),
    ("state_truncated", "corrupt or truncated"),
    ("state_version", "store version 9 is not supported"),
    ("journal_version", "line 1 has store version 7"),
])
def test_damage_is_reported_and_left_alone(tmp_path, damage, msg):
    s = Store(tmp_path)
    with s.locked():
        s.append({"op": "a"})
        s.append({"op": "b"})
        s.compact({"k": 1}, seq=1)
    if damage == "journal_middle":
        (tmp_path / JOURNAL).write_text('{"v":1,"seq":2,"op"\n{"v":1,"seq":3,"op":"c"}\n')
    elif damage == "state_truncated":
        (tmp_path / STATE).write_text((tmp_path / STATE).read_text()[:-5])
    elif damage == "state_version":
        (tmp_path / STATE).write_text(json.dumps({"store_version": 9, "state": {}}))
    else:
        (tmp_path / JOURNAL).write_text('{"v":7,"seq":2,"op":"b"}\n')
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.name != "lock"}
    with s.locked(), pytest.raises(StoreError, match=msg) as e:
        s.read()
    assert "\n" not in str(e.value)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.name != "lock"} == before


def _appender(home, n):
    s = Store(home)
    for i in range(n):
        with s.locked():
            s.append({"op": "submit", "pid": os.getpid(), "i": i})


def test_concurrent_appenders_lose_and_duplicate_nothing(tmp_path):
    procs = [multiprocessing.get_context("fork").Process(target=_appender, args=(tmp_path, 100)) for _ in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    with Store(tmp_path).locked(exclusive=False) as s:
        _, recs = s.read()
    assert [r["seq"] for r in recs] == list(range(1, 801))
    assert len({(r["pid"], r["i"]) for r in recs}) == 800


def test_default_home(monkeypatch, tmp_path):
    monkeypatch.setenv("HPCSCHED_HOME", str(tmp_path / "h"))
    assert default_home() == tmp_path / "h"
    monkeypatch.delenv("HPCSCHED_HOME")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "x"))
    assert default_home() == tmp_path / "x" / "hpcsched"


def test_unwritable_home_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(StoreError, match="cannot open the store"):
        with Store(blocker / "sub").locked():
            pass


def test_read_since_gives_only_what_was_appended(tmp_path):
    s = Store(tmp_path)
    s.append({"op": "a"})
    mark = s.mark()
    assert s.read_since(mark, 1) == []
    s.append({"op": "b"})
    s.append({"op": "c"})
    assert [r["op"] for r in s.read_since(mark, 1)] == ["b", "c"]
    with open(tmp_path / JOURNAL, "ab") as f:
        f.write(b'{"v":1,"seq":4')  # an append in progress: read everything again
    assert s.read_since(mark, 1) is None


def test_read_since_sends_the_reader_back_after_compaction(tmp_path):
    s = Store(tmp_path)
    s.append({"op": "a"})
    mark = s.mark()
    s.compact({"jobs": []}, 1)
    assert s.read_since(mark, 1) is None
