"""The settings' command-line options, made from :data:`~gpumon.config.settings.SETTINGS`.

The top level takes every setting's flag; a subcommand only those of the settings it reads
(:attr:`Setting.commands`). argparse only collects the text: each value is checked in
:func:`~gpumon.config.load.load_settings`, as a file's or a variable's is.
"""

from __future__ import annotations

import argparse
import os

from gpumon.config.settings import BY_ATTRIBUTE, SETTINGS, Setting

#: The settings that have a flag.
FLAGGED = tuple(spec for spec in SETTINGS if spec.flag)


def _dest(spec: Setting, after: bool = False) -> str:
    """Where argparse puts the flag's value (a repeatable one after the subcommand: a list of
    its own, as argparse would replace the top level's)."""
    name = (spec.flag or "").lstrip("-").replace("-", "_")
    return f"{name}_after" if after and spec.repeatable else name


def add_setting_arguments(parser: argparse.ArgumentParser, command: str | None) -> None:
    """The flags of the settings ``command`` takes (``None``: the top level, all of them). In
    a subcommand, SUPPRESS keeps an option not given there from hiding the top level's."""
    group = parser.add_argument_group("settings")
    for spec in FLAGGED:
        if command is not None and (spec.commands is None or command not in spec.commands):
            continue
        if spec.metavar is None:
            kind: dict[str, object] = {"action": "store_true"}
        else:
            kind = {"action": "append" if spec.repeatable else "store", "metavar": spec.metavar}
        text = spec.command_help.get(command or "", spec.described())
        group.add_argument(
            spec.flag or "",
            dest=_dest(spec, after=command is not None),
            default=None if command is None else argparse.SUPPRESS,
            help=text.replace("%", "%%"),  # argparse %-formats help
            **kind,  # type: ignore[arg-type]
        )


def settings_flags(args: argparse.Namespace) -> dict[str, object]:
    """The settings given on the command line: attribute -> the text given (a list for a
    repeatable flag, True for a switch)."""
    flags: dict[str, object] = {}
    for spec in FLAGGED:
        value = getattr(args, _dest(spec), None)
        if spec.repeatable:
            value = [*(value or ()), *getattr(args, _dest(spec, after=True), ())] or None
        if value is None:
            continue
        if spec.attribute == "probe_python":
            value = _typed_here(str(value))
        flags[spec.attribute] = value
    return flags


def _typed_here(path: str) -> str:
    """A path from the command line made absolute against the directory it was typed in; a
    bare command name stays one."""
    expanded = os.path.expanduser(path)
    return os.path.abspath(expanded) if os.sep in expanded else path


def not_taken(command: str | None, flags: dict[str, object]) -> str | None:
    """Why a setting's flag given before ``command`` is refused (it does not use it), or None."""
    for attribute in flags:
        spec = BY_ATTRIBUTE[attribute]
        if not spec.takes(command):
            return f"{spec.flag}: gpumon {command} does not use it (see `gpumon {command} --help`)"
    return None


#: Names in the parsed namespace that are not a subcommand's own options.
SHARED = frozenset(
    {"command", "config", "print_config"}
    | {_dest(spec, after) for spec in FLAGGED for after in (False, True)}
)

#: Top-level options that take a value: a subcommand's name after one of them is its value.
TOP_LEVEL_VALUE_OPTIONS = frozenset(
    {"--config", "--print-completion"} | {spec.flag or "" for spec in FLAGGED if spec.metavar}
)
