"""One :class:`Settings` object: defaults ← system config files ← the user's config file ←
environment ← command line.

``cli.py`` builds it (:func:`load_settings`) and hands it down; nothing below ``cli.py`` sees an
argparse namespace. No Textual, no psutil, no pynvml here: ``gpumon status`` builds settings on
every call, and reads the config file (with ``tomllib``) only when there is one.

Where the config file is and how it is read: :mod:`gpumon.config_file`. A bad file is one
line naming the file, the key and what was expected (:class:`SettingsError`, exit 2): gpumon
never starts with half a config.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpumon import setting_checks as checks
from gpumon.config_file import (
    SettingsError,
    default_config_path,
    read_config,
    system_config_paths,
    toml_value,
)
from gpumon.data.format import HOT_MARGIN_C, WARM_MARGIN_C
from gpumon.data.model import MAX_INTERVAL_S, MIN_INTERVAL_S


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything the user can set, with where each value came from.

    Attributes:
        interval_s: seconds between samples.
        theme: the dashboard's Textual theme.
        probe_python: the interpreter the torch probe runs in (``None``: gpumon's own).
        temperature_hot_margin_c: a temperature within this of the GPU's slowdown threshold
            is shown red ("hot"), in every mode.
        temperature_warm_margin_c: within this, yellow ("warm").
        load_warn_pct: utilisation and memory bars turn yellow from this percentage.
        load_hot_pct: and red from this one.
        history_minutes: how far back the history (sparklines, graphs) reaches.
        free_threshold_mib: a GPU with no process and less memory in use than this is FREE
            (never one whose process list is unknown).
        readonly: no signals to processes: the dashboard's T, K and I are gone.
        claim_seconds: how long ``gpumon pick``'s advisory claim on a GPU it printed lasts
            (time for the job to start on it).
        claims_dir: the shared directory of claims, one file per GPU UUID.
        idle_min_memory_mib, idle_below_pct, idle_after_minutes: a process holding at least
            this much GPU memory whose SM utilisation stayed at or below this percentage for
            at least this long is idle (held idle).
        history_db: the history database ``gpumon record`` writes and every other mode reads
            (``None``: the default, :func:`gpumon.config_file.default_history_path`).
        history_days: how long per-minute rows are kept (hourly ones: a year).
        demo, demo_gpus, demo_processes: the simulated server (command line only).
        only_gpus: NVML indices (``0``), GPU UUIDs or MIG UUIDs to show, ``()`` for all
            (``--only``; command line only).
        only_visible: show only the GPUs ``CUDA_VISIBLE_DEVICES`` names (command line only).
        user_filter: show only this user's processes at start (``--user``; command line
            only).
        prometheus_url: the Prometheus server (or Thanos, VictoriaMetrics, Mimir) to read a
            cluster from; http:// or https://, never with credentials in it.
        prometheus_headers: extra HTTP headers, each ``"Name: value"`` (a bearer token).
        prometheus_user, prometheus_password: HTTP basic auth, both or neither.
        prometheus_ca_file: a PEM file of CA certificates to verify the server's (HTTPS).
        prometheus_timeout_s: seconds one request to the server may take.
        config_path: the user's config file (or ``--config``'s) that was read, or ``None``.
        system_config_paths: the system-wide files that were read ($XDG_CONFIG_DIRS), the
            most important first.
        origins: setting name -> where its value came from ("default", the config file's
            path, ``GPUMON_...`` or ``--flag``).
    """

    interval_s: float = 1.0
    theme: str = "textual-dark"
    probe_python: str | None = None
    temperature_hot_margin_c: int = HOT_MARGIN_C
    temperature_warm_margin_c: int = WARM_MARGIN_C
    load_warn_pct: int = 50
    load_hot_pct: int = 80
    history_minutes: int = 10
    free_threshold_mib: int = 1024
    readonly: bool = False
    claim_seconds: int = 120
    claims_dir: str = "/dev/shm/gpumon-claims"
    idle_min_memory_mib: int = 1024
    idle_below_pct: int = 5
    idle_after_minutes: float = 15.0
    history_db: str | None = None
    history_days: int = 90
    demo: bool = False
    demo_gpus: int = 4
    demo_processes: int | None = None
    only_gpus: tuple[str, ...] = ()
    only_visible: bool = False
    user_filter: str | None = None
    prometheus_url: str | None = None
    # Secrets: never in repr() (a traceback, a log line), never in --print-config or errors.
    prometheus_headers: tuple[str, ...] = field(default=(), repr=False)
    prometheus_user: str | None = None
    prometheus_password: str | None = field(default=None, repr=False)
    prometheus_ca_file: str | None = None
    prometheus_timeout_s: float = 5.0
    config_path: str | None = None
    system_config_paths: tuple[str, ...] = ()
    origins: Mapping[str, str] = field(default_factory=dict, compare=False)


