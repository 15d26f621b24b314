"""The state store: atomic, locked, versioned, and never silently emptied."""
import json
import multiprocessing
import os

import pytest

from hpcsched.store.journal import JOURNAL, STATE, TIP, Store, StoreError, crc_of, default_home


def test_append_and_read_in_order(tmp_path):
    s = Store(tmp_path)
    with s.locked():
        assert s.read() == (None, [])
        assert [s.append({"op": "submit", "id": i}) for i in range(3)] == [1, 2, 3]
        snap, recs = s.read()
    assert snap is None and [r["id"] for r in recs] == [0, 1, 2] and [r["seq"] for r in recs] == [1, 2, 3]


def test_appends_in_one_sync_are_synced_once_even_when_the_command_fails(tmp_path, monkeypatch):
    s = Store(tmp_path)
    synced, real = [], os.fsync
    with s.locked():
        s.append({"op": "x", "i": 0})  # (the store's first append makes its tip, durably)
        monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
        with pytest.raises(KeyError):
            with s.one_sync():
                s.append({"op": "x", "i": 1}), s.append({"op": "x", "i": 2})
                raise KeyError("a command fails half way")
        assert len(synced) == 1 and [r["i"] for r in s.read()[1]] == [0, 1, 2]  # (what it wrote stands, synced)
        with s.one_sync():
            pass
        assert len(synced) == 1  # (nothing appended: nothing to sync)
        s.append({"op": "x", "i": 3})
        assert len(synced) == 2  # (outside, each append is synced as it is made)


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
    # every cut of a line never acknowledged (the tip not past it; its newline too) reads
    # as torn; a cut of an acknowledged one is a loss, named; a whole line with its
    # newline damaged is damage, also to a writer, which then cuts nothing
    line = (tmp_path / JOURNAL).read_bytes().split(b"\n")[1] + b"\n"
    head = (tmp_path / JOURNAL).read_bytes()[:-len(line)]
    tip = (tmp_path / TIP).read_bytes()
    for k in range(1, len(line)):
        (tmp_path / JOURNAL).write_bytes(head + line[:k])
        with s.locked(), pytest.raises(StoreError, match=r"record\(s\) 2 to 2 are missing"):
            s.read()
    s._write_tip(seq=1, last=crc_of(head[:-1]))
    for k in range(1, len(line)):
        (tmp_path / JOURNAL).write_bytes(head + line[:k])
        with s.locked():
            assert len(s.read()[1]) == 1
    (tmp_path / TIP).write_bytes(tip)
    (tmp_path / JOURNAL).write_bytes(head + line[:-1] + b"\r")
    with s.locked(), pytest.raises(StoreError, match="last line: its end of line is damaged"):
        s.append({"op": "d"})
    assert (tmp_path / JOURNAL).read_bytes() == head + line[:-1] + b"\r"


