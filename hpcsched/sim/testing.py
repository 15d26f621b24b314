"""Assertions for other projects' tests of scheduling policies.

    from hpcsched.sim.simulate import simulate, record
    from hpcsched.sim.testing import assert_schedule

    result = simulate([record(1, 0, 4, 100, 120), ...], policy="fifo", backfill="easy", nodes=8)
    assert_schedule(result, max_wait=3600, min_utilization=0.5)
"""
from __future__ import annotations


def assert_schedule(result, *, max_wait: float | None = None, max_mean_wait: float | None = None,
                    max_bsld: float | None = None, max_mean_bsld: float | None = None,
                    min_utilization: float | None = None, max_loss_of_capacity: float | None = None,
                    all_finished: bool = True) -> None:
    """Raise AssertionError naming the first bound the simulated schedule breaks."""
    m = result.metrics
    problems = []
    if all_finished and result.mapping.simulated != m.jobs:
        problems.append(f"{result.mapping.simulated - m.jobs} of {result.mapping.simulated} jobs never finished")
    if max_wait is not None:
        worst = max(result.jobs, key=lambda f: f.wait, default=None)
        if worst is not None and worst.wait > max_wait:
            problems.append(f"job {worst.record.job} waited {worst.wait:g} s > max_wait {max_wait:g} s")
    checks = [("mean wait", m.overall.get("wait", {}).get("mean", 0.0), max_mean_wait, "<="),
              ("max bounded slowdown", m.overall.get("bsld", {}).get("max", 0.0), max_bsld, "<="),
              ("mean bounded slowdown", m.overall.get("bsld", {}).get("mean", 0.0), max_mean_bsld, "<="),
              ("utilization", m.utilization, min_utilization, ">="),
              ("loss of capacity", m.loss_of_capacity, max_loss_of_capacity, "<=")]
    for name, value, bound, op in checks:
        if bound is not None and not (value <= bound if op == "<=" else value >= bound):
            problems.append(f"{name} {value:.4g} is not {op} {bound:g}")
    if problems:
        raise AssertionError("; ".join(problems))
