"""`hpcsched store check` and `hpcsched store repair`: a damaged store, found and mended.

check: read everything as any command would (checksums, sequence, each record's schema,
each record applied to the core) and say what is wrong, with the file and the line.

repair: copy state.json, journal.jsonl and journal.tip into backup-YYYYMMDDTHHMMSS/, then
keep every journal record whose line checks out, in sequence order, numbered on and chained
anew, write the tip at its end and a fresh snapshot.  Each line removed (damaged, a second
copy, or malformed) is named with its operation and job, and written to removed.jsonl in
the backup; records the tip says were written but are gone are named by number.  No job id
is ever given out twice: the next id goes past every id a journal line (damaged ones too),
the tip or the accounting log names.  A damaged or missing snapshot is given up only when
the journal still holds every record from the first (no compaction yet, as the tip says),
so nothing is lost by rebuilding from it; otherwise repair refuses and the backup is the
way back.
"""
from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

from ..core.jobs import number
from . import accounts
from .accounts import DIRECTORY
from .journal import JOURNAL, STATE, STORE_VERSION, TIP, Store, StoreError, crc_of, sealed, unsealed, write_atomic
from .journaled import Batch
from .site import Site


def check(site: Site) -> tuple[bool, list[str]]:
    """(sound, lines to print)."""
    batch = Batch(site)
    try:
        with batch.store.locked(exclusive=False):
            batch.load()
    except StoreError as e:
        return False, [str(e)]
    jobs = len(batch.sched.jobs)
    lines = [f"{site.home}: sound: snapshot to record {batch.seq - batch.pending}, {batch.pending} journal "
             f"record(s) after it, {jobs} job(s), next job id {batch.next_id}"]
    lines += [f"warning: {w}" for w in batch.store.warnings]
    return True, lines


def repair(site: Site) -> tuple[bool, list[str]]:
    """(repaired or sound, lines to print).  Nothing is changed when the store is sound."""
    sound, lines = check(site)
    if sound:
        return True, lines
    store = Store(site.home)
    out = [f"damage: {lines[0]}"]
    with store.locked(exclusive=True):
        journal = _lines(site.home / JOURNAL)
        tip = _tip(store)
        whole = tip["snapshot"] == 0 if tip else _first_seq(journal) == 1  # (the journal holds every record)
        try:
            snapshot = store._read_snapshot()
            if snapshot is None and not whole:
                raise StoreError(f"{site.home / STATE} is missing")
        except StoreError as e:
            if not whole:
                return False, out + [f"cannot repair: the snapshot is damaged or gone ({e}) and the journal no "
                                     f"longer holds every record from the first; restore from a backup"]
            snapshot = None
            out.append("the snapshot is damaged; the journal holds every record, so it is rebuilt from them")
        keep, lost = _verifiable(site, store, snapshot, journal)
        backup = _backup(site.home)
        out.append(f"backup: {backup}")
        if lost:
            (backup / "removed.jsonl").write_bytes(b"".join(journal[n - 1] + b"\n" for n, _ in lost))
            out.append(f"removed lines: {backup / 'removed.jsonl'}")
        covered = snapshot.get("journal_seq", 0) if snapshot else 0
        newest = max([covered] + [r["seq"] for r in keep])
        accounts.mend(site.home, newest)  # (accounting lines written ahead of a kept change)
        if snapshot is None and (site.home / STATE).exists():
            (site.home / STATE).unlink()
        _rewrite(store, keep, covered)
        if snapshot is not None:  # (the same snapshot, naming no record of the journal as its last)
            store.compact(snapshot["state"], covered, snapshot.get("config"))
    out.append(f"kept {len(keep)} journal record(s); removed {len(lost)}")
    for line_no, summary in lost[:20]:
        out.append(f"  removed: line {line_no}: {summary}")
    if len(lost) > 20:
        out.append(f"  removed: ... and {len(lost) - 20} more")
    if tip and tip["seq"] > newest:
        out.append(f"  lost: record(s) {newest + 1} to {tip['seq']}: gone from the journal (what they did is unknown)")
    highest = max(_high_water(site.home, journal), tip["next_id"] - 1 if tip else 0)
    batch = Batch(site)
    with batch.open(write=True):
        if highest >= batch.sched.next_id:  # ids a removed record, the tip or the accounting log gave out
            batch.do("next_id", value=highest + 1)
            out.append(f"next job id {highest + 1}: past every id the journal, its tip or the accounting log has seen")
        text, changes = batch.source  # a snapshot of the mended state: its last record is the journal's now
        batch.store.compact(batch.sched.to_dict(), batch.seq, {"toml": text, "overlay": changes})
    sound, after = check(site)
    return sound, out + after


def _tip(store: Store) -> dict | None:
    """The tip as it was, if it can still be read."""
    try:
        return store.read_tip()
    except StoreError:
        return None


