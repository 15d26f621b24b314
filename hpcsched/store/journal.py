"""The state store: one directory, JSON on disk, every change atomic and locked.

    $HPCSCHED_HOME, else $XDG_DATA_HOME/hpcsched, else ~/.local/share/hpcsched
        state.json     the last snapshot (a Scheduler.to_dict() and the journal seq it covers)
        journal.jsonl  one JSON record per change since, appended and fsync'd (a command
                       acting on many jobs syncs its appends once, at its end)
        journal.tip   how far the journal was written: the newest durable record's number,
                       its checksum and the job-id high-water mark after it
        lock           flock(2) target: writers hold it exclusively, readers shared

Appending costs the same whatever the store holds: the next sequence number is read from
the journal's last line, not from the whole file.  `compact` writes a new snapshot
(temporary file, fsync, rename, fsync of the directory) and then a journal holding only
what the snapshot does not cover; a crash between the two leaves records the snapshot
already covers, which readers skip by sequence number.  A torn last line (a crash in the
middle of an append that was never acknowledged) is dropped with a warning; any other
damage is an error, and nothing is ever silently replaced by an empty state.

Each journal line and the snapshot carry a CRC-32 of their own text without it (`"crc"`,
last in a journal line, before "state" in the snapshot), journal lines number 1, 2, 3, ... with
no gap, and each line names the checksum of the one before (`"prev"`): a flipped bit, an
edited, deleted, replaced or moved line is reported with the file and the line.  What no line
can show, lines missing at the end or a journal emptied or removed, the tip shows: it is
written in place (one sector, no new block) after each fsync of the journal, so it never runs
ahead of what is durable, and created before the first record it covers; a journal that ends
before the tip's record has lost acknowledged work, and is an error that names it.
Version 1 (no checksums) and 2 (no chain, no tip) stores are read as they are; writes are
version 3, and once a store holds version 3 an older record after it is refused.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import zlib
from pathlib import Path

from ..core.errors import SchedulerError
from .layout import home

STORE_VERSION = 3
READS = (1, 2, 3)  # 1: the same records without checksums; 2: without the chain and the tip
STATE, JOURNAL, LOCK, TIP = "state.json", "journal.jsonl", "lock", "journal.tip"
TIP_SIZE = 128  # bytes: the tip is rewritten in place, within one sector
_CRC = b',"crc":"'  # a sealed line ends ,"crc":"xxxxxxxx"} (18 bytes)
_HEAD = re.compile(rb'\{"v":(\d+),"seq":(\d+),(?:"prev":"([0-9a-f]*)",)?')  # how a line of version 2 or 3 begins


def sealed(body: str) -> str:
    """A JSON object's text with its CRC-32 as its last member."""
    return f'{body[:-1]},"crc":"{zlib.crc32(body.encode("utf-8")):08x}"}}'


def unsealed(line: bytes) -> bytes | None:
    """The text a sealed line's CRC covers, or None if the CRC does not match (or is absent)."""
    if line[-18:-10] != _CRC or line[-2:] != b'"}':
        return None
    body = line[:-18] + b"}"
    return body if line[-10:-2] == b"%08x" % zlib.crc32(body) else None  # (as written: a flipped case is damage too)


def crc_of(line: bytes) -> str:
    """A sealed line's own checksum ("" for an unsealed, version 1 line)."""
    return line[-10:-2].decode("ascii", "replace") if line[-18:-10] == _CRC else ""


def _version(line: bytes) -> int:
    """A journal line's store version (0: not a record)."""
    try:
        rec = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return 0
    return rec.get("v", 0) if isinstance(rec, dict) and isinstance(rec.get("v"), int) else 0


def _older(path: Path, n: int, version: int, floor: int) -> str:
    return (f"{path}: line {n}: a version {version} record in a store written as version {floor} "
            f"(edited: it would skip its checksum); left as it is")


def _torn(path: Path, n: int | None, tail: bytes) -> None:
    """A last line without its newline is an append a crash cut short, unless all but its
    last byte is a whole record: then that byte was its newline, and it is damage."""
    if tail[-1:] != b"\n" and unsealed(tail[:-1]) is not None:
        where = f"line {n}" if n else "last line"
        raise StoreError(f"{path}: {where}: its end of line is damaged; left as it is")


