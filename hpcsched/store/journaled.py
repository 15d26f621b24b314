"""The persistent scheduler the commands share: a site's Scheduler, rebuilt from its store.

Every change is one *operation* on the core (submit, delete, hold, release, alter, pass,
ended, ...).  A command applies it to the Scheduler first, so anything refused is refused
before the store is touched, then appends it to the journal.  Loading replays the journal
on the last snapshot: the core is deterministic, so a replayed `pass` makes exactly the
decisions it made the first time.  Every record carries the next free job id, so a
submission learns its id from the journal's last line without reading the whole store.

A pass decides under the site's configuration, so the configuration is journaled too:
every record names the one it was made under (`cfg`), and the first writer that finds the
site's configuration changed (qmgr, an edit of config.toml) appends a `config` record with
it (config.toml's text and qmgr's changes) before its own; the snapshot keeps the one its
state was reached under.  A replay switches configuration where the journal does (the
state carried over as a snapshot carries it), so a changed configuration never changes
what was decided before it: a job that ran stays run.
"""
from __future__ import annotations

import contextlib
import time

from ..core.errors import ConfigError, InvalidRequest, InvalidState, Rejected, SchedulerError, UnknownJob
from ..core.jobs import RUNNING, Hold, Job, Request, number, subjob_id
from ..core.reservations import Reservation
from ..core.scheduler import Scheduler
from . import accounts, schema
from .journal import JOURNAL, Store, StoreError
from .site import Site, config_from, config_id, scheduler_of

COMPACT_AFTER = 1000  # journal records; a writer holding the whole state compacts past this
# ... or past one record for every two jobs it holds, if more: a snapshot's cost grows with the
# state, so it is paid once per as many records (amortised O(1) a record; a replay at load
# reads at most half as many records as the snapshot holds jobs)
COMPACT_PER_JOB = 0.5


class CarryError(StoreError):
    """The state does not fit a changed configuration (a node gone that a job holds)."""


def _alter_changes(changes: dict) -> dict:
    out = dict(changes)
    if "request" in out:
        out["request"] = Request.from_dict(out["request"])
    return out


# --- each journal operation, carried out on the core ------------------------------------
# One function a record kind: (scheduler, record, its time) -> what the core returned.

def _submit(sched: Scheduler, rec: dict, now: float):
    return sched.submit(Job.from_dict(rec["job"]), now)


def _submit_array(sched: Scheduler, rec: dict, now: float):
    """One record for a whole array: saved whole or not at all."""
    first, limit = rec["first"], rec.get("limit", 0)
    indices = [i for lo, hi in rec["indices"] for i in range(lo, hi + 1)]
    subs = []
    for k, index in enumerate(indices):
        sub = Job.from_dict(rec["job"])
        # `first` is the array's number, its subjobs' ids above every number (`numbered`);
        # a record of an hpcsched before that numbered the subjobs first, first + 1, ...
        sub.id = subjob_id(first, index) if rec.get("numbered") else first + k
        sub.array_id, sub.array_index, sub.array_limit = first, index, limit
        sub.extra = dict(sub.extra)  # each its own: a `process` record changes one subjob's
        subs.append(sched.submit(sub, now))
    return subs


def _next_id(sched: Scheduler, rec: dict, now: float):
    """qmgr's `set server next_job_number`: ids go on from there (never back)."""
    sched.next_id = max(sched.next_id, rec["value"])
    return sched.next_id


def _ended(sched: Scheduler, rec: dict, now: float):
    ended = sched.job_ended(rec["id"], now, rec["exit_status"], rec.get("cpu_time"))
    # what the server knew of its process at the end (its peak memory), as `process` sets it
    sched.job(rec["id"]).extra.update(rec.get("set", {}))
    return ended


def _exiting(sched: Scheduler, rec: dict, now: float):
    """Its process ended: its epilogue runs, with the peaks the server saw."""
    job = sched.exiting(rec["id"], now, rec.get("exit_status"), rec.get("cpu_time"))
    job.extra.update(rec.get("set", {}))
    return job


def _suspend_or_resume(sched: Scheduler, rec: dict, now: float):
    """qsig -s suspend / resume, with the signal it asks the server for (as `process` sets it)."""
    job = (sched.suspend if rec["op"] == "suspend" else sched.resume)(rec["id"], now)
    job.extra.update(rec.get("set", {}))
    return job


def _reservation(sched: Scheduler, rec: dict, now: float):
    try:
        res = Reservation.from_dict(rec["reservation"])
    except InvalidRequest as e:  # (one an older hpcsched took, a NaN start: passed over, as a change would be)
        raise Rejected(str(e)) from None
    return sched.add_reservation(res, now)


