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


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("extender", help="run the controller and the scheduler extender endpoints")
    p.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: in-cluster, else ~/.kube/config)")
    p.add_argument("--config", type=Path, default=None,
                   help="Kueue Configuration YAML (fairSharing, manageJobsWithoutQueueName, managedJobsNamespaceSelector)")
    p.add_argument("--cert-dir", type=Path, default=None, help="tls.crt/tls.key for the extender endpoints")
    p.add_argument("--host", default="0.0.0.0", help="address the extender and metrics endpoints listen on")
    p.add_argument("--port", type=int, default=8443, help="scheduler extender endpoints (HTTPS)")
    p.add_argument("--metrics-port", type=int, default=8080, help="/metrics, /healthz, /readyz (HTTP)")
    p.add_argument("--leader-elect", action="store_true", help="one writer among replicas, by a Lease")
    p.add_argument("--lease-namespace", default=os.environ.get("POD_NAMESPACE", "gpuqueue-system"),
                   help="namespace of the leader-election Lease ($POD_NAMESPACE when set)")
    p.add_argument("--qps", type=float, default=100.0, help="API writes per second at most")
    p.add_argument("--burst", type=int, default=200, help="API writes allowed at once above --qps")
    p.add_argument("--insecure-http", action="store_true", help="serve the extender over plain HTTP (tests)")
    p.add_argument("--max-request-bytes", type=int, default=16 * 1024 * 1024,
                   help="larger extender requests are refused (413); full-Node requests may need more")
    p.add_argument("--client-ca", type=Path, default=None,
                   help="serve /filter, /prioritize, /preempt only to clients with a certificate signed by this CA")
    p.set_defaults(run=run)

    e = sub.add_parser("explain", help="why is my job pending?",
                       epilog="exit status: 0 the Job is admitted or finished, 1 it is pending, 2 no such Job or "
                              "it is not managed by gpuqueue, 3 the cluster could not be asked")
    e.add_argument("job", help="NAMESPACE/JOB")
    e.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: in-cluster, else $KUBECONFIG or ~/.kube/config)")
    e.set_defaults(run=run_explain)


def load_configuration(path: Path | None):
    """Kueue's Configuration file; ValueError naming the problem when it cannot be used."""
    import yaml
    from pydantic import ValidationError

    from gpuqueue.api import kueue

    if path is None:
        return kueue.Configuration()
    try:
        doc = yaml.safe_load(path.read_text()) or {}
        return kueue.Configuration.model_validate(doc)
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"--config {path}: {exc}") from None
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise ValueError(f"--config {path}: {where}: {err['msg']}") from None


async def serve(args: argparse.Namespace) -> int:
    from gpuqueue.extender.controller.controller import Controller
    from gpuqueue.extender.controller.options import Options
    from gpuqueue.extender.controller.ops import start_ops
    from gpuqueue.extender.controller.view import ControllerClusterView
    from gpuqueue.extender.scheduler import app as extender_app
    from gpuqueue.kube.config import ClusterConfigError, api_client

    if args.cert_dir is None and not args.insecure_http:
        print("gpuqueue extender: --cert-dir is required (or --insecure-http)", file=sys.stderr)
        return 2
    from gpuqueue.extender.quota.convert import fair_sharing_spec
    from gpuqueue.jobframework.managed import ManagedJobsConfig

    try:
        cfg = load_configuration(args.config)
        managed = ManagedJobsConfig.from_kueue_configuration(cfg.to_dict())
    except ValueError as exc:
        print(f"gpuqueue extender: {exc}", file=sys.stderr)
        return 2
    try:
        api = await api_client(args.kubeconfig)
    except ClusterConfigError as exc:
        print(f"gpuqueue extender: no cluster ({exc})", file=sys.stderr)
        return 1
    options = Options(qps=args.qps, burst=args.burst, leader_elect=args.leader_elect,
                      lease_namespace=args.lease_namespace, managed_jobs=managed,
                      fair_sharing=fair_sharing_spec(cfg))
    identity = f"{socket.gethostname()}_{os.getpid()}"
    ctl = Controller(api, options, identity=identity)
    view = ControllerClusterView(ctl)
    ops = await start_ops(ctl, args.host, args.metrics_port)
    ext = await extender_app.start(view, host=args.host, port=args.port, cert_dir=args.cert_dir,
                                   insecure_http=args.insecure_http, max_request_bytes=args.max_request_bytes,
                                   client_ca=args.client_ca)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await ctl.start()
    await stop.wait()
    await ctl.stop()
    await ext.cleanup()
    await ops.cleanup()
    await api.close()
    return 0


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format='{"time":"%(asctime)s","level":"%(levelname)s",'
                        '"logger":"%(name)s","msg":%(message)r}')
    return asyncio.run(serve(args))


def run_explain(args: argparse.Namespace) -> int:
    from gpuqueue.extender.controller.explain import explain_job
    from gpuqueue.kube.config import ClusterConfigError, api_client

    if "/" not in args.job:
        print("gpuqueue explain: give the job as NAMESPACE/NAME", file=sys.stderr)
        return 2

    async def go() -> int:
        try:
            api = await api_client(args.kubeconfig)
        except ClusterConfigError as exc:
            print(f"gpuqueue explain: no cluster ({exc})", file=sys.stderr)
            return 3
        try:
            text, code = await explain_job(api, args.job)
        finally:
            await api.close()
        print(text)
        return code

    return asyncio.run(go())
