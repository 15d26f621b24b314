"""`hpcsched store check` and `hpcsched store repair`: a damaged store, found and mended.

check: read everything as any command would (checksums, sequence, each record's schema,
each record applied to the core) and say what is wrong, with the file and the line.

repair: copy state.json and journal.jsonl into backup-YYYYMMDDTHHMMSS/, then keep the
journal's records up to the first bad one and drop the rest, saying which were lost (their
operations and jobs).  No job id is ever given out twice: the next id goes past every id
a journal line (damaged ones too) or the accounting log names.  A damaged snapshot is given up only when the journal still holds
every record from the first (no compaction yet), so nothing is lost by rebuilding from it;
otherwise repair refuses and the backup is the way back.
"""
from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

from .accounts import DIRECTORY
from .journal import JOURNAL, STATE, STORE_VERSION, Store, StoreError, sealed, write_atomic
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
        try:
            snapshot = store._read_snapshot()
        except StoreError as e:
            first = _first_seq(journal)
            if first != 1:
                return False, out + [f"cannot repair: the snapshot is damaged ({e}) and the journal no longer "
                                     f"holds every record from the first; restore from a backup"]
            snapshot = None
            out.append("the snapshot is damaged; the journal holds every record, so it is rebuilt from them")
        keep, lost = _good_prefix(site, store, snapshot, journal)
        backup = _backup(site.home)
        out.append(f"backup: {backup}")
        if snapshot is None and (site.home / STATE).exists():
            (site.home / STATE).unlink()
        write_atomic(site.home / JOURNAL, "".join(
            sealed(json.dumps({**r, "v": STORE_VERSION}, separators=(",", ":"))) + "\n" for r in keep))
    out.append(f"kept {len(keep)} journal record(s); dropped {len(lost)} from the first bad one on")
    highest = _high_water(site.home, journal)
    batch = Batch(site)
    with batch.open(write=True):
        if highest >= batch.sched.next_id:  # ids a dropped record or the accounting log gave out
            batch.do("next_id", value=highest + 1)
            out.append(f"next job id {highest + 1}: past every id the journal or the accounting log has seen")
    for line_no, summary in lost[:20]:
        out.append(f"  lost: line {line_no}: {summary}")
    if len(lost) > 20:
        out.append(f"  lost: ... and {len(lost) - 20} more")
    sound, after = check(site)
    return sound, out + after


def _high_water(home: Path, journal: list[bytes]) -> int:
    """The highest job id any journal line (damaged ones too) or the accounting log (a
    second witness) names: repair never gives one out again."""
    found = [0]
    for line in journal:
        found += [int(m) - 1 for m in re.findall(rb'"next_id":(\d+)', line)]
        found += [int(m) for m in re.findall(rb'"id":(\d+)', line)]
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


def _first_seq(lines: list[bytes]) -> int | None:
    try:
        return json.loads(lines[0])["seq"] if lines else 1
    except (ValueError, KeyError, TypeError):
        return None


def _good_prefix(site: Site, store: Store, snapshot: dict | None, lines: list[bytes]):
    """(records up to the first bad line, [(line number, what it was)] from it on): each
    line read and applied in turn, as a load would."""
    batch = Batch(site)
    batch.sched = site.scheduler()
    covered = 0
    if snapshot is not None:
        batch.sched.restore(snapshot["state"])
        covered = batch.seq = snapshot.get("journal_seq", 0)
    keep, last = [], 0
    for n, line in enumerate(lines, 1):
        try:
            rec = store._record(store.home / JOURNAL, n, line, last)
            if rec["seq"] > covered:
                batch._replay([rec])
        except StoreError:
            return keep, [(k, _summary(lines[k - 1])) for k in range(n, len(lines) + 1)]
        last = rec["seq"]
        keep.append(rec)
    return keep, []


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
    for name in (STATE, JOURNAL):
        if (home / name).exists():
            shutil.copy2(home / name, target / name)
    return target
