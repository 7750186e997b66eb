"""A small HTTP/1.1 server for a fixed table of routes whose handlers are synchronous, serving
the extender's verbs and the webhook's reviews.

The extender's verbs and the webhook's reviews are plain functions of the request body: nothing
awaits. So each request
is answered inside ``data_received`` as soon as its last byte is parsed, with no task, future,
stream or request object per call; llhttp (``httptools``, in C) parses. A handler may instead
return an awaitable answer (/filter waiting for its caches to catch up): then that connection's
later requests wait their turn behind it (HTTP/1.1 answers in order, and each is judged after
the one before it, as sent), while every other connection is served as before. Over the same TLS
transport this costs a quarter of what aiohttp's ``web.Application`` did per request
(bench/http_layer_bench.py); kube-scheduler calls an extender one pod at a time, and
kube-apiserver calls the pod webhooks twice per GPU pod, so the HTTP layer is paid per pod.

HTTP behaviour kept: keep-alive and HTTP/1.0, Content-Length and chunked bodies, pipelined
requests answered in order, ``Expect: 100-continue``, 404 for an unknown path, 405 (with
``Allow``) for another method, HEAD where GET is served, 413 naming the limit for a body over
it (sent as soon as the size is known; the rest of the body is read and dropped, then the
connection is closed), 431 past the header limit, 400 for what llhttp cannot parse (then the
connection is closed), and a connection idle for ``IDLE_SECONDS`` is closed. A connection older
than ``MAX_AGE_SECONDS`` is closed after its next answer (``Connection: close``): kube-scheduler
calls over one kept-alive connection, and a Service balances connections, not requests, so without
this every call would go to the one replica that connection reached, for as long as it lives.
While the server is ``draining`` every answer closes its connection.

Behind ``gpuqueue.listener``'s GuardedListener (the webhook), the connection tells its guard
when a request's headers are in, its body is, and its answer is out.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import ssl
import time
from collections import deque
from email.utils import formatdate
from typing import Awaitable, Callable, NamedTuple, Union

import httptools

from gpuqueue.listener import guarded_connection

log = logging.getLogger("gpuqueue.http11")

JSON = b"application/json"
TEXT = b"text/plain; charset=utf-8"
# Longer than Go's transports keep a connection idle (90 s: kube-apiserver's and kube-scheduler's
# clients), so the client always retires an idle connection first: a connection closed here as
# the client sends a call on it fails that call (a broken pipe; neither retries a POST).
IDLE_SECONDS = 120.0
MAX_AGE_SECONDS = 10.0  # one new TLS connection per 10 s: a few ms, for calls spread over the replicas
MAX_HEADER_BYTES = 64 * 1024  # request line and headers together
MAX_QUEUED = 16  # requests pipelined behind one that waits; past that the connection is not read


class Answer(NamedTuple):
    status: int
    content_type: bytes
    body: bytes


class Route(NamedTuple):
    method: bytes  # b"GET" also serves HEAD
    handle: Callable[[bytes, "Connection"], Union[Answer, Awaitable[Answer]]]


_REASONS = {200: b"OK", 400: b"Bad Request", 403: b"Forbidden", 404: b"Not Found", 405: b"Method Not Allowed",
            413: b"Content Too Large", 431: b"Request Header Fields Too Large", 500: b"Internal Server Error",
            503: b"Service Unavailable"}
_STATUS_LINES = {code: b"HTTP/1.1 %d %s\r\n" % (code, reason) for code, reason in _REASONS.items()}
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


class _Date:
    """The Date header's value, formatted once a second."""

    second, value = 0, b""

    @classmethod
    def now(cls) -> bytes:
        t = int(time.time())
        if t != cls.second:
            cls.second, cls.value = t, formatdate(t, usegmt=True).encode()
        return cls.value


def _text(status: int, message: str) -> Answer:
    return Answer(status, TEXT, message.encode())


