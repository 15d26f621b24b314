"""The trace simulator: SWF traces, the simulated-clock engine, metrics, test assertions."""
