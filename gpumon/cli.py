"""Command line: ``gpumon`` (dashboard) and its headless subcommands.

Each mode imports only what it needs: the dashboard imports Textual lazily, the headless
modes never do, and nothing here imports torch.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import os
import re
import signal
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from gpumon import startup
from gpumon.config import flags
from gpumon.config.settings import CLUSTER_COMMANDS

if TYPE_CHECKING:
    from typing import NoReturn

    from gpumon.config import Settings
    from gpumon.ui.cluster.app import ClusterApp
    from gpumon.ui.dashboard.app import GpumonApp

# Subcommand -> module. Each module exposes ``run(settings, **its options) -> int``, and
# ``add_arguments(parser)`` where it has options of its own; heavy imports stay inside ``run``.
SUBCOMMANDS: dict[str, str] = {
    "once": "gpumon.commands.once",
    "status": "gpumon.commands.status",
    "export": "gpumon.commands.export.command",
    "probe": "gpumon.probe.cli",
    "pick": "gpumon.commands.pick",
    "report": "gpumon.commands.report",
    "record": "gpumon.commands.record",
    "watch": "gpumon.commands.watch",
}

# Here, not in the modules: `gpumon status` (run by tmux every few seconds) imports only the
# module of the subcommand it runs, not the other three.
SUBCOMMAND_HELP: dict[str, str] = {
    "once": "print one snapshot of every GPU and its processes, then exit (--json for scripts)",
    "status": "print one short line for a tmux status bar (e.g. GPU 0:87/26% 1:0/1%)",
    "export": "serve Prometheus metrics over HTTP (needs: pip install 'gpumon-tui[export]')",
    "probe": "check that torch can use a GPU from a Python environment: is_available, which "
    "cuda:N it is, tensors on it, NVML sees it (runs in a child process)",
    "pick": "print FREE GPUs for CUDA_VISIBLE_DEVICES (waiting for them with --wait), e.g. "
    "CUDA_VISIBLE_DEVICES=$(gpumon pick -n 2 --wait) python train.py",
    "report": "who used the GPUs over a period (GPU-hours held, used, held idle; --since 7d) "
    "and who holds memory idle now, from the history database (or --prometheus)",
    "record": "record the GPUs' history (per-minute readings, who held which GPU) into the "
    "history database (--db), for report and the dashboard's graphs",
    "watch": "wait until GPUs are FREE (or held idle, or below some memory) or a GPU process "
    "ends, printing a line per change; then exit 0 or run --exec, e.g. gpumon watch 3 --exec "
    "'CUDA_VISIBLE_DEVICES=$GPUMON_GPUS python train.py'",
}


class _Parser(argparse.ArgumentParser):
    """Bad input gets one clear line on stderr and exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


#: ``--print-completion``'s choices: :data:`gpumon.cli_docs.completion.SHELLS`, written here
#: so that parsing does not import it.
COMPLETION_SHELLS = ("bash", "zsh", "fish")


class _PrintAndExit(argparse.Action):
    """An option that prints ``text(value)`` and exits 0, as ``--version`` does; the text is
    made only when the option is given."""

    def __init__(
        self,
        option_strings: Sequence[str],
        dest: str,
        text: Callable[[Any], str],
        nargs: int | str | None = 0,
        **kwargs: Any,
    ) -> None:
        kwargs.update(dest=argparse.SUPPRESS, default=argparse.SUPPRESS, nargs=nargs)
        super().__init__(option_strings, **kwargs)
        self.text = text

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        try:
            sys.stdout.write(self.text(values))
            sys.stdout.flush()
        except BrokenPipeError:  # `gpumon --print-man | head`: stop quietly
            _silence_stdout()
            parser.exit(128 + signal.SIGPIPE)
        parser.exit()


def _version(_: object) -> str:
    """gpumon's version, Textual's, and whether each replacement of a piece of Textual is on."""
    import gpumon
    from gpumon.ui.textual_source import status_lines, textual_version

    lines = [f"gpumon {gpumon.__version__}", f"Textual {textual_version()}", *status_lines()]
    return "\n".join(lines) + "\n"


def _completion(shell: str) -> str:
    from gpumon.cli_docs.completion import script
    from gpumon.cli_docs.model import read_parser

    return script(shell, read_parser(build_parser()))


def _man_page(_: object) -> str:
    import gpumon
    from gpumon.cli_docs.man_page import man_page
    from gpumon.cli_docs.model import read_parser

    return man_page(read_parser(build_parser()), gpumon.__version__)


#: The subcommands that print once and end: the fast way out (:mod:`gpumon.__main__`), the
#: garbage collector left off (:mod:`gpumon.startup`).
ONE_SHOT = frozenset({"status", "once"})


class _Ran:
    """The subcommand the last :func:`main` call parsed (None: the dashboard, or none)."""

    command: str | None = None


def ran_one_shot() -> bool:
    """Whether the last :func:`main` call ran a one-shot command, as argparse parsed it."""
    return _Ran.command in ONE_SHOT


