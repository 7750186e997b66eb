"""HTTP/2 for the webhook, offered by ALPN next to HTTP/1.1.

kube-apiserver's webhook client speaks HTTP/2 when the server offers it, and then sends every
review over one connection, a stream each. Over HTTP/1.1 it keeps at most 25 idle connections per
webhook host and opens a new one for each call beyond them: a full TLS handshake, about 1 ms of
the webhook's CPU against 0.1-0.2 ms for the review itself (bench/webhook_bench.py --close). A
burst that slows the webhook down therefore makes every further call dearer, until the
connections pile up at the listener's cap and calls are dropped. HTTP/2 also lets a webhook that
stops say which calls it has not taken (GOAWAY), and the client sends those again elsewhere: a
rolling upgrade drops none.

The protocol is the `h2` library's; this module holds only what it leaves to a server: streams
mapped to handlers of a body (``Routes``, the same ones aiohttp serves over HTTP/1.1), flow
control of the answers, and the limits: a body over ``max_body`` gets 413 without being kept;
at most ``max_streams`` handlers run per connection, and a client that keeps opening streams past
that (or resetting them, the "rapid reset" attack, whose handlers would go on running) is sent
GOAWAY and cut off. Each connection's ``GuardedConnection`` still holds its slot, and is told how
old its oldest stream in flight is (its deadline is the body timeout from then).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
import hyperframe.frame

from gpuqueue.listener import GuardedConnection, guarded_connection

log = logging.getLogger("gpuqueue.h2")

PlainHandler = Callable[[bytes], Awaitable[tuple[int, bytes, str]]]  # body -> (status, answer, content type)
Routes = Mapping[tuple[str, str], PlainHandler]  # (method, path) -> handler

# Streams refused (over max_streams in flight) or reset by the client, beyond which a connection
# is taken for an attack: kube-apiserver never resets a stream it wants answered, and stays within
# the advertised limit.
REFUSAL_BUDGET = 100


class _Stream:
    __slots__ = ("method", "path", "body", "started", "size_refused")

    def __init__(self, method: str, path: str, started: float) -> None:
        self.method, self.path, self.started = method, path, started
        self.body = bytearray()
        self.size_refused = False


class H2Protocol(asyncio.Protocol):
    def __init__(self, routes: Routes, *, max_body: int, too_big: bytes, max_streams: int = 128) -> None:
        self.routes, self.max_body, self.too_big, self.max_streams = routes, max_body, too_big, max_streams
        self.transport: asyncio.Transport | None = None
        self.guard: GuardedConnection | None = None
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding="utf-8"))
        self.streams: dict[int, _Stream] = {}  # received, not yet answered
        self.handling: dict[int, float] = {}  # stream -> its start, while its handler runs
        self.refusals = 0
        self.draining = False
        self._window_open: dict[int, asyncio.Event] = {}
        self._tasks: set[asyncio.Task] = set()

    # -- asyncio.Protocol ---------------------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport
        self.guard = guarded_connection(transport)
        self.conn.initiate_connection()
        self.conn.update_settings({h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: self.max_streams,
                                   h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: 64 * 1024})
        self._flush()
        self._report()

    def data_received(self, data: bytes) -> None:
        try:
            events = self.conn.receive_data(data)
        except h2.exceptions.ProtocolError as exc:
            log.info("HTTP/2 protocol error from %s, closing: %s", self.guard.peer if self.guard else "?", exc)
            self._flush()
            self._cut_off()
            return
        for event in events:
            if self.transport is None:  # cut off by an earlier event
                return
            if isinstance(event, h2.events.RequestReceived):
                self._request(event)
            elif isinstance(event, h2.events.DataReceived):
                self._data(event)
            elif isinstance(event, h2.events.StreamEnded):
                self._ended(event.stream_id)
            elif isinstance(event, h2.events.StreamReset):
                self._reset_by_client(event.stream_id)
            elif isinstance(event, h2.events.WindowUpdated):
                self._window_updated(event.stream_id)
            elif isinstance(event, h2.events.ConnectionTerminated):
                self.draining = True  # the client's GOAWAY: answer what it sent, then close
        self._flush()
        self._close_when_done()

    def connection_lost(self, exc) -> None:
        for ev in self._window_open.values():
            ev.set()  # senders waiting for a window learn the connection is gone
        self.transport = None

    # -- what GuardedListener asks --------------------------------------------------------------------
    def drain(self) -> None:
        """Stop taking new streams and close once those taken are answered. The GOAWAY names the
        last stream taken; the client sends any later one again on another connection. It is
        written past h2's state machine, which after its own close_connection would take no more
        frames, not even the rest of the streams being answered."""
        if self.transport is None or self.draining:
            return
        self.draining = True
        self._flush()
        goaway = hyperframe.frame.GoAwayFrame(0)
        goaway.last_stream_id = self.conn.highest_inbound_stream_id
        goaway.error_code = h2.errors.ErrorCodes.NO_ERROR
        self.transport.write(goaway.serialize())
        self._close_when_done()

    def _close_when_done(self) -> None:
        if self.draining and not self.handling and self.transport is not None:
            self.conn.close_connection(last_stream_id=self.conn.highest_inbound_stream_id)
            self._flush()
            self.transport.close()
            self.transport = None

    # -- streams --------------------------------------------------------------------------------------
    def _request(self, event: h2.events.RequestReceived) -> None:
        sid = event.stream_id
        if self.draining:  # sent before our GOAWAY reached the client: it sends this one again elsewhere
            self.conn.reset_stream(sid, h2.errors.ErrorCodes.REFUSED_STREAM)
            return
        if len(self.streams) >= self.max_streams:
            self._refuse(sid)
            return
        headers = dict(event.headers)
        stream = _Stream(headers.get(":method", ""), headers.get(":path", "").split("?", 1)[0], self._now())
        self.streams[sid] = stream
        length = headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body:
            self._refuse_size(sid, stream)

    def _data(self, event: h2.events.DataReceived) -> None:
        sid = event.stream_id
        self.conn.acknowledge_received_data(event.flow_controlled_length, sid)
        stream = self.streams.get(sid)
        if stream is None or stream.size_refused:
            return
        if len(stream.body) + len(event.data) > self.max_body:
            self._refuse_size(sid, stream)
            return
        stream.body += event.data

    def _ended(self, sid: int) -> None:
        stream = self.streams.get(sid)
        if stream is not None and stream.size_refused:
            del self.streams[sid]
            self._report()
            return
        if stream is None or sid in self.handling:
            return
        self.handling[sid] = stream.started
        self._report()
        handler = self.routes.get((stream.method, stream.path))
        task = asyncio.get_running_loop().create_task(self._handle(sid, stream, handler))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _handle(self, sid: int, stream: _Stream, handler: PlainHandler | None) -> None:
        try:
            if handler is None:
                known = any(path == stream.path for _, path in self.routes)
                status, answer, ctype = (405, b"method not allowed\n", "text/plain") if known else \
                    (404, b"not found\n", "text/plain")
            else:
                status, answer, ctype = await handler(bytes(stream.body))
            await self._respond(sid, status, answer, ctype)
        except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError, ConnectionError):
            pass  # the client reset the stream or left: nobody to answer
        finally:
            self.streams.pop(sid, None)
            self.handling.pop(sid, None)
            self._window_open.pop(sid, None)
            self._report()
            self._close_when_done()

    async def _respond(self, sid: int, status: int, body: bytes, content_type: str) -> None:
        if self.transport is None:
            return
        self.conn.send_headers(sid, [(":status", str(status)), ("content-type", content_type),
                                     ("content-length", str(len(body)))], end_stream=not body)
        view = memoryview(body)
        while view:
            window = min(self.conn.local_flow_control_window(sid), self.conn.max_outbound_frame_size)
            if window <= 0:
                ev = self._window_open.setdefault(sid, asyncio.Event())
                ev.clear()
                self._flush()
                await ev.wait()
                if self.transport is None:
                    return
                continue
            chunk, view = view[:window], view[window:]
            self.conn.send_data(sid, bytes(chunk), end_stream=not view)
        self._flush()

    def _window_updated(self, sid: int) -> None:
        targets = self._window_open.values() if sid == 0 else [self._window_open.get(sid)]
        for ev in list(targets):
            if ev is not None:
                ev.set()

    def _reset_by_client(self, sid: int) -> None:
        self.refusals += 1
        if sid not in self.handling:
            self.streams.pop(sid, None)
        self._check_budget()

    def _refuse(self, sid: int) -> None:
        self.refusals += 1
        self.conn.reset_stream(sid, h2.errors.ErrorCodes.REFUSED_STREAM)
        self._check_budget()

    def _refuse_size(self, sid: int, stream: _Stream) -> None:
        """Answer 413 at once; what the client still sends is acknowledged and dropped until it ends
        its stream (no reset: data in flight on a reset stream would use up the connection's window)."""
        stream.size_refused = True
        stream.body = bytearray()
        self.conn.send_headers(sid, [(":status", "413"), ("content-type", "application/json"),
                                     ("content-length", str(len(self.too_big)))])
        self.conn.send_data(sid, self.too_big, end_stream=True)  # a few hundred bytes: within any window

    def _check_budget(self) -> None:
        if self.refusals > REFUSAL_BUDGET and self.transport is not None:
            log.warning("HTTP/2 client %s refused or reset over %d streams: cut off",
                        self.guard.peer if self.guard else "?", REFUSAL_BUDGET)
            self.conn.close_connection(error_code=h2.errors.ErrorCodes.ENHANCE_YOUR_CALM)
            self._flush()
            self._cut_off()

    # -- plumbing -------------------------------------------------------------------------------------
    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    def _report(self) -> None:
        if self.guard is not None:
            self.guard.multiplexed(min(self.handling.values(), default=None) if self.handling else
                                   min((s.started for s in self.streams.values()), default=None))

    def _flush(self) -> None:
        data = self.conn.data_to_send()
        if data and self.transport is not None:
            self.transport.write(data)

    def _cut_off(self) -> None:
        """Close after the GOAWAY just queued is written (abort would drop it unsent)."""
        if self.transport is not None:
            self.transport.close()
            self.transport = None
