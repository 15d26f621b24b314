"""The command door: the server's side of the command socket (pbs/front.py's protocol).

No client can hold the server.  Connections are read as their bytes come, beside every
other (one selector, no thread): a request not whole within READ_DEADLINE of its
connection, or larger than `max_request` bytes, is refused in one line and dropped; a
reply a client does not read within WRITE_DEADLINE is dropped.  The commands themselves
run one at a time (the state change stays serial), every request that is whole at once
in one batch, whose journal appends are made durable by one fsync (group commit) before
any of its replies is sent: no client hears "done" of a change a crash could lose.
"""
from __future__ import annotations

import os
import selectors
import socket
import time
from dataclasses import dataclass, field

from ..pbs import common, forwarded
from . import privilege

READ_DEADLINE = 2.0  # seconds from connecting to a whole request
WRITE_DEADLINE = 10.0  # seconds a client has to take its reply
MAX_REQUEST = 16 << 20  # bytes (config `max_request`): a request past it is refused
MAX_CONNECTIONS = 64  # open at once per user: one more is refused at once


@dataclass(eq=False)
class Connection:
    """One client: its request as read so far, then its reply as left to send."""

    sock: socket.socket
    uid: int
    deadline: float
    data: bytearray = field(default_factory=bytearray)
    reply: bytes = b""


class Door:
    """The connections of a server's command socket, registered on its selector."""

    def __init__(self, sel: selectors.BaseSelector, listener: socket.socket, multi: bool, limit: int):
        self.sel, self.listener, self.multi, self.limit = sel, listener, multi, limit
        self.open: dict[socket.socket, Connection] = {}
        self.ready: list[Connection] = []  # whole requests, in the order they came

    def deadline(self) -> float | None:
        """The soonest a connection times out (None: none open)."""
        return min((c.deadline for c in self.open.values()), default=None)

    def event(self, sock: socket.socket, mask: int) -> bool:
        """Handle what the selector says of one of the door's sockets; is it the door's?"""
        if sock is self.listener:
            self._accept()
        elif sock in self.open:
            conn = self.open[sock]
            if conn.reply:
                self._write(conn)
            else:
                self._read(conn)
        else:
            return False
        return True

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return  # (out of descriptors: the clients wait in the backlog)
            sock.setblocking(False)
            try:
                uid = privilege.peer(sock)[1]
            except OSError:
                sock.close()
                continue
            conn = Connection(sock, uid, time.monotonic() + READ_DEADLINE)
            self.open[sock] = conn
            self.sel.register(sock, selectors.EVENT_READ)
            if not self.multi and uid not in (os.getuid(), 0):
                self._answer(conn, forwarded.encode_reply(common.UNAUTHORIZED, b"", b"hpcsched: not this server's user\n"))
            elif sum(c.uid == uid for c in self.open.values()) > MAX_CONNECTIONS:
                self._refuse(conn, f"more than {MAX_CONNECTIONS} of your requests are open at once")

    def _read(self, conn: Connection) -> None:
        try:
            while chunk := conn.sock.recv(1 << 16):
                conn.data += chunk
                if len(conn.data) > self.limit:
                    return self._refuse(conn, f"the request is larger than {self.limit} bytes (max_request)")
        except (BlockingIOError, InterruptedError):
            return  # (more to come)
        except OSError:
            return self._drop(conn)
        self.sel.unregister(conn.sock)  # the client said all it had to (it shut its side down)
        self.ready.append(conn)

    def take(self) -> list[tuple[Connection, bytes, str | None]]:
        """The whole requests waiting to run: (connection, request, caller as the kernel
        names it; None for the server's own user on a single-user rig)."""
        ready, self.ready = self.ready, []
        for c in ready:
            c.deadline = float("inf")  # (the server's to answer now: a long one runs in slices)
        return [(c, bytes(c.data), None if c.uid == os.getuid() and not self.multi else _user_name(c.uid))
                for c in ready if c.sock in self.open]

    def answer(self, conn: Connection, reply: bytes) -> None:
        """Send a command's reply (what the socket does not take now, as it becomes writable)."""
        conn.data = bytearray()
        self._answer(conn, reply)

    def _answer(self, conn: Connection, reply: bytes) -> None:
        conn.reply, conn.deadline = reply, time.monotonic() + WRITE_DEADLINE
        try:
            self.sel.modify(conn.sock, selectors.EVENT_WRITE)
        except KeyError:
            self.sel.register(conn.sock, selectors.EVENT_WRITE)
        self._write(conn)

    def _write(self, conn: Connection) -> None:
        try:
            while conn.reply:
                conn.reply = conn.reply[conn.sock.send(conn.reply):]
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            pass  # the client went away; what its command did (or not) is in the store
        self._drop(conn)

    def _refuse(self, conn: Connection, why: str) -> None:
        self._answer(conn, forwarded.encode_reply(1, b"", f"hpcsched: {why}: refused\n".encode()))

    def expire(self, now: float) -> None:
        """Drop the connections past their deadline: a request not whole is refused."""
        for conn in [c for c in self.open.values() if c.deadline <= now]:
            if conn.reply or conn in self.ready:
                self._drop(conn)
            else:
                self._refuse(conn, f"the request did not arrive whole within {READ_DEADLINE:g} s")

    def _drop(self, conn: Connection) -> None:
        self.open.pop(conn.sock, None)
        try:
            self.sel.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conn.sock.close()

    def close(self) -> None:
        for conn in list(self.open.values()):
            self._drop(conn)


def _user_name(uid: int) -> str:
    from ..store.site import user_name
    return user_name(uid)