@dataclass(frozen=True, slots=True)
class _Key:
    """A setting the config file and the environment may give."""

    attribute: str
    check: Callable[[Any], Any]
    env: str | None = None
    flag: str | None = None
    #: Turns an environment variable's text into the config file's type.
    from_text: Callable[[str], Any] = str


def _decimal_text(text: str) -> Any:
    from argparse import ArgumentTypeError

    from gpumon.arguments import decimal_number

    try:
        return decimal_number(text)
    except ArgumentTypeError:
        return text  # the check then says what was expected


def _whole_text(text: str) -> Any:
    """An environment variable's whole number, or the text (the check says what was due)."""
    stripped = text.strip()
    return int(stripped) if stripped.isascii() and stripped.isdigit() else text


#: Config-file key -> how to check it. The order is --print-config's.
KEYS: dict[str, _Key] = {
    "interval": _Key(
        "interval_s",
        checks.Number(float, MIN_INTERVAL_S, MAX_INTERVAL_S, "seconds from 0.25 to 60"),
        "GPUMON_INTERVAL",
        "--interval",
        _decimal_text,
    ),
    "theme": _Key("theme", checks.theme, "GPUMON_THEME", "--theme"),
    "probe_python": _Key(
        "probe_python", checks.interpreter, "GPUMON_PROBE_PYTHON", "--probe-python"
    ),
    "temperature_hot_margin_c": _Key(
        "temperature_hot_margin_c", checks.Number(int, 0, 50, "degrees from 0 to 50")
    ),
    "temperature_warm_margin_c": _Key(
        "temperature_warm_margin_c", checks.Number(int, 0, 80, "degrees from 0 to 80")
    ),
    "load_warn_pct": _Key(
        "load_warn_pct", checks.Number(int, 1, 100, "a percentage from 1 to 100")
    ),
    "load_hot_pct": _Key("load_hot_pct", checks.Number(int, 1, 100, "a percentage from 1 to 100")),
    # At most 2,400 points per reading are kept: 40 minutes at 1 s, 10 at 0.25 s.
    "history_minutes": _Key(
        "history_minutes", checks.Number(int, 1, 40, "whole minutes from 1 to 40")
    ),
    "free_threshold_mib": _Key(
        "free_threshold_mib",
        checks.Number(int, 0, 1024 * 1024, "whole MiB from 0 to 1048576"),
        "GPUMON_FREE_THRESHOLD_MIB",
        "--free-threshold",
        _whole_text,
    ),
    "readonly": _Key("readonly", checks.boolean, flag="--readonly"),
    "claim_seconds": _Key(
        "claim_seconds",
        checks.Number(int, 1, 600, "whole seconds from 1 to 600"),
        "GPUMON_CLAIM_SECONDS",
        "--claim-seconds",
        _whole_text,
    ),
    "claims_dir": _Key("claims_dir", checks.directory, "GPUMON_CLAIMS_DIR", "--claims-dir"),
    "idle_min_memory_mib": _Key(
        "idle_min_memory_mib",
        checks.Number(int, 0, 1024 * 1024, "whole MiB from 0 to 1048576"),
        "GPUMON_IDLE_MIN_MEMORY_MIB",
        "--idle-min-memory",
        _whole_text,
    ),
    "idle_below_pct": _Key(
        "idle_below_pct",
        checks.Number(int, 0, 100, "a whole percentage from 0 to 100"),
        "GPUMON_IDLE_BELOW_PCT",
        "--idle-below",
        _whole_text,
    ),
    "history_db": _Key("history_db", checks.directory_or_file, "GPUMON_HISTORY_DB", "--db"),
    "history_days": _Key(
        "history_days",
        checks.Number(int, 1, 3650, "whole days from 1 to 3650"),
        "GPUMON_HISTORY_DAYS",
        "--history-days",
        _whole_text,
    ),
    "idle_after_minutes": _Key(
        "idle_after_minutes",
        checks.Number(float, 0.01, 10080, "minutes from 0.01 to 10080 (0.1 is 6 s)"),
        "GPUMON_IDLE_AFTER_MINUTES",
        "--idle-after",
        _decimal_text,
    ),
    "prometheus_url": _Key("prometheus_url", checks.url, "GPUMON_PROMETHEUS_URL", "--prometheus"),
    "prometheus_headers": _Key("prometheus_headers", checks.headers, flag="--prometheus-header"),
    "prometheus_user": _Key("prometheus_user", checks.user, "GPUMON_PROMETHEUS_USER"),
    "prometheus_password": _Key(
        "prometheus_password", checks.password, "GPUMON_PROMETHEUS_PASSWORD"
    ),
    "prometheus_ca_file": _Key(
        "prometheus_ca_file",
        checks.readable_file,
        "GPUMON_PROMETHEUS_CA_FILE",
        "--prometheus-ca-file",
    ),
    "prometheus_timeout_s": _Key(
        "prometheus_timeout_s",
        checks.Number(float, 0.5, 120, "seconds from 0.5 to 120"),
        "GPUMON_PROMETHEUS_TIMEOUT",
        "--prometheus-timeout",
        _decimal_text,
    ),
}

