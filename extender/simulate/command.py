"""`gpuqueue simulate`: argument parsing and the exit-code contract of SIMULATE.md."""

from __future__ import annotations

import argparse
import sys
from importlib import resources
from pathlib import Path

from gpuqueue.extender.simulate.scenario import ScenarioError, load_scenario

BUNDLED = "flame.yaml"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("simulate", help="run a scenario through the quota engine on a scripted timeline")
    p.add_argument("scenario", nargs="?", help="scenario YAML (default: the bundled FLAME walkthrough)")
    p.add_argument("--output", choices=["text", "json"], default="text")
    p.add_argument("--until", type=float, default=None, help="stop after this many seconds of simulated time")
    p.add_argument("--plot", default=None, help="also write usage over time to FILE.png or FILE.svg")
    p.set_defaults(run=run)


def _read(path: str | None) -> tuple[str, str]:
    if path is None:
        return resources.files("gpuqueue.extender.simulate").joinpath("examples", BUNDLED).read_text(), BUNDLED
    if path == "-":
        return sys.stdin.read(), "<stdin>"
    return Path(path).read_text(encoding="utf-8"), path


def run(args: argparse.Namespace) -> int:
    from gpuqueue.extender.simulate.output import render

    try:
        text, source = _read(args.scenario)
    except (OSError, UnicodeDecodeError) as exc:
        print(f"gpuqueue simulate: cannot read {args.scenario}: {exc}", file=sys.stderr)
        return 2
    if args.plot and not args.plot.endswith((".png", ".svg")):
        print(f"gpuqueue simulate: --plot: the file must end in .png or .svg, got {args.plot}", file=sys.stderr)
        return 2
    if args.until is not None and not args.until >= 0:
        print(f"gpuqueue simulate: --until: must be >= 0, got {args.until}", file=sys.stderr)
        return 2
    try:
        scenario = load_scenario(text, source)
    except ScenarioError as exc:
        print(f"gpuqueue simulate: {exc}", file=sys.stderr)
        return 2
    return render(scenario, args.output, args.until, args.plot, sys.stdout)
