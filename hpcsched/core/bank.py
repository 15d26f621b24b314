"""Allocations: a bank of node-hours (or core-hours) per project, charged as jobs end.

A project's account holds an amount over a period [start, end), split evenly into
`periods` sub-periods (4: quarters), each with its own balance: what one leaves unused is
lost (use or lose, as INCITE and ALCC allocations are).  A charge, deposit or refund at
time t counts in the sub-period holding t.  The core charges a job when it ends
(`Scheduler.job_ended`), so a charge and its job's end are one journal record and a replay
charges the same.

    charge = units x hours used x the queue's charge factor

where units are the job's nodes (or cores); a job at or over `whole_machine` of the
machine is charged for the whole machine at `whole_machine_rate` (Kraken: 0.85, 0.5).  A
reservation billed to a project (PSC) is charged, when it ends or is removed, the
node-hours of its window that no job used.

A project's *standing* at a moment:

    ok         balance above zero (or no account, and `unallocated` is "run")
    overburn   no balance left, inside the overburn window and under `limit` x amount
    exhausted  otherwise; `on_exhausted` (per project or site) says what that does:
               "backfill" routes its jobs to the backfill queue, starting score times
               max(0, 1 - overuse) (Cobalt); "standby" orders its jobs after every other
               (Kraken); "refuse" refuses them and holds back those queued (ALCF's
               Director's Discretionary projects); "run" changes nothing.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from .errors import InvalidRequest

ACTIONS = ("backfill", "standby", "refuse", "run")
UNITS = ("node-hours", "core-hours")
#: the largest amount an allocation, deposit, refund or set may name: below it a float
#: holds every cent exactly (2^53 / 100 is about 9e13), and Mira's largest were ~1e8
MAX_AMOUNT = 1e13


@dataclass
class Window:
    """An overburn window: capability jobs may run up to `limit` x the allocation."""

    start: float
    end: float
    limit: float = 2.0

    def __contains__(self, now: float) -> bool:
        return self.start <= now < self.end


@dataclass
class Account:
    """A project's allocation and what it has used, per sub-period."""

    project: str
    amount: float = 0.0  # the configured amount over the whole period
    start: float = -math.inf
    end: float = math.inf
    periods: int = 1
    on_exhausted: str = ""  # "" : the site's setting
    overburn: Window | None = None  # None: the site's window
    users: frozenset[str] = frozenset()  # who sees it with mybalance
    deposited: list[float] = field(default_factory=list)  # per sub-period, on top of amount
    charged: list[float] = field(default_factory=list)

    def __post_init__(self):
        if not 0 <= self.amount <= MAX_AMOUNT:
            raise InvalidRequest(f"allocation {self.project}: amount must be a number from 0 to {MAX_AMOUNT:.0e}")
        if not self.start < self.end:
            raise InvalidRequest(f"allocation {self.project}: start must come before end")
        if self.periods < 1 or (self.periods > 1 and not math.isfinite(self.end - self.start)):
            raise InvalidRequest(f"allocation {self.project}: sub-periods need a start, an end and periods >= 1")
        if self.on_exhausted and self.on_exhausted not in ACTIONS:
            raise InvalidRequest(f"allocation {self.project}: on_exhausted must be one of {', '.join(ACTIONS)}")
        self.deposited = self.deposited or [0.0] * self.periods
        self.charged = self.charged or [0.0] * self.periods

    def period(self, now: float) -> int | None:
        """The sub-period holding `now` (None: outside the allocation)."""
        if not self.start <= now < self.end:
            return None
        if self.periods == 1:
            return 0
        return min(int((now - self.start) / (self.end - self.start) * self.periods), self.periods - 1)

    def granted(self, k: int) -> float:
        return self.amount / self.periods + self.deposited[k]

    def balance(self, now: float) -> float:
        k = self.period(now)
        return 0.0 if k is None else self.granted(k) - self.charged[k]

    def bounds(self, k: int) -> tuple[float, float]:
        if self.periods == 1:
            return self.start, self.end
        span = (self.end - self.start) / self.periods
        return self.start + k * span, self.start + (k + 1) * span


