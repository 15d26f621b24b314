"""Small builders shared by the tests."""
from hpcsched import Job, Node, NodePool, Queue, Request, Router, Scheduler, Settings


def pool(n, cores=1, shared=False, **kw):
    return NodePool([Node(f"n{i:02d}", cores=cores, shared=shared, nid=i, **kw) for i in range(n)])


def scheduler(n=10, depth=1, policy=None, queues=None, cores=1, shared=False, **settings):
    queues = queues or {"batch": Queue("batch")}
    return Scheduler(pool(n, cores, shared), Router(queues, next(iter(queues))), policy,
                     Settings(depth=depth, **settings))


def job(nodes=1, wall=100.0, owner="u", **kw):
    req = kw.pop("request", None) or Request(nodes=nodes)
    return Job(owner=owner, request=req, walltime=wall, **kw)
