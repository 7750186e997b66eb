"""`gpuqueue simulate`: argument parsing and the exit codes of docs/simulate.md."""

from __future__ import annotations

import argparse
import sys
from importlib import resources
from pathlib import Path

from gpuqueue.extender.simulate.scenario import ScenarioError, load_scenario

BUNDLED = "flame.yaml"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("simulate", help="run a scenario through the quota engine on a scripted timeline",
                       description="Run a scenario (docs/simulate.md) through the quota engine, the webhook's Job "
                                   "mutation and the extender's placement code on a scripted timeline.",
                       epilog="exit status: 0 the run completed, 2 the scenario or an option is invalid (one line "
                              "on stderr, nothing on stdout), 1 the picture could not be written")
    p.add_argument("scenario", nargs="?",
                   help="scenario YAML, - for stdin (default: the bundled FLAME walkthrough)")
    p.add_argument("--output", choices=["text", "json"], default="text",
                   help="text: events and a picture of each flavor's GPUs per step; json: JSON Lines")
    p.add_argument("--until", type=float, default=None, metavar="SECONDS",
                   help="stop after this many seconds of simulated time (default: when nothing more happens)")
    p.add_argument("--plot", default=None, metavar="FILE",
                   help="also draw each ClusterQueue's usage against its quota over time to FILE.png or FILE.svg "
                        "(needs matplotlib: pip install 'gpuqueue[plot]')")
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
    if args.plot:
        from gpuqueue.extender.simulate.plot import PlotError, check_plot

        try:
            check_plot(args.plot)
        except PlotError as exc:
            print(f"gpuqueue simulate: --plot {args.plot}: {exc}", file=sys.stderr)
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
