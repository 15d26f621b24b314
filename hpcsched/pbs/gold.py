"""The allocation bank's commands, as Gold / Moab Accounting Manager names them.

    mybalance                       the caller's projects (an account's `users`) and balances
    gbalance [-p PROJECT]           every account: allocated, used, running, balance, standing
    gstatement -p PROJECT           the project's ledger: deposits, charges per job, refunds
    gdeposit -p PROJECT -z AMOUNT   operators: add to this period's allocation (opens an account)
    gchalloc -p PROJECT -z AMOUNT   operators: set this period's balance to AMOUNT
    gcharge -p PROJECT -z AMOUNT    operators: charge by hand (-J JOBID names the job)
    grefund -J JOBID                operators: give back what a job was charged
    grefund -p PROJECT -z AMOUNT    ... or an amount (-J names the job it is for)

-d TEXT adds a description to a deposit, charge or refund.  Amounts are in the bank's unit
(node-hours or core-hours).  A bad amount is a usage error (2); an unknown project, or a
site without allocations, fails with 1; a non-operator changing the bank gets 159.
"""
from __future__ import annotations

import math
from datetime import datetime

from ..core.bank import MAX_AMOUNT
from ..core.jobs import ACTIVE
from ..store.journaled import Batch
from ..store.site import load_site, whoami
from . import common
from .common import Command
from .errors import UsageError

NO_BANK = 1


def _amount(text: str | None) -> float:
    if text is None:
        raise UsageError("give an amount with -z")
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value <= MAX_AMOUNT or not text.strip().replace(".", "", 1).isdigit():
        raise UsageError(f"amount must be a number from 0 to {MAX_AMOUNT:.0e}, not {text!r}")
    return value


def _read(now: float):
    site = load_site()
    batch = Batch.of(site)
    with batch.open(write=False):
        pass
    if batch.sched.bank is None:
        raise common.CommandError("this site has no allocations (no [allocations] table)", NO_BANK)
    return site, batch.sched


def _running(sched, project: str, now: float) -> float:
    """What the project's running jobs have used so far, at their charge rate."""
    return sum(sched.billing.so_far(j, now) for j in sched.jobs.values() if j.state in ACTIVE and j.account == project)


def _balances(sched, projects, out, now: float) -> None:
    bank = sched.bank
    out.write(f"{'Project':<16} {'Allocated':>12} {'Used':>12} {'Running':>10} {'Balance':>12} "
              f"{'Available':>12}  Standing\n")
    out.write(f"{'-' * 16} {'-' * 12} {'-' * 12} {'-' * 10} {'-' * 12} {'-' * 12}  {'-' * 9}\n")
    for project in projects:
        acct = bank.accounts[project]
        k = acct.period(now)
        granted, used = (acct.granted(k), acct.charged[k]) if k is not None else (0.0, 0.0)
        running = _running(sched, project, now)
        balance = granted - used
        out.write(f"{project:<16} {granted:>12.2f} {used:>12.2f} {running:>10.2f} {balance:>12.2f} "
                  f"{balance - running:>12.2f}  {bank.standing(project, now)}\n")
    out.write(f"(amounts in {bank.unit}, this period)\n")


def mybalance(opts, operands, out, now: float) -> int:
    if operands:
        raise UsageError(f"unexpected {operands[0]!r}")
    _, sched = _read(now)
    user = whoami()
    mine = sorted(p for p, a in sched.bank.accounts.items() if user in a.users)
    if not mine:
        out.write(f"user {user} is in no project with an allocation\n")
        return 0
    _balances(sched, mine, out, now)
    return 0


def gbalance(opts, operands, out, now: float) -> int:
    if operands:
        raise UsageError(f"unexpected {operands[0]!r}")
    _, sched = _read(now)
    o = dict(opts)
    projects = sorted(sched.bank.accounts)
    if "p" in o:
        sched.bank.account(o["p"])  # an unknown project is refused
        projects = [o["p"]]
    if "u" in o:
        projects = [p for p in projects if o["u"] in sched.bank.accounts[p].users]
    _balances(sched, projects, out, now)
    return 0


