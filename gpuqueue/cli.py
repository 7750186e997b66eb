"""The `gpuqueue` console command: one entry point, one subcommand per component."""

from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpuqueue", description="GPU job queueing for Kubernetes, Kueue-compatible.")
    sub = parser.add_subparsers(dest="command", required=True)
    from gpuqueue.extender.simulate.command import add_parser as add_simulate

    add_simulate(sub)
    from gpuqueue.webhook.command import add_parser as add_webhook
    from gpuqueue.certs.command import add_parser as add_certs

    add_webhook(sub)
    add_certs(sub)
    from gpuqueue.extender.command import add_parser as add_extender

    add_extender(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except BrokenPipeError:  # `gpuqueue simulate | head`: the reader left, nothing is wrong
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
