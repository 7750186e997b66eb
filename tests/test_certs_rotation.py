"""Certificate rotation while requests are in flight: nothing dropped, new cert served."""

from __future__ import annotations

import asyncio
import ssl

import aiohttp

from gpuqueue.certs.generate import CA_FILE, CA_KEY_FILE, ServingIdentity, generate, write_files
from tests.webhook_support import APISERVER_HEADERS, client_context, load_review, make_cert_dir, running_webhook, wire


async def _peer_serial(port: int, ctx: ssl.SSLContext) -> int:
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
    der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    writer.close()
    from cryptography import x509
    return x509.load_der_x509_certificate(der).serial_number


async def test_rotation_while_requests_in_flight(tmp_path):
    cert_dir = make_cert_dir(tmp_path)
    body = wire(load_review("mutating-review-request.job-create.suspend-false.json"))
    async with running_webhook(cert_dir) as hook:
        port = int(hook.base.rsplit(":", 1)[1])
        ctx = client_context(cert_dir)
        before = await _peer_serial(port, ctx)
        stop = asyncio.Event()
        results: list[int] = []
        errors: list[BaseException] = []

        async def client(fresh_connections: bool) -> None:
            # Half the clients keep one connection alive across the rotation, half reconnect every request.
            connector = aiohttp.TCPConnector(ssl=ctx, force_close=fresh_connections)
            async with aiohttp.ClientSession(connector=connector) as s:
                while not stop.is_set():
                    try:
                        async with s.post(f"{hook.base}/mutate-batch-v1-job", data=body, headers=APISERVER_HEADERS) as r:
                            payload = await r.json()
                            results.append(r.status)
                            assert payload["response"]["allowed"] is True
                    except Exception as exc:  # noqa: BLE001 - every failure is a dropped request
                        errors.append(exc)

        tasks = [asyncio.create_task(client(i % 2 == 0)) for i in range(6)]
        await asyncio.sleep(0.3)
        # Renew: a new serving certificate from the same CA, written as `certs ensure --out` would.
        ca = ((cert_dir / CA_FILE).read_bytes(), (cert_dir / CA_KEY_FILE).read_bytes())
        write_files(cert_dir, generate(ServingIdentity(ips=("127.0.0.1",), dns=("localhost",)), ca=ca))
        assert hook.tls.reload_if_changed()
        await asyncio.sleep(0.3)
        stop.set()
        await asyncio.gather(*tasks)
        after = await _peer_serial(port, ctx)

    assert errors == []
    assert len(results) > 20 and set(results) == {200}
    assert before != after, "new handshakes present the renewed certificate"


async def test_half_written_pair_keeps_the_old_certificate(tmp_path):
    cert_dir = make_cert_dir(tmp_path)
    async with running_webhook(cert_dir) as hook:
        (cert_dir / "tls.key").write_bytes(generate(ServingIdentity()).key_pem)  # key no longer matches tls.crt
        assert hook.tls.reload_if_changed() is False
        async with hook.session.get(hook.base + "/healthz") as r:
            assert r.status == 200