#: The subcommands that read a cluster (``--prometheus`` and its access options).
CLUSTER_COMMANDS = frozenset({"once", "pick", "report"})
_DEMO_COMMANDS = frozenset({"once", "status", "export", "probe", "pick", "record"})

#: Setting -> the subcommands whose option it is (``gpumon`` without one, the dashboard,
#: takes them all). A subcommand's parser, ``--help``, man page section and completions
#: offer only these; another is a usage error there. The config file and the environment
#: apply to every command: a setting a command does not read is ignored there.
TAKEN_BY: dict[str, frozenset[str]] = {
    "demo": _DEMO_COMMANDS,
    "demo_gpus": _DEMO_COMMANDS,
    "demo_processes": _DEMO_COMMANDS,
    "prometheus_url": CLUSTER_COMMANDS,
    "prometheus_headers": CLUSTER_COMMANDS,
    "prometheus_ca_file": CLUSTER_COMMANDS,
    "prometheus_timeout_s": CLUSTER_COMMANDS,
    "free_threshold_mib": frozenset({"once", "status", "export", "pick"}),
    "claims_dir": frozenset({"pick"}),
    "claim_seconds": frozenset({"pick"}),
    # once shows how long a process has been idle from the history (export and record judge).
    "idle_after_minutes": frozenset({"export", "record"}),
    "idle_below_pct": frozenset({"once", "export", "record"}),
    "idle_min_memory_mib": frozenset({"export", "record", "report"}),
    "history_db": frozenset({"once", "export", "record", "report"}),
    "history_days": frozenset({"export", "record"}),
    "only_gpus": frozenset({"once", "pick"}),
    "only_visible": frozenset({"once", "pick"}),
    "user_filter": frozenset({"once"}),
}


def takes(command: str | None, attribute: str) -> bool:
    """Whether ``command`` (``None``: the dashboard) has the option of setting ``attribute``."""
    return command is None or command in TAKEN_BY[attribute]


#: Never printed: --print-config shows ``(set)``, errors never quote them.
SECRET_KEYS = frozenset({"prometheus_password", "prometheus_headers"})


def load_settings(
    flags: Mapping[str, Any],
    environ: Mapping[str, str] = os.environ,
    config: str | None = None,
) -> Settings:
    """Defaults, then the system-wide files (:func:`system_config_paths`: the first
    directory of ``$XDG_CONFIG_DIRS`` wins over the later ones), then the user's file (or
    ``config``), then ``GPUMON_*`` variables, then ``flags``.

    Args:
        flags: setting attribute -> value, for the options given on the command line only
            (parsed by argparse; checked here, as the file's and the environment's are).
        environ: the environment.
        config: ``--config PATH``, read in place of the user's file (the system-wide files
            still lie under it); ``None`` reads the user's file if it exists.

    Raises:
        SettingsError: a bad file, key or value; its text names which.
    """
    path = config if config is not None else default_config_path(environ)
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    system_read: list[str] = []
    # The least important first: each file overrides the ones before it.
    for system_path in reversed(system_config_paths(environ)):
        if system_path != path and _apply_file(system_path, False, values, origins):
            system_read.insert(0, system_path)
    table = _apply_file(path, config is not None, values, origins)
    for key, spec in KEYS.items():
        text = environ.get(spec.env) if spec.env else None
        if text is None or text == "":
            continue
        try:
            values[spec.attribute] = spec.check(spec.from_text(text))
        except SettingsError as error:
            raise SettingsError(f"{spec.env}: {error}") from None
        origins[spec.attribute] = spec.env or key
    for attribute, value in flags.items():
        flag_spec = next((spec for spec in KEYS.values() if spec.attribute == attribute), None)
        if flag_spec is not None:
            try:
                value = flag_spec.check(value)
            except SettingsError as error:
                raise SettingsError(f"{_flag_of(attribute)}: {error}") from None
            origins[attribute] = _flag_of(attribute)
        values[attribute] = value
    settings = Settings(
        **values,
        config_path=path if table else None,
        system_config_paths=tuple(system_read),
        origins=origins,
    )
    _check_together(settings)
    return settings


