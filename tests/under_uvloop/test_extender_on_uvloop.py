"""The extender's HTTPS tests again, on uvloop's loop and its own TLS transport: the endpoints,
TLS versions and ciphers, client certificates, the body limit and the byte-level HTTP cases."""

import asyncio
import ssl

import aiohttp
import pytest

from extender.scheduler import start
from gpuqueue import eventloop
from tests.test_extender_client_cert import *  # noqa: F401,F403
from tests.test_extender_http import *  # noqa: F401,F403
from tests.test_extender_limits import *  # noqa: F401,F403
from tests.test_scheduler_extender import *  # noqa: F401,F403
from tests.test_scheduler_extender import mixed_cluster

# Its client closes a raw TLS connection without waiting for the close, then aiohttp's
# happy-eyeballs connects a new socket that gets the same file descriptor: uvloop refuses that
# ("File descriptor ... is used by transport") in the client, whatever the server does.
# test_tls_policy_on_uvloop below checks the same TLS policy, waiting for its close.
del test_https_only_unless_plain_http_is_asked_for  # noqa: F821


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion:DeprecationWarning")
async def test_tls_policy_on_uvloop(pki):  # noqa: F811
    cert_dir, ca = pki
    server = await start(mixed_cluster(), host="127.0.0.1", port=0, cert_dir=cert_dir)
    port = server.addresses[0][1]
    try:
        old = ssl.create_default_context(cafile=str(ca))
        old.maximum_version = ssl.TLSVersion.TLSv1_1
        old.minimum_version = ssl.TLSVersion.TLSv1
        async with aiohttp.ClientSession() as s:
            with pytest.raises(aiohttp.ClientError):
                await s.post(f"https://127.0.0.1:{port}/filter", data=b"{}", ssl=old)
            with pytest.raises(aiohttp.ClientError):
                await s.post(f"http://127.0.0.1:{port}/filter", data=b"{}")
        tls12 = ssl.create_default_context(cafile=str(ca))
        tls12.maximum_version = ssl.TLSVersion.TLSv1_2
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=tls12, server_hostname="127.0.0.1")
        cipher, version, _bits = writer.get_extra_info("cipher")
        writer.close()
        await writer.wait_closed()
        assert version == "TLSv1.2" and cipher.startswith("ECDHE") and ("GCM" in cipher or "CHACHA20" in cipher)
    finally:
        await server.cleanup()


async def test_these_tests_run_on_uvloop():
    import uvloop

    assert isinstance(asyncio.get_running_loop(), uvloop.Loop)


def test_the_servers_loop_is_uvloops_unless_asked_otherwise(monkeypatch):
    import uvloop

    async def loop_type():
        return type(asyncio.get_running_loop())

    assert issubclass(eventloop.run(loop_type()), uvloop.Loop)
    monkeypatch.setenv("GPUQUEUE_EVENT_LOOP", "asyncio")
    assert not issubclass(eventloop.run(loop_type()), uvloop.Loop)
