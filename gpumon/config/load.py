"""Building :class:`Settings`: defaults ← system config files ← the user's config file ←
``GPUMON_*`` variables ← flags, each value checked once by its setting's check; and the
settings written back as TOML (``--print-config``, the README's sample). A bad value is one
:class:`SettingsError` line naming where it came from: gpumon never starts with half a config.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from gpumon.config.checks import SettingsError, shown
from gpumon.config.files import default_config_path, read_config, system_config_paths, toml_value
from gpumon.config.settings import BY_ATTRIBUTE, BY_KEY, SETTINGS, Setting, Settings


def load_settings(
    flags: Mapping[str, Any],
    environ: Mapping[str, str] = os.environ,
    config: str | None = None,
) -> Settings:
    """The settings from every layer.

    Args:
        flags: setting attribute -> the value given on the command line, for those given.
        environ: the environment.
        config: the file ``--config`` names, read in place of the user's file.

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
    for spec in SETTINGS:
        text = environ.get(spec.env) if spec.env else None
        if text:
            _apply(spec, partial(spec.value_of, text), spec.env or "", values, origins)
    for attribute, value in flags.items():
        spec = BY_ATTRIBUTE[attribute]
        _apply(spec, partial(spec.value_of, value), spec.flag or attribute, values, origins)
    settings = Settings(
        **values,
        config_path=path if table else None,
        system_config_paths=tuple(system_read),
        origins=origins,
    )
    _check_together(settings)
    return settings


def _apply(
    spec: Setting,
    check: Callable[[], Any],
    origin: str,
    values: dict[str, Any],
    origins: dict[str, str],
    where: str = "",
) -> None:
    """Keep what ``check`` returns, from ``origin``; its error names ``where or origin``."""
    try:
        values[spec.attribute] = check()
    except SettingsError as error:
        raise SettingsError(f"{where or origin}: {error}") from None
    origins[spec.attribute] = origin


def _apply_file(
    path: str, required: bool, values: dict[str, Any], origins: dict[str, str]
) -> dict[str, Any]:
    """Check the config file at ``path`` and keep its values; its table (``{}``: no file)."""
    table = read_config(path, required=required)
    for key, value in table.items():
        spec = BY_KEY.get(key)
        if spec is None:
            known = ", ".join(BY_KEY)
            raise SettingsError(f"{path}: unknown key {shown(key)} (known: {known})")
        # A TOML value is typed: the string "2" is no interval.
        _apply(spec, partial(spec.check, value), path, values, origins, f"{path}: {key}")
    return table


#: Pairs of settings whose first must not be above its second.
_ORDERED = (
    ("load_warn_pct", "load_hot_pct"),
    ("temperature_hot_margin_c", "temperature_warm_margin_c"),
)


def _check_together(settings: Settings) -> None:
    for low, high in _ORDERED:
        low_value, high_value = getattr(settings, low), getattr(settings, high)
        if low_value > high_value:
            raise SettingsError(
                f"{_origin(settings, low)}: {low} ({low_value}) must not be above {high} "
                f"({high_value})"
            )
    has_user = settings.prometheus_user is not None
    if has_user != (settings.prometheus_password is not None):
        given, missing = "prometheus_user", "prometheus_password"
        if not has_user:
            given, missing = missing, given
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
    for key, spec in BY_KEY.items():
        value = getattr(settings, spec.attribute)
        origin = settings.origins.get(spec.attribute, "default")
        lines.append(_toml_line(key, spec, value, origin))
    return "\n".join(lines)


def sample_config() -> str:
    """The README's sample config file: every key at its default, under its help."""
    import textwrap

    lines = []
    for key, spec in BY_KEY.items():
        lines += textwrap.wrap(
            spec.described(flag=True), 92, initial_indent="# ", subsequent_indent="#   "
        )
        lines.append(_toml_line(key, spec, spec.default))
    return "\n".join(lines) + "\n"


def _toml_line(key: str, spec: Setting, value: Any, origin: str = "") -> str:
    comment = f"  # {origin}" if origin else ""
    if value is None:
        return f"# {key} = (not set){comment}"
    if spec.secret and value:
        # Commented out: pasted into a config file, "(set)" must not become a password.
        return f"# {key} = {_redacted(value)}{comment}"
    return f"{key} = {toml_value(value)}{comment}"


def _redacted(value: Any) -> str:
    """A secret as --print-config shows it: ``(set)``; headers by name only."""
    if isinstance(value, tuple):
        names = ", ".join(toml_value(header.partition(":")[0] + ": (set)") for header in value)
        return f"[{names}]"
    return "(set)"
