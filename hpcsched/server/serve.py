"""The server's real-time loop: the live twin of the simulator's event loop (sim/), driving
the same steps (loop.py's Server.step) by the wall clock and the command socket.

Steps run at deadlines no command traffic moves (Server.next_step: the interval after the
last step, a running job's walltime, a SIGTERM's grace, a look at other hosts) and on a
poke (a change, or a job's end: SIGCHLD).  Commands come first: a poke's step waits until
no command is waiting (or STEP_EVERY has passed under a steady stream of them), so a burst
of qsubs costs one pass, not one each.  Answering qstat is no step; a command acting on
many jobs runs in slices of SLICE_JOBS between steps.
"""
from __future__ import annotations

import os
import selectors
import signal
import socket
import time

from ..pbs import forwarded
from ..pbs import front as commands
from ..store.request import Request
from ..store.site import SOCKET, user_name
from . import door, privilege
from .loop import Server
from .shared import log

STEP_EVERY = 0.2  # seconds: under a stream of commands, a poke's step waits no longer
SLICE_JOBS = 500  # jobs one command acts on between two steps (its request's `slice`): qdel of a large array
#: commands whose refusals the log keeps (those that would change something; a refused
#: qstat of an unknown job is a client's routine poll)
CHANGES = frozenset({"qsub", "qdel", "qalter", "qhold", "qrls", "qmove", "qrerun", "qsig", "qrun", "qmsg",
                     "qmgr", "qterm", "pbs_rsub", "pbs_rdel", "pbs_ralter", "setres", "releaseres", "cqadm",
                     "schedctl", "gdeposit", "gcharge", "grefund", "gwithdraw", "pbsyod"})


