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
from dataclasses import fields

from gpumon.arguments import whole_number
from gpumon.setting_checks import Number
from gpumon.settings import KEYS, TAKEN_BY, Settings, takes

# NVML supports at most 64 GPUs per host; a demo of more would simulate no real server.
MAX_DEMO_GPUS = 64
MAX_DEMO_PROCESSES = 4096

# Options every mode shares: they go into Settings; the rest are the subcommand's own (the
# sharing options' are their Settings attributes, see _SHARING).
_SHARED_OTHERS = frozenset(
    {"command", "interval", "probe_python", "theme", "config", "print_config", "readonly"}
    | {"demo", "demo_gpus", "demo_processes"}
    | {"prometheus", "prometheus_header", "prometheus_header_after"}
    | {"prometheus_ca_file", "prometheus_timeout"}
    | {"only", "only_visible", "user"}
)

#: ``--only``: an NVML index, a GPU UUID or a MIG UUID (or a unique prefix of one).
_GPU_ID = re.compile(r"[0-9]{1,2}|(?:GPU|MIG)-[0-9A-Fa-f][0-9A-Fa-f-]{0,63}", re.ASCII)
#: ``--user``: a user name as useradd and LDAP allow it.
_USER_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@-]{0,63}\$?", re.ASCII)


def _default(command: str | None, value: object) -> object:
    """The top level's default; in a subcommand, SUPPRESS keeps an unset option from
    overwriting the top-level value."""
    return value if command is None else argparse.SUPPRESS


def bounded_int(highest: int) -> Callable[[str], int]:
    """An argparse type: a whole number from 1 to ``highest``."""

    def parse(text: str) -> int:
        value = whole_number(text)
        if not 1 <= value <= highest:
            raise argparse.ArgumentTypeError(f"must be from 1 to {highest} (got {value})")
        return value

    return parse


def add_source_arguments(parser: argparse.ArgumentParser, command: str | None) -> None:
    """--demo and friends, accepted before or after a subcommand that samples this machine."""
    if not takes(command, "demo"):
        return
    parser.add_argument(
        "--demo",
        action="store_true",
        default=_default(command, False),
        help="use a simulated GPU server (always labelled DEMO)",
    )
    parser.add_argument(
        "--demo-gpus",
        type=bounded_int(MAX_DEMO_GPUS),
        metavar="N",
        default=_default(command, 4),
        help="number of simulated GPUs with --demo (default: 4)",
    )
    parser.add_argument(
        "--demo-processes",
        type=bounded_int(MAX_DEMO_PROCESSES),
        metavar="N",
        default=_default(command, None),
        help="number of simulated GPU processes with --demo (default: 1.5 per GPU)",
    )


def add_prometheus_arguments(parser: argparse.ArgumentParser, command: str | None) -> None:
    """--prometheus and its access options, accepted before or after a cluster command."""
    if not takes(command, "prometheus_url"):
        return
    top_level = command is None
    parser.add_argument(
        "--prometheus",
        metavar="URL",
        default=_default(command, None),
        help="read a whole cluster from this Prometheus server (or Thanos, VictoriaMetrics, "
        "Mimir): http:// or https://, no credentials in it (config: prometheus_url)",
    )
    # A subcommand's headers go to their own list: argparse would replace the top level's.
    parser.add_argument(
        "--prometheus-header",
        dest="prometheus_header" if top_level else "prometheus_header_after",
        action="append",
        metavar="'NAME: VALUE'",
        default=_default(command, None),
        help="an HTTP header for the Prometheus server, e.g. 'Authorization: Bearer TOKEN' "
        "(repeatable; never printed; other users can read a command line: the config "
        "file's prometheus_headers is safer)",
    )
    parser.add_argument(
        "--prometheus-ca-file",
        metavar="PATH",
        default=_default(command, None),
        help="verify the Prometheus server's HTTPS certificate with the CA certificates "
        "in this PEM file (default: the system's)",
    )
    parser.add_argument(
        "--prometheus-timeout",
        type=KEYS["prometheus_timeout_s"].from_text,
        metavar="SECONDS",
        default=_default(command, None),
        help="give up on a request to the Prometheus server after this long (default: 5)",
    )


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
    for key, _, _ in _SHARING:
        attribute = KEYS[key].attribute
        if getattr(args, attribute, None) is not None:
            flags[attribute] = getattr(args, attribute)
    if getattr(args, "user", None) is not None:
        flags["user_filter"] = args.user
    if getattr(args, "only", None):
        flags["only_gpus"] = args.only
    if getattr(args, "only_visible", False):
        flags["only_visible"] = True
    return flags


#: The flags of the settings that have no config key.
_COMMAND_LINE_FLAGS = {
    "only_gpus": "--only",
    "only_visible": "--only-visible",
    "user_filter": "--user",
}


