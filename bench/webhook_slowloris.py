"""Slowloris against `gpuqueue webhook`: N clients that open a TLS connection and then send a
request a byte every second; the webhook's resident memory before, during and after, which
trickling connections it closes and when, and whether a real AdmissionReview is answered.

    .venv/bin/python bench/webhook_slowloris.py [--clients 800] [--seconds 30] [--phase tls|tcp]
                                                [--webhook-arg=--max-connections=256 ...]

The webhook is the real command (`python -m gpuqueue webhook`) in its own process, without a
cluster (no kubeconfig), pinned to one CPU; the clients run in this process on the other.
``--phase tls``: each client completes the TLS handshake, then trickles the request line and
headers. ``--phase tcp``: each client connects and trickles bytes that never make a ClientHello.
Memory is VmRSS of the webhook process (and VmHWM, its peak), from /proc.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
import bench_env  # noqa: E402,F401  (the repository on sys.path, or one line saying why not)

from tests import shared_fixtures  # noqa: E402
from pinning import LOAD_CPU, SERVER_CPU, pin  # noqa: E402

# The attackers connect from 127.0.0.2, the reviews (kube-apiserver's part) from 127.0.0.1: two
# clients, as a tenant's pod and the API server are.
ATTACKER = "127.0.0.2"
REVIEW = shared_fixtures.FIXTURES / "k8s-1.24/admission/mutating-review-request.job-create.no-labels.json"
TRICKLE = (b"POST /mutate-batch-v1-job?timeout=10s HTTP/1.1\r\nHost: gpuqueue-webhook.gpuqueue-system.svc:443\r\n"
           b"Content-Type: application/json\r\nAccept: application/json, */*\r\n" + b"X-Padding: " + b"a" * 4000)


def memory_mib(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of ``pid`` in MiB."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def start_webhook(cert_dir: Path, port: int, extra: list[str]) -> subprocess.Popen:
    env = {**os.environ, "KUBECONFIG": str(cert_dir / "no-kubeconfig")}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    return subprocess.Popen([sys.executable, "-m", "gpuqueue", "webhook", f"--cert-dir={cert_dir}",
                             "--host=127.0.0.1", f"--port={port}", *extra], env=env,
                            preexec_fn=lambda: pin(SERVER_CPU), stderr=subprocess.PIPE, text=True)


async def wait_until_serving(port: int, ctx: ssl.SSLContext, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
            writer.close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


def review_request(close: bool) -> bytes:
    body = json.dumps(json.loads(REVIEW.read_text()), separators=(",", ":")).encode() + b"\n"
    return (b"POST /mutate-batch-v1-job?timeout=10s HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n%s\r\n" % (len(body), b"Connection: close\r\n" if close else b"")) + body


class KeptAlive:
    """kube-apiserver's way: one connection kept open, a review on it every second."""

    def __init__(self) -> None:
        self.answered = self.failed = 0
        self.errors: list[str] = []

    async def run(self, port: int, ctx: ssl.SSLContext, stop: asyncio.Event) -> None:
        request = review_request(close=False)
        reader = writer = None
        while not stop.is_set():
            try:
                if writer is None:
                    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port, ssl=ctx), 5)
                writer.write(request)
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                answer = await asyncio.wait_for(reader.readexactly(length), 5)
                if b'"allowed":true' in answer:
                    self.answered += 1
                else:
                    self.failed += 1
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ssl.SSLError, IndexError) as exc:
                self.failed += 1
                self.errors.append(type(exc).__name__)
                if writer is not None:
                    writer.transport.abort()
                reader = writer = None
            await asyncio.sleep(1.0)
        if writer is not None:
            writer.transport.abort()


async def review(port: int, ctx: ssl.SSLContext, timeout: float = 10.0) -> tuple[bool, float, str]:
    """One AdmissionReview on a new connection: (answered, seconds, detail)."""
    request = review_request(close=True)
    start = time.monotonic()
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port, ssl=ctx), timeout)
        writer.write(request)
        answer = await asyncio.wait_for(reader.read(), timeout)
        writer.close()
    except (OSError, asyncio.TimeoutError, ssl.SSLError) as exc:
        return False, time.monotonic() - start, f"{type(exc).__name__}: {exc}"
    ok = answer.startswith(b"HTTP/1.1 200") and b'"allowed":true' in answer
    return ok, time.monotonic() - start, answer.split(b"\r\n", 1)[0].decode(errors="replace")


class Trickler:
    def __init__(self) -> None:
        self.opened = 0.0
        self.closed_after: float | None = None  # seconds from connect to the server closing it
        self.failed: str | None = None
        self.reconnects = 0


async def trickle(port: int, ctx: ssl.SSLContext, phase: str, stop: asyncio.Event, t: Trickler,
                  reconnect: bool) -> None:
    """One client; with ``reconnect``, it opens a new connection whenever the server closes one."""
    while not stop.is_set():
        await trickle_once(port, ctx, phase, stop, t)
        if not reconnect or stop.is_set():
            return
        t.reconnects += 1
        await asyncio.sleep(0.05)