def _bank(sched: Scheduler, rec: dict, now: float):
    """An operator's deposit, set, refund or charge (job ends charge themselves)."""
    return sched.post(rec["kind"], rec["project"], rec["amount"], now, job=rec.get("job", 0),
                      note=rec.get("note", ""), user=rec.get("user", ""))


def _node(sched: Scheduler, rec: dict, now: float):
    if "note" in rec:
        sched.note_node(rec["name"], rec["note"])
    return sched.set_node_state(rec["name"], rec["state"]) if "state" in rec else None


def _process(sched: Scheduler, rec: dict, now: float):
    """What the server knows of a job's process (pid, launch time, signals sent or asked
    for, a launch failure's comment): attributes the core never reads, so they change
    nothing it planned and the record carries only what changed."""
    job = sched.job(rec["id"])
    job.extra.update(rec.get("set", {}))
    for key in rec.get("clear", ()):
        job.extra.pop(key, None)
    if "comment" in rec:
        job.comment = rec["comment"]
    _suspension_of_old(sched, job, now)
    return job


#: record kind -> what carries it out (schema.OPS says each record's fields)
OPERATIONS = {
    "submit": _submit,
    "submit_array": _submit_array,
    "delete": lambda sched, rec, now: sched.delete(rec["id"], now),
    "hold": lambda sched, rec, now: sched.hold(rec["id"], now, Hold(rec["kind"])),
    "release": lambda sched, rec, now: sched.release(rec["id"], now, Hold(rec["kind"])),
    "alter": lambda sched, rec, now: sched.alter(rec["id"], now, **_alter_changes(rec["changes"])),
    "pass": lambda sched, rec, now: sched.iterate(now),
    "next_id": _next_id,
    "run": lambda sched, rec, now: sched.run_now(rec["id"], now, tuple(rec.get("nodes", ()))),
    "ended": _ended,
    "exiting": _exiting,
    "requeue": lambda sched, rec, now: sched.requeue(rec["id"], now),
    "suspend": _suspend_or_resume,
    "resume": _suspend_or_resume,
    "forget": lambda sched, rec, now: [sched.forget(i) for i in rec["ids"]],
    "reservation": _reservation,
    "unreserve": lambda sched, rec, now: sched.remove_reservation(rec["name"], now),
    "alter_reservation": lambda sched, rec, now: sched.alter_reservation(rec["name"], now, **rec["changes"]),
    "bank": _bank,
    "big_run": lambda sched, rec, now: sched.big_run(now),
    "node": _node,
    "usage": lambda sched, rec, now: sched.set_usage(rec["kind"], rec.get("name"), now, rec.get("amount")),
    "process": _process,
}


def apply(sched: Scheduler, rec: dict):
    """Carry out one journal record on the core; returns what the core returned."""
    op = OPERATIONS.get(rec["op"])
    if op is None:
        raise StoreError(f"journal record {rec.get('seq')}: unknown operation {rec['op']!r}")
    return op(sched, rec, rec["now"])


def _suspension_of_old(sched: Scheduler, job: Job, now: float) -> None:
    """A suspension a store of hpcsched 0.x (before the core knew of it) kept in the job's
    `extra` (suspended_at, suspended_for), given to the core as the suspend and resume it was."""
    x = job.extra
    if "suspended_for" in x and "suspended_at" not in x and job.suspended_at is not None:
        del x["suspended_for"]  # (what the resume at `now` works out again)
        sched.resume(job.id, now)
    elif "suspended_at" in x or "suspended_for" in x:
        job.suspended_for = x.pop("suspended_for", job.suspended_for)
        at = x.pop("suspended_at", None)
        if at is not None and job.state == RUNNING and job.suspended_at is None:
            sched.suspend(job.id, at)