def chosen_subcommand(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` runs, or ``None`` (the dashboard, or no valid subcommand)."""
    previous = ""
    for word in argv:
        if word == "--":
            return None
        if word in SUBCOMMANDS and previous not in flags.TOP_LEVEL_VALUE_OPTIONS:
            return word
        previous = word
    return None


#: ``build_parser(only=NO_SUBCOMMAND)``: the top level's options, no subcommand.
NO_SUBCOMMAND = ""


#: What argparse takes for a negative number, not an option (its own pattern).
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


def _looks_like_option(word: str) -> bool:
    """Whether argparse reads ``word`` as an option (not ``-``, ``-5`` or ``"-x y"``)."""
    return (
        word.startswith("-")
        and len(word) > 1
        and " " not in word
        and not _NEGATIVE_NUMBER.match(word)
    )


def has_operand(argv: Sequence[str]) -> bool:
    """Whether ``argv`` holds a word that is neither an option nor a top-level option's
    value (a subcommand, or a typo of one)."""
    previous = ""
    for word in argv:
        if word == "--" or (
            not _looks_like_option(word) and previous not in flags.TOP_LEVEL_VALUE_OPTIONS
        ):
            return True
        previous = word
    return False


def asks_help(argv: Sequence[str]) -> bool:
    """Whether ``argv`` asks for help: ``-h``, ``--help`` or what argparse takes for it
    (``--he``, ``-hh``; the top level has no other short option)."""
    return any(
        (word.startswith("--he") and "--help".startswith(word))
        or (word.startswith("-") and not word.startswith("--") and "h" in word[1:])
        for word in argv
    )


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; with ``only``, the other subcommands are left out (their
    modules not imported)."""
    parser = _Parser(
        prog="gpumon",
        description="Live NVIDIA GPU dashboard for shared GPU servers. "
        "Run without a subcommand to open the dashboard.",
        epilog="Keys in the dashboard: press ? for help. "
        "Without an NVIDIA driver, try `gpumon --demo`.",
    )
    parser.add_argument(
        "--version",
        action=_PrintAndExit,
        text=_version,
        help="print gpumon's and Textual's versions, and which of gpumon's replacements of "
        "Textual's code are on, and exit",
    )
    parser.add_argument(
        "--config",
        metavar="PATH",
        default=None,
        help="read settings from this TOML file (default: "
        "$XDG_CONFIG_HOME/gpumon/config.toml, else ~/.config/gpumon/config.toml)",
    )
    parser.add_argument(
        "--print-config",
        action="store_true",
        help="print the effective settings, and where each came from, and exit",
    )
    parser.add_argument(
        "--print-completion",
        action=_PrintAndExit,
        text=_completion,
        nargs=None,
        choices={shell: f"the script for {shell}" for shell in COMPLETION_SHELLS},
        metavar="SHELL",
        help="print a completion script for bash, zsh or fish, and exit (README: Shell completion)",
    )
    parser.add_argument(
        "--print-man", action=_PrintAndExit, text=_man_page, help="print the man page and exit"
    )
    flags.add_setting_arguments(parser, None)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, module_name in SUBCOMMANDS.items():
        if only is not None and name != only:
            continue
        text = SUBCOMMAND_HELP[name]
        # argparse %-formats help strings; a literal "87%" must not break --help.
        sub = subparsers.add_parser(name, help=text.replace("%", "%%"), description=text)
        flags.add_setting_arguments(sub, name)  # only the settings this subcommand reads
        module = importlib.import_module(module_name)
        if hasattr(module, "add_arguments"):  # record's options are all settings
            module.add_arguments(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    if _stdout_closed():
        # `gpumon once >&-`: nowhere to write, and a file opened later would take its
        # descriptor. One line, as a write to a pipe whose reader went away would get.
        print(f"gpumon: error: cannot write output: {CLOSED_STDOUT}", file=sys.stderr)
        return 1
    words = sys.argv[1:] if argv is None else list(argv)
    only = chosen_subcommand(words)
    if only is not None and asks_help(words[: words.index(only)]):
        only = None  # `gpumon --help status`: the top level's help lists every subcommand
    elif only is None and not asks_help(words) and not has_operand(words):
        # Options only: the dashboard. No subcommand's parser (nor module) is needed; a
        # word that could be one (a typo) keeps them all, for argparse's "invalid choice".
        only = NO_SUBCOMMAND
    _Ran.command = None
    args = build_parser(only=only).parse_args(words)
    _Ran.command = args.command
    from gpumon.config import SettingsError, describe, load_settings
    from gpumon.config.checks import unknown_user

    given = flags.settings_flags(args)
    try:
        settings = load_settings(given, config=args.config)
    except SettingsError as error:
        print(f"gpumon: error: {error}", file=sys.stderr)
        return 2
    if args.print_config:
        print(describe(settings))
        return 0
    misplaced = (
        _misplaced_prometheus(args, settings)
        or flags.not_taken(args.command, given)
        or unknown_user(
            settings.user_filter, local=not settings.demo and settings.prometheus_url is None
        )
    )
    if misplaced is not None:
        print(f"gpumon: error: {misplaced}", file=sys.stderr)
        return 2
    if args.command is None:
        return run_dashboard(settings)
    if args.command not in ONE_SHOT:
        startup.settled()
    module = importlib.import_module(SUBCOMMANDS[args.command])
    own = {name: value for name, value in vars(args).items() if name not in flags.SHARED}
    # In a locale that cannot encode a character (a CJK command in the C locale), print "?"
    # rather than fail: the text is already free of controls and surrogates.
    with contextlib.suppress(AttributeError, ValueError):
        sys.stdout.reconfigure(errors="replace")  # type: ignore[union-attr]
    try:
        status = int(module.run(settings, **own))
        sys.stdout.flush()  # a full disk must fail here, not in the interpreter's exit
    except KeyboardInterrupt:  # a second Ctrl+C while the first is handled: no traceback
        return 128 + signal.SIGINT
    except BrokenPipeError:
        # The reader went away (`gpumon once | head`): stop quietly, as cat and grep do.
        _silence_stdout()
        return 128 + signal.SIGPIPE
    except OSError as error:
        if error.filename is not None:  # a file the command read or wrote, not the output
            print(f"gpumon: error: {error.filename}: {error.strerror or error}", file=sys.stderr)
            return 1
        _silence_stdout()
        print(f"gpumon: error: cannot write output: {error.strerror or error}", file=sys.stderr)
        return 1
    return status


def _misplaced_prometheus(args: argparse.Namespace, settings: Settings) -> str | None:
    """Why --prometheus on this command line cannot be followed, or None."""
    if settings.origins.get("prometheus_url") != "--prometheus":
        return None  # from the config or the environment: the dashboard's, once's --cluster
    if args.command is not None and args.command not in CLUSTER_COMMANDS:
        return (
            f"--prometheus: gpumon {args.command} reads this machine's GPUs; the dashboard, "
            "once, pick and report read a cluster"
        )
    if settings.demo:
        return "--demo and --prometheus: choose one (the demo is one simulated machine)"
    return None


CLOSED_STDOUT = "standard output is closed"


def _stdout_closed() -> bool:
    """True when there is no standard output to write to (``>&-``, or its descriptor gone)."""
    stream = sys.stdout
    if stream is None or getattr(stream, "closed", False):
        return True
    try:
        os.fstat(stream.fileno())
    except (AttributeError, ValueError):  # no descriptor of its own (a test's StringIO)
        return False
    except OSError as error:
        return error.errno == errno.EBADF
    return False


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot raise again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def run_dashboard(settings: Settings) -> int:
    # Textual reads keys from stdin and draws on stderr (stdout stays free for pipes).
    if not (sys.stdin.isatty() and sys.__stderr__ is not None and sys.__stderr__.isatty()):
        print(
            "gpumon: error: the dashboard needs a terminal on stdin and stderr; "
            "use `gpumon once` for a snapshot",
            file=sys.stderr,
        )
        return 2
    if os.environ.get("TERM") == "dumb":
        # No cursor movement, no colours: the dashboard would be escape codes on the screen.
        print(
            "gpumon: error: the dashboard needs a terminal that can move the cursor "
            "(TERM=dumb here); use `gpumon once` for a snapshot or `gpumon status` for one line",
            file=sys.stderr,
        )
        return 2
    app = _dashboard_app(settings)
    if app is None:
        return 2
    from gpumon.ui.signals import GRACE_S, QuitOnSignals

    # SIGTERM, SIGHUP and SIGQUIT quit as q does; if quitting hangs (a dead terminal), the
    # watchdog ends the process after GRACE_S, as this process ends with the app anyway.
    app.quit_signals = QuitOnSignals(app, grace_s=GRACE_S)
    app.run()
    app.quit_signals.finished()
    return int(app.return_code or 0)


def _dashboard_app(settings: Settings) -> GpumonApp | ClusterApp | None:
    """The node list where a Prometheus server is set (and no --demo), else this machine's
    dashboard; None, after one line on stderr, where the cluster's cannot be made."""
    if settings.prometheus_url is None or settings.demo:
        from gpumon.sampling.poller import EarlySample
        from gpumon.sources.base import source_for

        # The first sample starts now, on the sampling thread, and overlaps Textual's
        # import and start (NVML's init can take a second without persistence mode).
        early = EarlySample(source_for(settings))
        from gpumon.ui.dashboard.app import create_app

        return create_app(settings=settings, early=early)
    if settings.only_gpus or settings.only_visible or settings.user_filter:
        from gpumon.commands.once import FILTERS_NOT_FOR_CLUSTER

        print(f"gpumon: error: {FILTERS_NOT_FOR_CLUSTER}", file=sys.stderr)
        return None
    from gpumon.config import SettingsError
    from gpumon.ui.cluster.app import create_cluster_app

    try:
        return create_cluster_app(settings)
    except SettingsError as error:  # an unreadable CA file
        print(f"gpumon: error: {error}", file=sys.stderr)
        return None


if __name__ == "__main__":
    raise SystemExit(main())
