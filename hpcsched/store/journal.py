"""The state store: one directory, JSON on disk, every change atomic and locked.

    $HPCSCHED_HOME, else $XDG_DATA_HOME/hpcsched, else ~/.local/share/hpcsched
        state.json     the last snapshot (a Scheduler.to_dict() and the journal seq it covers)
        journal.jsonl  one JSON record per change since, appended and fsync'd (a command
                       acting on many jobs syncs its appends once, at its end)
        lock           flock(2) target: writers hold it exclusively, readers shared

Appending costs the same whatever the store holds: the next sequence number is read from
the journal's last line, not from the whole file.  `compact` writes a new snapshot
(temporary file, fsync, rename, fsync of the directory) and then a journal holding only
what the snapshot does not cover; a crash between the two leaves records the snapshot
already covers, which readers skip by sequence number.  A torn last line (a crash in the
middle of an append that was never acknowledged) is dropped with a warning; any other
damage is an error, and nothing is ever silently replaced by an empty state.

Each journal line and the snapshot carry a CRC-32 of their own text without it (`"crc"`,
last in a journal line, before "state" in the snapshot), and journal lines number 1, 2, 3, ... with
no gap: a flipped bit, an edited or deleted line is reported with the file and the line.
Version 1 stores (before checksums) are read as they are; writes are version 2.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import zlib
from pathlib import Path

from ..core.errors import SchedulerError
from .layout import home

STORE_VERSION = 2
READS = (1, 2)  # version 1: the same records without checksums
STATE, JOURNAL, LOCK = "state.json", "journal.jsonl", "lock"
_CRC = b',"crc":"'  # a sealed line ends ,"crc":"xxxxxxxx"} (18 bytes)


def sealed(body: str) -> str:
    """A JSON object's text with its CRC-32 as its last member."""
    return f'{body[:-1]},"crc":"{zlib.crc32(body.encode("utf-8")):08x}"}}'


def unsealed(line: bytes) -> bytes | None:
    """The text a sealed line's CRC covers, or None if the CRC does not match (or is absent)."""
    if line[-18:-10] != _CRC or line[-2:] != b'"}':
        return None
    body = line[:-18] + b"}"
    return body if line[-10:-2] == b"%08x" % zlib.crc32(body) else None  # (as written: a flipped case is damage too)


def _version(line: bytes) -> int:
    """A journal line's store version (0: not a record)."""
    try:
        rec = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return 0
    return rec.get("v", 0) if isinstance(rec, dict) and isinstance(rec.get("v"), int) else 0


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


