"""The `gpuqueue` console command: one entry point, one subcommand per component, and the one
place where an error a person can fix (a port in use, an unreachable API server) becomes one line
on stderr instead of a traceback."""

from __future__ import annotations

import argparse
import logging
import sys

# `gpuqueue explain` answers 0 admitted or finished, 1 pending, 2 unknown Job: when it cannot ask
# at all, it says so with a code of its own.
ERROR_EXIT = {"explain": 3}


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows an option's default after its help, unless there is none to show, the help already
    says it, or the option is a flag (its name says what giving it does; `--no-x`'s default of
    True would read as if the flag were on)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if (action.default in (None, False, [], "", argparse.SUPPRESS) or "default" in text.lower()
                or action.nargs == 0):
            return text
        return super()._get_help_string(action)


class Parser(argparse.ArgumentParser):
    """Every (sub)command's parser: defaults shown in --help."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)


def version() -> str:
    from importlib.metadata import PackageNotFoundError, version as installed

    try:
        return installed("gpuqueue")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def build_parser(prog: str = "gpuqueue") -> argparse.ArgumentParser:
    parser = Parser(prog=prog, description="GPU job queueing for Kubernetes, Kueue-compatible.")
    parser.add_argument("--version", action="version", version=f"gpuqueue {version()}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    from gpuqueue.extender.simulate.command import add_parser as add_simulate

    add_simulate(sub)
    from gpuqueue.webhook.command import add_parser as add_webhook
    from gpuqueue.certs.command import add_parser as add_certs

    add_webhook(sub)
    add_certs(sub)
    from gpuqueue.extender.command import add_parser as add_extender

    add_extender(sub)
    from gpuqueue.kueuectl.command import add_parsers as add_kueuectl

    add_kueuectl(sub)
    return parser


def error_line(exc: BaseException) -> tuple[str, int | None] | None:
    """One line for an error a person can act on, and the exit code it calls for (None: the
    command's own); None for anything else (a bug keeps its traceback)."""
    from gpuqueue.kube.config import ClusterConfigError
    from gpuqueue.kueuectl import UsageError

    if isinstance(exc, UsageError):
        return str(exc), 2
    if isinstance(exc, ClusterConfigError):
        return f"no cluster ({exc})", None
    if isinstance(exc, OSError):
        if type(exc).__module__.startswith("aiohttp"):  # says which host it could not reach
            text = str(exc)
        elif exc.filename is not None:
            text = f"{exc.filename}: {exc.strerror}"
        else:
            text = exc.strerror or str(exc)
        return " ".join(text.split()), None
    from gpuqueue.kube.errors import api_error_line

    line = api_error_line(exc)
    return (line, None) if line is not None else None


def main(argv: list[str] | None = None, prog: str = "gpuqueue") -> int:
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except BrokenPipeError:  # `gpuqueue simulate | head`: the reader left, nothing is wrong
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        found = error_line(exc)
        if found is None:
            raise
        line, code = found
        print(f"{prog} {args.command}: {line}", file=sys.stderr)
        # What a failed start left open (a client session) is reported by asyncio as the process
        # ends; the line above already says what went wrong.
        logging.getLogger("asyncio").setLevel(logging.CRITICAL)
        return code if code is not None else ERROR_EXIT.get(args.command, 1)


def kubectl_plugin() -> int:
    """`kubectl gpuqueue ...`: kubectl runs `kubectl-gpuqueue` found on PATH."""
    return main(prog="kubectl gpuqueue")


if __name__ == "__main__":
    sys.exit(main())
