"""`gpuqueue extender`: the controller and the scheduler extender endpoints in one asyncio
process over one watch cache; `gpuqueue explain NAMESPACE/JOB`."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
import sys
from pathlib import Path

from gpuqueue.heap import settle_heap

log = logging.getLogger("gpuqueue.extender")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("extender", help="run the controller and the scheduler extender endpoints")
    p.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: in-cluster, else ~/.kube/config)")
    p.add_argument("--config", type=Path, default=None,
                   help="Kueue Configuration YAML (fairSharing, manageJobsWithoutQueueName, managedJobsNamespaceSelector, "
                        "waitForPodsReady, and gpuqueue's enforcement)")
    p.add_argument("--cert-dir", type=Path, default=None, help="tls.crt/tls.key for the extender endpoints")
    p.add_argument("--host", default="0.0.0.0", help="address the extender and metrics endpoints listen on")
    p.add_argument("--port", type=int, default=8443, help="scheduler extender endpoints (HTTPS)")
    p.add_argument("--metrics-port", type=int, default=8080,
                   help="/metrics, /healthz, /readyz (HTTPS with --cert-dir, else HTTP)")
    p.add_argument("--metrics-insecure", action="store_true",
                   help="serve /metrics over plain HTTP to anyone who reaches the port, without the bearer-token "
                        "check (TokenReview + SubjectAccessReview for get /metrics): inside a trusted network only")
    p.add_argument("--no-local-queue-metrics", dest="local_queue_metrics", action="store_false",
                   help="do not export the kueue_local_queue_* families (series per LocalQueue; Kueue exports them "
                        "only with its LocalQueueMetrics feature gate)")
    p.add_argument("--visibility-port", type=int, default=8082,
                   help="Kueue's visibility API for kube-aggregator (HTTPS with --cert-dir; 0: off)")
    p.add_argument("--leader-elect", action="store_true", help="one writer among replicas, by a Lease")
    p.add_argument("--lease-namespace", default=os.environ.get("POD_NAMESPACE", "gpuqueue-system"),
                   help="namespace of the leader-election Lease ($POD_NAMESPACE when set)")
    p.add_argument("--qps", type=float, default=100.0, help="API writes per second at most")
    p.add_argument("--burst", type=int, default=200, help="API writes allowed at once above --qps")
    p.add_argument("--insecure-http", action="store_true", help="serve the extender over plain HTTP (tests)")
    p.add_argument("--max-request-bytes", type=int, default=16 * 1024 * 1024,
                   help="larger extender requests are refused (413); full-Node requests may need more")
    p.add_argument("--client-ca", type=Path, default=None,
                   help="serve /filter, /prioritize, /preempt only to clients with a certificate signed by this CA "
                        "(default: ca.crt of --cert-dir, the CA of the client certificate `gpuqueue certs` issues "
                        "kube-scheduler)")
    p.add_argument("--insecure-allow-any-client", action="store_true",
                   help="serve /filter, /prioritize, /preempt to clients without a client certificate (not for "
                        "production: anyone reaching the extender could hold GPUs)")
    p.set_defaults(run=run)

    e = sub.add_parser("explain", help="why is my job pending?",
                       epilog="exit status: 0 the Job is admitted or finished, 1 it is pending, 2 no such Job or "
                              "it is not managed by gpuqueue, 3 the cluster could not be asked")
    e.add_argument("job", help="NAMESPACE/JOB")
    e.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: in-cluster, else $KUBECONFIG or ~/.kube/config)")
    e.add_argument("--config", type=Path, default=None,
                   help="the Configuration the extender runs with (its enforcement section; default: Strict)")
    e.set_defaults(run=run_explain)


def load_configuration(path: Path | None):
    """Kueue's Configuration file and gpuqueue's enforcement section of it; ValueError naming
    the problem when it cannot be used."""
    import yaml
    from pydantic import ValidationError

    from gpuqueue.api import kueue
    from gpuqueue.jobframework.enforcement import EnforcementConfig

    if path is None:
        return kueue.Configuration(), EnforcementConfig()
    try:
        doc = yaml.safe_load(path.read_text()) or {}
        return kueue.Configuration.model_validate(doc), EnforcementConfig.from_kueue_configuration(doc)
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"--config {path}: {exc}") from None
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise ValueError(f"--config {path}: {where}: {err['msg']}") from None
    except ValueError as exc:  # the enforcement section's, naming its field
        raise ValueError(f"--config {path}: {exc}") from None


def wait_for_pods_ready(doc: dict, path: Path | None):
    """The Configuration's waitForPodsReady (None: off); ValueError naming the file and field."""
    from gpuqueue.extender.controller.podsready.pods_ready import from_kueue_configuration

    try:
        return from_kueue_configuration(doc)
    except ValueError as exc:
        raise ValueError(f"--config {path}: {exc}") from None