def write_atomic(path: Path, text: str) -> None:
    """Replace `path` with `text` so that a crash leaves either the old or the new file.
    The file is its owner's alone (0600): the store holds scripts and environments."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
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
        journal = self._read_journal(snapshot["store_version"] if snapshot else 1)
        if journal and journal[0]["seq"] > covered + 1:  # the journal's first lines are gone
            raise StoreError(f"{self.home / JOURNAL}: line 1: sequence {journal[0]['seq']} after the snapshot's "
                             f"{covered}: {journal[0]['seq'] - covered - 1} record(s) missing")
        return snapshot, [r for r in journal if r["seq"] > covered]

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
        if not isinstance(data.get("journal_seq", 0), int) or not isinstance(data.get("state"), dict):
            raise StoreError(f"{path}: not an hpcsched state file (journal_seq or state malformed)")
        if "config" in data and not is_source(data["config"]):
            raise StoreError(f"{path}: not an hpcsched state file (config malformed)")
        return data

    def _read_journal(self, floor: int = 1) -> list[dict]:
        """The journal's records, checked; `floor`: the oldest version a record may have
        (the snapshot's: a store this version wrote holds no older record after its newer
        ones, so an old-format line there is an edit, refused)."""
        path = self.home / JOURNAL
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as e:  # (made a directory, unreadable)
            raise StoreError(f"{path}: cannot read: {e.strerror}") from None
        lines = data.split(b"\n")
        tail = lines.pop()  # b"" when the file ends with a newline
        if tail:
            _torn(path, len(lines) + 1, tail)
            self.warnings.append(f"{path}: dropped a torn last record (an append that never finished)")
        records, last = [], 0
        for n, line in enumerate(lines, 1):
            rec = self._record(path, n, line, last, floor)
            last, floor = rec["seq"], max(floor, rec["v"])
            records.append(rec)
        return records

    @staticmethod
    def _record(path: Path, n: int, line: bytes, last: int, floor: int = 1) -> dict:
        """Journal line `n`, checked: a record of a version we read and not older than
        `floor`, its checksum right, numbered right after `last` (any number when `last` is
        0: the journal's first)."""
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
            raise StoreError(f"{path}: line {n}: a version {rec['v']} record in a store written as version "
                             f"{floor} (edited: it would skip its checksum); left as it is")
        if rec["v"] >= 2 and unsealed(line) is None:
            raise StoreError(f"{path}: line {n}: checksum does not match (damaged or edited); left as it is")
        if rec["seq"] <= last:
            raise StoreError(f"{path}: line {n}: sequence {rec['seq']} after {last}")
        if last and rec["seq"] != last + 1:
            raise StoreError(f"{path}: line {n}: sequence {rec['seq']} after {last}: "
                             f"{rec['seq'] - last - 1} record(s) missing")
        rec.pop("crc", None)
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
        """The newest journal record, read from the file's tail; for an empty journal a
        stand-in made from the snapshot ({"seq": 0} for an empty store)."""
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
            if record.get("v", 1) < STORE_VERSION and len(lines) > 1 and _version(lines[-2]) >= STORE_VERSION:
                raise StoreError(f"{path}: last record: a version {record.get('v')} record after a version "
                                 f"{STORE_VERSION} one (edited: it would skip its checksum); left as it is")
            return record
        snapshot = self._read_snapshot()
        if not snapshot:
            return {"seq": 0}
        return {"seq": snapshot.get("journal_seq", 0), "next_id": snapshot.get("state", {}).get("next_id", 1)}

    def check(self) -> None:
        """A look at the snapshot without parsing it: its version, its last byte and its
        checksum (a CRC over the bytes, some milliseconds for a 100,000-job state), so a
        writer that does not load everything (qsub) refuses a damaged store as the rest do."""
        path = self.home / STATE
        try:
            with open(path, "rb") as f:
                data = f.read()
            head, tail = data[:64], data[-16:].rstrip()
        except FileNotFoundError:
            return
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
            if at < 0 or data[at + 7:at + 15] != b"%08x" % zlib.crc32(data[:at] + data[at + 17:]):
                raise StoreError(f"{path}: checksum does not match (the file was damaged or edited); left as it is")

    # --- writing -----------------------------------------------------------------------
    def append(self, record: dict, before=None) -> int:
        """Append one change, durably; returns its sequence number.  Hold the lock.
        `before(seq)` is called first, with the number the record is to have."""
        path = self.home / JOURNAL
        self._drop_torn_tail(path)
        seq = self.last_seq() + 1
        if before is not None:
            before(seq)
        line = sealed(json.dumps({"v": STORE_VERSION, "seq": seq, **record}, separators=(",", ":"))) + "\n"
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode("utf-8"))
            if self.deferred is None:
                os.fsync(fd)
            else:
                self.deferred = True
        finally:
            os.close(fd)
        return seq

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
                fd = os.open(self.home / JOURNAL, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)

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
        head = f'{{"store_version":{STORE_VERSION},"journal_seq":{int(seq)},'
        body = (f'"config":{json.dumps(config, separators=(",", ":"))},' if config is not None else "") + \
            f'"state":{json.dumps(state, separators=(",", ":"))}}}'
        crc = zlib.crc32((head + body).encode("utf-8"))
        write_atomic(self.home / STATE, f'{head}"crc":"{crc:08x}",{body}')
        records = self._read_journal()
        rest = [r for r in records if r["seq"] > seq]
        if not rest and records:
            rest = records[-1:]  # keep the newest (covered) record: next ids come from the tail
        write_atomic(self.home / JOURNAL, "".join(
            sealed(json.dumps({**r, "v": STORE_VERSION}, separators=(",", ":"))) + "\n" for r in rest))
