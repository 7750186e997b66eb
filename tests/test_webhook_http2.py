"""The webhook over HTTP/2, as kube-apiserver's webhook client speaks it when offered (ALPN): real
TLS sockets, an HTTP/2 client (httpx) for what kube-apiserver does, and the h2 library as a raw
client for what an attacker does. Every review is answered as over HTTP/1.1, hundreds of them on
one connection at once; an oversized body gets 413; a client that resets or floods streams is cut
off; a draining webhook sends GOAWAY and finishes what it took."""

from __future__ import annotations

import asyncio
import json
import ssl

import h2.config
import h2.connection
import h2.errors
import h2.events
import httpx
import hyperframe.frame
import pytest

from gpuqueue.h2serve import REFUSAL_BUDGET
from gpuqueue.jobframework.managed import StaticQueueView
from gpuqueue.webhook.app import WebhookSettings
from tests.webhook_support import APISERVER_HEADERS, client_context, load_review, make_cert_dir, running_webhook, wire

MUTATE = "/mutate-batch-v1-job"
DOC = load_review("mutating-review-request.job-create.no-labels.json")
QUEUES = StaticQueueView(local_queues={(DOC["request"]["namespace"], "default")})


@pytest.fixture(scope="module")
def cert_dir(tmp_path_factory):
    return make_cert_dir(tmp_path_factory.mktemp("tls"))


def h2_client(cert_dir) -> httpx.AsyncClient:
    return httpx.AsyncClient(http2=True, verify=client_context(cert_dir), headers=APISERVER_HEADERS)


def with_uid(i: int) -> dict:
    doc = json.loads(json.dumps(DOC))
    doc["request"]["uid"] = f"uid-{i}"
    return doc


async def test_a_review_over_http2_is_answered_as_over_http1(cert_dir):
    async with running_webhook(cert_dir, queues=QUEUES) as hook:
        over_h1 = await hook.review(MUTATE, DOC)
        async with h2_client(cert_dir) as client:
            resp = await client.post(f"{hook.base}{MUTATE}?timeout=10s", content=wire(DOC))
    assert resp.http_version == "HTTP/2"
    assert resp.status_code == 200 and resp.headers["content-type"] == "application/json"
    assert resp.json()["response"] == over_h1
    assert over_h1["patchType"] == "JSONPatch"  # a real mutation, not an empty allow


async def test_hundreds_of_reviews_at_once_share_one_connection_and_all_are_answered(cert_dir):
    async with running_webhook(cert_dir, queues=QUEUES) as hook:
        async with h2_client(cert_dir) as client:
            resps = await asyncio.gather(*(client.post(f"{hook.base}{MUTATE}", content=wire(with_uid(i)))
                                           for i in range(300)))
        assert hook.server.listener.active <= 1  # one connection carried them all
    assert [r.status_code for r in resps] == [200] * 300
    assert [r.json()["response"]["uid"] for r in resps] == [f"uid-{i}" for i in range(300)]
    assert {r.http_version for r in resps} == {"HTTP/2"}


async def test_health_probes_and_unknown_paths_over_http2(cert_dir):
    async with running_webhook(cert_dir) as hook:
        async with h2_client(cert_dir) as client:
            health = await client.get(f"{hook.base}/healthz")
            missing = await client.post(f"{hook.base}/nowhere", content=b"{}")
            wrong_method = await client.get(f"{hook.base}{MUTATE}")
    assert (health.status_code, health.text, health.http_version) == (200, "ok\n", "HTTP/2")
    assert missing.status_code == 404 and wrong_method.status_code == 405


async def test_an_oversized_body_gets_413_and_the_connection_keeps_serving(cert_dir):
    settings = WebhookSettings(max_body=4096)
    async with running_webhook(cert_dir, queues=QUEUES, settings=settings) as hook:
        async with h2_client(cert_dir) as client:
            big = await client.post(f"{hook.base}{MUTATE}", content=b"x" * 100_000)
            ok = await client.post(f"{hook.base}{MUTATE}", content=wire(DOC))
    assert big.status_code == 413 and big.json()["response"]["status"]["reason"] == "RequestEntityTooLarge"
    assert ok.status_code == 200 and ok.http_version == "HTTP/2"


# -- a raw HTTP/2 client, for what httpx will not do ---------------------------------------------------