class Batch:
    """A site's scheduler and store, opened for reading or for writing."""

    #: home -> the batch a long-lived process keeps loaded (see `keep` and `of`)
    _kept: dict[str, Batch] = {}

    def __init__(self, site: Site):
        self.site = site
        self.store = Store(site.home)
        self.sched: Scheduler | None = None
        self.seq = 0  # the newest journal record applied
        self.pending = 0  # journal records since the snapshot
        self.next_id = 1  # the next job id
        self.mark: tuple | None = None  # where the store stood when self.sched matched it
        self.loaded = False  # the open holds every stored job (else only the configuration)
        self.source = site.source  # the configuration self.sched decides under (config.toml's text, qmgr's)
        self.store_config: str | None = None  # the configuration the journal's newest record was made under
        self.carried = False  # the load carried its state over to the site's changed configuration

    @classmethod
    def of(cls, site: Site) -> Batch:
        """The batch for `site`: the one this process keeps loaded (the server's), else a new one."""
        return cls._kept.get(str(site.home)) or cls(site)

    def keep(self) -> None:
        """Stay loaded between opens (a server): each open then reads only the journal
        records appended since the last, and commands run in this process share it."""
        Batch._kept[str(self.site.home)] = self

    def release(self) -> None:
        Batch._kept.pop(str(self.site.home), None)

    def _compact_due(self) -> bool:
        """Is the journal long enough to fold into a new snapshot (or the state carried
        into a changed configuration: a snapshot under the new one, once)?"""
        return self.pending > max(COMPACT_AFTER, COMPACT_PER_JOB * len(self.sched.jobs)) or self.carried

    @contextlib.contextmanager
    def open(self, write: bool = True, load: bool = True):
        """Lock the store and load the scheduler; writers may `do` operations.

        `load=False` gives a writer the configured scheduler without the stored jobs, to
        check and record a submission in constant time.  A long journal is compacted by
        the next command that loads everything (a reader then takes the lock exclusively)."""
        kept = Batch._kept.get(str(self.site.home)) is self
        load = self.loaded = load or kept  # a kept batch is loaded already: catching up costs little
        try:
            if not write and load:
                with self.store.locked(exclusive=False):
                    self.load()
                    due = self._compact_due()
                if not due:
                    yield self
                    return
            with self.store.locked(exclusive=True):
                if load:
                    self.load()
                else:
                    self.store.check()
                    self.sched, self.source = self.site.scheduler(), self.site.source
                    last = self.store.last_record()
                    self.next_id, self.store_config = last.get("next_id", 1), last.get("cfg")
                # (records a writer that died left unwritten)
                accounts.mend(self.store.home, self.seq if load else last["seq"])
                yield self
                if load and self._compact_due():
                    try:
                        text, changes = self.source
                        self.store.compact(self.sched.to_dict(), self.seq, {"toml": text, "overlay": changes})
                        self.pending, self.carried = 0, False
                    except OSError:
                        pass  # (a full disk: compaction waits for the next writer; nothing is lost)
                self.mark = self.store.mark() if load else None
        except BaseException:
            self.mark = None  # whatever a failed command did in memory, reload next time
            raise

    def load(self) -> Scheduler:
        """Read the store (only what is new since the last load, if nothing else changed)."""
        if self.mark is not None and self.sched is not None:
            records = self.store.read_since(self.mark, self.seq)
            if records is not None:
                self._replay(records)
                self.pending += len(records)
                self.mark = self.store.mark()
                return self.sched
        snapshot, records = self.store.read()
        self.seq, self.store_config, self.carried = 0, None, False
        self.source = self.site.source
        if snapshot is not None and "config" in snapshot:  # the configuration its state was reached under
            self.source = (snapshot["config"]["toml"], snapshot["config"]["overlay"])
            self.store_config = config_id(*self.source)
        sched = self._configured(self.source)
        if snapshot is not None:
            try:
                sched.restore(snapshot["state"])
                for job in sched.jobs.values():
                    _suspension_of_old(sched, job, sched.last_pass or 0.0)
            except (SchedulerError, KeyError, TypeError) as e:
                raise StoreError(f"{self.store.home / 'state.json'}: {e}") from None
            self.seq = snapshot.get("journal_seq", 0)
        self.sched = sched
        self._replay(records)
        self.pending = len(records)
        self.mark = self.store.mark()
        return self.sched

    def scratch(self) -> Scheduler:
        """A scheduler a read-only command may run a pass on (checkjob, showq): the loaded
        one, thrown away after the command, or in the server a copy, since the server's own
        must stay as its store has it (a pass there would start jobs it never launches)."""
        if Batch._kept.get(str(self.site.home)) is not self:
            return self.sched
        copy = self._configured(self.source)
        copy.restore(self.sched.to_dict())
        return copy

    def _configured(self, source: tuple[str, dict]) -> Scheduler:
        """A scheduler (no jobs) under a journaled configuration: the site's own if it is
        that one; else built from the journal's (the site's, if that no longer builds)."""
        if config_id(*source) == self.site.config_id:
            return self.site.scheduler()
        try:
            return scheduler_of(config_from(*source))
        except ConfigError as e:
            self.store.warnings.append(f"a journaled configuration no longer loads ({e}); the site's is used")
            self.source = self.site.source
            return self.site.scheduler()

    def _reconfigure(self, source: tuple[str, dict]) -> bool:
        """Carry the state over to a scheduler under `source` (as a snapshot carries it);
        False if it is under that configuration already."""
        if source is self.source:
            return False
        if config_id(*source) == config_id(*self.source):
            self.source = source  # (the same one: the next call is an identity test, as do() makes it each time)
            return False
        state, before = self.sched.to_dict(), self.source
        self.source = source
        sched = self._configured(source)
        try:
            sched.restore(state)
        except SchedulerError as e:
            self.source = before
            raise CarryError(f"{self.store.home}: the state does not fit the changed configuration ({e}); "
                             f"give back what its jobs hold") from None
        self.sched = sched
        return True

    def _replay(self, records: list[dict]) -> None:
        for rec in records:
            wrong = schema.check(rec)
            if wrong:  # damage that still parses: reported, never applied
                raise StoreError(f"{self.store.home / JOURNAL}: record {rec['seq']} ({rec.get('op')}): {wrong}; "
                                 f"left as it is")
            try:
                if rec["op"] == "config":
                    self._reconfigure((rec["toml"], rec["overlay"]))
                else:
                    apply(self.sched, rec)
            except (Rejected, UnknownJob, InvalidState, CarryError) as e:
                # possible after a configuration change (a queue gone, a pass that now
                # starts other jobs): the record is kept and the rest goes on
                self.store.warnings.append(f"journal record {rec['seq']} ({rec['op']}) no longer "
                                           f"applies: {e}")
            except (SchedulerError, KeyError, TypeError, ValueError, AttributeError) as e:
                raise StoreError(f"{self.store.home / JOURNAL}: record {rec['seq']} ({rec['op']}): malformed: {e}; "
                                 f"left as it is") from None
            self.seq = rec["seq"]
            self.store_config = rec.get("cfg")  # (a record written before configurations were journaled: None)
        self.next_id = self.sched.next_id
        self.sched.deleted.clear()  # recorded by whoever did the operation
        self.carried |= self._reconfigure(self.site.source)  # from here on, the site's configuration decides

    def do(self, op: str, now: float | None = None, records=None, **args):
        """Apply one operation and make it durable; SchedulerError leaves the store untouched.
        `records(result)`: the accounting lines the change makes, appended to the accounting
        log once it is journaled (accounts.py: written ahead, so a crash loses none)."""
        rec = {"op": op, "now": time.time() if now is None else now, **args}
        self._reconfigure(self.site.source)  # (a kept batch may have replayed another's configuration)
        before = self.next_id
        result = apply(self.sched, rec)
        lines = records(result) if records else None
        if op == "submit":
            self.next_id = max(self.next_id, result.id + 1)
        elif op == "submit_array" and result:
            self.next_id = max(self.next_id, number(result[-1].id) + 1)
        elif op in ("reservation", "next_id"):  # (a pbs_rsub reservation takes a job number: R12; qmgr sets it)
            self.next_id = max(self.next_id, self.sched.next_id)
        rec["next_id"], rec["cfg"] = self.next_id, self.site.config_id
        kept: list = []  # the lines pending: this change's and those no change could write yet

        def ahead(lines):  # (every append drops the pending lines of a change it follows unjournaled)
            def before(seq):
                kept[:] = accounts.ahead(self.store.home, seq, lines or [])
            return before
        try:
            if self.store_config != rec["cfg"]:  # the journal's first record under this configuration
                text, changes = self.site.source
                self.seq = self.store.append({"op": "config", "now": rec["now"], "toml": text, "overlay": changes,
                                              "next_id": before, "cfg": rec["cfg"]}, before=ahead(None))
                self.store_config = rec["cfg"]
            self.seq = self.store.append(rec, before=ahead(lines))
        except OSError as e:  # a full disk: the change is undone in memory, as it is on disk
            self._undo()
            raise StoreError(f"{self.store.home / JOURNAL}: cannot write ({e.strerror}): nothing was saved") from None
        self.pending += 1
        if kept:
            accounts.append(self.store.home, kept, self.seq)
        return result

    def _undo(self) -> None:
        """Make memory match the store again after a write that failed (the lock is held)."""
        self.mark = None
        if self.loaded:
            self.load()
        else:  # a constant-time writer (qsub) holds only the configuration
            self.sched, self.source = self.site.scheduler(), self.site.source
            last = self.store.last_record()
            self.next_id, self.store_config = last.get("next_id", 1), last.get("cfg")

    def submit(self, job: Job, now: float | None = None, records=None) -> Job:
        """Submit under the next job id (so a replay gives it the same one)."""
        job.id = self.next_id
        return self.do("submit", now, records, job=job.to_dict())

    def submit_array(self, job: Job, indices: list[int], limit: int = 0, now: float | None = None,
                     records=None) -> list[Job]:
        """Submit an array of `job` under the next job number (subjob N[i]: jobs.subjob_id)
        as one record: the whole array is saved, or none of it."""
        runs: list[list[int]] = []  # sorted indices as [first, last] runs of consecutive ones
        for i in indices:
            if runs and i == runs[-1][1] + 1:
                runs[-1][1] = i
            else:
                runs.append([i, i])
        job.id = 0
        return self.do("submit_array", now, records, job=job.to_dict(), first=self.next_id, indices=runs,
                       limit=limit, numbered=True)