def gstatement(opts, operands, out, now: float) -> int:
    o = dict(opts)
    if operands or "p" not in o:
        raise UsageError("give the project with -p")
    site, sched = _read(now)
    bank = sched.bank
    if o["p"] not in bank.accounts and o["p"] not in bank.used:
        bank.account(o["p"])
    out.write(f"Statement for project {o['p']} ({bank.unit})\n")
    out.write(f"{'Time':<19} {'Kind':<11} {'Amount':>12}  Job / note\n")
    for e in bank.ledger:
        if e["project"] != o["p"]:
            continue
        sign = "+" if e["kind"] in ("deposit", "refund") else "=" if e["kind"] == "set" else "-"
        what = " ".join(x for x in (common.full_id(e["job"], site.server) if e.get("job") else "",
                                    e.get("note", "")) if x)
        when = datetime.fromtimestamp(e["time"]).strftime("%Y-%m-%d %H:%M:%S")
        out.write(f"{when:<19} {e['kind']:<11} {sign}{e['amount']:>11.2f}  {what}\n")
    out.write(f"Total used: {bank.used.get(o['p'], 0.0):.2f}\n")
    return 0


def _change(kind: str):
    """gdeposit, gchalloc, gcharge, grefund: one journaled bank record."""

    def action(opts, operands, out, now: float) -> int:
        if operands:
            raise UsageError(f"unexpected {operands[0]!r}")
        o = dict(opts)
        site, user = load_site(), whoami()
        if not site.is_operator(user):
            raise common.CommandError(f"user {user} is not an operator", common.UNAUTHORIZED)
        job = common.parse_id(o["J"]) if "J" in o else 0
        batch = Batch.of(site)
        with batch.open(write=True):
            bank = batch.sched.bank
            if bank is None:
                raise common.CommandError("this site has no allocations (no [allocations] table)", NO_BANK)
            if job and job not in batch.sched.jobs:
                raise common.CommandError(f"Unknown Job Id {job}.{site.server}", common.UNKNOWN_JOB)
            if kind == "refund" and job and "z" not in o:  # the job's whole charge, per project
                owed = {p: a for p, a in bank.charged_to(job).items() if a > 0}
                if not owed:
                    raise common.CommandError(f"job {job} has no charge to refund", NO_BANK)
                for project, amount in sorted(owed.items()):
                    batch.do("bank", now, kind="refund", project=project, amount=amount, job=job,
                             note=o.get("d", ""), user=user)
                    out.write(f"refunded {amount:.2f} to project {project} for job {job}\n")
                return 0
            if "p" not in o:
                raise UsageError("give the project with -p")
            if not o["p"].strip() or o["p"] != o["p"].strip():  # (a project named '' took every job without one)
                raise UsageError(f"-p {o['p']!r}: a project has a name, without spaces around it")
            amount = _amount(o.get("z"))
            if kind != "deposit":
                bank.account(o["p"])
            extra = {"job": job} if job else {}
            batch.do("bank", now, kind=kind, project=o["p"], amount=amount, note=o.get("d", ""), user=user, **extra)
            balance = bank.accounts[o["p"]].balance(now)
        out.write(f"{kind} of {amount:.2f} for project {o['p']}: balance {balance:.2f} {bank.unit}\n")
        return 0
    return action


MYBALANCE = Command("mybalance", "h", "usage: mybalance", mybalance)
GBALANCE = Command("gbalance", "p:u:h", "usage: gbalance [-p project] [-u user]", gbalance)
GSTATEMENT = Command("gstatement", "p:", "usage: gstatement -p project", gstatement)
GDEPOSIT = Command("gdeposit", "p:z:d:", "usage: gdeposit -p project -z amount [-d description]",
                   _change("deposit"), changes=True)
GCHALLOC = Command("gchalloc", "p:z:d:", "usage: gchalloc -p project -z balance [-d description]",
                   _change("set"), changes=True)
GCHARGE = Command("gcharge", "p:z:J:d:", "usage: gcharge -p project -z amount [-J job_id] [-d description]",
                  _change("charge"), changes=True)
GREFUND = Command("grefund", "p:z:J:d:", "usage: grefund -J job_id | -p project -z amount [-J job_id] [-d description]",
                  _change("refund"), changes=True)