class RawH2:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self.conn.initiate_connection()
        self.flush()

    @classmethod
    async def open(cls, hook) -> "RawH2":
        ctx = client_context(hook.cert_dir)
        ctx.set_alpn_protocols(["h2"])
        reader, writer = await asyncio.open_connection("127.0.0.1", hook.port, ssl=ctx)
        assert writer.get_extra_info("ssl_object").selected_alpn_protocol() == "h2"
        return cls(reader, writer)

    def flush(self) -> None:
        self.writer.write(self.conn.data_to_send())

    def request(self, path: str, body: bytes | None) -> int:
        """Headers, then ``body`` ending the stream (None: the headers only, the stream left open)."""
        sid = self.conn.get_next_available_stream_id()
        self.conn.send_headers(sid, [(":method", "POST"), (":path", path), (":scheme", "https"),
                                     (":authority", "gpuqueue-webhook"), ("content-type", "application/json")])
        if body is not None:
            self.conn.send_data(sid, body, end_stream=True)
        self.flush()
        return sid

    async def events(self, timeout: float = 5.0, quiet: float = 0.3) -> list:
        """Everything the server sends until it goes quiet for ``quiet`` seconds (or closes)."""
        got = []
        while True:
            try:
                data = await asyncio.wait_for(self.reader.read(65536), timeout if not got else quiet)
            except asyncio.TimeoutError:
                return got
            except (ConnectionError, ssl.SSLError):
                return got + ["closed"]
            if not data:
                return got + ["closed"]
            got.extend(self.conn.receive_data(data))
            self.flush()


async def test_a_client_that_resets_streams_without_end_is_cut_off(cert_dir):
    async with running_webhook(cert_dir, queues=QUEUES) as hook:
        client = await RawH2.open(hook)
        for _ in range(REFUSAL_BUDGET + 20):
            sid = client.request(MUTATE, None)
            client.conn.reset_stream(sid, h2.errors.ErrorCodes.CANCEL)  # "rapid reset"
        client.flush()
        events = await client.events()
        goaway = [e for e in events if isinstance(e, h2.events.ConnectionTerminated)]
        assert goaway and goaway[0].error_code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM
        assert events[-1] == "closed"
        # kube-apiserver, on its own connection, is served as ever
        async with h2_client(cert_dir) as apiserver:
            resp = await apiserver.post(f"{hook.base}{MUTATE}", content=wire(DOC))
        assert resp.status_code == 200


class SlowPods:
    """Reads a binding's pod slowly: a review still in flight when the webhook drains."""

    async def get_pod(self, namespace: str, name: str) -> dict:
        await asyncio.sleep(0.5)
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


BINDING = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
           "request": {"uid": "bind-1", "kind": {"group": "", "version": "v1", "kind": "Binding"},
                       "resource": {"group": "", "version": "v1", "resource": "pods"}, "subResource": "binding",
                       "name": "p", "namespace": "team-a", "operation": "CREATE",
                       "userInfo": {"username": "alice"},
                       "object": {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p", "namespace": "team-a"},
                                  "target": {"kind": "Node", "name": "n1"}}}}


async def frames_until_closed(reader: asyncio.StreamReader, timeout: float = 5.0) -> list:
    """The frames the server sends until it closes, parsed one by one with no state machine
    (h2's client takes no frame after a GOAWAY, as a real client, Go's, does)."""
    frames, buf = [], b""
    async with asyncio.timeout(timeout):
        while True:
            data = await reader.read(65536)
            if not data:
                return frames
            buf += data
            while len(buf) >= 9:
                frame, length = hyperframe.frame.Frame.parse_frame_header(memoryview(buf[:9]))
                if len(buf) < 9 + length:
                    break
                frame.parse_body(memoryview(buf[9:9 + length]))
                frames.append(frame)
                buf = buf[9 + length:]


async def test_a_draining_webhook_sends_goaway_and_answers_what_it_took(cert_dir):
    async with running_webhook(cert_dir, pods=SlowPods()) as hook:
        client = await RawH2.open(hook)
        sid = client.request("/validate--v1-binding", wire(BINDING))
        await asyncio.sleep(0.1)  # taken, its pod being read
        hook.server.listener.drain()
        frames = await frames_until_closed(client.reader)
        goaways = [f for f in frames if isinstance(f, hyperframe.frame.GoAwayFrame)]
        assert goaways and goaways[0].error_code == 0
        assert goaways[0].last_stream_id >= sid  # taken: the client must not send it again
        first_goaway = frames.index(goaways[0])
        answer = b"".join(f.data for f in frames[first_goaway:]
                          if isinstance(f, hyperframe.frame.DataFrame) and f.stream_id == sid)
        assert json.loads(answer)["response"]["uid"] == "bind-1"  # answered after the GOAWAY
        async with h2_client(cert_dir) as apiserver:  # new connections are still served while draining
            resp = await apiserver.post(f"{hook.base}{MUTATE}", content=wire(DOC))
        assert resp.status_code == 200
