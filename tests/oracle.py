"""A deliberately naive EASY backfill (Lifka), the oracle the planner and simulator must match.

Node counts only, every list rescanned at every event: obviously right and slow.  Jobs are
(submit, size, walltime estimate, run time) tuples; events of one instant are taken ends
first, then submissions, then one scheduling pass.  Returns {job index: start time}.
It keeps its own event loop on purpose: a reference model shares no code with what it checks.
"""
import heapq
import math


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


def naive_conservative(jobs, machine, depth=math.inf):
    """Conservative backfill (Mu'alem and Feitelson) as algorithms.md states it, on node
    counts: every waiting job holds a reservation at its earliest start beside all the
    others.  When a job ends the schedule is compressed: in queue order, each job gives
    its reservation back and takes the earliest start that fits beside every other job's
    (so it never moves later), starting now if that is now.  Otherwise only new jobs are
    placed, and jobs whose reserved time has come start.  With a `depth`, only that many
    waiting jobs in queue order hold reservations (Maui's RESERVATIONDEPTH); the others
    start only if they fit now beside them.  Obviously right, slow."""
    events = [(t, 1, i) for i, (t, *_r) in enumerate(jobs)]
    heapq.heapify(events)
    queue, running, starts, booked = [], {}, {}, {}
    while events:
        now = events[0][0]
        ended = False
        while events and events[0][0] == now:
            _, kind, i = heapq.heappop(events)
            if kind == 0:
                del running[i]
                ended = True
            else:
                queue.append(i)

        def used(t, skip):
            """Nodes in use at t: running jobs (to their walltime end) and reservations."""
            n = sum(jobs[i][1] for i, end in running.items() if end > t)
            return n + sum(jobs[i][1] for i, s in booked.items() if i != skip and s <= t < s + jobs[i][2])

        made = 0
        for i in list(queue):
            if not (ended or i not in booked or booked[i] <= now):
                made += 1  # its reservation stands
                continue
            size, wall = jobs[i][1], jobs[i][2]
            # candidate starts: now, and every time some running job or reservation ends
            times = sorted({now} | {e for e in running.values() if e > now}
                           | {s + jobs[j][2] for j, s in booked.items() if j != i and s + jobs[j][2] > now})
            for t in times:
                # the usage only changes where a job or reservation starts or ends: check
                # t and every such point inside [t, t + wall)
                points = {t} | {s for j, s in booked.items() if j != i and t < s < t + wall}
                if all(used(p, i) + size <= machine for p in points):
                    break
            if t == now:
                queue.remove(i)
                booked.pop(i, None)
                running[i] = now + wall
                starts[i] = now
                heapq.heappush(events, (now + jobs[i][3], 0, i))
            elif made < depth:
                booked[i] = t
                made += 1
            else:
                booked.pop(i, None)
    return starts