class Connection(asyncio.Protocol):
    """One client connection; the parser calls the ``on_*`` methods from ``feed_data``."""

    def __init__(self, server: "Server") -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.guard = None  # the GuardedConnection around this one, if any
        self.parser = httptools.HttpRequestParser(self)
        self.last_active = self.opened = time.monotonic()
        self._peercert: dict | None | bool = False  # False: not looked up yet
        # while a handler's answer is awaited: that task, and the requests read after it
        self._waiting: asyncio.Task | None = None
        self._queued: deque[tuple] = deque()
        self._queue_full = False  # reading paused until the queue is served
        self._message_begun()

    def _message_begun(self) -> None:
        self.url, self.chunks, self.size, self.header_bytes = b"", [], 0, 0
        self.expect_continue, self.refused = False, False

    # -- asyncio.Protocol --------------------------------------------------------------------

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.guard = guarded_connection(transport)
        self.server.connections.add(self)

    def connection_lost(self, exc) -> None:
        self.server.connections.discard(self)
        self.chunks = []
        self._queued.clear()
        if self._waiting is not None:
            self._waiting.cancel()

    def data_received(self, data: bytes) -> None:
        self.last_active = time.monotonic()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError:
            log.exception("answering an HTTP request failed")
            self._finish(self.server.text(500, "internal error"), close=True)
        except httptools.HttpParserUpgrade:
            self._finish(self.server.text(400, "protocol upgrades are not served"), close=True)
        except httptools.HttpParserError as exc:
            if not self.refused:
                self._finish(self.server.text(400, f"malformed HTTP request: {exc}"), close=True)
            elif self.transport is not None:
                self.transport.close()

    def pause_writing(self) -> None:  # a client that does not read its answers stops being read
        self.transport.pause_reading()

    def resume_writing(self) -> None:
        self.transport.resume_reading()

    # -- parser callbacks ----------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._message_begun()

    def on_url(self, url: bytes) -> None:
        self.url += url
        self._count_header_bytes(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_header_bytes(len(name) + len(value) + 4)
        if len(name) == 14 and name.lower() == b"content-length":
            if int(value) > self.server.max_request_bytes:
                self._refuse_body(int(value))
        elif len(name) == 6 and name.lower() == b"expect" and value.lower() == b"100-continue":
            self.expect_continue = True

    def on_headers_complete(self) -> None:
        if self.guard is not None:
            self.guard.request_started()
        if self.expect_continue and not self.refused:
            self.transport.write(_CONTINUE)

    def on_body(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.refused:
            if self.size > self.server.max_request_bytes:  # dropped enough of it: stop reading
                self.transport.close()
            return
        if self.size > self.server.max_request_bytes:  # a chunked body, its size not said upfront
            self._refuse_body(self.size)
        else:
            self.chunks.append(chunk)

    def on_message_complete(self) -> None:
        if self.refused or self.transport.is_closing():  # the 413 went out, the body is read to its end
            self.transport.close()
            return
        if self.parser.should_upgrade():  # llhttp stops before the body: data_received answers 400
            return
        if self.guard is not None:
            self.guard.body_received()
        path = self.url.split(b"?", 1)[0]
        body = self.chunks[0] if len(self.chunks) == 1 else b"".join(self.chunks)
        self.chunks = []
        request = (path, self.parser.get_method(), body, not self.parser.should_keep_alive())
        if self._waiting is not None:
            self._queued.append(request)
            if len(self._queued) == MAX_QUEUED:
                self._queue_full = True
                self.transport.pause_reading()
            return
        self._serve(request)

    def _serve(self, request: tuple) -> None:
        """Answer ``request``, or start awaiting its answer (``_waiting``)."""
        path, method, body, close = request
        route = self.server.routes.get(path)
        if route is None:
            answer = _text(404, f"404: Not Found: {path.decode('latin-1')}")
        elif method != route.method and not (method == b"HEAD" and route.method == b"GET"):
            answer = _text(405, f"405: Method Not Allowed: {method.decode('latin-1')} {path.decode('latin-1')}")
        else:
            answer = route.handle(body, self)
            if inspect.isawaitable(answer):
                self._waiting = asyncio.ensure_future(self._answer_later(answer, method, close))
                return
        self._finish(answer, close=close, head=method == b"HEAD",
                     allow=route.method if answer.status == 405 else None)

    async def _answer_later(self, pending: Awaitable[Answer], method: bytes, close: bool) -> None:
        try:
            answer = await pending
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - the handler's own errors are answered by it; this is a bug
            log.exception("answering an HTTP request failed")
            answer, close = self.server.text(500, "internal error"), True
        self._waiting = None
        self._finish(answer, close=close, head=method == b"HEAD")
        while self._queued and self._waiting is None and not self.transport.is_closing():
            self._serve(self._queued.popleft())
        if self._queue_full and self._waiting is None and not self.transport.is_closing():
            self._queue_full = False
            self.transport.resume_reading()

    # -- answering -----------------------------------------------------------------------------

    @property
    def peercert(self) -> dict | None:
        """The client certificate the TLS handshake verified, if one was presented."""
        if self._peercert is False:
            self._peercert = self.transport.get_extra_info("peercert") if self.transport is not None else None
        return self._peercert

    def _count_header_bytes(self, n: int) -> None:
        self.header_bytes += n
        if self.header_bytes > MAX_HEADER_BYTES and not self.refused:
            self.refused = True
            if self._waiting is not None:  # its answer would overtake the one awaited
                self.transport.close()
                return
            self._finish(self.server.text(431, f"request line and headers over {MAX_HEADER_BYTES} bytes"), close=True)

    def _refuse_body(self, size: int) -> None:
        if self.refused:
            return
        self.refused, self.chunks, self.size = True, [], 0
        if self._waiting is not None:  # its answer would overtake the one awaited
            self.transport.close()
            return
        self._finish(self.server.too_large(size), close=False, closing=True)

    def _finish(self, answer: Answer, close: bool, head: bool = False, allow: bytes | None = None,
                closing: bool = False) -> None:
        """Write ``answer``; ``close`` closes the connection after it, ``closing`` only says so
        (the connection is closed once the request's body has been read)."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if not close and not self._queued and (self.server.draining or self.last_active - self.opened > MAX_AGE_SECONDS):
            close = True  # (nothing pipelined behind it: no request read is left unanswered)
        body = answer.body
        transport.write(b"".join((
            _STATUS_LINES[answer.status], b"Content-Type: ", answer.content_type,
            b"\r\nContent-Length: ", b"%d" % len(body), b"\r\nDate: ", _Date.now(),
            b"\r\nServer: gpuqueue\r\n",
            b"Allow: %s\r\n" % (b"GET, HEAD" if allow == b"GET" else allow) if allow else b"",
            b"Connection: close\r\n\r\n" if close or closing else b"\r\n",
            b"" if head else body)))
        if self.guard is not None:
            self.guard.request_finished()
        if close:
            transport.close()


class Server:
    """Serves ``routes`` ({path: Route}) until ``cleanup()``; ``addresses`` are the bound
    (host, port) pairs, as aiohttp's runners give them. ``name`` starts the text of the answers
    the server makes itself; ``too_large(size)`` is the answer to a body over
    ``max_request_bytes`` (default: a line naming the limit)."""

    def __init__(self, routes: dict[bytes, Route], max_request_bytes: int, name: str = "gpuqueue extender",
                 too_large: Callable[[int], Answer] | None = None) -> None:
        self.routes = routes
        self.max_request_bytes = max_request_bytes
        self.name = name
        self.draining = False
        if too_large is not None:
            self.too_large = too_large
        self.connections: set[Connection] = set()
        self.addresses: list[tuple] = []
        self._server: asyncio.base_events.Server | None = None
        self._tasks: list[asyncio.Task] = []

    def text(self, status: int, message: str) -> Answer:
        return _text(status, f"{self.name}: {message}")

    def too_large(self, size: int) -> Answer:
        return self.text(413, f"request body of {size} bytes or more is over the limit of {self.max_request_bytes} "
                              f"bytes (--max-request-bytes)")

    def connection(self) -> Connection:
        """A new connection's protocol, for a listener of the caller's (instead of ``listen``)."""
        return Connection(self)

    async def listen(self, host: str, port: int, ssl_context: ssl.SSLContext | None) -> None:
        self._server = await asyncio.get_running_loop().create_server(
            lambda: Connection(self), host, port, ssl=ssl_context, reuse_address=True)
        self.addresses = [s.getsockname() for s in self._server.sockets]
        self.run_while_serving(self._close_idle())

    def run_while_serving(self, coro) -> None:
        """Run ``coro`` as a task that ``cleanup()`` cancels."""
        self._tasks.append(asyncio.get_running_loop().create_task(coro))

    async def _close_idle(self) -> None:
        while True:
            await asyncio.sleep(IDLE_SECONDS / 5)
            stale = time.monotonic() - IDLE_SECONDS
            for conn in [c for c in self.connections if c.last_active < stale]:
                conn.transport.close()

    async def cleanup(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.transport.close()
        if self._server is not None:
            await self._server.wait_closed()
        await asyncio.sleep(0)  # let the transports' close callbacks run
