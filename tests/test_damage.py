"""The damage suite: a small store hurt in every way its files can be (cut at every byte,
every byte flipped, each record dropped, doubled or moved, each file deleted), and its
commands cut short at every write (a full disk, a kill -9).

Each damage must be noticed by `store check` and refused by every writer (the loading
ones and qsub's constant-time path) without a byte changed; `store repair` must keep
every record whose line still checks out and never hand out an id given out before; a
full disk or a crash must lose no acknowledged change, invent none and start no job twice.
The counts are printed (pytest -s) for the record.
"""
import contextlib
import errno
import io
import json
import os
import shutil

import pytest

from hpcsched.pbs import qctl, qsub
from hpcsched.pbs.errors import CommandError
from hpcsched.store import repair
from hpcsched.store.journal import JOURNAL, STATE, TIP, StoreError, unsealed
from hpcsched.store.journaled import Batch
from hpcsched.store.site import init_site, load_site

CONFIG = """server_name = "vm"
flavor = "torque"
backfill = "easy"
default_queue = "batch"
managers = ["root"]
[priority]
policy = "fifo"
[[nodes]]
names = "n[1-2]"
[queues.batch]
"""
TRUTH_IDS = {1, 2, 3, 4}  # the ids the store below gave out


def _qsub(*args) -> int:
    """qsub's job number (the command raises its one-line error on a refusal)."""
    return int(qsub.submit(list(args), stdin=io.StringIO("true\n"), cwd="/", env={})[0].split(".")[0])


def _pass(now=None):
    batch = Batch(load_site())
    with batch.open(write=True):
        return batch.do("pass", now)


def _build(home, compacted=False):
    """Four jobs: 1 and 2 started by a pass, 3 deleted, 4 held; optionally compacted."""
    init_site(home, nodes=2, cores=1)
    (home / "config.toml").write_text(CONFIG)
    for name in ("a", "b", "c"):
        _qsub("-N", name, "-l", "walltime=60")
    _pass(1000.0)
    qctl.QDEL(["3"])
    _qsub("-N", "d", "-h")
    if compacted:
        batch = Batch(load_site())
        with batch.open(write=True):
            text, changes = batch.source
            batch.store.compact(batch.sched.to_dict(), batch.seq, {"toml": text, "overlay": changes})
        _qsub("-N", "e", "-h")  # (and one record after the snapshot)


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """A pristine store, journal only and compacted, built once; each case copies one."""
    made = {}
    saved = {k: os.environ.get(k) for k in ("HPCSCHED_HOME", "HPCSCHED_USER", "HPCSCHED_FLAVOR")}
    os.environ.pop("HPCSCHED_FLAVOR", None)
    os.environ["HPCSCHED_USER"] = "alice"
    try:
        for kind in ("journal", "compacted"):
            home = tmp_path_factory.mktemp(kind) / "home"
            os.environ["HPCSCHED_HOME"] = str(home)
            _build(home, compacted=kind == "compacted")
            made[kind] = home
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return made


@pytest.fixture
def case(tmp_path, monkeypatch):
    """A fresh copy of a pristine store for each damage, as $HPCSCHED_HOME."""
    monkeypatch.setenv("HPCSCHED_USER", "alice")
    monkeypatch.delenv("HPCSCHED_FLAVOR", raising=False)
    n = [0]

    def copy(pristine):
        n[0] += 1
        home = tmp_path / f"c{n[0]}"
        shutil.copytree(pristine, home)
        monkeypatch.setenv("HPCSCHED_HOME", str(home))
        return home
    return copy


def _files(home):
    return {p.name: p.read_bytes() for p in home.iterdir() if p.is_file() and p.name != "lock"}


def _refused(home) -> bool:
    """Noticed by `store check`, refused by a loading writer and by qsub's constant-time
    path, and nothing written."""
    site = load_site(home)
    before = _files(home)
    noticed = not repair.check(site)[0]
    refused = 0
    for load in (True, False):
        try:
            with Batch(site).open(write=True, load=load) as batch:
                batch.do("next_id", value=1) if load else None
        except StoreError:
            refused += 1
    return noticed and refused == 2 and _files(home) == before


def _content(line: bytes) -> str | None:
    """A record's content, without what repair renumbers (None: the line does not check out)."""
    if unsealed(line) is None:
        return None
    rec = json.loads(line)
    return json.dumps({k: v for k, v in rec.items() if k not in ("seq", "prev", "crc", "v")}, sort_keys=True)


