"""The scheduling core: jobs, queues, reservations, the policy and machine interfaces, and
the pass (route -> prioritise -> plan -> apply).  It does no I/O, never reads a clock and
imports nothing outside `core`."""
