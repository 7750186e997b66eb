"""`gpuqueue simulate`: argument parsing; the work is in the simulate package."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("simulate", help="run a scenario through the quota engine on a scripted timeline")
    p.add_argument("scenario", nargs="?", help="scenario YAML (default: the bundled FLAME walkthrough)")
    p.add_argument("--output", choices=["text", "json"], default="text")
    p.add_argument("--until", type=float, default=None, help="stop after this many seconds of simulated time")
    p.add_argument("--plot", default=None, help="also write usage over time to FILE.png or FILE.svg")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    raise SystemExit("gpuqueue simulate: not built yet")
