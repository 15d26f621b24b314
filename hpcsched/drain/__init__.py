"""Drain-time accounting (NCSA Blue Waters): how long nodes sat idle held for waiting work.

    samples.py   what one pass looks like node by node (Moab's states, rsvlist, joblist)
    accounts.py  the accumulators and the reports built from them
    moablog.py   Moab's node-status log lines: written per day, read streaming
    records.py   job records to join with (Torque accounting logs, results.json, SWF)

Three sources feed one `Accounts`: Moab logs (or hpcsched's own, in the same format), the
live server's samples, and the simulator, which adds whole passes at once.
"""
