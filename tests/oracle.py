"""A deliberately naive EASY backfill (Lifka), the oracle the planner and simulator must match.

Node counts only, every list rescanned at every event: obviously right and slow.  Jobs are
(submit, size, walltime estimate, run time) tuples; events of one instant are taken ends
first, then submissions, then one scheduling pass.  Returns {job index: start time}.
It keeps its own event loop on purpose: a reference model shares no code with what it checks.
"""
import heapq


def naive_easy(jobs, machine):
    """Lifka's EASY as algorithms.md states it, on node counts: obviously right, slow."""
    events = [(t, 1, i) for i, (t, *_r) in enumerate(jobs)]
    heapq.heapify(events)
    queue, running, starts = [], {}, {}
    while events:
        now = events[0][0]
        while events and events[0][0] == now:
            _, kind, i = heapq.heappop(events)
            if kind == 0:
                del running[i]
            else:
                queue.append(i)
        free = machine - sum(jobs[i][1] for i in running)

        def start(i):
            nonlocal free
            queue.remove(i)
            running[i] = now + jobs[i][2]
            starts[i] = now
            free -= jobs[i][1]
            heapq.heappush(events, (now + jobs[i][3], 0, i))

        while queue and jobs[queue[0]][1] <= free:
            start(queue[0])
        if queue:
            head = jobs[queue[0]][1]
            acc, shadow = free, None
            for end, i in sorted((e, i) for i, e in running.items()):
                acc += jobs[i][1]
                if acc >= head:
                    shadow = end
                    break
            # extra = nodes free at the shadow time beyond the head's need (every job
            # ending exactly then counts, whatever order ties were added in)
            extra = free + sum(jobs[i][1] for i, e in running.items() if e <= shadow) - head
            for i in list(queue[1:]):
                size, wall = jobs[i][1], jobs[i][2]
                if size > free:
                    continue
                if now + wall <= shadow:
                    start(i)
                elif size <= extra:
                    extra -= size
                    start(i)
    return starts