async def serve(args: argparse.Namespace) -> int:
    from gpuqueue.extender.controller.controller import Controller
    from gpuqueue.extender.controller.serving.delegated_auth import DelegatedAuth
    from gpuqueue.extender.controller.serving.metrics import Metrics
    from gpuqueue.extender.controller.serving.visibility import start_visibility, with_front_proxy_ca
    from gpuqueue.extender.controller.client.kubeapi import KubeApi
    from gpuqueue.tls import ReloadingTLS
    from gpuqueue.extender.controller.options import Options
    from gpuqueue.extender.controller.serving.ops import readiness, start_ops
    from gpuqueue.extender.controller.clusterview.view import ControllerClusterView
    from gpuqueue.extender.scheduler import app as extender_app
    from gpuqueue.kube.config import ClusterConfigError, api_client

    if args.cert_dir is None and not args.insecure_http:
        print("gpuqueue extender: --cert-dir is required (or --insecure-http)", file=sys.stderr)
        return 2
    from gpuqueue.extender.quota.convert import fair_sharing_spec
    from gpuqueue.jobframework.managed import ManagedJobsConfig
    from gpuqueue.jobframework.registry import IntegrationsConfig

    try:
        cfg, enforcement = load_configuration(args.config)
        managed = ManagedJobsConfig.from_kueue_configuration(cfg.to_dict())
        integrations = IntegrationsConfig.from_kueue_configuration(cfg.to_dict())
        pods_ready = wait_for_pods_ready(cfg.to_dict(), args.config)
    except ValueError as exc:
        print(f"gpuqueue extender: {exc}", file=sys.stderr)
        return 2
    try:
        client_ca = extender_app.client_ca_file(args.cert_dir, args.client_ca, args.insecure_allow_any_client)
    except ValueError as exc:
        print(f"gpuqueue extender: {exc}", file=sys.stderr)
        return 2
    try:
        api = await api_client(args.kubeconfig)
    except ClusterConfigError as exc:
        print(f"gpuqueue extender: no cluster ({exc})", file=sys.stderr)
        return 1
    options = Options(qps=args.qps, burst=args.burst, leader_elect=args.leader_elect,
                      lease_namespace=args.lease_namespace, managed_jobs=managed, integrations=integrations,
                      fair_sharing=fair_sharing_spec(cfg), enforcement=enforcement, pods_ready=pods_ready)
    identity = f"{socket.gethostname()}_{os.getpid()}"
    ctl = Controller(api, options, metrics=Metrics(local_queue_metrics=args.local_queue_metrics), identity=identity)
    view = ControllerClusterView(ctl)
    auth = DelegatedAuth(KubeApi(api, qps=50, burst=100, concurrency=4))
    tls_tasks = []
    ops_tls = None
    if args.cert_dir is not None and not args.metrics_insecure:
        ops_tls = ReloadingTLS(args.cert_dir)
        tls_tasks.append(asyncio.create_task(ops_tls.watch()))
    ops = await start_ops(ctl, args.host, args.metrics_port, metrics_auth=None if args.metrics_insecure else auth,
                          ssl_context=ops_tls.context if ops_tls else None)
    servers = [ops]
    if args.visibility_port and args.cert_dir is not None:
        await auth.load_requestheader()
        vis_tls = ReloadingTLS(args.cert_dir)
        tls_tasks.append(asyncio.create_task(vis_tls.watch()))
        servers.append(await start_visibility(ctl, auth, args.host, args.visibility_port,
                                              with_front_proxy_ca(vis_tls.context, auth)))
    elif args.visibility_port:
        logging.getLogger("gpuqueue").warning("the visibility API needs --cert-dir (HTTPS): not served")
    ext = await extender_app.start(view, host=args.host, port=args.port, cert_dir=args.cert_dir,
                                   insecure_http=args.insecure_http, max_request_bytes=args.max_request_bytes,
                                   client_ca=client_ca, allow_any_client=args.insecure_allow_any_client,
                                   ready=lambda: readiness(ctl))
    log.info("enforcement: %s (exempt namespaces: %s)", enforcement.mode, ", ".join(sorted(enforcement.exempt_namespaces)))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await ctl.start()
    settle = loop.create_task(_settle_once_synced(ctl))
    await stop.wait()
    settle.cancel()
    await ctl.stop()
    for t in tls_tasks:
        t.cancel()
    await ext.cleanup()
    for server in servers:
        await server.cleanup()
    await api.close()
    return 0


async def _settle_once_synced(ctl) -> None:
    """The caches as first listed are most of the heap and live on: out of the collector's sight."""
    await ctl.wait_synced()
    settle_heap()


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format='{"time":"%(asctime)s","level":"%(levelname)s",'
                        '"logger":"%(name)s","msg":%(message)r}')
    return asyncio.run(serve(args))


def run_explain(args: argparse.Namespace) -> int:
    from gpuqueue.extender.controller.explain.explain import explain_job
    from gpuqueue.kube.config import ClusterConfigError, api_client

    if "/" not in args.job:
        print("gpuqueue explain: give the job as NAMESPACE/NAME", file=sys.stderr)
        return 2

    from gpuqueue.jobframework.managed import ManagedJobsConfig
    from gpuqueue.jobframework.registry import IntegrationsConfig

    try:
        cfg, enforcement = load_configuration(args.config)
        managed = ManagedJobsConfig.from_kueue_configuration(cfg.to_dict())
        frameworks = IntegrationsConfig.from_kueue_configuration(cfg.to_dict()).frameworks
    except ValueError as exc:
        print(f"gpuqueue explain: {exc}", file=sys.stderr)
        return 2

    async def go() -> int:
        try:
            api = await api_client(args.kubeconfig)
        except ClusterConfigError as exc:
            print(f"gpuqueue explain: no cluster ({exc})", file=sys.stderr)
            return 3
        try:
            text, code = await explain_job(api, args.job, enforcement, managed, frameworks)
        finally:
            await api.close()
        print(text)
        return code

    return asyncio.run(go())
