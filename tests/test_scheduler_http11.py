"""The extender's own HTTP/1.1 layer (gpuqueue/http11.py) over real TLS, byte by byte:
what a client that is not aiohttp's may send (pipelined, chunked, Expect: 100-continue,
HTTP/1.0, HEAD, garbage, huge headers, idle connections) gets an HTTP answer as any server
would give it."""

from __future__ import annotations

import asyncio
import ssl

import orjson
import pytest

from gpuqueue import http11 as http_server
from gpuqueue.extender.scheduler import start
from tests.extender_support import scheduler_context
from tests.test_scheduler_extender import FILTER_NCT, GH, fixture, job_pod, mixed_cluster, names_request, pki  # noqa: F401

BODY = orjson.dumps(names_request(job_pod(fixture(FILTER_NCT)), ["gh200-node-1", "h100-node-3"])) + b"\n"


@pytest.fixture
async def connect(pki):
    cert_dir, ca = pki
    view = mixed_cluster()
    view.admit("team-b/train", GH)
    view.add_pod(job_pod(fixture(FILTER_NCT))["Pod"])
    server = await start(view, host="127.0.0.1", port=0, cert_dir=cert_dir, max_request_bytes=64 * 1024)
    ctx = scheduler_context(cert_dir)

    async def connect():
        return await asyncio.open_connection("127.0.0.1", server.addresses[0][1], ssl=ctx,
                                             server_hostname="127.0.0.1")

    yield connect
    await server.cleanup()


async def read_answer(reader: asyncio.StreamReader, head: bool = False) -> tuple[int, dict[str, str], bytes]:
    status_line = await asyncio.wait_for(reader.readline(), 5)
    assert status_line.startswith(b"HTTP/1.1 "), status_line
    headers = {}
    while (line := await reader.readline()) != b"\r\n":
        name, value = line.decode().split(":", 1)
        headers[name.strip().lower()] = value.strip()
    size = 0 if head else int(headers["content-length"])
    return int(status_line.split()[1]), headers, await reader.readexactly(size)


def post(path: str, body: bytes, extra: bytes = b"") -> bytes:
    return (b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n"
            % (path.encode(), len(body), extra)) + body


async def closed(reader: asyncio.StreamReader) -> bool:
    try:
        return await asyncio.wait_for(reader.read(), 5) == b""
    except (ConnectionResetError, ssl.SSLError):
        return True


async def test_pipelined_requests_are_answered_in_order_on_one_connection(connect):
    reader, writer = await connect()
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" + post("/filter", BODY) + b"GET /healthz?probe=1 HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (await read_answer(reader))[::2] == (200, b"ok")
    status, headers, body = await read_answer(reader)
    assert status == 200 and headers["content-type"] == "application/json" and "date" in headers
    assert orjson.loads(body)["NodeNames"] == ["gh200-node-1"]
    assert (await read_answer(reader))[::2] == (200, b"ok")
    writer.close()


async def test_a_chunked_body_and_expect_continue_are_served(connect):
    reader, writer = await connect()
    head = b"POST /filter HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(BODY[i:i + 1000]), BODY[i:i + 1000]) for i in range(0, len(BODY), 1000))
    writer.write(head + chunks + b"0\r\n\r\n")
    status, _, body = await read_answer(reader)
    assert status == 200 and orjson.loads(body)["NodeNames"] == ["gh200-node-1"]

    writer.write(post("/filter", BODY, b"Expect: 100-continue\r\n")[:-len(BODY)])
    assert await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5) == b"HTTP/1.1 100 Continue\r\n\r\n"
    writer.write(BODY)
    status, _, body = await read_answer(reader)
    assert status == 200 and orjson.loads(body)["NodeNames"] == ["gh200-node-1"]
    writer.close()


