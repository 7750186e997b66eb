"""A TLS listener that bounds what slow, idle or numerous clients can hold of a server.

Behind aiohttp's own listener, 800 clients sending a request a byte every second (slowloris)
took the webhook from 96 to 315 MiB and were never closed (bench/webhook_slowloris.py): aiohttp
has no header or body timeout, keeps an idle connection for an hour, accepts without limit, and
asyncio's TLS layer allocates a 256 KiB read buffer per connection at accept. With
``failurePolicy: Fail``, a webhook killed past its memory limit refuses every request it
matches. This listener:

- accepts at most ``max_connections`` at once, TLS handshakes included, each with a 32 KiB TLS
  read buffer (``_ServerTLS``);
- gives each connection ``header_timeout`` from its accept (the TLS handshake included), and
  from the first byte of each later request, to deliver a request's headers; ``body_timeout``
  from there to its answer (body read and request handled); ``idle_timeout`` between requests.
  Past its deadline a connection is aborted (no TLS close_notify exchange to wait for);
- at the cap, makes room for a new connection by closing the connection slow the longest (in
  its handshake, headers or body for over ``slow_after``), else the one idle the longest (over
  ``idle_evict_after``), else - when another client holds more slots than the newcomer's - that
  client's oldest connection without a request in flight. So a tenant's pod that floods the port
  cannot take kube-apiserver's slots, nor its kept-alive connections;
- otherwise the new connection waits, accepted but not yet served (its socket only, nothing
  allocated for TLS), for a slot: the next one freed goes to the waiting client that holds the
  fewest slots, the longest waiting first. A waiter's handshake time counts from its accept, so
  one still waiting after ``header_timeout`` is reset; so is the newest waiter of the client with
  the most waiting when ``max_waiting`` are. kube-apiserver calls a webhook over HTTP/1.1 with a
  connection per call in flight: under a burst it opens hundreds, and a reset one is a failed
  call (a pod creation refused with HTTP 500 under failurePolicy Fail); a waiting one is a call
  answered a moment later.

The HTTP layer stays whatever serves the protocol (aiohttp for the webhook): each connection's
protocol is wrapped in a ``GuardedConnection`` that sees the decrypted bytes go by, and the HTTP
layer calls ``request_started()`` once a request's headers are in, ``body_received()`` once its
body is, and ``request_finished()`` when its answer is written (``guarded_connection(transport)``
finds it).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import ssl
import struct
from asyncio import sslproto
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("gpuqueue.listener")

HANDSHAKE, HEADERS, BODY, HANDLING, IDLE = "handshake", "headers", "body", "handling", "idle"
SLOW_PHASES = (HANDSHAKE, HEADERS, BODY)


@dataclass(frozen=True)
class ConnectionLimits:
    max_connections: int = 256
    header_timeout: float = 5.0
    body_timeout: float = 10.0
    idle_timeout: float = 120.0  # longer than Go clients keep one idle (http11.IDLE_SECONDS)
    # kube-apiserver sends a review's headers and body in one go, right after its handshake: a
    # connection still in its handshake, headers or body after this long is slow, and is the
    # first to go when a new connection needs its slot.
    slow_after: float = 1.0
    # kube-apiserver keeps connections open for its next reviews: one idle for a moment is not
    # taken away from it; one idle this long is, when a new connection needs the slot.
    idle_evict_after: float = 5.0
    # Accepted connections waiting for a slot (a socket each, nothing more).
    max_waiting: int = 1024

    def __post_init__(self) -> None:
        if self.max_connections < 1:
            raise ValueError(f"max connections must be at least 1, got {self.max_connections}")
        if self.max_waiting < 0:
            raise ValueError(f"max waiting connections must be 0 or more, got {self.max_waiting}")
        for name in ("header_timeout", "body_timeout", "idle_timeout", "slow_after", "idle_evict_after"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name.replace('_', ' ')} must be a positive number of seconds, got {getattr(self, name)}")


class _ServerTLS(sslproto.SSLProtocol):
    """asyncio's TLS layer with a 32 KiB socket read buffer instead of 256 KiB. asyncio allocates
    (and zero-fills) that buffer for every accepted connection before the handshake, so it is most
    of what a connection costs: 0.28 MiB each with 256 KiB, 0.06 MiB with 32 KiB (measured with
    bench/webhook_slowloris.py). A TLS record is at most 16 KiB and a bit, so 32 KiB still takes in
    two per read; the webhook's reviews are a few KiB."""

    max_size = 32 * 1024


