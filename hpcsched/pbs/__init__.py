"""The PBS-style commands: the front door, option parsing, qsub, qstat, qdel/qhold/qrls/
qalter..., Maui's and PSC's commands, the accounting log.  Never imports the server."""