def _repaired(home, damaged_journal: bytes) -> tuple[bool, bool]:
    """(no id reused, every verifiable record kept) after `store repair`."""
    site = load_site(home)
    ok, _ = repair.repair(site)
    assert ok, repair.check(site)[1]
    kept = {_content(line) for line in (home / JOURNAL).read_bytes().splitlines()}
    verifiable = {c for c in map(_content, damaged_journal.splitlines()) if c is not None}
    batch = Batch(site)
    with batch.open(write=False):
        snapshot_ids = set(batch.sched.jobs)
    covered = json.loads((home / STATE).read_text())["journal_seq"] if (home / STATE).exists() else 0
    lost = {c for c in verifiable - kept if json.loads(c).get("op") == "submit"
            and json.loads(c)["job"]["id"] not in snapshot_ids}  # (a covered record lives on in the snapshot)
    lost |= {c for c in verifiable - kept if json.loads(c).get("op") != "submit"} if not covered else set()
    new = _qsub("-N", "after")
    return new > max(TRUTH_IDS | snapshot_ids), not lost


def _tally(name, cases):
    """Print the counts; every case noticed and refused, every repair sound."""
    noticed = sum(1 for c in cases if c[0])
    repaired = [c for c in cases if c[1] is not None]
    print(f"\n{name}: {len(cases)} cases, {noticed} noticed and refused; {len(repaired)} repaired, "
          f"{sum(1 for c in repaired if c[1])} without an id reused, "
          f"{sum(1 for c in repaired if c[2])} with every verifiable record kept")
    assert noticed == len(cases) and all(c[1] and c[2] for c in repaired)


@pytest.mark.parametrize("kind", ["journal", "compacted"])
def test_a_cut_at_every_byte_of_the_journal_is_noticed_and_repaired(stores, case, kind):
    journal = (stores[kind] / JOURNAL).read_bytes()
    ends = {i + 1 for i, b in enumerate(journal) if b == ord("\n")}
    cases = []
    for cut in range(len(journal)):
        home = case(stores[kind])
        (home / JOURNAL).write_bytes(journal[:cut])
        noticed = _refused(home)
        # repair at each line's end, just after it and half way through each line
        repairs = cut in ends or cut - 1 in ends or cut == 0 or cut % 97 == 0
        cases.append((noticed, *(_repaired(home, journal[:cut]) if repairs else (None, None))))
        shutil.rmtree(home)
    _tally(f"cut {kind}", cases)


@pytest.mark.parametrize("name", [JOURNAL, TIP, STATE])
def test_every_byte_flipped_is_noticed_and_repaired(stores, case, name):
    kind = "compacted" if name == STATE else "journal"
    data = (stores[kind] / name).read_bytes()
    cases = []
    for i in range(len(data)):
        home = case(stores[kind])
        damaged = data[:i] + bytes([data[i] ^ 1]) + data[i + 1:]
        (home / name).write_bytes(damaged)
        noticed = _refused(home)
        repairs = name != STATE and i % 13 == 0
        cases.append((noticed, *(_repaired(home, (home / JOURNAL).read_bytes()) if repairs else (None, None))))
        if name == STATE and i % 13 == 0:  # (a damaged snapshot after compaction: the backup is the way back)
            before = _files(home)
            assert not repair.repair(load_site(home))[0] and _files(home) == before
        shutil.rmtree(home)
    _tally(f"flip {name}", cases)


@pytest.mark.parametrize("kind", ["journal", "compacted"])
def test_each_record_dropped_doubled_or_moved_and_each_file_deleted_is_noticed(stores, case, kind):
    journal = (stores[kind] / JOURNAL).read_bytes()
    lines = journal.splitlines(keepends=True)
    damages = []
    for i in range(len(lines)):
        damages.append((f"drop {i + 1}", {JOURNAL: b"".join(lines[:i] + lines[i + 1:])}))
        damages.append((f"double {i + 1}", {JOURNAL: b"".join(lines[:i + 1] + lines[i:])}))
        if i + 1 < len(lines):
            swapped = lines[:i] + [lines[i + 1], lines[i]] + lines[i + 2:]
            damages.append((f"swap {i + 1}", {JOURNAL: b"".join(swapped)}))
    damages += [(f"delete {name}", {name: None}) for name in (JOURNAL, TIP, STATE)
                if (stores[kind] / name).exists()]
    damages.append(("empty journal", {JOURNAL: b""}))
    cases = []
    for what, change in damages:
        home = case(stores[kind])
        for name, data in change.items():
            (home / name).unlink() if data is None else (home / name).write_bytes(data)
        noticed = _refused(home)
        assert noticed, what
        if what == f"delete {STATE}":  # (the journal no longer holds every record: not repaired)
            assert not repair.repair(load_site(home))[0]
            cases.append((noticed, None, None))
            continue
        cases.append((noticed, *_repaired(home, change.get(JOURNAL, journal) or b"")))
        assert cases[-1][1] and cases[-1][2], what
    _tally(f"records {kind}", cases)