class GuardedConnection(asyncio.Protocol):
    """One accepted connection, from its accept (before the TLS handshake) to its close: its phase,
    since when, and its deadline; wraps the HTTP layer's protocol ``inner``, made at the handshake."""

    def __init__(self, listener: "GuardedListener", sock: socket.socket, peer: str, now: float) -> None:
        self.listener, self.sock, self.peer = listener, sock, peer
        self.inner: asyncio.Protocol | None = None
        self.transport: asyncio.Transport | None = None
        self.phase, self.since = HANDSHAKE, now
        self.deadline = now + listener.limits.header_timeout  # the handshake counts against the headers' time
        self.open = True  # holds one of the listener's slots
        listener.connections.add(self)
        listener.by_peer[peer] = listener.by_peer.get(peer, 0) + 1

    def _enter(self, phase: str, timeout: float | None) -> None:
        now = self.listener.now()
        self.phase, self.since = phase, now
        if timeout is not None:
            self.deadline = now + timeout

    # -- what the HTTP layer says -----------------------------------------------------------------
    def request_started(self) -> None:
        self._enter(BODY, self.listener.limits.body_timeout)

    def body_received(self) -> None:
        self._enter(HANDLING, None)  # still within the body timeout, but no longer slow: in flight

    def request_finished(self) -> None:
        self._enter(IDLE, self.listener.limits.idle_timeout)

    # -- asyncio.Protocol, passed on ---------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport
        if not self.open:  # closed during its handshake, which completed all the same
            transport.abort()
            return
        self.phase = HEADERS  # since and deadline still count from the accept
        self.inner = self.listener.protocol_factory()
        self.inner.connection_made(transport)

    def connection_lost(self, exc) -> None:
        self._release()
        if self.inner is not None:
            self.inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.phase == IDLE:  # the first byte of the next request: its headers are due
            self._enter(HEADERS, self.listener.limits.header_timeout)
        self.inner.data_received(data)

    def eof_received(self):
        return self.inner.eof_received()

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    # -- closing ------------------------------------------------------------------------------------
    def _release(self) -> None:
        if self.open:
            self.open = False
            self.listener.connections.discard(self)
            left = self.listener.by_peer.pop(self.peer) - 1
            if left:
                self.listener.by_peer[self.peer] = left
            self.listener.slot_freed()

    def abort(self) -> None:
        """Close at once, without the TLS close_notify exchange; the slot is free immediately."""
        self._release()
        if self.transport is not None:
            self.transport.abort()
            return
        try:  # still in the handshake, whose transport is not ours to reach: end the socket under it
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def guarded_connection(transport) -> GuardedConnection | None:
    protocol = transport.get_protocol() if transport is not None else None
    return protocol if isinstance(protocol, GuardedConnection) else None