async def trickle_once(port: int, ctx: ssl.SSLContext, phase: str, stop: asyncio.Event, t: Trickler) -> None:
    t.opened = time.monotonic()
    try:
        if phase == "tls":
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx, local_addr=(ATTACKER, 0))
            payload = TRICKLE
        else:
            reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(ATTACKER, 0))
            payload = b"\x16\x03\x01\x02\x00" + b"\x01" * 512  # a ClientHello record of 512 bytes, sent slowly
    except (OSError, ssl.SSLError) as exc:
        t.failed = f"{type(exc).__name__}"
        t.closed_after = time.monotonic() - t.opened
        return
    read = asyncio.ensure_future(reader.read(1))
    try:
        for i in range(len(payload)):
            if stop.is_set():
                break
            writer.write(payload[i:i + 1])
            done, _ = await asyncio.wait({read}, timeout=1.0)
            if done or writer.is_closing():
                t.closed_after = time.monotonic() - t.opened
                return
    except (OSError, ssl.SSLError):
        t.closed_after = time.monotonic() - t.opened
        return
    finally:
        read.cancel()
        writer.transport.abort()


async def run(args: argparse.Namespace) -> dict:
    from gpuqueue.certs.generate import ServingIdentity, generate, write_files

    pin(LOAD_CPU)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 4 * args.clients + 256)), hard))
    with tempfile.TemporaryDirectory() as tmp:
        cert_dir = Path(tmp)
        write_files(cert_dir, generate(ServingIdentity(ips=("127.0.0.1",), dns=("localhost",))))
        ctx = ssl.create_default_context(cafile=str(cert_dir / "ca.crt"))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        proc = start_webhook(cert_dir, port, args.webhook_arg)
        try:
            await wait_until_serving(port, ctx)
            for _ in range(20):  # warm up: the first reviews import and allocate what later ones reuse
                await review(port, ctx)
            await asyncio.sleep(1.0)
            before = memory_mib(proc.pid)
            stop = asyncio.Event()
            kept = KeptAlive()
            kept_task = asyncio.create_task(kept.run(port, ctx, stop))
            clients = [Trickler() for _ in range(args.clients)]
            tasks = []
            for c in clients:  # open them over a second, as a scripted attacker would
                tasks.append(asyncio.create_task(trickle(port, ctx, args.phase, stop, c, args.reconnect)))
                await asyncio.sleep(1.0 / args.clients)
            samples = []
            during = []
            t0 = time.monotonic()
            while time.monotonic() - t0 < args.seconds:
                await asyncio.sleep(1.0)
                rss, _ = memory_mib(proc.pid)
                samples.append(round(rss, 1))
                during.append(await review(port, ctx, timeout=5.0))
            open_at_end = sum(1 for c in clients if c.closed_after is None)
            stop.set()
            await asyncio.gather(*tasks, kept_task)
            await asyncio.sleep(1.0)
            after_ok = await review(port, ctx)
            rss_after, hwm = memory_mib(proc.pid)
            closed = sorted(c.closed_after for c in clients if c.closed_after is not None and c.closed_after < args.seconds)
            return {
                "webhook_args": args.webhook_arg, "phase": args.phase, "clients": args.clients, "seconds": args.seconds,
                "rss_before_mib": round(before[0], 1), "rss_peak_mib": round(hwm, 1),
                "rss_samples_mib": samples, "rss_after_mib": round(rss_after, 1),
                "reconnect": args.reconnect, "reconnects": sum(c.reconnects for c in clients),
                "closed_by_server": len(closed), "still_open_at_end": open_at_end,
                "closed_after_s": ({"min": round(closed[0], 2), "median": round(closed[len(closed) // 2], 2),
                                    "max": round(closed[-1], 2)} if closed else None),
                "reviews_on_new_connections_during": {
                    "answered": sum(ok for ok, _, _ in during), "of": len(during),
                    "seconds_median": sorted(sec for _, sec, _ in during)[len(during) // 2] if during else None,
                    "failures": sorted({d for ok, _, d in during if not ok})},
                "reviews_kept_alive_during": {"answered": kept.answered, "failed": kept.failed,
                                              "errors": sorted(set(kept.errors))},
                "review_after": {"answered": after_ok[0], "seconds": round(after_ok[1], 3), "detail": after_ok[2]},
            }
        finally:
            proc.terminate()
            proc.wait(10)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, default=800)
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--phase", choices=("tls", "tcp"), default="tls")
    p.add_argument("--reconnect", action="store_true", help="each client reconnects (after 50 ms) when closed")
    p.add_argument("--webhook-arg", action="append", default=[], help="extra argument for `gpuqueue webhook`")
    print(json.dumps(asyncio.run(run(p.parse_args())), indent=2))
    shared_fixtures.require_for_script("bench/webhook_slowloris.py")


if __name__ == "__main__":
    main()