@dataclass
class Bank:
    """Every project's account, the charging rules and the ledger."""

    accounts: dict[str, Account] = field(default_factory=dict)
    unit: str = "node-hours"
    on_exhausted: str = "backfill"
    backfill_queue: str = "backfill"
    unallocated: str = "run"  # a job of a project without an account: "run" or "refuse"
    charge_factors: dict[str, float] = field(default_factory=dict)  # queue -> factor (default 1)
    whole_machine: float = 0.0  # jobs at or over this share pay for the whole machine (0: off)
    whole_machine_rate: float = 1.0
    bill_reservations: bool = False
    overburn: Window | None = None
    keep_ledger: bool = True  # False: totals only (a long replay)
    ledger: list[dict] = field(default_factory=list)
    used: dict[str, float] = field(default_factory=dict)  # every charge per project, all time
    #: how far running jobs were charged into billed reservations: reservation -> used node-seconds
    reservation_use: dict[str, float] = field(default_factory=dict)

    def __post_init__(self):
        self.configured = frozenset(self.accounts)  # the rest were opened by a deposit
        if self.unit not in UNITS:
            raise InvalidRequest(f"allocations.unit must be {' or '.join(UNITS)}")
        if self.on_exhausted not in ACTIONS:
            raise InvalidRequest(f"allocations.on_exhausted must be one of {', '.join(ACTIONS)}")
        if self.unallocated not in ("run", "refuse"):
            raise InvalidRequest("allocations.unallocated must be run or refuse")

    # --- reading ---------------------------------------------------------------------
    def account(self, project: str) -> Account:
        acct = self.accounts.get(project)
        if acct is None:
            raise InvalidRequest(f"unknown project {project!r}: it has no allocation")
        return acct

    def action(self, project: str) -> str:
        acct = self.accounts.get(project)
        return (acct.on_exhausted if acct is not None and acct.on_exhausted else self.on_exhausted)

    def standing(self, project: str, now: float) -> str:
        """"ok", "overburn" or "exhausted" (see the module docstring)."""
        acct = self.accounts.get(project)
        if acct is None:
            return "ok" if self.unallocated == "run" else "exhausted"
        k = acct.period(now)
        if k is not None and acct.granted(k) - acct.charged[k] > 0:
            return "ok"
        window = acct.overburn or self.overburn
        if k is not None and window is not None and now in window \
                and acct.charged[k] < window.limit * acct.granted(k):
            return "overburn"
        return "exhausted"

    def overuse(self, project: str, now: float) -> float:
        """How far past its allocation a project is, as a share of it (0: not past it)."""
        acct = self.accounts.get(project)
        k = acct.period(now) if acct is not None else None
        if k is None:
            return math.inf
        granted = acct.granted(k)
        if granted <= 0:
            return math.inf if acct.charged[k] > 0 else 0.0
        return max(0.0, acct.charged[k] / granted - 1.0)

    def score_factor(self, project: str, now: float) -> float:
        """Cobalt: an exhausted project's starting score shrinks in proportion to its overuse."""
        over = self.overuse(project, now)
        return 0.0 if math.isinf(over) else max(0.0, 1.0 - over)

    def job_charge(self, queue: str, units: int, machine_units: int, seconds: float) -> float:
        """What a job of `units` nodes (or cores) in `queue` pays for `seconds` of use."""
        factor = self.charge_factors.get(queue, 1.0)
        if self.whole_machine and units >= self.whole_machine * machine_units:
            units, factor = machine_units, factor * self.whole_machine_rate
        return units * seconds / 3600.0 * factor

    # --- changing --------------------------------------------------------------------
    def post(self, kind: str, project: str, amount: float, now: float, job: int = 0, note: str = "",
             user: str = "") -> None:
        """One ledger entry: "charge", "job" and "reservation" take from the balance,
        "deposit" and "refund" add to it, "set" makes the balance `amount`."""
        if not math.isfinite(amount):
            raise InvalidRequest(f"amount must be a finite number, not {amount!r}")
        if kind in ("deposit", "refund", "set", "charge") and amount < 0:
            raise InvalidRequest(f"a {kind} must not be negative ({amount:g})")
        if kind in ("deposit", "refund", "set") and amount > MAX_AMOUNT:
            raise InvalidRequest(f"a {kind} must be at most {MAX_AMOUNT:.0e} ({amount:g})")
        acct = self.accounts.get(project)
        if acct is None and kind not in ("job", "reservation"):
            if kind != "deposit":
                raise InvalidRequest(f"unknown project {project!r}: it has no allocation")
            acct = self.accounts[project] = Account(project)  # a first deposit opens an account
        k = acct.period(now) if acct is not None else None
        if kind in ("deposit", "refund", "set") and k is None:
            raise InvalidRequest(f"project {project} has no allocation period at this time")
        if kind == "deposit":
            acct.deposited[k] += amount
        elif kind == "set":
            acct.deposited[k] += amount - acct.balance(now)
        elif kind == "refund":
            acct.charged[k] -= amount
            self.used[project] = self.used.get(project, 0.0) - amount
        else:  # a charge: to the sub-period holding `now`, if the project has one
            if k is not None:
                acct.charged[k] += amount
            self.used[project] = self.used.get(project, 0.0) + amount
        if self.keep_ledger:
            entry = {"time": now, "kind": kind, "project": project, "amount": amount}
            if job:
                entry["job"] = job
            if note:
                entry["note"] = note
            if user:
                entry["user"] = user
            self.ledger.append(entry)

    def charged_to(self, job_id: int) -> dict[str, float]:
        """A job's charges less its refunds, per project (from the ledger)."""
        out: dict[str, float] = {}
        for e in self.ledger:
            if e.get("job") == job_id and e["kind"] in ("job", "charge", "refund"):
                sign = -1 if e["kind"] == "refund" else 1
                out[e["project"]] = out.get(e["project"], 0.0) + sign * e["amount"]
        return out

    # --- state as plain dicts ----------------------------------------------------------
    def to_dict(self) -> dict:
        return {"accounts": {p: {"deposited": a.deposited, "charged": a.charged}
                             for p, a in self.accounts.items()},
                "opened": sorted(self.accounts.keys() - self.configured),
                "used": dict(self.used), "ledger": list(self.ledger),
                "reservation_use": dict(self.reservation_use)}

    def restore(self, state: dict) -> None:
        """Load what `to_dict` saved onto this (configured) bank: the configuration keeps
        the amounts and periods, the state the deposits and charges."""
        for project in state.get("opened", []):
            self.accounts.setdefault(str(project), Account(str(project)))
        for project, d in state.get("accounts", {}).items():
            acct = self.accounts.get(project)
            if acct is None:
                continue  # (an account the configuration no longer has)
            dep, chg = [float(x) for x in d["deposited"]], [float(x) for x in d["charged"]]
            if len(dep) == acct.periods and len(chg) == acct.periods:
                acct.deposited, acct.charged = dep, chg
        self.used = {str(k): float(v) for k, v in state.get("used", {}).items()}
        self.ledger = [dict(e) for e in state.get("ledger", [])]
        self.reservation_use = {str(k): float(v) for k, v in state.get("reservation_use", {}).items()}