@pytest.mark.parametrize("damage,msg", [
    ("journal_middle", "line 1 is corrupt"),
    ("state_truncated", "corrupt or truncated"),
    ("state_version", "store version 9 is not supported"),
    ("journal_version", "line 1 has store version 7"),
    ("crc_case", "checksum does not match"),
    ("end_of_line", "line 2: its end of line is damaged"),  # (a whole record: not an append cut short)
    ("state_not_utf8", r"corrupt \(not UTF-8 at byte 2\)"),
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
    elif damage == "state_not_utf8":
        text = (tmp_path / STATE).read_bytes()
        (tmp_path / STATE).write_bytes(text[:2] + b"\xdf" + text[3:])
    elif damage == "end_of_line":
        (tmp_path / JOURNAL).write_bytes((tmp_path / JOURNAL).read_bytes()[:-1] + b"\x0b")
    elif damage == "crc_case":  # one bit of a checksum's letter: the record is whole, the line is not
        text = (tmp_path / JOURNAL).read_text()
        crc = text[text.rindex('"crc":"') + 7:][:8]
        assert crc != crc.upper(), "(this record's checksum has a letter)"
        (tmp_path / JOURNAL).write_text(text.replace(crc, crc.upper()))
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


# --- a store that checks itself ----------------------------------------------------------------
def _site(tmp_path, jobs=4):
    """A site with `jobs` submitted and job 2 deleted: journal lines 1..jobs+1."""
    import io

    from hpcsched.pbs import qctl, qsub
    from hpcsched.store.site import init_site, load_site
    home = tmp_path / "home"
    init_site(home, nodes=2, cores=2)
    os.environ["HPCSCHED_HOME"] = str(home)
    for i in range(jobs):
        qsub.submit(["-N", f"j{i + 1}"], stdin=io.StringIO("true\n"), cwd=str(tmp_path), env={})
    qctl.QDEL(["2"])
    return load_site(home)


def _edit(home, n, change):
    """Journal line n changed by `change(record)` and the journal resealed from there on,
    chain and tip too: damage that still parses and checks out (a writer's bug)."""
    lines = (home / JOURNAL).read_text().splitlines()
    rec = json.loads(lines[n - 1])
    change(rec)
    lines[n - 1] = json.dumps(rec, separators=(",", ":"))
    _reseal(home, lines)


def _reseal(home, lines):
    """Write `lines` as the journal, each sealed anew and chained, and the tip to its end."""
    from hpcsched.store.journal import Store, crc_of, sealed
    out, prev = [], ""
    for line in lines:
        rec = json.loads(line)
        rec.pop("crc", None)
        rec.update(prev=prev) if rec.get("v", 1) >= 3 else None
        out.append(sealed(json.dumps(rec, separators=(",", ":"))))
        prev = crc_of(out[-1].encode())
    (home / JOURNAL).write_text("".join(line + "\n" for line in out))
    last = json.loads(out[-1])
    store = Store(home)
    store.read_tip()
    store._write_tip(seq=last["seq"], last=prev, next_id=last.get("next_id", 1))


@pytest.fixture
def site(tmp_path, monkeypatch):
    monkeypatch.setenv("HPCSCHED_USER", "alice")
    monkeypatch.delenv("HPCSCHED_FLAVOR", raising=False)
    old = os.environ.get("HPCSCHED_HOME")
    yield _site(tmp_path)
    if old is None:
        os.environ.pop("HPCSCHED_HOME", None)
    else:
        os.environ["HPCSCHED_HOME"] = old


def _damage(home, kind):
    path = home / JOURNAL
    text = path.read_bytes()
    if kind == "flipped bit":
        i = text.index(b'"name":"j3"') + 9
        path.write_bytes(text[:i] + bytes([text[i] ^ 1]) + text[i + 1:])
    elif kind == "deleted line":
        lines = text.split(b"\n")
        path.write_bytes(b"\n".join(lines[:2] + lines[3:]))
    elif kind in ("null", "{}", "BOM"):
        path.write_bytes({"null": b"null\n", "{}": b"{}\n", "BOM": b"\xef\xbb\xbf" + text}[kind])
    elif kind == "negative nodes":
        _edit(home, 3, lambda r: r["job"]["request"].update(nodes=-3))
    elif kind == "next_id":
        _edit(home, 3, lambda r: r.update(next_id="x"))
    elif kind == "changes null":
        _edit(home, 6, lambda r: r.update(op="alter", changes=None))
    elif kind == "walltime text":
        _edit(home, 3, lambda r: r["job"].update(walltime="soon"))


@pytest.mark.parametrize("kind,message", [
    ("flipped bit", "line 4: checksum does not match"), ("deleted line", "1 record(s) missing"),
    ("null", "line 1 is not a journal record"), ("{}", "line 1 is not a journal record"),
    ("BOM", "line 1: checksum does not match"), ("negative nodes", "record 3 (submit): malformed"),
    ("next_id", "next_id 'x' is not a job id"), ("changes null", "changes None is not of its kind"),
    ("walltime text", "job.walltime 'soon' is not of its kind")])
def test_damage_that_still_parses_is_found_and_nothing_is_written(site, kind, message):
    import io

    from hpcsched.core.errors import SchedulerError
    from hpcsched.pbs import qstat, qsub
    from hpcsched.store import repair
    _damage(site.home, kind)
    before = (site.home / JOURNAL).read_bytes()
    sound, lines = repair.check(site)
    assert not sound and message in lines[0], lines
    assert qstat.QSTAT([], out=io.StringIO()) == 1
    if kind in ("null", "{}"):  # qsub reads only the tail: damage there stops it too
        with pytest.raises(SchedulerError):  # (the command says it in one line, status 1)
            qsub.submit(["-N", "x"], stdin=io.StringIO("true\n"), cwd="/tmp", env={})
    assert (site.home / JOURNAL).read_bytes()[:len(before)] == before


def test_repair_keeps_every_verifiable_record_with_a_backup_and_says_what_it_removed(site):
    """One damaged line is removed alone (written to removed.jsonl in the backup, named with
    its job); every record after it that checks out is kept, numbered on and chained anew."""
    from hpcsched.store import repair
    from hpcsched.store.journaled import Batch
    _damage(site.home, "flipped bit")
    damaged = (site.home / JOURNAL).read_bytes()
    ok, lines = repair.repair(site)
    assert ok and "kept 5 journal record(s); removed 1" in lines  # (the first: config)
    assert "  removed: line 4: record 4: submit of job 3" in lines
    (backup,) = [p for p in site.home.iterdir() if p.name.startswith("backup-")]
    assert (backup / JOURNAL).read_bytes() == damaged
    assert (backup / "removed.jsonl").read_bytes() == damaged.split(b"\n")[3] + b"\n"
    sound, after = repair.check(site)
    assert sound and "3 job(s), next job id 5" in after[0]  # job 3's id, given out, never again
    batch = Batch(site)
    with batch.open(write=False):
        assert sorted(batch.sched.jobs) == [1, 2, 4] and batch.sched.jobs[2].state.name == "DELETED"
    assert repair.repair(site)[1] == after  # a sound store is left alone


def test_repair_never_hands_out_an_id_the_accounting_log_has_seen(site):
    """The accounting log is a second witness: a job the journal lost entirely (its lines
    gone) still holds its id there."""
    from hpcsched.store import repair
    from hpcsched.store.accounts import DIRECTORY
    (site.home / DIRECTORY).mkdir(exist_ok=True)
    with open(site.home / DIRECTORY / "20990101", "a") as f:
        f.write("01/01/2099 00:00:00;Q;9.vm;queue=batch\n01/01/2099 00:00:01;Q;7[3].vm;queue=batch\n")
    _damage(site.home, "flipped bit")
    ok, lines = repair.repair(site)
    assert ok and "next job id 10: past every id the journal, its tip or the accounting log has seen" in lines
    assert "next job id 10" in repair.check(site)[1][0]


def test_a_damaged_snapshot_is_rebuilt_only_from_a_whole_journal(site):
    from hpcsched.store import repair
    from hpcsched.store.journaled import Batch
    batch = Batch(site)
    with batch.open(write=True):
        state, seq = batch.sched.to_dict(), batch.seq
    with Store(site.home).locked():
        Store(site.home).compact(state, seq - 2)  # the journal still holds 4, 5 (and 3)
    text = (site.home / STATE).read_text()
    (site.home / STATE).write_text(text.replace('"j1"', '"jX"'))
    assert "state.json: checksum does not match" in repair.check(site)[1][0]
    ok, lines = repair.repair(site)
    assert not ok and "restore from a backup" in lines[-1]


def test_version_1_stores_are_still_read(tmp_path):
    (tmp_path / JOURNAL).write_text('{"v":1,"seq":1,"op":"a"}\n{"v":1,"seq":2,"op":"b"}\n')
    (tmp_path / STATE).write_text('{"store_version":1,"journal_seq":0,"state":{}}')
    with Store(tmp_path).locked():
        snap, recs = Store(tmp_path).read()
    assert [r["op"] for r in recs] == ["a", "b"] and snap["state"] == {}


# --- the configuration is journaled ------------------------------------------------------
def _states(*ids):
    """Each job's state letter, from a fresh load of the store (as any command sees it)."""
    from hpcsched.pbs.common import state_letter
    from hpcsched.store.journaled import Batch
    from hpcsched.store.site import load_site
    batch = Batch(load_site())
    with batch.open(write=False):
        return "".join(state_letter(batch.sched.jobs[i], "torque") for i in ids)


def _journaled_configs(rig):
    return [json.loads(line) for line in (rig / "home" / JOURNAL).read_text().splitlines()
            if '"op":"config"' in line]


@pytest.mark.parametrize("how", ["qmgr", "edit"])
def test_a_changed_configuration_never_changes_what_was_decided_before_it(rig, monkeypatch, how):
    """A pass started job 1 under the old configuration; stopping the queue (qmgr, or an
    edit of config.toml) must not turn it back into a waiting job on the next load (the
    pass replayed under the new one would start nothing), nor lose its end."""
    import io

    from test_commands import submit
    from test_maui_psc import server_pass

    from hpcsched.pbs import qmgr
    from hpcsched.store.journaled import Batch
    from hpcsched.store.site import load_site
    submit("-l", "nodes=1")
    submit("-l", "nodes=4")
    server_pass()
    assert _states(1, 2) == "RQ" and len(_journaled_configs(rig)) == 1  # (the first writer's)
    if how == "qmgr":
        monkeypatch.setenv("HPCSCHED_USER", "root")
        assert qmgr.QMGR(["-c", "set queue batch started = False"], out=io.StringIO()) == 0
    else:
        config = rig / "home" / "config.toml"
        config.write_text(config.read_text().replace("[queues.batch]", "[queues.batch]\nstarted = false"))
    assert _states(1, 2) == "RQ"  # a reader: the old pass stands (and a snapshot under the new one)
    assert "started" in json.dumps(json.loads((rig / "home" / STATE).read_text())["config"])
    with Batch(load_site()).open() as batch:  # the job ends, as the server records it
        batch.do("ended", id=1, exit_status=0)
    server_pass()  # under the stopped queue: job 2 waits
    assert _states(1, 2) == "CQ"
    assert not Batch(load_site()).store.warnings
    if how == "qmgr":
        assert qmgr.QMGR(["-c", "set queue batch started = True"], out=io.StringIO()) == 0
    else:
        config.write_text(config.read_text().replace("started = false\n", ""))
    server_pass()
    assert _states(1, 2) == "CR"


def test_the_snapshot_keeps_its_configuration_and_old_stores_still_load(rig, monkeypatch):
    """Compaction saves the configuration the state was reached under; a store written
    before configurations were journaled (no `cfg`, no snapshot configuration) loads as it
    did, and its first writer journals the site's; a journaled configuration that no longer
    builds is reported and the site's used."""
    from test_commands import submit
    from test_maui_psc import server_pass

    from hpcsched.store import journaled
    from hpcsched.store.journaled import Batch
    from hpcsched.store.site import load_site
    home = rig / "home"
    submit("-l", "nodes=1")
    server_pass()
    journal = home / JOURNAL
    lines = [json.loads(line) for line in journal.read_text().splitlines()]
    old = [{k: v for k, v in r.items() if k not in ("cfg", "crc")} for r in lines if r["op"] != "config"]
    journal.write_text("".join(json.dumps({**r, "v": 1, "seq": n}) + "\n"  # (version 1: no checksums)
                               for n, r in enumerate(old, 1)))
    (home / TIP).unlink()  # (nor a tip)
    assert _states(1) == "R"
    submit("-l", "nodes=1")
    assert [json.loads(line)["op"] for line in journal.read_text().splitlines()] == ["submit", "pass", "config",
                                                                                       "submit"]
    # compaction: the snapshot names its configuration; a site changed since loads it under that one first
    monkeypatch.setattr(journaled, "COMPACT_AFTER", 1)
    server_pass()
    snapshot = json.loads((home / STATE).read_text())
    assert snapshot["config"]["toml"] == (home / "config.toml").read_text()
    monkeypatch.setattr(journaled, "COMPACT_AFTER", 1000)
    submit("-l", "nodes=1")
    server_pass()  # job 3 starts: journaled after the snapshot
    config = home / "config.toml"
    config.write_text(config.read_text().replace("[queues.batch]", "[queues.batch]\nstarted = false"))
    assert _states(1, 2, 3) == "RRR"  # (replayed under the snapshot's configuration, job 3 started)
    snapshot = json.loads((home / STATE).read_text())  # that load made a snapshot under the new one
    assert snapshot["config"]["toml"] == config.read_text() and snapshot["journal_seq"] == 7
    # a journaled configuration that no longer builds: said, and the site's decides
    snapshot["config"]["toml"] = "this is not TOML"
    from hpcsched.store.journal import Store
    with Store(home).locked():
        Store(home).compact(snapshot["state"], snapshot["journal_seq"], snapshot["config"])
    batch = Batch(load_site())
    with batch.open(write=False):
        assert batch.sched.jobs[2].state.name == "RUNNING"
    assert any("a journaled configuration no longer loads" in w for w in batch.store.warnings)


def test_a_configuration_the_state_does_not_fit_is_one_line_and_leaves_the_store_whole(rig, capsys):
    """A node a running job holds taken out of config.toml: commands that read the state say
    so in one line (status 1) and write nothing; a qsub that journaled that configuration
    meanwhile does not stop the store from loading once the node is back."""
    import io

    from test_commands import submit
    from test_maui_psc import server_pass

    from hpcsched.pbs import qstat
    from hpcsched.store.journaled import Batch
    from hpcsched.store.site import load_site
    submit("-l", "nodes=4")
    server_pass()
    config = rig / "home" / "config.toml"
    whole = config.read_text()
    config.write_text(whole.replace("node[01-04]", "node[01-03]"))
    assert qstat.QSTAT([], out=io.StringIO()) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the state does not fit the changed configuration (unknown node 'node04')" in err
    assert submit("-h") == "2.headnode"  # (constant time: it reads no state)
    config.write_text(whole)
    batch = Batch(load_site())
    with batch.open(write=False):
        assert [j.state.name for j in batch.sched.jobs.values()] == ["RUNNING", "HELD"]
    assert any("(config) no longer applies" in w for w in batch.store.warnings)


def test_a_suspension_an_older_store_kept_in_a_jobs_extra_reaches_the_core(rig):
    """hpcsched before the core knew of suspension kept it in the job's extra (process
    records, snapshots): loaded now, those are the suspend and resume they were, so the
    job stays S and the planner knows its end moved."""
    from test_commands import submit
    from test_maui_psc import server_pass

    from hpcsched.store.journal import Store
    from hpcsched.store.journaled import Batch
    from hpcsched.store.site import load_site
    home = rig / "home"
    submit("-l", "nodes=1"), submit("-l", "nodes=1")
    server_pass()
    batch = Batch(load_site())
    with batch.open(write=True):  # (the records qsig wrote then)
        t = batch.sched.job(1).start_time
        batch.do("process", t + 10, id=1, set={"suspended_at": t + 10, "pending_signals": [19]})
        batch.do("process", t + 20, id=2, set={"suspended_at": t + 20, "pending_signals": [19]})
        batch.do("process", t + 50, id=2, set={"suspended_for": 30.0, "pending_signals": [19, 18]},
                 clear=["suspended_at"])
    fresh = Batch(load_site())
    with fresh.open(write=False):
        one, two = fresh.sched.job(1), fresh.sched.job(2)
        assert (one.suspended_at, one.suspended_for) == (t + 10, 0.0)
        assert (two.suspended_at, two.suspended_for) == (None, 30.0)
        assert not {"suspended_at", "suspended_for"} & (one.extra.keys() | two.extra.keys())
        state = fresh.sched.to_dict()
        seq, config = fresh.seq, dict(zip(("toml", "overlay"), fresh.source))
    for d in state["jobs"]:  # a snapshot of then: job 1 suspended (twice), job 2 resumed
        d.pop("suspended_at", None), d.pop("suspended_for", None)
        d["extra"].update({1: {"suspended_at": t + 10, "suspended_for": 5.0}, 2: {"suspended_for": 30.0}}[d["id"]])
    with Store(home).locked():
        Store(home).compact(state, seq, config)
    old = Batch(load_site())
    with old.open(write=False):
        one, two = old.sched.job(1), old.sched.job(2)
        assert (one.suspended_at, one.suspended_for, two.suspended_at, two.suspended_for) == (t + 10, 5.0, None, 30.0)
        assert old.sched.runs.paused == {one.id}  # (the planner holds its nodes on)


class Died(BaseException):
    """A writer's death at a chosen point (its lock goes with it, as a dead process's does)."""


@pytest.mark.parametrize("dies_in", ["journal", "log", "cleanup"])
def test_a_writer_that_dies_around_its_accounting_records_loses_none_and_writes_none_twice(
        rig, monkeypatch, dies_in):
    """Records are written ahead (store/accounts.py): a writer dead before its change was
    journaled leaves no record of a change that never stood; dead after, its records are
    written by the next writer, once, even if it had written them itself."""
    import io

    from hpcsched.pbs import accounting, qsub
    from hpcsched.store import accounts
    from hpcsched.store.journal import Store as RealStore

    def submit(name):
        return qsub.submit(["-N", name, "-l", "walltime=60"], stdin=io.StringIO("true\n"), cwd=str(rig), env={})[0]

    def die(*_):
        raise Died
    target = {"journal": (RealStore, "append"), "log": (accounts, "append"), "cleanup": (os, "unlink")}[dies_in]
    real = getattr(*target)
    if dies_in == "cleanup":  # (the lines written, the pending copy not yet removed)
        monkeypatch.setattr(os, "unlink", lambda p, *a, **k: die() if str(p).endswith(accounts.PENDING)
                            else real(p, *a, **k))
    elif dies_in == "journal":  # (the configuration's record first, then the job's: there)
        def append(self, rec, before=None):
            if rec["op"] != "submit":
                return real(self, rec, before)
            before(self.last_seq() + 1)  # (its records written ahead, then the death)
            die()
        monkeypatch.setattr(RealStore, "append", append)
    else:
        monkeypatch.setattr(*target, die)
    with pytest.raises(Died):
        submit("first")
    assert (rig / "home" / accounts.PENDING).exists()
    monkeypatch.setattr(*target, real)
    second = submit("second")
    kept = [(e.kind, e.job_id, e.fields["jobname"]) for e in accounting.read(rig / "home")]
    if dies_in == "journal":  # (job 1 never was: its number goes to the next)
        assert second == "1.headnode" and kept == [("Q", "1.headnode", "second")]
    else:
        assert second == "2.headnode" and kept == [("Q", "1.headnode", "first"), ("Q", "2.headnode", "second")]
    assert not (rig / "home" / accounts.PENDING).exists()


def test_a_large_store_is_compacted_once_per_records_in_proportion_to_its_jobs(rig, monkeypatch):
    """A snapshot costs in proportion to the jobs held, so a writer compacts past
    max(COMPACT_AFTER, COMPACT_PER_JOB x jobs) records: amortised O(1) a record, and a
    100,000-subjob qdel does not write the whole state every thousand deletions."""
    import io

    from test_commands import submit

    from hpcsched.pbs import qctl
    from hpcsched.store import journaled
    home = rig / "home"
    monkeypatch.setattr(journaled, "COMPACT_AFTER", 2)
    jobs = [submit("-h").split(".")[0] for _ in range(12)]
    snapshot = lambda: json.loads((home / STATE).read_text())["journal_seq"]  # noqa: E731
    assert qctl.QRLS([jobs[0]], out=io.StringIO()) == 0  # (a loading writer: 13 records > 6, compacted)
    first = snapshot()
    for jid in jobs[1:7]:  # 6 records: not past half the 12 jobs
        assert qctl.QRLS([jid], out=io.StringIO()) == 0
    assert snapshot() == first
    assert qctl.QRLS([jobs[7]], out=io.StringIO()) == 0  # the 7th is
    assert snapshot() == first + 7


@pytest.mark.parametrize("name", [JOURNAL, STATE])
def test_a_store_file_made_a_directory_is_one_line_from_every_command(rig, name, capsys):
    """journal.jsonl (or state.json) made a directory: `server --once`, qstat and qsub
    each say so in one line and exit 1 (the server printed a traceback and exited 0)."""
    import subprocess
    import sys

    from test_commands import ROOT, submit
    submit("-h")
    home = rig / "home"
    path = home / name
    if path.exists():
        path.unlink()
    path.mkdir()
    env = dict(os.environ, PYTHONPATH=ROOT)
    for argv in ([sys.executable, "-m", "hpcsched", "server", "--once"],
                 [sys.executable, os.path.join(ROOT, "bin", "qstat")],
                 [sys.executable, os.path.join(ROOT, "bin", "qsub"), "-h", "/dev/null"]):
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
        assert done.returncode == 1 and done.stderr.count("\n") == 1, (argv, done.stderr)
        assert f"{name}: cannot read: Is a directory" in done.stderr


def test_an_old_format_record_in_a_store_this_version_wrote_is_refused(rig, capsys):
    """Marking an edited record version 1 (which has no checksum) does not get the edit
    applied: after a version 2 record or under a version 2 snapshot, it is refused."""
    from test_commands import submit

    from hpcsched.store.journaled import Batch
    from hpcsched.store.site import load_site
    submit("-h")
    submit("-h")
    journal = rig / "home" / JOURNAL
    lines = journal.read_text().splitlines()
    edited = json.loads(lines[-1])
    edited.pop("crc")
    edited["v"] = 1
    text = json.dumps(edited).replace('"alice"', '"mallory"')
    assert "mallory" in text
    journal.write_text("\n".join([*lines[:-1], text]) + "\n")
    with pytest.raises(StoreError, match=r"line \d+: a version 1 record in a store written as version 3"):
        with Batch(load_site()).open(write=False):
            pass
    with pytest.raises(StoreError, match=r"(last record|line \d+): a version 1 record (after a version 3 one|in a store written as version 3)"):
        submit("-h")  # (qsub reads the journal's tail alone)


def test_qsub_refuses_a_store_whose_snapshot_is_damaged_as_every_command_does(rig, monkeypatch):
    """A flipped byte in a compacted state.json: qstat refused it, qsub appended to it."""
    import io

    from test_commands import submit

    from hpcsched.pbs import qctl
    from hpcsched.store import journaled
    monkeypatch.setattr(journaled, "COMPACT_AFTER", 1)
    jid = submit("-h").split(".")[0]
    submit("-h")
    assert qctl.QRLS([jid], out=io.StringIO()) == 0  # (a loading writer: compacted)
    state = rig / "home" / STATE
    data = bytearray(state.read_bytes())
    at = data.index(b'"owner":"alice"') + len('"owner":"')
    data[at] = ord("b")
    state.write_bytes(bytes(data))
    journal = (rig / "home" / JOURNAL).read_bytes()
    with pytest.raises(StoreError, match="state.json: checksum does not match"):
        submit("-h")
    assert (rig / "home" / JOURNAL).read_bytes() == journal


def test_an_array_record_of_an_earlier_hpcsched_keeps_its_subjob_ids():
    """A `submit_array` record written before arrays took one job number (no `numbered`)
    replays as then: subjobs first, first + 1, ...; a new one numbers them N[i]."""
    from hpcsched import Job, Request, build, default_config
    from hpcsched.core.jobs import number, subjob_id
    from hpcsched.store.journaled import apply
    sched = build(default_config())
    job = Job(owner="alice", request=Request(nodes=1), walltime=60).to_dict()
    old = apply(sched, {"op": "submit_array", "now": 0.0, "job": job, "first": 5, "indices": [[1, 3]]})
    assert [(j.id, j.array_id, j.array_index) for j in old] == [(5, 5, 1), (6, 5, 2), (7, 5, 3)]
    assert sched.next_id == 8
    new = apply(sched, {"op": "submit_array", "now": 1.0, "job": job, "first": 8, "indices": [[0, 1]],
                        "numbered": True})
    assert [j.id for j in new] == [subjob_id(8, 0), subjob_id(8, 1)] and {number(j.id) for j in new} == {8}
    assert sched.next_id == 9


def test_every_journal_operation_has_one_named_handler():
    """Each record kind the schema knows (but the configuration, which loading reads) is
    carried out by one function of OPERATIONS; an unknown one is one line naming it."""
    from hpcsched import build, default_config
    from hpcsched.store import journaled, schema
    assert set(journaled.OPERATIONS) == set(schema.OPS) - {"config"}
    with pytest.raises(StoreError, match="journal record 7: unknown operation 'frob'"):
        journaled.apply(build(default_config()), {"op": "frob", "now": 0.0, "seq": 7})