def _apply_file(
    path: str, required: bool, values: dict[str, Any], origins: dict[str, str]
) -> dict[str, Any]:
    """Check the config file at ``path`` and put its values into ``values`` (and ``path``
    into ``origins``); its table, ``{}`` when there is no file."""
    table = read_config(path, required=required)
    for key, value in table.items():
        spec = KEYS.get(key)
        if spec is None:
            known = ", ".join(KEYS)
            raise SettingsError(f"{path}: unknown key {checks.shown(key)} (known: {known})")
        try:
            values[spec.attribute] = spec.check(value)
        except SettingsError as error:
            raise SettingsError(f"{path}: {key}: {error}") from None
        origins[spec.attribute] = path
    return table


def _flag_of(attribute: str) -> str:
    for spec in KEYS.values():
        if spec.attribute == attribute and spec.flag:
            return spec.flag
    return "--" + attribute.replace("_", "-")


def _check_together(settings: Settings) -> None:
    if settings.load_warn_pct > settings.load_hot_pct:
        raise SettingsError(
            f"{_origin(settings, 'load_warn_pct')}: load_warn_pct ({settings.load_warn_pct}) "
            f"must not be above load_hot_pct ({settings.load_hot_pct})"
        )
    if settings.temperature_hot_margin_c > settings.temperature_warm_margin_c:
        raise SettingsError(
            f"{_origin(settings, 'temperature_hot_margin_c')}: temperature_hot_margin_c "
            f"({settings.temperature_hot_margin_c}) must not be above "
            f"temperature_warm_margin_c ({settings.temperature_warm_margin_c})"
        )
    has_user = settings.prometheus_user is not None
    if has_user != (settings.prometheus_password is not None):
        given, missing = (
            ("prometheus_user", "prometheus_password")
            if has_user
            else ("prometheus_password", "prometheus_user")
        )
        raise SettingsError(
            f"{_origin(settings, given)}: {given} is set but {missing} is not: "
            "basic auth needs both"
        )
    names = [header.partition(":")[0].lower() for header in settings.prometheus_headers]
    if has_user and "authorization" in names:
        raise SettingsError(
            f"{_origin(settings, 'prometheus_headers')}: an Authorization header and "
            "prometheus_user are both set: use one"
        )


def _origin(settings: Settings, attribute: str) -> str:
    return settings.origins.get(attribute, "default")


def describe(settings: Settings) -> str:
    """``--print-config``: the effective settings as TOML, each with where it came from."""
    system = ", ".join(settings.system_config_paths) or "none"
    lines = [
        f"# gpumon settings (config file: {settings.config_path or 'none'}; system-wide: {system})"
    ]
    for key, spec in KEYS.items():
        value = getattr(settings, spec.attribute)
        origin = settings.origins.get(spec.attribute, "default")
        if value is None:
            lines.append(f"# {key} = (not set)  # {origin}")
            continue
        if key in SECRET_KEYS and value:
            # Commented out: pasted into a config file, "(set)" must not become a password.
            lines.append(f"# {key} = {_redacted(value)}  # {origin}")
            continue
        lines.append(f"{key} = {toml_value(value)}  # {origin}")
    return "\n".join(lines)


def _redacted(value: Any) -> str:
    """A secret as --print-config shows it: ``(set)``; headers by name only."""
    if isinstance(value, tuple):
        names = ", ".join(toml_value(header.partition(":")[0] + ": (set)") for header in value)
        return f"[{names}]"
    return "(set)"
