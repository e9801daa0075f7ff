"""The options every mode shares, and how they become :class:`~gpumon.settings.Settings`.

``cli.py`` builds the parser and runs a mode; here are the option groups it adds to the top
level and to the subcommands (``--demo`` and friends, ``--prometheus`` and its access
options, the sharing thresholds, the start-up filters), and :func:`settings_flags`, which
turns the parsed options into Settings attributes. No Textual, no psutil: ``gpumon status``
builds this parser every few seconds.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable

from gpumon.arguments import decimal_number, whole_number

# NVML supports at most 64 GPUs per host; a demo of more would simulate no real server.
MAX_DEMO_GPUS = 64
MAX_DEMO_PROCESSES = 4096

# Top-level options that take a value: a subcommand's name after one of them is its value.
TOP_LEVEL_VALUE_OPTIONS = frozenset(
    {"--interval", "--probe-python", "--demo-gpus", "--demo-processes", "--config", "--theme"}
    | {"--prometheus", "--prometheus-header", "--prometheus-ca-file", "--prometheus-timeout"}
    | {"--free-threshold", "--claims-dir", "--claim-seconds"}
    | {"--idle-after", "--idle-below", "--idle-min-memory", "--only", "--user"}
    | {"--db", "--history-days"}
    | {"--print-completion"}
)

# Options every mode shares: they go into Settings; the rest are the subcommand's own.
SHARED = frozenset(
    {"command", "interval", "probe_python", "theme", "config", "print_config", "readonly"}
    | {"demo", "demo_gpus", "demo_processes"}
    | {"prometheus", "prometheus_header", "prometheus_header_after"}
    | {"prometheus_ca_file", "prometheus_timeout"}
    | {"free_threshold", "claims_dir", "claim_seconds", "idle_after", "idle_below"}
    | {"idle_min_memory", "only", "only_visible", "user", "db", "history_days"}
)

#: Shared options given as ``--name VALUE`` -> the Settings attribute they set.
_SETTING_OPTIONS = {
    "free_threshold": "free_threshold_mib",
    "claims_dir": "claims_dir",
    "claim_seconds": "claim_seconds",
    "idle_after": "idle_after_minutes",
    "idle_below": "idle_below_pct",
    "idle_min_memory": "idle_min_memory_mib",
    "user": "user_filter",
    "db": "history_db",
    "history_days": "history_days",
}

#: ``--only``: an NVML index, a GPU UUID or a MIG UUID (or a unique prefix of one).
_GPU_ID = re.compile(r"[0-9]{1,2}|(?:GPU|MIG)-[0-9A-Fa-f][0-9A-Fa-f-]{0,63}", re.ASCII)
#: ``--user``: a user name as useradd and LDAP allow it.
_USER_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@-]{0,63}\$?", re.ASCII)


def bounded_int(highest: int) -> Callable[[str], int]:
    """An argparse type: a whole number from 1 to ``highest``."""

    def parse(text: str) -> int:
        value = whole_number(text)
        if not 1 <= value <= highest:
            raise argparse.ArgumentTypeError(f"must be from 1 to {highest} (got {value})")
        return value

    return parse


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
        type=bounded_int(MAX_DEMO_GPUS),
        metavar="N",
        default=default(4),
        help="number of simulated GPUs with --demo (default: 4)",
    )
    parser.add_argument(
        "--demo-processes",
        type=bounded_int(MAX_DEMO_PROCESSES),
        metavar="N",
        default=default(None),
        help="number of simulated GPU processes with --demo (default: 1.5 per GPU)",
    )


def add_prometheus_arguments(parser: argparse.ArgumentParser, *, top_level: bool) -> None:
    """--prometheus and its access options, accepted before or after ``once`` and ``pick``."""
    default = (lambda value: value) if top_level else (lambda value: argparse.SUPPRESS)
    parser.add_argument(
        "--prometheus",
        metavar="URL",
        default=default(None),
        help="read a whole cluster from this Prometheus server (or Thanos, VictoriaMetrics, "
        "Mimir): http:// or https://, no credentials in it (config: prometheus_url)",
    )
    # A subcommand's headers go to their own list: argparse would replace the top level's.
    parser.add_argument(
        "--prometheus-header",
        dest="prometheus_header" if top_level else "prometheus_header_after",
        action="append",
        metavar="'NAME: VALUE'",
        default=default(None),
        help="an HTTP header for the Prometheus server, e.g. 'Authorization: Bearer TOKEN' "
        "(repeatable; never printed; other users can read a command line: the config "
        "file's prometheus_headers is safer)",
    )
    parser.add_argument(
        "--prometheus-ca-file",
        metavar="PATH",
        default=default(None),
        help="verify the Prometheus server's HTTPS certificate with the CA certificates "
        "in this PEM file (default: the system's)",
    )
    parser.add_argument(
        "--prometheus-timeout",
        type=_timeout_seconds,
        metavar="SECONDS",
        default=default(None),
        help="give up on a request to the Prometheus server after this long (default: 5)",
    )


def _timeout_seconds(text: str) -> float:
    return decimal_number(text, "a number of seconds such as 5 or 2.5")


def _typed_here(path: str) -> str:
    """A path from the command line, relative ones made absolute against the directory the
    command was typed in (the setting's check refuses relative paths, which elsewhere would
    follow whatever directory gpumon starts in); a bare command name stays one."""
    expanded = os.path.expanduser(path)
    return os.path.abspath(expanded) if os.sep in expanded else path


def settings_flags(args: argparse.Namespace) -> dict[str, object]:
    """The shared options given on the command line, as Settings attributes (argparse has
    checked them; the theme is checked with the config file's rules)."""
    flags: dict[str, object] = {
        "demo": args.demo,
        "demo_gpus": args.demo_gpus,
        "demo_processes": args.demo_processes,
    }
    if args.interval is not None:
        flags["interval_s"] = args.interval
    if args.probe_python is not None:
        flags["probe_python"] = _typed_here(args.probe_python)
    if args.theme is not None:
        flags["theme"] = args.theme
    if args.readonly:
        flags["readonly"] = True
    cluster = {
        "prometheus_url": args.prometheus,
        "prometheus_ca_file": args.prometheus_ca_file,
        "prometheus_timeout_s": args.prometheus_timeout,
    }
    flags.update({name: value for name, value in cluster.items() if value is not None})
    headers = [*(args.prometheus_header or ()), *getattr(args, "prometheus_header_after", ())]
    if headers:
        flags["prometheus_headers"] = tuple(headers)
    for option, attribute in _SETTING_OPTIONS.items():
        value = getattr(args, option, None)
        if value is not None:
            flags[attribute] = value
    if getattr(args, "only", None):
        flags["only_gpus"] = args.only
    if getattr(args, "only_visible", False):
        flags["only_visible"] = True
    return flags


def add_sharing_arguments(parser: argparse.ArgumentParser, *, top_level: bool) -> None:
    """What FREE, idle and claimed mean here (config keys of the same names), before or
    after a subcommand."""
    default = None if top_level else argparse.SUPPRESS
    group = parser.add_argument_group("sharing (config: the same names)")
    group.add_argument(
        "--free-threshold",
        type=_whole(0, 1024 * 1024),
        metavar="MIB",
        default=default,
        help="a GPU with no process and less than this much memory in use is FREE "
        "(default: 1024; free_threshold_mib)",
    )
    group.add_argument(
        "--claims-dir",
        metavar="DIR",
        default=default,
        help="the shared directory of pick's claims (default: /dev/shm/gpumon-claims)",
    )
    group.add_argument(
        "--claim-seconds",
        type=_whole(1, 600),
        metavar="SECONDS",
        default=default,
        help="how long pick's claim on a GPU it printed lasts (default: 120, at most 600)",
    )
    group.add_argument(
        "--idle-after",
        type=_minutes,
        metavar="MINUTES",
        default=default,
        help="a process is idle after this long at low utilisation (default: 15; 0.1 is 6 s)",
    )
    group.add_argument(
        "--idle-below",
        type=_whole(0, 100),
        metavar="PCT",
        default=default,
        help="low utilisation: its SM utilisation at or below this (default: 5)",
    )
    group.add_argument(
        "--db",
        metavar="PATH",
        default=default,
        help="the history database (default: /var/lib/gpumon/history.db for root, else "
        "$XDG_STATE_HOME/gpumon/history.db, where readers use /var/lib/gpumon/history.db "
        "instead while that one is missing; history_db)",
    )
    group.add_argument(
        "--history-days",
        type=_whole(1, 3650),
        metavar="DAYS",
        default=default,
        help="keep per-minute history this long (default: 90; hourly rows: a year)",
    )
    group.add_argument(
        "--idle-min-memory",
        type=_whole(0, 1024 * 1024),
        metavar="MIB",
        default=default,
        help="only a process holding at least this much GPU memory can be idle (default: 1024)",
    )


def add_filter_arguments(
    parser: argparse.ArgumentParser, *, top_level: bool, users: bool = True
) -> None:
    """What the dashboard and ``once`` show at start (nvitop's --only and --only-visible);
    without ``users``, the GPU filters only (``pick``: a process filter would make a busy GPU
    look free)."""
    default = (lambda value: value) if top_level else (lambda value: argparse.SUPPRESS)
    group = parser.add_argument_group("start-up filters")
    group.add_argument(
        "--only",
        type=gpu_list,
        metavar="GPUS",
        default=default(None),
        help="only these GPUs: NVML indices, GPU-... or MIG-... UUIDs, comma-separated (e.g. 0,3)",
    )
    group.add_argument(
        "--only-visible",
        action="store_true",
        default=default(False),
        help="only the GPUs CUDA_VISIBLE_DEVICES names (indices or UUIDs), as CUDA would see them",
    )
    if not users:
        return
    group.add_argument(
        "--user",
        type=user_name,
        metavar="NAME",
        default=default(None),
        help="only this user's processes",
    )


def gpu_list(text: str) -> tuple[str, ...]:
    """``--only``'s value: ``0,3`` or UUIDs, each checked, duplicates dropped."""
    items = [item.strip() for item in text.split(",")]
    if not items or any(not _GPU_ID.fullmatch(item) for item in items):
        raise argparse.ArgumentTypeError(
            f"expected NVML indices, GPU-... or MIG-... UUIDs, comma-separated (got {text!r})"
        )
    return tuple(dict.fromkeys(items))


def user_name(text: str) -> str:
    if not _USER_NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(f"not a user name: {text!r}")
    return text


def _whole(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = whole_number(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from {low} to {high} (got {value})")
        return value

    return parse


def _minutes(text: str) -> float:
    value = decimal_number(text, "a number of minutes such as 15 or 0.5")
    if not 0.01 <= value <= 10080:
        raise argparse.ArgumentTypeError(f"must be from 0.01 to 10080 minutes (got {text})")
    return value
