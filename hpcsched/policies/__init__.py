"""Priority policies beyond FIFO, one per file, each a `core.policy.Policy`."""
