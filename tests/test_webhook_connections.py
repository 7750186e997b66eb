"""Slow, idle and numerous clients against the real webhook app over real TLS: trickling clients
are closed after the header (or body) timeout, at the connection cap new connections wait for a
slot (reset past the header timeout, or when too many wait) while the requests in flight finish, a slow client or a client holding every slot gives
one up to another client, and reviews are answered during and after a trickle. Short limits keep
the tests fast; the product's defaults are in gpuqueue/listener.py, the figures with 800 clients
in bench/webhook_slowloris.py and docs/webhook.md."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import time
import tracemalloc

import pytest

from gpuqueue.listener import ConnectionLimits
from tests.webhook_support import client_context, load_review, make_cert_dir, running_webhook, wire

MUTATE = "/mutate-batch-v1-job"
REVIEW = wire(load_review("mutating-review-request.job-create.suspend-false.json"))
HEAD = (b"POST /mutate-batch-v1-job?timeout=10s HTTP/1.1\r\nHost: gpuqueue-webhook.gpuqueue-system.svc:443\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(REVIEW))
TENANT, APISERVER = "127.0.0.2", "127.0.0.1"  # two clients: a tenant's pod and kube-apiserver
CLOSED = (ConnectionError, ssl.SSLError, asyncio.IncompleteReadError, OSError)


@pytest.fixture(scope="module")
def cert_dir(tmp_path_factory):
    return make_cert_dir(tmp_path_factory.mktemp("tls"))


async def connect(hook, source: str = APISERVER):
    return await asyncio.open_connection("127.0.0.1", hook.port, ssl=client_context(hook.cert_dir),
                                         local_addr=(source, 0))


async def answer(reader: asyncio.StreamReader, timeout: float = 5.0) -> dict:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
    assert head.startswith(b"HTTP/1.1 200"), head
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    return json.loads(await asyncio.wait_for(reader.readexactly(length), timeout))


async def review_on(reader, writer) -> dict:
    writer.write(HEAD + REVIEW)
    return (await answer(reader))["response"]


async def trickle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, data: bytes, every: float,
                  give_up: float) -> float | None:
    """Send ``data`` a byte every ``every`` seconds; the seconds until the server closed the
    connection, or None if it was still open after ``give_up`` seconds."""
    start = time.monotonic()
    eof = asyncio.ensure_future(reader.read(1))
    try:
        for i in range(len(data)):
            if time.monotonic() - start > give_up:
                return None
            try:
                writer.write(data[i:i + 1])
            except CLOSED:
                return time.monotonic() - start
            done, _ = await asyncio.wait({eof}, timeout=every)
            if done:
                return time.monotonic() - start
        return None
    finally:
        eof.cancel()
        writer.transport.abort()


async def test_trickling_headers_are_closed_after_the_header_timeout(cert_dir):
    limits = ConnectionLimits(header_timeout=0.6)
    async with running_webhook(cert_dir, limits=limits) as hook:
        clients = [await connect(hook, TENANT) for _ in range(20)]
        closed = await asyncio.gather(*(trickle(r, w, HEAD, every=0.1, give_up=4.0) for r, w in clients))
        assert all(c is not None for c in closed), f"{closed.count(None)} of 20 trickling clients still open after 4 s"
        assert max(closed) < 0.6 + 0.5, closed  # the timeout counts from the accept, handshake included
        assert hook.server.listener.expired == 20
        reader, writer = await connect(hook)
        assert (await review_on(reader, writer))["allowed"] is True  # and the webhook serves on
        writer.close()


async def test_a_client_that_never_finishes_its_tls_handshake_is_closed(cert_dir):
    async with running_webhook(cert_dir, limits=ConnectionLimits(header_timeout=0.6)) as hook:
        reader, writer = await asyncio.open_connection("127.0.0.1", hook.port, local_addr=(TENANT, 0))
        client_hello_record = b"\x16\x03\x01\x02\x00" + b"\x01" * 512  # announces 512 bytes, sent slowly
        closed = await trickle(reader, writer, client_hello_record, every=0.1, give_up=4.0)
        assert closed is not None and closed < 0.6 + 0.5, closed  # asyncio's own limit is 60 s


async def test_a_trickled_body_is_closed_after_the_body_timeout(cert_dir):
    async with running_webhook(cert_dir, limits=ConnectionLimits(header_timeout=0.5, body_timeout=1.0)) as hook:
        reader, writer = await connect(hook, TENANT)
        writer.write(HEAD)  # the headers at once, then the body a byte at a time
        closed = await trickle(reader, writer, REVIEW, every=0.1, give_up=5.0)
        assert closed is not None and 0.9 < closed < 1.0 + 0.5, closed


async def test_a_kept_alive_connection_serves_until_idle_too_long(cert_dir):
    async with running_webhook(cert_dir, limits=ConnectionLimits(idle_timeout=1.0)) as hook:
        reader, writer = await connect(hook)
        assert (await review_on(reader, writer))["allowed"] is True
        await asyncio.sleep(0.5)
        assert (await review_on(reader, writer))["allowed"] is True  # idle 0.5 s: still open, as kube-apiserver expects
        start = time.monotonic()
        assert await asyncio.wait_for(reader.read(1), 3.0) == b""
        assert time.monotonic() - start < 1.0 + 0.5


async def test_at_the_cap_new_connections_wait_for_a_slot_and_are_served(cert_dir):
    """kube-apiserver opens a connection per call in flight: at the cap its new ones wait for a
    slot (not reset, which would fail the call), and are answered as the requests in flight finish."""
    limits = ConnectionLimits(max_connections=4, slow_after=30.0)
    async with running_webhook(cert_dir, limits=limits) as hook:
        in_flight = [await connect(hook) for _ in range(4)]
        for _, writer in in_flight:
            writer.write(HEAD)  # headers in, body not yet: a request in flight
        await asyncio.sleep(0.1)
        async def late_review() -> dict:
            return await review_on(*await connect(hook))  # the handshake waits for a slot

        late_reviews = [asyncio.create_task(late_review()) for _ in range(3)]
        await asyncio.sleep(0.5)
        assert len(hook.server.listener.waiting) == 3 and hook.server.listener.active == 4
        assert not any(t.done() for t in late_reviews)  # no slot yet
        for reader, writer in in_flight:
            writer.write(REVIEW)
        answers = [await answer(reader) for reader, _ in in_flight]
        for _, writer in in_flight:
            writer.close()
        answers += await asyncio.wait_for(asyncio.gather(*late_reviews), 5.0)
        assert [a["response"]["allowed"] if "response" in a else a["allowed"] for a in answers] == [True] * 7
        assert (hook.server.listener.refused, hook.server.listener.waited) == (0, 3)


async def test_a_connection_waiting_past_the_header_timeout_is_reset(cert_dir):
    limits = ConnectionLimits(max_connections=2, slow_after=30.0, header_timeout=0.5, body_timeout=30.0)
    async with running_webhook(cert_dir, limits=limits) as hook:
        in_flight = [await connect(hook) for _ in range(2)]
        for _, writer in in_flight:
            writer.write(HEAD)
        await asyncio.sleep(0.1)
        start = time.monotonic()
        with pytest.raises(CLOSED):
            reader, writer = await connect(hook)  # the TLS handshake waits with it, then fails
            await asyncio.wait_for(reader.read(1), 5.0)
            raise ConnectionResetError("closed")
        assert 0.4 < time.monotonic() - start < 2.0
        assert (hook.server.listener.refused, len(hook.server.listener.waiting)) == (1, 0)
        for _, writer in in_flight:
            writer.close()


async def test_a_full_waiting_line_drops_the_client_with_the_most_waiting(cert_dir):
    limits = ConnectionLimits(max_connections=1, max_waiting=4, slow_after=30.0, header_timeout=10.0)
    async with running_webhook(cert_dir, limits=limits) as hook:
        reader, writer = await connect(hook, APISERVER)
        writer.write(HEAD)
        await asyncio.sleep(0.1)
        flood = [asyncio.create_task(connect(hook, TENANT)) for _ in range(4)]
        await asyncio.sleep(0.3)
        assert len(hook.server.listener.waiting) == 4
        apiserver = asyncio.create_task(connect(hook, APISERVER))
        await asyncio.sleep(0.3)
        waiting = [peer for _, peer, _ in hook.server.listener.waiting]
        assert sorted(waiting) == [APISERVER] + [TENANT] * 3 and hook.server.listener.refused == 1
        writer.write(REVIEW)
        assert (await answer(reader))["response"]["allowed"] is True
        writer.close()
        # the freed slot goes to the waiting client holding the fewest slots: both hold none, the
        # tenant waited longest; kube-apiserver's call is answered once that one ends
        for t in flood:
            t.cancel()
        await asyncio.gather(*flood, return_exceptions=True)
        r2, w2 = await asyncio.wait_for(apiserver, 10.0)
        assert (await review_on(r2, w2))["allowed"] is True
        w2.close()


async def test_at_the_cap_the_slowest_client_makes_room_for_a_review(cert_dir):
    limits = ConnectionLimits(max_connections=4, slow_after=0.3, header_timeout=10.0)
    async with running_webhook(cert_dir, limits=limits) as hook:
        tricklers = [await connect(hook, TENANT) for _ in range(4)]
        stop = [asyncio.create_task(trickle(r, w, HEAD, every=0.1, give_up=3.0)) for r, w in tricklers]
        await asyncio.sleep(0.5)
        reader, writer = await connect(hook)
        assert (await review_on(reader, writer))["allowed"] is True
        writer.close()
        closed = await asyncio.gather(*stop)
        assert sum(c is not None for c in closed) == 1, closed  # exactly one gave up its slot
        assert hook.server.listener.evicted == 1


async def test_a_client_holding_every_slot_gives_one_up_to_another_client(cert_dir):
    """Even when none of its connections is slow yet, a tenant that holds every slot cannot lock
    kube-apiserver out: the API server's new connection takes one of the tenant's; the tenant's
    own new connections wait, and are reset past the header timeout."""
    limits = ConnectionLimits(max_connections=4, slow_after=30.0, header_timeout=1.0, body_timeout=30.0)
    async with running_webhook(cert_dir, limits=limits) as hook:
        hog = [await connect(hook, TENANT) for _ in range(4)]
        for _, writer in hog:
            writer.write(HEAD[:20])
        await asyncio.sleep(0.1)
        more = asyncio.create_task(connect(hook, TENANT))
        await asyncio.sleep(0.2)
        assert [peer for _, peer, _ in hook.server.listener.waiting] == [TENANT]
        reader, writer = await connect(hook, APISERVER)
        assert (await review_on(reader, writer))["allowed"] is True
        assert hook.server.listener.evicted == 1
        assert hook.server.listener.by_peer == {TENANT: 3, APISERVER: 1}
        with pytest.raises(CLOSED):
            r, _ = await asyncio.wait_for(more, 5.0)
            await asyncio.wait_for(r.read(1), 2.0)
            raise ConnectionResetError("closed")
        writer.close()
        for _, w in hog:
            w.transport.abort()


async def test_reviews_are_answered_during_and_after_a_trickle_past_the_cap(cert_dir):
    limits = ConnectionLimits(max_connections=16, header_timeout=1.0, slow_after=0.3)
    async with running_webhook(cert_dir, limits=limits) as hook:
        async def trickler():
            try:
                reader, writer = await connect(hook, TENANT)
            except CLOSED:
                return
            await trickle(reader, writer, HEAD, every=0.2, give_up=3.0)

        attack = [asyncio.create_task(trickler()) for _ in range(60)]
        await asyncio.sleep(0.5)
        status, body = await hook.post(MUTATE, REVIEW)
        assert status == 200 and body["response"]["allowed"] is True
        await asyncio.gather(*attack)
        assert hook.server.listener.active <= 16
        status, body = await hook.post(MUTATE, REVIEW)
        assert status == 200 and body["response"]["allowed"] is True


async def test_a_connection_costs_a_small_tls_buffer(cert_dir):
    """asyncio gives each TLS connection a 256 KiB read buffer at accept; the webhook's is 32 KiB
    (what lets 256 connections fit in its memory limit). Measured with tracemalloc over 40
    connections opened by blocking clients in a thread (which allocate no such buffer)."""
    async with running_webhook(cert_dir) as hook:
        ctx = client_context(cert_dir)

        def open_clients() -> list[ssl.SSLSocket]:
            return [ctx.wrap_socket(socket.create_connection(("127.0.0.1", hook.port)), server_hostname="127.0.0.1")
                    for _ in range(40)]

        tracemalloc.start()
        try:
            before = tracemalloc.take_snapshot()
            clients = await asyncio.to_thread(open_clients)
            await asyncio.sleep(0.2)
            after = tracemalloc.take_snapshot()
        finally:
            tracemalloc.stop()
        grown = sum(d.size_diff for d in after.compare_to(before, "filename") if d.size_diff > 0)
        for c in clients:
            c.close()
        assert grown < 40 * 64 * 1024, f"{grown / 40 / 1024:.0f} KiB per connection"


async def test_failed_handshakes_leave_no_tls_state_behind(cert_dir):
    """A connection whose handshake fails or times out is freed at once, not left for a full
    garbage collection: a reconnecting flood of them grew the webhook by 20 MiB a second."""
    import gc

    from gpuqueue.listener import _ServerTLS

    gc.collect()
    gc.disable()  # what is freed must be freed by reference counting alone
    try:
        async with running_webhook(cert_dir, limits=ConnectionLimits(header_timeout=0.3)) as hook:
            for garbage in (b"\x16\x03\x01\x00\x05hello", b"\x16\x03\x01\x02\x00"):  # refused, then timed out
                clients = [await asyncio.open_connection("127.0.0.1", hook.port) for _ in range(20)]
                for reader, writer in clients:
                    writer.write(garbage)
                for reader, writer in clients:
                    assert await asyncio.wait_for(reader.read(), 3.0) == b""
                    writer.transport.abort()
            await asyncio.sleep(0.1)
            assert hook.server.listener.active == 0
            alive = [o for o in gc.get_objects() if isinstance(o, _ServerTLS)]
            assert alive == [], f"{len(alive)} TLS layers (32 KiB buffer and OpenSSL state each) still in memory"
    finally:
        gc.enable()
