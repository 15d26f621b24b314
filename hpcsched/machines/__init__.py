"""Machines, one per file, each a `core.topology.Topology`."""
