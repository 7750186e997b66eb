"""`gpuqueue certs generate|ensure`: argument parsing; the work is in generate/ensure."""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import ipaddress
import sys
from pathlib import Path

from gpuqueue.certs.generate import ServingIdentity, generate, write_files
from gpuqueue import access


def _identity(args: argparse.Namespace) -> ServingIdentity:
    for ip in args.ip:
        try:
            ipaddress.ip_address(ip)
        except ValueError:
            raise SystemExit(f"gpuqueue certs: --ip {ip!r} is not an IP address")
    return ServingIdentity(args.service, args.namespace, tuple(args.dns), tuple(args.ip))


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("certs", help="TLS material for the webhook and extender")
    csub = p.add_subparsers(dest="certs_command", required=True)

    def common(q: argparse.ArgumentParser) -> None:
        q.add_argument("--service", default="gpuqueue-webhook", help="Service name (SANs NAME, NAME.NS, NAME.NS.svc, ...)")
        q.add_argument("--namespace", default=access.INSTALL_NAMESPACE, help="namespace of the Service (and of the Secret)")
        q.add_argument("--dns", action="append", default=[], help="extra DNS SAN (repeatable)")
        q.add_argument("--ip", action="append", default=[], help="extra IP SAN (repeatable)")
        q.add_argument("--days", type=int, default=365, help="serving certificate validity")

    g = csub.add_parser("generate", help="write ca.crt, tls.crt, tls.key, scheduler-client.crt, "
                                         "scheduler-client.key (and ca.key) to a directory")
    g.add_argument("--out", required=True, type=Path, help="directory to write the files to (created if missing)")
    common(g)
    g.set_defaults(run=run_generate)

    e = csub.add_parser("ensure", help="in cluster: create/renew the Secret (serving and kube-scheduler "
                                       "client certificates) and inject caBundle (idempotent)")
    e.add_argument("--secret", default=access.CERTS_SECRET, help="name of the Secret holding the CA and the certificates")
    e.add_argument("--webhook-config", default=access.WEBHOOK_CONFIGURATION, help="name of both webhook configurations")
    e.add_argument("--out", type=Path, default=None, help="also write the files here (init container)")
    e.add_argument("--every", type=float, default=0, help="repeat every N seconds (0: once)")
    e.add_argument("--require-webhook-config", action="store_true",
                   help="exit 1 when a webhook configuration does not exist yet (after doing the rest), so a Job "
                        "tries again: without its caBundle, kube-apiserver cannot call the webhook")
    common(e)
    e.set_defaults(run=run_ensure)


def run_generate(args: argparse.Namespace) -> int:
    material = generate(_identity(args), dt.timedelta(days=args.days))
    for path in write_files(args.out, material):
        print(path)
    return 0


def run_ensure(args: argparse.Namespace) -> int:
    from gpuqueue.certs.ensure import WebhookConfigurationMissing, ensure
    from gpuqueue.kube.config import ClusterConfigError, load_config

    identity = _identity(args)

    async def main() -> int:
        try:
            configuration = await load_config()
        except ClusterConfigError as exc:
            print(f"gpuqueue certs ensure: no cluster ({exc})", file=sys.stderr)
            return 1
        while True:
            try:
                print(await ensure(args.namespace, args.secret, identity, args.webhook_config, args.out,
                                   configuration=configuration, require_webhook_config=args.require_webhook_config))
            except WebhookConfigurationMissing as exc:
                print(f"gpuqueue certs ensure: {exc}", file=sys.stderr)
                return 1
            if args.every <= 0:
                return 0
            await asyncio.sleep(args.every)

    return asyncio.run(main())