async def test_head_and_wrong_methods_and_paths(connect):
    reader, writer = await connect()
    writer.write(b"HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    status, headers, _ = await read_answer(reader, head=True)
    assert status == 200 and headers["content-length"] == "2"
    writer.write(b"GET /filter HTTP/1.1\r\nHost: x\r\n\r\n")
    status, headers, _ = await read_answer(reader)
    assert status == 405 and headers["allow"] == "POST"
    writer.write(post("/healthz", b"{}"))
    status, headers, _ = await read_answer(reader)
    assert status == 405 and headers["allow"] == "GET, HEAD"
    writer.write(post("/filter/", BODY))
    assert (await read_answer(reader))[0] == 404
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")  # the connection still serves
    assert (await read_answer(reader))[::2] == (200, b"ok")
    writer.close()


async def test_http_1_0_and_connection_close_end_the_connection_after_the_answer(connect):
    for request in (b"GET /healthz HTTP/1.0\r\n\r\n", b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"):
        reader, writer = await connect()
        writer.write(request)
        status, headers, body = await read_answer(reader)
        assert (status, body, headers["connection"]) == (200, b"ok", "close")
        assert await closed(reader)
        writer.close()


async def test_garbage_gets_400_and_the_connection_is_closed(connect):
    for garbage in (b"HELLO\r\n\r\n", b"POST /filter HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
                    b"POST /filter HTTP/1.1\r\nContent-Length: -1\r\n\r\n"):
        status, body = await refused_then_closed(connect, garbage)
        assert status == 400 and b"malformed HTTP request" in body, garbage


async def refused_then_closed(connect, request: bytes) -> tuple[int, bytes]:
    """(status, body) of the one answer to ``request``, after which the server closed."""
    reader, writer = await connect()
    writer.write(request)
    status, _, body = await read_answer(reader)
    assert await closed(reader)
    writer.close()
    return status, body


async def test_a_protocol_upgrade_gets_one_400_and_the_connection_is_closed(connect):
    status, body = await refused_then_closed(connect, post("/filter", BODY, b"Connection: Upgrade\r\nUpgrade: websocket\r\n"))
    assert status == 400 and b"upgrades are not served" in body


async def test_oversized_headers_get_431(connect):
    status, body = await refused_then_closed(
        connect, b"GET /healthz HTTP/1.1\r\n" + b"X-Filler: " + b"a" * (70 * 1024) + b"\r\n\r\n")
    assert status == 431 and b"65536" in body


async def test_a_chunked_body_past_the_limit_is_refused_naming_it(connect):
    """No Content-Length to judge upfront: the limit is applied as the chunks arrive."""
    reader, writer = await connect()
    chunk = b"a" * 16 * 1024
    writer.write(b"POST /filter HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                 + b"%x\r\n%s\r\n" % (len(chunk), chunk) * 5 + b"0\r\n\r\n")
    status, headers, body = await read_answer(reader)
    assert status == 413 and b"65536 bytes" in body and headers["connection"] == "close"
    assert await closed(reader)
    writer.close()
    reader, writer = await connect()  # and the server goes on serving
    writer.write(post("/filter", BODY))
    assert (await read_answer(reader))[0] == 200
    writer.close()


async def test_an_idle_connection_is_closed(pki, monkeypatch):
    monkeypatch.setattr(http_server, "IDLE_SECONDS", 0.3)
    cert_dir, ca = pki
    server = await start(mixed_cluster(), host="127.0.0.1", port=0, cert_dir=cert_dir)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.addresses[0][1], server_hostname="127.0.0.1",
                                                       ssl=ssl.create_default_context(cafile=str(ca)))
        for _ in range(3):  # a connection in use is kept
            await asyncio.sleep(0.2)
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert (await read_answer(reader))[0] == 200
        assert await closed(reader)  # then left idle
        writer.close()
    finally:
        await server.cleanup()


async def test_a_connection_past_its_age_is_closed_after_an_answer(pki, monkeypatch):
    """kube-scheduler keeps one connection alive and a Service balances connections: an old one is
    closed after an answer, so the next call dials again and may reach the other replica."""
    monkeypatch.setattr(http_server, "MAX_AGE_SECONDS", 0.3)
    cert_dir, ca = pki
    server = await start(mixed_cluster(), host="127.0.0.1", port=0, cert_dir=cert_dir)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.addresses[0][1], server_hostname="127.0.0.1",
                                                       ssl=ssl.create_default_context(cafile=str(ca)))
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        status, headers, _ = await read_answer(reader)
        assert status == 200 and headers.get("connection") != "close"
        await asyncio.sleep(0.4)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        status, headers, _ = await read_answer(reader)
        assert status == 200 and headers.get("connection") == "close"
        assert await closed(reader)
        writer.close()
    finally:
        await server.cleanup()