def not_taken(command: str | None, flags: dict[str, object]) -> str | None:
    """Why a shared option given before ``command`` is refused (it does not use it: after
    the subcommand, argparse would not know the option), or None. ``flags``:
    :func:`settings_flags`."""
    if command is None:
        return None
    defaults = Settings()
    flag_of = {spec.attribute: spec.flag for spec in KEYS.values() if spec.flag}
    for attribute, value in flags.items():
        if attribute not in TAKEN_BY or takes(command, attribute):
            continue
        if attribute in flag_of or value != getattr(defaults, attribute):
            flag = flag_of.get(attribute) or _COMMAND_LINE_FLAGS.get(attribute)
            flag = flag or "--" + attribute.replace("_", "-")
            return f"{flag}: gpumon {command} does not use it (see `gpumon {command} --help`)"
    return None


def add_sharing_arguments(parser: argparse.ArgumentParser, command: str | None) -> None:
    """What FREE, idle and claimed mean here (config keys of the same names), before or
    after a subcommand that reads them. The value is checked with the config file's check
    (:func:`gpumon.settings.load_settings`), once, whichever of the three gave it."""
    group = parser.add_argument_group("sharing (config: the same names)")
    for key, metavar, text in _SHARING:
        spec = KEYS[key]
        if takes(command, spec.attribute):
            group.add_argument(
                spec.flag or "",
                dest=spec.attribute,
                type=spec.from_text,
                metavar=metavar,
                default=_default(command, None),
                help=_sharing_help(key, text),
            )


def add_filter_arguments(parser: argparse.ArgumentParser, command: str | None) -> None:
    """What the dashboard, ``once`` and ``pick`` show at start (nvitop's --only and
    --only-visible; ``--user`` not for ``pick``: a process filter would make a busy GPU look
    free)."""
    group = parser.add_argument_group("start-up filters")
    if takes(command, "only_gpus"):
        group.add_argument(
            "--only",
            type=gpu_list,
            metavar="GPUS",
            default=_default(command, None),
            help="only these GPUs: NVML indices, GPU-... or MIG-... UUIDs, comma-separated "
            "(e.g. 0,3)",
        )
    if takes(command, "only_visible"):
        group.add_argument(
            "--only-visible",
            action="store_true",
            default=_default(command, False),
            help="only the GPUs CUDA_VISIBLE_DEVICES names (indices or UUIDs), as CUDA would "
            "see them",
        )
    if takes(command, "user_filter"):
        group.add_argument(
            "--user",
            type=user_name,
            metavar="NAME",
            default=_default(command, None),
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


#: The sharing options: config key (:data:`~gpumon.settings.KEYS` gives the flag, the
#: attribute, the text's conversion and the check, whose bounds --help shows), metavar, help.
_SHARING = (
    (
        "free_threshold_mib",
        "MIB",
        "a GPU with no process and less than this much memory in use is FREE",
    ),
    (
        "claims_dir",
        "DIR",
        "the shared directory of pick's claims (default: /dev/shm/gpumon-claims)",
    ),
    ("claim_seconds", "SECONDS", "how long pick's claim on a GPU it printed lasts"),
    ("idle_after_minutes", "MINUTES", "a process is idle after this long at low utilisation"),
    ("idle_below_pct", "PCT", "low utilisation: its SM utilisation at or below this"),
    (
        "history_db",
        "PATH",
        "the history database (default: /var/lib/gpumon/history.db for root, else "
        "$XDG_STATE_HOME/gpumon/history.db, where readers use /var/lib/gpumon/history.db "
        "instead while that one is missing)",
    ),
    ("history_days", "DAYS", "keep per-minute history this long (hourly rows: a year)"),
    (
        "idle_min_memory_mib",
        "MIB",
        "only a process holding at least this much GPU memory can be idle",
    ),
)


def _sharing_help(key: str, text: str) -> str:
    """``text``, and for a number its bounds and default, as the setting's check says them."""
    check = KEYS[key].check
    if not isinstance(check, Number):
        return text
    default = next(item.default for item in fields(Settings) if item.name == KEYS[key].attribute)
    return f"{text} ({check.what}; default: {default:g})"


#: The option groups the top level and each subcommand add, each only the options the
#: command takes (:data:`gpumon.settings.TAKEN_BY`).
SHARED_GROUPS: tuple[Callable[[argparse.ArgumentParser, str | None], None], ...] = (
    add_source_arguments,
    add_prometheus_arguments,
    add_sharing_arguments,
    add_filter_arguments,
)

SHARED = _SHARED_OTHERS | {KEYS[key].attribute for key, _, _ in _SHARING}

# Top-level options that take a value: a subcommand's name after one of them is its value.
TOP_LEVEL_VALUE_OPTIONS = frozenset(
    {"--interval", "--probe-python", "--demo-gpus", "--demo-processes", "--config", "--theme"}
    | {"--prometheus", "--prometheus-header", "--prometheus-ca-file", "--prometheus-timeout"}
    | {"--only", "--user", "--print-completion"}
    | {KEYS[key].flag or "" for key, _, _ in _SHARING}
)
