"""`gpuqueue webhook`: argument parsing and the process around the server."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

import yaml

from gpuqueue.jobframework.enforcement import EnforcementConfig
from gpuqueue.jobframework.managed import ManagedJobsConfig
from gpuqueue.jobframework.registry import IntegrationsConfig
from gpuqueue.listener import ConnectionLimits
from gpuqueue.webhook.app import DEFAULT_MAX_BODY, WebhookSettings
from gpuqueue.webhook.job_validation import DEFAULT_CONTROLLER_USERNAMES
from gpuqueue.webhook.pod_admission import DEFAULT_SCHEDULER_USERNAMES

log = logging.getLogger("gpuqueue.webhook")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("webhook", help="serve the admission webhook (HTTPS)")
    p.add_argument("--cert-dir", type=Path, default=Path("/tmp/k8s-webhook-server/serving-certs"),
                   help="directory with tls.crt and tls.key (reloaded when they change)")
    p.add_argument("--host", default="0.0.0.0", help="address to listen on")
    p.add_argument("--port", type=int, default=9443, help="HTTPS port for AdmissionReview requests")
    p.add_argument("--config", type=Path, default=None,
                   help="Kueue Configuration (config.kueue.x-k8s.io) YAML: manageJobsWithoutQueueName, "
                        "managedJobsNamespaceSelector, and gpuqueue's enforcement section")
    p.add_argument("--controller-username", action="append", default=None,
                   help="the controller's identity, the only one that may unsuspend managed Jobs and write Workloads "
                        f"(repeatable; default {', '.join(DEFAULT_CONTROLLER_USERNAMES)})")
    p.add_argument("--scheduler-username", action="append", default=None,
                   help="a scheduler's identity, the only ones that may bind pods needing an admission "
                        f"(repeatable; default {', '.join(DEFAULT_SCHEDULER_USERNAMES)})")
    p.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY, help="larger requests are refused (413)")
    p.add_argument("--cert-check-seconds", type=float, default=10.0, help="how often to look for renewed cert files")
    limits = ConnectionLimits()
    p.add_argument("--max-connections", type=int, default=limits.max_connections,
                   help="connections served at once, TLS handshakes included; past it a slow or long idle one is "
                        "closed to make room, else the new one waits for a slot")
    p.add_argument("--max-waiting-connections", type=int, default=limits.max_waiting,
                   help="connections waiting for a slot (each up to the header timeout); past it the newest of the "
                        "client with the most waiting is reset")
    p.add_argument("--header-timeout-seconds", type=float, default=limits.header_timeout,
                   help="time to deliver a request's headers, from the accept (TLS handshake included) or from "
                        "the first byte of a later request on the connection")
    p.add_argument("--body-timeout-seconds", type=float, default=limits.body_timeout,
                   help="time from a request's headers to its answer (body read, review decided)")
    p.add_argument("--idle-timeout-seconds", type=float, default=limits.idle_timeout,
                   help="how long a kept-alive connection may wait for its next request")
    p.add_argument("--shutdown-delay-seconds", type=float, default=5.0,
                   help="on SIGTERM, keep answering this long (while the Service stops sending here), then finish "
                        "what is in flight and exit")
    p.set_defaults(run=run)


def load_settings(args: argparse.Namespace) -> WebhookSettings:
    config, enforcement, integrations = ManagedJobsConfig(), EnforcementConfig(), IntegrationsConfig()
    if args.config is not None:
        try:
            doc = yaml.safe_load(args.config.read_text())
            config = ManagedJobsConfig.from_kueue_configuration(doc)
            enforcement = EnforcementConfig.from_kueue_configuration(doc)
            integrations = IntegrationsConfig.from_kueue_configuration(doc)
        except (OSError, yaml.YAMLError, ValueError) as exc:
            raise SystemExit(f"gpuqueue webhook: --config {args.config}: {exc}")
    return WebhookSettings(config=config, enforcement=enforcement, integrations=integrations,
                           controller_usernames=tuple(args.controller_username or DEFAULT_CONTROLLER_USERNAMES),
                           scheduler_usernames=tuple(args.scheduler_username or DEFAULT_SCHEDULER_USERNAMES),
                           max_body=args.max_body_bytes)


def with_gates(settings: WebhookSettings, version) -> WebhookSettings:
    """The pod integration needs scheduling gates (Kubernetes 1.27): below, it is off, as Kueue
    refuses it; an unreadable version counts as new enough (a gate the server drops only leaves
    the pod to the extender, which refuses it a node until it is admitted)."""
    from dataclasses import replace

    from gpuqueue.kube.version import TOO_OLD_FOR_PODS, too_old_for_gates

    shown = (version or {}).get("gitVersion") or ""
    if too_old_for_gates(version):
        log.warning("%s (this API server is %s): pods are not gated; a pod that needs an admission stays Pending, "
                    "refused a node by the extender", TOO_OLD_FOR_PODS, shown)
        return replace(settings, scheduling_gates=False, server_version=shown)
    return replace(settings, server_version=shown)


def connection_limits(args: argparse.Namespace) -> ConnectionLimits:
    try:
        return ConnectionLimits(max_connections=args.max_connections, header_timeout=args.header_timeout_seconds,
                                body_timeout=args.body_timeout_seconds, idle_timeout=args.idle_timeout_seconds,
                                max_waiting=args.max_waiting_connections)
    except ValueError as exc:
        raise SystemExit(f"gpuqueue webhook: {exc}")


async def wait_for_certificate(cert_dir: Path, every: float, stop: asyncio.Event | None):
    """The serving pair from ``cert_dir``, waiting for it to appear: on a first install the certs
    Job creates the Secret after this pod's volume was set up, and the kubelet fills it in later."""
    from gpuqueue.tls import ReloadingTLS

    said = False
    while True:
        try:
            return ReloadingTLS(cert_dir)
        except (OSError, ValueError) as exc:
            if not said:
                log.warning("no serving certificate in %s yet (%s): waiting for it (the certs Job writes Secret "
                            "gpuqueue-certs; the kubelet fills in the volume)", cert_dir, exc)
                said = True
        if stop is not None and stop.is_set():
            return None
        await asyncio.sleep(every)