def is_source(v) -> bool:
    """A journaled configuration: {"toml": config.toml's text, "overlay": qmgr's changes}."""
    return (isinstance(v, dict) and isinstance(v.get("toml"), str) and isinstance(v.get("overlay"), dict)
            and isinstance(v["overlay"].get("server"), dict) and isinstance(v["overlay"].get("queues"), dict))


class StoreError(SchedulerError):
    """The store cannot be read or written as it is; the message says which file and why."""


def default_home() -> Path:
    """The store directory: $HPCSCHED_HOME, else a per-user directory that needs no root."""
    return Path(home())


def write_all(fd: int, data: bytes) -> None:
    """Write all of `data` (a disk that fills takes part of a write, then refuses the rest:
    OSError, after the part)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def write_atomic(path: Path, text: str) -> None:
    """Replace `path` with `text` so that a crash leaves either the old or the new file.
    The file is its owner's alone (0600): the store holds scripts and environments."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        write_all(fd, text.encode("utf-8"))
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)  # (a full disk: nothing half-written is left behind)
        raise
    os.close(fd)
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Store:
    def __init__(self, home: str | os.PathLike | None = None):
        self.home = Path(home) if home is not None else default_home()
        self.warnings: list[str] = []
        self.deferred: bool | None = None  # inside `one_sync`: True once an append waits for its fsync
        self.untipped: dict | None = None  # the newest append's seq, last and next_id, for the tip
        self.last_line: bytes | None = None  # the newest record's line, as last_record read it
        self.tip = {"seq": 0, "last": "", "next_id": 1, "since": 0, "snapshot": 0}  # as last read or written
        self.has_tip = False  # the tip file exists, as read_tip last found (or _write_tip made it)

    # --- locking ---------------------------------------------------------------------
    @contextlib.contextmanager
    def locked(self, exclusive: bool = True):
        """Hold the store's lock (exclusive for writers, shared for readers)."""
        try:
            self.home.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.home / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as e:
            raise StoreError(f"{self.home}: cannot open the store: {e.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            yield self
        finally:
            os.close(fd)  # closing releases the lock

    # --- reading -----------------------------------------------------------------------
    def read(self) -> tuple[dict | None, list[dict]]:
        """(snapshot or None, journal records it does not cover), in order.  Call it with
        the lock held."""
        snapshot = self._read_snapshot()
        covered = snapshot.get("journal_seq", 0) if snapshot else 0
        journal, lines = self._read_journal(snapshot["store_version"] if snapshot else 1, covered)
        if journal and journal[0]["seq"] > covered + 1:  # the journal's first lines are gone
            raise StoreError(f"{self.home / JOURNAL}: line 1: sequence {journal[0]['seq']} after the snapshot's "
                             f"{covered}: {journal[0]['seq'] - covered - 1} record(s) missing")
        crcs = {r["seq"]: crc_of(line) for r, line in zip(journal, lines)}
        if snapshot and snapshot.get("journal_last"):
            self._covered(covered, snapshot["journal_last"], crcs.get(covered))
        newest = max(covered, journal[-1]["seq"] if journal else 0)
        written = [(covered, snapshot["store_version"], STATE)] if snapshot else []
        self._against_tip(newest, crcs.get,
                          written + [(r["seq"], r["v"], f"{JOURNAL}: line {n}") for n, r in enumerate(journal, 1)],
                          snapshot is not None)
        return snapshot, [r for r in journal if r["seq"] > covered]

    def _covered(self, covered: int, expected: str, found: str | None) -> None:
        """The journal still holds the snapshot's last record (compaction keeps it), as written."""
        if found != expected:
            what = "is missing" if found is None else "is not the one the snapshot covers"
            raise StoreError(f"{self.home / JOURNAL}: record {covered}, the snapshot's last, {what} "
                             f"(removed or replaced); left as it is")

    def read_tip(self) -> dict | None:
        """The tip, or None if there is none: {"seq": the newest durable record, "last": its
        checksum, "next_id": the job-id high-water mark after it, "since": the newest record
        an older version wrote, "snapshot": the record the newest snapshot covers (0: none)}."""
        path = self.home / TIP
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            self.has_tip = False
            return None
        except OSError as e:
            raise StoreError(f"{path}: cannot read: {e.strerror}") from None
        body = unsealed(data.rstrip(b" \n"))
        try:
            tip = json.loads(body) if body is not None else None
        except ValueError:
            tip = None
        if not (isinstance(tip, dict) and all(type(tip.get(k)) is t for k, t in
                                               (("seq", int), ("last", str), ("next_id", int), ("since", int),
                                                ("snapshot", int)))):
            raise StoreError(f"{path}: damaged (it says how far the journal was written); left as it is "
                             f"(`hpcsched store repair` writes it again)")
        self.tip, self.has_tip = tip, True
        return tip

    def _against_tip(self, newest: int, crc_at, written: list[tuple[int, int, str]], snapshot: bool) -> None:
        """The store, ending at record `newest` (`crc_at(seq)`: a record's checksum, None
        if not at hand), holds every record the tip says was written, and that one as
        written, and a snapshot if one was written; `written`: (record, version, where) of
        what was read, each past the tip's `since` of this version (an older one there was
        edited to skip its checksum)."""
        tip = self.read_tip()
        if tip is None:
            if any(v >= 3 for _, v, _ in written):  # (made before the first version 3 record)
                raise StoreError(f"{self.home / TIP}: missing, so lost records could go unnoticed; "
                                 f"left as it is (`hpcsched store repair` writes it again)")
            return
        for seq, v, where in written:
            if seq > tip["since"] and v < 3:
                raise StoreError(f"{self.home / where}: a version {v} record in a store written as version 3 "
                                 f"(edited: it would skip its checksum); left as it is")
        if tip["snapshot"] and not snapshot:
            raise StoreError(f"{self.home / STATE}: missing (a snapshot to record {tip['snapshot']} was written, "
                             f"as {TIP} says); left as it is")
        if tip["seq"] > newest:
            raise StoreError(f"{self.home / JOURNAL}: record(s) {newest + 1} to {tip['seq']} are missing "
                             f"(written and acknowledged, as {TIP} says; the store ends at {newest}); "
                             f"left as it is")
        crc = crc_at(tip["seq"])
        if crc and tip["last"] and crc != tip["last"]:
            raise StoreError(f"{self.home / JOURNAL}: record {tip['seq']} is not the one written ({TIP} "
                             f"has another checksum for it: replaced or edited); left as it is")

    def _read_snapshot(self) -> dict | None:
        path = self.home / STATE
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as e:
            raise StoreError(f"{path}: cannot read: {e.strerror}") from None
        except UnicodeDecodeError as e:
            raise StoreError(f"{path}: corrupt (not UTF-8 at byte {e.start}); left as it is") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise StoreError(f"{path}: corrupt or truncated ({e.msg} at line {e.lineno}); "
                             f"left as it is") from None
        if not isinstance(data, dict) or "store_version" not in data:
            raise StoreError(f"{path}: not an hpcsched state file")
        if data["store_version"] not in READS:
            raise StoreError(f"{path}: store version {data['store_version']!r} is not supported "
                             f"(this hpcsched reads versions {READS[0]} to {READS[-1]})")
        if data["store_version"] >= 2:
            at = text.find('"crc":"')  # the CRC covers the file's text without its own member
            body = text[:at] + text[at + 17:] if at >= 0 else ""
            if data.get("crc") != f"{zlib.crc32(body.encode('utf-8')):08x}":
                raise StoreError(f"{path}: checksum does not match (the file was damaged or edited); left as it is")
        if not isinstance(data.get("journal_seq", 0), int) or not isinstance(data.get("state"), dict) \
                or not isinstance(data.get("journal_last", ""), str):
            raise StoreError(f"{path}: not an hpcsched state file (journal_seq or state malformed)")
        if "config" in data and not is_source(data["config"]):
            raise StoreError(f"{path}: not an hpcsched state file (config malformed)")
        return data

    def _read_journal(self, floor: int = 1, covered: int = 0) -> tuple[list[dict], list[bytes]]:
        """The journal's records, checked, and their lines; `floor`: the oldest version a
        record after `covered` may have (the snapshot's: a store this version wrote holds
        no older record after its newer ones, so an old-format line there is an edit, refused)."""
        path = self.home / JOURNAL
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return [], []
        except OSError as e:  # (made a directory, unreadable)
            raise StoreError(f"{path}: cannot read: {e.strerror}") from None
        lines = data.split(b"\n")
        tail = lines.pop()  # b"" when the file ends with a newline
        if tail:
            _torn(path, len(lines) + 1, tail)
            self.warnings.append(f"{path}: dropped a torn last record (an append that never finished)")
        records, last, prev, inner = [], 0, None, 1
        for n, line in enumerate(lines, 1):
            rec = self._record(path, n, line, last, inner, prev)
            if rec["v"] < floor and rec["seq"] > covered:  # (a covered one was copied by compaction as it was)
                raise StoreError(_older(path, n, rec["v"], floor))
            last, prev, inner = rec["seq"], crc_of(line), max(inner, rec["v"])
            records.append(rec)
        return records, lines

    @staticmethod
    def _record(path: Path, n: int, line: bytes, last: int, floor: int = 1, prev: str | None = None) -> dict:
        """Journal line `n`, checked: a record of a version we read and not older than
        `floor`, its checksum right, numbered right after `last` (any number when `last` is
        0: the journal's first) and, from version 3, naming `prev` as the checksum before
        it (None: the line before it is not at hand)."""
        try:
            rec = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise StoreError(f"{path}: line {n} is corrupt; left as it is") from None
        if not isinstance(rec, dict) or not isinstance(rec.get("seq"), int) or isinstance(rec["seq"], bool):
            raise StoreError(f"{path}: line {n} is not a journal record")
        if rec.get("v") not in READS:
            raise StoreError(f"{path}: line {n} has store version {rec.get('v')!r}, "
                             f"this hpcsched reads versions {READS[0]} to {READS[-1]}")
        if rec["v"] < floor:
            raise StoreError(_older(path, n, rec["v"], floor))
        if rec["v"] >= 2 and unsealed(line) is None:
            raise StoreError(f"{path}: line {n}: checksum does not match (damaged or edited); left as it is")
        if rec["seq"] <= last:
            raise StoreError(f"{path}: line {n}: sequence {rec['seq']} after {last}")
        if last and rec["seq"] != last + 1:
            raise StoreError(f"{path}: line {n}: sequence {rec['seq']} after {last}: "
                             f"{rec['seq'] - last - 1} record(s) missing")
        if rec["v"] >= 3 and prev is not None and rec.get("prev") != prev:
            raise StoreError(f"{path}: line {n}: record {rec['seq']} does not follow the line before it "
                             f"(a record between them was removed or replaced); left as it is")
        rec.pop("crc", None)
        rec.pop("prev", None)
        return rec

    # --- reading again, in a long-lived process ----------------------------------------------
    def mark(self) -> tuple:
        """Where the files stand now (snapshot identity, journal identity and length), for
        `read_since`.  Call it with the lock held, right after reading or writing."""
        def ident(name: str) -> tuple:
            try:
                st = os.stat(self.home / name)
            except FileNotFoundError:
                return (None, None, 0)
            return (st.st_ino, st.st_mtime_ns, st.st_size)
        return ident(STATE), ident(JOURNAL)

    def read_since(self, mark: tuple, last: int) -> list[dict] | None:
        """The journal records appended after `mark` (sequence numbers after `last`), or
        None when the files changed otherwise (compaction, a replaced or damaged file):
        the caller then reads everything again with `read`, which reports any damage."""
        snapshot, (ino, _, size) = mark
        now_snapshot, (now_ino, _, now_size) = self.mark()
        if now_snapshot != snapshot or now_ino != ino and ino is not None or now_size < size:
            return None
        if now_size == size:
            return []
        path = self.home / JOURNAL
        with open(path, "rb") as f:
            f.seek(size)
            data = f.read(now_size - size)
        if not data.endswith(b"\n"):
            return None
        records = []
        try:
            for line in data[:-1].split(b"\n"):
                rec = self._record(path, 0, line, last, STORE_VERSION)  # (appended by this version)
                last = rec["seq"]
                records.append(rec)
        except StoreError:
            return None
        return records

    def last_seq(self) -> int:
        """The newest sequence number, from the journal's tail (or the snapshot's)."""
        return self.last_record()["seq"]

    def last_record(self) -> dict:
        """The newest journal record, read from the file's tail and checked against the
        tip; for an empty journal a stand-in made from the snapshot ({"seq": 0} for an
        empty store)."""
        record, line = self._tail()
        self._against_tip(record["seq"], lambda seq: crc_of(line) if line and seq == record["seq"] else None,
                          [(record["seq"], record.get("v", 1), f"{JOURNAL}: last record")] if line else
                          [(record["seq"], record.get("v", 1), STATE)] if "v" in record else [],
                          os.path.exists(self.home / STATE))
        self.last_line = line
        return record

    def _tail(self) -> tuple[dict, bytes | None]:
        """(the newest record, its line); (a stand-in, None) for an empty journal."""
        path = self.home / JOURNAL
        try:
            with open(path, "rb") as f:
                size = f.seek(0, os.SEEK_END)
                back = 4096
                while True:  # widen the window until it holds a whole last line
                    start = max(0, size - back)
                    f.seek(start)
                    chunk = f.read(size - start)
                    lines = chunk.split(b"\n")
                    lines.pop()  # after the final newline (append drops a torn tail first)
                    if len(lines) > 1 or start == 0:
                        break
                    back *= 4
        except FileNotFoundError:
            lines = []
        except OSError as e:  # (made a directory, unreadable)
            raise StoreError(f"{path}: cannot read: {e.strerror}") from None
        if lines and lines[-1].strip():
            try:
                record = json.loads(lines[-1])
                int(record["seq"])
            except (ValueError, KeyError, TypeError):
                raise StoreError(f"{path}: last record is corrupt; left as it is") from None
            if record.get("v", 1) >= 2 and unsealed(lines[-1]) is None:
                raise StoreError(f"{path}: last record: checksum does not match (damaged or edited); "
                                 f"left as it is")
            if len(lines) > 1 and record.get("v", 1) < _version(lines[-2]):
                raise StoreError(f"{path}: last record: a version {record.get('v')} record after a version "
                                 f"{_version(lines[-2])} one (edited: it would skip its checksum); left as it is")
            if record.get("v", 1) >= 3 and len(lines) > 1 and record.get("prev") != crc_of(lines[-2]):
                raise StoreError(f"{path}: last record does not follow the line before it (a record between "
                                 f"them was removed or replaced); left as it is")
            return record, lines[-1]
        snapshot = self._read_snapshot()
        if not snapshot:
            return {"seq": 0}, None
        return {"seq": snapshot.get("journal_seq", 0), "next_id": snapshot.get("state", {}).get("next_id", 1),
                "v": snapshot["store_version"]}, None

    def check(self) -> None:
        """A look at the snapshot and the journal without parsing them (CRCs over the bytes,
        some milliseconds for a 100,000-job state), so a writer that does not load
        everything (qsub) refuses a damaged store as the rest do."""
        self._check_journal(self._check_snapshot())

    def _check_snapshot(self) -> tuple[int, str]:
        """`check` of the snapshot; (the journal record it covers, that record's checksum):
        (0, "") for none."""
        path = self.home / STATE
        try:
            with open(path, "rb") as f:
                data = f.read()
            head, tail = data[:128], data[-16:].rstrip()
        except FileNotFoundError:
            return 0, ""
        except OSError as e:
            raise StoreError(f"{path}: cannot read: {e.strerror}") from None
        prefix = b'{"store_version":'
        if not head.startswith(prefix):
            raise StoreError(f"{path}: not an hpcsched state file")
        version = head[len(prefix):].split(b",")[0]
        if version not in [str(v).encode() for v in READS]:
            raise StoreError(f"{path}: store version {version.decode(errors='replace')} is not supported "
                             f"(this hpcsched reads versions {READS[0]} to {READS[-1]})")
        if not tail.endswith(b"}"):
            raise StoreError(f"{path}: corrupt or truncated (it does not end its JSON); left as it is")
        if version != b"1":  # (version 1 snapshots have no checksum)
            at = data.find(b'"crc":"')
            if at < 0 or data[at + 15:at + 17] != b'",' or \
                    data[at + 7:at + 15] != b"%08x" % zlib.crc32(data[:at] + data[at + 17:]):
                raise StoreError(f"{path}: checksum does not match (the file was damaged or edited); left as it is")
        m = re.match(rb'\{"store_version":\d+,"journal_seq":(\d+),(?:"journal_last":"([0-9a-f]*)",)?', head)
        if m is None:
            snapshot = self._read_snapshot()  # (raises, saying what is wrong)
            return snapshot["journal_seq"], snapshot.get("journal_last", "")
        return int(m[1]), (m[2] or b"").decode()

    def _check_journal(self, covered: tuple[int, str]) -> None:
        """Every journal line's checksum, number and chain, from the bytes (a line of a
        version before 2, or one that fails, is read in full: its error is the reader's)."""
        path = self.home / JOURNAL
        covered, expected = covered
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            data = b""
        except OSError as e:
            raise StoreError(f"{path}: cannot read: {e.strerror}") from None
        lines = data.split(b"\n")
        lines.pop()  # (a torn tail: the append drops it)
        last, prev, floor, found = 0, None, 1, None
        for n, line in enumerate(lines, 1):
            m = _HEAD.match(line)
            v = int(m[1]) if m else 0
            if not (m and v >= 2 and v in READS and v >= floor and unsealed(line) is not None
                    and (not last or int(m[2]) == last + 1) and (v < 3 or prev is None or m[3] == prev.encode())):
                rec = self._record(path, n, line, last, floor, prev)  # (raises, saying what is wrong)
                v, seq = rec["v"], rec["seq"]
            else:
                seq = int(m[2])
            if n == 1 and seq > covered + 1:
                raise StoreError(f"{path}: line 1: sequence {seq} after the snapshot's {covered}: "
                                 f"{seq - covered - 1} record(s) missing")
            last, prev, floor = seq, crc_of(line), max(floor, v)
            found = prev if seq == covered else found
        if expected:
            self._covered(covered, expected, found)

    # --- writing -----------------------------------------------------------------------
    def append(self, record: dict, before=None) -> int:
        """Append one change, durably; returns its sequence number.  Hold the lock.
        `before(seq)` is called first, with the number the record is to have."""
        path = self.home / JOURNAL
        self._drop_torn_tail(path)
        last = self.last_record()
        prev = crc_of(self.last_line or b"")
        if not self.has_tip:  # (made before the first record it is to cover; last_record read it)
            snapshot = self._read_snapshot()
            self._write_tip(seq=last["seq"], last=prev, next_id=last.get("next_id", 1), since=last["seq"],
                            snapshot=snapshot["journal_seq"] if snapshot else 0)
        seq = last["seq"] + 1
        if before is not None:
            before(seq)
        line = sealed(json.dumps({"v": STORE_VERSION, "seq": seq, "prev": prev, **record},
                                 separators=(",", ":"))).encode("utf-8")
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            size = os.fstat(fd).st_size
            try:
                write_all(fd, line + b"\n")
                if self.deferred is None:
                    os.fsync(fd)
            except OSError:  # (a full disk took part of it: taken back, the journal as it was)
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, size)
                raise
            self.untipped = {"seq": seq, "last": crc_of(line), "next_id": record.get("next_id", last.get("next_id", 1))}
            if self.deferred is None:
                self._write_tip(**self.untipped)
            else:
                if not self.deferred:
                    self.unsynced = size  # (where the appends waiting for the sync began)
                self.deferred = True
        finally:
            os.close(fd)
        return seq

    def _write_tip(self, **changes) -> None:
        """The tip with `changes` (its other fields as last read or written): in place once
        the file exists (one sector: never torn, never needing a block on a full disk),
        whole when first made."""
        self.tip = {**self.tip, **changes}
        text = sealed(json.dumps(self.tip, separators=(",", ":")))
        data = text.encode("ascii").ljust(TIP_SIZE - 1) + b"\n"
        try:
            fd = os.open(self.home / TIP, os.O_WRONLY)
        except FileNotFoundError:
            write_atomic(self.home / TIP, data.decode("ascii"))
            self.has_tip = True
            return
        try:
            if os.pwrite(fd, data, 0) != len(data):  # (never short: the blocks are the file's already)
                raise OSError(errno.EIO, "the tip was written short")
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def one_sync(self):
        """Appends inside are made durable by one fsync as it ends, not one each: a command
        acting on each of an array's 100,000 subjobs waited for 100,000.  A process that dies
        inside has written them all the same; a machine that stops before the end loses the
        appends not yet synced, none of them acknowledged.  Inside another, it is that one's
        (the server's group commit: every command answered at once shares one fsync)."""
        if self.deferred is not None:
            yield self
            return
        self.deferred = False
        try:
            yield self
        finally:
            synced, self.deferred = self.deferred, None
            if synced:
                fd = os.open(self.home / JOURNAL, os.O_WRONLY)
                try:
                    os.fsync(fd)
                except OSError:  # (none of them is durable: all taken back)
                    with contextlib.suppress(OSError):
                        os.ftruncate(fd, self.unsynced)
                    raise
                finally:
                    os.close(fd)
                self._write_tip(**self.untipped)

    def _drop_torn_tail(self, path: Path) -> None:
        try:
            with open(path, "rb+") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                if size == 0:
                    return
                f.seek(size - 1)
                if f.read(1) == b"\n":
                    return
                back = min(size, 1 << 20)
                f.seek(size - back)
                chunk = f.read(back)
                cut = chunk.rfind(b"\n")
                _torn(path, None, chunk[cut + 1:])
                f.truncate(size - back + cut + 1 if cut >= 0 else 0)
                f.flush()
                os.fsync(f.fileno())
                self.warnings.append(f"{path}: dropped a torn last record (an append that never finished)")
        except FileNotFoundError:
            return

    def compact(self, state: dict, seq: int, config: dict | None = None) -> None:
        """Write `state` (which covers the journal up to `seq`) as the snapshot and drop
        the records it covers; `config` ({"toml": text, "overlay": changes}) is the
        configuration the state was reached under.  Hold the lock."""
        records, lines = self._read_journal()
        last = {r["seq"]: crc_of(line) for r, line in zip(records, lines)}.get(seq, "")
        head = f'{{"store_version":{STORE_VERSION},"journal_seq":{int(seq)},"journal_last":"{last}",'
        body = (f'"config":{json.dumps(config, separators=(",", ":"))},' if config is not None else "") + \
            f'"state":{json.dumps(state, separators=(",", ":"))}}}'
        crc = zlib.crc32((head + body).encode("utf-8"))
        tip = self.read_tip()
        if lines and tip is None:  # (a store an older version wrote)
            old = self._read_snapshot()
            self._write_tip(seq=records[-1]["seq"], last=crc_of(lines[-1]), next_id=records[-1].get("next_id", 1),
                            since=records[-1]["seq"], snapshot=old["journal_seq"] if old else 0)
        write_atomic(self.home / STATE, f'{head}"crc":"{crc:08x}",{body}')
        if tip is not None or lines:
            self._write_tip(snapshot=int(seq))
        rest = [line for r, line in zip(records, lines) if r["seq"] >= seq] or lines[-1:]
        # (the snapshot's last record stays: the chain goes on from it and the tail gives
        # next ids; lines are kept as written, so their checksums and the tip still hold)
        write_atomic(self.home / JOURNAL, "".join(line.decode("utf-8") + "\n" for line in rest))