def _reset(sock: socket.socket) -> None:
    """Close with an RST, so the client learns at once and no TIME_WAIT is left behind."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


class GuardedListener:
    """Serves ``protocol_factory`` (e.g. aiohttp's ``runner.server``) over TLS within ``limits``."""

    def __init__(self, protocol_factory: Callable[[], asyncio.Protocol], ssl_context: ssl.SSLContext | None,
                 limits: ConnectionLimits = ConnectionLimits()) -> None:
        self.protocol_factory, self.ssl_context, self.limits = protocol_factory, ssl_context, limits
        self.connections: set[GuardedConnection] = set()  # each holds a slot, from accept to close
        self.by_peer: dict[str, int] = {}  # slots held per client address
        self.waiting: list[tuple[socket.socket, str, float]] = []  # (socket, peer, accepted at), for a slot
        self.waited = 0  # connections that waited for a slot and were served
        self._evicting = False
        self.refused = 0  # connections reset at the cap: past their wait, or the queue full
        self.evicted = 0  # slow or idle connections closed at the cap to make room
        self.expired = 0  # connections aborted past a deadline
        self.port = 0
        self._sock: socket.socket | None = None
        self._tasks: set[asyncio.Task] = set()
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def active(self) -> int:
        return len(self.connections)

    def now(self) -> float:
        assert self._loop is not None
        return self._loop.time()

    async def listen(self, host: str, port: int, backlog: int = 511) -> None:
        self._loop = asyncio.get_running_loop()
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            self._sock = socket.create_server((host, port), family=family, backlog=backlog)
        except OSError as exc:  # worded as asyncio's create_server words it, for one message across servers
            raise OSError(exc.errno, f"error while attempting to bind on address {(host, port)!r}: "
                                     f"{os.strerror(exc.errno).lower() if exc.errno else exc}") from None
        self._sock.setblocking(False)
        self.port = self._sock.getsockname()[1]
        self._spawn(self._accept())
        self._spawn(self._expire())

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._sock is not None
        while True:
            try:
                sock, address = await loop.sock_accept(self._sock)
            except OSError as exc:  # out of file descriptors, a client gone before accept, ...
                log.warning("accepting a connection failed: %s", exc)
                await asyncio.sleep(0.1)
                continue
            peer = address[0] if isinstance(address, tuple) else str(address)
            if self.active >= self.limits.max_connections and not self._make_room(peer):
                self._wait(sock, peer, loop.time())
                continue
            self._spawn(self._start(GuardedConnection(self, sock, peer, loop.time())))

    def _wait(self, sock: socket.socket, peer: str, now: float) -> None:
        if len(self.waiting) >= self.limits.max_waiting:
            counts: dict[str, int] = {}
            for _, p, _ in self.waiting:
                counts[p] = counts.get(p, 0) + 1
            top = max(counts, key=counts.__getitem__) if counts else None
            if top is None or top == peer or counts[top] <= counts.get(peer, 0) + 1:
                self.refused += 1
                _reset(sock)
                return
            newest = max((w for w in self.waiting if w[1] == top), key=lambda w: w[2])
            self.waiting.remove(newest)
            self.refused += 1
            _reset(newest[0])
        self.waiting.append((sock, peer, now))

    def slot_freed(self) -> None:
        """A slot came free: the waiting client holding the fewest slots gets it, the longest
        waiting first."""
        if not self.waiting or self._evicting or self._loop is None or self._sock is None:
            return
        entry = min(self.waiting, key=lambda w: (self.by_peer.get(w[1], 0), w[2]))
        self.waiting.remove(entry)
        sock, peer, accepted = entry
        self.waited += 1
        self._spawn(self._start(GuardedConnection(self, sock, peer, accepted)))

    def _make_room(self, newcomer: str) -> bool:
        """At the cap, close one connection for a new one from ``newcomer``: the one slow the
        longest, else the one idle the longest (past ``idle_evict_after``), else - when the client
        holding the most slots is not the newcomer and holds more than it - that client's oldest
        connection without a request in flight. False (the newcomer is refused) otherwise: the
        slots are young or in flight, and the newcomer has its share."""
        now, limits = self.now(), self.limits
        victims = [c for c in self.connections if c.phase in SLOW_PHASES and now - c.since >= limits.slow_after]
        if not victims:
            victims = [c for c in self.connections if c.phase == IDLE and now - c.since >= limits.idle_evict_after]
        if not victims:
            hog, held = max(self.by_peer.items(), key=lambda kv: kv[1])
            if hog != newcomer and held > self.by_peer.get(newcomer, 0) + 1:
                victims = [c for c in self.connections if c.peer == hog and c.phase != HANDLING]
        if not victims:
            return False
        self._evicting = True  # the slot freed is the newcomer's, not a waiter's
        try:
            min(victims, key=lambda c: c.since).abort()
        finally:
            self._evicting = False
        self.evicted += 1
        return True

    async def _start(self, conn: GuardedConnection) -> None:
        loop = asyncio.get_running_loop()
        try:
            if self.ssl_context is None:
                await loop.connect_accepted_socket(lambda: conn, conn.sock)
                return
            handshake = loop.create_future()
            tls = _ServerTLS(loop, conn, self.ssl_context, handshake, server_side=True,
                             ssl_handshake_timeout=self.limits.header_timeout,
                             ssl_shutdown_timeout=self.limits.header_timeout)
            await loop.connect_accepted_socket(lambda: tls, conn.sock)
            await handshake  # on success, ``tls`` has called conn.connection_made
        except (OSError, asyncio.TimeoutError) as exc:  # handshake failed or timed out (ssl.SSLError is an OSError)
            log.debug("connection dropped before its TLS handshake completed: %s", exc)
            conn.abort()
            conn.sock.close()
            # The exception's traceback holds the frames it went through - asyncio's TLS layer's,
            # one of which holds the exception again - with the TLS state (its buffer, OpenSSL's) in
            # their locals: a cycle only a full garbage collection frees.
            # A reconnecting flood of failed handshakes grew the webhook by 20 MiB a second so.
            exc.__traceback__ = None

    async def _expire(self) -> None:
        limits = self.limits
        tick = min(1.0, max(0.05, min(limits.header_timeout, limits.body_timeout, limits.idle_timeout) / 5))
        while True:
            await asyncio.sleep(tick)
            now = self.now()
            for conn in [c for c in self.connections if c.deadline <= now]:
                self.expired += 1
                conn.abort()
            late = [w for w in self.waiting if w[2] + limits.header_timeout <= now]
            for entry in late:
                self.waiting.remove(entry)
                self.refused += 1
                _reset(entry[0])

    async def close(self, grace: float = 1.0) -> None:
        """Stop accepting, give requests in flight up to ``grace`` seconds, then abort everything."""
        for task in list(self._tasks):
            task.cancel()
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        for sock, _, _ in self.waiting:
            _reset(sock)
        self.waiting.clear()
        if self._loop is not None:
            deadline = self.now() + grace
            while any(c.phase in (BODY, HANDLING) for c in self.connections) and self.now() < deadline:
                await asyncio.sleep(0.02)
        for conn in list(self.connections):
            conn.abort()
        await asyncio.sleep(0)  # let the transports' connection_lost callbacks run