def _rewrite(store: Store, keep: list[dict], covered: int) -> None:
    """The journal as the kept records the snapshot does not cover, numbered on from it and
    chained anew, and the tip at its end."""
    out, prev = [], ""
    for seq, rec in enumerate([r for r in keep if r["seq"] > covered], covered + 1):  # (the snapshot has the rest)
        line = sealed(json.dumps({**rec, "v": STORE_VERSION, "seq": seq, "prev": prev}, separators=(",", ":")))
        out.append(line)
        prev = crc_of(line.encode("utf-8"))
    write_atomic(store.home / JOURNAL, "".join(line + "\n" for line in out))
    last = json.loads(out[-1]) if out else {"seq": covered, "next_id": 1}
    (store.home / TIP).unlink(missing_ok=True)  # (made whole again: it may be what was damaged)
    store._write_tip(seq=last["seq"], last=prev, next_id=last.get("next_id", 1), since=covered, snapshot=covered)


def _high_water(home: Path, journal: list[bytes]) -> int:
    """The highest job id any journal line (damaged ones too) or the accounting log (a
    second witness) names: repair never gives one out again."""
    found = [0]
    for line in journal:
        found += [int(m) - 1 for m in re.findall(rb'"next_id":(\d+)', line)]
        found += [number(int(m)) for m in re.findall(rb'"id":(\d+)', line)]  # (a subjob's: its array's)
    for path in sorted((home / DIRECTORY).glob("*")) if (home / DIRECTORY).is_dir() else ():
        try:
            found += [int(m) for m in re.findall(rb"^[^;\n]*;[A-Z];(\d+)", path.read_bytes(), re.M)]
        except OSError:
            continue
    return max(found)


def _lines(path: Path) -> list[bytes]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return lines


def _first_seq(lines: list[bytes]) -> int:
    """The number the journal's first line has or had: told by the first line that still
    checks out, less the lines before it (1 when none reads: nothing is left to keep)."""
    for k, line in enumerate(lines):
        try:
            rec = json.loads(line)
            if isinstance(rec["seq"], int) and (rec.get("v", 1) < 2 or unsealed(line) is not None):
                return rec["seq"] - k
        except (ValueError, KeyError, TypeError):
            continue
    return 1


def _verifiable(site: Site, store: Store, snapshot: dict | None, lines: list[bytes]):
    """(every record whose line checks out, in sequence order, [(line number, what it was)]
    for the rest): a damaged line is removed alone, and with it a second copy of a record
    and one a load would refuse (malformed); one that no longer applies without a removed
    one (a start of a job whose submission was lost) is kept, as a load keeps it, with a warning."""
    batch = Batch(site)
    batch.sched = site.scheduler()
    covered = 0
    if snapshot is not None:
        batch.sched.restore(snapshot["state"])
        covered = batch.seq = snapshot.get("journal_seq", 0)
    found, lost = [], []
    for n, line in enumerate(lines, 1):
        try:
            found.append((store._record(store.home / JOURNAL, n, line, 0), n))
        except StoreError:
            lost.append((n, _summary(line)))
    keep, seen = [], set()
    for rec, n in sorted(found, key=lambda x: (x[0]["seq"], x[1])):
        if rec["seq"] in seen:
            lost.append((n, _summary(lines[n - 1]) + " (a second copy)"))
            continue
        if rec["seq"] > covered:
            try:
                batch._replay([rec])
            except StoreError:
                batch.sched = _replayed(site, snapshot, keep, covered)
                lost.append((n, _summary(lines[n - 1]) + " (malformed)"))
                continue
        seen.add(rec["seq"])
        keep.append(rec)
    return keep, sorted(lost)


def _replayed(site: Site, snapshot: dict | None, keep: list[dict], covered: int):
    """The scheduler as the kept records leave it (after one that failed half way through)."""
    batch = Batch(site)
    batch.sched = site.scheduler()
    if snapshot is not None:
        batch.sched.restore(snapshot["state"])
    batch._replay([r for r in keep if r["seq"] > covered])
    return batch.sched


def _summary(line: bytes) -> str:
    try:
        rec = json.loads(line)
        job = rec.get("id") or (rec.get("job") or {}).get("id") or rec.get("ids")
        return f"record {rec.get('seq')}: {rec.get('op')}" + (f" of job {job}" if job else "")
    except (ValueError, AttributeError, TypeError):
        return f"unreadable: {line[:60]!r}"


def _backup(home: Path) -> Path:
    target = home / f"backup-{time.strftime('%Y%m%dT%H%M%S')}"
    n = 1
    while target.exists():
        n += 1
        target = home / f"backup-{time.strftime('%Y%m%dT%H%M%S')}-{n}"
    target.mkdir()
    for name in (STATE, JOURNAL, TIP):
        if (home / name).exists():
            shutil.copy2(home / name, target / name)
    return target