class _Crash(BaseException):
    """A kill -9 in the middle of a write: nothing after it runs."""


def _script():
    """The commands a site runs, each an acknowledged change or a refusal."""
    done = []
    steps = [lambda: _qsub("-N", "a", "-l", "walltime=60"), lambda: _qsub("-N", "b", "-l", "walltime=60"),
             lambda: [s.job_id for s in _pass(1000.0).started], lambda: qctl.QDEL(["2"]),
             lambda: _qsub("-N", "c", "-h"), lambda: [s.job_id for s in _pass(2000.0).started]]
    for step in steps:
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                done.append(step())
        except (StoreError, CommandError):
            done.append(None)  # (refused: nothing saved)
    return done


@pytest.mark.parametrize("how", ["full", "crash"])
def test_a_full_disk_or_a_crash_at_each_write_loses_invents_and_repeats_nothing(tmp_path, monkeypatch, how):
    """Every write the store makes (journal, tip, snapshot, accounting) fails in turn,
    a full disk taking half of it first and refusing all later writes, or the process dying
    there: afterwards the store is sound, holds every acknowledged job and start and no
    other, and hands out no id twice."""
    from hpcsched.store import journaled
    monkeypatch.setenv("HPCSCHED_USER", "alice")
    monkeypatch.delenv("HPCSCHED_FLAVOR", raising=False)
    monkeypatch.setattr(journaled, "COMPACT_AFTER", 3)  # (snapshots written on the way too)
    real_write, real_pwrite = os.write, os.pwrite
    cases = counted = 0
    k = 0
    while True:
        k += 1
        home = tmp_path / f"k{k}"
        init_site(home, nodes=2, cores=1)
        (home / "config.toml").write_text(CONFIG)
        monkeypatch.setenv("HPCSCHED_HOME", str(home))
        seen = [0]

        def failing(fd, data, *at, real=None):
            try:
                ours = os.readlink(f"/proc/self/fd/{fd}").startswith(str(home))
            except OSError:
                ours = False
            if not ours:
                return real(fd, data, *at)
            seen[0] += 1
            if seen[0] < k:
                return real(fd, data, *at)
            if seen[0] == k and len(data) > 1:
                real(fd, bytes(data[:len(data) // 2]), *at)  # (the part a disk took, or the kill left)
            if how == "crash":
                raise _Crash()
            raise OSError(errno.ENOSPC, "No space left on device")
        monkeypatch.setattr(os, "write", lambda fd, data: failing(fd, data, real=real_write))
        # (the tip's in-place write needs no block and is one sector: it is whole or not
        # made, never refused for space)
        monkeypatch.setattr(os, "pwrite", lambda fd, data, at: real_pwrite(fd, data, at) if how == "full" else
                            failing(fd, data[:0] if seen[0] + 1 == k else data, at, real=real_pwrite))
        done = []
        with contextlib.suppress(_Crash):
            done = _script()
        monkeypatch.setattr(os, "write", real_write)
        monkeypatch.setattr(os, "pwrite", real_pwrite)
        if seen[0] < k:  # every write of the script has had its turn
            break
        cases += 1
        site = load_site(home)
        sound, lines = repair.check(site)
        assert sound, (k, lines)
        batch = Batch(site)
        with batch.open(write=False):
            jobs = dict(batch.sched.jobs)
        acknowledged = {d for d in done[:2] + done[4:5] if isinstance(d, int)}
        started = {j for d in (done[2:3] + done[5:6]) if isinstance(d, list) for j in d}
        assert acknowledged <= set(jobs), (k, done)  # none lost
        assert set(jobs) <= {1, 2, 3}, (k, done)  # none invented
        assert all(jobs[j].run_count <= 1 for j in jobs)  # none started twice
        assert all(jobs[j].start_time is not None for j in started), (k, done)
        assert _qsub("-N", "after") > max(set(jobs) | acknowledged | {0})  # no id again
        counted += 1
    print(f"\n{how} at each write: {cases} cases, {counted} sound with nothing lost, invented or repeated")
    assert cases > 10 and counted == cases