async def serve(args: argparse.Namespace, stop: asyncio.Event | None = None) -> None:
    from kubernetes_asyncio import client

    from gpuqueue.kube.config import ClusterConfigError, load_config
    from gpuqueue.heap import settle_heap
    from gpuqueue.webhook.app import AdmissionHandlers, start_server
    from gpuqueue.webhook.cluster import ApiPods, NoPods, WatchedQueueView, server_version, watch_cluster

    settings = load_settings(args)
    limits = connection_limits(args)
    tls = await wait_for_certificate(args.cert_dir, min(args.cert_check_seconds, 2.0), stop)
    if tls is None:
        return
    view = WatchedQueueView()
    tasks = [asyncio.create_task(tls.watch(args.cert_check_seconds))]
    api = None
    try:
        configuration = await load_config()
    except ClusterConfigError as exc:
        log.warning("no cluster found (%s): serving without a queue view; only Jobs that carry the "
                    "kueue.x-k8s.io/queue-name label are queued, every extended resource counts as covered, and "
                    "bindings by others than the schedulers are refused", exc)
        ready, covered, pods = (lambda: True), (lambda: None), NoPods()
    else:
        tasks.append(asyncio.create_task(watch_cluster(view, configuration)))
        api = client.ApiClient(configuration)
        ready, covered, pods = view.ready, view.covered_resources, ApiPods(api)
        if settings.integrations.enabled("pod"):
            settings = with_gates(settings, await server_version(api))
    handlers = AdmissionHandlers(settings, view, view, ready, covered, pods)
    server = await start_server(handlers.server(), args.host, args.port, tls.context, limits)
    settle_heap()
    log.info("webhook serving on https://%s:%d", args.host, server.port)
    try:
        await (stop.wait() if stop else asyncio.Event().wait())
        # kube-apiserver learns that this replica is going from the Service's endpoints, a moment
        # after the SIGTERM: calls still routed here are answered meanwhile, not refused.
        log.info("stopping: answering for %.1f s more, closing each connection after its answer",
                 args.shutdown_delay_seconds)
        server.drain()
        await asyncio.sleep(args.shutdown_delay_seconds)
    finally:
        for t in tasks:
            t.cancel()
        await server.close()
        if api is not None:
            await api.close()


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await serve(args, stop)

    asyncio.run(main())
    return 0
