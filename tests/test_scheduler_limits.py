"""The extender's request size limit, over real TLS: a body past the limit is refused naming
it while /healthz and other calls keep being answered; the default takes what kube-scheduler
sends at 5,000 nodes with nodeCacheCapable."""

from __future__ import annotations

import argparse

import aiohttp
import orjson

from gpuqueue.extender import command
from gpuqueue.extender.scheduler import app as extender_app
from gpuqueue.extender.scheduler import start
from tests.extender_support import scheduler_context
from tests.test_scheduler_extender import FILTER_NCT, GH, fixture, job_pod, mixed_cluster, names_request, pki  # noqa: F401

NAMES = [f"gh200-node-{i:05d}" for i in range(5000)]  # kube-scheduler sends this many at most


async def _serve(pki, **kw):
    cert_dir, ca = pki
    view = mixed_cluster()
    view.admit("team-b/train", GH)
    view.add_pod(job_pod(fixture(FILTER_NCT))["Pod"])
    runner = await start(view, host="127.0.0.1", port=0, cert_dir=cert_dir, **kw)
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=scheduler_context(cert_dir)))
    return runner, session, f"https://127.0.0.1:{runner.addresses[0][1]}"


async def test_a_body_past_the_limit_is_refused_and_the_server_keeps_answering(pki):
    runner, session, base = await _serve(pki, max_request_bytes=64 * 1024)
    big = orjson.dumps(names_request(job_pod(fixture(FILTER_NCT)), NAMES)) + b"\n"
    assert len(big) > 64 * 1024
    try:
        async with session.post(f"{base}/filter", data=big) as r:
            assert r.status == 413
            assert "65536" in await r.text()  # the limit is named
        async with session.get(f"{base}/healthz") as r:
            assert r.status == 200 and await r.text() == "ok"
        small = orjson.dumps(names_request(job_pod(fixture(FILTER_NCT)), ["gh200-node-1", "h100-node-3"])) + b"\n"
        async with session.post(f"{base}/filter", data=small) as r:
            assert r.status == 200
            assert orjson.loads(await r.read())["NodeNames"] == ["gh200-node-1"]
    finally:
        await session.close()
        await runner.cleanup()


async def test_the_default_limit_takes_5000_names_and_is_the_flags_default(pki):
    runner, session, base = await _serve(pki)
    body = orjson.dumps(names_request(job_pod(fixture(FILTER_NCT)), NAMES)) + b"\n"
    try:
        async with session.post(f"{base}/filter", data=body) as r:
            assert r.status == 200
            got = orjson.loads(await r.read())
        assert got["NodeNames"] == [] and len(got["FailedNodes"]) == 5000  # none of them is cached
    finally:
        await session.close()
        await runner.cleanup()
    sub = argparse.ArgumentParser().add_subparsers()
    command.add_parser(sub)
    args = sub.choices["extender"].parse_args([])
    assert args.max_request_bytes == extender_app.MAX_REQUEST_BYTES == 16 * 1024 * 1024
    assert sub.choices["extender"].parse_args(["--max-request-bytes", "1000"]).max_request_bytes == 1000
