"""Command line: ``gpumon`` (dashboard) and its headless subcommands.

Each mode imports only what it needs: the dashboard imports Textual lazily, the headless
modes never do, and nothing here imports torch.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import NoReturn

from gpumon import __version__
from gpumon.model import MIN_INTERVAL_S

# Subcommand -> module. Each module exposes ``HELP: str``, ``add_arguments(parser)`` and
# ``run(args) -> int`` and keeps heavy imports inside ``run``.
SUBCOMMANDS: dict[str, str] = {
    "once": "gpumon.once",
    "status": "gpumon.status",
    "export": "gpumon.export",
    "probe": "gpumon.probe.cli",
}


class _Parser(argparse.ArgumentParser):
    """Bad input gets one clear line on stderr and exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def interval_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value >= MIN_INTERVAL_S:  # also rejects NaN
        raise argparse.ArgumentTypeError(
            f"must be at least {MIN_INTERVAL_S} seconds (got {text}): NVML's utilisation "
            "counters do not update faster"
        )
    if value > 3600:
        raise argparse.ArgumentTypeError(f"must be at most 3600 seconds (got {text})")
    return value


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 (got {value})")
    return value


def add_source_arguments(parser: argparse.ArgumentParser, *, top_level: bool) -> None:
    """--demo and friends, accepted before or after a subcommand."""
    # In a subparser, SUPPRESS keeps an unset option from overwriting the top-level value.
    default = (lambda value: value) if top_level else (lambda value: argparse.SUPPRESS)
    parser.add_argument(
        "--demo",
        action="store_true",
        default=default(False),
        help="use a simulated GPU server (always labelled DEMO)",
    )
    parser.add_argument(
        "--demo-gpus",
        type=positive_int,
        metavar="N",
        default=default(4),
        help="number of simulated GPUs with --demo (default: 4)",
    )
    parser.add_argument(
        "--demo-processes",
        type=positive_int,
        metavar="N",
        default=default(None),
        help="number of simulated GPU processes with --demo (default: 1.5 per GPU)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="gpumon",
        description="Live NVIDIA GPU dashboard for shared GPU servers. "
        "Run without a subcommand to open the dashboard.",
        epilog="Keys in the dashboard: press ? for help. "
        "Without an NVIDIA driver, try `gpumon --demo`.",
    )
    parser.add_argument("--version", action="version", version=f"gpumon {__version__}")
    parser.add_argument(
        "--interval",
        type=interval_seconds,
        default=1.0,
        metavar="SECONDS",
        help=f"refresh interval (default: 1, at least {MIN_INTERVAL_S})",
    )
    parser.add_argument(
        "--probe-python",
        metavar="PATH",
        default=None,
        help="Python interpreter for the torch probe (default: the one running gpumon)",
    )
    add_source_arguments(parser, top_level=True)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, module_name in SUBCOMMANDS.items():
        module = importlib.import_module(module_name)
        # argparse %-formats help strings; a literal "87%" must not break --help.
        sub = subparsers.add_parser(
            name, help=module.HELP.replace("%", "%%"), description=module.HELP
        )
        add_source_arguments(sub, top_level=False)
        module.add_arguments(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command is not None:
        module = importlib.import_module(SUBCOMMANDS[args.command])
        return int(module.run(args))
    return run_dashboard(args)


def run_dashboard(args: argparse.Namespace) -> int:
    if not sys.stdout.isatty():
        print(
            "gpumon: error: the dashboard needs a terminal; use `gpumon once` for a snapshot",
            file=sys.stderr,
        )
        return 2
    from gpumon.ui.app import create_app

    app = create_app(
        demo=args.demo,
        demo_gpus=args.demo_gpus,
        demo_processes=args.demo_processes,
        interval_s=args.interval,
        probe_python=args.probe_python,
    )
    app.run()
    return int(app.return_code or 0)


if __name__ == "__main__":
    raise SystemExit(main())