class Loop:
    """One server's loop: its sockets (the poke's, the commands'), its door, the commands
    waiting for their next slice."""

    def __init__(self, server: Server):
        self.server = server
        self.home = server.home
        self.stopping = False
        self.sliced: list[tuple] = []  # commands between two slices (SLICE_JOBS)

    def run(self, until: float | None = None) -> None:
        """Step on every wake-up or deadline until SIGTERM/SIGINT or qterm (or `until`);
        answer the commands that offer themselves on the command socket (pbs/front.py)
        between steps, from the state the server keeps loaded."""
        server = self.server
        if server.multi:
            for change in privilege.lock_down(self.home):
                log(f"made private: {change}")
        server._lock = server.claim()
        log(f"started (pid {os.getpid()}): site {self.home}, {len(server.site.scheduler().topology.all_nodes())} "
            f"nodes, a step every {server.interval:g} s" + (", multi-user" if server.multi else ""))
        sel = selectors.DefaultSelector()
        poke = self._bind(SOCKET, socket.SOCK_DGRAM)
        sel.register(poke, selectors.EVENT_READ)
        listener = self._bind(commands.SOCKET, socket.SOCK_STREAM)
        if server.multi:  # the door: anyone may connect, the kernel says who they are
            os.chmod(self.home / commands.SOCKET, privilege.COMMAND_SOCKET_MODE)
        listener.listen(128)
        sel.register(listener, selectors.EVENT_READ)
        self.door = server.door = door.Door(sel, listener, server.multi, server.max_request)
        wake_r, wake_w = socket.socketpair()
        wake_r.setblocking(False)
        wake_w.setblocking(False)
        sel.register(wake_r, selectors.EVENT_READ)
        signal.set_wakeup_fd(wake_w.fileno())
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # a client that hangs up is an OSError, not our end
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self.stop)
        server.batch.keep()
        try:
            due, deadline, last = True, 0.0, 0.0
            while not self.stopping and (until is None or time.time() < until):
                timeout = 0.0 if due else max(0.0, deadline - time.time())
                if until is not None:
                    timeout = min(timeout, max(0.0, until - time.time()))
                if self.door.deadline() is not None:
                    timeout = min(timeout, max(0.0, self.door.deadline() - time.monotonic()))
                for key, mask in sel.select(timeout):
                    if self.door.event(key.fileobj, mask):
                        continue
                    due = True  # (a poke, a signal: SIGCHLD, SIGTERM)
                    try:
                        while key.fileobj.recv(4096):
                            pass
                    except (BlockingIOError, InterruptedError):
                        pass
                answered = self._answer_ready()
                self.door.expire(time.monotonic())
                now = time.time()
                if (due and (not answered or now - last >= STEP_EVERY)) or now >= deadline:
                    server.step()
                    due, last = False, now
                    deadline = server.next_step(time.time())
                    due = self._answer_sliced()  # (a step, then the next slice)
        finally:
            self.door.close()
            server.shutdown()
            signal.set_wakeup_fd(-1)
            sel.close()
            for sock, name in ((poke, SOCKET), (listener, commands.SOCKET)):
                sock.close()
                try:
                    (self.home / name).unlink()
                except FileNotFoundError:
                    pass

    def stop(self, *_) -> None:
        self.stopping = True

    def _bind(self, name: str, kind: int) -> socket.socket:
        """A non-blocking socket at home/name that only this user can reach."""
        path = self.home / name
        try:
            path.unlink()  # a stale one from a server that died
        except FileNotFoundError:
            pass
        sock = socket.socket(socket.AF_UNIX, kind)
        old = os.umask(0o077)
        try:
            sock.bind(str(path))
        finally:
            os.umask(old)
        sock.setblocking(False)
        return sock

    def _answer_ready(self) -> bool:
        """Run every whole request, one at a time, their journal appends made durable by one
        fsync before any reply goes out (door.py); did any come?"""
        ready = self.door.take()
        if not ready:
            return False
        replies = []
        with self.server.batch.store.one_sync():
            for conn, data, caller in ready:
                replies.append(self._run(conn, data, self._request(caller), b""))
        for conn, reply in filter(None, replies):
            self.door.answer(conn, reply)
        return True

    def _request(self, caller: str | None) -> Request:
        """What this server knows of a command from `caller` (None: its own user): qterm
        stops it, and the command acts on SLICE_JOBS jobs at most before a step."""
        return Request(caller=caller, stop=self.stop, slice=SLICE_JOBS)

    def _run(self, conn, data: bytes, request: Request, before: bytes) -> tuple | None:
        """Run (a slice of) a request: (connection, reply), or None when the command stopped
        at its `slice` of jobs: it goes on after the next step (_answer_sliced)."""
        reply = forwarded.run_for(data, request, str(self.home))
        if not reply.startswith(b"0\0"):
            _refused(data, request.caller, reply)
        if before:
            reply = forwarded.merged(before, reply)
        if request.resume is not None:
            self.sliced.append((conn, data, request, reply))
            return None
        return conn, reply

    def _answer_sliced(self) -> bool:
        """The next slice of each command too long for one (qdel of a large array): are
        any still unfinished?"""
        sliced, self.sliced = self.sliced, []
        replies = []
        with self.server.batch.store.one_sync():
            for conn, data, request, before in sliced:
                replies.append(self._run(conn, data, request, before))  # (from its `resume`)
        for conn, reply in filter(None, replies):
            self.door.answer(conn, reply)
        return bool(self.sliced)


def _refused(request: bytes, caller: str | None, reply: bytes) -> None:
    """Log a command that was refused (one that would have changed something), with its
    caller and the first line it said."""
    try:
        prog, argv, _, env, _, _ = forwarded.decode_request(request)
        status, n, rest = reply.split(b"\0", 2)
    except ValueError:
        return
    if prog in CHANGES:
        said = rest[int(n):].decode("utf-8", "replace").strip().splitlines()
        who = caller or env.get("HPCSCHED_USER") or user_name(os.getuid())
        log(f"refused {prog} from {who} (status {int(status)}): {said[0] if said else ''}"[:500])
